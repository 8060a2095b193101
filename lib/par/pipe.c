/* pipe: the pipeline runner. Every step each rank walks its stage's
 * action list from the schedule: receives block (the schedule guarantees
 * the matching send comes first), sends are posted and complete while
 * later waits progress the transport. Then the tied embedding's gradient
 * is summed between the first and last stage, the loss goes to rank 0
 * and every stage updates the parameters it holds. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/util.h"
#include "comm/coll.h"
#include "par/pipe.h"
#include "par/pipe_int.h"

enum { PIPE_OPCODE = 0x50 };
enum { TAG_ACT = 0x5001, TAG_GRAD, TAG_LOSS, TAG_TIED, TAG_PARAM, TAG_SPAN };

struct range {
	size_t off, len;
};

struct prun {
	struct nn_model *m;
	const struct train_data *d;
	struct comm *c;
	const struct pipe_cfg *cfg;
	struct pipe_sched sch;
	struct pipe_stage st;
	int rank, world, have_st, have_sch;
	long *mstart, *mcount;		/* micro-batches of the batch */
	struct pipe_slot **mslot;
	const float **mout;
	struct comm_req *sact, *sgrad;
	struct train_order ord;
	struct train_batch tb;
	struct range *own;		/* parameter ranges this stage updates */
	int nown;
	struct nn_optim *opt;
	float *tied;			/* gpt: the other end's wte gradient */
	double origin;
	long step;
	struct pipe_stat *stat;
	struct pipe_span *spans;
	size_t nspans, capspans;
	enum train_err kind;
	char *err;
	size_t errlen;
};

static int
comm_failed(struct prun *r)
{
	r->kind = comm_errkind(r->c) == COMM_ERR_MISMATCH ? TRAIN_ERR_DATA :
	    TRAIN_ERR_RUNTIME;
	return cli_fail(r->err, r->errlen, "%s", comm_error(r->c));
}

static int
oom(struct prun *r)
{
	r->kind = TRAIN_ERR_RUNTIME;
	return cli_fail(r->err, r->errlen, "rank %d: out of memory", r->rank);
}

int
pipe_layers(const struct nn_model *m)
{
	return m->dims.layers > 0 ? m->dims.layers : 1;
}

/* Layer of a parameter name, or -1 for none (embeddings, head). */
static int
name_layer(const char *name)
{
	int l;

	return sscanf(name, "layers.%d.", &l) == 1 ? l : -1;
}

int
pipe_split(const struct nn_model *m, int world, const char *split,
    int *first, char *err, size_t errlen)
{
	int L = pipe_layers(m), j, l;
	double *cum, total;

	if (world > L)
		return cli_fail(err, errlen, "%d stages for %d layers: every "
		    "stage needs a layer", world, L);
	first[0] = 0;
	if (split != NULL) {
		const char *p = split;
		char *end;
		for (j = 0; j < world; j++) {
			long v = strtol(p, &end, 10);
			if (end == p || v < 1 || (*end != ',' && *end != '\0') ||
			    (*end == '\0') != (j == world - 1))
				return cli_fail(err, errlen, "--split '%s': want %d "
				    "positive layer counts, one per stage", split,
				    world);
			first[j + 1] = first[j] + (int)v;
			p = end + 1;
		}
		if (first[world] != L)
			return cli_fail(err, errlen, "--split '%s' covers %d layers, "
			    "the model has %d", split, first[world], L);
		return 0;
	}
	/* Balanced: stage j ends where the running parameter count comes
	 * nearest j+1 world-ths of the total, keeping a layer per stage. */
	if ((cum = calloc((size_t)L + 1, sizeof(double))) == NULL)
		return cli_fail(err, errlen, "out of memory");
	for (size_t i = 0; i < m->ntensors; i++) {
		l = m->dims.layers > 0 ? name_layer(m->table[i].name) : 0;
		if (l >= 0 && l < L)
			cum[l + 1] += (double)m->table[i].count;
	}
	for (l = 0; l < L; l++)
		cum[l + 1] += cum[l];
	total = cum[L];
	for (j = 1; j < world; j++) {
		double want = total * j / world;
		int best = first[j - 1] + 1;
		for (l = best; l <= L - (world - j); l++)
			if (fabs(cum[l] - want) < fabs(cum[best] - want))
				best = l;
		first[j] = best;
	}
	first[world] = L;
	free(cum);
	return 0;
}

/* The stages holding a parameter: a, and b (or -1). */
static void
owners(const struct prun *r, const char *name, int *a, int *b)
{
	const int *first = r->cfg->first;
	int l = r->m->dims.layers > 0 ? name_layer(name) : 0, j;

	*b = -1;
	if (l >= 0) {
		for (j = 0; j < r->world - 1 && first[j + 1] <= l; j++)
			;
		*a = j;
	} else if (strcmp(name, "wte") == 0) {
		*a = 0;
		*b = r->world > 1 ? r->world - 1 : -1;
	} else
		*a = strcmp(name, "wpe") == 0 ? 0 : r->world - 1;
}

/* This stage's parameter ranges (adjacent tensors merged), each with
 * its own optimizer state. */
static int
own_init(struct prun *r)
{
	const struct nn_model *m = r->m;
	char e[COLLX_ERRLEN];
	int a, b, q;

	r->own = calloc(m->ntensors, sizeof(*r->own));
	r->opt = calloc(m->ntensors, sizeof(*r->opt));
	if (!r->own || !r->opt)
		return oom(r);
	for (size_t i = 0; i < m->ntensors; i++) {
		const struct nn_param *p = &m->table[i];
		owners(r, p->name, &a, &b);
		if (a != r->rank && b != r->rank)
			continue;
		if (r->nown > 0 && r->own[r->nown - 1].off +
		    r->own[r->nown - 1].len == p->offset)
			r->own[r->nown - 1].len += p->count;
		else
			r->own[r->nown++] = (struct range){ p->offset, p->count };
	}
	for (q = 0; q < r->nown; q++)
		if (nn_optim_init(&r->opt[q], &r->cfg->optim, r->own[q].len, e,
		    sizeof(e)) < 0) {
			r->nown = q;
			r->kind = TRAIN_ERR_RUNTIME;
			return cli_fail(r->err, r->errlen, "rank %d: %s", r->rank, e);
		}
	return 0;
}

static void
span(struct prun *r, char kind, int mb, double t0, double t1)
{
	struct pipe_span *sp;

	if (!r->cfg->trace)
		return;
	if (r->nspans == r->capspans) {
		size_t cap = r->capspans ? 2 * r->capspans : 1024;
		struct pipe_span *s = realloc(r->spans, cap * sizeof(*s));
		if (s == NULL)
			return;		/* the trace ends short, training goes on */
		r->spans = s, r->capspans = cap;
	}
	sp = &r->spans[r->nspans++];
	/* Zeroed first: the span goes to rank 0 as bytes, padding included. */
	memset(sp, 0, sizeof(*sp));
	sp->stage = r->rank;
	sp->mb = mb;
	sp->step = (int)r->step;
	sp->kind = kind;
	sp->t0 = t0 - r->origin;
	sp->t1 = t1 - r->origin;
}

/* The micro-batch's inputs and targets, from the step's batch. */
static int
fill_slot(struct prun *r, struct pipe_slot *sl, int i)
{
	const struct train_data *d = r->d;
	const struct pipe_stage *st = &r->st;
	long s0 = r->mstart[i];
	int S = st->seq;

	if (!st->gpt) {
		if (st->first)
			sl->inp = r->tb.x + s0 * d->xrow;
		if (st->last)
			sl->y = r->tb.y + s0 * d->yrow;
		return 0;
	}
	for (int k = 0; k < sl->n; k++) {
		const int32_t *w = r->tb.tok + (s0 + k) * (S + 1);
		for (int p = 0; p <= S; p++) {
			if (w[p] < 0 || w[p] >= r->m->dims.vocab) {
				r->kind = TRAIN_ERR_DATA;
				return cli_fail(r->err, r->errlen, "rank %d: step %ld: "
				    "token %d of sample %ld is outside the vocabulary "
				    "[0, %d)", r->rank, r->step, (int)w[p], s0 + k,
				    r->m->dims.vocab);
			}
		}
		memcpy(sl->tok + (size_t)k * S, w, (size_t)S * sizeof(int32_t));
		memcpy(sl->tok + (size_t)(sl->n + k) * S, w + 1,
		    (size_t)S * sizeof(int32_t));
	}
	return 0;
}

static struct pipe_slot *
acquire(struct prun *r, int i)
{
	struct pipe_slot *sl = pipe_stage_acquire(&r->st, (int)r->mcount[i]);

	if (sl == NULL)
		oom(r);
	return r->mslot[i] = sl;
}

/* Runs one action; *loss gathers the last stage's loss sum. */
static int
act_run(struct prun *r, const struct pipe_action *a, double *loss)
{
	struct pipe_stage *st = &r->st;
	struct pipe_stat *ps = &r->stat[r->step];
	int i = a->mb;
	size_t n = (size_t)r->mcount[i];
	/* bytes of an activation into and out of the stage (gradients back) */
	size_t bin = n * st->in_w * sizeof(float);
	size_t bout = n * st->out_w * sizeof(float);
	struct pipe_slot *sl = r->mslot[i];
	double t0 = cli_now(), t1;
	float *dx;

	switch (a->op) {
	case PIPE_RECV_ACT:
		if ((sl = acquire(r, i)) == NULL)
			return -1;
		comm_set_step(r->c, "step %ld: activation of micro-batch %d",
		    r->step, i);
		if (comm_recv(r->c, a->peer, TAG_ACT, pipe_stage_input(st, sl),
		    bin) < 0)
			return comm_failed(r);
		ps->recvd += bin;
		t1 = cli_now();
		ps->recv += t1 - t0;
		span(r, 'R', i, t0, t1);
		return 0;
	case PIPE_FWD:
		if (sl == NULL && (sl = acquire(r, i)) == NULL)
			return -1;
		if (fill_slot(r, sl, i) < 0)
			return -1;
		r->mout[i] = pipe_stage_forward(st, sl, loss);
		if (comm_progress(r->c) < 0)
			return comm_failed(r);
		t1 = cli_now();
		ps->fwd += t1 - t0;
		span(r, 'F', i, t0, t1);
		return 0;
	case PIPE_SEND_ACT:
		if (comm_isend(r->c, a->peer, TAG_ACT, r->mout[i], bout,
		    &r->sact[i]) < 0)
			return comm_failed(r);
		ps->sent += bout;
		break;
	case PIPE_RECV_GRAD:
		comm_set_step(r->c, "step %ld: gradient of micro-batch %d",
		    r->step, i);
		if (comm_recv(r->c, a->peer, TAG_GRAD, st->g[0], bout) < 0)
			return comm_failed(r);
		ps->recvd += bout;
		t1 = cli_now();
		ps->recv += t1 - t0;
		span(r, 'R', i, t0, t1);
		return 0;
	case PIPE_BWD:
		dx = st->first ? NULL : st->g[2 + (i & 1)];
		/* dx's buffer last carried micro-batch i-2's gradient */
		if (dx != NULL && i >= 2 && comm_wait(r->c, &r->sgrad[i - 2]) < 0)
			return comm_failed(r);
		t1 = cli_now();
		ps->send += t1 - t0;
		pipe_stage_backward(st, sl, st->g[0], dx);
		if (comm_progress(r->c) < 0)
			return comm_failed(r);
		t0 = cli_now();
		ps->bwd += t0 - t1;
		span(r, 'B', i, t1, t0);
		/* the next stage has answered, so the activation has gone */
		if (comm_wait(r->c, &r->sact[i]) < 0)
			return comm_failed(r);
		pipe_stage_release(st, sl);
		r->mslot[i] = NULL;
		return 0;
	case PIPE_SEND_GRAD:
		if (comm_isend(r->c, a->peer, TAG_GRAD, st->g[2 + (i & 1)], bin,
		    &r->sgrad[i]) < 0)
			return comm_failed(r);
		ps->sent += bin;
		break;
	}
	t1 = cli_now();
	ps->send += t1 - t0;
	span(r, 'S', i, t0, t1);
	return 0;
}

/* gpt: the token embedding's gradient summed between stage 0 (the
 * embedding) and the last stage (the head), as both hold the weight. */
static int
tied_sum(struct prun *r)
{
	struct pipe_stage *st = &r->st;
	size_t cnt = (size_t)r->m->dims.vocab * r->m->dims.d_model;
	int peer = st->first ? r->world - 1 : 0;

	if (!st->gpt || r->world == 1 || (!st->first && !st->last))
		return 0;
	comm_set_step(r->c, "step %ld: tied embedding gradient", r->step);
	if (comm_sendrecv(r->c, peer, st->dwte, cnt * sizeof(float), peer,
	    r->tied, cnt * sizeof(float), TAG_TIED) < 0)
		return comm_failed(r);
	nn_add(st->dwte, r->tied, cnt);
	return 0;
}

static int
run_step(struct prun *r, long k, struct train_step *s)
{
	const struct pipe_cfg *cfg = r->cfg;
	struct pipe_stat *ps = &r->stat[k];
	double t0 = cli_now(), loss = 0, t1;
	int q, j = r->rank;

	r->step = k;
	/* Every message of the step carries the step's operation number and
	 * this signature, so ranks out of step fail instead of mixing up. */
	comm_op_begin(r->c, PIPE_OPCODE, "pipeline step", DT_F32,
	    (uint64_t)cfg->micro << 40 ^ (uint64_t)cfg->sched << 32 ^
	    (uint64_t)cfg->batch);
	train_batch_fill(&r->tb, r->d, &r->ord, (int64_t)k * cfg->batch,
	    cfg->batch);
	for (q = 0; q < r->nown; q++)
		memset(r->m->grads + r->own[q].off, 0, r->own[q].len * sizeof(float));
	memset(r->sact, 0, (size_t)cfg->micro * sizeof(*r->sact));
	memset(r->sgrad, 0, (size_t)cfg->micro * sizeof(*r->sgrad));
	for (q = 0; q < r->sch.nact[j]; q++)
		if (act_run(r, &r->sch.act[j][q], &loss) < 0)
			return -1;
	t1 = cli_now();
	comm_set_step(r->c, "step %ld: end of step", k);
	if (comm_waitall(r->c, r->sact, cfg->micro) < 0 ||
	    comm_waitall(r->c, r->sgrad, cfg->micro) < 0)
		return comm_failed(r);
	ps->send += cli_now() - t1;
	span(r, 'S', -1, t1, cli_now());
	if (tied_sum(r) < 0)
		return -1;
	if (r->world > 1 && (j == 0 || j == r->world - 1)) {
		comm_set_step(r->c, "step %ld: loss", k);
		if ((j == 0 ? comm_recv(r->c, r->world - 1, TAG_LOSS, &loss,
		    sizeof(loss)) : comm_send(r->c, 0, TAG_LOSS, &loss,
		    sizeof(loss))) < 0)
			return comm_failed(r);
	}
	for (q = 0; q < r->nown; q++)
		nn_optim_step(&r->opt[q], r->m->params + r->own[q].off,
		    r->m->grads + r->own[q].off, (float)(1.0 / (double)cfg->batch));
	ps->wall = cli_now() - t0;
	ps->peak_act = r->st.peak;
	s->step = k;
	s->epoch = (long)((int64_t)k * cfg->batch / r->d->n);
	s->tokens = train_tokens(r->d, cfg->batch);
	s->loss = loss / (double)cfg->batch;
	s->seconds = ps->wall;
	s->compute = ps->fwd + ps->bwd;
	s->comm = s->seconds - s->compute;
	return 0;
}

/* The job's optimizer state as checkpoint pieces: each tensor from its
 * first holder, or (holders) from each stage holding it (gpt's tied
 * embedding: the first and the last). */
static struct ckpt_piece *
ckpt_pieces(struct prun *r, int holders, size_t *n)
{
	const struct nn_model *m = r->m;
	struct ckpt_piece *p = calloc(2 * m->ntensors + 1, sizeof(*p));
	int a, b, h, q;

	*n = 0;
	for (size_t i = 0; p != NULL && i < m->ntensors; i++) {
		const struct nn_param *t = &m->table[i];

		owners(r, t->name, &a, &b);
		for (h = 0; h < (holders && b >= 0 ? 2 : 1); h++) {
			struct ckpt_piece *c = &p[(*n)++];

			*c = (struct ckpt_piece){ h ? b : a, t->offset, t->count,
			    NULL, 0 };
			for (q = 0; c->rank == r->rank && q < r->nown; q++)
				if (t->offset >= r->own[q].off && t->offset <
				    r->own[q].off + r->own[q].len) {
					c->o = &r->opt[q];
					c->o_off = t->offset - r->own[q].off;
				}
		}
	}
	return p;
}

static int
ckpt_resume(struct prun *r)
{
	struct ckpt_piece *p;
	size_t n;
	int rc;

	if ((p = ckpt_pieces(r, 1, &n)) == NULL)
		return oom(r);
	if ((rc = ckpt_restore(r->cfg->resume, p, n, r->rank, r->err,
	    r->errlen)) < 0)
		r->kind = TRAIN_ERR_DATA;
	free(p);
	return rc;
}

/* ---- the run --------------------------------------------------------- */

static int
run_init(struct prun *r)
{
	const struct pipe_cfg *cfg = r->cfg;
	int M = cfg->micro, i, nmax = 0;
	char e[COLLX_ERRLEN];

	r->rank = comm_rank(r->c);
	r->world = comm_size(r->c);
	r->mstart = calloc((size_t)M, sizeof(long));
	r->mcount = calloc((size_t)M, sizeof(long));
	r->mslot = calloc((size_t)M, sizeof(*r->mslot));
	r->mout = calloc((size_t)M, sizeof(*r->mout));
	r->sact = calloc((size_t)M, sizeof(*r->sact));
	r->sgrad = calloc((size_t)M, sizeof(*r->sgrad));
	r->stat = calloc((size_t)cfg->steps + 1, sizeof(*r->stat));
	if (!r->mstart || !r->mcount || !r->mslot || !r->mout || !r->sact ||
	    !r->sgrad || !r->stat)
		return oom(r);
	for (i = 0; i < M; i++) {
		train_split(cfg->batch, M, i, &r->mstart[i], &r->mcount[i]);
		if (r->mcount[i] > nmax)
			nmax = (int)r->mcount[i];
	}
	if (pipe_sched_build(&r->sch, cfg->sched, M, r->world, e, sizeof(e)) < 0)
		goto fail;
	r->have_sch = 1;
	if (pipe_stage_init(&r->st, r->m, r->rank, r->world,
	    cfg->first[r->rank], cfg->first[r->rank + 1], r->d->seq, nmax, M, e,
	    sizeof(e)) < 0)
		goto fail;
	r->have_st = 1;
	if (train_order_init(&r->ord, r->d->n, 0, 0, e, sizeof(e)) < 0 ||
	    train_batch_alloc(&r->tb, r->d, cfg->batch, e, sizeof(e)) < 0)
		goto fail;
	if (r->st.gpt && (r->st.first || r->st.last) && r->world > 1 &&
	    (r->tied = malloc((size_t)r->m->dims.vocab * r->m->dims.d_model *
	    sizeof(float))) == NULL)
		return oom(r);
	if (own_init(r) < 0)
		return -1;
	if (cfg->resume != NULL && ckpt_resume(r) < 0)
		return -1;
	comm_set_step(r->c, "start of training");
	if (coll_barrier(r->c) < 0)
		return comm_failed(r);
	r->origin = cli_now();
	return 0;
fail:
	r->kind = TRAIN_ERR_RUNTIME;
	return cli_fail(r->err, r->errlen, "rank %d: %s", r->rank, e);
}

/* Rank 0 collects every stage's parameters (from their first holder). */
static int
gather_params(struct prun *r)
{
	const struct nn_model *m = r->m;
	int a, b;

	for (size_t i = 0; i < m->ntensors; i++) {
		const struct nn_param *p = &m->table[i];
		float *v = m->params + p->offset;
		int rc = 0;

		owners(r, p->name, &a, &b);
		if (a == 0)
			continue;
		comm_set_step(r->c, "gathering %s", p->name);
		if (r->rank == 0)
			rc = comm_recv(r->c, a, TAG_PARAM, v, p->count * sizeof(float));
		else if (r->rank == a)
			rc = comm_send(r->c, 0, TAG_PARAM, v, p->count * sizeof(float));
		if (rc < 0)
			return comm_failed(r);
	}
	return 0;
}

/* Collective: the whole model and optimizer state, after done steps. */
static int
ckpt_write(struct prun *r, long done)
{
	struct ckpt_piece *p;
	size_t n;
	int rc;

	if ((p = ckpt_pieces(r, 0, &n)) == NULL)
		return oom(r);
	rc = gather_params(r);
	if (rc == 0 && (rc = ckpt_save(r->c, r->m, &r->cfg->optim, p, n, done,
	    r->cfg->batch, r->cfg->ckpt_path, r->err, r->errlen)) < 0)
		r->kind = TRAIN_ERR_RUNTIME;
	free(p);
	return rc;
}

/* Every stage's measured bubble and peak activations, to rank 0 (all
 * steps but the first, which pays for first-touch allocation, when there
 * are more). */
static int
gather_stats(struct prun *r, struct pipe_result *res)
{
	double mine[3] = { 0, 0, (double)r->st.peak }, *all;
	long k0 = r->cfg->resume != NULL ? r->cfg->resume->step : 0, k;
	int q;

	for (k = r->cfg->steps - k0 > 1 ? k0 + 1 : k0; k < r->cfg->steps; k++) {
		mine[0] += r->stat[k].fwd + r->stat[k].bwd;
		mine[1] += r->stat[k].wall;
	}
	all = malloc(3 * (size_t)r->world * sizeof(double));
	res->bubble = calloc((size_t)r->world, sizeof(double));
	res->peak_act = calloc((size_t)r->world, sizeof(size_t));
	if (!all || !res->bubble || !res->peak_act) {
		free(all);
		return oom(r);
	}
	comm_set_step(r->c, "gathering statistics");
	if (coll_allgather(r->c, mine, all, 3, DT_F64, COLL_AUTO) < 0) {
		free(all);
		return comm_failed(r);
	}
	res->bubble_mean = 0;
	for (q = 0; q < r->world; q++) {
		res->bubble[q] = all[3 * q + 1] > 0 ?
		    1 - all[3 * q] / all[3 * q + 1] : 0;
		res->peak_act[q] = (size_t)all[3 * q + 2];
		res->bubble_mean += res->bubble[q] / r->world;
	}
	free(all);
	return 0;
}

/* Rank 0 collects every stage's spans. */
static int
gather_spans(struct prun *r, struct pipe_result *res)
{
	uint64_t n = r->nspans;
	int q;

	if (!r->cfg->trace)
		return 0;
	comm_set_step(r->c, "gathering the trace");
	if (r->rank != 0) {
		if (comm_send(r->c, 0, TAG_SPAN, &n, sizeof(n)) < 0 ||
		    comm_send(r->c, 0, TAG_SPAN, r->spans, n * sizeof(*r->spans)) < 0)
			return comm_failed(r);
		return 0;
	}
	res->spans = r->spans, res->nspans = r->nspans;
	r->spans = NULL;
	for (q = 1; q < r->world; q++) {
		struct pipe_span *s;
		if (comm_recv(r->c, q, TAG_SPAN, &n, sizeof(n)) < 0)
			return comm_failed(r);
		s = realloc(res->spans, (res->nspans + n + 1) * sizeof(*s));
		if (s == NULL)
			return oom(r);
		res->spans = s;
		if (comm_recv(r->c, q, TAG_SPAN, s + res->nspans,
		    n * sizeof(*s)) < 0)
			return comm_failed(r);
		res->nspans += n;
	}
	return 0;
}

static void
run_free(struct prun *r)
{
	int q;

	for (q = 0; q < r->nown; q++)
		nn_optim_free(&r->opt[q]);
	free(r->opt);
	free(r->own);
	if (r->have_st)
		pipe_stage_free(&r->st);
	if (r->have_sch)
		pipe_sched_free(&r->sch);
	train_order_free(&r->ord);
	train_batch_free(&r->tb);
	free(r->mstart), free(r->mcount), free(r->mslot), free(r->mout);
	free(r->sact), free(r->sgrad), free(r->tied), free(r->spans);
}

int
pipe_train(struct nn_model *m, const struct train_data *d, struct comm *c,
    const struct pipe_cfg *cfg, pipe_step_fn fn, void *ctx,
    struct pipe_result *res, enum train_err *kind, char *err, size_t errlen)
{
	struct prun r = { .m = m, .d = d, .c = c, .cfg = cfg,
	    .kind = TRAIN_ERR_RUNTIME, .err = err, .errlen = errlen };
	long k = cfg->resume != NULL ? cfg->resume->step : 0;
	int rc = -1;

	memset(res, 0, sizeof(*res));
	res->steps = calloc((size_t)cfg->steps + 1, sizeof(*res->steps));
	if (res->steps == NULL) {
		oom(&r);
		goto out;
	}
	if (run_init(&r) < 0)
		goto out;
	for (; k < cfg->steps; k++) {
		if (run_step(&r, k, &res->steps[k]) < 0)
			goto out;
		if (fn != NULL)
			fn(ctx, &res->steps[k], &r.stat[k]);
		if (cfg->ckpt_path != NULL && (k + 1 == cfg->steps ||
		    (cfg->ckpt_every > 0 && (k + 1) % cfg->ckpt_every == 0)) &&
		    ckpt_write(&r, k + 1) < 0)
			goto out;
	}
	if (gather_params(&r) < 0 || gather_stats(&r, res) < 0 ||
	    gather_spans(&r, res) < 0)
		goto out;
	rc = 0;
out:
	res->stat = r.stat;
	r.stat = NULL;
	*kind = r.kind;
	run_free(&r);
	return rc;
}

void
pipe_result_free(struct pipe_result *r)
{
	free(r->steps);
	free(r->stat);
	free(r->bubble);
	free(r->peak_act);
	free(r->spans);
	memset(r, 0, sizeof(*r));
}
