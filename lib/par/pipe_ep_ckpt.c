/* pipe_ep_ckpt: checkpoints under ZeRO 1/2 with divided experts
 * (pipe_dp_zero.c's z and ze). The state is gathered whole as one
 * optimizer over the stage's vector (pipe_dp_fsdp_optim's views of own's
 * ranges): z's onto replica 0, ze's onto the first replica of each EP rank
 * (replicas 0 .. X-1, ep->rep's rank 0), which then write as a run without
 * ZeRO writes (replica 0 saves, the others send it their experts,
 * pipe_moe_ckpt_peer); a resume reads the whole state as such a run and
 * keeps this replica's slices. Other runs go to pipe_ckpt.c's own. */
#include <stdlib.h>

#include "par/dp_sync.h"
#include "par/ep.h"
#include "par/pipe.h"
#include "par/pipe_int.h"

int
pipe_ep_ckpt_write(struct pipe_run *r, long done)
{
	struct pipe_dp_zero *z = r->zero;
	struct nn_optim *whole = NULL, *mine = r->opt;
	const struct ep *ep = ep_divides(r->cfg->ep);
	int rc;

	if (z == NULL || z->ze.n == 0)
		return pipe_ckpt_write(r, done);
	if (comm_rank(r->cfg->dp) < ep->X &&
	    (whole = pipe_dp_fsdp_optim(r)) == NULL)
		return -1;
	rc = dp_zero_gather(&z->z, whole) < 0 ? pipe_dp_failed(r) :
	    dp_zero_gather(&z->ze, whole != NULL ? whole + z->z.n : NULL) < 0 ?
	    pipe_group_failed(r, ep->rep) : 0;
	if (rc == 0) {
		r->opt = whole != NULL ? whole : mine;
		r->zero = NULL;		/* the state is whole: no ZeRO */
		rc = pipe_ckpt_write(r, done);
		r->zero = z;
		r->opt = mine;
	}
	pipe_dp_fsdp_optim_free(r, whole);
	return rc;
}

int
pipe_ep_ckpt_resume(struct pipe_run *r)
{
	struct pipe_dp_zero *z = r->zero;
	struct nn_optim *whole, *mine = r->opt;
	int rc;

	if (z == NULL || z->ze.n == 0)
		return pipe_ckpt_resume(r);
	if ((whole = pipe_dp_fsdp_optim(r)) == NULL)
		return -1;
	r->opt = whole;
	rc = pipe_tp_resume(r);
	r->opt = mine;
	if (rc == 0) {
		pipe_dp_fsdp_optim_step(r, whole);
		dp_zero_take(&z->z, whole);
		dp_zero_take(&z->ze, whole + z->z.n);
	}
	pipe_dp_fsdp_optim_free(r, whole);
	return rc;
}
