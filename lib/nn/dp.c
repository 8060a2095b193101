/* dp: data-parallel training loop. Data windows and the per-rank batch
 * split, bucketed gradient allreduce or parameter-server sync, loss
 * bookkeeping and the end-of-run check that every rank holds the same
 * parameters. */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "comm/sock.h"
#include "nn/dp.h"
#include "tensor/rng.h"

static int
fail(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
	return -1;
}

static double
now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- data ------------------------------------------------------------ */

/* A tensor's values as a malloc'd f32 array (any float dtype). */
static float *
to_f32(struct tensor *t, const char *what, char *err, size_t errlen)
{
	size_t i, n = (size_t)tensor_numel(t);
	float *f;

	if (!dtype_is_float(t->dtype)) {
		fail(err, errlen, "%s: dtype %s is not a float type", what,
		    dtype_name(t->dtype));
		return NULL;
	}
	if (t->dtype == DT_F32) {
		f = t->data;
		t->data = NULL;
		return f;
	}
	f = malloc((n ? n : 1) * sizeof(float));
	if (f == NULL) {
		fail(err, errlen, "%s: out of memory", what);
		return NULL;
	}
	for (i = 0; i < n; i++)
		f[i] = (float)dtype_get(t->dtype, t->data, i);
	return f;
}

/* Check X and Y shapes against the model: rows, and the sample sizes. */
static int
rows_check(struct dp_data *d, const struct nn_model *m, const struct tensor *x,
    const struct tensor *y, char *err, size_t errlen)
{
	char a[64], b[64];
	int64_t din = m->dims.arch == NN_MLP ? m->dims.d_in : m->dims.d_model;
	int64_t dout = m->dims.arch == NN_MLP ? m->dims.d_out : m->dims.d_model;
	int want = m->dims.arch == NN_MLP ? 2 : 3;

	tensor_shape_str(x, a, sizeof(a));
	tensor_shape_str(y, b, sizeof(b));
	if (x->ndim != want || x->shape[want - 1] != din || x->shape[0] < 1)
		return fail(err, errlen, "data of shape %s: the %s model wants "
		    "[n,%s%lld]", a, nn_arch_name(m->dims.arch),
		    want == 3 ? "seq," : "", (long long)din);
	/* 1-D targets of an mlp with one output are a column */
	int ycol = want == 2 && dout == 1 && y->ndim == 1;

	if ((y->ndim != want && !ycol) || y->shape[0] != x->shape[0] ||
	    (!ycol && y->shape[want - 1] != dout) ||
	    (want == 3 && y->shape[1] != x->shape[1]))
		return fail(err, errlen, "targets of shape %s do not match data "
		    "of shape %s for the %s model", b, a,
		    nn_arch_name(m->dims.arch));
	d->n = x->shape[0];
	d->seq = want == 3 ? (int)x->shape[1] : 1;
	d->xrow = (size_t)(tensor_numel(x) / d->n);
	d->yrow = (size_t)(tensor_numel(y) / d->n);
	return 0;
}

static int
load_rows(struct dp_data *d, const struct nn_model *m, const char *data,
    const char *targets, char *err, size_t errlen)
{
	struct tensor x = { 0 }, y = { 0 };
	char e[TENSOR_ERRLEN];
	int rc = -1;

	if (targets == NULL)
		return fail(err, errlen, "the %s model needs --targets",
		    nn_arch_name(m->dims.arch));
	if (tensor_load_one(data, &x, e, sizeof(e)) < 0) {
		fail(err, errlen, "%s: %s", data, e);
		goto out;
	}
	if (tensor_load_one(targets, &y, e, sizeof(e)) < 0) {
		fail(err, errlen, "%s: %s", targets, e);
		goto out;
	}
	if (rows_check(d, m, &x, &y, err, errlen) < 0)
		goto out;
	d->x = to_f32(&x, data, err, errlen);
	d->y = d->x ? to_f32(&y, targets, err, errlen) : NULL;
	rc = d->x && d->y ? 0 : -1;
out:
	tensor_free(&x);
	tensor_free(&y);
	return rc;
}

/* Tokens of an integer .npy file; -1 when it is not one. */
static int
npy_tokens(const void *buf, size_t len, int32_t **tok, size_t *ntok,
    const char *src, char *err, size_t errlen)
{
	struct tensor_set s = { 0 };
	struct tensor *t;
	char e[TENSOR_ERRLEN];
	size_t i;
	int rc = -1;

	if (tensor_parse(buf, len, &s, e, sizeof(e)) < 0)
		return fail(err, errlen, "%s: %s", src, e);
	t = &s.items[0];
	if (s.count != 1 || dtype_is_float(t->dtype) || t->dtype == DT_BOOL) {
		fail(err, errlen, "%s: tokens must be one array of an integer "
		    "dtype", src);
		goto out;
	}
	*ntok = (size_t)tensor_numel(t);
	*tok = malloc((*ntok ? *ntok : 1) * sizeof(int32_t));
	if (*tok == NULL) {
		fail(err, errlen, "%s: out of memory", src);
		goto out;
	}
	for (i = 0; i < *ntok; i++)
		(*tok)[i] = (int32_t)dtype_get(t->dtype, t->data, i);
	rc = 0;
out:
	tensor_set_free(&s);
	return rc;
}

static int
load_tokens(struct dp_data *d, const struct nn_model *m, const char *src,
    char *err, size_t errlen)
{
	void *buf = NULL;
	size_t len, ntok = 0, i;
	char e[TENSOR_ERRLEN];
	int rc = -1, raw;

	if (tensor_fetch(src, &buf, &len, e, sizeof(e)) < 0)
		return fail(err, errlen, "%s: %s", src, e);
	raw = len < 6 || memcmp(buf, "\x93NUMPY", 6) != 0;
	if (raw) {
		if (m->dims.vocab < 256) {
			fail(err, errlen, "%s: raw bytes need a vocab of at least "
			    "256 (the model has %d)", src, m->dims.vocab);
			goto out;
		}
		ntok = len;
		d->tok = malloc((len ? len : 1) * sizeof(int32_t));
		if (d->tok == NULL) {
			fail(err, errlen, "%s: out of memory", src);
			goto out;
		}
		for (i = 0; i < len; i++)
			d->tok[i] = ((unsigned char *)buf)[i];
	} else if (npy_tokens(buf, len, &d->tok, &ntok, src, err, errlen) < 0)
		goto out;
	for (i = 0; i < ntok; i++)
		if (d->tok[i] < 0 || d->tok[i] >= m->dims.vocab) {
			fail(err, errlen, "%s: token %zu is %d, outside the "
			    "vocab [0, %d)", src, i, d->tok[i], m->dims.vocab);
			goto out;
		}
	d->seq = m->dims.seq;
	d->n = (int64_t)(ntok / (size_t)(d->seq + 1));
	if (d->n < 1)
		fail(err, errlen, "%s: %zu tokens make no window of seq+1 = %d",
		    src, ntok, d->seq + 1);
	rc = d->n < 1 ? -1 : 0;
out:
	free(buf);
	return rc;
}

int
dp_data_load(struct dp_data *d, const struct nn_model *m, const char *data,
    const char *targets, char *err, size_t errlen)
{
	int rc;

	memset(d, 0, sizeof(*d));
	d->arch = m->dims.arch;
	if (d->arch == NN_GPT) {
		if (targets != NULL)
			return fail(err, errlen, "the gpt model takes its targets "
			    "from the token file: no --targets");
		rc = load_tokens(d, m, data, err, errlen);
	} else
		rc = load_rows(d, m, data, targets, err, errlen);
	if (rc < 0)
		dp_data_free(d);
	return rc;
}

void
dp_data_free(struct dp_data *d)
{
	free(d->x);
	free(d->y);
	free(d->tok);
	d->x = d->y = NULL;
	d->tok = NULL;
}

long
dp_tokens(const struct dp_data *d, long b)
{
	return d->arch == NN_MLP ? b : b * d->seq;
}

void
dp_split(long b, int world, int rank, long *start, long *count)
{
	long base = b / world, extra = b % world;

	*count = base + (rank < extra);
	*start = rank * base + (rank < extra ? rank : extra);
}

long
dp_epoch_steps(int64_t n, long b, double epochs)
{
	double s = epochs * (double)n / (double)b;
	long k = (long)s;

	return k + ((double)k < s);
}

/* ---- sample order ---------------------------------------------------- */

struct order {
	int64_t n, epoch;
	int shuffle;
	uint64_t seed;
	int64_t *perm;
};

/* Sample of global position g: position g mod n of epoch g / n, through
 * that epoch's permutation (Fisher-Yates from the seed and the epoch). */
static int64_t
order_index(struct order *o, int64_t g)
{
	int64_t e = g / o->n, i;
	struct tensor_rng r;

	if (!o->shuffle)
		return g % o->n;
	if (e != o->epoch) {
		tensor_rng_seed(&r, o->seed ^ (0x9e3779b97f4a7c15ULL * (uint64_t)(e + 1)));
		for (i = 0; i < o->n; i++)
			o->perm[i] = i;
		for (i = o->n - 1; i > 0; i--) {
			int64_t j = (int64_t)(tensor_rng_next(&r) % (uint64_t)(i + 1));
			int64_t t = o->perm[i];

			o->perm[i] = o->perm[j];
			o->perm[j] = t;
		}
		o->epoch = e;
	}
	return o->perm[g % o->n];
}

/* ---- training -------------------------------------------------------- */

/* A parameter server running in this rank (colocated async mode). */
struct colo_server {
	pthread_t thr;
	struct ps_server_cfg cfg;
	struct nn_optim opt;
	float *shard;
	char *layout;
	volatile sig_atomic_t stop;
	int started, rc;
	char err[320];
};

struct run {
	struct nn_model *m;
	const struct dp_data *d;
	struct comm *c;
	const struct dp_cfg *cfg;
	int rank, world;
	long start, count;		/* this rank's part of every batch */
	struct order ord;
	float *bx, *by;
	int32_t *btok;
	size_t *bucket;			/* nbucket+1 boundaries, in floats */
	int nbucket;
	struct nn_optim opt;		/* whole vector, or a colocated shard */
	int have_opt;
	struct ps_client *cl;		/* external or colocated async servers */
	struct colo_server *srv;
	enum dp_err kind;
	char *err;
	size_t errlen;
};

static int
comm_failed(struct run *r)
{
	r->kind = comm_errkind(r->c) == COMM_ERR_MISMATCH ? DP_ERR_DATA :
	    DP_ERR_RUNTIME;
	return fail(r->err, r->errlen, "%s", comm_error(r->c));
}

static int
runtime_failed(struct run *r, const char *fmt, const char *why)
{
	r->kind = DP_ERR_RUNTIME;
	return fail(r->err, r->errlen, fmt, r->rank, why);
}

/* Bucket boundaries at tensor boundaries: consecutive tensors fused while
 * the bucket stays within bucket_bytes (a bigger tensor is a bucket alone). */
static int
make_buckets(struct run *r)
{
	const struct nn_model *m = r->m;
	size_t i, lim = r->cfg->bucket_bytes / sizeof(float), first = 0;

	r->bucket = malloc((m->ntensors + 2) * sizeof(size_t));
	if (r->bucket == NULL)
		return runtime_failed(r, "rank %d: %s", "out of memory");
	r->bucket[0] = 0;
	r->nbucket = 0;
	for (i = 0; i < m->ntensors; i++) {
		size_t off = m->table[i].offset, end = off + m->table[i].count;

		if (end - first > lim && off > first) {
			r->bucket[++r->nbucket] = off;
			first = off;
		}
	}
	if (m->nparams > first || r->nbucket == 0)
		r->bucket[++r->nbucket] = m->nparams;
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

/* Copy this rank's samples of step k into the batch buffers. */
static void
fill_batch(struct run *r, long k, struct nn_batch *b)
{
	const struct dp_data *d = r->d;
	size_t w = (size_t)d->seq + 1;
	long j;

	for (j = 0; j < r->count; j++) {
		int64_t g = (int64_t)k * r->cfg->batch + r->start + j;
		int64_t i = order_index(&r->ord, g);

		if (d->arch == NN_GPT)
			memcpy(r->btok + j * w, d->tok + i * w, w * sizeof(int32_t));
		else {
			memcpy(r->bx + j * d->xrow, d->x + i * d->xrow,
			    d->xrow * sizeof(float));
			memcpy(r->by + j * d->yrow, d->y + i * d->yrow,
			    d->yrow * sizeof(float));
		}
	}
	memset(b, 0, sizeof(*b));
	b->n = (int)r->count;
	b->seq = d->seq;
	b->x = r->bx;
	b->y = r->by;
	b->tokens = r->btok;
}

static int
grads_allreduce(struct run *r)
{
	int i;

	for (i = 0; i < r->nbucket; i++) {
		size_t a = r->bucket[i], b = r->bucket[i + 1];

		comm_set_step(r->c, "gradient bucket %d of %d", i + 1, r->nbucket);
		if (coll_allreduce(r->c, r->m->grads + a, b - a, DT_F32, COLL_SUM,
		    r->cfg->algo) < 0)
			return comm_failed(r);
	}
	return 0;
}

/* Gradient sync and update; *loss holds this rank's loss sum, and the
 * global one on return (async parameter server: this rank's mean). */
static int
sync_step(struct run *r, double *loss)
{
	const struct dp_cfg *cfg = r->cfg;
	struct nn_model *m = r->m;
	char e[400];

	if (cfg->sync == DP_ALLREDUCE) {
		if (grads_allreduce(r) < 0)
			return -1;
	} else if (r->cl != NULL) {
		if (ps_client_push(r->cl, m->grads, (double)r->count, m->params,
		    e, sizeof(e)) < 0)
			return runtime_failed(r, "rank %d: parameter server: %s", e);
	} else if (ps_colo_step(r->c, cfg->ps_servers, m->params, m->grads,
	    m->nparams, (double)r->count, dp_optim_update, &r->opt) < 0)
		return comm_failed(r);
	if (cfg->sync == DP_PS && cfg->ps_mode == PS_ASYNC) {
		*loss = r->count ? *loss / (double)r->count : 0;
		return 0;
	}
	if (coll_allreduce(r->c, loss, 1, DT_F64, COLL_SUM, COLL_AUTO) < 0)
		return comm_failed(r);
	*loss /= (double)cfg->batch;
	return 0;
}

static int
run_step(struct run *r, long k, struct dp_step *s)
{
	struct nn_batch b;
	double t0 = now(), t1, t2, loss = 0;
	char e[256];

	fill_batch(r, k, &b);
	nn_model_zero_grad(r->m);
	if (r->count > 0 && nn_model_step(r->m, &b, &loss, e, sizeof(e)) < 0) {
		r->kind = DP_ERR_DATA;
		return fail(r->err, r->errlen, "rank %d: step %ld: %s", r->rank,
		    k, e);
	}
	t1 = now();
	if (sync_step(r, &loss) < 0)
		return -1;
	t2 = now();
	if (r->cfg->sync == DP_ALLREDUCE)
		nn_optim_step(&r->opt, r->m->params, r->m->grads,
		    (float)(1.0 / (double)r->cfg->batch));
	s->step = k;
	s->epoch = (long)((int64_t)k * r->cfg->batch / r->d->n);
	s->tokens = dp_tokens(r->d, r->cfg->batch);
	s->loss = loss;
	s->seconds = now() - t0;
	s->comm = t2 - t1;
	s->compute = s->seconds - s->comm;
	return 0;
}

uint64_t
dp_checksum(const float *p, size_t n)
{
	const unsigned char *b = (const unsigned char *)p;
	uint64_t h = 0xcbf29ce484222325ULL;
	size_t i;

	for (i = 0; i < n * sizeof(float); i++) {
		h ^= b[i];
		h *= 0x100000001b3ULL;
	}
	return h;
}

/* Every rank must hold bitwise the same parameters. */
static int
verify_same(struct run *r, const char *when)
{
	uint64_t mine = dp_checksum(r->m->params, r->m->nparams), *all;
	int q, rc = 0;

	all = malloc((size_t)r->world * sizeof(*all));
	if (all == NULL)
		return runtime_failed(r, "rank %d: %s", "out of memory");
	comm_set_step(r->c, "parameter checksum %s", when);
	if (coll_allgather(r->c, &mine, all, 1, DT_I64, COLL_AUTO) < 0) {
		free(all);
		return comm_failed(r);
	}
	for (q = 1; q < r->world && rc == 0; q++)
		if (all[q] != all[0]) {
			r->kind = DP_ERR_DATA;
			rc = fail(r->err, r->errlen, "rank %d: parameters of rank %d "
			    "differ from rank 0 %s (checksum %016llx vs %016llx)",
			    r->rank, q, when, (unsigned long long)all[q],
			    (unsigned long long)all[0]);
		}
	free(all);
	return rc;
}

/* ---- parameter-server set-up ----------------------------------------- */

static int
model_layout(const struct nn_model *m, char **layout, char *err, size_t errlen)
{
	struct tensor_set s = { 0 };
	float *flat = NULL;
	size_t total;
	int rc;

	if (nn_model_to_set(m, &s, err, errlen) < 0)
		return -1;
	rc = dp_set_flatten(&s, &flat, &total, layout, err, errlen);
	free(flat);
	tensor_set_free(&s);
	return rc;
}

/* Connect to the servers, check they hold this model, start from their
 * parameters. */
static int
ps_connect(struct run *r, const char *addrs)
{
	char e[400], *mine = NULL;
	int rc;

	if (ps_client_open(&r->cl, addrs, r->rank, r->cfg->token,
	    r->cfg->timeout, e, sizeof(e)) < 0)
		return runtime_failed(r, "rank %d: parameter server: %s", e);
	if (model_layout(r->m, &mine, e, sizeof(e)) < 0)
		return runtime_failed(r, "rank %d: %s", e);
	rc = dp_layout_same(mine, ps_client_layout(r->cl));
	free(mine);
	if (!rc || ps_client_total(r->cl) != r->m->nparams) {
		r->kind = DP_ERR_DATA;
		return fail(r->err, r->errlen, "rank %d: the parameter servers "
		    "%s hold another model (%zu parameters, this one %zu)",
		    r->rank, addrs, ps_client_total(r->cl), r->m->nparams);
	}
	if (ps_client_pull(r->cl, r->m->params, e, sizeof(e)) < 0)
		return runtime_failed(r, "rank %d: parameter server: %s", e);
	return 0;
}

static void *
colo_thread(void *arg)
{
	struct colo_server *s = arg;

	s->rc = ps_serve(&s->cfg, s->err, sizeof(s->err));
	return NULL;
}

/* Colocated async mode: ranks 0..S-1 run a TCP server thread each. */
static int
colo_server_start(struct run *r, int *port)
{
	const struct dp_cfg *cfg = r->cfg;
	struct colo_server *s = calloc(1, sizeof(*s));
	struct sock_addr bound;
	size_t off, len;
	char e[300];

	if (s == NULL)
		return runtime_failed(r, "rank %d: %s", "out of memory");
	r->srv = s;
	s->cfg.lfd = -1;
	ps_shard(r->m->nparams, cfg->ps_servers, r->rank, &off, &len);
	s->shard = malloc((len + 1) * sizeof(float));
	if (s->shard == NULL || model_layout(r->m, &s->layout, e, sizeof(e)) < 0 ||
	    nn_optim_init(&s->opt, &cfg->optim, len, e, sizeof(e)) < 0)
		return runtime_failed(r, "rank %d: parameter server: %s",
		    s->shard ? e : "out of memory");
	memcpy(s->shard, r->m->params + off, len * sizeof(float));
	s->cfg.lfd = sock_listen_hostport(":0", &bound, e, sizeof(e));
	if (s->cfg.lfd < 0)
		return runtime_failed(r, "rank %d: parameter server: %s", e);
	*port = sock_addr_port(&bound);
	s->cfg = (struct ps_server_cfg){
		.lfd = s->cfg.lfd, .index = r->rank, .nserv = cfg->ps_servers,
		.total = r->m->nparams, .shard = s->shard, .layout = s->layout,
		.workers = r->world, .mode = PS_ASYNC, .staleness = cfg->staleness,
		.timeout = cfg->timeout, .token = cfg->token,
		.update = dp_optim_update, .ctx = &s->opt, .stop = &s->stop
	};
	if (pthread_create(&s->thr, NULL, colo_thread, s) != 0)
		return runtime_failed(r, "rank %d: %s", "cannot start the "
		    "parameter-server thread");
	s->started = 1;
	return 0;
}

/* "host:port" of colocated server j: its comm address with its PS port. */
static void
colo_addr(struct run *r, int j, int port, char *out, size_t len)
{
	const char *a = comm_peer_addr(r->c, j), *colon = strrchr(a, ':');
	int hl = colon ? (int)(colon - a) : 0;

	if (j == r->rank || hl == 0)
		snprintf(out, len, "127.0.0.1:%d", port);
	else
		snprintf(out, len, "%.*s:%d", hl, a, port);
}

static int
colo_async_start(struct run *r)
{
	int S = r->cfg->ps_servers, j, rc;
	int32_t port = 0, *ports = calloc((size_t)r->world, sizeof(*ports));
	char *list = calloc((size_t)S, 160);
	size_t n = 0;

	if (ports == NULL || list == NULL) {
		rc = runtime_failed(r, "rank %d: %s", "out of memory");
		goto out;
	}
	/* A failed start still joins the allgather, so no rank waits alone. */
	if (r->rank < S && colo_server_start(r, &port) < 0)
		port = -1;
	comm_set_step(r->c, "parameter-server addresses");
	if (coll_allgather(r->c, &port, ports, 1, DT_I32, COLL_AUTO) < 0) {
		rc = port < 0 ? -1 : comm_failed(r);
		goto out;
	}
	for (j = 0; j < S; j++)
		if (ports[j] <= 0) {
			r->kind = DP_ERR_RUNTIME;
			rc = port < 0 ? -1 : fail(r->err, r->errlen, "rank %d: the "
			    "parameter server of rank %d failed to start", r->rank, j);
			goto out;
		}
	for (j = 0; j < S; j++) {
		colo_addr(r, j, ports[j], list + n, 160);
		n += strlen(list + n);
		list[n++] = j + 1 < S ? ',' : '\0';
	}
	rc = ps_connect(r, list);
out:
	free(ports);
	free(list);
	return rc;
}

/* Colocated async server: wait for its end (every worker said done). */
static int
colo_server_stop(struct run *r, int ok)
{
	struct colo_server *s = r->srv;
	int rc = 0;

	if (s == NULL)
		return 0;
	if (!ok)
		s->stop = 1;
	if (s->started) {
		pthread_join(s->thr, NULL);
		if (ok && s->rc < 0)
			rc = runtime_failed(r, "rank %d: parameter server: %s",
			    s->err);
	}
	if (s->cfg.lfd >= 0)
		close(s->cfg.lfd);
	nn_optim_free(&s->opt);
	free(s->shard);
	free(s->layout);
	free(s);
	r->srv = NULL;
	return rc;
}

/* ---- the run --------------------------------------------------------- */

static int
run_buffers(struct run *r)
{
	const struct dp_data *d = r->d;
	size_t rows = (size_t)(r->count ? r->count : 1);

	r->ord = (struct order){ .n = d->n, .epoch = -1,
	    .shuffle = r->cfg->shuffle, .seed = r->cfg->seed };
	if (r->cfg->shuffle &&
	    (r->ord.perm = malloc((size_t)d->n * sizeof(int64_t))) == NULL)
		return runtime_failed(r, "rank %d: %s", "out of memory");
	if (d->arch == NN_GPT)
		r->btok = malloc(rows * ((size_t)d->seq + 1) * sizeof(int32_t));
	else {
		r->bx = malloc(rows * d->xrow * sizeof(float));
		r->by = malloc(rows * d->yrow * sizeof(float));
	}
	if (d->arch == NN_GPT ? r->btok == NULL : r->bx == NULL || r->by == NULL)
		return runtime_failed(r, "rank %d: %s", "out of memory");
	return make_buckets(r);
}

static int
run_init(struct run *r)
{
	const struct dp_cfg *cfg = r->cfg;
	size_t off = 0, len = r->m->nparams;
	char e[256];

	r->rank = comm_rank(r->c);
	r->world = comm_size(r->c);
	dp_split(cfg->batch, r->world, r->rank, &r->start, &r->count);
	if (run_buffers(r) < 0)
		return -1;
	if (cfg->sync == DP_PS && cfg->ps_addrs == NULL &&
	    cfg->ps_mode == PS_SYNC && r->rank < cfg->ps_servers)
		ps_shard(r->m->nparams, cfg->ps_servers, r->rank, &off, &len);
	if (cfg->sync == DP_ALLREDUCE || (cfg->sync == DP_PS &&
	    cfg->ps_addrs == NULL && cfg->ps_mode == PS_SYNC &&
	    r->rank < cfg->ps_servers)) {
		if (nn_optim_init(&r->opt, &cfg->optim, len, e, sizeof(e)) < 0)
			return runtime_failed(r, "rank %d: %s", e);
		r->have_opt = 1;
	}
	if (verify_same(r, "before training") < 0)
		return -1;
	if (cfg->sync == DP_PS && cfg->ps_addrs != NULL)
		return ps_connect(r, cfg->ps_addrs);
	if (cfg->sync == DP_PS && cfg->ps_mode == PS_ASYNC)
		return colo_async_start(r);
	return 0;
}

/* The end of a run over TCP servers: all pushes applied, the final values
 * pulled alike, checked, and the servers told this worker is done. */
static int
run_finish_ps(struct run *r)
{
	char e[400];

	comm_set_step(r->c, "end of training");
	if (coll_barrier(r->c) < 0)
		return comm_failed(r);
	if (ps_client_pull(r->cl, r->m->params, e, sizeof(e)) < 0)
		return runtime_failed(r, "rank %d: parameter server: %s", e);
	if (verify_same(r, "after training") < 0)
		return -1;
	if (ps_client_done(r->cl, e, sizeof(e)) < 0)
		return runtime_failed(r, "rank %d: parameter server: %s", e);
	ps_client_close(r->cl);
	r->cl = NULL;
	return colo_server_stop(r, 1);
}

static void
run_free(struct run *r)
{
	ps_client_abort(r->cl);
	colo_server_stop(r, 0);
	if (r->have_opt)
		nn_optim_free(&r->opt);
	free(r->ord.perm);
	free(r->bx);
	free(r->by);
	free(r->btok);
	free(r->bucket);
}

int
dp_train(struct nn_model *m, const struct dp_data *d, struct comm *c,
    const struct dp_cfg *cfg, dp_step_fn fn, void *ctx,
    struct dp_step **steps, enum dp_err *kind, char *err, size_t errlen)
{
	struct run r = { .m = m, .d = d, .c = c, .cfg = cfg,
	    .kind = DP_ERR_RUNTIME, .err = err, .errlen = errlen };
	struct dp_step *s = calloc((size_t)cfg->steps + 1, sizeof(*s));
	long k;
	int rc = -1;

	*steps = s;
	if (s == NULL) {
		fail(err, errlen, "out of memory");
		goto out;
	}
	if (run_init(&r) < 0)
		goto out;
	for (k = 0; k < cfg->steps; k++) {
		if (run_step(&r, k, &s[k]) < 0)
			goto out;
		if (fn != NULL)
			fn(ctx, &s[k]);
	}
	rc = r.cl != NULL ? run_finish_ps(&r) : verify_same(&r, "after training");
out:
	*kind = r.kind;
	run_free(&r);
	return rc;
}

int
dp_loss_csv_write(const char *path, const struct dp_step *s, long n,
    char *err, size_t errlen)
{
	size_t cap = 64 + (size_t)n * 128, len;
	char *buf = malloc(cap);
	long k;
	int rc;

	if (buf == NULL)
		return fail(err, errlen, "out of memory");
	len = (size_t)snprintf(buf, cap, "step,epoch,loss,tokens,seconds,"
	    "tokens_per_s\n");
	for (k = 0; k < n; k++)
		len += (size_t)snprintf(buf + len, cap - len, "%ld,%ld,%.9g,%ld,"
		    "%.6f,%.1f\n", s[k].step, s[k].epoch, s[k].loss, s[k].tokens,
		    s[k].seconds, s[k].seconds > 0 ? s[k].tokens / s[k].seconds : 0);
	rc = tensor_write_file(path, buf, len, err, errlen);
	free(buf);
	return rc;
}

/* ---- optimizer options ----------------------------------------------- */

/* A number in [min, max) from option opt, or -1 with the reason. */
static int
opt_number(const char *opt, const char *s, double min, double max, double *out,
    char **end, char *err, size_t errlen)
{
	char *e;

	errno = 0;
	*out = strtod(s, &e);
	if (e == s || errno != 0 || *out < min || *out >= max ||
	    (end == NULL && *e != '\0'))
		return fail(err, errlen, "%s: '%s' is not a number in [%g, %g)",
		    opt, s, min, max);
	if (end != NULL)
		*end = e;
	return 0;
}

int
dp_optim_option(struct dp_optim_opts *o, int opt, const char *arg)
{
	switch (opt) {
	case DP_OPT_OPTIMIZER: o->kind = arg; break;
	case DP_OPT_LR: o->lr = arg; break;
	case DP_OPT_MOMENTUM: o->momentum = arg; break;
	case DP_OPT_WD: o->weight_decay = arg; break;
	case DP_OPT_BETAS: o->betas = arg; break;
	case DP_OPT_EPS: o->eps = arg; break;
	default: return 0;
	}
	return 1;
}

int
dp_optim_config(const struct dp_optim_opts *o, struct nn_optim_cfg *c,
    char *err, size_t errlen)
{
	enum nn_optim_kind k = NN_SGD;
	char *e;

	if (o->kind != NULL && nn_optim_parse(o->kind, &k) < 0)
		return fail(err, errlen, "--optimizer: want sgd or adamw, not '%s'",
		    o->kind);
	nn_optim_defaults(c, k);
	if (k == NN_ADAMW && o->momentum != NULL)
		return fail(err, errlen, "--momentum: goes with --optimizer sgd");
	if ((o->lr && opt_number("--lr", o->lr, 0, 1e9, &c->lr, NULL, err,
	    errlen) < 0) || (o->momentum && opt_number("--momentum",
	    o->momentum, 0, 1e9, &c->momentum, NULL, err, errlen) < 0) ||
	    (o->weight_decay && opt_number("--weight-decay", o->weight_decay, 0,
	    1e9, &c->weight_decay, NULL, err, errlen) < 0) ||
	    (o->eps && opt_number("--eps", o->eps, 0, 1, &c->eps, NULL, err,
	    errlen) < 0))
		return -1;
	if (o->betas == NULL)
		return 0;
	if (opt_number("--betas", o->betas, 0, 1, &c->beta1, &e, err, errlen) < 0)
		return -1;
	if (*e != ',')
		return fail(err, errlen, "--betas: want B1,B2, not '%s'", o->betas);
	return opt_number("--betas", e + 1, 0, 1, &c->beta2, NULL, err, errlen);
}

/* ---- flat vectors and layouts ---------------------------------------- */

/* Names, keys and values go between tabs and newlines. */
static int
field_ok(const char *s)
{
	return s[strcspn(s, "\t\n")] == '\0';
}

static int
layout_tensor(char **buf, size_t *len, size_t *cap, const struct tensor *t)
{
	char line[512];
	int n = snprintf(line, sizeof(line), "t\t%s\t", t->name ? t->name : "");

	for (int i = 0; i < t->ndim; i++)
		n += snprintf(line + n, sizeof(line) - (size_t)n, "%s%lld",
		    i ? "," : "", (long long)t->shape[i]);
	n += snprintf(line + n, sizeof(line) - (size_t)n, "\n");
	if (*len + (size_t)n + 1 > *cap) {
		size_t c = 2 * (*cap + (size_t)n + 1);
		char *p = realloc(*buf, c);

		if (p == NULL)
			return -1;
		*buf = p;
		*cap = c;
	}
	memcpy(*buf + *len, line, (size_t)n + 1);
	*len += (size_t)n;
	return 0;
}

static int
layout_meta(char **buf, size_t *len, size_t *cap, const struct tensor_meta *m)
{
	size_t n = strlen(m->key) + strlen(m->value) + 5;

	if (*len + n > *cap) {
		size_t c = 2 * (*cap + n);
		char *p = realloc(*buf, c);

		if (p == NULL)
			return -1;
		*buf = p;
		*cap = c;
	}
	*len += (size_t)snprintf(*buf + *len, *cap - *len, "m\t%s\t%s\n", m->key,
	    m->value);
	return 0;
}

static int
make_layout(const struct tensor_set *s, char **out, char *err, size_t errlen)
{
	size_t i, len = 0, cap = 256;
	char *buf = malloc(cap);

	if (buf == NULL)
		return fail(err, errlen, "out of memory");
	buf[0] = '\0';
	for (i = 0; i < s->count; i++)
		if (!field_ok(s->items[i].name ? s->items[i].name : "") ||
		    strlen(s->items[i].name ? s->items[i].name : "") > 300 ||
		    layout_tensor(&buf, &len, &cap, &s->items[i]) < 0)
			goto bad;
	for (i = 0; i < s->nmeta; i++)
		if (!field_ok(s->meta[i].key) || !field_ok(s->meta[i].value) ||
		    layout_meta(&buf, &len, &cap, &s->meta[i]) < 0)
			goto bad;
	*out = buf;
	return 0;
bad:
	free(buf);
	return fail(err, errlen, "a tensor name or metadata entry holds a tab "
	    "or newline, or memory ran out");
}

int
dp_set_flatten(const struct tensor_set *s, float **flat, size_t *total,
    char **layout, char *err, size_t errlen)
{
	size_t i, j, n = 0, at = 0;
	float *f;

	for (i = 0; i < s->count; i++) {
		if (!dtype_is_float(s->items[i].dtype))
			return fail(err, errlen, "tensor %s: dtype %s is not a float "
			    "type", s->items[i].name ? s->items[i].name : "",
			    dtype_name(s->items[i].dtype));
		n += (size_t)tensor_numel(&s->items[i]);
	}
	f = malloc((n ? n : 1) * sizeof(float));
	if (f == NULL)
		return fail(err, errlen, "out of memory for %zu parameters", n);
	for (i = 0; i < s->count; i++) {
		const struct tensor *t = &s->items[i];
		size_t c = (size_t)tensor_numel(t);

		for (j = 0; j < c; j++)
			f[at + j] = (float)dtype_get(t->dtype, t->data, j);
		at += c;
	}
	if (make_layout(s, layout, err, errlen) < 0) {
		free(f);
		return -1;
	}
	*flat = f;
	*total = n;
	return 0;
}

/* One "t NAME DIMS" line into a fresh tensor holding the next values. */
static int
unflatten_tensor(char *line, const float *flat, size_t total, size_t *at,
    struct tensor_set *out, char *err, size_t errlen)
{
	char *name = line + 2, *dims = strchr(name, '\t'), *p, *end;
	int64_t shape[TENSOR_MAX_DIM];
	struct tensor t = { 0 };
	int nd = 0;
	size_t n;

	if (dims == NULL)
		return fail(err, errlen, "bad layout line '%s'", line);
	*dims++ = '\0';
	for (p = dims; *p && nd < TENSOR_MAX_DIM; p = end + (*end == ',')) {
		shape[nd++] = strtoll(p, &end, 10);
		if (end == p || shape[nd - 1] < 0)
			return fail(err, errlen, "bad shape '%s' of %s", dims, name);
	}
	if (*p || tensor_init(&t, DT_F32, nd, shape, err, errlen) < 0)
		return *p ? fail(err, errlen, "bad shape of %s", name) : -1;
	n = (size_t)tensor_numel(&t);
	if (n > total - *at) {
		tensor_free(&t);
		return fail(err, errlen, "layout names more than %zu values", total);
	}
	memcpy(t.data, flat + *at, n * sizeof(float));
	*at += n;
	if (tensor_set_add(out, name, &t, err, errlen) < 0) {
		tensor_free(&t);
		return -1;
	}
	return 0;
}

int
dp_set_unflatten(const char *layout, const float *flat, size_t total,
    struct tensor_set *out, char *err, size_t errlen)
{
	char *text = strdup(layout), *line, *save = NULL, *v;
	size_t at = 0;
	int rc = 0;

	memset(out, 0, sizeof(*out));
	out->format = TENSOR_SAFETENSORS;
	if (text == NULL)
		return fail(err, errlen, "out of memory");
	for (line = strtok_r(text, "\n", &save); line && rc == 0;
	    line = strtok_r(NULL, "\n", &save)) {
		if (strncmp(line, "t\t", 2) == 0)
			rc = unflatten_tensor(line, flat, total, &at, out, err, errlen);
		else if (strncmp(line, "m\t", 2) == 0 &&
		    (v = strchr(line + 2, '\t')) != NULL) {
			*v++ = '\0';
			rc = tensor_set_meta_put(out, line + 2, v, err, errlen);
		} else
			rc = fail(err, errlen, "bad layout line '%s'", line);
	}
	if (rc == 0 && at != total)
		rc = fail(err, errlen, "layout names %zu values, the vector has "
		    "%zu", at, total);
	free(text);
	if (rc < 0)
		tensor_set_free(out);
	return rc;
}

/* The next tensor line of a layout, or NULL; *len its length. */
static const char *
next_tensor_line(const char *p, size_t *len)
{
	while (p && *p) {
		size_t n = strcspn(p, "\n");

		if (p[0] == 't') {
			*len = n;
			return p;
		}
		p += n + (p[n] == '\n');
	}
	return NULL;
}

int
dp_layout_same(const char *a, const char *b)
{
	size_t la = 0, lb = 0;

	for (;;) {
		a = next_tensor_line(a, &la);
		b = next_tensor_line(b, &lb);
		if (a == NULL || b == NULL)
			return a == b;
		if (la != lb || memcmp(a, b, la) != 0)
			return 0;
		a += la;
		b += lb;
	}
}
