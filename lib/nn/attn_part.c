/* attn_part: blockwise attention with global causal positions, forward
 * merged by log-sum-exp (online softmax) and backward recomputing the
 * probabilities from the saved log-sum-exp, as FlashAttention does; the
 * products are BLAS's, a diagonal block's in row stripes. */
#include <math.h>
#include <string.h>

#include "nn/attn_part.h"
#include "nn/nn.h"

/* Keys row i sees (0 .. nk). */
static int
visible(const struct nn_attn_part *p, int i)
{
	long n;

	if (!p->causal)
		return p->nk;
	n = p->q0 + i - p->k0 + 1;
	return n < 0 ? 0 : n > p->nk ? p->nk : (int)n;
}

size_t
nn_attn_part_pairs(const struct nn_attn_part *p)
{
	size_t n = 0;

	for (int i = 0; i < p->nq; i++)
		n += (size_t)visible(p, i);
	return n;
}

/* scratch [nr, cols] = q k^T / sqrt(hd) over nr query rows and the
 * first cols keys. */
static void
scores(float *s, const float *q, const float *k, int nr, int cols,
    const struct nn_attn_part *p)
{
	nn_gemm(0, 1, nr, cols,
	    p->hd, 1.0f / sqrtf((float)p->hd), q, p->ld, k, p->ld, 0.0f, s,
	    cols);
}

/*
 * The end of the stripe of query rows from i0: a block the causal mask
 * cuts diagonally (its rows see different key counts) goes in 8 stripes,
 * each multiplying only the keys its last row sees, so that the masked
 * triangle costs about 1/16 of the block's products instead of half
 * (what FlashAttention's tiles skip); other blocks go whole.
 */
static int
stripe_end(const struct nn_attn_part *p, int i0)
{
	int rows = (p->nq + 7) / 8;

	if (visible(p, 0) == visible(p, p->nq - 1) || rows < 16)
		return p->nq;
	return i0 + rows < p->nq ? i0 + rows : p->nq;
}

/* Forward of query rows i0 .. i1 (a stripe). */
static size_t
forward_rows(float *o, float *m, float *l, float *scratch, const float *q,
    const float *k, const float *v, const struct nn_attn_part *p, int i0,
    int i1)
{
	int cols = visible(p, i1 - 1), nr = i1 - i0;
	size_t pairs = 0;

	if (cols == 0)
		return 0;
	o += (size_t)i0 * p->ld, m += i0, l += i0;
	scores(scratch, q + (size_t)i0 * p->ld, k, nr, cols, p);
	for (int i = 0; i < nr; i++) {
		float *s = scratch + (size_t)i * cols, mx = -INFINITY, mn, a;
		float sum = 0;
		int len = visible(p, i0 + i);

		for (int j = 0; j < len; j++)
			mx = s[j] > mx ? s[j] : mx;
		for (int j = len; j < cols; j++)
			s[j] = 0;
		if (len == 0)
			continue;
		mn = m[i] > mx ? m[i] : mx;
		a = expf(m[i] - mn);
		for (int j = 0; j < len; j++)
			sum += (s[j] = expf(s[j] - mn));
		l[i] = l[i] * a + sum;
		m[i] = mn;
		for (int c = 0; c < p->hd; c++)
			o[(size_t)i * p->ld + c] *= a;
		pairs += (size_t)len;
	}
	nn_gemm(0, 0, nr, p->hd,
	    cols, 1.0f, scratch, cols, v, p->ld, 1.0f, o, p->ld);
	return pairs;
}

size_t
nn_attn_part_forward(float *o, float *m, float *l, float *scratch,
    const float *q, const float *k, const float *v,
    const struct nn_attn_part *p)
{
	size_t pairs = 0;

	for (int i0 = 0, i1; i0 < p->nq; i0 = i1) {
		i1 = stripe_end(p, i0);
		pairs += forward_rows(o, m, l, scratch, q, k, v, p, i0, i1);
	}
	return pairs;
}

void
nn_attn_part_finish(float *o, float *lse, const float *m, const float *l,
    int nq, int ld, int hd)
{
	for (int i = 0; i < nq; i++) {
		float inv = 1.0f / l[i];

		for (int c = 0; c < hd; c++)
			o[(size_t)i * ld + c] *= inv;
		lse[i] = m[i] + logf(l[i]);
	}
}

/* Backward of query rows i0 .. i1 (a stripe). */
static size_t
backward_rows(float *dq, float *dk, float *dv, float *scratch,
    const float *dout, const float *lse, const float *dsum,
    const float *q, const float *k, const float *v,
    const struct nn_attn_part *p, int i0, int i1)
{
	int cols = visible(p, i1 - 1), nr = i1 - i0, hd = p->hd, ld = p->ld;
	float scale = 1.0f / sqrtf((float)hd);
	float *pr = scratch, *ds = scratch + (size_t)nr * cols;
	size_t pairs = 0, r0 = (size_t)i0 * ld;

	if (cols == 0)
		return 0;
	scores(pr, q + r0, k, nr, cols, p);
	/* ds = dout v^T, then ds = P * (ds - dsum) */
	nn_gemm(0, 1, nr, cols, hd,
	    1.0f, dout + r0, ld, v, ld, 0.0f, ds, cols);
	for (int i = 0; i < nr; i++) {
		float *a = pr + (size_t)i * cols, *d = ds + (size_t)i * cols;
		int len = visible(p, i0 + i);

		for (int j = 0; j < len; j++) {
			a[j] = expf(a[j] - lse[i0 + i]);
			d[j] = a[j] * (d[j] - dsum[i0 + i]);
		}
		for (int j = len; j < cols; j++)
			a[j] = d[j] = 0;
		pairs += (size_t)len;
	}
	nn_gemm(1, 0, cols, hd, nr, 1.0f,
	    pr, cols, dout + r0, ld, 1.0f, dv, ld);
	nn_gemm(0, 0, nr, hd, cols,
	    scale, ds, cols, k, ld, 1.0f, dq + r0, ld);
	nn_gemm(1, 0, cols, hd, nr,
	    scale, ds, cols, q + r0, ld, 1.0f, dk, ld);
	return pairs;
}

size_t
nn_attn_part_backward(float *dq, float *dk, float *dv, float *scratch,
    const float *dout, const float *lse, const float *dsum,
    const float *q, const float *k, const float *v,
    const struct nn_attn_part *p)
{
	size_t pairs = 0;

	for (int i0 = 0, i1; i0 < p->nq; i0 = i1) {
		i1 = stripe_end(p, i0);
		pairs += backward_rows(dq, dk, dv, scratch, dout, lse, dsum,
		    q, k, v, p, i0, i1);
	}
	return pairs;
}
