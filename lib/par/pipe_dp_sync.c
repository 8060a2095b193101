/*
 * pipe_dp_sync: data parallelism for slow links on a pipeline's DP axis
 * (cfg->dpo.wire, cfg->dpo.powersgd, cfg->dpo.sync_every), by collx-dp's own
 * algorithms (dp_sync.h) over the stage's vector (r->params, r->grads:
 * the model's, or a tp_stage's). Its buckets are the parameter ranges the
 * stage owns (r->own; a tp_stage's one), its PowerSGD matrices the
 * stage's tensors where the vector holds them (so PowerSGD is built for a
 * stage of one TP rank only), their first Qs those collx-dp draws with
 * --seed 0 for the model's tensor of the same name. The rest of the step
 * is the runner's: pipe_dp_sync sums the loss, the update steps every
 * owned range.
 *
 * PowerSGD and local SGD act on each tensor alone, so with two replicas,
 * where every sum is a + b whatever the order, a stage's parameters end
 * bitwise as collx-dp's with the same options on the same gradients.
 * int8's chunks and blocks are cut from each bucket (dp_wire.c): from the
 * stage's, not collx-dp's, which end where the backward pass's stages do.
 */
#include <stdlib.h>
#include <string.h>

#include "cli/util.h"
#include "comm/coll.h"
#include "par/dp_sync.h"
#include "par/pipe.h"
#include "par/pipe_int.h"
#include "par/tp_stage.h"

struct pipe_dp_sync {
	size_t n;		/* floats of the stage's vector */
	struct dp_range *rg;	/* its buckets */
	int nrg;
	struct dp_wire wire;
	struct dp_powersgd *psgd;
	float *anchor, *outer_m;	/* local SGD */
};

/* The model's tensor named name: its index in m->table (its first Q's
 * seed), or the table's size. */
static size_t
tensor_index(const struct nn_model *m, const char *name)
{
	const struct nn_param *p = nn_model_param(m, name);

	return p != NULL ? (size_t)(p - m->table) : m->ntensors;
}

/* PowerSGD's matrices: the stage's tensors, where its vector holds them
 * (a tp_stage's of one rank: whole tensors, in its own order). */
static int
psgd_init(struct pipe_run *r, struct pipe_dp_sync *s)
{
	const struct tp_stage *ts = r->ts;
	size_t nt = 0, i;
	struct dp_powersgd_tensor *t = calloc((ts != NULL ? ts->nten :
	    r->m->ntensors) + 1, sizeof(*t));
	char e[COLLX_ERRLEN];

	if (t == NULL)
		return pipe_oom(r);
	if (ts == NULL)
		nt = dp_powersgd_tensors(r->m, s->rg, s->nrg, t);
	for (i = 0; ts != NULL && i < ts->nten; i++) {
		const struct tp_param *p = &ts->ten[i].p;

		if (p->present)
			t[nt++] = (struct dp_powersgd_tensor){ tensor_index(r->m,
			    ts->ten[i].name), p->off, p->ndim == 2 ?
			    (size_t)p->shape[0] : p->count, p->count };
	}
	s->psgd = dp_powersgd_new(t, nt, s->rg, s->nrg, s->n, r->cfg->dpo.powersgd, 0,
	    e, sizeof(e));
	free(t);
	if (s->psgd != NULL)
		return 0;
	r->kind = TRAIN_ERR_RUNTIME;
	return cli_fail(r->err, r->errlen, "rank %d: %s", r->rank, e);
}

static int
setup(struct pipe_run *r)
{
	const struct pipe_cfg *cfg = r->cfg;
	struct pipe_dp_sync *s;
	size_t maxn = 0;
	int i, w = pipe_replicas(r) != NULL ? comm_size(cfg->dp) : 1;

	if (r->zero != NULL || (cfg->dpo.wire == DP_WIRE_F32 &&
	    cfg->dpo.powersgd == 0 && cfg->dpo.sync_every == 0))
		return 0;	/* ZeRO sends cfg->dpo.wire itself (pipe_dp_zero.c) */
	if (cfg->dpo.powersgd > 0 && r->ts != NULL && r->ts->T > 1) {
		r->kind = TRAIN_ERR_RUNTIME;
		return cli_fail(r->err, r->errlen, "rank %d: PowerSGD is not "
		    "built for a stage sharded over a TP group", r->rank);
	}
	if ((s = r->slow = calloc(1, sizeof(*s))) == NULL ||
	    (s->rg = calloc((size_t)r->nown + 1, sizeof(*s->rg))) == NULL)
		return pipe_oom(r);
	for (s->nrg = 0; s->nrg < r->nown; s->nrg++)
		s->rg[s->nrg] = (struct dp_range){ r->own[s->nrg].off,
		    r->own[s->nrg].len };
	for (i = 0; i < s->nrg; i++) {
		if (s->rg[i].off + s->rg[i].len > s->n)
			s->n = s->rg[i].off + s->rg[i].len;
		if (s->rg[i].len > maxn)
			maxn = s->rg[i].len;
	}
	if (dp_wire_init(&s->wire, cfg->dpo.wire, w > 1 ? comm_rank(cfg->dp) : 0,
	    w, s->n, maxn, r->err, r->errlen) < 0) {
		r->kind = TRAIN_ERR_RUNTIME;
		return -1;
	}
	if (cfg->dpo.powersgd > 0 && psgd_init(r, s) < 0)
		return -1;
	if (cfg->dpo.sync_every > 0) {
		s->anchor = malloc((s->n + 1) * sizeof(float));
		s->outer_m = calloc(s->n + 1, sizeof(float));
		if (s->anchor == NULL || s->outer_m == NULL)
			return pipe_oom(r);
		memcpy(s->anchor, r->params, s->n * sizeof(float));
	}
	return 0;
}

/* The state a checkpoint keeps is put back once it is made. */
int
pipe_dp_sync_init(struct pipe_run *r)
{
	if (setup(r) < 0)
		return -1;
	return r->cfg->resume != NULL ? pipe_ckpt_slow_resume(r) : 0;
}

float *
pipe_dp_sync_wire_ef(const struct pipe_run *r)
{
	if (r->zero != NULL)
		return pipe_dp_zero_wire_ef(r);
	return r->slow != NULL ? r->slow->wire.ef : NULL;
}

struct dp_powersgd *
pipe_dp_sync_powersgd(const struct pipe_run *r)
{
	return r->slow != NULL ? r->slow->psgd : NULL;
}

float *
pipe_dp_sync_outer_m(const struct pipe_run *r)
{
	return r->slow != NULL ? r->slow->outer_m : NULL;
}

void
pipe_dp_sync_free(struct pipe_run *r)
{
	struct pipe_dp_sync *s = r->slow;

	if (s == NULL)
		return;
	dp_wire_free(&s->wire);
	dp_powersgd_delete(s->psgd);
	free(s->rg);
	free(s->anchor);
	free(s->outer_m);
	free(s);
	r->slow = NULL;
}

/* Bucket i of the stage's vector v summed over the replicas, in --wire. */
static int
wire_sum(struct pipe_run *r, float *v, int i)
{
	struct pipe_dp_sync *s = r->slow;
	struct comm *dc = r->cfg->dp;
	size_t off = s->rg[i].off, len = s->rg[i].len;

	if (s->wire.type == DP_WIRE_F32)
		return coll_allreduce(dc, v + off, len, DT_F32, COLL_SUM,
		    COLL_AUTO);
	return dp_wire_allreduce(&s->wire, dc, v + off, off, len, COLL_AUTO);
}

int
pipe_dp_sync_grads(struct pipe_run *r)
{
	const struct pipe_cfg *cfg = r->cfg;
	struct pipe_dp_sync *s = r->slow;
	int i, psgd;

	if (s == NULL)
		return 0;
	/* drifting replicas sync parameters, in pipe_dp_sync_outer */
	if (cfg->dpo.sync_every > 1)
		return 1;
	psgd = s->psgd != NULL && r->step >= cfg->dpo.powersgd_start;
	for (i = 0; i < s->nrg; i++) {
		comm_set_step(cfg->dp, "step %ld: gradients of stage %d, "
		    "bucket %d of %d", r->step, r->rank, i + 1, s->nrg);
		if ((psgd ? dp_powersgd_sync(s->psgd, i, cfg->dp, COLL_AUTO,
		    r->grads, (float)comm_size(cfg->dp)) : wire_sum(r,
		    r->grads, i)) < 0)
			return pipe_dp_failed(r);
	}
	return 1;
}

/* Local SGD: bucket i of the replicas' drift summed. */
static int
sync_drift(struct pipe_run *r, int i)
{
	comm_set_step(r->cfg->dp, "step %ld: local SGD sync of stage %d, "
	    "bucket %d of %d", r->step, r->rank, i + 1, r->slow->nrg);
	return wire_sum(r, r->grads, i) < 0 ? pipe_dp_failed(r) : 0;
}

float
pipe_dp_sync_scale(const struct pipe_run *r)
{
	/* a drifting replica steps on its own share's mean gradient */
	return (float)(1.0 / (double)(r->cfg->dpo.sync_every > 1 ? r->rcount :
	    r->cfg->batch));
}

int
pipe_dp_sync_outer(struct pipe_run *r)
{
	const struct pipe_cfg *cfg = r->cfg;
	struct pipe_dp_sync *s = r->slow;
	struct comm *dc = pipe_replicas(r);
	struct pipe_stat *ps = &r->stat[r->step];
	long h = cfg->dpo.sync_every;
	int i, drift = h > 1, w = dc != NULL ? comm_size(dc) : 1;
	uint64_t sent = dc != NULL ? comm_bytes_sent(dc) : 0;
	double t0 = cli_now();

	if (s == NULL || h == 0 || ((r->step + 1) % h != 0 &&
	    r->step + 1 != cfg->steps))
		return 0;
	for (i = 0; i < s->nrg; i++) {
		size_t off = s->rg[i].off, len = s->rg[i].len;

		if (drift) {
			dp_local_delta(s->anchor + off, r->params + off,
			    r->grads + off, len);
			if (dc != NULL && sync_drift(r, i) < 0)
				return -1;
		}
		dp_local_apply(r->params + off, s->anchor + off,
		    s->outer_m + off, r->grads + off, len, (float)w,
		    (float)cfg->dpo.outer_lr, (float)cfg->dpo.outer_momentum, drift);
	}
	if (dc != NULL) {
		ps->dp += cli_now() - t0;
		ps->dp_sent += (size_t)(comm_bytes_sent(dc) - sent);
	}
	return 0;
}
