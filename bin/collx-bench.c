/* collx-bench: benchmarks in the manner of nccl-tests (coll), the OSU
 * micro-benchmarks (p2p) and a training scaling sweep (dp). The
 * measuring is lib/bench/bench*.c's; this is options and the sweep loops. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/bench_opts.h"
#include "bench/bench_cost.h"
#include "cli/cli.h"
#include "comm/comm.h"
#include "prog/dpopt.h"
#include "prog/join.h"
#include "prog/precision.h"
#include "launch/launch.h"

static const struct option longopts[] = {
	CLI_STD_LONGOPTS,
	BENCH_OPTS_LONGOPTS,
	{ "wire", 1, 0, DPOPT_WIRE }, { "sync-every", 1, 0, DPOPT_SYNC_EVERY },
	{ "outer-lr", 1, 0, DPOPT_OUTER_LR },
	{ "outer-momentum", 1, 0, DPOPT_OUTER_MOMENTUM },
	{ "powersgd", 1, 0, DPOPT_POWERSGD },
	{ "powersgd-start", 1, 0, DPOPT_POWERSGD_START },
	PRECISION_LONGOPTS,
	CLI_GROUP_LONGOPTS,
	{ 0, 0, 0, 0 }
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
	    "           [--optimizer sgd|adamw] [--csv|--table]\n"
	    "       %s mesh [-N WORLD] [--arch A --dims D] [--batch B] [--steps K]\n"
	    "           [--repeat R] [-H HOSTS [--ssh CMD]] [--master ADDR:PORT]\n"
	    "           [--iface IF] [--experts E] [--optimizer sgd|adamw]\n"
	    "           [--csv|--table]\n"
	    "       %s fit [-N WORLD | -H HOSTS [--ssh CMD]] [--arch A --dims D]\n"
	    "           [-b MIN] [-e MAX] -o COST.json\n"
	    "       %s plan --cost COST.json --hosts N [--ranks-per-host L]\n"
	    "           [--arch A --dims D] [--batch B] [--top K]\n"
	    "           [--mem-per-rank BYTES] [--mesh D,T,P] [--validate]\n"
	    "           [--optimizer sgd|adamw]\n"
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

/* dp's sync options: their values checked as collx-dp checks them, and
 * passed on as given; --precision's. 0 when c was none of them. */
static int
sync_option(struct bench_opts *o, int c, const char *a)
{
	struct bench_dp *d = &o->dp;
	const char **to = c == DPOPT_WIRE ? &d->wire : c == DPOPT_POWERSGD ?
	    &d->powersgd : c == DPOPT_POWERSGD_START ? &d->powersgd_start :
	    c == DPOPT_SYNC_EVERY ? &d->sync_every : c == DPOPT_OUTER_LR ?
	    &d->outer_lr : c == DPOPT_OUTER_MOMENTUM ? &d->outer_momentum :
	    NULL;

	if (c == PRECISION_OPT) {
		d->precisions = check_precisions(a);
		return 1;
	}
	if (to == NULL || !dpopt_option(&o->dpo, c, a))
		return 0;
	*to = a;
	return 1;
}

static void
parse_args(struct bench_opts *o, int argc, char **argv)
{
	char e[COLLX_ERRLEN];
	int c, r;

	while ((c = getopt_long(argc, argv, BENCH_OPTS_SHORTOPTS, longopts,
	    NULL)) != -1) {
		if (c == CLI_OPT_MASTER)	/* as given, not from the environment */
			o->dp.master = optarg;
		if (c == CLI_OPT_IFACE)
			o->dp.iface = optarg;
		if (c == BENCH_OPT_EXPORT) {	/* --export FORMAT DIR */
			if (bench_opts_export(o, optarg, optind < argc ?
			    argv[optind] : NULL, e, sizeof e) < 0)
				cli_usage_error("%s", e);
			optind++;
			continue;
		}
		if (cli_std_option(c, usage) || cli_group_getopt(&o->g, c, optarg) ||
		    sync_option(o, c, optarg))
			continue;
		if ((r = bench_opts_option(o, c, optarg, e, sizeof e)) < 0)
			cli_usage_error("%s", e);
		if (r == 0)
			cli_option_error(argc, argv, BENCH_OPTS_SHORTOPTS);
	}
	if (bench_opts_sub(o, argc - optind, argv + optind, e, sizeof e) < 0)
		cli_usage_error("%s", e);
}

/* The progress line: stderr a terminal, not -q. */
static int
progress(void)
{
	return !cli_quiet && isatty(STDERR_FILENO);
}

/* CSV unless a terminal, --csv and --table overriding. */
static int
out_csv(const struct bench_opts *o)
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
join_group(const struct bench_opts *o, const struct prog_job *job)
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
run_coll(struct bench_opts *o)
{
	enum coll_algo algos[BENCH_OPTS_MAXALGOS];
	struct bench_out out = { .csv = out_csv(o), .file = o->timing };
	struct prog_job job;
	char e[COLLX_ERRLEN];
	const char *fault = getenv("COLLX_BENCH_FAULT");
	struct comm *c;
	long wrong;
	int me, nalgo, rc;

	static struct bench_cost cost;

	if ((nalgo = bench_opts_algos(o, algos, e, sizeof e)) < 0)
		cli_usage_error("%s", e);
	if (fault != NULL && *fault)
		o->coll.fault = cli_parse_long("COLLX_BENCH_FAULT", fault, 0, 1L << 40);
	if (o->cost != NULL && bench_cost_read(&cost, o->cost, e, sizeof e) < 0)
		cli_die(CLI_EXIT_DATA, "%s", e);
	if (o->cost != NULL) {
		o->coll.cost = &cost;
		o->coll.cost_tcp = o->g.no_shm;
	}
	if (bench_opts_check_world(o, o->g.world, e, sizeof e) < 0)
		cli_usage_error("%s", e);
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
run_p2p(struct bench_opts *o)
{
	struct bench_out out = { .csv = out_csv(o), .file = o->timing };
	struct prog_job job;
	char e[COLLX_ERRLEN];
	struct comm *c;
	int rc;

	if (bench_opts_check_world(o, o->g.world, e, sizeof e) < 0)
		cli_usage_error("%s", e);
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
run_train(struct bench_opts *o, int (*sweep)(struct bench_out *,
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
run_plan(struct bench_opts *o)
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

/* bench_opts' reach into lib/prog: dp's sync options as collx-dp
 * checks them (no checkpoints). */
static int
sync_check(struct dp_opts *dpo, char *err, size_t errlen)
{
	return dpopt_check(dpo, 0, err, errlen);
}

/* ... and into lib/launch: a collx-run -H list's hosts and ranks. */
static int
host_slots(const char *list, int *hosts, int *slots, char *err,
    size_t errlen)
{
	struct launch_hosts h;
	int rc;

	memset(&h, 0, sizeof h);
	if ((rc = launch_hosts_add_list(&h, list, err, errlen)) == 0) {
		*hosts = h.n;
		*slots = launch_hosts_slots(&h, 0);
	}
	launch_hosts_free(&h);
	return rc;
}

int
main(int argc, char **argv)
{
	struct bench_opts o;
	int rc;
	char self[4096], *slash, e[COLLX_ERRLEN];
	ssize_t n;

	bench_opts_init(&o);
	o.sync_check = sync_check;
	o.host_slots = host_slots;
	cli_init(argv[0]);
	cli_group_defaults(&o.g);
	parse_args(&o, argc, argv);
	if (bench_opts_check(&o, e, sizeof e) < 0)
		cli_usage_error("%s", e);
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
