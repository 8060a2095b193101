/* pipe_dp_zero: the layout of ZeRO (dp_zero.c, stages 1 and 2 over flat
 * ranges, collx-dp's too) on the data-parallel axis of a pipeline run: a
 * range per parameter range of the stage (r->own), cut over the stage's D
 * replicas (cfg->dp), each range's optimizer r->opt's, the reduce-scatter
 * through a wire of its own in cfg->dpo.wire. The stage's gradient vector
 * itself stays whole: its micro-batches add into it. Checkpoints take the
 * state whole (pipe_ckpt.c gathers and re-cuts it), so they stay
 * independent of the mesh. */
#include <stdio.h>
#include <stdlib.h>

#include "cli/util.h"
#include "par/dp_sync.h"
#include "par/pipe.h"
#include "par/pipe_int.h"

int
pipe_dp_zero_init(struct pipe_run *r)
{
	const struct pipe_cfg *cfg = r->cfg;
	struct pipe_dp_zero *z;
	struct dp_range *rg;
	size_t maxn = 0, nvec = 0;
	int q, rc;

	if (cfg->dpo.zero == 0 || pipe_replicas(r) == NULL)
		return 0;
	if ((z = r->zero = calloc(1, sizeof(*z))) == NULL)
		return pipe_oom(r);
	if (cfg->dpo.zero == 3)
		return pipe_dp_fsdp_init(r);
	if ((rg = malloc(((size_t)r->nown + 1) * sizeof(*rg))) == NULL)
		return pipe_oom(r);
	for (q = 0; q < r->nown; q++) {
		rg[q] = (struct dp_range){ r->own[q].off, r->own[q].len };
		maxn = rg[q].len > maxn ? rg[q].len : maxn;
		if (rg[q].off + rg[q].len > nvec)
			nvec = rg[q].off + rg[q].len;
	}
	snprintf(z->what, sizeof(z->what), "stage %d's range", r->rank);
	rc = dp_wire_init(&z->wire, cfg->dpo.wire, comm_rank(cfg->dp),
	    comm_size(cfg->dp), nvec, maxn, r->err, r->errlen);
	if (rc == 0)
		rc = dp_zero_init(&z->z, cfg->dpo.zero, cfg->dp, &z->wire,
		    COLL_AUTO, rg, r->nown, r->opt, &cfg->optim, z->what,
		    r->err, r->errlen);
	free(rg);
	if (rc < 0)
		r->kind = TRAIN_ERR_RUNTIME;
	return rc;
}

void
pipe_dp_zero_free(struct pipe_run *r)
{
	if (r->zero == NULL)
		return;
	if (r->zero->fsdp != NULL || r->zero->ch != NULL)
		pipe_dp_fsdp_free(r);
	else
		dp_zero_free(&r->zero->z);
	dp_wire_free(&r->zero->wire);
	free(r->zero);
	r->zero = NULL;
}

float *
pipe_dp_zero_wire_ef(const struct pipe_run *r)
{
	return r->zero->wire.ef;
}

struct dp_zero *
pipe_dp_zero_state(const struct pipe_run *r)
{
	return r->zero->fsdp != NULL ? dp_fsdp_zero(r->zero->fsdp) :
	    &r->zero->z;
}
