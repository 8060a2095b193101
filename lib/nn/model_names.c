/* model_names: the tensors a model of given sizes has, by name and shape
 * in a fixed order: what loading checks a collection against and what a
 * fresh model is made of. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/nn.h"
#include "nn/model_int.h"

static int
expect_add(struct nn_expect_list *l, const char *prefix, const char *name,
    int64_t d0, int64_t d1, int optional)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? 2 * l->cap : 32;
		struct nn_expect *e = realloc(l->e, cap * sizeof(*e));
		if (!e)
			return -1;
		l->e = e, l->cap = cap;
	}
	struct nn_expect *e = &l->e[l->n++];
	snprintf(e->name, sizeof(e->name), "%s%s", prefix, name);
	e->ndim = d1 ? 2 : 1;
	e->shape[0] = d0, e->shape[1] = d1;
	e->optional = optional;
	return 0;
}

static int
expect_linear(struct nn_expect_list *l, const char *prefix, const char *name,
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
expect_layernorm(struct nn_expect_list *l, const char *prefix, const char *name,
    int64_t d)
{
	char w[NN_NAME_MAX], b[NN_NAME_MAX];

	snprintf(w, sizeof(w), "%s.weight", name);
	snprintf(b, sizeof(b), "%s.bias", name);
	if (expect_add(l, prefix, w, d, 0, 0) < 0)
		return -1;
	return expect_add(l, prefix, b, d, 0, 1);
}

/* The MoE in place of a block's mlp: mlp.router.weight [E, d] and
 * mlp.experts.e.fc1/fc2 as the mlp's. */
static int
expect_moe(struct nn_expect_list *l, const char *prefix, int64_t d, int64_t f,
    int experts)
{
	char a[NN_NAME_MAX], b[NN_NAME_MAX];

	if (expect_add(l, prefix, "mlp.router.weight", experts, d, 0) < 0)
		return -1;
	for (int e = 0; e < experts; e++) {
		snprintf(a, sizeof(a), "mlp.experts.%d.fc1", e);
		snprintf(b, sizeof(b), "mlp.experts.%d.fc2", e);
		if (expect_linear(l, prefix, a, f, d) < 0 ||
		    expect_linear(l, prefix, b, d, f) < 0)
			return -1;
	}
	return 0;
}

static int
expect_block(struct nn_expect_list *l, const char *prefix, int64_t d, int64_t f,
    int experts)
{
	if (expect_layernorm(l, prefix, "ln1", d) < 0 ||
	    expect_linear(l, prefix, "attn.q", d, d) < 0 ||
	    expect_linear(l, prefix, "attn.k", d, d) < 0 ||
	    expect_linear(l, prefix, "attn.v", d, d) < 0 ||
	    expect_linear(l, prefix, "attn.o", d, d) < 0 ||
	    expect_layernorm(l, prefix, "ln2", d) < 0)
		return -1;
	if (experts > 0)
		return expect_moe(l, prefix, d, f, experts);
	if (expect_linear(l, prefix, "mlp.fc1", f, d) < 0)
		return -1;
	return expect_linear(l, prefix, "mlp.fc2", d, f);
}

int
nn_dims_moe_layer(const struct nn_dims *d, int i)
{
	return d->moe.experts > 0 && d->moe_every > 0 &&
	    (i + 1) % d->moe_every == 0;
}

/* "layers.I." for a stack or gpt, "" for a single unprefixed layer. */
const char *
nn_layer_prefix(char *buf, size_t len, const struct nn_dims *d, int i)
{
	if (d->arch != NN_GPT && d->layers == 0)
		buf[0] = '\0';
	else
		snprintf(buf, len, "layers.%d.", i);
	return buf;
}

/* Every tensor of a model with these sizes, in a fixed order. */
int
nn_expect_model(struct nn_expect_list *l, const struct nn_dims *d,
    const struct nn_mlp_shape *ms)
{
	char p[NN_NAME_MAX];
	int n = d->layers > 0 ? d->layers : 1;
	struct nn_mlp_shape u;

	if (d->arch == NN_GPT && (expect_add(l, "", "wte", d->vocab,
	    d->d_model, 0) < 0 || expect_add(l, "", "wpe", d->seq, d->d_model,
	    0) < 0 || expect_layernorm(l, "", "lnf", d->d_model) < 0))
		return -1;
	for (int i = 0; i < n; i++) {
		nn_layer_prefix(p, sizeof(p), d, i);
		if (d->arch != NN_MLP) {
			if (expect_block(l, p, d->d_model, d->d_ff,
			    nn_dims_moe_layer(d, i) ? d->moe.experts : 0) < 0)
				return -1;
			continue;
		}
		u = (struct nn_mlp_shape){ i ? d->d_out : d->d_in, d->d_hidden,
		    d->d_out };
		if (ms != NULL)
			u = ms[i];
		if (expect_linear(l, p, "fc1", u.hidden, u.in) < 0 ||
		    expect_linear(l, p, "fc2", u.out, u.hidden) < 0)
			return -1;
	}
	return 0;
}

const struct nn_expect *
nn_expect_find(const struct nn_expect_list *l, const char *name)
{
	for (size_t i = 0; i < l->n; i++)
		if (!strcmp(l->e[i].name, name))
			return &l->e[i];
	return NULL;
}
