/* ps_server: an external parameter server: one poll loop serving many
 * workers and shell clients, sync rounds or async pushes. */
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/auth.h"
#include "comm/ps_int.h"
#include "comm/sock.h"
#include "tensor/dtype.h"

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
	char msg[COLLX_ERRLEN];
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

static void conn_lost(struct srv *s, struct conn *c, const char *why);
static void on_worker_error(struct srv *s, struct conn *c,
    const struct ps_msg *m);

/* A worker this server could not send to may have said why it failed just
 * before it left: its ERROR message, still unread, names the cause. */
static void
send_lost(struct srv *s, struct conn *c, const char *why)
{
	struct ps_msg m;
	char e[COLLX_ERRLEN];

	if (ps_msg_recv(c->fd, &m, cli_now() + 0.2, e, sizeof(e)) == 0 &&
	    m.type == PS_ERROR)
		on_worker_error(s, c, &m);
	else
		conn_lost(s, c, why);
}

static int
send_params(struct srv *s, struct conn *c)
{
	struct ps_msg m = {
		.type = PS_PARAMS, .index = s->cfg->index, .nserv = s->cfg->nserv,
		.round = s->round, .off = s->off, .len = s->len,
		.total = s->cfg->total, .paylen = s->len * sizeof(float)
	};
	char e[COLLX_ERRLEN];

	if (ps_msg_send(c->fd, &m, s->cfg->shard, cli_now() + s->cfg->timeout,
	    e, sizeof(e)) < 0) {
		send_lost(s, c, e);
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

	/* Not logged: the failure is what ps_serve returns. */
	if (!s->failed) {
		snprintf(s->fail, sizeof(s->fail), "%s", why);
		s->failed = 1;
	}
	for (i = 0; i < s->nconn; i++) {
		struct conn *c = &s->conns[i];

		if (c->fd < 0 || !c->waiting)
			continue;
		c->waiting = 0;
		if (ps_send_error(c->fd, s->fail, cli_now() + s->cfg->timeout) < 0)
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
	char msg[COLLX_ERRLEN];
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
	char e[COLLX_ERRLEN];
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
		ps_send_error(c->fd, e, cli_now() + s->cfg->timeout);
		c->worker = -1;
		conn_close(c);
		return;
	}
	if (ps_msg_send(c->fd, &r, s->cfg->layout, cli_now() + s->cfg->timeout,
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
	s->round_deadline = cli_now() + s->cfg->timeout;
	if (s->npushed >= s->cfg->workers)
		round_complete(s);
}

static void
on_push(struct srv *s, struct conn *c, const struct ps_msg *m)
{
	double deadline = cli_now() + s->cfg->timeout;
	char e[COLLX_ERRLEN];

	if (m->off != s->off || m->len != s->len ||
	    m->paylen != s->len * sizeof(float)) {
		snprintf(e, sizeof(e), "server %d: push for [%llu, +%llu) but "
		    "this server holds [%zu, +%zu)", s->cfg->index,
		    (unsigned long long)m->off, (unsigned long long)m->len,
		    s->off, s->len);
		ps_send_error(c->fd, e, deadline);
		conn_close(c);
		return;
	}
	if (comm_sock_recv_all(c->fd, s->buf, m->paylen, deadline, e, sizeof(e)) < 0) {
		conn_lost(s, c, e);
		return;
	}
	if (s->failed) {
		ps_send_error(c->fd, s->fail, deadline);
		return;
	}
	if (c->waiting) {
		ps_send_error(c->fd, "pushed twice in one round", deadline);
		conn_close(c);
		return;
	}
	apply_push(s, c, m->weight);
}

/* A worker that failed says why before it leaves (a lost server, most
 * likely), so that cause is this server's too. */
static void
on_worker_error(struct srv *s, struct conn *c, const struct ps_msg *m)
{
	char e[COLLX_ERRLEN], *why;

	why = ps_text_recv(c->fd, m->paylen, cli_now() + s->cfg->timeout, e,
	    sizeof(e));
	snprintf(e, sizeof(e), "it failed: %s", why ? why : "no reason given");
	free(why);
	conn_lost(s, c, e);
}

static void
on_message(struct srv *s, struct conn *c)
{
	struct ps_msg m, ack = { .type = PS_ACK, .index = s->cfg->index };
	char e[COLLX_ERRLEN];
	double deadline = cli_now() + s->cfg->timeout;

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
	if (ps_msg_recv(c->fd, &m, deadline, e, sizeof(e)) < 0) {
		conn_lost(s, c, e);
		return;
	}
	if (!c->hello && m.type != PS_HELLO) {
		conn_lost(s, c, "first message is not HELLO");
		return;
	}
	if (m.type == PS_ERROR) {
		on_worker_error(s, c, &m);
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
		if (ps_msg_send(c->fd, &ack, NULL, deadline, e, sizeof(e)) < 0)
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
	struct comm_sock_addr peer;
	struct conn *c;
	char e[COLLX_ERRLEN];
	int fd;

	fd = comm_sock_accept(s->cfg->lfd, cli_now() + s->cfg->timeout, &peer, e,
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
	comm_sock_tune(fd);
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
	    cli_now() > s->round_deadline) {
		char why[COLLX_ERRLEN];

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
			ps_send_error(s.conns[i].fd, "server stopping",
			    cli_now() + 1);
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

