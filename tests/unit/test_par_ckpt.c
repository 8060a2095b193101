/* test_par_ckpt: checkpoint pieces over 3 forked ranks. Each rank holds
 * optimizer moments whose values name their place in the flat vector
 * (first moment g + 1, second 7 + g/2 at element g: exact in f32), in
 * one of four layouts: ZeRO slices of buckets, contiguous shards on some
 * ranks, the whole vector on every rank, one optimizer per stage of
 * layers with a piece per tensor. A checkpoint saved from one layout must
 * hold every moment at its place, the model and the step, and restore
 * into every other layout exactly; a checkpoint of another optimizer is
 * refused; a sharded save (ZeRO) takes the parameters from the holders'
 * own buffers. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/coll.h"
#include "par/ckpt.h"
#include "par_world.h"
#include "unit.h"

/* The mlp stack of test_par_dp: layers of 59, 49 and 49 floats. */
static const struct nn_dims mlp3 = { .arch = NN_MLP, .d_in = 6,
	.d_hidden = 5, .d_out = 4, .layers = 3 };
static const size_t layer_end[] = { 0, 59, 108, 157 };
#define N 157

enum layout_kind { ZERO, SHARDS, WHOLE, LAYERS, NLAYOUT };
static const char *layout_name[] = { "ZeRO slices", "2 shards",
	"whole on every rank", "a stage per layer" };

struct layout {
	size_t n;
	struct ckpt_piece p[64];
	int no;
	struct nn_optim o[8];
};

static void
piece(struct layout *l, int rank, size_t off, size_t len, int me, int mine,
    size_t o_off)
{
	l->p[l->n++] = (struct ckpt_piece){ rank, off, len, rank == me ?
	    &l->o[mine] : NULL, o_off, NULL };
}

static int
optim(struct layout *l, const struct nn_optim_cfg *oc, size_t len)
{
	char e[256];

	if (nn_optim_init(&l->o[l->no], oc, len, e, sizeof e) < 0)
		return -1;
	return l->no++;
}

/* This rank's (me of w) optimizers and the job's pieces; holders: a
 * piece for every rank holding a copy (to restore), not only the first
 * (to save). */
static int
layout_make(struct layout *l, enum layout_kind k, const struct nn_model *m,
    const struct nn_optim_cfg *oc, int me, int w, int holders)
{
	int q, b, mine;

	memset(l, 0, sizeof(*l));
	switch (k) {
	case ZERO:	/* slices of ceil(n / w) floats of each layer */
		for (b = 0; b < 3; b++) {
			size_t n = layer_end[b + 1] - layer_end[b];
			size_t c = (n + (size_t)w - 1) / (size_t)w;

			for (q = 0; q < w; q++) {
				size_t a = q * c < n ? q * c : n;
				size_t len = n - a < c ? n - a : c;

				mine = q == me ? optim(l, oc, len) : -1;
				if (q == me && mine < 0)
					return -1;
				piece(l, q, layer_end[b] + a, len, me, mine, 0);
			}
		}
		return 0;
	case SHARDS:	/* 79 and 78 floats on ranks 0 and 1 */
		mine = me < 2 ? optim(l, oc, me == 0 ? 79 : 78) : -1;
		if (me < 2 && mine < 0)
			return -1;
		piece(l, 0, 0, 79, me, mine, 0);
		piece(l, 1, 79, 78, me, mine, 0);
		return 0;
	case WHOLE:
		if ((mine = optim(l, oc, N)) < 0)
			return -1;
		for (q = 0; q < (holders ? w : 1); q++)
			piece(l, q, 0, N, me, mine, 0);
		return 0;
	default:	/* rank q holds layer q; a piece per tensor */
		mine = me < 3 ? optim(l, oc, layer_end[me + 1] -
		    layer_end[me]) : -1;
		for (size_t t = 0; t < m->ntensors; t++) {
			size_t off = m->table[t].offset;

			for (q = 0; off >= layer_end[q + 1]; q++)
				;
			piece(l, q, off, m->table[t].count, me, mine,
			    off - layer_end[q]);
		}
		return me < 3 && mine < 0 ? -1 : 0;
	}
}

static void
layout_free(struct layout *l)
{
	for (int i = 0; i < l->no; i++)
		nn_optim_free(&l->o[i]);
}

static float
m_at(size_t g)
{
	return (float)g + 1;
}

static float
v_at(size_t g)
{
	return 7 + (float)g / 2;
}

/* The moments of this rank's pieces set to their places' values, or
 * checked to hold them; step count t likewise. */
static int
moments(struct layout *l, int me, int set)
{
	int ok = 1;

	for (size_t i = 0; i < l->n; i++) {
		struct nn_optim *o = l->p[i].o;

		if (l->p[i].rank != me)
			continue;
		for (size_t k = 0; k < l->p[i].len; k++) {
			size_t g = l->p[i].off + k, at = l->p[i].o_off + k;

			if (set && o->m != NULL)
				o->m[at] = m_at(g);
			if (set && o->v != NULL)
				o->v[at] = v_at(g);
			if (!set && o->m != NULL)
				ok &= o->m[at] == m_at(g);
			if (!set && o->v != NULL)
				ok &= o->v[at] == v_at(g);
		}
		if (set)
			o->t = 5;
		ok &= o->t == 5;
	}
	return ok;
}

/* The checkpoint as read back: step, batch, the model, every moment. */
static int
file_holds(const struct ckpt_state *st, const struct nn_model *m2,
    const struct nn_model *m, int nmom)
{
	int ok = st->step == 5 && st->batch == 6 && m2->nparams == N &&
	    memcmp(m2->params, m->params, N * sizeof(float)) == 0 &&
	    (st->m != NULL) == (nmom >= 1) && (st->v != NULL) == (nmom == 2);

	for (size_t g = 0; ok && g < N; g++)
		ok = (st->m == NULL || st->m[g] == m_at(g)) &&
		    (st->v == NULL || st->v[g] == v_at(g));
	return ok;
}

/* Saves from layout `from`; every rank reads the file and restores it
 * into every layout. */
static int
round_trip(struct comm *c, const char *path, const struct nn_model *m,
    const struct nn_optim_cfg *oc, const char *oname, enum layout_kind from)
{
	int me = comm_rank(c), w = comm_size(c), nmom = nn_optim_moments(oc);
	struct layout l;
	struct ckpt_state st;
	struct nn_model m2;
	char e[COLLX_ERRLEN], failed[128] = "";
	int rc;

	if (layout_make(&l, from, m, oc, me, w, 0) < 0)
		return par_check(0, "rank %d: optimizers", me) - 1;
	moments(&l, me, 1);
	rc = ckpt_save(c, m, oc, l.p, l.n, 5, 6, me == 0 ? path : NULL, e,
	    sizeof e);
	layout_free(&l);
	if (rc < 0 || coll_barrier(c) < 0)
		return par_check(0, "rank %d: %s saves: %s", me, oname,
		    rc < 0 ? e : comm_error(c)) - 1;
	if (ckpt_load(path, &m2, &st, e, sizeof e) < 0)
		return par_check(0, "rank %d: reads: %s", me, e) - 1;
	if (me == 0)
		par_check(file_holds(&st, &m2, m, nmom), "%s saved from %s: "
		    "the model, step, batch and every moment at its place",
		    oname, layout_name[from]);
	for (int k = 0; k < NLAYOUT; k++) {
		if (layout_make(&l, k, m, oc, me, w, 1) < 0)
			return par_check(0, "rank %d: optimizers", me) - 1;
		if (ckpt_restore(&st, l.p, l.n, me, e, sizeof e) < 0 ||
		    !moments(&l, me, 0))
			snprintf(failed + strlen(failed), sizeof failed -
			    strlen(failed), " (not into %s)", layout_name[k]);
		layout_free(&l);
	}
	par_check(failed[0] == '\0', "rank %d: %s saved from %s restores into "
	    "every layout%s", me, oname, layout_name[from], failed);
	ckpt_state_free(&st);
	nn_model_free(&m2);
	/* nobody reads the file while rank 0 writes the next one */
	return coll_barrier(c) < 0 ? -1 : 0;
}

/* An AdamW checkpoint restored into SGD with momentum: refused. */
static void
mismatch(struct comm *c, const char *path, const struct nn_model *m)
{
	struct nn_optim_cfg sgd;
	struct layout l;
	struct ckpt_state st;
	struct nn_model m2;
	char e[COLLX_ERRLEN] = "";
	int me = comm_rank(c), rc = 0;

	nn_optim_defaults(&sgd, NN_SGD);
	sgd.momentum = 0.9;
	if (ckpt_load(path, &m2, &st, e, sizeof e) < 0 ||
	    layout_make(&l, WHOLE, m, &sgd, me, comm_size(c), 1) < 0) {
		par_check(0, "rank %d: reads: %s", me, e);
		return;
	}
	rc = ckpt_restore(&st, l.p, l.n, me, e, sizeof e);
	par_check(rc < 0 && strstr(e, "holds 2 optimizer moment(s)") &&
	    strstr(e, "keeps 1"), "rank %d: an AdamW checkpoint into SGD with "
	    "momentum is refused: %s", me, e);
	layout_free(&l);
	ckpt_state_free(&st);
	nn_model_free(&m2);
}

/* ZeRO-3's save: the parameters too from the pieces' holders, each
 * keeping its slices packed in a buffer of its own (w), the model the
 * save is given all zeros; the writer holds one tensor at a time (the
 * largest: 6 x 5 floats, test_par_dp's layer 0 weight), the others
 * nothing beyond their own. */
static void
sharded(struct comm *c, const char *path, struct nn_model *m)
{
	struct nn_optim_cfg oc;
	struct layout l;
	struct nn_model m2;
	struct ckpt_state st;
	float own[N], whole[N];
	size_t held = 1, k = 0, big = 0;
	char e[COLLX_ERRLEN] = "";
	int me = comm_rank(c), rc;

	nn_optim_defaults(&oc, NN_ADAMW);
	if (layout_make(&l, ZERO, m, &oc, me, comm_size(c), 0) < 0) {
		par_check(0, "rank %d: optimizers", me);
		return;
	}
	moments(&l, me, 1);
	memcpy(whole, m->params, sizeof whole);
	for (size_t i = 0; i < l.n; i++)
		if (l.p[i].rank == me) {
			memcpy(own + k, whole + l.p[i].off, l.p[i].len *
			    sizeof(float));
			l.p[i].w = own + k;
			k += l.p[i].len;
		}
	for (size_t t = 0; t < m->ntensors; t++)
		big = m->table[t].count > big ? m->table[t].count : big;
	memset(m->params, 0, sizeof whole);
	rc = ckpt_save_sharded(c, m, &oc, l.p, l.n, NULL, 0, 5, 6, me == 0 ?
	    path : NULL, &held, e, sizeof e);
	memcpy(m->params, whole, sizeof whole);
	layout_free(&l);
	if (rc < 0 || coll_barrier(c) < 0 || ckpt_load(path, &m2, &st, e,
	    sizeof e) < 0) {
		par_check(0, "rank %d: sharded save: %s", me, e);
		return;
	}
	par_check(file_holds(&st, &m2, m, 2) && held == (me == 0 ? big *
	    sizeof(float) : 0), "rank %d: sharded: every parameter from its "
	    "holder's own buffer, every moment at its place; %zu bytes held "
	    "(largest tensor %zu floats)", me, held, big);
	ckpt_state_free(&st);
	nn_model_free(&m2);
	coll_barrier(c);
}

static int
ckpt_rank(struct comm *c, void *arg)
{
	const char *path = arg;
	struct nn_optim_cfg oc[3];
	static const char *oname[] = { "SGD", "SGD with momentum", "AdamW" };
	struct nn_model m;
	int rc = 0;

	nn_optim_defaults(&oc[0], NN_SGD);
	nn_optim_defaults(&oc[1], NN_SGD);
	oc[1].momentum = 0.9;
	nn_optim_defaults(&oc[2], NN_ADAMW);
	if (par_model(&m, &mlp3, 3) < 0) {
		par_check(0, "rank %d: model", comm_rank(c));
		return 1;
	}
	for (int o = 0; o < 3 && rc == 0; o++)
		for (int from = 0; from < NLAYOUT && rc == 0; from++)
			rc = round_trip(c, path, &m, &oc[o], oname[o], from);
	if (rc == 0)	/* the file holds AdamW's state now */
		mismatch(c, path, &m);
	if (rc == 0)
		sharded(c, path, &m);
	nn_model_free(&m);
	return rc < 0;
}

int
main(void)
{
	char dir[] = "/tmp/test_par_ckpt.XXXXXX", path[64];

	if (!UNIT_OK(mkdtemp(dir) != NULL, "a temporary directory"))
		return unit_done();
	snprintf(path, sizeof path, "%s/ck.safetensors", dir);
	par_world(3, "checkpoint pieces on 3 ranks", ckpt_rank, path);
	unlink(path);
	rmdir(dir);
	return unit_done();
}
