/*
 * dp_ft: --ft, a data-parallel run that loses replicas and goes on. A
 * step that failed because ranks died is run again by the survivors: they
 * agree on who is left (comm_shrink, over the same links), each takes its
 * share of the same global batch among the fewer replicas, so the step's
 * gradient is still the whole batch's. A survivor may have finished the
 * step (its last collective complete before the death reached it) while
 * another has not: the survivors then take the state of the one furthest
 * on (parameters, optimizer moments, the step records), so all go on from
 * the same step with the same bytes.
 *
 * Ranks started again (collx-run --max-restarts) rejoin at a step
 * boundary: every step begins with comm_grow among the replicas, and a
 * rank it admits takes the state of the one furthest on the same way
 * (it has done no step), then trains on with the others, each taking its
 * share of the batch among more replicas.
 *
 * Under ZeRO 1 and 2 no rank holds the whole optimizer state: the step
 * is settled and the slices cut again instead (dp_ft_zero.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/coll.h"
#include "par/dp_int.h"
#include "par/dp_ft.h"

#define FT_TRIES 8		/* shrinks in a row before giving up */

/* Ranks cut off from the others by a partition (or stopped longer than
 * the timeout, then continued) see the others gone as the others see
 * them gone; only one side may go on, or both would train and write the
 * outputs (dp_ft.h). */
int
dp_ft_majority(struct comm *old, struct comm *sub)
{
	int n = comm_size(old), k = comm_size(sub);

	return 2 * k > n || (2 * k == n &&
	    comm_world_rank(sub, 0) == comm_world_rank(old, 0));
}

int
dp_ft_member(struct comm *c, int w)
{
	for (int i = 0; i < comm_size(c); i++)
		if (comm_world_rank(c, i) == w)
			return 1;
	return 0;
}

void
dp_ft_departed(struct comm *a, struct comm *b, char *buf, size_t len)
{
	int i, w, n = 0;
	size_t off = 0;

	buf[0] = '\0';
	for (i = 0; i < comm_size(a); i++) {
		w = comm_world_rank(a, i);
		if (!dp_ft_member(b, w) && off < len)
			off += (size_t)snprintf(buf + off, len - off, "%s%d",
			    n++ ? ", " : "", w);
	}
}

/* Rank root's parameters and whole optimizer state on every replica
 * (under ZeRO they come sliced: state_copy). 0, or -1 (comm_error). */
static int
whole_state(struct dp_run *r, int root)
{
	struct comm *c = r->c;

	if (r->ftz != NULL)
		return 0;
	return coll_broadcast(c, r->m->params, r->m->nparams, DT_F32, root,
	    COLL_AUTO) < 0 || coll_broadcast(c, &r->opt.t, 1, DT_I64, root,
	    COLL_AUTO) < 0 || (r->opt.m != NULL && coll_broadcast(c, r->opt.m,
	    r->opt.count, DT_F32, root, COLL_AUTO) < 0) || (r->opt.v != NULL &&
	    coll_broadcast(c, r->opt.v, r->opt.count, DT_F32, root,
	    COLL_AUTO) < 0) ? -1 : 0;
}

/* Every survivor at the step of the one furthest on: *k, the steps done
 * here, made the group's most, with that rank's parameters, optimizer
 * state and records of the steps the others missed. 0, or -1
 * (comm_error). */
static int
catch_up(struct dp_run *r, long *k, struct train_step *s)
{
	struct comm *c = r->c;
	int64_t v[2] = { *k, -*k }, root;
	long from;

	comm_set_step(c, "--ft: the survivors' step");
	if (coll_allreduce(c, v, 2, DT_I64, COLL_MAX, COLL_AUTO) < 0)
		return -1;
	if (v[0] == -v[1])
		return 0;
	root = *k == v[0] ? r->rank : r->world;
	if (coll_allreduce(c, &root, 1, DT_I64, COLL_MIN, COLL_AUTO) < 0)
		return -1;
	from = (long)-v[1];
	comm_set_step(c, "--ft: the state of rank %d", (int)root);
	if (whole_state(r, (int)root) < 0 || coll_broadcast(c, s + from,
	    (size_t)(v[0] - from) * sizeof(*s), DT_U8, (int)root,
	    COLL_AUTO) < 0)
		return -1;
	*k = (long)v[0];
	return 0;
}

/* The replicas at one state after a change of the group: catch_up's,
 * under ZeRO the step the first settled and the slices cut again
 * (dp_ft_zero.c). 0, -1 (comm_error, or r->err for ZeRO), or -2 (a ZeRO
 * slice lost: no retry). */
static int
state_copy(struct dp_run *r, long *k, struct train_step *s)
{
	if (r->ftz == NULL)
		return catch_up(r, k, s) < 0 ? dp_comm_failed(r) : 0;
	if (dp_ftz_settle(r, k, s) < 0)
		return -1;
	if (catch_up(r, k, s) < 0)
		return dp_comm_failed(r);
	return dp_ftz_recut(r);
}

/* The run on group sub from now on (the group before closed): this
 * rank's share of the batch among its replicas. 0, or -1 (r->err). */
static int
adopt(struct dp_run *r, struct comm *sub)
{
	char e[COLLX_ERRLEN];

	if (r->ft_group != sub)
		comm_close(r->ft_group);
	r->ft_group = r->c = sub;
	r->rank = comm_rank(sub);
	r->world = comm_size(sub);
	train_split(r->cfg->batch, r->world, r->rank, &r->start, &r->count);
	train_batch_free(&r->tb);
	if (train_batch_alloc(&r->tb, r->d, r->count, e, sizeof(e)) < 0)
		return dp_runtime_failed(r, "rank %d: %s", e);
	if (r->cfg->ft_rank != NULL)
		*r->cfg->ft_rank = r->rank;
	return 0;
}

/* The line of a rejoin, by the rank 0 of the replicas: who, at which
 * step, and what it cost the others (the admission and the state's
 * copy). */
static void
say_joined(struct dp_run *r, long k, const char *who, double t0)
{
	char e[COLLX_ERRLEN];

	if (r->rank != 0 || r->cfg->note == NULL)
		return;
	snprintf(e, sizeof(e), "step %ld: rank%s %s rejoined; %d "
	    "replicas go on (%.3f s to admit and copy the state)", k,
	    strchr(who, ',') ? "s" : "", who, r->world, cli_now() - t0);
	r->cfg->note(NULL, e);
}

int
dp_ft_grow(struct dp_run *r, long *k, struct train_step *s)
{
	struct comm *sub;
	char e[COLLX_ERRLEN], who[256];
	double t0 = cli_now();

	if (!r->cfg->ft)
		return 0;
	dp_ftz_begin(r);
	if (r->joining) {	/* admitted at this step's start already */
		r->joining = 0;
		return 0;
	}
	if (comm_grow(r->c, &sub, e, sizeof(e)) < 0)
		return dp_comm_failed(r);
	if (sub == NULL)
		return 0;
	dp_ft_departed(sub, r->c, who, sizeof(who));
	if (adopt(r, sub) < 0 || state_copy(r, k, s) < 0)
		return -1;
	r->fresh = 0;
	say_joined(r, *k, who, t0);
	return 0;
}

int
dp_ft_rejoin(struct dp_run *r)
{
	struct comm *sub;
	char e[COLLX_ERRLEN];

	if (comm_grow(r->c, &sub, e, sizeof(e)) < 0)
		return dp_comm_failed(r);	/* refused: exit 3 */
	r->ft_group = r->c = sub;
	if (r->cfg->ft_rank != NULL)
		*r->cfg->ft_rank = comm_rank(sub);
	return 0;
}

int
dp_ft_joined(struct dp_run *r, long *k, struct train_step *s)
{
	char who[16];
	double t0 = cli_now();

	snprintf(who, sizeof(who), "%d", comm_world_rank(r->c, r->rank));
	if (state_copy(r, k, s) < 0)
		return -1;
	r->fresh = 0;
	say_joined(r, *k, who, t0);
	return 0;
}

/* The ranks started again whose copy of the state a departure cut
 * short (they got it in the recovery), as "2" or "0, 2" into who: 0, or
 * -1 (comm_error). */
static int
fresh_ranks(struct dp_run *r, char *who, size_t len)
{
	int n = 0, i, w;
	int64_t *f;
	size_t off = 0;

	for (i = 0; i < r->world; i++)
		if ((w = comm_world_rank(r->c, i)) >= n)
			n = w + 1;
	if ((f = calloc((size_t)n, sizeof(*f))) == NULL) {
		comm_fail(r->c, COMM_ERR_RUNTIME, "out of memory");
		return -1;
	}
	f[comm_world_rank(r->c, r->rank)] = r->fresh;
	comm_set_step(r->c, "--ft: who rejoined");
	if (coll_allreduce(r->c, f, (size_t)n, DT_I64, COLL_MAX,
	    COLL_AUTO) < 0) {
		free(f);
		return -1;
	}
	who[0] = '\0';
	for (i = 0; i < n; i++)
		if (f[i] && off < len)
			off += (size_t)snprintf(who + off, len - off, "%s%d",
			    off ? ", " : "", i);
	free(f);
	r->fresh = 0;
	return 0;
}

int
dp_ft_recover(struct dp_run *r, long *k, struct train_step *s)
{
	struct comm *sub;
	char e[COLLX_ERRLEN], left[256], fresh[256];
	int tries, before = r->world, rc = -1;
	double t0 = cli_now();

	if (!r->cfg->ft || r->kind != TRAIN_ERR_RUNTIME ||
	    comm_errkind(r->c) != COMM_ERR_RUNTIME)
		return -1;
	for (tries = 0; tries < FT_TRIES; tries++) {
		if (comm_shrink(r->c, &sub, e, sizeof(e)) < 0)
			return dp_runtime_failed(r, "rank %d: --ft: %s", e);
		dp_ft_departed(r->c, sub, left, sizeof(left));
		if (!dp_ft_majority(r->c, sub)) {
			snprintf(e, sizeof(e), "rank %%d: --ft: %d of %d "
			    "replicas left (rank%s %s gone or cut off), not a "
			    "majority: stopping, the others may go on",
			    comm_size(sub), comm_size(r->c),
			    strchr(left, ',') ? "s" : "", left);
			comm_close(sub);
			return dp_runtime_failed(r, e, "");
		}
		if (adopt(r, sub) < 0)
			return -1;
		if ((rc = state_copy(r, k, s)) == -2)
			return -1;
		if (rc == 0 && fresh_ranks(r, fresh, sizeof(fresh)) == 0)
			break;
	}
	if (tries == FT_TRIES)
		return dp_comm_failed(r);
	if (r->rank == 0 && r->cfg->note != NULL) {
		snprintf(e, sizeof(e), "step %ld: rank%s %s left; %d of %d "
		    "replicas go on (%.3f s to agree)", *k, strchr(left, ',') ?
		    "s" : "", left, r->world, before, cli_now() - t0);
		r->cfg->note(NULL, e);
	}
	if (fresh[0] != '\0')
		say_joined(r, *k, fresh, t0);
	r->err[0] = '\0';
	return 0;
}

void
dp_ft_free(struct dp_run *r)
{
	dp_ftz_free(r);
	comm_close(r->ft_group);
	r->ft_group = NULL;
}
