/* pipe: the pipeline runner: a run's set-up, its loop of steps
 * (pipe_step.c) and checkpoints (pipe_ckpt.c), what rank 0 collects at the
 * end (pipe_stats.c, pipe_trace.c) and the tear-down. Which stage holds
 * which layers and parameters is pipe_split.c's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/util.h"
#include "comm/coll.h"
#include "par/pipe.h"
#include "par/pipe_ft.h"
#include "par/pipe_ft_zero.h"
#include "par/pipe_int.h"

/* The rank's chunks of layers, each virtual stage c*world + rank, as
 * tp_stages over cfg->tp (NULL or a group of one: unsharded, with no
 * communication); and with them the gradients' own sub-group. */
static int
chunks_init(struct pipe_run *r, int nmax, char *e, size_t elen)
{
	const struct pipe_cfg *cfg = r->cfg;
	int V = r->nchunk;

	if (V > 1 && (r->gmb = realloc(r->gmb, (size_t)V *
	    sizeof(*r->gmb))) == NULL)
		return cli_fail(e, elen, "out of memory");
	/* one stage holding both ends holds two copies of the tied
	 * embedding, whose gradients it sums itself (pipe_step.c's
	 * tied_sum); sharded over a TP group, such a stage is refused, as
	 * collx-train's mesh check says first */
	if (cfg->tp != NULL && comm_size(cfg->tp) > 1 && V > 1 &&
	    r->world == 1 && r->m->dims.arch == NN_GPT)
		return cli_fail(e, elen, "an interleaved gpt sharded over a "
		    "TP group needs two stages or more");
	if (pipe_tp_init(r, nmax) < 0)
		return -2;
	return V > 1 ? comm_split(r->c, 0, r->rank, &r->gc, e, elen) : 0;
}

static int
run_init(struct pipe_run *r)
{
	const struct pipe_cfg *cfg = r->cfg;
	int M = cfg->micro, i, nmax = 0, rc;
	size_t MV;
	char e[COLLX_ERRLEN];

	r->rank = comm_rank(r->c);
	r->world = comm_size(r->c);
	r->nchunk = cfg->table != NULL ? cfg->table->v : cfg->chunks > 1 ?
	    cfg->chunks : 1;
	MV = (size_t)M * r->nchunk;
	r->mstart = calloc((size_t)M, sizeof(long));
	r->mcount = calloc((size_t)M, sizeof(long));
	r->mslot = calloc(MV, sizeof(*r->mslot));
	r->mout = calloc(MV, sizeof(*r->mout));
	r->sact = calloc(MV, sizeof(*r->sact));
	r->sgrad = calloc(MV, sizeof(*r->sgrad));
	r->gmb = calloc(1, sizeof(*r->gmb));
	r->stat = train_grow(NULL, &r->capstat,
	    cfg->resume != NULL ? cfg->resume->step : 0, sizeof(*r->stat));
	if (!r->mstart || !r->mcount || !r->mslot || !r->mout || !r->sact ||
	    !r->sgrad || !r->gmb || !r->stat)
		return pipe_oom(r);
	r->rstart = 0;
	r->rcount = cfg->batch;
	/* the CP ranks of a replica take the same samples */
	if (cfg->dp != NULL)
		train_split(cfg->batch, comm_size(cfg->dp) / pipe_cp_size(cfg),
		    comm_rank(cfg->dp) / pipe_cp_size(cfg), &r->rstart,
		    &r->rcount);
	for (i = 0; i < M; i++) {
		train_split(r->rcount, M, i, &r->mstart[i], &r->mcount[i]);
		if (r->mcount[i] > nmax)
			nmax = (int)r->mcount[i];
	}
	if (cfg->table != NULL && (cfg->table->m != M ||
	    cfg->table->w != r->world || (cfg->chunks > 1 &&
	    cfg->chunks != cfg->table->v))) {
		snprintf(e, sizeof(e), "the schedule's table is for %d "
		    "micro-batches on %d stages of %d chunks", cfg->table->m,
		    cfg->table->w, cfg->table->v);
		goto fail;
	}
	r->sch = cfg->table;
	if (r->sch == NULL) {
		if (pipe_sched_build_virtual(&r->own_sch, cfg->sched, M,
		    r->world, r->nchunk, e, sizeof(e)) < 0)
			goto fail;
		r->have_sch = 1;
		r->sch = &r->own_sch;
	}
	if ((rc = chunks_init(r, nmax, e, sizeof(e))) == -2)
		return -1;
	if (rc < 0)
		goto fail;
	if (train_order_init(&r->ord, r->d->n, 0, 0, e, sizeof(e)) < 0 ||
	    train_batch_alloc(&r->tb, r->d, r->rcount, e, sizeof(e)) < 0)
		goto fail;
	if (r->ts[0].gpt && (r->rank == 0 || r->rank == r->world - 1) &&
	    r->world > 1 && (r->tied = malloc((size_t)r->m->dims.vocab *
	    r->m->dims.d_model * sizeof(float))) == NULL)
		return pipe_oom(r);
	if (pipe_own_init(r) < 0 || pipe_dp_init(r) < 0)
		return -1;
	if ((cfg->resume != NULL && pipe_ckpt_resume(r) < 0) ||
	    pipe_dp_sync_init(r) < 0 ||
	    (cfg->resume != NULL && pipe_ckpt_sync_resume(r) < 0) ||
	    pipe_early_init(r) < 0)
		return -1;
	comm_set_step(r->c, "start of training");
	if (coll_barrier(r->c) < 0)
		return pipe_comm_failed(r);
	r->origin = cli_now();
	if (cfg->trace && pipe_clock_sample(r, &r->clock) < 0)
		return -1;
	return 0;
fail:
	r->kind = TRAIN_ERR_RUNTIME;
	return cli_fail(r->err, r->errlen, "rank %d: %s", r->rank, e);
}

static void
run_free(struct pipe_run *r)
{
	int q;

	for (q = 0; q < r->nown; q++)
		nn_optim_free(&r->opt[q]);
	free(r->opt);
	free(r->own);
	pipe_dp_sync_free(r);
	free(r->gmb);
	if (r->gc != NULL)
		comm_close(r->gc);
	pipe_tp_free(r);
	pipe_dp_free(r);
	if (r->have_sch)
		pipe_sched_free(&r->own_sch);
	train_order_free(&r->ord);
	train_batch_free(&r->tb);
	free(r->mstart), free(r->mcount), free(r->mslot), free(r->mout);
	free(r->sact), free(r->sgrad), free(r->tied), free(r->spans);
	free(r->late), free(r->rwait);
}

int
pipe_run_again(struct pipe_run *r, struct comm *c)
{
	struct pipe_run keep = *r;
	int rc;

	run_free(r);
	memset(r, 0, sizeof(*r));
	r->m = keep.m;
	r->d = keep.d;
	r->c = c;
	r->cfg = keep.cfg;
	r->kind = TRAIN_ERR_RUNTIME;
	r->err = keep.err;
	r->errlen = keep.errlen;
	rc = run_init(r);
	free(r->stat);		/* the records so far go on */
	r->stat = keep.stat;
	r->capstat = keep.capstat;
	return rc;
}

int
pipe_grow(struct pipe_run *r, struct pipe_result *res, long *cap, long k)
{
	struct train_step *s;
	struct pipe_stat *ps;

	if ((s = train_grow(res->steps, cap, k, sizeof(*s))) == NULL)
		return pipe_oom(r);
	res->steps = s;
	if ((ps = train_grow(r->stat, &r->capstat, k, sizeof(*ps))) == NULL)
		return pipe_oom(r);
	r->stat = ps;
	return 0;
}

int
pipe_train(struct nn_model *m, const struct train_data *d, struct comm *c,
    const struct pipe_cfg *cfg, pipe_step_fn fn, void *ctx,
    struct pipe_result *res, enum train_err *kind, char *err, size_t errlen)
{
	struct pipe_run r = { .m = m, .d = d, .c = c, .cfg = cfg,
	    .kind = TRAIN_ERR_RUNTIME, .err = err, .errlen = errlen };
	long k = cfg->resume != NULL ? cfg->resume->step : 0, cap = 0;
	int rc = -1;

	memset(res, 0, sizeof(*res));
	res->steps = train_grow(NULL, &cap, k, sizeof(*res->steps));
	if (res->steps == NULL) {
		pipe_oom(&r);
		goto out;
	}
	if (run_init(&r) < 0)
		goto out;
	/* --ft: a rank started again takes the replicas' step and state */
	if (cfg->ft != NULL && cfg->ft->joining && pipe_ft_joined(&r, &k, res,
	    fn, ctx, &cap) < 0)
		goto out;
	for (; k < cfg->steps; k++) {
		if (pipe_grow(&r, res, &cap, k) < 0)
			goto out;
		if (pipe_ft_grow(&r, &k, res, &cap) < 0 ||
		    pipe_run_step(&r, k, &res->steps[k]) < 0) {
			if (pipe_ft_recover(&r, &k, res, fn, ctx, &cap) < 0)
				goto out;
			k--;	/* the step again, by the replicas left */
			continue;
		}
		res->steps[k].replicas = cfg->ft != NULL ?
		    cfg->ft->mesh.dp : 0;
		pipe_dp_sync_report(&r, k, fn, ctx, res);
		if (cfg->ckpt_path != NULL && (k + 1 == cfg->steps ||
		    (cfg->ckpt_every > 0 && (k + 1) % cfg->ckpt_every == 0)) &&
		    pipe_ckpt_write(&r, k + 1) < 0)
			goto out;
	}
	if (pipe_dp_whole(&r) < 0 || pipe_dp_verify(&r) < 0 || pipe_tp_verify(&r) < 0 ||
	    pipe_gather_params(&r) < 0 ||
	    pipe_gather_stats(&r, res) < 0 ||
	    pipe_gather_spans(&r, res) < 0)
		goto out;
	rc = 0;
out:
	res->stat = r.stat;
	r.stat = NULL;
	res->ckpt_peak = r.ckpt_peak;
	*kind = r.kind;
	run_free(&r);
	pipe_ftz_free(cfg->ft);
	return rc;
}

void
pipe_result_free(struct pipe_result *r)
{
	free(r->steps);
	free(r->stat);
	free(r->bubble);
	free(r->peak_act);
	free(r->spans);
	memset(r, 0, sizeof(*r));
}
