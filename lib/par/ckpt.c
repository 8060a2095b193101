/* ckpt: training checkpoints (see ckpt.h). Rank 0 collects the sharded
 * optimizer state piece by piece over point-to-point messages, in the
 * order every rank lists the pieces, so no rank needs more than its own
 * state plus, on rank 0, one flat copy per moment. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cli/util.h"
#include "par/ckpt.h"
#include "tensor/tensor.h"

enum { CKPT_OPCODE = 0x60, TAG_CKPT = 0x6001 };

#define META_STEP  "collx.checkpoint.step"
#define META_BATCH "collx.checkpoint.batch"
#define META_PREFIX "collx.checkpoint."
static const char *const moment_prefix[2] = { "optim.m.", "optim.v." };

/* Rank 0: every piece's moments into flat[k]; the others send theirs. */
static int
gather(struct comm *c, const struct ckpt_piece *p, size_t n, int moments,
    float *flat[2], char *err, size_t errlen)
{
	int me = comm_rank(c), k;

	comm_op_begin(c, CKPT_OPCODE, "checkpoint", DT_F32, (uint64_t)n);
	for (size_t i = 0; i < n; i++) {
		size_t bytes = p[i].len * sizeof(float);
		int rc = 0;

		if (bytes == 0 || (me != 0 && me != p[i].rank))
			continue;
		comm_set_step(c, "checkpoint piece %zu of %zu", i + 1, n);
		for (k = 0; k < moments && rc == 0; k++) {
			const float *src = me == p[i].rank ? (k ? p[i].o->v :
			    p[i].o->m) + p[i].o_off : NULL;

			if (me == 0 && p[i].rank == 0)
				memcpy(flat[k] + p[i].off, src, bytes);
			else if (me == 0)
				rc = comm_recv(c, p[i].rank, TAG_CKPT,
				    flat[k] + p[i].off, bytes);
			else
				rc = comm_send(c, 0, TAG_CKPT, src, bytes);
		}
		if (rc < 0)
			return cli_fail(err, errlen, "%s", comm_error(c));
	}
	return 0;
}

/* The optimizer tensors "optim.m.NAME" (and .v) beside the model's. */
static int
add_moments(struct tensor_set *s, const struct nn_model *m, int moments,
    float *flat[2], char *err, size_t errlen)
{
	char name[NN_NAME_MAX + 16];

	for (size_t i = 0; i < m->ntensors; i++) {
		const struct nn_param *p = &m->table[i];
		int64_t count = (int64_t)p->count;

		for (int k = 0; k < moments; k++) {
			struct tensor t;

			/* The parameter's shape (adding to s moves its items). */
			snprintf(name, sizeof name, "%s%s", moment_prefix[k], p->name);
			if (tensor_init(&t, DT_F32, p->ndim > 0 ? p->ndim : 1,
			    p->ndim > 0 ? p->shape : &count, err, errlen) < 0)
				return -1;
			memcpy(t.data, flat[k] + p->offset, p->count * sizeof(float));
			if (tensor_set_add(s, name, &t, err, errlen) < 0) {
				tensor_free(&t);
				return -1;
			}
		}
	}
	return 0;
}

static int
write_set(const struct nn_model *m, int moments, float *flat[2], long step,
    long batch, const char *path, char *err, size_t errlen)
{
	struct tensor_set s = { 0 };
	char num[32], e[COLLX_ERRLEN];
	int rc = -1;

	if (nn_model_to_set(m, &s, e, sizeof e) < 0 ||
	    add_moments(&s, m, moments, flat, e, sizeof e) < 0)
		goto out;
	snprintf(num, sizeof num, "%ld", step);
	if (tensor_set_meta_put(&s, META_STEP, num, e, sizeof e) < 0)
		goto out;
	snprintf(num, sizeof num, "%ld", batch);
	if (tensor_set_meta_put(&s, META_BATCH, num, e, sizeof e) < 0)
		goto out;
	/* tensor_save's reason names the file already */
	if (tensor_save(path, &s, e, sizeof e) < 0)
		rc = cli_fail(err, errlen, "checkpoint %s", e);
	else
		rc = 0;
	tensor_set_free(&s);
	return rc;
out:
	tensor_set_free(&s);
	return cli_fail(err, errlen, "checkpoint %s: %s", path, e);
}

int
ckpt_save(struct comm *c, const struct nn_model *m,
    const struct nn_optim_cfg *oc, const struct ckpt_piece *p, size_t n,
    long step, long batch, const char *path, char *err, size_t errlen)
{
	int moments = nn_optim_moments(oc), k, rc = -1;
	float *flat[2] = { NULL, NULL };

	for (k = 0; k < moments && comm_rank(c) == 0; k++)
		if ((flat[k] = calloc(m->nparams ? m->nparams : 1,
		    sizeof(float))) == NULL) {
			cli_fail(err, errlen, "checkpoint: out of memory");
			goto out;
		}
	if (gather(c, p, n, moments, flat, err, errlen) < 0)
		goto out;
	rc = comm_rank(c) == 0 ? write_set(m, moments, flat, step, batch, path,
	    err, errlen) : 0;
out:
	free(flat[0]);
	free(flat[1]);
	return rc;
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

/* Moves the "optim.*" tensors of s into o and drops the checkpoint's own
 * metadata, leaving s a model. */
static void
split_set(struct tensor_set *s, struct tensor_set *o)
{
	size_t i, kept = 0, nm = 0;

	for (i = 0; i < s->count; i++) {
		if (strncmp(s->items[i].name, "optim.", 6) == 0)
			o->items[o->count++] = s->items[i];
		else
			s->items[kept++] = s->items[i];
	}
	s->count = kept;
	for (i = 0; i < s->nmeta; i++) {
		if (strncmp(s->meta[i].key, META_PREFIX, strlen(META_PREFIX)) == 0) {
			free(s->meta[i].key);
			free(s->meta[i].value);
		} else
			s->meta[nm++] = s->meta[i];
	}
	s->nmeta = nm;
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

/* Every "optim.*" tensor must be a moment of one of m's parameters. */
static int
load_state(const struct tensor_set *o, const struct nn_model *m,
    struct ckpt_state *st, char *err, size_t errlen)
{
	size_t plen = strlen(moment_prefix[0]);

	for (size_t i = 0; i < o->count; i++) {
		const char *name = o->items[i].name;

		if ((strncmp(name, moment_prefix[0], plen) != 0 &&
		    strncmp(name, moment_prefix[1], plen) != 0) ||
		    nn_model_param(m, name + plen) == NULL)
			return cli_fail(err, errlen, "'%s' is no parameter's "
			    "optimizer state", name);
	}
	if (load_moment(o, m, 0, &st->m, err, errlen) < 0 ||
	    load_moment(o, m, 1, &st->v, err, errlen) < 0)
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
	if ((o.items = calloc(s.count ? s.count : 1, sizeof(*o.items))) == NULL) {
		cli_fail(e, sizeof e, "out of memory");
		goto out;
	}
	split_set(&s, &o);
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
	st->m = st->v = NULL;
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
