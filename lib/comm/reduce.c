/*
 * reduce: the local kernels behind every reducing collective.
 *
 * Each kernel is one restrict-qualified loop over one element type, simple
 * enough for the compiler to vectorize at -O2 (see -fopt-info-vec). Integer
 * SUM and PROD wrap around (two's complement, as NumPy and PyTorch do): the
 * arithmetic is done in an unsigned type, never overflowing a signed one.
 * Float MIN and MAX propagate NaN like torch.minimum/maximum. bool: SUM and
 * MAX are logical or, PROD and MIN logical and. f16 and bf16 are widened to
 * f32 a chunk at a time, reduced by the f32 kernel and rounded back.
 */
#include <stdint.h>

#include "comm/reduce.h"

/*
 * The main loop runs a multiple of VEC_ELEMS iterations: gcc's -O2 cost
 * model only vectorizes a loop that needs no scalar epilogue, so the
 * remainder gets a loop of its own.
 */
#define VEC_ELEMS 64

#define KERNEL(name, T, EXPR)						\
static void name(void *restrict dv, const void *restrict sv, size_t n)	\
{									\
	T *restrict d = dv;						\
	const T *restrict s = sv;					\
	size_t i, body = n & ~(size_t)(VEC_ELEMS - 1);			\
	for (i = 0; i < body; i++) {					\
		T a = d[i], b = s[i];					\
		d[i] = (T)(EXPR);					\
	}								\
	for (; i < n; i++) {						\
		T a = d[i], b = s[i];					\
		d[i] = (T)(EXPR);					\
	}								\
}

#define FLOAT_KERNELS(pfx, T)						\
KERNEL(pfx##_sum, T, a + b)						\
KERNEL(pfx##_prod, T, a * b)						\
KERNEL(pfx##_min, T, (b < a || b != b) ? b : a)			\
KERNEL(pfx##_max, T, (b > a || b != b) ? b : a)

/* U: an unsigned type at least as wide as int, so nothing promotes to int. */
#define INT_KERNELS(pfx, T, U)						\
KERNEL(pfx##_sum, T, (U)a + (U)b)					\
KERNEL(pfx##_prod, T, (U)a * (U)b)					\
KERNEL(pfx##_min, T, b < a ? b : a)					\
KERNEL(pfx##_max, T, b > a ? b : a)

FLOAT_KERNELS(f32, float)
FLOAT_KERNELS(f64, double)
INT_KERNELS(i8, int8_t, uint32_t)
INT_KERNELS(i16, int16_t, uint32_t)
INT_KERNELS(i32, int32_t, uint32_t)
INT_KERNELS(i64, int64_t, uint64_t)
INT_KERNELS(u8, uint8_t, uint32_t)
KERNEL(bool_or, uint8_t, (a | b) != 0)
KERNEL(bool_and, uint8_t, (a != 0) & (b != 0))

#define HALF_CHUNK 512

/* Widen a chunk of dst and src to f32, reduce with f, narrow dst back. */
#define HALF_KERNEL(name, TO32, FROM32, f)				\
static void name(void *restrict dv, const void *restrict sv, size_t n)	\
{									\
	uint16_t *restrict d = dv;					\
	const uint16_t *restrict s = sv;				\
	float a[HALF_CHUNK], b[HALF_CHUNK];				\
	for (size_t off = 0; off < n; off += HALF_CHUNK) {		\
		size_t i, m = n - off < HALF_CHUNK ? n - off : HALF_CHUNK; \
		for (i = 0; i < m; i++) {				\
			a[i] = TO32(d[off + i]);			\
			b[i] = TO32(s[off + i]);			\
		}							\
		f(a, b, m);						\
		for (i = 0; i < m; i++)					\
			d[off + i] = FROM32(a[i]);			\
	}								\
}

#define HALF_KERNELS(pfx, TO32, FROM32)					\
HALF_KERNEL(pfx##_sum, TO32, FROM32, f32_sum)				\
HALF_KERNEL(pfx##_prod, TO32, FROM32, f32_prod)				\
HALF_KERNEL(pfx##_min, TO32, FROM32, f32_min)				\
HALF_KERNEL(pfx##_max, TO32, FROM32, f32_max)

HALF_KERNELS(f16, f16_to_f32, f32_to_f16)
HALF_KERNELS(bf16, bf16_to_f32, f32_to_bf16)

/* Indexed by dtype, then by op: sum, prod, min, max (AVG uses sum). */
static const reduce_fn kernels[DT_COUNT][4] = {
	[DT_F32] = { f32_sum, f32_prod, f32_min, f32_max },
	[DT_F64] = { f64_sum, f64_prod, f64_min, f64_max },
	[DT_F16] = { f16_sum, f16_prod, f16_min, f16_max },
	[DT_BF16] = { bf16_sum, bf16_prod, bf16_min, bf16_max },
	[DT_I8] = { i8_sum, i8_prod, i8_min, i8_max },
	[DT_I16] = { i16_sum, i16_prod, i16_min, i16_max },
	[DT_I32] = { i32_sum, i32_prod, i32_min, i32_max },
	[DT_I64] = { i64_sum, i64_prod, i64_min, i64_max },
	[DT_U8] = { u8_sum, u8_prod, u8_min, u8_max },
	[DT_BOOL] = { bool_or, bool_and, bool_and, bool_or },
};

reduce_fn reduce_kernel(enum dtype dt, enum coll_op op)
{
	if ((unsigned)dt >= DT_COUNT || (unsigned)op > COLL_AVG)
		return NULL;
	return kernels[dt][op == COLL_AVG ? COLL_SUM : op];
}

void coll_reduce_local(void *dst, const void *src, size_t count, enum dtype dt,
    enum coll_op op)
{
	reduce_fn f = reduce_kernel(dt, op);

	if (f && count > 0)
		f(dst, src, count);
}

#define DIVIDE(T, buf, n, w)						\
	do {								\
		T *p = (buf);						\
		for (size_t i = 0; i < (n); i++)			\
			p[i] = (T)(p[i] / (w));				\
	} while (0)

/* Divide half-precision values in f32, rounding once back to half. */
static void half_divide(uint16_t *p, size_t n, int world, int bf)
{
	for (size_t i = 0; i < n; i++)
		p[i] = bf ? f32_to_bf16(bf16_to_f32(p[i]) / (float)world) :
		    f32_to_f16(f16_to_f32(p[i]) / (float)world);
}

/*
 * AVG is SUM followed by this division by the world size. Integers divide
 * with C's truncation toward zero (the sum itself wraps in the element
 * type); bool is left as the logical or.
 */
void coll_finish_avg(void *buf, size_t count, enum dtype dt, int world)
{
	switch (dt) {
	case DT_F32: DIVIDE(float, buf, count, (float)world); break;
	case DT_F64: DIVIDE(double, buf, count, (double)world); break;
	case DT_F16: half_divide(buf, count, world, 0); break;
	case DT_BF16: half_divide(buf, count, world, 1); break;
	case DT_I8: DIVIDE(int8_t, buf, count, world); break;
	case DT_I16: DIVIDE(int16_t, buf, count, world); break;
	case DT_I32: DIVIDE(int32_t, buf, count, world); break;
	case DT_I64: DIVIDE(int64_t, buf, count, (int64_t)world); break;
	case DT_U8: DIVIDE(uint8_t, buf, count, world); break;
	default: break;
	}
}
