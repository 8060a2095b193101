/*
 * dp_local: local SGD, DiLoCo's outer loop (--sync-every H). With H > 1
 * each replica steps its own inner optimizer on its own part of every
 * batch (its gradient sum over its count samples, scaled by 1/count), and
 * the replicas drift apart. After step k with (k + 1) % H == 0, and
 * after the last step, they sync. With a the parameters of the last sync
 * (the anchor), p_r replica r's, W the ranks:
 *
 *	d = (1/W) sum_r (a - p_r)	the buckets' allreduce (in --wire)
 *	b = mu b + d			outer momentum, from 0
 *	p = a - lr (d + mu b)		torch.optim.SGD, nesterov=True
 *
 * and a = p. The last line is computed as m - u with m = a - d, the
 * replicas' mean, and u = (lr - 1) d + lr mu b, which is exactly 0 for
 * lr 1 and mu 0: that outer step leaves the mean as it is, bit for bit.
 *
 * With H = 1 the replicas never drift: the step is plain data
 * parallelism's (gradients averaged before the inner update, which for
 * SGD is the same as averaging the updated parameters; overlap, ZeRO and
 * --wire as without local SGD), m is that step's result, d = a - m needs
 * no communication, and --outer-lr 1 --outer-momentum 0 is plain DP byte
 * for byte.
 */
#include <stdlib.h>
#include <string.h>

#include "par/dp_int.h"

int
dp_local_init(struct dp_run *r)
{
	size_t n = r->m->nparams ? r->m->nparams : 1;

	r->anchor = malloc(n * sizeof(float));
	r->outer_m = calloc(n, sizeof(float));
	if (r->anchor == NULL || r->outer_m == NULL)
		return dp_runtime_failed(r, "rank %d: %s", "out of memory");
	memcpy(r->anchor, r->m->params, r->m->nparams * sizeof(float));
	return 0;
}

int
dp_local_due(const struct dp_run *r, long k)
{
	long h = r->cfg->dpo.sync_every;

	return h > 0 && ((k + 1) % h == 0 || k + 1 == r->cfg->steps);
}

void
dp_local_step(struct dp_run *r)
{
	if (r->count > 0)
		nn_optim_step(&r->opt, r->m->params, r->m->grads,
		    (float)(1.0 / (double)r->count));
}

void
dp_local_delta(const float *a, const float *p, float *g, size_t n)
{
	for (size_t i = 0; i < n; i++)
		g[i] = a[i] - p[i];
}

void
dp_local_apply(float *p, float *a, float *b, const float *g, size_t n,
    float w, float lr, float mu, int drift)
{
	for (size_t i = 0; i < n; i++) {
		float d = drift ? g[i] / w : a[i] - p[i];
		float mean = drift ? a[i] - d : p[i], u;

		b[i] = mu * b[i] + d;
		u = (lr - 1) * d + lr * mu * b[i];
		/* u == 0 keeps mean's bits, -0.0 included */
		p[i] = u != 0 ? mean - u : mean;
		a[i] = p[i];
	}
}

int
dp_local_outer(struct dp_run *r)
{
	int drift = r->cfg->dpo.sync_every > 1;
	size_t n = r->m->nparams;

	if (drift) {
		dp_local_delta(r->anchor, r->m->params, r->m->grads, n);
		if (dp_buckets_sync(r) < 0)
			return -1;
	}
	dp_local_apply(r->m->params, r->anchor, r->outer_m, r->m->grads, n,
	    (float)r->world, (float)r->cfg->dpo.outer_lr,
	    (float)r->cfg->dpo.outer_momentum, drift);
	return 0;
}

void
dp_local_free(struct dp_run *r)
{
	free(r->anchor);
	free(r->outer_m);
	r->anchor = r->outer_m = NULL;
}
