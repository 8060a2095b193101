/*
 * dp_ft_zero: ZeRO 1 and 2 under --ft (dp_ft.c). A rank's optimizer
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
 * stops, naming it.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/util.h"
#include "comm/coll.h"
#include "par/dp_int.h"

#define FTZ_TAG 0x7a33		/* the mirror's reduced slices */
#define FTZ_MIRROR 0x100000	/* a provider's rank, from a mirror */

struct dp_ftz {
	int world, rank;	/* the group the slices are cut over */
	int *wr;		/* its members' world ranks */
	int have;		/* holds a state (a rank started again: not
				 * before its copy) */
	long done;		/* steps applied */
	long gen;		/* cuts made */
	double loss, t0;	/* the last agreement's loss; its step's start */
	struct nn_optim *opt;	/* per range: the successor's slice's */
	float *p, *g;		/* its parameters, its reduced gradients */
	float *send;		/* this rank's reduced slices, packed */
	size_t *off;		/* range i's in p and g */
	size_t n;		/* floats of p and g */
};

/* The mirror of the successor of this rank in z's cut: buffers and an
 * optimizer per range, empty. 0, or -1 (r->err). */
static int
mirror_alloc(struct dp_run *r, struct dp_ftz *f)
{
	const struct dp_zero *z = &r->zero;
	size_t a, len;
	char e[COLLX_ERRLEN];
	int i, succ = (z->rank + 1) % z->world;

	f->opt = calloc((size_t)z->n + 1, sizeof(*f->opt));
	f->off = calloc((size_t)z->n + 1, sizeof(*f->off));
	if (f->opt == NULL || f->off == NULL)
		return dp_runtime_failed(r, "rank %d: %s", "out of memory");
	f->n = 0;
	for (i = 0; i < z->n; i++) {
		/* one replica: nobody to lose the slice to */
		dp_zero_slice(z, i, succ, &a, &len);
		len = z->world > 1 ? len : 0;
		f->off[i] = f->n;
		f->n += len;
		if (nn_optim_init(&f->opt[i], &r->cfg->optim, len, e,
		    sizeof(e)) < 0)
			return dp_runtime_failed(r, "rank %d: %s", e);
	}
	f->p = malloc((f->n + 1) * sizeof(float));
	f->g = malloc((f->n + 1) * sizeof(float));
	f->send = malloc((z->ngrad + 1) * sizeof(float));
	if (f->p == NULL || f->g == NULL || f->send == NULL)
		return dp_runtime_failed(r, "rank %d: %s", "out of memory");
	return 0;
}

static void
mirror_free(struct dp_ftz *f, int n)
{
	for (int i = 0; f->opt != NULL && i < n; i++)
		nn_optim_free(&f->opt[i]);
	free(f->opt);
	free(f->off);
	free(f->p);
	free(f->g);
	free(f->send);
	f->opt = NULL;
	f->off = NULL;
	f->p = f->g = f->send = NULL;
}

/* The slices held are cut over r->c's ranks. */
static int
cut_over(struct dp_run *r)
{
	struct dp_ftz *f = r->ftz;

	free(f->wr);
	if ((f->wr = malloc((size_t)r->world * sizeof(int))) == NULL)
		return dp_runtime_failed(r, "rank %d: %s", "out of memory");
	for (int q = 0; q < r->world; q++)
		f->wr[q] = comm_world_rank(r->c, q);
	f->world = r->world;
	f->rank = r->rank;
	f->have = 1;
	return 0;
}

int
dp_ftz_init(struct dp_run *r)
{
	if ((r->ftz = calloc(1, sizeof(*r->ftz))) == NULL)
		return dp_runtime_failed(r, "rank %d: %s", "out of memory");
	r->ftz->done = r->cfg->resume != NULL ? r->cfg->resume->step : 0;
	/* a rank started again gets its slices in dp_ft_joined */
	if (r->joining)
		return 0;
	/* every slice at its owner: the mirrors from them */
	return cut_over(r) < 0 ? -1 : dp_ftz_recut(r);
}

void
dp_ftz_free(struct dp_run *r)
{
	if (r->ftz == NULL)
		return;
	mirror_free(r->ftz, r->zero.n);
	free(r->ftz->wr);
	free(r->ftz);
	r->ftz = NULL;
}

void
dp_ftz_mem(const struct dp_run *r, struct dp_mem *mem)
{
	if (r->ftz == NULL || r->ftz->opt == NULL)
		return;
	for (int i = 0; i < r->zero.n; i++)
		mem->optim_bytes += nn_optim_bytes(&r->ftz->opt[i]);
	mem->optim_bytes += r->ftz->n * sizeof(float);
	mem->grad_bytes += r->ftz->n * sizeof(float);
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
	struct dp_ftz *f = r->ftz;
	struct dp_zero *z = &r->zero;
	size_t a, len, at = 0;
	int i;

	if (r->world == 1)
		return 0;
	for (i = 0; i < z->n; i++) {
		dp_zero_slice(z, i, z->rank, &a, &len);
		memcpy(f->send + at, dp_zero_reduced(z, r->m->grads, i),
		    len * sizeof(float));
		at += len;
	}
	comm_set_step(r->c, "--ft: the reduced slices to the mirrors");
	if (comm_sendrecv(r->c, (r->rank + r->world - 1) % r->world, f->send,
	    at * sizeof(float), (r->rank + 1) % r->world, f->g,
	    f->n * sizeof(float), FTZ_TAG) < 0)
		return dp_comm_failed(r);
	return 0;
}

/* The step past its agreement: this rank's slices and the mirror's. */
static void
apply(struct dp_run *r)
{
	struct dp_ftz *f = r->ftz;
	float scale = (float)(1.0 / (double)r->cfg->batch);

	dp_zero_step(&r->zero, r->m->params, r->m->grads, scale);
	for (int i = 0; i < r->zero.n; i++)
		nn_optim_step(&f->opt[i], f->p + f->off[i], f->g + f->off[i],
		    scale);
	f->done++;
}

int
dp_ftz_update(struct dp_run *r, double loss)
{
	r->ftz->loss = loss;
	apply(r);
	if (dp_zero_allgather(&r->zero, r->m->params) < 0)
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

/* Whether world rank w is in c. */
static int
member(struct comm *c, int w)
{
	for (int i = 0; i < comm_size(c); i++)
		if (comm_world_rank(c, i) == w)
			return 1;
	return 0;
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
providers(struct dp_run *r, int wc, int64_t *prov)
{
	struct dp_ftz *f = r->ftz;
	int q, succ;

	for (q = 0; q < wc; q++)
		prov[q] = INT64_MAX;
	if (f->have) {
		prov[f->rank] = r->rank;
		succ = (f->rank + 1) % wc;
		if (wc > 1 && !member(r->c, f->wr[succ]))
			prov[succ] = FTZ_MIRROR + r->rank;
	}
	comm_set_step(r->c, "--ft: who holds each ZeRO slice");
	if (coll_allreduce(r->c, prov, (size_t)wc, DT_I64, COLL_MIN,
	    COLL_AUTO) < 0)
		return dp_comm_failed(r);
	for (q = 0; q < wc; q++)
		prov[q] = prov[q] == INT64_MAX ? -1 : prov[q];
	return 0;
}

/* This rank's new slices (own and mirror) of the whole state (whole:
 * per range; the parameters in r->m's) over r->c. */
static int
take(struct dp_run *r, struct nn_optim *whole, int nmom)
{
	struct dp_ftz *f = r->ftz;
	struct dp_zero *z = &r->zero;
	struct dp_range *rg;
	const char *what = z->what;
	size_t a, len;
	char e[COLLX_ERRLEN];
	int i, n = z->n, succ;

	if ((rg = malloc(((size_t)n + 1) * sizeof(*rg))) == NULL)
		return dp_runtime_failed(r, "rank %d: %s", "out of memory");
	memcpy(rg, z->rg, (size_t)n * sizeof(*rg));
	mirror_free(f, n);
	dp_zero_free(z);
	i = dp_zero_init(z, r->cfg->dpo.zero, r->c, &r->wire, r->cfg->algo, rg,
	    n, r->bopt, &r->cfg->optim, what, e, sizeof(e));
	free(rg);
	if (i < 0) {
		r->kind = TRAIN_ERR_RUNTIME;
		return cli_fail(r->err, r->errlen, "%s", e);
	}
	dp_zero_take(z, whole);
	if (mirror_alloc(r, f) < 0)
		return -1;
	succ = (r->rank + 1) % r->world;
	for (i = 0; i < n && r->world > 1; i++) {
		dp_zero_slice(z, i, succ, &a, &len);
		f->opt[i].t = whole[i].t;
		memcpy(f->p + f->off[i], r->m->params + z->rg[i].off + a,
		    len * sizeof(float));
		if (nmom > 0)
			memcpy(f->opt[i].m, whole[i].m + a, len * sizeof(float));
		if (nmom > 1)
			memcpy(f->opt[i].v, whole[i].v + a, len * sizeof(float));
	}
	return cut_over(r);
}

int
dp_ftz_recut(struct dp_run *r)
{
	struct dp_ftz *f = r->ftz;
	struct dp_zero *z = &r->zero;
	int nmom = nn_optim_moments(&r->cfg->optim), wc, q, j, rc = -1;
	int64_t h[4] = { f->have ? f->world : 0, 0, f->have ? f->gen : -1,
	    f->have ? -f->gen : INT64_MIN }, *prov = NULL;
	size_t *counts = NULL, total = 0, at = 0, mine = 0;
	float *send = NULL, *all = NULL;
	struct nn_optim *whole = NULL;
	char e[COLLX_ERRLEN];

	for (q = 0; f->have && q < z->n; q++)
		h[1] = z->opt[q].t > h[1] ? z->opt[q].t : h[1];
	comm_set_step(r->c, "--ft: the ZeRO cut before");
	if (coll_allreduce(r->c, h, 4, DT_I64, COLL_MAX, COLL_AUTO) < 0)
		return dp_comm_failed(r);
	if (h[2] + h[3] != 0) {
		dp_runtime_failed(r, "rank %d: --ft: %s", "a rank left while "
		    "the ZeRO slices were cut again: the optimizer state is "
		    "lost");
		return -2;
	}
	wc = (int)h[0];
	prov = malloc(((size_t)wc + 1) * sizeof(*prov));
	counts = calloc((size_t)r->world + 1, sizeof(*counts));
	if (prov == NULL || counts == NULL) {
		dp_runtime_failed(r, "rank %d: %s", "out of memory");
		goto out;
	}
	if (providers(r, wc, prov) < 0)
		goto out;
	for (q = 0; q < wc; q++) {
		if (prov[q] < 0) {
			snprintf(e, sizeof(e), "rank %%d: --ft: slice %d of %d "
			    "of the ZeRO optimizer state is lost (its owner "
			    "and the rank before it in the ring, which "
			    "mirrored it, left at once)", q, wc);
			rc = -2;
			dp_runtime_failed(r, e, "");
			goto out;
		}
		counts[prov[q] % FTZ_MIRROR] += slice_floats(z, wc, q, nmom);
	}
	for (j = 0; j < r->world; j++)
		total += counts[j];
	mine = counts[r->rank];
	send = malloc((mine + 1) * sizeof(float));
	all = malloc((total + 1) * sizeof(float));
	whole = dp_zero_whole_alloc(z, &r->cfg->optim, e, sizeof(e));
	if (send == NULL || all == NULL || whole == NULL) {
		dp_runtime_failed(r, "rank %d: %s", whole == NULL ? e :
		    "out of memory");
		goto out;
	}
	for (q = 0; q < wc; q++)
		if (prov[q] == r->rank)
			at += slice_copy(z, wc, q, nmom, send + at,
			    r->m->params, NULL, z->opt, 0, 1);
		else if (prov[q] == FTZ_MIRROR + r->rank)
			at += slice_copy(z, wc, q, nmom, send + at, f->p,
			    f->off, f->opt, 0, 1);
	comm_set_step(r->c, "--ft: the ZeRO state cut again over %d "
	    "replicas", r->world);
	if (coll_allgatherv(r->c, send, all, counts, DT_F32, COLL_AUTO) < 0) {
		dp_comm_failed(r);
		goto out;
	}
	/* the allgatherv's order: by rank, then by slice */
	for (at = 0, j = 0; j < r->world; j++)
		for (q = 0; q < wc; q++)
			if (prov[q] % FTZ_MIRROR == j)
				at += slice_copy(z, wc, q, nmom, all + at,
				    r->m->params, NULL, whole, 1, 0);
	for (q = 0; q < z->n; q++)
		whole[q].t = (long)h[1];
	f->gen = (long)h[2] + 1;
	rc = take(r, whole, nmom);
out:
	dp_zero_whole_free(z, whole);
	free(all);
	free(send);
	free(counts);
	free(prov);
	return rc;
}
