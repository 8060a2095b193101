/* pipe_stage: the stage every pipeline run drives: a tp_stage per chunk,
 * the chunk's layers sharded over cfg->tp (collx-train's TP axis; without
 * one, or with a group of one, unsharded and with no communication: so
 * collx-pipe's), the parameters of the rank's chunks in one vector of the
 * run's, chunk after chunk: one range with one optimizer, which the DP
 * axis and ZeRO cut as any range. TP rank t of each stage talks to TP
 * rank t of the next (the pipeline group holds one TP index), and every
 * TP rank of a stage runs every micro-batch alike, so the runner's
 * messages are those of an unsharded stage. */
#include <stdlib.h>
#include <string.h>

#include "cli/util.h"
#include "comm/coll.h"
#include "par/ep.h"
#include "par/pipe.h"
#include "par/pipe_int.h"
#include "par/tp_stage.h"

static int
tp_failed(struct pipe_run *r)
{
	/* the reason is in r->err already (the tp_stage writes there) */
	r->kind = r->cfg->tp != NULL && comm_errkind(r->cfg->tp) ==
	    COMM_ERR_MISMATCH ? TRAIN_ERR_DATA : TRAIN_ERR_RUNTIME;
	return -1;
}

/* A TP sum, in the trace: a span within the forward or backward. */
static void
on_sum(void *ctx, double t0, double t1)
{
	pipe_span(ctx, 'T', -1, t0, t1);
}

/* The chunks' parameters, their shards of the model's, and zero
 * gradients, written straight into the run's vectors. */
static int
place(struct pipe_run *r)
{
	float *(*vec)(size_t, int);
	size_t n = 0;
	int c;

	for (c = 0; c < r->nchunk; c++)
		n += r->ts[c].nlocal;
	/* ZeRO-3 hands ranges of both back to the kernel a page at a time:
	 * small pages for it */
	vec = r->cfg->dpo.zero == 3 ? tp_stage_vec : tp_stage_vec_huge;
	if ((r->params = vec(n, 0)) == NULL || (r->grads = vec(n, 1)) == NULL)
		return pipe_oom(r);
	for (c = n = 0; c < r->nchunk; c++) {
		tp_stage_place(&r->ts[c], r->params + n, r->grads + n);
		tp_stage_take(&r->ts[c], r->m, r->m->params, r->params + n);
		n += r->ts[c].nlocal;
	}
	return 0;
}

int
pipe_tp_init(struct pipe_run *r, int nmax)
{
	const struct pipe_cfg *cfg = r->cfg;
	int c, s, V = r->nchunk, S = r->world * V;
	const struct ep *ep;

	if ((r->ts = calloc((size_t)V, sizeof(*r->ts))) == NULL)
		return pipe_oom(r);
	for (c = 0; c < V; c++) {
		s = c * r->world + r->rank;
		/* later failures (a TP collective's) land in r->err too */
		if (tp_stage_plan_cp(&r->ts[c], r->m, cfg->tp, cfg->cp,
		    cfg->cp_zigzag, s, S, cfg->first[s], cfg->first[s + 1],
		    r->d->seq, nmax, cfg->micro, r->sch->split, r->err,
		    r->errlen) < 0) {
			r->kind = TRAIN_ERR_RUNTIME;
			return -1;
		}
		r->ts[c].on_sum = on_sum;
		r->ts[c].on_sum_ctx = r;
		r->ts[c].ep = cfg->ep;
	}
	if ((ep = ep_divides(cfg->ep)) != NULL)	/* its own experts alone */
		for (c = 0; c < V; c++)
			if (tp_stage_keep_experts(&r->ts[c], r->m, ep->rank *
			    ep->per, ep->per) < 0)
				return pipe_oom(r);
	return place(r);
}

int
pipe_own_init(struct pipe_run *r)
{
	char e[COLLX_ERRLEN];
	size_t n = 0;

	for (int c = 0; c < r->nchunk; c++)
		n += r->ts[c].nlocal;
	r->own = calloc(1, sizeof(*r->own));
	r->opt = calloc(1, sizeof(*r->opt));
	if (!r->own || !r->opt)
		return pipe_oom(r);
	r->own[0] = (struct pipe_range){ 0, n };
	if (nn_optim_init(&r->opt[0], &r->cfg->optim, n, e, sizeof(e)) < 0) {
		r->kind = TRAIN_ERR_RUNTIME;
		return cli_fail(r->err, r->errlen, "rank %d: %s", r->rank, e);
	}
	r->nown = 1;
	return 0;
}

void
pipe_tp_free(struct pipe_run *r)
{
	if (r->ts == NULL)
		return;
	for (int c = 0; c < r->nchunk; c++)
		tp_stage_free(&r->ts[c]);
	free(r->ts);
	free(r->params);
	free(r->grads);
	r->ts = NULL;
	r->params = r->grads = NULL;
}

struct tp_stage *
pipe_chunk(struct pipe_run *r, int c)
{
	return &r->ts[c];
}

/* The rank's activation bytes, all chunks together, at their peak so
 * far. */
static void
rank_peak(struct pipe_run *r)
{
	size_t live = 0;

	for (int c = 0; c < r->nchunk; c++)
		live += r->ts[c].live;
	if (live > r->peak)
		r->peak = live;
}

struct pipe_slot *
pipe_unit_acquire(struct pipe_run *r, int c, int n)
{
	struct pipe_slot *sl = tp_stage_acquire(&r->ts[c], n);

	rank_peak(r);
	return sl;
}

float *
pipe_unit_input(struct pipe_run *r, int c, struct pipe_slot *sl)
{
	return tp_stage_input(&r->ts[c], sl);
}

const float *
pipe_unit_forward(struct pipe_run *r, int c, struct pipe_slot *sl,
    double *loss)
{
	const float *y;

	if ((y = tp_stage_forward(&r->ts[c], sl, loss)) == NULL)
		tp_failed(r);
	return y;
}

int
pipe_unit_backward(struct pipe_run *r, int c, struct pipe_slot *sl,
    float *dy, float *dx)
{
	int rc;

	pipe_dp_sync_arm(r, &r->ts[c], 0);
	rc = tp_stage_backward(&r->ts[c], sl, dy, dx);
	pipe_dp_sync_settle(r, &r->ts[c]);
	return rc < 0 ? tp_failed(r) : 0;
}

void
pipe_unit_weight(struct pipe_run *r, int c, struct pipe_slot *sl)
{
	pipe_dp_sync_arm(r, &r->ts[c], 1);
	tp_stage_weight(&r->ts[c], sl);
	pipe_dp_sync_settle(r, &r->ts[c]);
}

void
pipe_unit_release(struct pipe_run *r, int c, struct pipe_slot *sl)
{
	tp_stage_release(&r->ts[c], sl);
}

void
pipe_tp_stat(struct pipe_run *r, struct pipe_stat *ps, int begin)
{
	double t;
	uint64_t b;
	int c;

	pipe_cp_stat(r, ps, begin);
	if (r->ts->T == 1)
		return;
	for (t = 0, c = 0; c < r->nchunk; c++)
		t += r->ts[c].coll_s;
	b = comm_bytes_sent(r->cfg->tp);
	if (!begin) {
		ps->tp = t - r->tp_t0;
		ps->tp_sent = (size_t)(b - r->tp_b0);
	}
	r->tp_t0 = t;
	r->tp_b0 = b;
}

/* A checksum of this rank's replicated tensors, every chunk's. */
static uint64_t
whole_sum(const struct pipe_run *r)
{
	uint64_t h = CLI_FNV1A_INIT;

	for (int c = 0; c < r->nchunk; c++) {
		const struct tp_stage *ts = &r->ts[c];
		for (size_t i = 0; i < ts->nten; i++) {
			const struct tp_param *p = &ts->ten[i].p;
			if (p->split == TP_WHOLE)
				h = cli_fnv1a(h, ts->params + p->off,
				    p->count * sizeof(float));
		}
	}
	return h;
}

int
pipe_tp_verify(struct pipe_run *r)
{
	uint64_t mine, *all;
	int T, q, rc = 0;

	if ((T = r->ts->T) == 1)
		return 0;
	mine = whole_sum(r);
	if ((all = malloc((size_t)T * sizeof(*all))) == NULL)
		return pipe_oom(r);
	comm_set_step(r->cfg->tp, "replicated tensors' checksum after "
	    "training");
	if (coll_allgather(r->cfg->tp, &mine, all, 1, DT_I64, COLL_AUTO) < 0) {
		free(all);
		r->kind = TRAIN_ERR_RUNTIME;
		return cli_fail(r->err, r->errlen, "TP group: %s",
		    comm_error(r->cfg->tp));
	}
	for (q = 1; q < T && rc == 0; q++)
		if (all[q] != all[0]) {
			r->kind = TRAIN_ERR_RUNTIME;
			rc = cli_fail(r->err, r->errlen, "stage %d: the "
			    "replicated tensors of TP rank %d differ from TP "
			    "rank 0's after training (checksum %016llx vs "
			    "%016llx)", r->rank, q, (unsigned long long)all[q],
			    (unsigned long long)all[0]);
		}
	free(all);
	return rc;
}

/* The rank's chunks' shards of the model-shaped whole into mine, laid
 * out as r->params. */
static void
take(struct pipe_run *r, const float *whole, float *mine)
{
	for (int c = 0; c < r->nchunk; c++) {
		tp_stage_take(&r->ts[c], r->m, whole, mine);
		mine += r->ts[c].nlocal;
	}
}

int
pipe_tp_resume(struct pipe_run *r)
{
	const struct ckpt_state *st = r->cfg->resume;
	struct nn_optim *o = &r->opt[0];

	if ((o->m != NULL) != (st->m != NULL) ||
	    (o->v != NULL) != (st->v != NULL)) {
		r->kind = TRAIN_ERR_DATA;
		return cli_fail(r->err, r->errlen, "the checkpoint holds %d "
		    "optimizer moment(s), this run's optimizer keeps %d",
		    (st->m != NULL) + (st->v != NULL),
		    (o->m != NULL) + (o->v != NULL));
	}
	if (o->m != NULL)
		take(r, st->m, o->m);
	if (o->v != NULL)
		take(r, st->v, o->v);
	o->t = st->step;
	return 0;
}

/* The whole tensors of every TP rank's mine (laid out as r->params)
 * into out on TP index 0. */
static int
gather(struct pipe_run *r, const float *mine, float *out)
{
	for (int c = 0; c < r->nchunk; c++) {
		if (tp_stage_gather(&r->ts[c], mine, r->m, out) < 0)
			return -1;
		mine += r->ts[c].nlocal;
	}
	return 0;
}

/* Divided experts (par/ep.h): TP index 0's whole tensors get the other
 * EP ranks' experts too, the parameters and the moments. */
static int
gather_experts(struct pipe_run *r, float *const moments[2])
{
	struct ep *ep = ep_divides(r->cfg->ep);
	const struct nn_optim *o = &r->opt[0];
	float *out[3] = { r->m->params, moments != NULL && o->m != NULL ?
	    moments[0] : NULL, moments != NULL && o->v != NULL ? moments[1] :
	    NULL };

	if (ep == NULL || r->ts->rank != 0)
		return 0;
	for (int c = 0; c < r->nchunk; c++)
		for (int k = 0; k < 3; k++)
			if (out[k] != NULL && ep_gather_experts(ep, r->m,
			    r->ts[c].l0, r->ts[c].l1, out[k]) < 0) {
				r->kind = TRAIN_ERR_RUNTIME;
				return -1;
			}
	return 0;
}

int
pipe_tp_gather(struct pipe_run *r, float *const moments[2])
{
	const struct nn_optim *o = &r->opt[0];

	if (r->ts->T > 1)
		comm_set_step(r->cfg->tp, "gathering stage %d's shards",
		    r->rank);
	if (gather(r, r->params, r->m->params) < 0 ||
	    (moments != NULL && o->m != NULL &&
	    gather(r, o->m, moments[0]) < 0) ||
	    (moments != NULL && o->v != NULL &&
	    gather(r, o->v, moments[1]) < 0))
		return tp_failed(r);
	return gather_experts(r, moments);
}
