/* coll internals shared by the coll_*.c files; not part of the API. */
#ifndef COLLX_COLL_INT_H
#define COLLX_COLL_INT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "comm/coll.h"
#include "comm/reduce.h"

/* One collective call in progress: its group, element type and scratch. */
struct coll_call {
	struct comm *c;
	int rank, world;
	enum dtype dt;
	size_t esz;		/* bytes per element */
	reduce_fn red;		/* the op's kernel */
	const char *algo;	/* name, for step labels */
};

/* Validate, stamp the operation on c (comm_op_begin) and fill x; 0 or -1
 * with a COMM_ERR_MISMATCH failure on c for a bad dtype, op or algo, or a
 * size (blocks of count elements) beyond size_t. */
int coll_begin(struct coll_call *x, struct comm *c, enum coll_kind kind,
    enum dtype dt, enum coll_op op, enum coll_algo algo, uint64_t sig,
    size_t count, size_t blocks);
/* "allreduce", ... for messages. */
const char *coll_kind_name(enum coll_kind kind);
/* rc, the collective's end: on 0 its operation is done (comm_op_end). */
int coll_end(struct coll_call *x, int rc);
/* A signature folding every argument that ranks must agree on. */
uint64_t coll_sig(enum coll_kind kind, size_t count, int op, int root,
    enum coll_algo algo, const size_t *counts, int ncounts);
/* Fail the operation with a COMM_ERR_RUNTIME "out of memory" and NULL. */
void *coll_alloc(struct coll_call *x, size_t bytes);
/* A per-thread working buffer kept between calls (not to be freed; one
 * user at a time); NULL with the failure recorded. */
void *coll_scratch(struct coll_call *x, size_t bytes);

/*
 * Send sbytes from sbuf to rank `to` while receiving rbytes from rank
 * `from` into rbuf, both cut into segments and pipelined: segment
 * j+1 is posted before segment j is waited for. With reduce, what arrives
 * is reduced into rbuf (by x->red) instead of overwriting it. A length of
 * 0 moves nothing (both ends compute lengths alike, so they agree).
 */
int coll_xchg(struct coll_call *x, int to, const void *sbuf, size_t sbytes,
    int from, void *rbuf, size_t rbytes, int reduce);
/* The same, reducing into rbuf what arrives with init (rbuf = init op in),
 * init read a segment at a time as the data arrives; init may be rbuf. */
int coll_xchg_init(struct coll_call *x, int to, const void *sbuf, size_t sbytes,
    int from, void *rbuf, const void *init, size_t rbytes);
/* Bytes per segment of a len-byte message (the same on both ends). */
size_t coll_segment(size_t len);
int coll_send(struct coll_call *x, int to, const void *buf, size_t bytes);
int
coll_recv(struct coll_call *x, int from, void *buf, size_t bytes, int reduce);

/* Start of part i of n elements cut into parts as even as possible. */
size_t coll_part(size_t n, int parts, int i);
/* parts+1 element offsets of n cut into parts; NULL (failed) when out of memory. */
size_t *coll_parts(struct coll_call *x, size_t n, int parts);
/* world+1 element offsets of blocks of counts[r] elements, rank order. */
size_t *coll_prefix(struct coll_call *x, const size_t *counts);
/* Whether two byte ranges share a byte. */
int coll_overlap(const void *a, size_t alen, const void *b, size_t blen);
/* Rank ordering helpers: (a mod w) for any a. */
static inline int
coll_mod(int a, int w)
{
	return ((a % w) + w) % w;
}

/*
 * Folding a world to the power of two p2 <= w below it: the first 2*rem
 * ranks (rem = w - p2) pair up, the even one of each pair handing its
 * data to the odd one and sitting out. coll_fold_rank gives the new rank or
 * -1 for one that sits out; coll_unfold_rank maps back.
 */
int coll_pow2_below(int w);
int coll_fold_rank(int r, int rem);
int coll_unfold_rank(int nr, int rem);
/* Fold in: the even rank of each pair sends buf to the odd one, which
 * reduces it into its own; fold out: the odd one sends its buf back. */
int coll_fold(struct coll_call *x, char *buf, size_t bytes, int rem, int in);
/* First real block owned by new rank nr (nr == p2 gives w). */
int coll_fold_first(int nr, int rem);

/* Ring pass over blocks off[0..w]: step s sends block (own - s) to the
 * next rank and receives block (own - s - 1) from the previous one,
 * reducing or overwriting; steps w-1. */
int coll_ring(struct coll_call *x, char *buf, const size_t *off, int own,
    int reduce, const char *what);
/* Recursive halving among the p2 folded ranks over blocks off[0..p2]:
 * new rank nr ends holding block nr reduced over every participant. */
int coll_halving(struct coll_call *x, char *buf, const size_t *off, int nr,
    int p2, int rem);
/* Recursive doubling among the folded ranks: from block nr to all p2. */
int coll_doubling(struct coll_call *x, char *buf, const size_t *off, int nr,
    int p2, int rem);

/* Building blocks with their own operation stamp already done: x's
 * group runs algorithm algo (never AUTO) on it; AVG is left as SUM. */
int coll_bcast_algo(struct coll_call *x, char *buf, size_t n, int root,
    enum coll_algo algo);
int coll_reduce_binomial(struct coll_call *x, char *buf, size_t n, int root);
int coll_allreduce_algo(struct coll_call *x, char *buf, size_t n,
    enum coll_algo algo);
/* off: the world+1 offsets of the ranks' blocks in recv (coll_prefix). */
int coll_allgatherv_algo(struct coll_call *x, const void *send, char *recv,
    const size_t *off, enum coll_algo algo);
int coll_reduce_scatter_algo(struct coll_call *x, const char *send, char *recv,
    size_t n, enum coll_algo algo);

/* The same for COLL_HIER (coll_hier.c). */
/* A group's sub-groups and its ranks' places, made once. */
struct coll_hier {
	struct comm *local, *cross;
	int hosts, lmin, lmax;	/* hosts; the fewest and most ranks on one */
	int *lrank;		/* per rank: its rank in its local group */
	int *byhost;		/* the ranks host by host, in order within each */
	int *first;		/* hosts + 1: where each host starts in byhost */
};
/* x's sub-groups (split at the first call), this call's operation stamped
 * on both as lx and cx with x's reduction; NULL with the failure on x. */
struct coll_hier *coll_hier_begin(struct coll_call *x, enum coll_kind kind,
    struct coll_call *lx, struct coll_call *cx);
int coll_hier_allreduce(struct coll_call *x, char *buf, size_t n);
int coll_hier_bcast(struct coll_call *x, char *buf, size_t n, int root);
int coll_hier_allgatherv(struct coll_call *x, const void *send, char *recv,
    const size_t *off);
int coll_hier_reduce_scatter(struct coll_call *x, const char *send, char *recv,
    size_t n);

/* memcpy that takes the NULL buffers of empty blocks (a caller's
 * alltoallv with nothing to send or receive may pass them). */
static inline void
coll_copy(void *dst, const void *src, size_t n)
{
	if (n > 0)
		memcpy(dst, src, n);
}

/* Alltoallv's pairwise exchange on x's group (coll_alltoallv.c), over
 * the world+1 element offsets of the blocks in send and recv; and its
 * hier (coll_alltoallv_hier.c), over the counts. */
int coll_alltoallv_pairwise(struct coll_call *x, const char *send,
    const size_t *soff, char *recv, const size_t *roff);
int coll_hier_alltoallv(struct coll_call *x, const char *send,
    const size_t *scounts, char *recv, const size_t *rcounts);

#endif
