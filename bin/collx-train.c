/* collx-train: composed parallelism: one model trained by D data-parallel
 * replicas of a P-stage pipeline whose stages are sharded over T-way
 * tensor-parallel groups, laid out by lib/par/mesh.c and trained by the
 * pipeline runner (lib/par/pipe.c) over tp_stage stages, its gradients
 * summed over each stage's replicas, in the trainer shell
 * (lib/prog/trainer_pipe.c); or --print-mesh, the layout alone. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

#include "cli/cli.h"
#include "prog/meshopt.h"

static const struct option longopts[] = {
	CLI_STD_LONGOPTS,
	TRAINOPT_FILE_LONGOPTS,
	{ "data", 1, 0, MESHOPT_DATA }, { "input", 1, 0, 'i' },
	{ "targets", 1, 0, 't' },
	{ "dp", 1, 0, MESHOPT_DP }, { "tp", 1, 0, MESHOPT_TP },
	{ "pp", 1, 0, MESHOPT_PP },
	TRAINER_PIPE_LONGOPTS,
	TRAINOPT_STEPS_LONGOPTS, { "print-mesh", 0, 0, MESHOPT_PRINT },
	{ "ranks-per-host", 1, 0, MESHOPT_PER_HOST },
	{ "cp", 1, 0, MESHOPT_CP }, { "cp-mode", 1, 0, MESHOPT_CP_MODE },
	{ "ep", 1, 0, MESHOPT_EP }, { "dispatch", 1, 0, MESHOPT_DISPATCH },
	{ "expert-counts", 1, 0, MESHOPT_EXPERT_CSV },
	{ "ft", 0, 0, MESHOPT_FT },
	TRAINOPT_RUN_LONGOPTS,
	TRAINOPT_OPTIM_LONGOPTS,
	TRAINOPT_CKPT_LONGOPTS,
	DPOPT_LONGOPTS,
	CLI_GROUP_LONGOPTS,
	{ 0, 0, 0, 0 }
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

/* collx-train's own options (meshopt_option), a bad value a usage
 * error. */
static int
own_option(void *ctx, int c, const char *a)
{
	char e[COLLX_ERRLEN];
	int r = meshopt_option(ctx, c, a, e, sizeof(e));

	if (r < 0)
		cli_usage_error("%s", e);
	return r;
}

/* --print-mesh: no group, the world size from --world-size. */
static _Noreturn void
print_mesh(const struct meshopt *o)
{
	char e[COLLX_ERRLEN];

	if (meshopt_print(stdout, o, e, sizeof(e)) < 0)
		cli_die(CLI_EXIT_DATA, "%s", e);
	cli_close_stdout();
	exit(CLI_EXIT_OK);
}

int
main(int argc, char **argv)
{
	struct meshopt o = MESHOPT_DEFAULTS;
	struct trainopt_parser p = { .usage = usage, .g = &o.g,
	    .common = &o.c, .optim = &o.optim, .ckpt = &o.ckpt,
	    .dpo = &o.dpo, .own = own_option, .ctx = &o };
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
	trainopt_parse(&p, argc, argv, "hVvqm:o:i:t:", longopts);
	meshopt_finish(&o);
	if (o.print)
		print_mesh(&o);
	cli_group_finish(&o.g);
	prog_precision_start(o.c.precision);
	trainer_check(&o.ckpt, o.c.model, o.data, "--data (or -i)");
	if (meshopt_check(&o, e, sizeof(e)) < 0 ||
	    trainopt_optim_config(&o.optim, &cfg.optim, e, sizeof(e)) < 0)
		cli_usage_error("%s", e);
	trainer_in_paths(&in, &o.g, &o.c.model, &o.data, &o.targets,
	    &o.ckpt.resume);
	trainer_in_model(&in, &o.ckpt, o.c.model, o.c.threads);
	/* refused on every rank alike before any rank talks to another */
	if (meshopt_mesh(&o, &mesh, o.g.world, m, e, sizeof(e)) < 0)
		cli_die_rank(CLI_EXIT_DATA, "%s", e);
	if (meshopt_check_model(&o, &mesh, m, e, sizeof(e)) < 0)
		cli_usage_error("%s", e);
	trainer_targets(m, o.targets, "-t (--targets)");
	/* interleaved: P*V virtual stages, chunk c of stage j is c*P + j */
	cfg.chunks = (int)o.p.virt;
	trainer_pipe_split(&run, m, cfg.chunks);
	trainer_in_data(&in, o.data, o.targets, &o.c, &o.ckpt);
	trainer_pipe_cfg(&cfg, &run, &o.ckpt, &in.st);
	cfg.dpo = o.dpo;
	cfg.cp_zigzag = o.cp_zigzag;
	meshopt_declare(&job, &o, &mesh, &cfg);
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
