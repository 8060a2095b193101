/* block: the feed-forward layer and the pre-LayerNorm transformer block,
 * built from the layer calls a tensor-parallel form can interleave with
 * its collectives. */
#include <string.h>

#include "nn/nn.h"

void
nn_mlp_forward(float *y, struct nn_mlp_acts *a, const struct nn_mlp_w *w,
    const float *x, int n, int in, int h, int o)
{
	nn_linear_forward(a->fc1, x, w->fc1_w, w->fc1_b, n, in, h);
	nn_gelu_forward(a->gelu, a->fc1, (size_t)n * h);
	nn_linear_forward(y, a->gelu, w->fc2_w, w->fc2_b, n, h, o);
}

void
nn_mlp_backward(float *dx, const struct nn_mlp_w *g, float *scratch,
    const float *dy, const struct nn_mlp_acts *a, const struct nn_mlp_w *w,
    const float *x, int n, int in, int h, int o)
{
	size_t nh = (size_t)n * h;
	float *dgelu = scratch, *dfc1 = scratch + nh;

	memset(scratch, 0, 2 * nh * sizeof(float));
	nn_linear_backward(dgelu, g->fc2_w, g->fc2_b, dy, a->gelu, w->fc2_w, n,
	    h, o);
	nn_gelu_backward(dfc1, a->fc1, dgelu, nh);
	nn_linear_backward(dx, g->fc1_w, g->fc1_b, dfc1, x, w->fc1_w, n, in, h);
}

/* The feed-forward part of a block's weights. */
static struct nn_mlp_w
block_mlp(const struct nn_block_w *w)
{
	struct nn_mlp_w m = { w->fc1_w, w->fc1_b, w->fc2_w, w->fc2_b };

	return m;
}

size_t
nn_block_acts_size(int b, int s, int d, int nh, int f)
{
	size_t n = (size_t)b * s;

	return 7 * n * d + 4 * n + (size_t)b * nh * s * s + 2 * n * f;
}

void
nn_block_acts_bind(struct nn_block_acts *a, float *buf, int b, int s,
    int d, int nh, int f)
{
	size_t n = (size_t)b * s, nd = n * d, nf = n * f;

	a->ln1 = buf, buf += nd;
	a->ln1_mean = buf, buf += n;
	a->ln1_rstd = buf, buf += n;
	a->q = buf, buf += nd;
	a->k = buf, buf += nd;
	a->v = buf, buf += nd;
	a->att = buf, buf += (size_t)b * nh * s * s;
	a->atty = buf, buf += nd;
	a->h = buf, buf += nd;
	a->ln2 = buf, buf += nd;
	a->ln2_mean = buf, buf += n;
	a->ln2_rstd = buf, buf += n;
	a->fc1 = buf, buf += nf;
	a->gelu = buf;
}

void
nn_block_forward(float *y, struct nn_block_acts *a,
    const struct nn_block_w *w, const float *x, int b, int s, int d, int nh,
    int f, int causal)
{
	int n = b * s;
	size_t nd = (size_t)n * d;

	nn_layernorm_forward(a->ln1, a->ln1_mean, a->ln1_rstd, x, w->ln1_w,
	    w->ln1_b, n, d);
	nn_linear_forward(a->q, a->ln1, w->q_w, w->q_b, n, d, d);
	nn_linear_forward(a->k, a->ln1, w->k_w, w->k_b, n, d, d);
	nn_linear_forward(a->v, a->ln1, w->v_w, w->v_b, n, d, d);
	nn_attention_forward(a->atty, a->att, a->q, a->k, a->v, b, s, nh,
	    d / nh, causal);
	nn_linear_forward(a->h, a->atty, w->o_w, w->o_b, n, d, d);
	nn_add(a->h, x, nd);

	nn_layernorm_forward(a->ln2, a->ln2_mean, a->ln2_rstd, a->h, w->ln2_w,
	    w->ln2_b, n, d);
	struct nn_mlp_w mw = block_mlp(w);
	struct nn_mlp_acts ma = { a->fc1, a->gelu };
	nn_mlp_forward(y, &ma, &mw, a->ln2, n, d, f, d);
	nn_add(y, a->h, nd);
}

size_t
nn_block_scratch_size(int b, int s, int d, int nh, int f)
{
	size_t n = (size_t)b * s;

	(void)nh;
	return 6 * n * d + 2 * n * f + (size_t)s * s;
}

void
nn_block_backward(float *dx, const struct nn_block_w *g, float *scratch,
    const float *dy, const struct nn_block_acts *a,
    const struct nn_block_w *w, const float *x, int b, int s, int d, int nh,
    int f, int causal)
{
	int n = b * s;
	size_t nd = (size_t)n * d, nf = (size_t)n * f;
	float *dh = scratch, *dln = dh + nd, *datty = dln + nd;
	float *dq = datty + nd, *dk = dq + nd, *dv = dk + nd;
	float *dmlp = dv + nd, *dsm = dmlp + 2 * nf;
	struct nn_mlp_w mw = block_mlp(w), mg = block_mlp(g);
	struct nn_mlp_acts ma = { a->fc1, a->gelu };

	/* y = h + mlp(ln2(h)) */
	memset(dln, 0, 5 * nd * sizeof(float));
	memcpy(dh, dy, nd * sizeof(float));
	nn_mlp_backward(dln, &mg, dmlp, dy, &ma, &mw, a->ln2, n, d, f, d);
	nn_layernorm_backward(dh, g->ln2_w, g->ln2_b, dln, a->h, w->ln2_w,
	    a->ln2_mean, a->ln2_rstd, n, d);

	/* h = x + o(attn(q(ln1(x)), k(ln1(x)), v(ln1(x)))) */
	if (dx)
		nn_add(dx, dh, nd);
	nn_linear_backward(datty, g->o_w, g->o_b, dh, a->atty, w->o_w, n, d, d);
	nn_attention_backward(dq, dk, dv, dsm, datty, a->att, a->q, a->k, a->v,
	    b, s, nh, d / nh, causal);
	memset(dln, 0, nd * sizeof(float));
	nn_linear_backward(dln, g->q_w, g->q_b, dq, a->ln1, w->q_w, n, d, d);
	nn_linear_backward(dln, g->k_w, g->k_b, dk, a->ln1, w->k_w, n, d, d);
	nn_linear_backward(dln, g->v_w, g->v_b, dv, a->ln1, w->v_w, n, d, d);
	nn_layernorm_backward(dx, g->ln1_w, g->ln1_b, dln, x, w->ln1_w,
	    a->ln1_mean, a->ln1_rstd, n, d);
}
