/* dp_overlap: gradient communication overlapped with the backward pass. A
 * communication thread runs each bucket's operation (allreduce,
 * reduce-scatter, parameter-server round) as soon as the backward pass has
 * finished every gradient in it, while the main thread computes the layers
 * below. Buckets go in one order fixed before training (the backward
 * stage that completes them, then from the last), the same on every rank,
 * and each bucket's operation is the one the non-overlapped path runs, so
 * the results are bit for bit the same. Only the thread uses the comm
 * group between dp_ovl_begin and dp_ovl_wait. One runner for collx-dp's
 * buckets (dp.c) and collx-train's DP axis (pipe_dp_sync.c). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cli/util.h"
#include "par/dp_sync.h"

struct dp_ovl {
	dp_ovl_fn fn;
	void *ctx;
	int nb;
	pthread_t thr;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int *order;		/* buckets in posting order */
	int *ready;		/* the stage after which bucket i is complete */
	int nposted, ndone, quit, failed;
	int limit;		/* dp_ovl_stage posts no more */
	double busy;		/* seconds the thread spent in fn this step */
	int have_thr, have_sync;
};

/* Posting order: by completing stage, later buckets first within one. */
static void
ovl_order(struct dp_ovl *o)
{
	int i, j, n = o->nb;

	for (i = 0; i < n; i++)
		o->order[i] = n - 1 - i;
	for (i = 1; i < n; i++)
		for (j = i; j > 0 && o->ready[o->order[j]] <
		    o->ready[o->order[j - 1]]; j--) {
			int t = o->order[j];
			o->order[j] = o->order[j - 1];
			o->order[j - 1] = t;
		}
}

static void *
ovl_main(void *arg)
{
	struct dp_ovl *o = arg;

	pthread_mutex_lock(&o->mu);
	for (;;) {
		while (!o->quit && o->ndone == o->nposted)
			pthread_cond_wait(&o->cv, &o->mu);
		if (o->quit)
			break;
		int b = o->order[o->ndone], failed = o->failed;
		pthread_mutex_unlock(&o->mu);
		double t0 = cli_now();
		int rc = failed ? -1 : o->fn(o->ctx, b);
		double dt = cli_now() - t0;
		pthread_mutex_lock(&o->mu);
		o->busy += dt;
		if (rc < 0)
			o->failed = 1;
		o->ndone++;
		pthread_cond_broadcast(&o->cv);
	}
	pthread_mutex_unlock(&o->mu);
	coll_thread_release();
	return NULL;
}

struct dp_ovl *
dp_ovl_new(int nb, const int *ready, dp_ovl_fn fn, void *ctx,
    struct comm *c, char *err, size_t errlen)
{
	struct dp_ovl *o = calloc(1, sizeof(*o));
	const char *why = "out of memory";

	if (o == NULL)
		goto fail;
	o->fn = fn;
	o->ctx = ctx;
	o->nb = o->limit = nb;
	o->order = calloc((size_t)nb + 1, sizeof(int));
	o->ready = calloc((size_t)nb + 1, sizeof(int));
	if (o->order == NULL || o->ready == NULL)
		goto fail;
	memcpy(o->ready, ready, (size_t)nb * sizeof(int));
	ovl_order(o);
	why = "cannot make a mutex";
	if (pthread_mutex_init(&o->mu, NULL) != 0)
		goto fail;
	why = "cannot make a condition variable";
	if (pthread_cond_init(&o->cv, NULL) != 0) {
		pthread_mutex_destroy(&o->mu);
		goto fail;
	}
	o->have_sync = 1;
	/* The thread waits beside the compute on its core: spinning would
	 * take the core from the backward pass it is meant to hide behind. */
	if (c != NULL)
		comm_set_spin(c, 0);
	why = "cannot start the communication thread";
	if (pthread_create(&o->thr, NULL, ovl_main, o) != 0)
		goto fail;
	o->have_thr = 1;
	return o;
fail:
	dp_ovl_free(o);
	cli_fail(err, errlen, "%s", why);
	return NULL;
}

void
dp_ovl_begin(struct dp_ovl *o)
{
	pthread_mutex_lock(&o->mu);
	o->nposted = o->ndone = 0;
	o->busy = 0;
	pthread_mutex_unlock(&o->mu);
}

/* Posts every bucket complete once stage (and all before it) is done.
 * An nn_grad_fn. */
void
dp_ovl_stage(void *ctx, int stage)
{
	struct dp_ovl *o = ctx;
	int p;

	pthread_mutex_lock(&o->mu);
	p = o->nposted;
	while (p < o->limit && o->ready[o->order[p]] <= stage)
		p++;
	if (p != o->nposted) {
		o->nposted = p;
		pthread_cond_broadcast(&o->cv);
	}
	pthread_mutex_unlock(&o->mu);
}

/* Waits for the buckets posted so far, not posting the rest: the caller
 * is about to use links the thread's group shares. */
void
dp_ovl_drain(struct dp_ovl *o)
{
	pthread_mutex_lock(&o->mu);
	while (o->ndone < o->nposted)
		pthread_cond_wait(&o->cv, &o->mu);
	pthread_mutex_unlock(&o->mu);
}

/* Posts every bucket once the posted ones are done; returns how many
 * were done before. */
int
dp_ovl_post_rest(struct dp_ovl *o)
{
	int p;

	pthread_mutex_lock(&o->mu);
	while (o->ndone < o->nposted)
		pthread_cond_wait(&o->cv, &o->mu);
	p = o->nposted;
	o->nposted = o->nb;
	pthread_cond_broadcast(&o->cv);
	pthread_mutex_unlock(&o->mu);
	return p;
}

/* Another posting order, the same on every rank; dp_ovl_stage posts no
 * more than its first limit buckets (the rest: post_rest or wait). */
void
dp_ovl_set_order(struct dp_ovl *o, const int *order, int limit)
{
	pthread_mutex_lock(&o->mu);
	memcpy(o->order, order, (size_t)o->nb * sizeof(int));
	o->limit = limit;
	pthread_mutex_unlock(&o->mu);
}

const int *
dp_ovl_order(const struct dp_ovl *o)
{
	return o->order;
}

double
dp_ovl_busy(struct dp_ovl *o)
{
	double b;

	pthread_mutex_lock(&o->mu);
	b = o->busy;
	pthread_mutex_unlock(&o->mu);
	return b;
}

void
dp_ovl_done(struct dp_ovl *o, int n)
{
	pthread_mutex_lock(&o->mu);
	while (o->ndone < n)
		pthread_cond_wait(&o->cv, &o->mu);
	pthread_mutex_unlock(&o->mu);
}

int
dp_ovl_wait(struct dp_ovl *o, double *busy)
{
	int failed;

	pthread_mutex_lock(&o->mu);
	o->nposted = o->nb;
	pthread_cond_broadcast(&o->cv);
	while (o->ndone < o->nb)
		pthread_cond_wait(&o->cv, &o->mu);
	failed = o->failed;
	*busy = o->busy;
	pthread_mutex_unlock(&o->mu);
	return failed ? -1 : 0;
}

void
dp_ovl_free(struct dp_ovl *o)
{
	if (o == NULL)
		return;
	if (o->have_thr) {
		pthread_mutex_lock(&o->mu);
		o->quit = 1;
		pthread_cond_broadcast(&o->cv);
		pthread_mutex_unlock(&o->mu);
		pthread_join(o->thr, NULL);
	}
	if (o->have_sync) {
		pthread_cond_destroy(&o->cv);
		pthread_mutex_destroy(&o->mu);
	}
	free(o->order);
	free(o->ready);
	free(o);
}
