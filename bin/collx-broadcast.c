/* collx-broadcast: broadcast tensors from a root rank. */
#include "prog/collcli.h"

static const struct option longopts[] = {
	{ "root", 1, 0, COLLCLI_OPT_ROOT },
	COLLCLI_LONGOPTS,
	{ 0, 0, 0, 0 }
};

static const struct collcli_program program = {
	.kind = COLL_KIND_BROADCAST,
	.longopts = longopts,
	.synopsis = "usage: %s [-i IN] [-o OUT] [--root R] [--algo A] [--iters N]\n"
	    "       [--warmup W] [--timing F] [--check] [--stream] [--bucket SIZE]\n"
	    "       [--rank R] [--world-size N] [--master HOST:PORT] ...\n"
	    "Send the root's IN to every rank; only the root reads IN, the others\n"
	    "learn names, dtypes and shapes from it.\n\n",
	.options = "  --root R              the rank that has the input (default 0)\n"
	    "  --algo A              auto, binomial, scatter-allgather, linear, ring\n"
	    "                        or hier (default auto)\n"
	    "                        hier: across hosts, then within each host\n",
};

int
main(int argc, char **argv)
{
	return collcli_main(&program, argc, argv);
}
