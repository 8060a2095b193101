/* bench_plan: the step model. For a mesh D x C x T x P of N hosts of L
 * ranks (rank = ((pp D + dp) C + cp) T + tp, collx-train's order) and m
 * micro-batches of the global batch B over D replicas:
 *
 *   pass    = stage compute of one micro-batch (b S / C tokens a rank)
 *             + its TP allreduces, CP's K/V ring steps not hidden by
 *             attention, EP's dispatch and combine
 *   pipe    = the schedule table's clocks (pipe_sched), each a pass at a
 *             core a rank, stretched where a host's active ranks outnumber
 *             its cores; communication over 1 - its idle share
 *             + the pipeline's messages on its path (pipe_msgs)
 *   dp      = the gradient sync over D C ranks not hidden behind the last
 *             micro-batch's backward (ZeRO 1, 2: reduce-scatter, then the
 *             parameters' allgather after the optimizer, which nothing
 *             hides; ZeRO 3: each layer's gathers and reduce-scatter
 *             beside its neighbours' compute, zero3())
 *   step    = pipe + dp + optimizer
 *
 * Collectives cost what bench_cost_coll says for the link class their
 * group crosses. Compute is the fitted rates times the model's flops,
 * slowed by the share of a core a rank gets when L ranks (L times the
 * cost file's machine_hosts where hosts share a machine) share fewer
 * cores than the fit found, beyond the share its own processes had.
 * Communication hides behind compute only on a spare core (spare_core).
 * collx-bench(1) gives every term. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench.h"
#include "bench/bench_plan.h"
#include "par/pipe.h"

#define F4 4.0			/* bytes of an f32 */

/* The schedule table of each (schedule, m, P, stage width, host) the
 * enumeration meets, walked once: its idle share b, and its length in
 * pass times when a host's ranks share its cores (slots). */
struct bubbles {
	struct { int kind, m, w, n, L; double b, slots, *load; } *v;
	int n;
};

/* The clocks of table s in passes of the heaviest stage, each as long
 * as its slowest active stage's pass (stage j's load[j] of the
 * heaviest's) or its busiest host's active work over its cores: a stage
 * of n ranks (the ranks of one stage across dp, cp and tp), on host
 * rank / L (L the ranks sharing its cores: machine_hosts hosts' on one
 * machine). With no more active ranks than cores and equal stages this
 * is the clock count, the table's length; with more, a pass of a
 * crowded clock takes as long as the work of every active rank over the
 * cores, a lighter stage's rank adding its load, while the table's
 * warm-up and drain run faster than the host's work over its cores
 * alone says. */
static double
slots(const struct pipe_sched *s, int n, int L, double cores,
    const double *load)
{
	int w = s->w, hosts = (int)(((long)w * n + L - 1) / L);
	double t = 0, *act = cli_calloc((size_t)hosts, sizeof *act);

	for (int c = 0; c < s->nclocks; c++) {
		double worst = 0;
		int mb, ch;

		memset(act, 0, (size_t)hosts * sizeof *act);
		for (int j = 0; j < w; j++)
			if (pipe_sched_cell(s, c, j, &mb, &ch) != 0) {
				act[(long)j * n / L] += (n < L ? n : L) *
				    load[j];
				worst = fmax(worst, load[j]);
			}
		for (int h = 0; h < hosts; h++)
			worst = fmax(worst, act[h] / cores);
		t += worst;
	}
	free(act);
	return t;
}

static double
bubble(struct bubbles *c, enum pipe_sched_kind kind, int m, int w, int n,
    int L, double cores, const double *load, double *sl)
{
	struct pipe_sched s;
	char e[COLLX_ERRLEN];
	double b;

	*sl = 2.0 * m;
	if (w == 1)
		return 0;
	for (int i = 0; i < c->n; i++)
		if (c->v[i].kind == (int)kind && c->v[i].m == m &&
		    c->v[i].w == w && c->v[i].n == n && c->v[i].L == L &&
		    memcmp(c->v[i].load, load, (size_t)w * sizeof *load) == 0) {
			*sl = c->v[i].slots;
			return c->v[i].b;
		}
	memset(&s, 0, sizeof s);
	if (pipe_sched_build(&s, kind, m, w, e, sizeof e) < 0) {
		b = pipe_sched_bubble(kind, m, w, 1);	/* its closed form */
		*sl = 2.0 * m / (1 - b);
	} else {
		b = pipe_sched_table_bubble(&s);
		*sl = slots(&s, n, L, cores, load);
	}
	pipe_sched_free(&s);
	c->v = cli_reallocarray(c->v, (size_t)c->n + 1, sizeof *c->v);
	c->v[c->n].kind = kind, c->v[c->n].m = m, c->v[c->n].w = w;
	c->v[c->n].n = n, c->v[c->n].L = L, c->v[c->n].slots = *sl;
	c->v[c->n].load = cli_reallocarray(NULL, (size_t)w, sizeof *load);
	memcpy(c->v[c->n].load, load, (size_t)w * sizeof *load);
	c->v[c->n++].b = b;
	return b;
}

/* One layer's parameters (its experts' too): what pipe_split balances. */
static double
layer_params(const struct nn_dims *d, int i)
{
	double D = d->d_model, f = d->d_ff, in, h;

	if (d->arch == NN_MLP) {
		in = i == 0 ? d->d_in : d->d_out;
		h = d->d_hidden;
		return in * h + h + h * d->d_out + d->d_out;
	}
	/* qkv, proj, fc1, fc2 with biases; two LayerNorms; a MoE layer: E
	 * experts' mlps for the one, and the router */
	return 3 * D * D + 3 * D + D * D + D + 2 * D * f + f + D + 4 * D +
	    (d->moe.experts > 0 && nn_dims_moe_layer(d, i) ?
	    (d->moe.experts - 1) * (2 * D * f + f + D) + D * d->moe.experts :
	    0);
}

double
bench_plan_params(const struct nn_dims *d)
{
	double n = 0;
	int L = d->layers > 0 ? d->layers : 1;

	for (int i = 0; i < L; i++)
		n += layer_params(d, i);
	if (d->arch == NN_MLP)
		return n;
	return n + (double)d->vocab * d->d_model + (double)d->seq *
	    d->d_model + 2.0 * d->d_model;
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

double
bench_plan_expert_params(const struct nn_dims *d)
{
	double D = d->d_model, f = d->d_ff, n = 0;

	if (d->arch == NN_MLP || d->moe.experts <= 0)
		return 0;
	for (int i = 0; i < d->layers; i++)
		if (nn_dims_moe_layer(d, i))
			n += d->moe.experts * (2 * D * f + f + D);
	return n;
}

/* One stage's compute and traffic for one micro-batch of b samples: its
 * forward and backward seconds (*fb), of which attention (attn); its TP
 * allreduces' seconds (*tp) and bytes (*tpb); the floats of activations
 * it keeps (*acts); its parameters (whole before TP; of which experts);
 * its layers and MoE layers; a layer's K and V bytes (kv, cp) and a MoE
 * layer's dispatched bytes (moe, ep); each stage's forward and backward
 * as a share of the heaviest's (load, P of them, the caller's to free). */
struct stage {
	double fb, attn, tp, tpb, acts, *load;
	double params, eparams;
	double kv, moe;
	int layers, nmoe;
};

/* The stages' layers as pipe_split balances them (on parameters) and
 * each stage's forward and backward seconds of a micro-batch: its
 * layers' (lay0 the first's, lay another's, moe more a MoE layer's), emb
 * on the first stage and head on the last. The heaviest's is st->fb,
 * its layers st->layers and MoE layers st->nmoe; st->load each stage's
 * share of it. */
static void
stage_loads(const struct nn_dims *d, int P, double lay0, double lay,
    double moe, double emb, double head, struct stage *st)
{
	int L = d->layers > 0 ? d->layers : 1, heavy = 0;
	int *first = cli_calloc((size_t)P + 1, sizeof *first);
	double *cum = cli_calloc((size_t)L + 1, sizeof *cum);

	for (int l = 0; l < L; l++)
		cum[l + 1] = cum[l] + layer_params(d, l);
	pipe_split_balanced(cum, L, P, first);
	st->load = cli_calloc((size_t)P, sizeof *st->load);
	for (int j = 0; j < P; j++) {
		for (int l = first[j]; l < first[j + 1]; l++)
			st->load[j] += (l == 0 ? lay0 : lay) + (d->moe.experts >
			    0 && nn_dims_moe_layer(d, l) ? moe : 0);
		st->load[j] += (j == 0 ? emb : 0) + (j == P - 1 ? head : 0);
		if (st->load[j] > st->load[heavy])
			heavy = j;
	}
	st->fb = st->load[heavy];
	st->layers = first[heavy + 1] - first[heavy];
	st->nmoe = 0;
	for (int l = first[heavy]; l < first[heavy + 1]; l++)
		st->nmoe += d->moe.experts > 0 && nn_dims_moe_layer(d, l);
	for (int j = 0; j < P; j++)
		st->load[j] /= st->fb;
	free(first);
	free(cum);
}

static void
stage_gpt(const struct bench_plan_opts *o, const struct bench_plan_row *r,
    double b, struct stage *st)
{
	const struct bench_cost *c = o->cost;
	const struct nn_dims *d = &o->dims;
	int T = r->tp, C = r->cp, P = r->pp, tl;
	double D = d->d_model, f = d->d_ff / T, S = d->seq, t = b * S / C;
	double h = d->heads / T, hd = D / d->heads, blk, mlp, ar, Ls, imb;
	double lay;
	double K = d->moe.topk > 0 ? d->moe.topk : 1, E = d->moe.experts;
	double kept = d->moe.capacity > 0 && d->moe.capacity < 1 ?
	    d->moe.capacity : 1;
	enum bench_link tlk = group_link(T, 1, o->per_host, &tl);
	struct nn_block_shape sh = { .b = (int)b, .s = d->seq / C,
	    .d = d->d_model, .nh = (int)h, .hd = (int)hd, .f = (int)f,
	    .causal = 1, .act = NN_ACT_GELU };

	/* causal attention of a rank's S/C queries: ring's contiguous chunks
	 * leave the last rank C - 1/2 of the C/2 blocks a rank averages;
	 * zigzag's pairs of chunks balance it */
	imb = C > 1 && !r->zigzag ? 2 - 1.0 / C : 1;
	st->attn = 12 * b * h * S * S * hd / c->attn_rate / C * imb;
	blk = bench_cost_linear(c, t, D, 3 * D / T) +
	    bench_cost_linear(c, t, D / T, D) + st->attn +
	    20 * t * 4 * D / c->elem_rate;
	mlp = bench_cost_linear(c, t, D, f) + bench_cost_linear(c, t, f, D) +
	    20 * t * f / c->elem_rate;
	/* a MoE layer: the router, and K experts' mlps a token (balanced
	 * routing; a capacity under 1 drops the rest); the last stage holds
	 * the tied head and the loss, the first the embedding's gradient */
	lay = blk + mlp;
	stage_loads(d, P, lay, lay, (K * kept - 1) * mlp +
	    bench_cost_linear(c, t, D, E), 20 * t * D / c->elem_rate,
	    bench_cost_linear(c, t, D, d->vocab) + 20 * t * d->vocab /
	    c->elem_rate, st);
	Ls = st->layers;
	st->attn *= Ls;
	ar = T > 1 ? bench_cost_coll(c, COLL_KIND_ALLREDUCE, COLL_RING, tlk,
	    T, tl, t * D * F4) : 0;
	st->tp = Ls * 4 * ar;
	st->tpb = T > 1 ? Ls * 4 * 2.0 * (T - 1) / T * t * D * F4 : 0;
	st->acts = Ls * (double)nn_block_acts_size(&sh) + 2 * t * d->vocab +
	    st->nmoe * t * K * (D + 2 * f);
	st->params = bench_plan_params(d) / P;
	st->eparams = bench_plan_expert_params(d) / P;
	st->kv = 2 * t * D / T * F4;
	st->moe = t * K * D * F4;
}

static void
stage_mlp(const struct bench_plan_opts *o, const struct bench_plan_row *r,
    double b, struct stage *st)
{
	const struct bench_cost *c = o->cost;
	const struct nn_dims *d = &o->dims;
	int T = r->tp, P = r->pp, tl;
	double H = (double)d->d_hidden / T, Ls, ar, el = 20 * b * H /
	    c->elem_rate;
	enum bench_link tlk = group_link(T, 1, o->per_host, &tl);

	memset(st, 0, sizeof *st);
	/* the first layer reads the input's width; the loss on the last */
	stage_loads(d, P, bench_cost_linear(c, b, d->d_in, H) +
	    bench_cost_linear(c, b, H, d->d_out) + el,
	    bench_cost_linear(c, b, d->d_out, H) + bench_cost_linear(c, b, H,
	    d->d_out) + el, 0, 0, 20 * b * d->d_out / c->elem_rate, st);
	Ls = st->layers;
	ar = T > 1 ? bench_cost_coll(c, COLL_KIND_ALLREDUCE, COLL_RING, tlk,
	    T, tl, b * d->d_out * F4) : 0;
	st->tp = Ls * 2 * ar;
	st->tpb = T > 1 ? Ls * 2 * 2.0 * (T - 1) / T * b * d->d_out * F4 : 0;
	st->acts = Ls * b * (d->d_in + 2 * H + d->d_out);
	st->params = bench_plan_params(d) / P;
}

/* The share of a core a rank's communication finds while the host's
 * ranks compute: shared memory copies and the TCP stack are CPU work,
 * so it overlaps compute only on cores no rank computes on. */
static double
spare_core(const struct bench_cost *c, int L)
{
	return fmin(1, fmax(0, (double)(c->cores - L) / L));
}

/* The link between the ranks of stages i and j of a pipeline whose
 * stages are s ranks apart, L ranks a host: TCP when any of them sits on
 * another host than its partner. */
static enum bench_link
stage_link(int i, int j, int s, int L)
{
	long lo = (long)i * s, hi = (long)j * s;

	return lo / L == (hi + s - 1) / L ? BENCH_SHM : BENCH_TCP;
}

/* The pipeline's messages on its critical path, seconds a step: isend
 * lets a message fly while the receiver runs another micro-batch's pass,
 * so each boundary's is exposed once in the warm-up (the first
 * activation) and once in the drain (the last gradient); a link slower
 * than a micro-batch's forward and backward fb paces the steady state,
 * the other m - 1 micro-batches each adding the difference; and the tied
 * embedding's gradient (tied bytes; 0: none) between the first and the
 * last stage after the drain. P stages s ranks apart, a message of bytes. */
static double
pipe_msgs(const struct bench_cost *c, int P, int s, int L, int m,
    double bytes, double tied, double fb)
{
	double t = 0, worst = 0;

	for (int j = 0; j + 1 < P; j++) {
		double x = bench_cost_p2p(c, stage_link(j, j + 1, s, L), bytes);

		t += 2 * x;
		worst = fmax(worst, x);
	}
	t += (m - 1) * fmax(0, worst - fb);
	if (P > 1 && tied > 0)
		t += bench_cost_p2p(c, stage_link(0, P - 1, s, L), tied);
	return t;
}

/* ZeRO 3's exposed seconds a step over a shard group of n ranks (link
 * lk, l of them a host), a layer's gradient of g bytes, Ls layers each
 * f forward and w backward seconds a micro-batch, m micro-batches, hide
 * the spare core's share: each layer's gather before its forward and
 * (resharded) before its backward, the next layer's prefetched under
 * this one; the reduce-scatter after the last micro-batch's backward of
 * each layer, beside the next gather. HSDP (hx hosts of n ranks): each
 * layer's shard also allreduced across the hosts. *bytes: sent. */
static double
zero3(const struct bench_cost *c, enum bench_link lk, int n, int l, int hx,
    double g, int Ls, double f, double w, int m, double hide,
    double *bytes)
{
	enum coll_algo a = lk == BENCH_TCP && l > 1 ? COLL_HIER : COLL_AUTO;
	double ag = bench_cost_coll(c, COLL_KIND_ALLGATHER, a, lk, n, l, g);
	double rs = bench_cost_coll(c, COLL_KIND_REDUCE_SCATTER, a, lk, n, l,
	    g);
	double fwd = ag + (Ls - 1) * fmax(0, ag - hide * f);
	double bwd = ag + (Ls - 1) * fmax(0, ag - hide * w);

	if (hx > 1)
		rs += bench_cost_coll(c, COLL_KIND_ALLREDUCE, COLL_AUTO,
		    BENCH_TCP, hx, 1, g / n);
	*bytes = Ls * (2.0 * m + 1) * (n - 1) / n * g + (hx > 1 ? Ls * 2.0 *
	    (hx - 1) / hx * g / n : 0);
	return m * fwd + (m - 1) * bwd + ag + (Ls - 1) * fmax(0, ag + rs -
	    hide * w) + rs;
}

/* The row's prediction; its memory against o->mem is the caller's. */
static void
predict(const struct bench_plan_opts *o, struct bubbles *bc,
    struct bench_plan_row *r)
{
	const struct bench_cost *c = o->cost;
	int D = r->dp, T = r->tp, P = r->pp, C = r->cp, X = r->ep, m = r->micro;
	int G = D * C, l, L = o->per_host, sh;
	/* the ranks sharing one machine's cores: a host's, or those of the
	 * hosts an emulated cluster runs on one machine */
	int Lm = L * (c->machine_hosts > 1 ? c->machine_hosts : 1);
	double b = (double)o->batch / D / m, slow, fit, gd, ge, ar, rs,
	    ag, hide, kvt, bw, z3b = 0, sl, comm, clocks;
	double width = o->dims.arch == NN_MLP ? o->dims.d_out :
	    (double)o->dims.d_model * o->dims.seq / C;
	struct stage st;
	enum bench_link lk;
	enum coll_algo algo;

	/* the fit timed compute in compute_ranks processes at once: its
	 * rates hold that much sharing of the cores (fit), the host's ranks
	 * all busy share them Lm / cores */
	fit = fmax(1, (double)c->compute_ranks / c->cores);
	slow = fmax(1, (double)Lm / c->cores) / fit;
	hide = spare_core(c, Lm);
	(o->dims.arch == NN_MLP ? stage_mlp : stage_gpt)(o, r, b, &st);
	r->bubble_frac = bubble(bc, r->sched, m, P, T * C * D, Lm, c->cores,
	    st.load, &sl);
	free(st.load);
	/* the heaviest stage's passes, at most the clocks they run in: a
	 * crowded machine's cores also serve the lighter stages' ranks */
	clocks = sl * st.fb / fit / 2;
	r->compute = fmin(m * st.fb * slow, P > 1 ? clocks : INFINITY);
	r->tp_s = m * st.tp;
	r->pp_s = pipe_msgs(c, P, T * C * D, L, m, b * width * F4,
	    o->dims.arch == NN_MLP ? 0 : (double)o->dims.vocab *
	    o->dims.d_model * F4, st.fb * slow);
	/* CP: each layer's K and V pass the ring in C - 1 steps forward,
	 * K, V and their gradients backward, each step under a block of
	 * attention (a third of it forward) */
	r->cp_s = r->bytes_cp = 0;
	if (C > 1) {
		lk = group_link(2, T, L, &l);
		if (C * T > L)
			lk = BENCH_TCP;
		kvt = st.attn * slow / st.layers / C;
		r->cp_s = m * st.layers * (C - 1) * (fmax(0,
		    bench_cost_p2p(c, lk, st.kv) - hide * kvt / 3) + fmax(0,
		    bench_cost_p2p(c, lk, 2 * st.kv) - hide * kvt * 2 / 3));
		r->bytes_cp = m * st.layers * (C - 1) * 3 * st.kv;
	}
	/* EP: each MoE layer's tokens to their experts and back, forward and
	 * backward: four alltoallv of the assignments, or (allgather) the
	 * group's tokens gathered and the outputs reduce-scattered, twice */
	r->ep_s = r->bytes_ep = 0;
	if (X > 1 && st.nmoe > 0) {
		lk = group_link(X, T * C, L, &l);
		algo = lk == BENCH_TCP && l > 1 ? COLL_HIER : COLL_AUTO;
		if (!r->gather) {
			r->ep_s = 4 * bench_cost_coll(c, COLL_KIND_ALLTOALL,
			    COLL_AUTO, lk, X, l, st.moe);
			r->bytes_ep = 4.0 * (X - 1) / X * st.moe;
		} else {
			double all = X * st.moe / (o->dims.moe.topk > 0 ?
			    o->dims.moe.topk : 1);

			r->ep_s = 2 * (bench_cost_coll(c, COLL_KIND_ALLGATHER,
			    algo, lk, X, l, all) + bench_cost_coll(c,
			    COLL_KIND_REDUCE_SCATTER, algo, lk, X, l, all));
			r->bytes_ep = 4.0 * (X - 1) / X * all;
		}
		r->ep_s *= m * st.nmoe;
		r->bytes_ep *= m * st.nmoe;
	}
	/* the pipeline: its table's clocks, a pass (half a micro-batch's
	 * forward and backward) each at a whole core a rank, longer where a
	 * host's active ranks outnumber its cores; the communication inside
	 * the passes stretched by the idle share (the pipeline's messages
	 * are their path's already); the bubble what this adds to the
	 * compute and communication */
	comm = r->tp_s + r->cp_s + r->ep_s;
	r->bubble = fmax(0, clocks + comm / (1 -
	    r->bubble_frac) - (r->compute + comm));
	/* DP: the stage's gradient of this TP rank, summed over the dp x cp
	 * ranks (cp's hold the same weights); the experts' over those of
	 * them that hold the same experts */
	gd = (st.params - st.eparams) / T * F4;
	ge = st.eparams / T / X * F4;
	lk = group_link(G, T, L, &l);
	algo = lk == BENCH_TCP && l > 1 ? COLL_HIER : COLL_AUTO;
	bw = st.fb * slow * 2 / 3;	/* the last micro-batch's backward */
	/* a host holds l ranks of each of its L / l groups (one a TP rank),
	 * which sync at once: across hosts they share its link, each
	 * priced as the link carrying all of their bytes */
	sh = lk == BENCH_TCP ? L / l : 1;
	ar = rs = ag = 0;
	r->bytes_dp = 0;
	if (G > 1 && r->zero == 0)
		ar = bench_cost_coll(c, COLL_KIND_ALLREDUCE, algo, lk, G, l,
		    sh * gd) + (G / X > 1 && ge > 0 ? bench_cost_coll(c,
		    COLL_KIND_ALLREDUCE, algo, lk, G / X, l, sh * ge) : 0);
	if (G > 1 && (r->zero == 1 || r->zero == 2)) {
		rs = bench_cost_coll(c, COLL_KIND_REDUCE_SCATTER, algo, lk, G,
		    l, sh * (gd + ge));
		ag = bench_cost_coll(c, COLL_KIND_ALLGATHER, algo, lk, G, l,
		    sh * (gd + ge));
	}
	if (G > 1 && r->zero < 3) {
		/* hidden behind the last micro-batch's backward where a core
		 * is spare, but for the bucket of the first layer, which
		 * ends it */
		ar += rs;
		r->dp_s = fmax(ar - hide * bw, ar / st.layers) + ag;
		r->bytes_dp = 2.0 * (G - 1) / G * (gd + ge);
	} else if (G > 1) {
		int n = r->hsdp ? l : G;

		r->dp_s = zero3(c, r->hsdp ? BENCH_SHM : lk, n, l, G / n,
		    gd / st.layers, st.layers, st.fb * slow / 3 / st.layers,
		    bw / st.layers, m, hide, &z3b);
		r->bytes_dp = z3b;
	} else
		r->dp_s = 0;
	/* the optimizer on the rank's shard: AdamW reads and writes the
	 * parameters and two moments and reads the gradients (7 floats a
	 * parameter), SGD (no momentum) reads the parameters and gradients
	 * and writes the parameters (3); and the gradients zeroed for the
	 * next step (the whole, at any level) */
	r->compute += ((o->adamw ? 28 : 12) / (r->zero > 0 ? (r->hsdp ? l :
	    G) : 1.0) + 4) * (gd + ge) / F4 / c->elem_rate * slow;
	r->step = r->compute + r->tp_s + r->pp_s + r->cp_s + r->ep_s +
	    r->bubble + r->dp_s;
	r->bytes_tp = m * st.tpb;
	r->bytes_pp = P > 1 ? m * 2 * b * width * F4 : 0;
	/* params, gradients (ZeRO 2: a shard), Adam's two moments (ZeRO 1,
	 * 2: a shard; SGD none); ZeRO 3: all a shard, with two layers gathered
	 * whole (this one and the prefetched); and the activations of the
	 * micro-batches in flight */
	if (r->zero == 3) {
		int n = r->hsdp ? l : G;

		r->mem = (gd + ge) * (o->adamw ? 4 : 2) / n + 2 * gd /
		    st.layers;
	} else
		r->mem = (gd + ge) * (1 + (r->zero >= 2 ? 1.0 / G : 1) +
		    (o->adamw ? 2.0 : 0) / (r->zero >= 1 ? G : 1));
	r->mem += st.acts * F4 * (r->sched == PIPE_SCHED_GPIPE ? m :
	    (m < P ? m : P));
	r->tokens = o->dims.arch == NN_MLP ? (double)o->batch :
	    (double)o->batch * o->dims.seq;
}

/* Whether the model admits T, P and C (collx-train's mesh checks; C
 * zigzag: 2C chunks of the sequence). */
static int
admits(const struct nn_dims *d, int T, int P, int C, int zigzag)
{
	if (d->arch == NN_MLP)
		return C == 1 && d->d_hidden % T == 0 &&
		    (d->layers > 0 ? d->layers : 1) >= P;
	return d->heads % T == 0 && d->d_ff % T == 0 && d->layers >= P &&
	    d->seq % (C * (zigzag ? 2 : 1)) == 0;
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

/* One mesh's row under each schedule and micro-batch count. */
static void
schedules(const struct bench_plan_opts *o, struct bubbles *bc, int D, int C,
    int T, int P, int X, int ga, int zz, int z, int hs,
    struct bench_plan_row **rows, int *n, int *cap)
{
	static const enum pipe_sched_kind sk[] = { PIPE_SCHED_1F1B,
	    PIPE_SCHED_GPIPE };

	for (int s = 0; s < (P > 1 && !o->as_mesh ? 2 : 1); s++)
		for (int m = P; m <= (o->as_mesh ? P : 4 * P); m *= 2) {
			struct bench_plan_row r = { .dp = D, .tp = T, .pp = P,
			    .zero = z, .micro = m, .sched = sk[s], .cp = C,
			    .ep = X, .zigzag = zz, .hsdp = hs, .gather = ga };

			if (o->batch % ((long)D * m) != 0 ||
			    (z > 0 && D * C == 1))
				continue;
			add(o, bc, rows, n, cap, &r);
			if (P == 1)
				break;
		}
}

/* Every option of one mesh: ZeRO 0-3 (3 also as HSDP where the group
 * spans hosts of several of its ranks; none with experts, which collx-dp
 * refuses), the schedules, m = P, 2P, 4P micro-batches (m must cut each
 * replica's batch), cp's ring and zigzag, ep over X of the D replicas
 * that divides the experts, by alltoallv or allgather. */
static void
options(const struct bench_plan_opts *o, struct bubbles *bc, int D, int C,
    int T, int P, struct bench_plan_row **rows, int *n, int *cap)
{
	int E = o->dims.moe.experts, l, G = D * C;
	int hx = group_link(G, T, o->per_host, &l) == BENCH_TCP && l > 1;

	for (int X = 1; X <= (o->as_mesh || E <= 0 ? 1 : D); X++) {
		if (D % X != 0 || (X > 1 && E % X != 0))
			continue;
		for (int ga = 0; ga < (X > 1 ? 2 : 1); ga++)
			for (int zz = 0; zz < (C > 1 ? 2 : 1); zz++) {
				if (!admits(&o->dims, T, P, C, zz))
					continue;
				for (int z = 0; z <= (o->as_mesh ? 0 : E > 0 ?
				    2 : 3); z++)
					for (int hs = 0; hs < (z == 3 && hx ?
					    2 : 1); hs++)
						schedules(o, bc, D, C, T, P, X,
						    ga, zz, z, hs, rows, n,
						    cap);
			}
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
	for (int C = 1; W % D == 0 && C <= (o->as_mesh ||
	    o->dims.arch == NN_MLP ? 1 : W / D); C++)
		for (int T = 1; (W / D) % C == 0 && T <= W / D / C; T++) {
			int P = W / D / C / T;

			if ((W / D / C) % T != 0 || !admits(&o->dims, T, P, C,
			    0) || (o->mesh[0] > 0 && (o->mesh[0] != D ||
			    o->mesh[1] != T || o->mesh[2] != P || C > 1)))
				continue;
			options(o, &bc, D, C, T, P, rows, n, &cap);
		}
	for (int i = 0; i < bc.n; i++)
		free(bc.v[i].load);
	free(bc.v);
	if (*n == 0) {
		*code = CLI_EXIT_DATA;
		return cli_fail(err, errlen, "no mesh of %d ranks fits the "
		    "model and a global batch of %ld (tensor parallel must "
		    "divide the heads and widths, pipeline stages hold a layer "
		    "each, context parallel must divide the sequence, replicas "
		    "x micro-batches must divide the batch)", W,
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
