/* bench_opts: collx-bench's command line, its defaults and refusals
 * (bench_opts.h). */
#include <stdlib.h>
#include <string.h>

#include "bench/bench_opts.h"
#include "nn/nn.h"

void
bench_opts_init(struct bench_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->sizes.factor = 2;
	o->algos = "auto";
	o->coll.kind = COLL_KIND_ALLREDUCE;
	o->coll.op = COLL_SUM;
	o->coll.dt = DT_F32;
	o->coll.iters = o->p2p.iters = 20;
	o->coll.warmup = o->p2p.warmup = 5;
	o->p2p.b = 1;
	o->p2p.window = 64;
	o->dpo = (struct dp_opts)DP_OPTS_DEFAULTS;
	o->dp.max_world = 2;
	o->dp.syncs = "ring,tree,rabenseifner,ps";
	o->dp.arch = "gpt";
	o->dp.dims = "256,64,2,4,32";
	o->dp.batch = 8;
	o->dp.steps = 12;
	o->dp.rounds = 3;
}

static int
parse_pair(struct bench_opts *o, const char *s, char *err, size_t errlen)
{
	long v[2];
	int n;

	if ((n = cli_list_value("--pair", s, v, 2, err, errlen)) < 0)
		return -1;
	if (n != 2 || v[0] == v[1] || v[0] < 0 || v[1] < 0)
		return cli_fail(err, errlen, "--pair: want two different ranks "
		    "A,B, not '%s'", s);
	o->p2p.a = (int)v[0];
	o->p2p.b = (int)v[1];
	return 1;
}

static int
parse_test(struct bench_opts *o, const char *s, char *err, size_t errlen)
{
	if (strcmp(s, "latency") == 0)
		o->p2p.test = BENCH_LATENCY;
	else if (strcmp(s, "bw") == 0)
		o->p2p.test = BENCH_BW;
	else if (strcmp(s, "bibw") == 0)
		o->p2p.test = BENCH_BIBW;
	else
		return cli_fail(err, errlen, "--test: want latency, bw or bibw, "
		    "not '%s'", s);
	return 1;
}

/* The sizes' options of coll, p2p and fit; 0 when c was none of them. */
static int
size_option(struct bench_opts *o, int c, const char *a, char *err,
    size_t errlen)
{
	struct bench_sizes *z = &o->sizes;

	switch (c) {
	case 'b':
		o->have_b = 1;
		return cli_taken(cli_size_arg("-b", a, &z->min, err, errlen));
	case 'e':
		o->have_e = 1;
		return cli_taken(cli_size_arg("-e", a, &z->max, err, errlen));
	case 'f':
		z->step = 0;
		return cli_taken(cli_double_value("-f", a, 1.0001, 1e6, &z->factor,
		    err, errlen));
	case 'i':
		if (cli_size_arg("-i", a, &z->step, err, errlen) < 0)
			return -1;
		if (z->step == 0)
			return cli_fail(err, errlen, "-i: the step must be "
			    "positive");
		return 1;
	}
	return 0;
}

/* The options of coll and p2p; 0 when c was none of them. */
static int
meas_option(struct bench_opts *o, int c, const char *a, char *err,
    size_t errlen)
{
	struct bench_coll *k = &o->coll;
	int r;

	switch (c) {
	case 'n':
		o->have_n = 1;
		r = cli_int_value("-n", a, 1, 10000000, &k->iters, err, errlen);
		o->p2p.iters = k->iters;
		return cli_taken(r);
	case 'w':
		o->have_w = 1;
		r = cli_int_value("-w", a, 0, 1000000, &k->warmup, err, errlen);
		o->p2p.warmup = k->warmup;
		return cli_taken(r);
	case BENCH_OPT_OP:
		if (bench_kind_parse(a, &k->kind) < 0)
			return cli_fail(err, errlen, "--op: want allreduce, "
			    "broadcast, allgather, reduce-scatter, alltoall or "
			    "alltoallv, not '%s'", a);
		break;
	case BENCH_OPT_ALGO: o->algos = a; break;
	case BENCH_OPT_DTYPE:
		if (dtype_parse(a, &k->dt) < 0)
			return cli_fail(err, errlen, "--dtype: unknown type '%s'",
			    a);
		break;
	case BENCH_OPT_REDOP:
		if (coll_op_parse(a, &k->op) < 0)
			return cli_fail(err, errlen, "--redop: want sum, prod, "
			    "min, max or avg, not '%s'", a);
		break;
	case BENCH_OPT_ROOT:
		return cli_taken(cli_int_value("--root", a, 0, 1 << 20, &k->root,
		    err, errlen));
	case BENCH_OPT_SECONDS:
		return cli_taken(cli_double_value("--seconds", a, 1e-6, 1e6,
		    &k->seconds, err, errlen));
	case BENCH_OPT_CHECK: k->check = 1; break;
	case BENCH_OPT_SKEW:
		if (strncmp(a, "zipf:", 5) != 0)
			return cli_fail(err, errlen, "--skew: want zipf:S, not "
			    "'%s'", a);
		o->have_skew = 1;
		return cli_taken(cli_double_value("--skew", a + 5, 0, 100, &k->skew,
		    err, errlen));
	case BENCH_OPT_TEST: return parse_test(o, a, err, errlen);
	case BENCH_OPT_PAIR: return parse_pair(o, a, err, errlen);
	case BENCH_OPT_ALL: o->p2p.a = -1; break;
	case BENCH_OPT_WINDOW:
		return cli_taken(cli_int_value("--window", a, 1, 100000,
		    &o->p2p.window, err, errlen));
	default: return size_option(o, c, a, err, errlen);
	}
	return 1;
}

/* The options of dp, mesh and fit; 0 when c was none of them. */
static int
dp_option(struct bench_opts *o, int c, const char *a, char *err,
    size_t errlen)
{
	struct bench_dp *d = &o->dp;

	switch (c) {
	case 'N':
		o->have_world = 1;
		return cli_taken(cli_int_value("-N", a, 1, 1024, &d->max_world, err,
		    errlen));
	case 'H': d->host_list = a; break;
	case BENCH_OPT_SSH: d->ssh = a; break;
	case BENCH_OPT_SYNC: d->syncs = a; o->have_sync = 1; break;
	case BENCH_OPT_ARCH: d->arch = a; break;
	case BENCH_OPT_DIMS: d->dims = a; break;
	/* mesh's gpt and plan's (collx-dp --init's experts) */
	case BENCH_OPT_EXPERTS:
		return cli_taken(cli_int_value("--experts", a, 1, 1 << 16,
		    &d->experts, err, errlen));
	case BENCH_OPT_BATCH:
		o->have_batch = 1;
		return cli_taken(cli_long_value("--batch", a, 1, 1 << 24, &d->batch,
		    err, errlen));
	case BENCH_OPT_STEPS:
		return cli_taken(cli_long_value("--steps", a, 2, 1 << 24, &d->steps,
		    err, errlen));
	case BENCH_OPT_REPEAT:
		o->have_repeat = 1;
		return cli_taken(cli_int_value("--repeat", a, 1, 100, &d->rounds,
		    err, errlen));
	case BENCH_OPT_ZERO: d->zeros = a; break;
	default: return 0;
	}
	return 1;
}

static int
parse_mesh(struct bench_opts *o, const char *a, char *err, size_t errlen)
{
	long v[3];
	int n;

	if ((n = cli_list_value("--mesh", a, v, 3, err, errlen)) < 0)
		return -1;
	if (n != 3 || v[0] < 1 || v[1] < 1 || v[2] < 1 || v[0] > 1 << 20 ||
	    v[1] > 1 << 20 || v[2] > 1 << 20)
		return cli_fail(err, errlen, "--mesh: want D,T,P, three "
		    "positive counts, not '%s'", a);
	for (int i = 0; i < 3; i++)
		o->plan.mesh[i] = (int)v[i];
	return 1;
}

/* fit's and plan's options; 0 when c was none of them. */
static int
plan_option(struct bench_opts *o, int c, const char *a, char *err,
    size_t errlen)
{
	struct nn_dims *d = &o->plan.dims;
	size_t mem;

	switch (c) {
	case 'o': o->out = a; break;
	case BENCH_OPT_COST: o->cost = a; break;
	case BENCH_OPT_RPH:
		return cli_taken(cli_int_value("--ranks-per-host", a, 1, 4096,
		    &o->per_host, err, errlen));
	case BENCH_OPT_TOP:
		return cli_taken(cli_int_value("--top", a, 1, 1 << 20, &o->top, err,
		    errlen));
	case BENCH_OPT_MEM:
		if (cli_size_arg("--mem-per-rank", a, &mem, err, errlen) < 0)
			return -1;
		o->plan.mem = (double)mem;
		break;
	case BENCH_OPT_VALIDATE: o->validate = 1; break;
	case BENCH_OPT_TOPK:
		return cli_taken(cli_int_value("--topk", a, 1, 1 << 16,
		    &d->moe.topk, err, errlen));
	case BENCH_OPT_CAPACITY:
		return cli_taken(cli_double_value("--capacity", a, 0, 1e6,
		    &d->moe.capacity, err, errlen));
	case BENCH_OPT_MOE_EVERY:
		return cli_taken(cli_int_value("--moe-every", a, 1, 1 << 20,
		    &d->moe_every, err, errlen));
	case BENCH_OPT_MESH: return parse_mesh(o, a, err, errlen);
	case BENCH_OPT_OPTIMIZER: {
		enum nn_optim_kind k;

		if (nn_optim_parse(a, &k) < 0)
			return cli_fail(err, errlen, "--optimizer: want sgd or "
			    "adamw, not '%s'", a);
		o->plan.adamw = k == NN_ADAMW;
		o->have_optim = 1;
		o->dp.optimizer = a;	/* the runs' too (dp, mesh, --validate) */
		break;
	}
	default: return 0;
	}
	return 1;
}

int
bench_opts_option(struct bench_opts *o, int c, const char *a, char *err,
    size_t errlen)
{
	int r;

	if ((r = meas_option(o, c, a, err, errlen)) != 0 ||
	    (r = plan_option(o, c, a, err, errlen)) != 0 ||
	    (r = dp_option(o, c, a, err, errlen)) != 0)
		return r;
	switch (c) {
	case BENCH_OPT_CSV: o->csv = 1; break;
	case BENCH_OPT_TABLE: o->csv = -1; break;
	case CLI_OPT_TIMING: o->timing = a; break;
	default: return 0;
	}
	return 1;
}

int
bench_opts_export(struct bench_opts *o, const char *fmt, const char *dir,
    char *err, size_t errlen)
{
	if (strcmp(fmt, "astra-sim") != 0)
		return cli_fail(err, errlen, "--export: want astra-sim, not "
		    "'%s'", fmt);
	if (dir == NULL)
		return cli_fail(err, errlen, "--export astra-sim: missing DIR");
	o->export_fmt = fmt;
	o->export_dir = dir;
	return 0;
}

int
bench_opts_sub(struct bench_opts *o, int n, char *const *operands,
    char *err, size_t errlen)
{
	const char *s;

	if (n < 1)
		return cli_fail(err, errlen, "missing subcommand: coll, p2p, dp, "
		    "mesh, fit or plan");
	o->sub = s = operands[0];
	if (strcmp(s, "coll") && strcmp(s, "p2p") && strcmp(s, "dp") &&
	    strcmp(s, "mesh") && strcmp(s, "fit") && strcmp(s, "plan"))
		return cli_fail(err, errlen, "unknown subcommand '%s': want "
		    "coll, p2p, dp, mesh, fit or plan", s);
	if (n > 1)
		return cli_fail(err, errlen, "unexpected argument '%s'",
		    operands[1]);
	return 0;
}

/* dp's model: an arch bench_dp makes data for, with dims that fit it. */
static int
check_model(const struct bench_opts *o, char *err, size_t errlen)
{
	enum nn_arch arch;
	struct nn_dims d;
	char e[COLLX_ERRLEN];

	if ((strcmp(o->dp.arch, "gpt") && strcmp(o->dp.arch, "mlp")) ||
	    nn_arch_parse(o->dp.arch, &arch) < 0)
		return cli_fail(err, errlen, "--arch: want gpt or mlp, not '%s'",
		    o->dp.arch);
	if (nn_dims_parse(o->dp.dims, arch, &d, e, sizeof e) < 0) {
		if (strstr(e, "--dims") != NULL)
			return cli_fail(err, errlen, "%s", e);
		return cli_fail(err, errlen, "--dims %s: %s", o->dp.dims, e);
	}
	return 0;
}

/* --wire as collx-dp takes it with each --sync method. */
static int
check_wire(const struct bench_opts *o, char *err, size_t errlen)
{
	enum dp_wire_type t;
	const char *s = o->dp.syncs, *e;

	if (o->dp.wire == NULL)
		return 0;
	if (dp_wire_parse(o->dp.wire, &t) < 0)
		return cli_fail(err, errlen, "--wire: want f32, bf16, f16 or "
		    "int8, not '%s'", o->dp.wire);
	for (; t != DP_WIRE_F32 && *s != '\0'; s = *e ? e + 1 : e) {
		size_t n = strcspn(s, ",");

		e = s + n;
		if (n == 2 && strncmp(s, "ps", 2) == 0)
			return cli_fail(err, errlen, "--wire %s goes with "
			    "allreduce, not --sync ps", o->dp.wire);
		if (t == DP_WIRE_INT8 && (n != 4 || strncmp(s, "auto", 4) != 0))
			return cli_fail(err, errlen, "--wire int8 goes with "
			    "--sync auto only, not --sync %.*s", (int)n, s);
	}
	return 0;
}

/* --zero's stages, each 0 to 3 and with allreduce only, as collx-dp
 * takes them. */
static int
check_zero(const struct bench_opts *o, char *err, size_t errlen)
{
	const char *s = o->dp.zeros, *e;

	for (; s != NULL && *s != '\0'; s = *e ? e + 1 : e) {
		size_t n = strcspn(s, ",");

		e = s + n;
		if (n != 1 || *s < '0' || *s > '3')
			return cli_fail(err, errlen, "--zero: want stages 0 to 3, "
			    "not '%.*s'", (int)n, s);
		if (*s != '0' && (o->dp.powersgd || o->dp.sync_every ||
		    strstr(o->dp.syncs, "ps") != NULL))
			return cli_fail(err, errlen, "--zero %c goes with "
			    "allreduce, without PowerSGD and local SGD", *s);
	}
	return 0;
}

/* Local SGD's and PowerSGD's options as collx-dp takes them. */
static int
check_local(struct bench_opts *o, char *err, size_t errlen)
{
	const char *s = o->dp.syncs, *e, *what;
	int local = o->dpo.sync_every > 0;

	if (o->sync_check(&o->dpo, err, errlen) < 0)
		return -1;
	what = local ? "--sync-every" : "--powersgd";
	for (; (local || o->dp.powersgd) && *s != '\0'; s = *e ? e + 1 : e) {
		size_t n = strcspn(s, ",");

		e = s + n;
		if (n == 2 && strncmp(s, "ps", 2) == 0)
			return cli_fail(err, errlen, "%s goes with allreduce, not "
			    "--sync ps", what);
	}
	return 0;
}

/* mesh's hosts: a list collx-run takes, whose ranks are the world (-N,
 * when given, must agree). */
static int
check_hosts(struct bench_opts *o, char *err, size_t errlen)
{
	char e[COLLX_ERRLEN];
	int hosts, slots;

	if (o->dp.host_list == NULL) {
		if (o->dp.ssh != NULL)
			return cli_fail(err, errlen, "--ssh needs hosts (-H)");
		return 0;
	}
	if (o->host_slots(o->dp.host_list, &hosts, &slots, e, sizeof e) < 0)
		return cli_fail(err, errlen, "-H: %s", e);
	o->dp.hosts = hosts;
	if (o->have_world && o->dp.max_world != slots)
		return cli_fail(err, errlen, "-N %d: the hosts %s hold %d ranks",
		    o->dp.max_world, o->dp.host_list, slots);
	if (slots > 1024)
		return cli_fail(err, errlen, "-H %s: %d ranks, more than 1024",
		    o->dp.host_list, slots);
	o->dp.max_world = slots;
	return 0;
}

/* The subcommands that start their own ranks: -n (coll's and p2p's
 * iterations) is the world mistyped, and a launcher's ranks would each
 * start a whole planner. */
static int
check_self_launched(const struct bench_opts *o, char *err, size_t errlen)
{
	static const char *const vars[][2] = {
		{ "COLLX_RANK", "COLLX_WORLD_SIZE" }, { "RANK", "WORLD_SIZE" },
		{ "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE" },
		{ "PMI_RANK", "PMI_SIZE" },
		/* a step's tasks, not a batch script's allocation */
		{ "SLURM_PROCID", "SLURM_STEP_NUM_TASKS" }
	};
	const char *r, *w;

	if (o->have_n)
		return cli_fail(err, errlen, "%s: -n is coll's and p2p's "
		    "iterations; %s starts its own ranks, -N WORLD (now %d) "
		    "says how many", o->sub, o->sub, o->dp.max_world);
	for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
		if ((r = getenv(vars[i][0])) != NULL && *r &&
		    (w = getenv(vars[i][1])) != NULL && atol(w) > 1)
			return cli_fail(err, errlen, "%s starts its own ranks; "
			    "run it once, not as rank %s of %s under a launcher "
			    "(%s is set): use -N or -H for its world", o->sub, r,
			    w, vars[i][1]);
	return 0;
}

static int
fit_defaults(struct bench_opts *o, char *err, size_t errlen)
{
	if (check_model(o, err, errlen) < 0 || check_hosts(o, err, errlen) < 0)
		return -1;
	if (o->dp.max_world < 2)
		return cli_fail(err, errlen, "fit: a world of %d has no links to "
		    "measure: -N 2 or more", o->dp.max_world);
	if (o->out == NULL)
		return cli_fail(err, errlen, "fit: -o COST.json is required");
	o->dp.fit_out = o->out;
	o->dp.fit_min = o->have_b ? bench_size_str(o->sizes.min, o->fit_lo,
	    sizeof o->fit_lo) : "4K";
	o->dp.fit_max = o->have_e ? bench_size_str(o->sizes.max, o->fit_hi,
	    sizeof o->fit_hi) : "64M";
	return 0;
}

/* plan's model: --dims of --arch, --experts and their routing. */
static int
plan_model(struct bench_opts *o, char *err, size_t errlen)
{
	char e[COLLX_ERRLEN];
	struct nn_moe_cfg moe = o->plan.dims.moe;
	int every = o->plan.dims.moe_every;

	moe.experts = o->dp.experts;
	if (nn_arch_parse(o->dp.arch, &o->plan.dims.arch) < 0 ||
	    nn_dims_parse(o->dp.dims, o->plan.dims.arch, &o->plan.dims, e,
	    sizeof e) < 0)
		return cli_fail(err, errlen, "--dims %s: %s", o->dp.dims, e);
	o->plan.dims.moe = moe;
	o->plan.dims.moe_every = every ? every : moe.experts > 0;
	if (moe.experts > 0 && moe.topk == 0)
		o->plan.dims.moe.topk = 1;
	if ((moe.experts == 0 && (moe.topk || moe.capacity > 0 || every)) ||
	    nn_moe_valid(&o->plan.dims, e, sizeof e) < 0)
		return cli_fail(err, errlen, "plan: %s", moe.experts == 0 ?
		    "--topk, --capacity and --moe-every go with --experts" : e);
	return 0;
}

static int
plan_defaults(struct bench_opts *o, char *err, size_t errlen)
{
	long w;

	if (o->cost == NULL)
		return cli_fail(err, errlen, "plan: --cost COST.json is required "
		    "(collx-bench fit writes it)");
	if (o->dp.host_list == NULL)
		return cli_fail(err, errlen, "plan: --hosts N is required");
	if (o->dp.ssh != NULL)
		return cli_fail(err, errlen, "plan: --ssh goes with mesh and "
		    "fit");
	if (check_model(o, err, errlen) < 0 || plan_model(o, err, errlen) < 0 ||
	    cli_int_value("--hosts", o->dp.host_list, 1, 1 << 20, &o->plan.hosts,
	    err, errlen) < 0)
		return -1;
	o->dp.host_list = NULL;		/* a count here; --validate runs here */
	o->plan.per_host = o->per_host ? o->per_host : 1;
	w = (long)o->plan.hosts * o->plan.per_host;
	if (w > 1 << 20)
		return cli_fail(err, errlen, "plan: %d hosts x %d ranks, more "
		    "than %d", o->plan.hosts, o->plan.per_host, 1 << 20);
	o->plan.batch = o->have_batch ? o->dp.batch : 8 * w;
	o->top = o->top ? o->top : 10;
	if (o->validate) {
		if (w > 64)
			return cli_fail(err, errlen, "plan --validate: runs the "
			    "%ld ranks on this host, at most 64", w);
		o->plan.as_mesh = 1;
		o->dp.max_world = (int)w;
		o->dp.batch = o->plan.batch;
	}
	if (o->export_dir != NULL && o->validate)
		return cli_fail(err, errlen, "plan: --export and --validate, one "
		    "at a time");
	return 0;
}

/* mesh: collx-train's own sums, each ZeRO stage on each mesh with dp. */
static int
mesh_defaults(struct bench_opts *o, char *err, size_t errlen)
{
	if (check_model(o, err, errlen) < 0 || check_hosts(o, err, errlen) < 0)
		return -1;
	if (o->have_sync || o->dp.wire || o->dp.powersgd ||
	    o->dp.powersgd_start || o->dp.sync_every || o->dp.outer_lr ||
	    o->dp.outer_momentum)
		return cli_fail(err, errlen, "mesh: --sync, --wire, PowerSGD and "
		    "local SGD go with dp");
	o->dp.syncs = "";
	if (check_zero(o, err, errlen) < 0)
		return -1;
	if (!o->have_batch)
		o->dp.batch = 8L * o->dp.max_world;
	return 0;
}

/* The options that go with one subcommand or a few, given to another. */
static int
check_misplaced(const struct bench_opts *o, int is_plan, char *err,
    size_t errlen)
{
	if (!is_plan && (o->per_host || o->top || o->plan.mem > 0 ||
	    o->validate || o->export_dir || o->plan.mesh[0]))
		return cli_fail(err, errlen, "--ranks-per-host, --top, "
		    "--mem-per-rank, --mesh, --validate and --export go with "
		    "plan");
	if (!is_plan && o->have_optim && strcmp(o->sub, "dp") != 0 &&
	    strcmp(o->sub, "mesh") != 0)
		return cli_fail(err, errlen, "--optimizer goes with dp, mesh and "
		    "plan");
	if (!is_plan && (o->plan.dims.moe.topk ||
	    o->plan.dims.moe.capacity > 0 || o->plan.dims.moe_every))
		return cli_fail(err, errlen, "--topk, --capacity and --moe-every "
		    "go with plan");
	if (strcmp(o->sub, "fit") != 0 && o->out != NULL)
		return cli_fail(err, errlen, "-o goes with fit");
	return 0;
}

/* The sizes' defaults, coll's or p2p's, and their order. */
static int
size_defaults(struct bench_opts *o, int p2p, char *err, size_t errlen)
{
	if (!o->have_b)
		o->sizes.min = p2p ? 1 : 8;
	if (!o->have_e)
		o->sizes.max = p2p ? (size_t)1 << 20 : (size_t)16 << 20;
	if (o->sizes.max < o->sizes.min)
		return cli_fail(err, errlen, "-e %zu is below -b %zu",
		    o->sizes.max, o->sizes.min);
	if (o->sizes.min == 0)
		return cli_fail(err, errlen, "-b: the smallest size must be "
		    "positive");
	if (p2p && o->have_n == 0)
		o->p2p.iters = 100;
	if (p2p && o->have_w == 0)
		o->p2p.warmup = 10;
	return 0;
}

int
bench_opts_check(struct bench_opts *o, char *err, size_t errlen)
{
	int p2p = strcmp(o->sub, "p2p") == 0;
	int plan = strcmp(o->sub, "plan") == 0;
	int mesh = strcmp(o->sub, "mesh") == 0;
	int fit = strcmp(o->sub, "fit") == 0;

	if (!p2p && strcmp(o->sub, "coll") != 0 && (!plan || o->validate) &&
	    check_self_launched(o, err, errlen) < 0)
		return -1;
	if (fit && fit_defaults(o, err, errlen) < 0)
		return -1;
	if (plan && plan_defaults(o, err, errlen) < 0)
		return -1;
	else if (!plan && o->cost != NULL && strcmp(o->sub, "coll") != 0)
		return cli_fail(err, errlen, "--cost goes with plan and coll");
	if (check_misplaced(o, plan, err, errlen) < 0 ||
	    size_defaults(o, p2p, err, errlen) < 0 ||
	    (mesh && mesh_defaults(o, err, errlen) < 0))
		return -1;
	if (!mesh && !fit && !plan && (o->dp.host_list || o->dp.ssh))
		return cli_fail(err, errlen, "-H and --ssh go with mesh and fit");
	if (o->dp.experts > 0 && !plan && (!mesh ||
	    strcmp(o->dp.arch, "gpt") != 0))
		return cli_fail(err, errlen, "--experts goes with mesh and a "
		    "gpt, or plan");
	if (!mesh && o->have_repeat && !o->validate)
		return cli_fail(err, errlen, "--repeat goes with mesh and plan "
		    "--validate");
	if (strcmp(o->sub, "dp") == 0 && (check_model(o, err, errlen) < 0 ||
	    check_wire(o, err, errlen) < 0 || check_local(o, err, errlen) < 0 ||
	    check_zero(o, err, errlen) < 0))
		return -1;
	return 0;
}

int
bench_opts_algos(const struct bench_opts *o, enum coll_algo *algos,
    char *err, size_t errlen)
{
	char *s, *tok, *save = NULL;
	int n = 0;

	if (strcmp(o->algos, "all") == 0)
		return bench_all_algos(o->coll.kind, algos,
		    BENCH_OPTS_MAXALGOS);
	s = cli_strdup(o->algos);
	for (tok = strtok_r(s, ",", &save); tok != NULL && n >= 0;
	    tok = strtok_r(NULL, ",", &save))
		if (n == BENCH_OPTS_MAXALGOS)
			n = cli_fail(err, errlen, "--algo: at most %d algorithms",
			    BENCH_OPTS_MAXALGOS);
		else if (coll_algo_parse(tok, &algos[n]) < 0 ||
		    !coll_algo_valid(o->coll.kind, algos[n]))
			n = cli_fail(err, errlen, "--algo: %s has no algorithm "
			    "'%s'", bench_kind_name(o->coll.kind), tok);
		else
			n++;
	free(s);
	if (n == 0)
		return cli_fail(err, errlen, "--algo: empty list");
	return n;
}

int
bench_opts_check_world(const struct bench_opts *o, int world, char *err,
    size_t errlen)
{
	if (strcmp(o->sub, "coll") == 0) {
		if (o->coll.root >= world)
			return cli_fail(err, errlen, "--root %d: the world has %d "
			    "ranks", o->coll.root, world);
		if (o->have_skew && o->coll.kind != COLL_KIND_ALLTOALLV)
			return cli_fail(err, errlen, "--skew is for --op "
			    "alltoallv");
		return 0;
	}
	if (world < 2)
		return cli_fail(err, errlen, "p2p needs at least 2 ranks (start "
		    "it with collx-run -n 2)");
	if (o->p2p.a >= world || o->p2p.b >= world)
		return cli_fail(err, errlen, "--pair %d,%d: the world has %d "
		    "ranks", o->p2p.a, o->p2p.b, world);
	return 0;
}
