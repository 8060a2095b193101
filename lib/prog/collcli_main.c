/* collcli_main: the shared main() of the five collective programs: the
 * options, --help and usage errors. Like a program, and unlike the rest
 * of the library, it exits (usage errors, --help, --version, failures). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "prog/collcli_int.h"

const char collcli_help[] =
"  -i, --input IN        input tensors: .npy, .safetensors, - or a URL\n"
"  -o, --output OUT      write the result (.npy, .safetensors; - for stdout);\n"
"                        without it rank 0 prints a summary line\n"
"  --iters N             timed repetitions (default 1)\n"
"  --warmup W            untimed repetitions before them (default 0)\n"
"  --timing F            append one CSV row per timed repetition to F\n"
"  --check               verify the result against a one-process reference\n"
"  --stream              read .npy arrays from IN until its end, write each\n"
"                        result to OUT as soon as it is ready\n"
"  --bucket SIZE         fuse tensors of one dtype into collectives of up to\n"
"                        SIZE bytes (K, M, G suffixes; default 4M; 0: none)\n"
"  -v, --verbose         report the algorithm used and the check\n"
"  -q, --quiet           report nothing but errors\n"
"  -h, --help            print this help and exit\n"
"  -V, --version         print the version and exit\n";

const char *
collcli_kind_name(enum coll_kind kind)
{
	switch (kind) {
	case COLL_KIND_ALLREDUCE: return "allreduce";
	case COLL_KIND_BROADCAST: return "broadcast";
	case COLL_KIND_ALLGATHER: return "allgather";
	case COLL_KIND_REDUCE_SCATTER: return "reduce-scatter";
	case COLL_KIND_ALLTOALL: return "alltoall";
	case COLL_KIND_ALLTOALLV: return "alltoallv";
	default: return "collective";
	}
}

enum coll_kind
collcli_coll_kind(const struct collcli *o)
{
	return o->kind == COLL_KIND_ALLTOALL && o->counts ? COLL_KIND_ALLTOALLV :
	    o->kind;
}

/* ---- options ---- */

void
collcli_init(struct collcli *o, enum coll_kind kind)
{
	memset(o, 0, sizeof *o);
	o->kind = kind;
	o->algo = COLL_AUTO;
	o->op = COLL_SUM;
	o->iters = 1;
	o->bucket = COLLCLI_BUCKET_DEFAULT;
	cli_group_defaults(&o->group);
}

static void
parse_algo(struct collcli *o, const char *arg)
{
	char list[256] = "";
	int a;

	if (coll_algo_parse(arg, &o->algo) == 0 &&
	    coll_algo_valid(collcli_coll_kind(o), o->algo))
		return;
	for (a = 0; a < COLL_ALGO_COUNT; a++)
		if (coll_algo_valid(collcli_coll_kind(o), (enum coll_algo)a))
			snprintf(list + strlen(list), sizeof list - strlen(list),
			    "%s%s", *list ? ", " : "", coll_algo_name((enum coll_algo)a));
	cli_usage_error("--algo: '%s' is not an algorithm of %s (%s)", arg,
	    collcli_kind_name(collcli_coll_kind(o)), list);
}

static int
parse_int(const char *opt, const char *arg, long min, long max)
{
	return (int)cli_parse_long(opt, arg, min, max);
}

void
collcli_option(struct collcli *o, int opt, const char *arg, void (*usage)(void))
{
	if (cli_std_option(opt, usage) || cli_group_getopt(&o->group, opt, arg))
		return;
	switch (opt) {
	case 'i': o->in = arg; break;
	case 'o': o->out = arg; break;
	case CLI_OPT_TIMING: o->timing = arg; break;
	case COLLCLI_OPT_ALGO: o->algo_arg = arg; break;
	case COLLCLI_OPT_COUNTS: o->counts = arg; break;
	case COLLCLI_OPT_ITERS: o->iters = parse_int("iters", arg, 1, 1 << 30); break;
	case COLLCLI_OPT_WARMUP: o->warmup = parse_int("warmup", arg, 0, 1 << 30); break;
	case COLLCLI_OPT_CHECK: o->check = 1; break;
	case COLLCLI_OPT_STREAM: o->stream = 1; break;
	case COLLCLI_OPT_BUCKET: o->bucket = cli_parse_size("bucket", arg); break;
	case COLLCLI_OPT_OP:
		if (coll_op_parse(arg, &o->op) < 0)
			cli_usage_error("--op: unknown operation '%s' "
			    "(sum, prod, min, max, avg)", arg);
		break;
	case COLLCLI_OPT_ROOT: o->root = parse_int("root", arg, 0, 1 << 20); break;
	case COLLCLI_OPT_SDIM:
		o->sdim = parse_int("scatter-dim", arg, -TENSOR_MAX_DIM, TENSOR_MAX_DIM - 1);
		break;
	case COLLCLI_OPT_GDIM:
		o->gdim = parse_int("gather-dim", arg, -TENSOR_MAX_DIM, TENSOR_MAX_DIM - 1);
		break;
	default:
		fprintf(stderr, "Try '%s --help'.\n", cli_progname);
		exit(CLI_EXIT_USAGE);
	}
}

static const struct collcli_program *program;

static void
program_usage(void)
{
	printf(program->synopsis, cli_progname);
	fputs(program->options, stdout);
	fputs(collcli_help, stdout);
	fputs(cli_group_help, stdout);
	cli_close_stdout();
	exit(CLI_EXIT_OK);
}

int
collcli_main(const struct collcli_program *p, int argc, char **argv)
{
	struct collcli o;
	char err[COLLX_ERRLEN];
	int ch, code;

	cli_init(argv[0]);
	program = p;
	collcli_init(&o, p->kind);
	while ((ch = getopt_long(argc, argv, COLLCLI_OPTSTRING, p->longopts,
	    NULL)) != -1) {
		if (ch == '?')
			cli_option_error(argc, argv, COLLCLI_OPTSTRING);
		collcli_option(&o, ch, optarg, program_usage);
	}
	if (optind < argc)
		cli_usage_error("unexpected argument '%s'", argv[optind]);
	if (o.counts && (o.sdim != 0 || o.gdim != 0 || o.stream))
		cli_usage_error("--send-counts cuts and joins dimension 0 of whole "
		    "files: not with --scatter-dim, --gather-dim or --stream");
	if (o.algo_arg)
		parse_algo(&o, o.algo_arg);
	cli_group_finish(&o.group);
	if (o.kind == COLL_KIND_BROADCAST && o.root >= o.group.world)
		cli_usage_error("--root %d is not a rank of a world of %d", o.root,
		    o.group.world);
	if (o.in == NULL && (o.kind != COLL_KIND_BROADCAST ||
	    o.group.rank == o.root))
		cli_usage_error("an input is required (-i IN)");
	if ((code = collcli_run(&o, err, sizeof err)) != CLI_EXIT_OK)
		cli_die(code, "%s", err);
	cli_group_free(&o.group);
	cli_close_stdout();
	return CLI_EXIT_OK;
}
