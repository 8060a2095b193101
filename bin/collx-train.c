/* collx-train: composed parallelism: one model trained by D data-parallel
 * replicas of a P-stage pipeline whose stages are sharded over T-way
 * tensor-parallel groups, laid out by lib/par/mesh.c and trained by the
 * pipeline runner (lib/par/pipe.c) over tp_stage stages, its gradients
 * summed over each stage's replicas; or --print-mesh, the layout alone. */
#include <inttypes.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "comm/coll.h"
#include "comm/comm.h"
#include "nn/nn.h"
#include "par/mesh.h"
#include "par/pipe.h"
#include "par/pipe_sched.h"
#include "par/tp_stage.h"
#include "prog/join.h"
#include "prog/pipe_report.h"
#include "prog/progress.h"
#include "prog/trainopt.h"
#include "tensor/tensor.h"

enum {
	OPT_DATA = CLI_OPT_PROGRAM, OPT_DP, OPT_TP, OPT_PP, OPT_MICRO,
	OPT_SCHEDULE, OPT_SPLIT, OPT_TRACE, OPT_PRINT, OPT_PER_HOST,
	OPT_VIRTUAL
};

static const struct option longopts[] = {
	CLI_STD_LONGOPTS,
	TRAINOPT_FILE_LONGOPTS,
	{ "data", 1, 0, OPT_DATA }, { "input", 1, 0, 'i' },
	{ "targets", 1, 0, 't' },
	{ "dp", 1, 0, OPT_DP }, { "tp", 1, 0, OPT_TP }, { "pp", 1, 0, OPT_PP },
	{ "microbatches", 1, 0, OPT_MICRO }, { "schedule", 1, 0, OPT_SCHEDULE },
	{ "split", 1, 0, OPT_SPLIT },
	{ "virtual", 1, 0, OPT_VIRTUAL },
	TRAINOPT_STEPS_LONGOPTS,
	{ "trace", 1, 0, OPT_TRACE }, { "print-mesh", 0, 0, OPT_PRINT },
	{ "ranks-per-host", 1, 0, OPT_PER_HOST },
	TRAINOPT_RUN_LONGOPTS,
	TRAINOPT_OPTIM_LONGOPTS,
	TRAINOPT_CKPT_LONGOPTS,
	DPOPT_LONGOPTS,
	CLI_GROUP_LONGOPTS,
	{ 0, 0, 0, 0 }
};

#define AXIS_UNSET (-2)

struct opts {
	struct trainopt_common c;
	const char *data, *targets, *trace, *split;
	int dp, tp, pp, per_host, print;
	long micro, virt;	/* virt: interleaved's chunks per stage */
	enum pipe_sched_kind sched;
	struct trainopt_optim optim;
	struct trainopt_ckpt ckpt;
	struct dp_opts dpo;
	char *owned[4];
	struct cli_group g;
};

static _Noreturn void
usage(void)
{
	printf("usage: %s (-m MODEL.safetensors | --resume CKPT.safetensors)\n"
	    "           (--data TEXT | -i X.npy -t Y.npy) --batch B\n"
	    "           (--steps K | --epochs E) [--dp D] [--tp T] [--pp P]\n"
	    "           [--microbatches M] [--schedule S] [options]\n"
	    "       %s --print-mesh [--world-size W] [--dp D] [--tp T] "
	    "[--pp P]\n"
	    "           [--ranks-per-host N]\n\n"
	    "Composed parallelism: D data-parallel replicas of a P-stage "
	    "pipeline, each\nstage sharded over T ranks (D*T*P ranks; "
	    "rank = (pp*D + dp)*T + tp).\n\n"
	    "  -m, --model F         gpt, or an mlp or block stack "
	    "(layers.{i}.*)\n"
	    "  --data F              gpt: token file; mlp/block: X rows\n"
	    "  -i, --input F         the same as --data\n"
	    "  -t, --targets F       mlp/block: Y rows\n"
	    "  --dp D                data-parallel replicas\n"
	    "  --tp T                tensor-parallel shards of each stage (1)\n"
	    "  --pp P                pipeline stages (1); one of D, T, P may "
	    "be -1,\n"
	    "                        what the others leave (D is -1 unless "
	    "given);\n"
	    "                        P above 1: rank 0 ends with the "
	    "pipeline's bubble\n"
	    "  --microbatches M      micro-batches per replica and step (1)\n"
	    "  --schedule S          gpipe, 1f1b (default), zb-h1 or interleaved\n"
	    "  --virtual V           interleaved: V chunks per stage (2), each\n"
	    "                        sharded over the stage's TP group\n"
	    "  --split L1,L2,...     layers per stage, P*V when interleaved\n"
	    "                        (default: balanced by parameter count)\n"
	    "  --zero STAGE          ZeRO on the DP axis: 1 shards the "
	    "optimizer state\n"
	    "                        over the replicas, 2 the reduced "
	    "gradients too (0)\n"
	    DPOPT_SLOW_HELP
	    "  --batch B             global batch, split over the replicas\n"
	    "  --steps K             train K steps\n"
	    "  --epochs E            train ceil(E * samples / B) steps\n"
	    "  --lr LR               learning rate (sgd 0.01, adamw 0.001)\n"
	    "  --optimizer NAME      sgd (default) or adamw\n"
	    "  --momentum M          sgd momentum (0)\n"
	    "  --weight-decay WD     weight decay (sgd 0, adamw 0.01)\n"
	    "  --betas B1,B2         adamw betas (0.9,0.999)\n"
	    "  --eps E               adamw epsilon (1e-8)\n"
	    "  -o, --output F        rank 0 writes the trained model, whole\n"
	    "  --loss-csv F          rank 0 writes step,epoch,loss,tokens,"
	    "seconds,\n"
	    "                        tokens_per_s,bytes_sent\n"
	    "  --timing F            append timing rows (with axis,pp,dp,tp "
	    "and the\n"
	    "                        stage's bubble,bubble_theory,"
	    "peak_act_bytes)\n"
	    "  --trace F.json        rank 0 writes a Chrome trace of replica "
	    "0,\n"
	    "                        a track per stage\n"
	    TRAINOPT_CKPT_HELP
	    "  --print-mesh          print each rank's place and the groups, "
	    "and exit\n"
	    "  --ranks-per-host N    --print-mesh: hosts of N consecutive "
	    "ranks\n"
	    "                        (default: one host)\n"
	    "  --threads N           BLAS threads per rank (1)\n"
	    "  -v, --verbose         a line per step on stderr (without -v, a\n"
	    "                        terminal gets one live progress line); "
	    "rank 0\n"
	    "                        ends with a summary line either way\n"
	    "  -q, --quiet           no step lines, no progress, no summaries\n"
	    "  -h, --help            this help\n"
	    "  -V, --version         version\n"
	    "%s"
	    "Exit status: 0 ok, 1 runtime failure, 2 usage, 3 bad input (a "
	    "mesh that\ncannot work too).\n",
	    cli_progname, cli_progname, cli_group_help);
	cli_close_stdout();
	exit(CLI_EXIT_OK);
}

/* --dp, --tp, --pp: a positive size or -1. */
static int
axis_value(const char *opt, const char *a)
{
	long v = cli_parse_long(opt, a, -1, 1 << 20);

	if (v == 0)
		cli_usage_error("%s: want a positive size or -1, not 0", opt);
	return (int)v;
}

/* The options of collx-train's own; 0 when c is not one of them. */
static int
own_option(void *ctx, int c, const char *a)
{
	struct opts *o = ctx;

	switch (c) {
	case OPT_DATA:
	case 'i': o->data = a; break;
	case 't': o->targets = a; break;
	case OPT_DP: o->dp = axis_value("--dp", a); break;
	case OPT_TP: o->tp = axis_value("--tp", a); break;
	case OPT_PP: o->pp = axis_value("--pp", a); break;
	case OPT_MICRO:
		o->micro = cli_parse_long("--microbatches", a, 1, 1 << 20);
		break;
	case OPT_SCHEDULE:
		if (pipe_sched_parse(a, &o->sched) < 0 ||
		    o->sched == PIPE_SCHED_FILE)
			cli_usage_error("--schedule: want gpipe, 1f1b, "
			    "zb-h1 or interleaved, not '%s'", a);
		break;
	case OPT_VIRTUAL:
		o->virt = cli_parse_long("--virtual", a, 1, 64);
		break;
	case OPT_SPLIT: o->split = a; break;
	case OPT_TRACE: o->trace = a; break;
	case OPT_PRINT: o->print = 1; break;
	case OPT_PER_HOST:
		o->per_host = (int)cli_parse_long("--ranks-per-host", a, 1,
		    1 << 20);
		break;
	default: return 0;
	}
	return 1;
}

static void
parse_args(struct opts *o, int argc, char **argv)
{
	struct trainopt_parser p = { .usage = usage, .g = &o->g,
	    .common = &o->c, .optim = &o->optim, .ckpt = &o->ckpt,
	    .dpo = &o->dpo, .own = own_option, .ctx = o };

	trainopt_parse(&p, argc, argv, "hVvqm:o:i:t:", longopts);
	/* D takes what T and P leave, unless one of them does */
	if (o->dp == AXIS_UNSET)
		o->dp = o->tp == -1 || o->pp == -1 ? 1 : -1;
	if (o->virt > 0 && o->sched != PIPE_SCHED_INTERLEAVED)
		cli_usage_error("--virtual goes with --schedule interleaved");
	if (o->virt == 0)
		o->virt = o->sched == PIPE_SCHED_INTERLEAVED ? 2 : 1;
}

/* The mesh over world ranks, or exit 3 with the numbers. */
static void
mesh_or_die(const struct opts *o, struct mesh *m, int world)
{
	char e[COLLX_ERRLEN];

	if (mesh_resolve(m, o->dp, o->tp, o->pp, world, e, sizeof(e)) < 0)
		cli_die_rank(CLI_EXIT_DATA, "%s", e);
}

/* --print-mesh: no group, the world size from --world-size. */
static _Noreturn void
print_mesh(const struct opts *o)
{
	struct mesh m;

	mesh_or_die(o, &m, o->g.world > 0 ? o->g.world : 1);
	printf("# mesh: dp %d x tp %d x pp %d = %d ranks\n", m.dp, m.tp,
	    m.pp, m.world);
	mesh_print(stdout, &m, o->per_host);
	cli_close_stdout();
	exit(CLI_EXIT_OK);
}

/* Per-step output: the progress report, the timing rows, and rank 0's
 * bytes sent per step for the loss CSV; at the end, the pipeline's
 * bubble. */
struct report {
	const struct opts *o;
	struct cli_timing *timing;
	struct progress pr;
	struct prog_pipe_report pipe;
	struct mesh_coord at;
	int rank, world;
	struct mesh_groups *grp;
	uint64_t sent;		/* bytes sent by the step before */
	uint64_t axis[3];	/* bytes sent so far over pp, dp, tp */
	uint64_t axis_step[3];	/* of them, in the last step */
	uint64_t *bytes;	/* per step, grown with the steps */
	long capbytes;
};

/* Bytes sent over each axis, the last step's and in all, and their sum. */
static uint64_t
bytes_sent(struct report *r)
{
	struct comm *g[3] = { r->grp->pp, r->grp->dp, r->grp->tp };
	uint64_t sum = 0, now;

	for (int a = 0; a < 3; a++) {
		now = comm_bytes_sent(g[a]);
		r->axis_step[a] = now - r->axis[a];
		r->axis[a] = now;
		sum += now;
	}
	return sum;
}

/* count: the replica's samples (compute, step) or the elements moved
 * (bytes then theirs). Every row carries the stage's bubble in the step,
 * as collx-pipe's do. */
static void
timing_row(struct report *r, const char *op, const char *algo,
    const char *axis, long step, double seconds, size_t count, size_t bytes,
    const struct pipe_stat *st)
{
	char extra[160], e[COLLX_ERRLEN];
	int n;
	struct cli_timing_row row = {
		.program = cli_progname, .op = op, .algo = algo,
		.rank = r->rank, .world = r->world, .dtype = "f32",
		.count = count, .bytes = bytes, .iter = (int)step,
		.seconds = seconds, .extra = extra
	};

	n = snprintf(extra, sizeof(extra), "%s,%d,%d,%d,", axis, r->at.pp,
	    r->at.dp, r->at.tp);
	prog_pipe_columns(&r->pipe, st, extra + n, sizeof(extra) - (size_t)n);
	if (cli_timing_write(r->timing, &row, e, sizeof(e)) < 0)
		cli_die(CLI_EXIT_RUNTIME, "%s", e);
}

static void
step_timing(struct report *r, const struct train_step *s,
    const struct pipe_stat *st)
{
	const char *sched = pipe_sched_name(r->o->sched);
	size_t f = sizeof(float), b = (size_t)r->o->c.batch;

	timing_row(r, "forward", sched, "pp", s->step, st->fwd, b, 0, st);
	timing_row(r, "backward", sched, "pp", s->step, st->bwd, b, 0, st);
	timing_row(r, "send", sched, "pp", s->step, st->send, st->sent / f,
	    st->sent, st);
	timing_row(r, "recv", sched, "pp", s->step, st->recv, st->recvd / f,
	    st->recvd, st);
	if (comm_size(r->grp->dp) > 1)
		timing_row(r, r->o->dpo.zero > 0 ? "reduce_scatter" : "allreduce",
		    coll_algo_name(COLL_AUTO), "dp",
		    s->step, st->dp, st->dp_sent / f, st->dp_sent, st);
	if (comm_size(r->grp->tp) > 1)
		timing_row(r, "allreduce", coll_algo_name(COLL_RING), "tp",
		    s->step, st->tp, st->tp_sent / f, st->tp_sent, st);
	timing_row(r, "step", sched, "-", s->step, st->wall, b, 0, st);
}

static void
on_step(void *ctx, const struct train_step *s, const struct pipe_stat *st)
{
	struct report *r = ctx;
	uint64_t now = bytes_sent(r), *b;

	if ((b = train_grow(r->bytes, &r->capbytes, s->step,
	    sizeof(*b))) == NULL)
		cli_die(CLI_EXIT_RUNTIME, "out of memory");
	r->bytes = b;
	b[s->step] = now - r->sent;
	r->sent = now;
	progress_step(&r->pr, s);
	if (r->pr.lines)
		fprintf(stderr, "%s: step %ld epoch %ld loss %.6f %.1f ms %.0f "
		    "%s/s (compute %.1f ms, pipeline and allreduces %.1f ms; "
		    "sent pp %" PRIu64 " dp %" PRIu64 " tp %" PRIu64 " B)\n",
		    cli_progname, s->step, s->epoch, s->loss, s->seconds * 1e3,
		    s->seconds > 0 ? s->tokens / s->seconds : 0, r->pr.unit,
		    s->compute * 1e3, s->comm * 1e3, r->axis_step[0],
		    r->axis_step[1], r->axis_step[2]);
	if (r->timing != NULL)
		step_timing(r, s, st);
}

/* -v: every rank's optimizer state and the reduced gradients it keeps
 * (the last step's; ZeRO shards them over the replicas). */
static void
report_mem(const struct report *r, const struct pipe_result *res, long last)
{
	if (!cli_verbose || cli_quiet || last < 0)
		return;
	fprintf(stderr, "%s: rank %d: zero %d: optimizer state %zu bytes, "
	    "reduced gradients %zu bytes\n", cli_progname, r->rank, r->o->dpo.zero,
	    res->stat[last].optim_bytes, res->stat[last].grad_bytes);
}

static void
write_outputs(const struct opts *o, const struct nn_model *m,
    struct pipe_result *res, const struct report *r, long from)
{
	char e[COLLX_ERRLEN], *path;
	long k;

	if (o->c.out != NULL) {
		path = cli_subst(o->c.out, 0, r->world);
		if (trainopt_model_save(path, m, e, sizeof(e)) < 0)
			cli_die(CLI_EXIT_RUNTIME, "%s", e);
		free(path);
	}
	if (o->c.loss_csv != NULL) {
		for (k = from; k < o->c.steps; k++)
			res->steps[k].bytes_sent = r->bytes[k];
		path = cli_subst(o->c.loss_csv, 0, r->world);
		if (trainopt_loss_csv_write_sent(path, res->steps + from,
		    o->c.steps - from, e, sizeof(e)) < 0)
			cli_die(CLI_EXIT_RUNTIME, "%s", e);
		free(path);
	}
	if (o->trace != NULL) {
		path = cli_subst(o->trace, 0, r->world);
		if (pipe_trace_write(path, res, comm_size(r->grp->pp), e,
		    sizeof(e)) < 0)
			cli_die(CLI_EXIT_RUNTIME, "%s", e);
		free(path);
	}
}

/* Ranks must agree on the mesh and on everything that shapes the
 * messages, and on the optimizer every replica steps with. */
static void
job_declare(struct prog_job *job, const struct opts *o, const struct mesh *m,
    const struct pipe_cfg *cfg)
{
	prog_job_init(job, "collx-train");
	prog_job_add(job, "--dp", "%d", m->dp);
	prog_job_add(job, "--tp", "%d", m->tp);
	prog_job_add(job, "--pp", "%d", m->pp);
	prog_job_add(job, "--schedule", "%s", pipe_sched_name(cfg->sched));
	prog_job_add(job, "--microbatches", "%d", cfg->micro);
	prog_job_add(job, "--virtual", "%d", cfg->chunks);
	prog_job_add(job, "--batch", "%ld", cfg->batch);
	prog_job_add(job, "--steps", "%ld", cfg->steps);
	prog_job_add(job, "--split", "%s", o->split ? o->split : "balanced");
	trainopt_optim_agree(job, &cfg->optim);
	prog_job_flag(job, "--trace", cfg->trace);
	prog_job_flag(job, "--checkpoint", o->ckpt.path != NULL);
	prog_job_add(job, "--checkpoint-every", "%ld", cfg->ckpt_every);
	prog_job_add(job, "--resume-step", "%ld", cfg->resume != NULL ?
	    cfg->resume->step : 0L);
	dpopt_agree(job, &cfg->dpo, 0);
}

static void
train(struct opts *o, const struct mesh *mesh, struct nn_model *m,
    const struct train_data *d, struct pipe_cfg *cfg)
{
	struct report r = { .o = o, .rank = o->g.rank, .world = o->g.world };
	struct mesh_groups grp;
	struct pipe_result res;
	struct comm *c;
	enum train_err kind;
	struct prog_job job;
	char e[COLLX_ERRLEN], *tpath = NULL;
	long from = cfg->resume != NULL ? cfg->resume->step : 0;
	int code;

	if (from > cfg->steps)	/* resumed past the end: no steps */
		from = cfg->steps;
	mesh_coord(mesh, r.rank, &r.at);
	/* rank 0's pipeline: replica 0's, its stages' shard 0 */
	if (prog_pipe_report_init(&r.pipe, cfg, mesh->pp, mesh->dp > 1 ||
	    mesh->tp > 1 ? "replica 0, shard 0" : NULL, e, sizeof(e)) < 0)
		cli_die(CLI_EXIT_RUNTIME, "%s", e);
	if (o->c.timing != NULL) {
		tpath = cli_subst(o->c.timing, r.rank, r.world);
		if (cli_timing_open(&r.timing, tpath, "axis,pp,dp,tp,"
		    PROG_PIPE_COLUMNS, e, sizeof(e)) < 0)
			cli_die(CLI_EXIT_RUNTIME, "%s", e);
	}
	job_declare(&job, o, mesh, cfg);
	if ((code = prog_join(&c, &o->g, &job, e, sizeof(e))) != 0)
		cli_die(code, "%s", e);
	if (mesh_split(mesh, c, &grp, e, sizeof(e)) < 0)
		cli_die(CLI_EXIT_RUNTIME, "rank %d: %s", r.rank, e);
	r.grp = &grp;
	r.sent = bytes_sent(&r);
	cfg->dp = grp.dp;
	cfg->tp = grp.tp;
	progress_start(&r.pr, r.rank == 0, m->dims.arch == NN_MLP ? "samples" :
	    "tokens", from, cfg->steps - from);
	if (pipe_train(m, d, grp.pp, cfg, on_step, &r, &res, &kind, e,
	    sizeof(e)) < 0)
		cli_die((int)kind, "%s", e);
	progress_end(&r.pr);
	report_mem(&r, &res, from < cfg->steps ? cfg->steps - 1 : -1);
	if (r.pr.summary)
		fprintf(stderr, "%s: rank 0 sent pp %" PRIu64 " dp %" PRIu64
		    " tp %" PRIu64 " bytes\n", cli_progname, r.axis[0],
		    r.axis[1], r.axis[2]);
	if (r.rank == 0)
		write_outputs(o, m, &res, &r, from);
	if (r.rank == 0 && mesh->pp > 1 && !cli_quiet)
		prog_pipe_summary(&r.pipe, &res);
	if (cli_timing_close(r.timing, e, sizeof(e)) < 0)
		cli_die(CLI_EXIT_RUNTIME, "%s", e);
	mesh_groups_close(&grp);
	comm_close(c);
	pipe_result_free(&res);
	free(r.bytes);
	free(tpath);
}

/* {rank} and {world} in the input paths (outputs: at write time). */
static void
subst_paths(struct opts *o)
{
	const char **p[] = { &o->c.model, &o->data, &o->targets,
	    &o->ckpt.resume };

	trainopt_subst_paths(p, o->owned, sizeof(p) / sizeof(p[0]), &o->g);
}

/* Data parallelism for slow links: collx-dp's refusals, and state that
 * collx-train's checkpoints do not keep. */
static void
check_slow(struct opts *o)
{
	long h = o->dpo.sync_every;

	dpopt_check(&o->dpo);
	if (h > 1 && o->ckpt.every % h != 0)
		cli_usage_error("--checkpoint-every %ld is no multiple of "
		    "--sync-every %ld (a checkpoint is taken where the replicas "
		    "have synced)", o->ckpt.every, h);
}

/* The slow links' state in checkpoints, for the mesh: stages of one TP
 * rank, and --wire int8's error feedback once per parameter. */
static void
check_slow_mesh(const struct opts *o, const struct mesh *mesh,
    const struct nn_model *m)
{
	const struct dp_opts *s = &o->dpo;
	const char *opt = s->sync_every > 0 ? "--sync-every" :
	    s->wire == DP_WIRE_INT8 ? "--wire int8" : NULL;

	if (opt == NULL || (o->ckpt.path == NULL && o->ckpt.resume == NULL))
		return;
	if (mesh->tp > 1)
		cli_usage_error("%s with --tp %d and --checkpoint or --resume: "
		    "checkpoints keep its state for stages of one TP rank only",
		    opt, mesh->tp);
	if (s->wire == DP_WIRE_INT8 && m->dims.arch == NN_GPT && mesh->pp > 1)
		cli_usage_error("--wire int8 with --pp %d on a gpt and "
		    "--checkpoint or --resume: the tied embedding's two stages "
		    "keep their own error feedback, checkpoints one", mesh->pp);
}

static void
check_args(struct opts *o)
{
	if ((o->c.model == NULL && o->ckpt.resume == NULL) || o->data == NULL)
		cli_usage_error("-m MODEL (or --resume) and --data (or -i) "
		    "are required");
	if (o->c.batch < 1)
		cli_usage_error("--batch B is required");
	if (o->ckpt.every > 0 && o->ckpt.path == NULL)
		cli_usage_error("--checkpoint-every goes with --checkpoint");
	if (o->c.steps >= 0 && o->c.epochs > 0)
		cli_usage_error("give one of --steps and --epochs");
	if (o->c.steps < 0 && o->c.epochs <= 0)
		cli_usage_error("give --steps K or --epochs E");
	check_slow(o);
}

/* The mesh for this model, refused on every rank alike (exit 3) before
 * any rank talks to another. */
static void
mesh_for_model(const struct opts *o, struct mesh *mesh,
    const struct nn_model *m)
{
	char e[COLLX_ERRLEN];

	mesh_or_die(o, mesh, o->g.world);
	if (mesh_check_model(mesh, m, e, sizeof(e)) < 0)
		cli_die_rank(CLI_EXIT_DATA, "%s", e);
	if (o->micro > o->c.batch / mesh->dp)
		cli_usage_error("--microbatches %ld: more than the %ld samples "
		    "of the smallest replica's share of --batch %ld over %d",
		    o->micro, o->c.batch / mesh->dp, o->c.batch, mesh->dp);
}

int
main(int argc, char **argv)
{
	struct opts o = { .c.steps = -1, .c.threads = 1, .micro = 1,
	    .dp = AXIS_UNSET, .tp = 1, .pp = 1, .sched = PIPE_SCHED_1F1B,
	    .dpo = DP_OPTS_DEFAULTS };
	struct pipe_cfg cfg = { 0 };
	struct mesh mesh;
	struct nn_model m;
	struct train_data d;
	struct ckpt_state st = { 0 };
	int *first, stages;
	char e[COLLX_ERRLEN], *cpath = NULL;

	cli_init(argv[0]);
	cli_group_defaults(&o.g);
	parse_args(&o, argc, argv);
	if (o.print)
		print_mesh(&o);
	cli_group_finish(&o.g);
	check_args(&o);
	if (trainopt_optim_config(&o.optim, &cfg.optim, e, sizeof(e)) < 0)
		cli_usage_error("%s", e);
	subst_paths(&o);
	nn_set_threads(o.c.threads);
	if (trainopt_model_start(&o.ckpt, o.c.model, &m, &st, e, sizeof(e)) < 0)
		cli_die_rank(CLI_EXIT_DATA, "%s", e);
	mesh_for_model(&o, &mesh, &m);
	check_slow_mesh(&o, &mesh, &m);
	if (o.dpo.powersgd > 0 && mesh.tp > 1)
		cli_usage_error("--powersgd and --tp %d: PowerSGD compresses "
		    "whole matrices, not a TP rank's shards", mesh.tp);
	if (trainopt_targets_check(&m, o.targets, "-t (--targets)", e,
	    sizeof(e)) < 0)
		cli_usage_error("%s", e);
	/* interleaved: P*V virtual stages, chunk c of stage j is c*P + j */
	cfg.chunks = (int)o.virt;
	stages = mesh.pp * cfg.chunks;
	first = cli_calloc((size_t)stages + 1, sizeof(int));
	if (pipe_split(&m, stages, o.split, first, e, sizeof(e)) < 0)
		cli_usage_error("%s", e);
	for (int j = 0; j < stages; j++)
		if (tp_stage_check(&m, first[j], first[j + 1], mesh.tp, e,
		    sizeof(e)) < 0)
			cli_die_rank(CLI_EXIT_DATA, "stage %d: %s", j, e);
	/* pipe.c's chunks_init refuses it too, after the group forms */
	if (cfg.chunks > 1 && mesh.tp > 1 && mesh.pp == 1 &&
	    m.dims.arch == NN_GPT)
		cli_die_rank(CLI_EXIT_DATA, "mesh: an interleaved gpt under "
		    "--tp %d needs --pp 2 or more (one stage would hold both "
		    "ends of the tied embedding)", mesh.tp);
	if (train_data_load(&d, &m, o.data, o.targets, e, sizeof(e)) < 0)
		cli_die_rank(CLI_EXIT_DATA, "%s", e);
	if (trainopt_resume_check(&o.ckpt, &st, o.c.batch, e, sizeof(e)) < 0)
		cli_die_rank(CLI_EXIT_DATA, "%s", e);
	o.c.steps = o.c.epochs > 0 ? train_epoch_steps(d.n, o.c.batch,
	    o.c.epochs) : o.c.steps;
	cfg.sched = o.sched;
	cfg.micro = (int)o.micro;
	cfg.batch = o.c.batch;
	cfg.steps = o.c.steps;
	cfg.first = first;
	cfg.trace = o.trace != NULL;
	if (o.ckpt.path != NULL)
		cfg.ckpt_path = cpath = cli_subst(o.ckpt.path, 0, o.g.world);
	cfg.ckpt_every = o.ckpt.every;
	cfg.resume = o.ckpt.resume != NULL ? &st : NULL;
	cfg.dpo = o.dpo;
	train(&o, &mesh, &m, &d, &cfg);
	train_data_free(&d);
	nn_model_free(&m);
	ckpt_state_free(&st);
	free(cpath);
	free(first);
	cli_group_free(&o.g);
	for (size_t i = 0; i < sizeof(o.owned) / sizeof(o.owned[0]); i++)
		free(o.owned[i]);
	cli_close_stdout();
	return CLI_EXIT_OK;
}
