/*
 * coll_allreduce: five allreduce algorithms, each reading top to bottom
 * (and the dispatch to the sixth, hier, of coll_hier.c).
 * All work in place on buf; AVG is reduced as SUM and divided at the end.
 * Every algorithm computes each element in one place (or symmetrically,
 * a + b on one rank and b + a on its partner), so every rank ends with
 * bitwise the same result.
 */
#include <stdlib.h>

#include "comm/coll_int.h"

/* Teaching baseline: rank 0 receives every buffer in turn and reduces it,
 * then sends the result back to each rank in turn. */
static int
allreduce_naive(struct coll_call *x, char *buf, size_t n)
{
	size_t bytes = n * x->esz;

	if (x->rank != 0) {
		comm_set_step(x->c, "naive send to rank 0");
		if (coll_send(x, 0, buf, bytes) < 0)
			return -1;
	} else {
		for (int r = 1; r < x->world; r++) {
			comm_set_step(x->c, "naive receive from rank %d", r);
			if (coll_recv(x, r, buf, bytes, 1) < 0)
				return -1;
		}
	}
	return coll_bcast_algo(x, buf, n, 0, COLL_LINEAR);
}

/* Ring: reduce-scatter (W-1 steps; rank r ends owning block r+1 reduced),
 * then allgather of the reduced blocks (W-1 steps). Each step moves 1/W of
 * the data in segments, reducing segment k while k+1 arrives. */
static int
allreduce_ring(struct coll_call *x, char *buf, size_t n)
{
	size_t *off = coll_parts(x, n, x->world);
	int rc;

	if (off == NULL)
		return -1;
	rc = coll_ring(x, buf, off, x->rank, 1, "reduce-scatter");
	if (rc == 0)
		rc = coll_ring(x, buf, off, x->rank + 1, 0, "allgather");
	free(off);
	return rc;
}

/* Binomial reduce to rank 0, then binomial broadcast from it. */
static int
allreduce_tree(struct coll_call *x, char *buf, size_t n)
{
	if (coll_reduce_binomial(x, buf, n, 0) < 0)
		return -1;
	return coll_bcast_algo(x, buf, n, 0, COLL_BINOMIAL);
}

/* Recursive doubling: log2(p2) rounds, each exchanging and reducing the
 * whole vector with the partner at distance 1, 2, 4, ...; the ranks past
 * the power of two below the world fold in first and get the result last. */
static int
allreduce_rd(struct coll_call *x, char *buf, size_t n)
{
	int p2 = coll_pow2_below(x->world), rem = x->world - p2;
	int nr = coll_fold_rank(x->rank, rem), step = 0;
	size_t bytes = n * x->esz;

	if (coll_fold(x, buf, bytes, rem, 1) < 0)
		return -1;
	for (int mask = 1; nr >= 0 && mask < p2; mask *= 2, step++) {
		int peer = coll_unfold_rank(nr ^ mask, rem);
		comm_set_step(x->c, "rd step %d", step);
		if (coll_xchg(x, peer, buf, bytes, peer, buf, bytes, 1) < 0)
			return -1;
	}
	return coll_fold(x, buf, bytes, rem, 0);
}

/* Rabenseifner: recursive-halving reduce-scatter over p2 blocks (uneven by
 * at most one element), then recursive-doubling allgather; non-powers of
 * two fold the extra ranks in first and hand them the result last. */
static int
allreduce_rabenseifner(struct coll_call *x, char *buf, size_t n)
{
	int p2 = coll_pow2_below(x->world), rem = x->world - p2;
	int nr = coll_fold_rank(x->rank, rem), rc = 0;
	size_t *off = coll_parts(x, n, p2);

	if (off == NULL)
		return -1;
	rc = coll_fold(x, buf, n * x->esz, rem, 1);
	if (rc == 0 && nr >= 0)
		rc = coll_halving(x, buf, off, nr, p2, rem);
	if (rc == 0 && nr >= 0)
		rc = coll_doubling(x, buf, off, nr, p2, rem);
	if (rc == 0)
		rc = coll_fold(x, buf, n * x->esz, rem, 0);
	free(off);
	return rc;
}

/*
 * Large vectors are reduced a slice at a time: a slice's buffer, its
 * segments in flight and the socket buffers stay in cache, so each byte
 * is reduced and forwarded while hot instead of streaming the whole vector
 * through memory once per step (on loopback, 64 MiB over 2 ranks in 1 MiB
 * slices ran about 1.5x faster than in one piece). The naive baseline is
 * left whole.
 */
#define SLICE_BYTES ((size_t)1 << 20)

static int
allreduce_slice(struct coll_call *x, enum coll_algo a, char *buf, size_t n)
{
	switch (a) {
	case COLL_TREE: return allreduce_tree(x, buf, n);
	case COLL_RD: return allreduce_rd(x, buf, n);
	case COLL_RABENSEIFNER: return allreduce_rabenseifner(x, buf, n);
	default: return allreduce_ring(x, buf, n);
	}
}

/* Also hier's: its cross-host step runs one of these on each share. */
int
coll_allreduce_algo(struct coll_call *x, char *buf, size_t n, enum coll_algo a)
{
	int slices = (int)((n * x->esz + SLICE_BYTES - 1) / SLICE_BYTES);

	if (a == COLL_NAIVE)
		return allreduce_naive(x, buf, n);
	if (a == COLL_HIER)
		return coll_hier_allreduce(x, buf, n);
	for (int i = 0; i < slices; i++) {
		size_t lo = coll_part(n, slices, i), hi = coll_part(n, slices, i + 1);
		if (allreduce_slice(x, a, buf + lo * x->esz, hi - lo) < 0)
			return -1;
	}
	return 0;
}

int
coll_allreduce(struct comm *c, void *buf, size_t count, enum dtype dt,
    enum coll_op op, enum coll_algo algo)
{
	struct coll_call x;
	enum coll_algo a = algo;

	if (a == COLL_AUTO)
		a = coll_auto_group(c, COLL_KIND_ALLREDUCE, count * dtype_size(dt));
	if (coll_begin(&x, c, COLL_KIND_ALLREDUCE, dt, op, a,
	    coll_sig(COLL_KIND_ALLREDUCE, count, op, -1, algo, NULL, 0), count, 1) < 0)
		return -1;
	if (x.world == 1 || count == 0)
		return coll_end(&x, 0);
	if (coll_allreduce_algo(&x, buf, count, a) < 0)
		return -1;
	if (op == COLL_AVG)
		coll_finish_avg(buf, count, dt, x.world);
	return coll_end(&x, 0);
}
