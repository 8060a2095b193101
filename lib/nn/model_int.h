/* model_int: what model.c (loading, init) and run.c (passes over a
 * batch) share; not part of the nn API. */
#ifndef COLLX_NN_MODEL_INT_H
#define COLLX_NN_MODEL_INT_H

#include <stddef.h>
#include <stdint.h>

#include "cli/util.h"
#include "nn/nn.h"

/* Per-layer weight and gradient pointers into the model's buffers, and
 * activation memory sized for the largest batch seen. */
struct nn_work {
	int nlayers;			/* max(dims.layers, 1) */
	struct nn_mlp_w *mw, *mg;	/* mlp */
	struct nn_block_w *w, *g;	/* block, gpt */
	float *wte, *wpe, *lnf_w, *lnf_b;
	float *dwte, *dwpe, *dlnf_w, *dlnf_b;
	float *buf;
	size_t cap;
	int32_t *tok;			/* gpt inputs then targets, 2*n*seq */
	size_t tokcap;
};

#endif
