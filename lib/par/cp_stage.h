/* cp_stage: context parallelism in a pipeline stage (collx-train --cp):
 * the C ranks of a CP group each hold their positions of every sequence
 * of a micro-batch (contiguous: chunk r of C; zigzag: chunks r and
 * 2C-1-r of 2C), and run them through every layer of the stage. All but
 * attention works position by position; attention is cp_ring's ring over
 * the group, causal by global positions, and the gpt's position
 * embedding takes each position's own row. The loss sums this rank's
 * positions over the whole sequence's length, so the DP axis's sum over
 * the dp x cp ranks gives the whole sequence's mean, and every weight
 * gradient (a position's share added on the rank holding it, dK and dV
 * brought home by the ring) sums there too. An MoE block's experts run
 * each rank's tokens, routed as one rank holding the whole micro-batch
 * would route them (capacity counts its tokens). */
#ifndef COLLX_CP_STAGE_H
#define COLLX_CP_STAGE_H

#include <stddef.h>
#include <stdint.h>

#include "comm/comm.h"
#include "nn/nn.h"
#include "par/tp_xfer.h"

struct tp_stage;
struct pipe_slot;

/* Before any communication: whether a gpt of seq positions shards over C
 * ranks (zigzag: 2C chunks); non-gpt models do not take C above 1. 0, or
 * -1 with the numbers (bad input, exit 3). */
int cp_stage_check(const struct nn_model *m, int C, int zigzag, char *err,
    size_t errlen);

/* ts's ring over group c (zigzag or contiguous), set up while ts is
 * planned (ts->seq the whole sequence's positions): ts->seq becomes this
 * rank's, ts->gseq the whole's. 0, or -1 (out of memory). */
int cp_stage_new(struct tp_stage *ts, struct comm *c, int zigzag,
    char *err, size_t errlen);
void cp_stage_free(struct tp_stage *ts);

/* The block hooks of a stage with a ring: hk's TP sums (none when T is
 * 1) and the ring's attention; bind: where the block of n samples whose
 * forward or backward comes next keeps its values (a). */
const struct nn_block_hooks *cp_stage_hooks(struct tp_stage *ts,
    struct nn_block_hooks *hk);
void cp_stage_bind(struct tp_stage *ts, const struct nn_block_acts *a, int n);

/* The routing of the stage's MoE blocks when capacity counts the whole
 * micro-batch's tokens over the group (NULL: no ring, or no experts). */
const struct nn_moe_router *cp_stage_router(const struct tp_stage *ts);

/* The first stage's embeddings of sl's tokens at their global positions,
 * into sl->f; backward, dy's share added to the gradients of wte and of
 * this rank's rows of wpe. */
void cp_stage_embed(struct tp_stage *ts, struct pipe_slot *sl);
void cp_stage_embed_back(struct tp_stage *ts, struct pipe_slot *sl,
    const float *dy);

/* One sample's tokens: this rank's positions of the whole sequence's src
 * (ts->gseq) into dst (ts->seq); the whole when the stage has no ring. */
void cp_stage_tokens(const struct tp_stage *ts, int32_t *dst,
    const int32_t *src);

/* The ring's transfer seconds so far (zero without a ring). */
struct tp_overlap cp_stage_time(const struct tp_stage *ts);

#endif
