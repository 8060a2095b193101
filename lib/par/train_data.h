/* train_data: what every parallel trainer shares: the training samples of a
 * model, the split of a global batch over ranks, the order samples are
 * taken in, and the record of a step. */
#ifndef COLLX_TRAIN_DATA_H
#define COLLX_TRAIN_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "nn/nn.h"

/* Kinds of failure, as exit codes: runtime (peer lost, timeout) or data. */
enum train_err { TRAIN_ERR_RUNTIME = 1, TRAIN_ERR_DATA = 3 };

/* The training samples of a model. */
struct train_data {
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
int train_data_load(struct train_data *d, const struct nn_model *m,
    const char *data, const char *targets, char *err, size_t errlen);
void train_data_free(struct train_data *d);
/* Tokens (gpt, block: positions; mlp: samples) in b samples. */
long train_tokens(const struct train_data *d, long b);

/* Rank's contiguous part of a global batch of b samples over world ranks:
 * the first b % world ranks get one more. */
void train_split(long b, int world, int rank, long *start, long *count);
/* Steps that cover epochs passes over n samples, b per step (rounded up). */
long train_epoch_steps(int64_t n, long b, double epochs);

/* The order samples are taken in: global position g is sample g mod n of
 * epoch g / n, through that epoch's permutation when shuffling
 * (Fisher-Yates from the seed and the epoch). */
struct train_order {
	int64_t n, epoch;
	int shuffle;
	uint64_t seed;
	int64_t *perm;
};
int train_order_init(struct train_order *o, int64_t n, int shuffle,
    uint64_t seed, char *err, size_t errlen);
void train_order_free(struct train_order *o);
int64_t train_order_index(struct train_order *o, int64_t g);

/* Buffers for up to rows samples of d, and the batch that points at them. */
struct train_batch {
	float *x, *y;
	int32_t *tok;
	struct nn_batch b;
};
int train_batch_alloc(struct train_batch *tb, const struct train_data *d,
    long rows, char *err, size_t errlen);
void train_batch_free(struct train_batch *tb);
/* Copies the count samples at global positions g0 .. g0+count-1 into tb
 * and sets tb->b to them. */
void train_batch_fill(struct train_batch *tb, const struct train_data *d,
    struct train_order *o, int64_t g0, long count);

/* One step's record. loss: the batch loss of the step's forward pass.
 * comm: seconds of communication, of which hidden ran behind the backward
 * pass and exposed (comm - hidden) held the step up; compute: seconds -
 * exposed. bytes_sent: payload bytes this rank sent in the step (where
 * the trainer counts them). */
struct train_step {
	long step, epoch, tokens;
	double loss, seconds, compute, comm, hidden, exposed;
	uint64_t bytes_sent;
	/* a model with experts (moe 1): the step's share of assignments
	 * dropped and the worst MoE block's imbalance (nn_model_moe_summary) */
	int moe;
	double moe_dropped, moe_imbalance;
	const double *moe_counts;	/* nn_model_moe_stats' layout, summed;
					 * valid in the step's callback only */
	/* ZeRO-3: seconds gathering, reduce-scattering, and waiting for
	 * gathers (exposed) */
	double gather, reduce_scatter, gather_wait;
	int replicas;		/* data-parallel replicas that ran it */
};

/* The zero-filled array v of *cap elements of size bytes, grown (doubling)
 * until index k exists; NULL when out of memory, v then unchanged. A
 * record per step thus costs memory for the steps run, not for the steps
 * asked for, which may be "forever". */
void *train_grow(void *v, long *cap, long k, size_t size);

#endif
