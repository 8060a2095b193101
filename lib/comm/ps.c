/* ps: parameter-server protocol. Colocated rounds over comm p2p, and
 * external servers over TCP (a poll loop serving many workers).
 *
 * Wire format over TCP (hosts are little-endian, as everywhere in collx):
 * every message is a 64-byte header, then paylen payload bytes. PUSH and
 * PARAMS carry len f32 values of one shard; WELCOME the layout text; ERROR
 * a one-line reason. A connection starts with the auth handshake and HELLO. */
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/auth.h"
#include "comm/ps.h"
#include "comm/sock.h"
#include "tensor/dtype.h"

#define PS_MAGIC 0x31505843u	/* "CXP1" */
#define PS_HDR 64
#define PS_OPCODE 14		/* comm opcode of a colocated round */
#define PS_TEXT_MAX (16u << 20)	/* layout and error texts */

enum {
	PS_HELLO = 1, PS_WELCOME, PS_PUSH, PS_PARAMS, PS_PULL, PS_DONE,
	PS_ACK, PS_BYE, PS_ERROR
};

struct ps_msg {
	uint32_t type;
	int32_t index;		/* server index, or worker id (-1 none) */
	uint32_t nserv;
	uint64_t round, off, len, total;
	double weight;
	uint64_t paylen;
};

int
ps_mode_parse(const char *s, enum ps_mode *out)
{
	if (strcmp(s, "sync") == 0)
		*out = PS_SYNC;
	else if (strcmp(s, "async") == 0)
		*out = PS_ASYNC;
	else
		return -1;
	return 0;
}

const char *
ps_mode_name(enum ps_mode m)
{
	return m == PS_SYNC ? "sync" : "async";
}

void
ps_shard(size_t total, int nserv, int idx, size_t *off, size_t *len)
{
	/* 128-bit free: total * idx stays far below 2^64 for any real vector */
	size_t a = (size_t)((unsigned long long)total * idx / nserv);
	size_t b = (size_t)((unsigned long long)total * (idx + 1) / nserv);

	*off = a;
	*len = b - a;
}

/* ---- colocated rounds over comm ------------------------------------- */

enum { TAG_GRAD = 1, TAG_WEIGHT, TAG_PARAMS };

/* Post the sends of this rank's pushes to every other server. */
static int
colo_push(struct comm *c, int nserv, const float *gsum, size_t total,
    const double *weight, struct comm_req *rq, int *n)
{
	size_t off, len;
	int j, me = comm_rank(c);

	for (j = 0; j < nserv; j++) {
		if (j == me)
			continue;
		ps_shard(total, nserv, j, &off, &len);
		if (comm_isend(c, j, TAG_GRAD, gsum + off, len * sizeof(float),
		    &rq[(*n)++]) < 0 || comm_isend(c, j, TAG_WEIGHT, weight,
		    sizeof(double), &rq[(*n)++]) < 0)
			return -1;
	}
	return 0;
}

/* As a server: receive every other rank's push for my shard, sum the
 * pushes in rank order so every run rounds alike, and update. */
static int
colo_serve(struct comm *c, int nserv, float *params, const float *gsum,
    size_t total, double weight, ps_update_fn fn, void *ctx,
    struct comm_req *rq, int n)
{
	int me = comm_rank(c), w = comm_size(c), q, k = n;
	size_t off, len, i;
	float *bufs = NULL, *acc;
	double *wts = NULL, wsum = 0;
	int rc = -1;

	ps_shard(total, nserv, me, &off, &len);
	bufs = malloc((size_t)w * (len ? len : 1) * sizeof(float));
	wts = malloc((size_t)w * sizeof(double));
	if (bufs == NULL || wts == NULL) {
		comm_fail(c, COMM_ERR_RUNTIME, "rank %d: out of memory in ps round", me);
		goto out;
	}
	for (q = 0; q < w; q++) {
		if (q == me)
			continue;
		if (comm_irecv(c, q, TAG_GRAD, bufs + (size_t)q * len,
		    len * sizeof(float), &rq[k++]) < 0 ||
		    comm_irecv(c, q, TAG_WEIGHT, &wts[q], sizeof(double),
		    &rq[k++]) < 0)
			goto out;
	}
	if (comm_waitall(c, rq, k) < 0)
		goto out;
	memcpy(bufs + (size_t)me * len, gsum + off, len * sizeof(float));
	wts[me] = weight;
	acc = bufs;
	for (q = 0; q < w; q++) {
		wsum += wts[q];
		for (i = 0; q > 0 && i < len; i++)
			acc[i] += bufs[(size_t)q * len + i];
	}
	fn(ctx, params + off, acc, off, len, wsum > 0 ? (float)(1.0 / wsum) : 0.0f);
	rc = 0;
out:
	free(bufs);
	free(wts);
	return rc;
}

/* Every server sends its new shard to every rank. */
static int
colo_pull(struct comm *c, int nserv, float *params, size_t total,
    struct comm_req *rq)
{
	int me = comm_rank(c), w = comm_size(c), j, n = 0;
	size_t off, len;

	if (me < nserv) {
		ps_shard(total, nserv, me, &off, &len);
		for (j = 0; j < w; j++)
			if (j != me && comm_isend(c, j, TAG_PARAMS, params + off,
			    len * sizeof(float), &rq[n++]) < 0)
				return -1;
	}
	for (j = 0; j < nserv; j++) {
		if (j == me)
			continue;
		ps_shard(total, nserv, j, &off, &len);
		if (comm_irecv(c, j, TAG_PARAMS, params + off, len * sizeof(float),
		    &rq[n++]) < 0)
			return -1;
	}
	return comm_waitall(c, rq, n);
}

int
ps_colo_step(struct comm *c, int nserv, float *params, const float *gsum,
    size_t total, double weight, ps_update_fn fn, void *ctx)
{
	int w = comm_size(c), me = comm_rank(c), n = 0, rc = -1;
	struct comm_req *rq;

	if (nserv < 1 || nserv > w) {
		comm_fail(c, COMM_ERR_MISMATCH, "rank %d: %d parameter servers "
		    "for a world of %d", me, nserv, w);
		return -1;
	}
	rq = calloc(2 * (size_t)(w + nserv), sizeof(*rq));
	if (rq == NULL) {
		comm_fail(c, COMM_ERR_RUNTIME, "rank %d: out of memory", me);
		return -1;
	}
	comm_op_begin(c, PS_OPCODE, "ps", DT_F32,
	    (uint64_t)total * 1000003u + (uint64_t)nserv);
	comm_set_step(c, "push");
	if (colo_push(c, nserv, gsum, total, &weight, rq, &n) < 0)
		goto out;
	if (me < nserv) {
		if (colo_serve(c, nserv, params, gsum, total, weight, fn, ctx,
		    rq, n) < 0)
			goto out;
	} else if (comm_waitall(c, rq, n) < 0)
		goto out;
	comm_set_step(c, "pull");
	rc = colo_pull(c, nserv, params, total, rq);
out:
	free(rq);
	return rc;
}

/* ---- wire messages --------------------------------------------------- */

static void
put32(unsigned char *b, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		b[i] = (unsigned char)(v >> (8 * i));
}

static void
put64(unsigned char *b, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		b[i] = (unsigned char)(v >> (8 * i));
}

static uint32_t
get32(const unsigned char *b)
{
	uint32_t v = 0;

	for (int i = 3; i >= 0; i--)
		v = v << 8 | b[i];
	return v;
}

static uint64_t
get64(const unsigned char *b)
{
	uint64_t v = 0;

	for (int i = 7; i >= 0; i--)
		v = v << 8 | b[i];
	return v;
}

static void
msg_pack(unsigned char *b, const struct ps_msg *m)
{
	uint64_t w;

	memcpy(&w, &m->weight, sizeof(w));
	put32(b, PS_MAGIC);
	put32(b + 4, m->type);
	put32(b + 8, (uint32_t)m->index);
	put32(b + 12, m->nserv);
	put64(b + 16, m->round);
	put64(b + 24, m->off);
	put64(b + 32, m->len);
	put64(b + 40, m->total);
	put64(b + 48, w);
	put64(b + 56, m->paylen);
}

static int
msg_unpack(const unsigned char *b, struct ps_msg *m)
{
	uint64_t w;

	if (get32(b) != PS_MAGIC)
		return -1;
	m->type = get32(b + 4);
	m->index = (int32_t)get32(b + 8);
	m->nserv = get32(b + 12);
	m->round = get64(b + 16);
	m->off = get64(b + 24);
	m->len = get64(b + 32);
	m->total = get64(b + 40);
	w = get64(b + 48);
	memcpy(&m->weight, &w, sizeof(w));
	m->paylen = get64(b + 56);
	return 0;
}

static int
msg_send(int fd, const struct ps_msg *m, const void *pay, double deadline,
    char *err, size_t errlen)
{
	unsigned char h[PS_HDR];

	msg_pack(h, m);
	if (sock_send_all(fd, h, sizeof(h), deadline, err, errlen) < 0)
		return -1;
	if (m->paylen > 0 && sock_send_all(fd, pay, m->paylen, deadline, err,
	    errlen) < 0)
		return -1;
	return 0;
}

static int
msg_recv(int fd, struct ps_msg *m, double deadline, char *err, size_t errlen)
{
	unsigned char h[PS_HDR];

	if (sock_recv_all(fd, h, sizeof(h), deadline, err, errlen) < 0)
		return -1;
	if (msg_unpack(h, m) < 0) {
		snprintf(err, errlen, "not a collx-ps peer (bad message magic)");
		return -1;
	}
	return 0;
}

/* A text payload (layout, error reason), NUL-terminated, malloc'd. */
static char *
text_recv(int fd, uint64_t len, double deadline, char *err, size_t errlen)
{
	char *t;

	if (len > PS_TEXT_MAX) {
		snprintf(err, errlen, "text of %llu bytes is too long",
		    (unsigned long long)len);
		return NULL;
	}
	t = malloc(len + 1);
	if (t == NULL) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	if (sock_recv_all(fd, t, len, deadline, err, errlen) < 0) {
		free(t);
		return NULL;
	}
	t[len] = '\0';
	return t;
}

static int
send_error(int fd, const char *text, double deadline)
{
	struct ps_msg m = { .type = PS_ERROR, .index = -1, .paylen = strlen(text) };
	char e[64];

	return msg_send(fd, &m, text, deadline, e, sizeof(e));
}

/* ---- server ---------------------------------------------------------- */

struct conn {
	int fd;
	char addr[80];
	int worker;		/* id from HELLO, -1 for shell clients */
	int authed, hello, pushed, waiting, done, bye;
	long steps;		/* async pushes applied */
};

struct srv {
	const struct ps_server_cfg *cfg;
	size_t off, len;
	struct conn *conns;
	int nconn, cap;
	float *acc, *buf;	/* round sum; one push's payload */
	float *slots;		/* sync: pushes by worker id, summed in id order */
	char *used;		/* which slots hold this round's push */
	int noslots;		/* too big to stash: sum in arrival order */
	double wsum, round_deadline;
	int npushed, ndone, nlost, failed;
	uint64_t round;
	char fail[320];
};

static void
srv_log(struct srv *s, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	if (s->cfg->log == NULL)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	s->cfg->log(s->cfg->ctx, msg);
}

static int
is_worker(const struct conn *c)
{
	return (c->worker >= 0 || c->pushed) && !c->done && !c->bye;
}

static void
conn_close(struct conn *c)
{
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
	c->waiting = 0;
}

static int
send_params(struct srv *s, struct conn *c)
{
	struct ps_msg m = {
		.type = PS_PARAMS, .index = s->cfg->index, .nserv = s->cfg->nserv,
		.round = s->round, .off = s->off, .len = s->len,
		.total = s->cfg->total, .paylen = s->len * sizeof(float)
	};
	char e[128];

	if (msg_send(c->fd, &m, s->cfg->shard, sock_now() + s->cfg->timeout,
	    e, sizeof(e)) < 0) {
		srv_log(s, "dropped %s: %s", c->addr, e);
		if (is_worker(c))
			s->nlost++;
		conn_close(c);
		return -1;
	}
	return 0;
}

static void
round_reset(struct srv *s)
{
	memset(s->acc, 0, s->len * sizeof(float));
	if (s->used != NULL)
		memset(s->used, 0, (size_t)s->cfg->workers);
	s->wsum = 0;
	s->npushed = 0;
}

#define PS_STASH_MAX ((size_t)1 << 30)	/* bytes of stashed pushes */

/* Keep a worker's push to add it in worker order, so a round's sum does
 * not depend on arrival order; 0 when it cannot be kept. */
static int
stash_push(struct srv *s, const struct conn *c)
{
	size_t n = (size_t)s->cfg->workers * s->len;

	if (c->worker < 0 || c->worker >= s->cfg->workers || s->noslots)
		return 0;
	if (s->slots == NULL) {
		if (n > PS_STASH_MAX / sizeof(float) ||
		    (s->slots = malloc((n ? n : 1) * sizeof(float))) == NULL ||
		    (s->used = calloc((size_t)s->cfg->workers, 1)) == NULL) {
			s->noslots = 1;
			return 0;
		}
	}
	if (s->used[c->worker])
		return 0;
	memcpy(s->slots + (size_t)c->worker * s->len, s->buf,
	    s->len * sizeof(float));
	s->used[c->worker] = 1;
	return 1;
}

/* Add the stashed pushes in worker order. */
static void
stash_sum(struct srv *s)
{
	size_t i;
	int w;

	for (w = 0; s->used != NULL && w < s->cfg->workers; w++)
		for (i = 0; s->used[w] && i < s->len; i++)
			s->acc[i] += s->slots[(size_t)w * s->len + i];
}

/* Sync mode cannot go on: tell every waiting worker, refuse later pushes. */
static void
srv_fail(struct srv *s, const char *why)
{
	int i;

	if (!s->failed) {
		snprintf(s->fail, sizeof(s->fail), "%s", why);
		s->failed = 1;
		srv_log(s, "%s", why);
	}
	for (i = 0; i < s->nconn; i++) {
		struct conn *c = &s->conns[i];

		if (c->fd < 0 || !c->waiting)
			continue;
		c->waiting = 0;
		if (send_error(c->fd, s->fail, sock_now() + s->cfg->timeout) < 0)
			conn_close(c);
	}
	round_reset(s);
}

/* Async staleness: answer held workers now within the bound. */
static void
release_held(struct srv *s)
{
	long min = -1;
	int i;

	for (i = 0; i < s->nconn; i++)
		if (s->conns[i].fd >= 0 && s->conns[i].worker >= 0 &&
		    is_worker(&s->conns[i]) &&
		    (min < 0 || s->conns[i].steps < min))
			min = s->conns[i].steps;
	for (i = 0; i < s->nconn; i++) {
		struct conn *c = &s->conns[i];

		if (c->fd >= 0 && c->waiting && (min < 0 ||
		    s->cfg->staleness < 0 ||
		    c->steps - min <= s->cfg->staleness)) {
			c->waiting = 0;
			send_params(s, c);
		}
	}
}

static void
conn_lost(struct srv *s, struct conn *c, const char *why)
{
	char msg[320];
	int worker = is_worker(c);

	if (!worker) {
		conn_close(c);
		return;
	}
	if (c->worker >= 0)
		snprintf(msg, sizeof(msg), "server %d: worker %d (%s) lost: %s",
		    s->cfg->index, c->worker, c->addr, why);
	else
		snprintf(msg, sizeof(msg), "server %d: worker %s lost: %s",
		    s->cfg->index, c->addr, why);
	conn_close(c);
	s->nlost++;
	if (s->cfg->mode == PS_SYNC)
		srv_fail(s, msg);
	else {
		srv_log(s, "%s; going on without it", msg);
		release_held(s);
	}
}

static void
round_complete(struct srv *s)
{
	int i;

	stash_sum(s);
	s->cfg->update(s->cfg->ctx, s->cfg->shard, s->acc, s->off, s->len,
	    s->wsum > 0 ? (float)(1.0 / s->wsum) : 0.0f);
	s->round++;
	for (i = 0; i < s->nconn; i++) {
		if (s->conns[i].fd >= 0 && s->conns[i].waiting) {
			s->conns[i].waiting = 0;
			send_params(s, &s->conns[i]);
		}
	}
	round_reset(s);
}

static void
on_hello(struct srv *s, struct conn *c, const struct ps_msg *m)
{
	struct ps_msg r = {
		.type = PS_WELCOME, .index = s->cfg->index, .nserv = s->cfg->nserv,
		.round = s->round, .off = s->off, .len = s->len,
		.total = s->cfg->total, .paylen = strlen(s->cfg->layout)
	};
	char e[160];
	int i;

	c->hello = 1;
	c->worker = m->index < 0 ? -1 : m->index;
	for (i = 0; i < s->nconn && c->worker >= 0; i++)
		if (&s->conns[i] != c && s->conns[i].fd >= 0 &&
		    s->conns[i].worker == c->worker && !s->conns[i].done)
			break;
	if (c->worker >= s->cfg->workers || (c->worker >= 0 && i < s->nconn)) {
		snprintf(e, sizeof(e), "server %d: worker id %d refused: %s",
		    s->cfg->index, c->worker, c->worker >= s->cfg->workers ?
		    "the server was started for fewer workers" :
		    "another connection has that id");
		srv_log(s, "%s (%s)", e, c->addr);
		send_error(c->fd, e, sock_now() + s->cfg->timeout);
		c->worker = -1;
		conn_close(c);
		return;
	}
	if (msg_send(c->fd, &r, s->cfg->layout, sock_now() + s->cfg->timeout,
	    e, sizeof(e)) < 0)
		conn_lost(s, c, e);
}

/* Apply or collect one push whose payload is in s->buf. */
static void
apply_push(struct srv *s, struct conn *c, double weight)
{
	size_t i;

	c->pushed = 1;
	if (s->cfg->mode == PS_ASYNC) {
		s->cfg->update(s->cfg->ctx, s->cfg->shard, s->buf, s->off, s->len,
		    weight > 0 ? (float)(1.0 / weight) : 0.0f);
		s->round++;
		c->steps++;
		c->waiting = 1;
		release_held(s);
		return;
	}
	if (!stash_push(s, c))
		for (i = 0; i < s->len; i++)
			s->acc[i] += s->buf[i];
	s->wsum += weight;
	s->npushed++;
	c->waiting = 1;
	s->round_deadline = sock_now() + s->cfg->timeout;
	if (s->npushed >= s->cfg->workers)
		round_complete(s);
}

static void
on_push(struct srv *s, struct conn *c, const struct ps_msg *m)
{
	double deadline = sock_now() + s->cfg->timeout;
	char e[160];

	if (m->off != s->off || m->len != s->len ||
	    m->paylen != s->len * sizeof(float)) {
		snprintf(e, sizeof(e), "server %d: push for [%llu, +%llu) but "
		    "this server holds [%zu, +%zu)", s->cfg->index,
		    (unsigned long long)m->off, (unsigned long long)m->len,
		    s->off, s->len);
		send_error(c->fd, e, deadline);
		conn_close(c);
		return;
	}
	if (sock_recv_all(c->fd, s->buf, m->paylen, deadline, e, sizeof(e)) < 0) {
		conn_lost(s, c, e);
		return;
	}
	if (s->failed) {
		send_error(c->fd, s->fail, deadline);
		return;
	}
	if (c->waiting) {
		send_error(c->fd, "pushed twice in one round", deadline);
		conn_close(c);
		return;
	}
	apply_push(s, c, m->weight);
}

static void
on_message(struct srv *s, struct conn *c)
{
	struct ps_msg m, ack = { .type = PS_ACK, .index = s->cfg->index };
	char e[160];
	double deadline = sock_now() + s->cfg->timeout;

	/* The handshake waits for the peer's first bytes, so a silent
	 * connection never holds up the others. */
	if (!c->authed) {
		if (auth_server(c->fd, s->cfg->token, deadline, e, sizeof(e)) < 0) {
			srv_log(s, "refused %s: %s", c->addr, e);
			conn_close(c);
		}
		c->authed = 1;
		return;
	}
	if (msg_recv(c->fd, &m, deadline, e, sizeof(e)) < 0) {
		conn_lost(s, c, e);
		return;
	}
	if (!c->hello && m.type != PS_HELLO) {
		conn_lost(s, c, "first message is not HELLO");
		return;
	}
	if (m.type != PS_PUSH && m.paylen != 0) {
		conn_lost(s, c, "unexpected payload");
		return;
	}
	switch (m.type) {
	case PS_HELLO:
		on_hello(s, c, &m);
		break;
	case PS_PUSH:
		on_push(s, c, &m);
		break;
	case PS_PULL:
		send_params(s, c);
		break;
	case PS_DONE:
		c->done = 1;
		s->ndone++;
		if (msg_send(c->fd, &ack, NULL, deadline, e, sizeof(e)) < 0)
			conn_close(c);
		break;
	case PS_BYE:
		c->bye = 1;
		conn_close(c);
		break;
	default:
		snprintf(e, sizeof(e), "unknown message type %u", m.type);
		conn_lost(s, c, e);
	}
}

static void
on_accept(struct srv *s)
{
	struct sock_addr peer;
	struct conn *c;
	char e[160];
	int fd;

	fd = sock_accept(s->cfg->lfd, sock_now() + s->cfg->timeout, &peer, e,
	    sizeof(e));
	if (fd < 0)
		return;
	if (s->nconn == s->cap) {
		int cap = s->cap ? 2 * s->cap : 16;
		void *p = realloc(s->conns, (size_t)cap * sizeof(*s->conns));

		if (p == NULL) {
			srv_log(s, "refused %s: out of memory", peer.str);
			close(fd);
			return;
		}
		s->conns = p;
		s->cap = cap;
	}
	c = &s->conns[s->nconn++];
	memset(c, 0, sizeof(*c));
	c->fd = fd;
	c->worker = -1;
	snprintf(c->addr, sizeof(c->addr), "%s", peer.str);
	sock_tune(fd);
}

/* Drop closed connections from the table. */
static void
conns_compact(struct srv *s)
{
	int i, j = 0;

	for (i = 0; i < s->nconn; i++)
		if (s->conns[i].fd >= 0)
			s->conns[j++] = s->conns[i];
	s->nconn = j;
}

static int
live_workers(const struct srv *s)
{
	int i, n = 0;

	for (i = 0; i < s->nconn; i++)
		n += s->conns[i].fd >= 0 && is_worker(&s->conns[i]);
	return n;
}

/* 1: finished well, -1: finished after a loss, 0: go on. */
static int
srv_finished(struct srv *s, char *err, size_t errlen)
{
	if (*s->cfg->stop || s->ndone >= s->cfg->workers) {
		if (s->failed || s->nlost > 0)
			goto lost;
		return 1;
	}
	if (s->failed && live_workers(s) == 0)
		goto lost;
	if (s->nlost > 0 && s->ndone + s->nlost >= s->cfg->workers &&
	    live_workers(s) == 0)
		goto lost;
	return 0;
lost:
	snprintf(err, errlen, "%s", s->failed ? s->fail : "a worker was lost");
	return -1;
}

/* One poll over the listener and every connection. */
static int
srv_poll(struct srv *s, struct pollfd *pfd)
{
	int i, n = 1, ms = 200, rc;

	pfd[0].fd = s->cfg->lfd;
	pfd[0].events = POLLIN;
	for (i = 0; i < s->nconn; i++) {
		pfd[n].fd = s->conns[i].fd;
		pfd[n++].events = POLLIN;
	}
	rc = poll(pfd, (nfds_t)n, ms);
	if (rc < 0 && errno != EINTR)
		return -1;
	if (s->cfg->mode == PS_SYNC && s->npushed > 0 &&
	    sock_now() > s->round_deadline) {
		char why[200];

		snprintf(why, sizeof(why), "server %d: round %llu timed out "
		    "after %gs with %d of %d workers pushed", s->cfg->index,
		    (unsigned long long)s->round, s->cfg->timeout, s->npushed,
		    s->cfg->workers);
		srv_fail(s, why);
	}
	if (rc <= 0)
		return 0;
	for (i = 0; i < s->nconn && i + 1 < n; i++)
		if (s->conns[i].fd >= 0 && s->conns[i].fd == pfd[i + 1].fd &&
		    (pfd[i + 1].revents & (POLLIN | POLLHUP | POLLERR)))
			on_message(s, &s->conns[i]);
	if (pfd[0].revents & POLLIN)
		on_accept(s);
	return 0;
}

int
ps_serve(const struct ps_server_cfg *cfg, char *err, size_t errlen)
{
	struct srv s = { .cfg = cfg };
	struct pollfd *pfd = NULL;
	int i, rc = -1;

	ps_shard(cfg->total, cfg->nserv, cfg->index, &s.off, &s.len);
	s.acc = calloc(s.len + 1, sizeof(float));
	s.buf = calloc(s.len + 1, sizeof(float));
	if (s.acc == NULL || s.buf == NULL) {
		snprintf(err, errlen, "out of memory for a shard of %zu", s.len);
		goto out;
	}
	for (;;) {
		rc = srv_finished(&s, err, errlen);
		if (rc != 0)
			break;
		free(pfd);
		pfd = calloc((size_t)s.nconn + 1, sizeof(*pfd));
		if (pfd == NULL || srv_poll(&s, pfd) < 0) {
			snprintf(err, errlen, "poll: %s", strerror(errno));
			rc = -1;
			break;
		}
		conns_compact(&s);
	}
	rc = rc > 0 ? 0 : -1;
	for (i = 0; i < s.nconn; i++) {
		if (s.conns[i].waiting)
			send_error(s.conns[i].fd, "server stopping",
			    sock_now() + 1);
		conn_close(&s.conns[i]);
	}
out:
	free(pfd);
	free(s.conns);
	free(s.acc);
	free(s.buf);
	free(s.slots);
	free(s.used);
	return rc;
}

/* ---- client ---------------------------------------------------------- */

struct ps_link {
	int fd;
	char addr[128];
	size_t off, len;
};

struct ps_client {
	int n;
	struct ps_link *srv;
	size_t total;
	char *layout;
	double timeout;
	float *scratch;		/* a discarded reply */
};

static void client_free(struct ps_client *c, int bye);

static int
link_fail(const struct ps_link *l, const char *why, char *err, size_t errlen)
{
	snprintf(err, errlen, "server %s: %s", l->addr, why);
	return -1;
}

/* Receive a reply of type want; an ERROR reply becomes the error text. */
static int
link_reply(const struct ps_client *c, const struct ps_link *l, uint32_t want,
    struct ps_msg *m, char *err, size_t errlen)
{
	double deadline = sock_now() + c->timeout;
	char e[200], *t;

	if (msg_recv(l->fd, m, deadline, e, sizeof(e)) < 0)
		return link_fail(l, e, err, errlen);
	if (m->type == PS_ERROR) {
		t = text_recv(l->fd, m->paylen, deadline, e, sizeof(e));
		link_fail(l, t ? t : e, err, errlen);
		free(t);
		return -1;
	}
	if (m->type != want || (want == PS_ACK && m->paylen != 0)) {
		snprintf(e, sizeof(e), "unexpected reply type %u", m->type);
		return link_fail(l, e, err, errlen);
	}
	return 0;
}

/* Connect, prove the token, say hello; keep the layout of the first. */
static int
link_open(struct ps_client *c, int i, int worker, const char *token,
    char *err, size_t errlen)
{
	struct ps_link *l = &c->srv[i];
	struct ps_msg m = { .type = PS_HELLO, .index = worker };
	double deadline = sock_now() + c->timeout;
	char e[200], *t;

	l->fd = sock_connect_hostport(l->addr, deadline, e, sizeof(e));
	if (l->fd < 0)
		return link_fail(l, e, err, errlen);
	sock_tune(l->fd);
	if (auth_client(l->fd, token, deadline, e, sizeof(e)) < 0 ||
	    msg_send(l->fd, &m, NULL, deadline, e, sizeof(e)) < 0)
		return link_fail(l, e, err, errlen);
	if (link_reply(c, l, PS_WELCOME, &m, err, errlen) < 0)
		return -1;
	t = text_recv(l->fd, m.paylen, deadline, e, sizeof(e));
	if (t == NULL)
		return link_fail(l, e, err, errlen);
	if (i == 0) {
		c->layout = t;
		c->total = m.total;
	} else
		free(t);
	if ((int)m.nserv != c->n || m.index != i || m.total != c->total) {
		snprintf(e, sizeof(e), "it serves shard %d of %u of %llu elements, "
		    "but it is server %d of %d in the list", m.index, m.nserv,
		    (unsigned long long)m.total, i, c->n);
		return link_fail(l, e, err, errlen);
	}
	l->off = m.off;
	l->len = m.len;
	return 0;
}

static int
split_servers(struct ps_client *c, const char *servers, char *err,
    size_t errlen)
{
	const char *p = servers, *q;
	int n = 1;

	for (q = servers; *q; q++)
		n += *q == ',';
	c->srv = calloc((size_t)n, sizeof(*c->srv));
	if (c->srv == NULL) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	for (c->n = 0; c->n < n; c->n++) {
		size_t len = strcspn(p, ",");

		c->srv[c->n].fd = -1;
		if (len == 0 || len >= sizeof(c->srv[c->n].addr)) {
			snprintf(err, errlen, "bad server list '%s'", servers);
			return -1;
		}
		memcpy(c->srv[c->n].addr, p, len);
		p += len + (p[len] == ',');
	}
	return 0;
}

int
ps_client_open(struct ps_client **out, const char *servers, int worker,
    const char *token, double timeout, char *err, size_t errlen)
{
	struct ps_client *c = calloc(1, sizeof(*c));
	size_t next = 0;
	int i;

	*out = NULL;
	if (c == NULL) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	c->timeout = timeout;
	if (split_servers(c, servers, err, errlen) < 0)
		goto fail;
	for (i = 0; i < c->n; i++) {
		if (link_open(c, i, worker, token, err, errlen) < 0)
			goto fail;
		if (c->srv[i].off != next)
			goto gap;
		next += c->srv[i].len;
	}
	if (next != c->total)
		goto gap;
	c->scratch = malloc((c->total + 1) * sizeof(float));
	if (c->scratch == NULL) {
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	*out = c;
	return 0;
gap:
	snprintf(err, errlen, "the shards of servers %s do not tile one vector "
	    "(started with different models or server counts?)", servers);
fail:
	client_free(c, 1);
	return -1;
}

size_t
ps_client_total(const struct ps_client *c)
{
	return c->total;
}

const char *
ps_client_layout(const struct ps_client *c)
{
	return c->layout;
}

/* Read the PARAMS replies of every server into params (or scratch). */
static int
recv_params(struct ps_client *c, float *params, char *err, size_t errlen)
{
	struct ps_msg m;
	char e[200];
	int i;

	if (params == NULL)
		params = c->scratch;
	for (i = 0; i < c->n; i++) {
		struct ps_link *l = &c->srv[i];

		if (link_reply(c, l, PS_PARAMS, &m, err, errlen) < 0)
			return -1;
		if (m.off != l->off || m.len != l->len ||
		    m.paylen != l->len * sizeof(float))
			return link_fail(l, "reply of the wrong shard", err, errlen);
		if (sock_recv_all(l->fd, params + l->off, m.paylen,
		    sock_now() + c->timeout, e, sizeof(e)) < 0)
			return link_fail(l, e, err, errlen);
	}
	return 0;
}

int
ps_client_push(struct ps_client *c, const float *gsum, double weight,
    float *params, char *err, size_t errlen)
{
	char e[200];
	int i;

	for (i = 0; i < c->n; i++) {
		struct ps_link *l = &c->srv[i];
		struct ps_msg m = {
			.type = PS_PUSH, .index = i, .nserv = (uint32_t)c->n,
			.off = l->off, .len = l->len, .total = c->total,
			.weight = weight, .paylen = l->len * sizeof(float)
		};

		if (msg_send(l->fd, &m, gsum + l->off, sock_now() + c->timeout,
		    e, sizeof(e)) < 0)
			return link_fail(l, e, err, errlen);
	}
	return recv_params(c, params, err, errlen);
}

/* Send a payload-less request of type to every server. */
static int
send_all_servers(struct ps_client *c, uint32_t type, char *err, size_t errlen)
{
	char e[200];
	int i;

	for (i = 0; i < c->n; i++) {
		struct ps_msg m = { .type = type, .index = i };

		if (msg_send(c->srv[i].fd, &m, NULL, sock_now() + c->timeout, e,
		    sizeof(e)) < 0)
			return link_fail(&c->srv[i], e, err, errlen);
	}
	return 0;
}

int
ps_client_pull(struct ps_client *c, float *params, char *err, size_t errlen)
{
	if (send_all_servers(c, PS_PULL, err, errlen) < 0)
		return -1;
	return recv_params(c, params, err, errlen);
}

int
ps_client_done(struct ps_client *c, char *err, size_t errlen)
{
	struct ps_msg m;
	int i;

	if (send_all_servers(c, PS_DONE, err, errlen) < 0)
		return -1;
	for (i = 0; i < c->n; i++)
		if (link_reply(c, &c->srv[i], PS_ACK, &m, err, errlen) < 0)
			return -1;
	return 0;
}

static void
client_free(struct ps_client *c, int bye)
{
	struct ps_msg m = { .type = PS_BYE };
	char e[64];
	int i;

	if (c == NULL)
		return;
	for (i = 0; i < c->n; i++) {
		if (c->srv[i].fd < 0)
			continue;
		if (bye)
			msg_send(c->srv[i].fd, &m, NULL, sock_now() + 1, e,
			    sizeof(e));
		close(c->srv[i].fd);
	}
	free(c->srv);
	free(c->layout);
	free(c->scratch);
	free(c);
}

void
ps_client_close(struct ps_client *c)
{
	client_free(c, 1);
}

void
ps_client_abort(struct ps_client *c)
{
	client_free(c, 0);
}
