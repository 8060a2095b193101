/*
 * coll_gather: the all-to-all family: allgather(v) (ring, recursive
 * doubling, Bruck), reduce-scatter (ring, pairwise, recursive halving) and
 * alltoall (pairwise, linear), and the dispatch to hier (coll_hier.c) for
 * the first two. Blocks are in rank order.
 */
#include <stdlib.h>
#include <string.h>

#include "comm/coll_int.h"

/* Recursive doubling over the blocks; a non-power-of-two world folds: the
 * even rank of each of the first pairs hands its block to the odd one
 * (whose range is then two adjacent blocks) and gets everything at the end. */
static int
allgather_rd(struct coll_call *x, char *recv, const size_t *off)
{
	int w = x->world, r = x->rank, p2 = coll_pow2_below(w), rem = w - p2;
	int nr = coll_fold_rank(r, rem), rc = 0;
	size_t e = x->esz, *noff;

	if (r < 2 * rem) {
		int b = r % 2 ? r - 1 : r;	/* the even rank's block */
		comm_set_step(x->c, "rd fold in");
		rc = r % 2 ? coll_recv(x, r - 1, recv + off[b] * e, (off[b + 1] - off[b]) * e, 0) :
		    coll_send(x, r + 1, recv + off[b] * e, (off[b + 1] - off[b]) * e);
	}
	if (rc < 0 || (noff = coll_alloc(x, ((size_t)p2 + 1) * sizeof *noff)) == NULL)
		return -1;
	for (int i = 0; i <= p2; i++)
		noff[i] = off[coll_fold_first(i, rem)];
	if (nr >= 0)
		rc = coll_doubling(x, recv, noff, nr, p2, rem);
	free(noff);
	return rc < 0 ? -1 : coll_fold(x, recv, off[w] * e, rem, 0);
}

/* Bruck: tmp holds blocks r, r+1, ... in that order; in round k a rank
 * sends its first min(k, w-k) blocks to rank r-k and appends those of rank
 * r+k, so ceil(log2 w) rounds gather everything; then unrotate. */
static int
allgather_bruck(struct coll_call *x, char *recv, const size_t *off)
{
	int w = x->world, r = x->rank, rc = 0;
	size_t e = x->esz, *rot = coll_alloc(x, ((size_t)w + 1) * sizeof *rot);
	char *tmp = rot ? coll_scratch(x, off[w] * e) : NULL;

	if (tmp == NULL) {
		free(rot);
		return -1;
	}
	rot[0] = 0;
	for (int i = 0; i < w; i++) {
		int b = (r + i) % w;
		rot[i + 1] = rot[i] + (off[b + 1] - off[b]) * e;
	}
	memcpy(tmp, recv + off[r] * e, rot[1]);
	for (int k = 1, round = 0; k < w && rc == 0; k *= 2, round++) {
		int cnt = k < w - k ? k : w - k;
		comm_set_step(x->c, "bruck round %d", round);
		rc = coll_xchg(x, (r - k + w) % w, tmp, rot[cnt], (r + k) % w,
		    tmp + rot[k], rot[k + cnt] - rot[k], 0);
	}
	for (int i = 1; i < w && rc == 0; i++)
		memcpy(recv + off[(r + i) % w] * e, tmp + rot[i], rot[i + 1] - rot[i]);
	free(rot);
	return rc;
}

int
coll_allgatherv_algo(struct coll_call *x, const void *send, char *recv,
    const size_t *off, enum coll_algo a)
{
	size_t mine = (off[x->rank + 1] - off[x->rank]) * x->esz;

	if (mine && recv + off[x->rank] * x->esz != send)
		memmove(recv + off[x->rank] * x->esz, send, mine);
	if (x->world == 1 || off[x->world] == 0)
		return 0;
	if (a == COLL_HIER)
		return coll_hier_allgatherv(x, send, recv, off);
	if (a == COLL_RD)
		return allgather_rd(x, recv, off);
	if (a == COLL_BRUCK)
		return allgather_bruck(x, recv, off);
	return coll_ring(x, recv, off, x->rank, 0, "allgather");
}

int
coll_allgatherv(struct comm *c, const void *send, void *recv,
    const size_t *counts, enum dtype dt, enum coll_algo algo)
{
	struct coll_call x;
	enum coll_algo a = algo;
	size_t *off, total = 0;
	int rc;

	for (int r = 0; r < comm_size(c); r++)
		total += counts[r];
	if (a == COLL_AUTO)
		a = coll_auto_group(c, COLL_KIND_ALLGATHER, total * dtype_size(dt));
	if (coll_begin(&x, c, COLL_KIND_ALLGATHER, dt, COLL_SUM, a,
	    coll_sig(COLL_KIND_ALLGATHER, total, 0, -1, algo, counts, comm_size(c)),
	    total, 1) < 0)
		return -1;
	if ((off = coll_prefix(&x, counts)) == NULL)
		return -1;
	rc = coll_allgatherv_algo(&x, send, recv, off, a);
	free(off);
	return coll_end(&x, rc);
}

int
coll_allgather(struct comm *c, const void *send, void *recv, size_t count,
    enum dtype dt, enum coll_algo algo)
{
	size_t *counts = malloc((size_t)comm_size(c) * sizeof *counts);
	int rc;

	if (counts == NULL) {
		comm_fail(c, COMM_ERR_RUNTIME, "out of memory");
		return -1;
	}
	for (int r = 0; r < comm_size(c); r++)
		counts[r] = count;
	rc = coll_allgatherv(c, send, recv, counts, dt, algo);
	free(counts);
	return rc;
}

/* Pairwise: in step s, send block r+s of the input to rank r+s and reduce
 * the block r of rank r-s into the result. */
static int
rs_pairwise(struct coll_call *x, const char *send, char *recv, size_t n)
{
	int w = x->world, r = x->rank;
	size_t bytes = n * x->esz;

	if (recv != send + (size_t)r * bytes)
		memcpy(recv, send + (size_t)r * bytes, bytes);
	for (int s = 1; s < w; s++) {
		int to = (r + s) % w, from = (r - s + w) % w;
		comm_set_step(x->c, "pairwise step %d", s);
		if (coll_xchg(x, to, send + (size_t)to * bytes, bytes, from, recv, bytes, 1) < 0)
			return -1;
	}
	return 0;
}

/* Ring: in step s a rank sends block r-1-s (its own input block first,
 * then the one it reduced the step before) and, as block r-2-s arrives,
 * reduces it with its input block into one of two scratch blocks (the last
 * step straight into recv, block r): the input is read once, never copied. */
static int
rs_ring(struct coll_call *x, const char *send, char *recv, size_t n)
{
	int w = x->world, r = x->rank, next = (r + 1) % w, prev = (r + w - 1) % w;
	size_t bytes = n * x->esz;
	char *acc = w > 2 ? coll_scratch(x, 2 * bytes) : NULL;
	const char *out = send + (size_t)coll_mod(r - 1, w) * bytes;

	if (w > 2 && acc == NULL)
		return -1;
	for (int s = 0; s < w - 1; s++) {
		int rb = coll_mod(r - 2 - s, w);
		char *dst = s == w - 2 ? recv : acc + (size_t)(s & 1) * bytes;
		comm_set_step(x->c, "ring reduce-scatter step %d", s);
		if (coll_xchg_init(x, next, out, bytes, prev, dst, send + (size_t)rb * bytes,
		    bytes) < 0)
			return -1;
		out = dst;
	}
	return 0;
}

/* Recursive halving over a working copy; a non-power-of-two world folds
 * the extra ranks' vectors in first (new rank nr then owns the blocks of
 * its one or two real ranks) and hands the even rank its block at the end. */
static int
rs_halving(struct coll_call *x, char *work, char *recv, size_t n)
{
	int w = x->world, r = x->rank, p2 = coll_pow2_below(w), rem = w - p2;
	int nr = coll_fold_rank(r, rem), rc;
	size_t bytes = n * x->esz, *noff;

	if (coll_fold(x, work, bytes * (size_t)w, rem, 1) < 0 ||
	    (noff = coll_alloc(x, ((size_t)p2 + 1) * sizeof *noff)) == NULL)
		return -1;
	for (int i = 0; i <= p2; i++)
		noff[i] = (size_t)coll_fold_first(i, rem) * n;
	rc = nr >= 0 ? coll_halving(x, work, noff, nr, p2, rem) : 0;
	free(noff);
	if (rc < 0)
		return -1;
	if (r < 2 * rem) {
		comm_set_step(x->c, "halving fold out");
		if (r % 2 == 0)
			return coll_recv(x, r + 1, recv, bytes, 0);
		if (coll_send(x, r - 1, work + (size_t)(r - 1) * bytes, bytes) < 0)
			return -1;
	}
	memcpy(recv, work + (size_t)r * bytes, bytes);
	return 0;
}

int
coll_reduce_scatter_algo(struct coll_call *x, const char *send, char *recv,
    size_t n, enum coll_algo a)
{
	size_t bytes = n * x->esz, total = bytes * (size_t)x->world;
	int apart = !coll_overlap(send, total, recv, bytes) ||
	    recv == send + (size_t)x->rank * bytes;
	char *work;
	int rc;

	if (x->world == 1 || n == 0) {
		if (recv != send)
			memmove(recv, send, bytes);
		return 0;
	}
	if (a == COLL_HIER)
		return coll_hier_reduce_scatter(x, send, recv, n);

	/* Ring and pairwise read the input as they go; halving reduces in place. */
	if (apart && a != COLL_HALVING)
		return a == COLL_PAIRWISE ? rs_pairwise(x, send, recv, n) :
		    rs_ring(x, send, recv, n);
	work = a == COLL_HALVING ? coll_scratch(x, total) : coll_alloc(x, total);
	if (work == NULL)
		return -1;
	memcpy(work, send, total);
	if (a == COLL_PAIRWISE)
		rc = rs_pairwise(x, work, recv, n);
	else if (a == COLL_HALVING)
		rc = rs_halving(x, work, recv, n);
	else
		rc = rs_ring(x, work, recv, n);
	if (a != COLL_HALVING)
		free(work);
	return rc;
}

int
coll_reduce_scatter(struct comm *c, const void *send, void *recv, size_t count,
    enum dtype dt, enum coll_op op, enum coll_algo algo)
{
	struct coll_call x;
	enum coll_algo a = algo;
	int rc;

	if (a == COLL_AUTO)
		a = coll_auto_group(c, COLL_KIND_REDUCE_SCATTER,
		    count * dtype_size(dt) * (size_t)comm_size(c));
	if (coll_begin(&x, c, COLL_KIND_REDUCE_SCATTER, dt, op, a,
	    coll_sig(COLL_KIND_REDUCE_SCATTER, count, op, -1, algo, NULL, 0),
	    count, (size_t)comm_size(c)) < 0)
		return -1;
	if (count == 0)
		return coll_end(&x, 0);
	rc = coll_reduce_scatter_algo(&x, send, recv, count, a);
	if (rc == 0 && op == COLL_AVG)
		coll_finish_avg(recv, count, dt, x.world);
	return coll_end(&x, rc);
}

/* Linear: every receive and send posted at once, the transport moving
 * them all together. */
static int
alltoall_linear(struct coll_call *x, const char *send, char *recv, size_t bytes)
{
	int w = x->world, r = x->rank, n = 0, rc;
	struct comm_req *rq = coll_alloc(x, 2 * (size_t)w * sizeof *rq);

	if (rq == NULL)
		return -1;
	comm_set_step(x->c, "linear exchange");
	for (int p = 0; p < w; p++)
		if (p != r && (comm_irecv(x->c, p, 0, recv + (size_t)p * bytes, bytes, &rq[n++]) < 0 ||
		    comm_isend(x->c, p, 0, send + (size_t)p * bytes, bytes, &rq[n++]) < 0)) {
			free(rq);
			return -1;
		}
	rc = comm_waitall(x->c, rq, n);
	free(rq);
	return rc;
}

/* Pairwise: in step s, send block r+s to rank r+s and receive block r-s. */
static int
alltoall_pairwise(struct coll_call *x, const char *send, char *recv,
    size_t bytes)
{
	int w = x->world, r = x->rank;

	for (int s = 1; s < w; s++) {
		int to = (r + s) % w, from = (r - s + w) % w;
		comm_set_step(x->c, "pairwise step %d", s);
		if (coll_xchg(x, to, send + (size_t)to * bytes, bytes, from,
		    recv + (size_t)from * bytes, bytes, 0) < 0)
			return -1;
	}
	return 0;
}

int
coll_alltoall(struct comm *c, const void *send, void *recv, size_t count,
    enum dtype dt, enum coll_algo algo)
{
	struct coll_call x;
	enum coll_algo a = algo;
	size_t bytes = count * dtype_size(dt), total = bytes * (size_t)comm_size(c);
	char *copy = NULL;
	int rc;

	if (a == COLL_AUTO)
		a = coll_auto(COLL_KIND_ALLTOALL, total, comm_size(c));
	if (coll_begin(&x, c, COLL_KIND_ALLTOALL, dt, COLL_SUM, a,
	    coll_sig(COLL_KIND_ALLTOALL, count, 0, -1, algo, NULL, 0),
	    count, (size_t)comm_size(c)) < 0)
		return -1;
	if (count == 0)
		return coll_end(&x, 0);
	if (coll_overlap(send, total, recv, total)) {	/* in place: work from a copy */
		if ((copy = coll_scratch(&x, total)) == NULL)
			return -1;
		send = memcpy(copy, send, total);
	}
	memcpy((char *)recv + (size_t)x.rank * bytes, (const char *)send +
	    (size_t)x.rank * bytes, bytes);
	rc = a == COLL_LINEAR ? alltoall_linear(&x, send, recv, bytes) :
	    alltoall_pairwise(&x, send, recv, bytes);
	return coll_end(&x, rc);
}
