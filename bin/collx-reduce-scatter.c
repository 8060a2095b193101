/* collx-reduce-scatter: reduce over every rank, then scatter dimension-0
 * blocks: rank r keeps block r. */
#include "prog/collcli.h"

static const struct option longopts[] = {
	{ "op", 1, 0, COLLCLI_OPT_OP },
	COLLCLI_LONGOPTS,
	{ 0, 0, 0, 0 }
};

static const struct collcli_program program = {
	.kind = COLL_KIND_REDUCE_SCATTER,
	.longopts = longopts,
	.synopsis = "usage: %s -i IN [-o OUT] [--op OP] [--algo A] [--iters N]\n"
	    "       [--warmup W] [--timing F] [--check] [--stream] [--bucket SIZE]\n"
	    "       [--rank R] [--world-size N] [--master HOST:PORT] ...\n"
	    "Every rank's IN is [W*N, ...]; rank r gets the reduction over the\n"
	    "ranks of rows r*N to r*N+N-1, [N, ...].\n\n",
	.options = "  --op OP               sum, prod, min, max or avg (default sum)\n"
	    "  --algo A              auto, ring, pairwise, halving or hier (default\n"
	    "                        auto)\n"
	    "                        hier: within each host, then across hosts\n",
};

int
main(int argc, char **argv)
{
	return collcli_main(&program, argc, argv);
}
