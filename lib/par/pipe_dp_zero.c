/* pipe_dp_zero: ZeRO stages 1 and 2 (Rajbhandari et al., 2020) on the data-
 * parallel axis of a pipeline run. Each of the stage's parameter ranges
 * (r->own) is cut over the stage's D replicas as collx-dp cuts a bucket
 * (dp_zero_cut: ceil(len / D) floats each, the last ones shorter); replica
 * i owns slice i of every range. The range's gradient sums are
 * reduce-scattered (dp_zero.c's, through dp_wire in cfg->dpo.wire), each replica
 * steps its slices with an optimizer sized for them (the state is about
 * 1/D of plain data parallelism's) and the updated slices are
 * allgathered. Stage 1 leaves the reduced slice in its place in the
 * stage's gradients; stage 2 keeps only the reduced slices, compact. The
 * stage's gradient vector itself stays whole: its micro-batches add into
 * it. The optimizers are elementwise, so the result is plain data
 * parallelism's up to the order the reductions add in. Checkpoints take
 * the state whole (pipe_ckpt.c gathers and re-cuts it), so they stay
 * independent of the mesh. */
#include <stdlib.h>
#include <string.h>

#include "cli/util.h"
#include "comm/coll.h"
#include "par/dp_sync.h"
#include "par/pipe.h"
#include "par/pipe_int.h"

struct pipe_dp_zero {
	int stage, rank, world;	/* ZeRO stage; this replica, of D */
	struct dp_wire wire;	/* the reduce-scatter's wire type */
	float *pad;		/* a range padded to D slices of equal size */
	float *grad;		/* stage 2: the reduced slices, compact */
	size_t *goff;		/* stage 2: range q's slice in grad */
	size_t ngrad;		/* floats of the reduced slices */
	size_t *counts;		/* D: the allgather's, of one range */
};

/* Replica i's slice of range q. */
static void
slice(const struct pipe_run *r, int q, int i, size_t *off, size_t *len)
{
	dp_zero_cut(r->own[q].len, r->zero->world, i, off, len);
}

/* Range q's optimizer replaced by one of len floats. */
static int
resize_optim(struct pipe_run *r, int q, size_t len)
{
	struct nn_optim o;
	char e[COLLX_ERRLEN];

	if (nn_optim_init(&o, &r->cfg->optim, len, e, sizeof(e)) < 0) {
		r->kind = TRAIN_ERR_RUNTIME;
		return cli_fail(r->err, r->errlen, "rank %d: %s", r->rank, e);
	}
	nn_optim_free(&r->opt[q]);
	r->opt[q] = o;
	return 0;
}

int
pipe_dp_zero_init(struct pipe_run *r)
{
	const struct pipe_cfg *cfg = r->cfg;
	struct pipe_dp_zero *z;
	size_t pad = 0, maxn = 0, nvec = 0, off, len, n, c;
	char e[COLLX_ERRLEN];
	int q;

	if (cfg->dpo.zero == 0 || pipe_replicas(r) == NULL)
		return 0;
	if ((z = r->zero = calloc(1, sizeof(*z))) == NULL)
		return pipe_oom(r);
	z->stage = cfg->dpo.zero;
	z->rank = comm_rank(cfg->dp);
	z->world = comm_size(cfg->dp);
	z->goff = calloc((size_t)r->nown + 1, sizeof(*z->goff));
	z->counts = calloc((size_t)z->world, sizeof(*z->counts));
	if (z->goff == NULL || z->counts == NULL)
		return pipe_oom(r);
	for (q = 0; q < r->nown; q++) {
		n = r->own[q].len;
		c = (n + (size_t)z->world - 1) / (size_t)z->world;
		if (c * (size_t)z->world != n && c * (size_t)z->world > pad)
			pad = c * (size_t)z->world;
		maxn = n > maxn ? n : maxn;
		if (r->own[q].off + n > nvec)
			nvec = r->own[q].off + n;
		slice(r, q, z->rank, &off, &len);
		z->goff[q] = z->ngrad;
		z->ngrad += len;
		if (resize_optim(r, q, len) < 0)
			return -1;
	}
	if ((pad > 0 && (z->pad = malloc(pad * sizeof(float))) == NULL) ||
	    (z->stage == 2 && (z->grad = calloc(z->ngrad ? z->ngrad : 1,
	    sizeof(float))) == NULL))
		return pipe_oom(r);
	if (dp_wire_init(&z->wire, cfg->dpo.wire, z->rank, z->world, nvec, maxn, e,
	    sizeof(e)) < 0) {
		r->kind = TRAIN_ERR_RUNTIME;
		return cli_fail(r->err, r->errlen, "%s", e);
	}
	return 0;
}

void
pipe_dp_zero_free(struct pipe_run *r)
{
	struct pipe_dp_zero *z = r->zero;

	if (z == NULL)
		return;
	dp_wire_free(&z->wire);
	free(z->pad);
	free(z->grad);
	free(z->goff);
	free(z->counts);
	free(z);
	r->zero = NULL;
}

/* Where range q's reduced slice lies. */
static float *
reduced(const struct pipe_run *r, int q)
{
	struct pipe_dp_zero *z = r->zero;
	size_t off, len;

	if (z->stage == 2)
		return z->grad + z->goff[q];
	slice(r, q, z->rank, &off, &len);
	return r->grads + r->own[q].off + off;
}

int
pipe_dp_zero_reduce(struct pipe_run *r)
{
	struct pipe_dp_zero *z = r->zero;
	struct comm *dc = r->cfg->dp;
	int q;

	for (q = 0; q < r->nown; q++) {
		comm_set_step(dc, "step %ld: reduce-scatter of stage %d's "
		    "gradients, range %d of %d", r->step, r->rank, q + 1,
		    r->nown);
		if (dp_zero_reduce_scatter(&z->wire, dc, r->grads +
		    r->own[q].off, r->own[q].off, r->own[q].len, z->pad,
		    reduced(r, q), COLL_AUTO) < 0)
			return pipe_dp_failed(r);
	}
	return 0;
}

int
pipe_dp_zero_update(struct pipe_run *r, float scale)
{
	struct pipe_dp_zero *z = r->zero;
	struct comm *dc = r->cfg->dp;
	struct pipe_stat *ps = &r->stat[r->step];
	uint64_t sent;
	size_t off, len;
	double t0;
	int q, i;

	for (q = 0; q < r->nown; q++) {
		slice(r, q, z->rank, &off, &len);
		nn_optim_step(&r->opt[q], r->params + r->own[q].off + off,
		    reduced(r, q), scale);
	}
	t0 = cli_now();
	sent = comm_bytes_sent(dc);
	for (q = 0; q < r->nown; q++) {
		float *p = r->params + r->own[q].off;

		for (i = 0; i < z->world; i++)
			slice(r, q, i, &off, &z->counts[i]);
		slice(r, q, z->rank, &off, &len);
		comm_set_step(dc, "step %ld: allgather of stage %d's "
		    "parameters, range %d of %d", r->step, r->rank, q + 1,
		    r->nown);
		if (coll_allgatherv(dc, p + off, p, z->counts, DT_F32,
		    COLL_AUTO) < 0)
			return pipe_dp_failed(r);
	}
	ps->dp += cli_now() - t0;
	ps->dp_sent += (size_t)(comm_bytes_sent(dc) - sent);
	pipe_span(r, 'A', -1, t0, cli_now());
	return 0;
}

size_t
pipe_dp_zero_grad_floats(const struct pipe_run *r, size_t whole)
{
	return r->zero->stage == 2 ? r->zero->ngrad : whole;
}

/* ---- checkpoints: the state whole ------------------------------------- */

float *
pipe_dp_zero_wire_ef(const struct pipe_run *r)
{
	return r->zero->wire.ef;
}

struct nn_optim *
pipe_dp_zero_whole_alloc(struct pipe_run *r)
{
	struct nn_optim *w = calloc((size_t)r->nown + 1, sizeof(*w));
	char e[COLLX_ERRLEN];
	int q;

	if (w == NULL) {
		pipe_oom(r);
		return NULL;
	}
	for (q = 0; q < r->nown; q++)
		if (nn_optim_init(&w[q], &r->cfg->optim, r->own[q].len, e,
		    sizeof(e)) < 0) {
			pipe_dp_zero_whole_free(r, w);
			r->kind = TRAIN_ERR_RUNTIME;
			cli_fail(r->err, r->errlen, "rank %d: %s", r->rank, e);
			return NULL;
		}
	return w;
}

void
pipe_dp_zero_whole_free(struct pipe_run *r, struct nn_optim *w)
{
	for (int q = 0; w != NULL && q < r->nown; q++)
		nn_optim_free(&w[q]);
	free(w);
}

int
pipe_dp_zero_gather(struct pipe_run *r, struct nn_optim *whole)
{
	struct pipe_dp_zero *z = r->zero;
	struct comm *dc = r->cfg->dp;
	size_t off;
	int q, i;

	for (q = 0; q < r->nown; q++) {
		const struct nn_optim *o = &r->opt[q];

		for (i = 0; i < z->world; i++)
			slice(r, q, i, &off, &z->counts[i]);
		comm_set_step(dc, "gathering stage %d's optimizer state, "
		    "range %d of %d", r->rank, q + 1, r->nown);
		if ((o->m != NULL && coll_gatherv(dc, o->m, whole != NULL ?
		    whole[q].m : NULL, z->counts, DT_F32, 0) < 0) ||
		    (o->v != NULL && coll_gatherv(dc, o->v, whole != NULL ?
		    whole[q].v : NULL, z->counts, DT_F32, 0) < 0))
			return pipe_dp_failed(r);
		if (whole != NULL)
			whole[q].t = o->t;
	}
	return 0;
}

void
pipe_dp_zero_take(struct pipe_run *r, const struct nn_optim *whole)
{
	size_t off, len;
	int q;

	for (q = 0; q < r->nown; q++) {
		struct nn_optim *o = &r->opt[q];

		slice(r, q, r->zero->rank, &off, &len);
		if (o->m != NULL)
			memcpy(o->m, whole[q].m + off, len * sizeof(float));
		if (o->v != NULL)
			memcpy(o->v, whole[q].v + off, len * sizeof(float));
		o->t = whole[q].t;
	}
}
