/* transport_mux: receiving once the group has been split, when several
 * groups share the streams and a receive matches by group. Headers are
 * read first, so that a message of a group with no receive posted yet is
 * kept aside (an unexpected stripe) instead of blocking the others. */
#include "comm/comm_impl.h"

#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

/* An unexpected message's buffer starts this large and doubles. */
#define UX_CHUNK ((size_t)64 << 10)

/* Split groups: the first stripe posted on the stream for group ctx. */
static struct comm_seg **
mux_find(struct comm_seg **q, uint32_t ctx, int posted)
{
	for (; *q; q = &(*q)->next)
		if ((posted ? (*q)->want.ctx : (*q)->hdr.ctx) == ctx)
			return q;
	return NULL;
}

/* Unlink *q from a FIFO whose tail is *tail. */
static struct comm_seg *
mux_unlink(struct comm_seg **q, struct comm_seg ***tail)
{
	struct comm_seg *g = *q;

	*q = g->next;
	if (*tail == &g->next)
		*tail = q;
	g->next = NULL;
	return g;
}

void
comm_ux_free(struct comm_seg *u)
{
	free(u->buf);
	free(u);
}

/* Room for the next bytes of unexpected stripe u: its buffer grows as
 * they arrive (doubling, from UX_CHUNK), so a length no peer sends
 * allocates no more than what came. */
static int
ux_grow(struct comm *c, int peer, struct comm_seg *u)
{
	size_t cap = u->cap ? u->cap * 2 : UX_CHUNK;
	char *buf;

	if (u->done < u->cap)
		return 0;
	if (cap > u->len || cap < u->cap)
		cap = u->len;
	if (!(buf = realloc(u->buf, cap))) {
		comm_fail(c, COMM_ERR_RUNTIME, "out of memory for a message of "
		    "%zu bytes from peer rank %d", u->len, peer);
		return -1;
	}
	u->buf = buf;
	u->cap = cap;
	return 0;
}

/* The posted stripe g takes the unexpected stripe u (and frees it). On
 * a mismatch g goes back to the stream's FIFO, for comm_close to free. */
static int
mux_deliver(struct comm *c, int peer, struct comm_stream *st,
    struct comm_seg *g, struct comm_seg *u)
{
	g->hdr = u->hdr;
	g->hdone = COMM_HDR_LEN;
	if (comm_hdr_check(c, peer, g) < 0) {
		comm_ux_free(u);
		*st->rq_tail = g;
		st->rq_tail = &g->next;
		return -1;
	}
	if (g->len)
		memcpy(g->buf, u->buf, g->len);
	g->done = g->len;
	comm_ux_free(u);
	comm_seg_done(c, peer, g);
	return 0;
}

/* A receive posted on stream s: the oldest unexpected stripe of its
 * group, if one has arrived, or the stream's FIFO. */
int
comm_mux_posted(struct comm *c, int peer, int s, struct comm_seg *g)
{
	struct comm_stream *st = &c->net->peers[peer].st[s];
	struct comm_seg **q = mux_find(&st->ux, g->want.ctx, 0);

	if (q)
		return mux_deliver(c, peer, st, g, mux_unlink(q, &st->ux_tail));
	*st->rq_tail = g;
	st->rq_tail = &g->next;
	return 0;
}

/* The stripe whose payload arrived in full: a posted one is done; an
 * unexpected one goes to a receive of its group posted meanwhile, or
 * waits for one. */
static int
mux_arrived(struct comm *c, int peer, struct comm_stream *st,
    struct comm_seg *g)
{
	struct comm_seg **q;

	if (g->x) {
		comm_seg_done(c, peer, g);
		return 0;
	}
	if ((q = mux_find(&st->rq, g->hdr.ctx, 1)))
		return mux_deliver(c, peer, st, mux_unlink(q, &st->rq_tail), g);
	*st->ux_tail = g;
	st->ux_tail = &g->next;
	return 0;
}

/* A header arrived: its payload goes to the group's first posted
 * receive on the stream, or to a new unexpected stripe. */
static int
mux_header(struct comm *c, int peer, int s)
{
	struct comm_stream *st = &c->net->peers[peer].st[s];
	struct comm_seg **q, *g;

	if (comm_hdr_valid(c, peer, &st->in) < 0)
		return -1;
	if ((q = mux_find(&st->rq, st->in.ctx, 1))) {
		g = mux_unlink(q, &st->rq_tail);
	} else if ((g = calloc(1, sizeof *g))) {
		g->len = comm_stripe_bytes(c->net, (size_t)st->in.len, s);
	} else {
		comm_fail(c, COMM_ERR_RUNTIME, "out of memory");
		return -1;
	}
	g->hdr = st->in;
	g->hdone = COMM_HDR_LEN;
	st->cur = g;	/* from here on comm_close frees it */
	if (g->x && comm_hdr_check(c, peer, g) < 0)
		return -1;
	if (g->done < g->len)
		return 0;
	st->cur = NULL;
	return mux_arrived(c, peer, st, g);
}

/* Account n received bytes: the current payload, then the next header. */
static int
mux_advance(struct comm *c, int peer, int s, size_t n)
{
	struct comm_stream *st = &c->net->peers[peer].st[s];
	struct comm_seg *g = st->cur;
	size_t k;

	if (g) {
		k = g->len - g->done < n ? g->len - g->done : n;
		g->done += k;
		n -= k;
		if (g->done < g->len)
			return 0;
		st->cur = NULL;
		if (mux_arrived(c, peer, st, g) < 0)
			return -1;
	}
	st->indone += n;
	if (st->indone < COMM_HDR_LEN)
		return 0;
	st->indone = 0;
	return mux_header(c, peer, s);
}

/* One non-blocking read on a split group's stream: the rest of the
 * current payload and the next header, no further (the header decides
 * where the payload after it goes). */
ssize_t
comm_mux_move(struct comm *c, int peer, int s)
{
	struct comm_stream *st = &c->net->peers[peer].st[s];
	struct iovec iov[2];
	struct msghdr m = { .msg_iov = iov };
	struct comm_seg *g = st->cur;
	ssize_t n;

	if (g && !g->x && ux_grow(c, peer, g) < 0)
		return -1;
	if (g)
		iov[m.msg_iovlen++] = (struct iovec){ g->buf + g->done,
		    (g->x ? g->len : g->cap) - g->done };
	/* the next header only after the whole payload */
	if (!g || g->x || g->cap == g->len)
		iov[m.msg_iovlen++] = (struct iovec){ (char *)&st->in + st->indone,
		    COMM_HDR_LEN - st->indone };
	if ((n = comm_stream_io(c, peer, st, &m, 1)) <= 0)
		return n;
	return mux_advance(c, peer, s, (size_t)n) < 0 ? -1 : n;
}
