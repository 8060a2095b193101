/* test_bench_plan: collx-bench's cost model and planner against closed
 * forms worked out here: a least-squares line through exact points, ring
 * and tree allreduce over 8192 ranks (alpha-beta-gamma, Thakur et al.),
 * the pipeline bubble (P-1)/(m+P-1) of GPipe and 1F1B at 1024 hosts, the
 * parameter count against the model nn_init makes, the memory ZeRO saves,
 * and the cost file read back as written, with its refusals. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/bench.h"
#include "bench/bench_cost.h"
#include "bench/bench_plan.h"
#include "tensor/tensor.h"
#include "unit.h"

/* A cluster of round numbers: no algorithm fitted, so every collective
 * uses its link's constants. */
static void
cost_init(struct bench_cost *c)
{
	memset(c, 0, sizeof *c);
	c->version = BENCH_COST_VERSION;
	c->world = 4, c->hosts = 1, c->cores = 8;
	c->link[BENCH_SHM] = (struct bench_ab){ .alpha = 2e-6, .beta = 10e9, .points = 5 };
	c->link[BENCH_TCP] = (struct bench_ab){ .alpha = 20e-6, .beta = 1.25e9, .points = 5 };
	c->gamma = 8e9;
	c->mm[0] = (struct bench_mm){ 1e3, 20e9 };
	c->mm[1] = (struct bench_mm){ 1e9, 80e9 };
	c->nmm = 2;
	c->attn_rate = 10e9;
	c->elem_rate = 5e9;
	c->compute_ranks = 1;
	snprintf(c->arch, sizeof c->arch, "gpt");
	snprintf(c->dims, sizeof c->dims, "256,64,4,4,32");
}

static void
test_line(void)
{
	double x[5] = { 4096, 16384, 65536, 262144, 1048576 }, t[5], a, b;

	for (int i = 0; i < 5; i++)
		t[i] = 3e-6 + x[i] * 2e-10;
	bench_cost_line(x, t, 5, &a, &b);
	UNIT_CLOSE(a, 3e-6, 1e-9, 0, "line: the intercept of exact points");
	UNIT_CLOSE(b, 2e-10, 1e-9, 0, "line: the slope of exact points");
	for (int i = 0; i < 5; i++)
		t[i] = 5e-6;
	bench_cost_line(x, t, 5, &a, &b);
	UNIT_OK(b == 0 && fabs(a - 5e-6) < 1e-15, "line: flat times, no slope");
}

/* 1024 hosts x 8 ranks over TCP: ring 2(p-1) steps and 2(p-1)/p of the
 * bytes sent, (p-1)/p reduced; tree (binomial reduce then broadcast) 2
 * log2 p steps of the whole vector, log2 p reductions. */
static void
test_closed_forms(void)
{
	struct bench_cost c;
	double p = 8192, n = 256.0 * 1024 * 1024, a = 20e-6, bw = 1.25e9;
	double g = 8e9, want, got;

	cost_init(&c);
	want = 2 * (p - 1) * a + 2 * (p - 1) / p * n / bw + (p - 1) / p * n / g;
	got = bench_cost_coll(&c, COLL_KIND_ALLREDUCE, COLL_RING, BENCH_TCP,
	    8192, 1, n);
	UNIT_CLOSE(got, want, 1e-12, 0, "ring allreduce on 8192 ranks, "
	    "256 MiB: 2(p-1)a + 2(p-1)/p n/b + (p-1)/p n/g");
	want = 2 * 13 * a + 2 * 13 * n / bw + 13 * n / g;
	got = bench_cost_coll(&c, COLL_KIND_ALLREDUCE, COLL_TREE, BENCH_TCP,
	    8192, 1, n);
	UNIT_CLOSE(got, want, 1e-12, 0, "tree allreduce on 8192 ranks: "
	    "2 log2 p steps of the whole vector");
	/* doubling the ranks of a ring adds 2p alpha, the bandwidth term
	 * stays below 2 n / b */
	got = bench_cost_coll(&c, COLL_KIND_ALLREDUCE, COLL_RING, BENCH_TCP,
	    16384, 1, n) - bench_cost_coll(&c, COLL_KIND_ALLREDUCE, COLL_RING,
	    BENCH_TCP, 8192, 1, n);
	UNIT_CLOSE(got, 2 * 8192 * a + 2 * n / bw * (1 / 8192.0 - 1 /
	    16384.0) + n / g * (1 / 8192.0 - 1 / 16384.0), 1e-9, 0,
	    "ring allreduce grows 2 alpha a rank");
	/* ring allgather: p - 1 messages of n / p, a link's own */
	got = bench_cost_coll(&c, COLL_KIND_ALLGATHER, COLL_RING, BENCH_SHM, 8,
	    8, 8e6);
	UNIT_CLOSE(got, 7 * (2e-6 + 1e6 / 10e9), 1e-12, 0,
	    "ring allgather on 8: 7 point-to-point messages of 1/8");
	/* hierarchical, 256 MiB: the shares (ring reduce-scatter and
	 * allgather in the host: ring allreduce on 8 by shm), then auto's
	 * allreduce of each 1/8 across the 1024 hosts, the 8 cross groups at
	 * once on every host's link (8 times the bytes on it) */
	got = bench_cost_coll(&c, COLL_KIND_ALLREDUCE, COLL_HIER, BENCH_TCP,
	    8192, 8, n);
	{
		double st, vol, red;

		UNIT_OK(bench_cost_shape(COLL_KIND_ALLREDUCE,
		    coll_auto(COLL_KIND_ALLREDUCE, (size_t)n / 8, 1024), 1024,
		    &st, &vol, &red) == 0, "hier: auto's closed form across");
		want = 2 * 7 * 2e-6 + 2 * 7 / 8.0 * n / 10e9 + 7 / 8.0 * n /
		    g + st * a + vol * 8 * (n / 8) / bw + red * (n / 8) / g;
	}
	UNIT_CLOSE(got, want, 1e-12, 0, "hier allreduce: within, across "
	    "on 1/8, within");
}

/* ring allreduce's closed form on p ranks of the round cluster's shm */
static double
ring_shm(double p, double n)
{
	return 2 * (p - 1) * 2e-6 + 2 * (p - 1) / p * n / 10e9 + (p - 1) / p *
	    n / 8e9;
}

/* A kept sweep: its own times at the fit's world, log-log between
 * sizes (100 us at 1 MB, 800 us at 4 MB: 100 2^1.5 us at 2 MB), grown to
 * other worlds by the step model's ratio and past its end by the closed
 * form's. */
static void
test_sweep(void)
{
	struct bench_cost c;
	struct bench_ab *a = &c.coll[BENCH_SHM][COLL_KIND_ALLREDUCE][COLL_RING];
	double t2 = 100e-6 * pow(2, 1.5);

	cost_init(&c);
	*a = (struct bench_ab){ .alpha = 2e-6, .beta = 10e9, .points = 2,
	    .nt = 2, .tb = { 1e6, 4e6 }, .tt = { 100e-6, 800e-6 } };
	UNIT_CLOSE(bench_cost_coll(&c, COLL_KIND_ALLREDUCE, COLL_RING,
	    BENCH_SHM, 4, 4, 1e6), 100e-6, 1e-12, 0, "sweep: a measured size "
	    "as measured");
	UNIT_CLOSE(bench_cost_coll(&c, COLL_KIND_ALLREDUCE, COLL_RING,
	    BENCH_SHM, 4, 4, 2e6), t2, 1e-9, 0, "sweep: log-log between sizes");
	/* 2 MB runs as two 1 MiB slices, each the ring's 2 (p - 1) steps */
	UNIT_CLOSE(bench_cost_coll(&c, COLL_KIND_ALLREDUCE, COLL_RING,
	    BENCH_SHM, 16, 16, 2e6), t2 * ring_shm(16, 1e6) / ring_shm(4, 1e6),
	    1e-9, 0, "sweep: 16 ranks, the steps' ratio to 4 (in slices)");
	UNIT_CLOSE(bench_cost_coll(&c, COLL_KIND_ALLREDUCE, COLL_RING,
	    BENCH_SHM, 4, 4, 64e6), 800e-6 * ring_shm(4, 64e6) / ring_shm(4,
	    4e6), 1e-9, 0, "sweep: past its end, grown as the closed form");
}

/* tcp sweeps of 2 ranks on 2 hosts (one a host), predicted on 2 hosts x
 * 2 ranks, 4 MB (under a slice), step by step: ring allgather's 3 steps
 * each put one message of n/4 on a host's link (the other in the host);
 * recursive doubling's second step two of n/2 (both ranks of a host
 * cross at once), its first n/4 in the host; alltoall pairwise's sends
 * leave back to back, 2 ranks x 2 blocks of n/4 on each link */
static void
test_steps(void)
{
	struct bench_cost c;
	struct bench_ab *a;
	double n = 4e6, at = 20e-6, bt = 1.25e9, as = 2e-6, bs = 10e9, m0;

	cost_init(&c);
	for (int k = 0; k < 3; k++) {
		static const int kind[3] = { COLL_KIND_ALLGATHER,
		    COLL_KIND_ALLGATHER, COLL_KIND_ALLTOALL };
		static const int algo[3] = { COLL_RING, COLL_RD,
		    COLL_PAIRWISE };

		a = &c.coll[BENCH_TCP][kind[k]][algo[k]];
		*a = (struct bench_ab){ .alpha = at, .beta = bt, .points = 2,
		    .nt = 2, .tb = { 1e6, 16e6 }, .tt = { 1e-3, 16e-3 },
		    .ranks = 2, .hosts = 2 };
	}
	/* the sweep's own place: one step of n/2 across; 4 MB on the
	 * sweep's line between 1 and 16 MB: 4 ms */
	m0 = at + n / 2 / bt;
	UNIT_CLOSE(bench_cost_coll(&c, COLL_KIND_ALLGATHER, COLL_RING,
	    BENCH_TCP, 4, 2, n), 4e-3 * 3 * (at + n / 4 / bt) / m0, 1e-9, 0,
	    "steps: ring allgather on 2 x 2, 3 steps of n/4 across");
	UNIT_CLOSE(bench_cost_coll(&c, COLL_KIND_ALLGATHER, COLL_RD,
	    BENCH_TCP, 4, 2, n), 4e-3 * (as + n / 4 / bs + at + 2 * n / 2 /
	    bt) / m0, 1e-9, 0, "steps: recursive doubling on 2 x 2, two "
	    "ranks' n/2 on a link");
	UNIT_CLOSE(bench_cost_coll(&c, COLL_KIND_ALLTOALL, COLL_PAIRWISE,
	    BENCH_TCP, 4, 2, n), 4e-3 * (3 * at + 2 * 2 * n / 4 / bt) / m0,
	    1e-9, 0, "steps: pairwise alltoall on 2 x 2, n back to back");
	/* hosts of one core: 2 ranks a host wait twice the latency a step
	 * (1 MB, a sweep point: 1 ms) */
	c.cores = 1;
	UNIT_CLOSE(bench_cost_coll(&c, COLL_KIND_ALLGATHER, COLL_RING,
	    BENCH_TCP, 4, 2, 1e6), 1e-3 * 3 * (2 * at + 1e6 / 4 / bt) / (at +
	    1e6 / 2 / bt), 1e-9, 0, "steps: 2 ranks on a host of one core, "
	    "twice alpha");
	c.cores = 8;
	/* hier on one host: its own sweep at the fit's 4 ranks */
	a = &c.coll[BENCH_SHM][COLL_KIND_ALLGATHER][COLL_HIER];
	*a = (struct bench_ab){ .alpha = as, .beta = bs, .points = 2, .nt = 2,
	    .tb = { 1e6, 16e6 }, .tt = { 1e-3, 16e-3 }, .ranks = 4,
	    .hosts = 1 };
	UNIT_CLOSE(bench_cost_coll(&c, COLL_KIND_ALLGATHER, COLL_HIER,
	    BENCH_SHM, 4, 4, n), 4e-3, 1e-9, 0, "steps: hier on one host, "
	    "its own sweep");
	UNIT_CLOSE(bench_cost_expect(&c, COLL_KIND_ALLGATHER, COLL_HIER, 4,
	    1, 0, 64e6), 16e-3 * (2 * as + 0.75 * 64e6 / bs + 64e6 / bs) /
	    (2 * as + 0.75 * 16e6 / bs + 16e6 / bs), 1e-9, 0, "steps: hier "
	    "past its sweep, as auto's recursive doubling (2 steps, 3/4 of "
	    "the bytes) and the packing copy grow");
}

static void
plan_opts(struct bench_plan_opts *o, const struct bench_cost *c, int hosts,
    int l, const char *dims, long batch)
{
	char e[COLLX_ERRLEN];

	memset(o, 0, sizeof *o);
	o->cost = c;
	o->hosts = hosts, o->per_host = l, o->batch = batch;
	o->dims.arch = NN_GPT;
	if (nn_dims_parse(dims, NN_GPT, &o->dims, e, sizeof e) < 0)
		printf("# %s\n", e);
}

/* At 1024 hosts the pipeline of 64 stages idles (P-1)/(m+P-1) of its
 * time under GPipe and 1F1B, for every micro-batch count tried. */
static void
test_bubble(void)
{
	struct bench_cost c;
	struct bench_plan_opts o;
	struct bench_plan_row *r;
	char e[COLLX_ERRLEN];
	int n, nfit, code, ok = 1, seen[2][3] = { { 0 } };

	cost_init(&c);
	plan_opts(&o, &c, 1024, 1, "1024,256,64,8,64", 4096);
	o.mesh[0] = 16, o.mesh[1] = 1, o.mesh[2] = 64;
	UNIT_OK(bench_plan(&o, &r, &n, &nfit, &code, e, sizeof e) == 0,
	    "plan: dp 16 x pp 64 of 1024 hosts");
	for (int i = 0; i < n; i++) {
		double m = r[i].micro, P = 64, want = (P - 1) / (m + P - 1);
		double pipe = r[i].bubble / r[i].bubble_frac *
		    (1 - r[i].bubble_frac);

		ok &= r[i].pp == 64 && fabs(r[i].bubble_frac - want) < 1e-12;
		/* the bubble's seconds: its share of the whole pipeline */
		ok &= fabs(r[i].bubble / (pipe + r[i].bubble) - want) < 1e-9;
		seen[r[i].sched == PIPE_SCHED_GPIPE][r[i].micro / 128]++;
	}
	for (int k = 0; k < 6; k++)	/* m 64, 128, 256: m / 128 0, 1, 2 */
		ok &= seen[k / 3][k % 3] == 4;
	UNIT_OK(ok && n == 24, "bubble (P-1)/(m+P-1) for m 64, 128, 256, "
	    "GPipe and 1F1B, ZeRO 0-3");
	free(r);
	/* the mesh must be a factorization of the world */
	o.mesh[0] = 15;
	UNIT_OK(bench_plan(&o, &r, &n, &nfit, &code, e, sizeof e) < 0 &&
	    code == 2 && strstr(e, "--mesh 15,1,64") != NULL,
	    "plan: a mesh that is no factorization, exit 2 naming it");
}

static void
test_params_memory(void)
{
	static const char *const gpts[] = { "256,64,4,4,32", "50,24,3,2,8,40" };
	struct bench_cost c;
	struct bench_plan_opts o;
	struct bench_plan_row *r;
	char e[COLLX_ERRLEN];
	double z[4] = { 0 };
	int n, nfit, code;

	for (int i = 0; i < 3; i++) {
		struct nn_dims d = { 0 };
		struct tensor_set s;
		struct nn_model m;
		int bad;

		d.arch = i < 2 ? NN_GPT : NN_MLP;
		bad = nn_dims_parse(i < 2 ? gpts[i] : "7,16,3,3", d.arch, &d, e,
		    sizeof e) < 0 || nn_init(&s, &d, 1, e, sizeof e) < 0 ||
		    nn_model_load(&m, &s, e, sizeof e) < 0;
		UNIT_OK(!bad && bench_plan_params(&d) == (double)m.nparams,
		    i < 2 ? "parameter count of a gpt: as nn_init makes it" :
		    "parameter count of a 3-layer mlp: as nn_init makes it");
		if (!bad) {
			nn_model_free(&m);
			tensor_set_free(&s);
		}
	}
	cost_init(&c);
	plan_opts(&o, &c, 1, 4, "256,64,4,4,32", 32);
	o.adamw = 1;		/* its two moments, sharded by ZeRO 1 */
	o.mesh[0] = 4, o.mesh[1] = 1, o.mesh[2] = 1;
	UNIT_OK(bench_plan(&o, &r, &n, &nfit, &code, e, sizeof e) == 0 &&
	    n == 4, "dp 4: ZeRO 0, 1, 2 and 3");
	for (int i = 0; i < n; i++)
		z[r[i].zero] = r[i].mem;
	free(r);
	/* 4 bytes a parameter each for weights, gradients, two moments:
	 * ZeRO 1 shards the moments over 4 (saving 8 x 3/4), ZeRO 2 the
	 * gradients too (4 x 3/4 more) */
	double P = bench_plan_params(&o.dims);
	UNIT_CLOSE(z[0] - z[1], 8 * P * 3 / 4, 1e-9, 0, "ZeRO 1: the moments "
	    "a quarter");
	UNIT_CLOSE(z[1] - z[2], 4 * P * 3 / 4, 1e-9, 0, "ZeRO 2: the gradients "
	    "a quarter too");
	/* ZeRO 3: the weights a quarter too, but for two of the 4 layers
	 * gathered whole (this one and the prefetched) */
	UNIT_CLOSE(z[2] - z[3], 4 * P * 3 / 4 - 2 * 4 * P / 4, 1e-9, 0,
	    "ZeRO 3: the weights a quarter, two layers whole");
	o.mem = 1000;
	UNIT_OK(bench_plan(&o, &r, &n, &nfit, &code, e, sizeof e) < 0 &&
	    code == 3 && strstr(e, "--mem-per-rank 1000") != NULL,
	    "no mesh in 1000 bytes: exit 3 naming the smallest's need");
}

/* The row of mesh (D, T, P) with cp C, ep X and the given options. */
static int
pick(struct bench_plan_opts *o, int D, int T, int P, int C, int X, int zero,
    int zz, int hsdp, int ga, struct bench_plan_row *out)
{
	struct bench_plan_row *r;
	char e[COLLX_ERRLEN];
	int n, nfit, code, found = 0;

	if (bench_plan(o, &r, &n, &nfit, &code, e, sizeof e) < 0) {
		printf("# %s\n", e);
		return 0;
	}
	for (int i = 0; i < n; i++)
		if (r[i].dp == D && r[i].tp == T && r[i].pp == P &&
		    r[i].cp == C && r[i].ep == X && r[i].zero == zero &&
		    r[i].zigzag == zz && r[i].hsdp == hsdp &&
		    r[i].gather == ga && r[i].micro == P &&
		    r[i].sched == PIPE_SCHED_1F1B) {
			*out = r[i];
			found++;
		}
	free(r);
	return found == 1;
}

/* No alpha anywhere: every algorithm of a kind then costs its volume,
 * (p-1)/p of the bytes for allgather, reduce-scatter and alltoall. */
static void
cost_flat(struct bench_cost *c, int cores)
{
	cost_init(c);
	c->link[BENCH_SHM].alpha = c->link[BENCH_TCP].alpha = 0;
	c->cores = cores;
}

/* GPipe over 4 equal stages of one rank (an mlp of 4 layers of one
 * width) on a host of 2 cores, m = 4, no communication or elementwise
 * cost: its forward clocks have 1, 2, 3, 4,
 * 3, 2, 1 stages active, the backward's the same; a clock of a active
 * ranks takes max(1, a / 2) passes: 2 (1 + 1 + 1.5 + 2 + 1.5 + 1 + 1) =
 * 18 passes, where the 4 ranks' work over the 2 cores is 16 (the
 * compute) and the critical path at a core a rank 14: the bubble is 2
 * passes, one micro-batch's forward and backward at a whole core.
 * gpipe18: o's pp 4 plan holds one GPipe row of m 4 whose bubble is so. */
static void
gpipe18(struct bench_plan_opts *o, const char *what)
{
	struct bench_plan_row *r;
	char e[COLLX_ERRLEN], m[256];
	int n, nfit, code, found = 0;
	double fb = 0;

	o->mesh[0] = 1, o->mesh[1] = 1, o->mesh[2] = 4;
	snprintf(m, sizeof m, "%s: pp 4 planned", what);
	UNIT_OK(bench_plan(o, &r, &n, &nfit, &code, e, sizeof e) == 0, m);
	snprintf(m, sizeof m, "%s: GPipe's clocks on 2 cores, 18 passes for "
	    "16 of work", what);
	for (int i = 0; i < n; i++)
		if (r[i].sched == PIPE_SCHED_GPIPE && r[i].micro == 4 &&
		    r[i].cp == 1) {
			/* the compute: 4 micro-batches at half a core */
			fb = r[i].compute / 4 / 2;
			UNIT_CLOSE(r[i].bubble, fb, 1e-6, 0, m);
			found++;
		}
	snprintf(m, sizeof m, "%s: one GPipe row of m 4", what);
	UNIT_OK(found == 1 && fb > 0, m);
	free(r);
}

/* o's model made an mlp of dims (d_in, hidden, d_out, layers). */
static void
mlp_dims(struct bench_plan_opts *o, const char *dims)
{
	char e[COLLX_ERRLEN];

	o->dims.arch = NN_MLP;
	if (nn_dims_parse(dims, NN_MLP, &o->dims, e, sizeof e) < 0)
		printf("# %s\n", e);
}

/* Unequal stages on a crowded core: an mlp of 4 equal layers on pp 3
 * (pipe_split's 1, 2, 1 layers: loads 1/2, 1, 1/2 of the heaviest's fb,
 * 2 layers of two 64 x 64 linears on 16 samples), 3 ranks on 1 core,
 * GPipe m = 3, no communication or elementwise cost. The forward clocks
 * hold stages {0} {0,1} {0,1,2} {1,2} {2}, each as long as its active
 * work on the one core: 1/2 + 3/2 + 2 + 3/2 + 1/2 = 6 passes, the
 * backward's the same: 12 passes of fb / 2, 6 fb, the 3 stages' work
 * (3 micro-batches of 2 fb) over the core. Stages charged as heavy as
 * the heaviest would take 18 passes, 9 fb. */
static void
test_loads(void)
{
	struct bench_cost c;
	struct bench_plan_opts o;
	struct bench_plan_row *r;
	char e[COLLX_ERRLEN];
	int n, nfit, code, found = 0;
	double fb;

	cost_init(&c);
	c.cores = 1, c.elem_rate = 1e30;
	c.link[BENCH_SHM] = (struct bench_ab){ .alpha = 0, .beta = 1e30,
	    .points = 5 };
	plan_opts(&o, &c, 1, 3, "256,64,4,4,32", 48);
	mlp_dims(&o, "64,64,64,4");
	o.mesh[0] = 1, o.mesh[1] = 1, o.mesh[2] = 3;
	fb = 4 * bench_cost_linear(&c, 16, 64, 64);
	UNIT_OK(bench_plan(&o, &r, &n, &nfit, &code, e, sizeof e) == 0,
	    "loads: pp 3 planned");
	for (int i = 0; i < n; i++)
		if (r[i].sched == PIPE_SCHED_GPIPE && r[i].micro == 3) {
			UNIT_CLOSE(r[i].compute, 6 * fb, 1e-9, 0, "loads: "
			    "the stages' work over the core, 6 fb");
			UNIT_CLOSE(r[i].bubble, 0, 1e-12, 1e-15, "loads: "
			    "no bubble beyond it");
			found++;
		}
	UNIT_OK(found == 1, "loads: one GPipe row of m 3");
	free(r);
}

/* The optimizer priced on one rank of an mlp of 4 layers of 64 x 64
 * (33280 parameters: 4 (64 64 + 64 + 64 64 + 64)), matmuls free, 16
 * samples: the forward and backward's elementwise bytes 20 x 16 (4 x 64 +
 * 64) = 102400, and each parameter's optimizer step and zeroed
 * gradient: SGD 12 + 4 bytes (3 + 1 floats), AdamW 28 + 4 (7 + 1);
 * AdamW's two moments held, 8 bytes a parameter. */
static void
test_optimizer(void)
{
	struct bench_cost c;
	struct bench_plan_opts o;
	struct bench_plan_row r;
	double mem;

	cost_init(&c);
	c.mm[0].rate = c.mm[1].rate = 1e30;
	plan_opts(&o, &c, 1, 1, "256,64,4,4,32", 16);
	mlp_dims(&o, "64,64,64,4");
	o.mesh[0] = o.mesh[1] = o.mesh[2] = 1;
	UNIT_OK(pick(&o, 1, 1, 1, 1, 1, 0, 0, 0, 0, &r), "optimizer: SGD's row");
	UNIT_CLOSE(r.compute, (102400 + 16 * 33280) / c.elem_rate, 1e-9, 0,
	    "optimizer: SGD reads and writes 3 floats a parameter, zeroes 1");
	mem = r.mem;
	o.adamw = 1;
	UNIT_OK(pick(&o, 1, 1, 1, 1, 1, 0, 0, 0, 0, &r), "optimizer: AdamW's "
	    "row");
	UNIT_CLOSE(r.compute, (102400 + 32 * 33280) / c.elem_rate, 1e-9, 0,
	    "optimizer: AdamW reads and writes 7 floats a parameter, zeroes 1");
	UNIT_CLOSE(r.mem - mem, 8 * 33280, 1e-9, 0, "optimizer: AdamW's two "
	    "moments held, SGD's none");
}

/* dp 2 x tp 2 on 2 hosts of 2 ranks, compute free: each host holds one
 * rank of each TP rank's DP group, whose allreduces (the gradient of
 * half the gpt's p parameters, 2 p bytes) run at once over its link: the
 * sync is priced as the link carrying both, 4 p bytes; dp 4 x tp 1's one
 * group (2 ranks a host) as its own bytes. */
static void
test_shared_link(void)
{
	struct bench_cost c;
	struct bench_plan_opts o;
	struct bench_plan_row r;
	double p;

	cost_init(&c);
	c.mm[0].rate = c.mm[1].rate = c.attn_rate = c.elem_rate = 1e30;
	plan_opts(&o, &c, 2, 2, "256,64,4,4,32", 16);
	p = bench_plan_params(&o.dims);
	o.mesh[0] = 2, o.mesh[1] = 2, o.mesh[2] = 1;
	UNIT_OK(pick(&o, 2, 2, 1, 1, 1, 0, 0, 0, 0, &r), "shared link: dp 2 "
	    "tp 2");
	UNIT_CLOSE(r.dp_s, bench_cost_coll(&c, COLL_KIND_ALLREDUCE, COLL_AUTO,
	    BENCH_TCP, 2, 1, 2 * 2 * p), 1e-9, 0, "shared link: the 2 groups' "
	    "allreduces over one link");
	o.mesh[0] = 4, o.mesh[1] = 1;
	UNIT_OK(pick(&o, 4, 1, 1, 1, 1, 0, 0, 0, 0, &r), "shared link: dp 4");
	UNIT_CLOSE(r.dp_s, bench_cost_coll(&c, COLL_KIND_ALLREDUCE, COLL_HIER,
	    BENCH_TCP, 4, 2, 4 * p), 1e-9, 0, "shared link: one group, its "
	    "own bytes");
}

static void
test_sim(void)
{
	struct bench_cost c;
	struct bench_plan_opts o;

	cost_init(&c);
	c.cores = 2, c.elem_rate = 1e30;
	c.link[BENCH_SHM] = (struct bench_ab){ .alpha = 0, .beta = 1e30,
	    .points = 5 };
	plan_opts(&o, &c, 1, 4, "256,64,4,4,32", 16);
	mlp_dims(&o, "64,64,64,4");
	gpipe18(&o, "sim: one host");
}

/* The same GPipe on 2 hosts of 2 ranks that share one machine of 2
 * cores (machine_hosts 2, as bench-plan.sh's namespaces): the clocks
 * count the active stages of both hosts against the 2 cores, 18 passes
 * for 16 of work as on one host of 4. Split as a core a host (the
 * namespaces' old merge), stages 0-1 and 2-3 each on one core, the
 * clocks would take 2 (1 + 2 + 2 + 2 + 2 + 2 + 1) = 24 passes: a bubble
 * of 4 micro-batches' passes, not 1. And dp 4, every rank busy, at half
 * the fitted rate as on one host of 4 ranks: the machine's 4 ranks count,
 * not a host's 2. */
static void
test_machine(void)
{
	struct bench_cost c;
	struct bench_plan_opts o;
	struct bench_plan_row dp4;
	double one;

	cost_init(&c);
	c.cores = 2, c.elem_rate = 1e30, c.machine_hosts = 2;
	c.link[BENCH_SHM] = c.link[BENCH_TCP] = (struct bench_ab){ .alpha = 0,
	    .beta = 1e30, .points = 5 };
	plan_opts(&o, &c, 2, 2, "256,64,4,4,32", 16);
	mlp_dims(&o, "64,64,64,4");
	gpipe18(&o, "machine: 2 hosts of one machine");
	o.mesh[0] = 4, o.mesh[2] = 1;
	UNIT_OK(pick(&o, 4, 1, 1, 1, 1, 0, 0, 0, 0, &dp4), "machine: dp 4");
	one = dp4.compute;
	c.machine_hosts = 1, c.cores = 4;	/* 2 hosts of 2 cores each */
	UNIT_OK(pick(&o, 4, 1, 1, 1, 1, 0, 0, 0, 0, &dp4), "machine: dp 4, "
	    "hosts of their own");
	UNIT_CLOSE(one, 2 * dp4.compute, 1e-9, 0, "machine: 4 busy ranks on "
	    "the machine's 2 cores take twice a core a rank");
}

/* The pipeline's messages on its path, pp 4 of a gpt (d 64, S 32, vocab
 * 256), m = 4 micro-batches of 4 samples: an activation or gradient of
 * 4 x 32 x 64 floats, 32768 bytes, 3.2768 us over shm (10 GB/s) and
 * 26.2144 us over tcp (1.25 GB/s); the tied embedding's gradient 256 x
 * 64 floats, 52.4288 us over tcp. Each boundary twice (warm-up, drain),
 * the tied sum once between the first and last stage. 2 hosts of 2: shm,
 * tcp, shm and the tied sum across. 4 hosts of 1: every boundary tcp.
 * With compute near free, the tcp link paces the other 3 micro-batches,
 * each adding a message less its pass. */
static void
test_pipe_msgs(void)
{
	struct bench_cost c;
	struct bench_plan_opts o;
	struct bench_plan_row r;
	double shm = 32768 / 10e9, tcp = 32768 / 1.25e9, tied = 65536 / 1.25e9;

	cost_flat(&c, 8);
	plan_opts(&o, &c, 2, 2, "256,64,4,4,32", 16);
	o.mesh[0] = 1, o.mesh[1] = 1, o.mesh[2] = 4;
	UNIT_OK(pick(&o, 1, 1, 4, 1, 1, 0, 0, 0, 0, &r), "pp msgs: 2 hosts");
	UNIT_CLOSE(r.pp_s, 2 * (2 * shm + tcp) + tied, 1e-9, 0,
	    "pp msgs: 2 hosts of 2, one boundary and the tied sum on tcp");
	plan_opts(&o, &c, 4, 1, "256,64,4,4,32", 16);
	o.mesh[0] = 1, o.mesh[1] = 1, o.mesh[2] = 4;
	UNIT_OK(pick(&o, 1, 1, 4, 1, 1, 0, 0, 0, 0, &r), "pp msgs: 4 hosts");
	UNIT_CLOSE(r.pp_s, 2 * 3 * tcp + tied, 1e-9, 0,
	    "pp msgs: 4 hosts of 1, every boundary on tcp");
	c.mm[0].rate = c.mm[1].rate = c.attn_rate = 1e18;
	c.elem_rate = 1e30;
	UNIT_OK(pick(&o, 1, 1, 4, 1, 1, 0, 0, 0, 0, &r), "pp msgs: fast");
	UNIT_CLOSE(r.pp_s, 2 * 3 * tcp + 3 * (tcp - r.compute / 4) + tied,
	    1e-9, 0, "pp msgs: the tcp link paces the steady state");
}

/* ZeRO 3 on dp 4 (4 layers of a layer's gradient g1 each): a gather
 * before each forward and each backward, a reduce-scatter after each
 * backward. With a spare core (8 cores, 4 ranks) and layers far longer
 * than their gathers only the first gather of each pass and the last
 * reduce-scatter show: 2 ag + rs; with none (2 cores) all of them,
 * 4 (2 ag + rs). HSDP on 2 hosts x 2: the gathers within the host's 2,
 * each layer's half shard allreduced across the 2 hosts. */
static void
test_zero3(void)
{
	struct bench_cost c;
	struct bench_plan_opts o;
	struct bench_plan_row r;
	double g1, f, ag, rs, ar;

	cost_flat(&c, 8);
	plan_opts(&o, &c, 1, 4, "256,64,4,4,32", 1024);
	g1 = bench_plan_params(&o.dims) * 4 / 4;	/* a layer's, about */
	f = 3.0 / 4;
	ag = f * g1 / 10e9;
	rs = f * g1 / 10e9 + f * g1 / 8e9;
	UNIT_OK(pick(&o, 4, 1, 1, 1, 1, 3, 0, 0, 0, &r), "zero 3: a dp 4 row");
	UNIT_CLOSE(r.dp_s, 2 * ag + rs, 1e-9, 0, "zero 3, a spare core: the "
	    "first gathers and the last reduce-scatter exposed");
	UNIT_CLOSE(r.bytes_dp, 4 * 3 * f * g1, 1e-9, 0, "zero 3: 3 collectives "
	    "a layer, 3/4 of its gradient each");
	cost_flat(&c, 2);
	UNIT_OK(pick(&o, 4, 1, 1, 1, 1, 3, 0, 0, 0, &r), "zero 3: 2 cores");
	UNIT_CLOSE(r.dp_s, 4 * (2 * ag + rs), 1e-9, 0, "zero 3, no spare "
	    "core: every gather and reduce-scatter exposed");
	plan_opts(&o, &c, 2, 2, "256,64,4,4,32", 1024);
	UNIT_OK(pick(&o, 4, 1, 1, 1, 1, 3, 0, 1, 0, &r), "hsdp: a dp 4 row on "
	    "2 hosts x 2");
	ag = 0.5 * g1 / 10e9;
	rs = 0.5 * g1 / 10e9 + 0.5 * g1 / 8e9;
	ar = bench_cost_coll(&c, COLL_KIND_ALLREDUCE, COLL_AUTO, BENCH_TCP, 2,
	    1, g1 / 2);
	UNIT_CLOSE(r.dp_s, 4 * (2 * ag + rs + ar), 1e-9, 0, "hsdp: gathers "
	    "in the host, the half shard allreduced across");
}

/* cp 4 on a 4-rank host without a spare core: each of the 4 layers'
 * K and V (2 t d floats, t = b s / 4 tokens) pass 3 ring steps forward,
 * K, V and their gradients 3 backward, none hidden; ring's last rank
 * attends 3.5 blocks where zigzag's ranks attend 2: the attention of
 * the whole sequence / 4 times (1 - 1/4) more compute. */
static void
test_cp(void)
{
	struct bench_cost c;
	struct bench_plan_opts o;
	struct bench_plan_row ring, zz;
	double b = 8, S = 32, D = 64, t = b * S / 4, kv = 2 * t * D * 4, A;

	cost_init(&c);
	c.cores = 2;
	plan_opts(&o, &c, 1, 4, "256,64,4,4,32", 8);
	UNIT_OK(pick(&o, 1, 1, 1, 4, 1, 0, 0, 0, 0, &ring) &&
	    pick(&o, 1, 1, 1, 4, 1, 0, 1, 0, 0, &zz), "cp 4: ring and zigzag");
	UNIT_CLOSE(ring.cp_s, 4 * 3 * (2e-6 + kv / 10e9 + 2e-6 + 2 * kv /
	    10e9), 1e-9, 0, "cp: 3 steps of K, V forward, of K, V and their "
	    "gradients backward, a layer");
	UNIT_CLOSE(ring.bytes_cp, 4 * 3 * 3 * kv, 1e-12, 0, "cp: bytes sent");
	UNIT_CLOSE(zz.cp_s, ring.cp_s, 1e-12, 0, "cp: zigzag sends as ring");
	/* 4 ranks on 2 cores: each computes at half the fitted rate */
	A = 12 * b * 4 * S * S * 16 / 10e9 * 2;
	UNIT_CLOSE(ring.compute - zz.compute, 4 * A / 4 * (1 - 1.0 / 4), 1e-9,
	    0, "cp: ring's causal imbalance, 2 - 1/C of zigzag's attention");
}

/* ep 2 of dp 2 with 4 experts, top-2, on every one of 4 layers: per
 * MoE layer four alltoallv of the t K d floats a rank routes, half
 * leaving; by allgather, the group's t d floats gathered and reduce-
 * scattered twice; the experts' weights (and their Adam state) half. */
static void
test_ep(void)
{
	struct bench_cost c;
	struct bench_plan_opts o;
	struct bench_plan_row a1, a2, g2;
	struct nn_dims d = { 0 };
	struct tensor_set s;
	struct nn_model m;
	char e[COLLX_ERRLEN];
	double t = 16.0 * 32, K = 2, Dm = 64, a2a, all;
	int bad;

	cost_flat(&c, 2);
	plan_opts(&o, &c, 1, 2, "256,64,4,4,32", 32);
	o.adamw = 1;		/* the experts' moments too */
	o.dims.moe.experts = 4, o.dims.moe.topk = 2, o.dims.moe_every = 1;
	UNIT_OK(pick(&o, 2, 1, 1, 1, 1, 0, 0, 0, 0, &a1) &&
	    pick(&o, 2, 1, 1, 1, 2, 0, 0, 0, 0, &a2) &&
	    pick(&o, 2, 1, 1, 1, 2, 0, 0, 0, 1, &g2), "ep: dp 2 without, with "
	    "ep 2 by alltoallv and by allgather");
	a2a = 0.5 * t * K * Dm * 4 / 10e9;
	UNIT_CLOSE(a2.ep_s, 4 * 4 * a2a, 1e-9, 0, "ep: four alltoallv a MoE "
	    "layer");
	all = 2 * t * Dm * 4;
	UNIT_CLOSE(g2.ep_s, 4 * 2 * (0.5 * all / 10e9 + 0.5 * all / 10e9 +
	    0.5 * all / 8e9), 1e-9, 0, "ep: allgather dispatch, gather and "
	    "reduce-scatter twice");
	UNIT_OK(a1.ep_s == 0, "ep 1: no dispatch");
	UNIT_CLOSE(a1.mem - a2.mem, bench_plan_expert_params(&o.dims) * 4 *
	    4 / 2, 1e-9, 0, "ep: half the experts' weights, gradients and "
	    "moments");
	d = o.dims;
	bad = nn_init(&s, &d, 1, e, sizeof e) < 0 || nn_model_load(&m, &s, e,
	    sizeof e) < 0;
	UNIT_OK(!bad && bench_plan_params(&d) == (double)m.nparams &&
	    bench_plan_expert_params(&d) == 4.0 * 4 * (2 * 64 * 256 + 256 +
	    64), "parameter count of a gpt with experts: as nn_init makes it");
	if (!bad) {
		nn_model_free(&m);
		tensor_set_free(&s);
	}
}

static void
test_file(void)
{
	struct bench_cost c, back;
	char e[COLLX_ERRLEN], dir[] = "/tmp/test_bench_plan.XXXXXX", p[128];
	FILE *f;
	int ok = 1;

	cost_init(&c);
	c.coll[BENCH_TCP][COLL_KIND_ALLREDUCE][COLL_RING] =
	    (struct bench_ab){ .alpha = 30e-6, .beta = 1.5e9, .points = 6,
	    .nt = 2, .tb = { 4096, 65536 }, .tt = { 50e-6, 300e-6 },
	    .ranks = 2, .hosts = 2 };
	if (mkdtemp(dir) == NULL)
		return;
	snprintf(p, sizeof p, "%s/c.json", dir);
	UNIT_OK(bench_cost_write(&c, p, e, sizeof e) == 0 &&
	    bench_cost_read(&back, p, e, sizeof e) == 0, "cost file: written, "
	    "read back");
	ok &= back.version == 1 && back.world == 4 && back.cores == 8;
	ok &= fabs(back.link[BENCH_TCP].alpha - 20e-6) < 1e-12;
	ok &= fabs(back.coll[BENCH_TCP][COLL_KIND_ALLREDUCE][COLL_RING].beta -
	    1.5e9) < 1;
	ok &= back.coll[BENCH_TCP][COLL_KIND_ALLREDUCE][COLL_RING].nt == 2 &&
	    back.coll[BENCH_TCP][COLL_KIND_ALLREDUCE][COLL_RING].tb[1] ==
	    65536 && fabs(back.coll[BENCH_TCP][COLL_KIND_ALLREDUCE][COLL_RING].
	    tt[1] - 300e-6) < 1e-12 && back.coll[BENCH_SHM][COLL_KIND_ALLREDUCE]
	    [COLL_RING].nt == 0;
	ok &= back.coll[BENCH_TCP][COLL_KIND_ALLREDUCE][COLL_RING].ranks == 2 &&
	    back.coll[BENCH_TCP][COLL_KIND_ALLREDUCE][COLL_RING].hosts == 2 &&
	    back.link[BENCH_TCP].ranks == 0;
	ok &= back.nmm == 2 && fabs(back.mm[1].rate - 80e9) < 1 &&
	    fabs(back.gamma - 8e9) < 1 && strcmp(back.dims, c.dims) == 0;
	ok &= back.machine_hosts == 1;
	UNIT_OK(ok, "cost file: every value as written");
	c.machine_hosts = 3;
	UNIT_OK(bench_cost_write(&c, p, e, sizeof e) == 0 &&
	    bench_cost_read(&back, p, e, sizeof e) == 0 &&
	    back.machine_hosts == 3, "cost file: machine_hosts read back");
	f = fopen(p, "w");
	fprintf(f, "{ \"version\": 2, \"world\": 4 }\n");
	fclose(f);
	UNIT_OK(bench_cost_read(&back, p, e, sizeof e) < 0 &&
	    strstr(e, "version 2") != NULL,
	    "cost file: another version refused");
	f = fopen(p, "w");
	fprintf(f, "{ \"version\": 1, \"world\": 4, \"hosts\": 1, \"cores\": 2,"
	    " \"reduce_gbps\": 3, \"links\": { \"tcp\": { \"alpha_us\": 1, "
	    "\"gbps\": 1 } }, \"compute\": { \"matmul\": [ { \"mflop\": 1, "
	    "\"gflops\": 2 } ], \"elementwise_gbps\": 1 } }\n");
	fclose(f);
	UNIT_OK(bench_cost_read(&back, p, e, sizeof e) < 0 &&
	    strstr(e, "missing field compute.attention_gflops") != NULL,
	    "cost file: a missing field named");
	unit_rmdir(dir);
}

int
main(void)
{
	test_line();
	test_closed_forms();
	test_sweep();
	test_steps();
	test_bubble();
	test_params_memory();
	test_sim();
	test_loads();
	test_optimizer();
	test_shared_link();
	test_machine();
	test_pipe_msgs();
	test_zero3();
	test_cp();
	test_ep();
	test_file();
	return unit_done();
}
