/* pipe: pipeline-parallel training of an nn model over a comm group:
 * rank j runs stage j, a contiguous run of layers (gpt: stage 0 also the
 * embeddings, the last stage the final LayerNorm and the tied head); the
 * global batch is cut into micro-batches that flow through the stages as
 * a pipe_sched table says, activations forward and gradients backward
 * over point-to-point messages. Gradients of all micro-batches add up and
 * are divided by the global sample count, so any world size and any
 * number of micro-batches gives single-process full-batch training up to
 * float rounding. With replicas (pipe_cfg's dp, collx-train's mesh) each
 * pipeline runs its share of the batch and each stage sums its gradients
 * with its replicas', which gives the same. Interleaved (cfg->chunks V
 * above 1), rank j runs V stages, chunks c = 0 .. V-1 being virtual stage
 * c*world + j of world*V. */
#ifndef COLLX_PIPE_H
#define COLLX_PIPE_H

#include <stddef.h>

#include "comm/comm.h"
#include "nn/nn.h"
#include "par/ckpt.h"
#include "par/dp.h"
#include "par/pipe_sched.h"
#include "par/train_data.h"

struct pipe_ft;

struct pipe_cfg {
	enum pipe_sched_kind sched;
	const struct pipe_sched *table;	/* PIPE_SCHED_FILE's (pipe_sched_file) */
	int micro;		/* M: micro-batches per step */
	long batch, steps;	/* global batch B; steps */
	int chunks;		/* V: chunks of layers per rank (interleaved;
				 * a table's v), 0 or 1: one */
	const int *first;	/* world*V + 1 layer boundaries (pipe_split):
				 * chunk c of rank j is virtual stage c*world
				 * + j */
	struct nn_optim_cfg optim;
	int trace;		/* record spans for pipe_trace_write */
	const char *ckpt_path;	/* rank 0 writes checkpoints there, or NULL
				 * (with dp: the same on every replica;
				 * replica 0's rank 0 writes) */
	long ckpt_every;	/* after every K steps and the last (0: last) */
	const struct ckpt_state *resume;	/* start from it, or NULL */
	struct comm *dp;	/* the stage's replicas (data parallel;
				 * NULL: none): each runs its train_split
				 * share of the batch, and their gradients
				 * are summed before the update */
	struct comm *tp;	/* the stage's TP group, the stage's layers
				 * sharded over it (tp_stage); NULL or of
				 * size 1: unsharded */
	struct dp_opts dpo;	/* the DP axis's sync options, collx-dp's
				 * (dp.h). ZeRO's checkpoints take the
				 * state whole */
	struct comm *cp;	/* gpt: the CP group each sequence is
				 * sharded over (cp_stage.h; NULL or of
				 * size 1: none); dp then holds the
				 * replicas' CP groups, dp index * C + cp
				 * index, all summing gradients */
	int cp_zigzag;		/* its chunks zigzag (else contiguous) */
	const struct nn_moe_ep *ep;	/* the MoE blocks' expert
					 * parallelism (par/ep.h), or NULL */
	struct pipe_ft *ft;	/* --ft on the DP axis (pipe_ft.h), or NULL */
	struct comm *mesh;	/* every rank of the mesh (rank 0 writes
				 * checkpoints; ZeRO's slices are sent to
				 * it over this group), or NULL: c */
};

/* What this rank's stage did in a step, in seconds, and the activation
 * and gradient bytes it sent and received. sched: the schedule's span,
 * from the first action to the last send's completion; wall adds the
 * batch, the loss and the update around it. */
struct pipe_stat {
	double fwd, bwd, send, recv, sched, wall;
	double recv_max;	/* the longest receive of the schedules so
				 * far (this step's and those before) */
	size_t sent, recvd;
	size_t peak_act;	/* activation bytes held at most, so far */
	double dp;		/* summing gradients over the replicas */
	size_t dp_sent;		/* bytes this rank sent doing it */
	int dp_overlap;		/* it ran beside the backward pass: */
	double dp_hidden;	/* seconds of it behind the backward */
	double dp_exposed;	/* seconds the stage waited for it */
	double tp;		/* the TP group's allreduces (within fwd, bwd) */
	size_t tp_sent;		/* bytes this rank sent in them */
	double cp;		/* the CP ring's transfers (within fwd, bwd) */
	double cp_hidden;	/* of them, beside the attention's compute */
	size_t cp_sent;		/* bytes this rank sent in them */
	size_t optim_bytes;	/* optimizer state this rank holds */
	size_t grad_bytes;	/* reduced gradients it keeps for the update */
	size_t param_bytes;	/* parameters it holds (but ZeRO-3's) */
	/* --zero 3: its gathers' and reduce-scatters' seconds, the most
	 * parameter bytes it held during the pass */
	double dp_gather, dp_rs;
	size_t params_peak;
	size_t dp_hybrid;	/* --shard-group host: sent in its groups */
};

/* One span of a stage's time line, seconds since the common start. */
struct pipe_span {
	int stage, mb, step;
	int chunk;		/* interleaved: F, B, S, R's chunk; else -1 */
	char kind;		/* 'F' forward, 'B' backward (a split one's
				 * input part), 'W' its weight part, 'S'
				 * send, 'R' recv;
				 * 'C' (step -1): the stage's clock is known
				 * to within t1 - t0 */
	double t0, t1;
};

struct pipe_result {
	struct train_step *steps;	/* cfg->steps; loss valid on rank 0 */
	struct pipe_stat *stat;		/* cfg->steps, this rank's */
	/* on rank 0, per stage [world]: */
	double *bubble;			/* pipe_stat_bubble, all steps */
	size_t *peak_act;		/* peak activation bytes */
	double bubble_mean;		/* over the stages */
	struct pipe_span *spans;	/* rank 0, every stage, when cfg->trace */
	size_t nspans;
	size_t ckpt_peak;	/* --zero 3: parameter bytes held at once
				 * while checkpointing (0: none written) */
};

/* Called on every rank at the end of every step (s->loss: rank 0 only). */
typedef void (*pipe_step_fn)(void *ctx, const struct train_step *s,
    const struct pipe_stat *st);

/* The bubble a stage measured: the share of the schedule's span outside
 * its forward and backward passes, spent waiting for and sending
 * activations and gradients (0 for no span). The update and the rest of
 * the step around the schedule are no part of it, as in the theory. */
double pipe_stat_bubble(const struct pipe_stat *st);

/* Layers of m (max(layers, 1)). */
int pipe_layers(const struct nn_model *m);
/* Stage boundaries first[0..world]: stage j runs layers first[j] ..
 * first[j+1]-1. split "L1,L2,..." gives the layers per stage (must sum to
 * the layers, each >= 1); NULL balances parameter counts. -1 with the
 * reason: a usage error. */
int pipe_split(const struct nn_model *m, int world, const char *split,
    int *first, char *err, size_t errlen);
/* The balanced split of L layers whose running parameter counts are
 * cum[0..L] (cum[0] = 0): stage j ends where the count comes nearest j+1
 * world-ths of cum[L], keeping a layer per stage (1 <= world <= L). The
 * plan prices stages as pipe_split makes them by calling it too. */
void pipe_split_balanced(const double *cum, int L, int world, int *first);

/* Trains m up to step cfg->steps (from cfg->resume's step, or 0); rank 0
 * then holds the whole trained model in m->params. res->steps and
 * res->stat are indexed by step (those before the first run are zero);
 * checkpoints gather every stage's parameters and optimizer state to rank
 * 0. 0, or -1 with the reason in err and *kind set. */
int pipe_train(struct nn_model *m, const struct train_data *d,
    struct comm *c, const struct pipe_cfg *cfg, pipe_step_fn fn, void *ctx,
    struct pipe_result *res, enum train_err *kind, char *err, size_t errlen);
void pipe_result_free(struct pipe_result *r);

/* Chrome trace-event JSON of res->spans: one track per stage with
 * forward, backward, send, recv and (the gaps) idle spans; written
 * atomically. */
int pipe_trace_write(const char *path, const struct pipe_result *res,
    int world, char *err, size_t errlen);

#endif
