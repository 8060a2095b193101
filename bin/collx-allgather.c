/* collx-allgather: concatenate every rank's tensors along dimension 0. */
#include "prog/collcli.h"

static const struct option longopts[] = {
	COLLCLI_LONGOPTS,
	{ 0, 0, 0, 0 }
};

static const struct collcli_program program = {
	.kind = COLL_KIND_ALLGATHER,
	.longopts = longopts,
	.synopsis = "usage: %s -i IN [-o OUT] [--algo A] [--iters N] [--warmup W]\n"
	    "       [--timing F] [--check] [--stream] [--bucket SIZE]\n"
	    "       [--rank R] [--world-size N] [--master HOST:PORT] ...\n"
	    "Every rank's IN is [N, ...] (N may differ between ranks); every rank\n"
	    "gets the rank-ordered concatenation along dimension 0.\n\n",
	.options = "  --algo A              auto, ring, rd, bruck or hier (default auto)\n"
	    "                        hier: across hosts, then within each host\n",
};

int
main(int argc, char **argv)
{
	return collcli_main(&program, argc, argv);
}
