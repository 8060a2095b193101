/* dp: the data-parallel training loop: the per-rank batch split,
 * bucketed gradient allreduce or parameter-server sync, loss bookkeeping
 * and the end-of-run check that every rank holds the same parameters. */
#include <stdlib.h>
#include <string.h>

#include "cli/util.h"
#include "par/dp_int.h"

/* collx-dp's buckets: the model's tensors cut by dp_buckets_cut. */
int
dp_buckets_make(struct dp_run *r)
{
	const struct nn_model *m = r->m;
	struct dp_tensor *t = calloc(m->ntensors + 1, sizeof(*t));
	size_t i;

	r->bucket = malloc((m->ntensors + 2) * sizeof(size_t));
	r->ready = malloc((m->ntensors + 1) * sizeof(int));
	if (r->bucket == NULL || r->ready == NULL || t == NULL) {
		free(t);
		return dp_runtime_failed(r, "rank %d: %s", "out of memory");
	}
	for (i = 0; i < m->ntensors; i++)
		t[i] = (struct dp_tensor){ m->table[i].offset,
		    m->table[i].count, nn_model_grad_stage(m, i), 0 };
	r->nbucket = dp_buckets_cut(t, m->ntensors, m->nparams,
	    r->cfg->dpo.bucket_bytes / sizeof(float), r->bucket);
	dp_buckets_ready(t, m->ntensors, r->bucket, r->nbucket, r->ready);
	free(t);
	return 0;
}

void
dp_optim_update(void *ctx, float *p, const float *gsum, size_t off,
    size_t len, float scale)
{
	(void)off;
	(void)len;
	nn_optim_step(ctx, p, gsum, scale);
}

static int
bucket_allreduce(struct dp_run *r, int i)
{
	size_t a = r->bucket[i], b = r->bucket[i + 1];

	comm_set_step(r->c, "gradient bucket %d of %d", i + 1, r->nbucket);
	if ((r->wire.type == DP_WIRE_F32 ? coll_allreduce(r->c, r->m->grads + a,
	    b - a, DT_F32, COLL_SUM, r->cfg->algo) : dp_wire_allreduce(&r->wire,
	    r->c, r->m->grads + a, a, b - a, r->cfg->algo)) < 0)
		return dp_comm_failed(r);
	return 0;
}

/* ZeRO over the buckets (dp_zero.c): a range per bucket, its optimizer
 * r->bopt's, the reduce-scatter through r->wire, --sync's algorithm. */
static int
zero_init(struct dp_run *r)
{
	struct dp_range *rg;
	int i, rc;

	rg = malloc((size_t)r->nbucket * sizeof(*rg));
	r->bopt = calloc((size_t)r->nbucket, sizeof(*r->bopt));
	if (rg == NULL || r->bopt == NULL) {
		free(rg);
		return dp_runtime_failed(r, "rank %d: %s", "out of memory");
	}
	r->nbopt = r->nbucket;
	for (i = 0; i < r->nbucket; i++)
		rg[i] = (struct dp_range){ r->bucket[i],
		    r->bucket[i + 1] - r->bucket[i] };
	rc = dp_zero_init(&r->zero, r->cfg->dpo.zero, r->c, &r->wire,
	    r->cfg->algo, rg, r->nbucket, r->bopt, &r->cfg->optim,
	    "gradient bucket", r->err, r->errlen);
	free(rg);
	if (rc < 0)
		r->kind = TRAIN_ERR_RUNTIME;
	return rc;
}

/* Hybrid sharding's groups (dp_fsdp_groups). */
static int
hybrid_groups(struct dp_run *r)
{
	char e[COLLX_ERRLEN];
	int rc = dp_fsdp_groups(r->c, &r->shard, &r->rep, &r->owner, e,
	    sizeof(e));

	if (rc == -2) {
		r->kind = TRAIN_ERR_DATA;
		return cli_fail(r->err, r->errlen, "rank %d: %s", r->rank, e);
	}
	return rc < 0 ? dp_runtime_failed(r, "rank %d: %s", e) : 0;
}

/* A ZeRO-3 step's pass (*pass: its result, the reason in e) and its
 * communication: *busy the thread's seconds, *waited the pass's waits
 * for it, s's gather figures. -1 when the communication failed. */
static int
fsdp_pass(struct dp_run *r, double *loss, int *pass, double *busy,
    double *waited, struct train_step *s, char *e, size_t elen)
{
	struct dp_fsdp_time t;

	dp_fsdp_begin(r->fsdp);
	*pass = r->count > 0 ? nn_model_step_use(r->m, &r->tb.b, loss,
	    dp_fsdp_grad, dp_fsdp_use, r->fsdp, e, elen) : 0;
	/* without samples, the experts' count sum where the others take it */
	if (r->count == 0 && r->m->moe_sum != NULL) {
		dp_fsdp_replay_forward(r->fsdp);
		*pass = nn_model_step_use(r->m, &r->tb.b, loss, NULL, NULL,
		    NULL, e, elen);
	}
	/* without samples, or after a failed pass, every job still runs:
	 * the other ranks' collectives wait for this rank's */
	dp_fsdp_replay(r->fsdp);
	if (dp_fsdp_wait(r->fsdp, &t, r->err, r->errlen) < 0)
		return comm_errkind(r->c) != COMM_ERR_NONE ?
		    dp_comm_failed(r) : -1;
	*busy = t.gather + t.reduce_scatter;
	*waited = t.wait + t.tail;
	s->gather = t.gather;
	s->reduce_scatter = t.reduce_scatter;
	s->gather_wait = t.wait;
	return 0;
}

static int
zero_bucket(struct dp_run *r, int i)
{
	if (dp_zero_reduce(&r->zero, r->m->grads, i) < 0)
		return dp_comm_failed(r);
	return 0;
}

static int
zero_update(struct dp_run *r)
{
	dp_zero_step(&r->zero, r->m->params, r->m->grads,
	    (float)(1.0 / (double)r->cfg->batch));
	if (dp_zero_allgather(&r->zero, r->m->params) < 0)
		return dp_comm_failed(r);
	return 0;
}

/* One bulk-synchronous colocated parameter-server round per bucket; a
 * server rank keeps an optimizer for its shard of every bucket. */
static int
bucket_ps(struct dp_run *r, int i)
{
	size_t a = r->bucket[i], b = r->bucket[i + 1];

	if (ps_colo_step(r->c, r->cfg->ps_servers, r->m->params + a,
	    r->m->grads + a, b - a, (double)r->count, dp_optim_update,
	    r->bopt != NULL ? &r->bopt[i] : NULL) < 0)
		return dp_comm_failed(r);
	return 0;
}

int
dp_buckets_sync(struct dp_run *r)
{
	int i;

	for (i = r->nbucket - 1; i >= 0; i--)
		if (r->bucket_fn(r, i) < 0)
			return -1;
	return 0;
}

/* *loss, this rank's loss sum, made the global mean (asynchronous
 * parameter server: this rank's mean). */
static int
loss_reduce(struct dp_run *r, double *loss)
{
	const struct dp_cfg *cfg = r->cfg;

	if (cfg->sync == DP_PS && cfg->ps_mode == PS_ASYNC) {
		*loss = r->count ? *loss / (double)r->count : 0;
		return 0;
	}
	if (coll_allreduce(r->c, loss, 1, DT_F64, COLL_SUM, COLL_AUTO) < 0)
		return dp_comm_failed(r);
	*loss /= (double)cfg->batch;
	return 0;
}

/* --ft under ZeRO: the reduced slices to the mirrors, the agreement,
 * the update. */
static int
ft_zero_step(struct dp_run *r, double *loss)
{
	return dp_ftz_mirror(r) < 0 || loss_reduce(r, loss) < 0 ? -1 :
	    dp_ftz_update(r, *loss);
}

/* What follows the bucket syncs: the update and, but for asynchronous
 * servers, the global loss. *loss holds this rank's loss sum, and the
 * global one on return (async parameter server: this rank's mean). */
static int
sync_step(struct dp_run *r, double *loss)
{
	const struct dp_cfg *cfg = r->cfg;
	struct nn_model *m = r->m;
	char e[COLLX_ERRLEN];

	/* --ft: the loss's allreduce, before the update, is the step's
	 * agreement (dp_ft_zero.c) */
	if (r->fsdp != NULL && r->ftz != NULL)
		return ft_zero_step(r, loss);
	if (r->fsdp != NULL)
		dp_fsdp_step(r->fsdp, (float)(1.0 / (double)cfg->batch));
	else if (r->bucket_fn != NULL) {
		if (r->ovl == NULL && dp_buckets_sync(r) < 0)
			return -1;
		if (r->ftz != NULL)
			return ft_zero_step(r, loss);
		if (cfg->dpo.zero > 0 && zero_update(r) < 0)
			return -1;
	} else if (r->cl != NULL) {
		if (ps_client_push(r->cl, m->grads, (double)r->count, m->params,
		    e, sizeof(e)) < 0)
			return dp_runtime_failed(r, "rank %d: parameter server: %s", e);
	} else if (ps_colo_step(r->c, cfg->ps_servers, m->params, m->grads,
	    m->nparams, (double)r->count, dp_optim_update, &r->opt) < 0)
		return dp_comm_failed(r);
	return loss_reduce(r, loss);
}

/* Overlapped: the buckets synced while the backward pass runs; the time
 * the thread spent syncing is communication, the part of it after the
 * backward pass ended exposed, the rest hidden. Local SGD with H > 1:
 * the replica's own update and only the loss reduced, but for a step
 * that ends in a sync, whose time counts as communication. */
static int
run_step(struct dp_run *r, long k, struct train_step *s)
{
	double t0 = cli_now(), t1, t2, t3, t4, busy = 0, loss = 0, waited = 0;
	uint64_t sent = comm_bytes_sent(r->c);
	char e[COLLX_ERRLEN];
	int rc = 0, drift = r->cfg->dpo.sync_every > 1;

	r->k = k;
	train_batch_fill(&r->tb, r->d, &r->ord,
	    (int64_t)k * r->cfg->batch + r->start, r->count);
	/* ZeRO-3 gives each layer's gradients back zero */
	if (r->fsdp == NULL)
		nn_model_zero_grad(r->m);
	if (r->ovl != NULL)
		dp_ovl_begin(r->ovl);
	if (r->fsdp != NULL) {
		if (fsdp_pass(r, &loss, &rc, &busy, &waited, s, e,
		    sizeof(e)) < 0)
			return -1;
	/* a rank without samples still joins the experts' count sum */
	} else if (r->count > 0 || r->m->moe_sum != NULL)
		rc = nn_model_step_hook(r->m, &r->tb.b, &loss,
		    r->ovl != NULL ? dp_ovl_stage : NULL, r->ovl, e, sizeof(e));
	t1 = cli_now();
	if (r->ovl != NULL && dp_ovl_wait(r->ovl, &busy) < 0)
		return -1;
	if (rc < 0 && r->moe_failed)
		return -1;
	if (rc < 0) {
		r->kind = TRAIN_ERR_DATA;
		return cli_fail(r->err, r->errlen, "rank %d: step %ld: %s", r->rank,
		    k, e);
	}
	t2 = cli_now();
	if (drift)
		dp_local_step(r);
	if ((drift ? loss_reduce(r, &loss) : sync_step(r, &loss)) < 0)
		return -1;
	t3 = cli_now();
	if (!drift && r->cfg->sync == DP_ALLREDUCE && r->cfg->dpo.zero == 0)
		nn_optim_step(&r->opt, r->m->params, r->m->grads,
		    (float)(1.0 / (double)r->cfg->batch));
	t4 = cli_now();
	if (dp_local_due(r, k) && dp_local_outer(r) < 0)
		return -1;
	t3 += drift ? cli_now() - t4 : 0;
	s->step = k;
	s->epoch = (long)((int64_t)k * r->cfg->batch / r->d->n);
	s->tokens = train_tokens(r->d, r->cfg->batch);
	s->loss = loss;
	s->seconds = cli_now() - t0;
	s->comm = busy + (t3 - t2);
	/* ZeRO-3 waited within its pass */
	waited += t2 - t1;
	s->hidden = busy > waited ? busy - waited : 0;
	s->exposed = s->comm - s->hidden;
	s->compute = s->seconds - s->exposed;
	s->bytes_sent = comm_bytes_sent(r->c) - sent;
	s->moe = nn_model_moe_summary(r->m, &s->moe_dropped,
	    &s->moe_imbalance) == 0;
	s->moe_counts = nn_model_moe_stats(r->m);
	if (r->shard != NULL) {		/* hybrid: its groups' too */
		s->bytes_sent += dp_fsdp_sent(r->fsdp) - r->sub_sent;
		r->sub_sent = dp_fsdp_sent(r->fsdp);
	}
	return 0;
}

/* The model's moe_sum: the experts' counts summed over the replicas, so
 * that the auxiliary loss sees the global batch. */
static int
moe_sum(void *ctx, double *buf, size_t count)
{
	struct dp_run *r = ctx;

	/* ZeRO-3's thread off the links first: every rank sums at the same
	 * event of its pass, so the jobs posted so far are the same */
	if (r->fsdp != NULL)
		dp_fsdp_drain(r->fsdp);
	if (coll_allreduce(r->c, buf, count, DT_F64, COLL_SUM, COLL_AUTO) == 0)
		return 0;
	r->moe_failed = 1;
	return dp_comm_failed(r);
}

int
dp_verify_same(struct dp_run *r, const char *when)
{
	uint64_t mine = cli_fnv1a(CLI_FNV1A_INIT, r->m->params,
	    r->m->nparams * sizeof(float)), *all;
	int q, rc = 0;

	all = malloc((size_t)r->world * sizeof(*all));
	if (all == NULL)
		return dp_runtime_failed(r, "rank %d: %s", "out of memory");
	comm_set_step(r->c, "parameter checksum %s", when);
	if (coll_allgather(r->c, &mine, all, 1, DT_I64, COLL_AUTO) < 0) {
		free(all);
		return dp_comm_failed(r);
	}
	for (q = 1; q < r->world && rc == 0; q++)
		if (all[q] != all[0]) {
			r->kind = TRAIN_ERR_DATA;
			rc = cli_fail(r->err, r->errlen, "rank %d: parameters of rank %d "
			    "differ from rank 0 %s (checksum %016llx vs %016llx)",
			    r->rank, q, when, (unsigned long long)all[q],
			    (unsigned long long)all[0]);
		}
	free(all);
	return rc;
}

/* ---- the run --------------------------------------------------------- */

/* Optimizer state this rank holds (a colocated server's included), and the
 * reduced gradients it keeps for the update. */
static void
run_mem(const struct dp_run *r, struct dp_mem *mem)
{
	int i;

	mem->optim_bytes = r->have_opt ? nn_optim_bytes(&r->opt) : 0;
	for (i = 0; i < r->nbopt; i++)
		mem->optim_bytes += nn_optim_bytes(&r->bopt[i]);
	if (r->srv != NULL)
		mem->optim_bytes += nn_optim_bytes(&r->srv->opt);
	if (r->anchor != NULL)
		mem->optim_bytes += 2 * r->m->nparams * sizeof(float);
	mem->grad_bytes = r->fsdp != NULL ?
	    dp_zero_grad_bytes(dp_fsdp_zero(r->fsdp), 0) :
	    r->cfg->dpo.zero > 0 ? dp_zero_grad_bytes(&r->zero,
	    r->m->nparams) : r->m->nparams * sizeof(float);
	dp_ftz_mem(r, mem);
}

static int
run_buffers(struct dp_run *r)
{
	char e[COLLX_ERRLEN];

	if (train_order_init(&r->ord, r->d->n, r->cfg->shuffle, r->cfg->seed, e,
	    sizeof(e)) < 0 || train_batch_alloc(&r->tb, r->d, r->count, e,
	    sizeof(e)) < 0)
		return dp_runtime_failed(r, "rank %d: %s", e);
	return dp_buckets_make(r);
}

/* A colocated server's optimizer for its shard of every bucket. */
static int
ps_bucket_optims(struct dp_run *r)
{
	size_t off, len;
	char e[COLLX_ERRLEN];

	r->bopt = calloc((size_t)r->nbucket, sizeof(*r->bopt));
	if (r->bopt == NULL)
		return dp_runtime_failed(r, "rank %d: %s", "out of memory");
	for (r->nbopt = 0; r->nbopt < r->nbucket; r->nbopt++) {
		ps_shard(r->bucket[r->nbopt + 1] - r->bucket[r->nbopt],
		    r->cfg->ps_servers, r->rank, &off, &len);
		if (nn_optim_init(&r->bopt[r->nbopt], &r->cfg->optim, len, e,
		    sizeof(e)) < 0)
			return dp_runtime_failed(r, "rank %d: %s", e);
	}
	return 0;
}

/* A bucket's sync on the overlap thread. */
static int
ovl_bucket(void *ctx, int b)
{
	struct dp_run *r = ctx;

	return r->bucket_fn(r, b);
}

/* The per-bucket sync (allreduce, ZeRO's reduce-scatter, or a colocated
 * synchronous server round when overlapping) and its thread; external
 * and asynchronous servers sync the whole vector after the backward. */
static int
run_buckets(struct dp_run *r)
{
	const struct dp_cfg *cfg = r->cfg;
	size_t maxn = 0;
	int i;
	char e[COLLX_ERRLEN];

	for (i = 0; i < r->nbucket; i++)
		if (r->bucket[i + 1] - r->bucket[i] > maxn)
			maxn = r->bucket[i + 1] - r->bucket[i];
	if (cfg->dpo.zero == 3)		/* layers, not buckets */
		maxn = r->m->nparams;
	/* hybrid: the wire's sums are within the host */
	if (cfg->dpo.zero == 3 && cfg->dpo.shard_host && hybrid_groups(r) < 0)
		return -1;
	if (cfg->sync == DP_ALLREDUCE && dp_wire_init(&r->wire, cfg->dpo.wire,
	    r->shard != NULL ? comm_rank(r->shard) : r->rank, r->shard != NULL ?
	    comm_size(r->shard) : r->world, r->m->nparams, maxn, r->err,
	    r->errlen) < 0) {
		r->kind = TRAIN_ERR_RUNTIME;
		return -1;
	}
	if (cfg->dpo.zero == 3) {
		if (dp_fsdp_run_init(r) < 0)
			return -1;
	} else if (cfg->dpo.zero > 0) {
		if (zero_init(r) < 0)
			return -1;
		r->bucket_fn = zero_bucket;
	} else if (cfg->dpo.powersgd > 0) {
		if (dp_powersgd_init(r) < 0)
			return -1;
		r->bucket_fn = dp_powersgd_bucket;
	} else if (cfg->sync == DP_ALLREDUCE)
		r->bucket_fn = bucket_allreduce;
	else if (cfg->ps_addrs == NULL && cfg->ps_mode == PS_SYNC &&
	    cfg->dpo.overlap) {
		if (r->rank < cfg->ps_servers && ps_bucket_optims(r) < 0)
			return -1;
		r->bucket_fn = bucket_ps;
	}
	/* local SGD's replicas sync parameters, not each step's gradients */
	if (r->bucket_fn != NULL && cfg->dpo.overlap &&
	    cfg->dpo.sync_every <= 1 && (r->ovl = dp_ovl_new(r->nbucket,
	    r->ready, ovl_bucket, r, r->c, e, sizeof(e))) == NULL)
		return dp_runtime_failed(r, "rank %d: %s", e);
	return 0;
}

static int
run_init(struct dp_run *r)
{
	const struct dp_cfg *cfg = r->cfg;
	size_t off = 0, len = r->m->nparams;
	char e[COLLX_ERRLEN];

	r->rank = comm_rank(r->c);
	r->world = comm_size(r->c);
	train_split(cfg->batch, r->world, r->rank, &r->start, &r->count);
	if (run_buffers(r) < 0)
		return -1;
	if (cfg->sync == DP_PS && cfg->ps_addrs == NULL &&
	    cfg->ps_mode == PS_SYNC && r->rank < cfg->ps_servers)
		ps_shard(r->m->nparams, cfg->ps_servers, r->rank, &off, &len);
	if ((cfg->sync == DP_ALLREDUCE && cfg->dpo.zero == 0) || (cfg->sync ==
	    DP_PS && cfg->ps_addrs == NULL && cfg->ps_mode == PS_SYNC &&
	    r->rank < cfg->ps_servers && !cfg->dpo.overlap)) {
		if (nn_optim_init(&r->opt, &cfg->optim, len, e, sizeof(e)) < 0)
			return dp_runtime_failed(r, "rank %d: %s", e);
		r->have_opt = 1;
	}
	if (run_buckets(r) < 0)
		return -1;
	if (cfg->dpo.sync_every > 0 && dp_local_init(r) < 0)
		return -1;
	if (cfg->resume != NULL && dp_ckpt_restore(r) < 0)
		return -1;
	/* a rank started again copies the others' state instead */
	if (!r->joining && dp_verify_same(r, "before training") < 0)
		return -1;
	if (cfg->ft && cfg->dpo.zero > 0 && dp_ftz_init(r) < 0)
		return -1;
	if (r->fsdp != NULL)
		dp_fsdp_release_all(r->fsdp);
	if (cfg->sync == DP_PS && cfg->ps_addrs != NULL)
		return dp_ps_connect(r, cfg->ps_addrs);
	if (cfg->sync == DP_PS && cfg->ps_mode == PS_ASYNC)
		return dp_colo_async_start(r);
	return 0;
}

/* The end of a run over TCP servers: all pushes applied, the final values
 * pulled alike, checked, and the servers told this worker is done. */
static int
run_finish_ps(struct dp_run *r)
{
	char e[COLLX_ERRLEN];

	comm_set_step(r->c, "end of training");
	if (coll_barrier(r->c) < 0)
		return dp_comm_failed(r);
	if (ps_client_pull(r->cl, r->m->params, e, sizeof(e)) < 0)
		return dp_runtime_failed(r, "rank %d: parameter server: %s", e);
	if (dp_verify_same(r, "after training") < 0)
		return -1;
	if (ps_client_done(r->cl, e, sizeof(e)) < 0)
		return dp_runtime_failed(r, "rank %d: parameter server: %s", e);
	ps_client_close(r->cl);
	r->cl = NULL;
	return dp_colo_server_stop(r, 1);
}

static void
run_free(struct dp_run *r)
{
	int i;

	dp_ovl_free(r->ovl);
	dp_fsdp_free(r->fsdp);
	free(r->owner);
	if (r->rep != NULL)
		comm_close(r->rep);
	if (r->shard != NULL)
		comm_close(r->shard);
	dp_ft_free(r);
	/* Still open only after a failure: the servers hear its cause. */
	ps_client_abort(r->cl, r->err[0] ? r->err : NULL);
	dp_colo_server_stop(r, 0);
	if (r->have_opt)
		nn_optim_free(&r->opt);
	for (i = 0; i < r->nbopt; i++)
		nn_optim_free(&r->bopt[i]);
	free(r->bopt);
	dp_zero_free(&r->zero);
	dp_wire_free(&r->wire);
	dp_local_free(r);
	dp_powersgd_free(r);
	train_order_free(&r->ord);
	train_batch_free(&r->tb);
	free(r->bucket);
	free(r->ready);
}

int
dp_train(struct nn_model *m, const struct train_data *d, struct comm *c,
    const struct dp_cfg *cfg, dp_step_fn fn, void *ctx, struct dp_mem *mem,
    struct train_step **steps, enum train_err *kind, char *err, size_t errlen)
{
	struct dp_run r = { .m = m, .d = d, .c = c, .cfg = cfg,
	    .kind = TRAIN_ERR_RUNTIME, .err = err, .errlen = errlen };
	long k = cfg->resume != NULL ? cfg->resume->step : 0, cap = 0;
	struct train_step *s = train_grow(NULL, &cap, k, sizeof(*s)), *t;
	int rc = -1;

	*steps = s;
	if (s == NULL) {
		cli_fail(err, errlen, "out of memory");
		goto out;
	}
	if (nn_model_moe_layers(m) > 0) {
		if (cfg->sync == DP_PS && cfg->ps_mode == PS_ASYNC) {
			r.kind = TRAIN_ERR_DATA;
			cli_fail(err, errlen, "a model with experts trains with "
			    "allreduce or synchronous servers, not --ps-mode "
			    "async (its auxiliary loss needs the global batch)");
			goto out;
		}
		m->moe_sum = moe_sum;
		m->moe_ctx = &r;
	}
	/* --ft: a rank started again joins first; the records of every step
	 * are there for the state a joiner copies */
	r.joining = r.fresh = cfg->ft && comm_rejoining(c);
	if (cfg->ft) {
		if ((t = train_grow(s, &cap, cfg->steps, sizeof(*s))) == NULL) {
			cli_fail(err, errlen, "out of memory");
			goto out;
		}
		*steps = s = t;
	}
	if (r.joining && dp_ft_rejoin(&r) < 0)
		goto out;
	if (run_init(&r) < 0)
		goto out;
	if (r.joining && dp_ft_joined(&r, &k, s) < 0) {
		r.joining = 0;	/* the others' next step starts with a grow */
		if (dp_ft_recover(&r, &k, s) < 0)
			goto out;
	}
	if (mem != NULL)
		run_mem(&r, mem);
	for (; k < cfg->steps; k++) {
		if ((t = train_grow(s, &cap, k, sizeof(*s))) == NULL) {
			cli_fail(err, errlen, "out of memory");
			goto out;
		}
		*steps = s = t;
		if (dp_ft_grow(&r, &k, s) < 0 || run_step(&r, k, &s[k]) < 0) {
			if (dp_ft_recover(&r, &k, s) < 0)
				goto out;
			k--;	/* the step again, by the survivors */
			continue;
		}
		s[k].replicas = r.world;
		if (fn != NULL)
			fn(ctx, &s[k]);
		if (cfg->ckpt_path != NULL && (k + 1 == cfg->steps ||
		    (cfg->ckpt_every > 0 && (k + 1) % cfg->ckpt_every == 0)) &&
		    dp_ckpt_save(&r, k + 1) < 0)
			goto out;
	}
	if (mem != NULL && r.fsdp != NULL) {
		mem->params_peak = dp_fsdp_peak(r.fsdp);
		mem->ckpt_peak = r.ckpt_peak;
	}
	/* ZeRO-3: whole again for the checksum and the outputs */
	if (r.fsdp != NULL && dp_fsdp_gather_all(r.fsdp) < 0) {
		dp_comm_failed(&r);
		goto out;
	}
	rc = r.cl != NULL ? run_finish_ps(&r) : dp_verify_same(&r, "after training");
out:
	m->moe_sum = NULL;
	m->moe_ctx = NULL;
	*kind = r.kind;
	run_free(&r);
	return rc;
}

