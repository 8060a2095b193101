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

void
nn_moe_route(struct nn_moe_acts *a, const struct nn_moe_cfg *c, int n)
{
	int E = c->experts, cap = nn_moe_capacity(c, n), at = 0, drop = 0;
	struct cand *cand = (struct cand *)a->sort;

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
nn_moe_gather(struct nn_moe_acts *a, const float *x, int E, int d)
{
	for (int i = 0; i < a->start[E]; i++)
		memcpy(a->xe + (size_t)i * d, x + (size_t)a->rows[i] * d,
		    (size_t)d * sizeof(float));
}

/* p_e of kept assignment i, expert e's. */
static float
kept_p(const struct nn_moe_acts *a, int i, int e, int E)
{
	return a->probs[(size_t)a->rows[i] * E + e];
}

void
nn_moe_combine(float *y, const struct nn_moe_acts *a, int n, int E, int d)
{
	memset(y, 0, (size_t)n * d * sizeof(float));
	for (int e = 0; e < E; e++)
		for (int i = a->start[e]; i < a->start[e + 1]; i++) {
			float p = kept_p(a, i, e, E), *yt = y +
			    (size_t)a->rows[i] * d;
			const float *src = a->ye + (size_t)i * d;
			for (int j = 0; j < d; j++)
				yt[j] += p * src[j];
		}
}

void
nn_moe_grad_out(float *dye, float *dp, const struct nn_moe_acts *a,
    const float *dy, int E, int d)
{
	for (int e = 0; e < E; e++)
		for (int i = a->start[e]; i < a->start[e + 1]; i++) {
			int t = a->rows[i];
			float p = kept_p(a, i, e, E);
			const float *dyt = dy + (size_t)t * d;
			const float *ye = a->ye + (size_t)i * d;
			double dot = 0.0;
			for (int j = 0; j < d; j++) {
				dye[(size_t)i * d + j] = p * dyt[j];
				dot += (double)dyt[j] * ye[j];
			}
			dp[(size_t)t * E + e] += (float)dot;
		}
}

void
nn_moe_scatter(float *dx, const float *dxe, const struct nn_moe_acts *a,
    int E, int d)
{
	for (int i = 0; i < a->start[E]; i++)
		nn_add(dx + (size_t)a->rows[i] * d, dxe + (size_t)i * d,
		    (size_t)d);
}

int
nn_moe_forward(float *y, struct nn_moe_acts *a, const struct nn_moe_w *w,
    const float *x, const struct nn_moe_cfg *c, int n, int d, int f,
    enum nn_act act)
{
	int E = c->experts;

	nn_linear_forward(a->probs, x, w->router, NULL, n, d, E);
	softmax_rows(a->probs, n, E);
	if (c->route == NULL)
		nn_moe_route(a, c, n);
	else if (c->route->route(c->route->ctx, a, c, n) < 0)
		return -1;
	memset(a->daux, 0, (size_t)E * sizeof(float));
	if (c->ep != NULL)
		return c->ep->forward(c->ep->ctx, y, a, w, x, c, n, d, f, act);
	nn_moe_gather(a, x, E, d);
	for (int e = 0; e < E; e++) {
		int r0 = a->start[e], m = a->start[e + 1] - r0;
		struct nn_mlp_acts ma = expert_acts(a, e, f);
		nn_mlp_forward(a->ye + (size_t)r0 * d, &ma, &w->ex[e],
		    a->xe + (size_t)r0 * d, m, d, f, d, act);
	}
	nn_moe_combine(y, a, n, E, d);
	return 0;
}

size_t
nn_moe_scratch_size(const struct nn_moe_cfg *c, int n, int d, int f)
{
	size_t nk = (size_t)n * c->topk;

	return 2 * nk * d + 2 * (size_t)n * f + (size_t)n * c->experts;
}

int
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
	if (c->ep != NULL) {
		if (c->ep->backward(c->ep->ctx, dx, dp, g, dy, a, w, c, n, d, f,
		    act) < 0)
			return -1;
	} else {
		nn_moe_grad_out(dye, dp, a, dy, E, d);
		memset(dxe, 0, (size_t)a->start[E] * d * sizeof(float));
		for (int e = 0; e < E; e++) {
			int r0 = a->start[e], m = a->start[e + 1] - r0;
			struct nn_mlp_acts ma = expert_acts(a, e, f);
			nn_mlp_backward(dx ? dxe + (size_t)r0 * d : NULL,
			    &g->ex[e], mscr, dye + (size_t)r0 * d, &ma,
			    &w->ex[e], a->xe + (size_t)r0 * d, m, d, f, d, act);
		}
		if (dx)
			nn_moe_scatter(dx, dxe, a, E, d);
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
	return 0;
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
