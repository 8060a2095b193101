/* attn_part: blockwise attention with global causal positions, forward
 * merged by log-sum-exp (online softmax) and backward recomputing the
 * probabilities from the saved log-sum-exp, as FlashAttention does; the
 * products are BLAS's. */
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

/* scratch [nq, cols] = q k^T / sqrt(hd) over the first cols keys. */
static void
scores(float *s, const float *q, const float *k, int cols,
    const struct nn_attn_part *p)
{
	nn_gemm(0, 1, p->nq, cols,
	    p->hd, 1.0f / sqrtf((float)p->hd), q, p->ld, k, p->ld, 0.0f, s,
	    cols);
}

size_t
nn_attn_part_forward(float *o, float *m, float *l, float *scratch,
    const float *q, const float *k, const float *v,
    const struct nn_attn_part *p)
{
	int cols = visible(p, p->nq - 1);
	size_t pairs = 0;

	if (cols == 0)
		return 0;
	scores(scratch, q, k, cols, p);
	for (int i = 0; i < p->nq; i++) {
		float *s = scratch + (size_t)i * cols, mx = -INFINITY, mn, a;
		float sum = 0;
		int len = visible(p, i);

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
	nn_gemm(0, 0, p->nq, p->hd,
	    cols, 1.0f, scratch, cols, v, p->ld, 1.0f, o, p->ld);
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

size_t
nn_attn_part_backward(float *dq, float *dk, float *dv, float *scratch,
    const float *dout, const float *lse, const float *dsum,
    const float *q, const float *k, const float *v,
    const struct nn_attn_part *p)
{
	int cols = visible(p, p->nq - 1), nq = p->nq, hd = p->hd, ld = p->ld;
	float scale = 1.0f / sqrtf((float)hd);
	float *pr = scratch, *ds = scratch + (size_t)nq * cols;
	size_t pairs = 0;

	if (cols == 0)
		return 0;
	scores(pr, q, k, cols, p);
	/* ds = dout v^T, then ds = P * (ds - dsum) */
	nn_gemm(0, 1, nq, cols, hd,
	    1.0f, dout, ld, v, ld, 0.0f, ds, cols);
	for (int i = 0; i < nq; i++) {
		float *a = pr + (size_t)i * cols, *d = ds + (size_t)i * cols;
		int len = visible(p, i);

		for (int j = 0; j < len; j++) {
			a[j] = expf(a[j] - lse[i]);
			d[j] = a[j] * (d[j] - dsum[i]);
		}
		for (int j = len; j < cols; j++)
			a[j] = d[j] = 0;
		pairs += (size_t)len;
	}
	nn_gemm(1, 0, cols, hd, nq, 1.0f,
	    pr, cols, dout, ld, 1.0f, dv, ld);
	nn_gemm(0, 0, nq, hd, cols,
	    scale, ds, cols, k, ld, 1.0f, dq, ld);
	nn_gemm(1, 0, cols, hd, nq,
	    scale, ds, cols, q, ld, 1.0f, dk, ld);
	return pairs;
}
