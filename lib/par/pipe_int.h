/* pipe_int: one stage's math (pipe_stage.c) as the runner (pipe.c) uses
 * it: activation slots for micro-batches in flight, and the forward and
 * backward pass of a micro-batch through the stage's layers. */
#ifndef COLLX_PIPE_INT_H
#define COLLX_PIPE_INT_H

#include <stddef.h>
#include <stdint.h>

#include "nn/nn.h"

/* A micro-batch's saved activations, from its forward to its backward. */
struct pipe_slot {
	float *f;		/* input, then per layer output and acts, head */
	int32_t *tok;		/* gpt: inputs, then targets, n*seq each */
	const float *inp;	/* stage input: f, or the batch's rows */
	const float *y;		/* last stage (mlp, block): targets */
	int n, busy;
	size_t bytes;		/* activation bytes held for n samples */
};

struct pipe_stage {
	struct nn_model *m;
	const struct nn_dims *d;
	int j, w, l0, l1, gpt, first, last;
	int seq;		/* rows per sample: block, gpt; mlp 1 */
	size_t in_w, out_w;	/* floats per sample at the stage's ends */
	size_t act_w;		/* saved floats per sample per layer */
	int nmax;		/* largest micro-batch */
	size_t slot_cap;	/* floats per slot */
	struct pipe_slot *slot;
	int nslot, maxslot;	/* made, at most */
	size_t live, peak;	/* activation bytes */
	float *g[4];		/* gradient ping-pong, then two send buffers */
	float *scratch, *dlogits;
	float *wte, *wpe, *lnf_w, *lnf_b, *dwte, *dwpe, *dlnf_w, *dlnf_b;
};

int pipe_stage_init(struct pipe_stage *st, struct nn_model *m, int j,
    int w, int l0, int l1, int seq, int nmax, int maxslot, char *err,
    size_t errlen);
void pipe_stage_free(struct pipe_stage *st);
/* A free slot for n samples, counted as live; NULL when out of memory. */
struct pipe_slot *pipe_stage_acquire(struct pipe_stage *st, int n);
void pipe_stage_release(struct pipe_stage *st, struct pipe_slot *sl);
/* Where a received activation goes (n * in_w floats). */
float *pipe_stage_input(struct pipe_stage *st, struct pipe_slot *sl);
/* Forward of the micro-batch in sl; returns the stage output (n * out_w
 * floats, in sl) and on the last stage adds the loss sum to *loss. */
const float *pipe_stage_forward(struct pipe_stage *st, struct pipe_slot *sl,
    double *loss);
/* Backward: dy the gradient at the output (ignored on the last stage,
 * which starts from the loss); dx receives the gradient at the stage
 * input (NULL on stage 0). Gradients add into the model's. */
void pipe_stage_backward(struct pipe_stage *st, struct pipe_slot *sl,
    float *dy, float *dx);

#endif
