/*
 * pipe_dp_ft: --ft on a mesh's DP axis. A rank that dies takes its whole
 * replica out (every rank of its dp index: its TP and PP peers cannot
 * run a stage or a pipeline without it). The survivors fail their step,
 * agree on who is left over their links (comm_shrink on the mesh's
 * group), and keep the replicas that are whole; the ranks of a broken
 * one leave, saying why. The replicas left lay the same mesh with fewer
 * of them (their TP and PP groups as before, the DP groups smaller), set
 * the run up again on those groups with the state they had, and run the
 * failed step again, each replica taking its share of the same global
 * batch among fewer replicas, so that the step's gradient is still the
 * whole batch's.
 *
 * A replica's stages sum their gradients over the replicas each on its
 * own, so a death can leave one stage past its update and another not.
 * So every rank, its sums done, says so in one small allreduce over the
 * mesh (the commit), and updates only past it: a rank past the commit
 * knows every rank's sums were done; in the recovery the ranks that had
 * not updated then update from their sums, and all go on from the step
 * of the one furthest on, with the same bytes (no copy needed: the
 * replicas' parameters and moments are bitwise the same). Under ZeRO 1
 * and 2 each replica holds its own slices of the moments: they are
 * mirrored and cut again over the replicas left (pipe_dp_ft_zero.c).
 *
 * A replica started again (collx-run --max-restarts starts a killed rank
 * and the peers that left with it) rejoins the running job. Every step
 * begins with comm_grow over the mesh's ranks; it admits a replica only
 * whole (every TP and PP coordinate of it: comm_grow_units), the others
 * of a partial one waiting at the rendezvous. The ranks lay the mesh
 * again with the larger count of replicas, and each rank admitted copies
 * the parameters and optimizer state of the rank at its (pp, tp)
 * coordinate in the first replica that has them (a broadcast over its
 * DP group), the step the replicas are at, and the records of the steps
 * before (so that it can write the outputs when it is, or becomes, the
 * rank 0 of the mesh). The step's batch is then split among the
 * replicas again: its gradient stays the whole batch's.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/util.h"
#include "comm/coll.h"
#include "par/dp_ft.h"
#include "par/pipe_ft.h"
#include "par/pipe_ft_zero.h"
#include "par/pipe_int.h"

#define FT_TRIES 8		/* agreements in a row before giving up */

int
pipe_ft_commit(struct pipe_run *r, double loss, double t0)
{
	struct pipe_ft *ft = r->cfg->ft;
	int64_t one = 1;

	if (ft == NULL)
		return 0;
	/* --zero 1|2: the mirrors hold the step's inputs before it */
	if (pipe_ftz_mirror(r) < 0)
		return -1;
	r->ft_synced = 1;
	r->ft_loss = loss;
	r->ft_t0 = t0;
	comm_set_step(ft->world, "step %ld: --ft: every rank's sums done",
	    r->step);
	if (coll_allreduce(ft->world, &one, 1, DT_I64, COLL_SUM,
	    COLL_AUTO) < 0)
		return pipe_group_failed(r, ft->world);
	return 0;
}

void
pipe_ft_close(struct pipe_ft *ft)
{
	if (ft->world != ft->open)
		comm_close(ft->world);
	ft->world = ft->open;
}

/* The mesh's group from now on (the one before closed when ours). */
static void
set_world(struct pipe_ft *ft, struct comm *w)
{
	pipe_ft_close(ft);
	ft->world = w;
}

/* Per dp index of the first mesh, whether every rank of it is in s (ok,
 * orig.dp of them): the replicas that go on, their count. */
static int
whole(const struct pipe_ft *ft, struct comm *s, unsigned char *ok)
{
	int per = ft->orig.world / ft->orig.dp, d, i, n = 0;
	int *cnt = calloc((size_t)ft->orig.dp, sizeof(*cnt));
	struct mesh_coord at;

	if (cnt == NULL)
		return -1;
	for (i = 0; i < comm_size(s); i++) {
		mesh_coord(&ft->orig, comm_world_rank(s, i), &at);
		cnt[at.dp]++;
	}
	for (d = 0; d < ft->orig.dp; d++)
		n += ok[d] = cnt[d] == per;
	free(cnt);
	return n;
}

/* A rank's state across the set-up again: per owned range, its
 * parameters and the optimizer's moments and steps. */
struct carry {
	int n;
	float **x;		/* 3 per range: parameters, m, v (or NULL) */
	long *t;
};

static void
carry_free(struct carry *c)
{
	for (int i = 0; i < 3 * c->n && c->x != NULL; i++)
		free(c->x[i]);
	free(c->x);
	free(c->t);
	memset(c, 0, sizeof(*c));
}

static float *
dup_floats(const float *f, size_t n, int *bad)
{
	float *x;

	if (f == NULL)
		return NULL;
	if ((x = malloc(n * sizeof(*x))) == NULL)
		*bad = 1;
	else
		memcpy(x, f, n * sizeof(*x));
	return x;
}

static int
carry_save(struct pipe_run *r, struct carry *c)
{
	int q, bad = 0;

	c->n = r->nown;
	c->x = calloc((size_t)3 * (size_t)c->n + 1, sizeof(*c->x));
	c->t = calloc((size_t)c->n + 1, sizeof(*c->t));
	if (c->x == NULL || c->t == NULL)
		return pipe_oom(r);
	for (q = 0; q < c->n; q++) {
		c->x[3 * q] = dup_floats(r->params + r->own[q].off,
		    r->own[q].len, &bad);
		c->x[3 * q + 1] = dup_floats(r->opt[q].m, r->opt[q].count,
		    &bad);
		c->x[3 * q + 2] = dup_floats(r->opt[q].v, r->opt[q].count,
		    &bad);
		c->t[q] = r->opt[q].t;
	}
	return bad ? pipe_oom(r) : 0;
}

/* The same stage again (same pp, tp): its ranges and moments alike. */
static void
carry_restore(struct pipe_run *r, const struct carry *c)
{
	for (int q = 0; q < c->n && q < r->nown; q++) {
		memcpy(r->params + r->own[q].off, c->x[3 * q],
		    r->own[q].len * sizeof(float));
		if (c->x[3 * q + 1] != NULL)
			memcpy(r->opt[q].m, c->x[3 * q + 1],
			    r->opt[q].count * sizeof(float));
		if (c->x[3 * q + 2] != NULL)
			memcpy(r->opt[q].v, c->x[3 * q + 2],
			    r->opt[q].count * sizeof(float));
		r->opt[q].t = c->t[q];
	}
}

static int
ft_fail(struct pipe_run *r, const char *msg)
{
	r->kind = TRAIN_ERR_RUNTIME;
	return cli_fail(r->err, r->errlen, "%s", msg);
}

/* Step k past the commit: its update (from the sums) and its record. */
static int
finish(struct pipe_run *r, long k, struct pipe_result *res, pipe_step_fn fn,
    void *ctx)
{
	if (pipe_step_finish(r, k, &res->steps[k], r->ft_loss, r->ft_t0) < 0)
		return -1;
	res->steps[k].replicas = r->cfg->ft->mesh.dp;
	if (fn != NULL)
		fn(ctx, &res->steps[k], &r->stat[k]);
	return 0;
}

/* The survivors agreed (ft->world theirs, whole replicas only), and
 * every rank at the step of the one furthest on: *k. 0, or -1 with
 * r->err (this rank's replica broken, no majority, no agreement). */
static int
agree(struct pipe_run *r, long *k, struct pipe_result *res, pipe_step_fn fn,
    void *ctx, char *left, size_t len)
{
	struct pipe_ft *ft = r->cfg->ft;
	struct comm *s, *w;
	struct mesh_coord at;
	unsigned char *ok = calloc((size_t)ft->orig.dp, 1);
	char e[COLLX_ERRLEN], m[COLLX_ERRLEN + 300];
	int tries, n, rank;
	int64_t v[2];

	if (ok == NULL)
		return pipe_oom(r);
	for (tries = 0; tries < FT_TRIES; tries++) {
		if (comm_shrink(ft->world, &s, e, sizeof(e)) < 0) {
			free(ok);
			snprintf(m, sizeof(m), "rank %d: --ft: %s",
			    comm_world_rank(ft->world, comm_rank(ft->world)),
			    e);
			return ft_fail(r, m);
		}
		dp_ft_departed(ft->world, s, left, len);
		rank = comm_world_rank(s, comm_rank(s));
		if (!dp_ft_majority(ft->world, s) || (n = whole(ft, s, ok)) < 1) {
			snprintf(m, sizeof(m), "rank %d: --ft: %d of %d ranks "
			    "left (rank%s %s gone or cut off), %s: stopping",
			    rank, comm_size(s), comm_size(ft->world),
			    strchr(left, ',') ? "s" : "", left, n < 1 ?
			    "no whole replica" : "not a majority, the others "
			    "may go on");
			comm_close(s);
			free(ok);
			return ft_fail(r, m);
		}
		set_world(ft, s);
		mesh_coord(&ft->orig, rank, &at);
		if (!ok[at.dp]) {
			/* the others' split needs this rank's word */
			if (comm_split(s, COMM_UNDEFINED, 0, &w, e,
			    sizeof(e)) == 0)
				comm_close(w);
			snprintf(m, sizeof(m), "rank %d: --ft: rank%s %s left, "
			    "taking replica %d out; this rank leaves with it "
			    "(%d replica%s on)", rank, strchr(left, ',') ?
			    "s" : "", left, at.dp, n, n > 1 ? "s go" :
			    " goes");
			free(ok);
			return ft_fail(r, m);
		}
		if (comm_split(s, 0, comm_rank(s), &w, e, sizeof(e)) < 0)
			continue;
		set_world(ft, w);
		/* a rank started again whose copy was cut short has no
		 * step of its own: it takes one in the copy */
		v[0] = ft->joining ? INT64_MIN : *k;
		v[1] = ft->joining ? INT64_MIN : -*k;
		comm_set_step(w, "--ft: the survivors' step");
		if (coll_allreduce(w, v, 2, DT_I64, COLL_MAX, COLL_AUTO) == 0)
			break;
	}
	free(ok);
	if (tries == FT_TRIES || comm_errkind(ft->world) != COMM_ERR_NONE) {
		snprintf(m, sizeof(m), "rank %d: --ft: no agreement: %s",
		    comm_world_rank(ft->world, comm_rank(ft->world)),
		    comm_error(ft->world));
		return ft_fail(r, m);
	}
	if (v[0] == INT64_MIN)
		return ft_fail(r, "--ft: no replica left holds the state: only "
		    "ranks started again, their copy of it cut short");
	if (ft->joining)
		return 0;
	/* a rank went on past the commit of step v[0] - 1: every rank's
	 * sums of it were done, so those still at it update now */
	if (v[0] + v[1] > 1 || (*k < v[0] && !r->ft_synced))
		return ft_fail(r, "--ft: the ranks are out of step");
	if (*k < v[0]) {
		if (finish(r, *k, res, fn, ctx) < 0)
			return -1;
		*k = (long)v[0];
	}
	return 0;
}

int
pipe_ft_relay(struct pipe_run *r)
{
	struct pipe_ft *ft = r->cfg->ft;
	struct carry st = { 0 };
	char e[COLLX_ERRLEN];
	int per = ft->orig.world / ft->orig.dp, rc = -1;

	ft->mesh = ft->orig;
	ft->mesh.world = comm_size(ft->world);
	ft->mesh.dp = ft->mesh.world / per;
	mesh_groups_close(ft->grp);
	if (mesh_split(&ft->mesh, ft->world, ft->grp, e, sizeof(e)) < 0) {
		r->kind = TRAIN_ERR_RUNTIME;
		return cli_fail(r->err, r->errlen, "rank %d: --ft: %s",
		    comm_rank(ft->world), e);
	}
	ft->cfg = *r->cfg;
	ft->cfg.dp = ft->grp->dp;
	ft->cfg.tp = ft->grp->tp;
	ft->cfg.cp = ft->grp->cp;
	ft->cfg.resume = NULL;
	pipe_ftz_hold(r);
	if (carry_save(r, &st) < 0)
		goto out;
	r->cfg = &ft->cfg;
	if (pipe_run_again(r, ft->grp->pp) < 0)
		goto out;
	carry_restore(r, &st);
	if (ft->regrouped != NULL)
		ft->regrouped(ft->ctx, comm_rank(ft->world));
	rc = 0;
out:
	carry_free(&st);
	return rc;
}

int
pipe_ft_recover(struct pipe_run *r, long *k, struct pipe_result *res,
    pipe_step_fn fn, void *ctx, long *cap)
{
	struct pipe_ft *ft = r->cfg->ft;
	char left[256], out[512];
	double t0 = cli_now();
	int was;

	if (ft == NULL || r->kind != TRAIN_ERR_RUNTIME)
		return -1;
	was = ft->mesh.dp;
	/* --zero 1|2: a step updated here, its allgather cut short */
	if (pipe_ftz_settle(r, *k) && finish(r, (*k)++, res, fn, ctx) < 0)
		return -1;
	if (agree(r, k, res, fn, ctx, left, sizeof(left)) < 0 ||
	    pipe_ft_relay(r) < 0)
		return -1;
	if (comm_rank(ft->world) == 0 && ft->note != NULL && left[0] == '\0') {
		/* none of the ranks left: a rank started again did not join */
		snprintf(out, sizeof(out), "step %ld: a rejoin failed; %d "
		    "replica%s go%s on (%.3f s to agree and set up again)", *k,
		    ft->mesh.dp, ft->mesh.dp > 1 ? "s" : "", ft->mesh.dp > 1 ?
		    "" : "es", cli_now() - t0);
		ft->note(ft->ctx, out);
	} else if (comm_rank(ft->world) == 0 && ft->note != NULL) {
		snprintf(out, sizeof(out), "step %ld: rank%s %s left, taking "
		    "%d replica%s out; %d of %d replicas go on (%.3f s to agree "
		    "and set up again)", *k, strchr(left, ',') ? "s" : "", left,
		    was - ft->mesh.dp, was - ft->mesh.dp > 1 ? "s" : "",
		    ft->mesh.dp, was, cli_now() - t0);
		ft->note(ft->ctx, out);
	}
	/* ranks started again whose copy a departure cut short take it
	 * now, from the replicas left */
	if (pipe_ft_copy(r, k, res, cap, t0) < 0)
		return -1;
	r->err[0] = '\0';
	return 0;
}

int
pipe_ft_open(struct pipe_ft *ft, struct comm *c, char *err, size_t errlen)
{
	struct mesh_coord at;
	struct comm *sub;
	int *unit = malloc((size_t)ft->orig.world * sizeof(*unit)), r;

	if (unit == NULL) {
		cli_fail(err, errlen, "out of memory");
		return TRAIN_ERR_RUNTIME;
	}
	for (r = 0; r < ft->orig.world; r++) {
		mesh_coord(&ft->orig, r, &at);
		unit[r] = at.dp;
	}
	r = comm_grow_units(c, unit, err, errlen);
	free(unit);
	if (r < 0)
		return TRAIN_ERR_RUNTIME;
	if (!comm_rejoining(c))
		return 0;
	/* held until the others of its replica are there too, or refused */
	if (comm_grow(c, &sub, err, errlen) < 0)
		return comm_errkind(c) == COMM_ERR_MISMATCH ? TRAIN_ERR_DATA :
		    TRAIN_ERR_RUNTIME;
	ft->world = sub;
	ft->joining = 1;
	ft->t_join = cli_now();
	ft->mesh.world = comm_size(sub);
	ft->mesh.dp = ft->mesh.world / (ft->orig.world / ft->orig.dp);
	return 0;
}

int
pipe_ft_grow(struct pipe_run *r, long *k, struct pipe_result *res,
    long *cap)
{
	struct pipe_ft *ft = r->cfg->ft;
	struct comm *sub;
	char e[COLLX_ERRLEN];
	double t0 = cli_now();

	if (ft == NULL)
		return 0;
	if (ft->admitted) {	/* at this step's start already */
		ft->admitted = 0;
		return 0;
	}
	comm_set_step(ft->world, "step %ld: --ft: who rejoins", *k);
	if (comm_grow(ft->world, &sub, e, sizeof(e)) < 0)
		return pipe_group_failed(r, ft->world);
	if (sub == NULL)
		return 0;
	set_world(ft, sub);
	if (pipe_ft_relay(r) < 0)
		return -1;
	return pipe_ft_copy(r, k, res, cap, t0);
}

/* The line of a rejoin, by the rank 0 of the mesh: the world ranks with
 * a flag in f (n of them), at step k, and what it cost since t0 (the
 * others: the admission and the copy; a rank started again: its copy). */
static void
say_joined(const struct pipe_ft *ft, const int64_t *f, int n, long k,
    double t0)
{
	char who[256], line[400];
	size_t off = 0;
	int i;

	if (comm_rank(ft->world) != 0 || ft->note == NULL)
		return;
	who[0] = '\0';
	for (i = 0; i < n; i++)
		if (f[i] && off < sizeof(who))
			off += (size_t)snprintf(who + off, sizeof(who) - off,
			    "%s%d", off ? ", " : "", i);
	snprintf(line, sizeof(line), "step %ld: rank%s %s rejoined; %d "
	    "replicas go on (%.3f s to admit and copy the state)", k,
	    strchr(who, ',') ? "s" : "", who, ft->mesh.dp, cli_now() - t0);
	ft->note(ft->ctx, line);
}

/* The stage's records of steps [0, k) from the DP group's root: a rank
 * started again takes them; the others keep theirs (their own times),
 * receiving into scratch, while the root sends its own. */
static int
copy_stats(struct pipe_run *r, struct comm *dc, int root, long k)
{
	size_t len = (size_t)k * sizeof(*r->stat);
	void *buf = r->cfg->ft->joining || comm_rank(dc) == root ?
	    (void *)r->stat : malloc(len);
	int rc;

	if (buf == NULL)
		return pipe_oom(r);
	rc = coll_broadcast(dc, buf, len, DT_U8, root, COLL_AUTO);
	if (buf != r->stat)
		free(buf);
	return rc < 0 ? pipe_dp_failed(r) : 0;
}

int
pipe_ft_copy(struct pipe_run *r, long *k, struct pipe_result *res,
    long *cap, double t0)
{
	struct pipe_ft *ft = r->cfg->ft;
	struct comm *w = ft->world, *dc = r->cfg->dp;
	int n = ft->orig.world, q, rc = -1;
	int64_t *v = calloc((size_t)n + 2, sizeof(*v)), root, t;
	long from;

	if (v == NULL)
		return pipe_oom(r);
	/* --zero 1|2: the slices cut over the replicas there are */
	if (pipe_ftz_recut(r) < 0)
		goto out;
	/* who has no state yet; the replicas' step; the first rank with it */
	v[comm_world_rank(w, comm_rank(w))] = ft->joining;
	v[n] = ft->joining ? INT64_MIN : *k;
	v[n + 1] = ft->joining ? -(int64_t)comm_size(w) : -comm_rank(w);
	comm_set_step(w, "--ft: who rejoined");
	if (coll_allreduce(w, v, (size_t)n + 2, DT_I64, COLL_MAX,
	    COLL_AUTO) < 0) {
		pipe_group_failed(r, w);
		goto out;
	}
	for (q = 0; q < n && !v[q]; q++)
		;
	if (q == n) {		/* nobody */
		rc = 0;
		goto out;
	}
	if (v[n] == INT64_MIN) {
		r->kind = TRAIN_ERR_RUNTIME;
		cli_fail(r->err, r->errlen, "--ft: no replica left holds the "
		    "state: only ranks started again");
		goto out;
	}
	from = ft->joining ? 0 : *k;
	*k = (long)v[n];
	/* the stage's state from the first replica at this (pp, tp) */
	root = ft->joining ? comm_size(dc) : comm_rank(dc);
	comm_set_step(dc, "--ft: the state for the ranks started again");
	if (coll_allreduce(dc, &root, 1, DT_I64, COLL_MIN, COLL_AUTO) < 0)
		goto dp_failed;
	for (q = 0; q < r->nown && !pipe_ftz_on(r); q++) {
		t = r->opt[q].t;
		if (coll_broadcast(dc, r->params + r->own[q].off,
		    r->own[q].len, DT_F32, (int)root, COLL_AUTO) < 0 ||
		    (r->opt[q].m != NULL && coll_broadcast(dc, r->opt[q].m,
		    r->opt[q].count, DT_F32, (int)root, COLL_AUTO) < 0) ||
		    (r->opt[q].v != NULL && coll_broadcast(dc, r->opt[q].v,
		    r->opt[q].count, DT_F32, (int)root, COLL_AUTO) < 0) ||
		    coll_broadcast(dc, &t, 1, DT_I64, (int)root,
		    COLL_AUTO) < 0)
			goto dp_failed;
		r->opt[q].t = (long)t;
	}
	/* the records of the steps before: the stage's from the same rank,
	 * the steps' (with the caller's part) from the mesh's first */
	if (*k > 0 && pipe_grow(r, res, cap, *k - 1) < 0)
		goto out;
	if (*k > 0 && copy_stats(r, dc, (int)root, *k) < 0)
		goto out;
	if (!ft->joining && ft->records != NULL)
		ft->records(ft->ctx, res->steps, *k, 0);
	comm_set_step(w, "--ft: the step records for the ranks started again");
	if (*k > 0 && coll_broadcast(w, res->steps, (size_t)*k *
	    sizeof(*res->steps), DT_U8, (int)-v[n + 1], COLL_AUTO) < 0) {
		pipe_group_failed(r, w);
		goto out;
	}
	if (ft->joining) {
		for (long i = from; i < *k; i++)
			res->steps[i].moe_counts = NULL;
		if (ft->records != NULL)
			ft->records(ft->ctx, res->steps, *k, 1);
		ft->joining = 0;
		if (ft->regrouped != NULL)
			ft->regrouped(ft->ctx, comm_rank(w));
		t0 = ft->t_join;
	}
	/* every rank's copy done (a rank's part can end while another's is
	 * cut short): only then is the rejoin said */
	root = 1;
	comm_set_step(w, "--ft: the state copied");
	if (coll_allreduce(w, &root, 1, DT_I64, COLL_SUM, COLL_AUTO) < 0) {
		pipe_group_failed(r, w);
		goto out;
	}
	say_joined(ft, v, n, *k, t0);
	rc = 0;
	goto out;
dp_failed:
	pipe_dp_failed(r);
out:
	free(v);
	return rc;
}

int
pipe_ft_joined(struct pipe_run *r, long *k, struct pipe_result *res,
    pipe_step_fn fn, void *ctx, long *cap)
{
	if (pipe_ft_copy(r, k, res, cap, 0) == 0) {
		r->cfg->ft->admitted = 1;
		return 0;
	}
	/* the others run step *k's start again after it: so does this one */
	return pipe_ft_recover(r, k, res, fn, ctx, cap);
}
