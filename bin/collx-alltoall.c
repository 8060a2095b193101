/* collx-alltoall: split along one dimension, send chunk i to rank i,
 * concatenate what arrives along another. */
#include "prog/collcli.h"

static const struct option longopts[] = {
	{ "scatter-dim", 1, 0, COLLCLI_OPT_SDIM },
	{ "gather-dim", 1, 0, COLLCLI_OPT_GDIM },
	COLLCLI_LONGOPTS,
	{ 0, 0, 0, 0 }
};

static const struct collcli_program program = {
	.kind = COLL_KIND_ALLTOALL,
	.longopts = longopts,
	.synopsis = "usage: %s -i IN [-o OUT] [--scatter-dim S] [--gather-dim G]\n"
	    "       [--algo A] [--iters N] [--warmup W] [--timing F] [--check]\n"
	    "       [--stream] [--bucket SIZE] [--rank R] [--world-size N]\n"
	    "       [--master HOST:PORT] ...\n"
	    "Split IN along S into W chunks, send chunk i to rank i, concatenate\n"
	    "the chunks that arrive along G in rank order.\n\n",
	.options = "  --scatter-dim S       dimension to split (default 0; negative\n"
	    "                        counts from the last)\n"
	    "  --gather-dim G        dimension to concatenate along (default 0)\n"
	    "  --algo A              auto, pairwise or linear (default auto)\n",
};

int
main(int argc, char **argv)
{
	return collcli_main(&program, argc, argv);
}
