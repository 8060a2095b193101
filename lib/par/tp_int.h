/* tp internals shared by tp.c, tp_model.c and tp_stage.c; not part of the
 * API. */
#ifndef COLLX_TP_INT_H
#define COLLX_TP_INT_H

#include <stddef.h>

#include "par/tp.h"

/* dst[r][0..cl) = src[r][c0..c0+cl) for rows of cols floats, and back. */
void tp_cols_take(float *dst, const float *src, size_t rows, size_t cols,
    size_t c0, size_t cl);
void tp_cols_put(float *dst, const float *src, size_t rows, size_t cols,
    size_t c0, size_t cl);

/* A layer's pointers into base (its weights or gradients, m->w or m->g),
 * in struct nn_block_w's order; NULL for an absent bias. */
struct nn_block_w tp_block_ptrs(const struct tp_model *m, float *base);
struct nn_mlp_w tp_mlp_ptrs(const struct tp_model *m, float *base);

/* This rank's shard of the whole tensor p (whole) into mine, and back:
 * the whole tensor p into whole from every rank's shard mine (collective
 * over c, shards ranks; a TP_WHOLE tensor is copied): tmp holds the whole
 * tensor's floats. 0, or -1 when c failed. */
void tp_param_take(const struct tp_param *p, int rank, const float *whole,
    float *mine);
int tp_param_gather(struct comm *c, const struct tp_param *p, int shards,
    const float *mine, float *whole, float *tmp);

#endif
