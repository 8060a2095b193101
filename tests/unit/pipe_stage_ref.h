/* pipe_stage_ref: the unsharded pipeline stage, the reference the one
 * stage engine (lib/par's tp_stage, which every pipeline run drives)
 * is held to: test_tp_stage compares them bit for bit at T = 1, and
 * against it within rounding at T > 1. It was the runner's own stage
 * before runs of a TP group of one took tp_stage; written separately
 * from it, on the model's own parameters.
 *
 * One pipeline stage's math. A micro-batch's forward saves its
 * activations in a slot (input, every layer's output and saved
 * activations, the gpt head's), which its backward reads and frees; the
 * layers are lib/nn's kernels run on the slot's buffers. Under a split
 * schedule the backward is two passes: the input part keeps in the slot
 * what the weight part reads later, which then frees the slot (beside
 * each layer's activations, the stage's last mlp layer in its own output;
 * the gpt head's and embedding's weight gradients stay in the input
 * part). */
#ifndef COLLX_PIPE_STAGE_REF_H
#define COLLX_PIPE_STAGE_REF_H

#include <stdlib.h>
#include <string.h>

#include "cli/util.h"
#include "par/pipe_int.h"

struct pipe_stage {
	struct nn_model *m;
	const struct nn_dims *d;
	int j, w, l0, l1, gpt, first, last;
	int split;		/* backward in two passes (pipe_stage_weight) */
	int seq;		/* rows per sample: block, gpt; mlp 1 */
	size_t in_w, out_w;	/* floats per sample at the stage's ends */
	size_t act_w;		/* block: saved floats per sample per layer */
	size_t *off;		/* per sample, where layer k's output lies in
				 * a slot (lay_out), k = 0 .. l1 - l0 */
	int nmax;		/* largest micro-batch */
	size_t slot_cap;	/* floats per slot */
	struct pipe_slot *slot;
	int nslot, maxslot;	/* made, at most */
	size_t live, peak;	/* activation bytes */
	float *g[4];		/* gradient ping-pong, then two send buffers */
	float *scratch, *dlogits;
	float *wte, *wpe, *lnf_w, *lnf_b, *dwte, *dwpe, *dlnf_w, *dlnf_b;
};

/* The serial shape of n samples of this stage's blocks. */
static struct nn_block_shape
block_shape(const struct pipe_stage *st, int n)
{
	const struct nn_dims *d = st->d;

	return nn_block_serial(n, st->seq, d->d_model, d->heads, d->d_ff,
	    st->gpt || d->causal);
}

/* The one place nn_block_forward and nn_block_backward are called; a
 * serial block has no hooks, so neither can fail. */
static void
block_fwd(const struct pipe_stage *st, const struct nn_block_w *w, float *y,
    float *acts, const float *x, int n)
{
	struct nn_block_shape sh = block_shape(st, n);
	struct nn_block_acts a;

	nn_block_acts_bind(&a, acts, &sh);
	nn_block_forward(y, &a, w, x, &sh, NULL);
}

/* Which part of a layer's backward to run: all of it, or (split
 * schedules) the input part keeping in save what the weight part reads. */
enum part { WHOLE, INPUT, WEIGHT };

static void
block_bwd(const struct pipe_stage *st, enum part part, float *dx,
    const struct nn_block_w *g, const float *dy, float *acts, float *save,
    const struct nn_block_w *w, const float *x, int n)
{
	struct nn_block_shape sh = block_shape(st, n);
	struct nn_block_acts a;
	struct nn_block_wsave sv;

	nn_block_acts_bind(&a, acts, &sh);
	if (part == WHOLE) {
		nn_block_backward(dx, g, st->scratch, dy, &a, w, x, &sh, NULL);
		return;
	}
	nn_block_wsave_bind(&sv, save, &sh);
	if (part == INPUT)
		nn_block_backward_input(dx, &sv, st->scratch, dy, &a, w, x, &sh,
		    NULL);
	else
		nn_block_backward_weight(g, &sv, &a, x, &sh);
}

/* Floats per sample of layer l's input, output and saved activations,
 * and of the output gradients its input part keeps (split schedules). */
struct widths {
	size_t in, out, acts, save;
};

static struct widths
layer_widths(const struct pipe_stage *st, int l)
{
	struct nn_mlp_shape ms;

	if (st->d->arch != NN_MLP) {
		struct nn_block_shape one = block_shape(st, 1);
		return (struct widths){ st->out_w, st->out_w, st->act_w,
		    st->split ? nn_block_wsave_size(&one) : 0 };
	}
	nn_model_mlp_shape(st->m, l, &ms);
	return (struct widths){ (size_t)ms.in, (size_t)ms.out,
	    2 * (size_t)ms.hidden, st->split && l < st->l1 - 1 ?
	    (size_t)ms.out : 0 };
}

static void
layer_fwd(const struct pipe_stage *st, int l, float *y, float *acts,
    const float *x, int n)
{
	struct nn_mlp_shape ms;
	struct nn_mlp_w mw, mg;
	struct nn_block_w bw, bg;

	if (st->d->arch == NN_MLP) {
		nn_model_mlp_shape(st->m, l, &ms);
		struct nn_mlp_acts a = { acts, acts + (size_t)n * ms.hidden };
		nn_model_mlp(st->m, l, &mw, &mg);
		nn_mlp_forward(y, &a, &mw, x, n, ms.in, ms.hidden, ms.out,
		    NN_ACT_GELU);
		return;
	}
	nn_model_block(st->m, l, &bw, &bg);
	block_fwd(st, &bw, y, acts, x, n);
}

/* A part of the layer's backward (dx, dy unused by WEIGHT). An mlp's
 * input part runs both input gradients and keeps for the weight part
 * fc1's output gradient where fc1's output was (the weight part needs
 * only the activation after it) and the layer's output gradient in save:
 * so B and W cost two matrix products each, as a forward does. A block
 * keeps its output gradients in save. */
static void
layer_bwd(const struct pipe_stage *st, int l, enum part part, float *dx,
    const float *dy, float *acts, float *save, const float *x, int n)
{
	struct nn_mlp_shape ms;
	struct nn_mlp_w mw, mg;
	struct nn_block_w bw, bg;

	if (st->d->arch != NN_MLP) {
		nn_model_block(st->m, l, &bw, &bg);
		block_bwd(st, part, dx, &bg, dy, acts, save, &bw, x, n);
		return;
	}
	nn_model_mlp_shape(st->m, l, &ms);
	struct nn_mlp_acts a = { acts, acts + (size_t)n * ms.hidden };
	size_t nh = (size_t)n * ms.hidden;
	nn_model_mlp(st->m, l, &mw, &mg);
	if (part == WHOLE)
		nn_mlp_backward(dx, &mg, st->scratch, dy, &a, &mw, x, n, ms.in,
		    ms.hidden, ms.out, NN_ACT_GELU);
	else if (part == WEIGHT)
		nn_mlp_backward_weight(&mg, save, a.fc1, &a, x, n, ms.in,
		    ms.hidden, ms.out);
	else {
		nn_mlp_backward_input(dx, st->scratch + nh, st->scratch, dy, &a,
		    &mw, n, ms.in, ms.hidden, ms.out, NN_ACT_GELU);
		memcpy(a.fc1, st->scratch + nh, nh * sizeof(float));
		memcpy(save, dy, (size_t)n * ms.out * sizeof(float));
	}
}

/* Floats per sample of the gpt head's saved values (last stage). */
static size_t
head_w(const struct pipe_stage *st)
{
	const struct nn_dims *d = st->d;

	if (!st->gpt || !st->last)
		return 0;
	return (size_t)st->seq * ((size_t)d->d_model + 2 + (size_t)d->vocab);
}

/* The output of the stage's k-th layer in a slot (k = the layer count:
 * the gpt head's values), then the layer's saved activations. */
static float *
lay_out(const struct pipe_stage *st, const struct pipe_slot *sl, int k)
{
	return sl->f + (size_t)sl->n * st->off[k];
}

static float *
lay_acts(const struct pipe_stage *st, const struct pipe_slot *sl, int k)
{
	return lay_out(st, sl, k) + (size_t)sl->n *
	    layer_widths(st, st->l0 + k).out;
}

/* Split schedules: the output gradients a layer keeps for the weight
 * pass, after its activations; the stage's last mlp layer keeps its own
 * in its output, unused once B has run, so that layer costs no more
 * bytes than under 1F1B (NULL when not split). */
static float *
lay_save(const struct pipe_stage *st, const struct pipe_slot *sl, int k)
{
	struct widths lw = layer_widths(st, st->l0 + k);

	if (lw.save)
		return lay_out(st, sl, k) + (size_t)sl->n * (lw.out + lw.acts);
	return st->split && st->d->arch == NN_MLP ? lay_out(st, sl, k) : NULL;
}

/* The input of the stage's k-th layer in a slot. */
static const float *
lay_in(const struct pipe_stage *st, const struct pipe_slot *sl, int k)
{
	return k ? lay_out(st, sl, k - 1) : st->gpt && st->first ? sl->f :
	    sl->inp;
}

/* Where each layer's output lies in a slot, per sample: after the input
 * and the layers before it with their activations; the widest input or
 * output (gradients), and hidden width (mlp backward's scratch). */
static int
lay_offsets(struct pipe_stage *st, size_t *wide, size_t *hid)
{
	int k, nl = st->l1 - st->l0;

	if ((st->off = calloc((size_t)nl + 1, sizeof(size_t))) == NULL)
		return -1;
	st->off[0] = st->in_w;
	*wide = st->in_w, *hid = 0;
	for (k = 0; k < nl; k++) {
		struct widths lw = layer_widths(st, st->l0 + k);
		st->off[k + 1] = st->off[k] + lw.out + lw.acts + lw.save;
		if (lw.out > *wide)
			*wide = lw.out;
		if (lw.acts / 2 > *hid)
			*hid = lw.acts / 2;
	}
	return 0;
}

static void
bind_gpt(struct pipe_stage *st)
{
	static const char *name[] = { "wte", "wpe", "lnf.weight", "lnf.bias" };
	float **w[] = { &st->wte, &st->wpe, &st->lnf_w, &st->lnf_b };
	float **g[] = { &st->dwte, &st->dwpe, &st->dlnf_w, &st->dlnf_b };
	const struct nn_param *p;
	size_t i;

	for (i = 0; i < 4; i++)
		if ((p = nn_model_param(st->m, name[i])) != NULL) {
			*w[i] = st->m->params + p->offset;
			*g[i] = st->m->grads + p->offset;
		}
}

static void pipe_stage_free(struct pipe_stage *st);

static int
pipe_stage_init(struct pipe_stage *st, struct nn_model *m, int j, int w,
    int l0, int l1, int seq, int nmax, int maxslot, int split, char *err,
    size_t errlen)
{
	const struct nn_dims *d = &m->dims;
	size_t gw, hid, scr, S;
	int i;

	memset(st, 0, sizeof(*st));
	st->m = m, st->d = d, st->j = j, st->w = w, st->l0 = l0, st->l1 = l1;
	st->split = split;
	st->gpt = d->arch == NN_GPT, st->first = j == 0, st->last = j == w - 1;
	st->seq = d->arch == NN_MLP ? 1 : st->gpt ? d->seq : seq;
	st->nmax = nmax;
	S = (size_t)st->seq;
	scr = 0;
	if (d->arch != NN_MLP) {
		st->out_w = S * d->d_model;
		struct nn_block_shape one = block_shape(st, 1);
		struct nn_block_shape all = block_shape(st, nmax);

		st->act_w = nn_block_acts_size(&one);
		scr = nn_block_scratch_size(&all);
	}
	st->in_w = layer_widths(st, l0).in;
	st->out_w = layer_widths(st, l1 - 1).out;
	if (lay_offsets(st, &gw, &hid) < 0)
		return cli_fail(err, errlen, "out of memory for stage %d", j);
	if (d->arch == NN_MLP)
		scr = 2 * (size_t)nmax * hid;
	st->slot_cap = (size_t)nmax * (st->off[l1 - l0] + head_w(st));
	gw *= (size_t)nmax;
	st->scratch = malloc(scr * sizeof(float));
	for (i = 0; i < 4; i++)
		st->g[i] = malloc(gw * sizeof(float));
	if (st->gpt && st->last)
		st->dlogits = malloc((size_t)nmax * S * d->vocab * sizeof(float));
	st->maxslot = maxslot;
	st->slot = calloc((size_t)maxslot, sizeof(*st->slot));
	if (!st->slot || !st->scratch || !st->g[0] || !st->g[1] || !st->g[2] || !st->g[3] ||
	    (st->gpt && st->last && !st->dlogits)) {
		pipe_stage_free(st);
		return cli_fail(err, errlen, "out of memory for stage %d", j);
	}
	if (st->gpt)
		bind_gpt(st);
	return 0;
}

static void
pipe_stage_free(struct pipe_stage *st)
{
	int i;

	for (i = 0; i < st->nslot; i++) {
		free(st->slot[i].f);
		free(st->slot[i].tok);
	}
	free(st->slot);
	for (i = 0; i < 4; i++)
		free(st->g[i]);
	free(st->scratch);
	free(st->dlogits);
	free(st->off);
	memset(st, 0, sizeof(*st));
}

/* Activation bytes a micro-batch of n holds on this stage. */
static size_t
slot_bytes(const struct pipe_stage *st, int n)
{
	size_t in = st->first && !st->gpt ? st->in_w : 0;
	size_t tok = st->gpt ? 2 * st->seq : 0;

	return (size_t)n * ((st->off[st->l1 - st->l0] - in + head_w(st)) *
	    sizeof(float) + tok * sizeof(int32_t));
}

static struct pipe_slot *
pipe_stage_acquire(struct pipe_stage *st, int n)
{
	struct pipe_slot *sl = NULL;
	int i;

	for (i = 0; i < st->nslot && sl == NULL; i++)
		if (!st->slot[i].busy)
			sl = &st->slot[i];
	if (sl == NULL) {
		/* Slots are made as the micro-batches in flight need them. */
		if (st->nslot == st->maxslot)
			return NULL;
		sl = &st->slot[st->nslot];
		sl->f = malloc(st->slot_cap * sizeof(float));
		if (st->gpt)
			sl->tok = malloc(2 * (size_t)st->nmax * st->seq *
			    sizeof(int32_t));
		if (sl->f == NULL || (st->gpt && sl->tok == NULL)) {
			free(sl->f);
			free(sl->tok);
			sl->f = NULL, sl->tok = NULL;
			return NULL;
		}
		st->nslot++;
	}
	sl->busy = 1;
	sl->n = n;
	sl->inp = sl->f;
	sl->bytes = slot_bytes(st, n);
	st->live += sl->bytes;
	if (st->live > st->peak)
		st->peak = st->live;
	return sl;
}

static float *
pipe_stage_input(struct pipe_stage *st, struct pipe_slot *sl)
{
	(void)st;
	return sl->f;
}

static const float *
pipe_stage_forward(struct pipe_stage *st, struct pipe_slot *sl, double *loss)
{
	const struct nn_dims *d = st->d;
	const float *x = sl->inp;
	int k, n = sl->n, N = n * st->seq, nl = st->l1 - st->l0;

	if (st->gpt && st->first) {
		nn_embedding_forward(sl->f, sl->tok, st->wte, st->wpe, n,
		    st->seq, d->d_model);
		x = sl->f;
	}
	for (k = 0; k < nl; k++) {
		layer_fwd(st, st->l0 + k, lay_out(st, sl, k), lay_acts(st, sl, k),
		    x, n);
		x = lay_out(st, sl, k);
	}
	if (!st->last)
		return x;
	if (st->gpt) {
		float *xf = lay_out(st, sl, nl), *mean = xf + (size_t)N * d->d_model;
		float *rstd = mean + N, *probs = rstd + N;

		nn_layernorm_forward(xf, mean, rstd, x, st->lnf_w, st->lnf_b, N,
		    d->d_model);
		nn_linear_forward(probs, xf, st->wte, NULL, N, d->d_model,
		    d->vocab);
		*loss += nn_xent_forward(probs, probs, sl->tok + N, N, d->vocab) /
		    st->seq;
	} else
		*loss += nn_sqerr_forward(x, sl->y, (size_t)n * st->out_w) /
		    (double)st->out_w;
	return x;
}

/* The gradient at the last stage's output, into g: of the mean squared
 * error, or through the gpt head (logits against the tied wte). */
static void
loss_backward(struct pipe_stage *st, struct pipe_slot *sl, float *g,
    float *tmp)
{
	const struct nn_dims *d = st->d;
	int n = sl->n, N = n * st->seq, nl = st->l1 - st->l0, D = d->d_model;
	const float *top = lay_out(st, sl, nl - 1);

	if (!st->gpt) {
		memset(g, 0, (size_t)n * st->out_w * sizeof(float));
		nn_sqerr_backward(g, top, sl->y, (float)(1.0 / (double)st->out_w),
		    (size_t)n * st->out_w);
		return;
	}
	float *xf = lay_out(st, sl, nl), *mean = xf + (size_t)N * D;
	float *rstd = mean + N, *probs = rstd + N;

	memset(st->dlogits, 0, (size_t)N * d->vocab * sizeof(float));
	nn_xent_backward(st->dlogits, probs, sl->tok + N, 1.0f / st->seq, N,
	    d->vocab);
	memset(tmp, 0, (size_t)N * D * sizeof(float));
	nn_linear_backward(tmp, st->dwte, NULL, st->dlogits, xf, st->wte, N, D,
	    d->vocab);
	memset(g, 0, (size_t)N * D * sizeof(float));
	nn_layernorm_backward(g, st->dlnf_w, st->dlnf_b, tmp, top, st->lnf_w,
	    mean, rstd, N, D);
}

static void
pipe_stage_backward(struct pipe_stage *st, struct pipe_slot *sl, float *dy,
    float *dx)
{
	int k, n = sl->n, nl = st->l1 - st->l0;
	float *cur = st->g[0], *other = st->g[1], *t;

	if (st->last)
		loss_backward(st, sl, cur, other);
	else if (dy != cur) {
		cur = dy;
		other = dy == st->g[1] ? st->g[0] : st->g[1];
	}
	for (k = nl - 1; k >= 0; k--) {
		int l = st->l0 + k;
		int want = k > 0 || dx != NULL || (st->gpt && st->first);
		float *tgt = k == 0 && dx != NULL ? dx : other;

		if (want)
			memset(tgt, 0, (size_t)n * layer_widths(st, l).in *
			    sizeof(float));
		layer_bwd(st, l, st->split ? INPUT : WHOLE, want ? tgt : NULL,
		    cur, lay_acts(st, sl, k), lay_save(st, sl, k),
		    lay_in(st, sl, k), n);
		t = cur, cur = tgt, other = t;
	}
	if (st->gpt && st->first)
		nn_embedding_backward(st->dwte, st->dwpe, cur, sl->tok, n,
		    st->seq, st->d->d_model);
}

static void
pipe_stage_weight(struct pipe_stage *st, struct pipe_slot *sl)
{
	for (int k = st->l1 - st->l0 - 1; k >= 0; k--)
		layer_bwd(st, st->l0 + k, WEIGHT, NULL, NULL,
		    lay_acts(st, sl, k), lay_save(st, sl, k), lay_in(st, sl, k),
		    sl->n);
}

#endif
