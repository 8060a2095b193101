/* dp_fsdp: ZeRO stage 3 (fully sharded data parallelism) over the units of
 * a flat vector, a model's layers. Each unit is a dp_zero range: rank q
 * keeps slice q of its parameters, of its reduced gradients and of its
 * optimizer state. A pass's weight uses and backward stages are its
 * events; before a unit's use its slices are all-gathered in place into
 * the parameter vector, after the use they are given back (forward with
 * reshard after forward, and backward; a unit the window holds is kept:
 * window()), and once its backward stage ends its gradients are
 * reduce-scattered and given back. Gathers of the window (prefetch K:
 * the next K + 1 units) are started at a use, so they run while it
 * computes; a reduce-scatter whose stage a backward use follows goes
 * after that use's gathers, since the next layer waits for those and
 * nothing waits for it until the step's end.
 *
 * Which gathers, reduce-scatters and releases each event brings is fixed
 * before training from the events alone (plan_jobs), the same on every
 * rank: the communication thread (dp_overlap.c) runs the jobs in that
 * order, an event posting the jobs it brings, a use waiting for the
 * gather of its own unit only. What a rank does not hold lies in the
 * whole-sized vectors as pages given back to the kernel (MADV_DONTNEED:
 * zero when read again), so a gradient range given back is zero for the
 * next pass to add into, and the vectors keep their addresses: the
 * gathered units' memory is the same from step to step. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cli/util.h"
#include "par/ckpt.h"
#include "par/dp_fsdp.h"

enum { JOB_GATHER, JOB_RS };
struct job {
	int kind, unit;
	int pop;	/* a gather: then unit's gradient pages populated */
};

struct dp_fsdp {
	struct dp_zero z;
	struct comm *rep;	/* hybrid: the same slices' ranks, or NULL */
	enum coll_algo algo;
	int *owner, me;		/* checkpoints: slice q's writer, this rank */
	struct dp_fsdp_plan p;
	struct dp_ovl *ovl;
	float *params, *grads;
	struct job *job;
	int njob;
	int *upto;		/* per event: jobs posted once it is done */
	int *wait;		/* per use: jobs done before it computes */
	int *rel, *relo;	/* per event: units given back, rel[relo[e]..] */
	int *held;		/* per unit: whole now (the main thread's view) */
	/* The page pool (pool_in): nslot slots of slot bytes from pool,
	 * busy[] each taken; per unit the slot its pages came from, or -1. */
	char *pool;
	size_t slot;
	int nslot, *busy, *pslot;
	/* The gradients' slots (plan_gslots): ngslot of slot bytes from
	 * gpool; per unit the slot its gradients take this pass, or -1,
	 * and gin[u] whether they lie there now. */
	char *gpool;
	int ngslot, *gslot;
	char *gin;
	char *gseen;		/* per unit: its gradients populated this pass */
	char *cpop;		/* per unit: 1 by its gather's job (pop) */
	double *jt;		/* per job: its start and end this pass */
	int ei;			/* the next event */
	int strayed;		/* the pass's events left the plan */
	int in_pass;		/* between begin and wait: peak counts */
	size_t now, peak;	/* parameter floats held */
	double tg, trs, twait;
};

/* ---- the plan -------------------------------------------------------- */

static int
unit_of(const struct nn_model *m, const char *name, int L)
{
	if (strncmp(name, "layers.", 7) == 0)
		return atoi(name + 7);
	return m->dims.arch == NN_GPT ? L : 0;
}

static void
ev_add(struct dp_fsdp_plan *p, int kind, int layer, int bwd, int stage,
    int unit)
{
	p->ev[p->nev++] = (struct dp_fsdp_event){ kind, layer, bwd, stage,
	    unit };
}

/* The events of nn's pass (nn_model_step_use's order). */
static void
model_events(struct dp_fsdp_plan *p, const struct nn_model *m, int L)
{
	int gpt = m->dims.arch == NN_GPT, per = m->dims.arch == NN_MLP ? 1 : 2;
	int l, s;

	if (gpt)
		ev_add(p, DP_FSDP_USE, -1, 0, 0, L);
	for (l = 0; l < L; l++)
		ev_add(p, DP_FSDP_USE, l, 0, 0, l);
	if (gpt) {
		ev_add(p, DP_FSDP_USE, -1, 0, 0, L);
		ev_add(p, DP_FSDP_USE, -1, 1, 0, L);
		ev_add(p, DP_FSDP_GRAD, 0, 0, 0, -1);
	}
	for (l = L - 1; l >= 0; l--) {
		ev_add(p, DP_FSDP_USE, l, 1, 0, l);
		for (s = 0; s < per; s++)
			ev_add(p, DP_FSDP_GRAD, 0, 0, gpt + per * (L - 1 - l) +
			    s, -1);
	}
	if (gpt)
		ev_add(p, DP_FSDP_GRAD, 0, 0, 2 * L + 1, -1);
}

int
dp_fsdp_plan_model(struct dp_fsdp_plan *p, const struct nn_model *m,
    char *err, size_t errlen)
{
	int L = m->dims.layers > 0 ? m->dims.layers : 1, u, st;
	size_t i, *sum;

	memset(p, 0, sizeof(*p));
	p->nunit = L + (m->dims.arch == NN_GPT);
	p->unit = calloc((size_t)p->nunit, sizeof(*p->unit));
	p->final = calloc((size_t)p->nunit, sizeof(*p->final));
	p->ev = calloc(4 * (size_t)L + 8, sizeof(*p->ev));
	sum = calloc((size_t)p->nunit, sizeof(*sum));
	if (p->unit == NULL || p->final == NULL || p->ev == NULL ||
	    sum == NULL) {
		free(sum);
		dp_fsdp_plan_free(p);
		return cli_fail(err, errlen, "out of memory");
	}
	for (u = 0; u < p->nunit; u++)
		p->unit[u].off = m->nparams;
	for (i = 0; i < m->ntensors; i++) {
		const struct nn_param *t = &m->table[i];
		struct dp_range *r;

		u = unit_of(m, t->name, L);
		r = &p->unit[u];
		if (t->offset < r->off) {
			r->len += r->off < m->nparams ? r->off - t->offset : 0;
			r->off = t->offset;
		}
		if (t->offset + t->count > r->off + r->len)
			r->len = t->offset + t->count - r->off;
		sum[u] += t->count;
		st = nn_model_grad_stage(m, i);
		if (st > p->final[u])
			p->final[u] = st;
	}
	for (u = 0; u < p->nunit; u++)
		if (sum[u] != p->unit[u].len) {
			free(sum);
			dp_fsdp_plan_free(p);
			return cli_fail(err, errlen, "layer %d's tensors are "
			    "not contiguous", u);
		}
	free(sum);
	model_events(p, m, L);
	return 0;
}

void
dp_fsdp_plan_free(struct dp_fsdp_plan *p)
{
	free(p->unit);
	free(p->final);
	free(p->ev);
	memset(p, 0, sizeof(*p));
}

/*
 * The window at use i (of nv, use[] their units): the first K + 1
 * distinct units of uses i on, each wanted whole from now to its next
 * use, but for one given back after forward (forced[]: a backward use
 * whose unit's use before it was a forward one, under resharding),
 * wanted only within the next K + 1 uses. A unit a later micro-batch
 * uses again in the same direction (or forward after backward) thus
 * stays whole while the window holds it, rather than being gathered
 * again; with one micro-batch (collx-dp) the first K + 1 distinct units
 * are the next K + 1 uses' but where a resharded unit's backward follows,
 * so nothing changes there. But a resharded unit's backward within K
 * switches of unit (a run of uses of one unit counting once: a gpt's
 * last block, its head's forward and backward between) is wanted too, as
 * its gather for that use (at[]: the use), which the unit's forward
 * holding does not serve: plan_jobs frees the unit there and gathers it
 * again at once, so that the gather runs beside the head rather than
 * after it. want[] gets the wanted units in order of their next use
 * (seen: room for n flags); returns how many.
 */
static int
window(const int *use, const char *forced, int nv, int i, int K, int *want,
    int *at, char *seen, int n)
{
	int j, k = 0, d = 0, sw = 0;

	memset(seen, 0, (size_t)n);
	for (j = i; j < nv && d <= K; j++) {
		if (j > i && use[j] != use[j - 1])
			sw++;
		if (seen[use[j]])
			continue;
		seen[use[j]] = 1;
		d++;
		if (j <= i + K || !forced[j] || sw <= K) {
			at[k] = j;
			want[k++] = use[j];
		}
	}
	return k;
}

/* The jobs every event brings, simulated once: f->job, upto, wait, rel. */
static int
plan_jobs(struct dp_fsdp *f, int K, int reshard)
{
	const struct dp_fsdp_plan *p = &f->p;
	int n = p->nunit, ne = p->nev, nv = 0, e, u, i, k, nw, nrel = 0, nrs = 0;
	int *use = calloc((size_t)ne + 1, sizeof(int));
	int *rs = calloc((size_t)n + 1, sizeof(int));
	int *bwd = calloc((size_t)n + 1, sizeof(int));
	int *gjob = calloc((size_t)n + 1, sizeof(int));
	int *last = calloc((size_t)n + 1, sizeof(int));	/* a use's dir */
	int *want = calloc((size_t)n + 1, sizeof(int));
	int *at = calloc((size_t)n + 1, sizeof(int));
	int *gfor = calloc((size_t)n + 1, sizeof(int));	/* use gathered for */
	char *forced = calloc((size_t)ne + 1, 1), *seen = calloc((size_t)n + 1,
	    1), *keep = calloc((size_t)n + 1, 1);

	f->job = calloc((size_t)(ne + 1) * (size_t)(n + 1), sizeof(*f->job));
	f->upto = calloc((size_t)ne + 1, sizeof(int));
	f->wait = calloc((size_t)ne + 1, sizeof(int));
	f->relo = calloc((size_t)ne + 2, sizeof(int));
	f->rel = calloc((size_t)(ne + 1) * (size_t)(n + 1), sizeof(int));
	f->held = calloc((size_t)n + 1, sizeof(int));
	f->cpop = calloc((size_t)n + 1, 1);
	if (use == NULL || rs == NULL || bwd == NULL || gjob == NULL ||
	    last == NULL || want == NULL || at == NULL || gfor == NULL ||
	    forced == NULL || seen == NULL || keep == NULL || f->job == NULL ||
	    f->upto == NULL || f->wait == NULL || f->relo == NULL ||
	    f->rel == NULL || f->held == NULL || f->cpop == NULL) {
		free(use), free(rs), free(bwd), free(gjob), free(last);
		free(want), free(at), free(gfor), free(forced), free(seen);
		free(keep);
		return -1;
	}
	/* last[u]: 0 none yet, 1 forward, 2 backward */
	for (e = 0; e < ne; e++)
		if (p->ev[e].kind == DP_FSDP_USE) {
			u = p->ev[e].unit;
			if (p->ev[e].backward)
				bwd[u] = nv;
			forced[nv] = reshard && p->ev[e].backward &&
			    last[u] == 1;
			last[u] = p->ev[e].backward ? 2 : 1;
			use[nv++] = u;
		}
	for (e = i = 0; e < ne; e++) {
		const struct dp_fsdp_event *v = &p->ev[e];

		f->relo[e] = nrel;
		if (v->kind == DP_FSDP_GRAD) {
			for (u = 0; u < n; u++)
				if (p->final[u] == v->stage)
					rs[nrs++] = u;
			/* a backward use next: its gathers go first */
			if (e + 1 < ne && p->ev[e + 1].kind == DP_FSDP_USE &&
			    p->ev[e + 1].backward) {
				f->upto[e] = f->njob;
				continue;
			}
		} else {
			nw = window(use, forced, nv, i, K, want, at, seen, n);
			memset(keep, 0, (size_t)n);
			for (k = 0; k < nw; k++)
				keep[want[k]] = 1;
			for (u = 0; u < n; u++)
				if (f->held[u] && !keep[u] && (reshard ||
				    bwd[u] < i)) {
					f->held[u] = 0;
					f->rel[nrel++] = u;
				}
			for (k = 0; k < nw; k++) {
				u = want[k];
				/* wanted early for its backward: held for
				 * its forward, freed and gathered again */
				if (f->held[u] && at[k] > i + K &&
				    forced[at[k]] && gfor[u] != at[k]) {
					f->held[u] = 0;
					f->rel[nrel++] = u;
				}
				if (!f->held[u]) {
					f->held[u] = 1;
					gfor[u] = at[k];
					gjob[u] = f->njob;
					f->job[f->njob++] = (struct job){
					    JOB_GATHER, u, 0 };
				}
			}
			f->wait[e] = gjob[v->unit] + 1;
			/* a unit's first backward: its gradient pages
			 * populated by the gather made for this use, on
			 * the communication thread (off the pass's
			 * thread), else by event() (2) */
			if (v->backward && f->cpop[v->unit] == 0) {
				f->cpop[v->unit] = gfor[v->unit] == i ? 1 : 2;
				f->job[gjob[v->unit]].pop =
				    f->cpop[v->unit] == 1;
			}
			i++;
		}
		for (k = 0; k < nrs; k++)
			f->job[f->njob++] = (struct job){ JOB_RS, rs[k], 0 };
		nrs = 0;
		f->upto[e] = f->njob;
	}
	f->relo[ne] = nrel;
	memset(f->held, 0, (size_t)n * sizeof(int));
	free(use), free(rs), free(bwd), free(gjob), free(last), free(want);
	free(at), free(gfor), free(forced), free(seen), free(keep);
	return 0;
}

/* ---- holding and giving back ----------------------------------------- */

/* The whole pages of bytes [a, b): [*a2, *b2), empty when a2 >= b2. */
static void
whole_pages(uintptr_t a, uintptr_t b, uintptr_t *a2, uintptr_t *b2)
{
	uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);

	*a2 = (a + pg - 1) & ~(pg - 1);
	*b2 = b & ~(pg - 1);
}

/* Floats [p, p+n) given back to the kernel where they fill whole pages
 * (zero when read again); zero: the rest of them zeroed too. */
static void
give_back(float *p, size_t n, int zero)
{
	uintptr_t a = (uintptr_t)p, b = a + n * sizeof(float), a2, b2;

	whole_pages(a, b, &a2, &b2);
	if (a2 >= b2) {
		if (zero)
			memset(p, 0, n * sizeof(float));
		return;
	}
	if (zero) {
		memset(p, 0, a2 - a);
		memset((void *)b2, 0, b - b2);
	}
	if (madvise((void *)a2, b2 - a2, MADV_DONTNEED) < 0 && zero)
		memset((void *)a2, 0, b2 - a2);
}

/*
 * The page pool. Given back, a unit's pages come back from the kernel as
 * zero-filled page faults at its next gather: a fault and a page cleared
 * each 4 KB, twice a step, a share of the step on a busy core. Instead, a
 * slot of pages (K + 1 of them, the window's units, each the largest
 * unit's; resident once first used) is moved into the unit's range with
 * mremap before its gather and out again where the unit is given back:
 * page table entries move, no page is cleared or faulted, and the range
 * it leaves reads zero, as madvise leaves it. A unit of less than half a
 * slot (a gpt's embeddings beside its layers) keeps the kernel's pages:
 * its faults are few. Where no slot is free, or mremap fails, the unit is
 * given back to the kernel as before. A unit's gradients take a slot
 * of a second pool (K + 2 slots, plan_gslots) from its first backward of
 * the pass to its reduce-scatter, which clears them (a memset of pages
 * still in cache) before they go back to the slot: given back to the
 * kernel instead, every gradient page cost a page fault and a page clear
 * each step, the most system time ZeRO-3 spent beyond ZeRO-2's. Where a
 * gather is made for that backward, its job moves them in after the
 * gather, on the communication thread. A unit without a slot is
 * populated writable in one call (populate): the backward's first touch
 * would otherwise fault twice a page, a read mapping the zero page and
 * the write replacing it. Outside passes, while every unit lies whole
 * (gather_all, the run's outputs), the idle slots' pages go back to the
 * kernel: the peak RSS counts them no more than the kernel's pages would.
 */

/* Unit u's gradient pages populated writable (zero). Without
 * MADV_POPULATE_WRITE (Linux 5.14), or where it fails, the backward
 * faults them in. */
static void
populate(struct dp_fsdp *f, int u)
{
#ifdef MADV_POPULATE_WRITE
	uintptr_t a = (uintptr_t)(f->grads + f->z.rg[u].off), a2, b2;

	whole_pages(a, a + f->z.rg[u].len * sizeof(float), &a2, &b2);
	if (a2 < b2)
		(void)madvise((void *)a2, b2 - a2, MADV_POPULATE_WRITE);
#else
	(void)f, (void)u;
#endif
}

/* The whole pages of unit u's floats this rank does not own, before and
 * after its slice: up to two page-aligned pieces [a[k], b[k]); returns
 * how many. */
static int
pieces(const struct dp_fsdp *f, int u, uintptr_t *a, uintptr_t *b)
{
	uintptr_t s = (uintptr_t)(f->params + f->z.rg[u].off);
	uintptr_t e = s + f->z.rg[u].len * sizeof(float), x[4];
	size_t off, len;
	int n = 0;

	dp_zero_slice(&f->z, u, f->z.rank, &off, &len);
	x[0] = s, x[3] = e;
	x[1] = s + off * sizeof(float);
	x[2] = s + (off + len) * sizeof(float);
	for (int k = 0; k < 4; k += 2) {
		whole_pages(x[k], x[k + 1], &a[n], &b[n]);
		if (a[n] < b[n])
			n++;
	}
	return n;
}

/* Pages [from, from+len) moved to [to, to+len), from left reading zero. */
static int
move(uintptr_t from, uintptr_t to, size_t len)
{
	return mremap((void *)from, len, len, MREMAP_MAYMOVE | MREMAP_FIXED |
	    MREMAP_DONTUNMAP, (void *)to) == MAP_FAILED ? -1 : 0;
}

/* The n pieces [a[i], b[i]) backed by the slot at at: 0, or -1 (a move
 * failed: the pieces as they were). */
static int
slot_in(uintptr_t at, const uintptr_t *a, const uintptr_t *b, int n)
{
	int i;

	for (i = 0; i < n; at += b[i] - a[i], i++)
		if (move(at, a[i], b[i] - a[i]) < 0)
			break;
	if (i == n)
		return 0;
	while (i-- > 0) {	/* back, in order, to the slot */
		at -= b[i] - a[i];
		move(a[i], at, b[i] - a[i]);
	}
	return -1;
}

/* The slot at at's pages back from the pieces, which read zero. */
static void
slot_out(uintptr_t at, const uintptr_t *a, const uintptr_t *b, int n)
{
	for (int i = 0; i < n; at += b[i] - a[i], i++)
		if (move(a[i], at, b[i] - a[i]) < 0)
			madvise((void *)a[i], b[i] - a[i], MADV_DONTNEED);
}

/* A unit of less than half a slot keeps the kernel's pages. */
static int
small(const struct dp_fsdp *f, int u)
{
	return 2 * f->p.unit[u].len * sizeof(float) < f->slot;
}

/* Unit u's pieces backed by a free slot: the slot, or -1 (none free, too
 * small a unit, or a move failed: the range as it was). */
static int
pool_in(struct dp_fsdp *f, int u)
{
	uintptr_t a[2], b[2];
	int n = pieces(f, u, a, b), k;

	if (n == 0 || small(f, u))
		return -1;
	for (k = 0; k < f->nslot && f->busy[k]; k++)
		;
	if (k == f->nslot || slot_in((uintptr_t)f->pool + (size_t)k *
	    f->slot, a, b, n) < 0)
		return -1;
	f->busy[k] = 1;
	return k;
}

/* Slot k's pages back from unit u's pieces, which read zero. */
static void
pool_out(struct dp_fsdp *f, int u, int k)
{
	uintptr_t a[2], b[2];
	int n = pieces(f, u, a, b);

	slot_out((uintptr_t)f->pool + (size_t)k * f->slot, a, b, n);
	f->busy[k] = 0;
}

/* Unit u's gradient pages (those of its range alone): one piece. */
static int
gpiece(const struct dp_fsdp *f, int u, uintptr_t *a, uintptr_t *b)
{
	uintptr_t s = (uintptr_t)(f->grads + f->z.rg[u].off);

	whole_pages(s, s + f->z.rg[u].len * sizeof(float), a, b);
	return *a < *b;
}

/* Unit u's gradients zero before its first backward of the pass: in its
 * slot's pages (zero since the last reduce-scatter that left it), else
 * populated. */
static void
grads_in(struct dp_fsdp *f, int u)
{
	uintptr_t a, b;
	int k = f->gslot[u];

	if (k >= 0 && gpiece(f, u, &a, &b) && slot_in((uintptr_t)f->gpool +
	    (size_t)k * f->slot, &a, &b, 1) == 0)
		f->gin[u] = 1;
	else
		populate(f, u);
}

/* Unit u's gradients, reduced, given back zero: their slot's pages
 * cleared (cheaper than the kernel's page a fault) and moved back. */
static void
grads_out(struct dp_fsdp *f, int u)
{
	float *g = f->grads + f->z.rg[u].off;
	uintptr_t a, b;

	if (!f->gin[u]) {
		give_back(g, f->z.rg[u].len, 1);
		return;
	}
	memset(g, 0, f->z.rg[u].len * sizeof(float));
	gpiece(f, u, &a, &b);
	slot_out((uintptr_t)f->gpool + (size_t)f->gslot[u] * f->slot, &a, &b,
	    1);
	f->gin[u] = 0;
}

/* n slots of f->slot bytes, their pages the kernel's until first
 * written (so they add nothing while new's units lie whole); NULL where
 * they cannot be mapped. */
static char *
slots_new(const struct dp_fsdp *f, int n)
{
	void *p = mmap(NULL, (size_t)n * f->slot, PROT_READ | PROT_WRITE,
	    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	return p == MAP_FAILED ? NULL : p;
}

/* The pools: slots for the K + 1 units of the window, and K + 2 for
 * gradients (the window's backwards and the reduce-scatter behind
 * them); none where they cannot be mapped. */
static void
pool_new(struct dp_fsdp *f, int K)
{
	size_t pg = (size_t)sysconf(_SC_PAGESIZE), big = 0;

	for (int u = 0; u < f->p.nunit; u++)
		big = f->p.unit[u].len > big ? f->p.unit[u].len : big;
	f->slot = (big * sizeof(float) + pg - 1) / pg * pg;
	f->nslot = (f->pool = slots_new(f, K + 1)) != NULL ? K + 1 : 0;
	f->ngslot = (f->gpool = slots_new(f, K + 2)) != NULL ? K + 2 : 0;
}

/*
 * Which gradient slot each unit takes, fixed before training: a unit's
 * gradients move into their slot where its first backward of the pass
 * begins, by the gather job made for that use (on the communication
 * thread, after the jobs before it) or by event() (once the use's wait
 * is over), and leave it zero in the unit's reduce-scatter job. So a
 * slot is free for a unit where the job that emptied it comes before
 * the unit's move in that order, the same whatever the threads' timing.
 * A unit no slot is free for, or too small for one, is populated.
 */
static int
plan_gslots(struct dp_fsdp *f)
{
	int n = f->p.nunit, m = 0, e, u, j, k;
	int *pos = malloc((size_t)n * sizeof(int));
	int *rsj = malloc((size_t)n * sizeof(int));
	int *need = malloc((size_t)n * sizeof(int));
	int *owner = malloc(((size_t)f->ngslot + 1) * sizeof(int));
	char *seen = calloc((size_t)n, 1);

	f->gslot = malloc((size_t)n * sizeof(int));
	f->gin = calloc((size_t)n, 1);
	if (pos == NULL || rsj == NULL || need == NULL || owner == NULL ||
	    seen == NULL || f->gslot == NULL || f->gin == NULL) {
		free(pos), free(rsj), free(need), free(owner), free(seen);
		return -1;
	}
	for (u = 0; u < n; u++)
		pos[u] = rsj[u] = f->gslot[u] = -1;
	for (j = 0; j < f->njob; j++)
		if (f->job[j].kind == JOB_RS)
			rsj[f->job[j].unit] = j;
		else if (f->job[j].pop)
			pos[f->job[j].unit] = j;
	for (e = 0; e < f->p.nev; e++) {
		u = f->p.ev[e].unit;
		if (f->p.ev[e].kind != DP_FSDP_USE || !f->p.ev[e].backward ||
		    seen[u])
			continue;
		seen[u] = 1;
		if (f->cpop[u] == 2)
			pos[u] = f->wait[e];
		if (!small(f, u)) {
			for (k = m++; k > 0 && pos[need[k - 1]] > pos[u]; k--)
				need[k] = need[k - 1];
			need[k] = u;
		}
	}
	for (k = 0; k < f->ngslot; k++)
		owner[k] = -1;
	for (j = 0; j < m; j++)
		for (u = need[j], k = 0; k < f->ngslot; k++)
			if (owner[k] < 0 || (rsj[owner[k]] >= 0 &&
			    rsj[owner[k]] < pos[u])) {
				f->gslot[u] = k;
				owner[k] = u;
				break;
			}
	free(pos), free(rsj), free(need), free(owner), free(seen);
	return 0;
}

/* The floats of unit u this rank does not own. */
static size_t
others(const struct dp_fsdp *f, int u)
{
	size_t off, len;

	dp_zero_slice(&f->z, u, f->z.rank, &off, &len);
	return f->z.rg[u].len - len;
}

static void
hold(struct dp_fsdp *f, int u)
{
	if (f->held[u])
		return;
	f->held[u] = 1;
	f->now += others(f, u);
	if (f->in_pass && f->now > f->peak)
		f->peak = f->now;
}

static void
release(struct dp_fsdp *f, int u)
{
	float *p = f->params + f->z.rg[u].off;
	size_t off, len;

	if (!f->held[u])
		return;
	f->held[u] = 0;
	f->now -= others(f, u);
	if (f->pslot[u] >= 0) {
		pool_out(f, u, f->pslot[u]);
		f->pslot[u] = -1;
		return;
	}
	dp_zero_slice(&f->z, u, f->z.rank, &off, &len);
	give_back(p, off, 0);
	give_back(p + off + len, f->z.rg[u].len - off - len, 0);
}

/* ---- the communication thread's jobs --------------------------------- */

/* Unit u's slices gathered for a pass: in the wire type with --wire bf16
 * or f16 (other ranks' slices rounded to it; gather_all's, for outputs
 * and checks, stay f32). */
static int
gather(struct dp_fsdp *f, int u)
{
	enum dp_wire_type t = f->z.wire->type;
	size_t off;

	if (t != DP_WIRE_BF16 && t != DP_WIRE_F16)
		return dp_zero_allgather_one(&f->z, f->params, u);
	for (int q = 0; q < f->z.world; q++)
		dp_zero_slice(&f->z, u, q, &off, &f->z.counts[q]);
	comm_set_step(f->z.c, "allgather of the parameters of layer %d of %d "
	    "in %s", u + 1, f->z.n, dp_wire_name(t));
	return dp_wire_allgatherv(f->z.wire, f->z.c, f->params +
	    f->z.rg[u].off, f->z.counts, f->z.ag_algo);
}

/* Hybrid: unit u's reduced slice summed over the replicas. */
static int
rep_sum(struct dp_fsdp *f, int u)
{
	size_t off, len;

	dp_zero_slice(&f->z, u, f->z.rank, &off, &len);
	comm_set_step(f->rep, "allreduce of the gradients of layer %d's "
	    "shard across the hosts", u + 1);
	return coll_allreduce(f->rep, f->z.grad + f->z.goff[u], len, DT_F32,
	    COLL_SUM, f->algo);
}

static int
run_job(void *ctx, int j)
{
	struct dp_fsdp *f = ctx;
	const struct job *jb = &f->job[j];
	double t0 = cli_now();
	int rc;

	f->jt[2 * j] = t0;
	if (jb->kind == JOB_GATHER) {
		rc = gather(f, jb->unit);
		f->tg += cli_now() - t0;
		if (jb->pop)
			grads_in(f, jb->unit);
	} else {
		rc = dp_zero_reduce(&f->z, f->grads, jb->unit);
		if (rc == 0 && f->rep != NULL)
			rc = rep_sum(f, jb->unit);
		grads_out(f, jb->unit);
		f->trs += cli_now() - t0;
	}
	f->jt[2 * j + 1] = cli_now();
	return rc;
}

/* ---- a step ------------------------------------------------------------ */

struct dp_fsdp *
dp_fsdp_new(struct comm *c, struct dp_wire *w, enum coll_algo algo,
    const struct dp_fsdp_plan *p, int prefetch, int reshard, float *params,
    float *grads, struct nn_optim *opt, const struct nn_optim_cfg *oc,
    char *err, size_t errlen)
{
	struct dp_fsdp *f = calloc(1, sizeof(*f));
	int *ready = NULL, u, j;
	size_t off, len;

	if (f == NULL)
		goto oom;
	f->params = params;
	f->grads = grads;
	f->algo = algo;
	f->me = comm_rank(c);
	if ((f->owner = calloc((size_t)comm_size(c), sizeof(int))) == NULL)
		goto oom;
	for (j = 0; j < comm_size(c); j++)
		f->owner[j] = j;
	f->p = *p;
	f->p.unit = malloc((size_t)p->nunit * sizeof(*p->unit));
	f->p.final = malloc((size_t)p->nunit * sizeof(*p->final));
	f->p.ev = malloc((size_t)p->nev * sizeof(*p->ev));
	if (f->p.unit == NULL || f->p.final == NULL || f->p.ev == NULL)
		goto oom;
	memcpy(f->p.unit, p->unit, (size_t)p->nunit * sizeof(*p->unit));
	memcpy(f->p.final, p->final, (size_t)p->nunit * sizeof(*p->final));
	memcpy(f->p.ev, p->ev, (size_t)p->nev * sizeof(*p->ev));
	if (plan_jobs(f, prefetch, reshard) < 0)
		goto oom;
	f->pslot = malloc((size_t)p->nunit * sizeof(int));
	f->busy = calloc((size_t)prefetch + 1, sizeof(int));
	f->gseen = calloc((size_t)p->nunit, 1);
	if (f->pslot == NULL || f->busy == NULL || f->gseen == NULL)
		goto oom;
	for (u = 0; u < p->nunit; u++)
		f->pslot[u] = -1;
	pool_new(f, prefetch);
	if (plan_gslots(f) < 0)
		goto oom;
	if (dp_zero_init(&f->z, 3, c, w, algo, p->unit, p->nunit, opt, oc,
	    "layer", err, errlen) < 0)
		goto fail;
	/* jobs run in posting order: each its own ready mark */
	if ((ready = malloc(((size_t)f->njob + 1) * sizeof(int))) == NULL ||
	    (f->jt = calloc(2 * (size_t)f->njob + 2, sizeof(double))) == NULL)
		goto oom;
	for (j = 0; j < f->njob; j++)
		ready[j] = j;
	if ((f->ovl = dp_ovl_new(f->njob, ready, run_job, f, c, err,
	    errlen)) == NULL)
		goto fail;
	free(ready);
	/* whole until release_all: the caller checks them first */
	for (u = 0; u < p->nunit; u++) {
		dp_zero_slice(&f->z, u, f->z.rank, &off, &len);
		f->now += len;
		hold(f, u);
	}
	return f;
oom:
	cli_fail(err, errlen, "out of memory");
fail:
	free(ready);
	dp_fsdp_free(f);
	return NULL;
}

void
dp_fsdp_begin(struct dp_fsdp *f)
{
	f->ei = 0;
	f->tg = f->trs = f->twait = 0;
	memset(f->gseen, 0, (size_t)f->p.nunit);
	f->in_pass = 1;
	if (f->now > f->peak)
		f->peak = f->now;
	dp_ovl_begin(f->ovl);
}

/* Event f->ei done: its releases, its jobs posted, a use's gather
 * waited for. */
static void
event(struct dp_fsdp *f)
{
	const struct dp_fsdp_event *v = &f->p.ev[f->ei];
	int e = f->ei++, k, u, first;

	for (k = f->relo[e]; k < f->relo[e + 1]; k++)
		release(f, f->rel[k]);
	for (k = e > 0 ? f->upto[e - 1] : 0; k < f->upto[e]; k++)
		if (f->job[k].kind == JOB_GATHER && !f->held[u =
		    f->job[k].unit]) {
			hold(f, u);
			f->pslot[u] = pool_in(f, u);
		}
	if (f->upto[e] > 0)
		dp_ovl_stage(f->ovl, f->upto[e] - 1);
	/* a first backward without its gather's job: gradients here */
	u = v->unit;
	first = v->kind == DP_FSDP_USE && v->backward && !f->gseen[u] &&
	    f->cpop[u] != 1;
	if (v->kind == DP_FSDP_USE && v->backward)
		f->gseen[u] = 1;
	if (first && f->gslot[u] < 0)
		populate(f, u);		/* beside the wait */
	if (v->kind == DP_FSDP_USE) {
		double t0 = cli_now();

		dp_ovl_done(f->ovl, f->wait[e]);
		f->twait += cli_now() - t0;
	}
	if (first && f->gslot[u] >= 0)
		grads_in(f, u);		/* its slot free once waited */
}

void
dp_fsdp_use(void *ctx, int layer, int backward)
{
	struct dp_fsdp *f = ctx;
	const struct dp_fsdp_event *v = &f->p.ev[f->ei < f->p.nev ? f->ei : 0];

	if (f->ei >= f->p.nev || v->kind != DP_FSDP_USE || v->layer != layer ||
	    v->backward != backward) {
		f->strayed = 1;
		return;
	}
	event(f);
}

void
dp_fsdp_grad(void *ctx, int stage)
{
	struct dp_fsdp *f = ctx;
	const struct dp_fsdp_event *v = &f->p.ev[f->ei < f->p.nev ? f->ei : 0];

	if (f->ei >= f->p.nev || v->kind != DP_FSDP_GRAD || v->stage != stage) {
		f->strayed = 1;
		return;
	}
	event(f);
}

void
dp_fsdp_replay(struct dp_fsdp *f)
{
	while (f->ei < f->p.nev)
		event(f);
}

void
dp_fsdp_replay_forward(struct dp_fsdp *f)
{
	const struct dp_fsdp_event *v;

	while (f->ei < f->p.nev && (v = &f->p.ev[f->ei], f->ei == 0 ||
	    v->kind != DP_FSDP_USE || v->backward || v->layer >= 0))
		event(f);
}

void
dp_fsdp_drain(struct dp_fsdp *f)
{
	double t0 = cli_now();

	dp_ovl_drain(f->ovl);
	f->twait += cli_now() - t0;
}

int
dp_fsdp_wait(struct dp_fsdp *f, struct dp_fsdp_time *t, char *err,
    size_t errlen)
{
	double busy, t0 = cli_now();
	int rc;

	/* a pass that strayed still posts every job: the other ranks' wait */
	rc = dp_ovl_wait(f->ovl, &busy);
	t->tail = cli_now() - t0;
	f->in_pass = 0;
	dp_fsdp_release_all(f);
	/* a failed collective skips the jobs after it: their slots back */
	for (int u = 0; u < f->p.nunit; u++)
		if (f->gin[u])
			grads_out(f, u);
	t->gather = f->tg;
	t->reduce_scatter = f->trs;
	t->wait = f->twait;
	if (f->strayed || f->ei != f->p.nev) {
		f->strayed = 0;
		return cli_fail(err, errlen, "the pass's weight uses left "
		    "ZeRO-3's plan at event %d of %d", f->ei, f->p.nev);
	}
	if (rc < 0)
		return cli_fail(err, errlen, "%s", comm_error(f->z.c));
	return 0;
}

void
dp_fsdp_step(struct dp_fsdp *f, float scale)
{
	dp_zero_step(&f->z, f->params, f->grads, scale);
}

int
dp_fsdp_gather_all(struct dp_fsdp *f)
{
	/* outside a pass every slot is idle: its pages back to the kernel
	 * while the units lie whole (refaulted once if passes follow) */
	if (f->pool != NULL)
		madvise(f->pool, (size_t)f->nslot * f->slot, MADV_DONTNEED);
	if (f->gpool != NULL)
		madvise(f->gpool, (size_t)f->ngslot * f->slot, MADV_DONTNEED);
	for (int u = 0; u < f->p.nunit; u++) {
		hold(f, u);
		if (dp_zero_allgather_one(&f->z, f->params, u) < 0)
			return -1;
	}
	return 0;
}

void
dp_fsdp_release_all(struct dp_fsdp *f)
{
	for (int u = 0; u < f->p.nunit; u++)
		release(f, u);
}

void
dp_fsdp_hybrid(struct dp_fsdp *f, struct comm *rep, const int *owner, int me)
{
	f->rep = rep;
	f->me = me;
	comm_set_spin(rep, 0);	/* the communication thread's, as c */
	memcpy(f->owner, owner, (size_t)f->z.world * sizeof(int));
}

size_t
dp_fsdp_pieces(struct dp_fsdp *f, int holders, struct ckpt_piece *p)
{
	size_t n = dp_zero_pieces(&f->z, p);

	for (size_t i = 0; i < n; i++) {
		int mine = p[i].rank == f->z.rank;

		p[i].rank = holders && mine ? f->me : f->owner[p[i].rank];
		if (p[i].rank != f->me)
			p[i].o = NULL;
	}
	return n;
}

uint64_t
dp_fsdp_sent(const struct dp_fsdp *f)
{
	return comm_bytes_sent(f->z.c) + (f->rep != NULL ?
	    comm_bytes_sent(f->rep) : 0);
}

size_t
dp_fsdp_peak(const struct dp_fsdp *f)
{
	return f->peak * sizeof(float);
}

size_t
dp_fsdp_held(const struct dp_fsdp *f)
{
	return f->now * sizeof(float);
}

struct dp_zero *
dp_fsdp_zero(struct dp_fsdp *f)
{
	return &f->z;
}

void
dp_fsdp_free(struct dp_fsdp *f)
{
	if (f == NULL)
		return;
	dp_ovl_free(f->ovl);
	dp_zero_free(&f->z);
	dp_fsdp_plan_free(&f->p);
	free(f->job);
	free(f->upto);
	free(f->wait);
	free(f->rel);
	free(f->relo);
	free(f->held);
	free(f->jt);
	free(f->owner);
	free(f->pslot);
	free(f->busy);
	free(f->gseen);
	free(f->cpop);
	free(f->gslot);
	free(f->gin);
	if (f->pool != NULL)
		munmap(f->pool, (size_t)f->nslot * f->slot);
	if (f->gpool != NULL)
		munmap(f->gpool, (size_t)f->ngslot * f->slot);
	free(f);
}

int
dp_fsdp_groups(struct comm *c, struct comm **shard, struct comm **rep,
    int **owner, char *err, size_t errlen)
{
	int H = comm_hosts(c), *n = calloc((size_t)H + 1, sizeof(int));
	int q, h, me = comm_rank(c), mine = comm_host(c, me), local = 0;
	int W = comm_size(c), rc = 0;

	*owner = calloc((size_t)W, sizeof(int));
	if (n == NULL || *owner == NULL) {
		free(n);
		return cli_fail(err, errlen, "out of memory");
	}
	for (q = 0; q < W; q++) {
		h = comm_host(c, q);
		if (h == 0)
			(*owner)[n[0]] = q;
		if (h == mine && q < me)
			local++;
		n[h]++;
	}
	for (h = 1; h < H && rc == 0; h++)
		if (n[h] != n[0]) {
			cli_fail(err, errlen, "--shard-group host: host 0 "
			    "holds %d ranks, host %d %d (hybrid sharding needs "
			    "as many on every host)", n[0], h, n[h]);
			rc = -2;
		}
	free(n);
	if (rc == 0 && (comm_split(c, mine, me, shard, err, errlen) < 0 ||
	    comm_split(c, local, me, rep, err, errlen) < 0))
		rc = -1;
	return rc;
}

int
dp_fsdp_job(const struct dp_fsdp *f, int j, double *t0, double *t1)
{
	if (j < 0 || j >= f->njob)
		return -1;
	*t0 = f->jt[2 * j];
	*t1 = f->jt[2 * j + 1];
	return f->job[j].kind == JOB_GATHER ? DP_FSDP_JOB_GATHER :
	    DP_FSDP_JOB_RS;
}
