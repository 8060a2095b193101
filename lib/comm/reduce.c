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
#include <string.h>

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

/*
 * Half precision, widened and narrowed a chunk at a time by branch-free
 * loops the compiler vectorizes. They give the same values as dtype.c's
 * general conversions (checked exhaustively in test_reduce) at a hundred
 * times the speed: f16 -> f32 is exact; f32 -> f16 and bf16 round to
 * nearest even; NaN stays NaN (quiet, sign kept), overflow is infinity.
 */
#define HALF_CHUNK 512

static inline float
bits_f(uint32_t b)
{
	float f;

	memcpy(&f, &b, sizeof f);
	return f;
}

static inline uint32_t
f_bits(float f)
{
	uint32_t b;

	memcpy(&b, &f, sizeof b);
	return b;
}

/* Place the 15 magnitude bits under an f32 exponent and rescale by 2^112
 * (which also normalizes subnormals); 2^16 and up were infinity or NaN. */
static inline float
f16_widen(uint16_t h)
{
	uint32_t b = f_bits(bits_f((uint32_t)(h & 0x7fff) << 13) * 0x1p112f);

	b |= b >= 0x47800000u ? 0x7f800000u : 0;
	return bits_f(b | (uint32_t)(h & 0x8000) << 16);
}

/* Normal results: rebias the exponent and round at bit 13 (ties to even);
 * subnormal results: adding 0.5 makes the FPU round the bits into place. */
static inline uint16_t
f16_narrow(float f)
{
	uint32_t b = f_bits(f), a = b & 0x7fffffffu, sign = (b >> 16) & 0x8000;
	uint32_t nrm = (a + 0xc8000fffu + ((a >> 13) & 1)) >> 13;
	uint32_t sub = f_bits(bits_f(a) + 0.5f) - 0x3f000000u;
	uint32_t big = 0x7c00 | (uint32_t)(a > 0x7f800000u) << 9;	/* inf, qNaN */
	uint32_t is_sub = -(uint32_t)(a < 0x38800000u), is_big = -(uint32_t)(a >= 0x47800000u);

	/* masks rather than branches, so the loop vectorizes */
	nrm = (sub & is_sub) | (nrm & ~is_sub);
	return (uint16_t)(sign | (big & is_big) | (nrm & ~is_big));
}

static inline float
bf16_widen(uint16_t h)
{
	return bits_f((uint32_t)h << 16);
}

static inline uint16_t
bf16_narrow(float f)
{
	uint32_t b = f_bits(f), nan = (b & 0x7fffffffu) > 0x7f800000u;

	return (uint16_t)(nan ? (b >> 16) | 0x40 : (b + 0x7fffu + ((b >> 16) & 1)) >> 16);
}

/* Whole vector-multiple chunks take the vectorized loop, the rest a scalar one. */
#define CONVERT_LOOP(n, BODY)						\
	do {								\
		size_t i, body = (n) & ~(size_t)(VEC_ELEMS - 1);	\
		for (i = 0; i < body; i++)				\
			BODY;						\
		for (; i < (n); i++)					\
			BODY;						\
	} while (0)

#define HALF_CONVERT(pfx)						\
void comm_reduce_##pfx##_widen(float *restrict out,			\
    const uint16_t *restrict in, size_t n)				\
{									\
	CONVERT_LOOP(n, out[i] = pfx##_widen(in[i]));			\
}									\
void comm_reduce_##pfx##_narrow(uint16_t *restrict out,		\
    const float *restrict in, size_t n)				\
{									\
	CONVERT_LOOP(n, out[i] = pfx##_narrow(in[i]));			\
}

HALF_CONVERT(f16)
HALF_CONVERT(bf16)

/* Widen a chunk of dst and src to f32, reduce with f, narrow dst back. */
#define HALF_KERNEL(name, pfx, f)					\
static void name(void *restrict dv, const void *restrict sv, size_t n)	\
{									\
	uint16_t *restrict d = dv;					\
	const uint16_t *restrict s = sv;				\
	float a[HALF_CHUNK], b[HALF_CHUNK];				\
	for (size_t off = 0; off < n; off += HALF_CHUNK) {		\
		size_t m = n - off < HALF_CHUNK ? n - off : HALF_CHUNK;	\
		comm_reduce_##pfx##_widen(a, d + off, m);			\
		comm_reduce_##pfx##_widen(b, s + off, m);			\
		f(a, b, m);						\
		comm_reduce_##pfx##_narrow(d + off, a, m);			\
	}								\
}

#define HALF_KERNELS(pfx)						\
HALF_KERNEL(pfx##_sum, pfx, f32_sum)					\
HALF_KERNEL(pfx##_prod, pfx, f32_prod)					\
HALF_KERNEL(pfx##_min, pfx, f32_min)					\
HALF_KERNEL(pfx##_max, pfx, f32_max)

HALF_KERNELS(f16)
HALF_KERNELS(bf16)

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

reduce_fn
comm_reduce_kernel(enum dtype dt, enum coll_op op)
{
	if ((unsigned)dt >= DT_COUNT || (unsigned)op > COLL_AVG)
		return NULL;
	return kernels[dt][op == COLL_AVG ? COLL_SUM : op];
}

void
coll_reduce_local(void *dst, const void *src, size_t count, enum dtype dt,
    enum coll_op op)
{
	reduce_fn f = comm_reduce_kernel(dt, op);

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
static void
half_divide(uint16_t *p, size_t n, int world, int bf)
{
	float f[HALF_CHUNK];

	for (size_t off = 0; off < n; off += HALF_CHUNK) {
		size_t m = n - off < HALF_CHUNK ? n - off : HALF_CHUNK;
		(bf ? comm_reduce_bf16_widen : comm_reduce_f16_widen)(f, p + off, m);
		for (size_t i = 0; i < m; i++)
			f[i] /= (float)world;
		(bf ? comm_reduce_bf16_narrow : comm_reduce_f16_narrow)(p + off, f, m);
	}
}

/*
 * AVG is SUM followed by this division by the world size. Integers divide
 * with C's truncation toward zero (the sum itself wraps in the element
 * type); bool is left as the logical or.
 */
void
coll_finish_avg(void *buf, size_t count, enum dtype dt, int world)
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
