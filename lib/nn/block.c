/* block: the feed-forward layer and the transformer block (pre- or
 * post-LayerNorm), on the heads and features one rank holds, with hooks
 * where a tensor-parallel form sums partial results and a sequence-parallel
 * form swaps sharding around attention; serially the hooks are absent. */
#include <string.h>

#include "nn/gemm_int.h"
#include "nn/nn.h"

void
nn_mlp_forward(float *y, struct nn_mlp_acts *a, const struct nn_mlp_w *w,
    const float *x, int n, int in, int h, int o, enum nn_act act)
{
	nn_mlp_forward_add(y, a, w, x, NULL, n, in, h, o, act);
}

void
nn_mlp_forward_add(float *y, struct nn_mlp_acts *a, const struct nn_mlp_w *w,
    const float *x, const float *res, int n, int in, int h, int o,
    enum nn_act act)
{
	nn_linear_forward(a->fc1, x, w->fc1_w, w->fc1_b, n, in, h);
	uint16_t *hg = nn_bf16_keep_room(a->gelu, n, h);
	int kept = hg && act == NN_ACT_GELU;

	/* GELU's derivative kept beside (where the bf16 copies are); with
	 * its output kept in bf16, the f32 output has no reader */
	nn_act_forward_h(act, kept ? NULL : a->gelu, hg, kept ?
	    nn_bf16_keep_f32(a->fc1, n, h, 1) : NULL, a->fc1, (size_t)n * h);
	nn_linear_forward_add(y, a->gelu, w->fc2_w, w->fc2_b, res, n, h, o);
}

void
nn_mlp_backward_input(float *dx, float *dfc1, float *scratch, const float *dy,
    const struct nn_mlp_acts *a, const struct nn_mlp_w *w, int n, int in,
    int h, int o, enum nn_act act)
{
	size_t nh = (size_t)n * h;

	nn_linear_backward_to(scratch, NULL, NULL, dy, a->gelu, w->fc2_w, n, h,
	    o);
	nn_act_backward_to(act, dfc1, a->fc1, scratch, nh);
	nn_linear_backward(dx, NULL, NULL, dfc1, NULL, w->fc1_w, n, in, h);
}

void
nn_mlp_backward_weight(const struct nn_mlp_w *g, const float *dy,
    const float *dfc1, const struct nn_mlp_acts *a, const float *x, int n,
    int in, int h, int o)
{
	nn_linear_backward(NULL, g->fc2_w, g->fc2_b, dy, a->gelu, NULL, n, h,
	    o);
	nn_linear_backward(NULL, g->fc1_w, g->fc1_b, dfc1, x, NULL, n, in, h);
}

/* The two parts at once: together they add what one backward adds, and
 * neither reads what the other writes. Each layer's input and weight
 * gradients in one call, so that bf16 rounds dy and dfc1 once each, not
 * once a part, dfc1 as the activation's backward writes it (f32: the
 * same products and sums, the same bits). */
void
nn_mlp_backward(float *dx, const struct nn_mlp_w *g, float *scratch,
    const float *dy, const struct nn_mlp_acts *a, const struct nn_mlp_w *w,
    const float *x, int n, int in, int h, int o, enum nn_act act)
{
	float *dfc1 = scratch + (size_t)n * h;

	nn_linear_backward_to(scratch, g->fc2_w, g->fc2_b, dy, a->gelu,
	    w->fc2_w, n, h, o);
	nn_act_linear_backward(act, dx, g->fc1_w, g->fc1_b, dfc1, a->fc1,
	    scratch, x, w->fc1_w, n, in, h);
}

/* The feed-forward part of a block's weights. */
static struct nn_mlp_w
block_mlp(const struct nn_block_w *w)
{
	struct nn_mlp_w m = { w->fc1_w, w->fc1_b, w->fc2_w, w->fc2_b };

	return m;
}

struct nn_block_shape
nn_block_serial(int b, int s, int d, int nh, int f, int causal)
{
	struct nn_block_shape sh = { .b = b, .s = s, .d = d, .nh = nh,
	    .hd = d / nh, .f = f, .causal = causal, .act = NN_ACT_GELU };

	return sh;
}

size_t
nn_block_acts_size(const struct nn_block_shape *sh)
{
	size_t n = (size_t)sh->b * sh->s, c = (size_t)sh->nh * sh->hd;

	return 4 * n * sh->d + 4 * n * c + 4 * n +
	    (size_t)sh->b * sh->nh * sh->s * sh->s + 2 * n * sh->f +
	    (sh->moe.experts > 0 ? nn_moe_acts_size(&sh->moe, (int)n, sh->d,
	    sh->f) : 0);
}

void
nn_block_acts_bind(struct nn_block_acts *a, float *buf,
    const struct nn_block_shape *sh)
{
	size_t n = (size_t)sh->b * sh->s, nd = n * sh->d, nf = n * sh->f;
	size_t nc = n * sh->nh * sh->hd;

	a->ln1 = buf, buf += nd;
	a->ln1_mean = buf, buf += n;
	a->ln1_rstd = buf, buf += n;
	a->q = buf, buf += nc;
	a->k = buf, buf += nc;
	a->v = buf, buf += nc;
	a->att = buf, buf += (size_t)sh->b * sh->nh * sh->s * sh->s;
	a->atty = buf, buf += nc;
	a->h = buf, buf += nd;
	a->ln2 = buf, buf += nd;
	a->ln2_mean = buf, buf += n;
	a->ln2_rstd = buf, buf += n;
	a->fc1 = buf, buf += nf;
	a->gelu = buf, buf += nf;
	if (sh->moe.experts > 0)
		nn_moe_acts_bind(&a->moe, buf, &sh->moe, (int)n, sh->d, sh->f);
}

static int
hook_reduce(const struct nn_block_hooks *hk, enum nn_hook where, float *buf,
    size_t count)
{
	return hk && hk->reduce ? hk->reduce(hk->ctx, where, buf, count) : 0;
}

/* Rows of out += b (a bias left out of a partial product). */
/*
 * out = o(attention(q(in), k(in), v(in))) + res, on the local heads; with a
 * reduce hook the partial projection is summed over ranks and o's bias
 * added once after the sum.
 */
static int
attn_forward(float *out, struct nn_block_acts *a, const struct nn_block_w *w,
    const float *in, const float *res, const struct nn_block_shape *sh,
    const struct nn_block_hooks *hk)
{
	int n = sh->b * sh->s, c = sh->nh * sh->hd, d = sh->d;
	int split = hk && hk->reduce;

	if (hk && hk->attn_fwd) {
		nn_linear_forward(a->q, in, w->q_w, w->q_b, n, d, c);
		nn_linear_forward(a->k, in, w->k_w, w->k_b, n, d, c);
		nn_linear_forward(a->v, in, w->v_w, w->v_b, n, d, c);
		if (hk->attn_fwd(hk->ctx, a->atty, a->q, a->k, a->v) < 0)
			return -1;
	} else {
		/* q, k, v feed attention's products only: while a pass
		 * records, straight into their kept bf16 heads */
		nn_linear_forward_heads(a->q, in, w->q_w, w->q_b, sh->b, sh->s,
		    sh->nh, sh->hd, d);
		nn_linear_forward_heads(a->k, in, w->k_w, w->k_b, sh->b, sh->s,
		    sh->nh, sh->hd, d);
		nn_linear_forward_heads(a->v, in, w->v_w, w->v_b, sh->b, sh->s,
		    sh->nh, sh->hd, d);
		nn_attention_forward(a->atty, a->att, a->q, a->k, a->v, sh->b,
		    sh->s, sh->nh, sh->hd, sh->causal);
	}
	/* unsplit, the residual joins the projection (one pass less in
	 * bf16; f32 adds it after, as the split form) */
	nn_linear_forward_add(out, a->atty, w->o_w, split ? NULL : w->o_b,
	    split ? NULL : res, n, c, d);
	if (!split)
		return 0;
	if (hook_reduce(hk, NN_HOOK_ATTN_FWD, out, (size_t)n * d) < 0)
		return -1;
	nn_add_rows(out, w->o_b, (size_t)n, (size_t)d);
	nn_add(out, res, (size_t)n * d);
	return 0;
}

/* out = mlp(in) + res, fc2's partial output summed as attn_forward's. */
static int
mlp_forward(float *out, struct nn_block_acts *a, const struct nn_block_w *w,
    const float *in, const float *res, const struct nn_block_shape *sh,
    const struct nn_block_hooks *hk)
{
	int n = sh->b * sh->s, split = hk && hk->reduce;
	struct nn_mlp_w mw = block_mlp(w);
	struct nn_mlp_acts ma = { a->fc1, a->gelu };

	if (sh->moe.experts > 0) {
		/* whole on every rank: nothing to sum (the hook marks the
		 * place only) */
		if (nn_moe_forward(out, &a->moe, w->moe, in, &sh->moe, n,
		    sh->d, sh->f, sh->act) < 0 ||
		    hook_reduce(hk, NN_HOOK_MLP_FWD, out, 0) < 0)
			return -1;
		nn_add(out, res, (size_t)n * sh->d);
		return 0;
	}
	if (split)
		mw.fc2_b = NULL;
	nn_mlp_forward_add(out, &ma, &mw, in, split ? NULL : res, n, sh->d,
	    sh->f, sh->d, sh->act);
	if (!split)
		return 0;
	if (hook_reduce(hk, NN_HOOK_MLP_FWD, out, (size_t)n * sh->d) < 0)
		return -1;
	nn_add_rows(out, w->fc2_b, (size_t)n, (size_t)sh->d);
	nn_add(out, res, (size_t)n * sh->d);
	return 0;
}

int
nn_block_forward(float *y, struct nn_block_acts *a,
    const struct nn_block_w *w, const float *x,
    const struct nn_block_shape *sh, const struct nn_block_hooks *hk)
{
	int n = sh->b * sh->s, d = sh->d;

	if (!sh->post_norm) {
		/* pre-norm, unhooked: the norms' outputs feed products only,
		 * which take their kept bf16 copies (no f32 written then) */
		uint16_t *h1 = nn_bf16_keep_room(a->ln1, n, d), *h2;
		int plain = !hk && sh->moe.experts == 0;

		nn_layernorm_forward_h(plain && h1 ? NULL : a->ln1, h1,
		    a->ln1_mean, a->ln1_rstd, x, w->ln1_w, w->ln1_b, n, d);
		if (attn_forward(a->h, a, w, a->ln1, x, sh, hk) < 0)
			return -1;
		h2 = nn_bf16_keep_room(a->ln2, n, d);
		nn_layernorm_forward_h(plain && h2 ? NULL : a->ln2, h2,
		    a->ln2_mean, a->ln2_rstd, a->h, w->ln2_w, w->ln2_b, n, d);
		return mlp_forward(y, a, w, a->ln2, a->h, sh, hk);
	}
	if (attn_forward(a->h, a, w, x, x, sh, hk) < 0)
		return -1;
	nn_layernorm_forward_h(a->ln1, nn_bf16_keep_room(a->ln1, n, d),
	    a->ln1_mean, a->ln1_rstd, a->h, w->ln1_w, w->ln1_b, n, d);
	if (mlp_forward(a->ln2, a, w, a->ln1, a->ln1, sh, hk) < 0)
		return -1;
	nn_layernorm_forward(y, a->ln2_mean, a->ln2_rstd, a->ln2, w->ln2_w,
	    w->ln2_b, n, d);
	return 0;
}

size_t
nn_block_scratch_size(const struct nn_block_shape *sh)
{
	size_t n = (size_t)sh->b * sh->s, c = (size_t)sh->nh * sh->hd;
	size_t mlp = 2 * n * sh->f;

	if (sh->moe.experts > 0)
		mlp = nn_moe_scratch_size(&sh->moe, (int)n, sh->d, sh->f);
	return 3 * n * sh->d + 4 * n * c + mlp + (size_t)sh->s * sh->s;
}

/* Scratch of the backward pass: three [n,d], four [n,c], the mlp's (or
 * the MoE's) and attention's own. */
struct bscratch {
	float *A, *B, *C, *datty, *dq, *dk, *dv, *dmlp, *dsm;
};

static void
bscratch_bind(struct bscratch *t, float *p, const struct nn_block_shape *sh)
{
	size_t n = (size_t)sh->b * sh->s, nd = n * sh->d;
	size_t nc = n * sh->nh * sh->hd;

	t->A = p, p += nd;
	t->B = p, p += nd;
	t->C = p, p += nd;
	t->datty = p, p += nc;
	t->dq = p, p += nc;
	t->dk = p, p += nc;
	t->dv = p, p += nc;
	t->dmlp = p, p += sh->moe.experts > 0 ? nn_moe_scratch_size(&sh->moe,
	    (int)n, sh->d, sh->f) : 2 * n * sh->f;
	t->dsm = p;
}

/* dsum += d/d(in) of mlp(in) given dout (summed over ranks: the hook).
 * dsum zero (zero) and nothing to sum: the dense mlp adds into it
 * directly, the bits of adding into zeroed C and then C into dsum. */
static int
mlp_backward(float *dsum, int zero, struct bscratch *t,
    const struct nn_block_w *g, const float *dout,
    const struct nn_block_acts *a, const struct nn_block_w *w,
    const float *in, const struct nn_block_shape *sh,
    const struct nn_block_hooks *hk)
{
	int n = sh->b * sh->s;
	size_t nd = (size_t)n * sh->d;
	struct nn_mlp_w mw = block_mlp(w), mg = block_mlp(g);
	struct nn_mlp_acts ma = { a->fc1, a->gelu };
	int direct = zero && sh->moe.experts == 0 && !(hk && hk->reduce);

	if (!direct)
		memset(t->C, 0, nd * sizeof(float));
	if (sh->moe.experts > 0) {
		/* whole on every rank: the hook marks the place, sums none */
		if (nn_moe_backward(t->C, g->moe, t->dmlp, dout, &a->moe,
		    w->moe, in, &sh->moe, n, sh->d, sh->f, sh->act) < 0 ||
		    hook_reduce(hk, NN_HOOK_MLP_BWD, t->C, 0) < 0)
			return -1;
	} else {
		nn_mlp_backward(direct ? dsum : t->C, &mg, t->dmlp, dout, &ma,
		    &mw, in, n, sh->d, sh->f, sh->d, sh->act);
		if (hook_reduce(hk, NN_HOOK_MLP_BWD, t->C, nd) < 0)
			return -1;
	}
	if (!direct)
		nn_add(dsum, t->C, nd);
	return 0;
}

/* t->C = d/d(in) of o(attention(q(in), k(in), v(in))) given dout, summed
 * over ranks. */
static int
attn_backward(struct bscratch *t, const struct nn_block_w *g,
    const float *dout, const struct nn_block_acts *a,
    const struct nn_block_w *w, const float *in,
    const struct nn_block_shape *sh, const struct nn_block_hooks *hk)
{
	int n = sh->b * sh->s, c = sh->nh * sh->hd, d = sh->d;
	size_t nc = (size_t)n * c, nd = (size_t)n * d;

	nn_linear_backward_to(t->datty, g->o_w, g->o_b, dout, a->atty, w->o_w,
	    n, c, d);
	if (hk && hk->attn_bwd) {
		memset(t->dq, 0, 3 * nc * sizeof(float));
		if (hk->attn_bwd(hk->ctx, t->dq, t->dk, t->dv, t->datty) < 0)
			return -1;
	} else
		nn_attention_backward_to(t->dq, t->dk, t->dv, t->dsm, t->datty,
		    a->att, a->q, a->k, a->v, sh->b, sh->s, sh->nh, sh->hd,
		    sh->causal);
	float *const dw[3] = { g->q_w, g->k_w, g->v_w };
	float *const db[3] = { g->q_b, g->k_b, g->v_b };
	const float *const dqkv[3] = { t->dq, t->dk, t->dv };
	const float *const wqkv[3] = { w->q_w, w->k_w, w->v_w };

	if (nn_gemm_linear_grad3(t->C, dw, db, dqkv, in, wqkv, n, d, c) < 0) {
		nn_linear_backward_to(t->C, g->q_w, g->q_b, t->dq, in, w->q_w,
		    n, d, c);
		nn_linear_backward(t->C, g->k_w, g->k_b, t->dk, in, w->k_w, n,
		    d, c);
		nn_linear_backward(t->C, g->v_w, g->v_b, t->dv, in, w->v_w, n,
		    d, c);
	}
	return hook_reduce(hk, NN_HOOK_ATTN_BWD, t->C, nd);
}

int
nn_block_backward(float *dx, const struct nn_block_w *g, float *scratch,
    const float *dy, const struct nn_block_acts *a,
    const struct nn_block_w *w, const float *x,
    const struct nn_block_shape *sh, const struct nn_block_hooks *hk)
{
	int n = sh->b * sh->s, d = sh->d;
	size_t nd = (size_t)n * d;
	struct bscratch t;

	bscratch_bind(&t, scratch, sh);
	if (!sh->post_norm) {
		/* y = h + mlp(ln2(h)): A = dh */
		memcpy(t.A, dy, nd * sizeof(float));
		memset(t.B, 0, nd * sizeof(float));
		if (mlp_backward(t.B, 1, &t, g, dy, a, w, a->ln2, sh, hk) < 0)
			return -1;
		nn_layernorm_backward(t.A, g->ln2_w, g->ln2_b, t.B, a->h,
		    w->ln2_w, a->ln2_mean, a->ln2_rstd, n, d);
		/* h = x + attn(ln1(x)) */
		if (dx)
			nn_add(dx, t.A, nd);
		if (attn_backward(&t, g, t.A, a, w, a->ln1, sh, hk) < 0)
			return -1;
		nn_layernorm_backward(dx, g->ln1_w, g->ln1_b, t.C, x, w->ln1_w,
		    a->ln1_mean, a->ln1_rstd, n, d);
		return 0;
	}
	/* y = ln2(r2), r2 = h + mlp(h): A = dr2, then dh */
	memset(t.A, 0, 2 * nd * sizeof(float));
	nn_layernorm_backward(t.A, g->ln2_w, g->ln2_b, dy, a->ln2, w->ln2_w,
	    a->ln2_mean, a->ln2_rstd, n, d);
	memcpy(t.B, t.A, nd * sizeof(float));
	if (mlp_backward(t.B, 0, &t, g, t.A, a, w, a->ln1, sh, hk) < 0)
		return -1;
	/* h = ln1(r1), r1 = x + attn(x): A = dr1 */
	memset(t.A, 0, nd * sizeof(float));
	nn_layernorm_backward(t.A, g->ln1_w, g->ln1_b, t.B, a->h, w->ln1_w,
	    a->ln1_mean, a->ln1_rstd, n, d);
	if (dx)
		nn_add(dx, t.A, nd);
	if (attn_backward(&t, g, t.A, a, w, x, sh, hk) < 0)
		return -1;
	if (dx)
		nn_add(dx, t.C, nd);
	return 0;
}

size_t
nn_block_wsave_size(const struct nn_block_shape *sh)
{
	size_t n = (size_t)sh->b * sh->s, c = (size_t)sh->nh * sh->hd;

	return 4 * n * sh->d + n * sh->f + 3 * n * c;
}

void
nn_block_wsave_bind(struct nn_block_wsave *sv, float *buf,
    const struct nn_block_shape *sh)
{
	size_t n = (size_t)sh->b * sh->s, nd = n * sh->d;
	size_t nc = n * sh->nh * sh->hd;

	sv->dy = buf, buf += nd;
	sv->dfc1 = buf, buf += n * sh->f;
	sv->dln2 = buf, buf += nd;
	sv->dattn = buf, buf += nd;
	sv->dq = buf, buf += nc;
	sv->dk = buf, buf += nc;
	sv->dv = buf, buf += nc;
	sv->dln1 = buf;
}

/* nn_block_backward's pre-norm path, each weight gradient left out and the
 * output gradient it needs kept in sv instead; the hooks' sums where
 * nn_block_backward has them, so sv holds the summed gradients. */
int
nn_block_backward_input(float *dx, const struct nn_block_wsave *sv,
    float *scratch, const float *dy, const struct nn_block_acts *a,
    const struct nn_block_w *w, const float *x,
    const struct nn_block_shape *sh, const struct nn_block_hooks *hk)
{
	int n = sh->b * sh->s, c = sh->nh * sh->hd, d = sh->d;
	size_t nd = (size_t)n * d, nc = (size_t)n * c;
	struct nn_mlp_w mw = block_mlp(w);
	struct nn_mlp_acts ma = { a->fc1, a->gelu };
	struct bscratch t;

	if (sh->moe.experts > 0)
		return -1;	/* the MoE's backward is one piece */
	bscratch_bind(&t, scratch, sh);
	/* y = h + mlp(ln2(h)): dattn = dh */
	memcpy(sv->dy, dy, nd * sizeof(float));
	memcpy(sv->dattn, dy, nd * sizeof(float));
	memset(sv->dln2, 0, nd * sizeof(float));
	memset(t.C, 0, nd * sizeof(float));
	nn_mlp_backward_input(t.C, sv->dfc1, t.dmlp, dy, &ma, &mw, n, d,
	    sh->f, d, sh->act);
	if (hook_reduce(hk, NN_HOOK_MLP_BWD, t.C, nd) < 0)
		return -1;
	nn_add(sv->dln2, t.C, nd);
	nn_layernorm_backward(sv->dattn, NULL, NULL, sv->dln2, a->h, w->ln2_w,
	    a->ln2_mean, a->ln2_rstd, n, d);
	/* h = x + attn(ln1(x)) */
	if (dx)
		nn_add(dx, sv->dattn, nd);
	nn_linear_backward_to(t.datty, NULL, NULL, sv->dattn, NULL, w->o_w, n,
	    c, d);
	if (hk && hk->attn_bwd) {
		memset(sv->dq, 0, 3 * nc * sizeof(float));
		if (hk->attn_bwd(hk->ctx, sv->dq, sv->dk, sv->dv, t.datty) < 0)
			return -1;
	} else
		nn_attention_backward_to(sv->dq, sv->dk, sv->dv, t.dsm, t.datty,
		    a->att, a->q, a->k, a->v, sh->b, sh->s, sh->nh, sh->hd,
		    sh->causal);
	nn_linear_backward_to(sv->dln1, NULL, NULL, sv->dq, NULL, w->q_w, n, d,
	    c);
	nn_linear_backward(sv->dln1, NULL, NULL, sv->dk, NULL, w->k_w, n, d, c);
	nn_linear_backward(sv->dln1, NULL, NULL, sv->dv, NULL, w->v_w, n, d, c);
	if (hook_reduce(hk, NN_HOOK_ATTN_BWD, sv->dln1, nd) < 0)
		return -1;
	if (dx)
		nn_layernorm_backward(dx, NULL, NULL, sv->dln1, x, w->ln1_w,
		    a->ln1_mean, a->ln1_rstd, n, d);
	return 0;
}

void
nn_block_backward_weight(const struct nn_block_w *g,
    const struct nn_block_wsave *sv, const struct nn_block_acts *a,
    const float *x, const struct nn_block_shape *sh)
{
	int n = sh->b * sh->s, c = sh->nh * sh->hd, d = sh->d;
	struct nn_mlp_w mg = block_mlp(g);
	struct nn_mlp_acts ma = { a->fc1, a->gelu };

	nn_mlp_backward_weight(&mg, sv->dy, sv->dfc1, &ma, a->ln2, n, d, sh->f,
	    d);
	nn_layernorm_backward(NULL, g->ln2_w, g->ln2_b, sv->dln2, a->h, NULL,
	    a->ln2_mean, a->ln2_rstd, n, d);
	nn_linear_backward(NULL, g->o_w, g->o_b, sv->dattn, a->atty, NULL, n, c,
	    d);
	nn_linear_backward(NULL, g->q_w, g->q_b, sv->dq, a->ln1, NULL, n, d, c);
	nn_linear_backward(NULL, g->k_w, g->k_b, sv->dk, a->ln1, NULL, n, d, c);
	nn_linear_backward(NULL, g->v_w, g->v_b, sv->dv, a->ln1, NULL, n, d, c);
	nn_layernorm_backward(NULL, g->ln1_w, g->ln1_b, sv->dln1, x, NULL,
	    a->ln1_mean, a->ln1_rstd, n, d);
}
