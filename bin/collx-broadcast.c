/* collx-broadcast: broadcast tensors from a root rank. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

#include "cli/collcli.h"

static const struct option longopts[] = {
	{ "root", 1, 0, COLLCLI_OPT_ROOT },
	COLLCLI_LONGOPTS,
	{ 0, 0, 0, 0 }
};

static void
usage(void)
{
	printf("usage: %s [-i IN] [-o OUT] [--root R] [--algo A] [--iters N]\n"
	    "       [--warmup W] [--timing F] [--check] [--stream] [--bucket SIZE]\n"
	    "       [--rank R] [--world-size N] [--master HOST:PORT] ...\n"
	    "Send the root's IN to every rank; only the root reads IN, the others\n"
	    "learn names, dtypes and shapes from it.\n\n", cli_progname);
	fputs("  --root R              the rank that has the input (default 0)\n"
	    "  --algo A              auto, binomial, scatter-allgather, linear or\n"
	    "                        ring (default auto)\n", stdout);
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
	collcli_init(&o, COLL_KIND_BROADCAST);
	while ((ch = getopt_long(argc, argv, COLLCLI_OPTSTRING, longopts, NULL)) != -1)
		collcli_option(&o, ch, optarg, usage);
	if (optind < argc)
		cli_usage_error("unexpected argument '%s'", argv[optind]);
	return collcli_run(&o);
}
