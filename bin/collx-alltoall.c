/* collx-alltoall: split along one dimension, send chunk i to rank i,
 * concatenate what arrives along another; or, with --send-counts, send
 * each rank the rows the counts say (alltoallv). */
#include "prog/collcli.h"

static const struct option longopts[] = {
	{ "scatter-dim", 1, 0, COLLCLI_OPT_SDIM },
	{ "gather-dim", 1, 0, COLLCLI_OPT_GDIM },
	{ "send-counts", 1, 0, COLLCLI_OPT_COUNTS },
	COLLCLI_LONGOPTS,
	{ 0, 0, 0, 0 }
};

static const struct collcli_program program = {
	.kind = COLL_KIND_ALLTOALL,
	.longopts = longopts,
	.synopsis = "usage: %s -i IN [-o OUT] [--scatter-dim S] [--gather-dim G]\n"
	    "       [--send-counts C] [--algo A] [--iters N] [--warmup W]\n"
	    "       [--timing F] [--check] [--stream] [--bucket SIZE] [--rank R]\n"
	    "       [--world-size N] [--master HOST:PORT] ...\n"
	    "Split IN along S into W chunks, send chunk i to rank i, concatenate\n"
	    "the chunks that arrive along G in rank order. With --send-counts,\n"
	    "send rank i the next C[rank, i] rows of IN and concatenate the rows\n"
	    "that arrive in source rank order.\n\n",
	.options = "  --scatter-dim S       dimension to split (default 0; negative\n"
	    "                        counts from the last)\n"
	    "  --gather-dim G        dimension to concatenate along (default 0)\n"
	    "  --send-counts C       integer [W, W] tensor file: row r the rows\n"
	    "                        rank r sends each rank (alltoallv along\n"
	    "                        dimension 0; not with --stream)\n"
	    "  --algo A              auto, pairwise or linear (default auto); with\n"
	    "                        --send-counts also hier\n",
};

int
main(int argc, char **argv)
{
	return collcli_main(&program, argc, argv);
}
