/* shm: the shared-memory transport between ranks of one host.
 *
 * The host's lowest rank (its leader) makes one anonymous segment
 * (memfd_create: it never has a name in /dev/shm, so nothing can be left
 * behind, whatever kills whom) holding a single-producer single-consumer
 * byte ring for every ordered pair of the host's ranks and stream. It
 * hands the segment over on the token-checked TCP connection (its pid
 * and descriptor number; a peer opens /proc/PID/fd/N, which the kernel
 * allows the same user), and the host uses it only when every local rank
 * has mapped it: else every pair of the host stays on TCP.
 *
 * A ring carries exactly the bytes the TCP stream would (headers,
 * stripes), so framing, matching and checks are the transport's own and
 * results are bit for bit those of TCP. Under COLLX_SHM_CMA=1 a large
 * payload (SHM_CMA_MIN bytes and more) is not copied into the ring: the
 * producer offers its address, and the consumer copies it from the
 * producer's memory straight into its own buffer (process_vm_readv, one
 * copy instead of two), as if it had come through the ring at that
 * point; the producer's send ends when the consumer has taken it. It is
 * not the default: on the development machine (a virtual machine, where
 * pinning pages is dear) it took twice the time of the two copies, which
 * the producer and the consumer make at once, for 1 MiB to 64 MiB
 * allreduces. A pair whose consumer cannot read the producer's memory
 * (another user, a ptrace policy) copies through the ring. The TCP connection stays open:
 * a rank that has run out of data or room sleeps in poll() on it, and
 * the peer that changes the ring writes one zero byte (a doorbell) when
 * it sees the sleeper's flag; a dead peer's connection closes, which
 * wakes the sleeper as on TCP, and an abort frame (non-zero first byte)
 * arrives on it too.
 *
 * A small message (header and at most SHM_BOX_MAX payload bytes) skips
 * the ring when it can: the producer writes it whole into the ring's fast
 * box, a few cache lines beside the ring, the header's magic last, and
 * the consumer, spinning on that word, takes it as the next bytes of the
 * stream (the same bytes the ring would have carried) and clears the
 * magic to free the box. One cache line crosses for an 8-byte message
 * where the ring moved four (its bytes, head, tail and base). The box
 * keeps the stream's order: the producer uses it only when the consumer
 * has read every byte the producer put in the ring (head == tail) and the
 * message is whole, so the box's message comes after all of them; the
 * consumer, having read head, looks at the box and takes a full box
 * before the ring bytes up to that head, which were all written after
 * it. */
#include "comm/comm_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#define SHM_MAGIC 0x4d485343u	/* "CSHM" */
#define SHM_HEAD ((size_t)4096)
/* In the head: each local rank's address of the segment, at its index. */
#define SHM_SLOTS 64
#define SHM_MAX_SLOTS ((SHM_HEAD - SHM_SLOTS) / sizeof(uint64_t))
/* Bytes of all rings of a host together at most, and per ring. */
#define SHM_BUDGET ((size_t)64 << 20)
#define SHM_RING_MAX ((size_t)1 << 20)
#define SHM_RING_MIN ((size_t)64 << 10)
/* The segment's pages are allocated (fallocate) and mapped (populate) at
 * the start: a first touch of each page in the middle of the job cost a
 * page fault per 4 KiB on both sides, 30 us instead of 2 for a 4 KiB
 * allreduce until the rings had gone round once. */
#define SHM_MAP (MAP_SHARED | MAP_POPULATE)
/* Payloads this large are read in place: below it the system call and
 * the page walk cost more than the second copy saves. */
#define SHM_CMA_MIN ((size_t)64 << 10)
/* The fast box: a header and SHM_BOX_MAX payload bytes (200), four cache
 * lines; an 8-byte message fills the first line alone. */
#define SHM_BOX ((size_t)256)
#define SHM_BOX_MAX (SHM_BOX - COMM_HDR_LEN)

/* The box's bytes are the message's: its first word is the header's
 * magic, which the producer stores last and the consumer clears. */
struct shm_box {
	_Atomic uint32_t magic;	/* 0: empty */
	unsigned char rest[SHM_BOX - sizeof(uint32_t)];
};

struct comm_ring {
	/* the producer's line */
	_Alignas(64) _Atomic uint64_t head;	/* bytes written */
	_Atomic uint64_t base;	/* byte head was when the ring last ran empty */
	_Atomic uint64_t cma_posted;	/* payloads offered in place */
	uint64_t cma_pos, cma_addr, cma_len;	/* the last one offered */
	/* the consumer's line */
	_Alignas(64) _Atomic uint64_t tail;	/* bytes read */
	_Atomic uint64_t cma_taken;	/* offered payloads read whole */
	_Alignas(64) _Atomic uint32_t rx_sleep;	/* consumer waits for data */
	_Atomic uint32_t tx_sleep;		/* producer waits for room */
	_Atomic int32_t cma_ok;	/* 1: the consumer reads the producer's memory */
	uint64_t size;
	_Alignas(64) struct shm_box box;
	char data[] __attribute__((aligned(64)));
};

/* The leader's word to a local rank, and the answers. */
struct shm_offer {
	uint32_t magic;
	int32_t err;		/* 0: segment ready, else errno */
	int32_t fd;		/* in the leader's process */
	uint32_t pad;
	uint64_t bytes;
};

static size_t
ring_bytes(int local, int nstreams)
{
	size_t pairs = (size_t)local * (size_t)(local - 1) * (size_t)nstreams;
	size_t b = SHM_RING_MAX;

	while (b > SHM_RING_MIN && b * pairs > SHM_BUDGET)
		b /= 2;
	return b;
}

static size_t
ring_stride(size_t bytes)
{
	return sizeof(struct comm_ring) + bytes;
}

/* Ring from local index i to local index j on stream s. */
static struct comm_ring *
ring_at(const struct comm_shm *m, int i, int j, int s)
{
	size_t k = ((size_t)i * (size_t)m->local + (size_t)j) *
	    (size_t)m->nstreams + (size_t)s;

	return (struct comm_ring *)(m->base + SHM_HEAD + k * ring_stride(m->ring));
}

/* One zero byte on the TCP connection wakes a peer asleep in poll(). */
static void
bell(int fd)
{
	static const char zero;

	while (send(fd, &zero, 1, MSG_DONTWAIT | MSG_NOSIGNAL) < 0 &&
	    errno == EINTR)
		;
}

/* Copy k bytes at ring position pos into or out of the ring. A ring
 * that ran empty starts again at its first byte (base): small messages
 * keep to a few cache lines that stay hot, where going round the whole
 * ring met cold memory (a 4 KiB allreduce took 10-30 us instead of 2
 * until the rings had gone round once). */
static void
ring_copy(struct comm_ring *r, uint64_t pos, char *p, size_t k, int out)
{
	uint64_t base = atomic_load_explicit(&r->base, memory_order_relaxed);
	size_t at = (size_t)((pos - base) & (r->size - 1));
	size_t first = k < r->size - at ? k : r->size - at;

	if (out) {
		memcpy(p, r->data + at, first);
		memcpy(p + first, r->data, k - first);
	} else {
		memcpy(r->data + at, p, first);
		memcpy(r->data, p + first, k - first);
	}
}

/* The producer: bytes into the ring as far as there is room, up to a
 * large payload, which it offers in place (*offered) and counts as sent
 * once the consumer has taken it. */
static ssize_t
ring_put(struct comm_stream *st, const struct iovec *iov, size_t n,
    int *offered)
{
	struct comm_ring *r = st->tx;
	uint64_t head = atomic_load_explicit(&r->head, memory_order_relaxed);
	uint64_t tail = atomic_load_explicit(&r->tail, memory_order_acquire);
	size_t room = (size_t)(r->size - (head - tail)), put = 0, taken = 0, k;
	size_t i = 0;

	/* Published with head, which the consumer reads first. */
	if (head == tail)
		atomic_store_explicit(&r->base, head, memory_order_relaxed);

	/* The offered payload is the first of what is still to go. */
	if (st->tx_cma) {
		if (atomic_load_explicit(&r->cma_taken, memory_order_acquire) <
		    st->tx_cma)
			return 0;
		st->tx_cma = 0;
		taken = (size_t)r->cma_len;
		i = 1;
	}
	for (; i < n && put < room; i++) {
		if (iov[i].iov_len >= SHM_CMA_MIN &&
		    atomic_load_explicit(&r->cma_ok, memory_order_relaxed) == 1) {
			r->cma_pos = head + put;
			r->cma_addr = (uint64_t)(uintptr_t)iov[i].iov_base;
			r->cma_len = iov[i].iov_len;
			st->tx_cma = atomic_load_explicit(&r->cma_posted,
			    memory_order_relaxed) + 1;
			*offered = 1;
			break;
		}
		k = iov[i].iov_len < room - put ? iov[i].iov_len : room - put;
		ring_copy(r, head + put, iov[i].iov_base, k, 0);
		put += k;
	}
	atomic_store_explicit(&r->head, head + put, memory_order_release);
	if (*offered)
		atomic_store_explicit(&r->cma_posted, st->tx_cma,
		    memory_order_release);
	return (ssize_t)(taken + put);
}

/* k bytes of the producer's offered payload, from its memory: bytes
 * read, or -1. */
static ssize_t
cma_read(struct comm_stream *st, char *p, size_t k)
{
	struct comm_ring *r = st->rx;
	struct iovec local = { p, k }, remote = {
		(void *)(uintptr_t)(r->cma_addr + st->rx_cma_done), k };
	ssize_t got;

	while ((got = process_vm_readv(st->pid, &local, 1, &remote, 1, 0)) < 0 &&
	    errno == EINTR)
		;
	if (got <= 0) {
		errno = got == 0 ? EIO : errno;
		return -1;
	}
	return got;
}

/* Bytes [at, at + k) of the message in the box, whose magic is m. */
static void
box_copy(const struct comm_ring *r, uint32_t m, size_t at, char *p, size_t k)
{
	for (; k > 0 && at < sizeof m; k--)
		*p++ = ((const char *)&m)[at++];
	memcpy(p, r->box.rest + at - sizeof m, k);
}

/* The consumer: what is left of the box's message (magic m) into the
 * iovecs' first bytes; the box freed once it is all read. */
static size_t
box_get(struct comm_stream *st, uint32_t m, const struct iovec *iov,
    size_t n)
{
	struct comm_ring *r = st->rx;
	uint64_t len;
	size_t total, moved = 0, k;

	memcpy(&len, r->box.rest + offsetof(struct comm_hdr, len) - sizeof m,
	    sizeof len);
	total = COMM_HDR_LEN + (len < SHM_BOX_MAX ? (size_t)len : SHM_BOX_MAX);
	for (size_t i = 0; i < n && st->rx_box_done < total; i++) {
		k = total - st->rx_box_done;
		if (k > iov[i].iov_len)
			k = iov[i].iov_len;
		box_copy(r, m, st->rx_box_done, iov[i].iov_base, k);
		st->rx_box_done += k;
		moved += k;
	}
	if (st->rx_box_done == total) {
		st->rx_box_done = 0;
		atomic_store_explicit(&r->box.magic, 0, memory_order_release);
	}
	return moved;
}

/* The consumer: the box's message first when it is full, then ring
 * bytes up to the head read before looking at the box, and an offered
 * payload where it stands; *boxed when all came from the box (which no
 * producer waits on: it takes the ring when the box is full). */
static ssize_t
ring_get(struct comm_stream *st, const struct iovec *iov, size_t n,
    int *boxed)
{
	struct comm_ring *r = st->rx;
	uint64_t posted = atomic_load_explicit(&r->cma_posted, memory_order_acquire);
	uint64_t done = atomic_load_explicit(&r->cma_taken, memory_order_relaxed);
	uint64_t tail = atomic_load_explicit(&r->tail, memory_order_relaxed);
	uint64_t head = atomic_load_explicit(&r->head, memory_order_acquire);
	uint32_t box = atomic_load_explicit(&r->box.magic,
	    memory_order_acquire);
	size_t moved = 0, skip = 0, off, k;
	ssize_t got;

	/* A waiting consumer's look writes nothing the producer reads. */
	if (head == tail && posted == done && box == 0)
		return 0;
	if (box != 0) {
		skip = moved = box_get(st, box, iov, n);
		*boxed = st->rx_box_done != 0 ||
		    (head == tail && posted == done);
		if (*boxed)
			return (ssize_t)moved;
	}
	for (size_t i = 0; i < n; i++) {
		if (skip >= iov[i].iov_len) {
			skip -= iov[i].iov_len;
			continue;
		}
		off = skip;
		skip = 0;
		for (; off < iov[i].iov_len; off += k, moved += k) {
			char *p = (char *)iov[i].iov_base + off;
			k = iov[i].iov_len - off;
			if (posted != done && tail == r->cma_pos) {
				if (k > r->cma_len - st->rx_cma_done)
					k = (size_t)(r->cma_len - st->rx_cma_done);
				if ((got = cma_read(st, p, k)) < 0)
					return -1;
				k = (size_t)got;
				if ((st->rx_cma_done += k) == r->cma_len) {
					st->rx_cma_done = 0;
					atomic_store_explicit(&r->cma_taken, ++done,
					    memory_order_release);
				}
				continue;
			}
			/* With a payload offered, head stands at its place. */
			if (k > head - tail)
				k = (size_t)(head - tail);
			if (k == 0)
				goto out;
			ring_copy(r, tail, p, k, 1);
			tail += k;
		}
	}
out:
	atomic_store_explicit(&r->tail, tail, memory_order_release);
	return (ssize_t)moved;
}

/* Pairs with comm_shm_arm: either the sleeper sees what we moved when it
 * looks again, or we see its flag here (after a full fence) and ring. */
static void
wake(struct comm_stream *st, _Atomic uint32_t *sleeper)
{
	atomic_thread_fence(memory_order_seq_cst);
	if (atomic_load_explicit(sleeper, memory_order_relaxed) &&
	    atomic_exchange(sleeper, 0))
		bell(st->fd);
}

int
comm_shm_box_put(struct comm_stream *st, const struct comm_hdr *h,
    const void *payload, size_t len)
{
	struct comm_ring *r = st->tx;
	uint64_t head = atomic_load_explicit(&r->head, memory_order_relaxed);

	if (len > SHM_BOX_MAX || st->tx_cma)
		return 0;
	/* The tail is the consumer's line: read only while the ring holds
	 * bytes not yet seen read. */
	if (head != st->tx_tail_seen) {
		st->tx_tail_seen = atomic_load_explicit(&r->tail,
		    memory_order_acquire);
		if (st->tx_tail_seen != head)
			return 0;
	}
	if (atomic_load_explicit(&r->box.magic, memory_order_acquire) != 0)
		return 0;
	memcpy(r->box.rest, (const char *)h + sizeof(uint32_t),
	    COMM_HDR_LEN - sizeof(uint32_t));
	if (len > 0)
		memcpy(r->box.rest + COMM_HDR_LEN - sizeof(uint32_t), payload,
		    len);
	atomic_store_explicit(&r->box.magic, h->magic, memory_order_release);
	wake(st, &r->rx_sleep);
	return 1;
}

ssize_t
comm_shm_io(struct comm_stream *st, const struct iovec *iov, size_t n,
    int is_recv)
{
	struct comm_ring *r = is_recv ? st->rx : st->tx;
	_Atomic uint32_t *sleeper = is_recv ? &r->tx_sleep : &r->rx_sleep;
	int offered = 0, boxed = 0;
	ssize_t moved = is_recv ? ring_get(st, iov, n, &boxed) :
	    ring_put(st, iov, n, &offered);

	if ((moved <= 0 && !offered) || boxed)
		return moved;
	wake(st, sleeper);
	return moved;
}

int
comm_shm_arm(struct comm_stream *st, int recv, int send)
{
	int ready = 0;

	if (recv) {
		atomic_store(&st->rx->rx_sleep, 1);
		atomic_thread_fence(memory_order_seq_cst);
		ready |= atomic_load(&st->rx->box.magic) != 0 ||
		    atomic_load(&st->rx->head) != atomic_load(&st->rx->tail) ||
		    atomic_load(&st->rx->cma_posted) != atomic_load(&st->rx->cma_taken);
	}
	if (send) {
		atomic_store(&st->tx->tx_sleep, 1);
		atomic_thread_fence(memory_order_seq_cst);
		ready |= st->tx_cma ? atomic_load(&st->tx->cma_taken) >= st->tx_cma :
		    atomic_load(&st->tx->head) - atomic_load(&st->tx->tail) <
		    st->tx->size;
	}
	return ready;
}

void
comm_shm_disarm(struct comm_stream *st)
{
	atomic_store_explicit(&st->rx->rx_sleep, 0, memory_order_relaxed);
	atomic_store_explicit(&st->tx->tx_sleep, 0, memory_order_relaxed);
}

/* The rest of an abort frame whose first byte was f[0]. */
static int
frame_finish(int fd, char *f, size_t have, double deadline)
{
	char err[COLLX_ERRLEN];

	return comm_sock_recv_all(fd, f + have, COMM_HDR_LEN - have, deadline,
	    err, sizeof err);
}

int
comm_shm_bells(struct comm *c, int peer, int s, int *closed)
{
	int fd = c->net->peers[peer].st[s].fd;
	char buf[256], frame[COMM_HDR_LEN];
	ssize_t n, i;

	*closed = 0;
	for (;;) {
		n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return 0;
		if (n <= 0) {
			*closed = n == 0 ? 0 : errno;
			return -1;
		}
		for (i = 0; i < n && buf[i] == 0; i++)
			;
		if (i == n)
			continue;
		/* Not a doorbell: the peer's abort frame, its last word. */
		memcpy(frame, buf + i, (size_t)(n - i) < sizeof frame ?
		    (size_t)(n - i) : sizeof frame);
		if ((size_t)(n - i) < sizeof frame && frame_finish(fd, frame,
		    (size_t)(n - i), cli_now() + 1) < 0) {
			*closed = EPROTO;
			return -1;
		}
		if (((struct comm_hdr *)frame)->magic != COMM_ABORT_MAGIC)
			((struct comm_hdr *)frame)->magic = 0;	/* garbled */
		comm_hdr_valid(c, peer, (struct comm_hdr *)frame);
		return 1;
	}
}

/* Local ranks of this host, in rank order; this rank's index in *me. */
static int
local_ranks(const struct comm *c, int *ranks, int *me)
{
	int r, n = 0;

	for (r = 0; r < c->world; r++)
		if (c->host[r] == c->host[c->rank]) {
			if (r == c->rank)
				*me = n;
			ranks[n++] = r;
		}
	return n;
}

static int
shm_create(struct comm_shm *m, char *err, size_t errlen)
{
	int fd = memfd_create("collx", MFD_CLOEXEC);
	void *p;

	if (fd < 0)
		return cli_fail(err, errlen, "memfd_create: %s", strerror(errno));
	if (fchmod(fd, 0600) < 0 || ftruncate(fd, (off_t)m->bytes) < 0 ||
	    fallocate(fd, 0, 0, (off_t)m->bytes) < 0 ||
	    (p = mmap(NULL, m->bytes, PROT_READ | PROT_WRITE, SHM_MAP, fd,
	    0)) == MAP_FAILED) {
		cli_fail(err, errlen, "shared memory of %zu bytes: %s", m->bytes,
		    strerror(errno));
		close(fd);
		return -1;
	}
	m->base = p;
	for (int i = 0; i < m->local; i++)
		for (int j = 0; j < m->local; j++)
			for (int s = 0; i != j && s < m->nstreams; s++)
				ring_at(m, i, j, s)->size = m->ring;
	*(uint32_t *)m->base = SHM_MAGIC;
	return fd;
}

static int
shm_attach(struct comm_shm *m, int pid, int fd)
{
	char path[64];
	struct stat sb;
	void *p;
	int mine;

	snprintf(path, sizeof path, "/proc/%d/fd/%d", pid, fd);
	if ((mine = open(path, O_RDWR | O_CLOEXEC)) < 0)
		return errno;
	if (fstat(mine, &sb) < 0 || (size_t)sb.st_size != m->bytes ||
	    (p = mmap(NULL, m->bytes, PROT_READ | PROT_WRITE, SHM_MAP, mine,
	    0)) == MAP_FAILED) {
		close(mine);
		return EINVAL;
	}
	close(mine);
	m->base = p;
	return *(uint32_t *)m->base == SHM_MAGIC ? 0 : EPROTO;
}

/* This rank's address of the segment, for the others' probe. */
static void
slot_set(struct comm_shm *m, int me)
{
	if ((size_t)me < SHM_MAX_SLOTS)
		((uint64_t *)(m->base + SHM_SLOTS))[me] = (uint64_t)(uintptr_t)m->base;
}

static int
shm_say(struct comm *c, int peer, const void *buf, size_t len, int recv,
    double deadline)
{
	char err[COLLX_ERRLEN];
	int fd = c->peers[peer].st[0].fd;

	if ((recv ? comm_sock_recv_all(fd, (void *)buf, len, deadline, err,
	    sizeof err) : comm_sock_send_all(fd, buf, len, deadline, err,
	    sizeof err)) == 0)
		return 0;
	comm_cause_set(c, peer, COMM_WHY_FAILED, EPROTO);
	comm_fail(c, COMM_ERR_RUNTIME, "setting up shared memory with peer "
	    "rank %d (%s): %s", peer, c->peers[peer].addr, err);
	return -1;
}

/* The leader: offer the segment to every local rank, gather their
 * answers, tell them all whether the host uses it. */
static int
shm_lead(struct comm *c, const int *ranks, struct comm_shm *m,
    double deadline)
{
	struct shm_offer o = { SHM_MAGIC, 0, -1, 0, m->bytes }, a;
	char err[COLLX_ERRLEN];
	int i, ok;

	o.fd = shm_create(m, err, sizeof err);
	if (o.fd < 0)
		o.err = errno ? errno : EINVAL;
	else
		slot_set(m, 0);
	for (i = 1; i < m->local; i++)
		if (shm_say(c, ranks[i], &o, sizeof o, 0, deadline) < 0)
			goto fail;
	ok = o.err == 0;
	for (i = 1; i < m->local; i++) {
		if (shm_say(c, ranks[i], &a, sizeof a, 1, deadline) < 0)
			goto fail;
		ok &= a.magic == SHM_MAGIC && a.err == 0;
	}
	o.err = ok ? 0 : EAGAIN;
	for (i = 1; i < m->local; i++)
		if (shm_say(c, ranks[i], &o, sizeof o, 0, deadline) < 0)
			goto fail;
	if (o.fd >= 0)
		close(o.fd);
	return ok;
fail:
	if (o.fd >= 0)
		close(o.fd);
	return -1;
}

static int
shm_follow(struct comm *c, int leader, int me, struct comm_shm *m,
    double deadline)
{
	struct shm_offer o, a = { SHM_MAGIC, 0, -1, 0, 0 };

	if (shm_say(c, leader, &o, sizeof o, 1, deadline) < 0)
		return -1;
	if (o.magic != SHM_MAGIC || o.bytes != m->bytes)
		a.err = EPROTO;
	else
		a.err = o.err ? o.err : shm_attach(m, c->pid[leader], o.fd);
	if (a.err == 0)
		slot_set(m, me);
	if (shm_say(c, leader, &a, sizeof a, 0, deadline) < 0 ||
	    shm_say(c, leader, &o, sizeof o, 1, deadline) < 0)
		return -1;
	return o.err == 0 && a.err == 0;
}

/* Whether this rank can read local rank j's memory (process j, pid):
 * the segment's magic, at j's address of it. */
static int
cma_probe(const struct comm_shm *m, int j, int pid)
{
	uint32_t magic = 0;
	struct iovec local = { &magic, sizeof magic }, remote = {
		(void *)(uintptr_t)((uint64_t *)(m->base + SHM_SLOTS))[j],
		sizeof magic };
	const char *env = getenv("COLLX_SHM_CMA");

	if (env == NULL || strcmp(env, "1") != 0 || (size_t)j >= SHM_MAX_SLOTS)
		return 0;
	return process_vm_readv(pid, &local, 1, &remote, 1, 0) ==
	    (ssize_t)sizeof magic && magic == SHM_MAGIC;
}

/* The streams to local ranks onto their rings; each ring from a rank
 * whose memory this one can read carries large payloads in place. */
static void
shm_bind(struct comm *c, const int *ranks, int me)
{
	struct comm_shm *m = &c->shm;
	int cma;

	for (int j = 0; j < m->local; j++) {
		if (j == me)
			continue;
		cma = cma_probe(m, j, c->pid[ranks[j]]);
		for (int s = 0; s < c->nstreams; s++) {
			struct comm_stream *st = &c->peers[ranks[j]].st[s];
			st->tx = ring_at(m, me, j, s);
			st->rx = ring_at(m, j, me, s);
			st->pid = c->pid[ranks[j]];
			atomic_store(&st->rx->cma_ok, cma ? 1 : -1);
		}
	}
}

/*
 * What the scheduler did to this rank while it used the segment, for
 * COLLX_DEBUG=info: a slow launch over shared memory is one whose rank
 * was moved (migrations), pushed off its core (involuntary switches) or
 * slept in poll() (voluntary ones), and these say which. The rank's
 * CPU and counters at the start are kept per process: one segment
 * a process.
 */
struct shm_usage {
	struct rusage ru;
	long migrations;
	int cpu;
};
static struct shm_usage shm_start;

/* se.nr_migrations of /proc/self/sched, or -1. */
static long
migrations(void)
{
	char line[256];
	FILE *f;
	long n = -1;

	if ((f = fopen("/proc/self/sched", "re")) == NULL)
		return -1;
	while (n < 0 && fgets(line, sizeof line, f) != NULL)
		if (strncmp(line, "se.nr_migrations", 16) == 0)
			n = atol(strchr(line, ':') != NULL ?
			    strchr(line, ':') + 1 : "-1");
	fclose(f);
	return n;
}

static void
usage_now(struct shm_usage *u)
{
	getrusage(RUSAGE_SELF, &u->ru);
	u->migrations = migrations();
	u->cpu = sched_getcpu();
}

static void
usage_say(const struct comm *c)
{
	struct shm_usage *a = &shm_start, b;
	cpu_set_t mine;
	char cpus[64] = "";
	size_t k = 0;

	usage_now(&b);
	CPU_ZERO(&mine);
	sched_getaffinity(0, sizeof mine, &mine);
	for (int cpu = 0; cpu < CPU_SETSIZE && k + 8 < sizeof cpus; cpu++)
		if (CPU_ISSET(cpu, &mine))
			k += (size_t)snprintf(cpus + k, sizeof cpus - k, "%s%d",
			    k ? "," : "", cpu);
	comm_debug(c, COMM_DEBUG_INFO, "shm: cpus %s, on cpu %d then %d; "
	    "while mapped: %ld migrations, %ld voluntary and %ld "
	    "involuntary switches, %ld page faults, %.1f ms CPU", cpus,
	    a->cpu, b.cpu, b.migrations - a->migrations,
	    b.ru.ru_nvcsw - a->ru.ru_nvcsw, b.ru.ru_nivcsw - a->ru.ru_nivcsw,
	    b.ru.ru_minflt - a->ru.ru_minflt,
	    (b.ru.ru_utime.tv_sec - a->ru.ru_utime.tv_sec +
	    b.ru.ru_stime.tv_sec - a->ru.ru_stime.tv_sec) * 1e3 +
	    (b.ru.ru_utime.tv_usec - a->ru.ru_utime.tv_usec +
	    b.ru.ru_stime.tv_usec - a->ru.ru_stime.tv_usec) / 1e3);
}

int
comm_shm_setup(struct comm *c)
{
	struct comm_shm *m = &c->shm;
	int *ranks = malloc((size_t)c->world * sizeof *ranks), me = 0, i, rc;
	double deadline = cli_now() + c->timeout;

	if (ranks == NULL) {
		comm_fail(c, COMM_ERR_RUNTIME, "out of memory");
		return -1;
	}
	m->local = local_ranks(c, ranks, &me);
	m->nstreams = c->nstreams;
	/* Every local rank must allow it, as every one of them knows. */
	for (i = 0; i < m->local; i++)
		if (!c->shm_ok[ranks[i]])
			m->local = 1;
	if (m->local < 2) {
		free(ranks);
		return 0;
	}
	m->ring = ring_bytes(m->local, m->nstreams);
	m->bytes = SHM_HEAD + (size_t)m->local * (size_t)m->local *
	    (size_t)m->nstreams * ring_stride(m->ring);
	rc = me == 0 ? shm_lead(c, ranks, m, deadline) :
	    shm_follow(c, ranks[0], me, m, deadline);
	if (rc == 1) {
		shm_bind(c, ranks, me);
		if (c->debug >= COMM_DEBUG_INFO)
			usage_now(&shm_start);
	}
	else if (m->base != NULL) {
		munmap(m->base, m->bytes);
		m->base = NULL;
	}
	free(ranks);
	return rc < 0 ? -1 : 0;
}

void
comm_shm_close(struct comm *c)
{
	if (c->shm.base != NULL && c->debug >= COMM_DEBUG_INFO)
		usage_say(c);
	if (c->shm.base != NULL)
		munmap(c->shm.base, c->shm.bytes);
	c->shm.base = NULL;
}
