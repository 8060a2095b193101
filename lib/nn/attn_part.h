/* attn_part: attention of one head's block of queries against one block
 * of keys and values, merged into running results by log-sum-exp, and its
 * backward from the saved log-sum-exp: the pieces ring (context-parallel)
 * attention is made of (lib/par/cp_ring.c). Positions are global, so a
 * causal mask holds across blocks: query q0+i sees key k0+j when
 * k0+j <= q0+i. Rows of q, k, v, o and their gradients are ld floats
 * apart (one head's hd columns of [n, nh*hd]). */
#ifndef COLLX_NN_ATTN_PART_H
#define COLLX_NN_ATTN_PART_H

#include <stddef.h>

struct nn_attn_part {
	int nq, nk, ld, hd;
	long q0, k0;		/* global positions of the first rows */
	int causal;
};

/* Query-key pairs of the block the mask leaves (the attention work). */
size_t nn_attn_part_pairs(const struct nn_attn_part *p);

/* o (unnormalised), m (running row maximum, -INFINITY at first) and l
 * (running sum of exponentials, 0 at first) take in the block k, v.
 * scratch: nq*nk floats. Returns the pairs computed. */
size_t nn_attn_part_forward(float *o, float *m, float *l, float *scratch,
    const float *q, const float *k, const float *v,
    const struct nn_attn_part *p);
/* o /= l and lse = m + log l, row by row (nq rows of hd). */
void nn_attn_part_finish(float *o, float *lse, const float *m,
    const float *l, int nq, int ld, int hd);
/* dq, dk, dv += the block's share of the gradients, from dout, the
 * finished lse and dsum = rowsum(dout * o). scratch: 2*nq*nk floats. */
size_t nn_attn_part_backward(float *dq, float *dk, float *dv,
    float *scratch, const float *dout, const float *lse, const float *dsum,
    const float *q, const float *k, const float *v,
    const struct nn_attn_part *p);

#endif
