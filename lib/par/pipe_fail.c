/* pipe_fail: how the pipeline runner's files fail (the reason into the
 * run's err, its kind into r->kind, -1) and the run's replicas: a leaf
 * every other pipe_* file calls, calling none of them. */
#include "cli/util.h"
#include "comm/comm.h"
#include "par/pipe_int.h"

int
pipe_group_failed(struct pipe_run *r, struct comm *c)
{
	r->kind = comm_errkind(c) == COMM_ERR_MISMATCH ? TRAIN_ERR_DATA :
	    TRAIN_ERR_RUNTIME;
	return cli_fail(r->err, r->errlen, "%s", comm_error(c));
}

int
pipe_comm_failed(struct pipe_run *r)
{
	return pipe_group_failed(r, r->c);
}

int
pipe_dp_failed(struct pipe_run *r)
{
	return pipe_group_failed(r, r->cfg->dp);
}

struct comm *
pipe_replicas(const struct pipe_run *r)
{
	struct comm *dc = r->cfg->dp;

	return dc != NULL && comm_size(dc) > 1 ? dc : NULL;
}

int
pipe_oom(struct pipe_run *r)
{
	r->kind = TRAIN_ERR_RUNTIME;
	return cli_fail(r->err, r->errlen, "rank %d: out of memory", r->rank);
}
