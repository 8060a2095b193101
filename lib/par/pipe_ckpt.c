/* pipe_ckpt: checkpoints of a pipeline run. Every stage holds its own
 * layers' parameters and optimizer state (gpt's tied embedding on the
 * first and the last); rank 0 gathers the parameters and ckpt.c the
 * state, piece by piece, and a resumed run takes each stage's back. With
 * replicas, replica 0's pipeline saves. Under ZeRO each rank's slices of
 * the state (and of the parameters: ZeRO-3 keeps no more) are pieces in
 * the model's layout, listed over the whole mesh and sent to rank 0 a
 * tensor at a time by ckpt.c, as collx-dp's are; a resumed run takes
 * its slices from the whole state it reads, so the file is the same
 * whatever the mesh and the level.
 * The DP axis's slow links keep more (svecs below), saved as collx-dp
 * saves it: a float per model parameter, each replica's own ("NAME.D")
 * where the replicas differ (error feedback, local SGD's inner moments),
 * one where they agree (PowerSGD's Qs, the outer momentum); each stage
 * holds its ranges of every vector, indexed as the model's parameters. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/util.h"
#include "comm/coll.h"
#include "par/dp_sync.h"
#include "par/pipe.h"
#include "par/pipe_int.h"
#include "par/tp_stage.h"

/* ---- ZeRO's slices as pieces ------------------------------------------ */

/* The group checkpoints are written over: the whole mesh. */
static struct comm *
mesh(const struct pipe_run *r)
{
	return r->cfg->mesh != NULL ? r->cfg->mesh : r->c;
}

/* Float i of ts's shard p of a tensor in the model's layout (at o, the
 * tensor's offset there), and in *run the floats from it that lie
 * together in both layouts: to the shard's end, or to its row's end
 * when the shard is a column block (TP_COLS). */
static size_t
model_at(const struct tp_stage *ts, const struct tp_param *p, size_t o,
    size_t i, size_t *run)
{
	size_t cl;

	*run = p->count - i;
	if (ts->T == 1 || p->split == TP_WHOLE)
		return o + i;
	if (p->split == TP_ROWS)
		return o + (size_t)ts->rank * p->count + i;
	cl = p->count / (size_t)p->shape[0];
	*run = cl - i % cl;
	return o + i / cl * (size_t)p->shape[1] + (size_t)ts->rank * cl +
	    i % cl;
}

/* Floats [lo, hi) of the stage's vector, slice `slice` of ZeRO's (it
 * starts at s0, its optimizer o), as pieces held by rank me into p (NULL:
 * only counted) from p[n]: a run of one tensor's shard each, laid out
 * together in the model too. save: only those whose floats no other rank
 * lists (replicated tensors on TP index 0, a gpt's tied embedding on its
 * first stage); else every copy. The new count. */
static size_t
shard_pieces(struct pipe_run *r, size_t lo, size_t hi, size_t s0,
    struct nn_optim *o, int me, int save, struct ckpt_piece *p, size_t n)
{
	size_t base = 0, a, b, i, mo, run;
	int first, last;

	for (int c = 0; c < r->nchunk; base += r->ts[c++].nlocal)
		for (size_t t = 0; t < r->ts[c].nten; t++) {
			const struct tp_stage *ts = &r->ts[c];
			const struct tp_param *tp = &ts->ten[t].p;

			a = base + tp->off > lo ? base + tp->off : lo;
			b = base + tp->off + tp->count < hi ? base + tp->off +
			    tp->count : hi;
			if (!tp->present || b <= a)
				continue;
			pipe_owners(r, ts->ten[t].name, &first, &last);
			if (save && (first != r->rank || (ts->rank != 0 &&
			    (ts->T == 1 || tp->split == TP_WHOLE))))
				continue;
			mo = nn_model_param(r->m, ts->ten[t].name)->offset;
			for (i = a - base - tp->off; i < b - base - tp->off;
			    i += run, n++) {
				size_t at = model_at(ts, tp, mo, i, &run);

				if (run > b - base - tp->off - i)
					run = b - base - tp->off - i;
				if (p != NULL)
					p[n] = (struct ckpt_piece){ me, at, run,
					    o, base + tp->off + i - s0,
					    r->params + base + tp->off + i };
			}
		}
	return n;
}

/* The slices of ZeRO z this rank holds as pieces from p[n] (p NULL:
 * counted only), ranks the mesh's; the new count. */
static size_t
slice_pieces(struct pipe_run *r, struct dp_zero *z, int save,
    struct ckpt_piece *p, size_t n)
{
	int me = comm_rank(mesh(r));
	size_t off, len, s0;

	for (int i = 0; i < z->n; i++) {
		dp_zero_slice(z, i, z->rank, &off, &len);
		s0 = z->rg[i].off + off;
		n = shard_pieces(r, s0, s0 + len, s0, &z->opt[i], me, save, p,
		    n);
	}
	return n;
}

/* This rank's slices of ZeRO's state and parameters as pieces (the
 * count; p NULL: counted only): ZeRO's over the replicas and, with
 * divided experts, the experts' over the replicas holding them (ze).
 * save: as shard_pieces's, and under --shard-group host the first
 * host's alone. */
static size_t
zero_pieces(struct pipe_run *r, int save, struct ckpt_piece *p)
{
	size_t n;

	if (save && r->zero->rep != NULL && comm_rank(r->zero->rep) != 0)
		return 0;
	n = slice_pieces(r, pipe_dp_zero_state(r), save, p, 0);
	return r->zero->fsdp == NULL ? slice_pieces(r, &r->zero->ze, save, p,
	    n) : n;
}

/* Every rank's slices restored from the state read (each copy's), every
 * slice's step count the checkpoint's. */
static int
zero_resume(struct pipe_run *r)
{
	struct dp_zero *z = pipe_dp_zero_state(r);
	size_t n = zero_pieces(r, 0, NULL);
	struct ckpt_piece *p = calloc(n + 1, sizeof(*p));
	int rc;

	if (p == NULL)
		return pipe_oom(r);
	zero_pieces(r, 0, p);
	rc = ckpt_restore(r->cfg->resume, p, n, comm_rank(mesh(r)), r->err,
	    r->errlen);
	free(p);
	if (rc < 0) {
		r->kind = TRAIN_ERR_DATA;
		return -1;
	}
	for (int i = 0; i < z->n; i++)
		z->opt[i].t = r->cfg->resume->step;
	for (int i = 0; r->zero->fsdp == NULL && i < r->zero->ze.n; i++)
		r->zero->ze.opt[i].t = r->cfg->resume->step;
	return 0;
}

/* Every rank's pieces, in rank order, into *p (its own *n there on
 * entry, set where they fall), *n all of them: listed alike on every
 * rank, as ckpt.c needs them. Collective over the mesh. */
static int
zero_list(struct pipe_run *r, struct ckpt_piece **p, size_t *n)
{
	struct comm *c = mesh(r);
	int me = comm_rank(c), world = comm_size(c), q, rc = -1;
	size_t *counts = calloc((size_t)world, sizeof(*counts)), k = 0, j, at = 0;
	int64_t mine = (int64_t)*n, *cnt = calloc((size_t)world,
	    sizeof(*cnt)), *desc = malloc((2 * *n + 1) * sizeof(*desc));
	int64_t *all = NULL;
	struct ckpt_piece *w = NULL;

	if (counts == NULL || cnt == NULL || desc == NULL)
		goto oom;
	comm_set_step(c, "listing the checkpoint's ZeRO pieces");
	if (coll_allgather(c, &mine, cnt, 1, DT_I64, COLL_AUTO) < 0)
		goto failed;
	for (q = 0; q < world; q++) {
		if (q == me)
			at = k;
		k += (size_t)cnt[q];
		counts[q] = 2 * (size_t)cnt[q];
	}
	for (j = 0; j < *n; j++) {
		desc[2 * j] = (int64_t)(*p)[j].off;
		desc[2 * j + 1] = (int64_t)(*p)[j].len;
	}
	if ((all = malloc((2 * k + 1) * sizeof(*all))) == NULL ||
	    (w = calloc(k + 1, sizeof(*w))) == NULL)
		goto oom;
	if (coll_allgatherv(c, desc, all, counts, DT_I64, COLL_AUTO) < 0)
		goto failed;
	for (q = 0, j = 0; q < world; q++)
		for (int64_t i = 0; i < cnt[q]; i++, j++)
			w[j] = (struct ckpt_piece){ q, (size_t)all[2 * j],
			    (size_t)all[2 * j + 1], NULL, 0, NULL };
	memcpy(w + at, *p, *n * sizeof(*w));
	free(*p);
	*p = w;
	*n = k;
	w = NULL;
	rc = 0;
	goto out;
oom:
	rc = pipe_oom(r);
	goto out;
failed:
	rc = pipe_group_failed(r, c);
out:
	free(counts);
	free(cnt);
	free(desc);
	free(all);
	free(w);
	return rc;
}

/* Collective over the mesh: rank 0 writes the checkpoint with the nx
 * vectors x (its own; the others pass none), each rank sending its
 * pieces, parameters and state, as ckpt.c asks for them. Rank 0 holds
 * one tensor at a time besides its slices; under --zero 3 the
 * parameters each rank holds meanwhile are its ckpt_peak. */
static int
zero_save(struct pipe_run *r, long done, const struct ckpt_vec *x, size_t nx)
{
	size_t n = zero_pieces(r, 1, NULL), held = 0;
	struct ckpt_piece *p = calloc(n + 1, sizeof(*p));
	int rc = -1;

	if (p == NULL)
		return pipe_oom(r);
	zero_pieces(r, 1, p);
	if (zero_list(r, &p, &n) == 0 && (rc = ckpt_save_sharded(mesh(r),
	    r->m, &r->cfg->optim, p, n, x, nx, done, r->cfg->batch,
	    r->cfg->ckpt_path, &held, r->err, r->errlen)) < 0)
		r->kind = TRAIN_ERR_RUNTIME;
	if (rc == 0 && r->zero->fsdp != NULL) {
		held += dp_fsdp_held(r->zero->fsdp);
		r->ckpt_peak = held > r->ckpt_peak ? held : r->ckpt_peak;
	}
	free(p);
	return rc;
}

int
pipe_ckpt_resume(struct pipe_run *r)
{
	return r->zero == NULL ? pipe_tp_resume(r) : zero_resume(r);
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
	if (pipe_tp_gather(r, NULL) < 0)
		return -1;
	return r->ts->rank != 0 ? 0 : gather_stages(r);
}

/* Collective over the pipeline and the TP groups: the whole model and
 * optimizer state, and the nx vectors x (rank 0's), after done steps.
 * The stage's moments are gathered whole onto TP index 0 (a group of
 * one: the stage's own), whose pipeline then saves them, each tensor's
 * piece from its first holder. */
static int
save(struct pipe_run *r, long done, const struct ckpt_vec *x, size_t nx)
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
		    a == r->rank ? &whole : NULL, t->offset, NULL };
	}
	if ((rc = gather_stages(r)) == 0 && (rc = ckpt_save_vecs(r->c, m,
	    &r->cfg->optim, p, m->ntensors, x, nx, done, r->cfg->batch,
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

/* ---- the slow links' state --------------------------------------------- */

/* The state this run keeps after done steps, listed alike on every rank
 * and named as collx-dp names it (dp_state_list; PowerSGD's Qs exist
 * once a step has compressed). On this stage a DP_STATE_VEC is indexed as
 * r->params, a DP_STATE_MOMENT is the optimizers' moment (local SGD's
 * inner state while the replicas drift). */
static size_t
svecs(const struct pipe_run *r, long done, struct dp_state *x)
{
	const struct pipe_cfg *cfg = r->cfg;
	struct dp_powersgd *ps = pipe_dp_sync_powersgd(r);

	return dp_state_list(pipe_dp_sync_wire_ef(r), ps, ps != NULL &&
	    done > cfg->dpo.powersgd_start, pipe_dp_sync_outer_m(r),
	    cfg->dpo.sync_every > 1 ? nn_optim_moments(&cfg->optim) : 0, x);
}

static int
replicas(const struct pipe_run *r, int *me)
{
	*me = r->cfg->dp != NULL ? comm_rank(r->cfg->dp) : 0;
	return r->cfg->dp != NULL ? comm_size(r->cfg->dp) : 1;
}

/* The stage's vector (r->params' layout: its chunks' tp_stages one
 * after another) to the model's (to_model) or back, tensor by tensor
 * (whole: one TP rank). */
static void
map(const struct pipe_run *r, const float *from, float *to, int to_model)
{
	size_t i, so, mo, n, base = 0;

	for (int c = 0; c < r->nchunk; base += r->ts[c++].nlocal)
		for (i = 0; i < r->ts[c].nten; i++) {
			const struct tp_stage_tensor *t = &r->ts[c].ten[i];

			if (!t->p.present)
				continue;
			so = base + t->p.off;
			n = t->p.count;
			mo = nn_model_param(r->m, t->name)->offset;
			memcpy(to + (to_model ? mo : so), from + (to_model ?
			    so : mo), n * sizeof(float));
		}
}

/* Owned range q of x in the stage's layout. */
static float *
range(const struct pipe_run *r, const struct dp_state *x, int q)
{
	if (x->kind == DP_STATE_VEC)
		return x->v + r->own[q].off;
	return x->k ? r->opt[q].v : r->opt[q].m;
}

/* This stage's part of x into out (a float per model parameter, zero
 * elsewhere), through sv (the stage's layout). */
static void
svec_get(const struct pipe_run *r, const struct dp_state *x, float *sv,
    float *out)
{
	memset(out, 0, r->m->nparams * sizeof(float));
	if (x->kind == DP_STATE_Q)
		dp_powersgd_q_get(pipe_dp_sync_powersgd(r), sv);
	for (int q = 0; x->kind != DP_STATE_Q && q < r->nown; q++)
		memcpy(sv + r->own[q].off, range(r, x, q), r->own[q].len *
		    sizeof(float));
	map(r, sv, out, 1);
}

/* This stage's part of x from in, as svec_get lays it out. */
static void
svec_put(struct pipe_run *r, const struct dp_state *x, float *sv,
    const float *in)
{
	map(r, in, sv, 0);
	if (x->kind == DP_STATE_Q)
		dp_powersgd_q_put(pipe_dp_sync_powersgd(r), sv);
	for (int q = 0; x->kind != DP_STATE_Q && q < r->nown; q++) {
		memcpy(range(r, x, q), sv + r->own[q].off, r->own[q].len *
		    sizeof(float));
		if (x->kind == DP_STATE_MOMENT)
			r->opt[q].t = r->cfg->resume->step;
	}
}

/* Floats of the stage's vector. */
static size_t
stage_len(const struct pipe_run *r)
{
	size_t n = 0;

	for (int c = 0; c < r->nchunk; c++)
		n += r->ts[c].nlocal;
	return n;
}

/* Replica 0's stage 0 collects the rest of the pipeline's parts of the
 * vectors in all (nv of them), each tensor's from its first holder. */
static int
merge_stages(struct pipe_run *r, float *all, size_t nv)
{
	const struct nn_model *m = r->m;
	int a, b, rc = 0;

	for (size_t i = 0; i < m->ntensors && rc == 0; i++) {
		const struct nn_param *t = &m->table[i];

		pipe_owners(r, t->name, &a, &b);
		if (a == 0 || (r->rank != 0 && r->rank != a))
			continue;
		comm_set_step(r->c, "gathering the slow-link state of %s",
		    t->name);
		for (size_t j = 0; j < nv && rc == 0; j++) {
			float *v = all + j * m->nparams + t->offset;

			rc = r->rank == 0 ? comm_recv(r->c, a, PIPE_TAG_PARAM,
			    v, t->count * sizeof(float)) : comm_send(r->c, 0,
			    PIPE_TAG_PARAM, v, t->count * sizeof(float));
		}
	}
	return rc < 0 ? pipe_comm_failed(r) : 0;
}

/* Every vector of x, every replica's of a per-replica one, into all (nx
 * * D vectors, [i * D + d]) on replica 0's rank 0: gathered over the DP
 * axis on each stage, then over replica 0's pipeline. all: replica 0's,
 * NULL elsewhere. Collective over both axes. */
static int
svec_collect(struct pipe_run *r, const struct dp_state *x, size_t nx,
    float *all)
{
	size_t np = r->m->nparams, *counts = NULL, i;
	int me, d = replicas(r, &me), rc = -1;
	float *mine = malloc((np + 1) * sizeof(float));
	float *sv = calloc(stage_len(r) + 1, sizeof(float));

	if (mine == NULL || sv == NULL || (counts = calloc((size_t)d,
	    sizeof(*counts))) == NULL) {
		rc = pipe_oom(r);
		goto out;
	}
	for (int q = 0; q < d; q++)
		counts[q] = np;
	for (i = 0; i < nx; i++) {
		float *dst = all != NULL ? all + i * (size_t)d * np : NULL;

		svec_get(r, &x[i], sv, mine);
		comm_set_step(r->cfg->dp != NULL ? r->cfg->dp : r->c,
		    "gathering stage %d's %s", r->rank, x[i].name);
		if (x[i].per_rank && d > 1) {
			if (coll_gatherv(r->cfg->dp, mine, dst, counts, DT_F32,
			    0) < 0) {
				rc = pipe_dp_failed(r);
				goto out;
			}
		} else if (dst != NULL)
			memcpy(dst, mine, np * sizeof(float));
	}
	rc = all != NULL ? merge_stages(r, all, nx * (size_t)d) : 0;
out:
	free(mine);
	free(sv);
	free(counts);
	return rc;
}

/* Replica 0's pipeline saves with the vectors x, collected from every
 * replica's. */
static int
save_with(struct pipe_run *r, long done, const struct dp_state *x, size_t nx)
{
	size_t np = r->m->nparams, i, nv = 0;
	int me, d = replicas(r, &me), q, rc = -1;
	float *all = NULL;
	struct ckpt_vec *cv = NULL;
	char (*names)[64] = NULL;

	if (me == 0 && ((all = calloc(nx * (size_t)d * np + 1,
	    sizeof(float))) == NULL || (cv = calloc(nx * (size_t)d,
	    sizeof(*cv))) == NULL || (names = calloc(nx * (size_t)d,
	    sizeof(*names))) == NULL)) {
		rc = pipe_oom(r);
		goto out;
	}
	if (svec_collect(r, x, nx, all) < 0)
		goto out;
	for (i = 0; me == 0 && i < nx; i++)
		for (q = 0; q < (x[i].per_rank ? d : 1); q++, nv++) {
			if (x[i].per_rank)
				snprintf(names[nv], sizeof(names[nv]), "%s.%d",
				    x[i].name, q);
			else
				snprintf(names[nv], sizeof(names[nv]), "%s",
				    x[i].name);
			cv[nv] = (struct ckpt_vec){ names[nv],
			    all + (i * (size_t)d + (size_t)q) * np, 0 };
		}
	if (r->zero != NULL)
		rc = zero_save(r, done, cv, nv);
	else
		rc = me == 0 ? save(r, done, cv, nv) : 0;
out:
	free(all);
	free(cv);
	free(names);
	return rc;
}

/* nx vectors of state kept for stages of one TP rank only. */
static int
one_tp_rank(struct pipe_run *r, size_t nx)
{
	if (nx == 0 || r->ts->T == 1)
		return 0;
	r->kind = TRAIN_ERR_RUNTIME;
	return cli_fail(r->err, r->errlen, "rank %d: checkpoints keep the DP "
	    "axis's slow-link state for stages of one TP rank only", r->rank);
}

/* State the checkpoint holds that this run would drop: not exact. */
static int
refuse_dropped(struct pipe_run *r, const struct dp_state *x, size_t nx)
{
	const float *v, *one;
	size_t i, k;

	for (k = 0; k < DP_NSTATE; k++) {
		for (i = 0; i < nx && strcmp(x[i].name, dp_state_names[k]) != 0;
		    i++)
			;
		if (i < nx)
			continue;
		if (dp_state_get(r->cfg->resume, dp_state_names[k], 0,
		    r->m->nparams, &v, r->err, r->errlen) < 0 ||
		    dp_state_get(r->cfg->resume, dp_state_names[k], -1,
		    r->m->nparams, &one, r->err, r->errlen) < 0)
			return -1;
		if (v != NULL || one != NULL)
			return cli_fail(r->err, r->errlen, "rank %d: the "
			    "checkpoint holds '%s', state this run does not "
			    "keep; resume it with the options that wrote it",
			    r->rank, dp_state_names[k]);
	}
	return 0;
}

int
pipe_ckpt_sync_resume(struct pipe_run *r)
{
	struct dp_state x[DP_NSTATE];
	size_t nx = svecs(r, r->cfg->resume->step, x), i;
	int me, d = replicas(r, &me), n = 0, rc = -1;
	const float *v;
	float *sv;

	if (one_tp_rank(r, nx) < 0)
		return -1;
	r->kind = TRAIN_ERR_DATA;
	if (refuse_dropped(r, x, nx) < 0)
		return -1;
	if (nx == 0)
		return 0;
	if ((sv = calloc(stage_len(r) + 1, sizeof(float))) == NULL)
		return pipe_oom(r);
	for (i = 0; i < nx; i++) {
		if (x[i].per_rank && dp_state_ranks(r->cfg->resume, x[i].name,
		    r->m->nparams, &n, r->err, r->errlen) < 0)
			goto out;
		if (x[i].per_rank && n > 0 && n != d) {
			cli_fail(r->err, r->errlen, "rank %d: the checkpoint "
			    "holds '%s' of %d DP replicas, not %d: each "
			    "replica's own state resumes only on as many",
			    r->rank, x[i].name, n, d);
			goto out;
		}
		if (dp_state_get(r->cfg->resume, x[i].name, x[i].per_rank ?
		    me : -1, r->m->nparams, &v, r->err, r->errlen) < 0)
			goto out;
		if (v == NULL) {
			cli_fail(r->err, r->errlen, "rank %d: the checkpoint "
			    "does not hold '%s', state this run keeps", r->rank,
			    x[i].name);
			goto out;
		}
		svec_put(r, &x[i], sv, v);
	}
	rc = 0;
out:
	free(sv);
	return rc;
}


/* Every replica calls it: replica 0's pipeline saves, or under ZeRO
 * every rank its pieces. */
int
pipe_ckpt_write(struct pipe_run *r, long done)
{
	int saver = r->cfg->dp == NULL || comm_rank(r->cfg->dp) == 0;
	struct dp_state x[DP_NSTATE];
	size_t nx = svecs(r, done, x);

	if (one_tp_rank(r, nx) < 0)
		return -1;
	if (nx > 0)
		return save_with(r, done, x, nx);
	if (r->zero != NULL)
		return zero_save(r, done, NULL, 0);
	return saver ? save(r, done, NULL, 0) : pipe_moe_ckpt_peer(r);
}
