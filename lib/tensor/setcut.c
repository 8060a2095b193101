/* setcut: every tensor of a set cut into parts along a dimension, and
 * sets joined back along one (collx-tensor split and cat). */
#include <stdlib.h>

#include "cli/util.h"
#include "tensor/flat.h"
#include "tensor/setops.h"

int
tensor_dim_check(const struct tensor *t, int dim, int *out, char *err,
    size_t errlen)
{
	int d = tensor_dim_norm(dim, t->ndim);

	if (d < 0 || d >= t->ndim)
		return cli_fail(err, errlen, "dimension %d out of range for "
		    "%s%s%s with %d dimensions", dim,
		    t->name ? "tensor '" : "a tensor", t->name ? t->name : "",
		    t->name ? "'" : "", t->ndim);
	*out = d;
	return 0;
}

int
tensor_set_split_dims(const struct tensor_set *in, int dim, int parts,
    int even, int *dims, char *err, size_t errlen)
{
	size_t k;

	for (k = 0; k < in->count; k++) {
		if (tensor_dim_check(&in->items[k], dim, &dims[k], err,
		    errlen) < 0)
			return -1;
		if (even && in->items[k].shape[dims[k]] % parts)
			return cli_fail(err, errlen, "dimension %d of size "
			    "%lld is not divisible into %d parts", dims[k],
			    (long long)in->items[k].shape[dims[k]], parts);
	}
	return 0;
}

int
tensor_set_part(const struct tensor_set *in, const int *dims, int parts,
    int i, struct tensor_set *out, char *err, size_t errlen)
{
	struct tensor t;
	size_t k;

	/* The format first: a stream's set keeps the order tensors are
	 * added in, any other set sorts them by name. */
	out->format = in->format;
	for (k = 0; k < in->count; k++) {
		const struct tensor *src = &in->items[k];
		int64_t lo = tensor_split_offset(src->shape[dims[k]], parts, i);
		int64_t hi = tensor_split_offset(src->shape[dims[k]], parts,
		    i + 1);

		if (tensor_narrow(src, dims[k], lo, hi - lo, &t, err,
		    errlen) < 0)
			goto fail;
		if (tensor_set_add(out, src->name, &t, err, errlen) < 0) {
			tensor_free(&t);
			goto fail;
		}
	}
	return 0;
fail:
	tensor_set_free(out);
	return -1;
}

/* Tensor k of in[0] concatenated with its match in every other set. */
static int
cat_one(const struct tensor_set *in, size_t n, const char *const *labels,
    size_t k, int dim, struct tensor_set *out, char *err, size_t errlen)
{
	const char *name = in[0].items[k].name;
	struct tensor *parts, t;
	size_t i;
	int d, rc = -1;

	if (!(parts = calloc(n, sizeof *parts)))
		return cli_fail(err, errlen, "out of memory");
	for (i = 0; i < n; i++) {
		const struct tensor *p = in[i].count == 1 && in[0].count == 1 ?
		    &in[i].items[0] : tensor_set_find(&in[i], name);

		if (!p) {
			cli_fail(err, errlen, "%s has no tensor '%s'",
			    labels[i], name);
			goto out;
		}
		parts[i] = *p;
	}
	if (tensor_dim_check(&parts[0], dim, &d, err, errlen) < 0)
		goto out;
	if (tensor_cat(parts, n, d, &t, err, errlen) < 0) {
		if (name) {
			char why[COLLX_ERRLEN];

			snprintf(why, sizeof why, "%s", err);
			cli_fail(err, errlen, "%s: %s", name, why);
		}
		goto out;
	}
	if (tensor_set_add(out, name, &t, err, errlen) < 0) {
		tensor_free(&t);
		goto out;
	}
	rc = 0;
out:
	free(parts);
	return rc;
}

int
tensor_set_cat(const struct tensor_set *in, size_t n,
    const char *const *labels, int dim, struct tensor_set *out, char *err,
    size_t errlen)
{
	size_t i, k;

	for (i = 1; i < n; i++)
		if (in[i].count != in[0].count)
			return cli_fail(err, errlen, "%s holds %zu tensors, %s "
			    "holds %zu", labels[i], in[i].count, labels[0],
			    in[0].count);
	out->format = in[0].format;
	for (k = 0; k < in[0].count; k++)
		if (cat_one(in, n, labels, k, dim, out, err, errlen) < 0) {
			tensor_set_free(out);
			return -1;
		}
	return 0;
}
