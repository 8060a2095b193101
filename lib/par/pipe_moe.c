/* pipe_moe: a pipeline step's statistics of a model with experts: every
 * stage's MoE blocks over its micro-batches, summed over the stages and
 * the replicas, for the loss CSV. */
#include <string.h>

#include "comm/coll.h"
#include "par/pipe_int.h"

void
pipe_moe_begin(struct pipe_run *r)
{
	for (int c = 0; c < r->nchunk; c++)
		if (r->ts[c].moe != NULL)
			memset(r->ts[c].moe, 0, r->ts[c].nmoe * sizeof(double));
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
