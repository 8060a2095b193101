/* ckpt: training checkpoints (see ckpt.h). Rank 0 writes the file a
 * tensor at a time, in the file's order: each tensor of the model and of
 * its optimizer state collected from the pieces' holders over
 * point-to-point messages, in the order every rank lists the pieces, so
 * no rank needs more than its own state plus, on rank 0, one tensor. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/util.h"
#include "par/ckpt.h"
#include "tensor/tensor.h"

enum { CKPT_OPCODE = 0x60, TAG_CKPT = 0x6001, TAG_CKPT_ASK };

#define META_STEP  "collx.checkpoint.step"
#define META_BATCH "collx.checkpoint.batch"
#define META_PREFIX "collx.checkpoint."
static const char *const moment_prefix[2] = { "optim.m.", "optim.v." };
#define EF_PREFIX "wire.ef."
static const char *const vec_prefix[2] = { "local.", "powersgd." };

/* Rank 0: floats [off, off+len) of a vector into buf from the ranks that
 * hold them, the others send theirs: the parameters (k < 0; the holders
 * of the pieces, or rank 0 alone unless sharded) or moment k of the
 * pieces' optimizers. Every rank calls it alike. A holder sends a piece
 * when rank 0 asks for it: sent unasked, the pieces of the tensors to
 * come would wait in rank 0's memory (a group with sub-groups takes in
 * messages before their receive is posted). */
static int
fetch(struct comm *c, const struct nn_model *m, const struct ckpt_piece *p,
    size_t n, int sharded, int k, size_t off, size_t len, float *buf)
{
	int me = comm_rank(c), ask = 0;

	if (k < 0 && !sharded) {
		if (me == 0)
			memcpy(buf, m->params + off, len * sizeof(float));
		return 0;
	}
	for (size_t i = 0; i < n; i++) {
		size_t lo = p[i].off > off ? p[i].off : off;
		size_t hi = p[i].off + p[i].len < off + len ?
		    p[i].off + p[i].len : off + len;
		const float *src;
		int rc = 0;

		if (hi <= lo || (me != 0 && me != p[i].rank))
			continue;
		src = me != p[i].rank ? NULL : k < 0 ? (p[i].w != NULL ?
		    p[i].w + (lo - p[i].off) : m->params + lo) :
		    (k ? p[i].o->v : p[i].o->m) + p[i].o_off + (lo - p[i].off);
		comm_set_step(c, "checkpoint piece %zu of %zu", i + 1, n);
		if (me == 0 && p[i].rank == 0)
			memcpy(buf + (lo - off), src, (hi - lo) * sizeof(float));
		else if (me == 0)
			rc = comm_send(c, p[i].rank, TAG_CKPT_ASK, &ask,
			    sizeof ask) < 0 ? -1 : comm_recv(c, p[i].rank,
			    TAG_CKPT, buf + (lo - off), (hi - lo) *
			    sizeof(float));
		else
			rc = comm_recv(c, 0, TAG_CKPT_ASK, &ask, sizeof ask) <
			    0 ? -1 : comm_send(c, 0, TAG_CKPT, src, (hi - lo) *
			    sizeof(float));
		if (rc < 0)
			return -1;
	}
	return 0;
}

/* Rank 0: every rank's vector v of count floats into all (rank order);
 * the others send theirs. */
static int
gather_ranks(struct comm *c, size_t count, const float *v, float *all,
    char *err, size_t errlen)
{
	size_t bytes = count * sizeof(float);
	int me = comm_rank(c), q, rc = 0;

	if (bytes == 0)
		return 0;
	comm_set_step(c, "checkpoint per-rank state");
	if (me != 0)
		rc = comm_send(c, 0, TAG_CKPT, v, bytes);
	else
		memcpy(all, v, bytes);
	for (q = 1; me == 0 && q < comm_size(c) && rc == 0; q++)
		rc = comm_recv(c, q, TAG_CKPT, all + (size_t)q * count, bytes);
	return rc < 0 ? cli_fail(err, errlen, "%s", comm_error(c)) : 0;
}

/* name, a flat vector (ranks < 0), or "name.RANK" for each of ranks. */
static int
add_vec(struct tensor_set *s, const char *name, const float *all, int ranks,
    size_t count, char *err, size_t errlen)
{
	char full[64];
	int64_t len = (int64_t)count;

	for (int q = 0; q < (ranks < 0 ? 1 : ranks); q++) {
		struct tensor t;

		if (ranks < 0)
			snprintf(full, sizeof full, "%s", name);
		else
			snprintf(full, sizeof full, "%s.%d", name, q);
		if (tensor_init(&t, DT_F32, 1, &len, err, errlen) < 0)
			return -1;
		memcpy(t.data, all + (size_t)q * count, count * sizeof(float));
		if (tensor_set_add(s, full, &t, err, errlen) < 0) {
			tensor_free(&t);
			return -1;
		}
	}
	return 0;
}

/* A tensor of shape (ndim, shape; ndim 0: a vector of count) whose data
 * the writer fetches, into s as name. */
static int
add_shape(struct tensor_set *s, const char *name, int ndim,
    const int64_t *shape, size_t count, char *err, size_t errlen)
{
	struct tensor t = { .dtype = DT_F32, .ndim = ndim > 0 ? ndim : 1 };

	for (int d = 0; d < t.ndim; d++)
		t.shape[d] = ndim > 0 ? shape[d] : (int64_t)count;
	return tensor_set_add(s, name, &t, err, errlen);
}

/* The file's tensors, in the order they are written: the model's and
 * the optimizer's "optim.m.NAME" (and .v), their data fetched as they
 * are written, then (rank 0) the vectors x, their data in all[], every
 * rank's of a per-rank one; the metadata. */
static int
make_set(struct tensor_set *s, const struct nn_model *m, int moments,
    const struct ckpt_vec *x, size_t nx, float *const *all, int ranks,
    long step, long batch, char *err, size_t errlen)
{
	char name[NN_NAME_MAX + 16], num[32];
	size_t i;
	int k;

	memset(s, 0, sizeof(*s));
	s->format = TENSOR_SAFETENSORS;
	for (i = 0; i < m->ntensors; i++) {
		const struct nn_param *p = &m->table[i];

		if (add_shape(s, p->name, p->ndim, p->shape, p->count, err,
		    errlen) < 0)
			return -1;
		for (k = 0; k < moments; k++) {
			snprintf(name, sizeof name, "%s%s", moment_prefix[k],
			    p->name);
			if (add_shape(s, name, p->ndim, p->shape, p->count, err,
			    errlen) < 0)
				return -1;
		}
	}
	for (i = 0; i < nx && all != NULL; i++)
		if (add_vec(s, x[i].name, x[i].per_rank ? all[i] : x[i].v,
		    x[i].per_rank ? ranks : -1, m->nparams, err, errlen) < 0)
			return -1;
	for (i = 0; i < m->nmeta; i++)
		if (tensor_set_meta_put(s, m->meta[i].key, m->meta[i].value,
		    err, errlen) < 0)
			return -1;
	snprintf(num, sizeof num, "%ld", step);
	if (tensor_set_meta_put(s, META_STEP, num, err, errlen) < 0)
		return -1;
	snprintf(num, sizeof num, "%ld", batch);
	return tensor_set_meta_put(s, META_BATCH, num, err, errlen);
}

/* Which vector tensor t's data is: -1 the parameters, k moment k, -2
 * none (a vector of x, its data in t); its parameter in *param. */
static int
source(const struct nn_model *m, const struct tensor *t,
    const struct nn_param **param)
{
	for (int k = 0; k < 2; k++)
		if (strncmp(t->name, moment_prefix[k],
		    strlen(moment_prefix[k])) == 0 &&
		    (*param = nn_model_param(m, t->name +
		    strlen(moment_prefix[k]))) != NULL)
			return k;
	return (*param = nn_model_param(m, t->name)) != NULL ? -1 : -2;
}

/* Every rank: s's tensors in order, each fetched onto rank 0 (buf: room
 * for the largest) and written there to o (NULL elsewhere). A failed
 * write still fetches the rest, so the other ranks finish alike. */
static int
stream(struct comm *c, const struct nn_model *m, const struct ckpt_piece *p,
    size_t n, int sharded, const struct tensor_set *s, float *buf,
    struct tensor_out *o)
{
	const struct nn_param *par;

	for (size_t i = 0; i < s->count; i++) {
		const struct tensor *t = &s->items[i];
		int k = source(m, t, &par);

		if (k == -2) {
			if (o != NULL)
				tensor_out_values(o, t->data,
				    (size_t)tensor_numel(t), sizeof(float));
			continue;
		}
		if (fetch(c, m, p, n, sharded, k, par->offset, par->count,
		    buf) < 0)
			return -1;
		if (o != NULL)
			tensor_out_values(o, buf, par->count, sizeof(float));
	}
	return 0;
}

/* ckpt_save_vecs, its parameters too from the pieces' holders when
 * sharded. Rank 0 holds one tensor at a time of the model and its
 * optimizer state, besides the vectors x. */
static int
save(struct comm *c, const struct nn_model *m, const struct nn_optim_cfg *oc,
    const struct ckpt_piece *p, size_t n, int sharded,
    const struct ckpt_vec *x, size_t nx, long step, long batch,
    const char *path, size_t *held, char *err, size_t errlen)
{
	int moments = nn_optim_moments(oc), rc = -1, root = comm_rank(c) == 0;
	size_t np = m->nparams ? m->nparams : 1, i, big = 1, hlen;
	float **all, *buf = NULL;
	struct tensor_set s = { 0 };
	struct tensor_out o;
	char e[COLLX_ERRLEN];
	void *head = NULL;

	if ((all = calloc(nx ? nx : 1, sizeof(*all))) == NULL)
		goto oom;
	for (i = 0; i < nx && root; i++)
		if (x[i].per_rank && (all[i] = calloc(np * (size_t)comm_size(c),
		    sizeof(float))) == NULL)
			goto oom;
	for (i = 0; i < m->ntensors; i++)
		if (m->table[i].count > big)
			big = m->table[i].count;
	if (root && (buf = malloc(big * sizeof(float))) == NULL)
		goto oom;
	if (held != NULL)
		*held = root ? big * sizeof(float) : 0;
	comm_op_begin(c, CKPT_OPCODE, "checkpoint", DT_F32, (uint64_t)n);
	for (i = 0; i < nx; i++)
		if (x[i].per_rank && gather_ranks(c, m->nparams, x[i].v, all[i],
		    err, errlen) < 0)
			goto out;
	if (make_set(&s, m, moments, x, nx, root ? all : NULL, comm_size(c),
	    step, batch, e, sizeof e) < 0) {
		cli_fail(err, errlen, "checkpoint %s: %s", path, e);
		goto out;
	}
	if (!root) {
		if ((rc = stream(c, m, p, n, sharded, &s, NULL, NULL)) < 0)
			cli_fail(err, errlen, "%s", comm_error(c));
		goto out;
	}
	/* tensor_out's reasons name the file already */
	if (tensor_st_header(&s, &head, &hlen, e, sizeof e) < 0 ||
	    tensor_out_open(&o, path, e, sizeof e) < 0) {
		cli_fail(err, errlen, "checkpoint %s", e);
		goto out;
	}
	tensor_out_write(&o, head, hlen);
	if (stream(c, m, p, n, sharded, &s, buf, &o) < 0) {
		tensor_out_close(&o, 0, e, sizeof e);
		cli_fail(err, errlen, "%s", comm_error(c));
	} else if ((rc = tensor_out_close(&o, 1, e, sizeof e)) < 0)
		cli_fail(err, errlen, "checkpoint %s", e);
	goto out;
oom:
	cli_fail(err, errlen, "checkpoint: out of memory");
out:
	tensor_set_free(&s);
	free(head);
	free(buf);
	for (i = 0; all != NULL && i < nx; i++)
		free(all[i]);
	free(all);
	return rc;
}

int
ckpt_save_vecs(struct comm *c, const struct nn_model *m,
    const struct nn_optim_cfg *oc, const struct ckpt_piece *p, size_t n,
    const struct ckpt_vec *x, size_t nx, long step, long batch,
    const char *path, char *err, size_t errlen)
{
	return save(c, m, oc, p, n, 0, x, nx, step, batch, path, NULL, err,
	    errlen);
}

int
ckpt_save_sharded(struct comm *c, const struct nn_model *m,
    const struct nn_optim_cfg *oc, const struct ckpt_piece *p, size_t n,
    const struct ckpt_vec *x, size_t nx, long step, long batch,
    const char *path, size_t *held, char *err, size_t errlen)
{
	return save(c, m, oc, p, n, 1, x, nx, step, batch, path, held, err,
	    errlen);
}

int
ckpt_save(struct comm *c, const struct nn_model *m,
    const struct nn_optim_cfg *oc, const struct ckpt_piece *p, size_t n,
    long step, long batch, const char *path, char *err, size_t errlen)
{
	return ckpt_save_vecs(c, m, oc, p, n, NULL, 0, step, batch, path, err,
	    errlen);
}

/* ---- reading ---------------------------------------------------------- */

static int
meta_long(const struct tensor_set *s, const char *key, long *out, char *err,
    size_t errlen)
{
	const char *v = tensor_set_meta(s, key);
	char *end;

	if (v == NULL)
		return cli_fail(err, errlen, "not a collx checkpoint (no "
		    "__metadata__ '%s')", key);
	errno = 0;
	*out = strtol(v, &end, 10);
	if (errno != 0 || end == v || *end != '\0' || *out < 0)
		return cli_fail(err, errlen, "__metadata__ '%s' is not a count: "
		    "'%s'", key, v);
	return 0;
}

/* Whether name is one of the vectors that go to ckpt_state.vecs. */
static int
is_vec(const char *name)
{
	for (int i = 0; i < 2; i++)
		if (strncmp(name, vec_prefix[i], strlen(vec_prefix[i])) == 0)
			return 1;
	return 0;
}

/* Drops the checkpoint's own metadata from s. */
static void
drop_meta(struct tensor_set *s)
{
	size_t i, nm = 0;

	for (i = 0; i < s->nmeta; i++) {
		if (strncmp(s->meta[i].key, META_PREFIX, strlen(META_PREFIX)) == 0) {
			free(s->meta[i].key);
			free(s->meta[i].value);
		} else
			s->meta[nm++] = s->meta[i];
	}
	s->nmeta = nm;
}

/* Moves the "optim.*" and "wire.*" tensors of s into o, the "local.*"
 * and "powersgd.*" ones into l, and drops the checkpoint's own metadata,
 * leaving s a model. */
static void
split_set(struct tensor_set *s, struct tensor_set *o, struct tensor_set *l)
{
	size_t i, kept = 0;

	for (i = 0; i < s->count; i++) {
		if (strncmp(s->items[i].name, "optim.", 6) == 0 ||
		    strncmp(s->items[i].name, "wire.", 5) == 0)
			o->items[o->count++] = s->items[i];
		else if (is_vec(s->items[i].name))
			l->items[l->count++] = s->items[i];
		else
			s->items[kept++] = s->items[i];
	}
	s->count = kept;
	drop_meta(s);
}

int
ckpt_meta_put_step(struct tensor_set *s, long step, char *err, size_t errlen)
{
	char num[32];

	snprintf(num, sizeof num, "%ld", step);
	return tensor_set_meta_put(s, META_STEP, num, err, errlen);
}

int
ckpt_meta_take_step(struct tensor_set *s, long *step, char *err,
    size_t errlen)
{
	if (meta_long(s, META_STEP, step, err, errlen) < 0)
		return -1;
	drop_meta(s);
	return 0;
}

int
ckpt_step_read(const char *path, long *step, char *err, size_t errlen)
{
	struct tensor_set s = { 0 };
	char e[COLLX_ERRLEN];
	int rc;

	if (tensor_meta_load(path, &s, err, errlen) < 0)
		return -1;
	if ((rc = meta_long(&s, META_STEP, step, e, sizeof e)) < 0)
		cli_fail(err, errlen, "%s: %s", path, e);
	tensor_set_free(&s);
	return rc;
}

/* One moment's flat vector from its per-tensor pieces in o (NULL when the
 * checkpoint has none of them). */
static int
load_moment(const struct tensor_set *o, const struct nn_model *m, int k,
    float **flat, char *err, size_t errlen)
{
	char name[NN_NAME_MAX + 16];
	size_t i, found = 0;

	*flat = NULL;
	for (i = 0; i < m->ntensors; i++) {
		const struct nn_param *p = &m->table[i];
		const struct tensor *t;

		snprintf(name, sizeof name, "%s%s", moment_prefix[k], p->name);
		if ((t = tensor_set_find(o, name)) == NULL)
			continue;
		if (t->dtype != DT_F32 || (size_t)tensor_numel(t) != p->count)
			return cli_fail(err, errlen, "'%s' is not %zu f32 values",
			    name, p->count);
		if (*flat == NULL && (*flat = calloc(m->nparams, sizeof(float))) ==
		    NULL)
			return cli_fail(err, errlen, "out of memory");
		memcpy(*flat + p->offset, t->data, p->count * sizeof(float));
		found++;
	}
	if (found != 0 && found != m->ntensors)
		return cli_fail(err, errlen, "optimizer state for %zu of the %zu "
		    "tensors ('%s*')", found, m->ntensors, moment_prefix[k]);
	return 0;
}

/* The error feedback "wire.ef.0" ... "wire.ef.R-1", each a float per
 * parameter, into st (none: st->ef NULL). */
static int
load_ef(const struct tensor_set *o, const struct nn_model *m,
    struct ckpt_state *st, char *err, size_t errlen)
{
	char name[32];
	size_t i, found = 0;
	int q;

	for (i = 0; i < o->count; i++)
		found += strncmp(o->items[i].name, EF_PREFIX,
		    strlen(EF_PREFIX)) == 0;
	if (found == 0)
		return 0;
	if (found > (size_t)INT32_MAX || (st->ef = calloc(found * (m->nparams ?
	    m->nparams : 1), sizeof(float))) == NULL)
		return cli_fail(err, errlen, "out of memory");
	st->ef_ranks = (int)found;
	for (q = 0; q < st->ef_ranks; q++) {
		const struct tensor *t;

		snprintf(name, sizeof name, EF_PREFIX "%d", q);
		if ((t = tensor_set_find(o, name)) == NULL)
			return cli_fail(err, errlen, "error feedback of %zu "
			    "ranks, but no '%s'", found, name);
		if (t->dtype != DT_F32 || (size_t)tensor_numel(t) !=
		    m->nparams)
			return cli_fail(err, errlen, "'%s' is not %zu f32 values",
			    name, m->nparams);
		memcpy(st->ef + (size_t)q * m->nparams, t->data,
		    m->nparams * sizeof(float));
	}
	return 0;
}

/* Every "optim.*" tensor must be a moment of one of m's parameters, every
 * "wire.*" one a rank's error feedback. */
static int
load_state(const struct tensor_set *o, const struct nn_model *m,
    struct ckpt_state *st, char *err, size_t errlen)
{
	size_t plen = strlen(moment_prefix[0]);

	for (size_t i = 0; i < o->count; i++) {
		const char *name = o->items[i].name;

		if (strncmp(name, EF_PREFIX, strlen(EF_PREFIX)) == 0)
			continue;
		if ((strncmp(name, moment_prefix[0], plen) != 0 &&
		    strncmp(name, moment_prefix[1], plen) != 0) ||
		    nn_model_param(m, name + plen) == NULL)
			return cli_fail(err, errlen, "'%s' is no parameter's "
			    "optimizer state", name);
	}
	if (load_moment(o, m, 0, &st->m, err, errlen) < 0 ||
	    load_moment(o, m, 1, &st->v, err, errlen) < 0 ||
	    load_ef(o, m, st, err, errlen) < 0)
		return -1;
	return 0;
}

int
ckpt_load(const char *path, struct nn_model *m, struct ckpt_state *st,
    char *err, size_t errlen)
{
	struct tensor_set s = { 0 }, o = { 0 };
	char e[COLLX_ERRLEN];
	int rc = -1, have_m = 0;

	memset(st, 0, sizeof(*st));
	if (tensor_load(path, &s, err, errlen) < 0)
		return -1;
	if (meta_long(&s, META_STEP, &st->step, e, sizeof e) < 0 ||
	    meta_long(&s, META_BATCH, &st->batch, e, sizeof e) < 0)
		goto out;
	if ((o.items = calloc(s.count ? s.count : 1, sizeof(*o.items))) ==
	    NULL || (st->vecs.items = calloc(s.count ? s.count : 1,
	    sizeof(*o.items))) == NULL) {
		cli_fail(e, sizeof e, "out of memory");
		goto out;
	}
	split_set(&s, &o, &st->vecs);
	if (nn_model_load(m, &s, e, sizeof e) < 0)
		goto out;
	have_m = 1;
	rc = load_state(&o, m, st, e, sizeof e);
out:
	tensor_set_free(&s);
	tensor_set_free(&o);
	if (rc < 0) {
		if (have_m)
			nn_model_free(m);
		ckpt_state_free(st);
		return cli_fail(err, errlen, "%s: %s", path, e);
	}
	return 0;
}

void
ckpt_state_free(struct ckpt_state *st)
{
	free(st->m);
	free(st->v);
	free(st->ef);
	st->m = st->v = st->ef = NULL;
	st->ef_ranks = 0;
	tensor_set_free(&st->vecs);
}

int
ckpt_state_vec(const struct ckpt_state *st, const char *name, int rank,
    size_t count, const float **out, char *err, size_t errlen)
{
	const struct tensor *t;
	char full[64];

	if (rank < 0)
		snprintf(full, sizeof full, "%s", name);
	else
		snprintf(full, sizeof full, "%s.%d", name, rank);
	*out = NULL;
	if ((t = tensor_set_find(&st->vecs, full)) == NULL)
		return 0;
	if (t->dtype != DT_F32 || (size_t)tensor_numel(t) != count)
		return cli_fail(err, errlen, "'%s' is not %zu f32 values", full,
		    count);
	*out = t->data;
	return 0;
}

int
ckpt_restore(const struct ckpt_state *st, const struct ckpt_piece *p,
    size_t n, int rank, char *err, size_t errlen)
{
	for (size_t i = 0; i < n; i++) {
		struct nn_optim *o = p[i].o;
		size_t bytes = p[i].len * sizeof(float);

		if (p[i].rank != rank)
			continue;
		if ((o->m != NULL) != (st->m != NULL) ||
		    (o->v != NULL) != (st->v != NULL))
			return cli_fail(err, errlen, "the checkpoint holds %d "
			    "optimizer moment(s), this run's optimizer keeps %d",
			    (st->m != NULL) + (st->v != NULL),
			    (o->m != NULL) + (o->v != NULL));
		if (o->m != NULL && bytes > 0)
			memcpy(o->m + p[i].o_off, st->m + p[i].off, bytes);
		if (o->v != NULL && bytes > 0)
			memcpy(o->v + p[i].o_off, st->v + p[i].off, bytes);
		o->t = st->step;
	}
	return 0;
}
