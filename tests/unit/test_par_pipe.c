/* test_par_pipe: pipeline parallelism in seconds. The action tables of
 * GPipe and 1F1B run in a simulation of their own (each stage walks its
 * list; a receive waits for its send; forward 1, backward 2 time units,
 * messages free): every micro-batch's forward and backward happen exactly
 * once per stage, each after the pass it depends on, and every stage idles
 * (W-1)/(M+W-1) of the time, in exact integers. The split of layers into
 * stages against hand-derived cases. Training over 2 and 3 forked ranks
 * (an mlp stack; a gpt, whose tied embedding lies on the first and last
 * stage) against one process running nn's full-batch step, and the
 * checkpoint's optimizer moments against the same process's. The measured
 * bubble is the idle share of each stage's schedule, as its trace shows.
 * The trace's clock: stages that left the opening barrier tens of
 * milliseconds apart have their spans gathered onto rank 0's clock, to
 * within a few hundred microseconds (the ranks, forked on one host, share
 * the clock that says where they should land), and the offset is
 * interpolated between its two samples in closed form. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/coll.h"
#include "par/pipe.h"
#include "par/pipe_int.h"
#include "par/tp_stage.h"
#include "par_world.h"
#include "unit.h"

/* ---- action tables, simulated ------------------------------------------ */

/* time units of a forward, a backward, and of a split backward's weight
 * part (its input part TB - TW) */
enum { TF = 1, TB = 2, TW = 1 };

/* Passes of micro-batch i on stage j at [j*m + i], forwards in [0],
 * backwards in [1]. */
struct sim {
	int m, w;
	int *t0[2], *t1[2];	/* start and end */
	int *n[2];		/* passes seen */
	int end;		/* when the last stage finishes */
	int *busy;		/* [j] */
};

/* Message queues: per (from, to, gradient?) the times sends were made,
 * and how many were received. */
struct q {
	int t[256], sent, got;
};

/* Runs the lists; 0, or -1 when some stage cannot go on (a receive whose
 * send never comes). */
static int
simulate(const struct pipe_sched *s, struct sim *x)
{
	const int dur[2] = { TF, s->split ? TB - TW : TB };
	int w = s->w, m = s->m, moved = 1, j;
	int *pc = calloc((size_t)w, sizeof(int));
	int *now = calloc((size_t)w, sizeof(int));
	struct q *q = calloc((size_t)w * w * 2, sizeof(*q));

	while (moved) {
		moved = 0;
		for (j = 0; j < w; j++) {
			const struct pipe_action *a;
			struct q *mq;
			int k, b;

			if (pc[j] == s->nact[j])
				continue;
			a = &s->act[j][pc[j]];
			k = a->mb;
			switch (a->op) {
			case PIPE_SEND_ACT:
			case PIPE_SEND_GRAD:
				mq = &q[(j * w + a->peer) * 2 +
				    (a->op == PIPE_SEND_GRAD)];
				mq->t[mq->sent++ % 256] = now[j];
				break;
			case PIPE_RECV_ACT:
			case PIPE_RECV_GRAD:
				mq = &q[(a->peer * w + j) * 2 +
				    (a->op == PIPE_RECV_GRAD)];
				if (mq->got == mq->sent)
					continue;	/* not sent yet */
				if (mq->t[mq->got % 256] > now[j])
					now[j] = mq->t[mq->got % 256];
				mq->got++;
				break;
			case PIPE_FWD:
			case PIPE_BWD:
				b = a->op == PIPE_BWD;
				x->n[b][j * m + k]++;
				x->t0[b][j * m + k] = now[j];
				now[j] += dur[b];
				x->t1[b][j * m + k] = now[j];
				x->busy[j] += dur[b];
				break;
			case PIPE_WGT:
				/* after its own B on this stage */
				if (x->n[1][j * m + k] != 1)
					return -1;
				now[j] += TW;
				x->busy[j] += TW;
				break;
			}
			pc[j]++;
			moved = 1;
		}
	}
	x->end = 0;
	for (j = 0; j < w; j++) {
		moved |= pc[j] != s->nact[j];
		if (now[j] > x->end)
			x->end = now[j];
	}
	free(pc), free(now), free(q);
	return moved ? -1 : 0;
}

static void
table(enum pipe_sched_kind kind, int m, int w, int *once, int *deps,
    int *bubble)
{
	struct pipe_sched s;
	struct sim x = { .m = m, .w = w };
	size_t n = (size_t)m * w;
	char e[256];
	int j, i;

	if (pipe_sched_build(&s, kind, m, w, e, sizeof e) < 0) {
		*once = *deps = *bubble = 0;
		return;
	}
	for (i = 0; i < 2; i++) {
		x.t0[i] = calloc(n, sizeof(int));
		x.t1[i] = calloc(n, sizeof(int));
		x.n[i] = calloc(n, sizeof(int));
	}
	x.busy = calloc((size_t)w, sizeof(int));
	if (simulate(&s, &x) < 0)
		*once = *deps = *bubble = 0;
	for (j = 0; j < w; j++) {
		for (i = 0; i < m; i++) {
			int k = j * m + i;

			*once &= x.n[0][k] == 1 && x.n[1][k] == 1;
			/* forward after the previous stage's, backward after
			 * the next stage's (the last stage: its own forward) */
			*deps &= j == 0 || x.t0[0][k] >= x.t1[0][k - m];
			*deps &= x.t0[1][k] >= (j == w - 1 ? x.t1[0][k] :
			    x.t1[1][k + m]);
		}
		/* idle / step = (W-1)/(M+W-1): the step takes (M+W-1)
		 * forward-backward pairs, each stage is busy for M */
		*bubble &= x.end == (m + w - 1) * (TF + TB) &&
		    (long)(x.end - x.busy[j]) * (m + w - 1) ==
		    (long)(w - 1) * x.end;
	}
	for (i = 0; i < 2; i++)
		free(x.t0[i]), free(x.t1[i]), free(x.n[i]);
	free(x.busy);
	pipe_sched_free(&s);
}

static void
tables(void)
{
	for (int kind = PIPE_SCHED_GPIPE; kind <= PIPE_SCHED_1F1B; kind++) {
		int once = 1, deps = 1, bubble = 1;
		char what[160];
		const char *name = pipe_sched_name(kind);

		for (int w = 1; w <= 5; w++)
			for (int m = 1; m <= 12; m++)
				table(kind, m, w, &once, &deps, &bubble);
		table(kind, 32, 4, &once, &deps, &bubble);
		snprintf(what, sizeof what, "%s tables, M 1..12 and 32, W "
		    "1..5: every micro-batch's forward and backward once per "
		    "stage", name);
		UNIT_OK(once, what);
		snprintf(what, sizeof what, "%s tables: each pass after the "
		    "one it depends on", name);
		UNIT_OK(deps, what);
		snprintf(what, sizeof what, "%s tables, simulated with "
		    "backward = 2 forward: each stage idle (W-1)/(M+W-1)",
		    name);
		UNIT_OK(bubble, what);
	}
}

/* ZB-H1 with unit passes (F = B = W = 1, B + W being 1F1B's backward):
 * every stage busy 3M, the step 3M + W - 1 units for M >= W (ZB-H1's
 * published (W-1)(F+B-W) idle per stage), 2M + 2W - 1 below (the last
 * stage's F, B chain and the way back); the bubble as pipe_sched_bubble
 * says, in exact integers. */
static void
zb_tables(void)
{
	int ok = 1, once = 1, formula = 1;

	for (int w = 1; w <= 6; w++)
		for (int m = 1; m <= 14; m++) {
			struct pipe_sched s;
			size_t n = (size_t)m * w;
			struct sim x = { .m = m, .w = w };
			char e[256];
			int want = m >= w ? 3 * m + w - 1 : 2 * m + 2 * w - 1;

			if (pipe_sched_build(&s, PIPE_SCHED_ZBH1, m, w, e,
			    sizeof e) < 0) {
				ok = 0;
				continue;
			}
			for (int i = 0; i < 2; i++) {
				x.t0[i] = calloc(n, sizeof(int));
				x.t1[i] = calloc(n, sizeof(int));
				x.n[i] = calloc(n, sizeof(int));
			}
			x.busy = calloc((size_t)w, sizeof(int));
			ok &= simulate(&s, &x) == 0 && x.end == want;
			for (int j = 0; j < w; j++) {
				ok &= x.busy[j] == 3 * m;
				for (int i = 0; i < m; i++)
					once &= x.n[0][j * m + i] == 1 &&
					    x.n[1][j * m + i] == 1;
			}
			formula &= fabs(pipe_sched_bubble(PIPE_SCHED_ZBH1, m, w,
			    1) -
			    (double)(x.end - 3 * m) / x.end) < 1e-12;
			for (int i = 0; i < 2; i++)
				free(x.t0[i]), free(x.t1[i]), free(x.n[i]);
			free(x.busy);
			pipe_sched_free(&s);
		}
	UNIT_OK(once, "zb-h1 tables, M 1..14, W 1..6: every forward and "
	    "backward once per stage, each weight part after its B");
	UNIT_OK(ok, "zb-h1 tables, unit passes: each stage busy 3M, the step "
	    "3M+W-1 (M >= W), 2M+2W-1 (M < W)");
	UNIT_OK(formula, "zb-h1: pipe_sched_bubble is the simulated idle share");
}

/* ---- the split of layers ------------------------------------------------ */

/* An mlp stack 8 -> 4 -> 4, then 4 -> 4 -> 4 three times: layers of 56,
 * 40, 40 and 40 parameters. */
static const struct nn_dims mlp4 = { .arch = NN_MLP, .d_in = 8,
	.d_hidden = 4, .d_out = 4, .layers = 4 };

static void
splits(void)
{
	/* balanced: running counts 56 96 136 176; W=2 wants 88, nearest
	 * 96 (2 layers); W=3 wants 58.7 and 117.3: 56 (1), 136 (3) */
	static const struct {
		int w;
		const char *split;
		int first[5];
		const char *err;
	} c[] = {
		{ 1, NULL, { 0, 4 }, NULL },
		{ 2, NULL, { 0, 2, 4 }, NULL },
		{ 3, NULL, { 0, 1, 3, 4 }, NULL },
		{ 4, NULL, { 0, 1, 2, 3, 4 }, NULL },
		{ 2, "1,3", { 0, 1, 4 }, NULL },
		{ 3, "2,1,1", { 0, 2, 3, 4 }, NULL },
		{ 5, NULL, { 0 }, "5 stages for 4 layers" },
		{ 2, "2,1", { 0 }, "covers 3 layers, the model has 4" },
		{ 2, "0,4", { 0 }, "want 2 positive layer counts" },
		{ 2, "1,1,2", { 0 }, "want 2 positive layer counts" },
		{ 2, "2,", { 0 }, "want 2 positive layer counts" },
	};
	struct nn_model m;
	char e[256], what[160];

	if (!UNIT_OK(par_model(&m, &mlp4, 5) == 0, "mlp stack loads"))
		return;
	for (size_t k = 0; k < sizeof c / sizeof c[0]; k++) {
		int first[6] = { 0 }, rc;

		e[0] = '\0';
		rc = pipe_split(&m, c[k].w, c[k].split, first, e, sizeof e);
		if (c[k].err == NULL) {
			snprintf(what, sizeof what, "%d stages, split %s: "
			    "layers from %d %d %d %d %d", c[k].w, c[k].split ?
			    c[k].split : "by parameters", c[k].first[0],
			    c[k].first[1], c[k].first[2], c[k].first[3],
			    c[k].first[4]);
			UNIT_OK(rc == 0 && memcmp(first, c[k].first,
			    ((size_t)c[k].w + 1) * sizeof(int)) == 0, what);
		} else {
			snprintf(what, sizeof what, "%d stages, split %s: "
			    "refused (%s)", c[k].w, c[k].split ? c[k].split :
			    "by parameters", e);
			UNIT_OK(rc < 0 && strstr(e, c[k].err) != NULL, what);
		}
	}
	nn_model_free(&m);
}

/* ---- the split backward's parts ---------------------------------------- */

/* A middle mlp stage (layers 1 and 2 of mlp4, on stage 1 of 3) run whole
 * and split on the same micro-batch of 2: the split's B adds no weight
 * gradient (it runs only the input gradients, so B and W cost two matrix
 * products each per layer, as F does: with W the cheaper, ZB-H1's W
 * passes cannot fill the slots it leaves them), and B then W give the
 * whole backward's input gradient and weight gradients, bit for bit. */
static void
split_parts(void)
{
	struct nn_model m;
	struct tp_stage st[2];
	struct pipe_slot *sl;
	float dx[2][2 * 4];
	double loss = 0;
	char e[256];
	int sp = 0, ok, b_adds = 0;

	ok = par_model(&m, &mlp4, 5) == 0;
	for (; ok && sp < 2; sp++) {
		if (tp_stage_init(&st[sp], &m, NULL, 1, 3, 1, 3, 1, 2, 1, sp, e,
		    sizeof e) < 0) {
			ok = 0;
			break;
		}
		if ((sl = tp_stage_acquire(&st[sp], 2)) == NULL) {
			ok = 0;
			sp++;
			break;
		}
		tp_stage_zero_grad(&st[sp]);
		for (int i = 0; i < 2 * 4; i++) {
			tp_stage_input(&st[sp], sl)[i] = (float)(i % 5 - 2) / 4;
			st[sp].gb[0][i] = (float)(i % 3 - 1) / 2;
		}
		ok &= tp_stage_forward(&st[sp], sl, &loss) != NULL;
		ok &= tp_stage_backward(&st[sp], sl, st[sp].gb[0], dx[sp]) == 0;
		for (size_t k = 0; sp && k < st[sp].nlocal; k++)
			b_adds |= st[sp].grads[k] != 0;
		if (sp)
			tp_stage_weight(&st[sp], sl);
	}
	UNIT_OK(ok && !b_adds, "split mlp stage: B adds no weight gradient");
	UNIT_OK(ok && memcmp(dx[0], dx[1], sizeof dx[0]) == 0 &&
	    st[0].nlocal == st[1].nlocal && memcmp(st[0].grads, st[1].grads,
	    st[0].nlocal * sizeof(float)) == 0,
	    "split mlp stage: B then W give the whole backward's bits");
	for (int k = 0; k < sp; k++)
		tp_stage_free(&st[k]);
	nn_model_free(&m);
}

/* ---- training over ranks ----------------------------------------------- */

#define BATCH 8
#define STEPS 4

/* 512 -> 512 -> 512 three times: 1575936 parameters. */
static const struct nn_dims wide = { .arch = NN_MLP, .d_in = 512,
	.d_hidden = 512, .d_out = 512, .layers = 3 };

/* The gpt: vocabulary 13, width 8, 3 blocks of 2 heads, 4 positions. */
static const struct nn_dims gpt3 = { .arch = NN_GPT, .vocab = 13,
	.d_model = 8, .layers = 3, .heads = 2, .seq = 4 };

/* One batch of exact small values (the whole data: every step trains on
 * it in order). */
static void
data_make(struct train_data *d, const struct nn_model *m)
{
	memset(d, 0, sizeof(*d));
	d->arch = m->dims.arch;
	d->n = BATCH;
	if (d->arch == NN_GPT) {
		d->seq = m->dims.seq;
		d->tok = malloc(BATCH * ((size_t)d->seq + 1) * sizeof(int32_t));
		for (int i = 0; i < BATCH * (d->seq + 1); i++)
			d->tok[i] = (i * 5 + i / 3) % m->dims.vocab;
		return;
	}
	d->seq = 1;
	d->xrow = (size_t)m->dims.d_in, d->yrow = (size_t)m->dims.d_out;
	d->x = malloc(BATCH * d->xrow * sizeof(float));
	d->y = malloc(BATCH * d->yrow * sizeof(float));
	for (size_t i = 0; i < BATCH * d->xrow; i++)
		d->x[i] = (float)((int)(i * 7 % 11) - 5) / 8;
	for (size_t i = 0; i < BATCH * d->yrow; i++)
		d->y[i] = (float)((int)(i * 5 % 9) - 4) / 8;
}

struct result {
	size_t n;
	float *p, *mom[2];
	double loss[STEPS];
};

static void
optim_cfg(struct nn_optim_cfg *oc)
{
	nn_optim_defaults(oc, NN_ADAMW);
	oc->lr = 0.01;
}

/* nn's full-batch step and AdamW on one process: the reference. */
static int
alone(const struct nn_dims *dims, struct result *res)
{
	struct nn_optim_cfg oc;
	struct nn_optim o;
	struct train_data d;
	struct nn_model m;
	struct nn_batch b;
	char e[256];
	int rc = 0;

	optim_cfg(&oc);
	if (par_model(&m, dims, 5) < 0)
		return -1;
	data_make(&d, &m);
	b = (struct nn_batch){ BATCH, d.seq, d.x, d.y, d.tok };
	if (nn_optim_init(&o, &oc, m.nparams, e, sizeof e) < 0)
		rc = -1;
	for (int k = 0; rc == 0 && k < STEPS; k++) {
		nn_model_zero_grad(&m);
		rc = nn_model_step(&m, &b, &res->loss[k], e, sizeof e);
		res->loss[k] /= BATCH;
		nn_optim_step(&o, m.params, m.grads, 1.0f / BATCH);
	}
	res->n = m.nparams;
	res->p = m.params, res->mom[0] = o.m, res->mom[1] = o.v;
	m.params = o.m = o.v = NULL;	/* kept in res */
	nn_optim_free(&o);
	nn_model_free(&m);
	train_data_free(&d);
	return rc;
}

static void
result_free(struct result *r)
{
	free(r->p), free(r->mom[0]), free(r->mom[1]);
}

static int
close_to(const float *a, const float *b, size_t n, float rtol, float atol)
{
	for (size_t i = 0; i < n; i++)
		if (fabsf(a[i] - b[i]) > atol + rtol * fabsf(b[i]))
			return 0;
	return 1;
}

/* Each stage's idle share of its schedule, from the trace: per step but
 * the first, from its first span's start to its last span's end, less
 * its forward and backward spans. */
static void
trace_bubble(const struct pipe_result *res, int w, double *bubble)
{
	for (int j = 0; j < w; j++) {
		double busy = 0, span = 0;

		for (int k = 1; k < STEPS; k++) {
			double t0 = 1e30, t1 = -1e30;

			for (size_t i = 0; i < res->nspans; i++) {
				const struct pipe_span *s = &res->spans[i];

				if (s->stage != j || s->step != k)
					continue;
				t0 = s->t0 < t0 ? s->t0 : t0;
				t1 = s->t1 > t1 ? s->t1 : t1;
				if (s->kind == 'F' || s->kind == 'B' ||
				    s->kind == 'W')
					busy += s->t1 - s->t0;
			}
			span += t1 - t0;
		}
		bubble[j] = 1 - busy / span;
	}
}

struct pcase {
	const struct nn_dims *dims;
	const char *name;
	enum pipe_sched_kind sched;
	int micro;
	const char *dir;	/* for the checkpoint */
	int bubble;		/* check the measured bubble, not the results
				 * (AdamW on a million parameters: the sign of
				 * tiny gradients decides) */
};

/* Rank 0 after training: parameters, losses and the checkpoint's moments
 * against one process. */
static void
against_alone(const struct pcase *pc, const char *what,
    const struct nn_model *m, const struct pipe_result *res, const char *path)
{
	struct result ref = { 0 };
	struct nn_model mc;
	struct ckpt_state st;
	char e[COLLX_ERRLEN];
	int bad = 0;

	if (alone(pc->dims, &ref) < 0) {
		par_check(0, "%s: one process trains", what);
		result_free(&ref);
		return;
	}
	par_check(close_to(m->params, ref.p, ref.n, 1e-4f, 1e-5f),
	    "%s: the parameters of one process", what);
	for (int k = 0; k < STEPS; k++)
		bad |= fabs(res->steps[k].loss - ref.loss[k]) >
		    1e-5 * ref.loss[k];
	par_check(!bad, "%s: the losses of one process", what);
	if (ckpt_load(path, &mc, &st, e, sizeof e) < 0)
		par_check(0, "%s: checkpoint: %s", what, e);
	else {
		par_check(st.step == STEPS && st.m != NULL && st.v != NULL &&
		    close_to(st.m, ref.mom[0], ref.n, 1e-3f, 1e-7f) &&
		    close_to(st.v, ref.mom[1], ref.n, 1e-3f, 1e-10f),
		    "%s: the checkpoint's optimizer moments, every stage's at "
		    "its place", what);
		ckpt_state_free(&st);
		nn_model_free(&mc);
	}
	result_free(&ref);
}

/* Rank 0 after training: every stage's measured bubble is the idle share
 * of its schedule that the trace shows (how small it is, on one stage or
 * several, is a speed: examples/bench-pipe.sh measures it). */
static void
bubble_checks(const char *what, const struct pipe_result *res, int w)
{
	double tb[8];
	int bad = 0;

	trace_bubble(res, w, tb);
	for (int j = 0; j < w; j++)
		bad |= fabs(res->bubble[j] - tb[j]) > 0.002;
	par_check(!bad, "%s: each stage's bubble is the idle share of its "
	    "schedule in the trace (stage 0: %.3f, trace %.3f)", what,
	    res->bubble[0], tb[0]);
}

static int
pipe_rank(struct comm *c, void *arg)
{
	const struct pcase *pc = arg;
	int me = comm_rank(c), w = comm_size(c), first[8], rc;
	struct pipe_cfg cfg = { .sched = pc->sched, .micro = pc->micro,
	    .batch = BATCH, .steps = STEPS, .first = first, .trace = 1 };
	struct pipe_result res;
	struct train_data d;
	struct nn_model m;
	enum train_err kind;
	char e[COLLX_ERRLEN], path[256], what[128];

	snprintf(what, sizeof what, "W=%d %s %s M=%d", w, pc->name,
	    pipe_sched_name(pc->sched), pc->micro);
	snprintf(path, sizeof path, "%s/%s-%d.safetensors", pc->dir, pc->name,
	    w);
	cfg.ckpt_path = path;
	optim_cfg(&cfg.optim);
	if (par_model(&m, pc->dims, 5) < 0 ||
	    pipe_split(&m, w, NULL, first, e, sizeof e) < 0) {
		par_check(0, "%s: model and split", what);
		return 1;
	}
	data_make(&d, &m);
	rc = pipe_train(&m, &d, c, &cfg, NULL, NULL, &res, &kind, e, sizeof e);
	if (rc < 0)
		par_check(0, "%s: rank %d trains: %s", what, me, e);
	else if (me == 0 && pc->bubble)
		bubble_checks(what, &res, w);
	else if (me == 0)
		against_alone(pc, what, &m, &res, path);
	if (me == 0)
		unlink(path);
	pipe_result_free(&res);
	train_data_free(&d);
	nn_model_free(&m);
	return rc < 0;
}

/* ---- the trace's clock ----------------------------------------------- */

/* Seconds between one rank's origin and the next one's. */
#define CLOCK_APART 0.037

/* Each rank takes its origin CLOCK_APART after the rank before, as if it
 * had left the opening barrier that much later, and samples the clock.
 * Then all record one span at the same moment, a time A rank 0 names, and
 * sample the clock again once A is past, as a run does around its spans.
 * Gathered, every span starts where rank 0's clock says A is. */
static int
clock_rank(struct comm *c, void *arg)
{
	char e[COLLX_ERRLEN];
	struct pipe_cfg cfg = { .trace = 1 };
	struct pipe_run r = { .c = c, .cfg = &cfg, .rank = comm_rank(c),
	    .world = comm_size(c), .err = e, .errlen = sizeof e };
	struct pipe_result res = { 0 };
	double a = cli_now() + 0.05, worst = 0;
	int rc, bad = 0;

	(void)arg;
	if (coll_broadcast(c, &a, 1, DT_F64, 0, COLL_AUTO) < 0) {
		par_check(0, "rank %d: broadcast: %s", r.rank, comm_error(c));
		return 1;
	}
	r.origin = a - 1 + CLOCK_APART * r.rank;
	rc = pipe_clock_sample(&r, &r.clock);
	pipe_span(&r, 'F', r.rank, a, a + 0.001);
	while (cli_now() < a + 0.05)
		usleep(10000);
	if (rc == 0)
		rc = pipe_gather_spans(&r, &res);
	if (rc < 0)
		par_check(0, "rank %d gathers the trace: %s", r.rank, e);
	else if (r.rank == 0) {
		double err[8] = { 0 }, t0[8] = { 0 };
		int nf = 0, nc = 0;

		/* every stage's span, and its clock's error bar ('C') */
		for (size_t i = 0; i < res.nspans && r.world <= 8; i++) {
			const struct pipe_span *sp = &res.spans[i];

			if (sp->kind == 'C') {
				err[sp->stage] = sp->t1 - sp->t0, nc++;
				continue;
			}
			bad |= sp->mb != sp->stage ||
			    fabs(sp->t1 - sp->t0 - 0.001) > 1e-6;
			t0[sp->stage] = sp->t0, nf++;
		}
		/* off by no more than the error bar each stage reports (rank
		 * 0's: none), rounding aside; the bar is half a round trip */
		for (int q = 0; q < r.world; q++) {
			bad |= fabs(t0[q] - 1) > err[q] + 1e-9 ||
			    (q == 0 && err[q] != 0);
			worst = fmax(worst, fabs(t0[q] - 1));
		}
		par_check(nf == r.world && nc == r.world && !bad,
		    "W=%d: spans of origins %.0f ms apart land on rank 0's "
		    "clock within the error bar each stage reports (off by %.0f"
		    " us at most)", r.world, CLOCK_APART * 1e3, worst * 1e6);
	}
	free(r.spans);
	pipe_result_free(&res);
	return rc < 0;
}

/* The offset between two samples: a straight line through them; rank 0's
 * samples (all 0) leave its times alone. */
static void
clock_root(void)
{
	struct pipe_clock a = { 1, 0.010, 2e-6 }, b = { 11, 0.012, 5e-6 },
	    z = { 0, 0, 0 };

	UNIT_CLOSE(pipe_clock_root(&a, &b, 1), 0.990, 0, 1e-12,
	    "clock: at the first sample, its offset");
	UNIT_CLOSE(pipe_clock_root(&a, &b, 6), 5.989, 0, 1e-12,
	    "clock: halfway, the mean offset");
	UNIT_CLOSE(pipe_clock_root(&a, &b, 11), 10.988, 0, 1e-12,
	    "clock: at the second sample, its offset");
	UNIT_OK(pipe_clock_root(&z, &z, 2.5) == 2.5,
	    "clock: rank 0's times stay");
	UNIT_OK(pipe_clock_err(&a, &b) == 5e-6 && pipe_clock_err(&b, &a) == 5e-6,
	    "clock: between two samples, the larger error bar");
}

int
main(void)
{
	char dir[] = "/tmp/test_par_pipe.XXXXXX";
	struct pcase c[] = {
		{ &mlp4, "mlp", PIPE_SCHED_1F1B, 4, dir, 0 },
		{ &mlp4, "mlp", PIPE_SCHED_GPIPE, 8, dir, 0 },
		{ &gpt3, "gpt", PIPE_SCHED_1F1B, 4, dir, 0 },
		/* a million parameters on cheap passes: the optimizer's step
		 * after the schedule takes about as long as the schedule */
		{ &wide, "wide", PIPE_SCHED_1F1B, 8, dir, 1 },
	};

	tables();
	zb_tables();
	splits();
	split_parts();
	clock_root();
	par_world(2, "trace clock on 2 ranks", clock_rank, NULL);
	par_world(3, "trace clock on 3 ranks", clock_rank, NULL);
	if (!UNIT_OK(mkdtemp(dir) != NULL, "a temporary directory"))
		return unit_done();
	for (size_t k = 0; k < sizeof c / sizeof c[0]; k++) {
		if (c[k].bubble)
			par_world(1, "pipeline on 1 rank", pipe_rank, &c[k]);
		par_world(2, "pipeline on 2 ranks", pipe_rank, &c[k]);
		par_world(3, "pipeline on 3 ranks", pipe_rank, &c[k]);
	}
	rmdir(dir);
	return unit_done();
}
