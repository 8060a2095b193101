/*
 * test_hier: the hierarchical collectives (COLL_HIER) over forked ranks
 * on 127.0.0.1, made into hosts by comm_options.host: even, uneven and
 * interleaved layouts of 2 to 8 ranks. Every result is checked against
 * exact closed forms computed here (small integers, exact in every
 * dtype), and bit for bit against the same call with COLL_RING; AUTO's
 * choice against SPEC's rule; the hosts' numbering against the layout;
 * and float sums, whose bits depend on the order of reduction, for being
 * the same on every rank. Each rank runs under alarm() and the
 * transport's timeout, so nothing hangs.
 */
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "comm/coll.h"
#include "ranks.h"
#include "unit.h"

#define MAXW 8
#define BIGN 70001	/* 280 KB of i32: above every leader/shares threshold */

/* What each rank checks, one verdict line each. */
enum check { CK_HOSTS, CK_AUTO, CK_ALLREDUCE, CK_BROADCAST, CK_ALLGATHER,
	CK_REDUCE_SCATTER, CK_SUBGROUP, CK_BYTES, CK_NCHECKS };
static const char *const check_names[CK_NCHECKS] = {
	"hosts numbered by lowest rank; pairs across hosts on tcp",
	"auto picks hier exactly when hosts >= 2 and some host has >= 2 ranks",
	"allreduce hier: every op, exact and bitwise equal to ring",
	"broadcast hier from every root: exact and bitwise equal to ring",
	"allgather(v) hier, in place and not: exact and bitwise equal to ring",
	"reduce-scatter hier, in place and not: exact and bitwise equal to ring",
	"hier on a sub-group (comm_split by parity), on the group, on the "
	    "sub-group again: exact",
	"bytes sent by a hier allreduce counted on the group: some, at most "
	    "the vector per other rank",
};

/* ---- layouts: letter r is rank r's host ---- */

static int
world_of(const char *lay)
{
	return (int)strlen(lay);
}

/* Hosts numbered by their lowest rank, as comm_host says. */
static int
host_of(const char *lay, int r)
{
	int h = 0;

	for (int q = 0; q < r; q++) {
		int seen = 0;
		for (int p = 0; p < q; p++)
			seen |= lay[p] == lay[q];
		if (lay[q] == lay[r])
			return h;
		h += !seen;
	}
	return h;
}

static int
hosts_of(const char *lay)
{
	int n = 0;

	for (int r = 0; r < world_of(lay); r++)
		n = host_of(lay, r) + 1 > n ? host_of(lay, r) + 1 : n;
	return n;
}

/* ---- closed-form data ---- */

struct red { enum dtype dt; enum coll_op op; };

static const struct red reds[] = {
	{ DT_I32, COLL_SUM }, { DT_I64, COLL_PROD }, { DT_I8, COLL_MIN },
	{ DT_U8, COLL_MAX }, { DT_I32, COLL_AVG }, { DT_F32, COLL_SUM },
	{ DT_F32, COLL_AVG }, { DT_I16, COLL_SUM }, { DT_BOOL, COLL_MAX },
	{ DT_F64, COLL_MIN },
};
#define NREDS (sizeof reds / sizeof reds[0])

/* Element i of rank r's input: -5..5 (0..10 for u8), 0/1 for bool, and
 * for products -1, 1 or 2 (at most 2^8 in magnitude over 8 ranks). */
static long long
rv(const struct red *t, int r, size_t i)
{
	long long k = (long long)((size_t)r * 5 + i * 3);

	if (t->dt == DT_BOOL)
		return (r + (long long)i) % 3 == 0;
	if (t->op == COLL_PROD)
		return k % 7 == 0 ? 2 : k % 4 == 1 ? -1 : 1;
	return t->dt == DT_U8 ? k % 11 : k % 11 - 5;
}

/* The reduction over ranks 0..w-1 in exact arithmetic, then as the dtype
 * stores it (integer average truncates; f32 divides in f32). */
static double
rexp(const struct red *t, int w, size_t i)
{
	long long a = rv(t, 0, i);

	for (int r = 1; r < w; r++) {
		long long v = rv(t, r, i);
		if (t->op == COLL_PROD)
			a *= v;
		else if (t->op == COLL_MIN)
			a = v < a ? v : a;
		else if (t->op == COLL_MAX)
			a = v > a ? v : a;
		else if (t->dt == DT_BOOL)
			a = a || v;
		else
			a += v;
	}
	if (t->op != COLL_AVG)
		return (double)a;
	return t->dt == DT_F32 ? (double)((float)a / (float)w) : (double)(a / w);
}

/* Data that moves unreduced. */
static double
mv(int r, size_t i)
{
	return (double)(((size_t)r * 37 + i * 11) % 101);
}

/* ---- checks, run by every rank ---- */

struct rk {
	struct comm *c;
	int r, w;
	char *a, *b;		/* hier's and ring's buffers */
	char why[200];
};

static int
bad(struct rk *k, const char *fmt, ...)
{
	va_list ap;

	if (k->why[0] == '\0') {
		va_start(ap, fmt);
		vsnprintf(k->why, sizeof k->why, fmt, ap);
		va_end(ap);
	}
	return 1;
}

/* Both runs returned 0, and their first bytes agree bit for bit. */
static int
both(struct rk *k, int rh, int rr, size_t bytes, const char *what)
{
	if (rh < 0 || rr < 0)
		return bad(k, "%s: %s", what, comm_error(k->c));
	if (memcmp(k->a, k->b, bytes) != 0)
		return bad(k, "%s: hier and ring differ", what);
	return 0;
}

static int
ck_hosts(struct rk *k, const char *lay)
{
	int fail = comm_hosts(k->c) != hosts_of(lay);

	for (int p = 0; p < k->w; p++) {
		fail |= comm_host(k->c, p) != host_of(lay, p);
		if (lay[p] != lay[k->r])
			fail |= strcmp(comm_transport(k->c, p), "tcp") != 0;
	}
	return fail ? bad(k, "hosts %d, want %d", comm_hosts(k->c), hosts_of(lay)) : 0;
}

static int
ck_auto(struct rk *k, const char *lay)
{
	static const enum coll_kind kinds[] = { COLL_KIND_ALLREDUCE,
	    COLL_KIND_BROADCAST, COLL_KIND_ALLGATHER, COLL_KIND_REDUCE_SCATTER };
	int h = hosts_of(lay), hier = h >= 2 && h < k->w, fail = 0;
	const struct red t = { DT_I32, COLL_SUM };

	for (size_t j = 0; j < 4; j++)
		for (size_t bytes = 4; bytes <= ((size_t)1 << 26); bytes *= 64) {
			enum coll_algo got = coll_auto_group(k->c, kinds[j], bytes);
			fail |= hier ? got != COLL_HIER :
			    got != coll_auto(kinds[j], bytes, k->w);
		}
	fail |= coll_auto_group(k->c, COLL_KIND_ALLTOALL, 1 << 20) == COLL_HIER;
	if (fail)
		return bad(k, "auto's choice");
	/* and what auto picks works */
	for (size_t i = 0; i < 1001; i++)
		dtype_put(t.dt, k->a, i, (double)rv(&t, k->r, i));
	if (coll_allreduce(k->c, k->a, 1001, t.dt, t.op, COLL_AUTO) < 0)
		return bad(k, "auto allreduce: %s", comm_error(k->c));
	for (size_t i = 0; i < 1001; i++)
		if (dtype_get(t.dt, k->a, i) != rexp(&t, k->w, i))
			return bad(k, "auto allreduce: element %zu", i);
	return 0;
}

static int
ck_allreduce(struct rk *k)
{
	static const size_t counts[] = { 1, 7, 1001, BIGN };

	for (size_t j = 0; j < NREDS; j++)
		for (size_t m = 0; m < 4; m++) {
			const struct red *t = &reds[j];
			size_t n = counts[m], es = dtype_size(t->dt);
			int rh, rr;
			for (size_t i = 0; i < n; i++)
				dtype_put(t->dt, k->a, i, (double)rv(t, k->r, i));
			memcpy(k->b, k->a, n * es);
			rh = coll_allreduce(k->c, k->a, n, t->dt, t->op, COLL_HIER);
			rr = coll_allreduce(k->c, k->b, n, t->dt, t->op, COLL_RING);
			if (both(k, rh, rr, n * es, "allreduce"))
				return 1;
			for (size_t i = 0; i < n; i++)
				if (dtype_get(t->dt, k->a, i) != rexp(t, k->w, i))
					return bad(k, "allreduce %s %s count %zu: element "
					    "%zu is %g, want %g", dtype_name(t->dt),
					    coll_op_name(t->op), n, i,
					    dtype_get(t->dt, k->a, i), rexp(t, k->w, i));
		}
	return 0;
}

static int
bcast_one(struct rk *k, size_t n, int root)
{
	int rh, rr;

	for (size_t i = 0; i < n; i++)
		dtype_put(DT_I32, k->a, i, k->r == root ? mv(root, i) : -1);
	memcpy(k->b, k->a, n * 4);
	rh = coll_broadcast(k->c, k->a, n, DT_I32, root, COLL_HIER);
	rr = coll_broadcast(k->c, k->b, n, DT_I32, root, COLL_RING);
	if (both(k, rh, rr, n * 4, "broadcast"))
		return 1;
	for (size_t i = 0; i < n; i++)
		if (dtype_get(DT_I32, k->a, i) != mv(root, i))
			return bad(k, "broadcast from %d count %zu: element %zu", root,
			    n, i);
	return 0;
}

static int
ck_broadcast(struct rk *k)
{
	for (int root = 0; root < k->w; root++)
		if (bcast_one(k, 7, root) || bcast_one(k, root % 2 ? 1 : BIGN, root))
			return 1;
	return 0;
}

/* counts[r] = n + r % 3 when vary; in place: send is rank's block of the
 * output (of each run's own output buffer). */
static int
gather_one(struct rk *k, size_t n, int vary, int inplace)
{
	size_t counts[MAXW], at = 0, total = 0, mine = 0;
	char *sa = k->a + (size_t)BIGN * 24, *sb;
	int rh, rr;

	for (int r = 0; r < k->w; r++) {
		counts[r] = n + (vary ? (size_t)r % 3 : 0);
		mine += r < k->r ? counts[r] : 0;
		total += counts[r];
	}
	memset(k->a, 0xa5, total * 8);
	memset(k->b, 0x5a, total * 8);
	if (inplace)
		sa = k->a + mine * 8;
	for (size_t i = 0; i < counts[k->r]; i++)
		dtype_put(DT_F64, sa, i, mv(k->r, i));
	sb = inplace ? memcpy(k->b + mine * 8, sa, counts[k->r] * 8) : sa;
	rh = coll_allgatherv(k->c, sa, k->a, counts, DT_F64, COLL_HIER);
	rr = coll_allgatherv(k->c, sb, k->b, counts, DT_F64, COLL_RING);
	if (both(k, rh, rr, total * 8, "allgatherv"))
		return 1;
	for (int r = 0; r < k->w; r++)
		for (size_t i = 0; i < counts[r]; i++, at++)
			if (dtype_get(DT_F64, k->a, at) != mv(r, i))
				return bad(k, "allgatherv count %zu%s%s: rank %d's element "
				    "%zu", n, vary ? " varying" : "",
				    inplace ? " in place" : "", r, i);
	return 0;
}

static int
ck_allgather(struct rk *k)
{
	static const size_t counts[] = { 1, 7, 1001, BIGN / MAXW };

	for (size_t m = 0; m < 4; m++)
		for (int v = 0; v < 4; v++)
			if (gather_one(k, counts[m], v & 1, v >> 1))
				return 1;
	/* the equal-count entry point too */
	return gather_one(k, 0, 1, 0);
}

static int
rs_one(struct rk *k, const struct red *t, size_t n, int inplace)
{
	size_t es = dtype_size(t->dt), all = n * (size_t)k->w;
	char *oa = inplace ? k->a : k->a + all * es, *ob;
	int rh, rr;

	for (size_t i = 0; i < all; i++)
		dtype_put(t->dt, k->a, i, (double)rv(t, k->r, i));
	memcpy(k->b, k->a, all * es);
	ob = inplace ? k->b : k->b + all * es;
	rh = coll_reduce_scatter(k->c, k->a, oa, n, t->dt, t->op, COLL_HIER);
	rr = coll_reduce_scatter(k->c, k->b, ob, n, t->dt, t->op, COLL_RING);
	if (rh < 0 || rr < 0 || memcmp(oa, ob, n * es) != 0)
		return both(k, rh, rr, 0, "reduce-scatter") ||
		    bad(k, "reduce-scatter: hier and ring differ");
	for (size_t i = 0; i < n; i++)
		if (dtype_get(t->dt, oa, i) != rexp(t, k->w, (size_t)k->r * n + i))
			return bad(k, "reduce-scatter %s %s count %zu%s: element %zu",
			    dtype_name(t->dt), coll_op_name(t->op), n,
			    inplace ? " in place" : "", i);
	return 0;
}

static int
ck_reduce_scatter(struct rk *k)
{
	static const size_t counts[] = { 1, 5, 1001, BIGN / MAXW };

	for (size_t j = 0; j < NREDS; j++)
		for (size_t m = 0; m < 4; m++)
			if (rs_one(k, &reds[j], counts[m], (int)(j + m) % 2))
				return 1;
	return 0;
}

/* Hier allreduce of n elements on sub-group g (the ranks 2q + par, all
 * when step is 1), against the sum over its members. */
static int
sub_allreduce(struct rk *k, struct comm *g, size_t n, int par, int step,
    const char *what)
{
	const struct red t = { DT_I32, COLL_SUM };
	int members = (k->w - par + step - 1) / step;

	for (size_t i = 0; i < n; i++)
		dtype_put(t.dt, k->a, i, (double)rv(&t, k->r, i));
	if (coll_allreduce(g, k->a, n, t.dt, t.op, COLL_HIER) < 0)
		return bad(k, "%s allreduce: %s", what, comm_error(g));
	for (size_t i = 0; i < n; i++) {
		long long want = 0;
		for (int q = 0; q < members; q++)
			want += rv(&t, step * q + par, i);
		if (dtype_get(t.dt, k->a, i) != (double)want)
			return bad(k, "%s allreduce: element %zu", what, i);
	}
	return 0;
}

/* The ranks of one parity as a sub-group: hier on it, then on the group
 * while the sub-group keeps its own hier sub-groups, then on it again
 * (each group's cache serves it alone), against the sums over the
 * members. */
static int
ck_subgroup(struct rk *k)
{
	struct comm *sub;
	char err[256];
	int rc, par = k->r % 2;

	if (comm_split(k->c, par, k->r, &sub, err, sizeof err) < 0)
		return bad(k, "split: %s", err);
	rc = sub_allreduce(k, sub, BIGN, par, 2, "sub-group") ||
	    sub_allreduce(k, k->c, 1001, 0, 1, "group after sub-group") ||
	    sub_allreduce(k, sub, 7, par, 2, "sub-group again");
	comm_close(sub);
	return rc;
}

/* A float sum whose bits depend on the order of the reduction: the same
 * bits on every rank, its FNV-1a hash reported. */
static uint64_t
float_bits(struct rk *k)
{
	float *f = (float *)k->a;
	uint64_t h = 0xcbf29ce484222325ull;

	for (size_t i = 0; i < BIGN; i++)
		f[i] = 0.1f * (float)(k->r + 1) + 1e-3f * (float)((i * 7919) % 1000);
	if (coll_allreduce(k->c, f, BIGN, DT_F32, COLL_SUM, COLL_HIER) < 0)
		return 0;
	for (size_t i = 0; i < BIGN * 4; i++)
		h = (h ^ (unsigned char)k->a[i]) * 0x100000001b3ull;
	return h;
}

/* The sub-groups' sends count as the group's: every rank sends some of a
 * hier allreduce (to its leader, across, or within its host), and none
 * more than the vector once per other rank. */
static int
ck_bytes(struct rk *k)
{
	uint64_t before = comm_bytes_sent(k->c), sent;
	size_t bytes = (size_t)BIGN * 4;

	if (coll_allreduce(k->c, k->a, BIGN, DT_I32, COLL_SUM, COLL_HIER) < 0)
		return bad(k, "allreduce: %s", comm_error(k->c));
	sent = comm_bytes_sent(k->c) - before;
	if (k->w > 1 && (sent == 0 || sent > (uint64_t)(k->w - 1) * bytes))
		return bad(k, "%llu bytes sent for a %zu-byte allreduce",
		    (unsigned long long)sent, bytes);
	return 0;
}

/* ---- forking a layout ---- */

struct job {
	const char *lay;
	char master[64];
	int fd;
};

/* Rank of world on its layout's host (a failure said on j->fd). */
static int
open_rank(const struct job *j, int rank, int world, double timeout,
    struct comm **c)
{
	char host[2] = { j->lay[rank], '\0' }, err[512];
	struct comm_options o = { .rank = rank, .world = world, .master = j->master,
	    .timeout = timeout, .job = "test_hier", .host = host };

	if (comm_open(c, &o, err, sizeof err) == 0)
		return 0;
	dprintf(j->fd, "open %d %s\n", rank, err);
	return -1;
}

static int
rank_main(int rank, int world, void *arg)
{
	const struct job *j = arg;
	struct rk k = { .r = rank, .w = world };
	int fail[CK_NCHECKS] = { 0 };

	if (open_rank(j, rank, world, 20, &k.c) < 0)
		return 1;
	k.a = malloc((size_t)BIGN * 32);
	k.b = malloc((size_t)BIGN * 32);
	if (!k.a || !k.b)
		return 1;
	fail[CK_HOSTS] = ck_hosts(&k, j->lay);
	fail[CK_AUTO] = ck_auto(&k, j->lay);
	fail[CK_ALLREDUCE] = ck_allreduce(&k);
	fail[CK_BROADCAST] = ck_broadcast(&k);
	fail[CK_ALLGATHER] = ck_allgather(&k);
	fail[CK_REDUCE_SCATTER] = ck_reduce_scatter(&k);
	coll_set_segment(256);	/* the same, pipelined in small pieces */
	fail[CK_ALLREDUCE] |= ck_allreduce(&k);
	coll_set_segment(0);
	fail[CK_SUBGROUP] = world >= 4 ? ck_subgroup(&k) : 0;
	fail[CK_BYTES] = ck_bytes(&k);
	for (int c = 0; c < CK_NCHECKS; c++)
		dprintf(j->fd, "check %d %d %d %s\n", c, rank, !fail[c],
		    fail[c] ? k.why : "");
	dprintf(j->fd, "bits %d %llx\n", rank, (unsigned long long)float_bits(&k));
	free(k.a);
	free(k.b);
	comm_close(k.c);
	return 0;
}

static void
test_layout(const char *lay)
{
	struct job j = { .lay = lay };
	int w = world_of(lay), fd, good[CK_NCHECKS] = { 0 }, c, r, ok, nbits = 0;
	unsigned long long bits[MAXW] = { 0 };
	pid_t pid[MAXW];
	char line[512], what[256];
	FILE *in;

	snprintf(j.master, sizeof j.master, "127.0.0.1:%d", unit_free_port(AF_INET));
	if ((fd = unit_fork_reporting(w, 180, rank_main, &j, &j.fd, pid)) < 0)
		return;
	in = fdopen(fd, "r");
	while (in && fgets(line, sizeof line, in)) {
		int at = 0;
		if (sscanf(line, "check %d %d %d %n", &c, &r, &ok, &at) >= 3 &&
		    c >= 0 && c < CK_NCHECKS) {
			good[c] += ok;
			if (!ok)
				printf("# layout %s: rank %d: %s", lay, r, line + at);
		} else if (sscanf(line, "bits %d %llx", &r, &bits[nbits]) == 2 &&
		    nbits < MAXW) {
			nbits++;
		} else {
			printf("# layout %s: %s", lay, line);
		}
	}
	if (in)
		fclose(in);
	for (c = 0; c < CK_NCHECKS; c++) {
		snprintf(what, sizeof what, "layout %s (%d hosts): %s", lay,
		    hosts_of(lay), check_names[c]);
		UNIT_OK(good[c] == w, what);
	}
	ok = nbits == w && bits[0] != 0;
	for (r = 1; r < nbits; r++)
		ok &= bits[r] == bits[0];
	snprintf(what, sizeof what, "layout %s: a float allreduce hier has the "
	    "same bits on every rank", lay);
	UNIT_OK(ok, what);
	snprintf(what, sizeof what, "layout %s: every rank exits cleanly", lay);
	UNIT_OK(unit_wait_ranks(w, pid, NULL) == 0, what);
}

/* ---- ranks that disagree ---- */

static int
mismatch_main(int rank, int world, void *arg)
{
	const struct job *j = arg;
	struct comm *c;
	int32_t buf[16] = { 0 };
	int rc;

	if (open_rank(j, rank, world, 5, &c) < 0)
		return 1;
	/* a first call makes the sub-groups; the second disagrees */
	rc = coll_allreduce(c, buf, 8, DT_I32, COLL_SUM, COLL_HIER) < 0 ? 1 :
	    coll_allreduce(c, buf, rank == 3 ? 9 : 8, DT_I32, COLL_SUM,
	    COLL_HIER) < 0 ? 2 + (comm_errkind(c) == COMM_ERR_MISMATCH) : 0;
	comm_close(c);
	return rc;
}

static void
test_mismatch(void)
{
	struct job j = { .lay = "AABB", .fd = STDERR_FILENO };
	pid_t pid[MAXW];
	int st[MAXW];

	snprintf(j.master, sizeof j.master, "127.0.0.1:%d", unit_free_port(AF_INET));
	unit_fork_ranks(4, 30, mismatch_main, &j, pid);
	unit_wait_ranks(4, pid, st);
	UNIT_OK(st[0] >= 2 && st[1] >= 2 && st[2] >= 2 && st[3] >= 2 &&
	    (st[2] == 3 || st[3] == 3),
	    "hier allreduce with a count differing on one rank fails on every "
	    "rank, as a mismatch where it is found");
}

int
main(void)
{
	/* even, uneven, interleaved; one host; one rank a host; hosts in
	 * order (hier's allgather in place: 2 hosts, 3) */
	static const char *const layouts[] = { "AB", "AA", "AAB", "ABA", "AABB",
	    "ABAB", "ABBB", "ABCC", "AABBB", "ABABA", "ABCAB", "ABCABC",
	    "AABBCC", "AAAABBBB" };

	signal(SIGPIPE, SIG_IGN);
	for (size_t i = 0; i < sizeof layouts / sizeof layouts[0]; i++)
		test_layout(layouts[i]);
	test_mismatch();
	return unit_done();
}
