/* tp_stage: a pipeline stage's layers sharded over a tensor-parallel
 * group: the shards' layout and loading (collx-tp's tp_model per layer,
 * its shards in the stage's one buffer), gathering them back, and the
 * forward and backward pass of a micro-batch, lib/nn's layers on this
 * rank's heads and features with Megatron's f and g sums between them.
 * A split backward (zero-bubble schedules) is the unsharded stage's (the
 * tests' pipe_stage_ref.h), on the same layout: the input part runs only input gradients and every sum, and
 * keeps what the weight part reads (an mlp fc1's output gradient where
 * fc1's output was and the layer's output gradient beside its saved
 * values, the stage's last layer in its own output; a block beside it),
 * so the weight part runs every weight gradient and sends nothing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "cli/util.h"
#include "comm/coll.h"
#include "par/cp_stage.h"
#include "par/ep.h"
#include "par/pipe_int.h"
#include "par/tp_int.h"
#include "par/tp_stage.h"

int
tp_stage_check(const struct nn_model *m, int l0, int l1, int T, char *err,
    size_t errlen)
{
	const struct nn_dims *d = &m->dims;
	struct nn_mlp_shape ms;

	int nl = d->layers > 0 ? d->layers : 1;

	if (T < 1)
		return cli_fail(err, errlen, "tensor-parallel size %d is not "
		    "positive", T);
	if (l0 < 0 || l1 <= l0 || l1 > nl)
		return cli_fail(err, errlen, "layers [%d, %d) are not a run of "
		    "the model's %d", l0, l1, nl);
	if (d->arch != NN_MLP) {
		if (d->heads % T != 0)
			return cli_fail(err, errlen, "%d attention heads are "
			    "not divisible by tensor-parallel size %d",
			    d->heads, T);
		if (d->d_ff % T != 0)
			return cli_fail(err, errlen, "feed-forward width %d is "
			    "not divisible by tensor-parallel size %d", d->d_ff,
			    T);
		return 0;
	}
	for (int l = l0; l < l1; l++)
		if (nn_model_mlp_shape(m, l, &ms) == 0 && ms.hidden % T != 0)
			return cli_fail(err, errlen, "mlp layer %d's hidden "
			    "width %d is not divisible by tensor-parallel "
			    "size %d", l, ms.hidden, T);
	return 0;
}

float *
tp_stage_vec(size_t n, int zero)
{
	void *p;

	if (posix_memalign(&p, 64, (n ? n : 1) * sizeof(float)) != 0)
		return NULL;
	if (zero)
		memset(p, 0, n * sizeof(float));
	return p;
}

/* A huge page's bytes (x86-64's 2 MiB). With 4 KiB pages the 8 MiB each
 * of an 8-layer mlp stage's parameters and gradients took a TLB miss
 * every few rows of each weight the products packed: 5-6% of the
 * stage's CPU time in collx-pipe. */
#define TP_STAGE_HUGE ((size_t)2 << 20)

float *
tp_stage_vec_huge(size_t n, int zero)
{
	size_t bytes = n * sizeof(float);
	void *p;

	if (bytes < TP_STAGE_HUGE)
		return tp_stage_vec(n, zero);
	if (posix_memalign(&p, TP_STAGE_HUGE, bytes) != 0)
		return NULL;
#ifdef MADV_HUGEPAGE
	(void)madvise(p, bytes, MADV_HUGEPAGE);	/* before the first touch */
#endif
	if (zero)
		memset(p, 0, bytes);
	return p;
}

/* ---- the shards ------------------------------------------------------- */

static const char *const gpt_names[] = { "wte", "wpe", "lnf.weight",
    "lnf.bias" };

/* Whether the stage holds gpt tensor i of gpt_names. */
static int
holds_gpt(const struct tp_stage *ts, int i)
{
	return ts->gpt && (i == 0 ? ts->first || ts->last :
	    i == 1 ? ts->first : ts->last);
}

static const char *
layer_prefix(const struct tp_stage *ts, int l, char *buf, size_t len)
{
	if (ts->d.arch != NN_GPT && ts->d.layers == 0)
		buf[0] = '\0';
	else
		snprintf(buf, len, "layers.%d.", l);
	return buf;
}

/* Layer l's tensors of m, under the layer's own names, as collx-tp loads
 * a layer: their shapes only, without data (NULL), which tp_model_plan
 * never reads; the stage's shards come from m itself (tp_stage_take). */
static int
layer_set(const struct tp_stage *ts, const struct nn_model *m, int l,
    struct tensor_set *s, char *err, size_t errlen)
{
	char pre[NN_NAME_MAX];
	size_t np = strlen(layer_prefix(ts, l, pre, sizeof pre));

	memset(s, 0, sizeof(*s));
	s->format = TENSOR_SAFETENSORS;
	for (size_t i = 0; i < m->ntensors; i++) {
		const struct nn_param *p = &m->table[i];
		struct tensor t = { .dtype = DT_F32, .ndim = p->ndim };
		if (strncmp(p->name, pre, np) != 0)
			continue;
		memcpy(t.shape, p->shape, (size_t)p->ndim * sizeof(t.shape[0]));
		if (tensor_set_add(s, p->name + np, &t, err, errlen) < 0) {
			tensor_set_free(s);
			return -1;
		}
	}
	return 0;
}

static struct tp_cfg
layer_cfg(const struct tp_stage *ts)
{
	struct tp_cfg cfg = { .layer = ts->d.arch == NN_MLP ? TP_MLP : TP_BLOCK,
	    .mode = TP_MODE_TP, .heads = ts->d.heads,
	    .causal = ts->gpt || ts->d.causal, .act = NN_ACT_GELU };

	return cfg;
}

/* Each layer's layout; *count the floats of the stage's shards. */
static int
plan_layers(struct tp_stage *ts, const struct nn_model *m, size_t *count,
    char *err, size_t errlen)
{
	struct tp_cfg cfg = layer_cfg(ts);
	struct tensor_set s;
	int rc;

	*count = 0;
	for (int k = 0; k < ts->l1 - ts->l0; k++) {
		if (layer_set(ts, m, ts->l0 + k, &s, err, errlen) < 0)
			return -1;
		rc = tp_model_plan(&ts->lay[k], &cfg, &s, ts->rank, ts->T, err,
		    errlen);
		tensor_set_free(&s);
		if (rc < 0)
			return -1;
		*count += ts->lay[k].nlocal;
	}
	return 0;
}

/* The layers' and the gpt tensors' views into params and grads. */
static void
bind_views(struct tp_stage *ts)
{
	float **w[] = { &ts->wte, &ts->wpe, &ts->lnf_w, &ts->lnf_b };
	float **g[] = { &ts->dwte, &ts->dwpe, &ts->dlnf_w, &ts->dlnf_b };
	size_t off = 0;

	for (int k = 0; k < ts->l1 - ts->l0; k++) {
		ts->lay[k].w = ts->params + off;
		ts->lay[k].g = ts->grads + off;
		off += ts->lay[k].nlocal;
	}
	for (size_t t = 0; t < ts->nten; t++)
		for (int i = 0; i < 4; i++)
			if (strcmp(ts->ten[t].name, gpt_names[i]) == 0) {
				*w[i] = ts->params + ts->ten[t].p.off;
				*g[i] = ts->grads + ts->ten[t].p.off;
			}
}

/* The table of what this rank holds; the views into params and grads. */
static int
bind_tensors(struct tp_stage *ts, const struct nn_model *m)
{
	size_t off = 0, n = 4;
	char pre[NN_NAME_MAX];

	for (int k = 0; k < ts->l1 - ts->l0; k++)
		n += (size_t)ts->lay[k].np;
	if ((ts->ten = calloc(n, sizeof(*ts->ten))) == NULL)
		return -1;
	for (int k = 0; k < ts->l1 - ts->l0; k++) {
		struct tp_model *lm = &ts->lay[k];
		layer_prefix(ts, ts->l0 + k, pre, sizeof pre);
		for (int i = 0; i < lm->np; i++) {
			struct tp_stage_tensor *t = &ts->ten[ts->nten];
			if (!lm->p[i].present)
				continue;
			snprintf(t->name, sizeof t->name, "%s%s", pre,
			    lm->p[i].name);
			t->p = lm->p[i];
			t->p.off += off;
			ts->nten++;
		}
		off += lm->nlocal;
	}
	for (int i = 0; i < 4; i++) {
		const struct nn_param *p = nn_model_param(m, gpt_names[i]);
		struct tp_stage_tensor *t = &ts->ten[ts->nten];
		if (!holds_gpt(ts, i) || p == NULL)
			continue;
		snprintf(t->name, sizeof t->name, "%s", gpt_names[i]);
		t->p = (struct tp_param){ .name = gpt_names[i],
		    .split = TP_WHOLE, .ndim = p->ndim, .shape = { p->shape[0],
		    p->ndim == 2 ? p->shape[1] : 1 }, .present = 1, .off = off,
		    .count = p->count };
		off += p->count;
		ts->nten++;
	}
	return 0;
}

int
tp_stage_keep_experts(struct tp_stage *ts, const struct nn_model *m, int e0,
    int n)
{
	for (int k = 0; k < ts->l1 - ts->l0; k++) {
		struct tp_model *lm = &ts->lay[k];
		size_t off = 0;

		for (int i = 0; i < lm->np; i++) {
			struct tp_param *p = &lm->p[i];
			int e = ep_expert_of(p->name);

			if (e >= 0 && (e < e0 || e >= e0 + n))
				p->present = 0, p->count = 0;
			if (p->present)
				p->off = off, off += p->count;
		}
		ts->nlocal -= lm->nlocal - off;
		lm->nlocal = off;
	}
	free(ts->ten);
	ts->ten = NULL, ts->nten = 0;
	return bind_tensors(ts, m);
}

void
tp_stage_place(struct tp_stage *ts, float *params, float *grads)
{
	ts->params = params, ts->grads = grads, ts->placed = 1;
	bind_views(ts);
}

/* Where tensor t lies in the whole model's layout. */
static size_t
model_off(const struct nn_model *m, const struct tp_stage_tensor *t)
{
	return nn_model_param(m, t->name)->offset;
}

void
tp_stage_take(const struct tp_stage *ts, const struct nn_model *m,
    const float *whole, float *mine)
{
	for (size_t i = 0; i < ts->nten; i++) {
		const struct tp_param *p = &ts->ten[i].p;
		tp_param_take(p, ts->rank, whole + model_off(m, &ts->ten[i]),
		    mine + p->off);
	}
}

int
tp_stage_gather(struct tp_stage *ts, const float *mine,
    const struct nn_model *m, float *out)
{
	for (size_t i = 0; i < ts->nten; i++) {
		const struct tp_param *p = &ts->ten[i].p;
		size_t whole = p->count * (p->split == TP_WHOLE ? 1 : ts->T);
		if (ts->T > 1 && tp_param_gather(ts->c, p, ts->T, mine + p->off,
		    ts->whole, ts->whole + whole) < 0)
			return cli_fail(ts->err, ts->errlen, "TP group: %s",
			    comm_error(ts->c));
		if (ts->rank == 0)
			memcpy(out + model_off(m, &ts->ten[i]), ts->T > 1 ?
			    ts->whole : mine + p->off, whole * sizeof(float));
	}
	return 0;
}

void
tp_stage_zero_grad(struct tp_stage *ts)
{
	memset(ts->grads, 0, ts->nlocal * sizeof(float));
}

/* ---- the layers ------------------------------------------------------- */

/* This rank's shape of n samples of layer k's block. */
static struct nn_block_shape
block_shape(const struct tp_stage *ts, int k, int n)
{
	const struct tp_model *lm = &ts->lay[k];
	struct nn_block_shape sh = { .b = n, .s = ts->seq, .d = lm->d,
	    .nh = lm->heads / lm->shards, .hd = lm->d / lm->heads,
	    .f = lm->f / lm->shards, .causal = lm->cfg.causal,
	    .act = NN_ACT_GELU };

	if (lm->experts > 0) {	/* experts whole on every TP rank */
		sh.moe = ts->d.moe;
		sh.moe.ep = ts->ep;
		sh.moe.route = cp_stage_router(ts);
		sh.f = lm->f;
	}
	return sh;
}

/* Floats per sample of layer k's input and output (whole), saved values
 * (this rank's) and the output gradients its input part keeps (split:
 * a block's, this rank's; an mlp's, whole, but the stage's last layer's,
 * kept in its output). */
struct widths {
	size_t in, out, acts, save;
};

static struct widths
layer_widths(const struct tp_stage *ts, int k)
{
	const struct tp_model *lm = &ts->lay[k];
	struct nn_block_shape one;

	if (lm->cfg.layer == TP_MLP)
		return (struct widths){ (size_t)lm->in, (size_t)lm->out,
		    2 * (size_t)(lm->hidden / lm->shards), ts->split &&
		    k < ts->l1 - ts->l0 - 1 ? (size_t)lm->out : 0 };
	one = block_shape(ts, k, 1);
	return (struct widths){ (size_t)ts->seq * lm->d,
	    (size_t)ts->seq * lm->d, nn_block_acts_size(&one),
	    ts->split ? nn_block_wsave_size(&one) : 0 };
}

/* A use of layer l's weights (ts->use's). */
static void
use(struct tp_stage *ts, int l, int backward)
{
	if (ts->use != NULL)
		ts->use(ts->use_ctx, l, backward);
}

/* g's and f's sum over the group, in place. */
static int
group_sum(struct tp_stage *ts, float *buf, size_t count)
{
	double t0, t1;

	if (ts->T == 1 || count == 0)	/* count 0: an MoE's, whole */
		return 0;
	if (ts->done != NULL)
		ts->done(ts->done_ctx, TP_STAGE_SUMMING);
	use(ts, TP_STAGE_SUMMING, 0);
	t0 = cli_now();
	if (coll_allreduce(ts->c, buf, count, DT_F32, COLL_SUM, COLL_RING) < 0)
		return cli_fail(ts->err, ts->errlen, "TP group: %s",
		    comm_error(ts->c));
	t1 = cli_now();
	ts->coll_s += t1 - t0;
	if (ts->on_sum != NULL)
		ts->on_sum(ts->on_sum_ctx, t0, t1);
	return 0;
}

static int
reduce_hook(void *ctx, enum nn_hook where, float *buf, size_t count)
{
	(void)where;
	return group_sum(ctx, buf, count);
}

static const struct nn_block_hooks *
hooks(struct tp_stage *ts, struct nn_block_hooks *hk)
{
	*hk = (struct nn_block_hooks){ .reduce = reduce_hook, .ctx = ts };
	if (ts->cp != NULL)
		return cp_stage_hooks(ts, hk);
	return ts->T > 1 ? hk : NULL;
}

/* Where layer k's MoE statistics start in ts->moe. */
static int
moe_at(const struct tp_stage *ts, int k)
{
	int at = 0;

	for (int l = 0; l < ts->l0 + k; l++)
		at += nn_dims_moe_layer(&ts->d, l) ? ts->d.moe.experts + 1 : 0;
	return at;
}

/* Layer k's MoE statistics of a forward pass added to the step's. */
static void
moe_add(struct tp_stage *ts, int k, const struct nn_block_acts *a)
{
	int E = ts->d.moe.experts, at = moe_at(ts, k);

	for (int e = 0; e < E; e++) {
		ts->moe[at + e] += a->moe.routed[e];
		ts->moe_psum[at + e] += a->moe.psum[e];
	}
	ts->moe[at + E] += *a->moe.dropped;
}

/* The experts' exchanges hold the links while they run, as the TP sums
 * do: a DP sum overlapping the backward waits (the done hook), and
 * ZeRO-3's gathers and reduce-scatters in flight (the use hook). */
static void
ep_alone(struct tp_stage *ts, const struct tp_model *lm)
{
	if (ts->ep == NULL || lm->experts == 0)
		return;
	if (ts->done != NULL)
		ts->done(ts->done_ctx, TP_STAGE_SUMMING);
	use(ts, TP_STAGE_SUMMING, 0);
}

/* y = layer k of x, its values saved in acts; n samples. */
static int
layer_fwd(struct tp_stage *ts, int k, float *y, float *acts, const float *x,
    int n)
{
	struct tp_model *lm = &ts->lay[k];
	struct nn_block_hooks hk;

	if (lm->cfg.layer == TP_BLOCK) {
		struct nn_block_shape sh = block_shape(ts, k, n);
		struct nn_block_w bw = tp_block_ptrs(lm, lm->w);
		struct nn_block_acts a;
		nn_block_acts_bind(&a, acts, &sh);
		if (ts->cp != NULL)
			cp_stage_bind(ts, &a, n);
		ep_alone(ts, lm);
		if (nn_block_forward(y, &a, &bw, x, &sh, hooks(ts, &hk)) < 0)
			return -1;
		if (lm->experts > 0)
			moe_add(ts, k, &a);
		return 0;
	}
	struct nn_mlp_w mw = tp_mlp_ptrs(lm, lm->w);
	int hl = lm->hidden / lm->shards;
	struct nn_mlp_acts a = { acts, acts + (size_t)n * hl };
	float *bias = mw.fc2_b;

	if (ts->T > 1)
		mw.fc2_b = NULL;	/* g: added once, after the sum */
	nn_mlp_forward(y, &a, &mw, x, n, lm->in, hl, lm->out, NN_ACT_GELU);
	if (ts->T == 1)
		return 0;
	if (group_sum(ts, y, (size_t)n * lm->out) < 0)
		return -1;
	nn_add_rows(y, bias, (size_t)n, (size_t)lm->out);
	return 0;
}

/* Which part of a layer's backward to run: all of it, or (split) the
 * input part with the sums, keeping what the weight part reads. */
enum part { WHOLE, INPUT, WEIGHT };

static int
block_bwd(struct tp_stage *ts, int k, enum part part, float *dx,
    const float *dy, float *acts, float *save, const float *x, int n)
{
	struct tp_model *lm = &ts->lay[k];
	struct nn_block_shape sh = block_shape(ts, k, n);
	struct nn_block_w bw = tp_block_ptrs(lm, lm->w);
	struct nn_block_w bg = tp_block_ptrs(lm, lm->g);
	struct nn_block_hooks hk;
	struct nn_block_acts a;
	struct nn_block_wsave sv;

	nn_block_acts_bind(&a, acts, &sh);
	if (ts->cp != NULL)
		cp_stage_bind(ts, &a, n);
	if (lm->experts > 0)	/* the auxiliary loss's, or zeros */
		memcpy(a.moe.daux, ts->moe_daux + moe_at(ts, k),
		    (size_t)sh.moe.experts * sizeof(float));
	if (part != WEIGHT)
		ep_alone(ts, lm);
	/* an MoE block's backward does not split: all of it runs in the
	 * input part (its exchanges with it), none in the weight part */
	if (part == WHOLE || (lm->experts > 0 && part == INPUT))
		return nn_block_backward(dx, &bg, ts->scratch, dy, &a, &bw, x,
		    &sh, hooks(ts, &hk));
	if (lm->experts > 0)
		return 0;
	nn_block_wsave_bind(&sv, save, &sh);
	if (part == INPUT)
		return nn_block_backward_input(dx, &sv, ts->scratch, dy, &a,
		    &bw, x, &sh, hooks(ts, &hk));
	nn_block_backward_weight(&bg, &sv, &a, x, &sh);
	return 0;
}

/* An early stage's room (tp_stage_early) for layer k: its output
 * gradient (dy; the top layer keeps its own in its output, so none),
 * then fc1's output gradient (dfc1), n = nmax each. */
static float *
early_room(const struct tp_stage *ts, int k, int dfc1)
{
	float *e = ts->esave;

	for (int q = 0;; q++) {
		struct widths lw = layer_widths(ts, q);
		size_t dy = q < ts->l1 - ts->l0 - 1 ? (size_t)ts->nmax * lw.out : 0;
		if (q == k)
			return dfc1 ? e + dy : e;
		e += dy + (size_t)ts->nmax * lw.acts / 2;
	}
}

/* A part of layer k's backward: dx (zeroed, or NULL) = the gradient at
 * its input x from dy (both unused by WEIGHT), f's sum after it. An
 * mlp's input part runs both input gradients and keeps fc1's output
 * gradient where fc1's output was and dy (whole: fc2's row-parallel
 * weight gradient is this rank's columns of it) in save, as the
 * unsharded stage does: B and W cost two matrix products each, as a forward does. */
static int
layer_bwd(struct tp_stage *ts, int k, enum part part, float *dx,
    const float *dy, float *acts, float *save, const float *x, int n)
{
	struct tp_model *lm = &ts->lay[k];

	if (lm->cfg.layer == TP_BLOCK)
		return block_bwd(ts, k, part, dx, dy, acts, save, x, n);
	struct nn_mlp_w mw = tp_mlp_ptrs(lm, lm->w);
	struct nn_mlp_w mg = tp_mlp_ptrs(lm, lm->g);
	int hl = lm->hidden / lm->shards;
	struct nn_mlp_acts a = { acts, acts + (size_t)n * hl };
	size_t nh = (size_t)n * hl;

	if (part == WHOLE)
		nn_mlp_backward(dx, &mg, ts->scratch, dy, &a, &mw, x, n, lm->in,
		    hl, lm->out, NN_ACT_GELU);
	else if (part == WEIGHT)
		nn_mlp_backward_weight(&mg, save, ts->early ? early_room(ts, k,
		    1) : a.fc1, &a, x, n, lm->in, hl, lm->out);
	else {
		/* early: dfc1 and (but the top layer's) dy where they stay */
		float *dfc1 = ts->early ? early_room(ts, k, 1) : ts->scratch +
		    nh;
		nn_mlp_backward_input(dx, dfc1, ts->scratch, dy, &a, &mw, n,
		    lm->in, hl, lm->out, NN_ACT_GELU);
		if (!ts->early)
			memcpy(a.fc1, dfc1, nh * sizeof(float));
		if (save != dy)
			memcpy(save, dy, (size_t)n * lm->out * sizeof(float));
	}
	return dx ? group_sum(ts, dx, (size_t)n * lm->in) : 0;	/* f */
}

/* ---- activations ------------------------------------------------------ */

/* Floats per sample of the gpt head's saved values (last stage). */
static size_t
head_w(const struct tp_stage *ts)
{
	if (!ts->gpt || !ts->last)
		return 0;
	return (size_t)ts->seq * ((size_t)ts->d.d_model + 2 +
	    (size_t)ts->d.vocab);
}

/* Layer k's output in a slot (k = the layer count: the head's values),
 * then its saved values. */
static float *
lay_out(const struct tp_stage *ts, const struct pipe_slot *sl, int k)
{
	return sl->f + (size_t)sl->n * ts->off[k];
}

static float *
lay_acts(const struct tp_stage *ts, const struct pipe_slot *sl, int k)
{
	return lay_out(ts, sl, k) + (size_t)sl->n * layer_widths(ts, k).out;
}

/* Split: the output gradients layer k keeps for the weight part, after
 * its saved values; the stage's last mlp layer keeps its own in its
 * output, unused once the input part has run, so that layer costs no
 * more bytes than unsplit (NULL when not split). */
static float *
lay_save(const struct tp_stage *ts, const struct pipe_slot *sl, int k)
{
	struct widths lw = layer_widths(ts, k);

	if (lw.save)
		return lay_acts(ts, sl, k) + (size_t)sl->n * lw.acts;
	if (ts->early && k < ts->l1 - ts->l0 - 1)	/* the stage's room */
		return early_room(ts, k, 0);
	return (ts->split || ts->early) && ts->lay[k].cfg.layer == TP_MLP ?
	    lay_out(ts, sl, k) : NULL;
}

/* The input of layer k in a slot. */
static const float *
lay_in(const struct tp_stage *ts, const struct pipe_slot *sl, int k)
{
	return k ? lay_out(ts, sl, k - 1) : ts->gpt && ts->first ? sl->f :
	    sl->inp;
}

/* The slots' layout; the gradient buffers and scratch. */
static int
alloc_work(struct tp_stage *ts)
{
	int nl = ts->l1 - ts->l0;
	size_t wide, scr = 0, big = 0, nmax = (size_t)ts->nmax;

	if ((ts->off = calloc((size_t)nl + 1, sizeof(size_t))) == NULL)
		return -1;
	ts->in_w = layer_widths(ts, 0).in;
	ts->out_w = layer_widths(ts, nl - 1).out;
	ts->off[0] = wide = ts->in_w;
	for (int k = 0; k < nl; k++) {
		struct widths lw = layer_widths(ts, k);
		struct nn_block_shape all;
		size_t s = nmax * lw.acts;	/* nn_mlp_backward's */
		if (ts->lay[k].cfg.layer == TP_BLOCK) {
			all = block_shape(ts, k, ts->nmax);
			s = nn_block_scratch_size(&all);
		}
		ts->off[k + 1] = ts->off[k] + lw.out + lw.acts + lw.save;
		wide = lw.out > wide ? lw.out : wide;
		scr = s > scr ? s : scr;
	}
	for (size_t i = 0; i < ts->nten; i++)
		big = ts->ten[i].p.count > big ? ts->ten[i].p.count : big;
	ts->slot_cap = nmax * (ts->off[nl] + head_w(ts));
	ts->scratch = tp_stage_vec(scr, 0);
	/* only gathering over a group needs it */
	if (ts->T > 1 && (ts->whole = malloc(2 * big * (size_t)ts->T *
	    sizeof(float))) == NULL)
		return -1;
	for (int i = 0; i < 4; i++)
		if ((ts->gb[i] = tp_stage_vec(nmax * wide, 0)) == NULL)
			return -1;
	if (ts->gpt && ts->last)
		ts->dlogits = tp_stage_vec(nmax * ts->seq * ts->d.vocab, 0);
	ts->slot = calloc((size_t)ts->maxslot, sizeof(*ts->slot));
	for (int l = 0; l < ts->d.layers; l++)
		ts->nmoe += nn_dims_moe_layer(&ts->d, l) ?
		    (size_t)ts->d.moe.experts + 1 : 0;
	if (ts->nmoe > 0 && ((ts->moe = calloc(ts->nmoe,
	    sizeof(double))) == NULL || (ts->moe_psum = calloc(ts->nmoe,
	    sizeof(double))) == NULL || (ts->moe_daux = calloc(ts->nmoe,
	    sizeof(float))) == NULL))
		return -1;
	return ts->scratch && ts->slot &&
	    (!ts->gpt || !ts->last || ts->dlogits) ? 0 : -1;
}

/* tp_stage_plan's work; own: with the stage's own parameters, m's
 * shards, and gradients. */
static int
setup(struct tp_stage *ts, const struct nn_model *m, struct comm *c, int j,
    int w, int l0, int l1, int seq, int nmax, int maxslot, int split,
    int own, struct comm *cp, int zigzag, char *err, size_t errlen)
{
	int T = c ? comm_size(c) : 1;

	memset(ts, 0, sizeof(*ts));
	if (tp_stage_check(m, l0, l1, T, err, errlen) < 0)
		return -1;
	ts->c = T > 1 ? c : NULL, ts->T = T, ts->rank = c ? comm_rank(c) : 0;
	ts->d = m->dims, ts->j = j, ts->w = w, ts->l0 = l0, ts->l1 = l1;
	ts->gpt = m->dims.arch == NN_GPT, ts->first = j == 0;
	ts->last = j == w - 1;
	ts->seq = m->dims.arch == NN_MLP ? 1 : ts->gpt ? m->dims.seq : seq;
	ts->nmax = nmax, ts->maxslot = maxslot, ts->split = split;
	ts->err = err, ts->errlen = errlen;
	ts->gseq = ts->seq;
	if (cp != NULL && comm_size(cp) > 1 && cp_stage_new(ts, cp, zigzag,
	    err, errlen) < 0)
		goto fail;
	if ((ts->lay = calloc((size_t)(l1 - l0), sizeof(*ts->lay))) == NULL)
		goto oom;
	if (plan_layers(ts, m, &ts->nlocal, err, errlen) < 0)
		goto fail;
	for (int i = 0; i < 4; i++)
		if (holds_gpt(ts, i))
			ts->nlocal += nn_model_param(m, gpt_names[i])->count;
	if (bind_tensors(ts, m) < 0 || alloc_work(ts) < 0)
		goto oom;
	if (!own)
		return 0;
	ts->params = tp_stage_vec(ts->nlocal, 1);
	ts->grads = tp_stage_vec(ts->nlocal, 1);
	if (!ts->params || !ts->grads)
		goto oom;
	bind_views(ts);
	tp_stage_take(ts, m, m->params, ts->params);
	return 0;
oom:
	cli_fail(err, errlen, "out of memory for stage %d's tensor-parallel "
	    "shards", j);
fail:
	tp_stage_free(ts);
	return -1;
}

int
tp_stage_init(struct tp_stage *ts, const struct nn_model *m, struct comm *c,
    int j, int w, int l0, int l1, int seq, int nmax, int maxslot, int split,
    char *err, size_t errlen)
{
	return setup(ts, m, c, j, w, l0, l1, seq, nmax, maxslot, split, 1,
	    NULL, 0, err, errlen);
}

int
tp_stage_plan(struct tp_stage *ts, const struct nn_model *m, struct comm *c,
    int j, int w, int l0, int l1, int seq, int nmax, int maxslot, int split,
    char *err, size_t errlen)
{
	return setup(ts, m, c, j, w, l0, l1, seq, nmax, maxslot, split, 0,
	    NULL, 0, err, errlen);
}

int
tp_stage_plan_cp(struct tp_stage *ts, const struct nn_model *m,
    struct comm *c, struct comm *cp, int zigzag, int j, int w, int l0,
    int l1, int seq, int nmax, int maxslot, int split, char *err,
    size_t errlen)
{
	return setup(ts, m, c, j, w, l0, l1, seq, nmax, maxslot, split, 0,
	    cp, zigzag, err, errlen);
}

void
tp_stage_free(struct tp_stage *ts)
{
	for (int i = 0; i < ts->nslot; i++) {
		free(ts->slot[i].f);
		free(ts->slot[i].tok);
	}
	free(ts->slot);
	for (int i = 0; i < 4; i++)
		free(ts->gb[i]);
	free(ts->scratch), free(ts->dlogits), free(ts->whole), free(ts->off);
	free(ts->esave);
	free(ts->moe), free(ts->moe_psum), free(ts->moe_daux);
	cp_stage_free(ts);
	if (!ts->placed)
		free(ts->params), free(ts->grads);
	free(ts->ten), free(ts->lay);
	memset(ts, 0, sizeof(*ts));
}

struct pipe_slot *
tp_stage_acquire(struct tp_stage *ts, int n)
{
	struct pipe_slot *sl = NULL;
	size_t in = ts->first && !ts->gpt ? ts->in_w : 0;

	for (int i = 0; i < ts->nslot && sl == NULL; i++)
		if (!ts->slot[i].busy)
			sl = &ts->slot[i];
	if (sl == NULL) {
		if (ts->nslot == ts->maxslot)
			return NULL;
		sl = &ts->slot[ts->nslot];
		sl->f = tp_stage_vec(ts->slot_cap, 0);
		sl->tok = ts->gpt ? malloc(2 * (size_t)ts->nmax * ts->seq *
		    sizeof(int32_t)) : NULL;
		if (sl->f == NULL || (ts->gpt && sl->tok == NULL)) {
			free(sl->f), free(sl->tok);
			sl->f = NULL, sl->tok = NULL;
			return NULL;
		}
		ts->nslot++;
	}
	sl->busy = 1, sl->n = n, sl->inp = sl->f;
	/* A first stage's input rows are the batch's, not held here. */
	sl->bytes = (size_t)n * ((ts->off[ts->l1 - ts->l0] - in + head_w(ts)) *
	    sizeof(float) + (ts->gpt ? 2 * (size_t)ts->seq : 0) *
	    sizeof(int32_t));
	ts->live += sl->bytes;
	ts->peak = ts->live > ts->peak ? ts->live : ts->peak;
	return sl;
}

void
tp_stage_release(struct tp_stage *ts, struct pipe_slot *sl)
{
	ts->live -= sl->bytes;
	sl->busy = 0;
}

float *
tp_stage_input(struct tp_stage *ts, struct pipe_slot *sl)
{
	(void)ts;
	return sl->f;
}

/* ---- a micro-batch ---------------------------------------------------- */

/* The gpt head, replicated: the final LayerNorm of x, logits against the
 * tied wte, and the cross-entropy's sum per position over seq. */
static double
head_forward(struct tp_stage *ts, struct pipe_slot *sl, const float *x)
{
	int N = sl->n * ts->seq, D = ts->d.d_model, V = ts->d.vocab;
	float *xf = lay_out(ts, sl, ts->l1 - ts->l0);
	float *mean = xf + (size_t)N * D;
	float *rstd = mean + N, *probs = rstd + N;

	nn_layernorm_forward(xf, mean, rstd, x, ts->lnf_w, ts->lnf_b, N, D);
	nn_linear_forward(probs, xf, ts->wte, NULL, N, D, V);
	return nn_xent_forward(probs, probs, sl->tok + N, N, V) / ts->gseq;
}

const float *
tp_stage_forward(struct tp_stage *ts, struct pipe_slot *sl, double *loss)
{
	const float *x = sl->inp;
	int n = sl->n, nl = ts->l1 - ts->l0;

	if (ts->gpt && ts->first) {
		use(ts, -1, 0);
		if (ts->cp != NULL)
			cp_stage_embed(ts, sl);
		else
			nn_embedding_forward(sl->f, sl->tok, ts->wte, ts->wpe,
			    n, ts->seq, ts->d.d_model);
		x = sl->f;
	}
	for (int k = 0; k < nl; k++) {
		use(ts, ts->l0 + k, 0);
		if (layer_fwd(ts, k, lay_out(ts, sl, k), lay_acts(ts, sl, k), x,
		    n) < 0)
			return NULL;
		x = lay_out(ts, sl, k);
	}
	if (!ts->last)
		return x;
	if (ts->gpt) {
		use(ts, -1, 0);
		*loss += head_forward(ts, sl, x);
	} else
		*loss += nn_sqerr_forward(x, sl->y, (size_t)n * ts->out_w) /
		    (double)ts->out_w;
	return x;
}

/* The gradient at the last stage's output into g (tmp: scratch of the
 * same size): of the mean squared error, or through the gpt head. */
static void
loss_backward(struct tp_stage *ts, struct pipe_slot *sl, float *g,
    float *tmp)
{
	int n = sl->n, N = n * ts->seq, nl = ts->l1 - ts->l0;
	int D = ts->d.d_model, V = ts->d.vocab;
	const float *top = lay_out(ts, sl, nl - 1);
	size_t count = (size_t)n * ts->out_w;

	memset(g, 0, count * sizeof(float));
	if (!ts->gpt) {
		nn_sqerr_backward(g, top, sl->y, (float)(1.0 / ts->out_w),
		    count);
		return;
	}
	float *xf = lay_out(ts, sl, nl), *mean = xf + (size_t)N * D;
	float *rstd = mean + N, *probs = rstd + N;

	memset(ts->dlogits, 0, (size_t)N * V * sizeof(float));
	nn_xent_backward(ts->dlogits, probs, sl->tok + N, 1.0f / ts->gseq, N,
	    V);
	memset(tmp, 0, count * sizeof(float));
	nn_linear_backward(tmp, ts->dwte, NULL, ts->dlogits, xf, ts->wte, N, D,
	    V);
	nn_layernorm_backward(g, ts->dlnf_w, ts->dlnf_b, tmp, top, ts->lnf_w,
	    mean, rstd, N, D);
}

int
tp_stage_backward(struct tp_stage *ts, struct pipe_slot *sl, float *dy,
    float *dx)
{
	int n = sl->n, nl = ts->l1 - ts->l0;
	float *cur = ts->gb[0], *other = ts->gb[1], *t;

	if (ts->last) {
		if (ts->gpt)
			use(ts, -1, 1);
		loss_backward(ts, sl, cur, other);
		if (ts->done != NULL)
			ts->done(ts->done_ctx, -1);
	} else if (dy != cur) {
		cur = dy;
		other = dy == ts->gb[1] ? ts->gb[0] : ts->gb[1];
	}
	for (int k = nl - 1; k >= 0; k--) {
		int want = k > 0 || dx != NULL || (ts->gpt && ts->first);
		/* early: the layer below's dy straight into its room */
		float *tgt = k == 0 && dx != NULL ? dx : ts->early && k > 0 ?
		    lay_save(ts, sl, k - 1) : other;

		use(ts, ts->l0 + k, 1);
		if (want)
			memset(tgt, 0, (size_t)n * layer_widths(ts, k).in *
			    sizeof(float));
		if (layer_bwd(ts, k, ts->split || ts->early ? INPUT : WHOLE,
		    want ? tgt :
		    NULL, cur, lay_acts(ts, sl, k), lay_save(ts, sl, k),
		    lay_in(ts, sl, k), n) < 0)
			return -1;
		t = cur, cur = tgt, other = t;
		if (ts->done != NULL && !ts->split && !ts->early)
			ts->done(ts->done_ctx, ts->l0 + k);
	}
	if (ts->gpt && ts->first) {
		if (ts->cp != NULL)
			cp_stage_embed_back(ts, sl, cur);
		else
			nn_embedding_backward(ts->dwte, ts->dwpe, cur, sl->tok,
			    n, ts->seq, ts->d.d_model);
		if (ts->done != NULL)
			ts->done(ts->done_ctx, ts->d.layers);
	}
	return 0;
}

void
tp_stage_weight(struct tp_stage *ts, struct pipe_slot *sl)
{
	for (int k = ts->l1 - ts->l0 - 1; k >= 0; k--) {
		layer_bwd(ts, k, WEIGHT, NULL, NULL, lay_acts(ts, sl, k),
		    lay_save(ts, sl, k), lay_in(ts, sl, k), sl->n);
		if (ts->done != NULL)
			ts->done(ts->done_ctx, ts->l0 + k);
	}
	/* the embeddings' gradients came in the input part, before */
	if (ts->done != NULL && ts->gpt && ts->first)
		ts->done(ts->done_ctx, ts->d.layers);
}

/* ---- the input gradient first ------------------------------------------ */

/* The upstream stage's backward waits for dx, not for this stage's
 * weight gradients: sent between the parts, it leaves half a backward
 * (two of an mlp layer's four products) off the pipeline's critical
 * path. nn_mlp_backward's parts make the same products and sums in f32
 * (the activation's derivative once, dx's and the weights' gradients
 * added into the same zeros), so the bits stay; a slot holds no more. */
int
tp_stage_early(struct tp_stage *ts)
{
	int nl = ts->l1 - ts->l0;
	size_t n = 0;

	if (ts->first || ts->split || ts->T > 1 || ts->cp != NULL ||
	    ts->gpt || nn_get_precision() != NN_PREC_F32)
		return 0;
	for (int k = 0; k < nl; k++) {
		struct widths lw = layer_widths(ts, k);
		if (ts->lay[k].cfg.layer != TP_MLP || ts->lay[k].experts > 0)
			return 0;
		/* early_room's */
		n += (size_t)ts->nmax * ((k < nl - 1 ? lw.out : 0) + lw.acts / 2);
	}
	if ((ts->esave = tp_stage_vec(n, 0)) == NULL)
		return 0;
	ts->early = 1;
	return 1;
}
