/* train_data: samples, batch split and sample order for every trainer. */
#include <stdlib.h>
#include <string.h>

#include "cli/util.h"
#include "par/train_data.h"
#include "tensor/rng.h"

/* A tensor's values as a malloc'd f32 array (any float dtype). */
static float *
to_f32(struct tensor *t, const char *what, char *err, size_t errlen)
{
	size_t i, n = (size_t)tensor_numel(t);
	float *f;

	if (!dtype_is_float(t->dtype)) {
		cli_fail(err, errlen, "%s: dtype %s is not a float type", what,
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
		cli_fail(err, errlen, "%s: out of memory", what);
		return NULL;
	}
	for (i = 0; i < n; i++)
		f[i] = (float)dtype_get(t->dtype, t->data, i);
	return f;
}

/* Check X and Y shapes against the model: rows, and the sample sizes. */
static int
rows_check(struct train_data *d, const struct nn_model *m, const struct tensor *x,
    const struct tensor *y, char *err, size_t errlen)
{
	char a[64], b[64];
	int64_t din = m->dims.arch == NN_MLP ? m->dims.d_in : m->dims.d_model;
	int64_t dout = m->dims.arch == NN_MLP ? m->dims.d_out : m->dims.d_model;
	int want = m->dims.arch == NN_MLP ? 2 : 3;

	tensor_shape_str(x, a, sizeof(a));
	tensor_shape_str(y, b, sizeof(b));
	if (x->ndim != want || x->shape[want - 1] != din || x->shape[0] < 1)
		return cli_fail(err, errlen, "data of shape %s: the %s model wants "
		    "[n,%s%lld]", a, nn_arch_name(m->dims.arch),
		    want == 3 ? "seq," : "", (long long)din);
	/* 1-D targets of an mlp with one output are a column */
	int ycol = want == 2 && dout == 1 && y->ndim == 1;

	if ((y->ndim != want && !ycol) || y->shape[0] != x->shape[0] ||
	    (!ycol && y->shape[want - 1] != dout) ||
	    (want == 3 && y->shape[1] != x->shape[1]))
		return cli_fail(err, errlen, "targets of shape %s do not match data "
		    "of shape %s for the %s model", b, a,
		    nn_arch_name(m->dims.arch));
	d->n = x->shape[0];
	d->seq = want == 3 ? (int)x->shape[1] : 1;
	d->xrow = (size_t)(tensor_numel(x) / d->n);
	d->yrow = (size_t)(tensor_numel(y) / d->n);
	return 0;
}

static int
load_rows(struct train_data *d, const struct nn_model *m, const char *data,
    const char *targets, char *err, size_t errlen)
{
	struct tensor x = { 0 }, y = { 0 };
	int rc = -1;

	if (targets == NULL)
		return cli_fail(err, errlen, "the %s model needs --targets",
		    nn_arch_name(m->dims.arch));
	/* The loader's reason names the file already. */
	if (tensor_load_one(data, &x, err, errlen) < 0 ||
	    tensor_load_one(targets, &y, err, errlen) < 0)
		goto out;
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
	char e[COLLX_ERRLEN];
	size_t i;
	int rc = -1;

	if (tensor_parse(buf, len, &s, e, sizeof(e)) < 0)
		return cli_fail(err, errlen, "%s: %s", src, e);
	t = &s.items[0];
	if (s.count != 1 || dtype_is_float(t->dtype) || t->dtype == DT_BOOL) {
		cli_fail(err, errlen, "%s: tokens must be one array of an integer "
		    "dtype", src);
		goto out;
	}
	*ntok = (size_t)tensor_numel(t);
	*tok = malloc((*ntok ? *ntok : 1) * sizeof(int32_t));
	if (*tok == NULL) {
		cli_fail(err, errlen, "%s: out of memory", src);
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
load_tokens(struct train_data *d, const struct nn_model *m, const char *src,
    char *err, size_t errlen)
{
	void *buf = NULL;
	size_t len, ntok = 0, i;
	int rc = -1, raw;

	if (tensor_fetch(src, &buf, &len, err, errlen) < 0)
		return -1;	/* tensor_fetch names the source itself */
	raw = len < 6 || memcmp(buf, "\x93NUMPY", 6) != 0;
	if (raw) {
		if (m->dims.vocab < 256) {
			cli_fail(err, errlen, "%s: raw bytes need a vocab of at least "
			    "256 (the model has %d)", src, m->dims.vocab);
			goto out;
		}
		ntok = len;
		d->tok = malloc((len ? len : 1) * sizeof(int32_t));
		if (d->tok == NULL) {
			cli_fail(err, errlen, "%s: out of memory", src);
			goto out;
		}
		for (i = 0; i < len; i++)
			d->tok[i] = ((unsigned char *)buf)[i];
	} else if (npy_tokens(buf, len, &d->tok, &ntok, src, err, errlen) < 0)
		goto out;
	for (i = 0; i < ntok; i++)
		if (d->tok[i] < 0 || d->tok[i] >= m->dims.vocab) {
			cli_fail(err, errlen, "%s: token %zu is %d, outside the "
			    "vocab [0, %d)", src, i, d->tok[i], m->dims.vocab);
			goto out;
		}
	d->seq = m->dims.seq;
	d->n = (int64_t)(ntok / (size_t)(d->seq + 1));
	if (d->n < 1)
		cli_fail(err, errlen, "%s: %zu tokens make no window of seq+1 = %d",
		    src, ntok, d->seq + 1);
	rc = d->n < 1 ? -1 : 0;
out:
	free(buf);
	return rc;
}

int
train_data_load(struct train_data *d, const struct nn_model *m, const char *data,
    const char *targets, char *err, size_t errlen)
{
	int rc;

	memset(d, 0, sizeof(*d));
	d->arch = m->dims.arch;
	if (d->arch == NN_GPT) {
		if (targets != NULL)
			return cli_fail(err, errlen, "the gpt model takes its targets "
			    "from the token file: no --targets");
		rc = load_tokens(d, m, data, err, errlen);
	} else
		rc = load_rows(d, m, data, targets, err, errlen);
	if (rc < 0)
		train_data_free(d);
	return rc;
}

void
train_data_free(struct train_data *d)
{
	free(d->x);
	free(d->y);
	free(d->tok);
	d->x = d->y = NULL;
	d->tok = NULL;
}

long
train_tokens(const struct train_data *d, long b)
{
	return d->arch == NN_MLP ? b : b * d->seq;
}

void *
train_grow(void *v, long *cap, long k, size_t size)
{
	long n = *cap > 0 ? *cap : 64;
	char *p;

	if (k < *cap)
		return v;
	while (n <= k)
		n *= 2;
	if ((p = realloc(v, (size_t)n * size)) == NULL)
		return NULL;
	memset(p + (size_t)*cap * size, 0, (size_t)(n - *cap) * size);
	*cap = n;
	return p;
}

void
train_split(long b, int world, int rank, long *start, long *count)
{
	long base = b / world, extra = b % world;

	*count = base + (rank < extra);
	*start = rank * base + (rank < extra ? rank : extra);
}

long
train_epoch_steps(int64_t n, long b, double epochs)
{
	double s = epochs * (double)n / (double)b;
	long k = (long)s;

	return k + ((double)k < s);
}

/* ---- sample order ---------------------------------------------------- */

int
train_order_init(struct train_order *o, int64_t n, int shuffle,
    uint64_t seed, char *err, size_t errlen)
{
	*o = (struct train_order){ .n = n, .epoch = -1, .shuffle = shuffle,
	    .seed = seed };
	if (shuffle && (o->perm = malloc((size_t)n * sizeof(int64_t))) == NULL)
		return cli_fail(err, errlen, "out of memory");
	return 0;
}

void
train_order_free(struct train_order *o)
{
	free(o->perm);
	o->perm = NULL;
}

int64_t
train_order_index(struct train_order *o, int64_t g)
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

/* ---- batches --------------------------------------------------------- */

int
train_batch_alloc(struct train_batch *tb, const struct train_data *d,
    long rows, char *err, size_t errlen)
{
	size_t r = (size_t)(rows > 0 ? rows : 1);

	memset(tb, 0, sizeof(*tb));
	if (d->arch == NN_GPT)
		tb->tok = malloc(r * ((size_t)d->seq + 1) * sizeof(int32_t));
	else {
		tb->x = malloc(r * d->xrow * sizeof(float));
		tb->y = malloc(r * d->yrow * sizeof(float));
	}
	if (d->arch == NN_GPT ? tb->tok == NULL : tb->x == NULL || tb->y == NULL) {
		train_batch_free(tb);
		return cli_fail(err, errlen, "out of memory");
	}
	return 0;
}

void
train_batch_free(struct train_batch *tb)
{
	free(tb->x);
	free(tb->y);
	free(tb->tok);
	memset(tb, 0, sizeof(*tb));
}

void
train_batch_fill(struct train_batch *tb, const struct train_data *d,
    struct train_order *o, int64_t g0, long count)
{
	size_t w = (size_t)d->seq + 1;
	long j;

	for (j = 0; j < count; j++) {
		int64_t i = train_order_index(o, g0 + j);

		if (d->arch == NN_GPT)
			memcpy(tb->tok + j * w, d->tok + i * w, w * sizeof(int32_t));
		else {
			memcpy(tb->x + j * d->xrow, d->x + i * d->xrow,
			    d->xrow * sizeof(float));
			memcpy(tb->y + j * d->yrow, d->y + i * d->yrow,
			    d->yrow * sizeof(float));
		}
	}
	memset(&tb->b, 0, sizeof(tb->b));
	tb->b.n = (int)count;
	tb->b.seq = d->seq;
	tb->b.x = tb->x;
	tb->b.y = tb->y;
	tb->b.tokens = tb->tok;
}
