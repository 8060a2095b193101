/* dp_ckpt: checkpoints of a data-parallel run. The optimizer state lies
 * where the sync puts it: whole on every rank (allreduce), in ZeRO slices
 * of every bucket, or in parameter-server shards of the vector or of every
 * bucket (colocated synchronous servers); the pieces below say which rank
 * holds what, so ckpt.c can collect it into one file and put it back.
 * --wire int8's error feedback is every rank's own, saved for each rank. */
#include <stdlib.h>
#include <string.h>

#include "cli/util.h"
#include "par/dp_int.h"

/* The job's optimizer state as pieces. holders: list every rank holding
 * a copy (to restore), not only the first (to save). */
static struct ckpt_piece *
pieces(struct run *r, int holders, size_t *n)
{
	const struct dp_cfg *cfg = r->cfg;
	int q, i, nb = r->bopt != NULL ? r->nbucket : 1;
	int owners = cfg->zero > 0 ? r->world : cfg->ps_servers;
	struct ckpt_piece *p;
	size_t k = 0, off, len;

	p = calloc((size_t)nb * (size_t)r->world + 1, sizeof(*p));
	if (p == NULL)
		return NULL;
	if (cfg->sync == DP_ALLREDUCE && cfg->zero == 0) {
		q = holders ? r->rank : 0;
		p[k++] = (struct ckpt_piece){ q, 0, r->m->nparams,
		    q == r->rank ? &r->opt : NULL, 0 };
		*n = k;
		return p;
	}
	for (i = 0; i < nb; i++)
		for (q = 0; q < owners; q++) {
			size_t base = r->bopt != NULL ? r->bucket[i] : 0;
			struct nn_optim *o = q != r->rank ? NULL : r->bopt != NULL ?
			    &r->bopt[i] : &r->opt;

			if (cfg->zero > 0)
				dp_zero_slice(r, i, q, &off, &len);
			else
				ps_shard(r->bopt != NULL ? r->bucket[i + 1] - base :
				    r->m->nparams, owners, q, &off, &len);
			p[k++] = (struct ckpt_piece){ q, base + off, len, o, 0 };
		}
	*n = k;
	return p;
}

/* Error feedback of as many ranks as this run's, for --wire int8; a
 * checkpoint without it starts int8 from none. */
static int
restore_ef(struct run *r)
{
	const struct ckpt_state *st = r->cfg->resume;

	r->kind = TRAIN_ERR_DATA;
	if (st->ef != NULL && r->wire.type != DP_WIRE_INT8)
		return cli_fail(r->err, r->errlen, "rank %d: the checkpoint holds "
		    "--wire int8 error feedback; resume it with --wire int8",
		    r->rank);
	if (st->ef != NULL && st->ef_ranks != r->world)
		return cli_fail(r->err, r->errlen, "rank %d: the checkpoint holds "
		    "the error feedback of %d ranks, not %d", r->rank,
		    st->ef_ranks, r->world);
	if (st->ef != NULL)
		memcpy(r->wire.ef, st->ef + (size_t)r->rank * r->m->nparams,
		    r->m->nparams * sizeof(float));
	return 0;
}

int
dp_ckpt_restore(struct run *r)
{
	struct ckpt_piece *p;
	size_t n;
	int rc;

	if (restore_ef(r) < 0)
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
dp_ckpt_save(struct run *r, long done)
{
	struct ckpt_piece *p;
	size_t n;
	int rc;

	if ((p = pieces(r, 0, &n)) == NULL)
		return dp_runtime_failed(r, "rank %d: %s", "out of memory");
	rc = ckpt_save_ef(r->c, r->m, &r->cfg->optim, p, n, r->wire.ef, done,
	    r->cfg->batch, r->cfg->ckpt_path, r->err, r->errlen);
	free(p);
	if (rc < 0)
		r->kind = TRAIN_ERR_RUNTIME;
	return rc;
}
