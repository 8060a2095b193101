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
#include "tensor/tensor.h"

/* Kinds of failure, as exit codes: runtime (peer lost, timeout) or data. */
enum dp_err { DP_ERR_RUNTIME = 1, DP_ERR_DATA = 3 };

/* The training samples of a model. */
struct dp_data {
	enum nn_arch arch;
	int64_t n;		/* samples */
	int seq;		/* block: rows per sample; gpt: the model's seq */
	size_t xrow, yrow;	/* floats per sample (mlp, block) */
	float *x, *y;		/* mlp, block */
	int32_t *tok;		/* gpt: n windows of seq+1 tokens */
};

/* mlp: X [n, d_in] and Y [n, d_out]; block: X and Y [n, seq, d_model]
 * (any float dtype); gpt: a 1-D integer .npy of tokens, or any other file
 * as raw bytes (vocab >= 256), cut into windows of seq+1 tokens. */
int dp_data_load(struct dp_data *d, const struct nn_model *m,
    const char *data, const char *targets, char *err, size_t errlen);
void dp_data_free(struct dp_data *d);
/* Tokens (gpt, block: positions; mlp: samples) in b samples. */
long dp_tokens(const struct dp_data *d, long b);

/* Rank's contiguous part of a global batch of b samples over world ranks:
 * the first b % world ranks get one more. */
void dp_split(long b, int world, int rank, long *start, long *count);
/* Steps that cover epochs passes over n samples, b per step (rounded up). */
long dp_epoch_steps(int64_t n, long b, double epochs);

enum dp_sync { DP_ALLREDUCE, DP_PS };

struct dp_cfg {
	long batch, steps;
	int shuffle;
	uint64_t seed;
	struct nn_optim_cfg optim;
	enum dp_sync sync;
	enum coll_algo algo;	/* DP_ALLREDUCE */
	size_t bucket_bytes;	/* fuse small gradients up to this size */
	int ps_servers;		/* DP_PS colocated: ranks 0..S-1 serve */
	const char *ps_addrs;	/* DP_PS external: "HOST:PORT,..." or NULL */
	enum ps_mode ps_mode;
	int staleness;		/* async bound, < 0 none */
	double timeout;
	const char *token;
};

/* One step's record. loss: the batch loss of the step's forward pass
 * (async parameter server: this rank's part only). */
struct dp_step {
	long step, epoch, tokens;
	double loss, seconds, compute, comm;
};

typedef void (*dp_step_fn)(void *ctx, const struct dp_step *s);

/*
 * Train m for cfg->steps steps; fn (may be NULL) sees every step as it
 * ends. At the start and the end the ranks check that their parameters
 * are bitwise identical. *steps receives the records (malloc'd, cfg->steps
 * of them). 0, or -1 with the reason in err and *kind set.
 */
int dp_train(struct nn_model *m, const struct dp_data *d, struct comm *c,
    const struct dp_cfg *cfg, dp_step_fn fn, void *ctx,
    struct dp_step **steps, enum dp_err *kind, char *err, size_t errlen);

/* Optimizer options as a command line gives them (NULL: not given),
 * applied over the torch.optim defaults of the chosen kind. */
struct dp_optim_opts {
	const char *kind, *lr, *momentum, *weight_decay, *betas, *eps;
};

/* The optimizer's long options, shared by collx-dp and collx-ps: put
 * DP_OPTIM_LONGOPTS in the getopt_long table and offer every option to
 * dp_optim_option(), which records it (1) or says it is not one (0). */
enum {
	DP_OPT_OPTIMIZER = 0x1280, DP_OPT_LR, DP_OPT_MOMENTUM, DP_OPT_WD,
	DP_OPT_BETAS, DP_OPT_EPS
};
#define DP_OPTIM_LONGOPTS \
	{ "optimizer", 1, 0, DP_OPT_OPTIMIZER }, { "lr", 1, 0, DP_OPT_LR }, \
	{ "momentum", 1, 0, DP_OPT_MOMENTUM }, \
	{ "weight-decay", 1, 0, DP_OPT_WD }, \
	{ "betas", 1, 0, DP_OPT_BETAS }, { "eps", 1, 0, DP_OPT_EPS }
int dp_optim_option(struct dp_optim_opts *o, int opt, const char *arg);

/* 0, or -1 with "--option: reason" in err (a usage error). */
int dp_optim_config(const struct dp_optim_opts *o, struct nn_optim_cfg *c,
    char *err, size_t errlen);

/* A ps_update_fn that steps the nn_optim ctx (sized for the shard). */
void dp_optim_update(void *ctx, float *p, const float *gsum, size_t off,
    size_t len, float scale);

/* FNV-1a 64 of the parameter bytes. */
uint64_t dp_checksum(const float *p, size_t n);

/* The loss CSV (step,epoch,loss,tokens,seconds,tokens_per_s), atomically. */
int dp_loss_csv_write(const char *path, const struct dp_step *s, long n,
    char *err, size_t errlen);

/*
 * A tensor set as one flat f32 vector (tensors in set order, any float
 * dtype converted) and the layout text a parameter server hands its
 * clients: "t NAME D0,D1,...\n" per tensor, "m KEY VALUE\n" per metadata
 * entry (fields separated by tabs). unflatten builds the set back.
 */
int dp_set_flatten(const struct tensor_set *s, float **flat, size_t *total,
    char **layout, char *err, size_t errlen);
int dp_set_unflatten(const char *layout, const float *flat, size_t total,
    struct tensor_set *out, char *err, size_t errlen);
/* Whether two layouts name the same tensors with the same shapes. */
int dp_layout_same(const char *a, const char *b);

#endif
