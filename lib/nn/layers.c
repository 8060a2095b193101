/* layers: forward and backward passes of the f32 building blocks. */
#include <cblas.h>
#include <math.h>
#include <string.h>

#include "nn/nn.h"

void
nn_set_threads(int n)
{
	openblas_set_num_threads(n < 1 ? 1 : n);
}

static inline void
add_span(float *restrict dst, const float *restrict src, size_t n)
{
	for (size_t i = 0; i < n; i++)
		dst[i] += src[i];
}

/* Fixed-length spans: gcc -O2 vectorizes only loops without a scalar
 * remainder, so the remainder gets its own call (see NN_SPAN below). */
void
nn_add(float *dst, const float *src, size_t count)
{
	size_t i = 0;

	for (; i + 8 <= count; i += 8)
		add_span(dst + i, src + i, 8);
	add_span(dst + i, src + i, count - i);
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
	if (b)
		for (int r = 0; r < n; r++)
			memcpy(out + (size_t)r * o, b, (size_t)o * sizeof(float));
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, o, in, 1.0f,
	    inp, in, w, in, b ? 1.0f : 0.0f, out, o);
}

void
nn_linear_backward(float *dinp, float *dw, float *db, const float *dout,
    const float *inp, const float *w, int n, int in, int o)
{
	if (n <= 0 || o <= 0)
		return;
	if (db)
		for (int r = 0; r < n; r++)
			nn_add(db, dout + (size_t)r * o, (size_t)o);
	if (in <= 0)
		return;
	if (dinp)
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, in, o,
		    1.0f, dout, o, w, in, 1.0f, dinp, in);
	if (dw)
		cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, o, in, n,
		    1.0f, dout, o, inp, in, 1.0f, dw, in);
}

#define NN_INV_SQRT2 0.70710678118654752440f
#define NN_INV_SQRT2PI 0.39894228040143267794f

/*
 * e^x to about 2 ulp, 0 below about -87.3 (x <= 88, above -1e9): Cody-Waite
 * reduction x = n ln 2 + r with n rounded by the 1.5*2^23 trick, a degree-7
 * Taylor polynomial for e^r, and 2^n from exponent bits. Branch-free, so
 * the elementwise loops vectorize; libm's expf and erff are a call per
 * element and dominated the small models' profiles.
 */
static inline float
fast_exp(float x)
{
	float fn = x * 1.44269504088896341f + 12582912.0f - 12582912.0f;
	int32_t n = (int32_t)fn;
	float r = x - fn * 0.693145751953125f - fn * 1.42860682030941723e-6f;
	float p = 1.0f + r * (1.0f + r * (0.5f + r * (1.0f / 6 + r * (1.0f / 24 +
	    r * (1.0f / 120 + r * (1.0f / 720 + r * (1.0f / 5040)))))));
	/* the exponent field, zero (flush) when 2^n is below the normals */
	int32_t bits = (int32_t)((uint32_t)(n + 127) << 23) & ~((n + 126) >> 31);
	float scale;

	memcpy(&scale, &bits, sizeof(scale));
	return p * scale;
}

/* a < 0 ? neg : pos, by the sign bit rather than a branch. */
static inline float
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
static inline float
normal_cdf(float x)
{
	float z = fabsf(x) * NN_INV_SQRT2;
	float t = 1.0f / (1.0f + 0.5f * z);
	float p = -1.26551223f + t * (1.00002368f + t * (0.37409196f +
	    t * (0.09678418f + t * (-0.18628806f + t * (0.27886807f +
	    t * (-1.13520398f + t * (1.48851587f + t * (-0.82215223f +
	    t * 0.17087277f))))))));
	float half_erfc = 0.5f * t * fast_exp(p - z * z);

	return select_sign(x, half_erfc, 1.0f - half_erfc);
}

/*
 * The elementwise loops run over spans: called with a constant length of
 * NN_SPAN the span's loop is inlined with a fixed trip count, which gcc -O2
 * (very cheap cost model) vectorizes; a final call covers the remainder.
 */
#define NN_SPAN 8

/* GELU is the costliest elementwise pass: gcc also builds an AVX2 copy,
 * picked at load time (same operations, so the same bits). clang 14's
 * target_clones drops the plain symbol, so it is left to gcc. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define NN_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define NN_CLONES
#endif

static inline void
gelu_span(float *restrict out, const float *restrict inp, size_t n)
{
	for (size_t i = 0; i < n; i++)
		out[i] = inp[i] * normal_cdf(inp[i]);
}

NN_CLONES void
nn_gelu_forward(float *out, const float *inp, size_t count)
{
	size_t i = 0;

	for (; i + NN_SPAN <= count; i += NN_SPAN)
		gelu_span(out + i, inp + i, NN_SPAN);
	gelu_span(out + i, inp + i, count - i);
}

/* d/dx x Phi(x) = Phi(x) + x phi(x). */
static inline void
dgelu_span(float *restrict dinp, const float *restrict inp,
    const float *restrict dout, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		float x = inp[i];
		float pdf = NN_INV_SQRT2PI * fast_exp(-0.5f * x * x);
		dinp[i] += (normal_cdf(x) + x * pdf) * dout[i];
	}
}

NN_CLONES void
nn_gelu_backward(float *dinp, const float *inp, const float *dout,
    size_t count)
{
	size_t i = 0;

	for (; i + NN_SPAN <= count; i += NN_SPAN)
		dgelu_span(dinp + i, inp + i, dout + i, NN_SPAN);
	dgelu_span(dinp + i, inp + i, dout + i, count - i);
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
nn_act_backward(enum nn_act act, float *dinp, const float *inp,
    const float *dout, size_t count)
{
	if (act == NN_ACT_RELU)
		nn_relu_backward(dinp, inp, dout, count);
	else
		nn_gelu_backward(dinp, inp, dout, count);
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

/* a[i] = e^(a[i] - shift) */
static inline void
exp_span(float *restrict a, float shift, size_t n)
{
	for (size_t i = 0; i < n; i++)
		a[i] = fast_exp(a[i] - shift);
}

static void
exp_shifted(float *a, float shift, size_t count)
{
	size_t i = 0;

	for (; i + NN_SPAN <= count; i += NN_SPAN)
		exp_span(a + i, shift, NN_SPAN);
	exp_span(a + i, shift, count - i);
}

void
nn_layernorm_forward(float *out, float *mean, float *rstd,
    const float *inp, const float *w, const float *b, int n, int c)
{
	for (int r = 0; r < n; r++) {
		const float *x = inp + (size_t)r * c;
		float *y = out + (size_t)r * c;
		float m = 0.0f, v = 0.0f;
		for (int i = 0; i < c; i++)
			m += x[i];
		m /= c;
		for (int i = 0; i < c; i++)
			v += (x[i] - m) * (x[i] - m);
		v /= c;
		float s = 1.0f / sqrtf(v + NN_LN_EPS);
		for (int i = 0; i < c; i++) {
			float t = (x[i] - m) * s;
			y[i] = t * (w ? w[i] : 1.0f) + (b ? b[i] : 0.0f);
		}
		mean[r] = m;
		rstd[r] = s;
	}
}

/* With xhat = (x - mean) * rstd and g = w * dout:
 * dx = rstd * (g - mean(g) - xhat * mean(g * xhat)). */
void
nn_layernorm_backward(float *dinp, float *dw, float *db,
    const float *dout, const float *inp, const float *w, const float *mean,
    const float *rstd, int n, int c)
{
	for (int r = 0; r < n; r++) {
		const float *x = inp + (size_t)r * c, *dy = dout + (size_t)r * c;
		float m = mean[r], s = rstd[r], gm = 0.0f, gxm = 0.0f;
		for (int i = 0; i < c; i++) {
			float g = (w ? w[i] : 1.0f) * dy[i];
			gm += g;
			gxm += g * (x[i] - m) * s;
		}
		gm /= c;
		gxm /= c;
		for (int i = 0; i < c; i++) {
			float xh = (x[i] - m) * s;
			float g = (w ? w[i] : 1.0f) * dy[i];
			if (db)
				db[i] += dy[i];
			if (dw)
				dw[i] += xh * dy[i];
			if (dinp)
				dinp[(size_t)r * c + i] += s * (g - gm - xh * gxm);
		}
	}
}

/* Row-wise softmax in place over the first len entries of a row of s;
 * the masked tail (causal) is set to zero. */
static void
softmax_row(float *a, int len, int s)
{
	float mx = a[0], sum = 0.0f;
	for (int j = 1; j < len; j++)
		if (a[j] > mx)
			mx = a[j];
	exp_shifted(a, mx, (size_t)len);
	for (int j = 0; j < len; j++)
		sum += a[j];
	float inv = 1.0f / sum;
	for (int j = 0; j < len; j++)
		a[j] *= inv;
	for (int j = len; j < s; j++)
		a[j] = 0.0f;
}

/* Causal attention in blocks of rows: rows i0..i1-1 attend to columns
 * 0..i1-1 only, so the products skip most of the masked upper triangle
 * (about 5/8 of the full work at seq 128) instead of computing it and
 * throwing it away. Bigger blocks mean fewer, larger BLAS calls. */
#define NN_ATT_ROWS 32

void
nn_attention_forward(float *out, float *att, const float *q,
    const float *k, const float *v, int b, int s, int nh, int hd, int causal)
{
	int c = nh * hd, step = causal ? NN_ATT_ROWS : s;
	float scale = 1.0f / sqrtf((float)hd);

	for (int bi = 0; bi < b; bi++)
		for (int h = 0; h < nh; h++) {
			size_t off = (size_t)bi * s * c + (size_t)h * hd;
			float *a = att + ((size_t)bi * nh + h) * s * s;
			for (int i0 = 0; i0 < s; i0 += step) {
				int i1 = i0 + step < s ? i0 + step : s;
				int cols = causal ? i1 : s;
				float *ab = a + (size_t)i0 * s;
				cblas_sgemm(CblasRowMajor, CblasNoTrans,
				    CblasTrans, i1 - i0, cols, hd, scale,
				    q + off + (size_t)i0 * c, c, k + off, c, 0.0f,
				    ab, s);
				for (int i = i0; i < i1; i++)
					softmax_row(a + (size_t)i * s,
					    causal ? i + 1 : s, s);
				cblas_sgemm(CblasRowMajor, CblasNoTrans,
				    CblasNoTrans, i1 - i0, hd, cols, 1.0f, ab, s,
				    v + off, c, 0.0f, out + off + (size_t)i0 * c, c);
			}
		}
}

/* ds = a * (da - rowsum(a * da)), in place over rows of len entries
 * of da (stride s); masked entries have a == 0 and come out 0. */
static void
softmax_backward_rows(float *da, const float *a, int rows, int len, int s)
{
	for (int i = 0; i < rows; i++) {
		float *d = da + (size_t)i * s;
		const float *p = a + (size_t)i * s;
		float dot = 0.0f;
		for (int j = 0; j < len; j++)
			dot += p[j] * d[j];
		for (int j = 0; j < len; j++)
			d[j] = p[j] * (d[j] - dot);
	}
}

/* Causal: in blocks of rows as the forward pass, the saved probabilities
 * being zero beyond column i1-1 of every row of a block. */
void
nn_attention_backward(float *dq, float *dk, float *dv, float *scratch,
    const float *dout, const float *att, const float *q, const float *k,
    const float *v, int b, int s, int nh, int hd, int causal)
{
	int c = nh * hd, step = causal ? NN_ATT_ROWS : s;
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
					cblas_sgemm(CblasRowMajor, CblasTrans,
					    CblasNoTrans, cols, hd, n, 1.0f, ab, s,
					    db, c, 1.0f, dv + off, c);
				if (!dq && !dk)
					continue;
				cblas_sgemm(CblasRowMajor, CblasNoTrans,
				    CblasTrans, n, cols, hd, 1.0f, db, c, v + off,
				    c, 0.0f, scratch, s);
				softmax_backward_rows(scratch, ab, n, cols, s);
				if (dq)
					cblas_sgemm(CblasRowMajor, CblasNoTrans,
					    CblasNoTrans, n, hd, cols, scale, scratch,
					    s, k + off, c, 1.0f,
					    dq + off + (size_t)i0 * c, c);
				if (dk)
					cblas_sgemm(CblasRowMajor, CblasTrans,
					    CblasNoTrans, cols, hd, n, scale, scratch,
					    s, q + off + (size_t)i0 * c, c, 1.0f,
					    dk + off, c);
			}
		}
}

void
nn_embedding_forward(float *out, const int32_t *tok, const float *wte,
    const float *wpe, int b, int s, int d)
{
	for (int bi = 0; bi < b; bi++)
		for (int t = 0; t < s; t++) {
			float *o = out + ((size_t)bi * s + t) * d;
			const float *e = wte + (size_t)tok[(size_t)bi * s + t] * d;
			for (int i = 0; i < d; i++)
				o[i] = e[i] + (wpe ? wpe[(size_t)t * d + i] : 0.0f);
		}
}

void
nn_embedding_backward(float *dwte, float *dwpe, const float *dout,
    const int32_t *tok, int b, int s, int d)
{
	for (int bi = 0; bi < b; bi++)
		for (int t = 0; t < s; t++) {
			const float *g = dout + ((size_t)bi * s + t) * d;
			if (dwte) {
				float *e = dwte + (size_t)tok[(size_t)bi * s + t] * d;
				for (int i = 0; i < d; i++)
					e[i] += g[i];
			}
			if (dwpe)
				for (int i = 0; i < d; i++)
					dwpe[(size_t)t * d + i] += g[i];
		}
}

double
nn_xent_forward(float *probs, const float *logits, const int32_t *target,
    int n, int v)
{
	double loss = 0.0;

	for (int r = 0; r < n; r++) {
		const float *l = logits + (size_t)r * v;
		float *p = probs + (size_t)r * v;
		float mx = l[0], lt = l[target[r]], sum = 0.0f;
		for (int j = 1; j < v; j++)
			if (l[j] > mx)
				mx = l[j];
		if (p != l)
			memcpy(p, l, (size_t)v * sizeof(float));
		exp_shifted(p, mx, (size_t)v);
		for (int j = 0; j < v; j++)
			sum += p[j];
		float inv = 1.0f / sum;
		for (int j = 0; j < v; j++)
			p[j] *= inv;
		loss += log((double)sum) - ((double)lt - mx);
	}
	return loss;
}

void
nn_xent_backward(float *dlogits, const float *probs, const int32_t *target,
    float scale, int n, int v)
{
	for (int r = 0; r < n; r++) {
		float *d = dlogits + (size_t)r * v;
		const float *p = probs + (size_t)r * v;
		for (int j = 0; j < v; j++)
			d[j] += scale * p[j];
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
