/* test_reduce: the local reduction kernels against a scalar reference
 * written separately here (exact integer-valued data, wrapping integers). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/coll.h"
#include "comm/reduce.h"
#include "unit.h"

/* Test data: small integers, exact in every dtype, with sign for signed ones. */
static long long value(enum dtype dt, int which, size_t i, enum coll_op op)
{
	long long v = (long long)((i * 7 + (size_t)which * 5) % 23);

	if (dt == DT_BOOL)
		return (i + (size_t)which) % 3 == 0;
	if (op == COLL_PROD)
		return v % 4 - (dt == DT_U8 ? 0 : 1);	/* small factors */
	if (dt == DT_U8)
		return v * 11;			/* sums wrap past 255 */
	if (dt == DT_I8)
		return (v - 11) * 11;		/* sums wrap past +-127 */
	return v - 11;
}

/* The reference: exact arithmetic, then wrapped into the integer type. */
static long long wrap(enum dtype dt, long long x)
{
	switch (dt) {
	case DT_I8: return (int8_t)(uint8_t)(x & 0xff);
	case DT_U8: return x & 0xff;
	case DT_I16: return (int16_t)(uint16_t)(x & 0xffff);
	case DT_I32: return (int32_t)(uint32_t)(x & 0xffffffff);
	case DT_BOOL: return x != 0;
	default: return x;
	}
}

static long long ref_op(enum dtype dt, enum coll_op op, long long a, long long b)
{
	if (dt == DT_BOOL)
		return op == COLL_SUM || op == COLL_AVG || op == COLL_MAX ?
		    (a || b) : (a && b);
	switch (op) {
	case COLL_PROD: return wrap(dt, a * b);
	case COLL_MIN: return a < b ? a : b;
	case COLL_MAX: return a > b ? a : b;
	default: return wrap(dt, a + b);
	}
}

static void
put(enum dtype dt, void *buf, size_t i, long long v)
{
	char *p = (char *)buf + i * dtype_size(dt);

	switch (dt) {
	case DT_F32: { float f = (float)v; memcpy(p, &f, 4); break; }
	case DT_F64: { double d = (double)v; memcpy(p, &d, 8); break; }
	case DT_F16: { uint16_t h = dtype_f32_to_f16((float)v); memcpy(p, &h, 2); break; }
	case DT_BF16: { uint16_t h = dtype_f32_to_bf16((float)v); memcpy(p, &h, 2); break; }
	case DT_I8: case DT_U8: case DT_BOOL: *p = (char)(uint8_t)(v & 0xff); break;
	case DT_I16: { int16_t x = (int16_t)v; memcpy(p, &x, 2); break; }
	case DT_I32: { int32_t x = (int32_t)v; memcpy(p, &x, 4); break; }
	case DT_I64: { int64_t x = v; memcpy(p, &x, 8); break; }
	default: break;
	}
}

static int
check_kernel(enum dtype dt, enum coll_op op, size_t n)
{
	size_t es = dtype_size(dt), i;
	char *a = malloc(n * es + 1), *b = malloc(n * es + 1);
	int ok = 1;

	for (i = 0; i < n; i++) {
		put(dt, a, i, value(dt, 0, i, op));
		put(dt, b, i, value(dt, 1, i, op));
	}
	coll_reduce_local(a, b, n, dt, op);
	for (i = 0; i < n && ok; i++) {
		long long want = ref_op(dt, op, value(dt, 0, i, op), value(dt, 1, i, op));
		double got = dtype_get(dt, a, i);
		if (got != (double)want) {
			printf("# %s %s n=%zu: element %zu is %g, want %lld\n",
			    dtype_name(dt), coll_op_name(op), n, i, got, want);
			ok = 0;
		}
		if (dtype_get(dt, b, i) != (double)value(dt, 1, i, op))
			ok = 0;		/* the source must be left alone */
	}
	free(a);
	free(b);
	return ok;
}

static void
test_all_kernels(void)
{
	static const size_t lens[] = { 0, 1, 63, 64, 65, 511, 512, 513, 1000, 4099 };
	char what[96];

	for (int dt = 0; dt < DT_COUNT; dt++)
		for (int op = COLL_SUM; op <= COLL_AVG; op++) {
			int ok = 1;
			for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++)
				ok &= check_kernel(dt, op, lens[k]);
			snprintf(what, sizeof what, "%s %s kernel matches the reference",
			    dtype_name(dt), coll_op_name(op));
			UNIT_OK(ok, what);
		}
}

static void
test_nan(void)
{
	float d[4] = { 1, NAN, 3, NAN }, s[4] = { NAN, 2, 1, NAN };
	float e[4] = { 1, NAN, 3, NAN };

	coll_reduce_local(d, s, 4, DT_F32, COLL_MIN);
	UNIT_OK(isnan(d[0]) && isnan(d[1]) && d[2] == 1 && isnan(d[3]),
	    "f32 min propagates NaN from either side");
	coll_reduce_local(e, s, 4, DT_F32, COLL_MAX);
	UNIT_OK(isnan(e[0]) && isnan(e[1]) && e[2] == 3 && isnan(e[3]),
	    "f32 max propagates NaN from either side");
}

static void
test_half_accumulates_in_f32(void)
{
	/* 2048 + 1 is not an f16 (spacing 2 there); 1 + 1 + 2048 in steps is
	 * 2050 only if the halves are widened before adding. */
	uint16_t d = dtype_f32_to_f16(2048), s = dtype_f32_to_f16(2);
	uint16_t b = dtype_f32_to_bf16(256), t = dtype_f32_to_bf16(1);

	coll_reduce_local(&d, &s, 1, DT_F16, COLL_SUM);
	UNIT_OK(dtype_f16_to_f32(d) == 2050, "f16 2048 + 2 = 2050");
	coll_reduce_local(&b, &t, 1, DT_BF16, COLL_SUM);
	UNIT_OK(dtype_bf16_to_f32(b) == 256, "bf16 256 + 1 rounds to even (256)");
}

static int
same_half(uint16_t a, uint16_t b, int bf)
{
	float fa = bf ? dtype_bf16_to_f32(a) : dtype_f16_to_f32(a), fb = bf ? dtype_bf16_to_f32(b) : dtype_f16_to_f32(b);

	return a == b || (isnan(fa) && isnan(fb) && (a & 0x8000) == (b & 0x8000));
}

/* The vectorized conversions against dtype.c's general ones: every half
 * value widened, and f32 values narrowed: every half, the midpoints
 * between neighbours (ties), and a million pseudo-random bit patterns. */
static void
test_half_conversions(int bf)
{
	enum { N = 1 << 16, R = 1 << 20 };
	uint16_t *h = malloc(N * sizeof *h), *o = malloc(R * sizeof *o);
	float *f = malloc(R * sizeof *f);
	uint32_t x = 12345, bits;
	int wide = 1, narrow = 1;
	size_t i;

	for (i = 0; i < N; i++)
		h[i] = (uint16_t)i;
	(bf ? comm_reduce_bf16_widen : comm_reduce_f16_widen)(f, h, N);
	for (i = 0; i < N; i++) {
		float want = bf ? dtype_bf16_to_f32(h[i]) : dtype_f16_to_f32(h[i]);
		wide &= memcmp(&f[i], &want, 4) == 0 || (isnan(f[i]) && isnan(want));
	}
	for (i = 0; i + 1 < N; i++)		/* midpoints */
		f[N + i] = (f[i] + f[i + 1]) / 2;
	for (i = 2 * N - 1; i < R; i++) {	/* N - 1 midpoints end at 2N - 2 */
		x = x * 1664525u + 1013904223u;
		bits = x ^ (x >> 7);
		memcpy(&f[i], &bits, 4);
	}
	(bf ? comm_reduce_bf16_narrow : comm_reduce_f16_narrow)(o, f, R);
	for (i = 0; i < R; i++)
		narrow &= same_half(o[i], bf ? dtype_f32_to_bf16(f[i]) : dtype_f32_to_f16(f[i]), bf);
	UNIT_OK(wide, bf ? "bf16 widening agrees with dtype_bf16_to_f32 on all 65536 values" :
	    "f16 widening agrees with dtype_f16_to_f32 on all 65536 values");
	UNIT_OK(narrow, bf ? "bf16 narrowing agrees with dtype_f32_to_bf16 (ties, random bits)" :
	    "f16 narrowing agrees with dtype_f32_to_f16 (ties, subnormals, random bits)");
	free(h);
	free(o);
	free(f);
}

static void
test_avg(void)
{
	float f[3] = { 3, -3, 10 };
	int32_t i[3] = { 7, -7, 9 };
	uint8_t u[2] = { 255, 5 };
	uint16_t h[2] = { dtype_f32_to_f16(3), dtype_f32_to_bf16(3) };
	uint8_t bo[2] = { 1, 0 };

	coll_finish_avg(f, 3, DT_F32, 2);
	UNIT_OK(f[0] == 1.5f && f[1] == -1.5f && f[2] == 5, "f32 avg divides");
	coll_finish_avg(i, 3, DT_I32, 2);
	UNIT_OK(i[0] == 3 && i[1] == -3 && i[2] == 4, "i32 avg truncates toward zero");
	coll_finish_avg(u, 2, DT_U8, 4);
	UNIT_OK(u[0] == 63 && u[1] == 1, "u8 avg truncates");
	coll_finish_avg(h, 1, DT_F16, 2);
	coll_finish_avg(h + 1, 1, DT_BF16, 2);
	UNIT_OK(dtype_f16_to_f32(h[0]) == 1.5f && dtype_bf16_to_f32(h[1]) == 1.5f,
	    "f16 and bf16 avg divide in f32");
	coll_finish_avg(bo, 2, DT_BOOL, 2);
	UNIT_OK(bo[0] == 1 && bo[1] == 0, "bool avg leaves the logical or");
}

static void
test_names(void)
{
	static const char *ops[] = { "sum", "prod", "min", "max", "avg" };
	static const char *algos[] = { "auto", "naive", "ring", "tree", "rd",
	    "rabenseifner", "linear", "binomial", "scatter-allgather", "bruck",
	    "pairwise", "halving", "hier" };
	enum coll_op op;
	enum coll_algo a;
	int ok = 1;

	for (int k = 0; k < 5; k++)
		ok &= coll_op_parse(ops[k], &op) == 0 && (int)op == k &&
		    strcmp(coll_op_name(op), ops[k]) == 0;
	UNIT_OK(ok && coll_op_parse("mean", &op) == -1, "op names round-trip");
	ok = 1;
	for (int k = 0; k < COLL_ALGO_COUNT; k++)
		ok &= coll_algo_parse(algos[k], &a) == 0 && (int)a == k &&
		    strcmp(coll_algo_name(a), algos[k]) == 0;
	UNIT_OK(ok && coll_algo_parse("fast", &a) == -1, "algorithm names round-trip");
	UNIT_OK(coll_algo_valid(COLL_KIND_ALLREDUCE, COLL_RABENSEIFNER) &&
	    !coll_algo_valid(COLL_KIND_ALLREDUCE, COLL_BRUCK) &&
	    coll_algo_valid(COLL_KIND_ALLGATHER, COLL_BRUCK) &&
	    coll_algo_valid(COLL_KIND_BROADCAST, COLL_AUTO),
	    "algorithm validity per collective");
}

static void
test_auto(void)
{
	enum coll_algo small = coll_auto(COLL_KIND_ALLREDUCE, 64, 8);
	enum coll_algo big = coll_auto(COLL_KIND_ALLREDUCE, 64 << 20, 8);
	int ok = 1;

	for (int k = COLL_KIND_ALLREDUCE; k <= COLL_KIND_ALLTOALL; k++)
		for (int w = 1; w <= 9; w++)
			for (size_t b = 1; b <= ((size_t)1 << 30); b <<= 3)
				ok &= coll_algo_valid(k, coll_auto(k, b, w)) &&
				    coll_auto(k, b, w) != COLL_AUTO;
	UNIT_OK(ok, "auto always picks a concrete valid algorithm");
	UNIT_OK(small != COLL_RING && (big == COLL_RING || big == COLL_RABENSEIFNER),
	    "auto: latency-bound small allreduce avoids the ring, large is bandwidth-optimal");
}

int
main(void)
{
	test_all_kernels();
	test_nan();
	test_half_accumulates_in_f32();
	test_half_conversions(0);
	test_half_conversions(1);
	test_avg();
	test_names();
	test_auto();
	return unit_done();
}
