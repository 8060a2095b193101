/* collx-tp: a layer split over ranks, Megatron tensor parallelism (column,
 * row, mlp, block) or Ulysses sequence parallelism (block, mlp), against
 * the serial layer: forward, backward, --check and --train. The math and
 * the collectives are lib/par/tp.c's and lib/par/ulysses.c's. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "comm/comm.h"
#include "nn/nn.h"
#include "par/ckpt.h"
#include "par/tp.h"
#include "par/train.h"
#include "prog/join.h"
#include "prog/progress.h"
#include "prog/trainopt.h"
#include "tensor/tensor.h"

enum {
	OPT_LAYER = CLI_OPT_PROGRAM, OPT_MODE, OPT_HEADS, OPT_CAUSAL,
	OPT_BACKWARD, OPT_GRAD_OUTPUT, OPT_GRAD_INPUT, OPT_GRAD_WEIGHTS,
	OPT_CHECK, OPT_ITERS, OPT_TRAIN, OPT_TARGETS, OPT_LR,
	OPT_ACTIVATION, OPT_NORM, OPT_LOCAL_OUTPUT, OPT_INPUT_PARALLEL,
	OPT_RTOL
};

static const struct option longopts[] = {
	CLI_STD_LONGOPTS,
	TRAINOPT_FILE_LONGOPTS,
	{ "input", 1, 0, 'i' }, { "layer", 1, 0, OPT_LAYER },
	{ "mode", 1, 0, OPT_MODE }, { "heads", 1, 0, OPT_HEADS },
	{ "causal", 0, 0, OPT_CAUSAL }, { "backward", 0, 0, OPT_BACKWARD },
	{ "grad-output", 1, 0, OPT_GRAD_OUTPUT },
	{ "grad-input", 1, 0, OPT_GRAD_INPUT },
	{ "grad-weights", 1, 0, OPT_GRAD_WEIGHTS },
	{ "check", 0, 0, OPT_CHECK }, { "iters", 1, 0, OPT_ITERS },
	{ "train", 0, 0, OPT_TRAIN }, { "targets", 1, 0, OPT_TARGETS },
	{ "steps", 1, 0, TRAINOPT_STEPS }, { "lr", 1, 0, OPT_LR },
	{ "activation", 1, 0, OPT_ACTIVATION }, { "norm", 1, 0, OPT_NORM },
	{ "local-output", 0, 0, OPT_LOCAL_OUTPUT },
	{ "input-is-parallel", 0, 0, OPT_INPUT_PARALLEL },
	{ "rtol", 1, 0, OPT_RTOL },
	TRAINOPT_RUN_LONGOPTS,
	TRAINOPT_CKPT_LONGOPTS,
	CLI_GROUP_LONGOPTS,
	{ 0, 0, 0, 0 }
};

struct opts {
	struct trainopt_common c;
	struct trainopt_ckpt ckpt;
	const char *input, *dy, *dx, *gw, *targets;
	int have_layer, backward, check, train, iters;
	double lr, rtol;
	struct tp_cfg cfg;
	struct cli_group g;
};

static _Noreturn void
usage(void)
{
	printf("usage: %s --layer column|row|mlp|block -m WEIGHTS.safetensors\n"
	    "           -i X.npy [-o Y.npy] [--mode tp|ulysses|serial] [options]\n"
	    "       %s --layer mlp|block --train --targets Y.npy --steps K --lr LR\n"
	    "           (-m WEIGHTS | --resume CKPT) -i X.npy [-o TRAINED.safetensors]\n"
	    "           [--loss-csv F] [--checkpoint F [--checkpoint-every K]]\n\n"
	    "A layer split over ranks: Megatron tensor parallelism (tp) or Ulysses\n"
	    "sequence parallelism (ulysses), or the whole layer (serial).\n\n"
	    "  --layer L             column, row, mlp or block\n"
	    "  -m, --model F         weights (nn.Linear layout [out, in])\n"
	    "  -i, --input F         X (row --input-is-parallel: this rank's shard)\n"
	    "  -o, --output F        rank 0 writes Y (column --local-output: every\n"
	    "                        rank its shard; --train: the trained weights)\n"
	    "  --mode M              tp (default), ulysses (block, mlp) or serial\n"
	    "  --heads H             block heads (default: __metadata__ heads)\n"
	    "  --causal              block: causal attention\n"
	    "  --activation A        gelu (default, exact erf) or relu\n"
	    "  --norm N              block: pre (default) or post LayerNorm\n"
	    "  --local-output        column: leave Y sharded\n"
	    "  --input-is-parallel   row: -i is this rank's input shard\n"
	    "  --backward            gradient of sum(Y * DY), needs --grad-output\n"
	    "  --grad-output F       DY\n"
	    "  --grad-input F        rank 0 writes DX\n"
	    "  --grad-weights F      rank 0 writes the weight gradients\n"
	    "  --check               compare with the serial layer (exit 4 when off)\n"
	    "  --rtol R              --check tolerance (1e-4, atol R/10)\n"
	    "  --iters N             repeat forward (and backward) N times (1)\n"
	    "  --timing F            append a row per phase, extra column\n"
	    "                        comm_bytes (bytes this rank sent) and phase\n"
	    "  --train               full-batch SGD on the mean-squared error\n"
	    "  --targets F           --train: Y\n"
	    "  --steps K             --train: steps\n"
	    "  --lr LR               --train: learning rate (0.01)\n"
	    "  --loss-csv F          --train: rank 0 writes step,epoch,loss,tokens,\n"
	    "                        seconds,tokens_per_s\n"
	    "  --checkpoint F        --train: rank 0 writes the weights and the step\n"
	    "                        to F (atomically) after the last step\n"
	    "  --checkpoint-every K  ... and after every K steps\n"
	    "  --resume F            --train: continue from checkpoint F (weights,\n"
	    "                        step); -m is not read\n"
	    "  --threads N           BLAS threads per rank (1)\n"
	    "  -v, --verbose         a line per iteration or step on stderr (--train\n"
	    "                        without -v: a terminal gets one live progress\n"
	    "                        line); --train ends with a summary line\n"
	    "  -q, --quiet           no such lines, no progress\n"
	    "  -h, --help            this help\n"
	    "  -V, --version         version\n"
	    "%s"
	    "Exit status: 0 ok, 1 runtime failure, 2 usage, 3 bad input (also sizes\n"
	    "the world size does not divide), 4 --check found a difference.\n",
	    cli_progname, cli_progname, cli_group_help);
	cli_close_stdout();
	exit(CLI_EXIT_OK);
}

static int
layer_option(struct opts *o, int c, const char *a)
{
	switch (c) {
	case OPT_LAYER:
		if (tp_layer_parse(a, &o->cfg.layer) < 0)
			cli_usage_error("--layer: want column, row, mlp or block, "
			    "not '%s'", a);
		o->have_layer = 1;
		break;
	case OPT_MODE:
		if (tp_mode_parse(a, &o->cfg.mode) < 0)
			cli_usage_error("--mode: want tp, ulysses or serial, not "
			    "'%s'", a);
		break;
	case OPT_HEADS:
		o->cfg.heads = (int)cli_parse_long("--heads", a, 1, 1 << 20);
		break;
	case OPT_CAUSAL: o->cfg.causal = 1; break;
	case OPT_ACTIVATION:
		if (nn_act_parse(a, &o->cfg.act) < 0)
			cli_usage_error("--activation: want gelu or relu, not '%s'",
			    a);
		break;
	case OPT_NORM:
		if (strcmp(a, "pre") != 0 && strcmp(a, "post") != 0)
			cli_usage_error("--norm: want pre or post, not '%s'", a);
		o->cfg.post_norm = strcmp(a, "post") == 0;
		break;
	case OPT_LOCAL_OUTPUT: o->cfg.local_output = 1; break;
	case OPT_INPUT_PARALLEL: o->cfg.input_parallel = 1; break;
	default: return 0;
	}
	return 1;
}

/* The options of collx-tp's own; 0 when c is not one of them. */
static int
own_option(void *ctx, int c, const char *a)
{
	struct opts *o = ctx;

	if (layer_option(o, c, a))
		return 1;
	switch (c) {
	case 'i': o->input = a; break;
	case OPT_BACKWARD: o->backward = 1; break;
	case OPT_GRAD_OUTPUT: o->dy = a; break;
	case OPT_GRAD_INPUT: o->dx = a; break;
	case OPT_GRAD_WEIGHTS: o->gw = a; break;
	case OPT_CHECK: o->check = 1; break;
	case OPT_RTOL: o->rtol = cli_parse_double("--rtol", a, 0, 1); break;
	case OPT_ITERS:
		o->iters = (int)cli_parse_long("--iters", a, 1, 1 << 30);
		break;
	case OPT_TRAIN: o->train = 1; break;
	case OPT_TARGETS: o->targets = a; break;
	case OPT_LR: o->lr = cli_parse_double("--lr", a, 0, 1e9); break;
	default: return 0;
	}
	return 1;
}

static void
parse_args(struct opts *o, int argc, char **argv)
{
	struct trainopt_parser p = { .usage = usage, .g = &o->g,
	    .common = &o->c, .ckpt = &o->ckpt, .own = own_option, .ctx = o };

	trainopt_parse(&p, argc, argv, "hVvqm:i:o:", longopts);
}

static void
check_args(const struct opts *o)
{
	const struct tp_cfg *c = &o->cfg;

	if (!o->have_layer || (o->c.model == NULL && o->ckpt.resume == NULL) ||
	    o->input == NULL)
		cli_usage_error("--layer, -m WEIGHTS (or --resume) and -i X are "
		    "required");
	if (c->mode == TP_MODE_ULYSSES && c->layer != TP_BLOCK &&
	    c->layer != TP_MLP)
		cli_usage_error("--mode ulysses goes with --layer block or mlp");
	if (c->local_output && (c->layer != TP_COLUMN || c->mode != TP_MODE_TP))
		cli_usage_error("--local-output goes with --layer column --mode tp");
	if (c->input_parallel && (c->layer != TP_ROW || c->mode != TP_MODE_TP))
		cli_usage_error("--input-is-parallel goes with --layer row "
		    "--mode tp");
	if (c->post_norm && c->layer != TP_BLOCK)
		cli_usage_error("--norm goes with --layer block");
	if (c->act != NN_ACT_GELU && c->layer != TP_MLP && c->layer != TP_BLOCK)
		cli_usage_error("--activation goes with --layer mlp or block");
	if ((c->heads || c->causal) && c->layer != TP_BLOCK)
		cli_usage_error("--heads and --causal go with --layer block");
	if (o->backward != (o->dy != NULL))
		cli_usage_error("--backward and --grad-output go together");
	if (!o->backward && (o->dx || o->gw))
		cli_usage_error("--grad-input and --grad-weights need --backward");
	if (o->train) {
		if (c->layer != TP_MLP && c->layer != TP_BLOCK)
			cli_usage_error("--train goes with --layer mlp or block");
		if (o->targets == NULL || o->c.steps < 0)
			cli_usage_error("--train needs --targets and --steps");
		if (o->backward || o->check)
			cli_usage_error("--train excludes --backward and --check");
	} else if (o->targets || o->c.steps >= 0 || o->c.loss_csv ||
	    o->ckpt.path || o->ckpt.resume)
		cli_usage_error("--targets, --steps, --loss-csv, --checkpoint and "
		    "--resume go with --train");
	if (o->ckpt.every > 0 && o->ckpt.path == NULL)
		cli_usage_error("--checkpoint-every goes with --checkpoint");
	if (c->local_output && o->check)
		cli_usage_error("--check compares whole outputs: leave out "
		    "--local-output");
}

/* Loads a tensor file as f32 (bad input: exit 3). */
static void
load_f32(const struct opts *o, const char *path, struct tensor *t)
{
	struct tensor raw = { 0 };
	char e[COLLX_ERRLEN];
	char *p = cli_subst(path, o->g.rank, o->g.world);

	if (tensor_load_one(p, &raw, e, sizeof e) < 0)	/* names p */
		cli_die_rank(CLI_EXIT_DATA, "%s", e);
	if (!dtype_is_float(raw.dtype))
		cli_die_rank(CLI_EXIT_DATA, "%s: %s is not a float type", p,
		    dtype_name(raw.dtype));
	if (tensor_cast(&raw, DT_F32, t, e, sizeof e) < 0)
		cli_die_rank(CLI_EXIT_DATA, "%s: %s", p, e);
	tensor_free(&raw);
	free(p);
}

/* The whole of a tensor shaped like ref but with last dimension last. */
static void
save_rows(const char *pattern, int rank, int world, const struct tensor *ref,
    int64_t last, const float *data)
{
	struct tensor t = { 0 };
	int64_t shape[TENSOR_MAX_DIM];
	char e[COLLX_ERRLEN], *p = cli_subst(pattern, rank, world);

	memcpy(shape, ref->shape, sizeof shape);
	shape[ref->ndim - 1] = last;
	if (tensor_init(&t, DT_F32, ref->ndim, shape, e, sizeof e) < 0)
		cli_die(CLI_EXIT_RUNTIME, "%s: %s", p, e);
	memcpy(t.data, data, tensor_nbytes(&t));
	if (tensor_save_one(p, &t, e, sizeof e) < 0)
		cli_die(CLI_EXIT_RUNTIME, "%s", e);
	tensor_free(&t);
	free(p);
}

static void
save_set(const char *pattern, int rank, int world, struct tensor_set *s,
    const struct tensor_set *meta_from)
{
	char e[COLLX_ERRLEN], *p = cli_subst(pattern, rank, world);

	s->format = TENSOR_SAFETENSORS;
	for (size_t i = 0; meta_from && i < meta_from->nmeta; i++)
		if (tensor_set_meta_put(s, meta_from->meta[i].key,
		    meta_from->meta[i].value, e, sizeof e) < 0)
			cli_die(CLI_EXIT_RUNTIME, "%s: %s", p, e);
	if (tensor_save(p, s, e, sizeof e) < 0)
		cli_die(CLI_EXIT_RUNTIME, "%s", e);
	free(p);
}

/* ---- timing --------------------------------------------------------------- */

static void
timing_rows(struct cli_timing *t, const struct tp_log *l, int rank,
    int world, int iter)
{
	char extra[128], e[COLLX_ERRLEN];

	for (int i = 0; i < l->n; i++) {
		const struct tp_phase *p = &l->p[i];
		struct cli_timing_row row = {
			.program = cli_progname, .op = p->op, .algo = p->algo,
			.rank = rank, .world = world, .dtype = dtype_name(p->dt),
			.count = p->count, .bytes = p->count * dtype_size(p->dt),
			.iter = iter, .seconds = p->seconds, .extra = extra
		};
		snprintf(extra, sizeof extra, "%llu,%s",
		    (unsigned long long)p->bytes, p->name);
		if (cli_timing_write(t, &row, e, sizeof e) < 0)
			cli_die(CLI_EXIT_RUNTIME, "%s", e);
	}
}

/* One stderr line: the iteration's time and its communication share. */
static void
report(const struct tp_log *l, int iter)
{
	double all = 0, comm = 0;
	unsigned long long bytes = 0;

	for (int i = 0; i < l->n; i++) {
		all += l->p[i].seconds;
		bytes += l->p[i].bytes;
		if (strcmp(l->p[i].op, "compute") != 0)
			comm += l->p[i].seconds;
	}
	fprintf(stderr, "%s: iter %d: %.3f ms, communication %.3f ms (%.0f%%), "
	    "%llu bytes sent\n", cli_progname, iter, all * 1e3, comm * 1e3,
	    all > 0 ? 100 * comm / all : 0.0, bytes);
}

/* ---- the run -------------------------------------------------------------- */

struct job {
	struct opts *o;
	struct tensor_set w;	/* the weights file */
	struct tensor x, dy, yt;
	struct tp_model m;
	struct tp_run r;
	struct comm *c;
	struct tp_log log;
	struct cli_timing *timing;
	int rank, world;
	long first;		/* steps done before this run (--resume) */
	char err[COLLX_ERRLEN];
};

static void
load_inputs(struct job *j)
{
	struct opts *o = j->o;
	char e[COLLX_ERRLEN], *p = cli_subst(o->ckpt.resume ? o->ckpt.resume :
	    o->c.model, j->rank, j->world);

	if (tensor_load(p, &j->w, e, sizeof e) < 0)	/* names p */
		cli_die_rank(CLI_EXIT_DATA, "%s", e);
	/* the checkpoint's step out of the metadata the output copies */
	if (o->ckpt.resume && ckpt_meta_take_step(&j->w, &j->first, e,
	    sizeof e) < 0)
		cli_die_rank(CLI_EXIT_DATA, "%s: %s", p, e);
	if (tp_model_load(&j->m, &o->cfg, &j->w, j->rank, j->world, j->err,
	    sizeof j->err) < 0)
		cli_die_rank(CLI_EXIT_DATA, "%s: %s", p, j->err);
	free(p);
	load_f32(o, o->input, &j->x);
	if (tp_input_check(&j->m, &j->x, j->err, sizeof j->err) < 0)
		cli_die_rank(CLI_EXIT_DATA, "%s: %s", o->input, j->err);
	if (o->dy)
		load_f32(o, o->dy, &j->dy);
	if (o->targets)
		load_f32(o, o->targets, &j->yt);
}

/* Y's element count, for DY and the targets. */
static void
check_like_y(const struct job *j, const struct tensor *t, const char *what)
{
	int64_t want = (int64_t)j->r.n * j->r.out;

	if (tensor_numel(t) != want)
		cli_die(CLI_EXIT_DATA, "%s: %lld elements, want %lld (the "
		    "shape of Y)", what, (long long)tensor_numel(t),
		    (long long)want);
}

static void
join_group(struct job *j)
{
	const struct opts *o = j->o;
	const struct tp_cfg *c = &o->cfg;
	struct prog_job job;
	int code;

	if (c->mode == TP_MODE_SERIAL)
		return;
	prog_job_init(&job, "collx-tp");
	prog_job_add(&job, "--layer", "%s", tp_layer_name(c->layer));
	prog_job_add(&job, "--mode", "%s", tp_mode_name(c->mode));
	if (c->heads > 0)
		prog_job_add(&job, "--heads", "%d", c->heads);
	else
		prog_job_add(&job, "--heads", "from-the-model");
	prog_job_flag(&job, "--causal", c->causal);
	prog_job_add(&job, "--norm", "%s", c->post_norm ? "post" : "pre");
	prog_job_add(&job, "--activation", "%s", nn_act_name(c->act));
	prog_job_flag(&job, "--local-output", c->local_output);
	prog_job_flag(&job, "--input-is-parallel", c->input_parallel);
	prog_job_flag(&job, "--backward", o->backward);
	/* these gather what every rank holds */
	prog_job_flag(&job, "--grad-weights", o->gw != NULL);
	prog_job_flag(&job, "--check", o->check);
	prog_job_add(&job, "--iters", "%d", o->iters);
	prog_job_flag(&job, "--train", o->train);
	prog_job_add(&job, "--steps", "%ld", o->c.steps);
	prog_job_add(&job, "--lr", "%.10g", o->lr);
	prog_job_flag(&job, "--checkpoint", o->ckpt.path != NULL);
	prog_job_add(&job, "--checkpoint-every", "%ld", o->ckpt.every);
	prog_job_add(&job, "--resume-step", "%ld", j->first);
	if (o->train)
		prog_job_flag(&job, "--output", o->c.out != NULL);
	if ((code = prog_join(&j->c, &o->g, &job, j->err, sizeof j->err)) != 0)
		cli_die(code, "%s", j->err);
}

static _Noreturn void
run_failed(const struct job *j)
{
	if (strncmp(j->err, "rank ", 5) == 0)
		cli_die(CLI_EXIT_RUNTIME, "%s", j->err);
	cli_die(CLI_EXIT_RUNTIME, "rank %d: %s", j->rank, j->err);
}

/* ---- --check: the serial layer on this rank ------------------------------- */

static int
close_enough(const char *what, const float *got, const float *want,
    size_t n, double rtol)
{
	double atol = rtol / 10;

	for (size_t i = 0; i < n; i++) {
		double d = (double)got[i] - want[i];
		if (!(d <= atol + rtol * (want[i] < 0 ? -want[i] : want[i]) &&
		    -d <= atol + rtol * (want[i] < 0 ? -want[i] : want[i]))) {
			fprintf(stderr, "%s: check: %s differs at element %zu: "
			    "%.9g, serial %.9g\n", cli_progname, what, i,
			    (double)got[i], (double)want[i]);
			return 0;
		}
	}
	return 1;
}

static int
check_sets(const struct tensor_set *got, const struct tensor_set *want,
    double rtol)
{
	int ok = 1;

	for (size_t i = 0; i < want->count; i++) {
		struct tensor *g = tensor_set_find(got, want->items[i].name);
		ok &= g != NULL && close_enough(want->items[i].name, g->data,
		    want->items[i].data, (size_t)tensor_numel(g), rtol);
	}
	return ok;
}

/* 1 when the parallel results (j->r, grads gs) match the serial layer's. */
static int
check_serial(struct job *j, const struct tensor_set *gs)
{
	struct tp_cfg cfg = j->o->cfg;
	struct tp_model m;
	struct tp_run r;
	struct tensor_set sg = { 0 };
	double rtol = j->o->rtol;
	char e[COLLX_ERRLEN];
	int ok;

	cfg.mode = TP_MODE_SERIAL;
	if (tp_model_load(&m, &cfg, &j->w, 0, 1, e, sizeof e) < 0 ||
	    tp_run_init(&r, &m, NULL, NULL, &j->x, e, sizeof e) < 0 ||
	    tp_forward(&r, j->x.data, 1) < 0)
		cli_die(CLI_EXIT_RUNTIME, "check: %s", e);
	ok = close_enough("Y", j->r.y, r.y, (size_t)r.n * r.out, rtol);
	if (j->o->backward) {
		if (tp_backward(&r, j->dy.data) < 0 ||
		    tp_gather_set(&r, 1, &sg) < 0)
			cli_die(CLI_EXIT_RUNTIME, "check: %s", e);
		ok &= close_enough("DX", j->r.dx, r.dx, (size_t)r.n * r.in, rtol);
		ok &= check_sets(gs, &sg, rtol);
	}
	tensor_set_free(&sg);
	tp_run_free(&r);
	tp_model_free(&m);
	return ok;
}

/* ---- forward and backward ------------------------------------------------- */

static void
write_outputs(struct job *j, struct tensor_set *gs)
{
	struct opts *o = j->o;

	if (o->c.out && o->cfg.local_output)
		save_rows(o->c.out, j->rank, j->world, &j->x,
		    j->m.out / j->m.shards, j->r.ylocal);
	if (j->rank != 0)
		return;
	if (o->c.out && !o->cfg.local_output)
		save_rows(o->c.out, j->rank, j->world, &j->x, j->r.out, j->r.y);
	if (o->dx)	/* whole, also when X is a shard (--input-is-parallel) */
		save_rows(o->dx, j->rank, j->world, &j->x, j->r.in, j->r.dx);
	if (o->gw)
		save_set(o->gw, j->rank, j->world, gs, NULL);
}

static void
run_layer(struct job *j)
{
	struct opts *o = j->o;
	struct tensor_set gs = { 0 };

	for (int it = 0; it < o->iters; it++) {
		tp_log_start(&j->log, j->c);
		if (tp_forward(&j->r, j->x.data, 1) < 0)
			run_failed(j);
		if (o->backward && tp_backward(&j->r, j->dy.data) < 0)
			run_failed(j);
		timing_rows(j->timing, &j->log, j->rank, j->world, it);
		if (j->rank == 0 && !cli_quiet && cli_verbose)
			report(&j->log, it);
	}
	if (o->backward && (o->gw || o->check)) {
		tp_log_start(&j->log, j->c);
		if (tp_gather_set(&j->r, 1, &gs) < 0)
			run_failed(j);
	}
	write_outputs(j, &gs);
	if (o->check) {
		if (!check_serial(j, &gs))
			cli_die(CLI_EXIT_CHECK, "rank %d: check: %s %s differs "
			    "from the serial layer", j->rank,
			    tp_mode_name(o->cfg.mode),
			    tp_layer_name(o->cfg.layer));
		if (j->rank == 0 && !cli_quiet)
			fprintf(stderr, "%s: check: %s %s on %d ranks matches the "
			    "serial layer\n", cli_progname,
			    tp_mode_name(o->cfg.mode),
			    tp_layer_name(o->cfg.layer), j->world);
	}
	tensor_set_free(&gs);
}

/* ---- training ------------------------------------------------------------- */

static void
log_split(const struct tp_log *l, double *compute, double *comm)
{
	*compute = *comm = 0;
	for (int i = 0; i < l->n; i++)
		*(strcmp(l->p[i].op, "compute") == 0 ? compute : comm) +=
		    l->p[i].seconds;
}

/* The weights gathered whole on rank 0 and written to pattern with the
 * input's metadata; with the steps done when step >= 0 (a checkpoint). */
static void
save_weights(struct job *j, const char *pattern, long step)
{
	struct tensor_set ws = { 0 };
	char e[COLLX_ERRLEN];

	tp_log_start(&j->log, j->c);
	if (tp_gather_set(&j->r, 0, &ws) < 0)
		run_failed(j);
	if (j->rank == 0 && step >= 0 && ckpt_meta_put_step(&ws, step, e,
	    sizeof e) < 0)
		cli_die(CLI_EXIT_RUNTIME, "%s: %s", pattern, e);
	if (j->rank == 0)
		save_set(pattern, j->rank, j->world, &ws, &j->w);
	tensor_set_free(&ws);
}

static void
train(struct job *j)
{
	struct opts *o = j->o;
	long cap = 0, first = j->first;
	long ran = o->c.steps > first ? o->c.steps - first : 0;
	struct train_step *steps = train_grow(NULL, &cap, 0, sizeof(*steps));
	struct progress pr;
	long tokens = j->r.n;	/* mlp: samples; block: positions */
	char e[COLLX_ERRLEN];

	progress_start(&pr, j->rank == 0, o->cfg.layer == TP_MLP ? "samples" :
	    "tokens", first, ran);
	for (long k = first; k < o->c.steps; k++) {
		struct train_step *s;
		double t0 = cli_now();

		if ((s = train_grow(steps, &cap, k - first, sizeof(*s))) == NULL)
			cli_die_rank(1, "out of memory");
		steps = s;
		s = &steps[k - first];
		tp_log_start(&j->log, j->c);
		if (tp_train_step(&j->r, j->x.data, j->yt.data, (float)o->lr,
		    &s->loss) < 0)
			run_failed(j);
		s->step = k;
		s->tokens = tokens;
		s->seconds = cli_now() - t0;
		log_split(&j->log, &s->compute, &s->comm);
		timing_rows(j->timing, &j->log, j->rank, j->world, (int)k);
		progress_step(&pr, s);
		if (pr.lines)
			fprintf(stderr, "%s: step %ld loss %.6f %.1f ms "
			    "(communication %.1f ms)\n", cli_progname, k,
			    s->loss, s->seconds * 1e3, s->comm * 1e3);
		if (o->ckpt.path != NULL && (k + 1 == o->c.steps ||
		    (o->ckpt.every > 0 && (k + 1) % o->ckpt.every == 0)))
			save_weights(j, o->ckpt.path, k + 1);
	}
	progress_end(&pr);
	if (o->c.out)
		save_weights(j, o->c.out, -1);
	if (o->c.loss_csv && j->rank == 0) {
		char *p = cli_subst(o->c.loss_csv, j->rank, j->world);
		if (trainopt_loss_csv_write(p, steps, ran, e, sizeof e) < 0)
			cli_die(CLI_EXIT_RUNTIME, "%s: %s", p, e);
		free(p);
	}
	free(steps);
}

int
main(int argc, char **argv)
{
	struct opts o = { .iters = 1, .c.threads = 1, .c.steps = -1, .lr = 0.01,
	    .rtol = 1e-4 };
	struct job j = { .o = &o };
	char *tpath = NULL;

	cli_init(argv[0]);
	cli_group_defaults(&o.g);
	parse_args(&o, argc, argv);
	cli_group_finish(&o.g);
	check_args(&o);
	if (o.check && o.cfg.input_parallel)
		cli_usage_error("--check needs the whole X: leave out "
		    "--input-is-parallel");
	nn_set_threads(o.c.threads);
	j.rank = o.g.rank, j.world = o.g.world;
	load_inputs(&j);
	join_group(&j);
	if (tp_run_init(&j.r, &j.m, j.c, &j.log, &j.x, j.err, sizeof j.err) < 0)
		cli_die(CLI_EXIT_DATA, "%s: %s", o.input, j.err);
	if (o.dy)
		check_like_y(&j, &j.dy, o.dy);
	if (o.targets)
		check_like_y(&j, &j.yt, o.targets);
	if (o.c.timing) {
		tpath = cli_subst(o.c.timing, j.rank, j.world);
		if (cli_timing_open(&j.timing, tpath, "comm_bytes,phase", j.err,
		    sizeof j.err) < 0)
			cli_die(CLI_EXIT_RUNTIME, "%s", j.err);
	}
	if (o.train)
		train(&j);
	else
		run_layer(&j);
	if (cli_timing_close(j.timing, j.err, sizeof j.err) < 0)
		cli_die(CLI_EXIT_RUNTIME, "%s", j.err);
	tp_run_free(&j.r);
	tp_model_free(&j.m);
	comm_close(j.c);
	tensor_set_free(&j.w);
	tensor_free(&j.x), tensor_free(&j.dy), tensor_free(&j.yt);
	cli_group_free(&o.g);
	free(tpath);
	cli_close_stdout();
	return CLI_EXIT_OK;
}
