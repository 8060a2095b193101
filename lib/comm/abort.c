/* abort: a rank that fails tells every peer why before it leaves, so
 * that each rank's one line names the same root cause (the rank that
 * died, stalled or differed) rather than the neighbour that left because
 * of it. The frame is 56 bytes, the size of a message header, and goes
 * where the next header would: after the stripe being sent, which is
 * finished with zeros first (its data no longer matters). A peer meets
 * it in place of the header it expects; one that was only sending to us
 * finds it on the lost connection before it reports the loss. */
#include "comm/comm_impl.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

/* Sending aborts never holds a failing rank back longer than this. */
#define ABORT_BUDGET 2.0

struct comm_abort {
	uint32_t magic;
	int32_t culprit, reporter;
	uint32_t seq;
	uint8_t why, pad;
	uint16_t err;
	char where[36];
};

_Static_assert(sizeof(struct comm_abort) == sizeof(struct comm_hdr),
    "an abort frame is the size of a message header");

/* Cut the step label to the frame's field; the label's head says the
 * most. A cut label ends at a word and says it was cut. */
static void
where_cut(char *dst, size_t size, const char *label)
{
	size_t n = strlen(label), keep;

	if (n < size) {
		memcpy(dst, label, n + 1);
		return;
	}
	keep = size - 4;
	while (keep > 0 && label[keep] != ' ')
		keep--;
	if (keep == 0)
		keep = size - 4;
	memcpy(dst, label, keep);
	memcpy(dst + keep, "...", 4);
}

void
comm_cause_set(struct comm *c, int culprit, enum comm_why why, int err)
{
	struct comm *n = c->net;

	/* The links' group keeps the cause; c (maybe a sub-group) labels it. */
	if (n->kind != COMM_ERR_NONE || n->cause.why != COMM_WHY_NONE)
		return;
	n->cause.why = why;
	n->cause.culprit = culprit;
	n->cause.reporter = n->rank;
	n->cause.err = err;
	n->cause.seq = c->seq;
	where_cut(n->cause.where, sizeof n->cause.where, c->step);
}

static void
frame_fill(const struct comm *c, struct comm_abort *f)
{
	memset(f, 0, sizeof *f);
	f->magic = COMM_ABORT_MAGIC;
	f->culprit = c->cause.culprit;
	f->reporter = c->cause.reporter;
	f->seq = c->cause.seq;
	f->why = (uint8_t)c->cause.why;
	f->err = (uint16_t)(c->cause.err > 0 && c->cause.err < 65536 ? c->cause.err : 0);
	memcpy(f->where, c->cause.where, sizeof f->where - 1);
}

/* n zero bytes: the rest of a stripe that was being sent. */
static int
send_zeros(int fd, size_t n, double deadline)
{
	static const char zeros[65536];
	char err[COLLX_ERRLEN];
	size_t k;

	for (; n > 0; n -= k) {
		k = n < sizeof zeros ? n : sizeof zeros;
		if (comm_sock_send_all(fd, zeros, k, deadline, err, sizeof err) < 0)
			return -1;
	}
	return 0;
}

/* One stream: finish the stripe being sent (partial), then the frame. A
 * stream with nothing half-sent goes in the first pass, without waiting
 * on a peer whose buffers are full. */
static void
abort_stream(struct comm_stream *st, const struct comm_abort *f, int partial,
    double deadline)
{
	struct comm_seg *g = st->sq;
	char err[COLLX_ERRLEN];

	if (partial) {
		if (g->hdone < COMM_HDR_LEN && comm_sock_send_all(st->fd,
		    (char *)&g->hdr + g->hdone, COMM_HDR_LEN - g->hdone,
		    deadline, err, sizeof err) < 0)
			return;
		if (send_zeros(st->fd, g->len - g->done, deadline) < 0)
			return;
	}
	comm_sock_send_all(st->fd, f, sizeof *f, deadline, err, sizeof err);
}

void
comm_abort_send(struct comm *c)
{
	double deadline = cli_now() + (c->timeout < ABORT_BUDGET ? c->timeout : ABORT_BUDGET);
	struct comm_abort f;
	int peer, s, pass, partial;

	c = c->net;
	if (!c->meshed || c->cause.why == COMM_WHY_NONE)
		return;
	frame_fill(c, &f);
	c->aborted = 1;
	for (pass = 0; pass < 2; pass++)
		for (peer = 0; peer < c->world; peer++)
			for (s = 0; peer != c->rank && s < c->nstreams; s++) {
				struct comm_stream *st = &c->peers[peer].st[s];
				struct comm_seg *g = st->sq;
				if (st->fd < 0)
					continue;
				/* shared memory: the frame goes beside the rings */
				partial = st->rx == NULL && g &&
				    (g->hdone > 0 || g->done > 0);
				if (partial == pass)
					abort_stream(st, &f, partial, deadline);
			}
}

/* " during ring allgather step 1 of allreduce", or less when the frame
 * is about another operation than this rank's current one. */
static void
frame_where(const struct comm *c, const struct comm_abort *f, char *buf, size_t len)
{
	if (f->where[0] && f->seq == c->seq && c->opname[0])
		snprintf(buf, len, " during %s of %s", f->where, c->opname);
	else if (f->where[0])
		snprintf(buf, len, " during %s", f->where);
	else if (f->seq == c->seq && c->opname[0])
		snprintf(buf, len, " during %s", c->opname);
	else
		buf[0] = '\0';
}

void
comm_abort_received(struct comm *c, int peer, const void *frame)
{
	struct comm *n = c->net;
	struct comm_abort f;
	char where[128], by[48];
	const char *addr;

	/* Ranks are net's; c, the group waiting, labels the message. */
	n->peers[peer].abort_in = 1;
	memcpy(&f, frame, sizeof f);
	f.where[sizeof f.where - 1] = '\0';
	if (f.culprit < 0 || f.culprit >= n->world || f.reporter < 0 ||
	    f.reporter >= n->world || f.why == COMM_WHY_NONE || f.why >= COMM_WHY_COUNT) {
		comm_cause_set(c, peer, COMM_WHY_FAILED, EPROTO);
		comm_fail(c, COMM_ERR_RUNTIME, "peer rank %d (%s) sent a garbled abort",
		    peer, n->peers[peer].addr);
		return;
	}
	if (n->kind == COMM_ERR_NONE && n->cause.why == COMM_WHY_NONE) {
		n->cause = (struct comm_cause){ f.why, f.culprit, f.reporter, f.err,
		    f.seq, "" };
		memcpy(n->cause.where, f.where, sizeof f.where);
	}
	frame_where(c, &f, where, sizeof where);
	addr = n->peers[f.culprit].addr;
	snprintf(by, sizeof by, "; rank %d aborted the job", f.reporter);
	switch (f.why) {
	case COMM_WHY_CLOSED:
		comm_fail(c, COMM_ERR_RUNTIME, "peer rank %d (%s) closed the connection "
		    "to rank %d%s%s", f.culprit, addr, f.reporter, where, by);
		break;
	case COMM_WHY_FAILED:
		comm_fail(c, COMM_ERR_RUNTIME, "connection of rank %d to peer rank %d "
		    "(%s) failed%s: %s%s", f.reporter, f.culprit, addr, where,
		    strerror(f.err), by);
		break;
	case COMM_WHY_TIMEOUT:
		comm_fail(c, COMM_ERR_RUNTIME, "rank %d timed out waiting for peer "
		    "rank %d (%s)%s%s", f.reporter, f.culprit, addr, where, by);
		break;
	case COMM_WHY_MISMATCH:
		comm_fail(c, COMM_ERR_MISMATCH, "rank %d found a mismatch with peer "
		    "rank %d (%s)%s%s", f.reporter, f.culprit, addr, where, by);
		break;
	default:
		comm_fail(c, COMM_ERR_RUNTIME, "rank %d (%s) failed%s%s", f.culprit,
		    addr, where, by);
		break;
	}
}

/* Wait for fd to be readable until deadline (0: not at all): 1, or 0
 * when the time is up. */
static int
readable(int fd, double deadline)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	double left = deadline - cli_now();

	return deadline > 0 && left > 0 &&
	    poll(&p, 1, (int)(left * 1000) + 1) > 0;
}

/* Read what is left on one stream of a peer, message by message (each
 * stripe's header says how long it is), looking for an abort. */
int
comm_abort_find(struct comm *c, int peer, int s, double deadline, void *frame)
{
	struct comm_stream *st = &c->net->peers[peer].st[s];
	struct comm_seg *g = c->net->split ? st->cur : st->rq;
	struct comm_hdr h;
	char junk[65536];
	size_t have = 0, skip = 0;
	ssize_t n;

	if (g && g->hdone == COMM_HDR_LEN)
		skip = g->len - g->done;
	else if (g && g->hdone > 0) {
		memcpy(&h, &g->hdr, g->hdone);
		have = g->hdone;
	} else if (c->net->split && st->indone > 0) {
		memcpy(&h, &st->in, st->indone);
		have = st->indone;
	}
	for (;;) {
		if (skip > 0)
			n = recv(st->fd, junk, skip < sizeof junk ? skip :
			    sizeof junk, MSG_DONTWAIT);
		else
			n = recv(st->fd, (char *)&h + have, COMM_HDR_LEN - have,
			    MSG_DONTWAIT);
		if (n < 0 && (errno == EAGAIN || errno == EINTR) &&
		    readable(st->fd, deadline))
			continue;
		if (n <= 0)
			return 0;
		if (skip > 0) {
			skip -= (size_t)n;
			continue;
		}
		have += (size_t)n;
		if (have < COMM_HDR_LEN)
			continue;
		have = 0;
		if (h.magic == COMM_ABORT_MAGIC) {
			memcpy(frame, &h, sizeof h);
			return 1;
		}
		if (h.magic != COMM_HDR_MAGIC || h.len > SIZE_MAX)
			return 0;
		skip = comm_stripe_bytes(c->net, (size_t)h.len, s);
	}
}

int
comm_abort_salvage(struct comm *c, int peer)
{
	struct comm_hdr f;
	int s, closed;

	for (s = 0; s < c->nstreams; s++) {
		struct comm_stream *st = &c->net->peers[peer].st[s];
		if (st->fd >= 0 && st->rx != NULL &&
		    comm_shm_bells(c, peer, s, &closed) > 0)
			return 1;
		if (st->fd >= 0 && st->rx == NULL &&
		    comm_abort_find(c, peer, s, 0, &f)) {
			comm_abort_received(c, peer, &f);
			return 1;
		}
	}
	return 0;
}
