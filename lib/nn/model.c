/* model: the built-in models over one contiguous parameter buffer, loaded
 * from and written back to safetensors collections. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/nn.h"
#include "nn/model_int.h"
#include "tensor/rng.h"

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
		return cli_fail(err, errlen, "model has no tensor '%s'", name);
	if (t->ndim != ndim)
		return cli_fail(err, errlen, "tensor '%s' has %d dimensions, "
		    "expected %d", name, t->ndim, ndim);
	for (int i = 0; i < ndim; i++) {
		if (t->shape[i] <= 0 || t->shape[i] > (1 << 30))
			return cli_fail(err, errlen, "tensor '%s' has an unusable "
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
			return cli_fail(err, errlen, "__metadata__ has no '%s'", key);
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
		return cli_fail(err, errlen, "__metadata__ '%s' is not a valid "
		    "count: '%s'", key, v);
	*out = (int)x;
	return 0;
}

/* "layers.I." for a stack or gpt, "" for a single unprefixed layer. */
static const char *
layer_prefix(char *buf, size_t len, const struct nn_dims *d, int i)
{
	if (d->arch != NN_GPT && d->layers == 0)
		buf[0] = '\0';
	else
		snprintf(buf, len, "layers.%d.", i);
	return buf;
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

/* The shape of prefix+name in layer 0 of the model. */
static int
layer0_shape(const struct tensor_set *s, const struct nn_dims *d,
    const char *name, int ndim, int64_t *shape, char *err, size_t errlen)
{
	char full[NN_NAME_MAX], prefix[NN_NAME_MAX];

	snprintf(full, sizeof(full), "%s%s", layer_prefix(prefix,
	    sizeof(prefix), d, 0), name);
	return key_shape(s, full, ndim, shape, err, errlen);
}

static int
dims_mlp(const struct tensor_set *s, struct nn_dims *d, char *err,
    size_t errlen)
{
	int64_t a[2], b[2];

	d->layers = count_layers(s);
	if (layer0_shape(s, d, "fc1.weight", 2, a, err, errlen) < 0 ||
	    layer0_shape(s, d, "fc2.weight", 2, b, err, errlen) < 0)
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
		return cli_fail(err, errlen, "heads %d does not divide d_model %d",
		    d->heads, d->d_model);
	return 0;
}

static int
dims_block(const struct tensor_set *s, struct nn_dims *d, char *err,
    size_t errlen)
{
	int64_t ln[1], fc1[2];

	d->layers = count_layers(s);
	if (layer0_shape(s, d, "ln1.weight", 1, ln, err, errlen) < 0 ||
	    layer0_shape(s, d, "mlp.fc1.weight", 2, fc1, err, errlen) < 0)
		return -1;
	d->d_model = (int)ln[0], d->d_ff = (int)fc1[0];
	if (heads_check(d, s, err, errlen) < 0 ||
	    meta_int(s, "causal", 0, &d->causal, err, errlen) < 0)
		return -1;
	if (d->causal > 1)
		return cli_fail(err, errlen, "__metadata__ 'causal' must be 0 or 1");
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
		return cli_fail(err, errlen, "gpt model has no layers.N.* tensors");
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
	char p[NN_NAME_MAX];
	int n = d->layers > 0 ? d->layers : 1;

	if (d->arch == NN_GPT && (expect_add(l, "", "wte", d->vocab,
	    d->d_model, 0) < 0 || expect_add(l, "", "wpe", d->seq, d->d_model,
	    0) < 0 || expect_layernorm(l, "", "lnf", d->d_model) < 0))
		return -1;
	for (int i = 0; i < n; i++) {
		layer_prefix(p, sizeof(p), d, i);
		if (d->arch != NN_MLP) {
			if (expect_block(l, p, d->d_model, d->d_ff) < 0)
				return -1;
			continue;
		}
		if (expect_linear(l, p, "fc1", d->d_hidden, i ? d->d_out :
		    d->d_in) < 0 || expect_linear(l, p, "fc2", d->d_out,
		    d->d_hidden) < 0)
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
			return cli_fail(err, errlen, "unexpected tensor '%s' for "
			    "arch %s", t->name ? t->name : "(unnamed)", arch);
		if (!dtype_is_float(t->dtype))
			return cli_fail(err, errlen, "tensor '%s' has dtype %s, "
			    "expected a float type", t->name,
			    dtype_name(t->dtype));
		int ok = t->ndim == e->ndim && t->shape[0] == e->shape[0] &&
		    (e->ndim == 1 || t->shape[1] == e->shape[1]);
		if (!ok && e->ndim == 1)
			return cli_fail(err, errlen, "tensor '%s' has shape %s, "
			    "expected [%lld]", t->name,
			    tensor_shape_str(t, got, sizeof(got)),
			    (long long)e->shape[0]);
		if (!ok)
			return cli_fail(err, errlen, "tensor '%s' has shape %s, "
			    "expected [%lld, %lld]", t->name,
			    tensor_shape_str(t, got, sizeof(got)),
			    (long long)e->shape[0], (long long)e->shape[1]);
	}
	for (size_t i = 0; i < l->n; i++)
		if (!l->e[i].optional && !tensor_set_find(s, l->e[i].name))
			return cli_fail(err, errlen, "model has no tensor '%s'",
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
		return cli_fail(err, errlen, "out of memory");
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
		return cli_fail(err, errlen, "out of memory for %zu parameters",
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
		return cli_fail(err, errlen, "out of memory");
	for (size_t i = 0; i < s->nmeta; i++) {
		m->meta[i].key = strdup(s->meta[i].key);
		m->meta[i].value = strdup(s->meta[i].value);
		m->nmeta = i + 1;
		if (!m->meta[i].key || !m->meta[i].value)
			return cli_fail(err, errlen, "out of memory");
	}
	return 0;
}

int
nn_model_mlp(const struct nn_model *m, int i, struct nn_mlp_w *w,
    struct nn_mlp_w *g)
{
	if (!m->work || !m->work->mw || i < 0 || i >= m->work->nlayers)
		return -1;
	*w = m->work->mw[i];
	*g = m->work->mg[i];
	return 0;
}

int
nn_model_block(const struct nn_model *m, int i, struct nn_block_w *w,
    struct nn_block_w *g)
{
	if (!m->work || !m->work->w || i < 0 || i >= m->work->nlayers)
		return -1;
	*w = m->work->w[i];
	*g = m->work->g[i];
	return 0;
}

int
nn_model_grad_stages(const struct nn_model *m)
{
	int L = m->dims.layers > 0 ? m->dims.layers : 1;

	if (m->dims.arch == NN_MLP)
		return L;
	return m->dims.arch == NN_GPT ? 2 * L + 2 : 2 * L;
}

/* Layer N of "layers.N.*" (0 for an unprefixed layer) runs backward after
 * every layer above it, a block's feed-forward part (mlp.*) before the
 * rest; gpt's head before the blocks, embeddings after. */
int
nn_model_grad_stage(const struct nn_model *m, size_t i)
{
	const char *name = m->table[i].name, *dot;
	int L = m->dims.layers > 0 ? m->dims.layers : 1, n = 0;

	if (strncmp(name, "layers.", 7) == 0) {
		n = atoi(name + 7);
		dot = strchr(name + 7, '.');
		name = dot ? dot + 1 : name;
	} else if (m->dims.arch == NN_GPT)
		return strncmp(name, "lnf.", 4) == 0 ? 0 : 2 * L + 1;
	if (m->dims.arch == NN_MLP)
		return L - 1 - n;
	n = 2 * (L - 1 - n) + (strncmp(name, "mlp.", 4) != 0);
	return m->dims.arch == NN_GPT ? n + 1 : n;
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
	char p[NN_NAME_MAX];

	if (!k)
		return cli_fail(err, errlen, "out of memory");
	m->work = k;
	k->nlayers = m->dims.layers > 0 ? m->dims.layers : 1;
	if (m->dims.arch == NN_MLP) {
		k->mw = calloc(k->nlayers, sizeof(*k->mw));
		k->mg = calloc(k->nlayers, sizeof(*k->mg));
		if (!k->mw || !k->mg)
			return cli_fail(err, errlen, "out of memory");
		for (int i = 0; i < k->nlayers; i++) {
			layer_prefix(p, sizeof(p), &m->dims, i);
			bind(m, p, "fc1.weight", &k->mw[i].fc1_w, &k->mg[i].fc1_w);
			bind(m, p, "fc1.bias", &k->mw[i].fc1_b, &k->mg[i].fc1_b);
			bind(m, p, "fc2.weight", &k->mw[i].fc2_w, &k->mg[i].fc2_w);
			bind(m, p, "fc2.bias", &k->mw[i].fc2_b, &k->mg[i].fc2_b);
		}
		return 0;
	}
	k->w = calloc(k->nlayers, sizeof(*k->w));
	k->g = calloc(k->nlayers, sizeof(*k->g));
	if (!k->w || !k->g)
		return cli_fail(err, errlen, "out of memory");
	for (int i = 0; i < k->nlayers; i++)
		bind_block(m, layer_prefix(p, sizeof(p), &m->dims, i), &k->w[i],
		    &k->g[i]);
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
		cli_fail(err, errlen, "model has no __metadata__ 'collx.arch'");
		goto out;
	}
	if (nn_arch_parse(arch, &m->dims.arch) < 0) {
		cli_fail(err, errlen, "unknown collx.arch '%s' (expected mlp, "
		    "block or gpt)", arch);
		goto out;
	}
	if ((m->dims.arch == NN_MLP ? dims_mlp(s, &m->dims, err, errlen) :
	    m->dims.arch == NN_BLOCK ? dims_block(s, &m->dims, err, errlen) :
	    dims_gpt(s, &m->dims, err, errlen)) < 0)
		goto out;
	if (expect_model(&l, &m->dims) < 0) {
		cli_fail(err, errlen, "out of memory");
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
		free(m->work->mw);
		free(m->work->mg);
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
		std /= sqrt(2.0 * (d->layers > 0 ? d->layers : 1));
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
	if (d->layers < 0 || d->layers > 100000)
		return cli_fail(err, errlen, "bad layer count %d", d->layers);
	if (d->arch == NN_MLP)
		return d->d_in > 0 && d->d_hidden > 0 && d->d_out > 0 ? 0 :
		    cli_fail(err, errlen, "mlp sizes must be positive");
	if (d->d_model < 1 || d->heads < 1 || d->d_model % d->heads ||
	    d->d_ff < 0 || d->causal < 0 || d->causal > 1)
		return cli_fail(err, errlen, "d_model %d, heads %d, d_ff %d: need "
		    "positive sizes with heads dividing d_model", d->d_model,
		    d->heads, d->d_ff);
	if (d->arch == NN_GPT && (d->vocab < 1 || d->seq < 1 || d->layers < 1))
		return cli_fail(err, errlen, "gpt vocab, seq and layers must be "
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
		cli_fail(err, errlen, "out of memory");
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
	static const char *forms[] = { "DIN,H,DOUT[,LAYERS]",
		"D,HEADS[,FF[,CAUSAL[,LAYERS]]]", "VOCAB,D,LAYERS,HEADS,SEQ[,FF]" };
	static const int need[] = { 3, 2, 5 }, most[] = { 4, 5, 6 };
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
		return cli_fail(err, errlen, "bad --dims '%s' for %s: expected %s", s,
		    nn_arch_name(arch), forms[arch]);
	memset(out, 0, sizeof(*out));
	out->arch = arch;
	if (arch == NN_MLP)
		out->d_in = v[0], out->d_hidden = v[1], out->d_out = v[2],
		out->layers = v[3];
	else if (arch == NN_BLOCK)
		out->d_model = v[0], out->heads = v[1], out->d_ff = v[2],
		out->causal = v[3], out->layers = v[4];
	else
		out->vocab = v[0], out->d_model = v[1], out->layers = v[2],
		out->heads = v[3], out->seq = v[4], out->d_ff = v[5];
	/* The default FF, 4*D, must itself be an int (fuzz_options found
	 * "816999999,2" overflowing it). */
	if (out->arch != NN_MLP && out->d_ff == 0 && out->d_model > INT_MAX / 4)
		return cli_fail(err, errlen, "d_model %d is too large for the default "
		    "d_ff of 4*d_model", out->d_model);
	if (out->arch != NN_MLP && out->d_ff == 0)
		out->d_ff = 4 * out->d_model;
	return dims_valid(out, err, errlen);
}
