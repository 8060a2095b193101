/* pipe_ckpt: checkpoints of a pipeline run. Every stage holds its own
 * layers' parameters and optimizer state (gpt's tied embedding on the
 * first and the last); rank 0 gathers the parameters and ckpt.c the
 * state, piece by piece, and a resumed run takes each stage's back. With
 * replicas, replica 0's pipeline saves; under ZeRO the replicas' slices
 * of the state are first gathered whole onto it, and a resumed run cuts
 * the whole state it reads, so the file is the same whatever the mesh. */
#include <stdlib.h>

#include "cli/util.h"
#include "par/pipe.h"
#include "par/pipe_int.h"
#include "par/tp_stage.h"

/* The job's optimizer state as checkpoint pieces: each tensor from its
 * first holder, or (holders) from each stage holding it (gpt's tied
 * embedding: the first and the last). */
static struct ckpt_piece *
ckpt_pieces(struct pipe_run *r, int holders, size_t *n)
{
	const struct nn_model *m = r->m;
	struct ckpt_piece *p = calloc(2 * m->ntensors + 1, sizeof(*p));
	int a, b, h, q;

	*n = 0;
	for (size_t i = 0; p != NULL && i < m->ntensors; i++) {
		const struct nn_param *t = &m->table[i];

		pipe_owners(r, t->name, &a, &b);
		for (h = 0; h < (holders && b >= 0 ? 2 : 1); h++) {
			struct ckpt_piece *c = &p[(*n)++];

			*c = (struct ckpt_piece){ h ? b : a, t->offset, t->count,
			    NULL, 0 };
			for (q = 0; c->rank == r->rank && q < r->nown; q++)
				if (t->offset >= r->own[q].off && t->offset <
				    r->own[q].off + r->own[q].len) {
					c->o = &r->opt[q];
					c->o_off = t->offset - r->own[q].off;
				}
		}
	}
	return p;
}

static int
restore(struct pipe_run *r)
{
	struct ckpt_piece *p;
	size_t n;
	int rc;

	if (r->ts != NULL)
		return pipe_tp_resume(r);
	if ((p = ckpt_pieces(r, 1, &n)) == NULL)
		return pipe_oom(r);
	if ((rc = ckpt_restore(r->cfg->resume, p, n, r->rank, r->err,
	    r->errlen)) < 0)
		r->kind = TRAIN_ERR_DATA;
	free(p);
	return rc;
}

/* Under ZeRO the state is restored whole, as without it, and this
 * replica keeps its slices. */
int
pipe_ckpt_resume(struct pipe_run *r)
{
	struct nn_optim *whole, *mine = r->opt;
	int rc;

	if (r->zero == NULL)
		return restore(r);
	if ((whole = pipe_zero_whole_alloc(r)) == NULL)
		return -1;
	r->opt = whole;
	rc = restore(r);
	r->opt = mine;
	if (rc == 0)
		pipe_zero_take(r, whole);
	pipe_zero_whole_free(r, whole);
	return rc;
}

/* Rank 0 collects every stage's parameters (from their first holder);
 * under TP, each TP index 0 holds its stage's first (pipe_tp_gather), and
 * rank 0 collects from those. */
static int
gather_stages(struct pipe_run *r)
{
	const struct nn_model *m = r->m;
	int a, b;

	for (size_t i = 0; i < m->ntensors; i++) {
		const struct nn_param *p = &m->table[i];
		float *v = m->params + p->offset;
		int rc = 0;

		pipe_owners(r, p->name, &a, &b);
		if (a == 0)
			continue;
		comm_set_step(r->c, "gathering %s", p->name);
		if (r->rank == 0)
			rc = comm_recv(r->c, a, PIPE_TAG_PARAM, v,
			    p->count * sizeof(float));
		else if (r->rank == a)
			rc = comm_send(r->c, 0, PIPE_TAG_PARAM, v,
			    p->count * sizeof(float));
		if (rc < 0)
			return pipe_comm_failed(r);
	}
	return 0;
}

int
pipe_gather_params(struct pipe_run *r)
{
	if (r->ts != NULL && pipe_tp_gather(r, NULL) < 0)
		return -1;
	return r->ts != NULL && r->ts->rank != 0 ? 0 : gather_stages(r);
}

/* Under TP: the stage's moments gathered whole onto TP index 0, whose
 * pipeline then saves them as a pipeline without TP does, each tensor's
 * piece from its first holder. */
static int
tp_ckpt_write(struct pipe_run *r, long done)
{
	const struct nn_model *m = r->m;
	int moments = nn_optim_moments(&r->cfg->optim), k, a, b, rc = -1;
	int root = r->ts->rank == 0;
	struct nn_optim whole = { .count = m->nparams };
	float *flat[2] = { NULL, NULL };
	struct ckpt_piece *p = NULL;

	for (k = 0; k < moments && root; k++)
		if ((flat[k] = calloc(m->nparams, sizeof(float))) == NULL)
			goto oom;
	whole.m = flat[0], whole.v = flat[1];
	if (pipe_tp_gather(r, flat) < 0)
		goto out;
	if (!root) {
		rc = 0;
		goto out;
	}
	if ((p = calloc(m->ntensors, sizeof(*p))) == NULL)
		goto oom;
	for (size_t i = 0; i < m->ntensors; i++) {
		const struct nn_param *t = &m->table[i];

		pipe_owners(r, t->name, &a, &b);
		p[i] = (struct ckpt_piece){ a, t->offset, t->count,
		    a == r->rank ? &whole : NULL, t->offset };
	}
	if ((rc = gather_stages(r)) == 0 && (rc = ckpt_save(r->c, m,
	    &r->cfg->optim, p, m->ntensors, done, r->cfg->batch,
	    r->cfg->ckpt_path, r->err, r->errlen)) < 0)
		r->kind = TRAIN_ERR_RUNTIME;
	goto out;
oom:
	rc = pipe_oom(r);
out:
	free(flat[0]);
	free(flat[1]);
	free(p);
	return rc;
}

/* Collective over the pipeline: the whole model and optimizer state,
 * after done steps. */
static int
save(struct pipe_run *r, long done)
{
	struct ckpt_piece *p;
	size_t n;
	int rc;

	if (r->ts != NULL)
		return tp_ckpt_write(r, done);
	if ((p = ckpt_pieces(r, 0, &n)) == NULL)
		return pipe_oom(r);
	rc = gather_stages(r);
	if (rc == 0 && (rc = ckpt_save(r->c, r->m, &r->cfg->optim, p, n, done,
	    r->cfg->batch, r->cfg->ckpt_path, r->err, r->errlen)) < 0)
		r->kind = TRAIN_ERR_RUNTIME;
	free(p);
	return rc;
}


/* Every replica calls it; under ZeRO replica 0 gathers the slices of the
 * state and saves it whole, as a run without ZeRO holds it. */
int
pipe_ckpt_write(struct pipe_run *r, long done)
{
	struct nn_optim *whole = NULL, *mine = r->opt;
	int saver = r->cfg->dp == NULL || comm_rank(r->cfg->dp) == 0, rc;

	if (r->zero == NULL)
		return saver ? save(r, done) : 0;
	if (saver && (whole = pipe_zero_whole_alloc(r)) == NULL)
		return -1;
	if ((rc = pipe_zero_gather(r, whole)) == 0 && saver) {
		r->opt = whole;
		rc = save(r, done);
		r->opt = mine;
	}
	pipe_zero_whole_free(r, whole);
	return rc;
}
