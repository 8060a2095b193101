/* collx-alltoall: split along one dimension, send chunk i to rank i,
 * concatenate what arrives along another. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

#include "cli/collcli.h"

static const struct option longopts[] = {
	{ "scatter-dim", 1, 0, COLLCLI_OPT_SDIM },
	{ "gather-dim", 1, 0, COLLCLI_OPT_GDIM },
	COLLCLI_LONGOPTS,
	{ 0, 0, 0, 0 }
};

static void
usage(void)
{
	printf("usage: %s -i IN [-o OUT] [--scatter-dim S] [--gather-dim G]\n"
	    "       [--algo A] [--iters N] [--warmup W] [--timing F] [--check]\n"
	    "       [--stream] [--bucket SIZE] [--rank R] [--world-size N]\n"
	    "       [--master HOST:PORT] ...\n"
	    "Split IN along S into W chunks, send chunk i to rank i, concatenate\n"
	    "the chunks that arrive along G in rank order.\n\n", cli_progname);
	fputs("  --scatter-dim S       dimension to split (default 0; negative\n"
	    "                        counts from the last)\n"
	    "  --gather-dim G        dimension to concatenate along (default 0)\n"
	    "  --algo A              auto, pairwise or linear (default auto)\n", stdout);
	fputs(collcli_help, stdout);
	fputs(cli_group_help, stdout);
	cli_close_stdout();
	exit(CLI_EXIT_OK);
}

int
main(int argc, char **argv)
{
	struct collcli o;
	int ch;

	cli_init(argv[0]);
	collcli_init(&o, COLL_KIND_ALLTOALL);
	while ((ch = getopt_long(argc, argv, COLLCLI_OPTSTRING, longopts, NULL)) != -1)
		collcli_option(&o, ch, optarg, usage);
	if (optind < argc)
		cli_usage_error("unexpected argument '%s'", argv[optind]);
	return collcli_run(&o);
}
