/* tp_sp: the block around allgather-then-matmul and matmul-then-
 * reduce-scatter, either as one collective and the matmuls after (or
 * before) it, or cut into W ring steps whose transfers overlap the
 * matmuls of the chunk at hand (the collective matmul of Wang et al.,
 * PyTorch's async TP). The ring steps' transfers run on a communication
 * thread (dp_overlap.c's runner, one job a step), so they move on while
 * a matmul runs rather than only between its calls; the main thread
 * touches the group only once the thread has done a collective's jobs. */
#include <stdlib.h>
#include <string.h>

#include "cli/util.h"
#include "comm/coll.h"
#include "par/cp_ring.h"
#include "par/dp_sync.h"
#include "par/tp_sp.h"
#include "par/tp_xfer.h"	/* struct tp_overlap */

enum { TAG_AG = 0x6167, TAG_RS = 0x7273 };

struct tp_sp {
	struct comm *c;
	struct tp_log *log;
	const struct nn_block_w *w, *g;	/* the current pass's */
	int W, rank, seq, overlap;
	int b, s, sl, held, d, lc, lh, hd, fl, causal;	/* lc = lh*hd */
	enum nn_act act;
	size_t nh, n, blk;	/* rows held, rows whole, floats of a chunk */
	/* forward: held rows (ln1, h, ln2), whole rows (a, q.., m, f1..) */
	float *ln1, *mean1, *rstd1, *a, *q, *k, *v, *att, *atty;
	float *h, *ln2, *mean2, *rstd2, *m, *f1, *f1a;
	/* backward */
	float *dY, *dF, *dF1, *dq, *dk, *dv, *datty, *dsm, *dml, *dh, *dal;
	float *part[2], *ain, *stage;	/* stage: W chunks, [W, b, sl, d] */
	struct dp_ovl *ovl;	/* overlap: the thread running the ring steps */
	int tag;		/* the ring it runs: TAG_AG or TAG_RS */
	double (*span)[2];	/* each step's transfer, from start to end */
	char *err;
	size_t errlen;
};

typedef void rows_fn(struct tp_sp *sp, size_t r0, int np, float *part);

static int
failed(struct tp_sp *sp)
{
	return cli_fail(sp->err, sp->errlen, "%s", comm_error(sp->c));
}

static void
mark(struct tp_sp *sp, const char *name, const char *op, const char *algo,
    size_t count, const struct tp_overlap *ov)
{
	if (sp->log == NULL)
		return;
	if (ov == NULL)
		tp_log_mark(sp->log, name, op, algo, count);
	else
		tp_log_mark_overlap(sp->log, name, op, algo, count,
		    ov->hidden, ov->exposed);
}

static void
compute(struct tp_sp *sp, const char *name)
{
	mark(sp, name, "compute", "-", 0, NULL);
}

/* fn over chunk t's rows (every sample); part (when not NULL) gets the
 * rows' results [b, sl, d], zeroed first. */
static void
rows(struct tp_sp *sp, int t, rows_fn *fn, float *part)
{
	if (part)
		memset(part, 0, sp->blk * sizeof(float));
	for (int bi = 0; bi < sp->b; bi++)
		fn(sp, (size_t)bi * sp->s + (size_t)t * sp->sl, sp->sl,
		    part ? part + (size_t)bi * sp->sl * sp->d : NULL);
}

/* ---- the ring steps, on the communication thread -------------------- */

static float *
slot(struct tp_sp *sp, int t)
{
	return sp->stage + (size_t)((t % sp->W + sp->W) % sp->W) * sp->blk;
}

/* Ring step i (a dp_ovl job): allgather, chunk rank-i to the next rank
 * and chunk rank-i-1 from the previous, each into its slot;
 * reduce-scatter, the partial sums of step i to the next rank and those
 * step i+1 adds from the previous. */
static int
ring_step(void *ctx, int i)
{
	struct tp_sp *sp = ctx;
	int next = (sp->rank + 1) % sp->W, prev = (sp->rank + sp->W - 1) % sp->W;
	size_t bytes = sp->blk * sizeof(float);
	double t0 = cli_now();
	int rc = sp->tag == TAG_AG ?
	    comm_sendrecv(sp->c, next, slot(sp, sp->rank - i), bytes, prev,
	    slot(sp, sp->rank - i - 1), bytes, TAG_AG) :
	    comm_sendrecv(sp->c, next, sp->part[i % 2], bytes, prev, sp->ain,
	    bytes, TAG_RS);

	sp->span[i][0] = t0, sp->span[i][1] = cli_now();
	return rc;
}

/* Waits until the thread has done step i (the main thread's wait is
 * exposed transfer time). */
static void
step_done(struct tp_sp *sp, int i, struct tp_overlap *ov)
{
	double t0 = cli_now();

	dp_ovl_done(sp->ovl, i + 1);
	ov->exposed += cli_now() - t0;
}

/* After a ring: waits for the thread; the steps' transfer time less the
 * main thread's waits ran beside its compute (hidden). Spans: the
 * compute of each step (from t[i] to t[i + 1]) and each transfer. */
static int
ring_end(struct tp_sp *sp, struct tp_overlap *ov, const double *t,
    const char *name)
{
	double busy, t0 = cli_now();
	int rc = dp_ovl_wait(sp->ovl, &busy);

	ov->exposed += cli_now() - t0;
	ov->hidden += busy > ov->exposed ? busy - ov->exposed : 0;
	if (rc < 0)
		return failed(sp);
	for (int i = 0; i < sp->W; i++)
		tp_log_span(sp->log, 0, 0, name, t[i], t[i + 1]);
	for (int i = 0; i < sp->W - 1; i++)
		tp_log_span(sp->log, 1, 'S', name, sp->span[i][0],
		    sp->span[i][1]);
	return 0;
}

/* Every rank's chunk src [b, sl, d] into dst [b, s, d], one collective. */
static int
gather(struct tp_sp *sp, float *dst, const float *src, const char *name)
{
	if (coll_allgather(sp->c, src, sp->stage, sp->blk, DT_F32,
	    COLL_RING) < 0)
		return failed(sp);
	for (int j = 0; j < sp->W; j++)
		tp_cp_seq_put(dst, sp->stage + j * sp->blk, 0, sp->W, j, sp->b,
		    sp->s, sp->d);
	mark(sp, name, "allgather", "ring", sp->blk * sp->W, NULL);
	return 0;
}

/* dst [b, s, d] whole from the rows held src, fn on each chunk's rows as
 * soon as dst holds them. Every position held: no communication. */
static int
ag_apply(struct tp_sp *sp, const float *src, float *dst, rows_fn *fn,
    const char *name)
{
	struct tp_overlap ov = { 0, 0 };
	double *t = sp->span[sp->W - 1];	/* W + 1 step boundaries */

	if (!sp->seq || !sp->overlap) {
		if (!sp->seq)
			memcpy(dst, src, sp->n * sp->d * sizeof(float));
		else if (gather(sp, dst, src, name) < 0)
			return -1;
		for (int i = 0; i < sp->W; i++)
			rows(sp, i, fn, NULL);
		return 0;
	}
	/* the thread runs every step at once: each needs only the last */
	memcpy(slot(sp, sp->rank), src, sp->blk * sizeof(float));
	sp->tag = TAG_AG;
	dp_ovl_begin(sp->ovl);
	dp_ovl_stage(sp->ovl, sp->W);
	t[0] = cli_now();
	for (int i = 0; i < sp->W; i++) {
		if (i > 0)
			step_done(sp, i - 1, &ov);
		tp_cp_seq_put(dst, slot(sp, sp->rank - i), 0, sp->W,
		    (sp->rank - i + sp->W) % sp->W, sp->b, sp->s, sp->d);
		rows(sp, (sp->rank - i + sp->W) % sp->W, fn, NULL);
		t[i + 1] = cli_now();
	}
	if (ring_end(sp, &ov, t, name) < 0)
		return -1;
	mark(sp, name, "allgather+matmul", "ring", sp->blk * sp->W, &ov);
	return 0;
}

/* dst (the rows held) = the sum over ranks of the partial rows fn
 * computes, this rank's chunk; every position held (tp): then gathered
 * whole, the allreduce's second half (agname). */
static int
rs_apply(struct tp_sp *sp, rows_fn *fn, float *dst, const char *name,
    const char *agname)
{
	float *local = sp->seq ? dst : sp->ain;
	struct tp_overlap ov = { 0, 0 };
	double *t = sp->span[sp->W - 1];

	if (!sp->overlap) {
		for (int i = 0; i < sp->W; i++)
			rows(sp, i, fn, slot(sp, i));
		compute(sp, "matmul");
		if (coll_reduce_scatter(sp->c, sp->stage, local, sp->blk,
		    DT_F32, COLL_SUM, COLL_RING) < 0)
			return failed(sp);
		mark(sp, name, "reduce-scatter", "ring", sp->blk * sp->W,
		    NULL);
	} else {
		/* chunk t's sum starts at rank t+1 and ends at rank t: step
		 * i's partial sums travel while step i+1's compute */
		sp->tag = TAG_RS;
		dp_ovl_begin(sp->ovl);
		t[0] = cli_now();
		for (int i = 0; i < sp->W; i++) {
			float *part = sp->part[i % 2];

			rows(sp, (sp->rank - 1 - i + 2 * sp->W) % sp->W, fn,
			    part);
			if (i > 0) {
				step_done(sp, i - 1, &ov);
				nn_add(part, sp->ain, sp->blk);
			}
			t[i + 1] = cli_now();
			if (i < sp->W - 1)
				dp_ovl_stage(sp->ovl, i);
		}
		if (ring_end(sp, &ov, t, name) < 0)
			return -1;
		memcpy(local, sp->part[(sp->W - 1) % 2],
		    sp->blk * sizeof(float));
		mark(sp, name, "matmul+reduce-scatter", "ring", sp->blk * sp->W,
		    &ov);
	}
	return sp->seq ? 0 : gather(sp, dst, local, agname);
}

/* ---- the matmuls of a block of rows (r0: first whole row) ---------------- */

static void
qkv_fwd(struct tp_sp *sp, size_t r0, int np, float *part)
{
	const struct nn_block_w *w = sp->w;
	const float *in = sp->a + r0 * sp->d;
	size_t o = r0 * sp->lc;

	(void)part;
	nn_linear_forward(sp->q + o, in, w->q_w, w->q_b, np, sp->d, sp->lc);
	nn_linear_forward(sp->k + o, in, w->k_w, w->k_b, np, sp->d, sp->lc);
	nn_linear_forward(sp->v + o, in, w->v_w, w->v_b, np, sp->d, sp->lc);
}

static void
o_fwd(struct tp_sp *sp, size_t r0, int np, float *part)
{
	nn_linear_forward(part, sp->atty + r0 * sp->lc, sp->w->o_w, NULL, np,
	    sp->lc, sp->d);
}

static void
fc1_fwd(struct tp_sp *sp, size_t r0, int np, float *part)
{
	size_t o = r0 * sp->fl;

	(void)part;
	nn_linear_forward(sp->f1 + o, sp->m + r0 * sp->d, sp->w->fc1_w,
	    sp->w->fc1_b, np, sp->d, sp->fl);
	nn_act_forward(sp->act, sp->f1a + o, sp->f1 + o, (size_t)np * sp->fl);
}

static void
fc2_fwd(struct tp_sp *sp, size_t r0, int np, float *part)
{
	nn_linear_forward(part, sp->f1a + r0 * sp->fl, sp->w->fc2_w, NULL, np,
	    sp->fl, sp->d);
}

static void
fc2_bwd(struct tp_sp *sp, size_t r0, int np, float *part)
{
	size_t o = r0 * sp->fl, cnt = (size_t)np * sp->fl;

	(void)part;
	memset(sp->dF + o, 0, cnt * sizeof(float));
	memset(sp->dF1 + o, 0, cnt * sizeof(float));
	nn_linear_backward(sp->dF + o, sp->g->fc2_w, NULL, sp->dY + r0 * sp->d,
	    sp->f1a + o, sp->w->fc2_w, np, sp->fl, sp->d);
	nn_act_backward(sp->act, sp->dF1 + o, sp->f1 + o, sp->dF + o, cnt);
}

static void
fc1_bwd(struct tp_sp *sp, size_t r0, int np, float *part)
{
	nn_linear_backward(part, sp->g->fc1_w, sp->g->fc1_b,
	    sp->dF1 + r0 * sp->fl, sp->m + r0 * sp->d, sp->w->fc1_w, np, sp->d,
	    sp->fl);
}

static void
o_bwd(struct tp_sp *sp, size_t r0, int np, float *part)
{
	size_t o = r0 * sp->lc;

	(void)part;
	memset(sp->datty + o, 0, (size_t)np * sp->lc * sizeof(float));
	nn_linear_backward(sp->datty + o, sp->g->o_w, NULL, sp->dY + r0 * sp->d,
	    sp->atty + o, sp->w->o_w, np, sp->lc, sp->d);
}

static void
qkv_bwd(struct tp_sp *sp, size_t r0, int np, float *part)
{
	const struct nn_block_w *w = sp->w, *g = sp->g;
	const float *in = sp->a + r0 * sp->d;
	size_t o = r0 * sp->lc;

	nn_linear_backward(part, g->q_w, g->q_b, sp->dq + o, in, w->q_w, np,
	    sp->d, sp->lc);
	nn_linear_backward(part, g->k_w, g->k_b, sp->dk + o, in, w->k_w, np,
	    sp->d, sp->lc);
	nn_linear_backward(part, g->v_w, g->v_b, sp->dv + o, in, w->v_w, np,
	    sp->d, sp->lc);
}

/* ---- the block -------------------------------------------------------- */

int
tp_sp_forward(struct tp_sp *sp, float *y, const struct nn_block_w *w,
    const float *x)
{
	size_t nh = sp->nh, d = sp->d;

	sp->w = w;
	nn_layernorm_forward(sp->ln1, sp->mean1, sp->rstd1, x, w->ln1_w,
	    w->ln1_b, (int)nh, (int)d);
	compute(sp, "fwd ln1");
	if (ag_apply(sp, sp->ln1, sp->a, qkv_fwd, "fwd allgather ln1") < 0)
		return -1;
	nn_attention_forward(sp->atty, sp->att, sp->q, sp->k, sp->v, sp->b,
	    sp->s, sp->lh, sp->hd, sp->causal);
	compute(sp, "fwd qkv+attention");
	if (rs_apply(sp, o_fwd, sp->h, "fwd reduce-scatter attn.o",
	    "fwd allgather attn.o") < 0)
		return -1;
	if (w->o_b)
		nn_add_rows(sp->h, w->o_b, nh, d);
	nn_add(sp->h, x, nh * d);
	nn_layernorm_forward(sp->ln2, sp->mean2, sp->rstd2, sp->h, w->ln2_w,
	    w->ln2_b, (int)nh, (int)d);
	compute(sp, "fwd ln2");
	if (ag_apply(sp, sp->ln2, sp->m, fc1_fwd, "fwd allgather ln2") < 0)
		return -1;
	compute(sp, "fwd fc1");
	if (rs_apply(sp, fc2_fwd, y, "fwd reduce-scatter mlp.fc2",
	    "fwd allgather mlp.fc2") < 0)
		return -1;
	if (w->fc2_b)
		nn_add_rows(y, w->fc2_b, nh, d);
	nn_add(y, sp->h, nh * d);
	return 0;
}

static void
sum_rows(float *acc, const float *rows, size_t n, size_t d)
{
	if (acc)
		for (size_t r = 0; r < n; r++)
			nn_add(acc, rows + r * d, d);
}

/* Sequence parallel: the gradients of the tensors every rank keeps whole
 * (LayerNorms, o and fc2 biases) came from this rank's positions only;
 * one allreduce sums them. */
static int
sum_whole(struct tp_sp *sp, const struct nn_block_w *g)
{
	float *t[6] = { g->ln1_w, g->ln1_b, g->ln2_w, g->ln2_b, g->o_b,
	    g->fc2_b };
	size_t k = 0;

	for (int i = 0; i < 6; i++)
		if (t[i])
			memcpy(sp->stage + (k++) * sp->d, t[i],
			    sp->d * sizeof(float));
	compute(sp, "bwd ln1");
	if (coll_allreduce(sp->c, sp->stage, k * sp->d, DT_F32, COLL_SUM,
	    COLL_RING) < 0)
		return failed(sp);
	mark(sp, "bwd allreduce ln and bias grads", "allreduce", "ring",
	    k * sp->d, 0);
	for (int i = 0, j = 0; i < 6; i++)
		if (t[i])
			memcpy(t[i], sp->stage + (j++) * sp->d,
			    sp->d * sizeof(float));
	return 0;
}

int
tp_sp_backward(struct tp_sp *sp, float *dx, const struct nn_block_w *g,
    const float *dy, const struct nn_block_w *w, const float *x)
{
	size_t nh = sp->nh, d = sp->d, nc = sp->n * sp->lc;

	sp->w = w, sp->g = g;
	compute(sp, "bwd");
	if (ag_apply(sp, dy, sp->dY, fc2_bwd, "bwd allgather dy") < 0)
		return -1;
	sum_rows(g->fc2_b, dy, nh, d);
	compute(sp, "bwd fc2");
	if (rs_apply(sp, fc1_bwd, sp->dml, "bwd reduce-scatter mlp.fc1",
	    "bwd allgather mlp.fc1") < 0)
		return -1;
	memcpy(sp->dh, dy, nh * d * sizeof(float));
	nn_layernorm_backward(sp->dh, g->ln2_w, g->ln2_b, sp->dml, sp->h,
	    w->ln2_w, sp->mean2, sp->rstd2, (int)nh, (int)d);
	compute(sp, "bwd ln2");
	if (ag_apply(sp, sp->dh, sp->dY, o_bwd, "bwd allgather dh") < 0)
		return -1;
	sum_rows(g->o_b, sp->dh, nh, d);
	memset(sp->dq, 0, 3 * nc * sizeof(float));
	nn_attention_backward(sp->dq, sp->dk, sp->dv, sp->dsm, sp->datty,
	    sp->att, sp->q, sp->k, sp->v, sp->b, sp->s, sp->lh, sp->hd,
	    sp->causal);
	compute(sp, "bwd o+attention");
	if (rs_apply(sp, qkv_bwd, sp->dal, "bwd reduce-scatter attn.qkv",
	    "bwd allgather attn.qkv") < 0)
		return -1;
	memcpy(dx, sp->dh, nh * d * sizeof(float));
	nn_layernorm_backward(dx, g->ln1_w, g->ln1_b, sp->dal, x, w->ln1_w,
	    sp->mean1, sp->rstd1, (int)nh, (int)d);
	return sp->seq ? sum_whole(sp, g) : 0;
}

/* ---- setup ------------------------------------------------------------ */

int
tp_sp_new(struct tp_sp **out, struct comm *c, struct tp_log *log,
    const struct tp_model *m, int b, int s, int seq, int overlap, char *err,
    size_t errlen)
{
	struct tp_sp *sp = calloc(1, sizeof(*sp));
	size_t nh, n, d, nc, nf, total;
	float *p;

	if (sp == NULL)
		return cli_fail(err, errlen, "out of memory");
	sp->c = c, sp->log = log, sp->err = err, sp->errlen = errlen;
	sp->W = comm_size(c), sp->rank = comm_rank(c);
	sp->seq = seq, sp->overlap = overlap;
	sp->b = b, sp->s = s, sp->sl = s / sp->W, sp->held = seq ? sp->sl : s;
	sp->d = m->d, sp->lh = m->heads / sp->W, sp->hd = m->d / m->heads;
	sp->lc = sp->lh * sp->hd, sp->fl = m->f / sp->W;
	sp->causal = m->cfg.causal, sp->act = m->cfg.act;
	nh = sp->nh = (size_t)b * sp->held;
	n = sp->n = (size_t)b * s;
	d = (size_t)sp->d;
	sp->blk = (size_t)b * sp->sl * d;
	nc = n * sp->lc, nf = n * sp->fl;
	total = 3 * nh * d + 4 * nh + 2 * n * d + 4 * nc +
	    (size_t)b * sp->lh * s * s + 2 * nf +	/* forward */
	    n * d + 2 * nf + 4 * nc + (size_t)s * s + 3 * nh * d +
	    3 * sp->blk + n * d + 6 * d;	/* backward, transfers */
	if ((p = malloc(total * sizeof(float))) == NULL) {
		free(sp);
		return cli_fail(err, errlen, "out of memory for a block of %zu "
		    "rows", n);
	}
#define TAKE(f, cnt) (sp->f = p, p += (cnt))
	TAKE(ln1, nh * d), TAKE(mean1, nh), TAKE(rstd1, nh), TAKE(a, n * d);
	TAKE(q, nc), TAKE(k, nc), TAKE(v, nc), TAKE(atty, nc);
	TAKE(att, (size_t)b * sp->lh * s * s);
	TAKE(h, nh * d), TAKE(ln2, nh * d), TAKE(mean2, nh), TAKE(rstd2, nh);
	TAKE(m, n * d), TAKE(f1, nf), TAKE(f1a, nf);
	TAKE(dY, n * d), TAKE(dF, nf), TAKE(dF1, nf);
	TAKE(dq, nc), TAKE(dk, nc), TAKE(dv, nc), TAKE(datty, nc);
	TAKE(dsm, (size_t)s * s), TAKE(dml, nh * d), TAKE(dh, nh * d);
	TAKE(dal, nh * d);
	TAKE(part[0], sp->blk), TAKE(part[1], sp->blk), TAKE(ain, sp->blk), TAKE(stage, n * d + 6 * d);
#undef TAKE
	/* the ring's W-1 steps and the W+1 bounds of its computes */
	if ((sp->span = calloc(2 * (size_t)sp->W + 1, sizeof(*sp->span))) ==
	    NULL) {
		tp_sp_free(sp);
		return cli_fail(err, errlen, "out of memory");
	}
	if (overlap) {
		int *ready = calloc((size_t)sp->W, sizeof(int));

		for (int i = 0; ready && i < sp->W - 1; i++)
			ready[i] = i;	/* step i posted once its data is */
		sp->ovl = ready ? dp_ovl_new(sp->W - 1, ready, ring_step, sp, c,
		    err, errlen) : NULL;
		if (sp->ovl == NULL && ready == NULL)
			cli_fail(err, errlen, "out of memory");
		free(ready);
		if (sp->ovl == NULL) {
			tp_sp_free(sp);
			return -1;
		}
	}
	*out = sp;
	return 0;
}

void
tp_sp_free(struct tp_sp *sp)
{
	if (sp == NULL)
		return;
	dp_ovl_free(sp->ovl);
	free(sp->span);
	free(sp->ln1);
	free(sp);
}
