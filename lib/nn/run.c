/* run: the forward and backward passes of the built-in models over a
 * batch: the loss sum and the gradients of that sum. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "nn/gemm_int.h"
#include "nn/nn.h"
#include "nn/model_int.h"
#include "nn/vec_int.h"

/* The backward pass's hook; a NULL struct hook pointer: forward only. */
struct hook {
	nn_grad_fn fn;
	void *ctx;
	nn_use_fn use;
};

static void
hook_call(const struct hook *h, int stage)
{
	if (h->fn != NULL)
		h->fn(h->ctx, stage);
}

/* Before a pass reads layer's weights (h NULL or without use: nothing). */
static void
hook_use(const struct hook *h, int layer, int backward)
{
	if (h != NULL && h->use != NULL)
		h->use(h->ctx, layer, backward);
}

/* The pass's buffers, as the model's parameters and gradients and the
 * optimizer's moments (vec_int.h): a step streams tens of MB through its
 * products, and 4 KiB pages cost a TLB miss every few rows. */
void
nn_advise_huge(void *p, size_t bytes)
{
#ifdef MADV_HUGEPAGE
	const uintptr_t huge = (uintptr_t)2 << 20;
	uintptr_t a = ((uintptr_t)p + huge - 1) & ~(huge - 1);
	uintptr_t e = ((uintptr_t)p + bytes) & ~(huge - 1);

	if (e > a)
		(void)madvise((void *)a, e - a, MADV_HUGEPAGE);
#else
	(void)p, (void)bytes;
#endif
}

static float *
work_reserve(struct nn_work *k, size_t floats)
{
	if (floats > k->cap) {
		float *b = realloc(k->buf, floats * sizeof(float));
		if (!b)
			return NULL;
		k->buf = b, k->cap = floats;
		nn_advise_huge(b, floats * sizeof(float));
	}
	return k->buf;
}

static size_t
zmax(size_t a, size_t b)
{
	return a > b ? a : b;
}

/* Floats a pass of an mlp stack over n samples needs: every layer's
 * output and saved activations, two gradients and the backward scratch
 * at the widest layer. */
static size_t
mlp_floats(const struct nn_work *k, size_t n)
{
	size_t outs = 0, acts = 0, wide = 0, hid = 0;

	for (int l = 0; l < k->nlayers; l++) {
		const struct nn_mlp_shape *s = &k->ms[l];
		outs += (size_t)s->out;
		acts += 2 * (size_t)s->hidden;
		wide = zmax(wide, zmax(s->in, s->out));
		hid = zmax(hid, (size_t)s->hidden);
	}
	return n * (outs + acts + 2 * wide + 2 * hid);
}

/* mlp stack: layer l in_l -> hidden_l -> out_l, each layer's output and
 * activations one after another; per-sample loss the mean squared error
 * over the last layer's out. */
static int
run_mlp(struct nn_model *m, const struct nn_batch *b, const struct hook *grad,
    double *loss, char *err, size_t errlen)
{
	struct nn_work *k = m->work;
	const struct nn_mlp_shape *ms = k->ms;
	int L = k->nlayers, n = b->n, O = ms[L - 1].out;
	size_t no = (size_t)n * O, wide = 0;
	float *out = work_reserve(k, mlp_floats(k, (size_t)n));

	if (!out)
		return cli_fail(err, errlen, "out of memory for a batch of %d", n);
	float *acts = out, *da, *db, *scratch;
	const float *x = b->x;
	for (int l = 0; l < L; l++) {
		acts += (size_t)n * ms[l].out;
		wide = zmax(wide, zmax(ms[l].in, ms[l].out));
	}
	/* forward: y and acts move up a layer at a time */
	float *y = out, *a0 = acts;
	for (int l = 0; l < L; l++) {
		size_t nh = (size_t)n * ms[l].hidden;
		struct nn_mlp_acts a = { a0, a0 + nh };
		hook_use(grad, l, 0);
		nn_mlp_forward(y, &a, &k->mw[l], x, n, ms[l].in, ms[l].hidden,
		    ms[l].out, NN_ACT_GELU);
		x = y, y += (size_t)n * ms[l].out, a0 += 2 * nh;
	}
	*loss = nn_sqerr_forward(x, b->y, no) / O;
	if (!grad)
		return 0;
	da = a0, db = da + (size_t)n * wide, scratch = db + (size_t)n * wide;
	memset(da, 0, no * sizeof(float));
	nn_sqerr_backward(da, x, b->y, 1.0f / O, no);
	/* backward: y and acts move down again */
	for (int l = L - 1; l >= 0; l--) {
		size_t nh = (size_t)n * ms[l].hidden;
		y -= (size_t)n * ms[l].out, a0 -= 2 * nh;
		struct nn_mlp_acts a = { a0, a0 + nh };
		x = l ? y - (size_t)n * ms[l - 1].out : b->x;
		if (l)
			memset(db, 0, (size_t)n * ms[l].in * sizeof(float));
		hook_use(grad, l, 1);
		nn_mlp_backward(l ? db : NULL, &k->mg[l], scratch, da, &a,
		    &k->mw[l], x, n, ms[l].in, ms[l].hidden, ms[l].out,
		    NN_ACT_GELU);
		hook_call(grad, L - 1 - l);
		float *t = da;
		da = db, db = t;
	}
	return 0;
}

/* A run of blocks over n samples of s positions: in is layer 0's input,
 * x holds each layer's output, acts each layer's saved activations. */
struct stack {
	int n, s;
	const float *in;
	float *x, *acts, *dxa, *dxb, *scratch, *extra;
	uint16_t *keep;		/* nn_bf16_keep's arena (nkeep values) */
	size_t nd, na, nkeep;
	struct nn_block_shape sh, shm;	/* shm: an MoE block's */
};

/*
 * bf16 values the forward pass's operands take (the linear layers'
 * inputs and weights, attention's q, k, v and probabilities, and the
 * gpt's final LayerNorm output and wte), and GELU's derivative in f32
 * (two bf16 places a value, one more for its alignment), kept
 * for the backward pass (nn_bf16_keep) in a training pass in native bf16.
 * Not where a use hook runs (a ZeRO-3 gather rewrites weights during the
 * pass) nor with MoE blocks (the experts' buffers are gathered anew);
 * then 0.
 */
static size_t
keep_count(const struct nn_model *m, const struct hook *grad, int n, int s)
{
	const struct nn_dims *d = &m->dims;
	size_t D = (size_t)d->d_model, F = (size_t)d->d_ff;
	size_t N = (size_t)n * s, att = N * d->heads * s;

	if (!grad || grad->use || d->moe.experts > 0 ||
	    nn_get_precision() != NN_PREC_BF16 || nn_gemm_portable())
		return 0;
	return m->work->nlayers * (6 * N * D + N * F + att + 4 * D * D +
	    2 * D * F + 2 * N * F + 1) + (d->arch == NN_GPT ? N * D +
	    (size_t)d->vocab * D : 0);
}

/* Reserves the stack's buffers plus extra floats after them, and the
 * arena of keep_count. */
static int
stack_reserve(struct nn_model *m, struct stack *st, int n, int s,
    size_t extra, const struct hook *grad)
{
	const struct nn_dims *d = &m->dims;
	int L = m->work->nlayers;

	st->n = n, st->s = s;
	st->nd = (size_t)n * s * d->d_model;
	st->sh = nn_block_serial(n, s, d->d_model, d->heads, d->d_ff, 0);
	st->shm = st->sh;
	st->shm.moe = d->moe;
	/* an MoE block's acts and scratch hold the mlp's and more */
	const struct nn_block_shape *big = d->moe.experts > 0 ? &st->shm :
	    &st->sh;
	st->na = nn_block_acts_size(big);
	st->nkeep = keep_count(m, grad, n, s);
	float *p = work_reserve(m->work, L * (st->nd + st->na) + 2 * st->nd +
	    nn_block_scratch_size(big) + extra + (st->nkeep + 1) / 2);
	if (!p)
		return -1;
	st->x = p, p += L * st->nd;
	st->acts = p, p += L * st->na;
	st->dxa = p, p += st->nd;
	st->dxb = p, p += st->nd;
	st->extra = p, p += extra;
	st->scratch = p, p += nn_block_scratch_size(big);
	st->keep = (uint16_t *)p;
	nn_bf16_keep(st->nkeep ? st->keep : NULL, st->nkeep);
	return 0;
}

static const float *
stack_in(const struct stack *st, int l)
{
	return l ? st->x + (l - 1) * st->nd : st->in;
}

/* Layer l's shape (an MoE block's or the plain one). */
static struct nn_block_shape *
stack_shape(const struct nn_model *m, struct stack *st, int l)
{
	return nn_dims_moe_layer(&m->dims, l) ? &st->shm : &st->sh;
}

static void
stack_acts(const struct nn_model *m, struct stack *st, int l,
    struct nn_block_acts *a)
{
	nn_block_acts_bind(a, st->acts + l * st->na, stack_shape(m, st, l));
}

/* Returns the last layer's output. */
static float *
stack_forward(struct nn_model *m, struct stack *st, int causal,
    const struct hook *h)
{
	struct nn_block_acts a;
	int L = m->work->nlayers;

	st->sh.causal = st->shm.causal = causal;
	for (int l = 0; l < L; l++) {
		stack_acts(m, st, l, &a);
		hook_use(h, l, 0);
		nn_block_forward(st->x + l * st->nd, &a, &m->work->w[l],
		    stack_in(st, l), stack_shape(m, st, l), NULL);
	}
	return st->x + (L - 1) * st->nd;
}

/* The block's reduce hook point after its feed-forward backward, where
 * mlp.* are final, reports a stage; buf is left alone (one rank's sum). */
struct stage_at {
	const struct hook *h;
	int stage;
};

static int
stage_reduce(void *ctx, enum nn_hook where, float *buf, size_t count)
{
	const struct stage_at *s = ctx;

	(void)buf;
	(void)count;
	if (where == NN_HOOK_MLP_BWD)
		hook_call(s->h, s->stage);
	return 0;
}

/* dy: the gradient at the last output, in st->dxa. Returns the gradient
 * at layer 0's input when want_dx, else NULL. Layer l's mlp.* gradients
 * are hook stage base + 2(L-1-l), its others the stage after. */
static float *
stack_backward(struct nn_model *m, struct stack *st, int causal, int want_dx,
    const struct hook *h, int base)
{
	int L = m->work->nlayers;
	struct nn_block_acts a;
	float *dy = st->dxa, *dx = st->dxb;
	struct stage_at at = { h, 0 };
	struct nn_block_hooks hk = { .reduce = stage_reduce, .ctx = &at };

	st->sh.causal = st->shm.causal = causal;

	for (int l = L - 1; l >= 0; l--) {
		int need = l > 0 || want_dx;
		if (need)
			memset(dx, 0, st->nd * sizeof(float));
		stack_acts(m, st, l, &a);
		at.stage = base + 2 * (L - 1 - l);
		hook_use(h, l, 1);
		nn_block_backward(need ? dx : NULL, &m->work->g[l], st->scratch,
		    dy, &a, &m->work->w[l], stack_in(st, l),
		    stack_shape(m, st, l), h->fn != NULL ? &hk : NULL);
		hook_call(h, at.stage + 1);
		float *t = dy;
		dy = dx, dx = t;
	}
	return want_dx ? dy : NULL;
}

/* block stack: per-sample loss the mean squared error over seq*d_model. */
static int
run_block(struct nn_model *m, const struct nn_batch *b, const struct hook *grad,
    double *loss, char *err, size_t errlen)
{
	struct stack st;

	if (stack_reserve(m, &st, b->n, b->seq, 0, grad) < 0)
		return cli_fail(err, errlen, "out of memory for a batch of %d",
		    b->n);
	st.in = b->x;
	float *y = stack_forward(m, &st, m->dims.causal, grad);
	double per = (double)b->seq * m->dims.d_model;
	*loss = nn_sqerr_forward(y, b->y, st.nd) / per;
	if (!grad)
		return 0;
	nn_bf16_keep_replay();
	memset(st.dxa, 0, st.nd * sizeof(float));
	nn_sqerr_backward(st.dxa, y, b->y, (float)(1.0 / per), st.nd);
	stack_backward(m, &st, m->dims.causal, 0, grad, 0);
	return 0;
}

/*
 * After a gpt's forward pass: the MoE blocks' statistics (per layer, E
 * routed counts then the dropped count), summed over ranks by the
 * model's moe_sum in a training pass (a forward-only pass keeps its
 * own), kept for nn_model_moe_stats; every MoE block's daux and, in
 * *aux, this batch's share of the auxiliary losses (in loss-sum units:
 * per sample, so A*E*f_e/S per token and position).
 */
static int
moe_finish(struct nn_model *m, struct stack *st, int train, double *aux,
    char *err, size_t errlen)
{
	const struct nn_dims *d = &m->dims;
	struct nn_work *k = m->work;
	int E = d->moe.experts, at = 0;
	double *sum = nn_moe_stats_buf(m);
	struct nn_block_acts a;

	*aux = 0.0;
	if (sum == NULL)
		return cli_fail(err, errlen, "out of memory");
	for (int l = 0; l < k->nlayers; l++) {
		if (!nn_dims_moe_layer(d, l))
			continue;
		stack_acts(m, st, l, &a);
		for (int e = 0; e < E; e++)
			sum[at++] = a.moe.routed[e];
		sum[at++] = *a.moe.dropped;
	}
	if (train && m->moe_sum != NULL && m->moe_sum(m->moe_ctx, sum,
	    (size_t)at) < 0)
		return cli_fail(err, errlen, "summing the experts' counts over "
		    "ranks failed");
	at = 0;
	for (int l = 0; l < k->nlayers; l++) {
		if (!nn_dims_moe_layer(d, l))
			continue;
		stack_acts(m, st, l, &a);
		if (d->moe_aux > 0)
			*aux += nn_moe_aux(a.moe.daux, sum + at, a.moe.psum, E,
			    d->moe_aux, st->s, 1.0);
		at += E + 1;
	}
	return 0;
}

/* Splits the token windows into inputs and targets, checking the range. */
static int32_t *
gpt_tokens(struct nn_model *m, const struct nn_batch *b, char *err,
    size_t errlen)
{
	struct nn_work *k = m->work;
	int S = m->dims.seq;
	size_t need = 2 * (size_t)b->n * S;

	if (need > k->tokcap) {
		int32_t *t = realloc(k->tok, need * sizeof(*t));
		if (!t) {
			cli_fail(err, errlen, "out of memory for a batch of %d",
			    b->n);
			return NULL;
		}
		k->tok = t, k->tokcap = need;
	}
	for (int i = 0; i < b->n; i++)
		for (int j = 0; j <= S; j++) {
			int32_t t = b->tokens[(size_t)i * (S + 1) + j];
			if (t < 0 || t >= m->dims.vocab) {
				cli_fail(err, errlen, "token %d at sample %d "
				    "position %d is outside the vocabulary "
				    "[0, %d)", (int)t, i, j, m->dims.vocab);
				return NULL;
			}
			if (j < S)
				k->tok[(size_t)i * S + j] = t;
			if (j > 0)
				k->tok[(size_t)(b->n + i) * S + j - 1] = t;
		}
	return k->tok;
}

/* gpt: embeddings, causal blocks, final LayerNorm, logits against the
 * tied wte; per-sample loss the mean cross-entropy over seq positions. */
static int
run_gpt(struct nn_model *m, const struct nn_batch *b, const struct hook *grad,
    double *loss, char *err, size_t errlen)
{
	const struct nn_dims *d = &m->dims;
	struct nn_work *k = m->work;
	int n = b->n, S = d->seq, D = d->d_model, V = d->vocab, N = n * S;
	size_t nd = (size_t)N * D, nv = (size_t)N * V;
	struct stack st;

	if (b->seq && b->seq != S)
		return cli_fail(err, errlen, "batch seq %d differs from the "
		    "model's %d", b->seq, S);
	int32_t *in = gpt_tokens(m, b, err, errlen), *tgt = in + N;
	if (!in)
		return -1;
	/* extra: embedding, final LayerNorm output, mean, rstd, probs, dlogits */
	if (stack_reserve(m, &st, n, S, 2 * nd + 2 * (size_t)N + 2 * nv,
	    grad) < 0)
		return cli_fail(err, errlen, "out of memory for a batch of %d", n);
	float *emb = st.extra, *xf = emb + nd, *mean = xf + nd;
	float *rstd = mean + N, *probs = rstd + N, *dlogits = probs + nv;

	hook_use(grad, -1, 0);
	nn_embedding_forward(emb, in, k->wte, k->wpe, n, S, D);
	st.in = emb;
	float *top = stack_forward(m, &st, 1, grad);
	hook_use(grad, -1, 0);
	nn_layernorm_forward_h(xf, nn_bf16_keep_room(xf, N, D), mean, rstd,
	    top, k->lnf_w, k->lnf_b, N, D);
	nn_linear_forward(probs, xf, k->wte, NULL, N, D, V);
	*loss = nn_xent_forward(probs, probs, tgt, N, V) / S;
	if (d->moe.experts > 0) {
		double aux;
		if (moe_finish(m, &st, grad != NULL, &aux, err, errlen) < 0)
			return -1;
		*loss += aux;
	}
	if (!grad)
		return 0;

	nn_bf16_keep_replay();
	memset(dlogits, 0, nv * sizeof(float));
	nn_xent_backward(dlogits, probs, tgt, 1.0f / S, N, V);
	hook_use(grad, -1, 1);
	nn_linear_backward_to(st.dxb, k->dwte, NULL, dlogits, xf, k->wte, N, D,
	    V);
	memset(st.dxa, 0, nd * sizeof(float));
	nn_layernorm_backward(st.dxa, k->dlnf_w, k->dlnf_b, st.dxb, top,
	    k->lnf_w, mean, rstd, N, D);
	hook_call(grad, 0);
	float *demb = stack_backward(m, &st, 1, 1, grad, 1);
	nn_embedding_backward(k->dwte, k->dwpe, demb, in, n, S, D);
	hook_call(grad, 2 * k->nlayers + 1);
	return 0;
}

static int
run(struct nn_model *m, const struct nn_batch *b, const struct hook *grad,
    double *loss, char *err, size_t errlen)
{
	*loss = 0.0;
	if (b->n < 0 || (m->dims.arch == NN_BLOCK && b->seq < 1))
		return cli_fail(err, errlen, "bad batch: %d samples of length %d",
		    b->n, b->seq);
	if (b->n == 0)
		return grad != NULL ? nn_moe_idle(m, err, errlen) : 0;
	if (m->dims.arch == NN_GPT ? !b->tokens : !b->x || !b->y)
		return cli_fail(err, errlen, "batch without %s",
		    m->dims.arch == NN_GPT ? "tokens" : "inputs and targets");
	if (m->dims.arch == NN_MLP)
		return run_mlp(m, b, grad, loss, err, errlen);
	int rc = m->dims.arch == NN_BLOCK ? run_block(m, b, grad, loss, err,
	    errlen) : run_gpt(m, b, grad, loss, err, errlen);
	nn_bf16_keep_end();	/* the stack's kept copies, if any */
	return rc;
}

int
nn_model_step(struct nn_model *m, const struct nn_batch *b, double *loss_sum,
    char *err, size_t errlen)
{
	struct hook h = { NULL, NULL, NULL };

	return run(m, b, &h, loss_sum, err, errlen);
}

int
nn_model_step_hook(struct nn_model *m, const struct nn_batch *b,
    double *loss_sum, nn_grad_fn fn, void *ctx, char *err, size_t errlen)
{
	struct hook h = { fn, ctx, NULL };

	return run(m, b, &h, loss_sum, err, errlen);
}

int
nn_model_step_use(struct nn_model *m, const struct nn_batch *b,
    double *loss_sum, nn_grad_fn fn, nn_use_fn use, void *ctx, char *err,
    size_t errlen)
{
	struct hook h = { fn, ctx, use };

	return run(m, b, &h, loss_sum, err, errlen);
}

int
nn_model_loss(struct nn_model *m, const struct nn_batch *b, double *loss_sum,
    char *err, size_t errlen)
{
	return run(m, b, NULL, loss_sum, err, errlen);
}
