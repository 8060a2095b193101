/* fuzz_npy: the .npy reader (tensor_parse_any on "\x93NUMPY" input: one
 * array or a stream of them), and the writer on whatever it accepts. */
#include <stddef.h>
#include <stdint.h>

#include "tensor_rt.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	fuzz_tensor_input(data, size, TENSOR_NPY);
	return 0;
}
