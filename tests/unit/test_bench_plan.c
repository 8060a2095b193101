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
	/* hierarchical: reduce-scatter in the host, allreduce across, then
	 * allgather in the host; with auto's choices on each */
	got = bench_cost_coll(&c, COLL_KIND_ALLREDUCE, COLL_HIER, BENCH_TCP,
	    8192, 8, n);
	want = bench_cost_coll(&c, COLL_KIND_REDUCE_SCATTER, COLL_AUTO,
	    BENCH_SHM, 8, 8, n) + bench_cost_coll(&c, COLL_KIND_ALLREDUCE,
	    COLL_AUTO, BENCH_TCP, 1024, 1, n / 8) + bench_cost_coll(&c,
	    COLL_KIND_ALLGATHER, COLL_AUTO, BENCH_SHM, 8, 8, n);
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
 * other worlds and past its end by the closed form's ratio. */
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
	UNIT_CLOSE(bench_cost_coll(&c, COLL_KIND_ALLREDUCE, COLL_RING,
	    BENCH_SHM, 16, 16, 2e6), t2 * ring_shm(16, 2e6) / ring_shm(4, 2e6),
	    1e-9, 0, "sweep: 16 ranks, the closed form's ratio to 4");
	UNIT_CLOSE(bench_cost_coll(&c, COLL_KIND_ALLREDUCE, COLL_RING,
	    BENCH_SHM, 4, 4, 64e6), 800e-6 * ring_shm(4, 64e6) / ring_shm(4,
	    4e6), 1e-9, 0, "sweep: past its end, grown as the closed form");
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
		ok &= seen[k / 3][k % 3] == 3;
	UNIT_OK(ok && n == 18, "bubble (P-1)/(m+P-1) for m 64, 128, 256, "
	    "GPipe and 1F1B, ZeRO 0-2");
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
	double z[3] = { 0 };
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
	o.mesh[0] = 4, o.mesh[1] = 1, o.mesh[2] = 1;
	UNIT_OK(bench_plan(&o, &r, &n, &nfit, &code, e, sizeof e) == 0 &&
	    n == 3, "dp 4: ZeRO 0, 1 and 2");
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
	o.mem = 1000;
	UNIT_OK(bench_plan(&o, &r, &n, &nfit, &code, e, sizeof e) < 0 &&
	    code == 3 && strstr(e, "--mem-per-rank 1000") != NULL,
	    "no mesh in 1000 bytes: exit 3 naming the smallest's need");
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
	    .nt = 2, .tb = { 4096, 65536 }, .tt = { 50e-6, 300e-6 } };
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
	ok &= back.nmm == 2 && fabs(back.mm[1].rate - 80e9) < 1 &&
	    fabs(back.gamma - 8e9) < 1 && strcmp(back.dims, c.dims) == 0;
	UNIT_OK(ok, "cost file: every value as written");
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
	test_bubble();
	test_params_memory();
	test_file();
	return unit_done();
}
