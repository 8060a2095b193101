/* coll: collective operations over a comm group, every algorithm by name. */
#ifndef COLLX_COLL_H
#define COLLX_COLL_H

#include <stddef.h>

#include "comm/comm.h"
#include "tensor/dtype.h"

enum coll_op { COLL_SUM, COLL_PROD, COLL_MIN, COLL_MAX, COLL_AVG };

enum coll_algo {
	COLL_AUTO,
	COLL_NAIVE,		/* allreduce: gather to root + broadcast */
	COLL_RING,		/* allreduce, allgather, reduce-scatter, broadcast(pipelined) */
	COLL_TREE,		/* allreduce: binomial reduce + broadcast */
	COLL_RD,		/* allreduce, allgather: recursive doubling */
	COLL_RABENSEIFNER,	/* allreduce: halving reduce-scatter + doubling allgather */
	COLL_LINEAR,		/* broadcast, alltoall baseline, alltoallv */
	COLL_BINOMIAL,		/* broadcast tree */
	COLL_SCATTER_ALLGATHER,	/* broadcast for large messages */
	COLL_BRUCK,		/* allgather */
	COLL_PAIRWISE,		/* reduce-scatter, alltoall */
	COLL_HALVING,		/* reduce-scatter: recursive halving */
	COLL_HIER,		/* allreduce, broadcast, allgather, reduce-scatter,
				 * alltoallv: within each host, then across hosts */
	COLL_ALGO_COUNT
};

enum coll_kind {
	COLL_KIND_ALLREDUCE, COLL_KIND_BROADCAST, COLL_KIND_ALLGATHER,
	COLL_KIND_REDUCE_SCATTER, COLL_KIND_ALLTOALL, COLL_KIND_REDUCE,
	COLL_KIND_GATHER, COLL_KIND_SCATTER, COLL_KIND_BARRIER,
	COLL_KIND_ALLTOALLV	/* pairwise, linear, hier */
};

int coll_op_parse(const char *s, enum coll_op *out);
const char *coll_op_name(enum coll_op op);
int coll_algo_parse(const char *s, enum coll_algo *out);
const char *coll_algo_name(enum coll_algo a);
/* Whether kind implements algo (AUTO always). */
int coll_algo_valid(enum coll_kind kind, enum coll_algo a);
/* The alpha-beta cost model's choice for AUTO (bytes: the whole vector;
 * for allgather, reduce-scatter and alltoall the whole gathered/input
 * size). Never AUTO, except for barrier. */
enum coll_algo coll_auto(enum coll_kind kind, size_t bytes, int world);
/* AUTO on group c, what the collectives run: COLL_HIER where kind has it
 * and c spans two or more hosts with two or more ranks on some host (the
 * same choice on every rank), else coll_auto's. */
enum coll_algo coll_auto_group(const struct comm *c, enum coll_kind kind,
    size_t bytes);
/* Bytes per pipelined message segment (0, the default: about a quarter of
 * each message, 64 KiB to 1 MiB). Every rank must use the same value (it
 * is part of the mismatch check). Process-wide; meant for tests and tuning. */
void coll_set_segment(size_t bytes);

/* dst[i] = dst[i] (op) src[i]; f16/bf16 accumulate in f32. AVG reduces as SUM
 * (the division is coll_finish_avg's). Integer SUM/PROD wrap around; bool
 * SUM and MAX are logical or, PROD and MIN logical and; float MIN/MAX
 * propagate NaN. */
void coll_reduce_local(void *dst, const void *src, size_t count, enum dtype dt,
    enum coll_op op);
/* buf[i] /= world: floats divide (halves in f32); integers truncate toward
 * zero (after a sum that wrapped in the element type); bool is unchanged. */
void coll_finish_avg(void *buf, size_t count, enum dtype dt, int world);

/*
 * Collectives. Every rank passes the same count, dtype, op, root and algo
 * (checked: a mismatch is COMM_ERR_MISMATCH). 0 or -1 with the reason in
 * comm_error(c). sig is folded into the mismatch check (0 if unused).
 * COLL_HIER (and AUTO where it picks hier) splits c at its first such
 * call (comm_split, so with none of c's receives in flight) and keeps the
 * sub-groups until comm_close(c); its messages travel in them, so a rank
 * running hier against one running a flat algorithm may wait until the
 * timeout rather than failing as a mismatch (ranks of one job agree on
 * --algo, and AUTO chooses alike on every rank).
 */
/* In place: every rank's buf ends holding the reduction, bitwise the same
 * on every rank. */
int coll_allreduce(struct comm *c, void *buf, size_t count, enum dtype dt,
    enum coll_op op, enum coll_algo algo);
int coll_broadcast(struct comm *c, void *buf, size_t count, enum dtype dt,
    int root, enum coll_algo algo);
/* Binomial tree; the result lands in root's buf, other ranks' buf is kept. */
int coll_reduce(struct comm *c, void *buf, size_t count, enum dtype dt,
    enum coll_op op, int root);
/* recv holds sum(counts) elements in rank order; counts[r] elements from
 * rank r (send may point into recv at rank's place: in place). */
int coll_allgatherv(struct comm *c, const void *send, void *recv,
    const size_t *counts, enum dtype dt, enum coll_algo algo);
int coll_allgather(struct comm *c, const void *send, void *recv, size_t count,
    enum dtype dt, enum coll_algo algo);
/* send holds world*count elements; recv gets the reduction of block rank.
 * recv may overlap send anywhere (in place). */
int coll_reduce_scatter(struct comm *c, const void *send, void *recv, size_t count,
    enum dtype dt, enum coll_op op, enum coll_algo algo);
/* send holds world blocks of count elements, block i goes to rank i;
 * recv gets world blocks, block j from rank j (send == recv: in place). */
int coll_alltoall(struct comm *c, const void *send, void *recv, size_t count,
    enum dtype dt, enum coll_algo algo);
/* Linear. counts (every rank's, the same on all ranks) as for allgatherv;
 * recv (gatherv) and send (scatterv) matter on root only. */
int coll_gatherv(struct comm *c, const void *send, void *recv, const size_t *counts,
    enum dtype dt, int root);
int coll_scatterv(struct comm *c, const void *send, void *recv, const size_t *counts,
    enum dtype dt, int root);
/*
 * All-to-all with per-peer counts, any of them zero (coll_alltoallv.c).
 * send holds scounts[0] elements for rank 0, then scounts[1] for rank 1,
 * ...; recv gets rcounts[0] elements from rank 0, then rcounts[1] from
 * rank 1, ... (send and recv must not overlap). rcounts[q] must equal
 * rank q's scounts[rank]: the caller knows both (exchange the counts
 * first with coll_alltoall of one size_t per rank where it does not).
 * Counts that disagree fail as COMM_ERR_MISMATCH where a message's length
 * differs, or at the timeout where one side sends nothing; dtype and algo
 * must agree too. algo: COLL_PAIRWISE (step s sends to rank+s and
 * receives from rank-s), COLL_LINEAR (every block posted at once),
 * COLL_HIER (one message per pair of hosts, within hosts over shared
 * memory; only when asked for) or COLL_AUTO: linear, pairwise at 2
 * ranks (the counts, which differ between ranks, cannot choose). 0, or
 * -1 with the reason in comm_error(c).
 */
int coll_alltoallv(struct comm *c, const void *send, const size_t *scounts,
    void *recv, const size_t *rcounts, enum dtype dt, enum coll_algo algo);
/* Dissemination barrier: ceil(log2 world) rounds of one byte. */
int coll_barrier(struct comm *c);

/* Frees the calling thread's scratch buffers, which collectives keep
 * between calls; a thread that ran collectives calls it before it ends
 * (the next collective on the thread allocates them again). */
void coll_thread_release(void);

#endif
