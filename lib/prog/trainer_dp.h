/* trainer_dp: collx-dp's run in the trainer shell: its per-step report
 * (compute, and the gradient sync's time, hidden and exposed, a timing
 * row each; ZeRO-3's gathers and reduce-scatters too), -v's memory
 * figures and the outputs rank 0 writes. */
#ifndef COLLX_TRAINER_DP_H
#define COLLX_TRAINER_DP_H

#include "par/dp.h"
#include "prog/trainer.h"

struct trainer_dp {
	struct trainer t;
	size_t nparams, esz;	/* bytes per gradient on the wire */
	const char *comm_op, *comm_algo, *hidden_op, *exposed_op, *dtype;
	int zero;
	char *ckpt_path;	/* k's path, {rank} and {world} substituted */
	const struct nn_model *m;	/* for -v's tokens per expert */
	const char *loss_csv;	/* c's, written before each checkpoint */
	int cols;		/* its columns past the common ones */
	const struct trainopt_ckpt *ckpt;
};

/* Opens c's --timing and starts the report of cfg's steps over m; into
 * cfg the checkpoints (k) and the group's (g) timeout, token and notes. */
void trainer_dp_begin(struct trainer_dp *r, struct dp_cfg *cfg,
    const struct nn_model *m, const struct trainopt_common *c,
    const struct trainopt_ckpt *k, const struct cli_group *g);
/* dp_train's step callback: ctx is the trainer_dp. */
void trainer_dp_step(void *ctx, const struct train_step *s);
/* The summary, -v's memory figures, rank 0's outputs (c's -o and
 * --loss-csv of steps, dp_train's), the timing file closed. */
void trainer_dp_end(struct trainer_dp *r, const struct dp_mem *mem,
    const struct train_step *steps, const struct trainopt_common *c,
    const struct nn_model *m);

#endif
