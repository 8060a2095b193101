/*
 * test_coll: every collective x every algorithm x world sizes 1..8 over
 * forked ranks on 127.0.0.1, and on the two sub-groups of 3 (comm_split)
 * of a world of 6, running side by side. Inputs are closed-form small integers
 * (exact in every dtype), so each expected result is computed here
 * directly from the formula, independently of the code under test.
 *
 * One fork of W ranks per world size runs the whole list of cases; each
 * rank reports "case ok|fail" lines through a pipe and the parent prints
 * one TAP line per (world, collective, algorithm). Every child runs
 * under alarm(), and the transport times out, so nothing hangs.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "comm/coll.h"
#include "ranks.h"
#include "unit.h"

#define MAXW 8
#define BIG 262147	/* ~1 MB of f32, not divisible by any world size */

struct tcase {
	enum coll_kind kind;
	enum coll_algo algo;
	enum dtype dt;
	enum coll_op op;
	size_t count;	/* per rank (allgather, reduce-scatter, alltoall: per block) */
	int root;
	int vary;	/* v-variants: rank r has count + r % 3 elements */
	int inplace;
	size_t seg;	/* coll_set_segment for this case (0: default) */
};

static struct tcase cases[4096];
static int ncases;

static const char *
kind_name(enum coll_kind k)
{
	static const char *n[] = { "allreduce", "broadcast", "allgather",
	    "reduce-scatter", "alltoall", "reduce", "gatherv/scatterv", "scatterv",
	    "barrier" };
	return n[k];
}

static void
add(enum coll_kind kind, enum coll_algo algo, enum dtype dt,
    enum coll_op op, size_t count, int root, int vary, int inplace, size_t seg)
{
	if (ncases < (int)(sizeof cases / sizeof cases[0]))
		cases[ncases++] = (struct tcase){ kind, algo, dt, op, count, root, vary,
		    inplace, seg };
}

/* ---- closed-form data ---- */

/* Reduction input: element i on rank r. Sums stay within +-48 for 8 ranks
 * (exact in i8 and f16); products are at most 2^3 in magnitude. */
static long long rval(enum dtype dt, enum coll_op op, int r, size_t i)
{
	long long v;

	if (dt == DT_BOOL)
		return (r + (long long)i) % 3 == 0;
	if (op == COLL_PROD) {
		v = (r + (long long)i) % 3 == 0 ? 2 : 1;
		return dt != DT_U8 && (r * 7 + (long long)i) % 5 == 0 ? -v : v;
	}
	v = (r * 1000 + (long long)i) % 13;
	return dt == DT_U8 ? v : v - 6;
}

/* The reduction of rval over ranks 0..w-1, in exact arithmetic. */
static double
rexpect(enum dtype dt, enum coll_op op, int w, size_t i)
{
	long long acc = rval(dt, op, 0, i);

	for (int r = 1; r < w; r++) {
		long long v = rval(dt, op, r, i);
		switch (op) {
		case COLL_PROD: acc = dt == DT_BOOL ? (acc && v) : acc * v; break;
		case COLL_MIN: acc = dt == DT_BOOL ? (acc && v) : v < acc ? v : acc; break;
		case COLL_MAX: acc = dt == DT_BOOL ? (acc || v) : v > acc ? v : acc; break;
		default: acc = dt == DT_BOOL ? (acc || v) : acc + v; break;
		}
	}
	if (op == COLL_AVG && dt != DT_BOOL)
		return dtype_is_float(dt) ? (double)acc / w : (double)(acc / w);
	return (double)acc;
}

/* Data that moves unreduced: element i of rank r's (block j's) data. */
static double
mval(int r, int j, size_t i)
{
	return (double)((r * 37 + j * 11 + (long long)i) % 101);
}

/* ---- checking ---- */

static char why[256];

static int
fail(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, sizeof why, fmt, ap);
	va_end(ap);
	return -1;
}

static int
same(const struct tcase *t, const void *buf, size_t i, double want,
    const char *what)
{
	double got = dtype_get(t->dt, buf, i), tol = 0;

	if (t->op == COLL_AVG && dtype_is_float(t->dt))
		tol = t->dt == DT_F16 ? 1e-3 : t->dt == DT_BF16 ? 8e-3 : 1e-6;
	if (got == want || (tol > 0 && fabs(got - want) <= tol * (1 + fabs(want))))
		return 0;
	return fail("%s element %zu is %g, want %g", what, i, got, want);
}

/* ---- one case per collective ---- */

struct rank_ctx {
	struct comm *c;
	int r, w;
};

static size_t
count_of(const struct tcase *t, int r)
{
	return t->count + (t->vary ? (size_t)(r % 3) : 0);
}

static int
run_allreduce(const struct rank_ctx *x, const struct tcase *t, char *buf)
{
	for (size_t i = 0; i < t->count; i++)
		dtype_put(t->dt, buf, i, (double)rval(t->dt, t->op, x->r, i));
	if (coll_allreduce(x->c, buf, t->count, t->dt, t->op, t->algo) < 0)
		return fail("allreduce: %s", comm_error(x->c));
	for (size_t i = 0; i < t->count; i++)
		if (same(t, buf, i, rexpect(t->dt, t->op, x->w, i), "allreduce") < 0)
			return -1;
	return 0;
}

static int
run_reduce(const struct rank_ctx *x, const struct tcase *t, char *buf)
{
	for (size_t i = 0; i < t->count; i++)
		dtype_put(t->dt, buf, i, (double)rval(t->dt, t->op, x->r, i));
	if (coll_reduce(x->c, buf, t->count, t->dt, t->op, t->root) < 0)
		return fail("reduce: %s", comm_error(x->c));
	for (size_t i = 0; i < t->count; i++)
		if (same(t, buf, i, x->r == t->root ? rexpect(t->dt, t->op, x->w, i) :
		    (double)rval(t->dt, t->op, x->r, i), "reduce") < 0)
			return -1;
	return 0;
}

static int
run_broadcast(const struct rank_ctx *x, const struct tcase *t, char *buf)
{
	for (size_t i = 0; i < t->count; i++)
		dtype_put(t->dt, buf, i, x->r == t->root ? mval(t->root, 0, i) : 0);
	if (coll_broadcast(x->c, buf, t->count, t->dt, t->root, t->algo) < 0)
		return fail("broadcast: %s", comm_error(x->c));
	for (size_t i = 0; i < t->count; i++)
		if (same(t, buf, i, mval(t->root, 0, i), "broadcast") < 0)
			return -1;
	return 0;
}

/* allgather (equal counts) or allgatherv (vary), in place or not. */
static int
run_allgather(const struct rank_ctx *x, const struct tcase *t, char *buf,
    char *send)
{
	size_t counts[MAXW], off = 0, mine = 0, es = dtype_size(t->dt);
	int rc;

	for (int r = 0; r < x->w; r++) {
		counts[r] = count_of(t, r);
		if (r < x->r)
			mine += counts[r];
	}
	if (t->inplace)
		send = buf + mine * es;
	for (size_t i = 0; i < counts[x->r]; i++)
		dtype_put(t->dt, send, i, mval(x->r, 0, i));
	rc = t->vary ? coll_allgatherv(x->c, send, buf, counts, t->dt, t->algo) :
	    coll_allgather(x->c, send, buf, t->count, t->dt, t->algo);
	if (rc < 0)
		return fail("allgather: %s", comm_error(x->c));
	for (int r = 0; r < x->w; r++)
		for (size_t i = 0; i < counts[r]; i++, off++)
			if (same(t, buf, off, mval(r, 0, i), "allgather") < 0)
				return -1;
	return 0;
}

static int
run_reduce_scatter(const struct rank_ctx *x, const struct tcase *t,
    char *buf, char *out)
{
	size_t n = t->count, all = n * (size_t)x->w;

	for (size_t i = 0; i < all; i++)
		dtype_put(t->dt, buf, i, (double)rval(t->dt, t->op, x->r, i));
	if (t->inplace)
		out = buf;	/* the result overwrites the first block of the input */
	if (coll_reduce_scatter(x->c, buf, out, n, t->dt, t->op, t->algo) < 0)
		return fail("reduce-scatter: %s", comm_error(x->c));
	for (size_t i = 0; i < n; i++)
		if (same(t, out, i, rexpect(t->dt, t->op, x->w, (size_t)x->r * n + i),
		    "reduce-scatter") < 0)
			return -1;
	return 0;
}

static int
run_alltoall(const struct rank_ctx *x, const struct tcase *t, char *buf,
    char *send)
{
	size_t n = t->count;

	if (t->inplace)
		send = buf;
	for (int j = 0; j < x->w; j++)
		for (size_t i = 0; i < n; i++)
			dtype_put(t->dt, send, (size_t)j * n + i, mval(x->r, j, i));
	if (coll_alltoall(x->c, send, buf, n, t->dt, t->algo) < 0)
		return fail("alltoall: %s", comm_error(x->c));
	for (int j = 0; j < x->w; j++)
		for (size_t i = 0; i < n; i++)
			if (same(t, buf, (size_t)j * n + i, mval(j, x->r, i), "alltoall") < 0)
				return -1;
	return 0;
}

/* gatherv to root, then scatterv of the gathered data back out. */
static int
run_gather_scatter(const struct rank_ctx *x, const struct tcase *t,
    char *buf, char *send)
{
	size_t counts[MAXW], off = 0, mine = count_of(t, x->r);

	for (int r = 0; r < x->w; r++)
		counts[r] = count_of(t, r);
	for (size_t i = 0; i < mine; i++)
		dtype_put(t->dt, send, i, mval(x->r, 1, i));
	if (coll_gatherv(x->c, send, x->r == t->root ? buf : NULL, counts, t->dt,
	    t->root) < 0)
		return fail("gatherv: %s", comm_error(x->c));
	for (int r = 0; x->r == t->root && r < x->w; r++)
		for (size_t i = 0; i < counts[r]; i++, off++)
			if (same(t, buf, off, mval(r, 1, i), "gatherv") < 0)
				return -1;
	memset(send, 0, mine * dtype_size(t->dt));
	if (coll_scatterv(x->c, x->r == t->root ? buf : NULL, send, counts, t->dt,
	    t->root) < 0)
		return fail("scatterv: %s", comm_error(x->c));
	for (size_t i = 0; i < mine; i++)
		if (same(t, send, i, mval(x->r, 1, i), "scatterv") < 0)
			return -1;
	return 0;
}

static int
run_case(const struct rank_ctx *x, const struct tcase *t, char *buf,
    char *aux)
{
	coll_set_segment(t->seg);
	why[0] = '\0';
	switch (t->kind) {
	case COLL_KIND_ALLREDUCE: return run_allreduce(x, t, buf);
	case COLL_KIND_REDUCE: return run_reduce(x, t, buf);
	case COLL_KIND_BROADCAST: return run_broadcast(x, t, buf);
	case COLL_KIND_ALLGATHER: return run_allgather(x, t, buf, aux);
	case COLL_KIND_REDUCE_SCATTER: return run_reduce_scatter(x, t, buf, aux);
	case COLL_KIND_ALLTOALL: return run_alltoall(x, t, buf, aux);
	case COLL_KIND_GATHER: return run_gather_scatter(x, t, buf, aux);
	default:
		return coll_barrier(x->c) < 0 ? fail("barrier: %s", comm_error(x->c)) : 0;
	}
}

/* ---- the list of cases for a world ---- */

static const struct { enum dtype dt; enum coll_op op; } red_types[] = {
	{ DT_F32, COLL_SUM }, { DT_F64, COLL_SUM }, { DT_F16, COLL_SUM },
	{ DT_BF16, COLL_SUM }, { DT_I8, COLL_SUM }, { DT_I16, COLL_SUM },
	{ DT_I32, COLL_SUM }, { DT_I64, COLL_SUM }, { DT_U8, COLL_SUM },
	{ DT_BOOL, COLL_SUM }, { DT_F32, COLL_PROD }, { DT_I64, COLL_PROD },
	{ DT_BF16, COLL_PROD }, { DT_I8, COLL_PROD }, { DT_F32, COLL_MIN },
	{ DT_I32, COLL_MIN }, { DT_F16, COLL_MAX }, { DT_U8, COLL_MAX },
	{ DT_BOOL, COLL_MIN }, { DT_F32, COLL_AVG }, { DT_I32, COLL_AVG },
	{ DT_BF16, COLL_AVG }, { DT_F64, COLL_AVG }, { DT_I64, COLL_MAX },
};
#define NRED (sizeof red_types / sizeof red_types[0])

static const enum dtype move_types[] = { DT_F32, DT_I8, DT_F64, DT_BF16, DT_I16 };

static void
small_counts(int w, size_t *c)
{
	c[0] = 0;
	c[1] = 1;
	c[2] = 7;
	c[3] = (size_t)(w > 1 ? w - 1 : 2);
	c[4] = 1001;
}

static void
add_reducing(enum coll_kind kind, const enum coll_algo *algos, int w)
{
	size_t cnt[5];

	small_counts(w, cnt);
	for (const enum coll_algo *a = algos; *a != COLL_ALGO_COUNT; a++) {
		for (size_t k = 0; k < NRED; k++)
			for (int j = 0; j < 5; j++)
				if (j < 4 || k % 3 == 0)
					add(kind, *a, red_types[k].dt, red_types[k].op,
					    cnt[j], 0, 0, j == 4 && k % 2, 0);
		/* small segments: a 1001-element vector pipelined in many pieces */
		add(kind, *a, DT_F32, COLL_SUM, 1001, 0, 0, 0, 64);
		add(kind, *a, DT_F16, COLL_AVG, 1001, 0, 0, 0, 128);
		add(kind, *a, DT_I64, COLL_PROD, 1003, 0, 0, 1, 256);
		add(kind, *a, DT_F32, COLL_SUM, kind == COLL_KIND_ALLREDUCE ? BIG :
		    BIG / (size_t)w, 0, 0, 0, 0);
	}
}

static void
add_moving(enum coll_kind kind, const enum coll_algo *algos, int w)
{
	size_t cnt[5];
	int roots[3] = { 0, w - 1, w > 2 ? 1 : 0 };

	small_counts(w, cnt);
	for (const enum coll_algo *a = algos; *a != COLL_ALGO_COUNT; a++) {
		for (int j = 0; j < 5; j++)
			for (int k = 0; k < 5; k++)
				add(kind, *a, move_types[k], COLL_SUM, cnt[j], roots[k % 3],
				    kind != COLL_KIND_BROADCAST && kind != COLL_KIND_ALLTOALL && k % 2,
				    k >= 3, 0);
		add(kind, *a, DT_F32, COLL_SUM, 1001, roots[1], kind != COLL_KIND_ALLTOALL,
		    0, 64);
		add(kind, *a, DT_F32, COLL_SUM, kind == COLL_KIND_BROADCAST ? BIG :
		    BIG / (size_t)w, roots[2], 0, 0, 0);
	}
}

#define END COLL_ALGO_COUNT
static void
build_cases(int w)
{
	/* hier here: on one host (test_hier spreads ranks over hosts) */
	static const enum coll_algo ar[] = { COLL_AUTO, COLL_NAIVE, COLL_RING,
	    COLL_TREE, COLL_RD, COLL_RABENSEIFNER, COLL_HIER, END };
	static const enum coll_algo bc[] = { COLL_AUTO, COLL_LINEAR, COLL_BINOMIAL,
	    COLL_SCATTER_ALLGATHER, COLL_RING, COLL_HIER, END };
	static const enum coll_algo ag[] = { COLL_AUTO, COLL_RING, COLL_RD, COLL_BRUCK,
	    COLL_HIER, END };
	static const enum coll_algo rs[] = { COLL_AUTO, COLL_RING, COLL_PAIRWISE,
	    COLL_HALVING, COLL_HIER, END };
	static const enum coll_algo aa[] = { COLL_AUTO, COLL_PAIRWISE, COLL_LINEAR, END };
	static const enum coll_algo one[] = { COLL_AUTO, END };

	ncases = 0;
	add_reducing(COLL_KIND_ALLREDUCE, ar, w);
	add_reducing(COLL_KIND_REDUCE_SCATTER, rs, w);
	add_reducing(COLL_KIND_REDUCE, one, w);
	add_moving(COLL_KIND_BROADCAST, bc, w);
	add_moving(COLL_KIND_ALLGATHER, ag, w);
	add_moving(COLL_KIND_ALLTOALL, aa, w);
	add_moving(COLL_KIND_GATHER, one, w);
	for (int k = 0; k < 3; k++)
		add(COLL_KIND_BARRIER, COLL_AUTO, DT_U8, COLL_SUM, 0, 0, 0, 0, 0);
	/* the reduce cases' roots: spread them */
	for (int i = 0; i < ncases; i++)
		if (cases[i].kind == COLL_KIND_REDUCE)
			cases[i].root = i % w;
}

/* ---- forking a world ---- */

typedef void (*rank_fn)(struct comm *c, int fd, const void *arg);

struct world_run {
	rank_fn fn;
	const void *arg;
	double timeout;
	const char *master;
	int fd;
};

/* A rank: open the comm (or report the failure on the pipe), run fn. */
static int
world_rank(int rank, int world, void *arg)
{
	const struct world_run *run = arg;
	struct comm_options o = { .rank = rank, .world = world,
	    .master = run->master, .timeout = run->timeout, .job = "test_coll" };
	struct comm *c;
	char err[512];

	if (comm_open(&c, &o, err, sizeof err) < 0) {
		dprintf(run->fd, "open %d %s\n", rank, err);
		return 1;
	}
	run->fn(c, run->fd, run->arg);
	comm_close(c);
	return 0;
}

/* Fork w ranks running fn with a comm (or the open failure reported on fd);
 * returns the read end of the report pipe; pids in pid[]. */
static int
fork_world(int w, rank_fn fn, const void *arg, double timeout, pid_t *pid)
{
	char master[64];
	struct world_run run = { fn, arg, timeout, master, -1 };

	snprintf(master, sizeof master, "127.0.0.1:%d", unit_free_port(AF_INET));
	return unit_fork_reporting(w, 120, world_rank, &run, &run.fd, pid);
}

static int
reap(int w, const pid_t *pid)
{
	return unit_wait_ranks(w, pid, NULL);
}

/* A rank of the case matrix: one report line per case. */
static void
matrix_rank(struct comm *c, int fd, const void *arg)
{
	struct rank_ctx x = { c, comm_rank(c), comm_size(c) };
	size_t cap = (size_t)(BIG + 16) * 8 * 2;
	char *buf = malloc(cap), *aux = malloc(cap);

	(void)arg;
	for (int i = 0; i < ncases; i++) {
		int rc = run_case(&x, &cases[i], buf, aux);
		dprintf(fd, "%d %d %d %s\n", i, x.r, rc == 0, why);
		if (rc < 0 && comm_errkind(c) != COMM_ERR_NONE)
			_exit(1);	/* the group is broken; the rest cannot run */
	}
	free(buf);
	free(aux);
}

/* A rank of the matrix on a sub-group: split by parity, keys reversing
 * the order, each group running the matrix at the same time. */
static void
split_matrix_rank(struct comm *c, int fd, const void *arg)
{
	struct comm *sub;
	char err[512];

	if (comm_split(c, comm_rank(c) % 2, -comm_rank(c), &sub, err, sizeof err) < 0) {
		dprintf(fd, "open %d %s\n", comm_rank(c), err);
		_exit(1);
	}
	matrix_rank(sub, fd, arg);
	comm_close(sub);
}

static void
case_label(const struct tcase *t, char *s, size_t n)
{
	snprintf(s, n, "%s %s %s %s count %zu root %d%s%s seg %zu", kind_name(t->kind),
	    coll_algo_name(t->algo), dtype_name(t->dt), coll_op_name(t->op), t->count,
	    t->root, t->vary ? " varying" : "", t->inplace ? " in place" : "", t->seg);
}

/* One TAP line per (collective, algorithm): ok when every rank passed every
 * case (groups groups of w ranks each). */
static void
report_world(int w, int groups, const unsigned char *okc, FILE *in)
{
	char line[512], label[160], what[200];
	int i, j, shown = 0;

	while (fgets(line, sizeof line, in)) {
		int r, at = 0;
		if (sscanf(line, "%d %d %d %n", &i, &r, &j, &at) >= 3 && i >= 0 &&
		    i < ncases && !j && shown++ < 5) {
			case_label(&cases[i], label, sizeof label);
			printf("# world %d: %s: rank %d: %s", w, label, r, line + at);
		} else if (strncmp(line, "open ", 5) == 0) {
			printf("# world %d: %s", w, line);
		}
	}
	for (i = 0; i < ncases; i = j) {
		int ok = 1;
		for (j = i; j < ncases && cases[j].kind == cases[i].kind &&
		    cases[j].algo == cases[i].algo; j++)
			ok &= okc[j] == w * groups;
		snprintf(what, sizeof what, "world %d%s: %s %s (%d cases)", w,
		    groups > 1 ? ", sub-groups of a world split in 2" : "",
		    kind_name(cases[i].kind), coll_algo_name(cases[i].algo), j - i);
		UNIT_OK(ok, what);
	}
}

static void
test_world(int w, int groups)
{
	pid_t pid[MAXW];
	unsigned char okc[sizeof cases / sizeof cases[0]] = { 0 };
	char line[512];
	FILE *in, *log = tmpfile();
	int fd, i, r, ok, bad;

	build_cases(w);
	fd = fork_world(w * groups, groups > 1 ? split_matrix_rank : matrix_rank,
	    NULL, 20, pid);
	in = fd >= 0 ? fdopen(fd, "r") : NULL;
	while (in && fgets(line, sizeof line, in)) {
		if (sscanf(line, "%d %d %d", &i, &r, &ok) == 3 && i >= 0 && i < ncases && ok)
			okc[i]++;
		if (log)
			fputs(line, log);
	}
	if (in)
		fclose(in);
	bad = reap(w * groups, pid);
	if (log)
		rewind(log);
	report_world(w, groups, okc, log ? log : stdin);
	UNIT_OK(bad == 0, w == 1 ? "world 1: the rank exits cleanly" :
	    "every rank exits cleanly");
	if (log)
		fclose(log);
}

/* ---- worked examples and mismatches (world 3) ---- */

static void
examples_rank(struct comm *c, int fd, const void *arg)
{
	int r = comm_rank(c), w = comm_size(c);
	int32_t v = 10 * (r + 1), s = r + 1, ag[2] = { r, r + 10 }, all[2 * MAXW];

	(void)arg;
	if (coll_broadcast(c, &v, 1, DT_I32, 1, COLL_AUTO) == 0)
		dprintf(fd, "bcast %d %d\n", r, v);
	if (coll_allreduce(c, &s, 1, DT_I32, COLL_SUM, COLL_AUTO) == 0)
		dprintf(fd, "allreduce %d %d\n", r, s);
	if (coll_allgather(c, ag, all, 2, DT_I32, COLL_AUTO) == 0) {
		char line[256];
		int n = snprintf(line, sizeof line, "allgather %d", r);
		for (int i = 0; i < 2 * w && n < 200; i++)
			n += snprintf(line + n, sizeof line - (size_t)n, " %d", all[i]);
		dprintf(fd, "%s\n", line);	/* one write: lines of ranks do not mix */
	}
}

static void
test_examples(void)
{
	pid_t pid[MAXW];
	int fd = fork_world(3, examples_rank, NULL, 20, pid), good[3] = { 0 }, r, v;
	FILE *in = fd >= 0 ? fdopen(fd, "r") : NULL;
	char line[256];
	int a[6];

	while (in && fgets(line, sizeof line, in)) {
		if (sscanf(line, "bcast %d %d", &r, &v) == 2 && v == 20)
			good[0]++;
		if (sscanf(line, "allreduce %d %d", &r, &v) == 2 && v == 6)
			good[1]++;
		if (sscanf(line, "allgather %d %d %d %d %d %d %d", &r, &a[0], &a[1],
		    &a[2], &a[3], &a[4], &a[5]) == 7 && a[0] == 0 && a[1] == 10 &&
		    a[2] == 1 && a[3] == 11 && a[4] == 2 && a[5] == 12)
			good[2]++;
	}
	if (in)
		fclose(in);
	reap(3, pid);
	UNIT_OK(good[0] == 3, "broadcast of 10*(r+1) from rank 1: everyone gets 20");
	UNIT_OK(good[1] == 3, "allreduce of r+1 on 3 ranks: everyone gets 6");
	UNIT_OK(good[2] == 3, "allgather of [r, r+10] on 3 ranks: [0,10,1,11,2,12]");
}

/* Rank 1 disagrees (arg: 0 count, 1 dtype, 2 algorithm, 3 another
 * collective) or exits before the collective (4). */
static void
mismatch_rank(struct comm *c, int fd, const void *arg)
{
	int how = *(const int *)arg, r = comm_rank(c), rc;
	float buf[64] = { 0 };

	if (r == 1 && how == 4)
		_exit(0);	/* dies without a word */
	if (r == 1 && how == 3)
		rc = coll_broadcast(c, buf, 10, DT_F32, 0, COLL_AUTO);
	else
		rc = coll_allreduce(c, buf, r == 1 && how == 0 ? 11 : 10,
		    r == 1 && how == 1 ? DT_I32 : DT_F32, COLL_SUM,
		    r == 1 && how == 2 ? COLL_TREE : COLL_RING);
	dprintf(fd, "%d %d %d %s\n", r, rc, (int)comm_errkind(c), rc ? comm_error(c) : "");
	_exit(rc == 0 ? 0 : 3);
}

static void
test_mismatch(int how, const char *what)
{
	pid_t pid[MAXW];
	int fd = fork_world(3, mismatch_rank, &how, 5, pid), failed = 0, mism = 0, r, rc, k;
	FILE *in = fd >= 0 ? fdopen(fd, "r") : NULL;
	char line[600];

	while (in && fgets(line, sizeof line, in))
		if (sscanf(line, "%d %d %d", &r, &rc, &k) == 3 && rc < 0) {
			failed++;
			mism += k == COMM_ERR_MISMATCH;
			printf("# %s", line);
		}
	if (in)
		fclose(in);
	reap(3, pid);
	UNIT_OK(how == 4 ? failed == 2 : failed == 3 && mism >= 1, what);
}

int
main(void)
{
	static const int worlds[] = { 1, 2, 3, 4, 5, 7, 8 };

	signal(SIGPIPE, SIG_IGN);
	test_examples();
	test_mismatch(0, "allreduce with different counts fails on every rank (mismatch)");
	test_mismatch(1, "allreduce with different dtypes fails on every rank (mismatch)");
	test_mismatch(2, "allreduce with different algorithms fails on every rank (mismatch)");
	test_mismatch(3, "allreduce against broadcast fails on every rank (mismatch)");
	test_mismatch(4, "a rank that exits makes the others fail, not hang");
	for (size_t k = 0; k < sizeof worlds / sizeof worlds[0]; k++)
		test_world(worlds[k], 1);
	/* two groups of 3 by parity (ranks 0 2 4 as 2 1 0), concurrently */
	test_world(3, 2);
	return unit_done();
}
