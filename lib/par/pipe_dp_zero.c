/* pipe_dp_zero: the layout of ZeRO (dp_zero.c, stages 1 and 2 over flat
 * ranges, collx-dp's too) on the data-parallel axis of a pipeline run: a
 * range per parameter range of the stage (r->own), cut over the stage's D
 * replicas (cfg->dp), each range's optimizer r->opt's, the reduce-scatter
 * through a wire of its own in cfg->dpo.wire. The stage's gradient vector
 * itself stays whole: its micro-batches add into it. Checkpoints hold the
 * state whole (pipe_ckpt.c writes it from the slices and cuts it again),
 * so they stay independent of the mesh; the divided experts' slices are
 * pieces there too.
 *
 * Divided experts (par/ep.h): replica q's vector holds EP rank q % X's
 * experts, which only the D/X replicas of that EP rank (ep->rep) share.
 * So own is re-cut into runs of tensors of one kind: those of no expert
 * are ZeRO's z over the D replicas, the experts' ZeRO's ze over ep->rep,
 * the group their gradients are summed over without ZeRO. A rank's
 * optimizer state is then P_ne/D + (P_e/X)/(D/X) = P/D floats, as ZeRO
 * without EP, while its parameters (and ZeRO-1's gradients) are
 * P_ne + P_e/X. */
#include <stdio.h>
#include <stdlib.h>

#include "cli/util.h"
#include "par/dp_sync.h"
#include "par/ep.h"
#include "par/pipe.h"
#include "par/pipe_int.h"

/* Divided experts: own and opt re-cut to the stage's runs of tensors of
 * one kind, the *nz runs of no expert first (a stage's vector starts with
 * a layer's first tensor, of no expert, so own[0] starts it, where
 * pipe_tp_resume reads opt[0]), then the experts'. */
static int
split_own(struct pipe_run *r, int *nz)
{
	size_t cap = 1, base = 0, i;
	struct pipe_range *run, *own;
	struct nn_optim *opt;
	int n = 0, c, k, q = 0;
	char *kind;

	for (c = 0; c < r->nchunk; c++)
		cap += r->ts[c].nten;
	run = calloc(cap, sizeof(*run));
	kind = calloc(cap, 1);
	own = calloc(cap, sizeof(*own));
	opt = calloc(cap, sizeof(*opt));
	if (run == NULL || kind == NULL || own == NULL || opt == NULL) {
		free(run), free(kind), free(own), free(opt);
		return pipe_oom(r);
	}
	for (c = 0; c < r->nchunk; base += r->ts[c++].nlocal)
		for (i = 0; i < r->ts[c].nten; i++) {
			const struct tp_param *p = &r->ts[c].ten[i].p;
			char x = ep_expert_of(r->ts[c].ten[i].name) >= 0;

			if (!p->present || p->count == 0)
				continue;
			if (n > 0 && kind[n - 1] == x && run[n - 1].off +
			    run[n - 1].len == base + p->off)
				run[n - 1].len += p->count;
			else
				run[n] = (struct pipe_range){ base + p->off,
				    p->count }, kind[n++] = x;
		}
	for (k = 0; k < 2; k++) {
		for (i = 0; i < (size_t)n; i++)
			if (kind[i] == k)
				own[q++] = run[i];
		if (k == 0)
			*nz = q;
	}
	for (q = 0; q < r->nown; q++)
		nn_optim_free(&r->opt[q]);
	free(r->own), free(r->opt), free(run), free(kind);
	r->own = own, r->opt = opt, r->nown = n;
	return 0;
}

/* ZeRO zz over group c for own's ranges [q0, q0 + n), through wire w. */
static int
zero_open(struct pipe_run *r, struct dp_zero *zz, struct dp_wire *w,
    struct comm *c, int q0, int n, const char *what)
{
	const struct pipe_cfg *cfg = r->cfg;
	struct dp_range *rg;
	size_t maxn = 0, nvec = 0;
	int q, rc;

	if ((rg = malloc(((size_t)n + 1) * sizeof(*rg))) == NULL)
		return pipe_oom(r);
	for (q = 0; q < n; q++) {
		rg[q] = (struct dp_range){ r->own[q0 + q].off,
		    r->own[q0 + q].len };
		maxn = rg[q].len > maxn ? rg[q].len : maxn;
		if (rg[q].off + rg[q].len > nvec)
			nvec = rg[q].off + rg[q].len;
	}
	rc = dp_wire_init(w, cfg->dpo.wire, comm_rank(c), comm_size(c), nvec,
	    maxn, r->err, r->errlen);
	if (rc == 0)
		rc = dp_zero_init(zz, cfg->dpo.zero, c, w, COLL_AUTO, rg, n,
		    r->opt + q0, &cfg->optim, what, r->err, r->errlen);
	free(rg);
	if (rc < 0)
		r->kind = TRAIN_ERR_RUNTIME;
	return rc;
}

int
pipe_dp_zero_init(struct pipe_run *r)
{
	const struct pipe_cfg *cfg = r->cfg;
	struct ep *ep = ep_divides(cfg->ep);
	struct pipe_dp_zero *z;
	int nz = r->nown;

	if (cfg->dpo.zero == 0 || pipe_replicas(r) == NULL)
		return 0;
	if ((z = r->zero = calloc(1, sizeof(*z))) == NULL)
		return pipe_oom(r);
	if (cfg->dpo.zero == 3)
		return pipe_dp_fsdp_init(r);
	if (ep != NULL && split_own(r, &nz) < 0)
		return -1;
	snprintf(z->what, sizeof(z->what), "stage %d's range", r->rank);
	snprintf(z->ewhat, sizeof(z->ewhat), "stage %d's expert range",
	    r->rank);
	if (zero_open(r, &z->z, &z->wire, cfg->dp, 0, nz, z->what) < 0)
		return -1;
	return ep != NULL ? zero_open(r, &z->ze, &z->ewire, ep->rep, nz,
	    r->nown - nz, z->ewhat) : 0;
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
	dp_zero_free(&r->zero->ze);
	dp_wire_free(&r->zero->wire);
	dp_wire_free(&r->zero->ewire);
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

/* The experts' group's failure is reported as its own. */
static int
expert_failed(struct pipe_run *r)
{
	return pipe_group_failed(r, ep_divides(r->cfg->ep)->rep);
}

int
pipe_dp_zero_reduce(struct pipe_run *r)
{
	struct pipe_dp_zero *z = r->zero;
	int i;

	for (i = 0; i < z->z.n; i++)
		if (dp_zero_reduce(&z->z, r->grads, i) < 0)
			return pipe_dp_failed(r);
	for (i = 0; i < z->ze.n; i++)
		if (dp_zero_reduce(&z->ze, r->grads, i) < 0)
			return expert_failed(r);
	return 0;
}

void
pipe_dp_zero_step(struct pipe_run *r, float scale)
{
	dp_zero_step(&r->zero->z, r->params, r->grads, scale);
	dp_zero_step(&r->zero->ze, r->params, r->grads, scale);
}

int
pipe_dp_zero_allgather(struct pipe_run *r)
{
	if (dp_zero_allgather(&r->zero->z, r->params) < 0)
		return pipe_dp_failed(r);
	return dp_zero_allgather(&r->zero->ze, r->params) < 0 ?
	    expert_failed(r) : 0;
}

size_t
pipe_dp_zero_grad_bytes(const struct pipe_run *r, size_t whole)
{
	const struct pipe_dp_zero *z = r->zero;

	if (z->fsdp != NULL || z->z.stage < 2)
		return dp_zero_grad_bytes(pipe_dp_zero_state(r), whole);
	return (z->z.ngrad + z->ze.ngrad) * sizeof(float);
}
