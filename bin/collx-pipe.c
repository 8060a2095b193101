/* collx-pipe: pipeline-parallel training of an mlp or block stack, or a
 * gpt, with GPipe, 1F1B, interleaved 1F1B (V chunks of layers per rank)
 * or ZB-H1 schedules or one from a file; or
 * --print-schedule, the clock table of a schedule. The training itself is
 * lib/par/pipe.c's. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "comm/comm.h"
#include "nn/nn.h"
#include "par/pipe.h"
#include "par/pipe_sched.h"
#include "prog/join.h"
#include "prog/pipe_report.h"
#include "prog/progress.h"
#include "prog/trainopt.h"
#include "tensor/tensor.h"

enum {
	OPT_MICRO = CLI_OPT_PROGRAM, OPT_SCHEDULE, OPT_SCHEDULE_FILE, OPT_SPLIT,
	OPT_TRACE, OPT_PRINT, OPT_VIRTUAL, OPT_FORMAT
};

static const struct option longopts[] = {
	CLI_STD_LONGOPTS,
	TRAINOPT_FILE_LONGOPTS,
	{ "input", 1, 0, 'i' }, { "targets", 1, 0, 't' },
	{ "microbatches", 1, 0, OPT_MICRO }, { "schedule", 1, 0, OPT_SCHEDULE },
	{ "schedule-file", 1, 0, OPT_SCHEDULE_FILE },
	{ "virtual", 1, 0, OPT_VIRTUAL },
	TRAINOPT_STEPS_LONGOPTS, { "split", 1, 0, OPT_SPLIT },
	{ "trace", 1, 0, OPT_TRACE }, { "print-schedule", 0, 0, OPT_PRINT },
	{ "format", 1, 0, OPT_FORMAT },
	TRAINOPT_RUN_LONGOPTS,
	TRAINOPT_OPTIM_LONGOPTS,
	TRAINOPT_CKPT_LONGOPTS,
	CLI_GROUP_LONGOPTS,
	{ 0, 0, 0, 0 }
};

struct opts {
	struct trainopt_common c;
	const char *data, *targets, *trace, *split, *sched_file;
	long micro, virt;	/* virt: V, interleaved's chunks per rank */
	int print, sched_given, csv;	/* csv: --format csv */
	enum pipe_sched_kind sched;
	struct trainopt_optim optim;
	struct trainopt_ckpt ckpt;
	char *owned[4];
	struct cli_group g;
};

static _Noreturn void
usage(void)
{
	printf("usage: %s (-m MODEL.safetensors | --resume CKPT.safetensors)\n"
	    "           -i X.npy [-t Y.npy] --microbatches M\n"
	    "           [--schedule gpipe|1f1b|zb-h1 | --schedule interleaved\n"
	    "           [--virtual V] | --schedule-file F.csv]\n"
	    "           [--steps K | --epochs E] [options]\n"
	    "       %s --print-schedule --microbatches M [--world-size W]\n"
	    "           [--schedule S [--virtual V] | --schedule-file F.csv]\n"
	    "           [--format table|csv]\n\n"
	    "Pipeline-parallel training: rank j runs stage j of the model's layers.\n\n"
	    "  -m, --model F         mlp or block stack (layers.{i}.*), or a gpt\n"
	    "  -i, --input F         mlp/block: X rows; gpt: token file\n"
	    "  -t, --targets F       mlp/block: Y rows\n"
	    "  --microbatches M      micro-batches per step (need not divide B)\n"
	    "  --schedule S          gpipe, 1f1b (default) or zb-h1 (backward split\n"
	    "                        into input and weight passes, at most W\n"
	    "                        micro-batches held per stage) or interleaved\n"
	    "  --virtual V           interleaved: V chunks of layers per rank (2);\n"
	    "                        chunk c of rank j is stage c*W+j of W*V\n"
	    "  --schedule-file F     each rank's passes from a CSV file of rows\n"
	    "                        rank,slot,action (F<i>, B<i>, W<i>; :<chunk>\n"
	    "                        after it for a virtual stage), checked first\n"
	    "  --batch B             global batch (default: all of X)\n"
	    "  --steps K             train K steps (default 1)\n"
	    "  --epochs E            train ceil(E * samples / B) steps\n"
	    "  --split L1,L2,...     layers per stage, W*V of them when interleaved\n"
	    "                        (default: balanced by parameter count)\n"
	    "  --lr LR               learning rate (sgd 0.01, adamw 0.001)\n"
	    "  --optimizer NAME      sgd (default) or adamw\n"
	    "  --momentum M          sgd momentum (0)\n"
	    "  --weight-decay WD     weight decay (sgd 0, adamw 0.01)\n"
	    "  --betas B1,B2         adamw betas (0.9,0.999)\n"
	    "  --eps E               adamw epsilon (1e-8)\n"
	    "  -o, --output F        rank 0 writes the trained model, whole\n"
	    "  --loss-csv F          rank 0 writes step,epoch,loss,tokens,seconds,\n"
	    "                        tokens_per_s\n"
	    "  --timing F            append per-stage timing rows (with bubble)\n"
	    "  --trace F.json        rank 0 writes a Chrome trace, a track per stage\n"
	    TRAINOPT_CKPT_HELP
	    "  --print-schedule      print the schedule's clock table and bubble, and\n"
	    "                        exit\n"
	    "  --format F            --print-schedule as a table (default) or as\n"
	    "                        csv, a schedule file for --schedule-file\n"
	    "  --threads N           BLAS threads per rank (1)\n"
	    "  -v, --verbose         a line per step on stderr (without -v, a\n"
	    "                        terminal gets one live progress line); rank 0\n"
	    "                        ends with a summary line either way\n"
	    "  -q, --quiet           no step lines, no progress, no summaries\n"
	    "  -h, --help            this help\n"
	    "  -V, --version         version\n"
	    "%s"
	    "Exit status: 0 ok, 1 runtime failure, 2 usage (a bad --split), 3 bad\n"
	    "input (a bad schedule file too).\n",
	    cli_progname, cli_progname, cli_group_help);
	cli_close_stdout();
	exit(CLI_EXIT_OK);
}

/* The options of collx-pipe's own; 0 when c is not one of them. */
static int
own_option(void *ctx, int c, const char *a)
{
	struct opts *o = ctx;

	switch (c) {
	case 'i': o->data = a; break;
	case 't': o->targets = a; break;
	case OPT_MICRO:
		o->micro = cli_parse_long("--microbatches", a, 1, 1 << 20);
		break;
	case OPT_SCHEDULE:
		if (pipe_sched_parse(a, &o->sched) < 0)
			cli_usage_error("--schedule: want gpipe, 1f1b, "
			    "interleaved or zb-h1, not '%s'", a);
		o->sched_given = 1;
		break;
	case OPT_VIRTUAL:
		o->virt = cli_parse_long("--virtual", a, 1, 64);
		break;
	case OPT_SCHEDULE_FILE: o->sched_file = a; break;
	case OPT_SPLIT: o->split = a; break;
	case OPT_TRACE: o->trace = a; break;
	case OPT_PRINT: o->print = 1; break;
	case OPT_FORMAT:
		if (strcmp(a, "csv") != 0 && strcmp(a, "table") != 0)
			cli_usage_error("--format: want table or csv, not '%s'",
			    a);
		o->csv = strcmp(a, "csv") == 0;
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
	    .own = own_option, .ctx = o };

	trainopt_parse(&p, argc, argv, "hVvqm:o:i:t:", longopts);
	if (o->micro < 1)
		cli_usage_error("--microbatches M is required");
	if (o->csv && !o->print)
		cli_usage_error("--format goes with --print-schedule");
	if (o->sched_file != NULL && o->sched_given)
		cli_usage_error("give one of --schedule and --schedule-file");
	if (o->sched_file != NULL)
		o->sched = PIPE_SCHED_FILE;
	if (o->virt > 0 && o->sched != PIPE_SCHED_INTERLEAVED)
		cli_usage_error("--virtual goes with --schedule interleaved (a "
		    "schedule file names its chunks)");
	if (o->virt == 0)
		o->virt = o->sched == PIPE_SCHED_INTERLEAVED ? 2 : 1;
}

/* The schedule file's tables for W stages (0: the file's ranks); a bad
 * file is bad input, found by every rank before anything runs. */
static void
load_schedule(const struct opts *o, struct pipe_sched *s, int w)
{
	char e[COLLX_ERRLEN];

	if (pipe_sched_file(s, o->sched_file, (int)o->micro, w, e,
	    sizeof(e)) < 0)
		cli_die_rank(CLI_EXIT_DATA, "%s", e);
}

/* --print-schedule: no group, W from --world-size. */
static _Noreturn void
print_schedule(const struct opts *o)
{
	struct pipe_sched s;
	char e[COLLX_ERRLEN];
	int w = o->g.world > 0 ? o->g.world : o->sched_file != NULL ? 0 : 1;

	int v = (int)o->virt;
	char chunks[32] = "";
	double paper;

	if (o->sched_file != NULL)
		load_schedule(o, &s, w);
	else if (pipe_sched_build_virtual(&s, o->sched, (int)o->micro, w, v,
	    e, sizeof(e)) < 0)
		cli_die(CLI_EXIT_RUNTIME, "%s", e);
	if (s.v > 1)
		snprintf(chunks, sizeof(chunks), ", V=%d chunks", s.v);
	if ((paper = pipe_sched_bubble(o->sched, (int)o->micro, w, v)) < 0)
		paper = pipe_sched_table_bubble(&s);	/* no closed form */
	if (o->csv)
		pipe_sched_print_csv(stdout, &s);
	else if (cli_verbose && o->sched_file == NULL)
		printf("# %s, M=%ld micro-batches, W=%d stages%s: %d clocks, "
		    "bubble %s = %.4f\n", pipe_sched_name(o->sched), o->micro, w,
		    chunks, s.nclocks, pipe_sched_formula(o->sched,
		    (int)o->micro, w, v), paper);
	else if (cli_verbose)
		printf("# %s, M=%ld micro-batches, W=%d stages%s: %d clocks\n",
		    o->sched_file, o->micro, s.w, chunks, s.nclocks);
	if (!o->csv)
		pipe_sched_print(stdout, &s);
	pipe_sched_free(&s);
	cli_close_stdout();
	exit(CLI_EXIT_OK);
}

/* Per-step output: the progress report (a line per step with -v, or the
 * live line on a terminal) and the timing rows. */
struct report {
	const struct opts *o;
	struct cli_timing *timing;
	struct progress pr;
	struct prog_pipe_report pipe;
	int rank, world;
};

/* count: the batch's samples (compute, step) or the elements op moved
 * (send, recv; bytes then theirs). */
static void
timing_row(struct report *r, const char *op, long step, double seconds,
    size_t count, size_t bytes, const struct pipe_stat *st)
{
	char extra[160], e[COLLX_ERRLEN];
	int n;
	struct cli_timing_row row = {
		.program = cli_progname, .op = op,
		.algo = pipe_sched_name(r->o->sched), .rank = r->rank,
		.world = r->world, .dtype = "f32", .count = count,
		.bytes = bytes, .iter = (int)step, .seconds = seconds,
		.extra = extra
	};

	n = snprintf(extra, sizeof(extra), "%d,%ld,", r->rank, r->o->micro);
	prog_pipe_columns(&r->pipe, st, extra + n, sizeof(extra) - (size_t)n);
	if (cli_timing_write(r->timing, &row, e, sizeof(e)) < 0)
		cli_die(CLI_EXIT_RUNTIME, "%s", e);
}

static void
on_step(void *ctx, const struct train_step *s, const struct pipe_stat *st)
{
	struct report *r = ctx;
	size_t b = (size_t)r->o->c.batch, f = sizeof(float);

	progress_step(&r->pr, s);
	if (r->pr.lines)
		fprintf(stderr, "%s: step %ld epoch %ld loss %.6f %.1f ms\n",
		    cli_progname, s->step, s->epoch, s->loss, s->seconds * 1e3);
	timing_row(r, "forward", s->step, st->fwd, b, 0, st);
	timing_row(r, "backward", s->step, st->bwd, b, 0, st);
	timing_row(r, "send", s->step, st->send, st->sent / f, st->sent, st);
	timing_row(r, "recv", s->step, st->recv, st->recvd / f, st->recvd, st);
	timing_row(r, "step", s->step, st->wall, b, 0, st);
}

static void
write_outputs(const struct opts *o, const struct nn_model *m,
    const struct pipe_result *res, long from, int world)
{
	char e[COLLX_ERRLEN], *path;

	if (o->c.out != NULL) {
		path = cli_subst(o->c.out, 0, world);
		if (trainopt_model_save(path, m, e, sizeof(e)) < 0)
			cli_die(CLI_EXIT_RUNTIME, "%s", e);
		free(path);
	}
	if (o->c.loss_csv != NULL) {
		path = cli_subst(o->c.loss_csv, 0, world);
		if (trainopt_loss_csv_write(path, res->steps + from,
		    o->c.steps - from, e, sizeof(e)) < 0)
			cli_die(CLI_EXIT_RUNTIME, "%s", e);
		free(path);
	}
	if (o->trace != NULL) {
		path = cli_subst(o->trace, 0, world);
		if (pipe_trace_write(path, res, world, e, sizeof(e)) < 0)
			cli_die(CLI_EXIT_RUNTIME, "%s", e);
		free(path);
	}
}

static void
train(struct opts *o, struct nn_model *m, const struct train_data *d,
    struct pipe_cfg *cfg)
{
	struct report r = { .o = o, .rank = o->g.rank, .world = o->g.world };
	struct pipe_result res;
	struct comm *c;
	enum train_err kind;
	struct prog_job job;
	char e[COLLX_ERRLEN], *tpath = NULL;
	long from = cfg->resume != NULL ? cfg->resume->step : 0;
	int code;

	if (prog_pipe_report_init(&r.pipe, cfg, r.world, NULL, e,
	    sizeof(e)) < 0)
		cli_die(CLI_EXIT_RUNTIME, "%s", e);
	if (from > cfg->steps)	/* resumed past the end: no steps */
		from = cfg->steps;
	if (o->c.timing != NULL) {
		tpath = cli_subst(o->c.timing, r.rank, r.world);
		if (cli_timing_open(&r.timing, tpath, "stage,microbatches,"
		    PROG_PIPE_COLUMNS, e, sizeof(e)) < 0)
			cli_die(CLI_EXIT_RUNTIME, "%s", e);
	}
	/* ranks must agree on everything that shapes the messages, and on
	 * the optimizer every stage steps its layers with */
	prog_job_init(&job, "collx-pipe");
	prog_job_add(&job, "--schedule", "%s", pipe_sched_name(cfg->sched));
	if (cfg->table != NULL)
		prog_job_add(&job, "--schedule-file", "%016llx",
		    pipe_sched_digest(cfg->table));
	prog_job_add(&job, "--microbatches", "%d", cfg->micro);
	prog_job_add(&job, "--virtual", "%d", cfg->chunks);
	prog_job_add(&job, "--batch", "%ld", cfg->batch);
	prog_job_add(&job, "--steps", "%ld", cfg->steps);
	prog_job_add(&job, "--split", "%s", o->split ? o->split : "balanced");
	trainopt_optim_agree(&job, &cfg->optim);
	prog_job_flag(&job, "--trace", cfg->trace);
	prog_job_flag(&job, "--checkpoint", cfg->ckpt_path != NULL);
	prog_job_add(&job, "--checkpoint-every", "%ld", cfg->ckpt_every);
	prog_job_add(&job, "--resume-step", "%ld", cfg->resume != NULL ?
	    cfg->resume->step : 0L);
	if ((code = prog_join(&c, &o->g, &job, e, sizeof(e))) != 0)
		cli_die(code, "%s", e);
	progress_start(&r.pr, r.rank == 0, m->dims.arch == NN_MLP ? "samples" :
	    "tokens", from, cfg->steps - from);
	if (pipe_train(m, d, c, cfg, on_step, &r, &res, &kind, e,
	    sizeof(e)) < 0)
		cli_die((int)kind, "%s", e);
	progress_end(&r.pr);
	if (r.rank == 0) {
		write_outputs(o, m, &res, from, r.world);
		if (!cli_quiet)
			prog_pipe_summary(&r.pipe, &res);
	}
	if (cli_timing_close(r.timing, e, sizeof(e)) < 0)
		cli_die(CLI_EXIT_RUNTIME, "%s", e);
	comm_close(c);
	pipe_result_free(&res);
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

int
main(int argc, char **argv)
{
	struct opts o = { .c.steps = -1, .c.threads = 1,
	    .sched = PIPE_SCHED_1F1B };
	struct pipe_cfg cfg = { 0 };
	struct nn_model m;
	struct train_data d;
	struct ckpt_state st = { 0 };
	struct pipe_sched table = { 0 };
	int *first, stages;
	char e[COLLX_ERRLEN], *cpath = NULL;

	cli_init(argv[0]);
	cli_group_defaults(&o.g);
	parse_args(&o, argc, argv);
	if (o.print)
		print_schedule(&o);
	cli_group_finish(&o.g);
	if ((o.c.model == NULL && o.ckpt.resume == NULL) || o.data == NULL)
		cli_usage_error("-m MODEL (or --resume) and -i X are required");
	if (o.ckpt.every > 0 && o.ckpt.path == NULL)
		cli_usage_error("--checkpoint-every goes with --checkpoint");
	if (o.c.steps >= 0 && o.c.epochs > 0)
		cli_usage_error("give one of --steps and --epochs");
	if (o.sched_file != NULL)
		load_schedule(&o, &table, o.g.world);
	if (trainopt_optim_config(&o.optim, &cfg.optim, e, sizeof(e)) < 0)
		cli_usage_error("%s", e);
	subst_paths(&o);
	nn_set_threads(o.c.threads);
	if (trainopt_model_start(&o.ckpt, o.c.model, &m, &st, e, sizeof(e)) < 0)
		cli_die_rank(CLI_EXIT_DATA, "%s", e);
	if (trainopt_targets_check(&m, o.targets, "-t (--targets)", e,
	    sizeof(e)) < 0)
		cli_usage_error("%s", e);
	/* interleaved: W*V virtual stages, chunk c of rank j is c*W + j */
	cfg.chunks = o.sched_file != NULL ? table.v : (int)o.virt;
	stages = o.g.world * cfg.chunks;
	first = cli_calloc((size_t)stages + 1, sizeof(int));
	if (pipe_split(&m, stages, o.split, first, e, sizeof(e)) < 0)
		cli_usage_error("%s", e);
	if (train_data_load(&d, &m, o.data, o.targets, e, sizeof(e)) < 0)
		cli_die_rank(CLI_EXIT_DATA, "%s", e);
	if (o.c.batch < 1)
		o.c.batch = (long)d.n;
	if (o.micro > o.c.batch)
		cli_usage_error("--microbatches %ld: more than the %ld samples of "
		    "a batch", o.micro, o.c.batch);
	if (trainopt_resume_check(&o.ckpt, &st, o.c.batch, e, sizeof(e)) < 0)
		cli_die_rank(CLI_EXIT_DATA, "%s", e);
	o.c.steps = o.c.epochs > 0 ? train_epoch_steps(d.n, o.c.batch, o.c.epochs) :
	    o.c.steps >= 0 ? o.c.steps : 1;
	cfg.sched = o.sched;
	cfg.table = o.sched_file != NULL ? &table : NULL;
	cfg.micro = (int)o.micro;
	cfg.batch = o.c.batch;
	cfg.steps = o.c.steps;
	cfg.first = first;
	cfg.trace = o.trace != NULL;
	if (o.ckpt.path != NULL)
		cfg.ckpt_path = cpath = cli_subst(o.ckpt.path, 0, o.g.world);
	cfg.ckpt_every = o.ckpt.every;
	cfg.resume = o.ckpt.resume != NULL ? &st : NULL;
	train(&o, &m, &d, &cfg);
	train_data_free(&d);
	nn_model_free(&m);
	ckpt_state_free(&st);
	pipe_sched_free(&table);
	free(cpath);
	free(first);
	cli_group_free(&o.g);
	for (size_t i = 0; i < sizeof(o.owned) / sizeof(o.owned[0]); i++)
		free(o.owned[i]);
	cli_close_stdout();
	return CLI_EXIT_OK;
}
