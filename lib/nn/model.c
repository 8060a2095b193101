/* model: the built-in models over one contiguous parameter buffer, loaded
 * from and written back to safetensors collections. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/nn.h"
#include "tensor/rng.h"

/* Private state: per-layer weight and gradient pointers into the model's
 * buffers, and activation memory sized for the largest batch seen. */
struct nn_work {
	int nlayers;
	struct nn_block_w *w, *g;	/* mlp: fc1/fc2 fields of [0] */
	float *wte, *wpe, *lnf_w, *lnf_b;
	float *dwte, *dwpe, *dlnf_w, *dlnf_b;
	float *buf;
	size_t cap;
	int32_t *tok;			/* gpt inputs then targets, 2*n*seq */
	size_t tokcap;
};

/* A tensor the arch expects: its full name, shape and whether a model may
 * leave it out (biases). */
struct expect {
	char name[NN_NAME_MAX];
	int ndim;
	int64_t shape[2];
	int optional;
};

struct expect_list {
	struct expect *e;
	size_t n, cap;
};

static int
fail(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
	return -1;
}

static int
expect_add(struct expect_list *l, const char *prefix, const char *name,
    int64_t d0, int64_t d1, int optional)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? 2 * l->cap : 32;
		struct expect *e = realloc(l->e, cap * sizeof(*e));
		if (!e)
			return -1;
		l->e = e, l->cap = cap;
	}
	struct expect *e = &l->e[l->n++];
	snprintf(e->name, sizeof(e->name), "%s%s", prefix, name);
	e->ndim = d1 ? 2 : 1;
	e->shape[0] = d0, e->shape[1] = d1;
	e->optional = optional;
	return 0;
}

static int
expect_linear(struct expect_list *l, const char *prefix, const char *name,
    int64_t out, int64_t in)
{
	char w[NN_NAME_MAX], b[NN_NAME_MAX];

	snprintf(w, sizeof(w), "%s.weight", name);
	snprintf(b, sizeof(b), "%s.bias", name);
	if (expect_add(l, prefix, w, out, in, 0) < 0)
		return -1;
	return expect_add(l, prefix, b, out, 0, 1);
}

static int
expect_layernorm(struct expect_list *l, const char *prefix, const char *name,
    int64_t d)
{
	char w[NN_NAME_MAX], b[NN_NAME_MAX];

	snprintf(w, sizeof(w), "%s.weight", name);
	snprintf(b, sizeof(b), "%s.bias", name);
	if (expect_add(l, prefix, w, d, 0, 0) < 0)
		return -1;
	return expect_add(l, prefix, b, d, 0, 1);
}

static int
expect_block(struct expect_list *l, const char *prefix, int64_t d, int64_t f)
{
	if (expect_layernorm(l, prefix, "ln1", d) < 0 ||
	    expect_linear(l, prefix, "attn.q", d, d) < 0 ||
	    expect_linear(l, prefix, "attn.k", d, d) < 0 ||
	    expect_linear(l, prefix, "attn.v", d, d) < 0 ||
	    expect_linear(l, prefix, "attn.o", d, d) < 0 ||
	    expect_layernorm(l, prefix, "ln2", d) < 0 ||
	    expect_linear(l, prefix, "mlp.fc1", f, d) < 0)
		return -1;
	return expect_linear(l, prefix, "mlp.fc2", d, f);
}

/* The shape of a tensor the sizes are read from; it must exist with ndim. */
static int
key_shape(const struct tensor_set *s, const char *name, int ndim,
    int64_t *shape, char *err, size_t errlen)
{
	const struct tensor *t = tensor_set_find(s, name);

	if (!t)
		return fail(err, errlen, "model has no tensor '%s'", name);
	if (t->ndim != ndim)
		return fail(err, errlen, "tensor '%s' has %d dimensions, "
		    "expected %d", name, t->ndim, ndim);
	for (int i = 0; i < ndim; i++) {
		if (t->shape[i] <= 0 || t->shape[i] > (1 << 30))
			return fail(err, errlen, "tensor '%s' has an unusable "
			    "size %lld", name, (long long)t->shape[i]);
		shape[i] = t->shape[i];
	}
	return 0;
}

static int
meta_int(const struct tensor_set *s, const char *key, int dflt, int *out,
    char *err, size_t errlen)
{
	const char *v = tensor_set_meta(s, key);
	char *end;

	if (!v) {
		if (dflt < 0)
			return fail(err, errlen, "__metadata__ has no '%s'", key);
		*out = dflt;
		return 0;
	}
	if (!strcmp(v, "true") || !strcmp(v, "false")) {
		*out = v[0] == 't';
		return 0;
	}
	errno = 0;
	long x = strtol(v, &end, 10);
	if (errno || end == v || *end || x < 0 || x > (1 << 20))
		return fail(err, errlen, "__metadata__ '%s' is not a valid "
		    "count: '%s'", key, v);
	*out = (int)x;
	return 0;
}

/* Highest N + 1 over the names "layers.N.*". */
static int
count_layers(const struct tensor_set *s)
{
	int n = 0;

	for (size_t i = 0; i < s->count; i++) {
		const char *name = s->items[i].name;
		char *end;
		if (!name || strncmp(name, "layers.", 7))
			continue;
		long x = strtol(name + 7, &end, 10);
		if (end != name + 7 && *end == '.' && x >= 0 && x < 100000 &&
		    x + 1 > n)
			n = (int)x + 1;
	}
	return n;
}

static int
dims_mlp(const struct tensor_set *s, struct nn_dims *d, char *err,
    size_t errlen)
{
	int64_t a[2], b[2];

	if (key_shape(s, "fc1.weight", 2, a, err, errlen) < 0 ||
	    key_shape(s, "fc2.weight", 2, b, err, errlen) < 0)
		return -1;
	d->d_hidden = (int)a[0], d->d_in = (int)a[1], d->d_out = (int)b[0];
	return 0;
}

static int
heads_check(struct nn_dims *d, const struct tensor_set *s, char *err,
    size_t errlen)
{
	if (meta_int(s, "heads", -1, &d->heads, err, errlen) < 0)
		return -1;
	if (d->heads < 1 || d->d_model % d->heads)
		return fail(err, errlen, "heads %d does not divide d_model %d",
		    d->heads, d->d_model);
	return 0;
}

static int
dims_block(const struct tensor_set *s, struct nn_dims *d, char *err,
    size_t errlen)
{
	int64_t ln[1], fc1[2];

	if (key_shape(s, "ln1.weight", 1, ln, err, errlen) < 0 ||
	    key_shape(s, "mlp.fc1.weight", 2, fc1, err, errlen) < 0)
		return -1;
	d->d_model = (int)ln[0], d->d_ff = (int)fc1[0];
	if (heads_check(d, s, err, errlen) < 0 ||
	    meta_int(s, "causal", 0, &d->causal, err, errlen) < 0)
		return -1;
	if (d->causal > 1)
		return fail(err, errlen, "__metadata__ 'causal' must be 0 or 1");
	return 0;
}

static int
dims_gpt(const struct tensor_set *s, struct nn_dims *d, char *err,
    size_t errlen)
{
	int64_t wte[2], wpe[2], fc1[2];

	if (key_shape(s, "wte", 2, wte, err, errlen) < 0 ||
	    key_shape(s, "wpe", 2, wpe, err, errlen) < 0)
		return -1;
	d->vocab = (int)wte[0], d->d_model = (int)wte[1], d->seq = (int)wpe[0];
	d->layers = count_layers(s);
	d->causal = 1;
	if (d->layers < 1)
		return fail(err, errlen, "gpt model has no layers.N.* tensors");
	if (key_shape(s, "layers.0.mlp.fc1.weight", 2, fc1, err, errlen) < 0 ||
	    heads_check(d, s, err, errlen) < 0)
		return -1;
	d->d_ff = (int)fc1[0];
	return 0;
}

/* Every tensor of a model with these sizes, in a fixed order. */
static int
expect_model(struct expect_list *l, const struct nn_dims *d)
{
	char prefix[NN_NAME_MAX];

	if (d->arch == NN_MLP)
		return expect_linear(l, "", "fc1", d->d_hidden, d->d_in) < 0 ||
		    expect_linear(l, "", "fc2", d->d_out, d->d_hidden) < 0 ?
		    -1 : 0;
	if (d->arch == NN_BLOCK)
		return expect_block(l, "", d->d_model, d->d_ff);
	if (expect_add(l, "", "wte", d->vocab, d->d_model, 0) < 0 ||
	    expect_add(l, "", "wpe", d->seq, d->d_model, 0) < 0 ||
	    expect_layernorm(l, "", "lnf", d->d_model) < 0)
		return -1;
	for (int i = 0; i < d->layers; i++) {
		snprintf(prefix, sizeof(prefix), "layers.%d.", i);
		if (expect_block(l, prefix, d->d_model, d->d_ff) < 0)
			return -1;
	}
	return 0;
}

static const struct expect *
expect_find(const struct expect_list *l, const char *name)
{
	for (size_t i = 0; i < l->n; i++)
		if (!strcmp(l->e[i].name, name))
			return &l->e[i];
	return NULL;
}

/* Every tensor expected with its shape, every required one present. */
static int
check_tensors(const struct tensor_set *s, const struct expect_list *l,
    const char *arch, char *err, size_t errlen)
{
	char got[64];

	for (size_t i = 0; i < s->count; i++) {
		const struct tensor *t = &s->items[i];
		const struct expect *e = t->name ? expect_find(l, t->name) : NULL;
		if (!e)
			return fail(err, errlen, "unexpected tensor '%s' for "
			    "arch %s", t->name ? t->name : "(unnamed)", arch);
		if (!dtype_is_float(t->dtype))
			return fail(err, errlen, "tensor '%s' has dtype %s, "
			    "expected a float type", t->name,
			    dtype_name(t->dtype));
		int ok = t->ndim == e->ndim && t->shape[0] == e->shape[0] &&
		    (e->ndim == 1 || t->shape[1] == e->shape[1]);
		if (!ok && e->ndim == 1)
			return fail(err, errlen, "tensor '%s' has shape %s, "
			    "expected [%lld]", t->name,
			    tensor_shape_str(t, got, sizeof(got)),
			    (long long)e->shape[0]);
		if (!ok)
			return fail(err, errlen, "tensor '%s' has shape %s, "
			    "expected [%lld, %lld]", t->name,
			    tensor_shape_str(t, got, sizeof(got)),
			    (long long)e->shape[0], (long long)e->shape[1]);
	}
	for (size_t i = 0; i < l->n; i++)
		if (!l->e[i].optional && !tensor_set_find(s, l->e[i].name))
			return fail(err, errlen, "model has no tensor '%s'",
			    l->e[i].name);
	return 0;
}

/* Copies the tensors (converted to f32) into one buffer in set order. */
static int
fill_params(struct nn_model *m, const struct tensor_set *s, char *err,
    size_t errlen)
{
	size_t total = 0;

	m->table = calloc(s->count, sizeof(*m->table));
	if (!m->table)
		return fail(err, errlen, "out of memory");
	for (size_t i = 0; i < s->count; i++) {
		const struct tensor *t = &s->items[i];
		struct nn_param *p = &m->table[i];
		snprintf(p->name, sizeof(p->name), "%s", t->name);
		p->ndim = t->ndim;
		p->shape[0] = t->shape[0];
		p->shape[1] = t->ndim > 1 ? t->shape[1] : 0;
		p->offset = total;
		p->count = (size_t)tensor_numel(t);
		total += p->count;
	}
	m->ntensors = s->count;
	m->nparams = total;
	m->params = malloc((total ? total : 1) * sizeof(float));
	m->grads = calloc(total ? total : 1, sizeof(float));
	if (!m->params || !m->grads)
		return fail(err, errlen, "out of memory for %zu parameters",
		    total);
	for (size_t i = 0; i < s->count; i++) {
		const struct tensor *t = &s->items[i];
		float *dst = m->params + m->table[i].offset;
		if (t->dtype == DT_F32) {
			memcpy(dst, t->data, m->table[i].count * sizeof(float));
			continue;
		}
		for (size_t j = 0; j < m->table[i].count; j++)
			dst[j] = (float)dtype_get(t->dtype, t->data, j);
	}
	return 0;
}

static int
copy_meta(struct nn_model *m, const struct tensor_set *s, char *err,
    size_t errlen)
{
	m->meta = calloc(s->nmeta ? s->nmeta : 1, sizeof(*m->meta));
	if (!m->meta)
		return fail(err, errlen, "out of memory");
	for (size_t i = 0; i < s->nmeta; i++) {
		m->meta[i].key = strdup(s->meta[i].key);
		m->meta[i].value = strdup(s->meta[i].value);
		m->nmeta = i + 1;
		if (!m->meta[i].key || !m->meta[i].value)
			return fail(err, errlen, "out of memory");
	}
	return 0;
}

const struct nn_param *
nn_model_param(const struct nn_model *m, const char *name)
{
	for (size_t i = 0; i < m->ntensors; i++)
		if (!strcmp(m->table[i].name, name))
			return &m->table[i];
	return NULL;
}

/* Parameter and gradient pointers of prefix+name, NULL when absent. */
static void
bind(const struct nn_model *m, const char *prefix, const char *name,
    float **w, float **g)
{
	char full[NN_NAME_MAX];

	snprintf(full, sizeof(full), "%s%s", prefix, name);
	const struct nn_param *p = nn_model_param(m, full);
	*w = p ? m->params + p->offset : NULL;
	*g = p ? m->grads + p->offset : NULL;
}

#define BW(field) offsetof(struct nn_block_w, field)
static const struct {
	const char *name;
	size_t off;
} block_fields[] = {
	{ "ln1.weight", BW(ln1_w) }, { "ln1.bias", BW(ln1_b) },
	{ "attn.q.weight", BW(q_w) }, { "attn.q.bias", BW(q_b) },
	{ "attn.k.weight", BW(k_w) }, { "attn.k.bias", BW(k_b) },
	{ "attn.v.weight", BW(v_w) }, { "attn.v.bias", BW(v_b) },
	{ "attn.o.weight", BW(o_w) }, { "attn.o.bias", BW(o_b) },
	{ "ln2.weight", BW(ln2_w) }, { "ln2.bias", BW(ln2_b) },
	{ "mlp.fc1.weight", BW(fc1_w) }, { "mlp.fc1.bias", BW(fc1_b) },
	{ "mlp.fc2.weight", BW(fc2_w) }, { "mlp.fc2.bias", BW(fc2_b) },
};
#undef BW

static void
bind_block(const struct nn_model *m, const char *prefix,
    struct nn_block_w *w, struct nn_block_w *g)
{
	for (size_t i = 0; i < sizeof(block_fields) / sizeof(block_fields[0]);
	    i++)
		bind(m, prefix, block_fields[i].name,
		    (float **)((char *)w + block_fields[i].off),
		    (float **)((char *)g + block_fields[i].off));
}

static int
bind_all(struct nn_model *m, char *err, size_t errlen)
{
	struct nn_work *k = calloc(1, sizeof(*k));
	char prefix[NN_NAME_MAX];

	if (!k)
		return fail(err, errlen, "out of memory");
	m->work = k;
	k->nlayers = m->dims.arch == NN_GPT ? m->dims.layers : 1;
	k->w = calloc(k->nlayers, sizeof(*k->w));
	k->g = calloc(k->nlayers, sizeof(*k->g));
	if (!k->w || !k->g)
		return fail(err, errlen, "out of memory");
	if (m->dims.arch == NN_MLP) {
		bind(m, "", "fc1.weight", &k->w->fc1_w, &k->g->fc1_w);
		bind(m, "", "fc1.bias", &k->w->fc1_b, &k->g->fc1_b);
		bind(m, "", "fc2.weight", &k->w->fc2_w, &k->g->fc2_w);
		bind(m, "", "fc2.bias", &k->w->fc2_b, &k->g->fc2_b);
		return 0;
	}
	for (int i = 0; i < k->nlayers; i++) {
		if (m->dims.arch == NN_GPT)
			snprintf(prefix, sizeof(prefix), "layers.%d.", i);
		else
			prefix[0] = '\0';
		bind_block(m, prefix, &k->w[i], &k->g[i]);
	}
	bind(m, "", "wte", &k->wte, &k->dwte);
	bind(m, "", "wpe", &k->wpe, &k->dwpe);
	bind(m, "", "lnf.weight", &k->lnf_w, &k->dlnf_w);
	bind(m, "", "lnf.bias", &k->lnf_b, &k->dlnf_b);
	return 0;
}

int
nn_model_load(struct nn_model *m, const struct tensor_set *s, char *err,
    size_t errlen)
{
	struct expect_list l = { 0 };
	const char *arch = tensor_set_meta(s, "collx.arch");
	int rc = -1;

	memset(m, 0, sizeof(*m));
	if (!arch) {
		fail(err, errlen, "model has no __metadata__ 'collx.arch'");
		goto out;
	}
	if (nn_arch_parse(arch, &m->dims.arch) < 0) {
		fail(err, errlen, "unknown collx.arch '%s' (expected mlp, "
		    "block or gpt)", arch);
		goto out;
	}
	if ((m->dims.arch == NN_MLP ? dims_mlp(s, &m->dims, err, errlen) :
	    m->dims.arch == NN_BLOCK ? dims_block(s, &m->dims, err, errlen) :
	    dims_gpt(s, &m->dims, err, errlen)) < 0)
		goto out;
	if (expect_model(&l, &m->dims) < 0) {
		fail(err, errlen, "out of memory");
		goto out;
	}
	if (check_tensors(s, &l, arch, err, errlen) < 0 ||
	    fill_params(m, s, err, errlen) < 0 ||
	    copy_meta(m, s, err, errlen) < 0 ||
	    bind_all(m, err, errlen) < 0)
		goto out;
	rc = 0;
out:
	free(l.e);
	if (rc < 0)
		nn_model_free(m);
	return rc;
}

void
nn_model_free(struct nn_model *m)
{
	if (m->work) {
		free(m->work->w);
		free(m->work->g);
		free(m->work->buf);
		free(m->work->tok);
		free(m->work);
	}
	for (size_t i = 0; i < m->nmeta; i++) {
		free(m->meta[i].key);
		free(m->meta[i].value);
	}
	free(m->meta);
	free(m->table);
	free(m->params);
	free(m->grads);
	memset(m, 0, sizeof(*m));
}

int
nn_model_to_set(const struct nn_model *m, struct tensor_set *out, char *err,
    size_t errlen)
{
	memset(out, 0, sizeof(*out));
	out->format = TENSOR_SAFETENSORS;
	for (size_t i = 0; i < m->ntensors; i++) {
		const struct nn_param *p = &m->table[i];
		struct tensor t = { 0 };
		if (tensor_init(&t, DT_F32, p->ndim, p->shape, err, errlen) < 0)
			goto fail;
		memcpy(t.data, m->params + p->offset, p->count * sizeof(float));
		if (tensor_set_add(out, p->name, &t, err, errlen) < 0) {
			tensor_free(&t);
			goto fail;
		}
	}
	for (size_t i = 0; i < m->nmeta; i++)
		if (tensor_set_meta_put(out, m->meta[i].key, m->meta[i].value,
		    err, errlen) < 0)
			goto fail;
	return 0;
fail:
	tensor_set_free(out);
	return -1;
}

void
nn_model_zero_grad(struct nn_model *m)
{
	memset(m->grads, 0, m->nparams * sizeof(float));
}

/* ---- forward and backward over a batch ------------------------------- */

static float *
work_reserve(struct nn_work *k, size_t floats)
{
	if (floats > k->cap) {
		float *b = realloc(k->buf, floats * sizeof(float));
		if (!b)
			return NULL;
		k->buf = b, k->cap = floats;
	}
	return k->buf;
}

/* mlp: y = fc2(gelu(fc1(x))), per-sample loss mean over d_out. */
static int
run_mlp(struct nn_model *m, const struct nn_batch *b, int grad,
    double *loss, char *err, size_t errlen)
{
	const struct nn_dims *d = &m->dims;
	const struct nn_block_w *w = m->work->w, *g = m->work->g;
	size_t nh = (size_t)b->n * d->d_hidden, no = (size_t)b->n * d->d_out;
	float *fc1 = work_reserve(m->work, 4 * nh + 2 * no);

	if (!fc1)
		return fail(err, errlen, "out of memory for a batch of %d", b->n);
	float *gelu = fc1 + nh, *y = gelu + nh, *dy = y + no;
	float *dgelu = dy + no, *dfc1 = dgelu + nh;
	nn_linear_forward(fc1, b->x, w->fc1_w, w->fc1_b, b->n, d->d_in,
	    d->d_hidden);
	nn_gelu_forward(gelu, fc1, nh);
	nn_linear_forward(y, gelu, w->fc2_w, w->fc2_b, b->n, d->d_hidden,
	    d->d_out);
	*loss = nn_sqerr_forward(y, b->y, no) / d->d_out;
	if (!grad)
		return 0;
	memset(dy, 0, (no + 2 * nh) * sizeof(float));
	nn_sqerr_backward(dy, y, b->y, 1.0f / d->d_out, no);
	nn_linear_backward(dgelu, g->fc2_w, g->fc2_b, dy, gelu, w->fc2_w,
	    b->n, d->d_hidden, d->d_out);
	nn_gelu_backward(dfc1, fc1, dgelu, nh);
	nn_linear_backward(NULL, g->fc1_w, g->fc1_b, dfc1, b->x, w->fc1_w,
	    b->n, d->d_in, d->d_hidden);
	return 0;
}

/* block: per-sample loss mean over seq*d_model. */
static int
run_block(struct nn_model *m, const struct nn_batch *b, int grad,
    double *loss, char *err, size_t errlen)
{
	const struct nn_dims *d = &m->dims;
	int n = b->n, s = b->seq, D = d->d_model, H = d->heads, F = d->d_ff;
	size_t nd = (size_t)n * s * D, na = nn_block_acts_size(n, s, D, H, F);
	float *buf = work_reserve(m->work, na + 2 * nd +
	    nn_block_scratch_size(n, s, D, H, F));
	struct nn_block_acts a;

	if (!buf)
		return fail(err, errlen, "out of memory for a batch of %d", n);
	float *y = buf + na, *dy = y + nd, *scratch = dy + nd;
	nn_block_acts_bind(&a, buf, n, s, D, H, F);
	nn_block_forward(y, &a, m->work->w, b->x, n, s, D, H, F, d->causal);
	*loss = nn_sqerr_forward(y, b->y, nd) / ((double)s * D);
	if (!grad)
		return 0;
	memset(dy, 0, nd * sizeof(float));
	nn_sqerr_backward(dy, y, b->y, 1.0f / ((float)s * D), nd);
	nn_block_backward(NULL, m->work->g, scratch, dy, &a, m->work->w, b->x,
	    n, s, D, H, F, d->causal);
	return 0;
}

/* Splits the token windows into inputs and targets, checking the range. */
static int32_t *
gpt_tokens(struct nn_model *m, const struct nn_batch *b, char *err,
    size_t errlen)
{
	struct nn_work *k = m->work;
	int S = m->dims.seq;
	size_t need = 2 * (size_t)b->n * S;

	if (need > k->tokcap) {
		int32_t *t = realloc(k->tok, need * sizeof(*t));
		if (!t) {
			fail(err, errlen, "out of memory for a batch of %d", b->n);
			return NULL;
		}
		k->tok = t, k->tokcap = need;
	}
	for (int i = 0; i < b->n; i++)
		for (int j = 0; j <= S; j++) {
			int32_t t = b->tokens[(size_t)i * (S + 1) + j];
			if (t < 0 || t >= m->dims.vocab) {
				fail(err, errlen, "token %d at sample %d position "
				    "%d is outside the vocabulary [0, %d)",
				    (int)t, i, j, m->dims.vocab);
				return NULL;
			}
			if (j < S)
				k->tok[(size_t)i * S + j] = t;
			if (j > 0)
				k->tok[(size_t)(b->n + i) * S + j - 1] = t;
		}
	return k->tok;
}

/* Buffers of one gpt pass over N = n*seq rows. */
struct gpt_bufs {
	float *x;		/* (layers+1) x [N,D]: embedding, block outputs */
	float *acts;		/* layers x nn_block_acts_size */
	float *xf, *mean, *rstd, *logits, *dlogits, *dxa, *dxb, *scratch;
	size_t na;
};

static int
gpt_bufs(struct nn_model *m, int n, struct gpt_bufs *g)
{
	const struct nn_dims *d = &m->dims;
	int S = d->seq, D = d->d_model, L = d->layers;
	size_t N = (size_t)n * S, nd = N * D, nv = N * d->vocab;

	g->na = nn_block_acts_size(n, S, D, d->heads, d->d_ff);
	float *p = work_reserve(m->work, (L + 4) * nd + L * g->na + 2 * N +
	    2 * nv + nn_block_scratch_size(n, S, D, d->heads, d->d_ff));
	if (!p)
		return -1;
	g->x = p, p += (L + 1) * nd;
	g->acts = p, p += L * g->na;
	g->xf = p, p += nd;
	g->mean = p, p += N;
	g->rstd = p, p += N;
	g->logits = p, p += nv;
	g->dlogits = p, p += nv;
	g->dxa = p, p += nd;
	g->dxb = p, p += nd;
	g->scratch = p;
	return 0;
}

static void
gpt_backward(struct nn_model *m, struct gpt_bufs *g, struct nn_block_acts *a,
    const int32_t *in, const int32_t *tgt, int n)
{
	const struct nn_dims *d = &m->dims;
	struct nn_work *k = m->work;
	int S = d->seq, D = d->d_model, N = n * S;
	size_t nd = (size_t)N * D;

	memset(g->dlogits, 0, (size_t)N * d->vocab * sizeof(float));
	nn_xent_backward(g->dlogits, g->logits, tgt, 1.0f / S, N, d->vocab);
	memset(g->dxa, 0, nd * sizeof(float));
	nn_linear_backward(g->dxa, k->dwte, NULL, g->dlogits, g->xf, k->wte, N,
	    D, d->vocab);
	memset(g->dxb, 0, nd * sizeof(float));
	nn_layernorm_backward(g->dxb, k->dlnf_w, k->dlnf_b, g->dxa,
	    g->x + d->layers * nd, k->lnf_w, g->mean, g->rstd, N, D);
	for (int l = d->layers - 1; l >= 0; l--) {
		float *dy = (d->layers - l) % 2 ? g->dxb : g->dxa;
		float *dx = dy == g->dxa ? g->dxb : g->dxa;
		memset(dx, 0, nd * sizeof(float));
		nn_block_backward(dx, &k->g[l], g->scratch, dy, &a[l], &k->w[l],
		    g->x + l * nd, n, S, D, d->heads, d->d_ff, 1);
		if (l == 0)
			nn_embedding_backward(k->dwte, k->dwpe, dx, in, n, S, D);
	}
}

/* gpt: per-sample loss the mean cross-entropy over seq positions. */
static int
run_gpt(struct nn_model *m, const struct nn_batch *b, int grad,
    double *loss, char *err, size_t errlen)
{
	const struct nn_dims *d = &m->dims;
	struct nn_work *k = m->work;
	int n = b->n, S = d->seq, D = d->d_model, N = n * S;
	size_t nd = (size_t)N * D;
	struct nn_block_acts *a = NULL;
	struct gpt_bufs g;

	if (b->seq && b->seq != S)
		return fail(err, errlen, "batch seq %d differs from the model's "
		    "%d", b->seq, S);
	int32_t *in = gpt_tokens(m, b, err, errlen);
	if (!in)
		return -1;
	if (gpt_bufs(m, n, &g) < 0 || !(a = calloc(d->layers, sizeof(*a))))
		return fail(err, errlen, "out of memory for a batch of %d", n);
	nn_embedding_forward(g.x, in, k->wte, k->wpe, n, S, D);
	for (int l = 0; l < d->layers; l++) {
		nn_block_acts_bind(&a[l], g.acts + l * g.na, n, S, D, d->heads,
		    d->d_ff);
		nn_block_forward(g.x + (l + 1) * nd, &a[l], &k->w[l],
		    g.x + l * nd, n, S, D, d->heads, d->d_ff, 1);
	}
	nn_layernorm_forward(g.xf, g.mean, g.rstd, g.x + d->layers * nd,
	    k->lnf_w, k->lnf_b, N, D);
	nn_linear_forward(g.logits, g.xf, k->wte, NULL, N, D, d->vocab);
	*loss = nn_xent_forward(g.logits, g.logits, in + N, N, d->vocab) / S;
	if (grad)
		gpt_backward(m, &g, a, in, in + N, n);
	free(a);
	return 0;
}

static int
run(struct nn_model *m, const struct nn_batch *b, int grad, double *loss,
    char *err, size_t errlen)
{
	*loss = 0.0;
	if (b->n < 0 || (m->dims.arch == NN_BLOCK && b->seq < 1))
		return fail(err, errlen, "bad batch: %d samples of length %d",
		    b->n, b->seq);
	if (b->n == 0)
		return 0;
	if (m->dims.arch == NN_MLP)
		return run_mlp(m, b, grad, loss, err, errlen);
	if (m->dims.arch == NN_BLOCK)
		return run_block(m, b, grad, loss, err, errlen);
	return run_gpt(m, b, grad, loss, err, errlen);
}

int
nn_model_step(struct nn_model *m, const struct nn_batch *b, double *loss_sum,
    char *err, size_t errlen)
{
	return run(m, b, 1, loss_sum, err, errlen);
}

int
nn_model_loss(struct nn_model *m, const struct nn_batch *b, double *loss_sum,
    char *err, size_t errlen)
{
	return run(m, b, 0, loss_sum, err, errlen);
}

/* ---- fresh models ---------------------------------------------------- */

static int
ends_with(const char *s, const char *tail)
{
	size_t a = strlen(s), b = strlen(tail);

	return a >= b && !strcmp(s + a - b, tail);
}

/* GPT-2 initialisation of one tensor, chosen by its name; normals from
 * the portable generator of collx-tensor create --fill randn. */
static void
init_tensor(struct tensor *t, const char *name, const struct nn_dims *d,
    struct tensor_rng *r)
{
	float *p = t->data;
	size_t n = (size_t)tensor_numel(t);
	double std = 0.02;

	if (ends_with(name, ".bias"))
		return;		/* tensor_init zeroed it */
	if (!strncmp(name, "ln", 2) || strstr(name, ".ln")) {
		for (size_t i = 0; i < n; i++)
			p[i] = 1.0f;
		return;
	}
	if (d->arch != NN_MLP && (ends_with(name, "attn.o.weight") ||
	    ends_with(name, "mlp.fc2.weight")))
		std /= sqrt(2.0 * (d->arch == NN_GPT ? d->layers : 1));
	for (size_t i = 0; i < n; i += 2) {
		double z[2];
		tensor_rng_normal2(r, z);
		p[i] = (float)(std * z[0]);
		if (i + 1 < n)
			p[i + 1] = (float)(std * z[1]);
	}
}

static int
dims_valid(const struct nn_dims *d, char *err, size_t errlen)
{
	if (d->arch == NN_MLP)
		return d->d_in > 0 && d->d_hidden > 0 && d->d_out > 0 ? 0 :
		    fail(err, errlen, "mlp sizes must be positive");
	if (d->d_model < 1 || d->heads < 1 || d->d_model % d->heads ||
	    d->d_ff < 0 || d->causal < 0 || d->causal > 1)
		return fail(err, errlen, "d_model %d, heads %d, d_ff %d: need "
		    "positive sizes with heads dividing d_model", d->d_model,
		    d->heads, d->d_ff);
	if (d->arch == NN_GPT && (d->vocab < 1 || d->seq < 1 || d->layers < 1))
		return fail(err, errlen, "gpt vocab, seq and layers must be "
		    "positive");
	return 0;
}

static int
init_meta(struct tensor_set *out, const struct nn_dims *d, char *err,
    size_t errlen)
{
	char v[32];

	if (tensor_set_meta_put(out, "collx.arch", nn_arch_name(d->arch), err,
	    errlen) < 0)
		return -1;
	if (d->arch == NN_MLP)
		return 0;
	snprintf(v, sizeof(v), "%d", d->heads);
	if (tensor_set_meta_put(out, "heads", v, err, errlen) < 0)
		return -1;
	if (d->arch == NN_GPT)
		return 0;
	return tensor_set_meta_put(out, "causal", d->causal ? "1" : "0", err,
	    errlen);
}

int
nn_init(struct tensor_set *out, const struct nn_dims *dims, uint64_t seed,
    char *err, size_t errlen)
{
	struct nn_dims d = *dims;
	struct expect_list l = { 0 };
	struct tensor_rng r;

	tensor_rng_seed(&r, seed);
	memset(out, 0, sizeof(*out));
	out->format = TENSOR_SAFETENSORS;
	if (d.arch != NN_MLP && d.d_ff == 0)
		d.d_ff = 4 * d.d_model;
	if (dims_valid(&d, err, errlen) < 0)
		return -1;
	if (expect_model(&l, &d) < 0) {
		fail(err, errlen, "out of memory");
		goto fail;
	}
	for (size_t i = 0; i < l.n; i++) {
		struct tensor t = { 0 };
		if (tensor_init(&t, DT_F32, l.e[i].ndim, l.e[i].shape, err,
		    errlen) < 0)
			goto fail;
		init_tensor(&t, l.e[i].name, &d, &r);
		if (tensor_set_add(out, l.e[i].name, &t, err, errlen) < 0) {
			tensor_free(&t);
			goto fail;
		}
	}
	if (init_meta(out, &d, err, errlen) < 0)
		goto fail;
	free(l.e);
	return 0;
fail:
	free(l.e);
	tensor_set_free(out);
	return -1;
}

static const char *arch_names[] = { "mlp", "block", "gpt" };

int
nn_arch_parse(const char *s, enum nn_arch *out)
{
	for (int i = 0; i < 3; i++)
		if (!strcmp(s, arch_names[i])) {
			*out = (enum nn_arch)i;
			return 0;
		}
	return -1;
}

const char *
nn_arch_name(enum nn_arch a)
{
	return (unsigned)a < 3 ? arch_names[a] : "?";
}

int
nn_dims_parse(const char *s, enum nn_arch arch, struct nn_dims *out,
    char *err, size_t errlen)
{
	static const char *forms[] = { "DIN,H,DOUT", "D,HEADS[,FF[,CAUSAL]]",
		"VOCAB,D,LAYERS,HEADS,SEQ[,FF]" };
	static const int need[] = { 3, 2, 5 }, most[] = { 3, 4, 6 };
	long v[6] = { 0 };
	int n = 0, bad = 0;
	const char *p = s;
	char *end;

	for (;;) {
		errno = 0;
		v[n] = strtol(p, &end, 10);
		bad = errno || end == p || v[n] < 0 || v[n] > (1L << 30);
		if (bad || ++n == 6 || *end != ',')
			break;
		p = end + 1;
	}
	if (bad || n < need[arch] || n > most[arch] || *end)
		return fail(err, errlen, "bad --dims '%s' for %s: expected %s", s,
		    nn_arch_name(arch), forms[arch]);
	memset(out, 0, sizeof(*out));
	out->arch = arch;
	if (arch == NN_MLP)
		out->d_in = v[0], out->d_hidden = v[1], out->d_out = v[2];
	else if (arch == NN_BLOCK)
		out->d_model = v[0], out->heads = v[1], out->d_ff = v[2],
		out->causal = v[3];
	else
		out->vocab = v[0], out->d_model = v[1], out->layers = v[2],
		out->heads = v[3], out->seq = v[4], out->d_ff = v[5];
	if (out->arch != NN_MLP && out->d_ff == 0)
		out->d_ff = 4 * out->d_model;
	return dims_valid(out, err, errlen);
}
