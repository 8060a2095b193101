/* ep_gather: allgather dispatch. Every rank of the EP group gathers all
 * ranks' tokens with their router probabilities, routes each rank's
 * tokens as that rank did (nn_moe_route: the same capacity per rank's
 * micro-batch), runs its own experts on the rows routed to them, and the
 * p-weighted outputs, one block of nmax tokens per rank, are
 * reduce-scattered back. Backward gathers the output gradients and
 * reduce-scatters each token's input gradient beside its d/dp. */
#include <stdlib.h>
#include <string.h>

#include "cli/util.h"
#include "comm/coll.h"
#include "par/ep_int.h"

/* Every rank's token count into ns; *tot their sum. */
static int
gather_counts(struct ep *ep, int32_t *ns, int n, size_t *tot)
{
	int32_t mine = n;

	if (coll_allgather(ep->c, &mine, ns, 1, DT_I32, COLL_AUTO) < 0)
		return ep_failed(ep, "the token counts");
	*tot = 0;
	for (int s = 0; s < ep->X; s++)
		*tot += (size_t)ns[s];
	return 0;
}

/* Each rank's gathered block: its ns tokens' rows [ns, d], then their
 * probabilities [ns, E]; the first token of rank s among all. */
static size_t
first_token(const struct ep_saved *sv, int s)
{
	size_t at = 0;

	for (int q = 0; q < s; q++)
		at += (size_t)sv->ns[q];
	return at;
}

/*
 * Routes rank s's tokens (block g) into sv's rows for this rank's
 * experts, expert by expert (rows of an expert by source: callers run s
 * in order per expert). ra: the routing's scratch for ns tokens.
 */
static void
take_rows(struct ep *ep, struct ep_saved *sv, const float *g, int s,
    const struct nn_moe_acts *ra, int j, int *r, int d)
{
	int E = ep->E, e = ep->rank * ep->per + j, ns = sv->ns[s];
	const float *probs = g + (size_t)ns * d;

	for (int i = ra->start[e]; i < ra->start[e + 1]; i++, (*r)++) {
		int t = ra->rows[i];
		memcpy(sv->x + (size_t)*r * d, g + (size_t)t * d,
		    (size_t)d * sizeof(float));
		sv->p[*r] = probs[(size_t)t * E + e];
		sv->map[*r] = s * sv->nmax + t;
	}
	sv->cnt[s * ep->per + j] = ra->start[e + 1] - ra->start[e];
}

/* Every rank's routing (from its probabilities in G), kept in route
 * scratch: rank s's rows and start at rows + s * (nmax*K + E + 1). */
static int
route_all(struct ep *ep, const struct ep_saved *sv, const float *G,
    const struct nn_moe_cfg *c, int d, int32_t **routes)
{
	size_t per = (size_t)sv->nmax * c->topk + ep->E + 1;
	size_t fl = 3 * (size_t)ep->E + 1 + 2 * (size_t)sv->nmax;
	int32_t *rt = ep_work(ep, 2, (size_t)ep->X * per * sizeof(int32_t));
	float *st = ep_work(ep, 5, fl * sizeof(float));

	if (!rt || !st)
		return -1;
	for (int s = 0; s < ep->X; s++) {
		const float *g = G + first_token(sv, s) * (d + ep->E);
		struct nn_moe_acts ra = { .probs = (float *)g +
		    (size_t)sv->ns[s] * d, .rows = rt + s * per,
		    .start = rt + s * per + (size_t)sv->nmax * c->topk,
		    .routed = st, .psum = st + ep->E, .daux = st + 2 * ep->E,
		    .dropped = st + 3 * ep->E, .sort = st + 3 * ep->E + 1 };
		nn_moe_route(&ra, c, sv->ns[s]);
	}
	*routes = rt;
	return 0;
}

/* Rank s's routing of route_all's. */
static struct nn_moe_acts
routing(const struct ep *ep, const struct ep_saved *sv, int32_t *rt,
    const struct nn_moe_cfg *c, int s)
{
	size_t per = (size_t)sv->nmax * c->topk + ep->E + 1;
	struct nn_moe_acts ra = { .rows = rt + s * per,
	    .start = rt + s * per + (size_t)sv->nmax * c->topk };

	return ra;
}

int
ep_gather_forward(void *ctx, float *y, struct nn_moe_acts *a,
    const struct nn_moe_w *w, const float *x, const struct nn_moe_cfg *c,
    int n, int d, int f, enum nn_act act)
{
	struct ep *ep = ctx;
	int X = ep->X, E = ep->E, R = 0, r = 0;
	size_t row = (size_t)d + E, tot = 0, *cnt;
	struct ep_saved *sv;
	float *mine, *G, *out;
	int32_t *rt;
	struct ep_mark t0 = ep_mark(ep);

	int32_t *ns = ep_work(ep, 2, (size_t)X * sizeof(int32_t));

	/* the rows run here are known after the routing: room for all */
	if (ns == NULL || gather_counts(ep, ns, n, &tot) < 0 ||
	    (sv = ep_saved(ep, a->probs, (int)tot * c->topk, d, f)) == NULL)
		return -1;
	memcpy(sv->ns, ns, (size_t)X * sizeof(int32_t));
	sv->nmax = 0;
	for (int s = 0; s < X; s++)
		sv->nmax = sv->ns[s] > sv->nmax ? sv->ns[s] : sv->nmax;
	mine = ep_work(ep, 0, ((size_t)n * row + 1) * sizeof(float));
	G = ep_work(ep, 1, (tot * row + 1) * sizeof(float));
	cnt = ep_work(ep, 4, (size_t)X * sizeof(size_t));
	if (!mine || !G || !cnt)
		return -1;
	memcpy(mine, x, (size_t)n * d * sizeof(float));
	memcpy(mine + (size_t)n * d, a->probs, (size_t)n * E * sizeof(float));
	for (int s = 0; s < X; s++)
		cnt[s] = (size_t)sv->ns[s] * row;
	if (coll_allgatherv(ep->c, mine, G, cnt, DT_F32, COLL_AUTO) < 0)
		return ep_failed(ep, "dispatch");
	ep_phase(ep, 0, t0);
	if (route_all(ep, sv, G, c, d, &rt) < 0)
		return -1;
	for (int j = 0; j < ep->per; j++)
		for (int s = 0; s < X; s++) {
			struct nn_moe_acts ra = routing(ep, sv, rt, c, s);
			take_rows(ep, sv, G + first_token(sv, s) * row, s, &ra,
			    j, &r, d);
		}
	R = sv->R = r;
	ep_run_forward(ep, sv, sv->y, w, d, f, act);
	out = ep_work(ep, 3, ((size_t)X * sv->nmax * d + 1) * sizeof(float));
	if (out == NULL)
		return -1;
	memset(out, 0, (size_t)X * sv->nmax * d * sizeof(float));
	for (int i = 0; i < R; i++) {
		float *o = out + (size_t)sv->map[i] * d;
		const float *src = sv->y + (size_t)i * d;
		for (int k = 0; k < d; k++)
			o[k] += sv->p[i] * src[k];
	}
	t0 = ep_mark(ep);
	if (coll_reduce_scatter(ep->c, out, out, (size_t)sv->nmax * d, DT_F32,
	    COLL_SUM, COLL_AUTO) < 0)
		return ep_failed(ep, "combine");
	ep_phase(ep, 1, t0);
	memcpy(y, out, (size_t)n * d * sizeof(float));
	return 0;
}

int
ep_gather_backward(void *ctx, float *dx, float *dp, const struct nn_moe_w *g,
    const float *dy, const struct nn_moe_acts *a, const struct nn_moe_w *w,
    const struct nn_moe_cfg *c, int n, int d, int f, enum nn_act act)
{
	struct ep *ep = ctx;
	struct ep_saved *sv = ep_find(ep, a->probs);
	int X = ep->X, E = ep->E;
	size_t row = (size_t)d + E, tot, R, *cnt, i;
	float *DY, *dyr, *dxr, *part, *scr;
	struct ep_mark t0;

	(void)c;
	if (sv == NULL)
		return -1;
	R = (size_t)sv->R;
	tot = first_token(sv, X);
	DY = ep_work(ep, 0, (tot * d + 1) * sizeof(float));
	dyr = ep_work(ep, 1, (R * d + 1) * sizeof(float));
	dxr = ep_work(ep, 2, (R * d + 1) * sizeof(float));
	part = ep_work(ep, 3, ((size_t)X * sv->nmax * row + 1) *
	    sizeof(float));
	cnt = ep_work(ep, 4, (size_t)X * sizeof(size_t));
	scr = ep_work(ep, 5, (2 * R * f + 1) * sizeof(float));
	if (!DY || !dyr || !dxr || !part || !cnt || !scr)
		return -1;
	for (int s = 0; s < X; s++)
		cnt[s] = (size_t)sv->ns[s] * d;
	t0 = ep_mark(ep);
	if (coll_allgatherv(ep->c, dy, DY, cnt, DT_F32, COLL_AUTO) < 0)
		return ep_failed(ep, "dispatch of the gradients");
	ep_phase(ep, 0, t0);
	memset(part, 0, (size_t)X * sv->nmax * row * sizeof(float));
	i = 0;
	for (int j = 0; j < ep->per; j++) {
		int e = ep->rank * ep->per + j;
		for (size_t end = i + (size_t)ep_rows(ep, sv, j); i < end; i++) {
			int s = sv->map[i] / sv->nmax, t = sv->map[i] % sv->nmax;
			const float *dyt = DY + (first_token(sv, s) + t) * d;
			const float *yi = sv->y + i * d;
			double dot = 0.0;
			for (int k = 0; k < d; k++) {
				dyr[i * d + k] = sv->p[i] * dyt[k];
				dot += (double)dyt[k] * yi[k];
			}
			part[(size_t)sv->map[i] * row + d + e] = (float)dot;
		}
	}
	ep_run_backward(ep, sv, dxr, scr, dyr, g, w, d, f, act);
	for (i = 0; i < R; i++)
		nn_add(part + (size_t)sv->map[i] * row, dxr + i * d, (size_t)d);
	t0 = ep_mark(ep);
	if (coll_reduce_scatter(ep->c, part, part, (size_t)sv->nmax * row,
	    DT_F32, COLL_SUM, COLL_AUTO) < 0)
		return ep_failed(ep, "combine of the gradients");
	ep_phase(ep, 1, t0);
	for (int t = 0; t < n; t++) {
		const float *pt = part + (size_t)t * row;
		if (dx != NULL)
			nn_add(dx + (size_t)t * d, pt, (size_t)d);
		nn_add(dp + (size_t)t * E, pt + d, (size_t)E);
	}
	return 0;
}
