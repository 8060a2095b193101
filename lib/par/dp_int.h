/* dp_int: the state of one data-parallel run, shared by the training
 * loop (dp.c) and its parameter-server set-up (dp_ps.c). */
#ifndef COLLX_DP_INT_H
#define COLLX_DP_INT_H

#include <pthread.h>
#include <signal.h>

#include "par/dp.h"

/* A parameter server running in this rank (colocated async mode). */
struct colo_server {
	pthread_t thr;
	struct ps_server_cfg cfg;
	struct nn_optim opt;
	float *shard;
	char *layout;
	volatile sig_atomic_t stop;
	int started, rc;
	char err[320];
};

struct run {
	struct nn_model *m;
	const struct train_data *d;
	struct comm *c;
	const struct dp_cfg *cfg;
	int rank, world;
	long start, count;		/* this rank's part of every batch */
	struct train_order ord;
	struct train_batch tb;
	size_t *bucket;			/* nbucket+1 boundaries, in floats */
	int nbucket;
	struct nn_optim opt;		/* whole vector, or a colocated shard */
	int have_opt;
	struct ps_client *cl;		/* external or colocated async servers */
	struct colo_server *srv;
	enum train_err kind;
	char *err;
	size_t errlen;
};


/* Failures: the reason into r->err, its kind into r->kind; -1. */
int dp_comm_failed(struct run *r);
int dp_runtime_failed(struct run *r, const char *fmt, const char *why);
/* Every rank must hold bitwise the same parameters. */
int dp_verify_same(struct run *r, const char *when);

/* Parameter-server set-up (dp_ps.c). */
int dp_ps_connect(struct run *r, const char *addrs);
int dp_colo_async_start(struct run *r);
int dp_colo_server_stop(struct run *r, int ok);

#endif
