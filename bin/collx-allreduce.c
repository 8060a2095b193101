/* collx-allreduce: allreduce tensors across ranks. */
#include "prog/collcli.h"

static const struct option longopts[] = {
	{ "op", 1, 0, COLLCLI_OPT_OP },
	COLLCLI_LONGOPTS,
	{ 0, 0, 0, 0 }
};

static const struct collcli_program program = {
	.kind = COLL_KIND_ALLREDUCE,
	.longopts = longopts,
	.synopsis = "usage: %s -i IN [-o OUT] [--op OP] [--algo A] [--iters N]\n"
	    "       [--warmup W] [--timing F] [--check] [--stream] [--bucket SIZE]\n"
	    "       [--rank R] [--world-size N] [--master HOST:PORT] ...\n"
	    "Reduce the tensors of IN element by element over every rank; each\n"
	    "rank gets the result.\n\n",
	.options = "  --op OP               sum, prod, min, max or avg (default sum)\n"
	    "  --algo A              auto, ring, tree, rd, rabenseifner, naive or\n"
	    "                        hier (default auto: by size, world and hosts)\n"
	    "                        hier: within each host, then across hosts\n",
};

int
main(int argc, char **argv)
{
	return collcli_main(&program, argc, argv);
}
