/*
 * dp_ft_zero: ZeRO 1, 2 and 3 under --ft (dp_ft.c). A rank's optimizer
 * slice would leave with it, so each rank also keeps a mirror of its ring
 * successor's slice: the moments and the parameters (the master values,
 * apart from the whole vector, which an allgather may have half written
 * when a death strikes). Each step, after the reduce-scatter, every rank
 * sends its reduced slice to its predecessor, which steps the mirror with
 * it: the same inputs, so the owner's bytes. The step's loss allreduce,
 * taken before the update, is its agreement: a rank past it knows that
 * every rank held both its reduced slices. At a recovery, when a survivor
 * passed the agreement of the step, those that had not apply the step
 * (they hold its inputs); else nobody had, and it runs again. Then the
 * slices are cut again over the replicas there are (fewer, or more after
 * a rejoin): every slice comes from its owner, or from its predecessor's
 * mirror when the owner left, in one allgatherv of the whole state
 * (parameters and moments) to every rank, which keeps its new slice and
 * its successor's. Two ring neighbours lost at once lose a slice: the run
 * stops, naming it. Under ZeRO-3 the slices are the layers' (dp_fsdp.c),
 * the parameters outside them given back: the cut's whole vector lies in
 * the parameters only until ZeRO-3 is set up again over the new group.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/util.h"
#include "comm/coll.h"
#include "par/dp_ft.h"
#include "par/dp_ftz.h"
#include "par/dp_int.h"

#define FTZ_TAG 0x7a33		/* the mirror's reduced slices */
#define FTZ_MIRROR 0x100000	/* a provider's rank, from a mirror */

/* The mirror of the successor of this rank in z's cut: buffers and an
 * optimizer per range, empty. 0, or -1 (err). */
static int
mirror_alloc(struct dp_ftz *f, const struct dp_zero *z,
    const struct nn_optim_cfg *oc, char *err, size_t errlen)
{
	size_t a, len;
	int i, succ = (z->rank + 1) % z->world;

	f->nr = z->n;
	f->opt = calloc((size_t)z->n + 1, sizeof(*f->opt));
	f->off = calloc((size_t)z->n + 1, sizeof(*f->off));
	if (f->opt == NULL || f->off == NULL)
		return cli_fail(err, errlen, "out of memory");
	f->n = 0;
	for (i = 0; i < z->n; i++) {
		/* one replica: nobody to lose the slice to */
		dp_zero_slice(z, i, succ, &a, &len);
		len = z->world > 1 ? len : 0;
		f->off[i] = f->n;
		f->n += len;
		if (nn_optim_init(&f->opt[i], oc, len, err, errlen) < 0)
			return -1;
	}
	f->p = malloc((f->n + 1) * sizeof(float));
	f->g = malloc((f->n + 1) * sizeof(float));
	f->send = malloc((z->ngrad + 1) * sizeof(float));
	if (f->p == NULL || f->g == NULL || f->send == NULL)
		return cli_fail(err, errlen, "out of memory");
	return 0;
}

static void
mirror_free(struct dp_ftz *f)
{
	for (int i = 0; f->opt != NULL && i < f->nr; i++)
		nn_optim_free(&f->opt[i]);
	free(f->opt);
	free(f->off);
	free(f->p);
	free(f->g);
	free(f->send);
	f->opt = NULL;
	f->off = NULL;
	f->p = f->g = f->send = NULL;
	f->nr = 0;
}

/* The slices held are cut over c's ranks. */
static int
cut_over(struct dp_ftz *f, struct comm *c, char *err, size_t errlen)
{
	int q, w = comm_size(c);

	free(f->wr);
	if ((f->wr = malloc((size_t)w * sizeof(int))) == NULL)
		return cli_fail(err, errlen, "out of memory");
	for (q = 0; q < w; q++)
		f->wr[q] = comm_world_rank(c, q);
	f->world = w;
	f->rank = comm_rank(c);
	f->have = 1;
	return 0;
}

struct dp_ftz *
dp_ftz_new(struct comm *c, long done)
{
	struct dp_ftz *f = calloc(1, sizeof(*f));
	char e[COLLX_ERRLEN];

	if (f == NULL)
		return NULL;
	f->done = done;
	if (c != NULL && cut_over(f, c, e, sizeof(e)) < 0) {
		free(f);
		return NULL;
	}
	return f;
}

void
dp_ftz_delete(struct dp_ftz *f)
{
	if (f == NULL)
		return;
	mirror_free(f);
	free(f->wr);
	free(f);
}

int
dp_ftz_send(struct dp_ftz *f, struct comm *c, struct dp_zero *z,
    float *grads)
{
	size_t a, len, at = 0;
	int i, w = comm_size(c), me = comm_rank(c);

	if (w == 1)
		return 0;
	for (i = 0; i < z->n; i++) {
		dp_zero_slice(z, i, z->rank, &a, &len);
		memcpy(f->send + at, dp_zero_reduced(z, grads, i),
		    len * sizeof(float));
		at += len;
	}
	comm_set_step(c, "--ft: the reduced slices to the mirrors");
	if (comm_sendrecv(c, (me + w - 1) % w, f->send, at * sizeof(float),
	    (me + 1) % w, f->g, f->n * sizeof(float), FTZ_TAG) < 0)
		return DP_FTZ_COMM;
	return 0;
}

void
dp_ftz_apply(struct dp_ftz *f, struct dp_zero *z, float *params,
    float *grads, float scale)
{
	dp_zero_step(z, params, grads, scale);
	for (int i = 0; i < f->nr; i++)
		nn_optim_step(&f->opt[i], f->p + f->off[i], f->g + f->off[i],
		    scale);
	f->done++;
}

/* Floats of slice q of wc (every range: parameters and moments). */
static size_t
slice_floats(const struct dp_zero *z, int wc, int q, int nmom)
{
	size_t a, len, t = 0;

	for (int i = 0; i < z->n; i++) {
		dp_zero_cut(z->rg[i].len, wc, q, &a, &len);
		t += len * (size_t)(1 + nmom);
	}
	return t;
}

/* Slice q of wc into (out) or out of x: parameters, m, v of every range
 * in turn. The parameters at params + off[i] (off NULL: at the slice's
 * place in the whole vector); the moments mom[i]'s, from the slice's
 * place in the range (in_range) or from 0 (a slice's own optimizer). */
static size_t
slice_copy(const struct dp_zero *z, int wc, int q, int nmom, float *x,
    float *params, const size_t *off, struct nn_optim *mom, int in_range,
    int out)
{
	size_t a, len, t = 0, at;
	float *to[3];

	for (int i = 0; i < z->n; i++) {
		dp_zero_cut(z->rg[i].len, wc, q, &a, &len);
		to[0] = params + (off != NULL ? off[i] : z->rg[i].off + a);
		at = in_range ? a : 0;
		to[1] = nmom > 0 ? mom[i].m + at : NULL;
		to[2] = nmom > 1 ? mom[i].v + at : NULL;
		for (int j = 0; j <= nmom; j++, t += len) {
			if (out)
				memcpy(x + t, to[j], len * sizeof(float));
			else
				memcpy(to[j], x + t, len * sizeof(float));
		}
	}
	return t;
}

/* prov: who sends each slice of wc, -1 when nobody can. */
static int
providers(struct dp_ftz *f, struct comm *c, int wc, int64_t *prov)
{
	int q, succ, me = comm_rank(c);

	for (q = 0; q < wc; q++)
		prov[q] = INT64_MAX;
	if (f->have) {
		prov[f->rank] = me;
		succ = (f->rank + 1) % wc;
		if (wc > 1 && !dp_ft_member(c, f->wr[succ]))
			prov[succ] = FTZ_MIRROR + me;
	}
	comm_set_step(c, "--ft: who holds each ZeRO slice");
	if (coll_allreduce(c, prov, (size_t)wc, DT_I64, COLL_MIN,
	    COLL_AUTO) < 0)
		return DP_FTZ_COMM;
	for (q = 0; q < wc; q++)
		prov[q] = prov[q] == INT64_MAX ? -1 : prov[q];
	return 0;
}

int
dp_ftz_take(struct dp_ftz *f, struct comm *c, struct dp_zero *z,
    float *params, const struct nn_optim *whole,
    const struct nn_optim_cfg *oc, char *err, size_t errlen)
{
	int i, succ = (z->rank + 1) % z->world;
	size_t a, len;

	mirror_free(f);
	dp_zero_take(z, whole, z->rank, z->opt);
	if (mirror_alloc(f, z, oc, err, errlen) < 0)
		return -1;
	if (z->world > 1)	/* one replica: an empty mirror */
		dp_zero_take(z, whole, succ, f->opt);
	for (i = 0; i < z->n && z->world > 1; i++) {
		dp_zero_slice(z, i, succ, &a, &len);
		memcpy(f->p + f->off[i], params + z->rg[i].off + a,
		    len * sizeof(float));
	}
	return cut_over(f, c, err, errlen);
}

int
dp_ftz_gather(struct dp_ftz *f, struct comm *c, struct dp_zero *z,
    float *params, struct nn_optim *own, const struct nn_optim_cfg *oc,
    struct nn_optim **whole, char *err, size_t errlen)
{
	int nmom = nn_optim_moments(oc), wc, q, j, rc = -1;
	int w = comm_size(c), me = comm_rank(c);
	int64_t h[4] = { f->have ? f->world : 0, 0, f->have ? f->gen : -1,
	    f->have ? -f->gen : INT64_MIN }, *prov = NULL;
	size_t *counts = NULL, total = 0, at = 0, mine = 0;
	float *send = NULL, *all = NULL;

	*whole = NULL;
	for (q = 0; f->have && q < z->n; q++)
		h[1] = own[q].t > h[1] ? own[q].t : h[1];
	comm_set_step(c, "--ft: the ZeRO cut before");
	if (coll_allreduce(c, h, 4, DT_I64, COLL_MAX, COLL_AUTO) < 0)
		return DP_FTZ_COMM;
	if (h[2] + h[3] != 0) {
		cli_fail(err, errlen, "--ft: a rank left while the ZeRO slices "
		    "were cut again: the optimizer state is lost");
		return DP_FTZ_LOST;
	}
	wc = (int)h[0];
	prov = malloc(((size_t)wc + 1) * sizeof(*prov));
	counts = calloc((size_t)w + 1, sizeof(*counts));
	if (prov == NULL || counts == NULL) {
		cli_fail(err, errlen, "out of memory");
		goto out;
	}
	if ((rc = providers(f, c, wc, prov)) < 0)
		goto out;
	rc = -1;
	for (q = 0; q < wc; q++) {
		if (prov[q] < 0) {
			cli_fail(err, errlen, "--ft: slice %d of %d of the %s "
			    "is lost (its owner and the rank before it in the "
			    "ring, which mirrored it, left at once)", q, wc,
			    z->stage == 3 ? "ZeRO-3 parameters and optimizer "
			    "state" : "ZeRO optimizer state");
			rc = DP_FTZ_LOST;
			goto out;
		}
		counts[prov[q] % FTZ_MIRROR] += slice_floats(z, wc, q, nmom);
	}
	for (j = 0; j < w; j++)
		total += counts[j];
	mine = counts[me];
	send = malloc((mine + 1) * sizeof(float));
	all = malloc((total + 1) * sizeof(float));
	*whole = dp_zero_whole_alloc(z, oc, err, errlen);
	if (send == NULL || all == NULL || *whole == NULL) {
		if (*whole != NULL)
			cli_fail(err, errlen, "out of memory");
		goto out;
	}
	for (q = 0; q < wc; q++)
		if (prov[q] == me)
			at += slice_copy(z, wc, q, nmom, send + at, params,
			    NULL, own, 0, 1);
		else if (prov[q] == FTZ_MIRROR + me)
			at += slice_copy(z, wc, q, nmom, send + at, f->p,
			    f->off, f->opt, 0, 1);
	comm_set_step(c, "--ft: the ZeRO state cut again over %d replicas", w);
	if (coll_allgatherv(c, send, all, counts, DT_F32, COLL_AUTO) < 0) {
		rc = DP_FTZ_COMM;
		goto out;
	}
	/* the allgatherv's order: by rank, then by slice */
	for (at = 0, j = 0; j < w; j++)
		for (q = 0; q < wc; q++)
			if (prov[q] % FTZ_MIRROR == j)
				at += slice_copy(z, wc, q, nmom, all + at,
				    params, NULL, *whole, 1, 0);
	for (q = 0; q < z->n; q++)
		(*whole)[q].t = (long)h[1];
	f->gen = (long)h[2] + 1;
	rc = 0;
out:
	if (rc < 0) {
		dp_zero_whole_free(z, *whole);
		*whole = NULL;
	}
	free(all);
	free(send);
	free(counts);
	free(prov);
	return rc;
}

/* collx-dp's run (dp.c, dp_ft.c): the group is r->c, the vector r->m's,
 * the slices ZeRO 1/2's over the buckets or ZeRO-3's over the layers. */

static struct dp_zero *
zero_of(struct dp_run *r)
{
	return r->fsdp != NULL ? dp_fsdp_zero(r->fsdp) : &r->zero;
}

/* A failure of dp_ftz_*'s rc: r->err and r->kind set; -2 kept. */
static int
failed(struct dp_run *r, int rc, const char *e)
{
	if (rc == DP_FTZ_COMM)
		return dp_comm_failed(r);
	dp_runtime_failed(r, "rank %d: %s", e);
	return rc == DP_FTZ_LOST ? -2 : -1;
}

int
dp_ftz_init(struct dp_run *r)
{
	/* a rank started again gets its slices in dp_ft_joined */
	if ((r->ftz = dp_ftz_new(r->joining ? NULL : r->c,
	    r->cfg->resume != NULL ? r->cfg->resume->step : 0)) == NULL)
		return dp_runtime_failed(r, "rank %d: %s", "out of memory");
	/* every slice at its owner: the mirrors from them */
	return r->joining ? 0 : dp_ftz_recut(r);
}

void
dp_ftz_free(struct dp_run *r)
{
	dp_ftz_delete(r->ftz);
	r->ftz = NULL;
}

void
dp_ftz_bytes(const struct dp_ftz *f, size_t *optim, size_t *grad)
{
	if (f == NULL || f->opt == NULL)
		return;
	for (int i = 0; i < f->nr; i++)
		*optim += nn_optim_bytes(&f->opt[i]);
	*optim += f->n * sizeof(float);
	*grad += f->n * sizeof(float);
}

void
dp_ftz_mem(const struct dp_run *r, struct dp_mem *mem)
{
	dp_ftz_bytes(r->ftz, &mem->optim_bytes, &mem->grad_bytes);
}

void
dp_ftz_begin(struct dp_run *r)
{
	if (r->ftz != NULL)
		r->ftz->t0 = cli_now();
}

int
dp_ftz_mirror(struct dp_run *r)
{
	int rc = dp_ftz_send(r->ftz, r->c, zero_of(r), r->m->grads);

	return rc < 0 ? failed(r, rc, "") : 0;
}

/* The step past its agreement, for collx-dp. */
static void
apply(struct dp_run *r)
{
	dp_ftz_apply(r->ftz, zero_of(r), r->m->params, r->m->grads,
	    (float)(1.0 / (double)r->cfg->batch));
}

int
dp_ftz_update(struct dp_run *r, double loss)
{
	r->ftz->loss = loss;
	apply(r);
	if (r->fsdp == NULL && dp_zero_allgather(&r->zero, r->m->params) < 0)
		return dp_comm_failed(r);
	return 0;
}

int
dp_ftz_settle(struct dp_run *r, long *k, struct train_step *s)
{
	struct dp_ftz *f = r->ftz;
	int64_t v[2] = { f->have ? f->done : -1,
	    f->have ? -f->done : INT64_MIN };

	comm_set_step(r->c, "--ft: the survivors' last step applied");
	if (coll_allreduce(r->c, v, 2, DT_I64, COLL_MAX, COLL_AUTO) < 0)
		return dp_comm_failed(r);
	if (v[0] + v[1] > 1) {	/* a step apart at most: cannot be */
		dp_runtime_failed(r, "rank %d: --ft: %s", "the replicas' "
		    "ZeRO states are more than a step apart");
		return -2;
	}
	if (!f->have) {
		f->done = (long)v[0];
		return 0;
	}
	/* past the agreement here, not the allgather: the step's record */
	if (f->done == *k + 1) {
		s[*k] = (struct train_step){ .step = *k, .epoch = (long)((int64_t)
		    *k * r->cfg->batch / r->d->n), .tokens = train_tokens(r->d,
		    r->cfg->batch), .loss = f->loss, .seconds = cli_now() -
		    f->t0, .replicas = f->world };
		s[*k].compute = s[*k].seconds;
		++*k;
	}
	/* another passed it: every rank held the inputs, this one too */
	if (f->done < v[0])
		apply(r);
	return 0;
}

/* z, the ZeRO 1/2 state, cut again over r->c, its ranges as they were.
 * 0, or -1 (e). */
static int
zero_again(struct dp_run *r, struct dp_zero *z, char *e, size_t elen)
{
	struct dp_range *rg;
	const char *what;
	int rc, n = z->n;

	if ((rg = malloc(((size_t)n + 1) * sizeof(*rg))) == NULL)
		return cli_fail(e, elen, "out of memory");
	memcpy(rg, z->rg, (size_t)n * sizeof(*rg));
	what = z->what;
	dp_zero_free(z);
	rc = dp_zero_init(z, r->cfg->dpo.zero, r->c, &r->wire, r->cfg->algo,
	    rg, n, r->bopt, &r->cfg->optim, what, e, elen);
	free(rg);
	return rc;
}

/* ZeRO-3 set up again over r->c, whole until its slices are taken. A
 * pass a death cut short left gradients summed in, unreduced: zero, as
 * ZeRO-3 wants them at a pass's start (the reduce-scatters give them
 * back again). 0, or -1 (r->err). */
static int
fsdp_again(struct dp_run *r)
{
	dp_fsdp_free(r->fsdp);
	r->fsdp = NULL;
	memset(r->m->grads, 0, r->m->nparams * sizeof(float));
	return dp_fsdp_run_init(r);
}

int
dp_ftz_recut(struct dp_run *r)
{
	struct dp_zero *z = zero_of(r);
	struct nn_optim *whole;
	char e[COLLX_ERRLEN];
	int rc, n = z->n;

	rc = dp_ftz_gather(r->ftz, r->c, z, r->m->params, z->opt,
	    &r->cfg->optim, &whole, e, sizeof(e));
	if (rc < 0)
		return failed(r, rc, e);
	if (r->fsdp != NULL && fsdp_again(r) < 0) {
		dp_zero_whole_free(&(struct dp_zero){ .n = n }, whole);
		return -1;
	}
	z = zero_of(r);
	rc = r->fsdp != NULL ? 0 : zero_again(r, z, e, sizeof(e));
	if (rc == 0)
		rc = dp_ftz_take(r->ftz, r->c, z, r->m->params, whole,
		    &r->cfg->optim, e, sizeof(e));
	if (r->fsdp != NULL)
		dp_fsdp_release_all(r->fsdp);
	dp_zero_whole_free(z, whole);
	if (rc < 0) {
		r->kind = TRAIN_ERR_RUNTIME;
		return cli_fail(r->err, r->errlen, "rank %d: %s", r->rank, e);
	}
	return 0;
}
