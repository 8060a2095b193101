/*
 * pipe_dp_sync: the gradient sums of a pipeline's DP axis but ZeRO's
 * (pipe_dp_zero.c), plain or as cfg->dpo says (--wire, --powersgd,
 * --sync-every), by collx-dp's own code (dp_sync.h) over the stage's
 * vector (r->params, r->grads: the model's, or a tp_stage's). Its buckets
 * are collx-dp's (buckets() below), summed overlapped with the backward
 * pass where the stage allows it (overlap_init); PowerSGD's buckets are
 * the parameter ranges the stage owns (r->own; a tp_stage's one), its
 * matrices the stage's tensors where the vector holds them (so PowerSGD
 * is built for a stage of one TP rank only), their first Qs those
 * collx-dp draws with --seed 0 for the model's tensor of the same name.
 * The rest of the step is the runner's: pipe_dp_sync sums the loss, the
 * update steps every owned range, then local SGD's outer step.
 *
 * PowerSGD and local SGD act on each tensor alone, so with two replicas,
 * where every sum is a + b whatever the order, a stage's parameters end
 * bitwise as collx-dp's with the same options on the same gradients.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "cli/util.h"
#include "comm/coll.h"
#include "par/dp_sync.h"
#include "par/ep.h"
#include "par/pipe.h"
#include "par/pipe_int.h"
#include "par/tp_stage.h"

/* A tensor of the stage's vector: the model's index, where it lies in the
 * vector, its floats, its group (1: replicated over a TP group;
 * SEG_EXPERTS: an expert's, divided over the EP ranks, par/ep.h). */
#define SEG_EXPERTS 2
struct seg {
	size_t idx, off, count;
	int group;
};

/* A gradient bucket: segments [s0, s1) of the model-ordered list, len
 * floats; in place when they lie end to end in the vector, or fill one
 * range of it where the order does not change the sum, from off. */
struct bkt {
	size_t s0, s1, len, off;
	int inplace;
};

struct pipe_dp_sync {
	size_t n;		/* floats of the stage's vector */
	struct dp_range *rg;	/* the owned ranges: PowerSGD's buckets */
	int nrg;
	struct seg *seg;	/* the stage's tensors in the model's order */
	struct bkt *bk;		/* collx-dp's buckets of them */
	int nbk;
	float *gs, *es;		/* a bucket gathered: values, error feedback */
	struct dp_ovl *ovl;	/* overlap with the backward pass, or NULL */
	int *ready;		/* the stage completing each bucket */
	int *lstage;		/* the stage completing each layer's tensors */
	int *npass;		/* per chunk: the step's backwards (or, split,
				 * weight parts) so far */
	int tied;		/* wte's gradient is summed after the schedule */
	int armed;		/* the step's buckets have begun */
	double waited;		/* the step's waits for them in backwards */
	uint64_t sent;		/* the DP group's bytes sent when armed */
	struct dp_wire wire;
	struct dp_powersgd *psgd;
	float *anchor, *outer_m;	/* local SGD */
	/* the sums run on into the next forward (runon_init) */
	int runon;		/* built for this stage */
	int *unit;		/* per bucket: its first forward unit (-1 the
				 * embeddings, L the head) */
	int *need;		/* per unit + 1: the buckets, in posting
				 * order, done before its forward */
	int due;		/* the backward left buckets to post */
	int pending;		/* posted, the next forward not through */
	int seen;		/* that forward has begun a layer */
	int failed;		/* a sum or an update failed (r->err) */
	atomic_int fwd;		/* the forward's last unit past its wait */
	long pstep, held;	/* the step that posted; whose report waits */
	pipe_step_fn fn;	/* the held report's */
	void *fnctx;
	const struct pipe_result *res;
	double posted, fwait, busy0;
	_Atomic double tend;	/* the last update's end */
	uint64_t sent0;
};

/* The model's tensor named name: its index in m->table (its first Q's
 * seed), or the table's size. */
static size_t
tensor_index(const struct nn_model *m, const char *name)
{
	const struct nn_param *p = nn_model_param(m, name);

	return p != NULL ? (size_t)(p - m->table) : m->ntensors;
}

/* PowerSGD's matrices: the stage's tensors, where its vector holds them
 * (a tp_stage's of one rank: whole tensors, in its own order). */
static int
psgd_init(struct pipe_run *r, struct pipe_dp_sync *s)
{
	size_t nt = 0, i, base = 0;
	struct dp_powersgd_tensor *t = calloc(r->m->ntensors * r->nchunk + 1,
	    sizeof(*t));
	char e[COLLX_ERRLEN];

	if (t == NULL)
		return pipe_oom(r);
	for (int c = 0; c < r->nchunk; base += r->ts[c++].nlocal)
		for (i = 0; i < r->ts[c].nten; i++) {
			const struct tp_param *p = &r->ts[c].ten[i].p;

			if (p->present)
				t[nt++] = (struct dp_powersgd_tensor){
				    tensor_index(r->m, r->ts[c].ten[i].name),
				    base + p->off, p->ndim == 2 ?
				    (size_t)p->shape[0] : p->count, p->count };
		}
	s->psgd = dp_powersgd_new(t, nt, s->rg, s->nrg, s->n, r->cfg->dpo.powersgd, 0,
	    e, sizeof(e));
	free(t);
	if (s->psgd != NULL)
		return 0;
	r->kind = TRAIN_ERR_RUNTIME;
	return cli_fail(r->err, r->errlen, "rank %d: %s", r->rank, e);
}

/* The group a bucket is summed over: the DP axis, or a divided expert's
 * replicas. */
static struct comm *
bucket_comm(const struct pipe_run *r, const struct pipe_dp_sync *s,
    const struct bkt *b)
{
	return b->s1 > b->s0 && s->seg[b->s0].group == SEG_EXPERTS ?
	    ep_divides(r->cfg->ep)->rep : r->cfg->dp;
}

/*
 * Whether an f32 sum over c leaves every element the same wherever it
 * lies in the buffer. Ring and halving algorithms reduce each part in an
 * order that depends on the part, so a bucket summed in another layout
 * may round otherwise; but where every level of the sum adds two
 * operands (2 ranks, or AUTO's hier over at most 2 hosts of at most 2
 * ranks: (a + b) + (c + d), each sum commutative) no order is left to
 * depend on it.
 */
static int
sum_anywhere(const struct comm *c)
{
	int w = comm_size(c), h = comm_hosts(c), n[2] = { 0, 0 };

	if (w <= 2)
		return 1;
	if (h != 2 || w > 4)
		return 0;
	for (int q = 0; q < w; q++)
		n[comm_host(c, q)]++;
	return n[0] <= 2 && n[1] <= 2;
}

/* A bucket's segments, when they fill one range of the stage's vector in
 * another order: where that range starts, else -1. Summed there in place
 * (the copies to and from the model's order spared) where sum_anywhere
 * says the bits come out the same. */
static long
bucket_range(const struct pipe_dp_sync *s, const struct bkt *bk)
{
	size_t lo = (size_t)-1, hi = 0;

	for (size_t i = bk->s0; i < bk->s1; i++) {
		lo = s->seg[i].off < lo ? s->seg[i].off : lo;
		hi = s->seg[i].off + s->seg[i].count > hi ?
		    s->seg[i].off + s->seg[i].count : hi;
	}
	return bk->s1 > bk->s0 && hi - lo == bk->len ? (long)lo : -1;
}

static int
seg_cmp(const void *a, const void *b)
{
	const struct seg *x = a, *y = b;

	return (x->idx > y->idx) - (x->idx < y->idx);
}

/* The stage's tensors: its tp_stages', chunk after chunk. Returns how
 * many. */
static size_t
segs(const struct pipe_run *r, struct seg *sg)
{
	size_t n = 0, base = 0, i;

	for (int c = 0; c < r->nchunk; c++) {
		const struct tp_stage *ts = &r->ts[c];

		for (i = 0; i < ts->nten; i++) {
			const struct tp_param *p = &ts->ten[i].p;

			if (!p->present || p->count == 0)
				continue;
			sg[n++] = (struct seg){ tensor_index(r->m,
			    ts->ten[i].name), base + p->off, p->count,
			    ts->T > 1 && p->split == TP_WHOLE };
			/* divided experts: summed over their own replicas */
			if (ep_divides(r->cfg->ep) != NULL &&
			    ep_expert_of(ts->ten[i].name) >= 0)
				sg[n - 1].group = SEG_EXPERTS;
		}
		base += ts->nlocal;
	}
	return n;
}

/*
 * collx-dp's buckets (dp_buckets_cut) over the stage's tensors laid end
 * to end in the model's order, so that a stage holding the whole model
 * syncs collx-dp's buckets byte for byte, whatever order its vector
 * keeps; under a TP group the replicated tensors are bucketed apart from
 * the shards, so that every TP rank sums (and rounds) them alike.
 */
static int
buckets(struct pipe_run *r, struct pipe_dp_sync *s, size_t *maxn)
{
	const struct nn_model *m = r->m;
	size_t cap = 0, ns, i, pos = 0, *b;
	struct dp_tensor *t;
	int k;

	for (k = 0; k < r->nchunk; k++)
		cap += r->ts[k].nten;
	s->seg = calloc(cap + 1, sizeof(*s->seg));
	t = calloc(cap + 1, sizeof(*t));
	b = calloc(cap + 2, sizeof(*b));
	s->bk = calloc(cap + 1, sizeof(*s->bk));
	if (s->seg == NULL || t == NULL || b == NULL || s->bk == NULL) {
		free(t);
		free(b);
		return pipe_oom(r);
	}
	ns = segs(r, s->seg);
	qsort(s->seg, ns, sizeof(*s->seg), seg_cmp);
	for (i = 0; i < ns; i++) {
		t[i] = (struct dp_tensor){ pos, s->seg[i].count,
		    nn_model_grad_stage(m, s->seg[i].idx), s->seg[i].group };
		pos += s->seg[i].count;
	}
	s->nbk = dp_buckets_cut(t, ns, pos, r->cfg->dpo.bucket_bytes /
	    sizeof(float), b);
	if ((s->ready = calloc((size_t)s->nbk, sizeof(int))) == NULL) {
		free(t);
		free(b);
		return pipe_oom(r);
	}
	dp_buckets_ready(t, ns, b, s->nbk, s->ready);
	for (k = 0, i = 0; k < s->nbk; k++) {
		struct bkt *bk = &s->bk[k];

		bk->s0 = i;
		bk->len = b[k + 1] - b[k];
		bk->off = i < ns ? s->seg[i].off : 0;
		bk->inplace = 1;
		for (; i < ns && t[i].off < b[k + 1]; i++)
			if (i > bk->s0 && s->seg[i].off != s->seg[i - 1].off +
			    s->seg[i - 1].count)
				bk->inplace = 0;
		bk->s1 = i;
		if (!bk->inplace && r->cfg->dpo.wire == DP_WIRE_F32 &&
		    pipe_replicas(r) != NULL && sum_anywhere(bucket_comm(r, s, bk)) &&
		    bucket_range(s, bk) >= 0) {
			bk->off = (size_t)bucket_range(s, bk);
			bk->inplace = 1;
		}
		*maxn = bk->len > *maxn ? bk->len : *maxn;
	}
	free(t);
	free(b);
	for (k = 0; k < s->nbk; k++)
		if (!s->bk[k].inplace) {
			s->gs = malloc((*maxn + 1) * sizeof(float));
			s->es = malloc((*maxn + 1) * sizeof(float));
			return s->gs == NULL || s->es == NULL ? pipe_oom(r) : 0;
		}
	return 0;
}

static int bucket_sum(struct pipe_run *r, float *v, int k);
static int runon_update(struct pipe_run *r, int k);

/* A bucket's sum on the overlap thread; after the backward, its update
 * too. */
static int
ovl_bucket(void *ctx, int k)
{
	struct pipe_run *r = ctx;

	comm_set_step(r->cfg->dp, "step %ld: gradients of stage %d, bucket "
	    "%d of %d", r->sync->pending ? r->sync->pstep : r->step, r->rank,
	    k + 1, r->sync->nbk);
	if (bucket_sum(r, r->grads, k) < 0)
		return -1;
	return r->sync->pending ? runon_update(r, k) : 0;
}

/* Waits for the buckets posted so far: the backward is about to use the
 * links (a TP sum), or ends, and with it the thread's turn on them. The
 * wait is the DP axis's exposed time, not the backward's: its row keeps
 * the compute (on a slow link the wait for the sums posted in the
 * backward outlasts it). */
static void
drain(struct pipe_run *r)
{
	struct pipe_dp_sync *s = r->sync;
	double t0 = cli_now(), dt;

	dp_ovl_drain(s->ovl);
	dt = cli_now() - t0;
	s->waited += dt;
	r->stat[r->step].bwd -= dt;
}

/* The stage's layer l is done (a tp_stage's done: -1 the loss's, L the
 * embeddings'): the buckets it completes go. */
static void
layer_done(void *ctx, int l)
{
	struct pipe_run *r = ctx;
	struct pipe_dp_sync *s = r->sync;
	int L = r->m->dims.layers;

	if (l == TP_STAGE_SUMMING) {
		drain(r);
		return;
	}
	/* the loss's: a gpt's final LayerNorm, stage 0 (an mlp's stage 0 is
	 * a layer's, not done yet) */
	if (l < 0 && r->m->dims.arch != NN_GPT)
		return;
	/* the embeddings': a tied wte's (stage 2L + 1, with wpe) waits for
	 * the tied sum after the schedule, and goes in sync_grads */
	dp_ovl_stage(s->ovl, l < 0 ? 0 : l < L ? s->lstage[l] : s->tied ?
	    2 * L : nn_model_grad_stages(r->m));
}

/*
 * Run-on: the buckets the backward completes last are the first
 * layers', which the next forward needs first. So, where the link is
 * the bound, they run on beside the next forward: after the step's loss
 * sum, in the forward's order (runon_order; the unit of their first
 * tensor: -1 the embeddings, then the layers, L the head), each one's
 * tensors updated on the thread as soon as its sum is in, and the next
 * step's forward waits before each unit (ts->use) only for the buckets
 * holding it, while the later layers' sums still cross the link. The
 * sums are the same (each bucket's allreduce as before) and the update
 * is elementwise, so the bytes are too. Built where nothing else needs
 * every sum first or shares the links with the forward: one stage of
 * one rank (no pp, tp, cp, experts), f32 sums, no ZeRO, PowerSGD, local
 * SGD or --ft; checkpoint steps and the last one wait for all of them in
 * their update (flush), and the loss is summed as before.
 */
static int
seg_unit(const struct pipe_run *r, const struct seg *g)
{
	const char *name = r->m->table[g->idx].name;

	if (strncmp(name, "layers.", 7) == 0)
		return atoi(name + 7);
	if (r->m->dims.arch != NN_GPT)
		return 0;
	return strcmp(name, "wte") == 0 || strcmp(name, "wpe") == 0 ? -1 :
	    r->m->dims.layers;
}

/*
 * The posting order, the same on every rank (so every replica sums the
 * same bucket at the same turn, and the loss between them): in the
 * backward's order until two fifths of the bytes (the sums beside the
 * backward: the first bucket is ready only a quarter into it, and the link
 * is the bound where this pays; at half, the last ones outlasted the
 * backward: dp4 over 1 Gbit/s 2-4% slower), then the rest by forward unit,
 * posted after the loss (dp_ovl_stage posts only the first part). The
 * buckets each unit's forward waits for (need) follow from it.
 */
static int
runon_order(struct pipe_run *r, struct pipe_dp_sync *s)
{
	int *o = malloc((size_t)s->nbk * sizeof(int)), h, i, j, k;
	size_t total = 0, cum = 0;

	if (o == NULL)
		return pipe_oom(r);
	memcpy(o, dp_ovl_order(s->ovl), (size_t)s->nbk * sizeof(int));
	for (k = 0; k < s->nbk; k++)
		total += s->bk[k].len;
	for (h = 0; h < s->nbk && 5 * cum < 2 * total; h++)
		cum += s->bk[o[h]].len;
	for (i = h + 1; i < s->nbk; i++)
		for (j = i; j > h && s->unit[o[j]] < s->unit[o[j - 1]]; j--) {
			k = o[j];
			o[j] = o[j - 1];
			o[j - 1] = k;
		}
	dp_ovl_set_order(s->ovl, o, h);
	for (k = 0; k < s->nbk; k++)
		for (size_t g = s->bk[o[k]].s0; g < s->bk[o[k]].s1; g++)
			s->need[seg_unit(r, &s->seg[g]) + 1] = k + 1;
	free(o);
	s->runon = 1;
	return 0;
}

static int
runon_init(struct pipe_run *r, struct pipe_dp_sync *s)
{
	const struct pipe_cfg *cfg = r->cfg;
	size_t cover = 0, own = 0;
	int k, L = r->m->dims.layers;

	for (k = 0; k < r->nown; k++)
		own += r->own[k].len;
	for (k = 0; k < s->nbk; k++)
		for (size_t i = s->bk[k].s0; i < s->bk[k].s1; i++)
			cover += s->seg[i].count;
	s->held = -1;
	/* every float the update steps is in a bucket */
	if (r->world != 1 || r->nchunk != 1 || r->ts[0].T != 1 ||
	    r->sch->split || cfg->dpo.wire != DP_WIRE_F32 || cfg->ft != NULL ||
	    cfg->ep != NULL || r->ts[0].cp != NULL || r->m->dims.moe.experts > 0 ||
	    r->ts[0].use != NULL || cover != own)
		return 0;
	if ((s->unit = malloc((size_t)s->nbk * sizeof(int))) == NULL ||
	    (s->need = calloc((size_t)L + 2, sizeof(int))) == NULL)
		return pipe_oom(r);
	for (k = 0; k < s->nbk; k++) {
		s->unit[k] = L;
		for (size_t i = s->bk[k].s0; i < s->bk[k].s1; i++)
			if (seg_unit(r, &s->seg[i]) < s->unit[k])
				s->unit[k] = seg_unit(r, &s->seg[i]);
	}
	return runon_order(r, s);
}

/* Bucket k's tensors stepped (optimizer range by range: the view of
 * r->opt[q] over the tensor, at the step count the update began) and
 * their gradients zeroed for the next backward. */
static int
runon_update(struct pipe_run *r, int k)
{
	struct pipe_dp_sync *s = r->sync;
	float scale = pipe_dp_sync_scale(r);

	/* the forward must not have passed a unit of this bucket */
	if (atomic_load(&s->fwd) >= s->unit[k]) {
		r->kind = TRAIN_ERR_RUNTIME;
		return cli_fail(r->err, r->errlen, "rank %d: step %ld: the "
		    "forward began unit %d before bucket %d was updated",
		    r->rank, s->pstep + 1, atomic_load(&s->fwd), k + 1);
	}
	for (size_t i = s->bk[k].s0; i < s->bk[k].s1; i++) {
		const struct seg *g = &s->seg[i];

		for (int q = 0; q < r->nown; q++) {
			struct nn_optim v = r->opt[q];
			size_t at = g->off - r->own[q].off;

			if (g->off < r->own[q].off || at >= r->own[q].len)
				continue;
			v.count = g->count;
			v.m = v.m != NULL ? v.m + at : NULL;
			v.v = v.v != NULL ? v.v + at : NULL;
			nn_optim_update(&v, r->params + g->off,
			    r->grads + g->off, scale);
			memset(r->grads + g->off, 0, g->count * sizeof(float));
		}
	}
	atomic_store(&s->tend, cli_now());
	return 0;
}

/* The run-on done: waited for, its times and bytes the posting step's. */
static int
runon_finish(struct pipe_run *r)
{
	struct pipe_dp_sync *s = r->sync;
	struct pipe_stat *ps = &r->stat[s->pstep];
	double busy, t0 = cli_now(), run;
	size_t n = r->nspans;

	if (!s->pending)
		return s->failed ? -1 : 0;
	if (dp_ovl_wait(s->ovl, &busy) < 0)
		s->failed = 1;
	s->fwait += cli_now() - t0;
	s->pending = 0;
	r->ts[0].use = NULL;
	run = busy - s->busy0;
	ps->dp += s->fwait;
	ps->dp_exposed += s->fwait;
	ps->dp_hidden += run > s->fwait ? run - s->fwait : 0;
	ps->dp_sent += (size_t)(comm_bytes_sent(r->cfg->dp) - s->sent0);
	/* beside the next forward, which the trace must not push */
	pipe_span(r, 'O', -1, s->posted, atomic_load(&s->tend));
	if (r->nspans > n)
		r->spans[n].step = (int)s->pstep;
	/* its report now, before this step sends anything: the bytes the
	 * reader counts since the step before are the step's */
	if (s->held >= 0)
		s->fn(s->fnctx, &s->res->steps[s->held], &r->stat[s->held]);
	s->held = -1;
	return s->failed ? -1 : 0;
}

/* ts->use while the sums run on: before each unit's forward, the
 * buckets holding it; before the head's or any backward, all. */
static void
runon_use(void *ctx, int l, int backward)
{
	struct pipe_run *r = ctx;
	struct pipe_dp_sync *s = r->sync;
	struct pipe_stat *ps = &r->stat[r->step];
	double t0 = cli_now();

	if (l == TP_STAGE_SUMMING)
		return;
	if (backward || (l < 0 && s->seen))
		runon_finish(r);	/* a failure fails the step's sync */
	else {
		s->seen |= l >= 0;
		dp_ovl_done(s->ovl, s->need[l + 1]);
		s->fwait += cli_now() - t0;
		atomic_store(&s->fwd, l);
	}
	/* the pass's row keeps its compute; the waits are the DP axis's */
	*(backward ? &ps->bwd : &ps->fwd) -= cli_now() - t0;
}

int
pipe_dp_sync_post(struct pipe_run *r)
{
	const struct pipe_cfg *cfg = r->cfg;
	struct pipe_dp_sync *s = r->sync;
	const int *order;
	int p, k;

	if (s == NULL || !s->due)
		return 0;
	s->due = 0;
	for (k = 0; k < r->nown; k++)
		r->opt[k].t++;
	atomic_store(&s->fwd, -2);
	s->seen = 0;
	s->fwait = 0;
	s->busy0 = dp_ovl_busy(s->ovl);
	s->sent0 = comm_bytes_sent(cfg->dp);
	s->posted = cli_now();
	atomic_store(&s->tend, s->posted);
	s->pstep = r->step;
	s->pending = 1;
	p = dp_ovl_post_rest(s->ovl);
	order = dp_ovl_order(s->ovl);
	/* the ones the backward's sums finished: updated here */
	for (k = 0; k < p; k++)
		if (runon_update(r, order[k]) < 0)
			s->failed = 1;
	r->ts[0].use = runon_use;
	r->ts[0].use_ctx = r;
	if (r->step + 1 >= cfg->steps || (cfg->ckpt_path != NULL &&
	    cfg->ckpt_every > 0 && (r->step + 1) % cfg->ckpt_every == 0))
		return runon_finish(r) < 0 ? -1 : 1;
	return s->failed ? -1 : 1;
}

int
pipe_dp_sync_pending(const struct pipe_run *r)
{
	return r->sync != NULL && r->sync->pending;
}

void
pipe_dp_sync_report(struct pipe_run *r, long k, pipe_step_fn fn, void *ctx,
    const struct pipe_result *res)
{
	struct pipe_dp_sync *s = r->sync;

	if (fn == NULL)
		return;
	if (s == NULL || !s->pending) {
		fn(ctx, &res->steps[k], &r->stat[k]);
		return;
	}
	/* step k's report waits until its sums are in (runon_finish) */
	s->held = k;
	s->fn = fn;
	s->fnctx = ctx;
	s->res = res;
}

/*
 * Overlap as collx-dp's (dp_overlap.c) where the plain or --wire sum is
 * the sync (PowerSGD and drifting local SGD sum other things, later):
 * each bucket is summed as soon as the first stage's last backward (of a
 * split backward: every stage's last weight part) has completed it, the
 * sums the same as after it; the rest after the schedule. A layer completes the latest stage of its tensors
 * (nn_model_grad_stage); a layer holding none, none. Every group of the
 * mesh sends over the same links, which one thread at a time may use:
 * the buckets run while the backward computes, and it waits for them
 * before its TP sums and before it returns (settle), so the pipeline's
 * messages, the TP sums and the buckets never meet; every replica of a
 * stage posts and waits at the same points, so none waits on a peer
 * that waits on it.
 */
static int
overlap_init(struct pipe_run *r, struct pipe_dp_sync *s)
{
	const struct nn_model *m = r->m;
	int L = m->dims.layers > 0 ? m->dims.layers : 1, l;
	char e[COLLX_ERRLEN];

	if (!r->cfg->dpo.overlap || pipe_replicas(r) == NULL ||
	    r->cfg->dpo.powersgd > 0 || r->cfg->dpo.sync_every > 1)
		return 0;
	/* a whole backward overlaps on the first stage only (arm), and the
	 * thread's group waits without spinning: the other stages keep
	 * their spinning sums after the schedule */
	if (!r->sch->split && !r->ts[0].first)
		return 0;
	/* the tied embedding's halves meet after the schedule (tied_sum) */
	s->tied = m->dims.arch == NN_GPT && (r->world > 1 || r->nchunk > 1);
	if ((s->lstage = malloc((size_t)L * sizeof(int))) == NULL ||
	    (s->npass = calloc((size_t)r->nchunk, sizeof(int))) == NULL)
		return pipe_oom(r);
	for (l = 0; l < L; l++)
		s->lstage[l] = -1;
	for (size_t i = 0; i < m->ntensors; i++) {
		const char *name = m->table[i].name;
		int st = nn_model_grad_stage(m, i);

		/* a gpt's unprefixed tensors are the head's and embeddings',
		 * done apart (-1, L); an mlp's are its one layer's */
		if (strncmp(name, "layers.", 7) != 0 && m->dims.arch == NN_GPT)
			continue;
		l = strncmp(name, "layers.", 7) == 0 ? atoi(name + 7) : 0;
		if (l >= 0 && l < L && st > s->lstage[l])
			s->lstage[l] = st;
	}
	s->ovl = dp_ovl_new(s->nbk, s->ready, ovl_bucket, r, r->cfg->dp, e,
	    sizeof(e));
	if (s->ovl != NULL)
		return runon_init(r, s);
	r->kind = TRAIN_ERR_RUNTIME;
	return cli_fail(r->err, r->errlen, "rank %d: %s", r->rank, e);
}

void
pipe_dp_sync_arm(struct pipe_run *r, struct tp_stage *ts, int weight)
{
	struct pipe_dp_sync *s = r->sync;
	int c = (int)(ts - r->ts);

	ts->done = NULL;
	if (pipe_dp_fsdp_arm(r, ts, weight))	/* ZeRO-3's reduce-scatters */
		return;
	if (s != NULL && s->pending) {	/* no forward came between */
		double t0 = cli_now();

		runon_finish(r);
		r->stat[r->step].bwd -= cli_now() - t0;
	}
	/* a whole backward of a chunk after the first sends its input
	 * gradient upstream once it returns: summing beside it would hold
	 * that send (and the stages above) behind the sums, while summed
	 * after it they run beside the upstream's backward */
	if (s == NULL || s->ovl == NULL || weight != ts->split ||
	    (!ts->split && !ts->first) || ++s->npass[c] < r->cfg->micro)
		return;
	s->npass[c] = 0;
	if (!s->armed) {
		s->armed = 1;
		s->waited = 0;
		s->sent = comm_bytes_sent(r->cfg->dp);
		dp_ovl_begin(s->ovl);
	}
	ts->done = layer_done;
	ts->done_ctx = r;
}

void
pipe_dp_sync_settle(struct pipe_run *r, struct tp_stage *ts)
{
	if (ts->done == NULL)
		return;
	ts->done = NULL;
	/* a failed bucket's reason is in r->err; the step fails at the sync */
	if (r->sync != NULL)
		drain(r);
	else
		pipe_dp_fsdp_settle(r);	/* ZeRO-3's */
}

static int
setup(struct pipe_run *r)
{
	const struct pipe_cfg *cfg = r->cfg;
	struct pipe_dp_sync *s;
	size_t maxn = 0;
	int i, w = pipe_replicas(r) != NULL ? comm_size(cfg->dp) : 1;

	/* ZeRO sends cfg->dpo.wire itself (pipe_dp_zero.c) */
	if (r->zero != NULL || (w == 1 && cfg->dpo.wire == DP_WIRE_F32 &&
	    cfg->dpo.powersgd == 0 && cfg->dpo.sync_every == 0))
		return 0;
	if (cfg->dpo.powersgd > 0 && r->ts->T > 1) {
		r->kind = TRAIN_ERR_RUNTIME;
		return cli_fail(r->err, r->errlen, "rank %d: PowerSGD is not "
		    "built for a stage sharded over a TP group", r->rank);
	}
	if ((s = r->sync = calloc(1, sizeof(*s))) == NULL ||
	    (s->rg = calloc((size_t)r->nown + 1, sizeof(*s->rg))) == NULL)
		return pipe_oom(r);
	for (s->nrg = 0; s->nrg < r->nown; s->nrg++)
		s->rg[s->nrg] = (struct dp_range){ r->own[s->nrg].off,
		    r->own[s->nrg].len };
	for (i = 0; i < s->nrg; i++)
		if (s->rg[i].off + s->rg[i].len > s->n)
			s->n = s->rg[i].off + s->rg[i].len;
	if (buckets(r, s, &maxn) < 0)
		return -1;
	if (dp_wire_init(&s->wire, cfg->dpo.wire, w > 1 ? comm_rank(cfg->dp) : 0,
	    w, s->n, maxn, r->err, r->errlen) < 0) {
		r->kind = TRAIN_ERR_RUNTIME;
		return -1;
	}
	if (cfg->dpo.powersgd > 0 && psgd_init(r, s) < 0)
		return -1;
	if (overlap_init(r, s) < 0)
		return -1;
	if (cfg->dpo.sync_every > 0) {
		s->anchor = malloc((s->n + 1) * sizeof(float));
		s->outer_m = calloc(s->n + 1, sizeof(float));
		if (s->anchor == NULL || s->outer_m == NULL)
			return pipe_oom(r);
		memcpy(s->anchor, r->params, s->n * sizeof(float));
	}
	return 0;
}

/* The state a checkpoint keeps is put back after it is made, by
 * pipe_ckpt_sync_resume (the runner's set-up calls both). */
int
pipe_dp_sync_init(struct pipe_run *r)
{
	return setup(r);
}

float *
pipe_dp_sync_wire_ef(const struct pipe_run *r)
{
	if (r->zero != NULL)
		return pipe_dp_zero_wire_ef(r);
	return r->sync != NULL ? r->sync->wire.ef : NULL;
}

struct dp_powersgd *
pipe_dp_sync_powersgd(const struct pipe_run *r)
{
	return r->sync != NULL ? r->sync->psgd : NULL;
}

float *
pipe_dp_sync_outer_m(const struct pipe_run *r)
{
	return r->sync != NULL ? r->sync->outer_m : NULL;
}

void
pipe_dp_sync_free(struct pipe_run *r)
{
	struct pipe_dp_sync *s = r->sync;

	if (s == NULL)
		return;
	dp_wire_free(&s->wire);
	dp_powersgd_delete(s->psgd);
	free(s->rg);
	free(s->seg);
	free(s->bk);
	free(s->gs);
	free(s->es);
	dp_ovl_free(s->ovl);
	free(s->unit);
	free(s->need);
	free(s->ready);
	free(s->lstage);
	free(s->npass);
	free(s->anchor);
	free(s->outer_m);
	free(s);
	r->sync = NULL;
}

/* Bucket k's segments of v to or from the gathered copy x. */
static void
gather(const struct pipe_dp_sync *s, const struct bkt *k, float *v, float *x,
    int back)
{
	for (size_t i = k->s0; i < k->s1; i++) {
		const struct seg *g = &s->seg[i];

		memcpy(back ? v + g->off : x, back ? x : v + g->off,
		    g->count * sizeof(float));
		x += g->count;
	}
}

/* Bucket k of the stage's vector v summed over the replicas in --wire, as
 * collx-dp sums it: gathered in the model's order where the vector keeps
 * another, its error feedback with it. */
static int
bucket_sum(struct pipe_run *r, float *v, int k)
{
	struct pipe_dp_sync *s = r->sync;
	const struct bkt *b = &s->bk[k];
	struct dp_wire w = s->wire;
	struct comm *dc = bucket_comm(r, s, b);
	float *g = v + b->off;
	size_t eoff = b->off;
	int rc;

	if (!b->inplace) {
		gather(s, b, v, g = s->gs, 0);
		if (w.ef != NULL)
			gather(s, b, s->wire.ef, w.ef = s->es, 0);
		eoff = 0;
	}
	rc = w.type == DP_WIRE_F32 ? coll_allreduce(dc, g, b->len, DT_F32,
	    COLL_SUM, COLL_AUTO) : dp_wire_allreduce(&w, dc, g, eoff, b->len,
	    COLL_AUTO);
	if (!b->inplace) {
		gather(s, b, v, g, 1);
		if (w.ef != NULL)
			gather(s, b, s->wire.ef, w.ef, 1);
	}
	return rc < 0 ? pipe_dp_failed(r) : 0;
}

/* Every bucket of v summed, the last one first as collx-dp goes. */
static int
buckets_sum(struct pipe_run *r, float *v, const char *what)
{
	struct pipe_dp_sync *s = r->sync;

	for (int k = s->nbk - 1; k >= 0; k--) {
		comm_set_step(r->cfg->dp, "step %ld: %s of stage %d, bucket %d "
		    "of %d", r->step, what, r->rank, k + 1, s->nbk);
		if (bucket_sum(r, v, k) < 0)
			return -1;
	}
	return 0;
}

int
pipe_dp_sync_grads(struct pipe_run *r, uint64_t *sent)
{
	const struct pipe_cfg *cfg = r->cfg;
	struct pipe_dp_sync *s = r->sync;
	int i;

	/* drifting replicas sync parameters, in pipe_dp_sync_outer */
	if (s == NULL || pipe_replicas(r) == NULL || cfg->dpo.sync_every > 1)
		return 0;
	if (s->armed) {
		struct pipe_stat *ps = &r->stat[r->step];
		double busy, t0 = cli_now();
		int rc;

		s->armed = 0;
		*sent = s->sent;
		if (s->runon) {		/* the rest go in the update */
			dp_ovl_drain(s->ovl);
			busy = dp_ovl_busy(s->ovl);
			rc = s->failed ? -1 : 0;
			s->due = 1;
		} else	/* the tied wte's go now */
			rc = dp_ovl_wait(s->ovl, &busy);
		ps->dp_exposed = s->waited + cli_now() - t0;
		ps->dp_hidden = busy > ps->dp_exposed ? busy -
		    ps->dp_exposed : 0;
		ps->dp_overlap = 1;
		return rc;
	}
	if (s->psgd == NULL || r->step < cfg->dpo.powersgd_start)
		return buckets_sum(r, r->grads, "gradients");
	for (i = 0; i < s->nrg; i++) {
		comm_set_step(cfg->dp, "step %ld: PowerSGD of stage %d, range "
		    "%d of %d", r->step, r->rank, i + 1, s->nrg);
		if (dp_powersgd_sync(s->psgd, i, cfg->dp, COLL_AUTO, r->grads,
		    (float)comm_size(cfg->dp)) < 0)
			return pipe_dp_failed(r);
	}
	return 0;
}

float
pipe_dp_sync_scale(const struct pipe_run *r)
{
	/* a drifting replica steps on its own share's mean gradient */
	return (float)(1.0 / (double)(r->cfg->dpo.sync_every > 1 ? r->rcount :
	    r->cfg->batch));
}

int
pipe_dp_sync_outer(struct pipe_run *r)
{
	const struct pipe_cfg *cfg = r->cfg;
	struct pipe_dp_sync *s = r->sync;
	struct comm *dc = pipe_replicas(r);
	struct pipe_stat *ps = &r->stat[r->step];
	long h = cfg->dpo.sync_every;
	int i, drift = h > 1, w = dc != NULL ? comm_size(dc) : 1;
	uint64_t sent = dc != NULL ? comm_bytes_sent(dc) : 0;
	double t0 = cli_now();

	if (s == NULL || h == 0 || ((r->step + 1) % h != 0 &&
	    r->step + 1 != cfg->steps))
		return 0;
	for (i = 0; drift && i < s->nrg; i++)
		dp_local_delta(s->anchor + s->rg[i].off, r->params +
		    s->rg[i].off, r->grads + s->rg[i].off, s->rg[i].len);
	if (drift && dc != NULL && buckets_sum(r, r->grads, "local SGD sync") < 0)
		return -1;
	for (i = 0; i < s->nrg; i++) {
		size_t off = s->rg[i].off, len = s->rg[i].len;

		dp_local_apply(r->params + off, s->anchor + off,
		    s->outer_m + off, r->grads + off, len, (float)w,
		    (float)cfg->dpo.outer_lr, (float)cfg->dpo.outer_momentum,
		    drift);
	}
	if (dc != NULL) {
		ps->dp += cli_now() - t0;
		ps->dp_sent += (size_t)(comm_bytes_sent(dc) - sent);
	}
	return 0;
}
