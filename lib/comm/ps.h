/* ps: a parameter server for one flat f32 vector sharded over servers.
 * It knows nothing of models: what a server does with the summed gradient
 * is the caller's update callback (an optimizer on that range).
 *
 * Shards are contiguous and balanced: with T elements over S servers,
 * server i holds [i*T/S, (i+1)*T/S). Workers push gradient SUMS with the
 * number of samples they cover (the weight); a server divides the total sum
 * by the total weight, so the result equals the full-batch mean gradient.
 *
 * Two transports:
 * - colocated, inside a comm group: ranks 0..S-1 serve; ps_colo_step() is
 *   one bulk-synchronous round (push, update, pull) over comm p2p;
 * - external, over TCP (collx-ps serve): ps_serve() runs a server, and
 *   ps_client_*() talk to a list of them. Every wait has a deadline. */
#ifndef COLLX_PS_H
#define COLLX_PS_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "comm/comm.h"

/* Apply gradient sum gsum (scale = 1 / total weight) to p[0..len), which
 * is elements [off, off+len) of the whole vector. */
typedef void (*ps_update_fn)(void *ctx, float *p, const float *gsum,
    size_t off, size_t len, float scale);

enum ps_mode {
	PS_SYNC,	/* rounds: every worker pushes once, then one update */
	PS_ASYNC	/* each push is applied as it arrives */
};

int ps_mode_parse(const char *s, enum ps_mode *out);
const char *ps_mode_name(enum ps_mode m);

/* Shard idx of nserv over total elements: [*off, *off + *len). */
void ps_shard(size_t total, int nserv, int idx, size_t *off, size_t *len);

/*
 * Colocated bulk-synchronous round over comm: every rank passes its
 * gradient sum (whole vector) and weight; rank i < nserv sums the pushes
 * for shard i in rank order, calls fn on it, and sends the new values to
 * every rank. On return params (whole vector) is the same on every rank.
 * 0, or -1 with the reason in comm_error(c).
 */
int ps_colo_step(struct comm *c, int nserv, float *params, const float *gsum,
    size_t total, double weight, ps_update_fn fn, void *ctx);

/* ---- external servers over TCP -------------------------------------- */

struct ps_server_cfg {
	int lfd;			/* listening socket (comm_sock_listen) */
	int index, nserv;		/* this server's shard of nserv */
	size_t total;			/* elements of the whole vector */
	float *shard;			/* ps_shard() elements, updated in place */
	const char *layout;		/* opaque text sent to every client */
	int workers;			/* workers taking part (sync round size) */
	enum ps_mode mode;
	int staleness;			/* async: max rounds ahead of the slowest; <0 off */
	double timeout;			/* seconds, for every wait on a peer */
	const char *token;		/* shared secret or NULL */
	ps_update_fn update;
	void *ctx;
	volatile sig_atomic_t *stop;	/* becomes non-zero: finish (0) */
	void (*log)(void *ctx, const char *msg);	/* events, or NULL */
};

/*
 * Serve until every worker has said done or a stop request arrives
 * (returns 0), or until every worker is gone after one was lost (-1 with
 * the reason). A lost worker (closed without done, or silent for the
 * timeout inside a round) fails the current sync round: the workers waiting
 * in it get an error, and later pushes too; async mode goes on without it.
 */
int ps_serve(const struct ps_server_cfg *cfg, char *err, size_t errlen);

struct ps_client;

/* Connect to every server of "HOST:PORT,HOST:PORT,..." (in shard order)
 * and check that their shards tile one vector. worker: this worker's id
 * (>= 0, counted in staleness), or -1 for a one-shot shell client. While
 * a server cannot be reached, note (comm_note_fn; NULL: silent) says which
 * one it is still trying. */
int ps_client_open(struct ps_client **out, const char *servers, int worker,
    const char *token, double timeout, comm_note_fn note, void *note_ctx,
    char *err, size_t errlen);
/* Elements of the whole vector, and the layout text of the first server. */
size_t ps_client_total(const struct ps_client *c);
const char *ps_client_layout(const struct ps_client *c);
/* Push a gradient sum over weight samples to every shard's server; wait
 * for the round and store the new values in params (NULL: discard). */
int ps_client_push(struct ps_client *c, const float *gsum, double weight,
    float *params, char *err, size_t errlen);
/* The current values of every shard. */
int ps_client_pull(struct ps_client *c, float *params, char *err,
    size_t errlen);
/* This worker has finished: counts toward the servers' end. */
int ps_client_done(struct ps_client *c, char *err, size_t errlen);
/* Says goodbye (not a loss) and closes; NULL is fine. */
void ps_client_close(struct ps_client *c);
/* Closes without goodbye: the servers count this worker lost, and with
 * why (not NULL) they are first told why it failed. NULL c is fine. */
void ps_client_abort(struct ps_client *c, const char *why);

#endif
