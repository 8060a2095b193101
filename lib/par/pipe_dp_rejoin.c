/*
 * pipe_dp_rejoin: under --ft on a mesh, a replica started again (collx-run
 * --max-restarts starts a killed rank and the peers that left with it)
 * rejoins the running job. Every step begins with comm_grow over the
 * mesh's ranks; it admits a replica only whole (every TP and PP
 * coordinate of it: comm_grow_units), the others of a partial one
 * waiting at the rendezvous. The ranks lay the mesh again with the
 * larger count of replicas, and each rank admitted copies the parameters
 * and optimizer state of the rank at its (pp, tp) coordinate in the
 * first replica that has them (a broadcast over its DP group), the step
 * the replicas are at, and the records of the steps before (so that it
 * can write the outputs when it is, or becomes, the rank 0 of the mesh).
 * The step's batch is then split among the replicas again: its gradient
 * stays the whole batch's.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/util.h"
#include "comm/coll.h"
#include "par/dp_ft.h"
#include "par/pipe_ft.h"
#include "par/pipe_int.h"

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
	pipe_ft_close(ft);
	ft->world = sub;
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
 * started again takes them; the others keep theirs (their own times). */
static int
copy_stats(struct pipe_run *r, struct comm *dc, int root, long k)
{
	size_t len = (size_t)k * sizeof(*r->stat);
	void *buf = r->cfg->ft->joining ? (void *)r->stat : malloc(len);
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
	for (q = 0; q < r->nown; q++) {
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
