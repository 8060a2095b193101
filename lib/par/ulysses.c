/* ulysses: attention on all positions of this rank's heads, reached by an
 * all-to-all from the sequence-sharded q, k, v and back (DeepSpeed
 * Ulysses); lib/nn's attention kernels do the math. */
#include <stdlib.h>
#include <string.h>

#include "cli/util.h"
#include "comm/coll.h"
#include "par/ulysses.h"

struct ulysses {
	struct comm *c;
	struct tp_log *log;
	int W, b, s, sl, hl, hd, cl, causal;
	size_t blk;			/* floats of one tensor's block */
	float *q, *k, *v, *o;		/* [b, s, cl]: all positions, own heads */
	float *dq, *dk, *dv, *dout;
	float *att;			/* [b, hl, s, s] */
	float *dsm;			/* s*s */
	float *send, *recv;		/* W blocks of up to 3 tensors */
	const struct nn_block_hooks *inner;	/* USP: ring attention */
	char *err;
	size_t errlen;
};

void
ulysses_pack_s2h(float *send, size_t bstride, const float *src, int W,
    int b, int sl, int cl)
{
	for (int j = 0; j < W; j++)
		for (size_t r = 0; r < (size_t)b * sl; r++)
			memcpy(send + j * bstride + r * cl,
			    src + (r * W + j) * cl, (size_t)cl * sizeof(float));
}

void
ulysses_unpack_s2h(float *dst, const float *recv, size_t bstride, int W,
    int b, int sl, int cl)
{
	for (int i = 0; i < W; i++)
		for (int bi = 0; bi < b; bi++)
			memcpy(dst + ((size_t)bi * W * sl + (size_t)i * sl) * cl,
			    recv + i * bstride + (size_t)bi * sl * cl,
			    (size_t)sl * cl * sizeof(float));
}

void
ulysses_pack_h2s(float *send, size_t bstride, const float *src, int W,
    int b, int sl, int cl)
{
	for (int j = 0; j < W; j++)
		for (int bi = 0; bi < b; bi++)
			memcpy(send + j * bstride + (size_t)bi * sl * cl,
			    src + ((size_t)bi * W * sl + (size_t)j * sl) * cl,
			    (size_t)sl * cl * sizeof(float));
}

void
ulysses_unpack_h2s(float *dst, const float *recv, size_t bstride, int W,
    int b, int sl, int cl)
{
	for (int i = 0; i < W; i++)
		for (size_t r = 0; r < (size_t)b * sl; r++)
			memcpy(dst + (r * W + i) * cl, recv + i * bstride + r * cl,
			    (size_t)cl * sizeof(float));
}

static void
mark(struct ulysses *u, const char *name, const char *op, size_t count)
{
	if (u->log)
		tp_log_mark(u->log, name, op, count ? "pairwise" : "-", count);
}

/* All-to-all of blocks of count floats, send to recv (the timing row
 * counts the whole buffer, W blocks, as the timing columns want). */
static int
exchange(struct ulysses *u, size_t count, const char *before,
    const char *name)
{
	mark(u, before, "compute", 0);
	if (coll_alltoall(u->c, u->send, u->recv, count, DT_F32,
	    COLL_PAIRWISE) < 0)
		return cli_fail(u->err, u->errlen, "%s", comm_error(u->c));
	mark(u, name, "alltoall", count * u->W);
	return 0;
}

static int
attn_fwd(void *ctx, float *out, const float *q, const float *k,
    const float *v)
{
	struct ulysses *u = ctx;
	size_t bs = 3 * u->blk;

	ulysses_pack_s2h(u->send, bs, q, u->W, u->b, u->sl, u->cl);
	ulysses_pack_s2h(u->send + u->blk, bs, k, u->W, u->b, u->sl, u->cl);
	ulysses_pack_s2h(u->send + 2 * u->blk, bs, v, u->W, u->b, u->sl, u->cl);
	if (exchange(u, bs, "fwd ln1+qkv", "fwd alltoall qkv") < 0)
		return -1;
	ulysses_unpack_s2h(u->q, u->recv, bs, u->W, u->b, u->sl, u->cl);
	ulysses_unpack_s2h(u->k, u->recv + u->blk, bs, u->W, u->b, u->sl, u->cl);
	ulysses_unpack_s2h(u->v, u->recv + 2 * u->blk, bs, u->W, u->b, u->sl,
	    u->cl);
	if (u->inner) {
		if (u->inner->attn_fwd(u->inner->ctx, u->o, u->q, u->k,
		    u->v) < 0)
			return -1;
	} else
		nn_attention_forward(u->o, u->att, u->q, u->k, u->v, u->b, u->s,
		    u->hl, u->hd, u->causal);
	ulysses_pack_h2s(u->send, u->blk, u->o, u->W, u->b, u->sl, u->cl);
	if (exchange(u, u->blk, "fwd attention", "fwd alltoall out") < 0)
		return -1;
	ulysses_unpack_h2s(out, u->recv, u->blk, u->W, u->b, u->sl, u->cl);
	return 0;
}

static int
attn_bwd(void *ctx, float *dq, float *dk, float *dv, const float *dout)
{
	struct ulysses *u = ctx;
	size_t bs = 3 * u->blk;

	ulysses_pack_s2h(u->send, u->blk, dout, u->W, u->b, u->sl, u->cl);
	if (exchange(u, u->blk, "bwd mlp+o", "bwd alltoall dout") < 0)
		return -1;
	ulysses_unpack_s2h(u->dout, u->recv, u->blk, u->W, u->b, u->sl, u->cl);
	memset(u->dq, 0, 3 * u->W * u->blk * sizeof(float));
	if (u->inner) {
		if (u->inner->attn_bwd(u->inner->ctx, u->dq, u->dk, u->dv,
		    u->dout) < 0)
			return -1;
	} else
		nn_attention_backward(u->dq, u->dk, u->dv, u->dsm, u->dout,
		    u->att, u->q, u->k, u->v, u->b, u->s, u->hl, u->hd,
		    u->causal);
	ulysses_pack_h2s(u->send, bs, u->dq, u->W, u->b, u->sl, u->cl);
	ulysses_pack_h2s(u->send + u->blk, bs, u->dk, u->W, u->b, u->sl, u->cl);
	ulysses_pack_h2s(u->send + 2 * u->blk, bs, u->dv, u->W, u->b, u->sl,
	    u->cl);
	if (exchange(u, bs, "bwd attention", "bwd alltoall dqkv") < 0)
		return -1;
	ulysses_unpack_h2s(dq, u->recv, bs, u->W, u->b, u->sl, u->cl);
	ulysses_unpack_h2s(dk, u->recv + u->blk, bs, u->W, u->b, u->sl, u->cl);
	ulysses_unpack_h2s(dv, u->recv + 2 * u->blk, bs, u->W, u->b, u->sl,
	    u->cl);
	return 0;
}

int
ulysses_new(struct ulysses **out, struct comm *c, struct tp_log *log,
    int b, int s, int heads, int hd, int causal,
    const struct nn_block_hooks *inner, char *err, size_t errlen)
{
	struct ulysses *u = calloc(1, sizeof(*u));
	size_t all, sq = inner ? 1 : (size_t)s * s;	/* inner: no s x s */

	if (u == NULL)
		return cli_fail(err, errlen, "out of memory");
	u->c = c, u->log = log, u->err = err, u->errlen = errlen;
	u->W = comm_size(c), u->b = b, u->s = s, u->sl = s / u->W;
	u->hl = heads / u->W, u->hd = hd, u->cl = u->hl * hd;
	u->causal = causal, u->inner = inner;
	u->blk = (size_t)b * u->sl * u->cl;
	all = u->W * u->blk;		/* [b, s, cl] */
	u->q = malloc(8 * all * sizeof(float));
	u->att = malloc((size_t)b * u->hl * sq * sizeof(float));
	u->dsm = malloc(sq * sizeof(float));
	u->send = malloc(3 * all * sizeof(float));
	u->recv = malloc(3 * all * sizeof(float));
	if (!u->q || !u->att || !u->dsm || !u->send || !u->recv) {
		ulysses_free(u);
		return cli_fail(err, errlen, "out of memory for attention of "
		    "%d positions", s);
	}
	u->k = u->q + all, u->v = u->k + all, u->o = u->v + all;
	u->dq = u->o + all, u->dk = u->dq + all, u->dv = u->dk + all;
	u->dout = u->dv + all;
	*out = u;
	return 0;
}

void
ulysses_free(struct ulysses *u)
{
	if (u == NULL)
		return;
	free(u->q), free(u->att), free(u->dsm), free(u->send), free(u->recv);
	free(u);
}

void
ulysses_hooks(struct ulysses *u, struct nn_block_hooks *hk)
{
	hk->reduce = NULL;
	hk->attn_fwd = attn_fwd;
	hk->attn_bwd = attn_bwd;
	hk->ctx = u;
}
