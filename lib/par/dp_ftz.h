/* dp_ftz: ZeRO 1 and 2 under --ft over one group of replicas
 * (dp_ft_zero.c; the scheme: that file's comment): collx-dp's world, or
 * the replicas of one (pp, tp) coordinate of collx-train's mesh
 * (pipe_dp_ft_zero.c). Each call takes the group c and the ZeRO state z
 * over the flat vector params (grads its gradients) it is cut over. */
#ifndef COLLX_DP_FTZ_H
#define COLLX_DP_FTZ_H

#include "comm/comm.h"
#include "nn/nn.h"
#include "par/dp_sync.h"

#define DP_FTZ_COMM (-3)	/* a peer's loss: comm_error(c) says */
#define DP_FTZ_LOST (-2)	/* a slice lost: no retry (err) */

struct dp_ftz {
	int world, rank;	/* the group the slices are cut over */
	int *wr;		/* its members' world ranks */
	int have;		/* holds a state (a rank started again: not
				 * before its copy) */
	long done;		/* steps applied */
	long gen;		/* cuts made */
	double loss, t0;	/* the last agreement's loss; its step's start */
	int nr;			/* ranges of the mirror */
	struct nn_optim *opt;	/* per range: the successor's slice's */
	float *p, *g;		/* its parameters, its reduced gradients */
	float *send;		/* this rank's reduced slices, packed */
	size_t *off;		/* range i's in p and g */
	size_t n;		/* floats of p and g */
};

/* new: done steps applied, the slices held cut over c (NULL: none held
 * yet, a rank started again), its mirror empty until dp_ftz_take; NULL:
 * out of memory. delete: and f. */
struct dp_ftz *dp_ftz_new(struct comm *c, long done);
void dp_ftz_delete(struct dp_ftz *f);
/* The reduced slices of this rank to its ring predecessor's mirror, the
 * successor's into f->g. 0 or DP_FTZ_COMM. */
int dp_ftz_send(struct dp_ftz *f, struct comm *c, struct dp_zero *z,
    float *grads);
/* The step past its agreement: this rank's slices and the mirror's. */
void dp_ftz_apply(struct dp_ftz *f, struct dp_zero *z, float *params,
    float *grads, float scale);
/* The mirror's bytes added: its moments and parameters to *optim, its
 * reduced gradients to *grad. */
void dp_ftz_bytes(const struct dp_ftz *f, size_t *optim, size_t *grad);
/* A new cut over c, part one: the whole state (params, and *whole's
 * moments per range, dp_zero_whole_alloc's) from every old slice's owner
 * (its parameters in params, its moments own's, z's cut) or its
 * predecessor's mirror. Members without a state (f->have 0) take part.
 * Part two, after z was cut over c (its optimizers empty): this rank's
 * slices and its mirror's from whole. 0, -1 (err), DP_FTZ_COMM or
 * DP_FTZ_LOST. */
int dp_ftz_gather(struct dp_ftz *f, struct comm *c, struct dp_zero *z,
    float *params, struct nn_optim *own, const struct nn_optim_cfg *oc,
    struct nn_optim **whole, char *err, size_t errlen);
int dp_ftz_take(struct dp_ftz *f, struct comm *c, struct dp_zero *z,
    float *params, const struct nn_optim *whole,
    const struct nn_optim_cfg *oc, char *err, size_t errlen);

#endif
