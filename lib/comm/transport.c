/* transport: point-to-point messages over the mesh. Each peer and stream
 * has a FIFO of stripes to send and one to receive; comm_waitall() moves
 * bytes on every non-empty FIFO with non-blocking calls (several messages
 * per system call), optionally spins (COLLX_SPIN_US), then sleeps in
 * poll() until a socket is ready or a peer's time is up. Once the group
 * has been split, several groups share the streams and a receive matches
 * by group (transport_mux.c). A group never split reads as before,
 * straight into posted buffers.
 *
 * Functions taking a struct comm take the group waiting or posting (its
 * operation labels the messages) and reach the links through c->net;
 * their peer is a rank of net. */
#include "comm/comm_impl.h"
#include "tensor/dtype.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

/* Messages this large are striped over all streams; smaller ones use
 * stream 0 only. */
#define STRIPE_MIN ((size_t)256 << 10)
#define STRIPE_ALIGN ((size_t)4096)
#define IOV_BATCH 64
/* Finished one-stripe transfers a group keeps for its next messages:
 * a small message then costs no malloc and free. */
#define XFER_SPARES 16


/* Stripe k of n of a len-byte message: [*off, *off + return). */
static size_t
stripe(size_t len, int n, int k, size_t *off)
{
	size_t part = len / (size_t)n / STRIPE_ALIGN * STRIPE_ALIGN;

	*off = part * (size_t)k;
	return k == n - 1 ? len - *off : part;
}

static int
stripes_for(const struct comm *c, size_t len)
{
	return c->nstreams > 1 && len >= STRIPE_MIN ? c->nstreams : 1;
}

size_t
comm_stripe_bytes(const struct comm *c, size_t len, int s)
{
	int n = stripes_for(c, len);
	size_t off;

	return s < n ? stripe(len, n, s, &off) : 0;
}

static void
hdr_fill(const struct comm *c, struct comm_hdr *h, int tag, size_t len)
{
	memset(h, 0, sizeof *h);
	h->magic = COMM_HDR_MAGIC;
	h->seq = c->seq;
	h->ctx = c->ctx;
	h->opcode = (int16_t)c->opcode;
	h->dtype = (int16_t)c->dtype;
	h->tag = tag;
	h->sig = c->sig;
	h->len = len;
	memcpy(h->op, c->opname, sizeof h->op - 1);
}

/* A finished transfer to net's spares, or freed. */
static void
xfer_put(struct comm *net, struct comm_xfer *x)
{
	if (x->cap == 1 && net->nspares < XFER_SPARES) {
		x->next = net->spares;
		net->spares = x;
		net->nspares++;
	} else
		free(x);
}

void
comm_seg_done(struct comm *c, int peer, struct comm_seg *s)
{
	struct comm_xfer *x = s->x;

	c->net->peers[peer].pending--;
	if (--x->left > 0)
		return;
	x->req->state = COMM_REQ_DONE;
	x->req->done = x->req->len;
	x->req->priv = NULL;
	xfer_put(c->net, x);
}

static int
req_post(struct comm *c, int peer, int tag, void *buf, size_t len,
    struct comm_req *r, int is_send)
{
	if (c->net->kind != COMM_ERR_NONE)
		return -1;
	memset(r, 0, sizeof *r);
	if (peer < 0 || peer >= c->world) {
		comm_fail(c, COMM_ERR_RUNTIME, "peer rank %d is not within world size %d",
		    peer, c->world);
		return -1;
	}
	r->peer = peer;
	r->tag = tag;
	r->is_send = is_send;
	r->state = COMM_REQ_ACTIVE;
	r->buf = buf;
	r->len = len;
	return 0;
}

/* A zeroed transfer of nseg stripes (room for one at least). */
static struct comm_xfer *
xfer_new(struct comm *c, struct comm_req *r, int nseg)
{
	struct comm *net = c->net;
	int cap = nseg > 1 ? nseg : 1;
	size_t bytes = sizeof(struct comm_xfer) + (size_t)cap *
	    sizeof(struct comm_seg);
	struct comm_xfer *x = cap == 1 ? net->spares : NULL;

	if (x != NULL) {
		net->spares = x->next;
		net->nspares--;
		memset(x, 0, bytes);
	} else if ((x = calloc(1, bytes)) == NULL) {
		comm_fail(c, COMM_ERR_RUNTIME, "out of memory");
		return NULL;
	}
	x->cap = cap;
	x->req = r;
	x->left = nseg;
	r->priv = x;
	return x;
}

/* Self messages: match the heads of the send and receive FIFOs. */
static void
self_match(struct comm *c)
{
	struct comm_xfer *s, *r;

	while ((s = c->self_sq) && (r = c->self_rq)) {
		if (s->req->len != r->req->len || s->req->tag != r->req->tag) {
			comm_fail(c, COMM_ERR_MISMATCH, "message to self of %zu bytes "
			    "(tag %d) met a receive of %zu bytes (tag %d)", s->req->len,
			    s->req->tag, r->req->len, r->req->tag);
			return;
		}
		if (s->req->len)
			memcpy(r->req->buf, s->req->buf, s->req->len);
		c->self_sq = s->next;
		c->self_rq = r->next;
		s->req->state = r->req->state = COMM_REQ_DONE;
		s->req->done = s->req->len;
		r->req->done = r->req->len;
		s->req->priv = r->req->priv = NULL;
		xfer_put(c->net, s);
		xfer_put(c->net, r);
	}
}

static int
self_post(struct comm *c, struct comm_req *r)
{
	struct comm_xfer *x = xfer_new(c, r, 0), **q;

	if (!x)
		return -1;
	for (q = r->is_send ? &c->self_sq : &c->self_rq; *q; q = &(*q)->next)
		;
	*q = x;
	self_match(c);
	return c->net->kind == COMM_ERR_NONE ? 0 : -1;
}

static int stream_send(struct comm *c, int peer, int s);

static int
net_post(struct comm *c, struct comm_req *r)
{
	int peer = comm_net_rank(c, r->peer);
	struct comm_peer *p = &c->net->peers[peer];
	int n = stripes_for(c, r->len), k;
	struct comm_xfer *x = xfer_new(c, r, n);
	struct comm_stream *st;
	size_t off;

	if (!x)
		return -1;
	for (k = 0; k < n; k++) {
		struct comm_seg *g = &x->seg[k];
		g->x = x;
		g->len = stripe(r->len, n, k, &off);
		g->buf = r->len ? r->buf + off : r->buf;	/* no offset on NULL */
		st = &p->st[k];
		hdr_fill(c, r->is_send ? &g->hdr : &g->want, r->tag, r->len);
		p->pending++;
		if (r->is_send) {
			*st->sq_tail = g;
			st->sq_tail = &g->next;
		} else if (c->net->split) {
			if (comm_mux_posted(c, peer, k, g) < 0) {
				x->left -= n - 1 - k;	/* stripes never queued */
				return -1;
			}
		} else {
			*st->rq_tail = g;
			st->rq_tail = &g->next;
		}
	}
	/* Start sending now: the bytes travel while the caller computes. */
	if (r->is_send && p->st[0].sq == &x->seg[0])
		return stream_send(c, peer, 0) < 0 ? -1 : 0;
	return 0;
}

int
comm_isend(struct comm *c, int peer, int tag, const void *buf, size_t len,
    struct comm_req *r)
{
	if (req_post(c, peer, tag, (void *)buf, len, r, 1) < 0)
		return -1;
	if (peer != c->rank)
		c->sent += len;
	return peer == c->rank ? self_post(c, r) : net_post(c, r);
}

int
comm_irecv(struct comm *c, int peer, int tag, void *buf, size_t len,
    struct comm_req *r)
{
	if (req_post(c, peer, tag, buf, len, r, 0) < 0)
		return -1;
	return peer == c->rank ? self_post(c, r) : net_post(c, r);
}

/* iovecs for what is left of the FIFO's first stripes. */
static int
queue_iov(struct comm_seg *g, struct iovec *iov)
{
	int n = 0;

	for (; g && n <= IOV_BATCH - 2; g = g->next) {
		if (g->hdone < COMM_HDR_LEN)
			iov[n++] = (struct iovec){ (char *)&g->hdr + g->hdone,
			    COMM_HDR_LEN - g->hdone };
		if (g->done < g->len)
			iov[n++] = (struct iovec){ g->buf + g->done, g->len - g->done };
	}
	return n;
}

static int
hdr_describe(const struct comm_hdr *h, char *buf, size_t len)
{
	char dt[16];

	if (h->dtype >= 0 && h->dtype < DT_COUNT)
		snprintf(dt, sizeof dt, "%s", dtype_name((enum dtype)h->dtype));
	else
		snprintf(dt, sizeof dt, "%d", h->dtype);
	return snprintf(buf, len, "%.15s (op %d, #%u%s%.0u), dtype %s, %llu bytes, "
	    "tag %d, signature %#llx", h->op[0] ? h->op : "point-to-point",
	    h->opcode, h->seq, h->ctx ? " of group " : "", h->ctx, dt,
	    (unsigned long long)h->len, h->tag, (unsigned long long)h->sig);
}

/* A header is a message's, not an abort frame or garbage. */
int
comm_hdr_valid(struct comm *c, int peer, const struct comm_hdr *h)
{
	char where[128];

	if (h->magic == COMM_ABORT_MAGIC) {
		comm_abort_received(c, peer, h);
		return -1;
	}
	if (h->magic != COMM_HDR_MAGIC) {
		comm_cause_set(c, peer, COMM_WHY_FAILED, EPROTO);
		comm_fail(c, COMM_ERR_RUNTIME, "peer rank %d (%s) sent a garbled "
		    "message header%s", peer, c->net->peers[peer].addr,
		    comm_where(c, where, sizeof where));
		return -1;
	}
	return 0;
}

/* A received header against what its receive expects. */
int
comm_hdr_check(struct comm *c, int peer, const struct comm_seg *g)
{
	const struct comm_hdr *h = &g->hdr, *w = &g->want;
	char where[128], got[192], want[192];

	if (comm_hdr_valid(c, peer, h) < 0)
		return -1;
	if (h->seq == w->seq && h->ctx == w->ctx && h->opcode == w->opcode &&
	    h->dtype == w->dtype && h->tag == w->tag && h->sig == w->sig &&
	    h->len == w->len)
		return 0;
	hdr_describe(h, got, sizeof got);
	hdr_describe(w, want, sizeof want);
	comm_cause_set(c, peer, COMM_WHY_MISMATCH, 0);
	comm_fail(c, COMM_ERR_MISMATCH, "mismatch with peer rank %d (%s)%s: "
	    "peer sent %s; this rank expected %s", peer, c->net->peers[peer].addr,
	    comm_where(c, where, sizeof where), got, want);
	return -1;
}

/* Account n moved bytes to the FIFO's stripes, completing whole ones. */
static int
queue_advance(struct comm *c, int peer, struct comm_seg **q,
    struct comm_seg ***tail, size_t n, int is_recv)
{
	struct comm_seg *g;
	size_t k;

	while ((g = *q)) {
		k = COMM_HDR_LEN - g->hdone < n ? COMM_HDR_LEN - g->hdone : n;
		g->hdone += k;
		n -= k;
		if (k && g->hdone == COMM_HDR_LEN && is_recv &&
		    comm_hdr_check(c, peer, g) < 0)
			return -1;
		k = g->len - g->done < n ? g->len - g->done : n;
		g->done += k;
		n -= k;
		if (g->hdone < COMM_HDR_LEN || g->done < g->len)
			break;
		*q = g->next;
		if (!*q)
			*tail = q;
		comm_seg_done(c, peer, g);
	}
	return 0;
}

static void
peer_lost(struct comm *c, int peer, int e)
{
	char where[128];
	int closed = e == 0 || e == ECONNRESET || e == EPIPE;

	/* The peer may have left because of a failure it told us about. */
	if (comm_abort_salvage(c, peer))
		return;
	comm_cause_set(c, peer, closed ? COMM_WHY_CLOSED : COMM_WHY_FAILED, e);
	comm_where(c, where, sizeof where);
	if (closed)
		comm_fail(c, COMM_ERR_RUNTIME, "peer rank %d (%s) closed the "
		    "connection%s", peer, c->net->peers[peer].addr, where);
	else
		comm_fail(c, COMM_ERR_RUNTIME, "connection to peer rank %d (%s) "
		    "failed%s: %s", peer, c->net->peers[peer].addr, where, strerror(e));
}

/* One non-blocking move on a stream (a system call, or a copy through
 * shared memory): bytes moved (0: would block), -1 on failure. */
ssize_t
comm_stream_io(struct comm *c, int peer, struct comm_stream *st,
    struct msghdr *m, int is_recv)
{
	ssize_t n;

	if (st->rx != NULL) {
		if ((n = comm_shm_io(st, m->msg_iov, m->msg_iovlen, is_recv)) < 0)
			peer_lost(c, peer, errno == ESRCH ? 0 : errno);
		return n;
	}
	do
		n = is_recv ? recvmsg(st->fd, m, MSG_DONTWAIT) :
		    sendmsg(st->fd, m, MSG_DONTWAIT | MSG_NOSIGNAL);
	while (n < 0 && errno == EINTR);
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
		return 0;
	if (n <= 0) {
		peer_lost(c, peer, n == 0 ? 0 : errno);
		return -1;
	}
	return n;
}

/* The FIFO's first message, when it is small, whole and unstarted, into
 * a shared-memory stream's fast box: bytes moved, or 0 (not there). */
static size_t
box_send(struct comm_stream *st)
{
	struct comm_seg *g = st->sq;

	if (g->hdone != 0 || g->done != 0 || g->len != g->hdr.len ||
	    !comm_shm_box_put(st, &g->hdr, g->buf, g->len))
		return 0;
	return COMM_HDR_LEN + g->len;
}

/* One non-blocking transfer on a FIFO: bytes moved (0: would block), -1 on failure. */
static ssize_t
stream_move(struct comm *c, int peer, int s, int is_recv)
{
	struct comm_stream *st = &c->net->peers[peer].st[s];
	struct iovec iov[IOV_BATCH];
	struct msghdr m = { .msg_iov = iov };
	ssize_t n;

	if (!is_recv && st->tx != NULL && (n = (ssize_t)box_send(st)) > 0)
		return queue_advance(c, peer, &st->sq, &st->sq_tail, (size_t)n,
		    0) < 0 ? -1 : n;
	m.msg_iovlen = (size_t)queue_iov(is_recv ? st->rq : st->sq, iov);
	if ((n = comm_stream_io(c, peer, st, &m, is_recv)) <= 0)
		return n;
	if (is_recv)
		return queue_advance(c, peer, &st->rq, &st->rq_tail, (size_t)n, 1) < 0 ? -1 : n;
	return queue_advance(c, peer, &st->sq, &st->sq_tail, (size_t)n, 0) < 0 ? -1 : n;
}

/* Whether stream st has bytes to read for this rank now. */
static int
recv_wanted(const struct comm *n, const struct comm_stream *st)
{
	return st->rq || (n->split && st->cur);
}

static int
stream_send(struct comm *c, int peer, int s)
{
	ssize_t n = 1, moved = 0;

	while (c->net->peers[peer].st[s].sq && (n = stream_move(c, peer, s, 0)) > 0)
		moved += n;
	return n < 0 ? -1 : moved > 0;
}

static int
stream_recv(struct comm *c, int peer, int s)
{
	struct comm_stream *st = &c->net->peers[peer].st[s];
	ssize_t n = 1, moved = 0;

	if (c->net->split)
		while (recv_wanted(c->net, st) &&
		    (n = comm_mux_move(c, peer, s)) > 0)
			moved += n;
	else
		while (st->rq && (n = stream_move(c, peer, s, 1)) > 0)
			moved += n;
	return n < 0 ? -1 : moved > 0;
}

/* Move what can move on every busy peer: 1 if anything moved, 0, or -1. */
static int
progress_all(struct comm *c, double now)
{
	struct comm *net = c->net;
	int peer, s, any = 0, a, b;

	for (peer = 0; peer < net->world; peer++) {
		if (!net->peers[peer].pending)
			continue;
		for (s = 0; s < net->nstreams; s++) {
			a = stream_send(c, peer, s);
			b = a < 0 ? -1 : stream_recv(c, peer, s);
			if (a < 0 || b < 0)
				return -1;
			if (a || b) {
				net->peers[peer].last = now;
				any = 1;
			}
		}
	}
	return any;
}

static int
reqs_done(struct comm *c, struct comm_req *r, int n)
{
	int i;

	for (i = 0; i < n; i++) {
		if (r[i].state != COMM_REQ_ACTIVE)
			continue;
		if (r[i].peer == c->rank) {
			comm_fail(c, COMM_ERR_RUNTIME, "a %s self has no matching %s posted",
			    r[i].is_send ? "send to" : "receive from",
			    r[i].is_send ? "receive" : "send");
			return -1;
		}
		return 0;
	}
	return 1;
}

/* The busy peer whose time runs out first, or -1 when none is busy. */
static int
first_deadline(const struct comm *c, double *when)
{
	int peer, first = -1;

	for (peer = 0; peer < c->world; peer++) {
		const struct comm_peer *p = &c->peers[peer];
		if (p->pending && (first < 0 || p->last + c->timeout < *when)) {
			*when = p->last + c->timeout;
			first = peer;
		}
	}
	return first;
}

static void
peer_timeout(struct comm *c, int peer)
{
	char where[128];

	comm_cause_set(c, peer, COMM_WHY_TIMEOUT, 0);
	comm_where(c, where, sizeof where);
	comm_fail(c, COMM_ERR_RUNTIME, "timed out after %g s waiting for peer rank "
	    "%d (%s)%s", c->timeout, peer, c->net->peers[peer].addr, where);
}

/* A busy stream's events to sleep on. A shared-memory stream's socket
 * carries doorbells, aborts and the peer's end; *ready when its rings
 * moved while it was being armed. */
static short
stream_events(struct comm *net, struct comm_stream *st, int *ready)
{
	int rx = recv_wanted(net, st), tx = st->sq != NULL;

	if (st->rx == NULL)
		return (short)((tx ? POLLOUT : 0) | (rx ? POLLIN : 0));
	if (!rx && !tx)
		return 0;
	*ready |= comm_shm_arm(st, rx, tx);
	return POLLIN;
}

/* After poll: doorbells drained, a closed connection or an abort met. */
static int
after_poll(struct comm *c, int n)
{
	struct comm *net = c->net;
	struct comm_stream *st;
	int i, peer, s, rc, closed;

	for (i = 0; i < n; i++) {
		peer = net->pfd_who[i] / COMM_MAX_STREAMS;
		s = net->pfd_who[i] % COMM_MAX_STREAMS;
		if (net->peers[peer].st[s].rx == NULL)
			continue;
		comm_shm_disarm(&net->peers[peer].st[s]);
		if (!net->pfd[i].revents)
			continue;
		rc = comm_shm_bells(c, peer, s, &closed);
		/* A peer that wrote its last bytes and left: they are ours to
		 * read first, as TCP would deliver them before the end; and
		 * one that took our payload in place and left has received
		 * it. */
		st = &net->peers[peer].st[s];
		if (rc < 0 && closed == 0 &&
		    comm_shm_arm(st, recv_wanted(net, st), st->tx_cma != 0))
			continue;
		if (rc < 0)
			peer_lost(c, peer, closed);
		if (rc != 0)
			return -1;
	}
	return 0;
}

/* Sleep until a busy stream is ready or the first peer's deadline. */
static int
wait_ready(struct comm *c)
{
	struct comm *net = c->net;
	struct pollfd *fds = net->pfd;
	int peer, s, n = 0, first, ms, ready = 0;
	double when = 0, now;

	first = first_deadline(net, &when);
	for (peer = 0; peer < net->world; peer++) {
		struct comm_peer *p = &net->peers[peer];
		for (s = 0; p->pending && s < net->nstreams; s++) {
			short ev = stream_events(net, &p->st[s], &ready);
			if (ev) {
				net->pfd_who[n] = peer * COMM_MAX_STREAMS + s;
				fds[n++] = (struct pollfd){ .fd = p->st[s].fd, .events = ev };
			}
		}
	}
	now = cli_now();
	if (first >= 0 && now >= when) {
		peer_timeout(c, first);
		return -1;
	}
	ms = first < 0 || ready ? 0 : comm_sock_poll_ms(when);
	if (poll(fds, (nfds_t)n, ms) < 0 && errno != EINTR) {
		comm_fail(c, COMM_ERR_RUNTIME, "poll: %s", strerror(errno));
		return -1;
	}
	comm_fr_poll(c);	/* SIGUSR1 ends the sleep with EINTR */
	return after_poll(c, n);
}

/*
 * A yield that gives the core away for more than SPIN_LOST_US says that
 * another process wanted it; for SPIN_MODE_S the rank's waits then suit
 * the one it was. A peer (/proc says one this wait needs over shared
 * memory last ran on this CPU: the scheduler put unbound ranks on one
 * core, or there are more ranks than cores): they yield on every look,
 * so the peer runs at once and hands the core back when it waits in
 * turn. A stranger (a noisy neighbour, a loaded machine): they never
 * yield and spin up to SPIN_STRANGER_US before sleeping, keeping the
 * rank's share of the core as Open MPI's polling does, since a yield or
 * a sleep hands the stranger a whole time slice (ms) before the rank
 * runs again. Two ranks of a 1 MiB allreduce on one CPU took 106-186 us
 * with yields on every look, 255-267 us without (46-52 us bound to a core
 * each; a loaded 2-core machine). A mode runs out and is judged afresh
 * at the next yield that loses the core. On the fast path the check is a
 * comparison a wait and two clock reads around a yield (every 1024th
 * look); /proc is read only after a yield that lost the core.
 */
#define SPIN_LOST_US		100
#define SPIN_STRANGER_US	5000
#define SPIN_MODE_S		0.1

enum { SPIN_PLAIN, SPIN_PEER, SPIN_STRANGER };

/* A spinning wait pauses the core between looks: a system call per look
 * (sched_yield) cost more than the message itself in a virtual machine
 * (1.3 us of an 8-byte ping-pong's half round trip). Now and then it
 * yields still, for a peer that shares the core; on every look when it
 * is known to share it, never when a stranger does. 1 when the yield
 * lost the core for more than SPIN_LOST_US. */
static int
spin_pause(const struct comm *c, unsigned spins, int mode)
{
	double t;

	if (c->spin_yield || mode == SPIN_PEER ||
	    (spins % 1024 == 0 && mode == SPIN_PLAIN)) {
		t = cli_now();
		sched_yield();
		return (cli_now() - t) * 1e6 > SPIN_LOST_US;
	}
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield");
#endif
	return 0;
}

/* The CPU process pid last ran on (/proc/PID/stat's 39th field), or -1. */
static int
proc_cpu(int pid)
{
	char path[64], buf[1024], *p;
	ssize_t n;
	int fd, k;

	snprintf(path, sizeof path, "/proc/%d/stat", pid);
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		return -1;
	n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = '\0';
	/* fields 3 on follow the command's closing parenthesis */
	p = strrchr(buf, ')');
	for (k = 2; k < 39 && p != NULL; k++)
		p = strchr(p + 1, ' ');
	return p != NULL ? atoi(p + 1) : -1;
}

/* How long a wait of c spins in mode, in microseconds. */
static int
spin_of(const struct comm *c, int mode)
{
	return mode == SPIN_STRANGER && c->spin_us > 0 ? SPIN_STRANGER_US :
	    c->spin_us;
}

/* After a yield that lost the core: whom to, as the mode of c's waits for
 * SPIN_MODE_S (net->spin_mode until net->spin_until), *spin as it gives. */
static int
spin_lost(struct comm *c, int *spin)
{
	struct comm *net = c->net;
	int me = sched_getcpu(), peer, mode = SPIN_STRANGER;

	for (peer = 0; me >= 0 && peer < net->world; peer++)
		if (net->peers[peer].pending && net->peers[peer].st[0].rx &&
		    proc_cpu(net->peers[peer].st[0].pid) == me)
			mode = SPIN_PEER;
	net->spin_mode = mode;
	net->spin_until = cli_now() + SPIN_MODE_S;
	*spin = spin_of(c, mode);
	return mode;
}

/* A wait's end (reqs_done's 1 or -1): 0 or -1, the operation started
 * on the first that completes. */
static int
waited(struct comm *c, int done)
{
	if (done < 0)
		return -1;
	comm_fr_moved(c);
	return 0;
}

int
comm_waitall(struct comm *c, struct comm_req *r, int n)
{
	double now, idle;
	unsigned spins = 0;
	int peer, rc, mode, spin;

	if (c->net->kind != COMM_ERR_NONE)
		return -1;
	/* One look before reading the clock: over shared memory a send, and
	 * a receive whose message is there, end with it. */
	if ((rc = reqs_done(c, r, n)) != 0)
		return waited(c, rc);
	if (progress_all(c, 0) < 0)
		return -1;
	/* A peer's clock starts with the wait, not with its last message. */
	now = idle = cli_now();
	for (peer = 0; peer < c->net->world; peer++)
		c->net->peers[peer].last = now;
	mode = now < c->net->spin_until ? c->net->spin_mode : SPIN_PLAIN;
	spin = spin_of(c, mode);
	for (;;) {
		rc = reqs_done(c, r, n);
		if (rc != 0)
			return waited(c, rc);
		rc = progress_all(c, now);
		if (rc < 0)
			return -1;
		/* Reading the clock costs as much as a look at every ring:
		 * a spinner reads it on every 32nd look only. */
		if (rc == 0 && spin > 0 && ++spins % 32 != 0) {
			if (spin_pause(c->net, spins, mode) && mode == SPIN_PLAIN)
				mode = spin_lost(c, &spin);
			continue;
		}
		now = cli_now();
		if (rc > 0)
			idle = now;
		else if ((now - idle) * 1e6 < spin) {
			if (spin_pause(c->net, spins, mode) && mode == SPIN_PLAIN)
				mode = spin_lost(c, &spin);
		} else if (wait_ready(c) < 0)
			return -1;
	}
}

int
comm_progress(struct comm *c)
{
	if (c->net->kind != COMM_ERR_NONE)
		return -1;
	return progress_all(c, cli_now()) < 0 ? -1 : 0;
}

int
comm_wait(struct comm *c, struct comm_req *r)
{
	return comm_waitall(c, r, 1);
}

int
comm_send(struct comm *c, int peer, int tag, const void *buf, size_t len)
{
	struct comm_req r;

	if (comm_isend(c, peer, tag, buf, len, &r) < 0)
		return -1;
	return comm_wait(c, &r);
}

int
comm_recv(struct comm *c, int peer, int tag, void *buf, size_t len)
{
	struct comm_req r;

	if (comm_irecv(c, peer, tag, buf, len, &r) < 0)
		return -1;
	return comm_wait(c, &r);
}

int
comm_sendrecv(struct comm *c, int dst, const void *sbuf, size_t slen,
    int src, void *rbuf, size_t rlen, int tag)
{
	struct comm_req r[2];

	if (comm_irecv(c, src, tag, rbuf, rlen, &r[0]) < 0 ||
	    comm_isend(c, dst, tag, sbuf, slen, &r[1]) < 0)
		return -1;
	return comm_waitall(c, r, 2);
}

/* Drop a stripe: its request's share, or an unexpected one whole. */
static void
seg_drop(struct comm_seg *g)
{
	if (g->x == NULL)
		comm_ux_free(g);
	else if (--g->x->left == 0)
		free(g->x);
}

/* Drop every queued stripe (on close, or after a failure); a sub-group
 * has only its messages to itself. */
void
comm_free_queues(struct comm *c)
{
	struct comm_xfer *x;
	struct comm_seg *g, *next;
	int peer, s;

	for (peer = 0; c->net == c && peer < c->world; peer++)
		for (s = 0; s < COMM_MAX_STREAMS; s++) {
			struct comm_stream *st = &c->peers[peer].st[s];
			struct comm_seg *q[3] = { st->sq, st->rq, st->ux };
			for (int i = 0; i < 3; i++)
				for (g = q[i]; g; g = next) {
					next = g->next;
					seg_drop(g);
				}
			if (st->cur)
				seg_drop(st->cur);
			st->sq = st->rq = st->ux = st->cur = NULL;
		}
	while ((x = c->self_sq) || (x = c->self_rq)) {
		if (x == c->self_sq)
			c->self_sq = x->next;
		else
			c->self_rq = x->next;
		free(x);
	}
	while (c->net == c && (x = c->spares) != NULL) {
		c->spares = x->next;
		free(x);
	}
	c->nspares = 0;
}

uint64_t
comm_bytes_sent(const struct comm *c)
{
	return c ? c->sent + coll_hier_sent(c) : 0;
}
