/* collx-tp: a layer split over ranks, Megatron tensor parallelism (column,
 * row, mlp, block) or Ulysses sequence parallelism (block, mlp), against
 * the serial layer: forward, backward, --check and --train. The math and
 * the collectives are lib/par/tp.c's and lib/par/ulysses.c's, the run
 * lib/prog/tplayer.c's. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "nn/nn.h"
#include "par/tp.h"
#include "prog/tplayer.h"

enum {
	OPT_LAYER = CLI_OPT_PROGRAM, OPT_MODE, OPT_HEADS, OPT_CAUSAL,
	OPT_BACKWARD, OPT_GRAD_OUTPUT, OPT_GRAD_INPUT, OPT_GRAD_WEIGHTS,
	OPT_CHECK, OPT_ITERS, OPT_TRAIN, OPT_TARGETS, OPT_LR,
	OPT_ACTIVATION, OPT_NORM, OPT_LOCAL_OUTPUT, OPT_INPUT_PARALLEL,
	OPT_RTOL, OPT_ULYSSES, OPT_OVERLAP, OPT_TRACE
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
	{ "rtol", 1, 0, OPT_RTOL }, { "ulysses", 1, 0, OPT_ULYSSES },
	{ "overlap", 1, 0, OPT_OVERLAP }, { "trace", 1, 0, OPT_TRACE },
	TRAINOPT_RUN_LONGOPTS,
	TRAINOPT_CKPT_LONGOPTS,
	CLI_GROUP_LONGOPTS,
	{ 0, 0, 0, 0 }
};


static _Noreturn void
usage(void)
{
	printf("usage: %s --layer column|row|mlp|block -m WEIGHTS.safetensors\n"
	    "           -i X.npy [-o Y.npy] [--mode tp|ulysses|ring|zigzag|sp|serial]\n"
	    "           [--mode usp --ulysses U] [--overlap none|ring] [options]\n"
	    "       %s --layer mlp|block --train --targets Y.npy --steps K --lr LR\n"
	    "           (-m WEIGHTS | --resume CKPT) -i X.npy [-o TRAINED.safetensors]\n"
	    "           [--loss-csv F] [--checkpoint F [--checkpoint-every K]]\n\n"
	    "A layer split over ranks: Megatron tensor parallelism (tp), Ulysses\n"
	    "sequence parallelism (ulysses), ring attention on contiguous (ring)\n"
	    "or zigzag chunks of the sequence, both (usp: Ulysses in groups of U\n"
	    "ranks, ring across them), Megatron sequence parallelism (sp), or the\n"
	    "whole layer (serial).\n\n"
	    "  --layer L             column, row, mlp or block\n"
	    "  -m, --model F         weights (nn.Linear layout [out, in])\n"
	    "  -i, --input F         X (row --input-is-parallel: this rank's shard)\n"
	    "  -o, --output F        rank 0 writes Y (column --local-output: every\n"
	    "                        rank its shard; --train: the trained weights)\n"
	    "  --mode M              tp (default), ulysses (block, mlp), ring,\n"
	    "                        zigzag, usp, sp (block) or serial\n"
	    "  --ulysses U           usp: Ulysses group size (U divides the world)\n"
	    "  --overlap O           tp, sp block: none (default) or ring (each\n"
	    "                        collective matmul in ring steps, transfers\n"
	    "                        overlapping the matmuls)\n"
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
	    "                        comm_bytes (bytes this rank sent), ring, zigzag,\n"
	    "                        usp, sp, --overlap ring: hidden_us, exposed_us\n"
	    "                        (transfers while computing, and after), phase\n"
	    "  --trace F             rank 0 writes every rank's compute and transfers\n"
	    "                        as Chrome trace JSON (collx-plot timeline)\n"
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
	    PRECISION_HELP
	    "  -v, --verbose         a line per iteration or step on stderr (--train\n"
	    "                        without -v: a terminal gets one live progress\n"
	    "                        line); --train ends with a summary line\n"
	    "  -q, --quiet           no such lines, no progress\n"
	    TRAINOPT_STD_HELP
	    "%s"
	    "Exit status: 0 ok, 1 runtime failure, 2 usage, 3 bad input (also sizes\n"
	    "the world size does not divide), 4 --check found a difference.\n",
	    cli_progname, cli_progname, cli_group_help);
	cli_close_stdout();
	exit(CLI_EXIT_OK);
}

static int
layer_option(struct tplayer_opts *o, int c, const char *a)
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
			cli_usage_error("--mode: want tp, ulysses, ring, zigzag, "
			    "usp, sp or serial, not '%s'", a);
		break;
	case OPT_HEADS:
		o->cfg.heads = (int)cli_parse_long("--heads", a, 1, 1 << 20);
		break;
	case OPT_CAUSAL: o->cfg.causal = 1; break;
	case OPT_OVERLAP:
		if (strcmp(a, "none") != 0 && strcmp(a, "ring") != 0)
			cli_usage_error("--overlap: want none or ring, not '%s'",
			    a);
		o->cfg.overlap = strcmp(a, "ring") == 0;
		break;
	case OPT_ULYSSES:
		o->cfg.ulysses = (int)cli_parse_long("--ulysses", a, 1, 1 << 20);
		break;
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
	struct tplayer_opts *o = ctx;

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
	case OPT_TRACE: o->trace = a; break;
	case OPT_LR: o->lr = cli_parse_double("--lr", a, 0, 1e9); break;
	default: return 0;
	}
	return 1;
}

static void
parse_args(struct tplayer_opts *o, int argc, char **argv)
{
	struct trainopt_parser p = { .usage = usage, .g = &o->g,
	    .common = &o->c, .ckpt = &o->ckpt, .own = own_option, .ctx = o };

	trainopt_parse(&p, argc, argv, "hVvqm:i:o:", longopts);
}

static void
check_args(const struct tplayer_opts *o)
{
	const struct tp_cfg *c = &o->cfg;

	if (!o->have_layer || (o->c.model == NULL && o->ckpt.resume == NULL) ||
	    o->input == NULL)
		cli_usage_error("--layer, -m WEIGHTS (or --resume) and -i X are "
		    "required");
	if (c->mode == TP_MODE_ULYSSES && c->layer != TP_BLOCK &&
	    c->layer != TP_MLP)
		cli_usage_error("--mode ulysses goes with --layer block or mlp");
	if ((c->mode == TP_MODE_RING || c->mode == TP_MODE_ZIGZAG ||
	    c->mode == TP_MODE_USP || c->mode == TP_MODE_SP) &&
	    c->layer != TP_BLOCK)
		cli_usage_error("--mode %s goes with --layer block",
		    tp_mode_name(c->mode));
	if ((c->mode == TP_MODE_USP) != (c->ulysses > 0))
		cli_usage_error("--mode usp and --ulysses U go together");
	if (c->local_output && (c->layer != TP_COLUMN || c->mode != TP_MODE_TP))
		cli_usage_error("--local-output goes with --layer column --mode tp");
	if (c->input_parallel && (c->layer != TP_ROW || c->mode != TP_MODE_TP))
		cli_usage_error("--input-is-parallel goes with --layer row "
		    "--mode tp");
	if (c->post_norm && c->layer != TP_BLOCK)
		cli_usage_error("--norm goes with --layer block");
	if (c->post_norm && (c->mode == TP_MODE_SP || c->overlap))
		cli_usage_error("--norm post goes with neither --mode sp nor "
		    "--overlap ring");
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

int
main(int argc, char **argv)
{
	struct tplayer_opts o = { .iters = 1, .c.threads = 1, .c.steps = -1,
	    .lr = 0.01, .rtol = 1e-4 };

	cli_init(argv[0]);
	cli_group_defaults(&o.g);
	parse_args(&o, argc, argv);
	cli_group_finish(&o.g);
	prog_precision_start(o.c.precision);
	check_args(&o);
	if (o.check && o.cfg.input_parallel)
		cli_usage_error("--check needs the whole X: leave out "
		    "--input-is-parallel");
	tplayer_run(&o);
	cli_group_free(&o.g);
	cli_close_stdout();
	return CLI_EXIT_OK;
}
