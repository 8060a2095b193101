/* dp_ckpt: checkpoints of a data-parallel run. The optimizer state lies
 * where the sync puts it: whole on every rank (allreduce), in ZeRO slices
 * of every bucket, or in parameter-server shards of the vector or of every
 * bucket (colocated synchronous servers); the pieces below say which rank
 * holds what, so ckpt.c can collect it into one file and put it back.
 * --wire int8's error feedback is every rank's own, saved for each rank;
 * so is local SGD's inner optimizer state when the replicas drift (H > 1),
 * and beside it the outer momentum (the anchor is the parameters: a
 * checkpoint is taken only where the replicas have just synced).
 * PowerSGD's error feedback is every rank's, its warm-start Qs are
 * alike on every rank. That state is named and listed here once
 * (dp_state_*) for collx-train's checkpoints too (pipe_ckpt.c). */
#include <stdlib.h>
#include <string.h>

#include "cli/util.h"
#include "par/dp_int.h"

const char *const dp_state_names[DP_NSTATE] = { "wire.ef", "powersgd.ef",
	"powersgd.q", "local.outer_m", "local.inner_m", "local.inner_v" };

size_t
dp_state_list(float *ef, struct dp_powersgd *ps, int qs, float *outer_m,
    int moments, struct dp_state *x)
{
	size_t n = 0;

	if (ef != NULL)
		x[n++] = (struct dp_state){ dp_state_names[0], DP_STATE_VEC, 1,
		    ef, 0 };
	if (ps != NULL)
		x[n++] = (struct dp_state){ dp_state_names[1], DP_STATE_VEC, 1,
		    dp_powersgd_ef(ps), 0 };
	if (ps != NULL && qs)
		x[n++] = (struct dp_state){ dp_state_names[2], DP_STATE_Q, 0,
		    NULL, 0 };
	if (outer_m != NULL)
		x[n++] = (struct dp_state){ dp_state_names[3], DP_STATE_VEC, 0,
		    outer_m, 0 };
	for (int k = 0; k < moments && k < 2; k++)
		x[n++] = (struct dp_state){ dp_state_names[4 + k],
		    DP_STATE_MOMENT, 1, NULL, k };
	return n;
}

int
dp_state_get(const struct ckpt_state *st, const char *name, int q,
    size_t np, const float **v, char *err, size_t errlen)
{
	if (strcmp(name, dp_state_names[0]) == 0) {
		*v = q >= 0 && q < st->ef_ranks ? st->ef + (size_t)q * np :
		    NULL;
		return 0;
	}
	return ckpt_state_vec(st, name, q, np, v, err, errlen);
}

int
dp_state_ranks(const struct ckpt_state *st, const char *name, size_t np,
    int *n, char *err, size_t errlen)
{
	const float *v;

	for (*n = 0;; (*n)++) {
		if (dp_state_get(st, name, *n, np, &v, err, errlen) < 0)
			return -1;
		if (v == NULL)
			return 0;
	}
}

/* The job's optimizer state as pieces. holders: list every rank holding
 * a copy (to restore), not only the first (to save). */
static struct ckpt_piece *
pieces(struct dp_run *r, int holders, size_t *n)
{
	const struct dp_cfg *cfg = r->cfg;
	int q, i, nb = r->fsdp != NULL ? r->nbopt : r->bopt != NULL ?
	    r->nbucket : 1;
	struct ckpt_piece *p;
	size_t k = 0, off, len;

	p = calloc((size_t)nb * (size_t)r->world + 1, sizeof(*p));
	if (p == NULL)
		return NULL;
	if (cfg->dpo.sync_every > 1) {
		*n = 0;
		return p;
	}
	if (cfg->sync == DP_ALLREDUCE && cfg->dpo.zero == 0) {
		q = holders ? r->rank : 0;
		p[k++] = (struct ckpt_piece){ q, 0, r->m->nparams,
		    q == r->rank ? &r->opt : NULL, 0, NULL };
		*n = k;
		return p;
	}
	if (cfg->dpo.zero > 0) {
		*n = r->fsdp != NULL ? dp_fsdp_pieces(r->fsdp, holders, p) :
		    dp_zero_pieces(&r->zero, p);
		return p;
	}
	for (i = 0; i < nb; i++)
		for (q = 0; q < cfg->ps_servers; q++) {
			size_t base = r->bopt != NULL ? r->bucket[i] : 0;
			struct nn_optim *o = q != r->rank ? NULL : r->bopt != NULL ?
			    &r->bopt[i] : &r->opt;

			ps_shard(r->bopt != NULL ? r->bucket[i + 1] - base :
			    r->m->nparams, cfg->ps_servers, q, &off, &len);
			p[k++] = (struct ckpt_piece){ q, base + off, len, o, 0,
			    NULL };
		}
	*n = k;
	return p;
}

/* Error feedback of as many ranks as this run's, for --wire int8; a
 * checkpoint without it starts int8 from none. */
static int
restore_ef(struct dp_run *r)
{
	const struct ckpt_state *st = r->cfg->resume;
	const float *ef;

	r->kind = TRAIN_ERR_DATA;
	if (st->ef != NULL && r->wire.type != DP_WIRE_INT8)
		return cli_fail(r->err, r->errlen, "rank %d: the checkpoint holds "
		    "--wire int8 error feedback; resume it with --wire int8",
		    r->rank);
	if (st->ef != NULL && st->ef_ranks != r->world)
		return cli_fail(r->err, r->errlen, "rank %d: the checkpoint holds "
		    "the error feedback of %d ranks, not %d", r->rank,
		    st->ef_ranks, r->world);
	if (dp_state_get(st, dp_state_names[0], r->rank, r->m->nparams, &ef,
	    r->err, r->errlen) < 0)
		return -1;
	if (ef != NULL)
		memcpy(r->wire.ef, ef, r->m->nparams * sizeof(float));
	return 0;
}

/* Per-rank vector name of this rank into *v, NULL when absent; *all:
 * whether the checkpoint holds one for each of this run's ranks, no more
 * (the same answer on every rank). */
static int
rank_vec(struct dp_run *r, const char *name, const float **v, int *all)
{
	const struct ckpt_state *st = r->cfg->resume;
	int n;

	if (dp_state_get(st, name, r->rank, r->m->nparams, v, r->err,
	    r->errlen) < 0 || dp_state_ranks(st, name, r->m->nparams, &n,
	    r->err, r->errlen) < 0)
		return -1;
	*all = n == r->world;
	return 0;
}

/* This rank's "local.NAME.RANK" into o (NULL: it must have none). */
static int
restore_inner(struct dp_run *r, const char *name, float *o)
{
	const float *v;
	int all;

	if (rank_vec(r, name, &v, &all) < 0)
		return -1;
	if (o == NULL && v != NULL)
		return cli_fail(r->err, r->errlen, "rank %d: the checkpoint holds "
		    "'%s.%d', state this run's optimizer does not keep (local "
		    "SGD's own steps: --sync-every above 1)", r->rank, name,
		    r->rank);
	if (o != NULL && (v == NULL || !all))
		return cli_fail(r->err, r->errlen, "rank %d: the checkpoint does "
		    "not hold '%s' for each of this run's %d ranks (a run with "
		    "--sync-every above 1 on %d ranks writes it)", r->rank, name,
		    r->world, r->world);
	if (o != NULL)
		memcpy(o, v, r->m->nparams * sizeof(float));
	return 0;
}

/* Local SGD's outer momentum and, when replicas drift, this rank's own
 * inner optimizer state. */
static int
restore_local(struct dp_run *r)
{
	const struct ckpt_state *st = r->cfg->resume;
	const float *b;
	int drift = r->cfg->dpo.sync_every > 1;

	r->kind = TRAIN_ERR_DATA;
	if (ckpt_state_vec(st, dp_state_names[3], -1, r->m->nparams, &b, r->err,
	    r->errlen) < 0)
		return -1;
	if ((b != NULL) != (r->outer_m != NULL))
		return cli_fail(r->err, r->errlen, "rank %d: the checkpoint holds "
		    "%slocal SGD state; resume it %s --sync-every", r->rank,
		    b != NULL ? "" : "no ", b != NULL ? "with" : "without");
	if (b != NULL)
		memcpy(r->outer_m, b, r->m->nparams * sizeof(float));
	if (restore_inner(r, dp_state_names[4], drift ? r->opt.m : NULL) < 0 ||
	    restore_inner(r, dp_state_names[5], drift ? r->opt.v : NULL) < 0)
		return -1;
	if (drift)
		r->opt.t = st->step;
	return 0;
}

/* PowerSGD's error feedback, this rank's, and its Qs when the run that
 * wrote the checkpoint had compressed. */
static int
restore_psgd(struct dp_run *r)
{
	const float *e, *q;
	size_t n = r->m->nparams;
	int all;

	r->kind = TRAIN_ERR_DATA;
	if (rank_vec(r, dp_state_names[1], &e, &all) < 0 ||
	    ckpt_state_vec(r->cfg->resume, dp_state_names[2], -1, n, &q, r->err,
	    r->errlen) < 0)
		return -1;
	if (r->psgd == NULL && e != NULL)
		return cli_fail(r->err, r->errlen, "rank %d: the checkpoint holds "
		    "PowerSGD state; resume it with --powersgd", r->rank);
	if (r->psgd == NULL)
		return 0;
	if (e == NULL || !all)
		return cli_fail(r->err, r->errlen, "rank %d: the checkpoint does "
		    "not hold 'powersgd.ef' for each of this run's %d ranks (a "
		    "run with --powersgd on %d ranks writes it)", r->rank,
		    r->world, r->world);
	memcpy(dp_powersgd_ef(r->psgd), e, n * sizeof(float));
	if (q != NULL)
		dp_powersgd_q_put(r->psgd, q);
	return 0;
}

int
dp_ckpt_restore(struct dp_run *r)
{
	struct ckpt_piece *p;
	size_t n;
	int rc;

	if (restore_ef(r) < 0 || restore_local(r) < 0 || restore_psgd(r) < 0)
		return -1;
	if ((p = pieces(r, 1, &n)) == NULL)
		return dp_runtime_failed(r, "rank %d: %s", "out of memory");
	rc = ckpt_restore(r->cfg->resume, p, n, r->rank, r->err, r->errlen);
	free(p);
	if (rc < 0)
		r->kind = TRAIN_ERR_DATA;
	return rc;
}

int
dp_ckpt_save(struct dp_run *r, long done)
{
	struct ckpt_piece *p;
	struct dp_state st[DP_NSTATE];
	struct ckpt_vec x[DP_NSTATE];
	size_t n, nx, i, held = 0;
	int rc, qs = 0;
	float *q = NULL;

	if (r->psgd != NULL) {
		if ((q = malloc((r->m->nparams + 1) * sizeof(float))) == NULL)
			return dp_runtime_failed(r, "rank %d: %s", "out of memory");
		qs = dp_powersgd_q_get(r->psgd, q);
	}
	nx = dp_state_list(r->wire.ef, r->psgd, qs, r->outer_m,
	    r->cfg->dpo.sync_every > 1 ? nn_optim_moments(&r->cfg->optim) : 0,
	    st);
	for (i = 0; i < nx; i++)
		x[i] = (struct ckpt_vec){ st[i].name, st[i].kind ==
		    DP_STATE_VEC ? st[i].v : st[i].kind == DP_STATE_Q ? q :
		    st[i].k ? r->opt.v : r->opt.m, st[i].per_rank };
	if ((p = pieces(r, 0, &n)) == NULL) {
		free(q);
		return dp_runtime_failed(r, "rank %d: %s", "out of memory");
	}
	/* ZeRO-3: each slice's holder sends its parameters too, and the
	 * writer holds its slices and one tensor at a time */
	if (r->fsdp != NULL) {
		rc = ckpt_save_sharded(r->c, r->m, &r->cfg->optim, p, n, x, nx,
		    done, r->cfg->batch, r->cfg->ckpt_path, &held, r->err,
		    r->errlen);
		held += dp_fsdp_held(r->fsdp);
		if (held > r->ckpt_peak)
			r->ckpt_peak = held;
	} else
		rc = ckpt_save_vecs(r->c, r->m, &r->cfg->optim, p, n, x, nx,
		    done, r->cfg->batch, r->cfg->ckpt_path, r->err, r->errlen);
	free(p);
	free(q);
	if (rc < 0)
		r->kind = TRAIN_ERR_RUNTIME;
	return rc;
}
