/* cp_stage: a pipeline stage's positions of each sequence and the ring
 * attention between them (collx-train --cp), over cp_ring. */
#include <stdlib.h>
#include <string.h>

#include "cli/util.h"
#include "comm/coll.h"
#include "par/cp_ring.h"
#include "par/cp_stage.h"
#include "par/pipe_int.h"
#include "par/tp_stage.h"

struct cp_stage {
	int C, rank, zz;
	struct comm *c;
	struct tp_ring *ring;
	struct nn_block_hooks hk;	/* the ring's attention */
	float *wpe, *dwpe;		/* this rank's rows: [seq, d] each */
	struct nn_moe_router router;	/* experts: the micro-batch's routing */
	float *probs;			/* the group's router outputs, then
					 * the micro-batch's routing (moe_new) */
};

int
cp_stage_check(const struct nn_model *m, int C, int zigzag, char *err,
    size_t errlen)
{
	int parts = C * tp_cp_chunks(zigzag);

	if (C == 1)
		return 0;
	if (m->dims.arch != NN_GPT)
		return cli_fail(err, errlen, "--cp %d: context parallelism "
		    "shards a gpt's sequences, and the model is %s", C,
		    nn_arch_name(m->dims.arch));
	if (m->dims.seq % parts != 0)
		return cli_fail(err, errlen, "--cp %d --cp-mode %s: sequence "
		    "length %d is not divisible by %s%d", C, zigzag ? "zigzag" :
		    "ring", m->dims.seq, zigzag ? "2 x --cp = " : "--cp ",
		    parts);
	return 0;
}

/* The ring holds the links while it runs, as the TP sums do: a DP sum
 * overlapping the backward waits (tp_stage's done hook), and ZeRO-3's
 * gathers and reduce-scatters in flight (its use hook). */
static void
ring_alone(struct tp_stage *ts)
{
	if (ts->done != NULL)
		ts->done(ts->done_ctx, TP_STAGE_SUMMING);
	if (ts->use != NULL)
		ts->use(ts->use_ctx, TP_STAGE_SUMMING, 0);
}

/* ---- experts: capacity counts the whole micro-batch's tokens ---------- */

/*
 * The tokens of a micro-batch of b samples (b * gseq, numbered as one
 * rank holding it all numbers them) compete for an expert's capacity
 * (nn_moe_route: highest p first, then lower token), so a rank holding
 * some positions of each sample routes with every rank's router outputs:
 * the group's probs are gathered, the whole micro-batch routed as one
 * rank would, and this rank keeps its own tokens' assignments (in its
 * token order, which is the whole's restricted to them). Without a
 * capacity a token's experts are its own: no exchange. routed and psum
 * count this rank's tokens, dropped its tokens' refused assignments, so
 * that their sums over the dp x cp group are the single rank's.
 */

/* This rank's position of global position pos of a sample, or -1. */
static int
own_pos(const struct tp_stage *ts, int pos)
{
	const struct cp_stage *cs = ts->cp;
	int nch = tp_cp_chunks(cs->zz), len = ts->seq / nch;

	for (int k = 0; k < nch; k++)
		if (tp_cp_chunk(cs->zz, cs->C, cs->rank, k) == pos / len)
			return k * len + pos % len;
	return -1;
}

static int
moe_route(void *ctx, struct nn_moe_acts *a, const struct nn_moe_cfg *c,
    int n)
{
	struct tp_stage *ts = ctx;
	struct cp_stage *cs = ts->cp;
	struct nn_moe_cfg own = *c;
	int E = c->experts, b = n / ts->seq, N = b * ts->gseq, at = 0, mine;
	size_t per = (size_t)n * E, whole = (size_t)ts->nmax * ts->gseq;
	float *gath = cs->probs, *p = gath + whole * E;
	struct nn_moe_acts w;

	own.capacity = 0;	/* routed, psum; rows every choice */
	nn_moe_route(a, &own, n);
	if (c->capacity <= 0)
		return 0;
	w.probs = p, p += whole * E;
	w.rows = (int32_t *)p, p += whole * c->topk;
	w.start = (int32_t *)p, p += E + 1;
	w.routed = p, p += E;
	w.psum = p, p += E;
	w.dropped = p, p += 1;
	w.sort = p;
	ring_alone(ts);
	if (coll_allgather(cs->c, a->probs, gath, per, DT_F32, COLL_AUTO) < 0)
		return cli_fail(ts->err, ts->errlen, "CP group: the experts' "
		    "routing: %s", comm_error(cs->c));
	for (int r = 0; r < cs->C; r++)
		tp_cp_seq_put(w.probs, gath + (size_t)r * per, cs->zz, cs->C, r,
		    b, ts->gseq, E);
	nn_moe_route(&w, c, N);
	mine = a->start[E];
	for (int e = 0; e < E; e++) {
		a->start[e] = at;
		for (int i = w.start[e]; i < w.start[e + 1]; i++) {
			int t = w.rows[i], j = own_pos(ts, t % ts->gseq);
			if (j >= 0)
				a->rows[at++] = t / ts->gseq * ts->seq + j;
		}
	}
	a->start[E] = at;
	*a->dropped = (float)(mine - at);
	return 0;
}

/* The gathered probs [C, nmax * seq, E], then the whole micro-batch's
 * routing (probs, rows, start, routed, psum, dropped, sort). */
static int
moe_new(struct tp_stage *ts, char *err, size_t errlen)
{
	struct cp_stage *cs = ts->cp;
	size_t E = (size_t)ts->d.moe.experts, N = (size_t)ts->nmax * ts->gseq;

	if (E == 0)
		return 0;
	cs->probs = malloc((2 * N * E + N * (size_t)ts->d.moe.topk + 3 * E +
	    2 + 2 * N) * sizeof(float));
	if (cs->probs == NULL)
		return cli_fail(err, errlen, "out of memory");
	cs->router = (struct nn_moe_router){ .route = moe_route, .ctx = ts };
	return 0;
}

const struct nn_moe_router *
cp_stage_router(const struct tp_stage *ts)
{
	return ts->cp != NULL && ts->cp->probs != NULL ? &ts->cp->router :
	    NULL;
}

int
cp_stage_new(struct tp_stage *ts, struct comm *c, int zigzag, char *err,
    size_t errlen)
{
	struct cp_stage *cs = calloc(1, sizeof(*cs));
	const struct nn_dims *d = &ts->d;
	size_t rows;

	if (cs == NULL)
		return cli_fail(err, errlen, "out of memory");
	ts->cp = cs;
	cs->C = comm_size(c), cs->rank = comm_rank(c), cs->zz = zigzag;
	ts->gseq = ts->seq;
	ts->seq /= cs->C;
	rows = (size_t)ts->seq * d->d_model;
	if (tp_ring_new(&cs->ring, c, NULL, zigzag, ts->nmax, ts->gseq,
	    d->heads / ts->T, d->d_model / d->heads, 1, err, errlen) < 0)
		return -1;
	tp_ring_hooks(cs->ring, &cs->hk);
	if ((cs->wpe = malloc(2 * rows * sizeof(float))) == NULL)
		return cli_fail(err, errlen, "out of memory");
	cs->dwpe = cs->wpe + rows;
	cs->c = c;
	return moe_new(ts, err, errlen);
}

void
cp_stage_free(struct tp_stage *ts)
{
	struct cp_stage *cs = ts->cp;

	if (cs == NULL)
		return;
	tp_ring_free(cs->ring);
	free(cs->wpe);
	free(cs->probs);
	free(cs);
	ts->cp = NULL;
}

static int
attn_fwd(void *ctx, float *out, const float *q, const float *k,
    const float *v)
{
	struct tp_stage *ts = ctx;

	ring_alone(ts);
	return ts->cp->hk.attn_fwd(ts->cp->hk.ctx, out, q, k, v);
}

static int
attn_bwd(void *ctx, float *dq, float *dk, float *dv, const float *dout)
{
	struct tp_stage *ts = ctx;

	ring_alone(ts);
	return ts->cp->hk.attn_bwd(ts->cp->hk.ctx, dq, dk, dv, dout);
}

const struct nn_block_hooks *
cp_stage_hooks(struct tp_stage *ts, struct nn_block_hooks *hk)
{
	if (ts->T == 1)
		hk->reduce = NULL;
	hk->attn_fwd = attn_fwd;
	hk->attn_bwd = attn_bwd;
	hk->ctx = ts;
	return hk;
}

/* The ring's log-sum-exp goes where the serial attention keeps its
 * probabilities (a->att, [n, nh, seq, seq]), unused under the hook. */
void
cp_stage_bind(struct tp_stage *ts, const struct nn_block_acts *a, int n)
{
	tp_ring_bind(ts->cp->ring, n, a->q, a->k, a->v, a->atty, a->att);
}

void
cp_stage_embed(struct tp_stage *ts, struct pipe_slot *sl)
{
	struct cp_stage *cs = ts->cp;

	tp_cp_seq_take(cs->wpe, ts->wpe, cs->zz, cs->C, cs->rank, 1, ts->gseq,
	    ts->d.d_model);
	nn_embedding_forward(sl->f, sl->tok, ts->wte, cs->wpe, sl->n, ts->seq,
	    ts->d.d_model);
}

void
cp_stage_embed_back(struct tp_stage *ts, struct pipe_slot *sl,
    const float *dy)
{
	struct cp_stage *cs = ts->cp;

	tp_cp_seq_take(cs->dwpe, ts->dwpe, cs->zz, cs->C, cs->rank, 1,
	    ts->gseq, ts->d.d_model);
	nn_embedding_backward(ts->dwte, cs->dwpe, dy, sl->tok, sl->n, ts->seq,
	    ts->d.d_model);
	tp_cp_seq_put(ts->dwpe, cs->dwpe, cs->zz, cs->C, cs->rank, 1, ts->gseq,
	    ts->d.d_model);
}

void
cp_stage_tokens(const struct tp_stage *ts, int32_t *dst, const int32_t *src)
{
	const struct cp_stage *cs = ts->cp;
	int nch, len;

	if (cs == NULL) {
		memcpy(dst, src, (size_t)ts->seq * sizeof(int32_t));
		return;
	}
	nch = tp_cp_chunks(cs->zz), len = ts->seq / nch;
	for (int k = 0; k < nch; k++)
		memcpy(dst + (size_t)k * len, src + (size_t)tp_cp_chunk(cs->zz,
		    cs->C, cs->rank, k) * len, (size_t)len * sizeof(int32_t));
}

struct tp_overlap
cp_stage_time(const struct tp_stage *ts)
{
	struct tp_overlap none = { 0, 0 };

	return ts->cp != NULL ? tp_ring_time(ts->cp->ring) : none;
}

int
pipe_cp_size(const struct pipe_cfg *cfg)
{
	return cfg->cp != NULL ? comm_size(cfg->cp) : 1;
}

void
pipe_cp_stat(struct pipe_run *r, struct pipe_stat *ps, int begin)
{
	struct tp_overlap t = { 0, 0 }, one;
	uint64_t b;

	if (pipe_cp_size(r->cfg) == 1)
		return;
	for (int c = 0; c < r->nchunk; c++) {
		one = cp_stage_time(&r->ts[c]);
		t.hidden += one.hidden, t.exposed += one.exposed;
	}
	b = comm_bytes_sent(r->cfg->cp);
	if (!begin) {
		ps->cp_hidden = t.hidden - r->cp_t0.hidden;
		ps->cp = ps->cp_hidden + t.exposed - r->cp_t0.exposed;
		ps->cp_sent = (size_t)(b - r->cp_b0);
	}
	r->cp_t0 = t;
	r->cp_b0 = b;
}
