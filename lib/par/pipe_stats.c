/* pipe_stats: what every stage measured, to rank 0. */
#include <stdlib.h>

#include "cli/util.h"
#include "comm/coll.h"
#include "par/pipe.h"
#include "par/pipe_int.h"

/* Every stage's measured bubble and peak activations, to rank 0 (all
 * steps but the first, which pays for first-touch allocation, when there
 * are more). */
int
pipe_gather_stats(struct pipe_run *r, struct pipe_result *res)
{
	double mine[3] = { 0, 0, (double)r->st.peak }, *all;
	long k0 = r->cfg->resume != NULL ? r->cfg->resume->step : 0, k;
	int q;

	for (k = r->cfg->steps - k0 > 1 ? k0 + 1 : k0; k < r->cfg->steps; k++) {
		mine[0] += r->stat[k].fwd + r->stat[k].bwd;
		mine[1] += r->stat[k].wall;
	}
	all = malloc(3 * (size_t)r->world * sizeof(double));
	res->bubble = calloc((size_t)r->world, sizeof(double));
	res->peak_act = calloc((size_t)r->world, sizeof(size_t));
	if (!all || !res->bubble || !res->peak_act) {
		free(all);
		return pipe_oom(r);
	}
	comm_set_step(r->c, "gathering statistics");
	if (coll_allgather(r->c, mine, all, 3, DT_F64, COLL_AUTO) < 0) {
		free(all);
		return pipe_comm_failed(r);
	}
	res->bubble_mean = 0;
	for (q = 0; q < r->world; q++) {
		res->bubble[q] = all[3 * q + 1] > 0 ?
		    1 - all[3 * q] / all[3 * q + 1] : 0;
		res->peak_act[q] = (size_t)all[3 * q + 2];
		res->bubble_mean += res->bubble[q] / r->world;
	}
	free(all);
	return 0;
}
