/*
 * coll_bcast: one-to-all and all-to-one building blocks: broadcast (linear,
 * binomial tree, scatter + ring allgather, pipelined ring), reduce
 * (binomial tree), gatherv and scatterv (linear), and barrier.
 * Trees are built on virtual ranks vr = (rank - root) mod world.
 */
#include <stdlib.h>
#include <string.h>

#include "comm/coll_int.h"

/* The teaching baseline: the root sends the whole buffer to each rank in turn. */
static int
bcast_linear(struct coll_call *x, char *buf, size_t bytes, int root)
{
	if (x->rank != root) {
		comm_set_step(x->c, "linear receive from root %d", root);
		return coll_recv(x, root, buf, bytes, 0);
	}
	for (int r = 0; r < x->world; r++) {
		if (r == root)
			continue;
		comm_set_step(x->c, "linear send to rank %d", r);
		if (coll_send(x, r, buf, bytes) < 0)
			return -1;
	}
	return 0;
}

/* Receive from the parent (vr minus its lowest set bit), then send to the
 * children vr + mask for each mask below that bit, largest subtree first. */
static int
bcast_binomial(struct coll_call *x, char *buf, size_t bytes, int root)
{
	int w = x->world, vr = coll_mod(x->rank - root, w), mask;

	for (mask = 1; mask < w; mask *= 2)
		if (vr & mask) {
			comm_set_step(x->c, "binomial receive from vr %d", vr - mask);
			if (coll_recv(x, (vr - mask + root) % w, buf, bytes, 0) < 0)
				return -1;
			break;
		}
	for (mask /= 2; mask > 0; mask /= 2)
		if (vr + mask < w) {
			comm_set_step(x->c, "binomial send to vr %d", vr + mask);
			if (coll_send(x, (vr + mask + root) % w, buf, bytes) < 0)
				return -1;
		}
	return 0;
}

/* Binomial scatter of blocks off[] indexed by virtual rank: each subtree
 * [vr, vr + lowest bit) gets its contiguous run of blocks. */
static int
scatter_binomial(struct coll_call *x, char *buf, const size_t *off, int root)
{
	int w = x->world, vr = coll_mod(x->rank - root, w), mask, end;
	size_t e = x->esz;

	for (mask = 1; mask < w; mask *= 2)
		if (vr & mask) {
			end = vr + mask < w ? vr + mask : w;
			comm_set_step(x->c, "scatter receive from vr %d", vr - mask);
			if (coll_recv(x, (vr - mask + root) % w, buf + off[vr] * e,
			    (off[end] - off[vr]) * e, 0) < 0)
				return -1;
			break;
		}
	for (mask /= 2; mask > 0; mask /= 2)
		if (vr + mask < w) {
			end = vr + 2 * mask < w ? vr + 2 * mask : w;
			comm_set_step(x->c, "scatter send to vr %d", vr + mask);
			if (coll_send(x, (vr + mask + root) % w, buf + off[vr + mask] * e,
			    (off[end] - off[vr + mask]) * e) < 0)
				return -1;
		}
	return 0;
}

/* Large messages: scatter W blocks down the tree, then ring allgather. */
static int
bcast_scatter_allgather(struct coll_call *x, char *buf, size_t n, int root)
{
	size_t *off = coll_parts(x, n, x->world);
	int rc;

	if (off == NULL)
		return -1;
	rc = scatter_binomial(x, buf, off, root);
	if (rc == 0)
		rc = coll_ring(x, buf, off, coll_mod(x->rank - root, x->world), 0,
		    "allgather");
	free(off);
	return rc;
}

/* A chain root -> root+1 -> ...: each segment is forwarded as soon as it
 * arrives, so all links carry data at once. */
static int
bcast_ring(struct coll_call *x, char *buf, size_t bytes, int root)
{
	int w = x->world, vr = coll_mod(x->rank - root, w);
	int prev = vr > 0 ? (x->rank + w - 1) % w : -1;
	int next = vr < w - 1 ? (x->rank + 1) % w : -1;
	size_t seg = coll_segment(bytes), nseg = (bytes + seg - 1) / seg;

	comm_set_step(x->c, "ring pipeline");
	for (size_t j = 0; j < nseg; j++) {
		size_t off = j * seg, len = bytes - off < seg ? bytes - off : seg;
		if (prev >= 0 && coll_recv(x, prev, buf + off, len, 0) < 0)
			return -1;
		if (next >= 0 && coll_send(x, next, buf + off, len) < 0)
			return -1;
	}
	return 0;
}

int
coll_bcast_algo(struct coll_call *x, char *buf, size_t n, int root,
    enum coll_algo algo)
{
	size_t bytes = n * x->esz;

	switch (algo) {
	case COLL_LINEAR: return bcast_linear(x, buf, bytes, root);
	case COLL_SCATTER_ALLGATHER: return bcast_scatter_allgather(x, buf, n, root);
	case COLL_RING: return bcast_ring(x, buf, bytes, root);
	case COLL_HIER: return coll_hier_bcast(x, buf, n, root);
	default: return bcast_binomial(x, buf, bytes, root);
	}
}

int
coll_broadcast(struct comm *c, void *buf, size_t count, enum dtype dt,
    int root, enum coll_algo algo)
{
	struct coll_call x;
	enum coll_algo a = algo;

	if (a == COLL_AUTO)
		a = coll_auto_group(c, COLL_KIND_BROADCAST, count * dtype_size(dt));
	if (coll_begin(&x, c, COLL_KIND_BROADCAST, dt, COLL_SUM, a,
	    coll_sig(COLL_KIND_BROADCAST, count, 0, root, algo, NULL, 0), count, 1) < 0)
		return -1;
	if (root < 0 || root >= x.world) {
		comm_fail(c, COMM_ERR_MISMATCH, "broadcast: no root rank %d", root);
		return -1;
	}
	if (x.world == 1 || count == 0)
		return coll_end(&x, 0);
	return coll_end(&x, coll_bcast_algo(&x, buf, count, root, a));
}

/* Binomial tree towards root: at bit mask, a rank with the bit set sends
 * its partial result to vr - mask and is done; the others receive from
 * vr + mask and reduce. buf is the accumulator. */
int
coll_reduce_binomial(struct coll_call *x, char *buf, size_t n, int root)
{
	int w = x->world, vr = coll_mod(x->rank - root, w);
	size_t bytes = n * x->esz;

	for (int mask = 1; mask < w; mask *= 2) {
		if (vr & mask) {
			comm_set_step(x->c, "binomial send to vr %d", vr - mask);
			return coll_send(x, (vr - mask + root) % w, buf, bytes);
		}
		if (vr + mask < w) {
			comm_set_step(x->c, "binomial receive from vr %d", vr + mask);
			if (coll_recv(x, (vr + mask + root) % w, buf, bytes, 1) < 0)
				return -1;
		}
	}
	return 0;
}

/* The result lands in buf on root; the other ranks' buf is left as it was. */
int
coll_reduce(struct comm *c, void *buf, size_t count, enum dtype dt,
    enum coll_op op, int root)
{
	struct coll_call x;
	char *acc = buf;
	int rc, vr;

	if (coll_begin(&x, c, COLL_KIND_REDUCE, dt, op, COLL_BINOMIAL,
	    coll_sig(COLL_KIND_REDUCE, count, op, root, COLL_BINOMIAL, NULL, 0), count, 1) < 0)
		return -1;
	if (root < 0 || root >= x.world) {
		comm_fail(c, COMM_ERR_MISMATCH, "reduce: no root rank %d", root);
		return -1;
	}
	if (count == 0)
		return coll_end(&x, 0);
	vr = coll_mod(x.rank - root, x.world);
	if (vr != 0 && vr % 2 == 0 && vr + 1 < x.world) {	/* has children */
		if ((acc = coll_scratch(&x, count * x.esz)) == NULL)
			return -1;
		memcpy(acc, buf, count * x.esz);
	}
	rc = coll_reduce_binomial(&x, acc, count, root);
	if (rc == 0 && vr == 0 && op == COLL_AVG)
		coll_finish_avg(buf, count, dt, x.world);
	return coll_end(&x, rc);
}

/* A non-root rank's part of gatherv or scatterv: its own block only. */
static int
linear_leaf(struct coll_call *x, int gather, const void *send, void *recv,
    size_t bytes, int root)
{
	comm_set_step(x->c, "linear block of rank %d", x->rank);
	return gather ? coll_send(x, root, send, bytes) : coll_recv(x, root, recv, bytes, 0);
}

/* The root's part: block r moves with each rank r in turn; its own block
 * is copied locally (unless already in place). */
static int
linear_root(struct coll_call *x, int gather, const void *send, void *recv,
    const size_t *off)
{
	char *all = gather ? recv : (char *)send;

	for (int r = 0; r < x->world; r++) {
		char *blk = all + off[r] * x->esz;
		size_t bytes = (off[r + 1] - off[r]) * x->esz;
		comm_set_step(x->c, "linear block of rank %d", r);
		if (r != x->rank) {
			if ((gather ? coll_recv(x, r, blk, bytes, 0) : coll_send(x, r, blk, bytes)) < 0)
				return -1;
		} else if (bytes > 0 && blk != (gather ? send : recv)) {
			memmove(gather ? blk : recv, gather ? send : blk, bytes);
		}
	}
	return 0;
}

static int
linear_blocks(struct comm *c, enum coll_kind kind, const void *send,
    void *recv, const size_t *counts, enum dtype dt, int root)
{
	struct coll_call x;
	int gather = kind == COLL_KIND_GATHER, rc;
	size_t *off;

	if (coll_begin(&x, c, kind, dt, COLL_SUM, COLL_LINEAR,
	    coll_sig(kind, 0, 0, root, COLL_LINEAR, counts, comm_size(c)), 0, 0) < 0)
		return -1;
	if (root < 0 || root >= x.world) {
		comm_fail(c, COMM_ERR_MISMATCH, "no root rank %d", root);
		return -1;
	}
	if (x.rank != root)
		return coll_end(&x, linear_leaf(&x, gather, send, recv,
		    counts[x.rank] * x.esz, root));
	if ((off = coll_prefix(&x, counts)) == NULL)
		return -1;
	rc = linear_root(&x, gather, send, recv, off);
	free(off);
	return coll_end(&x, rc);
}

int
coll_gatherv(struct comm *c, const void *send, void *recv, const size_t *counts,
    enum dtype dt, int root)
{
	return linear_blocks(c, COLL_KIND_GATHER, send, recv, counts, dt, root);
}

int
coll_scatterv(struct comm *c, const void *send, void *recv, const size_t *counts,
    enum dtype dt, int root)
{
	return linear_blocks(c, COLL_KIND_SCATTER, send, recv, counts, dt, root);
}

/* Dissemination: in round k every rank signals rank + 2^k and waits for
 * rank - 2^k; after ceil(log2 w) rounds everyone has heard from everyone. */
int
coll_barrier(struct comm *c)
{
	struct coll_call x;
	char out = 1, in;

	if (coll_begin(&x, c, COLL_KIND_BARRIER, DT_U8, COLL_SUM, COLL_AUTO,
	    coll_sig(COLL_KIND_BARRIER, 0, 0, 0, COLL_AUTO, NULL, 0), 0, 0) < 0)
		return -1;
	for (int k = 1, round = 0; k < x.world; k *= 2, round++) {
		comm_set_step(c, "barrier round %d", round);
		if (coll_xchg(&x, (x.rank + k) % x.world, &out, 1,
		    (x.rank - k + x.world) % x.world, &in, 1, 0) < 0)
			return -1;
	}
	return coll_end(&x, 0);
}
