/* tp_model: the layers' weight tables, their shapes and how each tensor is
 * split over ranks, and loading this rank's shards. */
#include <stdlib.h>
#include <string.h>

#include "cli/util.h"
#include "par/tp_int.h"

static const char *const layer_names[] = { "column", "row", "mlp", "block" };
static const char *const mode_names[] = { "tp", "ulysses", "serial",
    "ring", "zigzag", "usp", "sp" };

int
tp_layer_parse(const char *s, enum tp_layer *out)
{
	int i = cli_name_index(layer_names, 4, s);

	return i < 0 ? -1 : (*out = (enum tp_layer)i, 0);
}

const char *
tp_layer_name(enum tp_layer l)
{
	return layer_names[l];
}

int
tp_mode_parse(const char *s, enum tp_mode *out)
{
	int i = cli_name_index(mode_names, 7, s);

	return i < 0 ? -1 : (*out = (enum tp_mode)i, 0);
}

const char *
tp_mode_name(enum tp_mode m)
{
	return mode_names[m];
}

/* ---- weights ------------------------------------------------------------ */

/* Sizes the shapes are written in. */
enum sym { S_IN, S_OUT, S_H, S_D, S_F, S_E, S_ONE };

struct pdef {
	const char *name;
	enum tp_split split;
	int ndim;
	enum sym dim[2];
};

static const struct pdef column_defs[] = {
	{ "weight", TP_ROWS, 2, { S_OUT, S_IN } },
	{ "bias", TP_ROWS, 1, { S_OUT, S_ONE } },
};
static const struct pdef row_defs[] = {
	{ "weight", TP_COLS, 2, { S_OUT, S_IN } },
	{ "bias", TP_WHOLE, 1, { S_OUT, S_ONE } },
};
static const struct pdef mlp_defs[] = {
	{ "fc1.weight", TP_ROWS, 2, { S_H, S_IN } },
	{ "fc1.bias", TP_ROWS, 1, { S_H, S_ONE } },
	{ "fc2.weight", TP_COLS, 2, { S_OUT, S_H } },
	{ "fc2.bias", TP_WHOLE, 1, { S_OUT, S_ONE } },
};
/* In struct nn_block_w's order. */
static const struct pdef block_defs[] = {
	{ "ln1.weight", TP_WHOLE, 1, { S_D, S_ONE } },
	{ "ln1.bias", TP_WHOLE, 1, { S_D, S_ONE } },
	{ "attn.q.weight", TP_ROWS, 2, { S_D, S_D } },
	{ "attn.q.bias", TP_ROWS, 1, { S_D, S_ONE } },
	{ "attn.k.weight", TP_ROWS, 2, { S_D, S_D } },
	{ "attn.k.bias", TP_ROWS, 1, { S_D, S_ONE } },
	{ "attn.v.weight", TP_ROWS, 2, { S_D, S_D } },
	{ "attn.v.bias", TP_ROWS, 1, { S_D, S_ONE } },
	{ "attn.o.weight", TP_COLS, 2, { S_D, S_D } },
	{ "attn.o.bias", TP_WHOLE, 1, { S_D, S_ONE } },
	{ "ln2.weight", TP_WHOLE, 1, { S_D, S_ONE } },
	{ "ln2.bias", TP_WHOLE, 1, { S_D, S_ONE } },
	{ "mlp.fc1.weight", TP_ROWS, 2, { S_F, S_D } },
	{ "mlp.fc1.bias", TP_ROWS, 1, { S_F, S_ONE } },
	{ "mlp.fc2.weight", TP_COLS, 2, { S_D, S_F } },
	{ "mlp.fc2.bias", TP_WHOLE, 1, { S_D, S_ONE } },
};

static const struct pdef *
layer_defs(enum tp_layer l, int *n)
{
	switch (l) {
	case TP_COLUMN: *n = 2; return column_defs;
	case TP_ROW: *n = 2; return row_defs;
	case TP_MLP: *n = 4; return mlp_defs;
	default: *n = 16; return block_defs;
	}
}

static int
is_bias(const char *name)
{
	size_t n = strlen(name);

	return n >= 4 && strcmp(name + n - 4, "bias") == 0;
}

/* The sizes, from the layer's key weights. */
static int
read_sizes(struct tp_model *m, const struct tensor_set *s, int64_t *sz,
    char *err, size_t errlen)
{
	static const char *key[4][2] = { { "weight", NULL },
	    { "weight", NULL }, { "fc1.weight", "fc2.weight" },
	    { "attn.q.weight", "mlp.fc1.weight" } };
	const char *const *k = key[m->cfg.layer];
	struct tensor *a = tensor_set_find(s, k[0]);
	struct tensor *b = k[1] ? tensor_set_find(s, k[1]) : NULL;
	struct tensor *r = m->cfg.layer == TP_BLOCK ?
	    tensor_set_find(s, "mlp.router.weight") : NULL;

	if (r != NULL) {	/* an MoE: f from expert 0 */
		static const char *const moe_key[2] = { "attn.q.weight",
		    "mlp.experts.0.fc1.weight" };
		k = moe_key;
		b = tensor_set_find(s, k[1]);
		if (r->ndim != 2 || r->shape[0] < 1 || r->shape[0] > TP_MOE_MAX)
			return cli_fail(err, errlen, "mlp.router.weight: %lld "
			    "experts, a pipeline stage's block takes 1 to %d",
			    r->ndim == 2 ? (long long)r->shape[0] : 0LL,
			    TP_MOE_MAX);
		sz[S_E] = r->shape[0];
	}

	if (a == NULL || a->ndim != 2 || (k[1] && (b == NULL || b->ndim != 2)))
		return cli_fail(err, errlen, "no 2-D tensor '%s' (not a %s "
		    "layer)", a == NULL || a->ndim != 2 ? k[0] : k[1],
		    tp_layer_name(m->cfg.layer));
	sz[S_ONE] = 1;
	switch (m->cfg.layer) {
	case TP_COLUMN:
	case TP_ROW:
		sz[S_OUT] = a->shape[0], sz[S_IN] = a->shape[1];
		break;
	case TP_MLP:
		sz[S_H] = a->shape[0], sz[S_IN] = a->shape[1];
		sz[S_OUT] = b->shape[0];
		break;
	case TP_BLOCK:
		sz[S_D] = a->shape[0], sz[S_F] = b->shape[0];
		break;
	}
	return 0;
}

/* heads and causal for a block: options over metadata. */
static int
block_meta(struct tp_model *m, const struct tensor_set *s, char *err,
    size_t errlen)
{
	const char *h = tensor_set_meta(s, "heads");
	const char *c = tensor_set_meta(s, "causal");
	char *end;

	m->heads = m->cfg.heads;
	if (m->heads <= 0 && h != NULL) {
		long v = strtol(h, &end, 10);
		if (*h == '\0' || *end != '\0' || v < 1 || v > 1 << 20)
			return cli_fail(err, errlen, "__metadata__ heads '%s' "
			    "is not a positive integer", h);
		m->heads = (int)v;
	}
	if (m->heads <= 0)
		return cli_fail(err, errlen, "block: give --heads (no "
		    "__metadata__ heads)");
	if (c != NULL && strcmp(c, "1") == 0)
		m->cfg.causal = 1;
	if (m->d % m->heads != 0)
		return cli_fail(err, errlen, "d_model %d is not divisible by "
		    "%d heads", m->d, m->heads);
	return 0;
}

/* Sizes the world must divide. */
static int
check_divisible(const struct tp_model *m, char *err, size_t errlen)
{
	int w = m->world;

	if (m->cfg.overlap && m->cfg.mode != TP_MODE_TP &&
	    m->cfg.mode != TP_MODE_SP)
		return cli_fail(err, errlen, "--overlap ring: mode %s has no "
		    "collective matmul to overlap (tp and sp have)",
		    tp_mode_name(m->cfg.mode));
	if (m->cfg.overlap && m->cfg.layer != TP_BLOCK)
		return cli_fail(err, errlen, "--overlap ring: layer %s has no "
		    "collective matmul to overlap (block has)",
		    tp_layer_name(m->cfg.layer));
	/* ring and zigzag keep every head and weight whole */
	if (m->cfg.mode == TP_MODE_SERIAL || m->cfg.mode == TP_MODE_RING ||
	    m->cfg.mode == TP_MODE_ZIGZAG || w == 1)
		return 0;
	if (m->cfg.mode == TP_MODE_USP) {
		int u = m->cfg.ulysses;
		if (u < 1 || w % u != 0)
			return cli_fail(err, errlen, "--ulysses %d does not "
			    "divide world size %d", u, w);
		if (m->heads % u != 0)
			return cli_fail(err, errlen, "%d heads are not divisible "
			    "by --ulysses %d", m->heads, u);
		return 0;
	}
	if (m->cfg.mode == TP_MODE_ULYSSES) {
		if (m->cfg.layer == TP_BLOCK && m->heads % w != 0)
			return cli_fail(err, errlen, "%d heads are not divisible "
			    "by world size %d", m->heads, w);
		return 0;
	}
	switch (m->cfg.layer) {
	case TP_COLUMN:
		if (m->out % w != 0)
			return cli_fail(err, errlen, "%d output features are not "
			    "divisible by world size %d", m->out, w);
		break;
	case TP_ROW:
		if (m->in % w != 0)
			return cli_fail(err, errlen, "%d input features are not "
			    "divisible by world size %d", m->in, w);
		break;
	case TP_MLP:
		if (m->hidden % w != 0)
			return cli_fail(err, errlen, "%d hidden features are not "
			    "divisible by world size %d", m->hidden, w);
		break;
	case TP_BLOCK:
		if (m->heads % w != 0)
			return cli_fail(err, errlen, "%d heads are not divisible "
			    "by world size %d", m->heads, w);
		if (m->f % w != 0)
			return cli_fail(err, errlen, "%d feed-forward features "
			    "are not divisible by world size %d", m->f, w);
		break;
	}
	return 0;
}

/* An MoE block's tensors: block_defs' before mlp.*, the router, and each
 * expert's as the mlp's (whole: not sharded); names in m->xname. */
static int
moe_defs(struct tp_model *m, struct pdef *dd)
{
	static const char *const part[4] = { "fc1.weight", "fc1.bias",
	    "fc2.weight", "fc2.bias" };
	int n = 12;

	memcpy(dd, block_defs, 12 * sizeof(*dd));
	dd[n++] = (struct pdef){ "mlp.router.weight", TP_WHOLE, 2,
	    { S_E, S_D } };
	for (int e = 0; e < m->experts; e++)
		for (int i = 0; i < 4; i++, n++) {
			snprintf(m->xname[n], sizeof(m->xname[n]),
			    "mlp.experts.%d.%s", e, part[i]);
			dd[n] = block_defs[12 + i];
			dd[n].name = m->xname[n];
			dd[n].split = TP_WHOLE;
		}
	return n;
}

/* Shape checks, local sizes and offsets of every tensor in s. */
static int
layout(struct tp_model *m, const struct tensor_set *s, const int64_t *sz,
    char *err, size_t errlen)
{
	int nd;
	const struct pdef *defs = layer_defs(m->cfg.layer, &nd);
	struct pdef dd[TP_PARAM_MAX];
	size_t off = 0, found = 0;

	m->experts = (int)sz[S_E];
	if (m->experts > 0) {
		nd = moe_defs(m, dd);
		defs = dd;
	}

	for (int i = 0; i < nd; i++) {
		struct tp_param *p = &m->p[i];
		struct tensor *t = tensor_set_find(s, defs[i].name);
		p->name = defs[i].name;
		p->split = m->shards > 1 ? defs[i].split : TP_WHOLE;
		p->ndim = defs[i].ndim;
		p->shape[0] = sz[defs[i].dim[0]];
		p->shape[1] = defs[i].ndim == 2 ? sz[defs[i].dim[1]] : 1;
		if (t == NULL) {
			if (!is_bias(p->name))
				return cli_fail(err, errlen, "no tensor '%s'",
				    p->name);
			continue;
		}
		found++;
		if (t->ndim != p->ndim || t->shape[0] != p->shape[0] ||
		    (p->ndim == 2 && t->shape[1] != p->shape[1])) {
			char buf[64];
			return cli_fail(err, errlen, "tensor '%s' has shape %s, "
			    "want [%lld%s%lld]", p->name,
			    tensor_shape_str(t, buf, sizeof buf),
			    (long long)p->shape[0], p->ndim == 2 ? ", " : "",
			    p->ndim == 2 ? (long long)p->shape[1] : 0LL);
		}
		if (!dtype_is_float(t->dtype))
			return cli_fail(err, errlen, "tensor '%s' is %s, not a "
			    "float type", p->name, dtype_name(t->dtype));
		p->present = 1;
		p->count = (size_t)(p->shape[0] * p->shape[1]);
		if (p->split != TP_WHOLE)
			p->count /= (size_t)m->shards;
		p->off = off;
		off += p->count;
	}
	if (found != s->count)
		for (size_t j = 0; j < s->count; j++) {
			int known = 0;
			for (int i = 0; i < nd; i++)
				known |= strcmp(s->items[j].name ?
				    s->items[j].name : "", defs[i].name) == 0;
			if (!known)
				return cli_fail(err, errlen, "unexpected tensor "
				    "'%s' in a %s layer", s->items[j].name ?
				    s->items[j].name : "(unnamed)",
				    tp_layer_name(m->cfg.layer));
		}
	m->np = nd;
	m->nlocal = off;
	return 0;
}

void
tp_param_take(const struct tp_param *p, int rank, const float *whole,
    float *mine)
{
	size_t rows = (size_t)p->shape[0], cl = p->count / rows;

	if (p->split == TP_COLS)
		tp_cols_take(mine, whole, rows, (size_t)p->shape[1],
		    (size_t)rank * cl, cl);
	else
		memcpy(mine, whole + (p->split == TP_ROWS ? (size_t)rank *
		    p->count : 0), p->count * sizeof(float));
}

/* Copies this rank's shard of each tensor into m->w. */
static int
fill_shards(struct tp_model *m, const struct tensor_set *s, char *err,
    size_t errlen)
{
	for (int i = 0; i < m->np; i++) {
		struct tp_param *p = &m->p[i];
		struct tensor f = { 0 };
		if (!p->present)
			continue;
		if (tensor_cast(tensor_set_find(s, p->name), DT_F32, &f, err,
		    errlen) < 0)
			return -1;
		tp_param_take(p, m->rank, f.data, m->w + p->off);
		tensor_free(&f);
	}
	return 0;
}

int
tp_model_plan(struct tp_model *m, const struct tp_cfg *cfg,
    const struct tensor_set *s, int rank, int world, char *err,
    size_t errlen)
{
	int64_t sz[S_ONE + 1] = { 0 };

	memset(m, 0, sizeof(*m));
	m->cfg = *cfg;
	m->rank = rank;
	m->world = world;
	m->shards = cfg->mode == TP_MODE_TP || cfg->mode == TP_MODE_SP ? world :
	    1;
	if (read_sizes(m, s, sz, err, errlen) < 0)
		return -1;
	m->in = (int)sz[S_IN], m->out = (int)sz[S_OUT];
	m->hidden = (int)sz[S_H];
	m->d = (int)sz[S_D], m->f = (int)sz[S_F];
	if (cfg->layer == TP_BLOCK) {
		m->in = m->out = m->d;
		if (block_meta(m, s, err, errlen) < 0)
			return -1;
	}
	if (check_divisible(m, err, errlen) < 0)
		return -1;
	return layout(m, s, sz, err, errlen);
}

int
tp_model_load(struct tp_model *m, const struct tp_cfg *cfg,
    const struct tensor_set *s, int rank, int world, char *err,
    size_t errlen)
{
	if (tp_model_plan(m, cfg, s, rank, world, err, errlen) < 0)
		return -1;
	/* only a pipeline stage's blocks run experts (tp_stage) */
	if (m->experts > 0)
		return cli_fail(err, errlen, "a block with %d experts "
		    "(mlp.router.weight): collx-tp runs blocks with an mlp",
		    m->experts);
	m->w = calloc(m->nlocal ? m->nlocal : 1, sizeof(float));
	m->g = calloc(m->nlocal ? m->nlocal : 1, sizeof(float));
	if (m->w == NULL || m->g == NULL) {
		tp_model_free(m);
		return cli_fail(err, errlen, "out of memory for %zu parameters",
		    m->nlocal);
	}
	if (fill_shards(m, s, err, errlen) < 0) {
		tp_model_free(m);
		return -1;
	}
	return 0;
}

void
tp_model_free(struct tp_model *m)
{
	free(m->w);
	free(m->g);
	m->w = m->g = NULL;
}

/* dst[r][0..cl) = src[r][c0..c0+cl) for rows of cols floats. */
void
tp_cols_take(float *dst, const float *src, size_t rows, size_t cols, size_t c0,
    size_t cl)
{
	for (size_t r = 0; r < rows; r++)
		memcpy(dst + r * cl, src + r * cols + c0, cl * sizeof(float));
}

void
tp_cols_put(float *dst, const float *src, size_t rows, size_t cols, size_t c0,
    size_t cl)
{
	for (size_t r = 0; r < rows; r++)
		memcpy(dst + r * cols + c0, src + r * cl, cl * sizeof(float));
}
