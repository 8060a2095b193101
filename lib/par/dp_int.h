/* dp_int: the state of one data-parallel run, shared by the training
 * loop (dp.c) and its parameter-server set-up (dp_ps.c). */
#ifndef COLLX_DP_INT_H
#define COLLX_DP_INT_H

#include <pthread.h>
#include <signal.h>

#include "par/dp.h"
#include "par/dp_fsdp.h"
#include "par/dp_sync.h"

struct dp_ovl;
struct dp_ftz;

/* A parameter server running in this rank (colocated async mode). */
struct colo_server {
	pthread_t thr;
	struct ps_server_cfg cfg;
	struct nn_optim opt;
	float *shard;
	char *layout;
	volatile sig_atomic_t stop;
	int started, rc;
	char err[COLLX_ERRLEN];
};

struct dp_run {
	struct nn_model *m;
	const struct train_data *d;
	struct comm *c;
	const struct dp_cfg *cfg;
	int rank, world;
	long start, count;		/* this rank's part of every batch */
	int moe_failed;			/* the experts' count sum failed: err
					 * and kind are its */
	struct train_order ord;
	struct train_batch tb;
	size_t *bucket;			/* nbucket+1 boundaries, in floats */
	int nbucket;
	int *ready;			/* the stage completing each bucket */
	struct nn_optim opt;		/* whole vector, or a colocated shard */
	int have_opt;
	struct nn_optim *bopt;		/* per bucket: ZeRO slice, or shard */
	int nbopt;			/* of a colocated server (overlap) */
	int (*bucket_fn)(struct dp_run *, int);	/* a bucket's sync, or NULL */
	struct dp_ovl *ovl;		/* overlap: the communication thread */
	struct dp_zero zero;		/* ZeRO over the buckets (bopt its
					 * optimizers) */
	struct dp_fsdp *fsdp;		/* ZeRO-3 over the layers (bopt its
					 * optimizers), or NULL */
	struct comm *shard, *rep;	/* hybrid ZeRO-3: this host's ranks,
					 * the same shard's on the others */
	uint64_t sub_sent;		/* hybrid: their bytes so far */
	int *owner;			/* hybrid: slice q's checkpoint writer */
	size_t ckpt_peak;		/* ZeRO-3: the most parameter bytes
					 * held while writing a checkpoint */
	struct dp_wire wire;		/* DP_ALLREDUCE: --wire and its state */
	float *anchor, *outer_m;	/* local SGD: parameters at the last
					 * sync, the outer momentum */
	struct dp_powersgd *psgd;		/* --powersgd's state, or NULL */
	long k;				/* the step running */
	struct ps_client *cl;		/* external or colocated async servers */
	struct colo_server *srv;
	struct comm *ft_group;		/* --ft: the survivors' group, or NULL */
	int joining;			/* --ft: started again, to copy the
					 * state of the others */
	int fresh;			/* and that copy not yet complete */
	struct dp_ftz *ftz;		/* --ft under ZeRO 1/2, or NULL */
	enum train_err kind;
	char *err;
	size_t errlen;
};


/* Failures (dp_fail.c, a leaf every file calls): the reason into r->err,
 * its kind into r->kind; -1. */
int dp_comm_failed(struct dp_run *r);
int dp_runtime_failed(struct dp_run *r, const char *fmt, const char *why);
/* Every rank must hold bitwise the same parameters. */
int dp_verify_same(struct dp_run *r, const char *when);
/* r->bucket and r->nbucket from r->m and r->cfg->bucket_bytes (dp.c). */
int dp_buckets_make(struct dp_run *r);

/* A bucket's sync (r->bucket_fn). */
typedef int (*dp_bucket_fn)(struct dp_run *r, int bucket);

/* Every bucket's sync (r->bucket_fn) on this thread, last bucket first
 * (dp.c). */
int dp_buckets_sync(struct dp_run *r);

/* Local SGD (dp_local.c; the scheme: the file's comment). init after the
 * parameters are final (resumed); due: whether step k ends with a sync;
 * step: one of the replica's own steps (H > 1) on r->m's gradients;
 * outer: the sync and outer step. */
int dp_local_init(struct dp_run *r);
int dp_local_due(const struct dp_run *r, long k);
void dp_local_step(struct dp_run *r);
int dp_local_outer(struct dp_run *r);
void dp_local_free(struct dp_run *r);

/* PowerSGD over the buckets (dp_powersgd.c): init plans them from the
 * model's tensors; bucket is a dp_bucket_fn (before --powersgd-start a
 * plain allreduce); free. */
int dp_powersgd_init(struct dp_run *r);
int dp_powersgd_bucket(struct dp_run *r, int bucket);
void dp_powersgd_free(struct dp_run *r);

/* Checkpoints (dp_ckpt.c): this rank's optimizer state from
 * cfg->resume, and the whole state written after `done` steps. */
int dp_ckpt_restore(struct dp_run *r);
int dp_ckpt_save(struct dp_run *r, long done);

/* --ft (dp_ft.c): after step *k failed, the survivors' group in r->c,
 * *k and s[] at the step the one furthest on reached: 0, or -1 (not
 * --ft, or not a peer's loss, or no group). free: the group closed. */
int dp_ft_recover(struct dp_run *r, long *k, struct train_step *s);
/* At the start of step *k: the ranks started again that ask are
 * admitted (comm_grow), the replicas at the step of the one furthest
 * on; 0 (nobody asked, or they joined), or -1 (a peer's loss: then
 * dp_ft_recover). rejoin: a rank started again, its group the one it
 * was admitted to (before run_init); joined: its state and *k those of
 * the replicas (after it). */
int dp_ft_grow(struct dp_run *r, long *k, struct train_step *s);
int dp_ft_rejoin(struct dp_run *r);
int dp_ft_joined(struct dp_run *r, long *k, struct train_step *s);
void dp_ft_free(struct dp_run *r);

/* --ft under ZeRO 1 and 2 (dp_ft_zero.c; the scheme: the file's
 * comment). init after the state is final (resumed), a slice's mirror at
 * its ring predecessor; begin: a step starts; mirror: after the
 * reduce-scatters, the reduced slices to the mirrors; update: after the
 * loss's allreduce (the step's agreement), this rank's slices stepped and
 * the parameters allgathered (ZeRO-3: the next pass gathers them); settle: at a recovery, the replicas at the
 * same step applied (*k and s[] at the one past its agreement); recut:
 * the slices cut over r->c's replicas from their owners or mirrors (-2:
 * a slice is lost); mem: the mirror's bytes added (its moments and
 * parameters, its reduced gradients). 0, or -1 (r->err). */
int dp_ftz_init(struct dp_run *r);
void dp_ftz_begin(struct dp_run *r);
int dp_ftz_mirror(struct dp_run *r);
int dp_ftz_update(struct dp_run *r, double loss);
int dp_ftz_settle(struct dp_run *r, long *k, struct train_step *s);
int dp_ftz_recut(struct dp_run *r);
void dp_ftz_mem(const struct dp_run *r, struct dp_mem *mem);
void dp_ftz_free(struct dp_run *r);

/* ZeRO-3's run over r->c (dp.c): r->fsdp new, r->bopt's optimizers
 * cut over it (kept when --ft calls it again). 0, or -1 (r->err). */
int dp_fsdp_run_init(struct dp_run *r);

/* Parameter-server set-up (dp_ps.c). */
int dp_ps_connect(struct dp_run *r, const char *addrs);
int dp_colo_async_start(struct dp_run *r);
int dp_colo_server_stop(struct dp_run *r, int ok);

#endif
