/* ulysses: the Ulysses sequence-parallel attention. Ranks hold s/W
 * positions of every head; before attention an all-to-all turns
 * [b, s/W, H, hd] into [b, s, H/W, hd] (all positions of this rank's
 * heads), after it the reverse; backward the same in reverse. The rest of
 * the block runs on the local positions (nn_block_forward with the hooks
 * below); causal masks use global positions since attention sees them all. */
#ifndef COLLX_ULYSSES_H
#define COLLX_ULYSSES_H

#include <stddef.h>

#include "comm/comm.h"
#include "nn/nn.h"
#include "par/tp.h"

/* For b samples of s positions (W divides s and heads) on group c of W
 * ranks; failures of the hooks land in err. inner, when not NULL, is the
 * attention on all s positions of this rank's heads in place of lib/nn's
 * (USP: ring attention across groups; its attn_fwd/attn_bwd are called,
 * the latter setting dq, dk, dv). 0 or -1 (out of memory). */
int ulysses_new(struct ulysses **out, struct comm *c, struct tp_log *log,
    int b, int s, int heads, int hd, int causal,
    const struct nn_block_hooks *inner, char *err, size_t errlen);
void ulysses_free(struct ulysses *u);
/* The attention hooks (attn_fwd, attn_bwd) for nn_block_forward/backward. */
void ulysses_hooks(struct ulysses *u, struct nn_block_hooks *hk);

/*
 * Layout of the exchange, for W ranks, b samples, sl = s/W positions and
 * cl = c/W columns (H/W heads of hd) per rank; block j of the send buffer
 * goes to rank j, blocks bstride floats apart (several tensors share one
 * exchange at different offsets in a block).
 * s2h pack: src [b, sl, W*cl] (own positions, all heads); block j gets
 *   [b, sl, cl], the columns of rank j's heads.
 * s2h unpack: block i from rank i (its positions) into dst [b, W*sl, cl].
 * h2s pack: src [b, W*sl, cl] (all positions, own heads); block j gets
 *   rank j's positions [b, sl, cl].
 * h2s unpack: block i (rank i's heads) into columns of dst [b, sl, W*cl].
 */
void ulysses_pack_s2h(float *send, size_t bstride, const float *src, int W,
    int b, int sl, int cl);
void ulysses_unpack_s2h(float *dst, const float *recv, size_t bstride, int W,
    int b, int sl, int cl);
void ulysses_pack_h2s(float *send, size_t bstride, const float *src, int W,
    int b, int sl, int cl);
void ulysses_unpack_h2s(float *dst, const float *recv, size_t bstride, int W,
    int b, int sl, int cl);

#endif
