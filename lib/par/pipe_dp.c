/* pipe_dp: the data-parallel axis of a pipeline run. Each replica of a
 * stage ran its own share of the batch through the same layers; before
 * the update the stage's gradient sums, and the loss sum, are summed over
 * the replicas (cfg->dp), so every replica steps with the gradient of the
 * whole batch (the update divides by the global batch) and stays bitwise
 * equal to the others, which pipe_dp_verify checks at the end. With
 * cfg->dpo.zero the sums are reduce-scattered and each replica updates its
 * slices alone (dp_zero.c, over the layout of pipe_dp_zero.c). */
#include <stdint.h>
#include <stdlib.h>

#include "cli/util.h"
#include "comm/coll.h"
#include "par/ep.h"
#include "par/pipe.h"
#include "par/pipe_ft_zero.h"
#include "par/pipe_int.h"

int
pipe_dp_init(struct pipe_run *r)
{
	return pipe_dp_zero_init(r) < 0 ? -1 : pipe_ftz_init(r);
}

void
pipe_dp_free(struct pipe_run *r)
{
	pipe_dp_zero_free(r);
}

/* ZeRO: this replica's slices stepped, then allgathered (timed as the
 * DP axis's communication). */
static int
zero_update(struct pipe_run *r, float scale)
{
	struct comm *dc = r->cfg->dp;
	struct pipe_stat *ps = &r->stat[r->step];
	uint64_t sent;
	double t0;

	if (!pipe_ftz_on(r))
		pipe_dp_zero_step(r, scale);
	else if (pipe_ftz_step(r, scale))	/* a recovery's: not gathered */
		return 0;
	t0 = cli_now();
	sent = comm_bytes_sent(dc);
	if (pipe_dp_zero_allgather(r) < 0)
		return -1;
	ps->dp += cli_now() - t0;
	ps->dp_sent += (size_t)(comm_bytes_sent(dc) - sent);
	pipe_span(r, 'A', -1, t0, cli_now());
	return 0;
}

int
pipe_dp_sync(struct pipe_run *r, double *loss)
{
	struct comm *dc = pipe_replicas(r);
	struct pipe_stat *ps = &r->stat[r->step];
	uint64_t sent;
	double t0;

	if (dc == NULL)
		return 0;
	t0 = cli_now();
	sent = comm_bytes_sent(dc);
	if ((r->zero == NULL ? pipe_dp_sync_grads(r, &sent) :
	    r->zero->fsdp != NULL ? pipe_dp_fsdp_sync(r, &sent) :
	    pipe_dp_zero_reduce(r)) < 0)
		return -1;
	comm_set_step(dc, "step %ld: loss over the replicas", r->step);
	if (coll_allreduce(dc, loss, 1, DT_F64, COLL_SUM, COLL_AUTO) < 0)
		return pipe_dp_failed(r);
	ps->dp = cli_now() - t0;
	ps->dp_sent = (size_t)(comm_bytes_sent(dc) - sent);
	pipe_span(r, 'A', -1, t0, t0 + ps->dp);
	return 0;
}

int
pipe_dp_update(struct pipe_run *r)
{
	struct pipe_stat *ps = &r->stat[r->step];
	float scale = pipe_dp_sync_scale(r);
	size_t whole = 0;
	int q;

	ps->optim_bytes = 0;
	for (q = 0; q < r->nown; q++) {
		ps->optim_bytes += nn_optim_bytes(&r->opt[q]);
		whole += r->own[q].len;
	}
	ps->grad_bytes = r->zero != NULL ? pipe_dp_zero_grad_bytes(r, whole) :
	    whole * sizeof(float);
	ps->param_bytes = whole * sizeof(float);
	pipe_ftz_mem(r, &ps->optim_bytes, &ps->grad_bytes);
	if (r->zero != NULL && r->zero->fsdp != NULL) {
		if (pipe_ftz_on(r))	/* and the mirror's */
			(void)pipe_ftz_step(r, scale);
		else
			dp_fsdp_step(r->zero->fsdp, scale);	/* slices stay */
		return 0;
	}
	if (r->zero != NULL)
		return zero_update(r, scale);
	if ((q = pipe_dp_sync_post(r)) != 0)	/* on the overlap thread */
		return q < 0 ? -1 : 0;
	for (q = 0; q < r->nown; q++)
		nn_optim_step(&r->opt[q], r->params + r->own[q].off,
		    r->grads + r->own[q].off, scale);
	return pipe_dp_sync_outer(r);
}

int
pipe_dp_verify(struct pipe_run *r)
{
	struct comm *dc = pipe_replicas(r);
	uint64_t mine = CLI_FNV1A_INIT, *all;
	int q, n, X, rc = 0;
	const struct ep *ep;

	if (dc == NULL)
		return 0;
	n = comm_size(dc);
	for (q = 0; q < r->nown; q++)
		mine = cli_fnv1a(mine, r->params + r->own[q].off,
		    r->own[q].len * sizeof(float));
	if ((all = malloc((size_t)n * sizeof(*all))) == NULL)
		return pipe_oom(r);
	comm_set_step(dc, "parameter checksum after training");
	if (coll_allgather(dc, &mine, all, 1, DT_I64, COLL_AUTO) < 0) {
		free(all);
		return pipe_dp_failed(r);
	}
	/* divided experts: replica q holds those of EP rank q % X */
	ep = ep_divides(r->cfg->ep);
	X = ep != NULL ? ep->X : 1;
	for (q = X; q < n && rc == 0; q++)
		if (all[q] != all[q % X]) {
			r->kind = TRAIN_ERR_RUNTIME;
			rc = cli_fail(r->err, r->errlen, "stage %d: the "
			    "parameters of replica %d differ from replica %d's "
			    "after training (checksum %016llx vs %016llx)",
			    r->rank, q, q % X,
			    (unsigned long long)all[q],
			    (unsigned long long)all[q % X]);
		}
	free(all);
	return rc;
}
