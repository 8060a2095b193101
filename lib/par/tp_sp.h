/* tp_sp: the block with Megatron's weight shards (q, k, v and fc1 by
 * output rows, o and fc2 by input columns) run around collective matmuls:
 * each allgather is followed by the sharded matmuls of its rows, each
 * reduce-scatter preceded by the sharded matmul of its partial sums.
 * Sequence parallelism (mode sp): LayerNorm, residual and biases on this
 * rank's s/W positions; the allgather before q/k/v and fc1 and the
 * reduce-scatter after o and fc2 (backward: their transposes). Tensor
 * parallelism (mode tp with --overlap ring): every position held whole,
 * each allreduce a reduce-scatter then an allgather. With overlap each
 * collective is cut into W ring steps: a chunk of the sequence travels to
 * the next rank while the matmul of another chunk computes, the transfers
 * on a communication thread (started by tp_sp_new; the group is its
 * while a collective runs). */
#ifndef COLLX_TP_SP_H
#define COLLX_TP_SP_H

#include <stddef.h>

#include "comm/comm.h"
#include "nn/nn.h"
#include "par/tp.h"

struct tp_sp;

/* For m's shards (m->shards = W = comm_size(c)), b samples of s positions
 * (W divides s); seq: sequence parallel (else every position whole);
 * overlap: the ring decomposition (else one collective each). Failures
 * land in err. 0 or -1 (out of memory). */
int tp_sp_new(struct tp_sp **out, struct comm *c, struct tp_log *log,
    const struct tp_model *m, int b, int s, int seq, int overlap, char *err,
    size_t errlen);
void tp_sp_free(struct tp_sp *sp);
/* y = block(x) on the positions held ([b, s/W, d], or [b, s, d]). 0 or -1
 * (communication failed). */
int tp_sp_forward(struct tp_sp *sp, float *y, const struct nn_block_w *w,
    const float *x);
/* After tp_sp_forward on the same x: dx = the input gradient, g += this
 * rank's weight gradients (sequence parallel: the whole LayerNorm and
 * bias gradients summed over the ranks). 0 or -1. */
int tp_sp_backward(struct tp_sp *sp, float *dx, const struct nn_block_w *g,
    const float *dy, const struct nn_block_w *w, const float *x);

#endif
