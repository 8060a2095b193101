/* tp internals shared by tp.c and tp_model.c; not part of the API. */
#ifndef COLLX_TP_INT_H
#define COLLX_TP_INT_H

#include <stddef.h>

#include "par/tp.h"

/* dst[r][0..cl) = src[r][c0..c0+cl) for rows of cols floats, and back. */
void tp_cols_take(float *dst, const float *src, size_t rows, size_t cols,
    size_t c0, size_t cl);
void tp_cols_put(float *dst, const float *src, size_t rows, size_t cols,
    size_t c0, size_t cl);

#endif
