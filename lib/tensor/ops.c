/* ops: copying, casting, cutting and joining tensors. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensor/flat.h"
#include "tensor/tensor.h"

static int
copy_name(const struct tensor *t, struct tensor *out, char *err, size_t errlen)
{
	if (t->name && !(out->name = strdup(t->name))) {
		snprintf(err, errlen, "out of memory");
		tensor_free(out);
		return -1;
	}
	return 0;
}

int
tensor_copy(const struct tensor *t, struct tensor *out, char *err, size_t errlen)
{
	if (tensor_init(out, t->dtype, t->ndim, t->shape, err, errlen) < 0)
		return -1;
	memcpy(out->data, t->data, tensor_nbytes(t));
	return copy_name(t, out, err, errlen);
}

int
tensor_cast(const struct tensor *t, enum dtype dt, struct tensor *out,
    char *err, size_t errlen)
{
	size_t i, n = (size_t)tensor_numel(t);

	if (tensor_init(out, dt, t->ndim, t->shape, err, errlen) < 0)
		return -1;
	if (dt == t->dtype)
		memcpy(out->data, t->data, tensor_nbytes(t));
	else
		for (i = 0; i < n; i++)
			dtype_put(dt, out->data, i, dtype_get(t->dtype, t->data, i));
	return copy_name(t, out, err, errlen);
}

static int
check_dim(const struct tensor *t, int dim, char *err, size_t errlen)
{
	if (dim < 0 || dim >= t->ndim) {
		snprintf(err, errlen, "dimension %d out of range for a %d-dimensional tensor",
		    dim, t->ndim);
		return -1;
	}
	return 0;
}

int
tensor_narrow(const struct tensor *t, int dim, int64_t start, int64_t len,
    struct tensor *out, char *err, size_t errlen)
{
	int64_t shape[TENSOR_MAX_DIM];
	struct tensor_slice s;

	if (check_dim(t, dim, err, errlen) < 0)
		return -1;
	if (start < 0 || len < 0 || start > t->shape[dim] - len) {
		snprintf(err, errlen, "range [%lld, %lld) outside dimension %d of size %lld",
		    (long long)start, (long long)(start + len), dim,
		    (long long)t->shape[dim]);
		return -1;
	}
	memcpy(shape, t->shape, sizeof shape);
	shape[dim] = len;
	if (tensor_init(out, t->dtype, t->ndim, shape, err, errlen) < 0)
		return -1;
	s = tensor_slice_of(t, dim, start, len);
	tensor_slice_copy(t, &s, out->data, 1);
	return copy_name(t, out, err, errlen);
}

static int
cat_check(const struct tensor *parts, size_t n, int dim, char *err, size_t errlen)
{
	size_t p;
	int i;

	if (n == 0) {
		snprintf(err, errlen, "nothing to concatenate");
		return -1;
	}
	if (check_dim(&parts[0], dim, err, errlen) < 0)
		return -1;
	for (p = 1; p < n; p++) {
		if (parts[p].dtype != parts[0].dtype || parts[p].ndim != parts[0].ndim) {
			snprintf(err, errlen, "part %zu is %s with %d dimensions, part 0 %s with %d",
			    p, dtype_name(parts[p].dtype), parts[p].ndim,
			    dtype_name(parts[0].dtype), parts[0].ndim);
			return -1;
		}
		for (i = 0; i < parts[0].ndim; i++)
			if (i != dim && parts[p].shape[i] != parts[0].shape[i]) {
				snprintf(err, errlen, "part %zu has size %lld in dimension %d, "
				    "part 0 has %lld", p, (long long)parts[p].shape[i], i,
				    (long long)parts[0].shape[i]);
				return -1;
			}
	}
	return 0;
}

int
tensor_cat(const struct tensor *parts, size_t n, int dim, struct tensor *out,
    char *err, size_t errlen)
{
	int64_t shape[TENSOR_MAX_DIM];
	size_t p, o, outer, inner, off = 0, chunk;

	if (cat_check(parts, n, dim, err, errlen) < 0)
		return -1;
	memcpy(shape, parts[0].shape, sizeof shape);
	for (p = 1; p < n; p++)
		if (__builtin_add_overflow(shape[dim], parts[p].shape[dim], &shape[dim])) {
			snprintf(err, errlen, "concatenated size overflows");
			return -1;
		}
	if (tensor_init(out, parts[0].dtype, parts[0].ndim, shape, err, errlen) < 0)
		return -1;
	tensor_dim_split(&parts[0], dim, &outer, &inner);
	for (o = 0; o < outer; o++)
		for (p = 0; p < n; p++) {
			chunk = (size_t)parts[p].shape[dim] * inner;
			memcpy((char *)out->data + off, (const char *)parts[p].data + o * chunk,
			    chunk);
			off += chunk;
		}
	return copy_name(&parts[0], out, err, errlen);
}

int64_t
tensor_split_offset(int64_t len, int parts, int i)
{
	int64_t base = len / parts, extra = len % parts;

	return i * base + (i < extra ? i : extra);
}

static int
compare_check(const struct tensor *a, const struct tensor *b,
    char *err, size_t errlen)
{
	char sa[160], sb[160];

	if (a->dtype != b->dtype) {
		snprintf(err, errlen, "dtypes differ: %s and %s", dtype_name(a->dtype),
		    dtype_name(b->dtype));
		return -1;
	}
	if (a->ndim != b->ndim || memcmp(a->shape, b->shape,
	    (size_t)a->ndim * sizeof a->shape[0]) != 0) {
		snprintf(err, errlen, "shapes differ: %s and %s", tensor_shape_str(a, sa,
		    sizeof sa), tensor_shape_str(b, sb, sizeof sb));
		return -1;
	}
	return 0;
}

int
tensor_compare(const struct tensor *a, const struct tensor *b, double rtol,
    double atol, struct tensor_diff *d, char *err, size_t errlen)
{
	size_t i, n;
	double x, y, abs_err, rel;

	memset(d, 0, sizeof *d);
	if (compare_check(a, b, err, errlen) < 0)
		return -1;
	n = (size_t)tensor_numel(a);
	d->count = (int64_t)n;
	for (i = 0; i < n; i++) {
		x = dtype_get(a->dtype, a->data, i);
		y = dtype_get(b->dtype, b->data, i);
		if ((isnan(x) && isnan(y)) || x == y)
			continue;
		/* NaN against a number, or an infinity against anything else */
		if (!isfinite(x) || !isfinite(y)) {
			d->max_abs = d->max_rel = INFINITY;
			d->mismatched++;
			continue;
		}
		abs_err = fabs(x - y);
		rel = y != 0 ? abs_err / fabs(y) : INFINITY;
		d->max_abs = fmax(d->max_abs, abs_err);
		d->max_rel = fmax(d->max_rel, rel);
		if (!(abs_err <= atol + rtol * fabs(y)))
			d->mismatched++;
	}
	return 0;
}
