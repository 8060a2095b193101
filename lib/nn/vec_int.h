/* vec_int: how nn writes its elementwise and reduction loops so that gcc
 * -O2 vectorizes them, and the processor copies of the hot ones; not part
 * of the nn API. */
#ifndef COLLX_NN_VEC_INT_H
#define COLLX_NN_VEC_INT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/*
 * gcc -O2 (its very cheap cost model) vectorizes a loop only when it needs
 * no scalar remainder, and no float reduction at all (that would reorder
 * the additions). So the passes run over spans: called with the constant
 * NN_LANES a span's loop is inlined with a fixed trip count, and a final
 * call covers the remainder; sums keep NN_LANES partial results (lane j
 * adds elements j, j + NN_LANES, ...), the same order on every processor.
 */
#define NN_LANES 16

/* A pass that hands its output on in bf16 (nn_act_forward_h,
 * nn_gemm_linear_grad_made) rounds it a chunk of about this many values
 * at a time, while the chunk is in the first-level cache; a multiple of
 * NN_LANES, so that the spans are the unchunked pass's. */
#define NN_CHUNK 1024

/*
 * The hot passes are also built for x86-64-v3 (AVX2 and FMA) and v4
 * (AVX-512), picked at load time. Their polynomials use fmaf, which is
 * exact, so every copy gives the same bits (the plain copy, for
 * processors older than AVX2, calls libm's fmaf). clang 14's
 * target_clones drops the plain symbol, so it is left to gcc.
 */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define NN_CLONES __attribute__((target_clones("arch=x86-64-v4", \
    "arch=x86-64-v3", "default")))
#else
#define NN_CLONES
#endif

/* The spans and what they call: inlined into every copy, always (an
 * outlined one would be the plain copy, calling libm's fmaf). */
#ifdef __GNUC__
#define NN_INLINE static inline __attribute__((always_inline))
#else
#define NN_INLINE static inline
#endif

/* The total of the lanes, pairwise. */
NN_INLINE float
lanes_total(float *acc)
{
	for (int w = NN_LANES / 2; w > 0; w /= 2)
		for (int j = 0; j < w; j++)
			acc[j] += acc[j + w];
	return acc[0];
}

/* What a lane adds per element: a, a * b or (a - m)^2. */
enum vec_term { VEC_SUM, VEC_DOT, VEC_SQDEV };

NN_INLINE void
reduce_span(float *restrict acc, enum vec_term t, const float *restrict a,
    const float *restrict b, float m, size_t n)
{
	for (size_t j = 0; j < n; j++)
		acc[j] += t == VEC_SUM ? a[j] : t == VEC_DOT ? a[j] * b[j] :
		    (a[j] - m) * (a[j] - m);
}

/* The sum of term t over a[0..n) (and b, m), in lanes; t a constant. */
NN_INLINE float
vec_reduce(enum vec_term t, const float *a, const float *b, float m,
    size_t n)
{
	float acc[NN_LANES] = { 0 };
	size_t i = 0;

	for (; i + NN_LANES <= n; i += NN_LANES)
		reduce_span(acc, t, a + i, b ? b + i : NULL, m, NN_LANES);
	reduce_span(acc, t, a + i, b ? b + i : NULL, m, n - i);
	return lanes_total(acc);
}

NN_INLINE void
max_span(float *restrict acc, const float *restrict a, size_t n)
{
	for (size_t j = 0; j < n; j++)
		acc[j] = a[j] > acc[j] ? a[j] : acc[j];
}

/* The largest of a[0..n), n >= 1. */
NN_INLINE float
vec_max(const float *a, size_t n)
{
	float acc[NN_LANES];
	size_t i = 0;

	for (int j = 0; j < NN_LANES; j++)
		acc[j] = a[0];
	for (; i + NN_LANES <= n; i += NN_LANES)
		max_span(acc, a + i, NN_LANES);
	max_span(acc, a + i, n - i);
	for (int w = NN_LANES / 2; w > 0; w /= 2)
		max_span(acc, acc + w, (size_t)w);
	return acc[0];
}

NN_INLINE void
add_span(float *restrict dst, const float *restrict src, size_t n)
{
	for (size_t j = 0; j < n; j++)
		dst[j] += src[j];
}

/* dst += src. */
NN_INLINE void
vec_add(float *dst, const float *src, size_t n)
{
	size_t i = 0;

	for (; i + NN_LANES <= n; i += NN_LANES)
		add_span(dst + i, src + i, NN_LANES);
	add_span(dst + i, src + i, n - i);
}

NN_INLINE void
axpy_span(float *restrict y, float a, const float *restrict x, size_t n)
{
	for (size_t j = 0; j < n; j++)
		y[j] += a * x[j];
}

/* y += a * x. */
NN_INLINE void
vec_axpy(float *y, float a, const float *x, size_t n)
{
	size_t i = 0;

	for (; i + NN_LANES <= n; i += NN_LANES)
		axpy_span(y + i, a, x + i, NN_LANES);
	axpy_span(y + i, a, x + i, n - i);
}

NN_INLINE void
scale_span(float *a, float s, size_t n)
{
	for (size_t j = 0; j < n; j++)
		a[j] *= s;
}

NN_INLINE void
vec_scale(float *a, float s, size_t n)
{
	size_t i = 0;

	for (; i + NN_LANES <= n; i += NN_LANES)
		scale_span(a + i, s, NN_LANES);
	scale_span(a + i, s, n - i);
}

/*
 * sqrt(x) for normal x >= 0 within 2e-7 relative (3 ulp; 0 stays 0, a
 * subnormal x gives a smaller but tiny value): three Newton steps on
 * 1/sqrt(x) from the guess that halves the exponent bits, then times x.
 * libm's sqrtf may set errno, which keeps gcc from vectorizing it.
 */
NN_INLINE float
vec_sqrt(float x)
{
	int32_t i;
	float y, h = 0.5f * x;

	memcpy(&i, &x, sizeof(i));
	i = 0x5f375a86 - (i >> 1);
	memcpy(&y, &i, sizeof(y));
	for (int k = 0; k < 3; k++)
		y = y * (1.5f - h * y * y);
	return x * y;
}

/* The 2 MiB-aligned part of [p, p + bytes) on transparent huge pages,
 * where the system grants them on request (madvise mode), before its
 * first touch: a buffer a step streams through costs a TLB miss every
 * 4 KiB page otherwise (run.c). */
void nn_advise_huge(void *p, size_t bytes);

#endif
