/* dp_zero: ZeRO stages 1 and 2 (Rajbhandari et al., 2020) over the ranges
 * of a flat vector, the one implementation behind collx-dp (a range per
 * gradient bucket, dp.c) and collx-train's DP axis (a range per parameter
 * range of the stage, pipe_dp_zero.c). Every range of len floats is cut
 * into world slices of c = ceil(len / W) floats (the last ones shorter or
 * empty when W does not divide len); rank q owns slice q of every range.
 * A range's gradient sums are reduce-scattered (a zero-padded copy when W
 * does not divide len; with --wire, dp_wire's, in the wire type), each
 * rank steps an optimizer sized for its slice (the state is about 1/W of
 * plain data parallelism's), and the updated slices are allgathered.
 * Stage 1 keeps the reduced slice in place in the gradient vector; stage
 * 2 keeps only the reduced slices, compact (so does stage 3, whose
 * parameters dp_fsdp.c gathers a range at a time). The optimizers are
 * elementwise, so the result is plain data parallelism's up to the order
 * the reductions add in. Checkpoints hold the state whole, as plain data
 * parallelism does, written from the pieces each rank holds
 * (dp_zero_pieces; collx-train's, pipe_ckpt.c). */
#include <stdlib.h>
#include <string.h>

#include "cli/util.h"
#include "par/ckpt.h"
#include "par/dp_sync.h"

void
dp_zero_cut(size_t n, int world, int q, size_t *off, size_t *len)
{
	size_t c = (n + (size_t)world - 1) / (size_t)world;
	size_t a = (size_t)q * c;

	*off = a < n ? a : n;
	*len = a < n ? (n - a < c ? n - a : c) : 0;
}

void
dp_zero_slice(const struct dp_zero *z, int i, int q, size_t *off,
    size_t *len)
{
	dp_zero_cut(z->rg[i].len, z->world, q, off, len);
}

static enum coll_algo
algo_for(enum coll_algo a, enum coll_kind kind)
{
	return coll_algo_valid(kind, a) ? a : COLL_AUTO;
}

int
dp_zero_init(struct dp_zero *z, int stage, struct comm *c, struct dp_wire *w,
    enum coll_algo algo, const struct dp_range *rg, int n,
    struct nn_optim *opt, const struct nn_optim_cfg *oc, const char *what,
    char *err, size_t errlen)
{
	size_t pad = 0, off, len, cs;
	char e[COLLX_ERRLEN];
	int i;

	memset(z, 0, sizeof(*z));
	z->stage = stage;
	z->c = c;
	z->wire = w;
	z->rank = comm_rank(c);
	z->world = comm_size(c);
	z->n = n;
	z->opt = opt;
	z->what = what;
	z->rs_algo = algo_for(algo, COLL_KIND_REDUCE_SCATTER);
	z->ag_algo = algo_for(algo, COLL_KIND_ALLGATHER);
	z->rg = malloc(((size_t)n + 1) * sizeof(*z->rg));
	z->goff = calloc((size_t)n + 1, sizeof(*z->goff));
	z->counts = calloc((size_t)z->world, sizeof(*z->counts));
	if (z->rg == NULL || z->goff == NULL || z->counts == NULL)
		return cli_fail(err, errlen, "rank %d: out of memory", z->rank);
	memcpy(z->rg, rg, (size_t)n * sizeof(*rg));
	for (i = 0; i < n; i++) {
		cs = (rg[i].len + (size_t)z->world - 1) / (size_t)z->world;
		if (cs * (size_t)z->world != rg[i].len &&
		    cs * (size_t)z->world > pad)
			pad = cs * (size_t)z->world;
		dp_zero_slice(z, i, z->rank, &off, &len);
		z->goff[i] = z->ngrad;
		z->ngrad += len;
		nn_optim_free(&opt[i]);
		if (nn_optim_init(&opt[i], oc, len, e, sizeof(e)) < 0)
			return cli_fail(err, errlen, "rank %d: %s", z->rank, e);
	}
	if ((pad > 0 && (z->pad = malloc(pad * sizeof(float))) == NULL) ||
	    (stage >= 2 && (z->grad = calloc(z->ngrad ? z->ngrad : 1,
	    sizeof(float))) == NULL))
		return cli_fail(err, errlen, "rank %d: out of memory", z->rank);
	return 0;
}

void
dp_zero_free(struct dp_zero *z)
{
	free(z->rg);
	free(z->goff);
	free(z->counts);
	free(z->pad);
	free(z->grad);
	memset(z, 0, sizeof(*z));
}

/* The n gradient sums g (floats [off, off+n) of the vector w's error
 * feedback covers) summed over c, this rank's slice of the sum into out;
 * pad: room for n rounded up to a multiple of c's size. */
static int
reduce_scatter(struct dp_wire *w, struct comm *c, float *g, size_t off,
    size_t n, float *pad, float *out, enum coll_algo algo)
{
	int world = comm_size(c), rank = comm_rank(c);
	size_t cs = (n + (size_t)world - 1) / (size_t)world, a, len;

	dp_zero_cut(n, world, rank, &a, &len);
	if (w->type != DP_WIRE_F32)
		return dp_wire_reduce_scatter(w, c, g, off, n, out, len, algo);
	if (cs * (size_t)world == n)
		return coll_reduce_scatter(c, g, out, cs, DT_F32, COLL_SUM,
		    algo);
	/* the slices are cs floats on the wire: the last ones padded */
	memcpy(pad, g, n * sizeof(float));
	memset(pad + n, 0, (cs * (size_t)world - n) * sizeof(float));
	if (coll_reduce_scatter(c, pad, pad + (size_t)rank * cs, cs, DT_F32,
	    COLL_SUM, algo) < 0)
		return -1;
	memcpy(out, pad + (size_t)rank * cs, len * sizeof(float));
	return 0;
}

float *
dp_zero_reduced(const struct dp_zero *z, float *grads, int i)
{
	size_t off, len;

	if (z->stage >= 2)
		return z->grad + z->goff[i];
	dp_zero_slice(z, i, z->rank, &off, &len);
	return grads + z->rg[i].off + off;
}

int
dp_zero_reduce(struct dp_zero *z, float *grads, int i)
{
	comm_set_step(z->c, "reduce-scatter of the gradients of %s %d of %d",
	    z->what, i + 1, z->n);
	return reduce_scatter(z->wire, z->c, grads + z->rg[i].off,
	    z->rg[i].off, z->rg[i].len, z->pad, dp_zero_reduced(z, grads, i),
	    z->rs_algo);
}

void
dp_zero_step(struct dp_zero *z, float *params, float *grads, float scale)
{
	size_t off, len;

	for (int i = 0; i < z->n; i++) {
		dp_zero_slice(z, i, z->rank, &off, &len);
		nn_optim_step(&z->opt[i], params + z->rg[i].off + off,
		    dp_zero_reduced(z, grads, i), scale);
	}
}

int
dp_zero_allgather_one(struct dp_zero *z, float *params, int i)
{
	float *p = params + z->rg[i].off;
	size_t off;
	int q;

	for (q = 0; q < z->world; q++)
		dp_zero_slice(z, i, q, &off, &z->counts[q]);
	dp_zero_slice(z, i, z->rank, &off, &z->counts[z->rank]);
	comm_set_step(z->c, "allgather of the parameters of %s %d of %d",
	    z->what, i + 1, z->n);
	return coll_allgatherv(z->c, p + off, p, z->counts, DT_F32, z->ag_algo);
}

int
dp_zero_allgather(struct dp_zero *z, float *params)
{
	for (int i = 0; i < z->n; i++)
		if (dp_zero_allgather_one(z, params, i) < 0)
			return -1;
	return 0;
}

size_t
dp_zero_grad_bytes(const struct dp_zero *z, size_t whole)
{
	return (z->stage >= 2 ? z->ngrad : whole) * sizeof(float);
}

/* ---- checkpoints: the state whole ------------------------------------- */

size_t
dp_zero_pieces(struct dp_zero *z, struct ckpt_piece *p)
{
	size_t k = 0, off, len;

	for (int i = 0; i < z->n; i++)
		for (int q = 0; q < z->world; q++) {
			dp_zero_slice(z, i, q, &off, &len);
			p[k++] = (struct ckpt_piece){ q, z->rg[i].off + off,
			    len, q == z->rank ? &z->opt[i] : NULL, 0, NULL };
		}
	return k;
}

struct nn_optim *
dp_zero_whole_alloc(const struct dp_zero *z, const struct nn_optim_cfg *oc,
    char *err, size_t errlen)
{
	struct nn_optim *w = calloc((size_t)z->n + 1, sizeof(*w));
	char e[COLLX_ERRLEN];

	if (w == NULL) {
		cli_fail(err, errlen, "rank %d: out of memory", z->rank);
		return NULL;
	}
	for (int i = 0; i < z->n; i++)
		if (nn_optim_init(&w[i], oc, z->rg[i].len, e, sizeof(e)) < 0) {
			dp_zero_whole_free(z, w);
			cli_fail(err, errlen, "rank %d: %s", z->rank, e);
			return NULL;
		}
	return w;
}

void
dp_zero_whole_free(const struct dp_zero *z, struct nn_optim *w)
{
	for (int i = 0; w != NULL && i < z->n; i++)
		nn_optim_free(&w[i]);
	free(w);
}

void
dp_zero_take(const struct dp_zero *z, const struct nn_optim *whole, int q,
    struct nn_optim *opt)
{
	size_t off, len;

	for (int i = 0; i < z->n; i++) {
		struct nn_optim *o = &opt[i];

		dp_zero_slice(z, i, q, &off, &len);
		if (o->m != NULL)
			memcpy(o->m, whole[i].m + off, len * sizeof(float));
		if (o->v != NULL)
			memcpy(o->v, whole[i].v + off, len * sizeof(float));
		o->t = whole[i].t;
	}
}
