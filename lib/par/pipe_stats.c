/* pipe_stats: what every stage measured, to rank 0. */
#include <stdlib.h>

#include "cli/util.h"
#include "comm/coll.h"
#include "par/pipe.h"
#include "par/pipe_int.h"

double
pipe_stat_bubble(const struct pipe_stat *st)
{
	return st->sched > 0 ? 1 - (st->fwd + st->bwd) / st->sched : 0;
}

/* Every stage's measured bubble and peak activations, to rank 0: the
 * bubble of all steps together, as if one (all steps but the first, which
 * pays for first-touch allocation, when there are more). */
int
pipe_gather_stats(struct pipe_run *r, struct pipe_result *res)
{
	struct pipe_stat sum = { 0 };
	double mine[2] = { 0, (double)r->peak }, *all;
	long k0 = r->cfg->resume != NULL ? r->cfg->resume->step : 0, k;
	int q;

	for (k = r->cfg->steps - k0 > 1 ? k0 + 1 : k0; k < r->cfg->steps; k++) {
		sum.fwd += r->stat[k].fwd;
		sum.bwd += r->stat[k].bwd;
		sum.sched += r->stat[k].sched;
	}
	mine[0] = pipe_stat_bubble(&sum);
	all = malloc(2 * (size_t)r->world * sizeof(double));
	res->bubble = calloc((size_t)r->world, sizeof(double));
	res->peak_act = calloc((size_t)r->world, sizeof(size_t));
	if (!all || !res->bubble || !res->peak_act) {
		free(all);
		return pipe_oom(r);
	}
	comm_set_step(r->c, "gathering statistics");
	if (coll_allgather(r->c, mine, all, 2, DT_F64, COLL_AUTO) < 0) {
		free(all);
		return pipe_comm_failed(r);
	}
	res->bubble_mean = 0;
	for (q = 0; q < r->world; q++) {
		res->bubble[q] = all[2 * q];
		res->peak_act[q] = (size_t)all[2 * q + 1];
		res->bubble_mean += res->bubble[q] / r->world;
	}
	free(all);
	return 0;
}
