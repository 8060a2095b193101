/* pipe_tp: the stage a pipeline run drives. Without cfg->tp it is
 * pipe_stage's, its layers in the model; with it (collx-train, any mesh)
 * a tp_stage, the stage's layers sharded over the TP group (a group of
 * one gives pipe_stage's results bit for bit), its parameters in the
 * tp_stage's own vector: one range with one optimizer. The runner reads
 * the stage's shape and buffers from st either way; here st takes the
 * tp_stage's. TP rank t of each stage talks to TP rank t of the next
 * (the pipeline group holds one TP index), and every TP rank of a stage
 * runs every micro-batch alike, so the runner's messages are unchanged. */
#include <stdlib.h>
#include <string.h>

#include "cli/util.h"
#include "comm/coll.h"
#include "par/pipe.h"
#include "par/pipe_int.h"
#include "par/tp_stage.h"

static int
tp_failed(struct pipe_run *r)
{
	/* the reason is in r->err already (the tp_stage writes there) */
	r->kind = r->cfg->tp != NULL && comm_errkind(r->cfg->tp) ==
	    COMM_ERR_MISMATCH ? TRAIN_ERR_DATA : TRAIN_ERR_RUNTIME;
	return -1;
}

/* st as the runner reads it: the tp_stage's shape and buffers. */
static void
bind_shape(struct pipe_run *r)
{
	struct pipe_stage *st = &r->st;
	struct tp_stage *ts = r->ts;

	memset(st, 0, sizeof(*st));
	st->d = &ts->d;
	st->j = ts->j, st->w = ts->w, st->l0 = ts->l0, st->l1 = ts->l1;
	st->gpt = ts->gpt, st->first = ts->first, st->last = ts->last;
	st->seq = ts->seq, st->in_w = ts->in_w, st->out_w = ts->out_w;
	st->nmax = ts->nmax, st->split = ts->split;
	for (int i = 0; i < 4; i++)
		st->g[i] = ts->gb[i];
	st->dwte = ts->dwte;
}

/* A TP sum, in the trace: a span within the forward or backward. */
static void
on_sum(void *ctx, double t0, double t1)
{
	pipe_span(ctx, 'T', -1, t0, t1);
}

int
pipe_tp_init(struct pipe_run *r, int nmax)
{
	const struct pipe_cfg *cfg = r->cfg;

	if ((r->ts = calloc(1, sizeof(*r->ts))) == NULL)
		return pipe_oom(r);
	/* later failures (a TP collective's) land in r->err too */
	if (tp_stage_init(r->ts, r->m, cfg->tp, r->rank, r->world,
	    cfg->first[r->rank], cfg->first[r->rank + 1], r->d->seq, nmax,
	    cfg->micro, r->sch->split, r->err, r->errlen) < 0) {
		free(r->ts);
		r->ts = NULL;
		r->kind = TRAIN_ERR_RUNTIME;
		return -1;
	}
	bind_shape(r);
	r->ts->on_sum = on_sum;
	r->ts->on_sum_ctx = r;
	r->params = r->ts->params;
	r->grads = r->ts->grads;
	return 0;
}

int
pipe_tp_own_init(struct pipe_run *r)
{
	char e[COLLX_ERRLEN];

	r->own = calloc(1, sizeof(*r->own));
	r->opt = calloc(1, sizeof(*r->opt));
	if (!r->own || !r->opt)
		return pipe_oom(r);
	r->own[0] = (struct pipe_range){ 0, r->ts->nlocal };
	if (nn_optim_init(&r->opt[0], &r->cfg->optim, r->ts->nlocal, e,
	    sizeof(e)) < 0) {
		r->kind = TRAIN_ERR_RUNTIME;
		return cli_fail(r->err, r->errlen, "rank %d: %s", r->rank, e);
	}
	r->nown = 1;
	return 0;
}

void
pipe_tp_free(struct pipe_run *r)
{
	if (r->ts == NULL)
		return;
	tp_stage_free(r->ts);
	free(r->ts);
	r->ts = NULL;
}

/* Chunk 0 is st (a tp_stage's shape under TP, which has one chunk);
 * the others, interleaved, r->chunk's. */
struct pipe_stage *
pipe_chunk(struct pipe_run *r, int c)
{
	return c == 0 ? &r->st : &r->chunk[c - 1];
}

/* The rank's activation bytes, all chunks together, at their peak so
 * far: kept in st.peak, which st's own slots alone never exceed. */
static void
rank_peak(struct pipe_run *r)
{
	size_t live = r->st.live;

	for (int c = 1; c < r->nchunk; c++)
		live += r->chunk[c - 1].live;
	if (live > r->st.peak)
		r->st.peak = live;
}

struct pipe_slot *
pipe_unit_acquire(struct pipe_run *r, int c, int n)
{
	struct pipe_slot *sl;

	if (r->ts == NULL) {
		sl = pipe_stage_acquire(pipe_chunk(r, c), n);
		rank_peak(r);
		return sl;
	}
	sl = tp_stage_acquire(r->ts, n);
	r->st.peak = r->ts->peak;
	return sl;
}

float *
pipe_unit_input(struct pipe_run *r, int c, struct pipe_slot *sl)
{
	return r->ts ? tp_stage_input(r->ts, sl) :
	    pipe_stage_input(pipe_chunk(r, c), sl);
}

const float *
pipe_unit_forward(struct pipe_run *r, int c, struct pipe_slot *sl,
    double *loss)
{
	const float *y;

	if (r->ts == NULL)
		return pipe_stage_forward(pipe_chunk(r, c), sl, loss);
	if ((y = tp_stage_forward(r->ts, sl, loss)) == NULL)
		tp_failed(r);
	return y;
}

int
pipe_unit_backward(struct pipe_run *r, int c, struct pipe_slot *sl,
    float *dy, float *dx)
{
	if (r->ts == NULL) {
		pipe_stage_backward(pipe_chunk(r, c), sl, dy, dx);
		return 0;
	}
	return tp_stage_backward(r->ts, sl, dy, dx) < 0 ? tp_failed(r) : 0;
}

void
pipe_unit_weight(struct pipe_run *r, int c, struct pipe_slot *sl)
{
	if (r->ts != NULL)
		tp_stage_weight(r->ts, sl);
	else
		pipe_stage_weight(pipe_chunk(r, c), sl);
}

void
pipe_unit_release(struct pipe_run *r, int c, struct pipe_slot *sl)
{
	if (r->ts != NULL)
		tp_stage_release(r->ts, sl);
	else
		pipe_stage_release(pipe_chunk(r, c), sl);
}

void
pipe_tp_stat(struct pipe_run *r, struct pipe_stat *ps, int begin)
{
	double t;
	uint64_t b;

	if (r->ts == NULL || r->ts->T == 1)
		return;
	t = r->ts->coll_s;
	b = comm_bytes_sent(r->cfg->tp);
	if (!begin) {
		ps->tp = t - r->tp_t0;
		ps->tp_sent = (size_t)(b - r->tp_b0);
	}
	r->tp_t0 = t;
	r->tp_b0 = b;
}

/* A checksum of this rank's replicated tensors. */
static uint64_t
whole_sum(const struct tp_stage *ts)
{
	uint64_t h = CLI_FNV1A_INIT;

	for (size_t i = 0; i < ts->nten; i++) {
		const struct tp_param *p = &ts->ten[i].p;
		if (p->split == TP_WHOLE)
			h = cli_fnv1a(h, ts->params + p->off,
			    p->count * sizeof(float));
	}
	return h;
}

int
pipe_tp_verify(struct pipe_run *r)
{
	uint64_t mine, *all;
	int T, q, rc = 0;

	if (r->ts == NULL || (T = r->ts->T) == 1)
		return 0;
	mine = whole_sum(r->ts);
	if ((all = malloc((size_t)T * sizeof(*all))) == NULL)
		return pipe_oom(r);
	comm_set_step(r->cfg->tp, "replicated tensors' checksum after "
	    "training");
	if (coll_allgather(r->cfg->tp, &mine, all, 1, DT_I64, COLL_AUTO) < 0) {
		free(all);
		r->kind = TRAIN_ERR_RUNTIME;
		return cli_fail(r->err, r->errlen, "TP group: %s",
		    comm_error(r->cfg->tp));
	}
	for (q = 1; q < T && rc == 0; q++)
		if (all[q] != all[0]) {
			r->kind = TRAIN_ERR_RUNTIME;
			rc = cli_fail(r->err, r->errlen, "stage %d: the "
			    "replicated tensors of TP rank %d differ from TP "
			    "rank 0's after training (checksum %016llx vs "
			    "%016llx)", r->rank, q, (unsigned long long)all[q],
			    (unsigned long long)all[0]);
		}
	free(all);
	return rc;
}

int
pipe_tp_resume(struct pipe_run *r)
{
	const struct ckpt_state *st = r->cfg->resume;
	struct nn_optim *o = &r->opt[0];

	if ((o->m != NULL) != (st->m != NULL) ||
	    (o->v != NULL) != (st->v != NULL)) {
		r->kind = TRAIN_ERR_DATA;
		return cli_fail(r->err, r->errlen, "the checkpoint holds %d "
		    "optimizer moment(s), this run's optimizer keeps %d",
		    (st->m != NULL) + (st->v != NULL),
		    (o->m != NULL) + (o->v != NULL));
	}
	if (o->m != NULL)
		tp_stage_take(r->ts, r->m, st->m, o->m);
	if (o->v != NULL)
		tp_stage_take(r->ts, r->m, st->v, o->v);
	o->t = st->step;
	return 0;
}

int
pipe_tp_gather(struct pipe_run *r, float *const moments[2])
{
	struct tp_stage *ts = r->ts;
	const struct nn_optim *o = &r->opt[0];

	comm_set_step(r->cfg->tp, "gathering stage %d's shards", r->rank);
	if (tp_stage_gather(ts, ts->params, r->m, r->m->params) < 0 ||
	    (moments != NULL && o->m != NULL &&
	    tp_stage_gather(ts, o->m, r->m, moments[0]) < 0) ||
	    (moments != NULL && o->v != NULL &&
	    tp_stage_gather(ts, o->v, r->m, moments[1]) < 0))
		return tp_failed(r);
	return 0;
}
