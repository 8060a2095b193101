/* comm: the group object, its errors and operation labels. Rendezvous is
 * in rendezvous.c, the point-to-point transport in transport.c. */
#include "comm/comm_impl.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Busy-polling before poll() sleeps, in microseconds (COLLX_SPIN_US sets
 * it, 0 turns it off; default COMM_SPIN_US). A 4 KiB allreduce of 2
 * ranks on 2 cores took 2 us spinning against 10-30 us sleeping in
 * poll(). When the host runs more ranks than it has cores, a spinner
 * holds the core its peer needs, so it yields the core on every look
 * instead of pausing: 4 ranks on 2 cores took 15 us (median) that way,
 * 70 us sleeping at once, 25-300 us spinning longer or without yielding. */
#define COMM_SPIN_US 100

/* The spin, once the ranks are known: the ranks of this machine (of any
 * network namespace: an emulated cluster's hosts share its cores)
 * against its cores. */
void
comm_spin_default(struct comm *c)
{
	const char *s = getenv("COLLX_SPIN_US");
	long cores = sysconf(_SC_NPROCESSORS_ONLN);
	int local = c->machine_ranks > 0 ? c->machine_ranks : 1;

	c->spin_yield = cores >= 1 && local > cores;
	c->spin_us = s != NULL && *s != '\0' ? (atoi(s) > 0 ? atoi(s) : 0) :
	    COMM_SPIN_US;
}

static int
comm_alloc(struct comm **out, const struct comm_options *o,
    char *err, size_t errlen)
{
	struct comm *c;
	int p, s;

	if (o->world < 1 || o->rank < 0 || o->rank >= o->world) {
		snprintf(err, errlen, "rank %d is not within world size %d", o->rank, o->world);
		return -1;
	}
	c = calloc(1, sizeof *c);
	if (!c || !(c->peers = calloc((size_t)o->world, sizeof *c->peers)) ||
	    !(c->pfd = calloc((size_t)o->world * COMM_MAX_STREAMS, sizeof *c->pfd)) ||
	    !(c->pfd_who = calloc((size_t)o->world * COMM_MAX_STREAMS,
	    sizeof *c->pfd_who)))
		goto nomem;
	if (o->token && o->token[0] && !(c->token = strdup(o->token)))
		goto nomem;
	c->rank = o->rank;
	c->world = o->world;
	c->net = c;
	c->next_ctx = 1;
	c->nstreams = 1;
	c->timeout = o->timeout > 0 ? o->timeout : 60;
	c->opcode = -1;
	c->dtype = -1;
	auth_sha256(o->job ? o->job : "", o->job ? strlen(o->job) : 0, c->job);
	for (p = 0; p < o->world; p++)
		for (s = 0; s < COMM_MAX_STREAMS; s++) {
			struct comm_stream *st = &c->peers[p].st[s];
			st->fd = -1;
			st->sq_tail = &st->sq;
			st->rq_tail = &st->rq;
			st->ux_tail = &st->ux;
		}
	*out = c;
	return 0;
nomem:
	if (c) {
		free(c->peers);
		free(c->pfd);
		free(c->pfd_who);
	}
	free(c);
	snprintf(err, errlen, "out of memory");
	return -1;
}

int
comm_open_ex(struct comm **out, const struct comm_options *o,
    enum comm_errkind *kind, char *err, size_t errlen)
{
	struct comm *c;

	*out = NULL;
	if (kind)
		*kind = COMM_ERR_RUNTIME;
	if (comm_alloc(&c, o, err, errlen) < 0)
		return -1;
	if (comm_fr_open(c, o->job_id, err, errlen) < 0 ||
	    comm_debug_open(c, err, errlen) < 0) {
		comm_close(c);
		return -1;
	}
	/* a rank started again meets the others in comm_grow (grow.c) */
	if (c->world > 1 && (comm_connect_all(c, o) < 0 || (!o->rejoin &&
	    (comm_host_exchange(c, !o->no_shm, o->host) < 0 ||
	    comm_shm_setup(c) < 0)))) {
		snprintf(err, errlen, "%s", c->err);
		if (kind)
			*kind = c->kind;
		comm_close(c);
		return -1;
	}
	if (c->world == 1)
		snprintf(c->peers[0].addr, sizeof c->peers[0].addr, "self");
	comm_spin_default(c);
	c->meshed = c->world > 1 && !o->rejoin;
	comm_debug_joined(c);
	if (kind)
		*kind = COMM_ERR_NONE;
	*out = c;
	return 0;
}

int
comm_open(struct comm **out, const struct comm_options *o, char *err,
    size_t errlen)
{
	return comm_open_ex(out, o, NULL, err, errlen);
}

void
comm_close(struct comm *c)
{
	int p, s;

	if (!c)
		return;
	coll_hier_free(c);
	if (c->net != c) {
		comm_close_sub(c);
		return;
	}
	comm_free_queues(c);
	comm_grow_free(c);
	comm_shm_close(c);
	comm_fr_close(c);
	comm_debug_close(c);
	for (p = 0; p < c->world; p++)
		for (s = 0; s < COMM_MAX_STREAMS; s++)
			if (c->peers[p].st[s].fd >= 0)
				close(c->peers[p].st[s].fd);
	free((char *)c->token);
	free(c->peers);
	free(c->pfd);
	free(c->pfd_who);
	free(c->host);
	free(c->pid);
	free(c->shm_ok);
	free(c->gone);
	free(c);
}

int
comm_rank(const struct comm *c)
{
	return c->rank;
}

int
comm_size(const struct comm *c)
{
	return c->world;
}

int
comm_streams(const struct comm *c)
{
	return c->nstreams;
}

const char *
comm_peer_addr(const struct comm *c, int peer)
{
	if (peer < 0 || peer >= c->world)
		return "?";
	return c->net->peers[comm_net_rank(c, peer)].addr;
}

const char *
comm_error(const struct comm *c)
{
	return c->net->kind == COMM_ERR_NONE ? "no error" : c->net->err;
}

enum comm_errkind
comm_errkind(const struct comm *c)
{
	return c->net->kind;
}

static void
comm_vfail(struct comm *c, enum comm_errkind kind, const char *fmt,
    va_list ap)
{
	struct comm *net = c->net;
	int n;

	/* The first failure is the cause; later ones are its consequences.
	 * A failure in a sub-group breaks the links it shares, so it is
	 * net's, and ranks are named as net knows them. */
	if (net->kind != COMM_ERR_NONE)
		return;
	/* A failure no peer caused is this rank's own (or its data's). */
	comm_cause_set(c, net->rank, kind == COMM_ERR_MISMATCH ? COMM_WHY_MISMATCH :
	    COMM_WHY_LOCAL, 0);
	net->kind = kind == COMM_ERR_NONE ? COMM_ERR_RUNTIME : kind;
	n = snprintf(net->err, sizeof net->err, "rank %d: ", net->rank);
	vsnprintf(net->err + n, sizeof net->err - (size_t)n, fmt, ap);
	/* Before this rank leaves, every peer learns why; then its flight
	 * recorder says what it was doing. */
	comm_abort_send(net);
	comm_debug(net, COMM_DEBUG_WARN, "failed: %s", net->err);
	comm_fr_fail(c);
}

void
comm_fail(struct comm *c, enum comm_errkind kind, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	comm_vfail(c, kind, fmt, ap);
	va_end(ap);
}

void
comm_log(const struct comm *c, const char *fmt, ...)
{
	char msg[COLLX_ERRLEN];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	fprintf(stderr, "%s: rank %d: %s\n", program_invocation_short_name,
	    c->net->rank, msg);
	if (c->net->dbg != NULL)
		comm_debug(c, COMM_DEBUG_WARN, "%s", msg);
}

void
comm_op_begin(struct comm *c, int opcode, const char *name, int dtype,
    uint64_t sig)
{
	c->seq++;
	c->opcode = opcode;
	c->dtype = dtype;
	c->sig = sig;
	snprintf(c->opname, sizeof c->opname, "%s", name ? name : "");
	c->step[0] = '\0';
	comm_fr_begin(c);
}

void
comm_set_step(struct comm *c, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(c->step, sizeof c->step, fmt, ap);
	va_end(ap);
}

const char *
comm_where(const struct comm *c, char *buf, size_t len)
{
	if (c->step[0] && c->opname[0])
		snprintf(buf, len, " during %s of %s", c->step, c->opname);
	else if (c->step[0] || c->opname[0])
		snprintf(buf, len, " during %s", c->step[0] ? c->step : c->opname);
	else
		buf[0] = '\0';
	return buf;
}

void
comm_set_spin(struct comm *c, int us)
{
	c->spin_us = us > 0 ? us : 0;
}

int
comm_spin(const struct comm *c)
{
	return c->spin_us;
}
