/* model_bind: views into a model's buffers: a parameter by name, each
 * layer's weight and gradient pointers, and the backward stage that
 * completes each parameter's gradient. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/nn.h"
#include "nn/model_int.h"

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
nn_model_mlp_shape(const struct nn_model *m, int i, struct nn_mlp_shape *s)
{
	if (!m->work || !m->work->ms || i < 0 || i >= m->work->nlayers)
		return -1;
	*s = m->work->ms[i];
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

/* The router and experts of every MoE block, hung on its block's
 * weights and gradients. */
static int
bind_moe(struct nn_model *m, char *err, size_t errlen)
{
	struct nn_work *k = m->work;
	int L = k->nlayers, E = m->dims.moe.experts;
	char p[NN_NAME_MAX], ex[2 * NN_NAME_MAX];

	k->moew = calloc((size_t)L, sizeof(*k->moew));
	k->moeg = calloc((size_t)L, sizeof(*k->moeg));
	k->exw = calloc((size_t)L * E, sizeof(*k->exw));
	k->exg = calloc((size_t)L * E, sizeof(*k->exg));
	if (!k->moew || !k->moeg || !k->exw || !k->exg)
		return cli_fail(err, errlen, "out of memory");
	for (int i = 0; i < L; i++) {
		if (!nn_dims_moe_layer(&m->dims, i))
			continue;
		nn_layer_prefix(p, sizeof(p), &m->dims, i);
		bind(m, p, "mlp.router.weight", &k->moew[i].router,
		    &k->moeg[i].router);
		k->moew[i].ex = k->exw + (size_t)i * E;
		k->moeg[i].ex = k->exg + (size_t)i * E;
		for (int e = 0; e < E; e++) {
			struct nn_mlp_w *w = &k->moew[i].ex[e], *g = &k->moeg[i].ex[e];
			snprintf(ex, sizeof(ex), "%smlp.experts.%d.", p, e);
			bind(m, ex, "fc1.weight", &w->fc1_w, &g->fc1_w);
			bind(m, ex, "fc1.bias", &w->fc1_b, &g->fc1_b);
			bind(m, ex, "fc2.weight", &w->fc2_w, &g->fc2_w);
			bind(m, ex, "fc2.bias", &w->fc2_b, &g->fc2_b);
		}
		k->w[i].moe = &k->moew[i];
		k->g[i].moe = &k->moeg[i];
	}
	return 0;
}

int
nn_model_bind(struct nn_model *m, struct nn_mlp_shape *ms, char *err,
    size_t errlen)
{
	struct nn_work *k = calloc(1, sizeof(*k));
	char p[NN_NAME_MAX];

	if (!k) {
		free(ms);
		return cli_fail(err, errlen, "out of memory");
	}
	m->work = k;
	k->ms = ms;
	k->nlayers = m->dims.layers > 0 ? m->dims.layers : 1;
	if (m->dims.arch == NN_MLP) {
		k->mw = calloc(k->nlayers, sizeof(*k->mw));
		k->mg = calloc(k->nlayers, sizeof(*k->mg));
		if (!k->mw || !k->mg)
			return cli_fail(err, errlen, "out of memory");
		for (int i = 0; i < k->nlayers; i++) {
			nn_layer_prefix(p, sizeof(p), &m->dims, i);
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
		bind_block(m, nn_layer_prefix(p, sizeof(p), &m->dims, i),
		    &k->w[i], &k->g[i]);
	bind(m, "", "wte", &k->wte, &k->dwte);
	bind(m, "", "wpe", &k->wpe, &k->dwpe);
	bind(m, "", "lnf.weight", &k->lnf_w, &k->dlnf_w);
	bind(m, "", "lnf.bias", &k->lnf_b, &k->dlnf_b);
	return m->dims.moe.experts > 0 ? bind_moe(m, err, errlen) : 0;
}
