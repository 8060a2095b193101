/* pipe_moe: a pipeline step's statistics of a model with experts: every
 * stage's MoE blocks over its micro-batches, summed over the stages and
 * the replicas, for the loss CSV; and the auxiliary loss, whose f_e are
 * the global batch's: known before a backward under gpipe, where every
 * forward of the step comes first; under the other schedules a forward
 * of every micro-batch runs before the schedule to count them
 * (pipe_step.c's aux_pass). */
#include <stdlib.h>
#include <string.h>

#include "comm/coll.h"
#include "par/ep.h"
#include "par/pipe_int.h"

void
pipe_moe_begin(struct pipe_run *r)
{
	for (int c = 0; c < r->nchunk; c++) {
		struct tp_stage *ts = &r->ts[c];
		if (ts->moe == NULL)
			continue;
		memset(ts->moe, 0, ts->nmoe * sizeof(double));
		memset(ts->moe_psum, 0, ts->nmoe * sizeof(double));
		memset(ts->moe_daux, 0, ts->nmoe * sizeof(float));
	}
	r->moe_aux_set = 0;
	r->moe_aux_loss = 0;
}

/* Chunk c's MoE blocks' d/dp_e and share of the aux loss, from the
 * step's counts so far. */
static int
aux_chunk(struct pipe_run *r, int c)
{
	struct tp_stage *ts = &r->ts[c];
	const struct nn_dims *d = &ts->d;
	int E = d->moe.experts, at = 0;
	double *all;
	float *ps;

	all = malloc(ts->nmoe * sizeof(double));
	ps = malloc((size_t)E * sizeof(float));
	if (all == NULL || ps == NULL) {
		free(all), free(ps);
		return pipe_oom(r);
	}
	memcpy(all, ts->moe, ts->nmoe * sizeof(double));
	comm_set_step(r->c, "step %ld: experts' counts for the aux loss",
	    r->step);
	if (r->cfg->dp != NULL && comm_size(r->cfg->dp) > 1 &&
	    coll_allreduce(r->cfg->dp, all, ts->nmoe, DT_F64, COLL_SUM,
	    COLL_AUTO) < 0) {
		free(all), free(ps);
		return pipe_dp_failed(r);
	}
	/* f_e of the global batch; P_e's share from this replica's tokens,
	 * in loss-sum units (per position of the whole sequence, as the loss
	 * sums samples) */
	for (int l = 0; l < d->layers; l++) {
		if (!nn_dims_moe_layer(d, l))
			continue;
		for (int e = 0; e < E; e++)
			ps[e] = (float)ts->moe_psum[at + e];
		if (l >= ts->l0 && l < ts->l1)
			r->moe_aux_loss += nn_moe_aux(ts->moe_daux + at,
			    all + at, ps, E, d->moe_aux, ts->cp != NULL ?
			    ts->gseq : ts->seq, 1.0);
		at += E + 1;
	}
	free(all), free(ps);
	return 0;
}

int
pipe_moe_aux(struct pipe_run *r, int c)
{
	if (r->ts[c].d.moe_aux <= 0 || r->ts[c].moe == NULL || r->moe_aux_set)
		return 0;
	r->moe_aux_set = 1;
	return aux_chunk(r, c);
}

int
pipe_moe_aux_early(const struct pipe_run *r)
{
	return r->ts[0].d.moe_aux > 0 && r->ts[0].moe != NULL &&
	    r->cfg->sched != PIPE_SCHED_GPIPE;
}

int
pipe_moe_aux_counted(struct pipe_run *r)
{
	for (int c = 0; c < r->nchunk; c++)
		if (aux_chunk(r, c) < 0)
			return -1;
	r->moe_aux_set = 1;
	/* the schedule's forwards count them again */
	for (int c = 0; c < r->nchunk; c++) {
		memset(r->ts[c].moe, 0, r->ts[c].nmoe * sizeof(double));
		memset(r->ts[c].moe_psum, 0, r->ts[c].nmoe * sizeof(double));
	}
	return 0;
}

int
pipe_moe_aux_sum(struct pipe_run *r, double *loss)
{
	double a = r->moe_aux_loss;

	if (r->ts[0].d.moe_aux <= 0 || r->ts[0].moe == NULL)
		return 0;
	comm_set_step(r->c, "step %ld: aux loss over the stages", r->step);
	if (r->world > 1 && coll_allreduce(r->c, &a, 1, DT_F64, COLL_SUM,
	    COLL_AUTO) < 0)
		return pipe_comm_failed(r);
	if (r->rank == 0)
		*loss += a;
	return 0;
}

int
pipe_moe_end(struct pipe_run *r, struct train_step *s)
{
	struct tp_stage *t0 = &r->ts[0];
	const struct nn_dims *d = &t0->d;
	int L = (int)(t0->nmoe / (size_t)(d->moe.experts + 1));

	if (t0->moe == NULL)
		return 0;
	for (int c = 1; c < r->nchunk; c++)
		for (size_t i = 0; i < t0->nmoe; i++)
			t0->moe[i] += r->ts[c].moe[i];
	comm_set_step(r->c, "step %ld: experts' counts", r->step);
	if (r->world > 1 && coll_allreduce(r->c, t0->moe, t0->nmoe, DT_F64,
	    COLL_SUM, COLL_AUTO) < 0)
		return pipe_comm_failed(r);
	if (r->cfg->dp != NULL && comm_size(r->cfg->dp) > 1 &&
	    coll_allreduce(r->cfg->dp, t0->moe, t0->nmoe, DT_F64, COLL_SUM,
	    COLL_AUTO) < 0)
		return pipe_dp_failed(r);
	s->moe = 1;
	s->moe_counts = t0->moe;
	nn_moe_summary(t0->moe, L, d->moe.experts, &s->moe_dropped,
	    &s->moe_imbalance);
	return 0;
}

int
pipe_moe_ckpt_peer(struct pipe_run *r)
{
	const struct ep *ep = ep_divides(r->cfg->ep);
	int me = r->cfg->dp != NULL ? comm_rank(r->cfg->dp) : 0, rc = 0;
	int moments = nn_optim_moments(&r->cfg->optim);
	float *flat[2] = { NULL, NULL };

	if (ep == NULL || me == 0 || me >= ep->X)
		return 0;
	/* whole tensors land on TP index 0 alone, as save()'s */
	for (int k = 0; k < moments && r->ts->rank == 0; k++)
		if ((flat[k] = calloc(r->m->nparams, sizeof(float))) == NULL)
			rc = pipe_oom(r);
	if (rc == 0)
		rc = pipe_tp_gather(r, flat);
	free(flat[0]), free(flat[1]);
	return rc;
}
