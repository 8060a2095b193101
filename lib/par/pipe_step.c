/* pipe_step: one training step of a stage. Its action list from the
 * schedule runs in order: receives block (the schedule guarantees the
 * matching send comes first), sends are posted and complete while later
 * waits progress the transport. Then the tied embedding's gradient is
 * summed between the first and last stage, the loss goes to rank 0 and
 * every stage updates the parameters it holds. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/util.h"
#include "par/cp_stage.h"
#include "par/pipe.h"
#include "par/pipe_int.h"

/* A stage's receives within the schedule wait for a pass or two of its
 * neighbour's. Asleep in poll() such a wait took 80-130 us to wake and
 * its sender 40-75 us to ring the bell (64 KiB over shared memory, a
 * core per rank; 5 us spinning), on every message of the critical path:
 * so a stage spins through twice its longest receive of the steps before
 * (the first activation of a step waits for the upstream's optimizer
 * too, which step 0 had not), but PIPE_SPIN_MAX_US at most: a wait
 * longer than that pays a wake-up of a tenth of it or less asleep, while
 * spinning through it burnt the core a rank beside it could use (a
 * loaded host's slow waits had raised the spin to 50 ms: 9% more CPU
 * time per launch). A spinning wait also sees a dead peer only when it
 * stops. */
#define PIPE_SPIN_MAX_US 1000

/* A receive whose wait in the step before was longer than the spin (the
 * first stage's wait for the last's first gradient, the next stage's for
 * the first activation of a step: 2-3 ms at 1.5 ms a forward) sleeps
 * through it but PIPE_NAP_EARLY_US, on a timer, not on the doorbell:
 * spinning the rest, the message finds it awake (a wake from poll cost
 * 80-130 us and the sender's bell 40-75 us, both on the critical path).
 * It looks in every PIPE_NAP_SLICE_US, so a message sooner than the
 * step before's is seen within that, and sends keep moving. */
#define PIPE_NAP_EARLY_US 500
#define PIPE_NAP_SLICE_US 250

/* The spin for step k's schedule (0: the group's own). */
static int
step_spin(const struct pipe_run *r, long k)
{
	double us;

	if (k == 0)
		return 0;
	us = 2 * r->stat[k - 1].recv_max * 1e6;
	return us < PIPE_SPIN_MAX_US ? (int)us : PIPE_SPIN_MAX_US;
}

/* Sets the spin of the step's groups; a group not spinning at all
 * (COLLX_SPIN_US=0) keeps to that. */
static void
set_spin(struct pipe_run *r, int us)
{
	if (us <= 0 || comm_spin(r->c) == 0)
		return;
	comm_set_spin(r->c, us);
	if (r->gc != NULL)
		comm_set_spin(r->gc, us);
}

/* The rows (row floats each) of the step's micro-batch starting at s0,
 * n of them, in the data base: read where they lie when they are in
 * order and do not wrap round the data's end, else copied into
 * the batch's room at s0. A stage reads only its side (the first stage
 * the inputs, the last the targets), and no copy of a whole batch stands
 * before the first forward. */
static const float *
batch_rows(struct pipe_run *r, const float *base, float *room, size_t row,
    long s0, long n)
{
	int64_t g = (int64_t)r->step * r->cfg->batch + r->rstart + s0;
	int64_t i0 = train_order_index(&r->ord, g);

	if (!r->ord.shuffle && i0 + n <= r->d->n)
		return base + (size_t)i0 * row;
	for (long k = 0; k < n; k++)
		memcpy(room + (size_t)(s0 + k) * row, base + (size_t)
		    train_order_index(&r->ord, g + k) * row, row *
		    sizeof(float));
	return room + (size_t)s0 * row;
}

/* The micro-batch's inputs and targets, from the step's batch, as the
 * stage st (the rank's chunk) needs them. */
static int
fill_slot(struct pipe_run *r, const struct tp_stage *st,
    struct pipe_slot *sl, int i)
{
	const struct train_data *d = r->d;
	long s0 = r->mstart[i];
	int S = st->gseq, L = st->seq;	/* L: this rank's positions */

	if (!st->gpt) {
		if (st->first)
			sl->inp = batch_rows(r, d->x, r->tb.x, d->xrow, s0,
			    sl->n);
		if (st->last)
			sl->y = batch_rows(r, d->y, r->tb.y, d->yrow, s0,
			    sl->n);
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
		cp_stage_tokens(st, sl->tok + (size_t)k * L, w);
		cp_stage_tokens(st, sl->tok + (size_t)(sl->n + k) * L, w + 1);
	}
	return 0;
}

/* The group a gradient travels in: its own under interleaving. */
static struct comm *
grad_comm(const struct pipe_run *r)
{
	return r->gc != NULL ? r->gc : r->c;
}

static int
grad_failed(struct pipe_run *r)
{
	struct comm *c = r->c;
	int rc;

	r->c = grad_comm(r);	/* whose error to report */
	rc = pipe_comm_failed(r);
	r->c = c;
	return rc;
}

static struct pipe_slot *
acquire(struct pipe_run *r, int c, int i)
{
	struct pipe_slot *sl = pipe_unit_acquire(r, c, (int)r->mcount[i]);

	if (sl == NULL)
		pipe_oom(r);
	return r->mslot[c * r->cfg->micro + i] = sl;
}

/* The two gradient send buffers of chunk c take its backwards in turn:
 * micro-batch i's backward writes the one whose send went two backwards
 * ago, once that is done (NULL on virtual stage 0, which sends none, or
 * when the wait failed). */
static float *
take_grad_buffer(struct pipe_run *r, int c, int i)
{
	struct tp_stage *st = pipe_chunk(r, c);
	int *g = r->gmb[c], b = g[2], M = r->cfg->micro;

	if (st->first)
		return NULL;
	g[2] ^= 1;
	if (g[b] >= 0 && comm_wait(grad_comm(r), &r->sgrad[c * M + g[b]]) < 0)
		return NULL;
	g[b] = i;
	return st->gb[2 + b];
}

/* The buffer holding micro-batch i's gradient of chunk c, to send. */
static float *
grad_buffer(struct pipe_run *r, int c, int i)
{
	return pipe_chunk(r, c)->gb[2 + (r->gmb[c][1] == i)];
}

/* A span of chunk c's pass on micro-batch i (chunk -1 in the trace but
 * for interleaved runs). */
static void
span(struct pipe_run *r, char kind, int c, int i, double t0, double t1)
{
	size_t n = r->nspans;

	pipe_span(r, kind, i, t0, t1);
	if (r->nspans > n)
		r->spans[n].chunk = r->nchunk > 1 ? c : -1;
}

/* The nap of a receive posted at t0 (rq) that waited *last in the step
 * before; 0 or -1 (the transport failed). */
static int
nap(struct comm *c, struct comm_req *rq, double t0, double last)
{
	double end = t0 + last - PIPE_NAP_EARLY_US * 1e-6, left;

	if (last * 1e6 <= PIPE_SPIN_MAX_US)
		return 0;
	while ((left = end - cli_now()) > 0 && rq->state == COMM_REQ_ACTIVE) {
		if (left > PIPE_NAP_SLICE_US * 1e-6)
			left = PIPE_NAP_SLICE_US * 1e-6;
		nanosleep(&(struct timespec){ 0, (long)(left * 1e9) }, NULL);
		if (comm_progress(c) < 0)
			return -1;
	}
	return 0;
}

/* Receives an activation or a gradient; its time and bytes. */
static int
recv_msg(struct pipe_run *r, const struct pipe_action *a, void *buf,
    size_t len)
{
	struct pipe_stat *ps = &r->stat[r->step];
	int grad = a->op == PIPE_RECV_GRAD;
	struct comm *c = grad ? grad_comm(r) : r->c;
	double *last = &r->rwait[a - r->sch->act[r->rank]];
	double t0 = cli_now(), t1;
	struct comm_req rq;

	comm_set_step(c, "step %ld: %s of micro-batch %d", r->step, grad ?
	    "gradient" : "activation", a->mb);
	if (comm_irecv(c, a->peer, grad ? PIPE_TAG_GRAD : PIPE_TAG_ACT, buf,
	    len, &rq) < 0 || nap(c, &rq, t0, *last) < 0 ||
	    comm_wait(c, &rq) < 0)
		return grad ? grad_failed(r) : pipe_comm_failed(r);
	ps->recvd += len;
	t1 = cli_now();
	*last = t1 - t0;
	ps->recv += t1 - t0;
	if (t1 - t0 > ps->recv_max)
		ps->recv_max = t1 - t0;
	span(r, 'R', a->chunk, a->mb, t0, t1);
	return 0;
}

/* The backward of micro-batch i on chunk c, or its input part. */
static int
backward(struct pipe_run *r, int c, int i)
{
	struct tp_stage *st = pipe_chunk(r, c);
	struct pipe_stat *ps = &r->stat[r->step];
	int k = c * r->cfg->micro + i;
	double t0 = cli_now(), t1;
	float *dx;

	if ((dx = take_grad_buffer(r, c, i)) == NULL && !st->first)
		return grad_failed(r);
	/* the next stage has answered, so the activation has gone (and a
	 * split backward may reuse its room) */
	if (comm_wait(r->c, &r->sact[k]) < 0)
		return pipe_comm_failed(r);
	t1 = cli_now();
	ps->send += t1 - t0;
	if (pipe_unit_backward(r, c, r->mslot[k], st->gb[0], dx) < 0)
		return -1;
	pipe_dp_fsdp_settle(r);		/* ZeRO-3's gathers off the links */
	if (comm_progress(r->c) < 0)
		return pipe_comm_failed(r);
	t0 = cli_now();
	ps->bwd += t0 - t1;
	span(r, 'B', c, i, t1, t0);
	if (st->early)
		r->late[c] = i;
	else if (!st->split) {
		pipe_unit_release(r, c, r->mslot[k]);
		r->mslot[k] = NULL;
	}
	return 0;
}

/* The weight part of micro-batch i on chunk c, whose input part has
 * run: a split schedule's W<i>, or an early stage's after its
 * gradient's send. */
static int
weight(struct pipe_run *r, int c, int i)
{
	struct pipe_stat *ps = &r->stat[r->step];
	int k = c * r->cfg->micro + i;
	double t0 = cli_now(), t1;

	pipe_unit_weight(r, c, r->mslot[k]);
	if (comm_progress(r->c) < 0)
		return pipe_comm_failed(r);
	t1 = cli_now();
	ps->bwd += t1 - t0;
	/* a split backward's weight part: W<i> in the trace */
	span(r, 'W', c, i, t0, t1);
	pipe_unit_release(r, c, r->mslot[k]);
	r->mslot[k] = NULL;
	return 0;
}

/* Runs one action; *loss gathers the last stage's loss sum. */
static int
act_run(struct pipe_run *r, const struct pipe_action *a, double *loss)
{
	int c = a->chunk, i = a->mb, k = c * r->cfg->micro + i;
	struct tp_stage *st = pipe_chunk(r, c);
	struct pipe_stat *ps = &r->stat[r->step];
	size_t n = (size_t)r->mcount[i];
	/* bytes of an activation into and out of the stage (gradients back) */
	size_t bin = n * st->in_w * sizeof(float);
	size_t bout = n * st->out_w * sizeof(float);
	struct pipe_slot *sl = r->mslot[k];
	double t0 = cli_now(), t1;

	switch (a->op) {
	case PIPE_RECV_ACT:
		if ((sl = acquire(r, c, i)) == NULL)
			return -1;
		return recv_msg(r, a, pipe_unit_input(r, c, sl), bin);
	case PIPE_FWD:
		if (sl == NULL && (sl = acquire(r, c, i)) == NULL)
			return -1;
		if (fill_slot(r, st, sl, i) < 0)
			return -1;
		if ((r->mout[k] = pipe_unit_forward(r, c, sl, loss)) == NULL)
			return -1;
		pipe_dp_fsdp_settle(r);	/* ZeRO-3's gathers off the links */
		if (comm_progress(r->c) < 0)
			return pipe_comm_failed(r);
		t1 = cli_now();
		ps->fwd += t1 - t0;
		span(r, 'F', c, i, t0, t1);
		return 0;
	case PIPE_SEND_ACT:
		if (comm_isend(r->c, a->peer, PIPE_TAG_ACT, r->mout[k], bout,
		    &r->sact[k]) < 0)
			return pipe_comm_failed(r);
		ps->sent += bout;
		break;
	case PIPE_RECV_GRAD:
		return recv_msg(r, a, st->gb[0], bout);
	case PIPE_BWD:
		if (pipe_moe_aux(r, c) < 0)
			return -1;
		return backward(r, c, i);
	case PIPE_WGT:
		return weight(r, c, i);
	case PIPE_SEND_GRAD:
		if (comm_isend(grad_comm(r), a->peer, PIPE_TAG_GRAD,
		    grad_buffer(r, c, i), bin, &r->sgrad[k]) < 0)
			return grad_failed(r);
		ps->sent += bin;
		break;
	}
	t1 = cli_now();
	ps->send += t1 - t0;
	span(r, 'S', c, i, t0, t1);
	/* every backward of a stage that sends is followed by its send */
	if (a->op == PIPE_SEND_GRAD && r->late != NULL && r->late[c] == i) {
		r->late[c] = -1;
		return weight(r, c, i);
	}
	return 0;
}

/*
 * An auxiliary loss under a schedule whose first backward comes before
 * the step's last forward: its f_e are the whole batch's routing, so the
 * schedule's forwards (its receives, forwards and sends, in its order)
 * run once first, to count the experts' assignments, and the slots go:
 * each as soon as its activation has (one stage per rank), or at the end
 * (interleaved, where waiting on a send could close a cycle of stages).
 */
static int
aux_pass(struct pipe_run *r)
{
	int j = r->rank, M = r->cfg->micro, nreq = M * r->nchunk, k;
	double loss = 0;	/* the schedule's forwards sum it */

	if (!pipe_moe_aux_early(r))
		return 0;
	for (int q = 0; q < r->sch->nact[j]; q++) {
		const struct pipe_action *a = &r->sch->act[j][q];
		int send = a->op == PIPE_SEND_ACT;

		if (a->op != PIPE_RECV_ACT && a->op != PIPE_FWD && !send)
			continue;
		if (act_run(r, a, &loss) < 0)
			return -1;
		k = a->chunk * M + a->mb;
		if (r->nchunk > 1 || (!send && (a->op != PIPE_FWD ||
		    !pipe_chunk(r, a->chunk)->last)))
			continue;
		if (send && comm_wait(r->c, &r->sact[k]) < 0)
			return pipe_comm_failed(r);
		pipe_unit_release(r, a->chunk, r->mslot[k]);
		r->mslot[k] = NULL;
	}
	if (comm_waitall(r->c, r->sact, nreq) < 0)
		return pipe_comm_failed(r);
	for (k = 0; k < nreq; k++)
		if (r->mslot[k] != NULL) {
			pipe_unit_release(r, k / M, r->mslot[k]);
			r->mslot[k] = NULL;
		}
	memset(r->sact, 0, (size_t)nreq * sizeof(*r->sact));
	return pipe_moe_aux_counted(r);
}

/* gpt: the token embedding's gradient summed between virtual stage 0
 * (the embedding) and the last (the head), as both hold the weight: over
 * the pipeline group, or on a rank holding both (one stage, interleaved). */
static int
tied_sum(struct pipe_run *r)
{
	const struct tp_stage *a = &r->ts[0], *b = &r->ts[r->nchunk - 1];
	size_t cnt = (size_t)r->m->dims.vocab * r->m->dims.d_model;
	int peer = r->rank == 0 ? r->world - 1 : 0;

	if (!a->gpt || (r->rank != 0 && r->rank != r->world - 1))
		return 0;
	if (r->world == 1) {
		if (r->nchunk > 1) {
			nn_add(a->dwte, b->dwte, cnt);
			memcpy(b->dwte, a->dwte, cnt * sizeof(float));
		}
		return 0;
	}
	/* the first virtual stage is rank 0's, the last rank world-1's */
	comm_set_step(r->c, "step %ld: tied embedding gradient", r->step);
	if (comm_sendrecv(r->c, peer, r->rank == 0 ? a->dwte : b->dwte,
	    cnt * sizeof(float), peer, r->tied, cnt * sizeof(float),
	    PIPE_TAG_TIED) < 0)
		return pipe_comm_failed(r);
	nn_add(r->rank == 0 ? a->dwte : b->dwte, r->tied, cnt);
	return 0;
}

/* Whether the gradients are zeroed before action a, when it is the
 * step's first receive or gradient pass: in a wait, the bubble, on every
 * stage (the first's for the pipeline to turn round, within its
 * schedule's span; the others' for their first activation, before it as
 * before) rather than on the first stage's critical path at the start
 * of the step. */
static int
zero_before(const struct pipe_action *a)
{
	return a->op == PIPE_RECV_ACT || a->op == PIPE_RECV_GRAD ||
	    a->op == PIPE_BWD || a->op == PIPE_WGT;
}

/* The step's gradient sums set to zero (ZeRO-3 gives each unit's back
 * zero, and so do the sums running on into this step:
 * pipe_dp_sync_post); 1. */
static int
zero_grads(struct pipe_run *r)
{
	for (int q = 0; q < r->nown && (r->zero == NULL ||
	    r->zero->fsdp == NULL) && !pipe_dp_sync_pending(r); q++)
		memset(r->grads + r->own[q].off, 0, r->own[q].len *
		    sizeof(float));
	return 1;
}

int
pipe_early_init(struct pipe_run *r)
{
	int c, any = 0;

	if (pipe_replicas(r) != NULL || r->zero != NULL || r->sync != NULL ||
	    r->cfg->ft != NULL)
		return 0;
	for (c = 0; c < r->nchunk; c++)
		any |= tp_stage_early(pipe_chunk(r, c));
	if (!any)
		return 0;
	if ((r->late = malloc((size_t)r->nchunk * sizeof(int))) == NULL)
		return pipe_oom(r);
	for (c = 0; c < r->nchunk; c++)
		r->late[c] = -1;
	return 0;
}

int
pipe_run_step(struct pipe_run *r, long k, struct train_step *s)
{
	const struct pipe_cfg *cfg = r->cfg;
	struct pipe_stat *ps = &r->stat[k];
	double t0 = cli_now(), loss = 0, ts, t1, t2;
	int q, j = r->rank, nreq = cfg->micro * r->nchunk, zeroed = 0;
	int spin = comm_spin(r->c), want = step_spin(r, k);

	if (r->rwait == NULL && (r->rwait = calloc((size_t)r->sch->nact[j],
	    sizeof(double))) == NULL)
		return pipe_oom(r);
	r->step = k;
	r->ft_synced = 0;
	/* a step run again after a recovery (--ft) counts this run only */
	*ps = (struct pipe_stat){ .recv_max = k > 0 ?
	    r->stat[k - 1].recv_max : 0 };
	/* Every message of the step carries the step's operation number and
	 * this signature, so ranks out of step fail instead of mixing up. */
	comm_op_begin(r->c, PIPE_OPCODE, "pipeline step", DT_F32,
	    (uint64_t)cfg->micro << 40 ^ (uint64_t)cfg->sched << 32 ^
	    (uint64_t)cfg->batch);
	if (r->gc != NULL)
		comm_op_begin(r->gc, PIPE_OPCODE, "pipeline step's gradients",
		    DT_F32, (uint64_t)cfg->micro << 40 ^ (uint64_t)r->nchunk <<
		    32 ^ (uint64_t)cfg->batch);
	if (r->d->arch == NN_GPT)	/* mlp, block: batch_rows */
		train_batch_fill(&r->tb, r->d, &r->ord, (int64_t)k *
		    cfg->batch + r->rstart, r->rcount);
	memset(r->sact, 0, (size_t)nreq * sizeof(*r->sact));
	memset(r->sgrad, 0, (size_t)nreq * sizeof(*r->sgrad));
	pipe_moe_begin(r);
	pipe_tp_stat(r, ps, 1);
	if (want > spin)
		set_spin(r, want);
	if (r->sch->nact[j] > 0 && zero_before(&r->sch->act[j][0]))
		zeroed = zero_grads(r);
	ts = cli_now();
	for (q = 0; q < r->nchunk; q++) {
		r->gmb[q][0] = r->gmb[q][1] = -1;
		r->gmb[q][2] = 0;
	}
	pipe_dp_fsdp_begin(r);
	if (aux_pass(r) < 0)
		return -1;
	for (q = 0; q < r->sch->nact[j]; q++) {
		if (!zeroed && zero_before(&r->sch->act[j][q]))
			zeroed = zero_grads(r);
		if (act_run(r, &r->sch->act[j][q], &loss) < 0)
			return -1;
	}
	if (!zeroed)
		zero_grads(r);
	t1 = cli_now();
	comm_set_step(r->c, "step %ld: end of step", k);
	if (comm_waitall(r->c, r->sact, nreq) < 0)
		return pipe_comm_failed(r);
	if (comm_waitall(grad_comm(r), r->sgrad, nreq) < 0)
		return grad_failed(r);
	t2 = cli_now();
	if (want > spin)
		set_spin(r, spin);
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
	if (pipe_moe_aux_sum(r, &loss) < 0)
		return -1;
	if (pipe_dp_sync(r, &loss) < 0 || pipe_ft_commit(r, loss, t0) < 0)
		return -1;
	return pipe_step_finish(r, k, s, loss, t0);
}

int
pipe_step_finish(struct pipe_run *r, long k, struct train_step *s,
    double loss, double t0)
{
	const struct pipe_cfg *cfg = r->cfg;
	struct pipe_stat *ps = &r->stat[k];

	if (pipe_dp_update(r) < 0 || pipe_moe_end(r, s) < 0)
		return -1;
	ps->wall = cli_now() - t0;
	ps->peak_act = r->peak;
	s->step = k;
	s->epoch = (long)((int64_t)k * cfg->batch / r->d->n);
	s->tokens = train_tokens(r->d, cfg->batch);
	s->loss = loss / (double)cfg->batch;
	s->seconds = ps->wall;
	s->compute = ps->fwd + ps->bwd - ps->tp;
	s->comm = s->seconds - s->compute;
	return 0;
}
