/* bench_coll: one collective, one size, one algorithm, measured the way
 * nccl-tests does — warm-up, timed iterations, the slowest rank's time,
 * algbw and busbw — and checked on inputs whose exact result is known
 * whatever order the reduction adds in: small integers, held exactly by
 * every dtype, whose sums stay exact. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cli/util.h"
#include "bench/bench.h"
#include "bench/bench_cost.h"

static const char *const kind_names[] = {
	[COLL_KIND_ALLREDUCE] = "allreduce",
	[COLL_KIND_BROADCAST] = "broadcast",
	[COLL_KIND_ALLGATHER] = "allgather",
	[COLL_KIND_REDUCE_SCATTER] = "reduce-scatter",
	[COLL_KIND_ALLTOALL] = "alltoall",
	[COLL_KIND_ALLTOALLV] = "alltoallv",
};
#define NKINDS ((int)(sizeof kind_names / sizeof kind_names[0]))

const char *
bench_kind_name(enum coll_kind kind)
{
	return (int)kind < NKINDS && kind_names[kind] ? kind_names[kind] : "?";
}

int
bench_kind_parse(const char *s, enum coll_kind *out)
{
	int i = cli_name_index(kind_names, NKINDS, s);

	return i < 0 ? -1 : (*out = (enum coll_kind)i, 0);
}

int
bench_all_algos(enum coll_kind kind, enum coll_algo *out, int max)
{
	int n = 0;

	for (int a = 0; a < COLL_ALGO_COUNT && n < max; a++)
		if (coll_algo_valid(kind, (enum coll_algo)a))
			out[n++] = (enum coll_algo)a;
	return n;
}

/* Elements every rank sends: blocks of the whole for the gathering kinds. */
static int
kind_blocks(enum coll_kind kind)
{
	return kind == COLL_KIND_ALLGATHER || kind == COLL_KIND_REDUCE_SCATTER ||
	    kind == COLL_KIND_ALLTOALL || kind == COLL_KIND_ALLTOALLV;
}

size_t
bench_coll_count(const struct bench_coll *b, size_t bytes, int world)
{
	size_t n = bytes / dtype_size(b->dt);

	if (kind_blocks(b->kind))
		n -= n % (size_t)world;
	return n;
}

/*
 * Alltoallv's counts: every rank sends n elements; destination d gets
 * the share 1/k^S / sum_j 1/j^S, k its place (1 .. world) in a shuffle
 * of the ranks drawn from a fixed seed, the same for every source (as an
 * MoE router's popular experts are popular with every rank) and every
 * run; S = 0 spreads evenly. Shares become counts by largest remainders.
 */
void
bench_skew_counts(const struct bench_coll *b, size_t n, int world, size_t *out)
{
	double *share = cli_calloc((size_t)world, sizeof *share), sum = 0;
	int *place = cli_calloc((size_t)world, sizeof *place);
	uint64_t h = 0x5eed0a2a;
	size_t given = 0;

	for (int d = 0; d < world; d++)
		place[d] = d;
	for (int d = world - 1; d > 0; d--) {	/* Fisher-Yates, splitmix64 */
		uint64_t z = h += 0x9e3779b97f4a7c15ull;
		int j, t;
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
		z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
		j = (int)((z ^ (z >> 31)) % (uint64_t)(d + 1));
		t = place[d], place[d] = place[j], place[j] = t;
	}
	for (int d = 0; d < world; d++)
		sum += share[d] = pow(place[d] + 1, -b->skew);
	for (int d = 0; d < world; d++) {
		double x = (double)n * share[d] / sum;
		out[d] = (size_t)x;
		share[d] = x - (double)out[d];	/* now the remainder */
		given += out[d];
	}
	for (; given > n; given--)	/* rounding up past n: take back */
		for (int d = 0; d < world; d++)
			if (out[d] > 0 && share[d] >= 0) {
				out[d]--;
				break;
			}
	for (; given < n; given++) {	/* largest remainders, lower rank first */
		int best = 0;
		for (int d = 1; d < world; d++)
			best = share[d] > share[best] ? d : best;
		out[best]++;
		share[best] = -1;
	}
	free(share);
	free(place);
}

/*
 * The input value of element g of rank r: a small integer (-3..3; 0..3
 * for u8; 0/1 for bool; -1/1 for prod, so products stay exact, and
 * 1/2 for u8 prod: exact up to 7 ranks).
 */
static double
input_value(const struct bench_coll *b, int r, size_t g)
{
	uint64_t h = (uint64_t)r * 7 + (uint64_t)g * 3 + (uint64_t)r * g;

	if (b->dt == DT_BOOL)
		return (h % 3) != 0;
	if (b->op == COLL_PROD)
		return h % 2 ? (b->dt == DT_U8 ? 2 : -1) : 1;
	if (b->dt == DT_U8)
		return (double)(h % 4);
	return (double)(h % 7) - 3;
}

static double
combine(const struct bench_coll *b, double acc, double v)
{
	if (b->dt == DT_BOOL)	/* sum, max, avg: or; prod, min: and */
		return b->op == COLL_PROD || b->op == COLL_MIN ? (acc && v) : (acc || v);
	switch (b->op) {
	case COLL_PROD: return acc * v;
	case COLL_MIN: return v < acc ? v : acc;
	case COLL_MAX: return v > acc ? v : acc;
	default: return acc + v;
	}
}

/* The reduction over ranks of element g of the inputs. */
static double
reduced(const struct bench_coll *b, int world, size_t g)
{
	double acc = input_value(b, 0, g);

	for (int r = 1; r < world; r++)
		acc = combine(b, acc, input_value(b, r, g));
	if (b->op == COLL_AVG && b->dt != DT_BOOL)
		acc = dtype_is_float(b->dt) ? acc / world : trunc(acc / world);
	return acc;
}

struct bufs {
	char *send, *recv;
	size_t nsend, nrecv;		/* elements */
	size_t n;			/* per block (gathering kinds) */
	size_t *sc, *rc;		/* alltoallv: counts sent and received */
	size_t at;			/* alltoallv: this rank's block's offset */
	const void *src;		/* the operation's send argument */
	void *dst;
};

/* What rank me's output element k must be (u: its blocks). */
static double
expected(const struct bench_coll *b, int me, int world, const struct bufs *u,
    size_t k)
{
	size_t n = u->n;

	switch (b->kind) {
	case COLL_KIND_BROADCAST: return input_value(b, b->root, k);
	case COLL_KIND_ALLGATHER: return input_value(b, (int)(k / n), k % n);
	case COLL_KIND_REDUCE_SCATTER: return reduced(b, world, (size_t)me * n + k);
	case COLL_KIND_ALLTOALL:
		return input_value(b, (int)(k / n), (size_t)me * n + k % n);
	case COLL_KIND_ALLTOALLV:	/* every source's counts are alike */
		return input_value(b, (int)(k / n), u->at + k % n);
	default: return reduced(b, world, k);
	}
}

/* The relative error the dtype's rounding of an average allows. */
static double
avg_tolerance(enum dtype dt)
{
	switch (dt) {
	case DT_F64: return 0x1p-52;
	case DT_F32: return 0x1p-23;
	case DT_F16: return 0x1p-10;
	case DT_BF16: return 0x1p-7;
	default: return 0;
	}
}


static void
bufs_alloc(struct bufs *u, const struct bench_coll *b, size_t count, int world,
    int me, int inplace)
{
	size_t es = dtype_size(b->dt);

	memset(u, 0, sizeof *u);
	u->n = kind_blocks(b->kind) ? count / (size_t)world : count;
	switch (b->kind) {
	case COLL_KIND_ALLGATHER:
		u->nsend = u->n;
		u->nrecv = count;
		break;
	case COLL_KIND_REDUCE_SCATTER:
		u->nsend = count;
		u->nrecv = u->n;
		break;
	case COLL_KIND_ALLTOALLV:
		u->sc = cli_calloc((size_t)world, sizeof *u->sc);
		u->rc = cli_calloc((size_t)world, sizeof *u->rc);
		bench_skew_counts(b, count, world, u->sc);
		for (int q = 0; q < me; q++)
			u->at += u->sc[q];
		u->n = u->sc[me];	/* the block from every source */
		for (int q = 0; q < world; q++)
			u->rc[q] = u->n;
		u->nsend = count;
		u->nrecv = u->n * (size_t)world;
		break;
	default:
		u->nsend = u->nrecv = count;
	}
	u->send = cli_calloc(u->nsend * es + 1, 1);
	u->recv = cli_calloc(u->nrecv * es + 1, 1);
	u->src = u->send;
	u->dst = u->recv;
	if (inplace) {
		switch (b->kind) {
		case COLL_KIND_ALLGATHER:	/* our block of the output */
			u->src = u->recv + (size_t)me * u->n * es;
			break;
		case COLL_KIND_REDUCE_SCATTER:	/* our block of the input */
			u->src = u->send;
			u->dst = u->send + (size_t)me * u->n * es;
			break;
		default:
			u->src = u->dst = u->recv;
		}
	}
}

/* Fill this rank's input where the operation will read it. */
static void
bufs_fill(struct bufs *u, const struct bench_coll *b, int me)
{
	void *in = (void *)(uintptr_t)u->src;
	size_t nin = b->kind == COLL_KIND_ALLGATHER ? u->n : u->nsend;

	for (size_t i = 0; i < nin; i++)
		dtype_put(b->dt, in, i, input_value(b, me, i));
}

/* One operation. Allreduce and broadcast work in place only, so their
 * out-of-place form copies the input into the output first (timed: it is
 * what a caller of an in-place collective pays). */
static int
run_once(struct comm *c, const struct bench_coll *b, enum coll_algo algo,
    struct bufs *u)
{
	size_t es = dtype_size(b->dt);

	switch (b->kind) {
	case COLL_KIND_ALLREDUCE:
		if (u->src != u->dst)
			memcpy(u->dst, u->src, u->nsend * es);
		return coll_allreduce(c, u->dst, u->nrecv, b->dt, b->op, algo);
	case COLL_KIND_BROADCAST:
		if (u->src != u->dst && comm_rank(c) == b->root)
			memcpy(u->dst, u->src, u->nsend * es);
		return coll_broadcast(c, u->dst, u->nrecv, b->dt, b->root, algo);
	case COLL_KIND_ALLGATHER:
		return coll_allgather(c, u->src, u->dst, u->n, b->dt, algo);
	case COLL_KIND_REDUCE_SCATTER:
		return coll_reduce_scatter(c, u->src, u->dst, u->n, b->dt, b->op,
		    algo);
	case COLL_KIND_ALLTOALL:
		return coll_alltoall(c, u->src, u->dst, u->n, b->dt, algo);
	case COLL_KIND_ALLTOALLV:
		return coll_alltoallv(c, u->src, u->sc, u->dst, u->rc, b->dt, algo);
	default:
		comm_fail(c, COMM_ERR_MISMATCH, "collective not benchmarked");
		return -1;
	}
}

/* How many timed iterations: the given count, or enough for about
 * b->seconds judged from the slowest rank's warm-up. */
static int
iterations(struct comm *c, const struct bench_coll *b, double warm)
{
	double per;
	long n;

	if (b->seconds <= 0)
		return b->iters;
	per = warm / (b->warmup > 1 ? b->warmup : 1);
	if (bench_slowest(c, &per, 1) < 0)
		return -1;
	n = per > 0 ? (long)(b->seconds / per) : 100000;
	return n < 1 ? 1 : n > 100000 ? 100000 : (int)n;
}

/* Count this rank's wrong output elements, then sum over ranks. */
static long
check_result(struct comm *c, const struct bench_coll *b, struct bufs *u)
{
	int me = comm_rank(c), w = comm_size(c);
	size_t nout = b->kind == COLL_KIND_REDUCE_SCATTER ? u->n : u->nrecv;
	double tol = b->op == COLL_AVG ? avg_tolerance(b->dt) : 0;
	int64_t wrong = 0;

	/* The test-only fault: the last rank's first elements corrupted,
	 * as a broken reduction would leave them. */
	if (b->fault > 0 && me == w - 1)
		for (size_t k = 0; k < nout && k < (size_t)b->fault; k++)
			dtype_put(b->dt, u->dst, k, b->dt == DT_BOOL ?
			    !dtype_get(b->dt, u->dst, k) :
			    dtype_get(b->dt, u->dst, k) + 1);
	for (size_t k = 0; k < nout; k++) {
		double want = expected(b, me, w, u, k);
		double got = dtype_get(b->dt, u->dst, k);

		if (!(fabs(got - want) <= tol * fabs(want)))
			wrong++;
	}
	if (w > 1 && coll_allreduce(c, &wrong, 1, DT_I64, COLL_SUM, COLL_AUTO) < 0)
		return -1;
	return (long)wrong;
}

/* -v: alltoallv's counts, every rank's alike, once per size. */
static void
say_counts(const struct bufs *u, int world)
{
	char line[512];
	size_t at = 0;

	line[0] = '\0';
	for (int d = 0; d < world && at + 24 < sizeof line; d++)
		at += (size_t)snprintf(line + at, sizeof line - at, " %zu", u->sc[d]);
	cli_debug("alltoallv: every rank sends %zu elements, to each rank:%s%s",
	    u->nsend, line, at + 24 >= sizeof line ? " ..." : "");
}

int
bench_coll_measure(struct comm *c, const struct bench_coll *b,
    enum coll_algo algo, int inplace, size_t bytes, struct bench_coll_row *r)
{
	int me = comm_rank(c), w = comm_size(c), n, rc = -1;
	double *t = NULL, t0, warm = 0;
	struct bufs u;

	memset(r, 0, sizeof *r);
	r->algo = algo;
	r->inplace = inplace;
	r->count = bench_coll_count(b, bytes, w);
	r->bytes = r->count * dtype_size(b->dt);
	r->wrong = -1;
	bufs_alloc(&u, b, r->count, w, me, inplace);
	bufs_fill(&u, b, me);
	if (u.sc != NULL && me == 0)
		say_counts(&u, w);
	/* --seconds judges the time per iteration from the warm-up: at
	 * least one. */
	for (int i = 0; i < b->warmup || (i == 0 && b->seconds > 0); i++) {
		if (coll_barrier(c) < 0)
			goto out;
		t0 = cli_now();
		if (run_once(c, b, algo, &u) < 0)
			goto out;
		warm += cli_now() - t0;
	}
	if ((n = iterations(c, b, warm)) < 0)
		goto out;
	t = cli_calloc((size_t)n, sizeof *t);
	for (int i = 0; i < n; i++) {
		if (coll_barrier(c) < 0)
			goto out;
		t0 = cli_now();
		if (run_once(c, b, algo, &u) < 0)
			goto out;
		t[i] = cli_now() - t0;
	}
	if (bench_slowest(c, t, n) < 0)
		goto out;
	r->iters = n;
	bench_stats(t, n, &r->st);
	if (b->kind == COLL_KIND_ALLTOALLV) {
		/* the bytes actually sent: each rank's to the others, the mean
		 * over ranks (busbw = algbw: cli_busbw_factor's 1) */
		size_t self = 0;
		for (int q = 0; q < w; q++)
			self += u.sc[q];	/* rank q keeps sc[q] */
		r->count = (r->count * (size_t)w - self) / (size_t)w;
		r->bytes = r->count * dtype_size(b->dt);
	}
	if (r->st.med > 0)
		r->algbw = (double)r->bytes / r->st.med / 1e9;
	r->busbw = r->algbw * cli_busbw_factor(bench_kind_name(b->kind), w);
	if (b->cost != NULL)	/* --cost: what the model expects */
		r->expected = bench_cost_expect(b->cost, b->kind, algo, w,
		    b->hosts, b->cost_tcp, (double)r->bytes);
	if (b->check) {
		bufs_fill(&u, b, me);
		if (run_once(c, b, algo, &u) < 0 ||
		    (r->wrong = check_result(c, b, &u)) < 0)
			goto out;
	}
	rc = 0;
out:
	free(t);
	free(u.send);
	free(u.recv);
	free(u.sc);
	free(u.rc);
	return rc;
}
