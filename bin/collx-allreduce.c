/* collx-allreduce: allreduce tensors across ranks. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

#include "cli/collcli.h"

static const struct option longopts[] = {
	{ "op", 1, 0, COLLCLI_OPT_OP },
	COLLCLI_LONGOPTS,
	{ 0, 0, 0, 0 }
};

static void
usage(void)
{
	printf("usage: %s -i IN [-o OUT] [--op OP] [--algo A] [--iters N]\n"
	    "       [--warmup W] [--timing F] [--check] [--stream] [--bucket SIZE]\n"
	    "       [--rank R] [--world-size N] [--master HOST:PORT] ...\n"
	    "Reduce the tensors of IN element by element over every rank; each\n"
	    "rank gets the result.\n\n", cli_progname);
	fputs("  --op OP               sum, prod, min, max or avg (default sum)\n"
	    "  --algo A              auto, ring, tree, rd, rabenseifner or naive\n"
	    "                        (default auto: by size and world)\n", stdout);
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
	collcli_init(&o, COLL_KIND_ALLREDUCE);
	while ((ch = getopt_long(argc, argv, COLLCLI_OPTSTRING, longopts, NULL)) != -1)
		collcli_option(&o, ch, optarg, usage);
	if (optind < argc)
		cli_usage_error("unexpected argument '%s'", argv[optind]);
	return collcli_run(&o);
}
