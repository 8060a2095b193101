/* collx-train: composed parallelism: one model trained by D data-parallel
 * replicas of a P-stage pipeline whose stages are sharded over T-way
 * tensor-parallel groups, laid out by lib/par/mesh.c and trained by the
 * pipeline runner (lib/par/pipe.c) over tp_stage stages, its gradients
 * summed over each stage's replicas, in the trainer shell
 * (lib/prog/trainer_pipe.c); or --print-mesh, the layout alone. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "nn/nn.h"
#include "par/cp_stage.h"
#include "par/ep.h"
#include "par/mesh.h"
#include "par/pipe.h"
#include "par/pipe_sched.h"
#include "prog/dpopt.h"
#include "prog/trainer_pipe.h"

enum {
	OPT_DATA = CLI_OPT_PROGRAM, OPT_DP, OPT_TP, OPT_PP, OPT_PRINT,
	OPT_PER_HOST, OPT_CP, OPT_CP_MODE, OPT_EP, OPT_DISPATCH, OPT_EXPERT_CSV,
	OPT_FT
};

static const struct option longopts[] = {
	CLI_STD_LONGOPTS,
	TRAINOPT_FILE_LONGOPTS,
	{ "data", 1, 0, OPT_DATA }, { "input", 1, 0, 'i' },
	{ "targets", 1, 0, 't' },
	{ "dp", 1, 0, OPT_DP }, { "tp", 1, 0, OPT_TP }, { "pp", 1, 0, OPT_PP },
	TRAINER_PIPE_LONGOPTS,
	TRAINOPT_STEPS_LONGOPTS, { "print-mesh", 0, 0, OPT_PRINT },
	{ "ranks-per-host", 1, 0, OPT_PER_HOST },
	{ "cp", 1, 0, OPT_CP }, { "cp-mode", 1, 0, OPT_CP_MODE },
	{ "ep", 1, 0, OPT_EP }, { "dispatch", 1, 0, OPT_DISPATCH },
	{ "expert-counts", 1, 0, OPT_EXPERT_CSV }, { "ft", 0, 0, OPT_FT },
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
	const char *data, *targets;
	int dp, tp, pp, per_host, print;
	int cp, cp_zigzag;	/* --cp C, --cp-mode */
	int ep;			/* --ep X, 1: none */
	enum ep_dispatch dispatch;
	const char *expert_csv;	/* --expert-counts */
	int ft;			/* --ft on the DP axis */
	struct trainer_pipe_opts p;
	struct trainopt_optim optim;
	struct trainopt_ckpt ckpt;
	struct dp_opts dpo;
	struct cli_group g;
};

static _Noreturn void
usage(void)
{
	printf("usage: %s (-m MODEL.safetensors | --resume CKPT.safetensors)\n"
	    "           (--data TEXT | -i X.npy -t Y.npy) --batch B\n"
	    "           (--steps K | --epochs E) [--dp D] [--tp T] [--pp P]\n"
	    "           [--cp C [--cp-mode ring|zigzag]]\n"
	    "           [--microbatches M] [--schedule gpipe|1f1b|zb-h1 |\n"
	    "           --schedule interleaved [--virtual V]] [options]\n"
	    "       %s --print-mesh [--world-size W] [--dp D] [--tp T] "
	    "[--pp P]\n"
	    "           [--cp C] [--ep X] [--ranks-per-host N]\n\n"
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
	    "  --ep X                the experts of each MoE block over X "
	    "consecutive\n"
	    "                        replicas (1)\n"
	    "  --dispatch D          tokens to their experts by alltoall "
	    "(default) or\n"
	    "                        allgather\n"
	    "  --expert-counts F     rank 0 writes step,layer,expert,tokens,"
	    "dropped\n"
	    "  --ft                  a rank that dies takes its replica (its "
	    "TP and PP\n"
	    "                        peers) out; the other replicas go on "
	    "with the\n"
	    "                        whole batch (loss CSV: + replicas); "
	    "with\n"
	    "                        COLLX_REJOIN=1 a replica started "
	    "again rejoins\n"
	    "  --microbatches M      micro-batches per replica and step (1)\n"
	    "  --schedule S          gpipe, 1f1b (default), zb-h1 or interleaved\n"
	    "  --virtual V           interleaved: V chunks per stage (2), each\n"
	    "                        sharded over the stage's TP group\n"
	    "  --cp C                gpt: each sequence sharded over C ranks "
	    "(1), its\n"
	    "                        attention a ring (rank = ((pp*D + dp)*C "
	    "+ cp)*T + tp)\n"
	    "  --cp-mode M           zigzag (default: balanced causal work) or "
	    "ring\n"
	    "  --split L1,L2,...     layers per stage, P*V when interleaved\n"
	    "                        (default: balanced by parameter count)\n"
	    "  --zero STAGE          ZeRO on the DP axis: 1 shards the "
	    "optimizer state\n"
	    "                        over the replicas, 2 the reduced "
	    "gradients too,\n"
	    "                        3 the parameters too (0)\n"
	    DPOPT_FSDP_HELP
	    DPOPT_SYNC_HELP
	    "  --batch B             global batch, split over the replicas\n"
	    "  --steps K             train K steps\n"
	    "  --epochs E            train ceil(E * samples / B) steps\n"
	    TRAINOPT_OPTIM_HELP
	    "  -o, --output F        rank 0 writes the trained model, whole\n"
	    "  --loss-csv F          rank 0 writes step,epoch,loss,tokens,"
	    "seconds,\n"
	    "                        tokens_per_s,bytes_sent\n"
	    "  --timing F            append timing rows (with axis,pp,dp,tp "
	    "and the\n"
	    "                        stage's bubble,bubble_theory,"
	    "peak_act_bytes; --cp:\n"
	    "                        cp too, and hidden_us, the ring's "
	    "overlap)\n"
	    "  --trace F.json        rank 0 writes a Chrome trace of replica "
	    "0,\n"
	    "                        a track per stage\n"
	    TRAINOPT_CKPT_HELP
	    "  --print-mesh          print each rank's place and the groups, "
	    "and exit\n"
	    "  --ranks-per-host N    --print-mesh: hosts of N consecutive "
	    "ranks\n"
	    "                        (default: one host)\n"
	    TRAINOPT_RUN_HELP
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

	if (trainer_pipe_option(&o->p, c, a, "gpipe, 1f1b, zb-h1 or "
	    "interleaved", 0))
		return 1;
	switch (c) {
	case OPT_DATA:
	case 'i': o->data = a; break;
	case 't': o->targets = a; break;
	case OPT_DP: o->dp = axis_value("--dp", a); break;
	case OPT_TP: o->tp = axis_value("--tp", a); break;
	case OPT_PP: o->pp = axis_value("--pp", a); break;
	case OPT_PRINT: o->print = 1; break;
	case OPT_FT: o->ft = 1; break;
	case OPT_CP:
		o->cp = (int)cli_parse_long("--cp", a, 1, 1 << 20);
		break;
	case OPT_CP_MODE:
		if (strcmp(a, "ring") != 0 && strcmp(a, "zigzag") != 0)
			cli_usage_error("--cp-mode: want ring or zigzag, not "
			    "'%s'", a);
		o->cp_zigzag = strcmp(a, "zigzag") == 0;
		break;
	case OPT_EP: o->ep = (int)cli_parse_long("--ep", a, 1, 1 << 20); break;
	case OPT_EXPERT_CSV: o->expert_csv = a; break;
	case OPT_DISPATCH:
		if (ep_dispatch_parse(a, &o->dispatch) < 0)
			cli_usage_error("--dispatch: want alltoall or allgather, "
			    "not '%s'", a);
		break;
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
	trainer_pipe_virtual(&o->p, "");
}

/* The mesh over world ranks, or exit 3 with the numbers. */
static void
mesh_or_die(const struct opts *o, struct mesh *m, int world)
{
	char e[COLLX_ERRLEN];

	if (mesh_resolve_cp(m, o->dp, o->tp, o->pp, o->cp, world, e,
	    sizeof(e)) < 0)
		cli_die_rank(CLI_EXIT_DATA, "%s", e);
}

/* --print-mesh --ep X: the EP groups, X consecutive replicas of each
 * stage and shard. */
static void
print_ep(const struct opts *o, const struct mesh *m)
{
	int X = o->ep;

	if (X <= 1)
		return;
	printf("ep groups of %d:", X);
	for (int p = 0; p < m->pp; p++)
		for (int t = 0; t < m->tp; t++)
			for (int g = 0; g < m->dp; g += X)
				for (int k = 0; k < X; k++)
					printf("%s%d%s", k ? " " : " [",
					    mesh_rank(m, p, g + k, t),
					    k == X - 1 ? "]" : "");
	putchar('\n');
}

/* --print-mesh: no group, the world size from --world-size. */
static _Noreturn void
print_mesh(const struct opts *o)
{
	struct mesh m;

	mesh_or_die(o, &m, o->g.world > 0 ? o->g.world : 1);
	if (m.dp % o->ep != 0)
		cli_die(CLI_EXIT_DATA, "--ep %d does not divide the %d "
		    "data-parallel replicas (--dp %d)", o->ep, m.dp, m.dp);
	if (m.cp > 1)
		printf("# mesh: dp %d x cp %d x tp %d x pp %d = %d ranks\n",
		    m.dp, m.cp, m.tp, m.pp, m.world);
	else
		printf("# mesh: dp %d x tp %d x pp %d = %d ranks\n", m.dp,
		    m.tp, m.pp, m.world);
	mesh_print(stdout, &m, o->per_host);
	print_ep(o, &m);
	cli_close_stdout();
	exit(CLI_EXIT_OK);
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
	prog_job_add(job, "--cp", "%d", m->cp);
	prog_job_add(job, "--cp-mode", "%s", cfg->cp_zigzag ? "zigzag" :
	    "ring");
	prog_job_add(job, "--ep", "%d", o->ep);
	prog_job_add(job, "--dispatch", "%s", ep_dispatch_name(o->dispatch));
	trainer_pipe_declare(job, cfg, o->p.split);
	trainer_pipe_declare_run(job, cfg, &o->ckpt);
	dpopt_agree(job, &cfg->dpo, 0);
	prog_job_flag(job, "--ft", o->ft);
}

/* The slow links' state in checkpoints, for the mesh: stages of one TP
 * rank, and --wire int8's error feedback once per parameter. */
static void
check_sync_mesh(const struct opts *o, const struct mesh *mesh,
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
	trainer_check(&o->ckpt, o->c.model, o->data, "--data (or -i)");
	if (o->c.batch < 1)
		cli_usage_error("--batch B is required");
	if (o->c.steps >= 0 && o->c.epochs > 0)
		cli_usage_error("give one of --steps and --epochs");
	if (o->c.steps < 0 && o->c.epochs <= 0)
		cli_usage_error("give --steps K or --epochs E");
	dpopt_check(&o->dpo, o->ckpt.every);	/* collx-dp's refusals */
	if (o->ep > 1 && o->dpo.sync_every > 0)
		cli_usage_error("--ep with --sync-every: a replica's local "
		    "steps would move the experts it runs on its rows only");
	/* a sequence's ranks must step alike; local SGD's replicas drift */
	if (o->cp > 1 && o->dpo.sync_every > 0)
		cli_usage_error("--cp %d and --sync-every %ld: the ranks of a "
		    "sequence must step with the same gradients", o->cp,
		    o->dpo.sync_every);
	/* not yet composed: the experts' exchange over a replica's ranks
	 * routing parts of each sequence */
	if (o->cp > 1 && o->ep > 1)
		cli_usage_error("--cp %d and --ep %d: experts shard over --dp "
		    "replicas whose sequences are whole; take one of them",
		    o->cp, o->ep);
}

/* --ft's refusals, each naming the options: the state a replica holds
 * on its own (a host's ZeRO-3 shards, error feedback, PowerSGD's, local SGD's) or
 * what is not built under it yet. Its links: TCP, one stream a pair,
 * no overlap (a sum runs on the step's thread, which the recovery
 * reads). */
static void
check_ft(struct opts *o, const struct mesh *mesh, const struct nn_model *m)
{
	const struct dp_opts *d = &o->dpo;
	const char *with = d->zero == 3 && d->shard_host ?
	    "--shard-group host" : d->wire != DP_WIRE_F32 ?
	    "--wire" : d->powersgd > 0 ? "--powersgd" : d->sync_every > 0 ?
	    "--sync-every" : mesh->cp > 1 ? "--cp" : o->ep > 1 ? "--ep" :
	    o->ckpt.path != NULL ? "--checkpoint" : o->ckpt.resume != NULL ?
	    "--resume" : o->p.trace != NULL ? "--trace" : NULL;

	if (!o->ft)
		return;
	if (with != NULL)
		cli_usage_error("--ft goes with plain allreduce on --dp, --tp "
		    "and --pp, not %s", with);
	if (mesh->dp < 2)
		cli_usage_error("--ft needs two replicas or more (--dp %d)",
		    mesh->dp);
	if (o->g.iface != NULL && strchr(o->g.iface, ',') != NULL)
		cli_usage_error("--ft takes one interface, not --iface %s "
		    "(or COLLX_IFNAME)", o->g.iface);
	if (m->dims.moe.experts > 0)
		cli_usage_error("--ft and a model with experts: their counts' "
		    "sums come after the update");
	o->g.no_shm = 1;
	o->dpo.overlap = 0;
	o->g.grow = 1;	/* a replica started again rejoins */
}

/* The mesh for this model, refused on every rank alike (exit 3) before
 * any rank talks to another. */
static void
mesh_for_model(const struct opts *o, struct mesh *mesh,
    const struct nn_model *m)
{
	char e[COLLX_ERRLEN];

	mesh_or_die(o, mesh, o->g.world);
	if (mesh_check_model(mesh, m, e, sizeof(e)) < 0 ||
	    cp_stage_check(m, mesh->cp, o->cp_zigzag, e, sizeof(e)) < 0 ||
	    ep_check(mesh->dp, o->ep, m, e, sizeof(e)) < 0)
		cli_die_rank(CLI_EXIT_DATA, "%s", e);
	if (o->p.micro > o->c.batch / mesh->dp)
		cli_usage_error("--microbatches %ld: more than the %ld samples "
		    "of the smallest replica's share of --batch %ld over %d",
		    o->p.micro, o->c.batch / mesh->dp, o->c.batch, mesh->dp);
}

int
main(int argc, char **argv)
{
	struct opts o = { .c.steps = -1, .c.threads = 1, .p.micro = 1,
	    .dp = AXIS_UNSET, .tp = 1, .pp = 1, .ep = 1,
	    .p.sched = PIPE_SCHED_1F1B, .cp = 1, .cp_zigzag = 1,
	    .dpo = DP_OPTS_DEFAULTS };
	struct pipe_cfg cfg = { 0 };
	struct mesh mesh;
	struct trainer_in in = { 0 };
	struct nn_model *m = &in.m;
	struct prog_job job;
	struct trainer_pipe run = { .c = &o.c, .o = &o.p, .mesh = &mesh,
	    .g = &o.g };
	char e[COLLX_ERRLEN];

	cli_init(argv[0]);
	cli_group_defaults(&o.g);
	parse_args(&o, argc, argv);
	if (o.print)
		print_mesh(&o);
	cli_group_finish(&o.g);
	prog_precision_start(o.c.precision);
	check_args(&o);
	if (trainopt_optim_config(&o.optim, &cfg.optim, e, sizeof(e)) < 0)
		cli_usage_error("%s", e);
	trainer_in_paths(&in, &o.g, &o.c.model, &o.data, &o.targets,
	    &o.ckpt.resume);
	trainer_in_model(&in, &o.ckpt, o.c.model, o.c.threads);
	mesh_for_model(&o, &mesh, m);
	if (o.dpo.zero == 3)
		dpopt_check_prefetch(&o.dpo, m);
	check_sync_mesh(&o, &mesh, m);
	check_ft(&o, &mesh, m);
	if (o.dpo.powersgd > 0 && mesh.tp > 1)
		cli_usage_error("--powersgd and --tp %d: PowerSGD compresses "
		    "whole matrices, not a TP rank's shards", mesh.tp);
	trainer_targets(m, o.targets, "-t (--targets)");
	/* interleaved: P*V virtual stages, chunk c of stage j is c*P + j */
	cfg.chunks = (int)o.p.virt;
	trainer_pipe_split(&run, m, cfg.chunks);
	trainer_in_data(&in, o.data, o.targets, &o.c, &o.ckpt);
	trainer_pipe_cfg(&cfg, &run, &o.ckpt, &in.st);
	cfg.dpo = o.dpo;
	cfg.cp_zigzag = o.cp_zigzag;
	job_declare(&job, &o, &mesh, &cfg);
	run.ep = o.ep;
	run.dispatch = o.dispatch;
	run.expert_csv = o.expert_csv;
	run.ft = o.ft;
	trainer_pipe_run(&run, m, &in.d, &cfg, &job);
	trainer_in_free(&in);
	cli_group_free(&o.g);
	cli_close_stdout();
	return CLI_EXIT_OK;
}
