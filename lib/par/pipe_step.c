/* pipe_step: one training step of a stage. Its action list from the
 * schedule runs in order: receives block (the schedule guarantees the
 * matching send comes first), sends are posted and complete while later
 * waits progress the transport. Then the tied embedding's gradient is
 * summed between the first and last stage, the loss goes to rank 0 and
 * every stage updates the parameters it holds. */
#include <string.h>

#include "cli/util.h"
#include "par/pipe.h"
#include "par/pipe_int.h"

/* The micro-batch's inputs and targets, from the step's batch. */
static int
fill_slot(struct pipe_run *r, struct pipe_slot *sl, int i)
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
acquire(struct pipe_run *r, int i)
{
	struct pipe_slot *sl = pipe_unit_acquire(r, (int)r->mcount[i]);

	if (sl == NULL)
		pipe_oom(r);
	return r->mslot[i] = sl;
}

/* The two gradient send buffers take the backwards in turn: micro-batch
 * i's backward writes the one whose send went two backwards ago, once
 * that is done (NULL on stage 0, which sends none, or when the wait
 * failed). */
static float *
take_grad_buffer(struct pipe_run *r, int i)
{
	int b = r->gturn;

	if (r->st.first)
		return NULL;
	r->gturn ^= 1;
	if (r->gmb[b] >= 0 && comm_wait(r->c, &r->sgrad[r->gmb[b]]) < 0)
		return NULL;
	r->gmb[b] = i;
	return r->st.g[2 + b];
}

/* The buffer holding micro-batch i's gradient, to send. */
static float *
grad_buffer(const struct pipe_run *r, int i)
{
	return r->st.g[2 + (r->gmb[1] == i)];
}

/* Runs one action; *loss gathers the last stage's loss sum. */
static int
act_run(struct pipe_run *r, const struct pipe_action *a, double *loss)
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
		if (comm_recv(r->c, a->peer, PIPE_TAG_ACT,
		    pipe_unit_input(r, sl), bin) < 0)
			return pipe_comm_failed(r);
		ps->recvd += bin;
		t1 = cli_now();
		ps->recv += t1 - t0;
		pipe_span(r, 'R', i, t0, t1);
		return 0;
	case PIPE_FWD:
		if (sl == NULL && (sl = acquire(r, i)) == NULL)
			return -1;
		if (fill_slot(r, sl, i) < 0)
			return -1;
		if ((r->mout[i] = pipe_unit_forward(r, sl, loss)) == NULL)
			return -1;
		if (comm_progress(r->c) < 0)
			return pipe_comm_failed(r);
		t1 = cli_now();
		ps->fwd += t1 - t0;
		pipe_span(r, 'F', i, t0, t1);
		return 0;
	case PIPE_SEND_ACT:
		if (comm_isend(r->c, a->peer, PIPE_TAG_ACT, r->mout[i], bout,
		    &r->sact[i]) < 0)
			return pipe_comm_failed(r);
		ps->sent += bout;
		break;
	case PIPE_RECV_GRAD:
		comm_set_step(r->c, "step %ld: gradient of micro-batch %d",
		    r->step, i);
		if (comm_recv(r->c, a->peer, PIPE_TAG_GRAD, st->g[0], bout) < 0)
			return pipe_comm_failed(r);
		ps->recvd += bout;
		t1 = cli_now();
		ps->recv += t1 - t0;
		pipe_span(r, 'R', i, t0, t1);
		return 0;
	case PIPE_BWD:
		if ((dx = take_grad_buffer(r, i)) == NULL && !st->first)
			return pipe_comm_failed(r);
		/* the next stage has answered, so the activation has gone
		 * (and a split backward may reuse its room) */
		if (comm_wait(r->c, &r->sact[i]) < 0)
			return pipe_comm_failed(r);
		t1 = cli_now();
		ps->send += t1 - t0;
		if (pipe_unit_backward(r, sl, st->g[0], dx) < 0)
			return -1;
		if (comm_progress(r->c) < 0)
			return pipe_comm_failed(r);
		t0 = cli_now();
		ps->bwd += t0 - t1;
		pipe_span(r, 'B', i, t1, t0);
		if (!st->split) {
			pipe_unit_release(r, sl);
			r->mslot[i] = NULL;
		}
		return 0;
	case PIPE_WGT:
		pipe_unit_weight(r, sl);
		if (comm_progress(r->c) < 0)
			return pipe_comm_failed(r);
		t1 = cli_now();
		ps->bwd += t1 - t0;
		/* a backward's second part: the trace draws it as backward */
		pipe_span(r, 'B', i, t0, t1);
		pipe_unit_release(r, sl);
		r->mslot[i] = NULL;
		return 0;
	case PIPE_SEND_GRAD:
		if (comm_isend(r->c, a->peer, PIPE_TAG_GRAD, grad_buffer(r, i),
		    bin, &r->sgrad[i]) < 0)
			return pipe_comm_failed(r);
		ps->sent += bin;
		break;
	}
	t1 = cli_now();
	ps->send += t1 - t0;
	pipe_span(r, 'S', i, t0, t1);
	return 0;
}

/* gpt: the token embedding's gradient summed between stage 0 (the
 * embedding) and the last stage (the head), as both hold the weight. */
static int
tied_sum(struct pipe_run *r)
{
	struct pipe_stage *st = &r->st;
	size_t cnt = (size_t)r->m->dims.vocab * r->m->dims.d_model;
	int peer = st->first ? r->world - 1 : 0;

	if (!st->gpt || r->world == 1 || (!st->first && !st->last))
		return 0;
	comm_set_step(r->c, "step %ld: tied embedding gradient", r->step);
	if (comm_sendrecv(r->c, peer, st->dwte, cnt * sizeof(float), peer,
	    r->tied, cnt * sizeof(float), PIPE_TAG_TIED) < 0)
		return pipe_comm_failed(r);
	nn_add(st->dwte, r->tied, cnt);
	return 0;
}

int
pipe_run_step(struct pipe_run *r, long k, struct train_step *s)
{
	const struct pipe_cfg *cfg = r->cfg;
	struct pipe_stat *ps = &r->stat[k];
	double t0 = cli_now(), loss = 0, ts, t1, t2;
	int q, j = r->rank;

	r->step = k;
	/* Every message of the step carries the step's operation number and
	 * this signature, so ranks out of step fail instead of mixing up. */
	comm_op_begin(r->c, PIPE_OPCODE, "pipeline step", DT_F32,
	    (uint64_t)cfg->micro << 40 ^ (uint64_t)cfg->sched << 32 ^
	    (uint64_t)cfg->batch);
	train_batch_fill(&r->tb, r->d, &r->ord, (int64_t)k * cfg->batch +
	    r->rstart, r->rcount);
	for (q = 0; q < r->nown; q++)
		memset(r->grads + r->own[q].off, 0, r->own[q].len * sizeof(float));
	memset(r->sact, 0, (size_t)cfg->micro * sizeof(*r->sact));
	memset(r->sgrad, 0, (size_t)cfg->micro * sizeof(*r->sgrad));
	pipe_tp_stat(r, ps, 1);
	ts = cli_now();
	r->gmb[0] = r->gmb[1] = -1;
	r->gturn = 0;
	for (q = 0; q < r->sch->nact[j]; q++)
		if (act_run(r, &r->sch->act[j][q], &loss) < 0)
			return -1;
	t1 = cli_now();
	comm_set_step(r->c, "step %ld: end of step", k);
	if (comm_waitall(r->c, r->sact, cfg->micro) < 0 ||
	    comm_waitall(r->c, r->sgrad, cfg->micro) < 0)
		return pipe_comm_failed(r);
	t2 = cli_now();
	pipe_tp_stat(r, ps, 0);
	ps->send += t2 - t1;
	pipe_span(r, 'S', -1, t1, t2);
	/* the schedule's span: what the bubble is a share of */
	ps->sched = t2 - ts;
	if (tied_sum(r) < 0)
		return -1;
	if (r->world > 1 && (j == 0 || j == r->world - 1)) {
		comm_set_step(r->c, "step %ld: loss", k);
		if ((j == 0 ? comm_recv(r->c, r->world - 1, PIPE_TAG_LOSS,
		    &loss, sizeof(loss)) : comm_send(r->c, 0, PIPE_TAG_LOSS,
		    &loss, sizeof(loss))) < 0)
			return pipe_comm_failed(r);
	}
	if (pipe_dp_sync(r, &loss) < 0)
		return -1;
	for (q = 0; q < r->nown; q++)
		nn_optim_step(&r->opt[q], r->params + r->own[q].off,
		    r->grads + r->own[q].off, pipe_slow_scale(r));
	if (pipe_slow_outer(r) < 0)
		return -1;
	ps->wall = cli_now() - t0;
	ps->peak_act = r->st.peak;
	s->step = k;
	s->epoch = (long)((int64_t)k * cfg->batch / r->d->n);
	s->tokens = train_tokens(r->d, cfg->batch);
	s->loss = loss / (double)cfg->batch;
	s->seconds = ps->wall;
	s->compute = ps->fwd + ps->bwd - ps->tp;
	s->comm = s->seconds - s->compute;
	return 0;
}
