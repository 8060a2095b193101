/* ep: the EP group, the checks made before it forms, the values each
 * forward keeps, the experts run on the rows received, and the alltoall
 * dispatch (coll_alltoallv there and back, forward and backward). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/util.h"
#include "comm/coll.h"
#include "par/ep_int.h"

int
ep_dispatch_parse(const char *s, enum ep_dispatch *out)
{
	if (strcmp(s, "alltoall") == 0)
		*out = EP_ALLTOALL;
	else if (strcmp(s, "allgather") == 0)
		*out = EP_ALLGATHER;
	else
		return -1;
	return 0;
}

const char *
ep_dispatch_name(enum ep_dispatch how)
{
	return how == EP_ALLGATHER ? "allgather" : "alltoall";
}

int
ep_check(int D, int X, const struct nn_model *m, char *err, size_t errlen)
{
	int E = m->dims.moe.experts;

	if (X == 1)
		return 0;
	if (E == 0)
		return cli_fail(err, errlen, "--ep %d: the model has no "
		    "experts (moe.experts)", X);
	if (D % X != 0)
		return cli_fail(err, errlen, "--ep %d does not divide the %d "
		    "data-parallel replicas (--dp %d)", X, D, D);
	if (E % X != 0)
		return cli_fail(err, errlen, "--ep %d: the model's %d experts "
		    "are not divisible by %d", X, E, X);
	if (m->dims.moe.topk > E)
		return cli_fail(err, errlen, "--ep %d: topk %d is above the %d "
		    "experts", X, m->dims.moe.topk, E);
	return 0;
}

static int a2a_forward(void *, float *, struct nn_moe_acts *,
    const struct nn_moe_w *, const float *, const struct nn_moe_cfg *, int,
    int, int, enum nn_act);
static int a2a_backward(void *, float *, float *, const struct nn_moe_w *,
    const float *, const struct nn_moe_acts *, const struct nn_moe_w *,
    const struct nn_moe_cfg *, int, int, int, enum nn_act);

int
ep_open(struct ep *ep, struct comm *dp, int X, int E, enum ep_dispatch how,
    char *err, size_t errlen)
{
	int r = comm_rank(dp);

	memset(ep, 0, sizeof(*ep));
	if (comm_split(dp, r / X, r % X, &ep->c, err, errlen) < 0 ||
	    comm_split(dp, r % X, r / X, &ep->rep, err, errlen) < 0)
		return -1;
	ep->X = X, ep->rank = r % X, ep->E = E, ep->per = E / X;
	ep->how = how, ep->err = err, ep->errlen = errlen;
	ep->hook = (struct nn_moe_ep){ .ranks = X, .ctx = ep,
	    .forward = how == EP_ALLGATHER ? ep_gather_forward : a2a_forward,
	    .backward = how == EP_ALLGATHER ? ep_gather_backward :
	    a2a_backward };
	return 0;
}

void
ep_close(struct ep *ep)
{
	for (int i = 0; i < ep->nsv; i++)
		free(ep->sv[i].buf);
	free(ep->sv);
	for (int i = 0; i < 6; i++)
		free(ep->w[i]);
	if (ep->rep != NULL)
		comm_close(ep->rep);
	if (ep->c != NULL)
		comm_close(ep->c);
	memset(ep, 0, sizeof(*ep));
}

int
ep_expert_of(const char *name)
{
	const char *x = strstr(name, "mlp.experts.");

	return x != NULL ? atoi(x + strlen("mlp.experts.")) : -1;
}

struct ep *
ep_divides(const struct nn_moe_ep *h)
{
	struct ep *ep = h != NULL ? h->ctx : NULL;

	return ep != NULL && ep->divided ? ep : NULL;
}

/* Whether m's tensor t is an expert's of layers [l0, l1) that EP rank s
 * runs. */
static int
held_by(const struct ep *ep, const struct nn_param *t, int l0, int l1, int s)
{
	int e = ep_expert_of(t->name), l;

	return e >= 0 && sscanf(t->name, "layers.%d.", &l) == 1 && l >= l0 &&
	    l < l1 && e / ep->per == s;
}

/* Each rank's experts packed in m's table order, rank after rank, so
 * that one allgather moves them all. */
int
ep_gather_experts(struct ep *ep, const struct nn_model *m, int l0, int l1,
    float *out)
{
	size_t n = 0, at = 0, i;
	float *mine, *all;
	int s, rc;

	for (i = 0; i < m->ntensors; i++)
		if (held_by(ep, &m->table[i], l0, l1, ep->rank))
			n += m->table[i].count;
	mine = malloc((n + 1) * sizeof(float));
	all = malloc(((size_t)ep->X * n + 1) * sizeof(float));
	if (mine == NULL || all == NULL) {
		free(mine), free(all);
		return cli_fail(ep->err, ep->errlen, "out of memory gathering "
		    "the experts");
	}
	for (i = 0; i < m->ntensors; i++)
		if (held_by(ep, &m->table[i], l0, l1, ep->rank)) {
			memcpy(mine + at, out + m->table[i].offset,
			    m->table[i].count * sizeof(float));
			at += m->table[i].count;
		}
	comm_set_step(ep->c, "gathering layers %d-%d's experts", l0, l1 - 1);
	rc = coll_allgather(ep->c, mine, all, n, DT_F32, COLL_AUTO);
	for (s = 0, at = 0; rc == 0 && s < ep->X; s++)
		for (i = 0; i < m->ntensors; i++)
			if (held_by(ep, &m->table[i], l0, l1, s)) {
				memcpy(out + m->table[i].offset, all + at,
				    m->table[i].count * sizeof(float));
				at += m->table[i].count;
			}
	free(mine), free(all);
	return rc < 0 ? ep_failed(ep, "gathering the experts") : 0;
}

struct ep_mark
ep_mark(const struct ep *ep)
{
	struct ep_mark m = { cli_now(), comm_bytes_sent(ep->c) };

	return m;
}

void
ep_phase(struct ep *ep, int ph, struct ep_mark m)
{
	ep->phase_s[ph] += cli_now() - m.t;
	ep->phase_b[ph] += comm_bytes_sent(ep->c) - m.b;
}

int
ep_failed(struct ep *ep, const char *what)
{
	return cli_fail(ep->err, ep->errlen, "EP group, %s: %s", what,
	    comm_error(ep->c));
}

static void *
oom(struct ep *ep)
{
	cli_fail(ep->err, ep->errlen, "out of memory for the experts' rows");
	return NULL;
}

void *
ep_work(struct ep *ep, int i, size_t bytes)
{
	void *p;

	if (bytes <= ep->wcap[i])
		return ep->w[i];
	if ((p = realloc(ep->w[i], bytes)) == NULL)
		return oom(ep);
	ep->w[i] = p;
	ep->wcap[i] = bytes;
	return p;
}

struct ep_saved *
ep_find(struct ep *ep, const void *key)
{
	for (int i = 0; i < ep->nsv; i++)
		if (ep->sv[i].key == key)
			return &ep->sv[i];
	cli_fail(ep->err, ep->errlen, "EP: a backward without its forward");
	return NULL;
}

struct ep_saved *
ep_saved(struct ep *ep, const void *key, int R, int d, int f)
{
	struct ep_saved *sv = NULL, *v;
	size_t rr = (size_t)R, nf = rr * (2 * (size_t)d + 2 * (size_t)f + 1);
	size_t ni = (size_t)ep->X * ep->per + (size_t)ep->X + rr;
	float *b;

	for (int i = 0; i < ep->nsv && sv == NULL; i++)
		if (ep->sv[i].key == key)
			sv = &ep->sv[i];
	if (sv == NULL) {
		if ((v = realloc(ep->sv, (size_t)(ep->nsv + 1) *
		    sizeof(*v))) == NULL)
			return oom(ep);
		ep->sv = v;
		sv = &ep->sv[ep->nsv++];
		memset(sv, 0, sizeof(*sv));
		sv->key = key;
	}
	if (nf + ni > sv->cap) {
		if ((b = realloc(sv->buf, (nf + ni) * sizeof(float))) == NULL)
			return oom(ep);
		sv->buf = b;
		sv->cap = nf + ni;
	}
	b = sv->buf;
	sv->R = R;
	sv->x = b, b += rr * d;
	sv->fc1 = b, b += rr * f;
	sv->gelu = b, b += rr * f;
	sv->y = b, b += rr * d;
	sv->p = b, b += rr;
	sv->cnt = (int32_t *)b;
	sv->ns = sv->cnt + (size_t)ep->X * ep->per;
	sv->map = sv->ns + ep->X;
	return sv;
}

int
ep_rows(const struct ep *ep, const struct ep_saved *sv, int j)
{
	int m = 0;

	for (int s = 0; s < ep->X; s++)
		m += sv->cnt[s * ep->per + j];
	return m;
}

void
ep_run_forward(const struct ep *ep, struct ep_saved *sv, float *y,
    const struct nn_moe_w *w, int d, int f, enum nn_act act)
{
	size_t r0 = 0;

	for (int j = 0; j < ep->per; j++) {
		int m = ep_rows(ep, sv, j);
		struct nn_mlp_acts ma = { sv->fc1 + r0 * f, sv->gelu + r0 * f };
		nn_mlp_forward(y + r0 * d, &ma, &w->ex[ep->rank * ep->per + j],
		    sv->x + r0 * d, m, d, f, d, act);
		r0 += (size_t)m;
	}
}

void
ep_run_backward(const struct ep *ep, const struct ep_saved *sv, float *dxr,
    float *scr, const float *dyr, const struct nn_moe_w *g,
    const struct nn_moe_w *w, int d, int f, enum nn_act act)
{
	size_t r0 = 0;
	int e;

	memset(dxr, 0, (size_t)sv->R * d * sizeof(float));
	for (int j = 0; j < ep->per; j++) {
		int m = ep_rows(ep, sv, j);
		struct nn_mlp_acts ma = { sv->fc1 + r0 * f, sv->gelu + r0 * f };
		e = ep->rank * ep->per + j;
		nn_mlp_backward(dxr + r0 * d, &g->ex[e], scr, dyr + r0 * d, &ma,
		    &w->ex[e], sv->x + r0 * d, m, d, f, d, act);
		r0 += (size_t)m;
	}
}

/* ---- alltoall --------------------------------------------------------- */

/* Rows of w floats between the order they arrive in (by source rank,
 * within it by this rank's expert) and the experts' (by expert, within
 * it by source); back: the other way. */
static void
regroup(const struct ep *ep, const struct ep_saved *sv, float *dst,
    const float *src, size_t w, int back)
{
	int X = ep->X, per = ep->per;
	size_t ex = 0;		/* the block's row in the experts' order */

	for (int j = 0; j < per; j++)
		for (int s = 0; s < X; s++) {
			size_t at = 0, n = (size_t)sv->cnt[s * per + j];
			for (int q = 0; q < s * per + j; q++)
				at += (size_t)sv->cnt[q];
			if (back)
				memcpy(dst + at * w, src + ex * w,
				    n * w * sizeof(float));
			else
				memcpy(dst + ex * w, src + at * w,
				    n * w * sizeof(float));
			ex += n;
		}
}

/* Elements (rows of d) this rank sends each rank, by a's routing, and
 * receives from each, by sv's counts. */
static void
a2a_counts(const struct ep *ep, const struct nn_moe_acts *a,
    const struct ep_saved *sv, size_t *sc, size_t *rc, int d)
{
	int per = ep->per;

	for (int q = 0; q < ep->X; q++) {
		sc[q] = (size_t)(a->start[(q + 1) * per] - a->start[q * per]) *
		    d;
		rc[q] = 0;
		for (int j = 0; j < per; j++)
			rc[q] += (size_t)sv->cnt[q * per + j] * d;
	}
}

static int
a2a_forward(void *ctx, float *y, struct nn_moe_acts *a,
    const struct nn_moe_w *w, const float *x, const struct nn_moe_cfg *c,
    int n, int d, int f, enum nn_act act)
{
	struct ep *ep = ctx;
	int X = ep->X, per = ep->per, R = 0;
	int32_t *sent = ep_work(ep, 0, (size_t)c->experts * sizeof(int32_t));
	int32_t *got = ep_work(ep, 1, (size_t)c->experts * sizeof(int32_t));
	size_t *sc = ep_work(ep, 2, 2 * (size_t)X * sizeof(size_t)), *rc;
	struct ep_saved *sv;
	float *in, *out;
	struct ep_mark t0 = ep_mark(ep);

	if (!sent || !got || !sc)
		return -1;
	rc = sc + X;
	nn_moe_gather(a, x, c->experts, d);
	for (int e = 0; e < c->experts; e++)
		sent[e] = a->start[e + 1] - a->start[e];
	if (coll_alltoall(ep->c, sent, got, (size_t)per, DT_I32,
	    COLL_AUTO) < 0)
		return ep_failed(ep, "the experts' counts");
	for (int e = 0; e < c->experts; e++)
		R += got[e];
	if ((sv = ep_saved(ep, a->probs, R, d, f)) == NULL)
		return -1;
	memcpy(sv->cnt, got, (size_t)c->experts * sizeof(int32_t));
	a2a_counts(ep, a, sv, sc, rc, d);
	in = ep_work(ep, 3, ((size_t)R + 1) * d * sizeof(float));
	out = ep_work(ep, 4, ((size_t)R + 1) * d * sizeof(float));
	if (!in || !out)
		return -1;
	if (coll_alltoallv(ep->c, a->xe, sc, in, rc, DT_F32, COLL_AUTO) < 0)
		return ep_failed(ep, "dispatch");
	ep_phase(ep, 0, t0);
	regroup(ep, sv, sv->x, in, (size_t)d, 0);
	ep_run_forward(ep, sv, out, w, d, f, act);
	regroup(ep, sv, in, out, (size_t)d, 1);
	t0 = ep_mark(ep);
	if (coll_alltoallv(ep->c, in, rc, a->ye, sc, DT_F32, COLL_AUTO) < 0)
		return ep_failed(ep, "combine");
	ep_phase(ep, 1, t0);
	nn_moe_combine(y, a, n, c->experts, d);
	return 0;
}

static int
a2a_backward(void *ctx, float *dx, float *dp, const struct nn_moe_w *g,
    const float *dy, const struct nn_moe_acts *a, const struct nn_moe_w *w,
    const struct nn_moe_cfg *c, int n, int d, int f, enum nn_act act)
{
	struct ep *ep = ctx;
	struct ep_saved *sv = ep_find(ep, a->probs);
	size_t K = (size_t)a->start[c->experts], R, *sc, *rc;
	float *dye, *in, *out, *scr;
	struct ep_mark t0;

	(void)n;
	if (sv == NULL)
		return -1;
	R = (size_t)sv->R;
	sc = ep_work(ep, 2, 2 * (size_t)ep->X * sizeof(size_t));
	dye = ep_work(ep, 0, (K + 1) * d * sizeof(float));
	in = ep_work(ep, 3, (R + 1) * d * sizeof(float));
	out = ep_work(ep, 4, (R + 1) * d * sizeof(float));
	scr = ep_work(ep, 5, (2 * R * f + 1) * sizeof(float));
	if (!sc || !dye || !in || !out || !scr)
		return -1;
	rc = sc + ep->X;
	a2a_counts(ep, a, sv, sc, rc, d);
	nn_moe_grad_out(dye, dp, a, dy, c->experts, d);
	t0 = ep_mark(ep);
	if (coll_alltoallv(ep->c, dye, sc, in, rc, DT_F32, COLL_AUTO) < 0)
		return ep_failed(ep, "dispatch of the gradients");
	ep_phase(ep, 0, t0);
	regroup(ep, sv, out, in, (size_t)d, 0);
	ep_run_backward(ep, sv, in, scr, out, g, w, d, f, act);
	regroup(ep, sv, out, in, (size_t)d, 1);
	t0 = ep_mark(ep);
	/* the input gradients back where dye was */
	if (coll_alltoallv(ep->c, out, rc, dye, sc, DT_F32, COLL_AUTO) < 0)
		return ep_failed(ep, "combine of the gradients");
	ep_phase(ep, 1, t0);
	if (dx != NULL)
		nn_moe_scatter(dx, dye, a, c->experts, d);
	return 0;
}
