/* collx-dp: data-parallel training of a built-in model (mlp, block, gpt),
 * gradients synced by allreduce or a parameter server; or --init, a fresh
 * model from a seed. The training itself is lib/nn/dp.c's. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "comm/coll.h"
#include "comm/comm.h"
#include "comm/ps.h"
#include "par/dp.h"
#include "prog/trainer_dp.h"
#include "nn/nn.h"

enum {
	OPT_DATA = CLI_OPT_PROGRAM, OPT_TARGETS, OPT_SYNC, OPT_PS_SERVERS, OPT_PS, OPT_PS_MODE, OPT_STALENESS,
	OPT_SHUFFLE, OPT_SEED, OPT_INIT, OPT_DIMS,
	OPT_EXPERTS, OPT_TOPK, OPT_MOE_EVERY, OPT_CAPACITY, OPT_AUX_LOSS, OPT_FT
};

static const struct option longopts[] = {
	CLI_STD_LONGOPTS,
	TRAINOPT_FILE_LONGOPTS,
	{ "data", 1, 0, OPT_DATA }, { "targets", 1, 0, OPT_TARGETS },
	TRAINOPT_STEPS_LONGOPTS, { "sync", 1, 0, OPT_SYNC },
	{ "ps-servers", 1, 0, OPT_PS_SERVERS }, { "ps", 1, 0, OPT_PS },
	{ "ps-mode", 1, 0, OPT_PS_MODE }, { "staleness", 1, 0, OPT_STALENESS },
	{ "shuffle", 0, 0, OPT_SHUFFLE },
	{ "seed", 1, 0, OPT_SEED }, { "init", 1, 0, OPT_INIT },
	{ "dims", 1, 0, OPT_DIMS },
	{ "experts", 1, 0, OPT_EXPERTS }, { "topk", 1, 0, OPT_TOPK },
	{ "moe-every", 1, 0, OPT_MOE_EVERY }, { "capacity", 1, 0, OPT_CAPACITY },
	{ "aux-loss", 1, 0, OPT_AUX_LOSS }, { "ft", 0, 0, OPT_FT },
	DPOPT_LONGOPTS, DPOPT_BUCKET_LONGOPTS,
	TRAINOPT_RUN_LONGOPTS,
	TRAINOPT_CKPT_LONGOPTS,
	TRAINOPT_OPTIM_LONGOPTS,
	CLI_GROUP_LONGOPTS,
	{ 0, 0, 0, 0 }
};

struct opts {
	struct trainopt_common c;
	const char *data, *targets, *init, *dims, *sync_name;
	struct trainopt_optim optim;
	struct trainopt_ckpt ckpt;
	int have_ps_servers;
	struct dp_cfg cfg;
	struct cli_group g;
	struct nn_dims moe;	/* --init's experts, when have_experts */
	int have_experts;
	const char *moe_opt;	/* an experts option given, for its refusal */
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

static void
parse_sync(struct opts *o, const char *s)
{
	o->sync_name = s;
	if (strcmp(s, "ps") == 0) {
		o->cfg.sync = DP_PS;
		return;
	}
	o->cfg.sync = DP_ALLREDUCE;
	if (coll_algo_parse(s, &o->cfg.algo) < 0 ||
	    !coll_algo_valid(COLL_KIND_ALLREDUCE, o->cfg.algo))
		cli_usage_error("--sync: unknown algorithm '%s'", s);
}

/* Options of training; 0 when c was not one of them. */
static int
train_option(struct opts *o, int c, const char *a)
{
	switch (c) {
	case OPT_SYNC: parse_sync(o, a); break;
	case OPT_PS_SERVERS:
		o->cfg.ps_servers = (int)cli_parse_long("--ps-servers", a, 1, 1 << 20);
		o->have_ps_servers = 1;
		break;
	case OPT_PS: o->cfg.ps_addrs = a; break;
	case OPT_PS_MODE:
		if (ps_mode_parse(a, &o->cfg.ps_mode) < 0)
			cli_usage_error("--ps-mode: want sync or async, not '%s'", a);
		break;
	case OPT_STALENESS:
		o->cfg.staleness = (int)cli_parse_long("--staleness", a, 0, 1 << 30);
		break;
	case OPT_SHUFFLE: o->cfg.shuffle = 1; break;
	case OPT_FT: o->cfg.ft = 1; break;
	default: return 0;
	}
	return 1;
}

/* --init's experts options; 0 when c is not one of them. Numbers that
 * parse but do not fit the model are nn_moe_valid's (exit 3). */
static int
moe_option(struct opts *o, int c, const char *a)
{
	switch (c) {
	case OPT_EXPERTS:
		o->moe.moe.experts = (int)cli_parse_long("--experts", a, -(1L << 30),
		    1L << 30);
		o->have_experts = 1;
		return 1;
	case OPT_TOPK:
		o->moe.moe.topk = (int)cli_parse_long("--topk", a, -(1L << 30),
		    1L << 30);
		break;
	case OPT_MOE_EVERY:
		o->moe.moe_every = (int)cli_parse_long("--moe-every", a,
		    -(1L << 30), 1L << 30);
		break;
	case OPT_CAPACITY:
		o->moe.moe.capacity = cli_parse_double("--capacity", a, 0, 1e9);
		break;
	case OPT_AUX_LOSS:
		o->moe.moe_aux = cli_parse_double("--aux-loss", a, 0, 1e9);
		break;
	default: return 0;
	}
	o->moe_opt = c == OPT_TOPK ? "--topk" : c == OPT_MOE_EVERY ?
	    "--moe-every" : c == OPT_CAPACITY ? "--capacity" : "--aux-loss";
	return 1;
}

/* The options of collx-dp's own; 0 when c is not one of them. */
static int
own_option(void *ctx, int c, const char *a)
{
	struct opts *o = ctx;

	if (train_option(o, c, a))
		return 1;
	switch (c) {
	case OPT_DATA: o->data = a; break;
	case OPT_TARGETS: o->targets = a; break;
	case OPT_SEED:
		o->cfg.seed = (uint64_t)cli_parse_long("--seed", a, 0,
		    0x7fffffffffffffffL);
		break;
	case OPT_INIT: o->init = a; break;
	case OPT_DIMS: o->dims = a; break;
	default: return moe_option(o, c, a);
	}
	return 1;
}

static void
parse_args(struct opts *o, int argc, char **argv)
{
	struct trainopt_parser p = { .usage = usage, .g = &o->g,
	    .common = &o->c, .optim = &o->optim, .ckpt = &o->ckpt,
	    .dpo = &o->cfg.dpo, .own = own_option, .ctx = o };

	trainopt_parse(&p, argc, argv, "hVvqm:o:", longopts);
}

/* PowerSGD's refusals, each naming both options. */
static void
check_powersgd(const struct opts *o)
{
	if (o->cfg.dpo.powersgd == 0)
		return;
	if (o->cfg.sync == DP_PS)
		cli_usage_error("--powersgd goes with allreduce, not --sync ps");
}

/* --ft's refusals, each naming the options: the state a replica takes
 * with it (error feedback, PowerSGD's, local SGD's, a server's shard, a
 * host's shards of hybrid ZeRO-3) would be lost with it. ZeRO 1, 2 and 3
 * keep each slice mirrored at the ring predecessor (dp_ft_zero.c). */
static void
check_ft(struct opts *o)
{
	const struct dp_opts *d = &o->cfg.dpo;
	const char *with = o->cfg.sync == DP_PS ? "--sync ps" : d->zero == 3 &&
	    d->shard_host ? "--shard-group host" : d->wire != DP_WIRE_F32 ? "--wire" : d->powersgd > 0 ?
	    "--powersgd" : d->sync_every > 0 ? "--sync-every" : NULL;

	if (!o->cfg.ft)
		return;
	if (with != NULL)
		cli_usage_error("--ft goes with plain allreduce, not %s (the "
		    "state a replica holds would leave with it)", with);
	if (o->g.world < 2)
		cli_usage_error("--ft needs two replicas or more (--world-size "
		    "%d)", o->g.world);
	/* the survivors read their links to a frame: TCP, in order, one
	 * stream a pair */
	if (o->g.iface != NULL && strchr(o->g.iface, ',') != NULL)
		cli_usage_error("--ft takes one interface, not --iface %s "
		    "(or COLLX_IFNAME)", o->g.iface);
	o->g.no_shm = 1;
	o->g.grow = 1;
	o->cfg.dpo.overlap = 0;
}

/* Local SGD's refusals, each naming both options. */
static void
check_local(const struct opts *o)
{
	long h = o->cfg.dpo.sync_every;

	if (h > 0 && o->cfg.sync == DP_PS)
		cli_usage_error("--sync-every goes with allreduce, not --sync ps");
}

static void
check_args(struct opts *o)
{
	trainer_check(&o->ckpt, o->c.model, o->data, "--data");
	if (o->c.batch < 1)
		cli_usage_error("--batch B is required");
	if ((o->c.steps >= 0) == (o->c.epochs > 0))
		cli_usage_error("give one of --steps and --epochs");
	if (o->cfg.ps_addrs != NULL && o->sync_name == NULL)
		o->cfg.sync = DP_PS;
	if (o->cfg.sync != DP_PS && (o->cfg.ps_addrs || o->have_ps_servers))
		cli_usage_error("--ps and --ps-servers go with --sync ps");
	if (o->cfg.ps_addrs != NULL && o->have_ps_servers)
		cli_usage_error("--ps (external servers) and --ps-servers "
		    "(colocated) exclude each other");
	if (o->cfg.staleness >= 0 && (o->cfg.sync != DP_PS ||
	    o->cfg.ps_mode != PS_ASYNC))
		cli_usage_error("--staleness goes with --sync ps --ps-mode async");
	if (o->cfg.dpo.zero > 0 && o->cfg.sync == DP_PS)
		cli_usage_error("--zero goes with allreduce, not --sync ps");
	if (o->cfg.dpo.wire != DP_WIRE_F32 && o->cfg.sync == DP_PS)
		cli_usage_error("--wire %s goes with allreduce, not --sync ps",
		    dp_wire_name(o->cfg.dpo.wire));
	if (o->cfg.dpo.wire == DP_WIRE_INT8 && o->cfg.algo != COLL_AUTO)
		cli_usage_error("--wire int8 sends by alltoall and allgather; "
		    "--sync %s does not apply", o->sync_name);
	dpopt_check(&o->cfg.dpo, o->ckpt.every);
	check_local(o);
	check_powersgd(o);
	check_ft(o);
	if ((o->ckpt.path != NULL || o->ckpt.resume != NULL) &&
	    o->cfg.sync == DP_PS &&
	    (o->cfg.ps_addrs != NULL || o->cfg.ps_mode == PS_ASYNC))
		cli_usage_error("--checkpoint and --resume go with allreduce or "
		    "synchronous colocated servers (external and asynchronous "
		    "servers keep the optimizer state themselves)");
	if (o->cfg.ps_addrs == NULL && o->cfg.ps_servers > o->g.world)
		cli_usage_error("--ps-servers %d: more servers than the %d ranks",
		    o->cfg.ps_servers, o->g.world);
}

static struct comm *
join_group(const struct opts *o)
{
	const struct dp_cfg *f = &o->cfg;
	struct prog_job job;
	struct comm *c;
	char e[COLLX_ERRLEN];
	int code;

	prog_job_init(&job, "collx-dp");
	prog_job_add(&job, "--sync", "%s", f->sync == DP_PS ? "ps" :
	    coll_algo_name(f->algo));
	prog_job_add(&job, "--batch", "%ld", f->batch);
	prog_job_add(&job, "--steps", "%ld", f->steps);
	trainopt_optim_agree(&job, &f->optim);
	dpopt_agree(&job, &f->dpo, 1);
	prog_job_flag(&job, "--shuffle", f->shuffle);
	prog_job_add(&job, "--seed", "%llu", (unsigned long long)f->seed);
	prog_job_add(&job, "--ps-servers", "%d", f->ps_servers);
	prog_job_add(&job, "--ps-mode", "%s", ps_mode_name(f->ps_mode));
	prog_job_add(&job, "--staleness", "%d", f->staleness);
	if (f->ft)
		prog_job_flag(&job, "--ft", 1);
	trainer_declare_ckpt(&job, &o->ckpt, f->resume != NULL ?
	    f->resume->step : 0L);
	if ((code = prog_join(&c, &o->g, &job, e, sizeof e)) != 0)
		cli_die(code, "%s", e);
	return c;
}

static void
train(struct opts *o, struct nn_model *m, const struct train_data *d)
{
	struct trainer_dp r;
	struct train_step *steps = NULL;
	struct dp_mem mem = { 0 };
	struct comm *c;
	enum train_err kind;
	char e[COLLX_ERRLEN];

	trainer_dp_begin(&r, &o->cfg, m, &o->c, &o->ckpt, &o->g);
	c = join_group(o);
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
	struct opts o = { .c.steps = -1, .c.threads = 1 };
	struct trainer_in in = { 0 };
	char e[COLLX_ERRLEN];

	cli_init(argv[0]);
	cli_group_defaults(&o.g);
	o.cfg.algo = COLL_AUTO;
	o.cfg.ps_servers = 1;
	o.cfg.staleness = -1;
	o.cfg.dpo = (struct dp_opts)DP_OPTS_DEFAULTS;
	o.moe.moe = (struct nn_moe_cfg){ .topk = 1 };
	o.moe.moe_every = 1;
	parse_args(&o, argc, argv);
	if (o.moe_opt != NULL && !o.have_experts)
		cli_usage_error("%s goes with --init gpt --experts E",
		    o.moe_opt);
	if (o.have_experts && o.init == NULL)
		cli_usage_error("--experts goes with --init gpt");
	if (o.init != NULL)
		trainer_init_model(o.init, o.dims, o.cfg.seed, o.c.out,
		    o.have_experts ? &o.moe : NULL);
	cli_group_finish(&o.g);
	prog_precision_start(o.c.precision);
	check_args(&o);
	trainer_in_paths(&in, &o.g, &o.c.model, &o.data, &o.targets,
	    &o.ckpt.resume);
	if (trainopt_optim_config(&o.optim, &o.cfg.optim, e, sizeof(e)) < 0)
		cli_usage_error("%s", e);
	trainer_in_model(&in, &o.ckpt, o.c.model, o.c.threads);
	trainer_targets(&in.m, o.targets, "--targets");
	dpopt_check_prefetch(&o.cfg.dpo, &in.m);
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
