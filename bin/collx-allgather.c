/* collx-allgather: concatenate every rank's tensors along dimension 0. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

#include "cli/collcli.h"

static const struct option longopts[] = {
	COLLCLI_LONGOPTS,
	{ 0, 0, 0, 0 }
};

static void
usage(void)
{
	printf("usage: %s -i IN [-o OUT] [--algo A] [--iters N] [--warmup W]\n"
	    "       [--timing F] [--check] [--stream] [--bucket SIZE]\n"
	    "       [--rank R] [--world-size N] [--master HOST:PORT] ...\n"
	    "Every rank's IN is [N, ...] (N may differ between ranks); every rank\n"
	    "gets the rank-ordered concatenation along dimension 0.\n\n",
	    cli_progname);
	fputs("  --algo A              auto, ring, rd or bruck (default auto)\n", stdout);
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
	collcli_init(&o, COLL_KIND_ALLGATHER);
	while ((ch = getopt_long(argc, argv, COLLCLI_OPTSTRING, longopts, NULL)) != -1)
		collcli_option(&o, ch, optarg, usage);
	if (optind < argc)
		cli_usage_error("unexpected argument '%s'", argv[optind]);
	return collcli_run(&o);
}
