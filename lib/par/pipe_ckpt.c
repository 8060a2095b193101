/* pipe_ckpt: checkpoints of a pipeline run. Every stage holds its own
 * layers' parameters and optimizer state (gpt's tied embedding on the
 * first and the last); rank 0 gathers the parameters and ckpt.c the
 * state, piece by piece, and a resumed run takes each stage's back. */
#include <stdlib.h>

#include "cli/util.h"
#include "par/pipe.h"
#include "par/pipe_int.h"

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

int
pipe_ckpt_resume(struct pipe_run *r)
{
	struct ckpt_piece *p;
	size_t n;
	int rc;

	if ((p = ckpt_pieces(r, 1, &n)) == NULL)
		return pipe_oom(r);
	if ((rc = ckpt_restore(r->cfg->resume, p, n, r->rank, r->err,
	    r->errlen)) < 0)
		r->kind = TRAIN_ERR_DATA;
	free(p);
	return rc;
}

/* Rank 0 collects every stage's parameters (from their first holder). */
int
pipe_gather_params(struct pipe_run *r)
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

/* Collective: the whole model and optimizer state, after done steps. */
int
pipe_ckpt_write(struct pipe_run *r, long done)
{
	struct ckpt_piece *p;
	size_t n;
	int rc;

	if ((p = ckpt_pieces(r, 0, &n)) == NULL)
		return pipe_oom(r);
	rc = pipe_gather_params(r);
	if (rc == 0 && (rc = ckpt_save(r->c, r->m, &r->cfg->optim, p, n, done,
	    r->cfg->batch, r->cfg->ckpt_path, r->err, r->errlen)) < 0)
		r->kind = TRAIN_ERR_RUNTIME;
	free(p);
	return rc;
}

