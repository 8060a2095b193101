/* flat: a tensor set as one flat f32 vector, and the layout text that
 * rebuilds it; and a tensor's slices along one dimension as contiguous
 * blocks. A parameter server hands the layout to its clients; data
 * parallelism and ZeRO sync the flat vector; the collective programs cut
 * tensors into the blocks their collectives carry. */
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

/*
 * A slice: elements [start, start+len) along dimension dim, every other
 * dimension whole (torch.narrow), or the whole tensor when dim is -1.
 * count is its number of elements.
 */
struct tensor_slice {
	int dim;
	int64_t start, len;
	size_t count;
};

/* d counted from the end when negative, as PyTorch does: d + ndim. The
 * result is not checked against ndim. */
int tensor_dim_norm(int d, int ndim);
/* Elements before dimension dim (outer) and bytes of one step along it
 * (inner: the element size times the sizes after dim). */
void tensor_dim_split(const struct tensor *t, int dim, size_t *outer,
    size_t *inner);
/* The slice of t along dim (-1: whole, start and len then ignored); the
 * caller keeps 0 <= dim < ndim and the range inside the dimension. */
struct tensor_slice tensor_slice_of(const struct tensor *t, int dim,
    int64_t start, int64_t len);
/* Copies slice s of t into the contiguous block blk (to_blk nonzero) or
 * blk back into the slice: s->count elements of t's dtype, C order. */
void tensor_slice_copy(const struct tensor *t, const struct tensor_slice *s,
    void *blk, int to_blk);

#endif
