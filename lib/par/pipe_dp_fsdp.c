/* pipe_dp_fsdp: ZeRO-3 (dp_fsdp.c, collx-dp's engine) on the
 * data-parallel axis of a pipeline run. Its units: each chunk's layers
 * (this rank's TP shards of them) one each, and on a gpt's first and last
 * virtual stages the embeddings, final LayerNorm and head together; each
 * cut over the stage's replicas (cfg->dp, or under --shard-group host its
 * host's ranks) with an optimizer of its own. The pass's events follow
 * the rank's schedule, the same on every replica of the stage: a forward
 * of a chunk uses its units in order (a gpt's embeddings first, its head
 * last), a backward in reverse (a split schedule's weight part reads no
 * weight), tp_stage's use hook telling each use. A unit's gradients are
 * final once the chunk's last backward of the step (a split schedule's:
 * its last weight part) has passed the layer: tp_stage's done hook, armed
 * for that pass alone (pipe_dp_fsdp_arm), posts the unit's
 * reduce-scatter there, so it runs beside the layers below; a gpt's
 * embeddings and head, whose tied gradient's halves meet after the
 * schedule (pipe_step.c's tied_sum), go after it. Every group of the
 * mesh shares the links (pipe_dp_sync.c): the gathers and reduce-scatters
 * run on the communication thread while a layer computes, and the stage
 * waits for them before each TP sum and ring pass and after each
 * forward, backward and weight part, before the pipeline's messages. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/util.h"
#include "par/dp_fsdp.h"
#include "par/pipe.h"
#include "par/pipe_int.h"

/* A chunk's units: its layers' from base, the gpt's extras (or -1);
 * tied: the extras' gradient is final only after the schedule; npass:
 * the step's backwards (split: weight parts) of the chunk so far. */
struct pipe_fsdp_chunk {
	struct pipe_run *r;
	int c, base, extra, tied, npass;
};

static int
fsdp_fail(struct pipe_run *r, const char *e)
{
	r->kind = TRAIN_ERR_RUNTIME;
	return cli_fail(r->err, r->errlen, "stage %d, replica %d: %s",
	    r->rank, comm_rank(r->cfg->dp), e);
}

/* The unit of chunk ch's layer l (-1: the gpt's extras). */
static int
unit_of(const struct pipe_fsdp_chunk *ch, const struct tp_stage *ts, int l)
{
	return l < 0 ? ch->extra : ch->base + l - ts->l0;
}

static void
use_hook(void *ctx, int l, int backward)
{
	struct pipe_fsdp_chunk *ch = ctx;
	struct dp_fsdp *f = ch->r->zero->fsdp;

	if (l == TP_STAGE_SUMMING)
		dp_fsdp_drain(f);
	else
		dp_fsdp_use(f, unit_of(ch, &ch->r->ts[ch->c], l), backward);
}

/* The chunk's last backward or weight part has passed layer l (the
 * model's index; its count: the embeddings): the unit's reduce-scatter
 * goes. */
static void
done_hook(void *ctx, int l)
{
	struct pipe_fsdp_chunk *ch = ctx;
	const struct tp_stage *ts = &ch->r->ts[ch->c];
	struct dp_fsdp *f = ch->r->zero->fsdp;

	if (l == TP_STAGE_SUMMING)
		dp_fsdp_drain(f);
	else if (l >= ts->l0 && l < ts->l1)
		dp_fsdp_grad(f, unit_of(ch, ts, l) + 1);
	else if (l == ts->d.layers && ch->extra >= 0 && !ch->tied)
		dp_fsdp_grad(f, ch->extra + 1);
}

int
pipe_dp_fsdp_arm(struct pipe_run *r, struct tp_stage *ts, int weight)
{
	struct pipe_fsdp_chunk *ch;

	if (r->zero == NULL || r->zero->fsdp == NULL)
		return 0;
	ch = &r->zero->ch[ts - r->ts];
	if (weight == ts->split && ++ch->npass == r->cfg->micro) {
		ts->done = done_hook;
		ts->done_ctx = ch;
	}
	return 1;
}

/* Units per chunk and their ranges in r->params into p->unit (each
 * tensor's; a unit's tensors must lie together). */
static int
plan_units(struct pipe_run *r, struct pipe_fsdp_chunk *ch,
    struct dp_fsdp_plan *p)
{
	size_t coff = 0, *sum, i;
	int c, u, n = 0;

	for (c = 0; c < r->nchunk; c++) {
		const struct tp_stage *ts = &r->ts[c];

		ch[c] = (struct pipe_fsdp_chunk){ r, c, n, -1, r->world > 1 ||
		    r->nchunk > 1, 0 };
		n += ts->l1 - ts->l0;
		if (ts->gpt && (ts->first || ts->last))
			ch[c].extra = n++;
	}
	p->nunit = n;
	p->unit = calloc((size_t)n + 1, sizeof(*p->unit));
	p->final = calloc((size_t)n + 1, sizeof(*p->final));
	sum = calloc((size_t)n + 1, sizeof(*sum));
	if (p->unit == NULL || p->final == NULL || sum == NULL) {
		free(sum);
		return pipe_oom(r);
	}
	for (u = 0; u < n; u++)
		p->unit[u].off = SIZE_MAX;
	for (c = 0; c < r->nchunk; c++) {
		const struct tp_stage *ts = &r->ts[c];

		for (i = 0; i < ts->nten; i++) {
			const struct tp_param *t = &ts->ten[i].p;
			const char *nm = ts->ten[i].name;
			struct dp_range *g;

			if (t->count == 0)
				continue;
			u = unit_of(&ch[c], ts, strncmp(nm, "layers.", 7) == 0 ?
			    atoi(nm + 7) : -1);
			g = &p->unit[u];
			if (g->off == SIZE_MAX)
				*g = (struct dp_range){ coff + t->off, 0 };
			if (coff + t->off < g->off) {
				g->len += g->off - coff - t->off;
				g->off = coff + t->off;
			}
			if (coff + t->off + t->count > g->off + g->len)
				g->len = coff + t->off + t->count - g->off;
			sum[u] += t->count;
		}
		coff += ts->nlocal;
	}
	for (u = 0; u < n; u++)
		if (sum[u] != p->unit[u].len || sum[u] == 0 ||
		    (u + 1 < n && p->unit[u + 1].off != p->unit[u].off +
		    p->unit[u].len) || p->unit[0].off != 0) {
			free(sum);
			return fsdp_fail(r, "ZeRO-3: the stage's layers do not "
			    "lie one after another");
		}
	free(sum);
	return 0;
}

static void
ev(struct dp_fsdp_plan *p, int kind, int backward, int unit)
{
	p->ev[p->nev++] = (struct dp_fsdp_event){ kind, unit, backward,
	    kind == DP_FSDP_GRAD ? unit + 1 : 0, unit };
}

/* The events of the rank's schedule, then the tied embeddings' one
 * (stage 0); p->final: each unit's reduce-scatter's stage, unit + 1 for
 * those the chunk's last backward or weight part brings (in its done
 * hook's order: each layer's from the top, then the untied
 * embeddings'). */
static int
plan_events(struct pipe_run *r, const struct pipe_fsdp_chunk *ch,
    struct dp_fsdp_plan *p)
{
	const struct pipe_action *a = r->sch->act[r->rank];
	int na = r->sch->nact[r->rank], q, l, u, max = 1;
	int *left = calloc((size_t)r->nchunk, sizeof(int));

	for (q = 0; q < na; q++)
		max += 2 * (r->ts[a[q].chunk].l1 - r->ts[a[q].chunk].l0) + 3;
	if (left == NULL || (p->ev = calloc((size_t)max,
	    sizeof(*p->ev))) == NULL) {
		free(left);
		return pipe_oom(r);
	}
	for (u = 0; u < p->nunit; u++)
		p->final[u] = u + 1;
	for (q = 0; q < r->nchunk; q++) {
		left[q] = r->cfg->micro;
		if (ch[q].extra >= 0 && ch[q].tied)
			p->final[ch[q].extra] = 0;
	}
	for (q = 0; q < na; q++) {
		const struct tp_stage *ts = &r->ts[a[q].chunk];
		const struct pipe_fsdp_chunk *k = &ch[a[q].chunk];
		int last = a[q].op == (ts->split ? PIPE_WGT : PIPE_BWD) &&
		    --left[a[q].chunk] == 0;

		if (a[q].op == PIPE_FWD) {
			if (ts->gpt && ts->first)
				ev(p, DP_FSDP_USE, 0, k->extra);
			for (l = 0; l < ts->l1 - ts->l0; l++)
				ev(p, DP_FSDP_USE, 0, k->base + l);
			if (ts->gpt && ts->last)
				ev(p, DP_FSDP_USE, 0, k->extra);
			continue;
		}
		if (a[q].op == PIPE_BWD && ts->gpt && ts->last)
			ev(p, DP_FSDP_USE, 1, k->extra);
		for (l = ts->l1 - ts->l0 - 1; l >= 0 && (last ||
		    a[q].op == PIPE_BWD); l--) {
			if (a[q].op == PIPE_BWD)
				ev(p, DP_FSDP_USE, 1, k->base + l);
			if (last)
				ev(p, DP_FSDP_GRAD, 0, k->base + l);
		}
		if (last && ts->gpt && ts->first && !k->tied)
			ev(p, DP_FSDP_GRAD, 0, k->extra);
	}
	free(left);
	ev(p, DP_FSDP_GRAD, 0, -1);	/* the tied extras' */
	return 0;
}

/* own and opt re-cut to the units, an optimizer each. */
static int
own_units(struct pipe_run *r, const struct dp_fsdp_plan *p)
{
	struct pipe_range *own = calloc((size_t)p->nunit, sizeof(*own));
	struct nn_optim *opt = calloc((size_t)p->nunit, sizeof(*opt));
	int q;

	if (own == NULL || opt == NULL) {
		free(own), free(opt);
		return pipe_oom(r);
	}
	for (q = 0; q < r->nown; q++)
		nn_optim_free(&r->opt[q]);
	free(r->own), free(r->opt);
	r->own = own, r->opt = opt, r->nown = p->nunit;
	for (q = 0; q < p->nunit; q++)
		own[q] = (struct pipe_range){ p->unit[q].off, p->unit[q].len };
	return 0;
}

int
pipe_dp_fsdp_init(struct pipe_run *r)
{
	const struct pipe_cfg *cfg = r->cfg;
	struct pipe_dp_zero *z = r->zero;
	struct dp_fsdp_plan p = { 0 };
	struct comm *g = cfg->dp;
	char e[COLLX_ERRLEN];
	size_t maxn = 0, nvec = 0;
	int *owner = NULL, q, rc;

	if ((z->ch = calloc((size_t)r->nchunk, sizeof(*z->ch))) == NULL)
		return pipe_oom(r);
	if (plan_units(r, z->ch, &p) < 0 || plan_events(r, z->ch, &p) < 0 ||
	    own_units(r, &p) < 0)
		goto fail;
	for (q = 0; q < p.nunit; q++) {
		maxn = p.unit[q].len > maxn ? p.unit[q].len : maxn;
		if (p.unit[q].off + p.unit[q].len > nvec)
			nvec = p.unit[q].off + p.unit[q].len;
	}
	if (cfg->dpo.shard_host) {
		rc = dp_fsdp_groups(cfg->dp, &z->shard, &z->rep, &owner, e,
		    sizeof(e));
		if (rc < 0) {
			fsdp_fail(r, e);
			if (rc == -2)
				r->kind = TRAIN_ERR_DATA;
			goto fail;
		}
		g = z->shard;
	}
	if (dp_wire_init(&z->wire, cfg->dpo.wire, comm_rank(g), comm_size(g),
	    nvec, maxn, e, sizeof(e)) < 0) {
		fsdp_fail(r, e);
		goto fail;
	}
	z->fsdp = dp_fsdp_new(g, &z->wire, COLL_AUTO, &p, cfg->dpo.prefetch,
	    cfg->dpo.reshard, r->params, r->grads, r->opt, &cfg->optim, e,
	    sizeof(e));
	if (z->fsdp == NULL) {
		fsdp_fail(r, e);
		goto fail;
	}
	if (z->rep != NULL)
		dp_fsdp_hybrid(z->fsdp, z->rep, owner, comm_rank(cfg->dp));
	free(owner);
	for (q = 0; q < r->nchunk; q++) {
		r->ts[q].use = use_hook;
		r->ts[q].use_ctx = &z->ch[q];
	}
	dp_fsdp_plan_free(&p);
	return 0;
fail:
	free(owner);
	dp_fsdp_plan_free(&p);
	return -1;
}

void
pipe_dp_fsdp_free(struct pipe_run *r)
{
	struct pipe_dp_zero *z = r->zero;

	dp_fsdp_free(z->fsdp);
	if (z->rep != NULL)
		comm_close(z->rep);
	if (z->shard != NULL)
		comm_close(z->shard);
	free(z->ch);
}

void
pipe_dp_fsdp_begin(struct pipe_run *r)
{
	if (r->zero == NULL || r->zero->fsdp == NULL)
		return;
	dp_fsdp_release_all(r->zero->fsdp);
	for (int c = 0; c < r->nchunk; c++)
		r->zero->ch[c].npass = 0;
	r->zero->sent = dp_fsdp_sent(r->zero->fsdp);
	dp_fsdp_begin(r->zero->fsdp);
}

void
pipe_dp_fsdp_settle(struct pipe_run *r)
{
	if (r->zero != NULL && r->zero->fsdp != NULL)
		dp_fsdp_drain(r->zero->fsdp);
}

/* --trace: each gather ('G') and reduce-scatter ('Z') of the pass. */
static void
trace_jobs(struct pipe_run *r)
{
	double t0, t1;
	int j, k;

	for (j = 0; r->cfg->trace && (k = dp_fsdp_job(r->zero->fsdp, j, &t0,
	    &t1)) >= 0; j++)
		pipe_span(r, k == DP_FSDP_JOB_GATHER ? 'G' : 'Z', -1, t0, t1);
}

int
pipe_dp_fsdp_sync(struct pipe_run *r, uint64_t *sent)
{
	struct pipe_dp_zero *z = r->zero;
	struct pipe_stat *ps = &r->stat[r->step];
	struct dp_fsdp_time t;
	char e[COLLX_ERRLEN];

	dp_fsdp_grad(z->fsdp, 0);
	if (dp_fsdp_wait(z->fsdp, &t, e, sizeof(e)) < 0) {
		if (comm_errkind(r->cfg->dp) != COMM_ERR_NONE)
			return pipe_dp_failed(r);
		return fsdp_fail(r, e);
	}
	trace_jobs(r);
	ps->dp_gather = t.gather;
	ps->dp_rs = t.reduce_scatter;
	ps->dp_exposed = t.wait;	/* the pass's waits for gathers */
	if (z->rep != NULL)	/* groups of their own: the report adds them */
		ps->dp_hybrid = (size_t)(dp_fsdp_sent(z->fsdp) - z->sent);
	/* the pass's bytes counted with the sums that follow */
	*sent = comm_bytes_sent(r->cfg->dp) - (dp_fsdp_sent(z->fsdp) -
	    z->sent);
	ps->params_peak = dp_fsdp_peak(z->fsdp);
	return 0;
}

int
pipe_dp_whole(struct pipe_run *r)
{
	if (r->zero == NULL || r->zero->fsdp == NULL)
		return 0;
	return dp_fsdp_gather_all(r->zero->fsdp) < 0 ? pipe_dp_failed(r) : 0;
}

int
pipe_dp_fsdp_units(struct pipe_run *r)
{
	struct pipe_fsdp_chunk *ch = calloc((size_t)r->nchunk + 1,
	    sizeof(*ch));
	struct dp_fsdp_plan p = { 0 };
	int rc;

	if (ch == NULL)
		return pipe_oom(r);
	rc = plan_units(r, ch, &p) < 0 || own_units(r, &p) < 0 ? -1 : 0;
	dp_fsdp_plan_free(&p);
	free(ch);
	return rc;
}
