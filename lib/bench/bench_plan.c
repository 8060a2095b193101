/* bench_plan: the step model. For a mesh D x T x P of N hosts of L ranks
 * (rank = (pp D + dp) T + tp, collx-train's order) and m micro-batches of
 * the global batch B over D replicas:
 *
 *   pass    = stage compute of one micro-batch + its TP allreduces
 *             + its two pipeline messages (activation on, gradient back)
 *   pipe    = m pass / (1 - bubble), bubble the schedule table's idle
 *             share (pipe_sched, equal passes)
 *   dp      = the gradient sync not hidden behind the last micro-batch's
 *             backward (ZeRO 1, 2: reduce-scatter, then the parameters'
 *             allgather after the optimizer, which nothing hides)
 *   step    = pipe + dp + optimizer
 *
 * Collectives cost what bench_cost_coll says for the link class their
 * group crosses. Compute is the fitted rates times the model's flops,
 * slowed by the share of a core a rank gets when L ranks share fewer
 * cores than the fit found, beyond the share its own processes had (a
 * pipeline's bubble then lends its core to the host's other ranks: the
 * step is the longer of the critical path at a core a rank and the
 * host's compute over its cores). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench.h"
#include "bench/bench_plan.h"

#define F4 4.0			/* bytes of an f32 */

/* The bubble of each (schedule, m, P) the enumeration meets, built once. */
struct bubbles {
	struct { int kind, m, w; double b; } *v;
	int n;
};

static double
bubble(struct bubbles *c, enum pipe_sched_kind kind, int m, int w)
{
	struct pipe_sched s;
	char e[COLLX_ERRLEN];
	double b;

	if (w == 1)
		return 0;
	for (int i = 0; i < c->n; i++)
		if (c->v[i].kind == (int)kind && c->v[i].m == m &&
		    c->v[i].w == w)
			return c->v[i].b;
	memset(&s, 0, sizeof s);
	if (pipe_sched_build(&s, kind, m, w, e, sizeof e) < 0)
		b = pipe_sched_bubble(kind, m, w, 1);	/* its closed form */
	else
		b = pipe_sched_table_bubble(&s);
	pipe_sched_free(&s);
	c->v = cli_reallocarray(c->v, (size_t)c->n + 1, sizeof *c->v);
	c->v[c->n].kind = kind, c->v[c->n].m = m, c->v[c->n].w = w;
	c->v[c->n++].b = b;
	return b;
}

double
bench_plan_params(const struct nn_dims *d)
{
	double n = 0;
	int L = d->layers > 0 ? d->layers : 1;

	if (d->arch == NN_MLP) {
		for (int i = 0; i < L; i++) {
			double in = i == 0 ? d->d_in : d->d_out;
			double h = d->d_hidden;

			n += in * h + h + h * d->d_out + d->d_out;
		}
		return n;
	}
	double D = d->d_model, f = d->d_ff;

	/* qkv, proj, fc1, fc2 with biases; two LayerNorms */
	n = L * (3 * D * D + 3 * D + D * D + D + 2 * D * f + f + D + 4 * D);
	return n + (double)d->vocab * D + (double)d->seq * D + 2 * D;
}

/* Which link class a group of n ranks at stride s crosses, and how many
 * of its ranks share a host (l: 1 when none do). */
static enum bench_link
group_link(int n, int s, int L, int *l)
{
	*l = L / s >= 1 ? L / s : 1;
	if (*l > n)
		*l = n;
	return (long)n * s <= L ? BENCH_SHM : BENCH_TCP;
}

/* One stage's compute and TP traffic for one micro-batch of b samples:
 * its forward and backward seconds (*fb), its TP allreduces' (*tp) and
 * bytes (*tpb), the floats of activations it keeps (*acts). */
struct stage {
	double fb, tp, tpb, acts;
	double params;			/* the stage's, whole (before TP) */
};

static void
stage_gpt(const struct bench_plan_opts *o, int T, int P, double b,
    struct stage *st)
{
	const struct bench_cost *c = o->cost;
	const struct nn_dims *d = &o->dims;
	double D = d->d_model, f = d->d_ff / T, S = d->seq, t = b * S;
	double h = d->heads / T, hd = D / d->heads, blk, ar, Ls;
	int tl, L = d->layers;
	enum bench_link tlk = group_link(T, 1, o->per_host, &tl);
	struct nn_block_shape sh = { .b = (int)b, .s = d->seq, .d = d->d_model,
	    .nh = (int)h, .hd = (int)hd, .f = (int)f, .causal = 1,
	    .act = NN_ACT_GELU };

	Ls = ceil((double)L / P);
	blk = bench_cost_linear(c, t, D, 3 * D / T) +
	    bench_cost_linear(c, t, D / T, D) + bench_cost_linear(c, t, D, f) +
	    bench_cost_linear(c, t, f, D) +
	    12 * b * h * S * S * hd / c->attn_rate +
	    20 * t * (f + 4 * D) / c->elem_rate;
	/* the heaviest stage: the last, with the tied head and the loss
	 * (the first holds only the embedding's gather) */
	st->fb = Ls * blk + bench_cost_linear(c, t, D, d->vocab) +
	    20 * t * d->vocab / c->elem_rate + (P == 1 ? 20 * t * D /
	    c->elem_rate : 0);
	ar = T > 1 ? bench_cost_coll(c, COLL_KIND_ALLREDUCE, COLL_RING, tlk,
	    T, tl, t * D * F4) : 0;
	st->tp = Ls * 4 * ar;
	st->tpb = T > 1 ? Ls * 4 * 2.0 * (T - 1) / T * t * D * F4 : 0;
	st->acts = Ls * (double)nn_block_acts_size(&sh) + 2 * t * d->vocab;
	st->params = bench_plan_params(d) / P;
}

static void
stage_mlp(const struct bench_plan_opts *o, int T, int P, double b,
    struct stage *st)
{
	const struct bench_cost *c = o->cost;
	const struct nn_dims *d = &o->dims;
	double H = (double)d->d_hidden / T, Ls, ar;
	int tl, L = d->layers > 0 ? d->layers : 1;
	enum bench_link tlk = group_link(T, 1, o->per_host, &tl);

	Ls = ceil((double)L / P);
	/* the first layer's input is the widest: the heaviest stage */
	st->fb = bench_cost_linear(c, b, d->d_in, H) +
	    bench_cost_linear(c, b, H, d->d_out) + (Ls - 1) *
	    (bench_cost_linear(c, b, d->d_out, H) + bench_cost_linear(c, b, H,
	    d->d_out)) + 20 * b * (Ls * H + d->d_out) / c->elem_rate;
	ar = T > 1 ? bench_cost_coll(c, COLL_KIND_ALLREDUCE, COLL_RING, tlk,
	    T, tl, b * d->d_out * F4) : 0;
	st->tp = Ls * 2 * ar;
	st->tpb = T > 1 ? Ls * 2 * 2.0 * (T - 1) / T * b * d->d_out * F4 : 0;
	st->acts = Ls * b * (d->d_in + 2 * H + d->d_out);
	st->params = bench_plan_params(d) / P;
}

/* The row's prediction; its memory against o->mem is the caller's. */
static void
predict(const struct bench_plan_opts *o, struct bubbles *bc,
    struct bench_plan_row *r)
{
	const struct bench_cost *c = o->cost;
	int D = r->dp, T = r->tp, P = r->pp, m = r->micro, l;
	double b = (double)o->batch / D / m, slow, fit, msg, g, ar, rs, ag;
	double width = o->dims.arch == NN_MLP ? o->dims.d_out :
	    (double)o->dims.d_model * o->dims.seq;
	struct stage st;
	enum bench_link lk;
	enum coll_algo algo;

	/* the fit timed compute in compute_ranks processes at once: its
	 * rates hold that much sharing of the cores (fit), the host's ranks
	 * all busy share them L / cores */
	fit = fmax(1, (double)c->compute_ranks / c->cores);
	slow = fmax(1, (double)o->per_host / c->cores) / fit;
	(o->dims.arch == NN_MLP ? stage_mlp : stage_gpt)(o, T, P, b, &st);
	/* activation forward, gradient back: both on the critical path */
	lk = group_link(2, T * D, o->per_host, &l);
	if ((long)P * T * D > o->per_host && P > 1)
		lk = BENCH_TCP;		/* some stage boundary crosses hosts */
	msg = P > 1 ? bench_cost_p2p(c, lk, b * width * F4) : 0;
	r->bubble_frac = bubble(bc, r->sched, m, P);
	r->compute = m * st.fb * slow;
	r->tp_s = m * st.tp;
	r->pp_s = m * 2 * msg;
	/* the pipeline's critical path at a core a rank; with more ranks
	 * than cores a stage's idle time is the other ranks' core time, so
	 * the host's work bounds the step instead when it is longer */
	r->bubble = fmax(0, (m * st.fb / fit + r->tp_s + r->pp_s) /
	    (1 - r->bubble_frac) - (r->compute + r->tp_s + r->pp_s));
	/* DP: the stage's gradient shard of this TP rank */
	g = st.params / T * F4;
	lk = group_link(D, T, o->per_host, &l);
	algo = lk == BENCH_TCP && l > 1 ? COLL_HIER : COLL_AUTO;
	ar = rs = ag = 0;
	if (D > 1 && r->zero == 0)
		ar = bench_cost_coll(c, COLL_KIND_ALLREDUCE, algo, lk, D, l, g);
	if (D > 1 && r->zero > 0) {
		rs = bench_cost_coll(c, COLL_KIND_REDUCE_SCATTER, algo, lk, D,
		    l, g);
		ag = bench_cost_coll(c, COLL_KIND_ALLGATHER, algo, lk, D, l, g);
	}
	/* hidden behind the last micro-batch's backward (two thirds of its
	 * pass), but for the bucket of the first layer, which ends it */
	ar += rs;
	r->dp_s = D > 1 ? fmax(ar - st.fb * slow * 2 / 3, ar /
	    (o->dims.layers > 0 ? o->dims.layers : 1)) + ag : 0;
	/* Adam: parameters, gradients and two moments read and written */
	r->compute += 28 * st.params / T / (r->zero > 0 ? D : 1) /
	    c->elem_rate * slow;
	r->step = r->compute + r->tp_s + r->pp_s + r->bubble + r->dp_s;
	r->bytes_tp = m * st.tpb;
	r->bytes_pp = P > 1 ? m * 2 * b * width * F4 : 0;
	r->bytes_dp = D > 1 ? 2.0 * (D - 1) / D * g : 0;
	/* params, gradients (ZeRO 2: a shard), Adam's two moments (ZeRO 1,
	 * 2: a shard), and the activations of the micro-batches in flight */
	r->mem = g * (1 + (r->zero >= 2 ? 1.0 / D : 1) + 2.0 /
	    (r->zero >= 1 ? D : 1)) + st.acts * F4 * (r->sched ==
	    PIPE_SCHED_GPIPE ? m : (m < P ? m : P));
	r->tokens = o->dims.arch == NN_MLP ? (double)o->batch :
	    (double)o->batch * o->dims.seq;
}

/* Whether the model admits T and P (collx-train's mesh checks). */
static int
admits(const struct nn_dims *d, int T, int P)
{
	if (d->arch == NN_MLP)
		return d->d_hidden % T == 0 &&
		    (d->layers > 0 ? d->layers : 1) >= P;
	return d->heads % T == 0 && d->d_ff % T == 0 && d->layers >= P;
}

static int
cmp_rows(const void *a, const void *b)
{
	const struct bench_plan_row *x = a, *y = b;

	return (x->step > y->step) - (x->step < y->step);
}

static void
add(const struct bench_plan_opts *o, struct bubbles *bc,
    struct bench_plan_row **rows, int *n, int *cap, struct bench_plan_row *r)
{
	if (*n == *cap) {
		*cap = *cap ? 2 * *cap : 256;
		*rows = cli_reallocarray(*rows, (size_t)*cap, sizeof **rows);
	}
	predict(o, bc, r);
	(*rows)[(*n)++] = *r;
}

/* Every option of one mesh: ZeRO 0-2, the schedules, m = P, 2P, 4P
 * micro-batches (m must cut each replica's batch). ZeRO 3 (issue 29)
 * joins as a level whose dp term adds each layer's parameter allgather
 * before its forward and backward; CP and EP as mesh axes with terms of
 * their own in predict() beside tp_s and pp_s. */
static void
options(const struct bench_plan_opts *o, struct bubbles *bc, int D, int T,
    int P, struct bench_plan_row **rows, int *n, int *cap)
{
	static const enum pipe_sched_kind sk[] = { PIPE_SCHED_1F1B,
	    PIPE_SCHED_GPIPE };

	for (int z = 0; z <= (o->as_mesh ? 0 : 2); z++)
		for (int s = 0; s < (P > 1 && !o->as_mesh ? 2 : 1); s++)
			for (int m = P; m <= (o->as_mesh ? P : 4 * P); m *= 2) {
				struct bench_plan_row r = { .dp = D, .tp = T,
				    .pp = P, .zero = z, .micro = m,
				    .sched = sk[s] };

				if (o->batch % ((long)D * m) != 0 ||
				    (z > 0 && D == 1))
					continue;
				add(o, bc, rows, n, cap, &r);
				if (P == 1)
					break;
			}
}

int
bench_plan(const struct bench_plan_opts *o, struct bench_plan_row **rows,
    int *n, int *nfit, int *code, char *err, size_t errlen)
{
	int W = o->hosts * o->per_host, cap = 0, k = 0;
	struct bubbles bc = { 0 };
	double least = 0;

	*rows = NULL;
	*n = *nfit = 0;
	if (o->mesh[0] > 0 && (long)o->mesh[0] * o->mesh[1] * o->mesh[2] != W) {
		*code = CLI_EXIT_USAGE;
		return cli_fail(err, errlen, "--mesh %d,%d,%d: %ld ranks, "
		    "not a factorization of the world's %d (%d hosts x %d)",
		    o->mesh[0], o->mesh[1], o->mesh[2], (long)o->mesh[0] *
		    o->mesh[1] * o->mesh[2], W, o->hosts, o->per_host);
	}
	for (int D = 1; D <= W; D++)
		for (int T = 1; W % D == 0 && T <= W / D; T++) {
			int P = W / D / T;

			if ((W / D) % T != 0 || !admits(&o->dims, T, P) ||
			    (o->mesh[0] > 0 && (o->mesh[0] != D ||
			    o->mesh[1] != T || o->mesh[2] != P)))
				continue;
			options(o, &bc, D, T, P, rows, n, &cap);
		}
	free(bc.v);
	if (*n == 0) {
		*code = CLI_EXIT_DATA;
		return cli_fail(err, errlen, "no mesh of %d ranks fits the "
		    "model and a global batch of %ld (tensor parallel must "
		    "divide the heads and widths, pipeline stages hold a layer "
		    "each, replicas x micro-batches must divide the batch)", W,
		    o->batch);
	}
	qsort(*rows, (size_t)*n, sizeof **rows, cmp_rows);
	/* those that fit first, in their order, then the rest */
	for (int i = 0; i < *n; i++)
		if (o->mem <= 0 || (*rows)[i].mem <= o->mem) {
			struct bench_plan_row t = (*rows)[i];

			memmove(&(*rows)[k + 1], &(*rows)[k],
			    (size_t)(i - k) * sizeof t);
			(*rows)[k++] = t;
		} else if (least == 0 || (*rows)[i].mem < least)
			least = (*rows)[i].mem;
	*nfit = k;
	if (k == 0) {
		/* a failed plan leaves the caller nothing to free */
		free(*rows);
		*rows = NULL;
		*n = 0;
		*code = CLI_EXIT_DATA;
		return cli_fail(err, errlen, "no mesh fits --mem-per-rank %.0f "
		    "bytes: the smallest needs %.0f", o->mem, least);
	}
	return 0;
}
