/* tensor_rt: what the two reader targets share. A parse that succeeds
 * must encode, and the encoding must parse again to the same tensors:
 * dtype, shape and bytes; a stream of .npy arrays as a stream. */
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

/* The one-file reader (tensor_parse) accepts what the stream-aware one
 * (tensor_parse_any) reads as anything but a stream, and nothing else. */
static void
fuzz_readers_agree(const uint8_t *data, size_t size,
    const struct tensor_set *any, int any_rc)
{
	struct tensor_set one;
	char err[512];
	int rc = tensor_parse(data, size, &one, err, sizeof err);

	if (rc == 0)
		tensor_set_free(&one);
	if ((rc == 0) != (any_rc == 0 && any->format != TENSOR_NPYS)) {
		fprintf(stderr, "tensor_parse %d, tensor_parse_any %d\n", rc,
		    any_rc);
		abort();
	}
}

static void
fuzz_tensor_input(const uint8_t *data, size_t size, enum tensor_format fmt)
{
	struct tensor_set a, b;
	const struct tensor *y;
	char err[512];
	void *buf = NULL;
	size_t len, i;
	int rc;

	rc = tensor_parse_any(data, size, &a, err, sizeof err);
	fuzz_readers_agree(data, size, &a, rc);
	if (rc < 0)
		return;
	/* .npy input: written back as it was read, one array or a stream. */
	if (fmt == TENSOR_NPY)
		fmt = a.format;
	/* .npy holds one tensor, and has no bf16. */
	if (fmt == TENSOR_NPY && (a.count != 1 || a.items[0].dtype == DT_BF16))
		goto out;
	if (tensor_encode(&a, fmt, &buf, &len, err, sizeof err) < 0) {
		fprintf(stderr, "parsed but cannot encode: %s\n", err);
		abort();
	}
	if (tensor_parse_any(buf, len, &b, err, sizeof err) < 0) {
		fprintf(stderr, "own encoding does not parse: %s\n", err);
		abort();
	}
	if (a.count != b.count)
		abort();
	/* By name: a stream's arrays "0".."10" come back from .safetensors in
	 * name order; an unnamed .npy tensor comes back as "tensor". */
	for (i = 0; i < a.count; i++) {
		y = a.items[i].name ? tensor_set_find(&b, a.items[i].name) :
		    &b.items[i];
		if (y == NULL || !fuzz_same(&a.items[i], y)) {
			fprintf(stderr, "round trip changed tensor %zu\n", i);
			abort();
		}
	}
	tensor_set_free(&b);
out:
	free(buf);
	tensor_set_free(&a);
}
