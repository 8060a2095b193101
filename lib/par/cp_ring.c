/* cp_ring: ring attention over a comm group with comm_isend/comm_irecv,
 * each step's transfer posted before the step's blocks compute and moved
 * along (comm_progress) between heads; lib/nn/attn_part.c does the math.
 * The time a step's transfer ran while the step computed is logged as
 * hidden. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/util.h"
#include "nn/attn_part.h"
#include "par/cp_ring.h"
#include "par/tp_xfer.h"

enum { TAG_KV = 0x6b76, TAG_DKV = 0x646b, CP_OPCODE = 0x70 };

struct tp_ring {
	struct comm *c;
	struct tp_log *log;
	int P, rank, zz, nch, len, b, L, nh, hd, C, causal;
	size_t blk;			/* floats of K (or V): [b, L, C] */
	float *kv[2];			/* K then V: the block at hand, next */
	float *part[2], *ain;		/* dK then dV: sent, received */
	float *m, *l, *lse, *dsum;	/* [b, nh, L] */
	float *scratch;			/* 2 * len * len */
	const float *q, *k, *v, *o;	/* the forward's, for the backward */
	float *own_lse;			/* lse's own place (tp_ring_bind moves it) */
	int bmax;			/* samples allocated for */
	uint64_t work;
	struct tp_overlap time;		/* the transfers' seconds, so far */
	char *err;
	size_t errlen;
};

int
tp_cp_chunks(int zigzag)
{
	return zigzag ? 2 : 1;
}

int
tp_cp_chunk(int zigzag, int P, int r, int k)
{
	return zigzag ? (k == 0 ? r : 2 * P - 1 - r) : r;
}

/* Copies rank r's positions between whole [b, s, w] and local [b, sl, w]. */
static void
seq_copy(float *whole, float *local, int put, int zigzag, int P, int r,
    int b, int s, int w)
{
	int nch = tp_cp_chunks(zigzag), len = s / (nch * P);
	size_t n = (size_t)len * w;

	for (int bi = 0; bi < b; bi++)
		for (int k = 0; k < nch; k++) {
			float *wp = whole + ((size_t)bi * s +
			    (size_t)tp_cp_chunk(zigzag, P, r, k) * len) * w;
			float *lp = local + ((size_t)bi * nch + k) * n;
			memcpy(put ? wp : lp, put ? lp : wp, n * sizeof(float));
		}
}

void
tp_cp_seq_take(float *dst, const float *src, int zigzag, int P, int r, int b,
    int s, int w)
{
	seq_copy((float *)src, dst, 0, zigzag, P, r, b, s, w);
}

void
tp_cp_seq_put(float *dst, const float *src, int zigzag, int P, int r, int b,
    int s, int w)
{
	seq_copy(dst, (float *)src, 1, zigzag, P, r, b, s, w);
}

static int
failed(struct tp_ring *cp)
{
	return cli_fail(cp->err, cp->errlen, "%s", comm_error(cp->c));
}

/* ---- the blocks of one step ---------------------------------------------- */

static struct nn_attn_part
part_of(const struct tp_ring *cp, int src, int qk, int kk)
{
	return (struct nn_attn_part){ .nq = cp->len, .nk = cp->len,
	    .ld = cp->C, .hd = cp->hd,
	    .q0 = (long)tp_cp_chunk(cp->zz, cp->P, cp->rank, qk) * cp->len,
	    .k0 = (long)tp_cp_chunk(cp->zz, cp->P, src, kk) * cp->len,
	    .causal = cp->causal };
}

/* Offset of chunk k's first row in sample bi, head h, in [b, L, C]. */
static size_t
at(const struct tp_ring *cp, int bi, int k, int h)
{
	return ((size_t)bi * cp->L + (size_t)k * cp->len) * cp->C +
	    (size_t)h * cp->hd;
}

/* Row statistics' offset ([b, nh, L]). */
static size_t
row(const struct tp_ring *cp, int bi, int h, int k)
{
	return ((size_t)bi * cp->nh + h) * cp->L + (size_t)k * cp->len;
}

/* One step's work on rank src's block kv: forward (dout NULL) merges
 * into out; backward adds to dq (out) and the block's dK, dV (part). */
struct pass {
	int src;
	const float *kv, *dout;
	float *out, *part;
};

static void
pair(struct tp_ring *cp, const struct pass *ps, int bi, int h, int qk,
    int kk)
{
	struct nn_attn_part p = part_of(cp, ps->src, qk, kk);
	size_t qo = at(cp, bi, qk, h), ko = at(cp, bi, kk, h);
	size_t ro = row(cp, bi, h, qk);
	const float *k = ps->kv + ko, *v = ps->kv + cp->blk + ko;

	if (ps->dout == NULL)
		cp->work += nn_attn_part_forward(ps->out + qo, cp->m + ro,
		    cp->l + ro, cp->scratch, cp->q + qo, k, v, &p);
	else
		nn_attn_part_backward(ps->out + qo, ps->part + ko,
		    ps->part + cp->blk + ko, cp->scratch, ps->dout + qo,
		    cp->lse + ro, cp->dsum + ro, cp->q + qo, k, v, &p);
}

/* Every chunk pair of every head; the transfers xs (NULL: none) move on
 * after each head. */
static int
blocks(struct tp_ring *cp, const struct pass *ps, struct tp_xfer *x0,
    struct tp_xfer *x1)
{
	for (int bi = 0; bi < cp->b; bi++)
		for (int h = 0; h < cp->nh; h++) {
			for (int qk = 0; qk < cp->nch; qk++)
				for (int kk = 0; kk < cp->nch; kk++)
					pair(cp, ps, bi, h, qk, kk);
			if (tp_xfer_progress(x0) < 0 ||
			    (x1 && tp_xfer_progress(x1) < 0))
				return failed(cp);
		}
	return 0;
}

/* A send of a block (K and V, or dK and dV) to the next rank, or a
 * receive from the previous one. */
static int
post(struct tp_ring *cp, struct tp_xfer *st, int send, float *buf, int tag)
{
	int peer = (cp->rank + (send ? 1 : cp->P - 1)) % cp->P;

	if (tp_xfer_post(st, send, peer, tag, buf,
	    2 * cp->blk * sizeof(float)) < 0)
		return failed(cp);
	return 0;
}

static int
end(struct tp_ring *cp, struct tp_xfer *st, struct tp_overlap *ov)
{
	return tp_xfer_end(st, ov) < 0 ? failed(cp) : 0;
}

static int
beside(struct tp_ring *cp, struct tp_xfer *st, struct tp_overlap *ov)
{
	return tp_xfer_end_beside(st, ov) < 0 ? failed(cp) : 0;
}

static void
mark(struct tp_ring *cp, const char *name, const char *op, size_t count,
    const struct tp_overlap *ov)
{
	if (cp->log == NULL)
		return;
	if (ov == NULL)
		tp_log_mark(cp->log, name, op, count ? "ring" : "-", count);
	else
		tp_log_mark_overlap(cp->log, name, op, "ring", count,
		    ov->hidden, ov->exposed);
}

/* Rows of chunk k of sample bi, head h: normalised, log-sum-exp kept. */
static void
finish(struct tp_ring *cp, float *out, int bi, int h, int k)
{
	size_t ro = row(cp, bi, h, k);

	nn_attn_part_finish(out + at(cp, bi, k, h), cp->lse + ro, cp->m + ro,
	    cp->l + ro, cp->len, cp->C, cp->hd);
}

/* The K/V exchange of a pass as one operation of the group: its messages
 * checked against the peers' (a rank in another pass fails, not hangs),
 * and a failure named for it, not for the group's last collective. */
static void
exchange(struct tp_ring *cp, const char *pass)
{
	char name[48];

	snprintf(name, sizeof(name), "ring attention %s", pass);
	comm_op_begin(cp->c, CP_OPCODE, name, DT_F32, (uint64_t)cp->blk);
}

static int
exchanged(struct tp_ring *cp, const struct tp_overlap *ov)
{
	comm_op_end(cp->c);
	cp->time.hidden += ov->hidden;
	cp->time.exposed += ov->exposed;
	return 0;
}

/* ---- forward ------------------------------------------------------------- */

static int
attn_fwd(void *ctx, float *out, const float *q, const float *k,
    const float *v)
{
	struct tp_ring *cp = ctx;
	size_t nrow = (size_t)cp->b * cp->nh * cp->L;
	struct tp_overlap ov = { 0, 0 };
	struct tp_xfer st;

	mark(cp, "fwd qkv", "compute", 0, NULL);
	exchange(cp, "forward");
	cp->q = q, cp->k = k, cp->v = v, cp->o = out;
	memcpy(cp->kv[0], k, cp->blk * sizeof(float));
	memcpy(cp->kv[0] + cp->blk, v, cp->blk * sizeof(float));
	memset(out, 0, cp->blk * sizeof(float));
	for (size_t i = 0; i < nrow; i++)
		cp->m[i] = -INFINITY, cp->l[i] = 0;
	for (int i = 0; i < cp->P; i++) {
		float *cur = cp->kv[i % 2], *nxt = cp->kv[(i + 1) % 2];
		struct pass ps = { (cp->rank - i + cp->P) % cp->P, cur, NULL,
		    out, NULL };

		tp_xfer_begin(&st, cp->c, cp->log, "fwd ring attention");
		comm_set_step(cp->c, "ring attention step %d", i);
		if (i < cp->P - 1 && (post(cp, &st, 0, nxt, TAG_KV) < 0 ||
		    post(cp, &st, 1, cur, TAG_KV) < 0))
			return -1;
		if (blocks(cp, &ps, &st, NULL) < 0 ||
		    end(cp, &st, &ov) < 0)
			return -1;
	}
	for (int bi = 0; bi < cp->b; bi++)
		for (int h = 0; h < cp->nh; h++)
			for (int k = 0; k < cp->nch; k++)
				finish(cp, out, bi, h, k);
	mark(cp, "fwd ring attention", "sendrecv", 2 * cp->blk * (cp->P - 1),
	    &ov);
	return exchanged(cp, &ov);
}

/* ---- backward ------------------------------------------------------------ */

/* dsum = rowsum(dout * o) per head. */
static void
row_dots(struct tp_ring *cp, const float *dout)
{
	for (int bi = 0; bi < cp->b; bi++)
		for (int h = 0; h < cp->nh; h++)
			for (int t = 0; t < cp->L; t++) {
				size_t o = ((size_t)bi * cp->L + t) * cp->C +
				    (size_t)h * cp->hd;
				double s = 0;
				for (int c = 0; c < cp->hd; c++)
					s += (double)dout[o + c] * cp->o[o + c];
				cp->dsum[row(cp, bi, h, 0) + t] = (float)s;
			}
}

/* Step i of P: the block of rank src (with K, V at hand in kv) takes this
 * rank's share of its dK, dV in part, adds the share of the ranks before
 * (ain, from the previous rank) and goes on to the next rank; the next
 * K, V block comes in meanwhile. prev: the previous step's send, still in
 * flight. */
static int
bwd_step(struct tp_ring *cp, int i, float *dq, const float *dout,
    struct tp_xfer *prev, struct tp_overlap *ov)
{
	float *cur = cp->kv[i % 2], *nxt = cp->kv[(i + 1) % 2];
	float *part = cp->part[i % 2];
	struct pass ps = { (cp->rank - i + cp->P) % cp->P, cur, dout, dq,
	    part };
	struct tp_xfer st;

	tp_xfer_begin(&st, cp->c, cp->log, "bwd ring attention");
	comm_set_step(cp->c, "ring attention backward step %d", i);
	if (i > 0 && post(cp, &st, 0, cp->ain, TAG_DKV) < 0)
		return -1;
	if (i < cp->P - 1 && (post(cp, &st, 0, nxt, TAG_KV) < 0 ||
	    post(cp, &st, 1, cur, TAG_KV) < 0))
		return -1;
	memset(part, 0, 2 * cp->blk * sizeof(float));
	if (blocks(cp, &ps, &st, prev) < 0 ||
	    end(cp, &st, ov) < 0 ||
	    beside(cp, prev, ov) < 0)
		return -1;
	if (i > 0)
		nn_add(part, cp->ain, 2 * cp->blk);
	tp_xfer_begin(prev, cp->c, cp->log, "bwd ring dK dV");
	return cp->P > 1 ? post(cp, prev, 1, part, TAG_DKV) : 0;
}

static int
attn_bwd(void *ctx, float *dq, float *dk, float *dv, const float *dout)
{
	struct tp_ring *cp = ctx;
	struct tp_overlap ov = { 0, 0 };
	struct tp_xfer prev = { .n = 0 }, home;

	mark(cp, "bwd dout", "compute", 0, NULL);
	exchange(cp, "backward");
	row_dots(cp, dout);
	memcpy(cp->kv[0], cp->k, cp->blk * sizeof(float));
	memcpy(cp->kv[0] + cp->blk, cp->v, cp->blk * sizeof(float));
	memset(dq, 0, cp->blk * sizeof(float));
	for (int i = 0; i < cp->P; i++)
		if (bwd_step(cp, i, dq, dout, &prev, &ov) < 0)
			return -1;
	/* this rank's own block, dK and dV summed over every rank (a ring of
	 * one sends nothing) */
	tp_xfer_begin(&home, cp->c, cp->log, "bwd ring dK dV");
	if (cp->P > 1 && (post(cp, &home, 0, cp->ain, TAG_DKV) < 0 ||
	    end(cp, &home, &ov) < 0 ||
	    beside(cp, &prev, &ov) < 0))
		return -1;
	memcpy(dk, cp->P > 1 ? cp->ain : cp->part[0], cp->blk * sizeof(float));
	memcpy(dv, (cp->P > 1 ? cp->ain : cp->part[0]) + cp->blk,
	    cp->blk * sizeof(float));
	mark(cp, "bwd ring attention", "sendrecv",
	    cp->P > 1 ? 2 * cp->blk * (2 * cp->P - 1) : 0, &ov);
	return exchanged(cp, &ov);
}

/* ---- setup ------------------------------------------------------------ */

int
tp_ring_new(struct tp_ring **out, struct comm *c, struct tp_log *log,
    int zigzag, int b, int s, int nh, int hd, int causal, char *err,
    size_t errlen)
{
	struct tp_ring *cp = calloc(1, sizeof(*cp));
	size_t nrow;

	if (cp == NULL)
		return cli_fail(err, errlen, "out of memory");
	cp->c = c, cp->log = log, cp->err = err, cp->errlen = errlen;
	cp->P = comm_size(c), cp->rank = comm_rank(c), cp->zz = zigzag;
	cp->nch = tp_cp_chunks(zigzag), cp->len = s / (cp->nch * cp->P);
	cp->b = cp->bmax = b, cp->L = cp->nch * cp->len, cp->nh = nh;
	cp->hd = hd;
	cp->C = nh * hd, cp->causal = causal;
	cp->blk = (size_t)b * cp->L * cp->C;
	nrow = (size_t)b * nh * cp->L;
	cp->kv[0] = malloc(10 * cp->blk * sizeof(float));
	cp->m = malloc(4 * nrow * sizeof(float));
	cp->scratch = malloc(2 * (size_t)cp->len * cp->len * sizeof(float));
	if (!cp->kv[0] || !cp->m || !cp->scratch) {
		tp_ring_free(cp);
		return cli_fail(err, errlen, "out of memory for ring attention "
		    "of %d positions", s);
	}
	cp->kv[1] = cp->kv[0] + 2 * cp->blk;
	cp->part[0] = cp->kv[1] + 2 * cp->blk;
	cp->part[1] = cp->part[0] + 2 * cp->blk;
	cp->ain = cp->part[1] + 2 * cp->blk;
	cp->l = cp->m + nrow, cp->lse = cp->l + nrow, cp->dsum = cp->lse + nrow;
	cp->own_lse = cp->lse;
	*out = cp;
	return 0;
}

void
tp_ring_free(struct tp_ring *cp)
{
	if (cp == NULL)
		return;
	free(cp->kv[0]), free(cp->m), free(cp->scratch);
	free(cp);
}

void
tp_ring_hooks(struct tp_ring *cp, struct nn_block_hooks *hk)
{
	hk->reduce = NULL;
	hk->attn_fwd = attn_fwd;
	hk->attn_bwd = attn_bwd;
	hk->ctx = cp;
}

void
tp_ring_bind(struct tp_ring *cp, int b, const float *q, const float *k,
    const float *v, const float *o, float *lse)
{
	cp->b = b;
	cp->blk = (size_t)b * cp->L * cp->C;
	cp->q = q, cp->k = k, cp->v = v, cp->o = o;
	cp->lse = lse != NULL ? lse : cp->own_lse;
}

struct tp_overlap
tp_ring_time(const struct tp_ring *cp)
{
	return cp->time;
}

uint64_t
tp_ring_work(const struct tp_ring *cp)
{
	return cp->work;
}
