/* tp: Megatron tensor-parallel layers (column, row, mlp, block) over a comm
 * group, the serial reference (the same code on one rank without a group)
 * and, with par/ulysses.h, the Ulysses sequence-parallel block. Each rank
 * keeps its shard of whole weights; forward, backward (gradient of
 * sum(Y * DY)) and full-batch SGD training on the mean-squared error. */
#ifndef COLLX_TP_H
#define COLLX_TP_H

#include <stddef.h>
#include <stdint.h>

#include "comm/comm.h"
#include "nn/nn.h"
#include "tensor/tensor.h"

enum tp_layer { TP_COLUMN, TP_ROW, TP_MLP, TP_BLOCK };
enum tp_mode { TP_MODE_TP, TP_MODE_ULYSSES, TP_MODE_SERIAL, TP_MODE_RING,
    TP_MODE_ZIGZAG, TP_MODE_USP, TP_MODE_SP };

int tp_layer_parse(const char *s, enum tp_layer *out);
const char *tp_layer_name(enum tp_layer l);
int tp_mode_parse(const char *s, enum tp_mode *out);
const char *tp_mode_name(enum tp_mode m);

/* ---- phases: time and bytes sent, compute and collectives ------------- */

#define TP_PHASE_MAX 32
struct tp_phase {
	const char *name;	/* "fwd attn", "fwd allreduce attn.o (g)" */
	const char *op;		/* "compute", "allreduce", "alltoall", ... */
	const char *algo;	/* "ring", "pairwise" or "-" */
	size_t count;		/* elements the collective moved (0: compute) */
	enum dtype dt;		/* theirs: f32, the loss's f64 */
	double seconds;
	uint64_t bytes;		/* bytes this rank sent */
	double hidden;		/* seconds its transfers ran while computing */
	double exposed;		/* ... and alone, waited for */
};
/* A span of a rank's trace: compute (lane 0) or transfers (lane 1), kind
 * 'F' forward, 'B' backward, 'S' a transfer. */
struct tp_span {
	double t0, t1;		/* seconds since the log's origin */
	int lane;
	char kind;
	char name[31];
};
struct tp_log {
	struct comm *c;		/* NULL: nothing is sent */
	struct comm *sub[2];	/* sub-groups of c whose sends count too */
	int trace;		/* keep spans (tp_log_trace) */
	double origin;
	struct tp_span *spans;
	size_t nspans, capspans;
	int n;
	double t;
	uint64_t sent;
	struct tp_phase p[TP_PHASE_MAX];
};
/* Empties the log and starts the clock. */
void tp_log_start(struct tp_log *l, struct comm *c);
/* Ends the phase running since the last mark (or start): count f32
 * elements moved (tp_log_mark_dt: of type dt). */
void tp_log_mark(struct tp_log *l, const char *name, const char *op,
    const char *algo, size_t count);
void tp_log_mark_dt(struct tp_log *l, const char *name, const char *op,
    const char *algo, size_t count, enum dtype dt);
/* tp_log_mark, for a phase whose transfers ran hidden seconds while it
 * computed and exposed seconds alone (its spans are the caller's). */
void tp_log_mark_overlap(struct tp_log *l, const char *name, const char *op,
    const char *algo, size_t count, double hidden, double exposed);
/* From now on l keeps a span per phase (tp_log_mark), and those that
 * tp_log_span adds, times from now (call it right after a barrier, so
 * that the ranks' origins agree). */
void tp_log_trace(struct tp_log *l);
/* A span from t0 to t1 (cli_now's clock) when l traces (l may be NULL);
 * kind 'F' or 'B' from a name starting "fwd" or "bwd" when kind is 0. */
void tp_log_span(struct tp_log *l, int lane, char kind, const char *name,
    double t0, double t1);
/* Every rank's spans of l, collected by rank 0 over c (NULL: this rank's
 * alone) and written to path as Chrome trace-event JSON (par/tp_trace.c);
 * collective. 0, or -1 with the reason in err. */
int tp_trace_write(const char *path, const struct tp_log *l, struct comm *c,
    char *err, size_t errlen);

/* ---- a layer's weights, sharded ---------------------------------------- */

enum tp_split { TP_WHOLE, TP_ROWS, TP_COLS };

struct tp_param {
	const char *name;
	enum tp_split split;
	int ndim;
	int64_t shape[2];	/* whole */
	int present;		/* a bias may be absent */
	size_t off, count;	/* this rank's floats in w and g */
};

struct tp_cfg {
	enum tp_layer layer;
	enum tp_mode mode;
	int heads;		/* block: 0 = from __metadata__ "heads" */
	int causal, post_norm;	/* block; causal also from metadata */
	enum nn_act act;	/* mlp, block */
	int local_output;	/* column: leave Y sharded */
	int input_parallel;	/* row: X is this rank's input shard */
	int ulysses;		/* usp: Ulysses group size U (U*R = world) */
	int overlap;		/* tp, sp block: collective matmuls in steps */
};

/* A block may have an MoE in place of its mlp (a pipeline stage's, with
 * no tensor parallelism): the 12 tensors before mlp.*, the router and
 * four per expert. */
#define TP_MOE_MAX 64
#define TP_PARAM_MAX (13 + 4 * TP_MOE_MAX)
struct tp_model {
	struct tp_cfg cfg;
	int rank, world;
	int shards;		/* tensors split this many ways (1: whole) */
	int in, hidden, out;	/* column, row: in, out; mlp: all three */
	int d, heads, f;	/* block */
	int np;
	struct tp_param p[TP_PARAM_MAX];
	size_t nlocal;
	float *w, *g;		/* this rank's parameters and gradients */
	/* block: experts (0: the mlp), their tensors' names and
	 * tp_block_ptrs' views (weights, gradients) */
	int experts;
	char xname[TP_PARAM_MAX][32];
	struct nn_moe_w moe[2];
	struct nn_mlp_w ex[2][TP_MOE_MAX];
};

/*
 * This rank's shards of the layer in s (any float dtype) for rank of
 * world. Sizes from the shapes. Every failure is bad input (exit 3):
 * missing or extra tensors, inconsistent shapes, and sizes the world does
 * not divide (heads, features; the numbers in the message), found before
 * any communication.
 */
int tp_model_load(struct tp_model *m, const struct tp_cfg *cfg,
    const struct tensor_set *s, int rank, int world, char *err,
    size_t errlen);
void tp_model_free(struct tp_model *m);
/* tp_model_load's checks and layout (m->nlocal floats, each tensor's
 * offset and split) alone, allocating nothing and copying nothing: for a
 * caller keeping several layers' shards in buffers of its own
 * (par/tp_stage.h). */
int tp_model_plan(struct tp_model *m, const struct tp_cfg *cfg,
    const struct tensor_set *s, int rank, int world, char *err,
    size_t errlen);

/* ---- running it --------------------------------------------------------- */

struct ulysses;
struct tp_ring;
struct tp_sp;

struct tp_run {
	struct tp_model *m;
	struct comm *c;		/* NULL: serial */
	struct tp_log *log;	/* may be NULL */
	int b, s, n;		/* whole batch, sequence; rows n = b*s */
	int sl;			/* positions held (sequence-sharded: s/W) */
	int in, out;		/* row widths of X and Y */
	size_t xl, yl;		/* floats of this rank's X and Y */
	float *x;		/* this rank's input as used */
	float *y, *ylocal;	/* whole output (forward with gather), own */
	float *dx;		/* whole input gradient */
	float *dyl, *dxl, *tmp, *acts, *scratch;
	struct nn_block_shape sh;
	struct nn_block_acts a;
	struct nn_block_hooks hk;
	struct ulysses *u;
	struct tp_ring *cp;	/* ring, zigzag, usp (across the groups) */
	struct comm *grp, *ring;	/* usp: the Ulysses group, the ring */
	struct nn_block_hooks inner;	/* usp: cp's hooks, inside u's */
	struct tp_sp *sp;	/* sp, and tp with overlap */
	char *err;
	size_t errlen;
};

/*
 * Checks X's shape against the layer (block [b, s, d]; the others [..., in],
 * this rank's shard of in with input_parallel) and the world's divisibility
 * (Ulysses: s), then allocates. 0, or -1: bad input (exit 3) or out of
 * memory, with the reason in err. err must outlive r (later failures of
 * the run land there too).
 */
int tp_run_init(struct tp_run *r, struct tp_model *m, struct comm *c,
    struct tp_log *log, const struct tensor *x, char *err, size_t errlen);
void tp_run_free(struct tp_run *r);
/* 1 when r's mode shards the sequence over a group of several ranks. */
int tp_seq_sharded(const struct tp_run *r);
/* tp_run_init's checks of X alone (no allocation, no group), so every rank
 * can refuse bad input before it joins: 0 or -1 (bad input). */
int tp_input_check(struct tp_model *m, const struct tensor *x, char *err,
    size_t errlen);
/* x: X as given (whole, or the shard with input_parallel). r->ylocal: this
 * rank's output; with gather also r->y, the whole output (column with
 * local_output: no whole output). 0 or -1 (a runtime failure). */
int tp_forward(struct tp_run *r, const float *x, int gather);
/* After tp_forward: the gradient of sum(Y * DY) for the whole DY. m->g is
 * zeroed first, then holds this rank's weight gradients (Ulysses: summed
 * over ranks); r->dx the whole input gradient. */
int tp_backward(struct tp_run *r, const float *dy);
/* Whole tensors (parameters, or with grads the gradients) of every rank's
 * shards, under the layer's names, in a fresh set (absent biases left
 * out); collective: every rank calls it. */
int tp_gather_set(struct tp_run *r, int grads, struct tensor_set *out);

/* One step of full-batch SGD on the mean-squared error of Y against the
 * whole targets yt: *loss is the step's forward loss (mean over every
 * element), then w -= lr * grad. */
int tp_train_step(struct tp_run *r, const float *x, const float *yt,
    float lr, double *loss);

#endif
