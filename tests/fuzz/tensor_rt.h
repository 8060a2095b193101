/* tensor_rt: what the two reader targets share. A parse that succeeds
 * must encode, and the encoding must parse again to the same tensors:
 * dtype, shape and bytes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensor/tensor.h"

static int
fuzz_same(const struct tensor *x, const struct tensor *y)
{
	return x->dtype == y->dtype && x->ndim == y->ndim &&
	    memcmp(x->shape, y->shape, (size_t)x->ndim * sizeof x->shape[0]) == 0 &&
	    memcmp(x->data, y->data, tensor_nbytes(x)) == 0;
}

static void
fuzz_tensor_input(const uint8_t *data, size_t size, enum tensor_format fmt)
{
	struct tensor_set a, b;
	char err[512];
	void *buf = NULL;
	size_t len, i;

	if (tensor_parse(data, size, &a, err, sizeof err) < 0)
		return;
	/* .npy holds one tensor, and has no bf16. */
	if (fmt == TENSOR_NPY && (a.count != 1 || a.items[0].dtype == DT_BF16))
		goto out;
	if (tensor_encode(&a, fmt, &buf, &len, err, sizeof err) < 0) {
		fprintf(stderr, "parsed but cannot encode: %s\n", err);
		abort();
	}
	if (tensor_parse(buf, len, &b, err, sizeof err) < 0) {
		fprintf(stderr, "own encoding does not parse: %s\n", err);
		abort();
	}
	if (a.count != b.count)
		abort();
	for (i = 0; i < a.count; i++)
		if (!fuzz_same(&a.items[i], &b.items[i])) {
			fprintf(stderr, "round trip changed tensor %zu\n", i);
			abort();
		}
	tensor_set_free(&b);
out:
	free(buf);
	tensor_set_free(&a);
}
