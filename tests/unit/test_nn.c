/* test_nn: every layer's forward against a direct double-precision
 * computation or closed-form values, and its backward against central
 * differences of sum(out * r) for a fixed random r. */
#include <string.h>

#include "nn/nn.h"
#include "nn_check.h"

/* A layer under test: inputs and parameters, output, random projection. */
struct lt {
	int kind, n, in, o, b, s, nh, hd, causal, v;
	float *x, *w, *bias, *y, *r, *mean, *rstd, *att;
	int32_t *tok;
};

enum { LINEAR, GELU, LAYERNORM, ATTN, XENT };

static double
dot_r(const float *y, const float *r, size_t n)
{
	double s = 0.0;

	for (size_t i = 0; i < n; i++)
		s += (double)y[i] * r[i];
	return s;
}

/* For ATTN, x holds q, k, v one after the other. */
static double
lt_forward(void *ctx)
{
	struct lt *t = ctx;
	size_t nd = (size_t)t->b * t->s * t->nh * t->hd;

	switch (t->kind) {
	case LINEAR:
		nn_linear_forward(t->y, t->x, t->w, t->bias, t->n, t->in, t->o);
		return dot_r(t->y, t->r, (size_t)t->n * t->o);
	case GELU:
		nn_gelu_forward(t->y, t->x, (size_t)t->n);
		return dot_r(t->y, t->r, (size_t)t->n);
	case LAYERNORM:
		nn_layernorm_forward(t->y, t->mean, t->rstd, t->x, t->w, t->bias,
		    t->n, t->in);
		return dot_r(t->y, t->r, (size_t)t->n * t->in);
	case ATTN:
		nn_attention_forward(t->y, t->att, t->x, t->x + nd, t->x + 2 * nd,
		    t->b, t->s, t->nh, t->hd, t->causal);
		return dot_r(t->y, t->r, nd);
	default:
		return nn_xent_forward(t->y, t->x, t->tok, t->n, t->v);
	}
}

static void
test_linear(int with_bias)
{
	struct lt t = { .kind = LINEAR, .n = 5, .in = 7, .o = 4 };
	float *dx, *dw, *db;
	char what[80];
	int ok = 1;

	t.x = check_fill(t.n * t.in, 1.0f);
	t.w = check_fill(t.o * t.in, 0.5f);
	t.bias = with_bias ? check_fill(t.o, 0.5f) : NULL;
	t.y = calloc(t.n * t.o, sizeof(float));
	t.r = check_fill(t.n * t.o, 1.0f);
	dx = calloc(t.n * t.in, sizeof(float));
	dw = calloc(t.o * t.in, sizeof(float));
	db = calloc(t.o, sizeof(float));

	lt_forward(&t);
	for (int i = 0; i < t.n; i++)
		for (int j = 0; j < t.o; j++) {
			double s = with_bias ? t.bias[j] : 0.0;
			for (int k = 0; k < t.in; k++)
				s += (double)t.x[i * t.in + k] * t.w[j * t.in + k];
			ok &= fabs(s - t.y[i * t.o + j]) < 1e-5;
		}
	snprintf(what, sizeof(what), "linear%s forward = direct sum",
	    with_bias ? "" : " (no bias)");
	UNIT_OK(ok, what);

	nn_linear_backward(dx, dw, with_bias ? db : NULL, t.r, t.x, t.w, t.n,
	    t.in, t.o);
	check_grad("linear d input", lt_forward, &t, t.x, dx, t.n * t.in, 0,
	    1e-2f, 1e-3, 2e-4);
	check_grad("linear d weight", lt_forward, &t, t.w, dw, t.o * t.in, 0,
	    1e-2f, 1e-3, 2e-4);
	if (with_bias)
		check_grad("linear d bias", lt_forward, &t, t.bias, db, t.o, 0,
		    1e-2f, 1e-3, 2e-4);

	/* a second backward adds the same again (micro-batch accumulation) */
	float w0 = dw[3], x0 = dx[2];
	nn_linear_backward(dx, dw, NULL, t.r, t.x, t.w, t.n, t.in, t.o);
	UNIT_CLOSE(dw[3], 2 * w0, 1e-6, 1e-7, "linear backward accumulates "
	    "into weight grads");
	UNIT_CLOSE(dx[2], 2 * x0, 1e-6, 1e-7, "linear backward accumulates "
	    "into input grads");
	free(t.x), free(t.w), free(t.bias), free(t.y), free(t.r);
	free(dx), free(dw), free(db);
}

static void
test_gelu(void)
{
	/* erf GELU at closed-form points: x * Phi(x) */
	float x[4] = { 0.0f, 1.0f, -1.0f, 2.0f }, y[4];
	double want[4] = { 0.0, 0.8413447460685429, -0.15865525393145707,
		1.9544997361036416 };
	int ok = 1;

	nn_gelu_forward(y, x, 4);
	for (int i = 0; i < 4; i++)
		ok &= fabs(y[i] - want[i]) < 1e-6;
	UNIT_OK(ok, "gelu forward is exact (erf) GELU");

	/* the whole range against erf in double, within a few float ulp */
	double worst = 0;
	for (int i = -12000; i <= 12000; i++) {
		float xi = i * 1e-3f, yi, d0 = 0, d1 = 1;
		double want = 0.5 * xi * (1 + erf(xi / sqrt(2.0)));
		double dwant = 0.5 * (1 + erf(xi / sqrt(2.0))) +
		    xi * exp(-0.5 * xi * xi) / sqrt(2 * M_PI);
		nn_gelu_forward(&yi, &xi, 1);
		nn_gelu_backward(&d0, &xi, &d1, 1);
		/* relative, but absolute near zeros (tails, gelu' at -0.75) */
		worst = fmax(worst, fabs(yi - want) / (fabs(want) + 0.05));
		worst = fmax(worst, fabs(d0 - dwant) / (fabs(dwant) + 0.05));
	}
	printf("# gelu worst error / (|value| + 0.05) over [-12, 12]: %.3g\n",
	    worst);
	UNIT_OK(worst < 2e-6, "gelu and its derivative within 2e-6 of the "
	    "double erf form over [-12, 12]");
	double ew = 0, xs[3] = { 0 }, ls[3] = { 0 };
	int32_t t0 = 0;
	for (int i = -8000; i <= 8000; i++) {
		/* softmax over {x, 0}: the exp behind it, via cross-entropy */
		float lg[2] = { i * 1e-2f, 0.0f }, pr[2];
		nn_xent_forward(pr, lg, &t0, 1, 2);
		double want = 1 / (1 + exp(-(double)lg[0]));
		xs[0] = fabs(pr[0] - want) / want;
		if (xs[0] > ew)
			ew = xs[0], ls[0] = lg[0];
	}
	printf("# softmax worst relative error %.3g at %g\n", ew, ls[0]);
	UNIT_OK(ew < 1e-6, "softmax within 1e-6 relative over logits "
	    "[-80, 80]");

	struct lt t = { .kind = GELU, .n = 64 };
	t.x = check_fill(t.n, 4.0f);
	t.y = calloc(t.n, sizeof(float));
	t.r = check_fill(t.n, 1.0f);
	float *dx = calloc(t.n, sizeof(float));
	nn_gelu_backward(dx, t.x, t.r, t.n);
	check_grad("gelu backward", lt_forward, &t, t.x, dx, t.n, 0, 1e-2f,
	    1e-3, 2e-4);
	free(t.x), free(t.y), free(t.r), free(dx);

	/* the f32 backward that writes (no zeroing pass) gives the bits of
	 * adding to zeros: a -0 gradient (dout -0, or x = -0) comes out +0 */
	float gx[67], gd[67], gto[67], gadd[67];
	for (int i = 0; i < 67; i++) {
		gx[i] = i % 5 == 0 ? -0.0f : (i - 33) * 0.37f;
		gd[i] = i % 3 == 0 ? -0.0f : 1.0f - i * 0.05f;
		gto[i] = NAN;
		gadd[i] = 0.0f;
	}
	nn_act_backward_to(NN_ACT_GELU, gto, gx, gd, 67);
	nn_act_backward(NN_ACT_GELU, gadd, gx, gd, 67);
	ok = !memcmp(gto, gadd, sizeof(gto)) && !signbit(gto[0]) &&
	    !signbit(gto[3]);
	UNIT_OK(ok, "gelu backward into a buffer is bit for bit zeros plus "
	    "the accumulating backward (-0 as +0)");
}

static void
test_layernorm(void)
{
	struct lt t = { .kind = LAYERNORM, .n = 4, .in = 8 };
	int ok = 1;

	t.x = check_fill(t.n * t.in, 2.0f);
	t.y = calloc(t.n * t.in, sizeof(float));
	t.mean = calloc(t.n, sizeof(float));
	t.rstd = calloc(t.n, sizeof(float));
	t.r = check_fill(t.n * t.in, 1.0f);

	/* without affine parameters every row has mean 0, biased var 1 */
	lt_forward(&t);
	for (int i = 0; i < t.n; i++) {
		double m = 0, v = 0, xm = 0, xv = 0;
		for (int j = 0; j < t.in; j++)
			m += t.y[i * t.in + j], xm += t.x[i * t.in + j];
		m /= t.in, xm /= t.in;
		for (int j = 0; j < t.in; j++) {
			v += pow(t.y[i * t.in + j] - m, 2);
			xv += pow(t.x[i * t.in + j] - xm, 2);
		}
		v /= t.in, xv /= t.in;
		ok &= fabs(m) < 1e-6 && fabs(v - xv / (xv + 1e-5)) < 1e-5;
	}
	UNIT_OK(ok, "layernorm rows: mean 0, variance var/(var+eps)");

	t.w = check_fill(t.in, 1.0f);
	t.bias = check_fill(t.in, 1.0f);
	float *dx = calloc(t.n * t.in, sizeof(float));
	float *dw = calloc(t.in, sizeof(float)), *db = calloc(t.in, sizeof(float));
	lt_forward(&t);
	nn_layernorm_backward(dx, dw, db, t.r, t.x, t.w, t.mean, t.rstd, t.n,
	    t.in);
	check_grad("layernorm d input", lt_forward, &t, t.x, dx, t.n * t.in, 0,
	    1e-2f, 1e-3, 2e-4);
	check_grad("layernorm d weight", lt_forward, &t, t.w, dw, t.in, 0,
	    1e-2f, 1e-3, 2e-4);
	check_grad("layernorm d bias", lt_forward, &t, t.bias, db, t.in, 0,
	    1e-2f, 1e-3, 2e-4);
	free(t.x), free(t.y), free(t.mean), free(t.rstd), free(t.r);
	free(t.w), free(t.bias), free(dx), free(dw), free(db);
}

/* Direct attention in double for one (batch, head, row). */
static void
attn_ref(double *out, const struct lt *t, int b, int h, int i)
{
	int c = t->nh * t->hd, len = t->causal ? i + 1 : t->s;
	size_t nd = (size_t)t->b * t->s * c;
	const float *q = t->x, *k = t->x + nd, *v = t->x + 2 * nd;
	double sc[64], mx = -1e300, sum = 0;

	for (int j = 0; j < len; j++) {
		double d = 0;
		for (int e = 0; e < t->hd; e++)
			d += (double)q[((size_t)b * t->s + i) * c + h * t->hd + e] *
			    k[((size_t)b * t->s + j) * c + h * t->hd + e];
		sc[j] = d / sqrt(t->hd);
		mx = sc[j] > mx ? sc[j] : mx;
	}
	for (int j = 0; j < len; j++)
		sum += sc[j] = exp(sc[j] - mx);
	for (int e = 0; e < t->hd; e++) {
		out[e] = 0;
		for (int j = 0; j < len; j++)
			out[e] += sc[j] / sum *
			    v[((size_t)b * t->s + j) * c + h * t->hd + e];
	}
}

static void
test_attention(int causal)
{
	struct lt t = { .kind = ATTN, .b = 2, .s = 5, .nh = 3, .hd = 4,
		.causal = causal };
	int c = t.nh * t.hd, ok = 1;
	size_t nd = (size_t)t.b * t.s * c;
	char what[80];

	t.x = check_fill(3 * nd, 1.5f);
	t.y = calloc(nd, sizeof(float));
	t.att = calloc((size_t)t.b * t.nh * t.s * t.s, sizeof(float));
	t.r = check_fill(nd, 1.0f);
	lt_forward(&t);
	for (int b = 0; b < t.b; b++)
		for (int h = 0; h < t.nh; h++)
			for (int i = 0; i < t.s; i++) {
				double ref[16];
				attn_ref(ref, &t, b, h, i);
				for (int e = 0; e < t.hd; e++)
					ok &= fabs(ref[e] - t.y[((size_t)b * t.s + i) *
					    c + h * t.hd + e]) < 1e-5;
			}
	snprintf(what, sizeof(what), "attention%s forward = direct softmax "
	    "in double", causal ? " (causal)" : "");
	UNIT_OK(ok, what);

	float *dqkv = calloc(3 * nd, sizeof(float));
	float *scratch = calloc((size_t)t.s * t.s, sizeof(float));
	nn_attention_backward(dqkv, dqkv + nd, dqkv + 2 * nd, scratch, t.r,
	    t.att, t.x, t.x + nd, t.x + 2 * nd, t.b, t.s, t.nh, t.hd, causal);
	snprintf(what, sizeof(what), "attention%s d q", causal ? " (causal)" : "");
	check_grad(what, lt_forward, &t, t.x, dqkv, nd, 0, 1e-2f, 1e-3, 2e-4);
	snprintf(what, sizeof(what), "attention%s d k", causal ? " (causal)" : "");
	check_grad(what, lt_forward, &t, t.x + nd, dqkv + nd, nd, 0, 1e-2f,
	    1e-3, 2e-4);
	snprintf(what, sizeof(what), "attention%s d v", causal ? " (causal)" : "");
	check_grad(what, lt_forward, &t, t.x + 2 * nd, dqkv + 2 * nd, nd, 0,
	    1e-2f, 1e-3, 2e-4);
	free(t.x), free(t.y), free(t.att), free(t.r), free(dqkv), free(scratch);
}

static void
test_embedding(void)
{
	int b = 2, s = 3, d = 2, ok = 1;
	int32_t tok[6] = { 1, 0, 1, 2, 2, 1 };
	float wte[6] = { 1, 2, 10, 20, 100, 200 }, wpe[6] = { .1f, .2f, .3f,
		.4f, .5f, .6f };
	float out[12], dwte[6] = { 0 }, dwpe[6] = { 0 }, dout[12];

	nn_embedding_forward(out, tok, wte, wpe, b, s, d);
	for (int i = 0; i < b * s; i++)
		for (int j = 0; j < d; j++)
			ok &= out[i * d + j] == wte[tok[i] * d + j] +
			    wpe[(i % s) * d + j];
	UNIT_OK(ok, "embedding forward: token row plus position row");
	for (int i = 0; i < 12; i++)
		dout[i] = (float)(i + 1);
	nn_embedding_backward(dwte, dwpe, dout, tok, b, s, d);
	/* token 1 at rows 0, 2, 5; token 0 at row 1; token 2 at rows 3, 4 */
	float want_te[6] = { 3, 4, 1 + 5 + 11, 2 + 6 + 12, 7 + 9, 8 + 10 };
	float want_pe[6] = { 1 + 7, 2 + 8, 3 + 9, 4 + 10, 5 + 11, 6 + 12 };
	ok = !memcmp(dwte, want_te, sizeof(want_te)) &&
	    !memcmp(dwpe, want_pe, sizeof(want_pe));
	UNIT_OK(ok, "embedding backward: sums per token and per position");
}

static void
test_xent(void)
{
	struct lt t = { .kind = XENT, .n = 6, .v = 9 };
	int32_t tok[6] = { 0, 8, 3, 3, 5, 1 };
	double want = 0;

	t.tok = tok;
	t.x = check_fill(t.n * t.v, 3.0f);
	t.y = calloc(t.n * t.v, sizeof(float));
	for (int i = 0; i < t.n; i++) {
		double sum = 0;
		for (int j = 0; j < t.v; j++)
			sum += exp(t.x[i * t.v + j]);
		want += log(sum) - t.x[i * t.v + tok[i]];
	}
	UNIT_CLOSE(lt_forward(&t), want, 1e-6, 1e-6, "cross-entropy sum = "
	    "direct log-sum-exp");
	float *dl = calloc(t.n * t.v, sizeof(float));
	nn_xent_backward(dl, t.y, tok, 1.0f, t.n, t.v);
	check_grad("cross-entropy d logits", lt_forward, &t, t.x, dl, t.n * t.v,
	    0, 1e-2f, 1e-3, 2e-4);

	/* uniform logits: loss ln V per row, in place (probs aliasing logits) */
	for (int i = 0; i < t.n * t.v; i++)
		t.x[i] = 0.25f;
	UNIT_CLOSE(nn_xent_forward(t.x, t.x, tok, t.n, t.v), t.n * log(9.0),
	    1e-6, 1e-6, "cross-entropy of uniform logits is n ln V (in place)");
	UNIT_CLOSE(t.x[4], 1.0 / 9, 1e-6, 0, "in-place probabilities");
	free(t.x), free(t.y), free(dl);
}

static void
test_sqerr(void)
{
	float p[3] = { 1, 2, 3 }, y[3] = { 0, 4, 3.5f }, d[3] = { 1, 1, 1 };

	UNIT_CLOSE(nn_sqerr_forward(p, y, 3), 1 + 4 + 0.25, 1e-12, 0,
	    "squared error sum");
	nn_sqerr_backward(d, p, y, 0.5f, 3);
	UNIT_OK(d[0] == 2.0f && d[1] == -1.0f && d[2] == 0.5f,
	    "squared error backward: += scale * 2 (p - y)");
}

/* Random block weights (all sixteen tensors) in one buffer. */
static float *
block_weights(struct nn_block_w *w, int d, int f, size_t *count)
{
	size_t sz[16] = { d, d, d * d, d, d * d, d, d * d, d, d * d, d, d, d,
	    f * d, f, d * f, d };
	float **p = &w->ln1_w, *buf;
	size_t n = 0;

	for (int i = 0; i < 16; i++)
		n += sz[i];
	buf = check_fill(n, 0.5f);
	for (int i = 0, off = 0; i < 16; off += (int)sz[i], i++)
		p[i] = buf + off;
	*count = n;
	return buf;
}

/* The block's backward split in two adds the bits the whole one adds:
 * input gradients and every weight gradient, onto nonzero sums. */
static void
test_block_split(int causal)
{
	int b = 2, s = 5, d = 8, nh = 2, f = 12;
	struct nn_block_shape sh = nn_block_serial(b, s, d, nh, f, causal);
	struct nn_block_w w, g1, g2;
	struct nn_block_acts a;
	struct nn_block_wsave sv;
	size_t nd = (size_t)b * s * d, nw, ng;
	float *wb = block_weights(&w, d, f, &nw);
	float *gb1 = block_weights(&g1, d, f, &ng), *gb2 = malloc(ng * 4);
	float *x = check_fill(nd, 1), *dy = check_fill(nd, 1), *y = malloc(nd * 4);
	float *acts = malloc(nn_block_acts_size(&sh) * 4);
	float *scr = malloc(nn_block_scratch_size(&sh) * 4);
	float *save = malloc(nn_block_wsave_size(&sh) * 4);
	float *dx1 = check_fill(nd, 1), *dx2 = malloc(nd * 4);
	float *g0 = malloc(ng * 4);
	char what[120];

	float **p1 = &g1.ln1_w, **p2 = &g2.ln1_w;

	/* g2: the same sums as g1, in gb2 */
	for (int i = 0; i < 16; i++)
		p2[i] = gb2 + (p1[i] - gb1);
	memcpy(gb2, gb1, ng * 4);
	memcpy(g0, gb1, ng * 4);
	memcpy(dx2, dx1, nd * 4);
	nn_block_acts_bind(&a, acts, &sh);
	nn_block_forward(y, &a, &w, x, &sh, NULL);
	nn_block_backward(dx1, &g1, scr, dy, &a, &w, x, &sh, NULL);
	nn_block_wsave_bind(&sv, save, &sh);
	nn_block_backward_input(dx2, &sv, scr, dy, &a, &w, x, &sh, NULL);
	snprintf(what, sizeof(what), "block (causal %d): input part's dx "
	    "has the whole backward's bits", causal);
	UNIT_OK(memcmp(dx1, dx2, nd * 4) == 0, what);
	snprintf(what, sizeof(what), "block (causal %d): input part adds no "
	    "weight gradient", causal);
	UNIT_OK(memcmp(g0, gb2, ng * 4) == 0, what);
	memset(scr, 0xff, nn_block_scratch_size(&sh) * 4);
	nn_block_backward_weight(&g2, &sv, &a, x, &sh);
	snprintf(what, sizeof(what), "block (causal %d): input then weight "
	    "part: every weight gradient has the whole backward's bits", causal);
	UNIT_OK(memcmp(gb1, gb2, ng * 4) == 0, what);
	free(wb), free(gb1), free(gb2), free(x), free(dy), free(y), free(acts);
	free(scr), free(save), free(dx1), free(dx2), free(g0);
}

/* The same for the feed-forward layer, of unequal widths. */
static void
test_mlp_split(void)
{
	int n = 6, in = 5, h = 9, o = 3;
	size_t nh = (size_t)n * h;
	float *wb = check_fill((size_t)2 * h * (in + o) + h + o, 0.5f);
	struct nn_mlp_w w = { wb, wb + h * in, wb + h * in + h,
	    wb + h * in + h + o * h };
	size_t ng = (size_t)h * in + h + (size_t)o * h + o;
	float *gb1 = check_fill(ng, 1), *gb2 = malloc(ng * 4), *g0 = malloc(ng * 4);
	struct nn_mlp_w g1 = { gb1, gb1 + h * in, gb1 + h * in + h,
	    gb1 + h * in + h + o * h };
	struct nn_mlp_w g2 = { gb2, gb2 + h * in, gb2 + h * in + h,
	    gb2 + h * in + h + o * h };
	float *x = check_fill((size_t)n * in, 1), *dy = check_fill((size_t)n * o, 1);
	float *y = malloc((size_t)n * o * 4), *acts = malloc(2 * nh * 4);
	float *scr = malloc(2 * nh * 4), *dfc1 = malloc(nh * 4);
	float *dx1 = check_fill((size_t)n * in, 1), *dx2 = malloc((size_t)n * in * 4);
	struct nn_mlp_acts a = { acts, acts + nh };

	memcpy(gb2, gb1, ng * 4);
	memcpy(g0, gb1, ng * 4);
	memcpy(dx2, dx1, (size_t)n * in * 4);
	nn_mlp_forward(y, &a, &w, x, n, in, h, o, NN_ACT_GELU);
	nn_mlp_backward(dx1, &g1, scr, dy, &a, &w, x, n, in, h, o, NN_ACT_GELU);
	nn_mlp_backward_input(dx2, dfc1, scr, dy, &a, &w, n, in, h, o,
	    NN_ACT_GELU);
	UNIT_OK(memcmp(dx1, dx2, (size_t)n * in * 4) == 0 &&
	    memcmp(gb2, g0, ng * 4) == 0,
	    "mlp: input part's dx has the whole backward's bits, no weights");
	memset(scr, 0xff, 2 * nh * 4);
	nn_mlp_backward_weight(&g2, dy, dfc1, &a, x, n, in, h, o);
	UNIT_OK(memcmp(gb1, gb2, ng * 4) == 0,
	    "mlp: then the weight part: the whole backward's weight gradients");
	free(wb), free(gb1), free(gb2), free(x), free(dy), free(y), free(acts);
	free(scr), free(dfc1), free(dx1), free(dx2), free(g0);
}

/* Which kernel set to advise over OpenBLAS's choice: the widest one this
 * CPU runs, only where OpenBLAS chose a narrower one. */
static void
test_blas_advice(void)
{
	const char *a;

	UNIT_OK((a = nn_blas_advice("Prescott", 1, 1)) && !strcmp(a,
	    "SkylakeX"), "an SSE3 set on an AVX-512 CPU: SkylakeX advised");
	UNIT_OK((a = nn_blas_advice("Haswell", 1, 1)) && !strcmp(a,
	    "SkylakeX"), "an AVX2 set on an AVX-512 CPU: SkylakeX advised");
	UNIT_OK((a = nn_blas_advice("Nehalem", 0, 1)) && !strcmp(a,
	    "Haswell"), "an SSE4 set on an AVX2 CPU: Haswell advised");
	UNIT_OK(!nn_blas_advice("Cooperlake", 1, 1) &&
	    !nn_blas_advice("skylakex", 1, 1) &&
	    !nn_blas_advice("Zen", 0, 1) && !nn_blas_advice("Prescott", 0, 0),
	    "no advice where the set is as wide as the CPU's vectors");
}

int
main(void)
{
	nn_set_threads(1);
	test_blas_advice();
	test_linear(1);
	test_linear(0);
	test_gelu();
	test_layernorm();
	test_attention(0);
	test_attention(1);
	test_embedding();
	test_xent();
	test_sqerr();
	test_block_split(0);
	test_block_split(1);
	test_mlp_split();
	return unit_done();
}
