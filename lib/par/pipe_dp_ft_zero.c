/*
 * pipe_dp_ft_zero: --ft with --zero 1, 2 or 3 on a mesh's DP axis. The
 * replicas of one (pp, tp) coordinate (cfg->dp) hold its stage's ZeRO
 * slices as collx-dp's world holds its own (dp_ft_zero.c): each rank
 * mirrors its ring successor's slice in that group, stepped with the
 * reduced slice the successor sends it after the reduce-scatter. The
 * step's agreement is the mesh's commit (pipe_ft_commit): a rank past it
 * knows every rank's mirror held its inputs. At a recovery a rank past
 * its update but not its allgather records the step first (then the
 * agreement, pipe_dp_ft.c, has it updated on every rank: the others
 * apply it without an allgather); the run is set up again on the groups
 * left (pipe_run_again cuts ZeRO over the new DP group, this rank's old
 * moments held aside), and before a rejoin's copy the slices are cut
 * again from their owners or their mirrors, every rank of the DP group
 * (one started again too) taking the whole state in one allgatherv.
 * Under ZeRO-3 the slices are the stage's units' (pipe_dp_fsdp.c), with
 * their parameters: the new cut's ZeRO-3, set up whole, takes them, and
 * the next pass's start gives the rest back.
 */
#include <stdlib.h>
#include <string.h>

#include "cli/util.h"
#include "par/dp_ftz.h"
#include "par/pipe_ft_zero.h"

struct pipe_ftz {
	struct dp_ftz *f;
	struct nn_optim *own;	/* this rank's old slices' optimizers, held
				 * across the set-up again (hold), or NULL */
	int nown;
	int recovering;		/* a recovery's: no allgather */
};

static struct pipe_ftz *
ftz(const struct pipe_run *r)
{
	return r->cfg->ft != NULL ? r->cfg->ft->ftz : NULL;
}

int
pipe_ftz_on(const struct pipe_run *r)
{
	return ftz(r) != NULL;
}

void
pipe_ftz_mem(const struct pipe_run *r, size_t *optim, size_t *grad)
{
	struct pipe_ftz *p = ftz(r);

	if (p == NULL || r->zero == NULL)
		return;
	dp_ftz_bytes(p->f, optim, grad);
}

void
pipe_ftz_free(struct pipe_ft *ft)
{
	struct pipe_ftz *p;

	if (ft == NULL || (p = ft->ftz) == NULL)
		return;
	for (int q = 0; p->own != NULL && q < p->nown; q++)
		nn_optim_free(&p->own[q]);
	free(p->own);
	dp_ftz_delete(p->f);
	free(p);
	ft->ftz = NULL;
}

/* The slices cut over cfg->dp from the state held (own: this rank's
 * slices' optimizers, z's before). One replica left runs without ZeRO
 * (pipe_dp_zero_init): its state is then a cut over one, z's for the
 * time of the cut. */
static int
recut(struct pipe_run *r, struct nn_optim *own)
{
	struct dp_ftz *f = ftz(r)->f;
	struct dp_zero one, *z = r->zero != NULL ? pipe_dp_zero_state(r) :
	    &one;
	struct nn_optim *whole = NULL;
	struct dp_range *rg;
	char e[COLLX_ERRLEN];
	int q, rc = -1;

	if (z == &one) {
		if ((rg = malloc(((size_t)r->nown + 1) * sizeof(*rg))) == NULL)
			return pipe_oom(r);
		for (q = 0; q < r->nown; q++)
			rg[q] = (struct dp_range){ r->own[q].off, r->own[q].len };
		rc = dp_zero_init(&one, r->cfg->dpo.zero, r->cfg->dp, NULL,
		    COLL_AUTO, rg, r->nown, r->opt, &r->cfg->optim, "a stage",
		    e, sizeof(e));
		free(rg);
		if (rc < 0)
			goto out;
	}
	rc = dp_ftz_gather(f, r->cfg->dp, z, r->params, own, &r->cfg->optim,
	    &whole, e, sizeof(e));
	if (rc == 0)
		rc = dp_ftz_take(f, r->cfg->dp, z, r->params, whole,
		    &r->cfg->optim, e, sizeof(e));
	dp_zero_whole_free(z, whole);
out:
	if (z == &one)
		dp_zero_free(&one);
	if (rc == DP_FTZ_COMM)
		return pipe_dp_failed(r);
	if (rc < 0) {
		r->kind = TRAIN_ERR_RUNTIME;
		return cli_fail(r->err, r->errlen, "rank %d: %s",
		    comm_world_rank(r->cfg->dp, comm_rank(r->cfg->dp)), e);
	}
	return 0;
}

int
pipe_ftz_init(struct pipe_run *r)
{
	struct pipe_ft *ft = r->cfg->ft;
	struct pipe_ftz *p;

	/* one replica left under ZeRO-3: its state by units still */
	if (ft != NULL && r->zero == NULL && r->cfg->dpo.zero == 3 &&
	    pipe_dp_fsdp_units(r) < 0)
		return -1;
	if (ft == NULL || r->zero == NULL || ft->ftz != NULL)
		return 0;
	if ((p = ft->ftz = calloc(1, sizeof(*p))) == NULL ||
	    (p->f = dp_ftz_new(ft->joining ? NULL : r->cfg->dp, 0)) == NULL)
		return pipe_oom(r);
	/* every slice at its owner: the mirrors from them */
	return ft->joining ? 0 : recut(r, r->opt);
}

int
pipe_ftz_mirror(struct pipe_run *r)
{
	struct pipe_ftz *p = ftz(r);

	if (p == NULL || r->zero == NULL)	/* one replica: no slices */
		return 0;
	return dp_ftz_send(p->f, r->cfg->dp, pipe_dp_zero_state(r),
	    r->grads) < 0 ?
	    pipe_dp_failed(r) : 0;
}

int
pipe_ftz_step(struct pipe_run *r, float scale)
{
	struct pipe_ftz *p = ftz(r);

	/* once a step: a recovery finishes a step some ranks updated */
	if (p->f->done != r->step + 1) {
		p->f->done = r->step;
		dp_ftz_apply(p->f, pipe_dp_zero_state(r), r->params,
		    r->grads, scale);
	}
	return p->recovering;
}

int
pipe_ftz_settle(struct pipe_run *r, long k)
{
	struct pipe_ftz *p = ftz(r);

	if (p == NULL)
		return 0;
	p->recovering = 1;
	/* past its update, not its allgather */
	return p->f->have && p->f->done == k + 1;
}

void
pipe_ftz_hold(struct pipe_run *r)
{
	struct pipe_ftz *p = ftz(r);

	/* held already: a set-up again whose cut did not happen */
	if (p == NULL || !p->f->have || p->own != NULL)
		return;
	/* none held (out of memory): recut says so */
	p->own = calloc((size_t)r->nown + 1, sizeof(*p->own));
	p->nown = p->own != NULL ? r->nown : 0;
	for (int q = 0; q < r->nown; q++) {
		if (p->own != NULL)
			p->own[q] = r->opt[q];
		else
			nn_optim_free(&r->opt[q]);
		/* not carried: sized for the old cut */
		r->opt[q].m = r->opt[q].v = NULL;
	}
}

int
pipe_ftz_recut(struct pipe_run *r)
{
	struct pipe_ftz *p = ftz(r);
	int q;

	if (p == NULL)
		return 0;
	p->recovering = 0;
	if (p->f->have && p->own == NULL)
		return pipe_oom(r);
	if (recut(r, p->own) < 0)
		return -1;
	for (q = 0; p->own != NULL && q < p->nown; q++)
		nn_optim_free(&p->own[q]);
	free(p->own);
	p->own = NULL;
	return 0;
}
