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
 * results are bit for bit those of TCP. The TCP connection stays open:
 * a rank that has run out of data or room sleeps in poll() on it, and
 * the peer that changes the ring writes one zero byte (a doorbell) when
 * it sees the sleeper's flag; a dead peer's connection closes, which
 * wakes the sleeper as on TCP, and an abort frame (non-zero first byte)
 * arrives on it too. */
#include "comm/comm_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#define SHM_MAGIC 0x4d485343u	/* "CSHM" */
#define SHM_HEAD ((size_t)4096)
/* Bytes of all rings of a host together at most, and per ring. */
#define SHM_BUDGET ((size_t)64 << 20)
#define SHM_RING_MAX ((size_t)1 << 20)
#define SHM_RING_MIN ((size_t)64 << 10)

struct comm_ring {
	_Alignas(64) _Atomic uint64_t head;	/* bytes written: producer's */
	_Alignas(64) _Atomic uint64_t tail;	/* bytes read: consumer's */
	_Alignas(64) _Atomic uint32_t rx_sleep;	/* consumer waits for data */
	_Atomic uint32_t tx_sleep;		/* producer waits for room */
	uint64_t size;
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

static size_t
ring_put(struct comm_ring *r, const struct iovec *iov, size_t n)
{
	uint64_t head = atomic_load_explicit(&r->head, memory_order_relaxed);
	uint64_t tail = atomic_load_explicit(&r->tail, memory_order_acquire);
	size_t room = (size_t)(r->size - (head - tail)), moved = 0, k, at, first;

	for (size_t i = 0; i < n && moved < room; i++) {
		k = iov[i].iov_len < room - moved ? iov[i].iov_len : room - moved;
		at = (size_t)((head + moved) & (r->size - 1));
		first = k < r->size - at ? k : r->size - at;
		memcpy(r->data + at, iov[i].iov_base, first);
		memcpy(r->data, (char *)iov[i].iov_base + first, k - first);
		moved += k;
	}
	atomic_store_explicit(&r->head, head + moved, memory_order_release);
	return moved;
}

static size_t
ring_get(struct comm_ring *r, const struct iovec *iov, size_t n)
{
	uint64_t tail = atomic_load_explicit(&r->tail, memory_order_relaxed);
	uint64_t head = atomic_load_explicit(&r->head, memory_order_acquire);
	size_t avail = (size_t)(head - tail), moved = 0, k, at, first;

	for (size_t i = 0; i < n && moved < avail; i++) {
		k = iov[i].iov_len < avail - moved ? iov[i].iov_len : avail - moved;
		at = (size_t)((tail + moved) & (r->size - 1));
		first = k < r->size - at ? k : r->size - at;
		memcpy(iov[i].iov_base, r->data + at, first);
		memcpy((char *)iov[i].iov_base + first, r->data, k - first);
		moved += k;
	}
	atomic_store_explicit(&r->tail, tail + moved, memory_order_release);
	return moved;
}

size_t
comm_shm_io(struct comm_stream *st, const struct iovec *iov, size_t n,
    int is_recv)
{
	struct comm_ring *r = is_recv ? st->rx : st->tx;
	_Atomic uint32_t *sleeper = is_recv ? &r->tx_sleep : &r->rx_sleep;
	size_t moved = is_recv ? ring_get(r, iov, n) : ring_put(r, iov, n);

	if (moved == 0)
		return 0;
	/* Pairs with comm_shm_arm: either the sleeper sees our bytes when it
	 * looks again, or we see its flag here. */
	atomic_thread_fence(memory_order_seq_cst);
	if (atomic_load_explicit(sleeper, memory_order_relaxed) &&
	    atomic_exchange(sleeper, 0))
		bell(st->fd);
	return moved;
}

int
comm_shm_arm(struct comm_stream *st, int recv, int send)
{
	int ready = 0;

	if (recv) {
		atomic_store(&st->rx->rx_sleep, 1);
		atomic_thread_fence(memory_order_seq_cst);
		ready |= atomic_load(&st->rx->head) != atomic_load(&st->rx->tail);
	}
	if (send) {
		atomic_store(&st->tx->tx_sleep, 1);
		atomic_thread_fence(memory_order_seq_cst);
		ready |= atomic_load(&st->tx->head) - atomic_load(&st->tx->tail) <
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
	    (p = mmap(NULL, m->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
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
	    (p = mmap(NULL, m->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, mine,
	    0)) == MAP_FAILED) {
		close(mine);
		return EINVAL;
	}
	close(mine);
	m->base = p;
	return *(uint32_t *)m->base == SHM_MAGIC ? 0 : EPROTO;
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
shm_follow(struct comm *c, int leader, struct comm_shm *m, double deadline)
{
	struct shm_offer o, a = { SHM_MAGIC, 0, -1, 0, 0 };

	if (shm_say(c, leader, &o, sizeof o, 1, deadline) < 0)
		return -1;
	if (o.magic != SHM_MAGIC || o.bytes != m->bytes)
		a.err = EPROTO;
	else
		a.err = o.err ? o.err : shm_attach(m, c->pid[leader], o.fd);
	if (shm_say(c, leader, &a, sizeof a, 0, deadline) < 0 ||
	    shm_say(c, leader, &o, sizeof o, 1, deadline) < 0)
		return -1;
	return o.err == 0 && a.err == 0;
}

static void
shm_bind(struct comm *c, const int *ranks, int me)
{
	struct comm_shm *m = &c->shm;

	for (int j = 0; j < m->local; j++)
		for (int s = 0; j != me && s < c->nstreams; s++) {
			struct comm_stream *st = &c->peers[ranks[j]].st[s];
			st->tx = ring_at(m, me, j, s);
			st->rx = ring_at(m, j, me, s);
		}
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
	    shm_follow(c, ranks[0], m, deadline);
	if (rc == 1)
		shm_bind(c, ranks, me);
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
	if (c->shm.base != NULL)
		munmap(c->shm.base, c->shm.bytes);
	c->shm.base = NULL;
}
