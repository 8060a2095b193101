/* collx-pipe: pipeline-parallel training of an mlp or block stack, or a
 * gpt, with GPipe, 1F1B, interleaved 1F1B (V chunks of layers per rank)
 * or ZB-H1 schedules or one from a file; or
 * --print-schedule, the clock table of a schedule. The training itself is
 * lib/par/pipe.c's, run in collx-train's shell (lib/prog/trainer_pipe.c)
 * with one pipeline over the whole group. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "nn/nn.h"
#include "par/pipe.h"
#include "par/pipe_sched.h"
#include "prog/trainer_pipe.h"

enum {
	OPT_SCHEDULE_FILE = CLI_OPT_PROGRAM, OPT_PRINT, OPT_FORMAT
};

static const struct option longopts[] = {
	CLI_STD_LONGOPTS,
	TRAINOPT_FILE_LONGOPTS,
	{ "input", 1, 0, 'i' }, { "targets", 1, 0, 't' },
	TRAINER_PIPE_LONGOPTS,
	{ "schedule-file", 1, 0, OPT_SCHEDULE_FILE },
	TRAINOPT_STEPS_LONGOPTS, { "print-schedule", 0, 0, OPT_PRINT },
	{ "format", 1, 0, OPT_FORMAT },
	TRAINOPT_RUN_LONGOPTS,
	TRAINOPT_OPTIM_LONGOPTS,
	TRAINOPT_CKPT_LONGOPTS,
	CLI_GROUP_LONGOPTS,
	{ 0, 0, 0, 0 }
};

struct opts {
	struct trainopt_common c;
	const char *data, *targets, *sched_file;
	struct trainer_pipe_opts p;
	int print, format, csv;	/* format: --format given; csv: as csv */
	struct trainopt_optim optim;
	struct trainopt_ckpt ckpt;
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
	    TRAINOPT_OPTIM_HELP
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
	    TRAINOPT_RUN_HELP
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

	if (trainer_pipe_option(&o->p, c, a, "gpipe, 1f1b, interleaved or "
	    "zb-h1", 1))
		return 1;
	switch (c) {
	case 'i': o->data = a; break;
	case 't': o->targets = a; break;
	case OPT_SCHEDULE_FILE: o->sched_file = a; break;
	case OPT_PRINT: o->print = 1; break;
	case OPT_FORMAT:
		if (strcmp(a, "csv") != 0 && strcmp(a, "table") != 0)
			cli_usage_error("--format: want table or csv, not '%s'",
			    a);
		o->csv = strcmp(a, "csv") == 0;
		o->format = 1;
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
	if (o->p.micro < 1)
		cli_usage_error("--microbatches M is required");
	if (o->format && !o->print)
		cli_usage_error("--format goes with --print-schedule");
	if (o->sched_file != NULL && o->p.sched_given)
		cli_usage_error("give one of --schedule and --schedule-file");
	if (o->sched_file != NULL)
		o->p.sched = PIPE_SCHED_FILE;
	trainer_pipe_virtual(&o->p, " (a schedule file names its chunks)");
}

/* The schedule file's tables for W stages (0: the file's ranks); a bad
 * file is bad input, found by every rank before anything runs. */
static void
load_schedule(const struct opts *o, struct pipe_sched *s, int w)
{
	char e[COLLX_ERRLEN];

	if (pipe_sched_file(s, o->sched_file, (int)o->p.micro, w, e,
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

	int v = (int)o->p.virt;
	char chunks[32] = "";
	double paper;

	if (o->sched_file != NULL)
		load_schedule(o, &s, w);
	else if (pipe_sched_build_virtual(&s, o->p.sched, (int)o->p.micro, w, v,
	    e, sizeof(e)) < 0)
		cli_die(CLI_EXIT_RUNTIME, "%s", e);
	if (s.v > 1)
		snprintf(chunks, sizeof(chunks), ", V=%d chunks", s.v);
	if ((paper = pipe_sched_bubble(o->p.sched, (int)o->p.micro, w, v)) < 0)
		paper = pipe_sched_table_bubble(&s);	/* no closed form */
	if (o->csv)
		pipe_sched_print_csv(stdout, &s);
	else if (cli_verbose && o->sched_file == NULL)
		printf("# %s, M=%ld micro-batches, W=%d stages%s: %d clocks, "
		    "bubble %s = %.4f\n", pipe_sched_name(o->p.sched), o->p.micro, w,
		    chunks, s.nclocks, pipe_sched_formula(o->p.sched,
		    (int)o->p.micro, w, v), paper);
	else if (cli_verbose)
		printf("# %s, M=%ld micro-batches, W=%d stages%s: %d clocks\n",
		    o->sched_file, o->p.micro, s.w, chunks, s.nclocks);
	if (!o->csv)
		pipe_sched_print(stdout, &s);
	pipe_sched_free(&s);
	cli_close_stdout();
	exit(CLI_EXIT_OK);
}

/* The options every rank must share: what shapes the messages, and the
 * optimizer every stage steps its layers with. */
static void
declare(struct prog_job *job, const struct opts *o,
    const struct pipe_cfg *cfg)
{
	prog_job_init(job, "collx-pipe");
	trainer_pipe_declare(job, cfg, o->p.split);
	trainer_pipe_declare_run(job, cfg, &o->ckpt);
}

int
main(int argc, char **argv)
{
	struct opts o = { .c.steps = -1, .c.threads = 1,
	    .p.sched = PIPE_SCHED_1F1B };
	struct pipe_cfg cfg = { 0 };
	struct trainer_in in = { 0 };
	struct pipe_sched table = { 0 };
	struct prog_job job;
	struct trainer_pipe run = { .c = &o.c, .o = &o.p, .g = &o.g };
	char e[COLLX_ERRLEN];

	cli_init(argv[0]);
	cli_group_defaults(&o.g);
	parse_args(&o, argc, argv);
	if (o.print)
		print_schedule(&o);
	cli_group_finish(&o.g);
	prog_precision_start(o.c.precision);
	trainer_check(&o.ckpt, o.c.model, o.data, "-i X");
	if (o.c.steps >= 0 && o.c.epochs > 0)
		cli_usage_error("give one of --steps and --epochs");
	if (o.sched_file != NULL)
		load_schedule(&o, &table, o.g.world);
	if (trainopt_optim_config(&o.optim, &cfg.optim, e, sizeof(e)) < 0)
		cli_usage_error("%s", e);
	trainer_in_paths(&in, &o.g, &o.c.model, &o.data, &o.targets,
	    &o.ckpt.resume);
	trainer_in_model(&in, &o.ckpt, o.c.model, o.c.threads);
	trainer_targets(&in.m, o.targets, "-t (--targets)");
	/* interleaved: W*V virtual stages, chunk c of rank j is c*W + j */
	cfg.chunks = o.sched_file != NULL ? table.v : (int)o.p.virt;
	trainer_pipe_split(&run, &in.m, cfg.chunks);
	trainer_in_data(&in, o.data, o.targets, &o.c, &o.ckpt);
	if (o.p.micro > o.c.batch)
		cli_usage_error("--microbatches %ld: more than the %ld samples of "
		    "a batch", o.p.micro, o.c.batch);
	cfg.table = o.sched_file != NULL ? &table : NULL;
	trainer_pipe_cfg(&cfg, &run, &o.ckpt, &in.st);
	declare(&job, &o, &cfg);
	trainer_pipe_run(&run, &in.m, &in.d, &cfg, &job);
	trainer_in_free(&in);
	pipe_sched_free(&table);
	cli_group_free(&o.g);
	cli_close_stdout();
	return CLI_EXIT_OK;
}
