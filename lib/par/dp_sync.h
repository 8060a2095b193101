/* dp_sync: data parallelism for slow links, the algorithms alone, over a
 * flat gradient (or parameter) vector and the tensors in it, so that
 * collx-dp's buckets (dp.c) and collx-train's stages (pipe_dp_sync.c) run
 * the same code: gradients in a narrower type on the wire (dp_wire.c),
 * ZeRO (dp_zero.c), PowerSGD (dp_powersgd.c) and local SGD's outer step
 * (dp_local.c). */
#ifndef COLLX_DP_SYNC_H
#define COLLX_DP_SYNC_H

#include <stddef.h>
#include <stdint.h>

#include "comm/coll.h"
#include "comm/comm.h"
#include "par/dp.h"

/* Gradients on the wire (dp_wire.c): the type, this rank's error
 * feedback (int8: what rounding lost, a float per parameter) and the
 * buffers of one bucket's messages. */
struct dp_wire {
	enum dp_wire_type type;
	int rank, world;
	float *ef;
	size_t nef;
	void *send, *recv;
	float *sum;
};

/* Gradients in w->type on the wire (where they round: dp_wire.c's
 * comment). init sizes the buffers for buckets of up to maxn floats of a
 * vector of n. allreduce: the n floats g of the vector's [off, off+n)
 * replaced by their sum over the ranks; reduce_scatter: this rank's
 * slice of that sum (ZeRO's, dp_zero_cut: len floats from
 * rank * ceil(n / world)) into out. 0, or -1 with comm_error(c) set. */
int dp_wire_init(struct dp_wire *w, enum dp_wire_type type, int rank,
    int world, size_t n, size_t maxn, char *err, size_t errlen);
int dp_wire_allreduce(struct dp_wire *w, struct comm *c, float *g,
    size_t off, size_t n, enum coll_algo algo);
int dp_wire_reduce_scatter(struct dp_wire *w, struct comm *c,
    const float *g, size_t off, size_t n, float *out, size_t len,
    enum coll_algo algo);
/* bf16 or f16: the world slices of v (counts[q] floats of rank q's, one
 * after another, at most the init's maxn in all) gathered in w->type,
 * this rank's left as it is, the others' rounded to the wire type (ZeRO-3's
 * parameters). 0, or -1 with comm_error(c) set. */
int dp_wire_allgatherv(struct dp_wire *w, struct comm *c, float *v,
    const size_t *counts, enum coll_algo algo);
void dp_wire_free(struct dp_wire *w);

/* A range of a flat vector: len floats from off. */
struct dp_range {
	size_t off, len;
};

/* Buckets (dp_bucket.c): the n tensors t of a vector of total floats, in
 * its order (off: where each starts; stage: the backward stage completing
 * its gradient, nn_model_grad_stage; group: tensors of two groups never
 * share a bucket), cut into buckets of at most lim floats but for a
 * bigger tensor alone, each of one stage and one group. b: room for n + 1
 * boundaries, bucket i is [b[i], b[i+1]); returns how many (>= 1). */
struct dp_tensor {
	size_t off, count;
	int stage, group;
};
int dp_buckets_cut(const struct dp_tensor *t, size_t n, size_t total,
    size_t lim, size_t *b);

/* The stage completing each of the nb buckets b (dp_buckets_cut's) into
 * ready: the latest stage of the tensors in it (dp_bucket.c). */
void dp_buckets_ready(const struct dp_tensor *t, size_t n, const size_t *b,
    int nb, int *ready);

/* Overlap (dp_overlap.c; the scheme: the file's comment): a thread runs
 * fn(ctx, b) for each of the nb buckets b as the backward pass completes
 * it (ready[b]: the stage after which it is complete). new starts it (c:
 * the group it sends on, told not to spin; NULL with the reason in err);
 * per step begin, pass dp_ovl_stage and the dp_ovl to the backward pass
 * as its nn_grad_fn, then wait (*busy: the seconds spent in fn; -1 when
 * an fn failed, its reason the caller's); drain waits for the buckets
 * posted so far only (before the caller uses links the group shares);
 * free stops it. */
struct dp_ovl;
typedef int (*dp_ovl_fn)(void *ctx, int bucket);
struct dp_ovl *dp_ovl_new(int nb, const int *ready, dp_ovl_fn fn, void *ctx,
    struct comm *c, char *err, size_t errlen);
void dp_ovl_begin(struct dp_ovl *o);
void dp_ovl_stage(void *o, int stage);
void dp_ovl_drain(struct dp_ovl *o);
/* Waits until the first n buckets in posting order are done (posted
 * already: the caller's dp_ovl_stage posted them). */
void dp_ovl_done(struct dp_ovl *o, int n);
int dp_ovl_wait(struct dp_ovl *o, double *busy);
/* set_order: another posting order, the same on every rank, and the
 * most buckets dp_ovl_stage posts; post_rest: once the posted buckets
 * are done, every bucket posted (returns how many were done before);
 * order: the posting order; busy: fn's seconds so far. */
void dp_ovl_set_order(struct dp_ovl *o, const int *order, int limit);
int dp_ovl_post_rest(struct dp_ovl *o);
const int *dp_ovl_order(const struct dp_ovl *o);
double dp_ovl_busy(struct dp_ovl *o);
void dp_ovl_free(struct dp_ovl *o);

/* ZeRO over the n ranges rg of a flat vector (dp_zero.c; the scheme: the
 * file's comment), collx-dp's buckets and collx-train's stage ranges
 * alike. cut: of a range of n floats over world ranks, rank q owns *len
 * floats from *off (ceil(n / world) each, the last ones shorter or
 * empty); slice: range i's, relative to its start. init: stage 1 or 2
 * (3: as 2, ZeRO-3's ranges, dp_fsdp.c) over c, the reduce-scatter through w (whose error feedback covers the
 * vector), algo where the collective has it (else auto); opt: the
 * caller's n optimizers, each remade for this rank's slice of its range;
 * what names a range in the collectives' step labels. reduce: range i
 * of grads reduce-scattered, this rank's slice of the sum in place
 * (stage 1) or compact (stage 2); step: every slice stepped with the
 * gradient scale; allgather: the updated slices of params to every rank
 * (both 0, or -1 with comm_error(c) set; init -1 with the reason in
 * err). grad_bytes: the reduced gradients kept for the update (stage 1:
 * the caller's whole floats, in place). For checkpoints, pieces: which rank
 * holds which floats of the state (n * world of them into p, their
 * count returned, for ckpt.c); whole_alloc: optimizers of whole ranges
 * (NULL, the reason in err), for --ft's re-cut (dp_ft_zero.c); take:
 * slice q of each of them into opt (a rank's own, or its mirror's). */
struct ckpt_piece;
struct dp_zero {
	int stage, rank, world, n;
	struct comm *c;
	struct dp_wire *wire;
	enum coll_algo rs_algo, ag_algo;
	struct dp_range *rg;
	struct nn_optim *opt;	/* the caller's, a slice's each */
	const char *what;
	float *grad;		/* stage 2: the reduced slices, compact */
	size_t *goff;		/* stage 2: range i's slice in grad */
	size_t ngrad;		/* floats of the reduced slices */
	float *pad;		/* a range padded to world slices of a size */
	size_t *counts;		/* world: one range's allgather counts */
};
void dp_zero_cut(size_t n, int world, int q, size_t *off, size_t *len);
void dp_zero_slice(const struct dp_zero *z, int i, int q, size_t *off,
    size_t *len);
int dp_zero_init(struct dp_zero *z, int stage, struct comm *c,
    struct dp_wire *w, enum coll_algo algo, const struct dp_range *rg,
    int n, struct nn_optim *opt, const struct nn_optim_cfg *oc,
    const char *what, char *err, size_t errlen);
int dp_zero_reduce(struct dp_zero *z, float *grads, int i);
/* Where range i's reduced slice lies (stage 1: in grads). */
float *dp_zero_reduced(const struct dp_zero *z, float *grads, int i);
void dp_zero_step(struct dp_zero *z, float *params, float *grads,
    float scale);
int dp_zero_allgather(struct dp_zero *z, float *params);
/* Range i's slices alone (dp_zero_allgather is every range's). */
int dp_zero_allgather_one(struct dp_zero *z, float *params, int i);
size_t dp_zero_grad_bytes(const struct dp_zero *z, size_t whole);
size_t dp_zero_pieces(struct dp_zero *z, struct ckpt_piece *p);
struct nn_optim *dp_zero_whole_alloc(const struct dp_zero *z,
    const struct nn_optim_cfg *oc, char *err, size_t errlen);
void dp_zero_whole_free(const struct dp_zero *z, struct nn_optim *w);
void dp_zero_take(const struct dp_zero *z, const struct nn_optim *whole, int q,
    struct nn_optim *opt);
void dp_zero_free(struct dp_zero *z);

struct dp_powersgd;
/* The DP sync state a checkpoint keeps beside the model and optimizer
 * (dp_ckpt.c), named and listed alike by collx-dp (dp_ckpt.c) and
 * collx-train (pipe_ckpt.c): vectors of a float per model parameter,
 * per_rank where the ranks differ ("NAME.RANK"), one where they agree.
 * list: of ef (--wire int8's error feedback), ps (PowerSGD; qs: whether
 * its Qs are kept, once a step has compressed), outer_m (local SGD's
 * outer momentum) and, while the replicas drift, the inner optimizer's
 * moments (how many: 0-2), those that exist into x (room for DP_NSTATE);
 * returns how many. A DP_STATE_VEC is v, a DP_STATE_Q
 * PowerSGD's Qs (dp_powersgd_q_get), a DP_STATE_MOMENT moment k of the
 * caller's optimizers (0: m, 1: v). names: every name list can give. */
enum { DP_STATE_VEC, DP_STATE_Q, DP_STATE_MOMENT };
enum { DP_NSTATE = 6 };
struct dp_state {
	const char *name;
	int kind, per_rank;
	float *v;
	int k;
};
extern const char *const dp_state_names[DP_NSTATE];
size_t dp_state_list(float *ef, struct dp_powersgd *ps, int qs,
    float *outer_m, int moments, struct dp_state *x);
/* Reading them back from st, a resumed checkpoint: get, rank q's vector
 * name (q < 0: the one of all) of np floats into *v, NULL when absent;
 * ranks: of how many ranks ("NAME.0" on) it holds name. -1 when one is
 * not np f32 values. */
struct ckpt_state;
int dp_state_get(const struct ckpt_state *st, const char *name, int q,
    size_t np, const float **v, char *err, size_t errlen);
int dp_state_ranks(const struct ckpt_state *st, const char *name, size_t np,
    int *n, char *err, size_t errlen);

/* Local SGD's outer step (dp_local.c; the scheme: the file's comment) on
 * n floats of the vectors: p the replica's parameters, a the anchor, b
 * the outer momentum, g the drift. delta puts a - p into g, which the
 * caller then sums over the w replicas when they drift; outer takes the
 * step from g and leaves p = a, both the new parameters. */
void dp_local_delta(const float *a, const float *p, float *g, size_t n);
void dp_local_apply(float *p, float *a, float *b, const float *g, size_t n,
    float w, float lr, float mu, int drift);

/* PowerSGD (dp_powersgd.c; the scheme: the file's comment) over a vector
 * of len floats: the tensors in it (t: the index that seeds the tensor's
 * first Q; rows: its matrix's rows, count for a vector) and its buckets,
 * ranges each synced by one call of sync. new returns NULL with the
 * reason in err. sync: bucket b of g summed over the ranks of c, of
 * which there are w (-1 with comm_error(c) set). ef: the error feedback,
 * a float per element; q_get puts every compressed tensor's warm-start
 * Q (m x r) at the tensor's offset in flat (len floats, zero elsewhere;
 * 0 when no step has compressed yet), q_put takes them back as the next
 * step's. */
struct dp_powersgd;
struct dp_powersgd_tensor {
	size_t t, off, rows, count;
};
struct dp_powersgd *dp_powersgd_new(const struct dp_powersgd_tensor *tens, size_t nt,
    const struct dp_range *bucket, int nb, size_t len, int rank,
    uint64_t seed, char *err, size_t errlen);
int dp_powersgd_sync(struct dp_powersgd *s, int b, struct comm *c,
    enum coll_algo algo, float *g, float w);
float *dp_powersgd_ef(const struct dp_powersgd *s);
int dp_powersgd_q_get(const struct dp_powersgd *s, float *flat);
void dp_powersgd_q_put(struct dp_powersgd *s, const float *flat);
void dp_powersgd_delete(struct dp_powersgd *s);
/* The tensors of m (at most m->ntensors) whose offset lies in one of the
 * n ranges, in the model's order, into tens; returns how many. */
size_t dp_powersgd_tensors(const struct nn_model *m, const struct dp_range *rg,
    int n, struct dp_powersgd_tensor *tens);

#endif
