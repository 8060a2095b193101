/* dp_fail: how a data-parallel run fails, a leaf every dp file calls (so
 * the calls run down to it, never back up to the training loop). */
#include "cli/util.h"
#include "par/dp_int.h"

int
dp_comm_failed(struct dp_run *r)
{
	r->kind = comm_errkind(r->c) == COMM_ERR_MISMATCH ? TRAIN_ERR_DATA :
	    TRAIN_ERR_RUNTIME;
	return cli_fail(r->err, r->errlen, "%s", comm_error(r->c));
}

int
dp_runtime_failed(struct dp_run *r, const char *fmt, const char *why)
{
	r->kind = TRAIN_ERR_RUNTIME;
	return cli_fail(r->err, r->errlen, fmt, r->rank, why);
}
