/* dp_fsdp_run: collx-dp's ZeRO-3 (dp_fsdp.c) over the model's layers, an
 * optimizer each; hybrid: over this host's ranks. Set up by dp.c, and
 * again over a new group by --ft (dp_ft_zero.c), r->bopt kept. */
#include <stdlib.h>

#include "cli/util.h"
#include "par/dp_int.h"

int
dp_fsdp_run_init(struct dp_run *r)
{
	struct dp_fsdp_plan p;
	char e[COLLX_ERRLEN];

	if (dp_fsdp_plan_model(&p, r->m, e, sizeof(e)) < 0)
		return dp_runtime_failed(r, "rank %d: %s", e);
	if (r->bopt == NULL &&
	    (r->bopt = calloc((size_t)p.nunit, sizeof(*r->bopt))) == NULL) {
		dp_fsdp_plan_free(&p);
		return dp_runtime_failed(r, "rank %d: %s", "out of memory");
	}
	r->nbopt = p.nunit;
	r->fsdp = dp_fsdp_new(r->shard != NULL ? r->shard : r->c, &r->wire,
	    r->cfg->algo, &p,
	    r->cfg->dpo.prefetch, r->cfg->dpo.reshard, r->m->params,
	    r->m->grads, r->bopt, &r->cfg->optim, r->err, r->errlen);
	dp_fsdp_plan_free(&p);
	if (r->fsdp == NULL) {
		r->kind = TRAIN_ERR_RUNTIME;
		return -1;
	}
	if (r->shard != NULL)
		dp_fsdp_hybrid(r->fsdp, r->rep, r->owner, r->rank);
	return 0;
}
