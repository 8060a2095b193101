/* flat: a tensor set as one flat f32 vector, and the layout text that
 * rebuilds it. A parameter server hands the layout to its clients; data
 * parallelism and ZeRO sync the flat vector. */
#ifndef COLLX_FLAT_H
#define COLLX_FLAT_H

#include <stddef.h>

#include "tensor/tensor.h"

/*
 * The set as one flat f32 vector (tensors in set order, any float dtype
 * converted) and its layout text: "t NAME D0,D1,...\n" per tensor,
 * "m KEY VALUE\n" per metadata entry (fields separated by tabs).
 */
int tensor_set_flatten(const struct tensor_set *s, float **flat,
    size_t *total, char **layout, char *err, size_t errlen);
/* Builds the set back from a layout and its vector. */
int tensor_set_unflatten(const char *layout, const float *flat, size_t total,
    struct tensor_set *out, char *err, size_t errlen);
/* Whether two layouts name the same tensors with the same shapes. */
int tensor_layout_same(const char *a, const char *b);

#endif
