/* test_tp_stage: a pipeline stage sharded over a tensor-parallel group of
 * T = 2, 3 and 4 forked ranks against the same stage unsharded (the
 * reference of pipe_stage_ref.h, written apart from tp_stage; tp_stage
 * itself is checked against PyTorch through the pipeline's training
 * tests): a gpt (4 blocks of 12 heads; the embeddings on the
 * first stage, the final LayerNorm and tied head on the last), a block
 * stack (3 non-causal blocks) and an mlp stack whose hidden widths differ
 * layer by layer (12, 24, 36), each as a first, middle, last and
 * whole-model stage. Two micro-batches (3 and 2 samples) run forward,
 * then backward in the other order, so gradients add: every rank's stage
 * outputs, loss and input gradients, and the weight gradients gathered
 * back into whole tensors, equal the unsharded stage's within 1e-5 of the
 * tensor's largest magnitude; every replicated tensor's gradient (the
 * LayerNorms, the row-parallel biases, the gpt's wte, wpe and final
 * LayerNorm) is bit-identical on every rank of the group without having
 * been communicated; the gathered parameters are the model's, bit for
 * bit. Without a group the TP stage is the unsharded stage, bit for bit
 * (outputs, input gradients, loss, weight gradients and peak activation
 * bytes), its backward whole and split in two (zb-h1), and its matrix
 * products' vectors start on 64-byte cache lines; tp_stage_vec_huge's
 * (a pipeline run's parameters and gradients) on a 2 MiB page boundary,
 * their mapping marked for transparent huge pages.
 * The split backward, every input part first and then every weight part,
 * gives the whole backward's outputs, input gradients and weight
 * gradients bit for bit, without a group and on each rank of a group of
 * 2; its input parts add no layer's weight gradient (an mlp's B runs
 * only the two input-gradient products, W both weight gradients).
 * So does an early backward (each micro-batch's input part, then its
 * weight part), which only mlp stages but the first take.
 * Two TP groups split from 4 ranks run stages of their own at the same
 * time. The mesh checks refuse sizes T does not divide, with the
 * numbers. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/coll.h"
#include "par/pipe_int.h"
#include "par/tp_stage.h"
#include "par_world.h"
#include "pipe_stage_ref.h"
#include "tensor/rng.h"
#include "unit.h"

#define NMB 2
static const int mb_n[NMB] = { 3, 2 };

/* vocabulary 11, width 24, 4 blocks of 12 heads, feed-forward 48, 5
 * positions */
static const struct nn_dims gpt4 = { .arch = NN_GPT, .vocab = 11,
	.d_model = 24, .layers = 4, .heads = 12, .seq = 5, .d_ff = 48 };
/* width 24, 12 heads, feed-forward 36, 3 blocks, 4 positions */
static const struct nn_dims block3 = { .arch = NN_BLOCK, .d_model = 24,
	.heads = 12, .d_ff = 36, .layers = 3 };
#define BLOCK_SEQ 4

/* An mlp stack 5 -> 12 -> 7, 7 -> 24 -> 6, 6 -> 36 -> 4 (nn_init makes
 * only uniform stacks). */
static const int mlp_w[3][3] = { { 5, 12, 7 }, { 7, 24, 6 }, { 6, 36, 4 } };

static void
fill(float *f, size_t n, uint64_t seed, double scale)
{
	struct tensor_rng r;

	tensor_rng_seed(&r, seed);
	for (size_t i = 0; i < n; i++)
		f[i] = (float)(scale * (2 * tensor_rng_uniform(&r, 24) - 1));
}

static int
add_tensor(struct tensor_set *s, const char *name, int ndim, int64_t a,
    int64_t b, uint64_t seed)
{
	int64_t shape[2] = { a, b };
	struct tensor t = { 0 };
	char e[256];

	if (tensor_init(&t, DT_F32, ndim, shape, e, sizeof e) < 0)
		return -1;
	fill(t.data, (size_t)tensor_numel(&t), seed, 0.5);
	if (tensor_set_add(s, name, &t, e, sizeof e) < 0) {
		tensor_free(&t);
		return -1;
	}
	return 0;
}

static int
mlp_model(struct nn_model *m)
{
	struct tensor_set s = { .format = TENSOR_SAFETENSORS };
	char e[256], name[64];
	int rc = 0;

	for (int l = 0; l < 3 && rc == 0; l++) {
		const int *w = mlp_w[l];
		snprintf(name, sizeof name, "layers.%d.fc1.weight", l);
		rc |= add_tensor(&s, name, 2, w[1], w[0], 10 + 4 * l);
		snprintf(name, sizeof name, "layers.%d.fc1.bias", l);
		rc |= add_tensor(&s, name, 1, w[1], 1, 11 + 4 * l);
		snprintf(name, sizeof name, "layers.%d.fc2.weight", l);
		rc |= add_tensor(&s, name, 2, w[2], w[1], 12 + 4 * l);
		snprintf(name, sizeof name, "layers.%d.fc2.bias", l);
		rc |= add_tensor(&s, name, 1, w[2], 1, 13 + 4 * l);
	}
	if (rc == 0)
		rc = tensor_set_meta_put(&s, "collx.arch", "mlp", e, sizeof e);
	if (rc == 0)
		rc = nn_model_load(m, &s, e, sizeof e);
	tensor_set_free(&s);
	return rc;
}

enum arch { A_GPT, A_BLOCK, A_MLP };
static const char *arch_name[] = { "gpt", "block", "mlp" };

static int
make_model(struct nn_model *m, enum arch a)
{
	if (a == A_MLP)
		return mlp_model(m);
	return par_model(m, a == A_GPT ? &gpt4 : &block3, 7 + a);
}

/* A stage: j of w, layers [l0, l1); the gpt has 4 layers, the others 3. */
struct scase {
	const char *name;
	int j, w, l0, l1[3];
};
static const struct scase stages[] = {
	{ "first", 0, 3, 0, { 2, 1, 1 } },
	{ "middle", 1, 3, 1, { 3, 2, 2 } },
	{ "last", 2, 3, 1, { 4, 3, 3 } },
	{ "whole", 0, 1, 0, { 4, 3, 3 } },
};

/* What a stage computed: per micro-batch its output and input gradient,
 * and the loss; a split TP stage's, whether its input parts left a layer
 * weight gradient that is not 0. */
struct outs {
	float *y[NMB], *dx[NMB];
	size_t ny, nx;
	double loss;
	int b_grads;
};

/* Whether any of the stage's layers' weight gradients (before the gpt
 * tensors' in grads) is not 0. */
static int
layer_grads(const struct tp_stage *ts)
{
	size_t n = 0;

	for (int k = 0; k < ts->l1 - ts->l0; k++)
		n += ts->lay[k].nlocal;
	for (size_t i = 0; i < n; i++)
		if (ts->grads[i] != 0)
			return 1;
	return 0;
}

static void
outs_free(struct outs *o)
{
	for (int i = 0; i < NMB; i++)
		free(o->y[i]), free(o->dx[i]);
}

/* One stage, unsharded (st) or sharded (ts): the micro-batches' inputs
 * made from fixed seeds, forward both, backward in reverse order. */
static int
drive(struct pipe_stage *st, struct tp_stage *ts, const struct nn_dims *d,
    struct outs *o)
{
	struct pipe_slot *sl[NMB];
	int seq = ts ? ts->seq : st->seq, first = ts ? ts->first : st->first;
	int last = ts ? ts->last : st->last, gpt = d->arch == NN_GPT;
	size_t in_w = ts ? ts->in_w : st->in_w, out_w = ts ? ts->out_w :
	    st->out_w;
	float *targets[NMB] = { NULL };
	int rc = -1;

	memset(o, 0, sizeof(*o));
	for (int i = 0; i < NMB; i++) {
		int n = mb_n[i], N = n * seq;
		sl[i] = ts ? tp_stage_acquire(ts, n) :
		    pipe_stage_acquire(st, n);
		if (sl[i] == NULL)
			goto out;
		if (gpt && (first || last))
			for (int k = 0; k < 2 * N; k++)
				sl[i]->tok[k] = (k * 7 + i * 3 + k / 5) %
				    d->vocab;
		if (!gpt || !first)
			fill(ts ? tp_stage_input(ts, sl[i]) :
			    pipe_stage_input(st, sl[i]), (size_t)n * in_w,
			    100 + i, 1);
		if (last && !gpt) {
			targets[i] = malloc((size_t)n * out_w * sizeof(float));
			if (targets[i] == NULL)
				goto out;
			fill(targets[i], (size_t)n * out_w, 200 + i, 1);
			sl[i]->y = targets[i];
		}
	}
	for (int i = 0; i < NMB; i++) {
		size_t ny = (size_t)mb_n[i] * out_w;
		const float *y = ts ? tp_stage_forward(ts, sl[i], &o->loss) :
		    pipe_stage_forward(st, sl[i], &o->loss);
		if (y == NULL || (o->y[i] = malloc(ny * sizeof(float))) == NULL)
			goto out;
		memcpy(o->y[i], y, ny * sizeof(float));
	}
	o->ny = out_w, o->nx = gpt && first ? 0 : in_w;
	for (int i = NMB - 1; i >= 0; i--) {
		float *dy = ts ? ts->gb[0] : st->g[0];
		if (o->nx && (o->dx[i] = calloc((size_t)mb_n[i] * in_w,
		    sizeof(float))) == NULL)
			goto out;
		if (!last)
			fill(dy, (size_t)mb_n[i] * out_w, 300 + i, 1);
		if (ts && tp_stage_backward(ts, sl[i], dy, o->dx[i]) < 0)
			goto out;
		if (!ts)
			pipe_stage_backward(st, sl[i], dy, o->dx[i]);
		/* an early stage's weight part before the next backward (a
		 * pipeline's, after dx has been sent) */
		if (ts && ts->early && i == NMB - 1)
			o->b_grads = layer_grads(ts);
		if (ts && ts->early)
			tp_stage_weight(ts, sl[i]);
	}
	/* a split backward's weight parts, after every input part (the
	 * gradient buffers long reused) */
	if (ts && ts->split)
		o->b_grads = layer_grads(ts);
	for (int i = NMB - 1; (ts ? ts->split : st->split) && i >= 0; i--)
		if (ts)
			tp_stage_weight(ts, sl[i]);
		else
			pipe_stage_weight(st, sl[i]);
	rc = 0;
out:
	for (int i = 0; i < NMB; i++)
		free(targets[i]);
	return rc;
}

static double
max_abs(const float *a, size_t n)
{
	double m = 0;

	for (size_t i = 0; i < n; i++)
		m = fabs(a[i]) > m ? fabs(a[i]) : m;
	return m;
}

/* max |a - b| <= 1e-5 max |b|, b not all 0 */
static int
close_all(const float *a, const float *b, size_t n)
{
	double dmax = 0, bmax = max_abs(b, n);

	for (size_t i = 0; i < n; i++) {
		double d = fabs((double)a[i] - b[i]);
		dmax = d > dmax ? d : dmax;
	}
	return dmax <= 1e-5 * bmax && bmax > 0;
}

/* Of the stage's tensors, whether a and b agree: bit for bit (exact), or
 * gradients within 1e-5 of the largest (a's name, if not, into bad). */
static int
agree(const struct tp_stage *ts, const struct nn_model *m, const float *a,
    const float *b, int exact, char *bad, size_t badlen)
{
	for (size_t i = 0; i < ts->nten; i++) {
		const struct nn_param *p = nn_model_param(m, ts->ten[i].name);
		const float *x = a + p->offset, *y = b + p->offset;
		size_t len = strlen(p->name);
		/* A key's bias shifts every score of a query alike, which the
		 * softmax ignores: its gradient is 0, both sides' rounding. */
		int zero = len > 11 && strcmp(p->name + len - 11,
		    "attn.k.bias") == 0;
		int ok = exact ? memcmp(x, y, p->count * sizeof(float)) == 0 :
		    zero ? max_abs(x, p->count) <= 1e-5 * max_abs(b,
		    m->nparams) : close_all(x, y, p->count);
		if (!ok) {
			snprintf(bad, badlen, " (not %s)", p->name);
			return 0;
		}
	}
	return 1;
}

/* The stage's gradients gathered on rank 0 against ref's; the parameters
 * gathered back, and a vector laid out as them (an optimizer's moments)
 * taken into shards and gathered back, bit for bit. */
static void
check_gathered(struct tp_stage *ts, struct nn_model *ref,
    struct nn_model *got, const char *what)
{
	int root = ts->rank == 0, rc;
	size_t np = ref->nparams;
	float *vec = malloc(np * sizeof(float)), *back = calloc(np,
	    sizeof(float)), *mine = malloc(ts->nlocal * sizeof(float));
	char bad[NN_NAME_MAX + 8] = "";

	if (!vec || !back || !mine) {
		par_check(0, "%s: memory for the gathers", what);
		goto out;
	}
	fill(vec, np, 400, 1);
	tp_stage_take(ts, ref, vec, mine);
	rc = tp_stage_gather(ts, ts->grads, root ? got : NULL, root ?
	    got->grads : NULL);
	if (rc == 0)
		rc = tp_stage_gather(ts, ts->params, root ? got : NULL, root ?
		    got->params : NULL);
	if (rc == 0)
		rc = tp_stage_gather(ts, mine, root ? got : NULL, root ? back :
		    NULL);
	if (!par_check(rc == 0, "%s: gathers its gradients and parameters%s%s",
	    what, rc ? ": " : "", rc ? ts->err : "") || !root)
		goto out;
	par_check(agree(ts, ref, got->grads, ref->grads, 0, bad, sizeof bad),
	    "%s: %zu gathered weight gradients within 1e-5 of the unsharded "
	    "stage's%s", what, ts->nten, bad);
	par_check(agree(ts, ref, got->params, ref->params, 1, bad, sizeof bad),
	    "%s: parameters gathered back are the model's%s", what, bad);
	par_check(agree(ts, ref, back, vec, 1, bad, sizeof bad), "%s: a "
	    "vector taken into shards and gathered back is itself%s", what,
	    bad);
out:
	free(vec), free(back), free(mine);
}

/* Every replicated tensor's gradient bit-identical on every TP rank. */
static void
check_replicated(struct tp_stage *ts, const char *what)
{
	size_t nrep = 0, i;
	int same = 1, rc = 0;

	for (i = 0; i < ts->nten && rc == 0; i++) {
		const struct tp_param *p = &ts->ten[i].p;
		size_t n = p->count;
		float *all;
		if (p->split != TP_WHOLE)
			continue;
		if ((all = malloc(n * ts->T * sizeof(float))) == NULL)
			return;
		rc = coll_allgather(ts->c, ts->grads + p->off, all, n, DT_F32,
		    COLL_RING);
		for (int r = 1; r < ts->T && rc == 0; r++)
			same &= memcmp(all, all + (size_t)r * n,
			    n * sizeof(float)) == 0;
		free(all);
		nrep++;
	}
	par_check(rc == 0 && same && nrep > 0, "%s: %zu replicated gradients "
	    "bit-identical on the %d TP ranks", what, nrep, ts->T);
}

/* Compares the sharded stage's outs against the unsharded ones. */
static void
check_outs(const struct outs *ref, const struct outs *o, int last,
    const char *what)
{
	int y = 1, dx = 1;

	for (int i = 0; i < NMB; i++) {
		y &= close_all(o->y[i], ref->y[i], (size_t)mb_n[i] * ref->ny);
		if (ref->nx)
			dx &= close_all(o->dx[i], ref->dx[i], (size_t)mb_n[i] *
			    ref->nx);
	}
	par_check(y, "%s: outputs within 1e-5", what);
	par_check(dx, "%s: input gradients within 1e-5%s", what, ref->nx ? "" :
	    " (none: tokens)");
	if (last)
		par_check(fabs(o->loss - ref->loss) <= 1e-5 * fabs(ref->loss),
		    "%s: loss %.9g, unsharded %.9g", what, o->loss, ref->loss);
}

/* One arch and stage: unsharded, then over c (group: how the test names
 * it). */
static void
one_case(struct comm *c, const char *group, enum arch a,
    const struct scase *sc)
{
	struct nn_model m, got;
	struct pipe_stage st;
	struct tp_stage ts;
	struct outs ref, o;
	char e[256], te[256], what[128];
	int l1 = sc->l1[a], seq = a == A_BLOCK ? BLOCK_SEQ : 1;

	snprintf(what, sizeof what, "%sT=%d rank %d: %s %s stage [%d, %d)",
	    group, comm_size(c), comm_rank(c), arch_name[a], sc->name, sc->l0,
	    l1);
	if (!par_check(make_model(&m, a) == 0 && make_model(&got, a) == 0,
	    "%s: models", what))
		return;
	nn_model_zero_grad(&m);
	if (pipe_stage_init(&st, &m, sc->j, sc->w, sc->l0, l1, seq, 3, NMB, 0, e,
	    sizeof e) < 0 || drive(&st, NULL, &m.dims, &ref) < 0) {
		par_check(0, "%s: unsharded stage runs: %s", what, e);
		goto out;
	}
	if (tp_stage_init(&ts, &m, c, sc->j, sc->w, sc->l0, l1, seq, 3, NMB, 0,
	    te, sizeof te) < 0) {
		par_check(0, "%s: TP stage: %s", what, te);
		goto out;
	}
	if (drive(NULL, &ts, &m.dims, &o) < 0)
		par_check(0, "%s: runs: %s", what, te);
	else {
		check_outs(&ref, &o, ts.last, what);
		check_gathered(&ts, &m, &got, what);
		check_replicated(&ts, what);
	}
	outs_free(&o);
	tp_stage_free(&ts);
out:
	outs_free(&ref);
	pipe_stage_free(&st);
	nn_model_free(&m);
	nn_model_free(&got);
}

static int
rank_main(struct comm *c, void *arg)
{
	(void)arg;
	for (int a = 0; a < 3; a++)
		for (size_t k = 0; k < sizeof stages / sizeof stages[0]; k++)
			one_case(c, "", (enum arch)a, &stages[k]);
	return 0;
}

/* Four ranks split into two TP groups of 2, as a mesh makes them (ranks
 * 0, 1 and 2, 3), each a stage of its own at the same time: a gpt's first
 * and last stage, then an mlp's middle one. */
static int
split_main(struct comm *c, void *arg)
{
	int color = comm_rank(c) / 2, rc;
	struct comm *tp;
	char e[256], group[32];

	(void)arg;
	rc = comm_split(c, color, comm_rank(c), &tp, e, sizeof e);
	if (!par_check(rc == 0, "rank %d joins TP group %d%s%s", comm_rank(c),
	    color, rc ? ": " : "", rc ? e : ""))
		return 1;
	snprintf(group, sizeof group, "group %d of 2, ", color);
	one_case(tp, group, A_GPT, &stages[color == 0 ? 0 : 2]);
	one_case(tp, group, A_MLP, &stages[1]);
	comm_close(tp);
	return 0;
}

/* Without a group: a whole stage of arch a, its backward split (sp) or
 * not, is the unsharded stage, bit for bit, its peak activation bytes
 * too. */
static void
no_group_case(enum arch a, int sp)
{
	struct nn_model m1, m2;
	struct pipe_stage st;
	struct tp_stage ts;
	struct outs r1, r2;
	char e[256], what[160];
	int seq = a == A_BLOCK ? BLOCK_SEQ : 1, l1 = a == A_GPT ? 4 : 3;
	int same = 1, ok;

	if (make_model(&m1, a) < 0 || make_model(&m2, a) < 0) {
		UNIT_OK(0, "models");
		return;
	}
	nn_model_zero_grad(&m1);
	ok = pipe_stage_init(&st, &m1, 0, 1, 0, l1, seq, 3, NMB, sp, e,
	    sizeof e) == 0 && drive(&st, NULL, &m1.dims, &r1) == 0 &&
	    tp_stage_init(&ts, &m2, NULL, 0, 1, 0, l1, seq, 3, NMB, sp, e,
	    sizeof e) == 0 && drive(NULL, &ts, &m2.dims, &r2) == 0 &&
	    tp_stage_gather(&ts, ts.grads, &m2, m2.grads) == 0;
	for (int i = 0; ok && i < NMB; i++)
		same &= memcmp(r1.y[i], r2.y[i], (size_t)mb_n[i] * r1.ny *
		    sizeof(float)) == 0 && (r1.nx == 0 || memcmp(r1.dx[i],
		    r2.dx[i], (size_t)mb_n[i] * r1.nx * sizeof(float)) == 0);
	if (ok)
		same &= r1.loss == r2.loss && memcmp(m1.grads, m2.grads,
		    m1.nparams * sizeof(float)) == 0 && st.peak == ts.peak;
	snprintf(what, sizeof what, "no TP group: a whole %s stage%s is the "
	    "unsharded stage, bit for bit, peak activations %zu bytes, "
	    "unsharded %zu", arch_name[a], sp ? ", split backward," : "",
	    ok ? ts.peak : 0, ok ? st.peak : 0);
	UNIT_OK(ok && same, what);
	if (ok) {
		uintptr_t at = (uintptr_t)ts.params | (uintptr_t)ts.grads |
		    (uintptr_t)ts.scratch | (uintptr_t)ts.slot[0].f;
		for (int i = 0; i < 4; i++)
			at |= (uintptr_t)ts.gb[i];
		snprintf(what, sizeof what, "no TP group: a %s stage's "
		    "parameters, gradients, slots, gradient buffers and "
		    "scratch start on 64-byte cache lines", arch_name[a]);
		UNIT_OK(at % 64 == 0, what);
		outs_free(&r1), outs_free(&r2);
		pipe_stage_free(&st), tp_stage_free(&ts);
	}
	nn_model_free(&m1), nn_model_free(&m2);
}

/* A check in a rank of c, or in the test's process (c NULL). */
static void
report(struct comm *c, int ok, const char *what)
{
	if (c != NULL)
		par_check(ok, "%s", what);
	else
		UNIT_OK(ok, what);
}

/* Two drives of a stage gave the same bits: loss, weight gradients and
 * each micro-batch's output and input gradient. */
static int
same_runs(const struct tp_stage *ta, const struct outs *a,
    const struct tp_stage *tb, const struct outs *b)
{
	int same = a->loss == b->loss && memcmp(ta->grads, tb->grads,
	    ta->nlocal * sizeof(float)) == 0;

	for (int i = 0; same && i < NMB; i++)
		same = memcmp(a->y[i], b->y[i], (size_t)mb_n[i] * a->ny *
		    sizeof(float)) == 0 && (a->nx == 0 || memcmp(a->dx[i],
		    b->dx[i], (size_t)mb_n[i] * a->nx * sizeof(float)) == 0);
	return same;
}

/* Without a group, the stage early (tp_stage_early) too: an mlp stage
 * but the first takes it and gives the whole backward's bits, its slots
 * no larger, its first backward adding no layer's weight gradient (that
 * waits for tp_stage_weight); the others (the first stage sends no dx;
 * blocks, the gpt) refuse it. */
static void
early_report(const struct tp_stage ts[3], const struct outs o[3], int a,
    const struct scase *sc, int took, int ok)
{
	char what[200];
	int want = a == A_MLP && sc->j > 0;

	snprintf(what, sizeof what, "%s %s stage: early backward %s%s",
	    arch_name[a], sc->name, want ? "taken, the whole one bit for bit, "
	    "peak " : "refused", want ? "activations as whole, its input part "
	    "adding no weight gradient" : "");
	UNIT_OK(ok && took == want && same_runs(&ts[0], &o[0], &ts[2], &o[2]) &&
	    ts[0].peak == ts[2].peak && (!want || !o[2].b_grads), what);
}

/* Each arch and stage over c (NULL: no group, and early), its backward
 * whole and split: the same bits. */
static void
split_cases(struct comm *c)
{
	for (int a = 0; a < 3; a++)
		for (size_t k = 0; k < sizeof stages / sizeof stages[0]; k++) {
			const struct scase *sc = &stages[k];
			struct tp_stage ts[3];
			struct outs o[3];
			struct nn_model m;
			char e[256], what[160];
			int seq = a == A_BLOCK ? BLOCK_SEQ : 1, ok, same;
			int n = c == NULL ? 3 : 2, took = 0;

			ok = make_model(&m, (enum arch)a) == 0;
			for (int sp = 0; ok && sp < n; sp++) {
				ok = tp_stage_init(&ts[sp], &m, c, sc->j, sc->w,
				    sc->l0, sc->l1[a], seq, 3, NMB, sp == 1, e,
				    sizeof e) == 0;
				if (ok && sp == 2)
					took = tp_stage_early(&ts[2]);
				ok = ok && drive(NULL, &ts[sp], &m.dims,
				    &o[sp]) == 0;
			}
			same = ok && same_runs(&ts[0], &o[0], &ts[1], &o[1]);
			snprintf(what, sizeof what, "T=%d rank %d: %s %s "
			    "stage: the split backward (B then W) is the whole "
			    "one, bit for bit", c ? comm_size(c) : 1,
			    c ? comm_rank(c) : 0, arch_name[a], sc->name);
			report(c, same, what);
			snprintf(what, sizeof what, "T=%d rank %d: %s %s "
			    "stage: B adds no layer's weight gradient",
			    c ? comm_size(c) : 1, c ? comm_rank(c) : 0,
			    arch_name[a], sc->name);
			report(c, ok && !o[1].b_grads, what);
			if (c == NULL)
				early_report(ts, o, a, sc, took, ok);
			for (int sp = 0; ok && sp < n; sp++)
				outs_free(&o[sp]), tp_stage_free(&ts[sp]);
			if (ok)
				nn_model_free(&m);
		}
}

static int
zb_main(struct comm *c, void *arg)
{
	(void)arg;
	split_cases(c);
	return 0;
}

/* The mesh checks, before any communication. */
static void
checks(void)
{
	static const struct {
		enum arch a;
		int l0, l1, T;
		const char *want;
	} c[] = {
		{ A_GPT, 0, 4, 5, "12 attention heads are not divisible "
		    "by tensor-parallel size 5" },
		{ A_BLOCK, 0, 3, 3, "feed-forward width 40 is not "
		    "divisible by tensor-parallel size 3" },
		{ A_MLP, 0, 3, 5, "mlp layer 0's hidden width 12 is not "
		    "divisible by tensor-parallel size 5" },
		{ A_MLP, 1, 3, 8, "mlp layer 2's hidden width 36 is not "
		    "divisible by tensor-parallel size 8" },
		{ A_MLP, 1, 2, 8, NULL },
		{ A_GPT, 0, 4, 4, NULL },
		{ A_GPT, 0, 4, 0, "tensor-parallel size 0 is not "
		    "positive" },
		{ A_MLP, 2, 4, 2, "layers [2, 4) are not a run of the "
		    "model's 3" },
	};
	/* heads 12 but a feed-forward width of 40: T = 3 divides one */
	static const struct nn_dims ff40 = { .arch = NN_BLOCK, .d_model = 24,
		.heads = 12, .d_ff = 40, .layers = 3 };

	for (size_t k = 0; k < sizeof c / sizeof c[0]; k++) {
		struct nn_model m;
		char e[256] = "", what[256];
		int rc;

		if ((c[k].a == A_BLOCK ? par_model(&m, &ff40, 3) :
		    make_model(&m, c[k].a)) < 0) {
			UNIT_OK(0, "model for the checks");
			continue;
		}
		rc = tp_stage_check(&m, c[k].l0, c[k].l1, c[k].T, e, sizeof e);
		snprintf(what, sizeof what, "check: %s layers [%d, %d) over %d "
		    "TP ranks: %s", arch_name[c[k].a], c[k].l0, c[k].l1, c[k].T,
		    c[k].want ? e : "accepted");
		UNIT_OK(c[k].want ? rc < 0 && strcmp(e, c[k].want) == 0 :
		    rc == 0, what);
		nn_model_free(&m);
	}
}

/* Whether the mapping holding p is marked for huge pages (VmFlags "hg"
 * in /proc/self/smaps). */
static int
marked_huge(const void *p)
{
	char line[512];
	uintptr_t a, b, at = (uintptr_t)p;
	int in = 0, hg = 0;
	FILE *f = fopen("/proc/self/smaps", "r");

	if (f == NULL)
		return 0;
	while (fgets(line, sizeof line, f) != NULL) {
		if (sscanf(line, "%lx-%lx ", &a, &b) == 2)	/* a mapping */
			in = at >= a && at < b;
		else if (in && strncmp(line, "VmFlags:", 8) == 0)
			hg = strstr(line, " hg") != NULL;
	}
	fclose(f);
	return hg;
}

/* tp_stage_vec_huge: a vector filling a huge page starts on one, zeroed
 * when asked, its mapping marked for huge pages (where the kernel's
 * transparent huge pages are not off); a smaller one is tp_stage_vec's,
 * on a cache line. */
static void
huge_case(void)
{
	size_t n = (size_t)3 << 20, zeros = 0;	/* 12 MiB */
	float *p = tp_stage_vec_huge(n, 1), *q = tp_stage_vec_huge(1000, 1);
	char mode[128] = "";
	FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");

	if (f != NULL && fgets(mode, sizeof mode, f) == NULL)
		mode[0] = '\0';
	if (f != NULL)
		fclose(f);
	for (size_t i = 0; p != NULL && i < n; i++)
		zeros += p[i] == 0.0f;
	UNIT_OK(p != NULL && (uintptr_t)p % ((size_t)2 << 20) == 0 &&
	    zeros == n, "tp_stage_vec_huge: 12 MiB of zeros on a 2 MiB "
	    "boundary");
	if (f == NULL || strstr(mode, "[never]") != NULL)
		printf("# transparent huge pages off: the mark not checked\n");
	else
		UNIT_OK(p != NULL && marked_huge(p), "tp_stage_vec_huge: its "
		    "mapping marked for huge pages (smaps VmFlags hg)");
	UNIT_OK(q != NULL && (uintptr_t)q % 64 == 0 && q[0] == 0.0f &&
	    q[999] == 0.0f, "tp_stage_vec_huge: 1000 floats, zeroed, on a "
	    "64-byte cache line");
	free(p), free(q);
}

int
main(void)
{
	nn_set_threads(1);
	checks();
	huge_case();
	for (int a = 0; a < 3; a++)
		for (int sp = 0; sp < 2; sp++)
			no_group_case((enum arch)a, sp);
	split_cases(NULL);
	par_world(2, "split backward, TP group of 2", zb_main, NULL);
	for (int T = 2; T <= 4; T++) {
		char name[64];
		snprintf(name, sizeof name, "TP group of %d", T);
		par_world(T, name, rank_main, NULL);
	}
	par_world(4, "two TP groups of 2", split_main, NULL);
	return unit_done();
}
