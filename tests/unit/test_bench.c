/* test_bench: collx-bench's pure parts against closed forms worked out
 * here — median, nearest-rank p99, the sweep's sizes, the element counts
 * a size becomes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench.h"
#include "unit.h"

static void
test_stats(void)
{
	double odd[] = { 5, 1, 4, 2, 3 }, even[] = { 4, 1, 3, 2 }, t[200];
	struct bench_stat s;

	bench_stats(odd, 5, &s);
	UNIT_OK(s.med == 3 && s.min == 1 && s.max == 5 && s.p99 == 5,
	    "5 times: median 3, min 1, max 5, p99 5");
	bench_stats(even, 4, &s);
	UNIT_OK(s.med == 2.5, "4 times: the median is the mean of the middle two");
	/* 1..200 shuffled: nearest-rank p99 is the ceil(0.99*200) = 198th. */
	for (int i = 0; i < 200; i++)
		t[i] = (double)((i * 77) % 200 + 1);
	bench_stats(t, 200, &s);
	UNIT_OK(s.p99 == 198 && s.med == 100.5 && s.min == 1 && s.max == 200,
	    "1..200: p99 198, median 100.5");
}

static void
test_sizes(void)
{
	struct bench_sizes f = { .min = 8, .max = 64, .factor = 2 };
	struct bench_sizes st = { .min = 1000, .max = 4000, .step = 1000 };
	struct bench_sizes odd = { .min = 3, .max = 30, .factor = 1.5 };
	char buf[32];
	size_t s;
	int n = 0, ok = 1;

	for (s = f.min; s != 0; s = bench_next_size(&f, s))
		ok &= s == (size_t)8 << n++;
	UNIT_OK(ok && n == 4 && bench_count_sizes(&f) == 4, "-b 8 -e 64 -f 2: 8 16 32 64");
	UNIT_OK(bench_count_sizes(&st) == 4 && bench_next_size(&st, 4000) == 0,
	    "-b 1000 -e 4000 -i 1000: four sizes");
	/* 3, ceil(4.5)=5, ceil(7.5)=8, 12, 18, 27 */
	UNIT_OK(bench_count_sizes(&odd) == 6 && bench_next_size(&odd, 5) == 8,
	    "factor 1.5 rounds up: 3 5 8 12 18 27");
	UNIT_OK(strcmp(bench_size_str(1 << 20, buf, sizeof buf), "1M") == 0 &&
	    strcmp(bench_size_str(1000, buf, sizeof buf), "1000") == 0 &&
	    strcmp(bench_size_str(3 << 10, buf, sizeof buf), "3K") == 0,
	    "size names: 1M, 1000, 3K");
}

static void
test_counts(void)
{
	struct bench_coll ar = { .kind = COLL_KIND_ALLREDUCE, .dt = DT_F32 };
	struct bench_coll ag = { .kind = COLL_KIND_ALLGATHER, .dt = DT_F64 };

	UNIT_OK(bench_coll_count(&ar, 1026, 3) == 256, "allreduce f32: 1026 B is 256 elements");
	/* 1000 B of f64 = 125 elements, down to a multiple of 3: 123 */
	UNIT_OK(bench_coll_count(&ag, 1000, 3) == 123, "allgather f64 on 3 ranks: 123 elements");
	UNIT_OK(bench_coll_count(&ag, 16, 3) == 0, "too small for the world: 0");
}

int
main(void)
{
	test_stats();
	test_sizes();
	test_counts();
	return unit_done();
}
