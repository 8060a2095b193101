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

#include "cli/util.h"
#include "comm/auth.h"
#include "comm/ps_int.h"
#include "comm/sock.h"
#include "tensor/dtype.h"

static const char *const mode_names[] = { [PS_SYNC] = "sync",
	[PS_ASYNC] = "async" };

int
ps_mode_parse(const char *s, enum ps_mode *out)
{
	int i = cli_name_index(mode_names, 2, s);

	return i < 0 ? -1 : (*out = (enum ps_mode)i, 0);
}

const char *
ps_mode_name(enum ps_mode m)
{
	return mode_names[m];
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

