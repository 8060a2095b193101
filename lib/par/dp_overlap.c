/* dp_overlap: gradient communication overlapped with the backward pass. A
 * communication thread runs each bucket's operation (allreduce,
 * reduce-scatter, parameter-server round) as soon as the backward pass has
 * finished every gradient in it, while the main thread computes the layers
 * below. Buckets go in one order fixed before training (the backward
 * stage that completes them, then from the last), the same on every rank,
 * and each bucket's operation is the one the non-overlapped path runs, so
 * the results are bit for bit the same. Only the thread uses the comm
 * group between dp_ovl_begin and dp_ovl_wait. */
#include <stdlib.h>
#include <string.h>

#include "cli/util.h"
#include "par/dp_int.h"

struct dp_ovl {
	struct dp_run *r;
	dp_bucket_fn fn;
	pthread_t thr;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int *order;		/* buckets in posting order */
	int *ready;		/* the stage after which bucket i is complete */
	int nposted, ndone, quit, failed;
	double busy;		/* seconds the thread spent in fn this step */
	int have_thr, have_sync;
};

/* The stage completing each bucket: the latest stage of its tensors. */
static void
ovl_ready(struct dp_ovl *o)
{
	const struct nn_model *m = o->r->m;
	size_t t;
	int i;

	for (i = 0; i < o->r->nbucket; i++)
		o->ready[i] = 0;
	for (t = 0; t < m->ntensors; t++) {
		size_t off = m->table[t].offset, end = off + m->table[t].count;
		int st = nn_model_grad_stage(m, t);

		if (end == off)
			continue;
		for (i = 0; i < o->r->nbucket; i++)
			if (off < o->r->bucket[i + 1] && end > o->r->bucket[i] &&
			    st > o->ready[i])
				o->ready[i] = st;
	}
}

/* Posting order: by completing stage, later buckets first within one. */
static void
ovl_order(struct dp_ovl *o)
{
	int i, j, n = o->r->nbucket;

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
		int rc = failed ? -1 : o->fn(o->r, b);
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

int
dp_ovl_start(struct dp_run *r, dp_bucket_fn fn)
{
	struct dp_ovl *o = calloc(1, sizeof(*o));

	if (o == NULL)
		return dp_runtime_failed(r, "rank %d: %s", "out of memory");
	r->ovl = o;
	o->r = r;
	o->fn = fn;
	o->order = calloc((size_t)r->nbucket, sizeof(int));
	o->ready = calloc((size_t)r->nbucket, sizeof(int));
	if (o->order == NULL || o->ready == NULL)
		return dp_runtime_failed(r, "rank %d: %s", "out of memory");
	ovl_ready(o);
	ovl_order(o);
	if (pthread_mutex_init(&o->mu, NULL) != 0)
		return dp_runtime_failed(r, "rank %d: %s", "cannot make a mutex");
	if (pthread_cond_init(&o->cv, NULL) != 0) {
		pthread_mutex_destroy(&o->mu);
		return dp_runtime_failed(r, "rank %d: %s", "cannot make a "
		    "condition variable");
	}
	o->have_sync = 1;
	/* The thread waits beside the compute on its core: spinning would
	 * take the core from the backward pass it is meant to hide behind. */
	if (r->c != NULL)
		comm_set_spin(r->c, 0);
	if (pthread_create(&o->thr, NULL, ovl_main, o) != 0)
		return dp_runtime_failed(r, "rank %d: %s", "cannot start the "
		    "communication thread");
	o->have_thr = 1;
	return 0;
}

void
dp_ovl_begin(struct dp_run *r)
{
	struct dp_ovl *o = r->ovl;

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
	int n = o->r->nbucket, p;

	pthread_mutex_lock(&o->mu);
	p = o->nposted;
	while (p < n && o->ready[o->order[p]] <= stage)
		p++;
	if (p != o->nposted) {
		o->nposted = p;
		pthread_cond_broadcast(&o->cv);
	}
	pthread_mutex_unlock(&o->mu);
}

int
dp_ovl_wait(struct dp_run *r, double *busy)
{
	struct dp_ovl *o = r->ovl;
	int failed;

	pthread_mutex_lock(&o->mu);
	o->nposted = r->nbucket;
	pthread_cond_broadcast(&o->cv);
	while (o->ndone < r->nbucket)
		pthread_cond_wait(&o->cv, &o->mu);
	failed = o->failed;
	*busy = o->busy;
	pthread_mutex_unlock(&o->mu);
	return failed ? -1 : 0;
}

void
dp_ovl_stop(struct dp_run *r)
{
	struct dp_ovl *o = r->ovl;

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
	r->ovl = NULL;
}
