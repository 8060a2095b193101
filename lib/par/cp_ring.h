/* cp_ring: ring attention (context parallelism). Each of P ranks holds
 * its positions of the sequence for every head; K and V blocks travel
 * around the ring in P-1 steps, the next one sent (nonblocking) while the
 * local queries attend to the block at hand, and the partial results are
 * merged by log-sum-exp. Backward, dK and dV travel with their blocks and
 * come home in one more step. The contiguous layout gives rank r chunk r
 * of P; zigzag cuts 2P chunks and gives rank r chunks r and 2P-1-r, so
 * that causal attention work is the same on every rank. The rest of the
 * block runs on the local positions (nn_block_forward with the hooks). */
#ifndef COLLX_CP_RING_H
#define COLLX_CP_RING_H

#include <stddef.h>
#include <stdint.h>

#include "comm/comm.h"
#include "nn/nn.h"
#include "par/tp.h"
#include "par/tp_xfer.h"

/* ---- which positions a rank holds --------------------------------------- */

/* Chunks a rank holds (1, zigzag 2), of s / (chunks * P) positions each. */
int tp_cp_chunks(int zigzag);
/* The sequence index of rank r's chunk k among chunks * P. */
int tp_cp_chunk(int zigzag, int P, int r, int k);
/* dst [b, sl, w] = rank r's positions of src [b, s, w], and back
 * (tp_cp_seq_put writes rank r's positions of dst from src). */
void tp_cp_seq_take(float *dst, const float *src, int zigzag, int P, int r,
    int b, int s, int w);
void tp_cp_seq_put(float *dst, const float *src, int zigzag, int P, int r,
    int b, int s, int w);

/* ---- the attention ------------------------------------------------------- */

struct tp_ring;

/* For b samples of s positions (chunks * P divides s) and nh heads of hd
 * on group c (P ranks); failures land in err. 0 or -1 (out of memory). */
int tp_ring_new(struct tp_ring **out, struct comm *c, struct tp_log *log,
    int zigzag, int b, int s, int nh, int hd, int causal, char *err,
    size_t errlen);
void tp_ring_free(struct tp_ring *cp);
/* The attention hooks (attn_fwd, attn_bwd) for nn_block_forward/backward. */
void tp_ring_hooks(struct tp_ring *cp, struct nn_block_hooks *hk);
/* A pipeline stage's ring (lib/par/cp_stage.c) runs many blocks and
 * micro-batches before their backwards: before each block's forward or
 * backward it says where that block's b samples (b at most tp_ring_new's)
 * keep q, k, v, the attention's output o and its log-sum-exp lse
 * ([b, nh, L] floats; NULL: the ring's own place, kept for one block). */
void tp_ring_bind(struct tp_ring *cp, int b, const float *q, const float *k,
    const float *v, const float *o, float *lse);
/* Seconds the K/V transfers ran beside the blocks' compute (hidden) and
 * alone after it (exposed), forward and backward, so far. */
struct tp_overlap tp_ring_time(const struct tp_ring *cp);
/* Query-key pairs this rank's attention has computed so far, forward (the
 * attention work, counted rather than timed). */
uint64_t tp_ring_work(const struct tp_ring *cp);

#endif
