/* pipe_int: what the pipeline runner's files share: a micro-batch's
 * activation slot (the stage's math is tp_stage's) and the state of a
 * run with the part each file plays in it. */
#ifndef COLLX_PIPE_INT_H
#define COLLX_PIPE_INT_H

#include <stddef.h>
#include <stdint.h>

#include "comm/comm.h"
#include "nn/nn.h"
#include "par/dp_fsdp.h"
#include "par/dp_sync.h"
#include "par/pipe.h"
#include "par/pipe_sched.h"
#include "par/tp_stage.h"
#include "par/tp_xfer.h"
#include "par/train_data.h"

struct pipe_dp_sync;
struct dp_powersgd;

/* A micro-batch's saved activations, from its forward to its backward. */
struct pipe_slot {
	float *f;		/* input, then per layer output and acts, head */
	int32_t *tok;		/* gpt: inputs, then targets, n*seq each */
	const float *inp;	/* stage input: f, or the batch's rows */
	const float *y;		/* last stage (mlp, block): targets */
	int n, busy;
	size_t bytes;		/* activation bytes held for n samples */
};

/* ---- the runner --------------------------------------------------------- */

enum { PIPE_OPCODE = 0x50 };
enum { PIPE_TAG_ACT = 0x5001, PIPE_TAG_GRAD, PIPE_TAG_LOSS, PIPE_TAG_TIED,
	PIPE_TAG_PARAM, PIPE_TAG_SPAN, PIPE_TAG_CLOCK };

struct pipe_range {
	size_t off, len;
};

/* A sample of this rank's clock against rank 0's: when it was taken, and
 * how far this rank's clock was ahead (both in seconds, on this rank's
 * clock since its origin; 0 on rank 0). */
struct pipe_clock {
	double at, ahead;
	double err;	/* ahead is known to within err: half the round trip */
};

struct pipe_run {
	struct nn_model *m;
	const struct train_data *d;
	struct comm *c;
	const struct pipe_cfg *cfg;
	const struct pipe_sched *sch;	/* cfg->table, or own_sch */
	struct pipe_sched own_sch;
	/* The stage: a tp_stage per chunk over cfg->tp (without one, or
	 * with a group of one, unsharded: pipe_stage.c) */
	struct tp_stage *ts;
	int nchunk;			/* V */
	size_t peak;			/* activation bytes, all chunks */
	struct comm *gc;		/* V > 1: the gradients' own sub-group
					 * (with 2 ranks both kinds of message
					 * go each way, and messages between
					 * two ranks match in order) */
	float *params, *grads;		/* what own's ranges index: m's, or
					 * ts's chunk after chunk */
	double tp_t0;			/* ts's sums' seconds and the TP */
	uint64_t tp_b0;			/* group's bytes at the step's start */
	struct tp_overlap cp_t0;	/* the same of the CP ring */
	uint64_t cp_b0;
	int rank, world, have_sch;
	long rstart, rcount;		/* this replica's share of the batch */
	long *mstart, *mcount;		/* micro-batches of the share */
	struct pipe_slot **mslot;	/* these four: [c*M + i], chunk c */
	const float **mout;
	struct comm_req *sact, *sgrad;
	int (*gmb)[3];			/* per chunk: the micro-batch in each
					 * gradient send buffer (its g[2 + b]),
					 * and the next buffer to take */
	struct train_order ord;
	struct train_batch tb;
	struct pipe_range *own;		/* parameter ranges the stage updates */
	int nown;
	struct nn_optim *opt;
	struct pipe_dp_zero *zero;		/* ZeRO on the DP axis, or NULL */
	size_t ckpt_peak;		/* --zero 3: its checkpoints' params
					 * held at once (pipe_ckpt.c) */
	struct pipe_dp_sync *sync;		/* cfg->dpo: wire, powersgd, sync_every */
	float *tied;			/* gpt: the other end's wte gradient */
	double origin;			/* when it left the opening barrier */
	struct pipe_clock clock;	/* against rank 0's then (tracing) */
	long step;
	struct pipe_stat *stat;		/* per step, grown as steps run */
	long capstat;
	struct pipe_span *spans;
	size_t nspans, capspans;
	enum train_err kind;
	char *err;
	size_t errlen;
	int moe_aux_set;		/* the step's daux made (pipe_moe_aux) */
	double moe_aux_loss;		/* this stage's share of the aux loss */
	int ft_synced;			/* --ft: the step's sums done, loss */
	double ft_loss, ft_t0;		/* theirs, t0 the step's start */
	int *late;			/* per chunk: the micro-batch whose
					 * weight part follows its gradient's
					 * send (-1: none; pipe_early_init) */
	double *rwait;			/* per action: its receive's wait in
					 * the step before (pipe_step.c) */
};

/* Failures (pipe_fail.c): the reason into r->err, its kind into r->kind; -1.
 * group: group c's (r->c's: comm). */
int pipe_group_failed(struct pipe_run *r, struct comm *c);
int pipe_comm_failed(struct pipe_run *r);
int pipe_dp_failed(struct pipe_run *r);		/* cfg->dp's */
/* The stage's replicas (cfg->dp) when there are two or more, else NULL. */
struct comm *pipe_replicas(const struct pipe_run *r);
int pipe_oom(struct pipe_run *r);

/* Where the model lies (pipe_split.c): the stages holding a parameter, *a
 * and *b (or -1). */
void pipe_owners(const struct pipe_run *r, const char *name, int *a, int *b);

/* The stage's side of the runner (pipe_stage.c): set-up of a tp_stage per
 * chunk, and own_init, their one parameter range with its optimizer;
 * the rank's chunk c (0 unless interleaved); a micro-batch's slot on
 * chunk c, input, forward (NULL: failed) and backward. */
int pipe_tp_init(struct pipe_run *r, int nmax);
int pipe_own_init(struct pipe_run *r);
void pipe_tp_free(struct pipe_run *r);
struct tp_stage *pipe_chunk(struct pipe_run *r, int c);
struct pipe_slot *pipe_unit_acquire(struct pipe_run *r, int c, int n);
float *pipe_unit_input(struct pipe_run *r, int c, struct pipe_slot *sl);
const float *pipe_unit_forward(struct pipe_run *r, int c,
    struct pipe_slot *sl, double *loss);
int pipe_unit_backward(struct pipe_run *r, int c, struct pipe_slot *sl,
    float *dy, float *dx);
void pipe_unit_weight(struct pipe_run *r, int c, struct pipe_slot *sl);
void pipe_unit_release(struct pipe_run *r, int c, struct pipe_slot *sl);
/* The TP group's share of a step, its allreduces' time and bytes, into
 * ps: called at the step's start (begin) and its end. */
void pipe_tp_stat(struct pipe_run *r, struct pipe_stat *ps, int begin);
/* The CP axis (cp_stage.c): its ranks per sequence (1: none), and its
 * ring's share of a step into ps, as pipe_tp_stat's. */
int pipe_cp_size(const struct pipe_cfg *cfg);
void pipe_cp_stat(struct pipe_run *r, struct pipe_stat *ps, int begin);
/* At the end: every TP rank's replicated tensors bitwise the same. */
int pipe_tp_verify(struct pipe_run *r);
/* Checkpoints under TP: this rank's shards of the state from
 * cfg->resume; collective over the TP group, the stage's whole
 * parameters into m->params on TP index 0, and with moments (not NULL on
 * every rank) the optimizer's moments into moments[0] and [1] (laid out
 * as the model's parameters; read on TP index 0 only). */
int pipe_tp_resume(struct pipe_run *r);
int pipe_tp_gather(struct pipe_run *r, float *const moments[2]);

/* Step k of the run (pipe_step.c), recorded in s and r->stat[k]. */
int pipe_run_step(struct pipe_run *r, long k, struct train_step *s);
/* A plain pipeline's stages (no DP axis, no --ft) send their input
 * gradients before their weight parts where tp_stage_early allows; 0 or
 * -1 (no memory). */
int pipe_early_init(struct pipe_run *r);
/* The step's end from its sums (loss the replicas'): the update, the
 * record in s. */
int pipe_step_finish(struct pipe_run *r, long k, struct train_step *s,
    double loss, double t0);

/* --ft (pipe_dp_ft.c): commit, after the step's sums, tells every rank's
 * sums are done (a rank past it knows all were: in a recovery the others
 * finish the step); recover, after step *k failed: the survivors' whole
 * replicas on new groups, *k the step to run (records of a step finished
 * there in res, fn called), or -1 (not --ft, not a death, this rank's
 * replica broken: r->err says why). again (pipe.c): the run set up anew
 * on c and r->cfg's groups, its records kept. */
int pipe_ft_commit(struct pipe_run *r, double loss, double t0);
int pipe_ft_recover(struct pipe_run *r, long *k, struct pipe_result *res,
    pipe_step_fn fn, void *ctx, long *cap);
int pipe_run_again(struct pipe_run *r, struct comm *c);
/* relay: the mesh laid again over ft->world's ranks, the run set up anew
 * on its groups with this rank's state. Rejoining:
 * grow, at step *k's start, admits the replicas started again (0 too
 * when nobody came); copy gives the ranks without state (started again)
 * the replicas' step *k, state and records (res, cap: as pipe_grow's),
 * nothing when there are none; t0: when it began, for its line. 0, or -1
 * with r->err (then pipe_ft_recover). */
int pipe_ft_relay(struct pipe_run *r);
int pipe_ft_grow(struct pipe_run *r, long *k, struct pipe_result *res,
    long *cap);
int pipe_ft_copy(struct pipe_run *r, long *k, struct pipe_result *res,
    long *cap, double t0);
/* A rank started again, set up: its copy (the others' at their step's
 * start, in their grow), or when one of them left meanwhile, the
 * recovery with them. 0, or -1 (r->err). */
int pipe_ft_joined(struct pipe_run *r, long *k, struct pipe_result *res,
    pipe_step_fn fn, void *ctx, long *cap);
/* Room for step k's records in res->steps and r->stat (pipe.c). */
int pipe_grow(struct pipe_run *r, struct pipe_result *res, long *cap,
    long k);

/* The data-parallel axis (pipe_dp.c): init (after the stage's ranges and
 * optimizers, before a resume) sets ZeRO up; sync sums the stage's
 * gradients (ZeRO: reduce-scatters them) and the loss over its replicas
 * (cfg->dp); update steps the optimizers (ZeRO: each replica its slices,
 * then allgathers them) and records the memory they keep; at the end, the
 * check that the replicas hold bitwise the same parameters. */
int pipe_dp_init(struct pipe_run *r);
int pipe_dp_sync(struct pipe_run *r, double *loss);
/* pipe_moe.c: a model with experts' step statistics, zeroed as a step
 * begins and summed over stages and replicas into s as it ends (0, or
 * -1 when a sum failed); nothing for a model without. */
void pipe_moe_begin(struct pipe_run *r);
int pipe_moe_end(struct pipe_run *r, struct train_step *s);
/* The auxiliary loss (gpipe: every forward of the step has run before
 * the first backward): pipe_moe_aux, before that backward of chunk c,
 * sums the stage's routing counts over the replicas and gives every MoE
 * block its d/dp_e; pipe_moe_aux_sum adds the stages' shares of the loss
 * to rank 0's loss sum. 0, or -1 when a sum failed. */
int pipe_moe_aux(struct pipe_run *r, int c);
int pipe_moe_aux_sum(struct pipe_run *r, double *loss);
/* Whether the step's f_e come before the schedule (an aux loss under a
 * schedule but gpipe); pipe_moe_aux_counted, once the step's forwards
 * have counted them, makes every chunk's d/dp_e and zeroes the counts
 * for the schedule's own forwards. */
int pipe_moe_aux_early(const struct pipe_run *r);
int pipe_moe_aux_counted(struct pipe_run *r);
/* A checkpoint's on a replica but 0 (which saves): with divided experts
 * (par/ep.h), the other EP ranks of replica 0's EP group gather their
 * experts to it as replica 0 does (pipe_tp_gather); others nothing. */
int pipe_moe_ckpt_peer(struct pipe_run *r);
int pipe_dp_update(struct pipe_run *r);
int pipe_dp_verify(struct pipe_run *r);
void pipe_dp_free(struct pipe_run *r);

/* ZeRO on the DP axis (dp_zero.c over the layout of pipe_dp_zero.c): z,
 * its state (pipe_dp.c and pipe_ckpt.c call dp_zero_* on it), and the
 * wire of its reduce-scatter. init re-sizes the optimizers to this
 * replica's slices (nothing without cfg->dpo.zero or replicas); wire_ef: the
 * reduce-scatter's int8 error feedback (or NULL). */
struct pipe_fsdp_chunk;
struct pipe_dp_zero {
	struct dp_zero z;
	struct dp_wire wire;
	char what[32];		/* a range, in the collectives' step labels */
	struct dp_fsdp *fsdp;	/* --zero 3 (pipe_dp_fsdp.c), or NULL */
	struct pipe_fsdp_chunk *ch;	/* its units per chunk */
	struct comm *shard, *rep;	/* --shard-group host: its groups */
	uint64_t sent;		/* its bytes sent, at the step's start */
	/* divided experts (par/ep.h): z holds the ranges of no expert,
	 * ze the experts' over ep->rep through ewire; 0 ranges without */
	struct dp_zero ze;
	struct dp_wire ewire;
	char ewhat[32];
};
int pipe_dp_zero_init(struct pipe_run *r);
void pipe_dp_zero_free(struct pipe_run *r);
float *pipe_dp_zero_wire_ef(const struct pipe_run *r);
/* ZeRO's state: z, or under --zero 3 the dp_fsdp's. */
struct dp_zero *pipe_dp_zero_state(const struct pipe_run *r);
/* ZeRO 1/2's step over z and, with divided experts, ze: reduce every
 * range's gradient sums; update steps this replica's slices and
 * allgathers them; grad_bytes: the reduced gradients' (whole: the
 * stage's floats). */
int pipe_dp_zero_reduce(struct pipe_run *r);
void pipe_dp_zero_step(struct pipe_run *r, float scale);
int pipe_dp_zero_allgather(struct pipe_run *r);
size_t pipe_dp_zero_grad_bytes(const struct pipe_run *r, size_t whole);

/* ZeRO-3 on the DP axis (pipe_dp_fsdp.c): init re-cuts the stage's
 * parameters into units (own, opt) and starts dp_fsdp over them; begin
 * opens a step's pass (every unit back to its slices); sync ends it
 * after the schedule (the reduce-scatters; its times into the step's
 * stat, *sent moved back by the pass's bytes, counted as the DP axis's); settle waits for the gathers in flight before the
 * pipeline's messages; whole: every unit whole (the end). */
int pipe_dp_fsdp_init(struct pipe_run *r);
void pipe_dp_fsdp_free(struct pipe_run *r);
void pipe_dp_fsdp_begin(struct pipe_run *r);
int pipe_dp_fsdp_sync(struct pipe_run *r, uint64_t *sent);
void pipe_dp_fsdp_settle(struct pipe_run *r);
/* arm: pipe_dp_sync_arm's under --zero 3 (0: not ZeRO-3): the chunk's
 * last backward (split: weight part) of the step posts each unit's
 * reduce-scatter through ts->done. */
int pipe_dp_fsdp_arm(struct pipe_run *r, struct tp_stage *ts, int weight);
int pipe_dp_whole(struct pipe_run *r);
/* --ft with one replica left (pipe_dp_ft_zero.c): own and opt re-cut into
 * the units alone, so that the state keeps ZeRO-3's ranges. */
int pipe_dp_fsdp_units(struct pipe_run *r);

/* The DP axis's gradient sync but ZeRO's (pipe_dp_sync.c): init (after the
 * parameters are final; from cfg->resume, the state pipe_ckpt keeps)
 * and free its state; sync: the stage's gradients
 * summed over its replicas in collx-dp's buckets as cfg->dpo says (none
 * when local SGD's replicas drift); scale: the update's gradient scale;
 * outer: after the update, local SGD's sync and outer step when due.
 * For checkpoints, the state indexed as r->params (NULL: none kept):
 * --wire int8's error feedback (ZeRO's too), PowerSGD, the outer
 * momentum. */
int pipe_dp_sync_init(struct pipe_run *r);
void pipe_dp_sync_free(struct pipe_run *r);
int pipe_dp_sync_grads(struct pipe_run *r, uint64_t *sent);
/* Before each backward of a tp_stage and each weight part of a split one
 * (arm; weight: which) and after it (settle): on the chunk's last one
 * that finishes gradients, when the replicas overlap their sums with it,
 * the buckets go as ts says its layers are done, and settle waits for
 * them before any other communication (sync_grads then sends the rest
 * and gives their result, *sent: the DP group's bytes sent count when
 * they began). */
void pipe_dp_sync_arm(struct pipe_run *r, struct tp_stage *ts, int weight);
void pipe_dp_sync_settle(struct pipe_run *r, struct tp_stage *ts);
float pipe_dp_sync_scale(const struct pipe_run *r);
int pipe_dp_sync_outer(struct pipe_run *r);
float *pipe_dp_sync_wire_ef(const struct pipe_run *r);
struct dp_powersgd *pipe_dp_sync_powersgd(const struct pipe_run *r);
float *pipe_dp_sync_outer_m(const struct pipe_run *r);
/* The sums left after the backward running on into the next forward
 * (pipe_dp_sync.c, run-on): post, in the update, posts them with the
 * update of each bucket after its sum (1: posted, the update is theirs;
 * 0: not built, or not due; -1: failed); pending: they run (the step's
 * gradients zeroed by them); report: fn on step k, now or, while its
 * sums run on, once they are all in (before the next step sends). */
int pipe_dp_sync_post(struct pipe_run *r);
int pipe_dp_sync_pending(const struct pipe_run *r);
void pipe_dp_sync_report(struct pipe_run *r, long k, pipe_step_fn fn,
    void *ctx, const struct pipe_result *res);

/* Checkpoints (pipe_ckpt.c): this stage's optimizer state from
 * cfg->resume; the whole model on rank 0; model and state written after
 * `done` steps (collective); sync_resume: the slow links' state (error
 * feedback, PowerSGD's, local SGD's) from cfg->resume, refused (exit 3)
 * where it does not fit this run. */
int pipe_ckpt_resume(struct pipe_run *r);
int pipe_ckpt_sync_resume(struct pipe_run *r);
int pipe_gather_params(struct pipe_run *r);
int pipe_ckpt_write(struct pipe_run *r, long done);

/* Every stage's bubble and peak activations to rank 0 (pipe_stats.c). */
int pipe_gather_stats(struct pipe_run *r, struct pipe_result *res);

/* The trace (pipe_trace.c): a span of this stage when cfg->trace; every
 * stage's spans to rank 0, on rank 0's clock. */
void pipe_span(struct pipe_run *r, char kind, int mb, double t0, double t1);
int pipe_gather_spans(struct pipe_run *r, struct pipe_result *res);

/* The trace's clock (pipe_clock.c): this rank's clock against rank 0's,
 * sampled by every rank together (collective); this rank's time t on rank
 * 0's clock, from the samples a and b taken before and after it. */
int pipe_clock_sample(struct pipe_run *r, struct pipe_clock *out);
double pipe_clock_root(const struct pipe_clock *a, const struct pipe_clock *b,
    double t);
/* How far off pipe_clock_root can be between samples a and b. */
double pipe_clock_err(const struct pipe_clock *a, const struct pipe_clock *b);

#endif
