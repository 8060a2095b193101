/* tp_stage: a pipeline stage, the one every pipeline run drives
 * (par/pipe_stage.c), sharded over a tensor-parallel (TP) group or, with
 * none or a group of one, unsharded and with no communication. The
 * stage's layers of an nn model (gpt blocks with the embeddings on the
 * first stage and the final LayerNorm and tied head on the last; block
 * stacks; mlp stacks of any widths) sharded over
 * a TP group as Megatron-LM does, with collx-tp's layers (par/tp.h): a
 * block's attention by heads (q, k, v column-parallel, o row-parallel) and
 * its mlp, and each layer of an mlp stack, fc1 column-parallel and fc2
 * row-parallel. Megatron's f (identity forward, allreduce of the input
 * gradient backward) stands before each column-parallel pair and g
 * (allreduce forward, identity backward) after each row-parallel one, so
 * every rank of the group holds the whole activations between layers.
 *
 * Replicated on every rank of the group: LayerNorms, the biases of the
 * row-parallel layers (added once, after the sum), and the gpt's wte, wpe
 * and final LayerNorm. The tied embedding and head are replicated rather
 * than vocabulary-parallel: collx's vocabularies are small (a byte-level
 * vocabulary of 256 makes a d_model 256 GPT's head a twelfth of one
 * block's weights, so sharding it saves little), and a replicated
 * tensor's gradient is computed from whole, identical activations and
 * gradients (g's and f's sums come out bit-identical on every rank), so
 * its gradient is bit-identical on every TP rank without any
 * communication (test_tp_stage checks it); a vocabulary-parallel head
 * would need a parallel cross-entropy, two more allreduces per
 * micro-batch.
 *
 * Every rank of the group runs every micro-batch: the same input, the same
 * output and input gradient, the same loss (so TP rank t of one stage
 * can exchange activations with TP rank t of the next). What it sends:
 * per block and micro-batch of n samples four allreduces of n * seq *
 * d_model floats (g after attention and mlp forward, f before them
 * backward); per mlp layer one of n * out forward and one of n * in
 * backward (none for the first stage's input gradient, when not asked).
 */
#ifndef COLLX_TP_STAGE_H
#define COLLX_TP_STAGE_H

#include <stddef.h>
#include <stdint.h>

#include "comm/comm.h"
#include "nn/nn.h"
#include "par/tp.h"

/* tp_stage's done hook: the group is about to sum (no layer). */
#define TP_STAGE_SUMMING (-2)

/* A micro-batch's activations: par/pipe_int.h's, the pipeline runner's. */
struct pipe_slot;

/* A tensor this rank holds: its split (TP_WHOLE: replicated), whole shape,
 * and this rank's floats at p.off in the stage's params and grads. */
struct tp_stage_tensor {
	char name[NN_NAME_MAX];	/* the model's name, "layers.2.attn.q.weight" */
	struct tp_param p;
};

struct tp_stage {
	struct comm *c;		/* the TP group; NULL: none */
	int rank, T;		/* index in the group, its size (1: none) */
	struct nn_dims d;
	int j, w, l0, l1, gpt, first, last;
	int seq, nmax;
	int split;		/* backward in two parts (tp_stage_weight) */
	size_t in_w, out_w;	/* floats per sample at the stage's ends */
	/* This rank's parameters and their gradients, contiguous: the layers'
	 * shards and replicated tensors, then the gpt's (wte, wpe, lnf.*). */
	float *params, *grads;
	size_t nlocal;
	int placed;		/* params, grads: tp_stage_place's */
	struct tp_stage_tensor *ten;
	size_t nten;
	struct tp_model *lay;	/* l1 - l0 layers: m->w, m->g point into
				 * params and grads */
	float *wte, *wpe, *lnf_w, *lnf_b, *dwte, *dwpe, *dlnf_w, *dlnf_b;
	/* Activations: slots for the micro-batches in flight, layer k's
	 * output at off[k] per sample, then its saved values. */
	size_t *off;
	size_t slot_cap;
	struct pipe_slot *slot;
	int nslot, maxslot;
	size_t live, peak;	/* activation bytes */
	float *gb[4];		/* gradient ping-pong, two send buffers */
	/* Told as this rank's gradients of a part of the stage are final
	 * in tp_stage_backward (NULL: none): done(done_ctx, l) after layer
	 * l's (the model's index), with -1 after the loss's (head, final
	 * LayerNorm) and the model's layer count after the embeddings'; in
	 * a split backward, after each layer's weight part in
	 * tp_stage_weight instead. done(done_ctx, TP_STAGE_SUMMING) comes
	 * before each of the group's sums, which must then have the links
	 * to themselves. Set for a step's last backward: the DP axis
	 * overlaps its sums with it. */
	void (*done)(void *ctx, int layer);
	void *done_ctx;
	float *scratch, *dlogits, *whole;
	double coll_s;		/* seconds in the group's sums, so far */
	/* Called after each sum with its start and end (cli_now), or NULL:
	 * a caller's trace. */
	void (*on_sum)(void *ctx, double t0, double t1);
	void *on_sum_ctx;
	/* ZeRO-3 on the DP axis (par/pipe_dp_fsdp.c), or NULL: use(use_ctx,
	 * l, backward) before each use of layer l's weights (the model's
	 * index; -1: a gpt's embeddings, final LayerNorm and head), and with
	 * TP_STAGE_SUMMING before each of the group's sums. */
	void (*use)(void *ctx, int layer, int backward);
	void *use_ctx;
	/* A model with experts: the step's statistics of this stage's MoE
	 * blocks so far, laid out as nn_model_moe_stats' for the whole
	 * model (others' blocks 0); the caller zeroes them each step. */
	double *moe;
	size_t nmoe;
	/* With an auxiliary loss (gpipe): the step's sums of p_e so far,
	 * and each MoE block's d/dp_e, which its backward takes (both laid
	 * out as moe; pipe_moe.c's). */
	double *moe_psum;
	float *moe_daux;
	/* Expert parallelism (par/ep.h): the MoE blocks' experts run on
	 * the ranks of an EP group, or NULL: all of them here. */
	const struct nn_moe_ep *ep;
	char *err;		/* a failure's reason (a TP collective) */
	size_t errlen;
	/* Context parallelism (par/cp_stage.h; NULL: none): seq is then
	 * this rank's positions of each sequence, gseq the whole's (seq
	 * without). */
	struct cp_stage *cp;
	int gseq;
	/* Unsplit, the input part first (tp_stage_early): the backward
	 * leaves the weight part to tp_stage_weight, the output gradients
	 * it reads kept in esave (one micro-batch's at a time). */
	int early;
	float *esave;
};

/*
 * Before any communication: whether a TP group of T ranks can shard
 * layers [l0, l1) of m: the heads and the feed-forward width of a block
 * (gpt or block), each mlp layer's hidden width, divisible by T. 0, or -1
 * with the numbers in the message (bad input, exit 3).
 */
int tp_stage_check(const struct nn_model *m, int l0, int l1, int T,
    char *err, size_t errlen);

/*
 * Stage j of w holding layers [l0, l1) of the whole model m, sharded over
 * the TP group c (NULL or of size 1: no TP); seq: rows per sample (block,
 * gpt; mlp 1), nmax the largest micro-batch, maxslot the most slots held
 * at once, split: a backward in two parts (tp_stage_weight).
 * Takes this rank's shards of m's parameters (the stage keeps no pointer
 * to m). err must outlive the stage: later failures (a TP collective's)
 * land there. 0, or -1: bad sizes (tp_stage_check's reasons) or out of
 * memory.
 */
int tp_stage_init(struct tp_stage *ts, const struct nn_model *m,
    struct comm *c, int j, int w, int l0, int l1, int seq, int nmax,
    int maxslot, int split, char *err, size_t errlen);
/* As tp_stage_init, but the stage has no parameters or gradients until
 * tp_stage_place gives it the caller's (ts->nlocal floats each, outliving
 * the stage: a rank's stages in one vector, each its range), where the
 * caller puts its shards (tp_stage_take) and zero gradients: so they are
 * written once, not made by the stage and copied over. */
int tp_stage_plan(struct tp_stage *ts, const struct nn_model *m,
    struct comm *c, int j, int w, int l0, int l1, int seq, int nmax,
    int maxslot, int split, char *err, size_t errlen);
/* tp_stage_plan for a gpt whose sequences are sharded over the CP group
 * cp (contiguous, or zigzag), its attention a ring over it (cp_stage);
 * cp NULL or of size 1: tp_stage_plan. */
int tp_stage_plan_cp(struct tp_stage *ts, const struct nn_model *m,
    struct comm *c, struct comm *cp, int zigzag, int j, int w, int l0,
    int l1, int seq, int nmax, int maxslot, int split, char *err,
    size_t errlen);
void tp_stage_free(struct tp_stage *ts);
/* n floats (zeroed if zero) on a 64-byte cache line, as every vector a
 * stage's matrix products read or write (parameters, gradients, slots,
 * scratch): malloc's placement moved the step's CPU time by up to 5%
 * from one build to the next; NULL when out of memory (free() frees). */
float *tp_stage_vec(size_t n, int zero);
/* The same on transparent huge pages where n floats fill one (a hint:
 * small pages where the kernel has none): a stage's parameters and
 * gradients, which every micro-batch's products stream through. */
float *tp_stage_vec_huge(size_t n, int zero);
void tp_stage_place(struct tp_stage *ts, float *params, float *grads);
/* Before placing: of the MoE blocks' experts, the stage holds only
 * [e0, e0 + n) (expert parallelism, divided; par/ep.h), the others left
 * out of its layout and tensors. 0, or -1 out of memory. */
int tp_stage_keep_experts(struct tp_stage *ts, const struct nn_model *m,
    int e0, int n);
/*
 * Between this rank's layout (ts->nlocal floats, as ts->params) and the
 * whole model's (m->nparams floats, as m->params) of the stage's tensors:
 * of the parameters, or anything laid out as they are (gradients, an
 * optimizer's moments). tp_stage_take copies this rank's shards of whole
 * into mine (a checkpoint's model or moments, made under any mesh, m of
 * the same sizes as init's). tp_stage_gather, collective over the group,
 * puts the whole tensors of every rank's mine into out on TP index 0
 * (m and out may be NULL on the others); 0, or -1 when the group failed.
 */
void tp_stage_take(const struct tp_stage *ts, const struct nn_model *m,
    const float *whole, float *mine);
int tp_stage_gather(struct tp_stage *ts, const float *mine,
    const struct nn_model *m, float *out);
void tp_stage_zero_grad(struct tp_stage *ts);

/* A free slot for n samples, counted as live (NULL: out of memory); its
 * release; where a received activation goes in it (n * in_w floats). */
struct pipe_slot *tp_stage_acquire(struct tp_stage *ts, int n);
void tp_stage_release(struct tp_stage *ts, struct pipe_slot *sl);
float *tp_stage_input(struct tp_stage *ts, struct pipe_slot *sl);
/* Forward of the micro-batch in sl: the stage output (n * out_w floats,
 * in sl), and on the last stage the loss sum added to *loss. Backward: dy
 * the gradient at the output (ignored on the last stage, which starts
 * from the loss), dx receives the gradient at the stage input (NULL on
 * stage 0); gradients add into grads; dy may be ts->gb[0] or [1], dx one
 * of ts->gb[2], [3] or the caller's. On every rank of the group; NULL or
 * -1 when a TP collective failed (the reason in the stage's err). */
const float *tp_stage_forward(struct tp_stage *ts, struct pipe_slot *sl,
    double *loss);
int tp_stage_backward(struct tp_stage *ts, struct pipe_slot *sl, float *dy,
    float *dx);
/* The layers' weight gradients of a micro-batch whose split backward
 * has run, with no communication (its input part ran the sums); it must
 * run before the slot is released. */
void tp_stage_weight(struct tp_stage *ts, struct pipe_slot *sl);
/* An unsplit stage of f32 mlp layers but the first: its backwards in
 * two parts from now on, tp_stage_backward the input gradient's,
 * tp_stage_weight (before the next backward) the weight gradients',
 * which the caller runs once it has sent dx upstream. Bits as unsplit. 1
 * when it does so, 0 when this stage cannot or has no memory for it. */
int tp_stage_early(struct tp_stage *ts);

#endif
