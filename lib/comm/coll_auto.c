/*
 * coll_auto: the alpha-beta(-gamma) cost model behind COLL_AUTO.
 *
 * n is the message size in bytes (for allgather, reduce-scatter and
 * alltoall the whole gathered or input size), p the world size,
 * L = ceil(log2 p), q the power of two at or below p, and f = 1 when
 * p is not a power of two (the extra ranks fold in and out). Costs:
 *
 * allreduce
 *   ring          2(p-1) a + 2 (p-1)/p n b + (p-1)/p n g
 *   tree          2 L (a + n b) + L n g
 *   rd            log2 q (a + n b + n g) + f (2a + 2n b + n g)
 *   rabenseifner  2 log2 q a + 2 (q-1)/q n b + (q-1)/q n g + f (2a + 2n b + n g)
 *   naive         2 (p-1)(a + n b) + (p-1) n g        (never chosen)
 * broadcast
 *   binomial      L (a + n b)
 *   scatter-allgather  (L + p - 1) a + 2 (p-1)/p n b
 *   ring          (p - 2 + k)(a + n/k b), k = segments   (never chosen)
 *   linear        (p-1)(a + n b)                       (never chosen)
 * allgather
 *   ring          (p-1) a + (p-1)/p n b
 *   rd            log2 q a + (q-1)/q n b + f (2a + 2n b)
 *   bruck         L a + (p-1)/p n b + 2 n c            (local rotation copy)
 * reduce-scatter
 *   ring          (p-1) a + (p-1)/p n (b + g) + n c    (working copy)
 *   pairwise      (p-1) a + (p-1)/p n (b + g)
 *   halving       log2 q a + (q-1)/q n (b + g) + f (a + n b + n g) + n c
 * alltoall
 *   pairwise      (p-1)(a + n/p b)
 *   linear        a + (p-1) s + (p-1)/p n b k          (all at once; s per
 *                 extra message, k > 1 for the contention of p-1 streams)
 * alltoallv (n is each rank's own, so only the latency terms, which all
 * ranks share, decide; a skewed pairwise step also waits for its largest
 * block, which linear does not)
 *   pairwise      (p-1) a
 *   linear        a + (p-1) s
 *
 * a (alpha) is the one-way latency of a small message, b (beta) the time
 * per byte of a large one, g (gamma) the reduction kernel's time per byte
 * and c a local memcpy's. Measured on TCP loopback on the 2-core
 * development machine (medians, shared and busy machine): a 4 KiB
 * two-rank rd allreduce takes 5-10 us (one exchange: a ~ 5 us); a 1 MiB
 * two-rank ring allreduce ~350 us (n b ~ 350 us: b ~ 1/3 GB/s); the f32
 * sum kernel runs at ~20 GB/s in cache and ~10 GB/s on data just received
 * (g ~ 1/10 GB/s); memcpy likewise. The model takes links as full duplex,
 * as on a real NIC; on loopback a send and a receive share the CPUs'
 * copying, which narrows the gap between tree and ring at two ranks.
 *
 * hier is taken, at every size, wherever the group spans two or more
 * hosts and some host runs two or more ranks (coll_auto_group), as SPEC
 * says. With H hosts of L ranks, host links are the scarce resource: a
 * flat ring moves 2 (HL-1)/(HL) n over each host's link, hier's shares
 * 2 (H-1)/H n (1.5x less at 2 x 2). Small messages lose nothing worth a
 * threshold: hier crosses the network in log2 H rounds (the cross-host
 * step's own AUTO choice), as many as rd does when hosts hold blocks of
 * ranks, and adds a few shared-memory steps of about a microsecond each
 * against a ~5 us TCP round; its allreduce moves to a leader per host
 * below the size where the shares' saving pays for their extra local
 * steps (coll_hier.c). Within each level hier runs this model's choice.
 */
#include <stdio.h>

#include "comm/coll_int.h"
#include "comm/comm_impl.h"

#define ALPHA 5e-6		/* s */
#define BETA (1 / 3e9)		/* s per byte */
#define GAMMA (1 / 10e9)	/* s per byte, f32 sum */
#define COPY (1 / 10e9)		/* s per byte */
#define POST 1e-6		/* s per extra message posted at once */
#define CONTENTION 1.25

static int
log2_ceil(int p)
{
	int l = 0;

	while ((1 << l) < p)
		l++;
	return l;
}

static double
cost(enum coll_kind kind, enum coll_algo a, double n, int p)
{
	int L = log2_ceil(p), q = coll_pow2_below(p), lq = log2_ceil(q), f = q != p;
	double fr = (double)(p - 1) / p, frq = (double)(q - 1) / q;
	double fold = f * (2 * ALPHA + 2 * n * BETA + n * GAMMA);

	switch (kind * COLL_ALGO_COUNT + a) {
#define K(kind, algo) (COLL_KIND_##kind * COLL_ALGO_COUNT + COLL_##algo)
	case K(ALLREDUCE, RING): return 2 * (p - 1) * ALPHA + 2 * fr * n * BETA + fr * n * GAMMA;
	case K(ALLREDUCE, TREE): return 2 * L * (ALPHA + n * BETA) + L * n * GAMMA;
	case K(ALLREDUCE, RD): return lq * (ALPHA + n * BETA + n * GAMMA) + fold;
	case K(ALLREDUCE, RABENSEIFNER):
		return 2 * lq * ALPHA + 2 * frq * n * BETA + frq * n * GAMMA + fold;
	case K(BROADCAST, BINOMIAL): return L * (ALPHA + n * BETA);
	case K(BROADCAST, SCATTER_ALLGATHER): return (L + p - 1) * ALPHA + 2 * fr * n * BETA;
	case K(ALLGATHER, RING): return (p - 1) * ALPHA + fr * n * BETA;
	case K(ALLGATHER, RD): return lq * ALPHA + frq * n * BETA + f * (2 * ALPHA + 2 * n * BETA);
	case K(ALLGATHER, BRUCK): return L * ALPHA + fr * n * BETA + 2 * n * COPY;
	case K(REDUCE_SCATTER, RING): return (p - 1) * ALPHA + fr * n * (BETA + GAMMA) + n * COPY;
	case K(REDUCE_SCATTER, PAIRWISE): return (p - 1) * ALPHA + fr * n * (BETA + GAMMA);
	case K(REDUCE_SCATTER, HALVING):
		return lq * ALPHA + frq * n * (BETA + GAMMA) + n * COPY +
		    f * (ALPHA + n * BETA + n * GAMMA);
	case K(ALLTOALL, PAIRWISE): return (p - 1) * (ALPHA + n / p * BETA);
	case K(ALLTOALL, LINEAR): return ALPHA + (p - 1) * POST + fr * n * BETA * CONTENTION;
	/* alltoallv: n differs between ranks, so only what all share counts */
	case K(ALLTOALLV, PAIRWISE): return (p - 1) * ALPHA;
	case K(ALLTOALLV, LINEAR): return ALPHA + (p - 1) * POST;
#undef K
	default: return -1;	/* not a candidate */
	}
}

enum coll_algo
coll_auto(enum coll_kind kind, size_t bytes, int world)
{
	enum coll_algo best = COLL_AUTO;
	double best_cost = 0;

	for (int a = COLL_AUTO + 1; a < COLL_ALGO_COUNT; a++) {
		double t;
		if (!coll_algo_valid(kind, (enum coll_algo)a))
			continue;
		t = cost(kind, (enum coll_algo)a, (double)bytes, world < 1 ? 1 : world);
		if (t >= 0 && (best == COLL_AUTO || t < best_cost)) {
			best = (enum coll_algo)a;
			best_cost = t;
		}
	}
	if (best == COLL_AUTO)	/* a kind with one fixed algorithm */
		for (int a = COLL_AUTO + 1; a < COLL_ALGO_COUNT; a++)
			if (coll_algo_valid(kind, (enum coll_algo)a))
				return (enum coll_algo)a;
	return best;
}

/* The debug log's reason for AUTO's choice: every candidate's cost. */
static void
auto_why(const struct comm *c, enum coll_kind kind, size_t bytes,
    enum coll_algo chosen)
{
	char why[512];
	size_t n = 0;
	double t;

	why[0] = '\0';
	for (int a = COLL_AUTO + 1; a < COLL_ALGO_COUNT && n < sizeof why; a++)
		if (coll_algo_valid(kind, (enum coll_algo)a) &&
		    (t = cost(kind, (enum coll_algo)a, (double)bytes,
		    comm_size(c))) >= 0)
			n += (size_t)snprintf(why + n, sizeof why - n,
			    "%s%s %.1f us", n ? ", " : "",
			    coll_algo_name((enum coll_algo)a), t * 1e6);
	comm_debug(c, COMM_DEBUG_TRACE, "auto chose %s for %s of %zu bytes on "
	    "%d ranks: %s", coll_algo_name(chosen), coll_kind_name(kind),
	    bytes, comm_size(c), n ? why : "its only algorithm");
}

enum coll_algo
coll_auto_group(const struct comm *c, enum coll_kind kind, size_t bytes)
{
	int hosts = comm_hosts(c);
	enum coll_algo a;

	/* alltoallv's hier moves the same bytes across hosts and more within
	 * them, through one rank per pair of hosts: measured slower than
	 * linear but on small blocks (collx-alltoall(1)), so asked for only */
	if (hosts >= 2 && hosts < comm_size(c) &&
	    coll_algo_valid(kind, COLL_HIER) && kind != COLL_KIND_ALLTOALLV) {
		comm_debug(c, COMM_DEBUG_TRACE, "auto chose hier for %s of %zu "
		    "bytes: %d ranks on %d hosts, some with two or more",
		    coll_kind_name(kind), bytes, comm_size(c), hosts);
		return COLL_HIER;
	}
	a = coll_auto(kind, bytes, comm_size(c));
	if (c->net->debug >= COMM_DEBUG_TRACE)
		auto_why(c, kind, bytes, a);
	return a;
}
