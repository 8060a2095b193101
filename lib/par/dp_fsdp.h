/* dp_fsdp: ZeRO stage 3, fully sharded data parallelism, over the units
 * of a flat vector (a model's layers). The scheme: dp_fsdp.c's comment. */
#ifndef COLLX_DP_FSDP_H
#define COLLX_DP_FSDP_H

#include <stddef.h>
#include <stdint.h>

#include "comm/comm.h"
#include "nn/nn.h"
#include "par/dp_sync.h"

/* What a pass does, in its order: a weight use (nn_use_fn's layer and
 * backward) or a finished backward stage (nn_grad_fn's); unit: the unit a
 * use needs. */
enum { DP_FSDP_USE, DP_FSDP_GRAD };
struct dp_fsdp_event {
	int kind, layer, backward, stage, unit;
};

/* A model's units (a layer each; a gpt's wte, wpe and final LayerNorm
 * one more, the last), the backward stage after which each unit's
 * gradients are final, and its passes' events, all malloc'd. -1 with the
 * reason in err. */
struct dp_fsdp_plan {
	struct dp_range *unit;
	int nunit;
	int *final;			/* per unit: its last backward stage */
	struct dp_fsdp_event *ev;
	int nev;
};
int dp_fsdp_plan_model(struct dp_fsdp_plan *p, const struct nn_model *m,
    char *err, size_t errlen);
void dp_fsdp_plan_free(struct dp_fsdp_plan *p);

/* Its figures: the seconds the communication thread spent gathering and
 * reduce-scattering this step, those the pass waited for a gather, and
 * those waited for the rest after the pass. */
struct dp_fsdp_time {
	double gather, reduce_scatter, wait, tail;
};

struct dp_fsdp;
/* new: over c (its sums through w, algo where the collective has it) with
 * plan p (copied), prefetch K, reshard (after forward), on the vectors
 * params and grads (whole-sized; what this rank does not hold is given
 * back to the kernel) and the optimizers opt (p->nunit, remade for this
 * rank's slices); NULL with the reason in err. begin: a step starts;
 * use and grad: the nn_use_fn and nn_grad_fn of its pass (ctx the
 * dp_fsdp); replay: the pass's events not yet seen, without computing
 * (a rank without samples, a pass that stopped); wait: the step's communication done (-1: a collective failed,
 * comm_error(c) set; or the pass strayed from the plan, the reason in
 * err); step: the optimizers on the slices; gather_all: every unit whole
 * (outputs, the parameter checksum; new leaves them whole too);
 * release_all: back to the slices; peak: the most parameter bytes held at
 * once during passes (from begin to wait). */
struct dp_fsdp *dp_fsdp_new(struct comm *c, struct dp_wire *w,
    enum coll_algo algo, const struct dp_fsdp_plan *p, int prefetch,
    int reshard, float *params, float *grads, struct nn_optim *opt,
    const struct nn_optim_cfg *oc, char *err, size_t errlen);
/* Hybrid sharding: c of dp_fsdp_new is this host's ranks; rep, the ranks
 * of the other hosts that hold the same slices, sums each reduced slice
 * after its reduce-scatter; owner[q], the rank of the whole job that
 * writes slice q to checkpoints, me this rank's (owner copied). */
void dp_fsdp_hybrid(struct dp_fsdp *f, struct comm *rep, const int *owner,
    int me);
/* Hybrid sharding's groups over c: *shard this host's ranks, *rep the
 * ranks of every host with this one's place in its host; (*owner)[q]
 * (malloc'd, the caller frees it): the first host's q-th rank in c.
 * 0; -1 with the reason in err; -2 when hosts hold different rank
 * counts (bad input), the numbers in err. */
int dp_fsdp_groups(struct comm *c, struct comm **shard, struct comm **rep,
    int **owner, char *err, size_t errlen);
/* The checkpoint pieces of the state (dp_zero_pieces's, ranks of the
 * whole job; holders: every rank lists its own slices as its own). */
size_t dp_fsdp_pieces(struct dp_fsdp *f, int holders, struct ckpt_piece *p);
/* Bytes sent in the groups of the shards and replicas so far. */
uint64_t dp_fsdp_sent(const struct dp_fsdp *f);
void dp_fsdp_begin(struct dp_fsdp *f);
void dp_fsdp_use(void *f, int layer, int backward);
void dp_fsdp_grad(void *f, int stage);
void dp_fsdp_replay(struct dp_fsdp *f);
/* replay up to a gpt's head (its second weight use of the embeddings'
 * unit), where a pass sums its experts' counts: a rank without samples
 * joins that sum there. */
void dp_fsdp_replay_forward(struct dp_fsdp *f);
/* Waits for the jobs posted so far (before the main thread uses links
 * the group shares: a pipeline's messages, a TP group's sums), the time
 * counted as waited for gathers. */
void dp_fsdp_drain(struct dp_fsdp *f);
int dp_fsdp_wait(struct dp_fsdp *f, struct dp_fsdp_time *t, char *err,
    size_t errlen);
void dp_fsdp_step(struct dp_fsdp *f, float scale);
int dp_fsdp_gather_all(struct dp_fsdp *f);
void dp_fsdp_release_all(struct dp_fsdp *f);
size_t dp_fsdp_peak(const struct dp_fsdp *f);
/* The parameter bytes this rank holds now (its slices and the units
 * gathered whole). */
size_t dp_fsdp_held(const struct dp_fsdp *f);
/* Job j of a pass (in the communication thread's order): its kind, and
 * when it ran in the last pass (cli_now's clock); -1 past the last job. */
enum { DP_FSDP_JOB_GATHER, DP_FSDP_JOB_RS };
int dp_fsdp_job(const struct dp_fsdp *f, int j, double *t0, double *t1);
struct dp_zero *dp_fsdp_zero(struct dp_fsdp *f);
void dp_fsdp_free(struct dp_fsdp *f);

#endif
