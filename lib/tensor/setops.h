/* setops: whole tensor sets compared, cut into parts along a dimension,
 * joined back, converted: what collx-tensor's diff, split, cat and
 * convert do to the sets they read. */
#ifndef COLLX_TENSOR_SETOPS_H
#define COLLX_TENSOR_SETOPS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "tensor/tensor.h"

/*
 * The totals of a set comparison. bad and count: elements out of
 * tolerance and compared; structural: how many names, dtypes or shapes
 * differ, the first of them said in first; not_rounding: some failing
 * tensor is not f32 or errs beyond f32 rounding; max_rel: the largest
 * relative error over the failing tensors.
 */
struct tensor_set_diff {
	int64_t bad, count;
	int structural;
	int not_rounding;
	double max_rel;
	char first[512];
};

/*
 * Compares a (actual) with b (expected) by tensor_compare: tensors
 * matched by name (two sets of one tensor, either unnamed, matched as
 * they are), a name in one set only is a structural difference. One line
 * per tensor goes to report unless it is NULL. tot starts zeroed; the
 * comparison itself cannot fail.
 */
void tensor_set_diff(const struct tensor_set *a, const struct tensor_set *b,
    double rtol, double atol, FILE *report, struct tensor_set_diff *tot);
/* When every difference is at f32 rounding level, the power of ten that
 * as rtol accepts them; else 0. */
double tensor_set_diff_rtol_hint(const struct tensor_set_diff *tot);

/* dim of t (negative counts from the end) as an index into its shape,
 * or -1 when t has no such dimension. */
int tensor_dim_check(const struct tensor *t, int dim, int *out, char *err,
    size_t errlen);
/* dims[k]: dimension dim of tensor k of in, each checked, and with even
 * set, each divisible into parts. */
int tensor_set_split_dims(const struct tensor_set *in, int dim, int parts,
    int even, int *dims, char *err, size_t errlen);
/* Part i of parts of every tensor of in along dims[k] (numpy.array_split
 * sizes), as a new set out of in's format, names kept, no metadata. On
 * failure out is left empty. */
int tensor_set_part(const struct tensor_set *in, const int *dims, int parts,
    int i, struct tensor_set *out, char *err, size_t errlen);
/* The n sets concatenated along dim name by name (two sets of one tensor
 * each, as they are) into the new set out, of in[0]'s format and names,
 * no metadata; labels[i] names in[i] in the reason. On failure out is
 * left empty. */
int tensor_set_cat(const struct tensor_set *in, size_t n,
    const char *const *labels, int dim, struct tensor_set *out, char *err,
    size_t errlen);
/* Every __metadata__ entry of src put into dst. */
int tensor_set_meta_copy(struct tensor_set *dst, const struct tensor_set *src,
    char *err, size_t errlen);
/* Every tensor of s not of dtype dt converted to it (tensor_cast). */
int tensor_set_cast(struct tensor_set *s, enum dtype dt, char *err,
    size_t errlen);
/* A set of one unnamed tensor gives it name; any other set is left as is. */
int tensor_set_name_unnamed(struct tensor_set *s, const char *name,
    char *err, size_t errlen);

#endif
