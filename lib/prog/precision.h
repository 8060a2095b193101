/* precision: --precision f32|bf16 of the training programs (collx-dp,
 * collx-tp, collx-pipe, collx-train), read by one function into
 * trainopt_common and put in force by one other. */
#ifndef COLLX_PRECISION_H
#define COLLX_PRECISION_H

#include "nn/nn.h"

enum { PRECISION_OPT = 0x1340 };
#define PRECISION_LONGOPTS { "precision", 1, 0, PRECISION_OPT }
#define PRECISION_HELP \
	"  --precision P         matmul inputs in f32 (default) or bf16\n" \
	"                        (rounded, f32 sums, through oneDNN)\n"

/* --precision's value into *p: 1, or 0 when opt is not --precision; a
 * value other than f32 or bf16 is a usage error (exit 2). */
int prog_precision_option(enum nn_precision *p, int opt, const char *a);
/* Puts p in force for this process's matmuls. bf16 in a build without
 * oneDNN is a usage error (exit 2) naming the library; on a CPU without
 * bf16 instructions rank 0 says once that the portable path runs; with
 * -v rank 0 names, at exit, the implementation that ran the matmuls. */
void prog_precision_start(enum nn_precision p);

#endif
