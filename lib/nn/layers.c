/* layers: forward and backward passes of the f32 building blocks. */
#include <math.h>
#include <string.h>

#include "nn/gemm_int.h"
#include "nn/nn.h"
#include "nn/vec_int.h"

NN_CLONES void
nn_add(float *dst, const float *src, size_t count)
{
	vec_add(dst, src, count);
}

void
nn_add_rows(float *out, const float *b, size_t n, size_t c)
{
	if (b)
		for (size_t i = 0; i < n; i++)
			nn_add(out + i * c, b, c);
}

void
nn_linear_forward(float *out, const float *inp, const float *w,
    const float *b, int n, int in, int o)
{
	if (n <= 0 || o <= 0)
		return;
	if (in <= 0) {
		for (int r = 0; r < n; r++)
			for (int j = 0; j < o; j++)
				out[(size_t)r * o + j] = b ? b[j] : 0.0f;
		return;
	}
	nn_gemm_linear(out, inp, w, b, n, in, o);
}

void
nn_linear_forward_add(float *out, const float *inp, const float *w,
    const float *b, const float *res, int n, int in, int o)
{
	if (res && n > 0 && in > 0 && o > 0) {
		nn_gemm_linear_add(out, inp, w, b, res, n, in, o);
		return;
	}
	nn_linear_forward(out, inp, w, b, n, in, o);
	if (res && n > 0 && o > 0)
		nn_add(out, res, (size_t)n * o);
}

static void
linear_backward(float *dinp, float *dw, float *db, const float *dout,
    const float *inp, const float *w, int n, int in, int o, int set)
{
	if (set && dinp && n > 0 && in > 0 && o <= 0)
		memset(dinp, 0, (size_t)n * in * sizeof(float));
	if (n > 0 && o > 0)
		nn_gemm_linear_grad(in > 0 ? dinp : NULL, in > 0 ? dw : NULL, db,
		    dout, inp, w, n, in > 0 ? in : 0, o, set);
}

void
nn_linear_backward(float *dinp, float *dw, float *db, const float *dout,
    const float *inp, const float *w, int n, int in, int o)
{
	linear_backward(dinp, dw, db, dout, inp, w, n, in, o, 0);
}

void
nn_linear_backward_to(float *dinp, float *dw, float *db, const float *dout,
    const float *inp, const float *w, int n, int in, int o)
{
	linear_backward(dinp, dw, db, dout, inp, w, n, in, o, 1);
}

#define NN_INV_SQRT2 0.70710678118654752440f
#define NN_INV_SQRT2PI 0.39894228040143267794f

/*
 * e^x to about 2 ulp, 0 below about -87.3 (x <= 88, above -1e9): Cody-Waite
 * reduction x = n ln 2 + r with n rounded by the 1.5*2^23 trick, a degree-7
 * Taylor polynomial for e^r, and 2^n from exponent bits. Branch-free, so
 * the elementwise loops vectorize; libm's expf and erff are a call per
 * element and dominated the small models' profiles. Only the clones
 * (NN_CLONES) call it: fmaf is a libm call elsewhere.
 */
NN_INLINE float
fast_exp(float x)
{
	float fn = x * 1.44269504088896341f + 12582912.0f - 12582912.0f;
	int32_t n = (int32_t)fn;
	float r = fmaf(fn, -1.42860682030941723e-6f,
	    fmaf(fn, -0.693145751953125f, x));
	float p = fmaf(r, fmaf(r, fmaf(r, fmaf(r, fmaf(r, fmaf(r, fmaf(r,
	    1.0f / 5040, 1.0f / 720), 1.0f / 120), 1.0f / 24), 1.0f / 6), 0.5f),
	    1.0f), 1.0f);
	/* the exponent field, zero (flush) when 2^n is below the normals */
	int32_t bits = (int32_t)((uint32_t)(n + 127) << 23) & ~((n + 126) >> 31);
	float scale;

	memcpy(&scale, &bits, sizeof(scale));
	return p * scale;
}

/* a < 0 ? neg : pos, by the sign bit rather than a branch. */
NN_INLINE float
select_sign(float a, float neg, float pos)
{
	int32_t ab, nb, pb;
	float out;

	memcpy(&ab, &a, sizeof(ab));
	memcpy(&nb, &neg, sizeof(nb));
	memcpy(&pb, &pos, sizeof(pb));
	ab >>= 31;
	nb = (nb & ab) | (pb & ~ab);
	memcpy(&out, &nb, sizeof(out));
	return out;
}

/* The standard normal CDF Phi(x) = (1 + erf(x / sqrt 2)) / 2, from
 * erfc(z) = t exp(-z^2 + P(t)), t = 1 / (1 + z/2) (Numerical Recipes'
 * erfcc, relative error below 1.2e-7 for every z >= 0), so the negative
 * tail keeps its relative accuracy. */
NN_INLINE float
normal_cdf(float x)
{
	float z = fabsf(x) * NN_INV_SQRT2;
	float t = 1.0f / fmaf(0.5f, z, 1.0f);
	float p = fmaf(t, fmaf(t, fmaf(t, fmaf(t, fmaf(t, fmaf(t, fmaf(t,
	    fmaf(t, fmaf(t, 0.17087277f, -0.82215223f), 1.48851587f),
	    -1.13520398f), 0.27886807f), -0.18628806f), 0.09678418f),
	    0.37409196f), 1.00002368f), -1.26551223f);
	float half_erfc = 0.5f * t * fast_exp(fmaf(-z, z, p));

	return select_sign(x, half_erfc, 1.0f - half_erfc);
}

NN_INLINE void
gelu_span(float *restrict out, const float *restrict inp, size_t n)
{
	for (size_t i = 0; i < n; i++)
		out[i] = inp[i] * normal_cdf(inp[i]);
}

NN_INLINE void
gelu_spans(float *out, const float *inp, size_t count)
{
	size_t i = 0;

	for (; i + NN_LANES <= count; i += NN_LANES)
		gelu_span(out + i, inp + i, NN_LANES);
	gelu_span(out + i, inp + i, count - i);
}

NN_CLONES void
nn_gelu_forward(float *out, const float *inp, size_t count)
{
	gelu_spans(out, inp, count);
}

/* GELU's output and its derivative (dgelu_span's factor of dout), for
 * bf16's forward pass: Phi from Abramowitz and Stegun 7.1.26, erfc(z) =
 * t P(t) e^(-z^2), t = 1 / (1 + p z), absolute error below 1.5e-7 (far
 * inside bf16's rounding of the output), whose e^(-x^2/2) is also the
 * density's: one exponential an element rather than normal_cdf's and
 * the density's two. */
NN_INLINE void
gelu_dg_span(float *restrict out, float *restrict dg,
    const float *restrict inp, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		float x = inp[i], z = fabsf(x) * NN_INV_SQRT2;
		float t = 1.0f / fmaf(0.3275911f, z, 1.0f);
		float e = fast_exp(-0.5f * x * x);
		float half_erfc = 0.5f * e * t * fmaf(t, fmaf(t, fmaf(t,
		    fmaf(t, 1.061405429f, -1.453152027f), 1.421413741f),
		    -0.284496736f), 0.254829592f);
		float cdf = select_sign(x, half_erfc, 1.0f - half_erfc);
		out[i] = x * cdf;
		dg[i] = fmaf(x, NN_INV_SQRT2PI * e, cdf);
	}
}

NN_CLONES static void
gelu_forward_h(float *out, uint16_t *h, float *dg, const float *inp,
    size_t count)
{
	float chunk[NN_CHUNK];

	for (size_t i = 0; i < count; i += NN_CHUNK) {
		size_t c = count - i < NN_CHUNK ? count - i : NN_CHUNK, j = 0;
		/* no f32 output: the chunk's values only pass through */
		float *o = out ? out + i : chunk;
		if (!dg)
			gelu_spans(o, inp + i, c);
		for (; dg && j + NN_LANES <= c; j += NN_LANES)
			gelu_dg_span(o + j, dg + i + j, inp + i + j,
			    NN_LANES);
		if (dg)
			gelu_dg_span(o + j, dg + i + j, inp + i + j, c - j);
		if (h)
			nn_bf16_round(h + i, o, (int)c);
	}
}

NN_INLINE void
mul_span(float *restrict dinp, const float *restrict dg,
    const float *restrict dout, size_t n)
{
	for (size_t i = 0; i < n; i++)
		dinp[i] = dg[i] * dout[i];
}

/* dinp = dg dout, dg GELU's derivative kept by the forward pass; in
 * spans (vec_int.h): the plain loop ran one element at a time. */
NN_CLONES static void
gelu_backward_dg(float *dinp, const float *dg, const float *dout,
    size_t count)
{
	size_t i = 0;

	for (; i + NN_LANES <= count; i += NN_LANES)
		mul_span(dinp + i, dg + i, dout + i, NN_LANES);
	mul_span(dinp + i, dg + i, dout + i, count - i);
}

/* d/dx x Phi(x) = Phi(x) + x phi(x); dinp += that, = (set 1), or = 0 +
 * that (set 2: what adding to a zeroed dinp gives, -0 as +0, without a
 * pass to zero it). */
NN_INLINE void
dgelu_span(float *restrict dinp, const float *restrict inp,
    const float *restrict dout, size_t n, int set)
{
	for (size_t i = 0; i < n; i++) {
		float x = inp[i];
		float pdf = NN_INV_SQRT2PI * fast_exp(-0.5f * x * x);
		float g = (normal_cdf(x) + x * pdf) * dout[i];
		dinp[i] = set == 1 ? g : (set == 2 ? 0.0f : dinp[i]) + g;
	}
}

NN_INLINE void
dgelu(float *dinp, const float *inp, const float *dout, size_t count,
    int set)
{
	size_t i = 0;

	for (; i + NN_LANES <= count; i += NN_LANES)
		dgelu_span(dinp + i, inp + i, dout + i, NN_LANES, set);
	dgelu_span(dinp + i, inp + i, dout + i, count - i, set);
}

NN_CLONES void
nn_gelu_backward(float *dinp, const float *inp, const float *dout,
    size_t count)
{
	dgelu(dinp, inp, dout, count, 0);
}

/* dinp = GELU's backward: bf16 writes it at once; f32 adds it to zero,
 * the bits it always had. */
NN_CLONES static void
gelu_backward_to(float *dinp, const float *inp, const float *dout,
    size_t count)
{
	if (nn_get_precision() == NN_PREC_BF16)
		dgelu(dinp, inp, dout, count, 1);
	else
		dgelu(dinp, inp, dout, count, 2);
}

void
nn_relu_forward(float *out, const float *inp, size_t count)
{
	for (size_t i = 0; i < count; i++)
		out[i] = inp[i] > 0.0f ? inp[i] : 0.0f;
}

void
nn_relu_backward(float *dinp, const float *inp, const float *dout,
    size_t count)
{
	for (size_t i = 0; i < count; i++)
		dinp[i] += inp[i] > 0.0f ? dout[i] : 0.0f;
}

void
nn_act_forward(enum nn_act act, float *out, const float *inp, size_t count)
{
	if (act == NN_ACT_RELU)
		nn_relu_forward(out, inp, count);
	else
		nn_gelu_forward(out, inp, count);
}

void
nn_act_forward_h(enum nn_act act, float *out, uint16_t *h, float *dg,
    const float *inp, size_t count)
{
	if ((h || dg) && act == NN_ACT_GELU)
		gelu_forward_h(out, h, dg, inp, count);
	else {
		nn_act_forward(act, out, inp, count);
		if (h)
			for (size_t i = 0; i < count; i += NN_CHUNK)
				nn_bf16_round(h + i, out + i, (int)(count -
				    i < NN_CHUNK ? count - i : NN_CHUNK));
	}
}

void
nn_act_backward(enum nn_act act, float *dinp, const float *inp,
    const float *dout, size_t count)
{
	if (act == NN_ACT_RELU)
		nn_relu_backward(dinp, inp, dout, count);
	else
		nn_gelu_backward(dinp, inp, dout, count);
}

void
nn_act_backward_to(enum nn_act act, float *dinp, const float *inp,
    const float *dout, size_t count)
{
	if (act == NN_ACT_GELU) {
		gelu_backward_to(dinp, inp, dout, count);
		return;
	}
	memset(dinp, 0, count * sizeof(float));
	nn_relu_backward(dinp, inp, dout, count);
}

/* nn_act_linear_backward's rows r0..r1-1 of dfc. */
struct act_rows {
	enum nn_act act;
	const float *fc, *dact, *dg;
	int o;
};

static void
act_rows(void *ctx, int r0, int r1, float *rows)
{
	struct act_rows *a = ctx;
	size_t off = (size_t)r0 * a->o, count = (size_t)(r1 - r0) * a->o;

	if (a->dg)
		gelu_backward_dg(rows, a->dg + off, a->dact + off, count);
	else
		nn_act_backward_to(a->act, rows, a->fc + off, a->dact + off,
		    count);
}

void
nn_act_linear_backward(enum nn_act act, float *dx, float *dw, float *db,
    float *dfc, const float *fc, const float *dact, const float *x,
    const float *w, int n, int in, int o)
{
	struct act_rows a = { act, fc, dact, act == NN_ACT_GELU ?
	    nn_bf16_keep_f32(fc, n, o, 0) : NULL, o };

	if (n > 0 && in > 0 && o > 0)
		nn_gemm_linear_grad_made(dx, dw, db, dfc, act_rows, &a, x, w,
		    n, in, o, 0);
	else {
		act_rows(&a, 0, n, dfc);
		nn_linear_backward(dx, dw, db, dfc, x, w, n, in, o);
	}
}

int
nn_act_parse(const char *s, enum nn_act *out)
{
	if (strcmp(s, "gelu") == 0)
		*out = NN_ACT_GELU;
	else if (strcmp(s, "relu") == 0)
		*out = NN_ACT_RELU;
	else
		return -1;
	return 0;
}

const char *
nn_act_name(enum nn_act act)
{
	return act == NN_ACT_RELU ? "relu" : "gelu";
}

/* a[i] = e^(a[i] - shift), summed in lanes. */
NN_INLINE void
exp_span(float *restrict acc, float *restrict a, float shift, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		a[i] = fast_exp(a[i] - shift);
		acc[i] += a[i];
	}
}

NN_INLINE float
exp_shifted_sum(float *a, float shift, size_t count)
{
	float acc[NN_LANES] = { 0 };
	size_t i = 0;

	for (; i + NN_LANES <= count; i += NN_LANES)
		exp_span(acc, a + i, shift, NN_LANES);
	exp_span(acc, a + i, shift, count - i);
	return lanes_total(acc);
}

/* LayerNorm's absent weight and bias, a span at a time. */
static const float ln_ones[NN_LANES] = { 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1 };
static const float ln_zeros[NN_LANES];

/* y = (x - m) * s * w + b */
NN_INLINE void
ln_span(float *restrict y, const float *restrict x, float m, float s,
    const float *restrict w, const float *restrict b, size_t n)
{
	for (size_t i = 0; i < n; i++)
		y[i] = (x[i] - m) * s * w[i] + b[i];
}

NN_CLONES void
nn_layernorm_forward(float *out, float *mean, float *rstd,
    const float *inp, const float *w, const float *b, int n, int c)
{
	nn_layernorm_forward_h(out, NULL, mean, rstd, inp, w, b, n, c);
}

NN_CLONES void
nn_layernorm_forward_h(float *out, uint16_t *h, float *mean, float *rstd,
    const float *inp, const float *w, const float *b, int n, int c)
{
	float chunk[NN_CHUNK];

	for (int r = 0; r < n; r++) {
		const float *x = inp + (size_t)r * c;
		float m = vec_reduce(VEC_SUM, x, NULL, 0.0f, (size_t)c) / c;
		float v = vec_reduce(VEC_SQDEV, x, NULL, m, (size_t)c) / c;
		float s = 1.0f / sqrtf(v + NN_LN_EPS);
		/* no f32 output: a chunk of the row at a time passes through */
		for (int j = 0; j < c; j += NN_CHUNK) {
			int e = c - j < NN_CHUNK ? c - j : NN_CHUNK, i;
			float *y = out ? out + (size_t)r * c + j : chunk;
			for (i = 0; i + NN_LANES <= e; i += NN_LANES)
				ln_span(y + i, x + j + i, m, s, w ? w + j + i :
				    ln_ones, b ? b + j + i : ln_zeros, NN_LANES);
			ln_span(y + i, x + j + i, m, s, w ? w + j + i :
			    ln_ones, b ? b + j + i : ln_zeros, (size_t)(e - i));
			if (h)
				nn_bf16_round(h + (size_t)r * c + j, y, e);
		}
		mean[r] = m;
		rstd[r] = s;
	}
}

/* The sums of g = w * dy and of g * (x - m). */
NN_INLINE void
ln_sums_span(float *restrict g, float *restrict gx, const float *restrict w,
    const float *restrict dy, const float *restrict x, float m, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		g[i] += w[i] * dy[i];
		gx[i] += w[i] * dy[i] * (x[i] - m);
	}
}

/* dx += s * (w * dy - gm - (x - m) * s * gxm) */
NN_INLINE void
ln_dx_span(float *restrict dx, const float *restrict w,
    const float *restrict dy, const float *restrict x, float m, float s,
    float gm, float gxm, size_t n)
{
	for (size_t i = 0; i < n; i++)
		dx[i] += s * (w[i] * dy[i] - gm - (x[i] - m) * s * gxm);
}

/* dw += (x - m) * s * dy */
NN_INLINE void
ln_dw_span(float *restrict dw, const float *restrict dy,
    const float *restrict x, float m, float s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		dw[i] += (x[i] - m) * s * dy[i];
}

/* One row of the backward pass, spans of at most NN_LANES at i. */
NN_INLINE void
ln_row_backward(float *dx, float *dw, float *db, const float *dy,
    const float *x, const float *w, float m, float s, int c)
{
	float g[NN_LANES] = { 0 }, gx[NN_LANES] = { 0 };
	int i = 0;

	/* the weight part alone (dx NULL) needs no sums */
	for (; dx && i + NN_LANES <= c; i += NN_LANES)
		ln_sums_span(g, gx, w ? w + i : ln_ones, dy + i, x + i, m,
		    NN_LANES);
	if (dx)
		ln_sums_span(g, gx, w ? w + i : ln_ones, dy + i, x + i, m,
		    (size_t)(c - i));
	float gm = lanes_total(g) / c, gxm = lanes_total(gx) * s / c;
	if (db)
		vec_add(db, dy, (size_t)c);
	if (dw) {
		for (i = 0; i + NN_LANES <= c; i += NN_LANES)
			ln_dw_span(dw + i, dy + i, x + i, m, s, NN_LANES);
		ln_dw_span(dw + i, dy + i, x + i, m, s, (size_t)(c - i));
	}
	if (!dx)
		return;
	for (i = 0; i + NN_LANES <= c; i += NN_LANES)
		ln_dx_span(dx + i, w ? w + i : ln_ones, dy + i, x + i, m, s, gm,
		    gxm, NN_LANES);
	ln_dx_span(dx + i, w ? w + i : ln_ones, dy + i, x + i, m, s, gm, gxm,
	    (size_t)(c - i));
}

/* With xhat = (x - mean) * rstd and g = w * dout:
 * dx = rstd * (g - mean(g) - xhat * mean(g * xhat)). */
NN_CLONES void
nn_layernorm_backward(float *dinp, float *dw, float *db,
    const float *dout, const float *inp, const float *w, const float *mean,
    const float *rstd, int n, int c)
{
	for (int r = 0; r < n; r++)
		ln_row_backward(dinp ? dinp + (size_t)r * c : NULL, dw, db,
		    dout + (size_t)r * c, inp + (size_t)r * c, w, mean[r],
		    rstd[r], c);
}

/* Row-wise softmax in place over the first len entries of a row of s;
 * the masked tail (causal) is set to zero. */
NN_INLINE void
softmax_row(float *a, int len, int s)
{
	float sum = exp_shifted_sum(a, vec_max(a, (size_t)len), (size_t)len);

	vec_scale(a, 1.0f / sum, (size_t)len);
	memset(a + len, 0, (size_t)(s - len) * sizeof(float));
}

/* Causal attention in blocks of rows: rows i0..i1-1 attend to columns
 * 0..i1-1 only, so the products skip most of the masked upper triangle
 * (about 5/8 of the full work at seq 128) instead of computing it and
 * throwing it away. Bigger blocks mean fewer, larger BLAS calls. */
#define NN_ATT_ROWS 32

/* bf16 takes whole rows, one block: oneDNN's kernel for small products
 * (gemm:jit) runs several times slower than the one for large ones, more
 * than the masked scores it then computes (and zeroes, as above) cost. */
static int
att_step(int causal, int s)
{
	return causal && nn_get_precision() == NN_PREC_F32 ? NN_ATT_ROWS : s;
}

/* Head view of a [b, s, nh*hd] tensor, and [b*nh, s, s] dense. */
static struct nn_bview
heads_view(const float *p, int b, int s, int nh, int hd)
{
	struct nn_bview v = { (float *)p, b * nh, s, hd, nh * hd, nh,
	    (size_t)s * nh * hd, (size_t)hd };

	return v;
}

static struct nn_bview
dense_view(const float *p, int nb, int s)
{
	struct nn_bview v = { (float *)p, nb, s, s, s, 1, (size_t)s * s, 0 };

	return v;
}

void
nn_linear_forward_heads(float *out, const float *inp, const float *w,
    const float *b, int bsz, int s, int nh, int hd, int in)
{
	struct nn_bview hv = heads_view(out, bsz, s, nh, hd);
	int n = bsz * s;

	if (n > 0 && in > 0 && nh * hd > 0 && nn_gemm_linear_heads(&hv, inp,
	    w, b, n, in, nh * hd) == 0)
		return;
	nn_linear_forward(out, inp, w, b, n, in, nh * hd);
}

/* q, k and v's f32 values where nn_linear_forward_heads kept them in
 * bf16 only, for the head-by-head paths (which round them again: the
 * same operands). */
static void
widen_qkv(const float *q, const float *k, const float *v, int b, int s,
    int nh, int hd)
{
	const float *m[3] = { q, k, v };

	for (int i = 0; i < 3; i++) {
		struct nn_bview hv = heads_view(m[i], b, s, nh, hd);
		nn_bf16_widen_kept(&hv);
	}
}

/*
 * bf16 where oneDNN runs it natively: every head at once, one batched
 * product for each of attention's matrix products (a product of one
 * head, 128 x 128 x 64, is too small to run at the kernels' speed), each
 * operand rounded once. Whole rows, the masked scores computed and then
 * zeroed by the softmax (att_step). -1 (nothing written): the caller
 * takes the head-by-head path.
 */
NN_CLONES static int
attention_forward_bf16(float *out, float *att, const float *q,
    const float *k, const float *v, int b, int s, int nh, int hd, int causal)
{
	int B = b * nh, rc = -1;
	struct nn_bview hq = heads_view(q, b, s, nh, hd);
	struct nn_bview hk = heads_view(k, b, s, nh, hd);
	struct nn_bview hv = heads_view(v, b, s, nh, hd);
	struct nn_bview ho = heads_view(out, b, s, nh, hd);
	struct nn_bview ha = dense_view(att, B, s);
	const uint16_t *Q, *K, *V;
	uint16_t *A;

	if (nn_bf16_begin() < 0)
		return -1;
	Q = nn_bf16_pack(0, &hq);
	K = nn_bf16_pack(1, &hk);
	V = nn_bf16_pack(2, &hv);
	A = nn_bf16_out(3, &ha);	/* kept for the backward pass */
	if (!Q || !K || !V || !A || nn_bf16_bmm(B, 0, 1, s, s, hd,
	    1.0f / sqrtf((float)hd), Q, K, att) < 0)
		goto out;
	for (size_t r = 0; r < (size_t)B * s; r++) {
		softmax_row(att + r * s, causal ? (int)(r % s) + 1 : s, s);
		nn_bf16_round(A + r * s, att + r * s, s);
	}
	/* recording a pass: out's only readers, the projection's products,
	 * take its bf16 copy, which oneDNN writes instead */
	if (nn_bf16_bmm_heads(0, s, 1.0f, A, V, 0.0f, &ho, 1) < 0 &&
	    nn_bf16_bmm_heads(0, s, 1.0f, A, V, 0.0f, &ho, 0) < 0)
		goto out;
	rc = 0;
out:
	nn_bf16_end();
	return rc;
}

NN_CLONES void
nn_attention_forward(float *out, float *att, const float *q,
    const float *k, const float *v, int b, int s, int nh, int hd, int causal)
{
	int c = nh * hd, step = att_step(causal, s);

	if (attention_forward_bf16(out, att, q, k, v, b, s, nh, hd,
	    causal) == 0)
		return;
	widen_qkv(q, k, v, b, s, nh, hd);
	float scale = 1.0f / sqrtf((float)hd);

	for (int bi = 0; bi < b; bi++)
		for (int h = 0; h < nh; h++) {
			size_t off = (size_t)bi * s * c + (size_t)h * hd;
			float *a = att + ((size_t)bi * nh + h) * s * s;
			for (int i0 = 0; i0 < s; i0 += step) {
				int i1 = i0 + step < s ? i0 + step : s;
				int cols = causal ? i1 : s;
				float *ab = a + (size_t)i0 * s;
				nn_gemm(0, 1, i1 - i0, cols, hd, scale,
				    q + off + (size_t)i0 * c, c, k + off, c, 0.0f,
				    ab, s);
				for (int i = i0; i < i1; i++)
					softmax_row(a + (size_t)i * s,
					    causal ? i + 1 : s, s);
				nn_gemm(0, 0, i1 - i0, hd, cols, 1.0f, ab, s,
				    v + off, c, 0.0f, out + off + (size_t)i0 * c, c);
			}
		}
}

/* ds = a * (da - rowsum(a * da)), in place over rows of len entries
 * of da (stride s); masked entries have a == 0 and come out 0. */
NN_INLINE void
dsoftmax_span(float *restrict d, const float *restrict p, float dot,
    size_t n)
{
	for (size_t j = 0; j < n; j++)
		d[j] = p[j] * (d[j] - dot);
}

NN_INLINE void
softmax_backward_rows(float *da, const float *a, int rows, int len, int s)
{
	for (int i = 0; i < rows; i++) {
		float *d = da + (size_t)i * s;
		const float *p = a + (size_t)i * s;
		float dot = vec_reduce(VEC_DOT, p, d, 0.0f, (size_t)len);
		int j = 0;
		for (; j + NN_LANES <= len; j += NN_LANES)
			dsoftmax_span(d + j, p + j, dot, NN_LANES);
		dsoftmax_span(d + j, p + j, dot, (size_t)(len - j));
	}
}

/* Causal: in blocks of rows as the forward pass, the saved probabilities
 * being zero beyond column i1-1 of every row of a block. */
/* The heads of *d += (or =, set) alpha op(a) x (the heads' [s, s] and
 * [s, hd] matrices, in bf16; ta: a transposed); then *d = NULL. 0, or -1
 * (x NULL: out of memory, or the product failed). */
NN_INLINE int
heads_acc(float **d, int set, int ta, float alpha, const uint16_t *a,
    const uint16_t *x, int b, int s, int nh, int hd)
{
	struct nn_bview h = heads_view(*d, b, s, nh, hd);

	if (!x || nn_bf16_bmm_heads(ta, s, alpha, a, x, set ? 0.0f : 1.0f,
	    &h, 0) < 0)
		return -1;
	*d = NULL;
	return 0;
}

/*
 * The backward pass as attention_forward_bf16, batched; each of dv, dq
 * and dk it has added (or written: set) is set to NULL, so that the
 * head-by-head path, after a -1, adds only the rest.
 */
NN_CLONES static int
attention_backward_bf16(float **dq, float **dk, float **dv,
    const float *dout, const float *att, const float *q, const float *k,
    const float *v, int b, int s, int nh, int hd, int set)
{
	int B = b * nh, rc = -1;
	float scale = 1.0f / sqrtf((float)hd);
	struct nn_bview hd_ = heads_view(dout, b, s, nh, hd);
	struct nn_bview ha = dense_view(att, B, s);
	struct nn_bview hv = heads_view(v, b, s, nh, hd);
	struct nn_bview hk = heads_view(k, b, s, nh, hd);
	struct nn_bview hq = heads_view(q, b, s, nh, hd);
	const uint16_t *D, *A, *X;
	uint16_t *DS;
	float *S;

	if (nn_bf16_begin() < 0)
		return -1;
	D = nn_bf16_pack(0, &hd_);
	if (!D)
		goto out;
	if (*dv && (!(A = nn_bf16_pack(1, &ha)) || heads_acc(dv, set, 1, 1.0f,
	    A, D, b, s, nh, hd) < 0))
		goto out;
	if (!*dq && !*dk) {
		rc = 0;
		goto out;
	}
	/* S = dout v^T, then the softmax's backward in place, rounded
	 * into A a row at a time */
	S = nn_bf16_ws(5, (size_t)B * s * s * sizeof(*S));
	DS = nn_bf16_ws(1, (size_t)B * s * s * sizeof(*DS));
	if (!S || !DS || !(X = nn_bf16_pack(2, &hv)) || nn_bf16_bmm(B, 0, 1,
	    s, s, hd, 1.0f, D, X, S) < 0)
		goto out;
	for (size_t r = 0; r < (size_t)B * s; r++) {
		softmax_backward_rows(S + r * s, att + r * s, 1, s, s);
		nn_bf16_round(DS + r * s, S + r * s, s);
	}
	if ((*dq && heads_acc(dq, set, 0, scale, DS, nn_bf16_pack(2, &hk),
	    b, s, nh, hd) < 0) || (*dk && heads_acc(dk, set, 1, scale, DS,
	    nn_bf16_pack(2, &hq), b, s, nh, hd) < 0))
		goto out;
	rc = 0;
out:
	nn_bf16_end();
	return rc;
}

/* nn_attention_backward; set: dq, dk, dv = rather than +=, which native
 * bf16 writes at once and the rest zeroes and adds (f32's bits). */
NN_CLONES static void
attention_backward(float *dq, float *dk, float *dv, float *scratch,
    const float *dout, const float *att, const float *q, const float *k,
    const float *v, int b, int s, int nh, int hd, int causal, int set)
{
	int c = nh * hd, step = att_step(causal, s);

	if (attention_backward_bf16(&dq, &dk, &dv, dout, att, q, k, v, b, s,
	    nh, hd, set) == 0)
		return;
	widen_qkv(q, k, v, b, s, nh, hd);
	float *left[3] = { dq, dk, dv };	/* what the batched path left */

	for (int i = 0; set && i < 3; i++)
		if (left[i])
			memset(left[i], 0, (size_t)b * s * c * sizeof(float));
	float scale = 1.0f / sqrtf((float)hd);

	for (int bi = 0; bi < b; bi++)
		for (int h = 0; h < nh; h++) {
			size_t off = (size_t)bi * s * c + (size_t)h * hd;
			const float *a = att + ((size_t)bi * nh + h) * s * s;
			for (int i0 = 0; i0 < s; i0 += step) {
				int i1 = i0 + step < s ? i0 + step : s;
				int n = i1 - i0, cols = causal ? i1 : s;
				const float *ab = a + (size_t)i0 * s;
				const float *db = dout + off + (size_t)i0 * c;
				if (dv)
					nn_gemm(1, 0, cols, hd, n, 1.0f, ab, s,
					    db, c, 1.0f, dv + off, c);
				if (!dq && !dk)
					continue;
				nn_gemm(0, 1, n, cols, hd, 1.0f, db, c,
				    v + off, c, 0.0f, scratch, s);
				softmax_backward_rows(scratch, ab, n, cols, s);
				if (dq)
					nn_gemm(0, 0, n, hd, cols, scale,
					    scratch, s, k + off, c, 1.0f,
					    dq + off + (size_t)i0 * c, c);
				if (dk)
					nn_gemm(1, 0, cols, hd, n, scale,
					    scratch, s, q + off + (size_t)i0 * c,
					    c, 1.0f, dk + off, c);
			}
		}
}

void
nn_attention_backward(float *dq, float *dk, float *dv, float *scratch,
    const float *dout, const float *att, const float *q, const float *k,
    const float *v, int b, int s, int nh, int hd, int causal)
{
	attention_backward(dq, dk, dv, scratch, dout, att, q, k, v, b, s, nh,
	    hd, causal, 0);
}

void
nn_attention_backward_to(float *dq, float *dk, float *dv, float *scratch,
    const float *dout, const float *att, const float *q, const float *k,
    const float *v, int b, int s, int nh, int hd, int causal)
{
	attention_backward(dq, dk, dv, scratch, dout, att, q, k, v, b, s, nh,
	    hd, causal, 1);
}

NN_CLONES void
nn_embedding_forward(float *out, const int32_t *tok, const float *wte,
    const float *wpe, int b, int s, int d)
{
	for (int bi = 0; bi < b; bi++)
		for (int t = 0; t < s; t++) {
			float *o = out + ((size_t)bi * s + t) * d;
			const float *e = wte + (size_t)tok[(size_t)bi * s + t] * d;
			if (!wpe) {
				for (int i = 0; i < d; i++)
					o[i] = e[i] + 0.0f;
				continue;
			}
			/* e + wpe, in vec_add's spans (the plain loop, its
			 * operands maybe aliased, ran unvectorized) */
			memcpy(o, e, (size_t)d * sizeof(*o));
			vec_add(o, wpe + (size_t)t * d, (size_t)d);
		}
}

NN_CLONES void
nn_embedding_backward(float *dwte, float *dwpe, const float *dout,
    const int32_t *tok, int b, int s, int d)
{
	for (int bi = 0; bi < b; bi++)
		for (int t = 0; t < s; t++) {
			const float *g = dout + ((size_t)bi * s + t) * d;
			if (dwte)
				vec_add(dwte + (size_t)tok[(size_t)bi * s + t] *
				    d, g, (size_t)d);
			if (dwpe)
				vec_add(dwpe + (size_t)t * d, g, (size_t)d);
		}
}

NN_CLONES double
nn_xent_forward(float *probs, const float *logits, const int32_t *target,
    int n, int v)
{
	double loss = 0.0;

	for (int r = 0; r < n; r++) {
		const float *l = logits + (size_t)r * v;
		float *p = probs + (size_t)r * v;
		float mx = vec_max(l, (size_t)v), lt = l[target[r]];
		if (p != l)
			memcpy(p, l, (size_t)v * sizeof(float));
		float sum = exp_shifted_sum(p, mx, (size_t)v);
		vec_scale(p, 1.0f / sum, (size_t)v);
		loss += log((double)sum) - ((double)lt - mx);
	}
	return loss;
}

NN_CLONES void
nn_xent_backward(float *dlogits, const float *probs, const int32_t *target,
    float scale, int n, int v)
{
	for (int r = 0; r < n; r++) {
		float *d = dlogits + (size_t)r * v;
		vec_axpy(d, scale, probs + (size_t)r * v, (size_t)v);
		d[target[r]] -= scale;
	}
}

double
nn_sqerr_forward(const float *pred, const float *target, size_t count)
{
	double sum = 0.0;

	for (size_t i = 0; i < count; i++) {
		double e = (double)pred[i] - target[i];
		sum += e * e;
	}
	return sum;
}

void
nn_sqerr_backward(float *dpred, const float *pred, const float *target,
    float scale, size_t count)
{
	for (size_t i = 0; i < count; i++)
		dpred[i] += scale * 2.0f * (pred[i] - target[i]);
}
