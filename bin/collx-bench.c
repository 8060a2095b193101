/* collx-bench: benchmarks in the manner of nccl-tests (coll), the OSU
 * micro-benchmarks (p2p) and a training scaling sweep (dp). The
 * measuring is lib/bench/bench*.c's; this is options and the sweep loops. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/bench.h"
#include "bench/bench_cost.h"
#include "bench/bench_plan.h"
#include "cli/cli.h"
#include "comm/coll.h"
#include "comm/comm.h"
#include "nn/nn.h"
#include "par/dp.h"
#include "prog/dpopt.h"
#include "prog/join.h"
#include "prog/precision.h"
#include "launch/launch.h"

enum {
	OPT_OP = CLI_OPT_PROGRAM, OPT_ALGO, OPT_DTYPE, OPT_REDOP, OPT_ROOT,
	OPT_SECONDS, OPT_CHECK, OPT_CSV, OPT_TABLE, OPT_TEST, OPT_PAIR, OPT_ALL,
	OPT_WINDOW, OPT_SYNC, OPT_ARCH, OPT_DIMS, OPT_BATCH, OPT_STEPS, OPT_SSH,
	OPT_SKEW,
	OPT_REPEAT, OPT_COST, OPT_RPH, OPT_TOP, OPT_MEM, OPT_VALIDATE,
	OPT_EXPORT, OPT_MESH,
	OPT_ZERO,
	OPT_EXPERTS, OPT_TOPK, OPT_CAPACITY, OPT_MOE_EVERY
};

static const struct option longopts[] = {
	CLI_STD_LONGOPTS,
	{ "minbytes", 1, 0, 'b' }, { "maxbytes", 1, 0, 'e' },
	{ "stepfactor", 1, 0, 'f' }, { "stepbytes", 1, 0, 'i' },
	{ "iters", 1, 0, 'n' }, { "warmup", 1, 0, 'w' },
	{ "op", 1, 0, OPT_OP }, { "algo", 1, 0, OPT_ALGO },
	{ "dtype", 1, 0, OPT_DTYPE }, { "redop", 1, 0, OPT_REDOP },
	{ "root", 1, 0, OPT_ROOT }, { "seconds", 1, 0, OPT_SECONDS },
	{ "check", 0, 0, OPT_CHECK }, { "csv", 0, 0, OPT_CSV },
	{ "table", 0, 0, OPT_TABLE }, { "timing", 1, 0, CLI_OPT_TIMING },
	{ "test", 1, 0, OPT_TEST }, { "pair", 1, 0, OPT_PAIR },
	{ "all-pairs", 0, 0, OPT_ALL }, { "window", 1, 0, OPT_WINDOW },
	{ "sync", 1, 0, OPT_SYNC }, { "max-world", 1, 0, 'N' },
	{ "arch", 1, 0, OPT_ARCH }, { "dims", 1, 0, OPT_DIMS },
	{ "experts", 1, 0, OPT_EXPERTS },
	{ "batch", 1, 0, OPT_BATCH }, { "steps", 1, 0, OPT_STEPS },
	{ "wire", 1, 0, DPOPT_WIRE }, { "sync-every", 1, 0, DPOPT_SYNC_EVERY },
	{ "outer-lr", 1, 0, DPOPT_OUTER_LR },
	{ "outer-momentum", 1, 0, DPOPT_OUTER_MOMENTUM },
	{ "powersgd", 1, 0, DPOPT_POWERSGD },
	{ "powersgd-start", 1, 0, DPOPT_POWERSGD_START },
	{ "zero", 1, 0, OPT_ZERO },
	{ "hosts", 1, 0, 'H' }, { "ssh", 1, 0, OPT_SSH },
	PRECISION_LONGOPTS,
	{ "skew", 1, 0, OPT_SKEW },
	{ "repeat", 1, 0, OPT_REPEAT }, { "output", 1, 0, 'o' },
	{ "cost", 1, 0, OPT_COST }, { "ranks-per-host", 1, 0, OPT_RPH },
	{ "top", 1, 0, OPT_TOP }, { "mem-per-rank", 1, 0, OPT_MEM },
	{ "validate", 0, 0, OPT_VALIDATE }, { "export", 1, 0, OPT_EXPORT },
	{ "mesh", 1, 0, OPT_MESH },
	{ "topk", 1, 0, OPT_TOPK },
	{ "capacity", 1, 0, OPT_CAPACITY }, { "moe-every", 1, 0, OPT_MOE_EVERY },
	CLI_GROUP_LONGOPTS,
	{ 0, 0, 0, 0 }
};

#define MAXALGOS 16

struct opts {
	const char *sub;
	struct bench_sizes sizes;
	int have_b, have_e, have_n, have_w, have_batch, have_sync, have_world;
	int have_skew;
	int have_repeat;
	const char *out;		/* fit -o */
	const char *cost;		/* plan, coll --cost */
	struct bench_plan_opts plan;
	int per_host, top, validate;
	const char *export_fmt, *export_dir;
	const char *algos;
	struct bench_coll coll;
	struct bench_p2p p2p;
	struct bench_dp dp;
	struct dp_opts dpo;	/* dp's sync options, read as collx-dp reads
				 * them; passed on as given (dp.wire, ...) */
	int csv;
	const char *timing;
	struct cli_group g;
};

static _Noreturn void
usage(void)
{
	printf("usage: %s coll [--op OP] [--algo A[,A...]|all] [-b MIN] [-e MAX]\n"
	    "           [-f FACTOR | -i STEP] [--dtype D] [--redop R] [-n N] [-w W]\n"
	    "           [--seconds S] [--skew zipf:S] [--check] [--cost COST.json]\n"
	    "           [--csv|--table]\n"
	    "           [group options]\n"
	    "       %s p2p [--test latency|bw|bibw] [--pair A,B | --all-pairs]\n"
	    "           [-b MIN] [-e MAX] [-f FACTOR] [-n N] [-w W] [--window W]\n"
	    "           [--csv|--table] [group options]\n"
	    "       %s dp [-N MAXWORLD] [--sync S[,S...]] [--arch A --dims D]\n"
	    "           [--batch B] [--steps K] [--wire T] [--precision P[,P]]\n"
	    "           [--csv|--table]\n"
	    "       %s mesh [-N WORLD] [--arch A --dims D] [--batch B] [--steps K]\n"
	    "           [--repeat R] [-H HOSTS [--ssh CMD]] [--master ADDR:PORT]\n"
	    "           [--iface IF] [--experts E] [--csv|--table]\n"
	    "       %s fit [-N WORLD | -H HOSTS [--ssh CMD]] [--arch A --dims D]\n"
	    "           [-b MIN] [-e MAX] -o COST.json\n"
	    "       %s plan --cost COST.json --hosts N [--ranks-per-host L]\n"
	    "           [--arch A --dims D] [--batch B] [--top K]\n"
	    "           [--mem-per-rank BYTES] [--mesh D,T,P] [--validate]\n"
	    "           [--experts E [--topk K] [--capacity F] [--moe-every N]]\n"
	    "           [--export astra-sim DIR] [--csv|--table]\n\n"
	    "Benchmarks: collectives (like nccl-tests), point-to-point latency\n"
	    "and bandwidth (like the OSU micro-benchmarks), training scaling.\n"
	    "coll and p2p run as ranks (under collx-run); dp starts its own.\n"
	    "mesh trains collx-train under every DP x TP x PP of the world\n"
	    "(a gpt's with every CP too).\n"
	    "fit measures a cost model of this cluster; plan predicts every\n"
	    "mesh of a cluster of N hosts from it.\n\n"
	    "  --op OP               coll: allreduce (default), broadcast,\n"
	    "                        allgather, reduce-scatter, alltoall,\n"
	    "                        alltoallv\n"
	    "  --skew zipf:S         coll alltoallv: per-destination counts by a\n"
	    "                        Zipf law of exponent S (default 0: even)\n"
	    "  --algo LIST           coll: algorithms, comma list or all (auto)\n"
	    "  -b, --minbytes SIZE   smallest size (coll 8, p2p 1; K, M, G)\n"
	    "  -e, --maxbytes SIZE   largest size (coll 16M, p2p 1M)\n"
	    "  -f, --stepfactor F    multiply the size by F (2)\n"
	    "  -i, --stepbytes STEP  add STEP instead\n"
	    "  --dtype D             coll: element type (f32)\n"
	    "  --redop R             coll: sum (default), prod, min, max, avg\n"
	    "  --root R              coll broadcast: root rank (0)\n"
	    "  -n, --iters N         measured iterations per size (coll 20,\n"
	    "                        p2p 100)\n"
	    "  -w, --warmup W        warm-up iterations (coll 5, p2p 10)\n"
	    "  --seconds S           coll: measure about S seconds per size\n"
	    "  --check               coll: count wrong elements (#wrong; exit 4)\n"
	    "  --csv                 CSV even on a terminal\n"
	    "  --table               the table even when not on a terminal\n"
	    "  --timing F            also append the CSV rows to F (rank 0)\n"
	    "  --test T              p2p: latency (default), bw or bibw\n"
	    "  --pair A,B            p2p: ranks A and B (0,1)\n"
	    "  --all-pairs           p2p: every ordered pair, and a matrix\n"
	    "  --window W            p2p bw, bibw: messages in flight (64)\n"
	    "  -N, --max-world N     dp: world sizes 1..N (2); mesh: the world (2)\n"
	    "  --sync LIST           dp: ring,tree,rabenseifner,ps (all four)\n"
	    "  --arch A, --dims D    dp: collx-dp --init model, gpt (default,\n"
	    "                        256,64,2,4,32) or mlp DIN,H,DOUT\n"
	    "  --experts E           mesh: a gpt with E experts a block, each "
	    "mesh\n"
	    "                        run again with every --ep X dividing D "
	    "and E;\n"
	    "                        plan: a gpt whose MoE layers have E experts\n"
	    "  --batch B             dp: samples per rank per step (8); mesh:\n"
	    "                        the global batch (8 x WORLD)\n"
	    "  --steps K             dp, mesh: steps per run, the first not\n"
	    "                        timed (12)\n"
	    "  --repeat R            mesh, plan --validate: rounds at most, until\n"
	    "                        two in a row rank the meshes alike (3)\n"
	    "  --wire T              dp: collx-dp --wire (f32, bf16, f16, int8)\n"
	    "  --precision P[,P]     dp: the sweep once per collx-dp --precision\n"
	    "                        (f32, bf16); rows op dp-bf16 for bf16\n"
	    "  --powersgd R, --powersgd-start K\n"
	    "                        dp: collx-dp's PowerSGD, passed to every run\n"
	    "  --zero LIST           dp: each ZeRO stage of LIST (0,1,2,3) with\n"
	    "                        each --sync method; mesh: each mesh with\n"
	    "                        dp above 1 at each (0), and with 3 on\n"
	    "                        several hosts hybrid sharding too\n"
	    "  --sync-every H, --outer-lr L, --outer-momentum M\n"
	    "                        dp: collx-dp's local SGD, passed to every run\n"
	    "  -H, --hosts HOSTS     mesh: run on these hosts, collx-run's -H\n"
	    "                        (a:2,b:2); -N is their rank total; TMPDIR\n"
	    "                        must be a directory every host sees\n"
	    "  --ssh CMD             mesh: collx-run --ssh CMD\n"
	    "  --master ADDR:PORT    mesh: collx-run --master, run i at PORT+i\n"
	    "  --iface IF            mesh: the ranks' --iface\n"
	    "  -o, --output F        fit: the cost model's JSON\n"
	    "  --cost F              plan: the cost model (coll: verdicts)\n"
	    "  --hosts N             plan: the cluster's hosts\n"
	    "  --ranks-per-host L    plan: ranks on each host (1)\n"
	    "  --top K               plan: the K fastest (10)\n"
	    "  --mem-per-rank BYTES  plan: the meshes whose ranks fit (K, M, G)\n"
	    "  --mesh D,T,P          plan: that mesh only\n"
	    "  --topk K, --capacity F, --moe-every N  plan: their routing (1, 0, 1)\n"
	    "  --validate            plan: run the meshes here, error beside\n"
	    "  --export astra-sim DIR  plan: the fastest's ASTRA-sim inputs\n"
	    "  -v, --verbose         more messages\n"
	    "  -q, --quiet           no progress line\n"
	    "  -h, --help            this help\n"
	    "  -V, --version         version\n"
	    "%s"
	    "A table on a terminal, CSV (the timing columns) otherwise.\n"
	    "COLLX_BENCH_FAULT=K (tests only) corrupts K result elements of the\n"
	    "last rank before --check.\n"
	    "Exit status: 0 ok, 1 runtime failure (a rank lost), 2 usage,\n"
	    "3 bad input, 4 --check found wrong elements, 130 interrupted.\n",
	    cli_progname, cli_progname, cli_progname, cli_progname,
	    cli_progname, cli_progname, cli_group_help);
	cli_close_stdout();
	exit(CLI_EXIT_OK);
}

static void
parse_pair(struct opts *o, const char *s)
{
	long v[2];

	if (cli_parse_list("--pair", s, v, 2) != 2 || v[0] == v[1] ||
	    v[0] < 0 || v[1] < 0)
		cli_usage_error("--pair: want two different ranks A,B, not '%s'", s);
	o->p2p.a = (int)v[0];
	o->p2p.b = (int)v[1];
}

static void
parse_test(struct opts *o, const char *s)
{
	if (strcmp(s, "latency") == 0)
		o->p2p.test = BENCH_LATENCY;
	else if (strcmp(s, "bw") == 0)
		o->p2p.test = BENCH_BW;
	else if (strcmp(s, "bibw") == 0)
		o->p2p.test = BENCH_BIBW;
	else
		cli_usage_error("--test: want latency, bw or bibw, not '%s'", s);
}

/* The options of coll and p2p; 0 when c was none of them. */
static int
meas_option(struct opts *o, int c, const char *a)
{
	switch (c) {
	case 'b': o->sizes.min = cli_parse_size("-b", a); o->have_b = 1; break;
	case 'e': o->sizes.max = cli_parse_size("-e", a); o->have_e = 1; break;
	case 'f':
		o->sizes.factor = cli_parse_double("-f", a, 1.0001, 1e6);
		o->sizes.step = 0;
		break;
	case 'i':
		if ((o->sizes.step = cli_parse_size("-i", a)) == 0)
			cli_usage_error("-i: the step must be positive");
		break;
	case 'n':
		o->coll.iters = o->p2p.iters = (int)cli_parse_long("-n", a, 1, 10000000);
		o->have_n = 1;
		break;
	case 'w':
		o->coll.warmup = o->p2p.warmup = (int)cli_parse_long("-w", a, 0, 1000000);
		o->have_w = 1;
		break;
	case OPT_OP:
		if (bench_kind_parse(a, &o->coll.kind) < 0)
			cli_usage_error("--op: want allreduce, broadcast, allgather, "
			    "reduce-scatter, alltoall or alltoallv, not '%s'", a);
		break;
	case OPT_ALGO: o->algos = a; break;
	case OPT_DTYPE:
		if (dtype_parse(a, &o->coll.dt) < 0)
			cli_usage_error("--dtype: unknown type '%s'", a);
		break;
	case OPT_REDOP:
		if (coll_op_parse(a, &o->coll.op) < 0)
			cli_usage_error("--redop: want sum, prod, min, max or avg, "
			    "not '%s'", a);
		break;
	case OPT_ROOT: o->coll.root = (int)cli_parse_long("--root", a, 0, 1 << 20); break;
	case OPT_SECONDS:
		o->coll.seconds = cli_parse_double("--seconds", a, 1e-6, 1e6);
		break;
	case OPT_CHECK: o->coll.check = 1; break;
	case OPT_SKEW:
		if (strncmp(a, "zipf:", 5) != 0)
			cli_usage_error("--skew: want zipf:S, not '%s'", a);
		o->coll.skew = cli_parse_double("--skew", a + 5, 0, 100);
		o->have_skew = 1;
		break;
	case OPT_TEST: parse_test(o, a); break;
	case OPT_PAIR: parse_pair(o, a); break;
	case OPT_ALL: o->p2p.a = -1; break;
	case OPT_WINDOW:
		o->p2p.window = (int)cli_parse_long("--window", a, 1, 100000);
		break;
	default: return 0;
	}
	return 1;
}

/* --precision's list, each one f32 or bf16 (a usage error otherwise). */
static const char *
check_precisions(const char *list)
{
	char *l = cli_strdup(list), *tok, *save = NULL;
	enum nn_precision p;

	for (tok = strtok_r(l, ",", &save); tok; tok = strtok_r(NULL, ",",
	    &save))
		prog_precision_option(&p, PRECISION_OPT, tok);
	free(l);
	return list;
}

static int
dp_option(struct opts *o, int c, const char *a)
{
	/* the sync options' values are checked as collx-dp checks them,
	 * and passed on as given */
	dpopt_option(&o->dpo, c, a);
	switch (c) {
	case 'N':
		o->dp.max_world = (int)cli_parse_long("-N", a, 1, 1024);
		o->have_world = 1;
		break;
	case 'H': o->dp.host_list = a; break;
	case OPT_SSH: o->dp.ssh = a; break;
	case OPT_SYNC: o->dp.syncs = a; o->have_sync = 1; break;
	case OPT_ARCH: o->dp.arch = a; break;
	case OPT_DIMS: o->dp.dims = a; break;
	/* mesh's gpt and plan's (collx-dp --init's experts) */
	case OPT_EXPERTS:
		o->dp.experts = (int)cli_parse_long("--experts", a, 1, 1 << 16);
		break;
	case OPT_BATCH:
		o->dp.batch = cli_parse_long("--batch", a, 1, 1 << 24);
		o->have_batch = 1;
		break;
	case OPT_STEPS: o->dp.steps = cli_parse_long("--steps", a, 2, 1 << 24); break;
	case OPT_REPEAT:
		o->dp.rounds = (int)cli_parse_long("--repeat", a, 1, 100);
		o->have_repeat = 1;
		break;
	case DPOPT_WIRE: o->dp.wire = a; break;
	case DPOPT_POWERSGD: o->dp.powersgd = a; break;
	case DPOPT_POWERSGD_START: o->dp.powersgd_start = a; break;
	case DPOPT_SYNC_EVERY: o->dp.sync_every = a; break;
	case PRECISION_OPT: o->dp.precisions = check_precisions(a); break;
	case DPOPT_OUTER_LR: o->dp.outer_lr = a; break;
	case DPOPT_OUTER_MOMENTUM: o->dp.outer_momentum = a; break;
	case OPT_ZERO: o->dp.zeros = a; break;
	default: return 0;
	}
	return 1;
}

/* fit's and plan's options; 0 when c was none of them. */
static int
plan_option(struct opts *o, int c, const char *a)
{
	long v[3];

	switch (c) {
	case 'o': o->out = a; break;
	case OPT_COST: o->cost = a; break;
	case OPT_RPH:
		o->per_host = (int)cli_parse_long("--ranks-per-host", a, 1,
		    4096);
		break;
	case OPT_TOP:
		o->top = (int)cli_parse_long("--top", a, 1, 1 << 20);
		break;
	case OPT_MEM:
		o->plan.mem = (double)cli_parse_size("--mem-per-rank", a);
		break;
	case OPT_VALIDATE: o->validate = 1; break;
	case OPT_TOPK:
		o->plan.dims.moe.topk = (int)cli_parse_long("--topk", a, 1,
		    1 << 16);
		break;
	case OPT_CAPACITY:
		o->plan.dims.moe.capacity = cli_parse_double("--capacity", a,
		    0, 1e6);
		break;
	case OPT_MOE_EVERY:
		o->plan.dims.moe_every = (int)cli_parse_long("--moe-every", a,
		    1, 1 << 20);
		break;
	case OPT_MESH:
		if (cli_parse_list("--mesh", a, v, 3) != 3 || v[0] < 1 ||
		    v[1] < 1 || v[2] < 1 || v[0] > 1 << 20 || v[1] > 1 << 20 ||
		    v[2] > 1 << 20)
			cli_usage_error("--mesh: want D,T,P, three positive "
			    "counts, not '%s'", a);
		for (int i = 0; i < 3; i++)
			o->plan.mesh[i] = (int)v[i];
		break;
	default: return 0;
	}
	return 1;
}

static void
parse_args(struct opts *o, int argc, char **argv)
{
	int c;

	while ((c = getopt_long(argc, argv, "hVvqb:e:f:i:n:w:N:H:o:", longopts,
	    NULL)) != -1) {
		if (c == CLI_OPT_MASTER)	/* as given, not from the environment */
			o->dp.master = optarg;
		if (c == CLI_OPT_IFACE)
			o->dp.iface = optarg;
		if (c == OPT_EXPORT) {		/* --export FORMAT DIR */
			if (strcmp(optarg, "astra-sim") != 0)
				cli_usage_error("--export: want astra-sim, not "
				    "'%s'", optarg);
			if (optind >= argc)
				cli_usage_error("--export astra-sim: missing DIR");
			o->export_fmt = optarg;
			o->export_dir = argv[optind++];
			continue;
		}
		if (cli_std_option(c, usage) || cli_group_getopt(&o->g, c, optarg) ||
		    meas_option(o, c, optarg) || plan_option(o, c, optarg) ||
		    dp_option(o, c, optarg))
			continue;
		switch (c) {
		case OPT_CSV: o->csv = 1; break;
		case OPT_TABLE: o->csv = -1; break;
		case CLI_OPT_TIMING: o->timing = optarg; break;
		default: cli_option_error(argc, argv, "hVvqb:e:f:i:n:w:N:H:o:");
		}
	}
	if (optind >= argc)
		cli_usage_error("missing subcommand: coll, p2p, dp, mesh, fit or "
		    "plan");
	o->sub = argv[optind++];
	if (strcmp(o->sub, "coll") && strcmp(o->sub, "p2p") &&
	    strcmp(o->sub, "dp") && strcmp(o->sub, "mesh") &&
	    strcmp(o->sub, "fit") && strcmp(o->sub, "plan"))
		cli_usage_error("unknown subcommand '%s': want coll, p2p, dp, "
		    "mesh, fit or plan", o->sub);
	if (optind < argc)
		cli_usage_error("unexpected argument '%s'", argv[optind]);
}

/* The progress line: stderr a terminal, not -q. */
static int
progress(void)
{
	return !cli_quiet && isatty(STDERR_FILENO);
}

/* CSV unless a terminal, --csv and --table overriding. */
static int
out_csv(const struct opts *o)
{
	return o->csv ? o->csv > 0 : !isatty(STDOUT_FILENO);
}

/* The sizes every rank must sweep alike, declared for the job. */
static void
agree_sizes(struct prog_job *j, const struct bench_sizes *z)
{
	char buf[32];

	prog_job_add(j, "-b", "%s", bench_size_str(z->min, buf, sizeof buf));
	prog_job_add(j, "-e", "%s", bench_size_str(z->max, buf, sizeof buf));
	if (z->step > 0)
		prog_job_add(j, "-i", "%s", bench_size_str(z->step, buf,
		    sizeof buf));
	else
		prog_job_add(j, "-f", "%g", z->factor);
}

static struct comm *
join_group(const struct opts *o, const struct prog_job *job)
{
	struct comm *c;
	char e[COLLX_ERRLEN];
	int code;

	if ((code = prog_join(&c, &o->g, job, e, sizeof e)) != 0)
		cli_die(code, "%s", e);
	return c;
}

/* A sweep's failure: the group's, else e (rank 0's timing output). */
static _Noreturn void
comm_die(struct comm *c, const char *e)
{
	if (c != NULL && comm_errkind(c) != COMM_ERR_NONE)
		cli_die(comm_errkind(c) == COMM_ERR_MISMATCH ? CLI_EXIT_DATA :
		    CLI_EXIT_RUNTIME, "%s", comm_error(c));
	cli_die(CLI_EXIT_RUNTIME, "%s", e);
}

static int
parse_algos(const struct opts *o, enum coll_algo *algos)
{
	char *s, *tok, *save = NULL;
	int n = 0;

	if (strcmp(o->algos, "all") == 0)
		return bench_all_algos(o->coll.kind, algos, MAXALGOS);
	s = cli_strdup(o->algos);
	for (tok = strtok_r(s, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		if (n == MAXALGOS)
			cli_usage_error("--algo: at most %d algorithms", MAXALGOS);
		if (coll_algo_parse(tok, &algos[n]) < 0 ||
		    !coll_algo_valid(o->coll.kind, algos[n]))
			cli_usage_error("--algo: %s has no algorithm '%s'",
			    bench_kind_name(o->coll.kind), tok);
		n++;
	}
	free(s);
	if (n == 0)
		cli_usage_error("--algo: empty list");
	return n;
}

static int
run_coll(struct opts *o)
{
	enum coll_algo algos[MAXALGOS];
	int nalgo = parse_algos(o, algos), rc;
	struct bench_out out = { .csv = out_csv(o), .file = o->timing };
	struct prog_job job;
	char e[COLLX_ERRLEN];
	const char *fault = getenv("COLLX_BENCH_FAULT");
	struct comm *c;
	long wrong;
	int me;

	static struct bench_cost cost;

	if (fault != NULL && *fault)
		o->coll.fault = cli_parse_long("COLLX_BENCH_FAULT", fault, 0, 1L << 40);
	if (o->cost != NULL && bench_cost_read(&cost, o->cost, e, sizeof e) < 0)
		cli_die(CLI_EXIT_DATA, "%s", e);
	if (o->cost != NULL) {
		o->coll.cost = &cost;
		o->coll.cost_tcp = o->g.no_shm;
	}
	if (o->coll.root >= o->g.world)
		cli_usage_error("--root %d: the world has %d ranks", o->coll.root,
		    o->g.world);
	if (o->have_skew && o->coll.kind != COLL_KIND_ALLTOALLV)
		cli_usage_error("--skew is for --op alltoallv");
	prog_job_init(&job, "collx-bench coll");
	prog_job_add(&job, "--op", "%s", bench_kind_name(o->coll.kind));
	prog_job_add(&job, "--algo", "%s", o->algos);
	prog_job_add(&job, "--dtype", "%s", dtype_name(o->coll.dt));
	prog_job_add(&job, "--redop", "%s", coll_op_name(o->coll.op));
	prog_job_add(&job, "--root", "%d", o->coll.root);
	prog_job_add(&job, "--skew", "zipf:%g", o->coll.skew);
	agree_sizes(&job, &o->sizes);
	prog_job_add(&job, "-n", "%d", o->coll.iters);
	prog_job_add(&job, "-w", "%d", o->coll.warmup);
	prog_job_add(&job, "--seconds", "%g", o->coll.seconds);
	prog_job_flag(&job, "--check", o->coll.check);
	c = join_group(o, &job);
	if ((rc = bench_coll_sweep(c, &o->coll, &o->sizes, algos, nalgo, &out,
	    progress(), &wrong, e, sizeof e)) < 0)
		comm_die(c, e);
	me = comm_rank(c);
	comm_close(c);
	if (rc > 0)
		return 130;
	if (wrong > 0)
		cli_die(CLI_EXIT_CHECK, "rank %d: --check: %ld wrong elements", me,
		    wrong);
	return CLI_EXIT_OK;
}


static int
run_p2p(struct opts *o)
{
	struct bench_out out = { .csv = out_csv(o), .file = o->timing };
	struct prog_job job;
	char e[COLLX_ERRLEN];
	struct comm *c;
	int rc;

	if (o->g.world < 2)
		cli_usage_error("p2p needs at least 2 ranks (start it with collx-run -n 2)");
	if (o->p2p.a >= o->g.world || o->p2p.b >= o->g.world)
		cli_usage_error("--pair %d,%d: the world has %d ranks", o->p2p.a,
		    o->p2p.b, o->g.world);
	prog_job_init(&job, "collx-bench p2p");
	prog_job_add(&job, "--test", "%s", bench_p2p_name(o->p2p.test));
	if (o->p2p.a < 0)
		prog_job_flag(&job, "--all-pairs", 1);
	else
		prog_job_add(&job, "--pair", "%d,%d", o->p2p.a, o->p2p.b);
	agree_sizes(&job, &o->sizes);
	prog_job_add(&job, "-n", "%d", o->p2p.iters);
	prog_job_add(&job, "-w", "%d", o->p2p.warmup);
	prog_job_add(&job, "--window", "%d", o->p2p.window);
	c = join_group(o, &job);
	if ((rc = bench_p2p_sweep(c, &o->p2p, &o->sizes, &out, progress(), e,
	    sizeof e)) < 0)
		comm_die(c, e);
	comm_close(c);
	return rc > 0 ? 130 : CLI_EXIT_OK;
}

/* dp, mesh and fit: the runs they start. */
static int
run_train(struct opts *o, int (*sweep)(struct bench_out *,
    const struct bench_dp *, int, char *, size_t))
{
	struct bench_out out = { .csv = out_csv(o), .file = o->timing };
	char e[COLLX_ERRLEN];
	int rc;

	if ((rc = sweep(&out, &o->dp, progress(), e, sizeof e)) != 0 &&
	    rc != 130)
		cli_die(rc, "%s", e);
	return rc;
}

static int
run_plan(struct opts *o)
{
	struct bench_out out = { .csv = out_csv(o), .file = o->timing };
	struct bench_cost cost;
	char e[COLLX_ERRLEN];
	int rc;

	if (bench_cost_read(&cost, o->cost, e, sizeof e) < 0)
		cli_die(CLI_EXIT_DATA, "%s", e);
	o->plan.cost = &cost;
	if ((rc = bench_plan_run(&out, &o->plan, o->validate ? &o->dp : NULL,
	    o->top, o->export_dir, progress(), e, sizeof e)) != 0 && rc != 130)
		cli_die(rc, "%s", e);
	return rc;
}

/* dp's model: an arch bench_dp makes data for, with dims that fit it, or
 * a usage error rather than a failed run. */
static void
check_model(const struct opts *o)
{
	enum nn_arch arch;
	struct nn_dims d;
	char e[COLLX_ERRLEN];

	if ((strcmp(o->dp.arch, "gpt") && strcmp(o->dp.arch, "mlp")) ||
	    nn_arch_parse(o->dp.arch, &arch) < 0)
		cli_usage_error("--arch: want gpt or mlp, not '%s'", o->dp.arch);
	if (nn_dims_parse(o->dp.dims, arch, &d, e, sizeof e) < 0) {
		if (strstr(e, "--dims") != NULL)
			cli_usage_error("%s", e);
		cli_usage_error("--dims %s: %s", o->dp.dims, e);
	}
}

/* --wire as collx-dp takes it with each --sync method, or a usage error
 * rather than failed runs. */
static void
check_wire(const struct opts *o)
{
	enum dp_wire_type t;
	const char *s = o->dp.syncs, *e;

	if (o->dp.wire == NULL)
		return;
	if (dp_wire_parse(o->dp.wire, &t) < 0)
		cli_usage_error("--wire: want f32, bf16, f16 or int8, not '%s'",
		    o->dp.wire);
	for (; t != DP_WIRE_F32 && *s != '\0'; s = *e ? e + 1 : e) {
		size_t n = strcspn(s, ",");

		e = s + n;
		if (n == 2 && strncmp(s, "ps", 2) == 0)
			cli_usage_error("--wire %s goes with allreduce, not --sync "
			    "ps", o->dp.wire);
		if (t == DP_WIRE_INT8 && (n != 4 || strncmp(s, "auto", 4) != 0))
			cli_usage_error("--wire int8 goes with --sync auto only, "
			    "not --sync %.*s", (int)n, s);
	}
}

/* --zero's stages, each 0 to 3 and with allreduce only, as collx-dp
 * takes them, or a usage error rather than failed runs. */
static void
check_zero(const struct opts *o)
{
	const char *s = o->dp.zeros, *e;

	for (; s != NULL && *s != '\0'; s = *e ? e + 1 : e) {
		size_t n = strcspn(s, ",");

		e = s + n;
		if (n != 1 || *s < '0' || *s > '3')
			cli_usage_error("--zero: want stages 0 to 3, not "
			    "'%.*s'", (int)n, s);
		if (*s != '0' && (o->dp.powersgd || o->dp.sync_every ||
		    strstr(o->dp.syncs, "ps") != NULL))
			cli_usage_error("--zero %c goes with allreduce, without "
			    "PowerSGD and local SGD", *s);
	}
}

/* Local SGD's and PowerSGD's options as collx-dp takes them, or a usage
 * error rather than failed runs. */
static void
check_local(struct opts *o)
{
	const char *s = o->dp.syncs, *e, *what;
	int local = o->dpo.sync_every > 0;
	char err[COLLX_ERRLEN];

	if (dpopt_check(&o->dpo, 0, err, sizeof(err)) < 0)
		cli_usage_error("%s", err);
	what = local ? "--sync-every" : "--powersgd";
	for (; (local || o->dp.powersgd) && *s != '\0'; s = *e ? e + 1 : e) {
		size_t n = strcspn(s, ",");

		e = s + n;
		if (n == 2 && strncmp(s, "ps", 2) == 0)
			cli_usage_error("%s goes with allreduce, not --sync ps",
			    what);
	}
}

/* mesh's hosts: a list collx-run takes, whose ranks are the world (-N,
 * when given, must agree). */
static void
check_hosts(struct opts *o)
{
	struct launch_hosts h;
	char e[COLLX_ERRLEN];
	int slots;

	if (o->dp.host_list == NULL) {
		if (o->dp.ssh != NULL)
			cli_usage_error("--ssh needs hosts (-H)");
		return;
	}
	memset(&h, 0, sizeof h);
	if (launch_hosts_add_list(&h, o->dp.host_list, e, sizeof e) < 0)
		cli_usage_error("-H: %s", e);
	slots = launch_hosts_slots(&h, 0);
	o->dp.hosts = h.n;
	launch_hosts_free(&h);
	if (o->have_world && o->dp.max_world != slots)
		cli_usage_error("-N %d: the hosts %s hold %d ranks",
		    o->dp.max_world, o->dp.host_list, slots);
	if (slots > 1024)
		cli_usage_error("-H %s: %d ranks, more than 1024",
		    o->dp.host_list, slots);
	o->dp.max_world = slots;
}

/* The subcommands that start their own ranks: -n (coll's and p2p's
 * iterations) is the world mistyped, and a launcher's ranks would each
 * start a whole planner. */
static void
check_self_launched(const struct opts *o)
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
		cli_usage_error("%s: -n is coll's and p2p's iterations; %s "
		    "starts its own ranks, -N WORLD (now %d) says how many",
		    o->sub, o->sub, o->dp.max_world);
	for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
		if ((r = getenv(vars[i][0])) != NULL && *r &&
		    (w = getenv(vars[i][1])) != NULL && atol(w) > 1)
			cli_usage_error("%s starts its own ranks; run it once, "
			    "not as rank %s of %s under a launcher (%s is "
			    "set): use -N or -H for its world", o->sub, r, w,
			    vars[i][1]);
}

static void
fit_defaults(struct opts *o)
{
	static char lo[32], hi[32];

	check_model(o);
	check_hosts(o);
	if (o->dp.max_world < 2)
		cli_usage_error("fit: a world of %d has no links to measure: "
		    "-N 2 or more", o->dp.max_world);
	if (o->out == NULL)
		cli_usage_error("fit: -o COST.json is required");
	o->dp.fit_out = o->out;
	o->dp.fit_min = o->have_b ? bench_size_str(o->sizes.min, lo,
	    sizeof lo) : "4K";
	o->dp.fit_max = o->have_e ? bench_size_str(o->sizes.max, hi,
	    sizeof hi) : "64M";
}

static void
plan_defaults(struct opts *o)
{
	char e[COLLX_ERRLEN];
	struct nn_moe_cfg moe;
	long w;
	int every;

	if (o->cost == NULL)
		cli_usage_error("plan: --cost COST.json is required (collx-bench "
		    "fit writes it)");
	if (o->dp.host_list == NULL)
		cli_usage_error("plan: --hosts N is required");
	if (o->dp.ssh != NULL)
		cli_usage_error("plan: --ssh goes with mesh and fit");
	check_model(o);
	moe = o->plan.dims.moe;
	moe.experts = o->dp.experts;
	every = o->plan.dims.moe_every;
	if (nn_arch_parse(o->dp.arch, &o->plan.dims.arch) < 0 ||
	    nn_dims_parse(o->dp.dims, o->plan.dims.arch, &o->plan.dims, e,
	    sizeof e) < 0)
		cli_usage_error("--dims %s: %s", o->dp.dims, e);
	o->plan.dims.moe = moe;
	o->plan.dims.moe_every = every ? every : moe.experts > 0;
	if (moe.experts > 0 && moe.topk == 0)
		o->plan.dims.moe.topk = 1;
	if ((moe.experts == 0 && (moe.topk || moe.capacity > 0 || every)) ||
	    nn_moe_valid(&o->plan.dims, e, sizeof e) < 0)
		cli_usage_error("plan: %s", moe.experts == 0 ? "--topk, "
		    "--capacity and --moe-every go with --experts" : e);
	o->plan.hosts = (int)cli_parse_long("--hosts", o->dp.host_list, 1,
	    1 << 20);
	o->dp.host_list = NULL;		/* a count here; --validate runs here */
	o->plan.per_host = o->per_host ? o->per_host : 1;
	w = (long)o->plan.hosts * o->plan.per_host;
	if (w > 1 << 20)
		cli_usage_error("plan: %d hosts x %d ranks, more than %d",
		    o->plan.hosts, o->plan.per_host, 1 << 20);
	o->plan.batch = o->have_batch ? o->dp.batch : 8 * w;
	o->top = o->top ? o->top : 10;
	if (o->validate) {
		if (w > 64)
			cli_usage_error("plan --validate: runs the %ld ranks on "
			    "this host, at most 64", w);
		o->plan.as_mesh = 1;
		o->dp.max_world = (int)w;
		o->dp.batch = o->plan.batch;
	}
	if (o->export_dir != NULL && o->validate)
		cli_usage_error("plan: --export and --validate, one at a time");
}

/* Defaults that differ by subcommand, where options left them unset. */
static void
defaults(struct opts *o)
{
	int p2p = strcmp(o->sub, "p2p") == 0;

	if (!p2p && strcmp(o->sub, "coll") != 0 &&
	    (strcmp(o->sub, "plan") != 0 || o->validate))
		check_self_launched(o);
	if (strcmp(o->sub, "fit") == 0)
		fit_defaults(o);
	if (strcmp(o->sub, "plan") == 0)
		plan_defaults(o);
	else if (o->cost != NULL && strcmp(o->sub, "coll") != 0)
		cli_usage_error("--cost goes with plan and coll");
	if (strcmp(o->sub, "plan") != 0 && (o->per_host || o->top ||
	    o->plan.mem > 0 || o->validate || o->export_dir || o->plan.mesh[0]))
		cli_usage_error("--ranks-per-host, --top, --mem-per-rank, --mesh, "
		    "--validate and --export go with plan");
	if (strcmp(o->sub, "plan") != 0 && (o->plan.dims.moe.topk ||
	    o->plan.dims.moe.capacity > 0 || o->plan.dims.moe_every))
		cli_usage_error("--topk, --capacity and --moe-every go with "
		    "plan");
	if (strcmp(o->sub, "fit") != 0 && o->out != NULL)
		cli_usage_error("-o goes with fit");
	if (!o->have_b)
		o->sizes.min = p2p ? 1 : 8;
	if (!o->have_e)
		o->sizes.max = p2p ? (size_t)1 << 20 : (size_t)16 << 20;
	if (o->sizes.max < o->sizes.min)
		cli_usage_error("-e %zu is below -b %zu", o->sizes.max, o->sizes.min);
	if (o->sizes.min == 0)
		cli_usage_error("-b: the smallest size must be positive");
	if (p2p && o->have_n == 0)
		o->p2p.iters = 100;
	if (p2p && o->have_w == 0)
		o->p2p.warmup = 10;
	if (strcmp(o->sub, "mesh") == 0) {
		check_model(o);
		check_hosts(o);
		if (o->have_sync || o->dp.wire || o->dp.powersgd ||
		    o->dp.powersgd_start || o->dp.sync_every ||
		    o->dp.outer_lr || o->dp.outer_momentum)
			cli_usage_error("mesh: --sync, --wire, PowerSGD "
			    "and local SGD go with dp");
		o->dp.syncs = "";	/* mesh: collx-train's own sums */
		check_zero(o);	/* each stage on each mesh with dp */
		if (!o->have_batch)
			o->dp.batch = 8L * o->dp.max_world;
	}
	if (strcmp(o->sub, "mesh") != 0 && strcmp(o->sub, "fit") != 0 &&
	    strcmp(o->sub, "plan") != 0 && (o->dp.host_list || o->dp.ssh))
		cli_usage_error("-H and --ssh go with mesh and fit");
	if (o->dp.experts > 0 && strcmp(o->sub, "plan") != 0 &&
	    (strcmp(o->sub, "mesh") != 0 || strcmp(o->dp.arch, "gpt") != 0))
		cli_usage_error("--experts goes with mesh and a gpt, or plan");
	if (strcmp(o->sub, "mesh") != 0 && o->have_repeat && !o->validate)
		cli_usage_error("--repeat goes with mesh and plan --validate");
	if (strcmp(o->sub, "dp") == 0) {
		check_model(o);
		check_wire(o);
		check_local(o);
		check_zero(o);
	}
}

int
main(int argc, char **argv)
{
	struct opts o;
	int rc;
	char self[4096], *slash;
	ssize_t n;

	memset(&o, 0, sizeof o);
	cli_init(argv[0]);
	cli_group_defaults(&o.g);
	o.sizes.factor = 2;
	o.algos = "auto";
	o.coll.kind = COLL_KIND_ALLREDUCE;
	o.coll.op = COLL_SUM;
	o.coll.dt = DT_F32;
	o.coll.iters = o.p2p.iters = 20;
	o.coll.warmup = o.p2p.warmup = 5;
	o.p2p.b = 1;
	o.p2p.window = 64;
	o.dpo = (struct dp_opts)DP_OPTS_DEFAULTS;
	o.dp.max_world = 2;
	o.dp.syncs = "ring,tree,rabenseifner,ps";
	o.dp.arch = "gpt";
	o.dp.dims = "256,64,2,4,32";
	o.dp.batch = 8;
	o.dp.steps = 12;
	o.dp.rounds = 3;
	parse_args(&o, argc, argv);
	defaults(&o);
	bench_catch_signals();
	if (strcmp(o.sub, "dp") == 0 || strcmp(o.sub, "mesh") == 0 ||
	    strcmp(o.sub, "fit") == 0 || strcmp(o.sub, "plan") == 0) {
		/* collx-run, collx-dp and collx-train beside this program, else on PATH. */
		if ((n = readlink("/proc/self/exe", self, sizeof self - 1)) > 0) {
			self[n] = '\0';
			if ((slash = strrchr(self, '/')) != NULL)
				*slash = '\0';
			o.dp.bindir = self;
		}
		cli_group_finish(&o.g);
		o.dp.timeout = o.g.timeout;
		o.dp.no_shm = o.g.no_shm;
		if (strcmp(o.sub, "fit") == 0)
			rc = run_train(&o, bench_fit_run);
		else if (strcmp(o.sub, "plan") == 0)
			rc = run_plan(&o);
		else
			rc = run_train(&o, strcmp(o.sub, "dp") == 0 ?
			    bench_dp_run : bench_mesh_run);
	} else {
		cli_group_finish(&o.g);
		rc = strcmp(o.sub, "coll") == 0 ? run_coll(&o) : run_p2p(&o);
	}
	cli_group_free(&o.g);
	cli_close_stdout();
	return rc;
}
