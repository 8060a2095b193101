/* ep_int: what ep.c (the group, alltoall dispatch) and ep_gather.c
 * (allgather dispatch) share: one forward's kept values and the experts
 * run on the rows this rank received, expert by expert. */
#ifndef COLLX_EP_INT_H
#define COLLX_EP_INT_H

#include "par/ep.h"

/*
 * The values one forward keeps for its backward, found by its acts' probs
 * (a micro-batch's layer; reused when its slot is): the R rows this rank
 * ran, expert by expert and within an expert by source rank: inputs x,
 * the experts' fc1 and gelu, and (allgather) outputs y, p_e and where
 * each row's token is (s * nmax + t); cnt[s * per + j] rows from rank s
 * for this rank's expert j, ns[s] rank s's tokens.
 */
struct ep_saved {
	const void *key;
	int R, nmax;
	float *x, *fc1, *gelu, *y, *p;
	int32_t *cnt, *ns, *map;
	float *buf;
	size_t cap;
};

/* The kept values of acts key for R rows (d, f wide), grown; NULL when
 * out of memory (the reason in ep->err). */
struct ep_saved *ep_saved(struct ep *ep, const void *key, int R, int d,
    int f);
/* The saved values of a forward (NULL: none; the reason in ep->err). */
struct ep_saved *ep_find(struct ep *ep, const void *key);
/* Work buffer i of at least bytes (NULL: out of memory, in ep->err). */
void *ep_work(struct ep *ep, int i, size_t bytes);
/* Rows of this rank's expert j in sv. */
int ep_rows(const struct ep *ep, const struct ep_saved *sv, int j);
/* This rank's experts forward on sv's rows (sv->x), outputs in y. */
void ep_run_forward(const struct ep *ep, struct ep_saved *sv, float *y,
    const struct nn_moe_w *w, int d, int f, enum nn_act act);
/* Their backward: dxr (zeroed here) from dyr, weight gradients into g;
 * scr: 2 * R * f floats. */
void ep_run_backward(const struct ep *ep, const struct ep_saved *sv,
    float *dxr, float *scr, const float *dyr, const struct nn_moe_w *g,
    const struct nn_moe_w *w, int d, int f, enum nn_act act);
/* A phase of the exchanges: ep_mark when it begins, ep_phase when it
 * ends (ph: 0 dispatch, 1 combine) adds its seconds and bytes. */
struct ep_mark {
	double t;
	uint64_t b;
};
struct ep_mark ep_mark(const struct ep *ep);
void ep_phase(struct ep *ep, int ph, struct ep_mark m);
/* A failed exchange's reason (-1). */
int ep_failed(struct ep *ep, const char *what);

int ep_gather_forward(void *ctx, float *y, struct nn_moe_acts *a,
    const struct nn_moe_w *w, const float *x, const struct nn_moe_cfg *c,
    int n, int d, int f, enum nn_act act);
int ep_gather_backward(void *ctx, float *dx, float *dp,
    const struct nn_moe_w *g, const float *dy, const struct nn_moe_acts *a,
    const struct nn_moe_w *w, const struct nn_moe_cfg *c, int n, int d,
    int f, enum nn_act act);

#endif
