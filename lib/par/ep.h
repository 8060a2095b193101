/* ep: expert parallelism on collx-train's DP axis. X consecutive DP
 * replicas form an EP group (a comm_split of the DP group); EP rank r
 * runs experts [r*E/X, (r+1)*E/X) of every MoE block for the tokens of
 * all X replicas, each replica routing its own tokens (so the capacity
 * is still per micro-batch of one rank, and the drops are those of a run
 * without EP). Dispatch:
 *
 *   alltoall   each rank sends every kept assignment's input row to the
 *              rank of its expert and gets the output row back
 *              (coll_alltoallv, the per-expert counts by coll_alltoall
 *              first); backward the same ways with the gradients;
 *   allgather  every rank gathers all X ranks' tokens and router
 *              probabilities (coll_allgatherv), routes each rank's as it
 *              did, runs its experts, and the partial outputs, p-weighted,
 *              are reduce-scattered back; backward gathers the output
 *              gradients and reduce-scatters the input gradients and
 *              d/dp.
 *
 * Divided (ep->divided, the default where the DP sync is plain or ZeRO
 * 1/2's: f32 wire, no PowerSGD or local SGD): each rank holds only its
 * own experts' weights, gradients and optimizer state (the stage's
 * layout leaves the others out, tp_stage_keep_experts); the DP sync sums
 * an expert's gradients over ep->rep alone, the D/X replicas of the same
 * EP rank, the rest over all D (ZeRO shards each part over its own
 * group, pipe_dp_zero.c); the output and checkpoints gather the
 * experts back (ep_gather_experts), so they hold the whole model as
 * plain DP's do, whatever the mesh. Otherwise every rank keeps every
 * expert's weights, computing gradients for its own experts only (the
 * others stay zero there), so the DP axis's one sum over all D replicas
 * gives each expert the sum over the D/X replicas that run it, and the
 * optimizer, ZeRO and checkpoints are the DP axis's unchanged. */
#ifndef COLLX_EP_H
#define COLLX_EP_H

#include <stddef.h>
#include <stdint.h>

#include "comm/comm.h"
#include "nn/nn.h"

enum ep_dispatch { EP_ALLTOALL, EP_ALLGATHER };

struct ep_saved;

struct ep {
	struct nn_moe_ep hook;	/* what tp_stage gives lib/nn's MoE */
	struct comm *c;		/* the EP group */
	struct comm *rep;	/* the DP replicas of this EP rank */
	int divided;		/* only this rank's experts are held */
	int X, rank, E, per;	/* this rank's experts: rank*per .. +per */
	enum ep_dispatch how;
	/* the exchanges so far: [0] dispatch (tokens, or their output
	 * gradients, to the experts' ranks), [1] combine (back) */
	double phase_s[2];
	uint64_t phase_b[2];	/* bytes this rank sent in them */
	struct ep_saved *sv;	/* each forward's kept values, by acts */
	int nsv;
	void *w[6];		/* work buffers, grown */
	size_t wcap[6];
	char *err;		/* a failure's reason: the runner's buffer */
	size_t errlen;
};

/* "alltoall" or "allgather"; -1 for neither. */
int ep_dispatch_parse(const char *s, enum ep_dispatch *out);
const char *ep_dispatch_name(enum ep_dispatch how);

/* Before any data moves: whether X-way expert parallelism fits D
 * replicas and model m (experts, X divides D and E). 0, or -1 with the
 * numbers (bad input, exit 3). */
int ep_check(int D, int X, const struct nn_model *m, char *err,
    size_t errlen);

/* Collective over the DP group dp (D ranks, numbered by replica): ep's
 * EP group of X consecutive replicas, for E experts; later failures'
 * reasons land in err (which must outlive ep). 0, or -1 with the
 * reason. */
int ep_open(struct ep *ep, struct comm *dp, int X, int E,
    enum ep_dispatch how, char *err, size_t errlen);
void ep_close(struct ep *ep);

/* Of a tensor named as the model names it: its expert's index, or -1
 * for a tensor of no expert. */
int ep_expert_of(const char *name);
/* The EP of hook h (NULL: none) when it divides the experts: NULL, or
 * it (its experts rank*per .. +per). */
struct ep *ep_divides(const struct nn_moe_ep *h);
/* Collective over the EP group: out (laid out as m->params), holding
 * this rank's experts of layers [l0, l1), gets every rank's. 0, or -1
 * with the reason in ep->err. */
int ep_gather_experts(struct ep *ep, const struct nn_model *m, int l0,
    int l1, float *out);

#endif
