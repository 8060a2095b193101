/* moe: the mixture-of-experts feed-forward layer: a softmax router, top-k
 * routing with an optional capacity per expert, each expert an mlp run
 * by nn_mlp_forward/backward on the rows routed to it (so the experts'
 * matrix products are nn_linear_*'s), and the auxiliary load-balancing
 * loss's derivative. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "nn/nn.h"

int
nn_moe_capacity(const struct nn_moe_cfg *c, int n)
{
	if (c->capacity <= 0.0)
		return n;
	double cap = ceil(c->capacity * n * c->topk / c->experts);

	return cap < n ? (int)cap : n;
}

size_t
nn_moe_acts_size(const struct nn_moe_cfg *c, int n, int d, int f)
{
	size_t E = (size_t)c->experts, nk = (size_t)n * c->topk;

	return (size_t)n * E + nk + E + 1 + 2 * nk * d + 2 * nk * f + 3 * E + 1 +
	    2 * (size_t)n;
}

void
nn_moe_acts_bind(struct nn_moe_acts *a, float *buf, const struct nn_moe_cfg *c,
    int n, int d, int f)
{
	size_t E = (size_t)c->experts, nk = (size_t)n * c->topk;

	a->probs = buf, buf += (size_t)n * E;
	a->rows = (int32_t *)buf, buf += nk;
	a->start = (int32_t *)buf, buf += E + 1;
	a->xe = buf, buf += nk * d;
	a->fc1 = buf, buf += nk * f;
	a->gelu = buf, buf += nk * f;
	a->ye = buf, buf += nk * d;
	a->routed = buf, buf += E;
	a->psum = buf, buf += E;
	a->daux = buf, buf += E;
	a->dropped = buf, buf += 1;
	a->sort = buf;
}

/* Row softmax of the router's logits, in place. */
static void
softmax_rows(float *p, int n, int E)
{
	for (int t = 0; t < n; t++) {
		float *r = p + (size_t)t * E, mx = r[0];
		double sum = 0.0;
		for (int e = 1; e < E; e++)
			mx = r[e] > mx ? r[e] : mx;
		for (int e = 0; e < E; e++) {
			r[e] = expf(r[e] - mx);
			sum += r[e];
		}
		for (int e = 0; e < E; e++)
			r[e] = (float)(r[e] / sum);
	}
}

/* One assignment competing for an expert's capacity. */
struct cand {
	float p;
	int32_t t;
};

/* Highest p first, then lower token. */
static int
cand_cmp(const void *a, const void *b)
{
	const struct cand *x = a, *y = b;

	if (x->p != y->p)
		return x->p > y->p ? -1 : 1;
	return (x->t > y->t) - (x->t < y->t);
}

static int
tok_cmp(const void *a, const void *b)
{
	const struct cand *x = a, *y = b;

	return (x->t > y->t) - (x->t < y->t);
}

/* Whether expert e is among token row r's K highest (ties: lower index):
 * fewer than K experts beat it. */
static int
chosen(const float *r, int E, int K, int e)
{
	int above = 0;

	for (int j = 0; j < E && above < K; j++)
		above += r[j] > r[e] || (r[j] == r[e] && j < e);
	return above < K;
}

/* Fills rows/start and the routing statistics from probs; cand holds n
 * entries. */
static void
route(struct nn_moe_acts *a, struct cand *cand, const struct nn_moe_cfg *c,
    int n)
{
	int E = c->experts, cap = nn_moe_capacity(c, n), at = 0, drop = 0;

	for (int e = 0; e < E; e++) {
		int m = 0;
		double ps = 0.0;
		for (int t = 0; t < n; t++) {
			const float *r = a->probs + (size_t)t * E;
			ps += r[e];
			if (chosen(r, E, c->topk, e))
				cand[m++] = (struct cand){ r[e], t };
		}
		a->routed[e] = (float)m;
		a->psum[e] = (float)ps;
		if (m > cap) {
			qsort(cand, (size_t)m, sizeof(*cand), cand_cmp);
			drop += m - cap;
			m = cap;
			qsort(cand, (size_t)m, sizeof(*cand), tok_cmp);
		}
		a->start[e] = at;
		for (int i = 0; i < m; i++)
			a->rows[at++] = cand[i].t;
	}
	a->start[E] = at;
	*a->dropped = (float)drop;
}

static struct nn_mlp_acts
expert_acts(const struct nn_moe_acts *a, int e, int f)
{
	size_t off = (size_t)a->start[e] * f;
	struct nn_mlp_acts m = { a->fc1 + off, a->gelu + off };

	return m;
}

void
nn_moe_forward(float *y, struct nn_moe_acts *a, const struct nn_moe_w *w,
    const float *x, const struct nn_moe_cfg *c, int n, int d, int f,
    enum nn_act act)
{
	int E = c->experts;

	nn_linear_forward(a->probs, x, w->router, NULL, n, d, E);
	softmax_rows(a->probs, n, E);
	route(a, (struct cand *)a->sort, c, n);
	memset(a->daux, 0, (size_t)E * sizeof(float));
	memset(y, 0, (size_t)n * d * sizeof(float));
	for (int e = 0; e < E; e++) {
		int r0 = a->start[e], m = a->start[e + 1] - r0;
		float *xe = a->xe + (size_t)r0 * d, *ye = a->ye + (size_t)r0 * d;
		struct nn_mlp_acts ma = expert_acts(a, e, f);
		for (int i = 0; i < m; i++)
			memcpy(xe + (size_t)i * d, x + (size_t)a->rows[r0 + i] * d,
			    (size_t)d * sizeof(float));
		nn_mlp_forward(ye, &ma, &w->ex[e], xe, m, d, f, d, act);
		for (int i = 0; i < m; i++) {
			int t = a->rows[r0 + i];
			float p = a->probs[(size_t)t * E + e];
			float *yt = y + (size_t)t * d;
			const float *src = ye + (size_t)i * d;
			for (int j = 0; j < d; j++)
				yt[j] += p * src[j];
		}
	}
}

size_t
nn_moe_scratch_size(const struct nn_moe_cfg *c, int n, int d, int f)
{
	size_t nk = (size_t)n * c->topk;

	return 2 * nk * d + 2 * (size_t)n * f + (size_t)n * c->experts;
}

void
nn_moe_backward(float *dx, const struct nn_moe_w *g, float *scratch,
    const float *dy, const struct nn_moe_acts *a, const struct nn_moe_w *w,
    const float *x, const struct nn_moe_cfg *c, int n, int d, int f,
    enum nn_act act)
{
	int E = c->experts;
	size_t nk = (size_t)n * c->topk;
	float *dye = scratch, *dxe = dye + nk * d, *mscr = dxe + nk * d;
	float *dp = mscr + 2 * (size_t)n * f;

	/* d/dp_e: the auxiliary loss's for every token, then each kept
	 * assignment's dy . expert_e(x) */
	for (int t = 0; t < n; t++)
		memcpy(dp + (size_t)t * E, a->daux, (size_t)E * sizeof(float));
	for (int e = 0; e < E; e++) {
		int r0 = a->start[e], m = a->start[e + 1] - r0;
		float *dyr = dye + (size_t)r0 * d, *dxr = dxe + (size_t)r0 * d;
		const float *ye = a->ye + (size_t)r0 * d;
		struct nn_mlp_acts ma = expert_acts(a, e, f);
		for (int i = 0; i < m; i++) {
			int t = a->rows[r0 + i];
			float p = a->probs[(size_t)t * E + e];
			const float *dyt = dy + (size_t)t * d;
			double dot = 0.0;
			for (int j = 0; j < d; j++) {
				dyr[(size_t)i * d + j] = p * dyt[j];
				dot += (double)dyt[j] * ye[(size_t)i * d + j];
			}
			dp[(size_t)t * E + e] += (float)dot;
		}
		memset(dxr, 0, (size_t)m * d * sizeof(float));
		nn_mlp_backward(dx ? dxr : NULL, &g->ex[e], mscr, dyr, &ma,
		    &w->ex[e], a->xe + (size_t)r0 * d, m, d, f, d, act);
		if (dx)
			for (int i = 0; i < m; i++)
				nn_add(dx + (size_t)a->rows[r0 + i] * d,
				    dxr + (size_t)i * d, (size_t)d);
	}
	/* through the softmax: dlogit = p * (dp - sum_j p_j dp_j), in place */
	for (int t = 0; t < n; t++) {
		const float *p = a->probs + (size_t)t * E;
		float *r = dp + (size_t)t * E;
		double s = 0.0;
		for (int e = 0; e < E; e++)
			s += (double)p[e] * r[e];
		for (int e = 0; e < E; e++)
			r[e] = (float)(p[e] * (r[e] - s));
	}
	nn_linear_backward(dx, g->router, NULL, dp, x, w->router, n, d, E);
}

double
nn_moe_aux(float *daux, const double *routed, const float *psum, int experts,
    double aux, double tokens, double scale)
{
	double all = 0.0, loss = 0.0;

	for (int e = 0; e < experts; e++)
		all += routed[e];
	for (int e = 0; e < experts; e++) {
		double fe = all > 0.0 ? routed[e] / all : 0.0;
		double k = aux * experts * fe / tokens;
		loss += k * psum[e];
		daux[e] = (float)(scale * k);
	}
	return loss;
}
