/* dp_zero: ZeRO stages 1 and 2 (Rajbhandari et al., 2020) over the gradient
 * buckets. Every bucket of len floats is cut into world slices of
 * c = ceil(len / W) floats (the last ones shorter or empty when W does not
 * divide len); rank q owns slice q of every bucket. A bucket's gradient
 * sums are reduce-scattered (a zero-padded copy when W does not divide
 * len), each rank steps the optimizer on its slices only (the state is
 * about 1/W of plain data parallelism's), and the updated slices are
 * allgathered. Stage 1 keeps the reduced slice in place in the gradient
 * vector; stage 2 keeps only the reduced slices, compact. The optimizers
 * are elementwise, so the result is plain data parallelism's up to the
 * order the reductions add in. With --wire the reduce-scatter is
 * dp_wire's, in the wire type. The cut and the reduce-scatter serve
 * collx-train's DP axis too (pipe_dp_zero.c), over a stage's ranges. */
#include <stdlib.h>
#include <string.h>

#include "par/dp_int.h"

void
dp_zero_cut(size_t n, int world, int q, size_t *off, size_t *len)
{
	size_t c = (n + (size_t)world - 1) / (size_t)world;
	size_t a = (size_t)q * c;

	*off = a < n ? a : n;
	*len = a < n ? (n - a < c ? n - a : c) : 0;
}

void
dp_zero_slice(const struct dp_run *r, int i, int q, size_t *off, size_t *len)
{
	dp_zero_cut(r->bucket[i + 1] - r->bucket[i], r->world, q, off, len);
}

static size_t
zero_chunk(const struct dp_run *r, int i)
{
	size_t n = r->bucket[i + 1] - r->bucket[i];

	return (n + (size_t)r->world - 1) / (size_t)r->world;
}

static enum coll_algo
zero_algo(const struct dp_run *r, enum coll_kind kind)
{
	return coll_algo_valid(kind, r->cfg->algo) ? r->cfg->algo : COLL_AUTO;
}

int
dp_zero_init(struct dp_run *r)
{
	size_t pad = 0, total = 0, off, len;
	int i;
	char e[COLLX_ERRLEN];

	r->bopt = calloc((size_t)r->nbucket, sizeof(*r->bopt));
	r->zoff = calloc((size_t)r->nbucket, sizeof(*r->zoff));
	r->zcounts = calloc((size_t)r->world, sizeof(*r->zcounts));
	if (r->bopt == NULL || r->zoff == NULL || r->zcounts == NULL)
		return dp_runtime_failed(r, "rank %d: %s", "out of memory");
	for (i = 0; i < r->nbucket; i++) {
		size_t c = zero_chunk(r, i), n = r->bucket[i + 1] - r->bucket[i];

		dp_zero_slice(r, i, r->rank, &off, &len);
		if (nn_optim_init(&r->bopt[i], &r->cfg->optim, len, e,
		    sizeof(e)) < 0)
			return dp_runtime_failed(r, "rank %d: %s", e);
		r->nbopt = i + 1;
		r->zoff[i] = total;
		total += c;
		if (c * (size_t)r->world != n && c * (size_t)r->world > pad)
			pad = c * (size_t)r->world;
	}
	if (r->cfg->dpo.zero == 2 && (r->gshard = calloc(total ? total : 1,
	    sizeof(float))) == NULL)
		return dp_runtime_failed(r, "rank %d: %s", "out of memory");
	r->gshard_len = total;
	if (pad > 0 && (r->zpad = malloc(pad * sizeof(float))) == NULL)
		return dp_runtime_failed(r, "rank %d: %s", "out of memory");
	return 0;
}

int
dp_zero_reduce_scatter(struct dp_wire *w, struct comm *c, float *g,
    size_t off, size_t n, float *pad, float *out, enum coll_algo algo)
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

/* Reduce-scatters bucket i's gradient sums: rank's slice of the sum lands
 * in its place in the gradients (stage 1) or in the compact shard. */
int
dp_zero_bucket(struct dp_run *r, int i)
{
	size_t a = r->bucket[i], n = r->bucket[i + 1] - a, off, len;
	float *g = r->m->grads + a;

	dp_zero_slice(r, i, r->rank, &off, &len);
	comm_set_step(r->c, "reduce-scatter of gradient bucket %d of %d", i + 1,
	    r->nbucket);
	if (dp_zero_reduce_scatter(&r->wire, r->c, g, a, n, r->zpad,
	    r->cfg->dpo.zero == 2 ? r->gshard + r->zoff[i] : g + off,
	    zero_algo(r, COLL_KIND_REDUCE_SCATTER)) < 0)
		return dp_comm_failed(r);
	return 0;
}

/* Steps the optimizer on this rank's slices and allgathers them. */
int
dp_zero_update(struct dp_run *r)
{
	float scale = (float)(1.0 / (double)r->cfg->batch);
	size_t off, len;
	int i, q;

	for (i = 0; i < r->nbucket; i++) {
		float *p = r->m->params + r->bucket[i];
		const float *g;

		dp_zero_slice(r, i, r->rank, &off, &len);
		g = r->cfg->dpo.zero == 2 ? r->gshard + r->zoff[i] :
		    r->m->grads + r->bucket[i] + off;
		nn_optim_step(&r->bopt[i], p + off, g, scale);
		for (q = 0; q < r->world; q++)
			dp_zero_slice(r, i, q, &off, &r->zcounts[q]);
		dp_zero_slice(r, i, r->rank, &off, &len);
		comm_set_step(r->c, "allgather of parameter bucket %d of %d",
		    i + 1, r->nbucket);
		if (coll_allgatherv(r->c, p + off, p, r->zcounts, DT_F32,
		    zero_algo(r, COLL_KIND_ALLGATHER)) < 0)
			return dp_comm_failed(r);
	}
	return 0;
}

void
dp_zero_free(struct dp_run *r)
{
	free(r->zoff);
	free(r->zcounts);
	free(r->gshard);
	free(r->zpad);
}
