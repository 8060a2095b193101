/* fuzz_cost: collx-bench's cost-model reader (lib/bench/bench_cost_file.c,
 * what plan and coll --cost read) on any text: a file is taken whole or
 * refused with a message; nothing is read past the text. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "bench/bench_cost.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct bench_cost c;
	char err[512] = "";

	if (bench_cost_parse(&c, (const char *)data, size, "cost.json", err,
	    sizeof err) < 0 && err[0] == '\0')
		abort();
	return 0;
}
