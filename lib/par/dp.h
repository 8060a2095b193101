/* dp: data-parallel training of an nn model over a comm group. Samples
 * come from data files, the global batch of every step is split over the
 * ranks, gradient sums are synced (bucketed allreduce, or a parameter
 * server) and divided by the global sample count, so any world size gives
 * the single-process full-batch result up to float rounding. */
#ifndef COLLX_DP_H
#define COLLX_DP_H

#include <stddef.h>
#include <stdint.h>

#include "comm/coll.h"
#include "comm/comm.h"
#include "comm/ps.h"
#include "nn/nn.h"
#include "par/ckpt.h"
#include "par/train_data.h"
#include "tensor/tensor.h"

enum dp_sync { DP_ALLREDUCE, DP_PS };

/* The type gradients travel in (--wire); every sum is taken in f32. */
enum dp_wire_type { DP_WIRE_F32, DP_WIRE_BF16, DP_WIRE_F16, DP_WIRE_INT8 };
#define DP_WIRE_BLOCK 256	/* int8: values per scale */

/* "f32", "bf16", "f16" or "int8": 0, or -1 for another name. */
int dp_wire_parse(const char *s, enum dp_wire_type *out);
const char *dp_wire_name(enum dp_wire_type t);

/* The data-parallel axis's sync options, one set for collx-dp and for
 * collx-train's DP axis (lib/prog/dpopt.c reads them from a command line;
 * DP_OPTS_DEFAULTS marks powersgd_start and the outer step's options as
 * not given, -1, until dpopt_check puts their defaults in). */
struct dp_opts {
	int zero;		/* ZeRO stage: 0 (off), 1, 2 or 3 */
	int prefetch;		/* stage 3: gathers started ahead, in layers */
	int reshard;		/* stage 3: parameters freed after forward */
	int shard_host;		/* stage 3: shards within each host (HSDP) */
	int prefetch_given, reshard_given, shard_given;	/* given */
	enum dp_wire_type wire;	/* the gradients' wire type (allreduce) */
	int powersgd;		/* PowerSGD's rank R, 0 off (allreduce) */
	long powersgd_start;	/* plain allreduce before this step */
	long sync_every;	/* local SGD: replicas synced every H steps, 0 off */
	double outer_lr, outer_momentum;	/* its outer Nesterov SGD */
	size_t bucket_bytes;	/* fuse small gradients up to this size */
	int overlap;		/* bucket syncs overlap the backward pass */
};
#define DP_OPTS_DEFAULTS { .wire = DP_WIRE_F32, .powersgd_start = -1, \
	.prefetch = 1, .reshard = 1, \
	.outer_lr = -1, .outer_momentum = -1, \
	.bucket_bytes = (size_t)25 << 20, .overlap = 1 }

struct dp_cfg {
	long batch, steps;
	int shuffle;
	uint64_t seed;
	struct nn_optim_cfg optim;
	enum dp_sync sync;
	enum coll_algo algo;	/* DP_ALLREDUCE */
	int ps_servers;		/* DP_PS colocated: ranks 0..S-1 serve */
	const char *ps_addrs;	/* DP_PS external: "HOST:PORT,..." or NULL */
	enum ps_mode ps_mode;
	int staleness;		/* async bound, < 0 none */
	double timeout;
	const char *token;
	comm_note_fn note;	/* says which external server a long wait is for */
	struct dp_opts dpo;	/* the sync's options */
	const char *ckpt_path;	/* rank 0 writes checkpoints there, or NULL */
	long ckpt_every;	/* after every K steps and the last (0: last) */
	const struct ckpt_state *resume;	/* start from it, or NULL */
	/* --ft (dp_ft.c): a step that ranks' deaths failed is run again by
	 * the survivors, each departure said through note; ft_rank (or
	 * NULL) follows this rank's rank among them */
	int ft;
	int *ft_rank;
};

/* Memory of a run on this rank, in bytes: optimizer state, and reduced
 * gradients kept for the update (ZeRO stage 2: this rank's slices). */
struct dp_mem {
	size_t optim_bytes, grad_bytes;
	size_t params_peak;	/* stage 3: the most parameter bytes held */
	size_t ckpt_peak;	/* and while writing checkpoints (0: none) */
};

typedef void (*dp_step_fn)(void *ctx, const struct train_step *s);

/*
 * Train m up to step cfg->steps (from cfg->resume's step, or 0); fn (may
 * be NULL) sees every step as it ends; mem (may be NULL) receives this
 * rank's memory figures. At the start and the end the ranks check that
 * their parameters are bitwise identical. *steps receives the records
 * (malloc'd, indexed by step; those before the first step run are
 * zero). Checkpoints (cfg->ckpt_path) hold the optimizer state however
 * it is sharded; asynchronous and external parameter servers hold theirs
 * elsewhere and take none. 0, or -1 with the reason in err and *kind set.
 */
int dp_train(struct nn_model *m, const struct train_data *d, struct comm *c,
    const struct dp_cfg *cfg, dp_step_fn fn, void *ctx, struct dp_mem *mem,
    struct train_step **steps, enum train_err *kind, char *err, size_t errlen);

/* A ps_update_fn that steps the nn_optim ctx (sized for the shard). */
void dp_optim_update(void *ctx, float *p, const float *gsum, size_t off,
    size_t len, float scale);

#endif
