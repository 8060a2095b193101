/* collx-dp: data-parallel training of a built-in model (mlp, block, gpt),
 * gradients synced by allreduce or a parameter server; or --init, a fresh
 * model from a seed. The training itself is lib/nn/dp.c's. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

#include "cli/cli.h"
#include "comm/comm.h"
#include "prog/dpcli.h"
#include "prog/trainer_dp.h"

static const struct option longopts[] = {
	CLI_STD_LONGOPTS,
	TRAINOPT_FILE_LONGOPTS,
	{ "data", 1, 0, DPCLI_DATA }, { "targets", 1, 0, DPCLI_TARGETS },
	TRAINOPT_STEPS_LONGOPTS, { "sync", 1, 0, DPCLI_SYNC },
	{ "ps-servers", 1, 0, DPCLI_PS_SERVERS }, { "ps", 1, 0, DPCLI_PS },
	{ "ps-mode", 1, 0, DPCLI_PS_MODE },
	{ "staleness", 1, 0, DPCLI_STALENESS },
	{ "shuffle", 0, 0, DPCLI_SHUFFLE },
	{ "seed", 1, 0, DPCLI_SEED }, { "init", 1, 0, DPCLI_INIT },
	{ "dims", 1, 0, DPCLI_DIMS },
	{ "experts", 1, 0, DPCLI_EXPERTS }, { "topk", 1, 0, DPCLI_TOPK },
	{ "moe-every", 1, 0, DPCLI_MOE_EVERY },
	{ "capacity", 1, 0, DPCLI_CAPACITY },
	{ "aux-loss", 1, 0, DPCLI_AUX_LOSS }, { "ft", 0, 0, DPCLI_FT },
	DPOPT_LONGOPTS, DPOPT_BUCKET_LONGOPTS,
	TRAINOPT_RUN_LONGOPTS,
	TRAINOPT_CKPT_LONGOPTS,
	TRAINOPT_OPTIM_LONGOPTS,
	CLI_GROUP_LONGOPTS,
	{ 0, 0, 0, 0 }
};

static _Noreturn void
usage(void)
{
	printf("usage: %s (-m MODEL.safetensors | --resume CKPT.safetensors)\n"
	    "           --data X.npy [--targets Y.npy] --batch B\n"
	    "           (--steps K | --epochs E) [options]\n"
	    "       %s --init ARCH --dims DIMS [--seed S] -o MODEL.safetensors\n"
	    "           [--experts E [--topk K] [--moe-every N] [--capacity F]\n"
	    "           [--aux-loss A]]\n\n"
	    "Data-parallel training of a built-in model (mlp, block, gpt).\n\n"
	    "  -m, --model F         model (safetensors with collx.arch metadata)\n"
	    "  --data F              mlp/block: X rows; gpt: token file (.npy or\n"
	    "                        raw bytes)\n"
	    "  --targets F           mlp/block: Y rows\n"
	    "  --batch B             global batch, split over the ranks\n"
	    "  --steps K             train K steps\n"
	    "  --epochs E            train ceil(E * samples / B) steps\n"
	    TRAINOPT_OPTIM_HELP
	    "  --sync ALGO           ring, tree, rd, rabenseifner, naive, ps or\n"
	    "                        auto (default)\n"
	    "  --ps-servers S        --sync ps: ranks 0..S-1 also serve (1)\n"
	    "  --ps HOST:PORT,...    --sync ps: external collx-ps servers\n"
	    "  --ps-mode MODE        sync (default) or async\n"
	    "  --staleness K         async: no worker more than K pushes ahead\n"
	    "  --bucket-mb N         fuse gradients into buckets of N MiB (25)\n"
	    "  --no-overlap          sync the buckets after the whole backward pass\n"
	    "                        (default: each as soon as its gradients are final)\n"
	    "  --zero STAGE          ZeRO 1: shard the optimizer state over the ranks;\n"
	    "                        2: also the reduced gradients; 3: also the\n"
	    "                        parameters, each layer gathered before its\n"
	    "                        forward and backward (0: off)\n"
	    DPOPT_FSDP_HELP
	    DPOPT_SYNC_HELP
	    TRAINOPT_CKPT_HELP
	    "  --ft                  a rank that dies takes its replica out; the\n"
	    "                        others run the step again and go on, a line\n"
	    "                        each departure (TCP, one interface; not with --sync ps,\n"
	    "                        --shard-group host, --wire, --powersgd,\n"
	    "                        --sync-every);\n"
	    "                        with COLLX_REJOIN=1 a rank started again\n"
	    "                        rejoins at the next step\n"
	    "  --shuffle             permute the samples every epoch (from --seed)\n"
	    "  --seed S              shuffle and --init seed (0)\n"
	    "  -o, --output F        rank 0 writes the trained model (or --init's)\n"
	    "  --loss-csv F          rank 0 writes step,epoch,loss,tokens,seconds,\n"
	    "                        tokens_per_s,bytes_sent (its own, per step),\n"
	    "                        with --ft replicas\n"
	    "  --timing F            append compute and communication (total, hidden,\n"
	    "                        exposed) timing rows\n"
	    "  --threads N           BLAS threads per rank (1)\n"
	    PRECISION_HELP
	    "  --init ARCH           write a fresh mlp, block or gpt model\n"
	    "  --dims DIMS           mlp DIN,H,DOUT[,LAYERS];\n"
	    "                        block D,HEADS[,FF[,CAUSAL[,LAYERS]]];\n"
	    "                        gpt VOCAB,D,LAYERS,HEADS,SEQ[,FF] (FF 0 or\n"
	    "                        none: 4*D); the LAYERS of an mlp or block: a\n"
	    "                        stack of that many, layers.0.* ... (as\n"
	    "                        collx-pipe splits; an mlp's later layers map\n"
	    "                        DOUT to DOUT), 0 or none: one layer\n"
	    "  --experts E           gpt: every N-th block's mlp an MoE of E experts\n"
	    "  --topk K              experts per token (1)\n"
	    "  --moe-every N         blocks N-1, 2N-1, ... have experts (1: all)\n"
	    "  --capacity F          each expert takes at most ceil(F*T*K/E) of a\n"
	    "                        rank's T tokens (0: no limit)\n"
	    "  --aux-loss A          auxiliary load-balancing loss weight (0)\n"
	    "  -v, --verbose         a line per step on stderr, and every rank's\n"
	    "                        memory and mean step time at the end (without\n"
	    "                        -v, a terminal gets one live progress line);\n"
	    "                        rank 0 ends with a summary line either way\n"
	    "  -q, --quiet           no step lines, no progress, no summary\n"
	    TRAINOPT_STD_HELP
	    "%s"
	    "Exit status: 0 ok, 1 runtime failure, 2 usage, 3 bad input or ranks\n"
	    "disagree (parameters not identical after training).\n",
	    cli_progname, cli_progname, cli_group_help);
	cli_close_stdout();
	exit(CLI_EXIT_OK);
}

/* collx-dp's own options (dpcli_option), a bad value a usage error. */
static int
own_option(void *ctx, int c, const char *a)
{
	char e[COLLX_ERRLEN];
	int r = dpcli_option(ctx, c, a, e, sizeof(e));

	if (r < 0)
		cli_usage_error("%s", e);
	return r;
}

static void
train(struct dpcli *o, struct nn_model *m, const struct train_data *d)
{
	struct trainer_dp r;
	struct train_step *steps = NULL;
	struct dp_mem mem = { 0 };
	struct comm *c;
	enum train_err kind;
	struct prog_job job;
	char e[COLLX_ERRLEN];
	int code;

	trainer_dp_begin(&r, &o->cfg, m, &o->c, &o->ckpt, &o->g);
	dpcli_declare(&job, o);
	if ((code = prog_join(&c, &o->g, &job, e, sizeof(e))) != 0)
		cli_die(code, "%s", e);
	if (dp_train(m, d, c, &o->cfg, trainer_dp_step, &r, &mem, &steps,
	    &kind, e, sizeof(e)) < 0)
		cli_die((int)kind, "%s", e);
	trainer_dp_end(&r, &mem, steps, &o->c, m);
	comm_close(c);
	free(steps);
}

int
main(int argc, char **argv)
{
	struct dpcli o = { 0 };
	struct trainopt_parser p = { .usage = usage, .g = &o.g,
	    .common = &o.c, .optim = &o.optim, .ckpt = &o.ckpt,
	    .dpo = &o.cfg.dpo, .own = own_option, .ctx = &o };
	struct trainer_in in = { 0 };
	char e[COLLX_ERRLEN];

	cli_init(argv[0]);
	cli_group_defaults(&o.g);
	dpcli_defaults(&o);
	trainopt_parse(&p, argc, argv, "hVvqm:o:", longopts);
	if (dpcli_check_init(&o, e, sizeof(e)) < 0)
		cli_usage_error("%s", e);
	if (o.init != NULL)
		trainer_init_model(o.init, o.dims, o.cfg.seed, o.c.out,
		    o.have_experts ? &o.moe : NULL);
	cli_group_finish(&o.g);
	prog_precision_start(o.c.precision);
	trainer_check(&o.ckpt, o.c.model, o.data, "--data");
	if (dpcli_check(&o, e, sizeof(e)) < 0)
		cli_usage_error("%s", e);
	trainer_in_paths(&in, &o.g, &o.c.model, &o.data, &o.targets,
	    &o.ckpt.resume);
	if (trainopt_optim_config(&o.optim, &o.cfg.optim, e, sizeof(e)) < 0)
		cli_usage_error("%s", e);
	trainer_in_model(&in, &o.ckpt, o.c.model, o.c.threads);
	trainer_targets(&in.m, o.targets, "--targets");
	if (dpopt_prefetch_check(&o.cfg.dpo, &in.m, e, sizeof(e)) < 0)
		cli_usage_error("%s", e);
	trainer_in_data(&in, o.data, o.targets, &o.c, &o.ckpt);
	o.cfg.resume = o.ckpt.resume != NULL ? &in.st : NULL;
	o.cfg.batch = o.c.batch;
	o.cfg.steps = o.c.steps;
	train(&o, &in.m, &in.d);
	trainer_in_free(&in);
	cli_group_free(&o.g);
	cli_close_stdout();
	return CLI_EXIT_OK;
}
