/* model_dims: a model's sizes, read from a collection's shapes and
 * metadata or parsed from --dims text, and checked. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/nn.h"
#include "nn/model_int.h"

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

/* A non-negative finite number from the metadata, dflt when absent. */
static int
meta_num(const struct tensor_set *s, const char *key, double dflt, double *out,
    char *err, size_t errlen)
{
	const char *v = tensor_set_meta(s, key);
	char *end;

	*out = dflt;
	if (!v)
		return 0;
	errno = 0;
	*out = strtod(v, &end);
	if (errno || end == v || *end || !isfinite(*out) || *out < 0)
		return cli_fail(err, errlen, "__metadata__ '%s' is not a "
		    "non-negative number: '%s'", key, v);
	return 0;
}

/* The experts' settings (moe.*); a model without moe.experts has none,
 * and then no other moe.* either. */
static int
dims_moe(const struct tensor_set *s, struct nn_dims *d, char *err,
    size_t errlen)
{
	static const char *keys[] = { "moe.topk", "moe.every", "moe.capacity",
		"moe.aux" };

	if (!tensor_set_meta(s, "moe.experts")) {
		for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
			if (tensor_set_meta(s, keys[i]))
				return cli_fail(err, errlen, "__metadata__ has '%s' "
				    "but no 'moe.experts'", keys[i]);
		return 0;
	}
	if (meta_int(s, "moe.experts", 0, &d->moe.experts, err, errlen) < 0 ||
	    meta_int(s, "moe.topk", 1, &d->moe.topk, err, errlen) < 0 ||
	    meta_int(s, "moe.every", 1, &d->moe_every, err, errlen) < 0 ||
	    meta_num(s, "moe.capacity", 0, &d->moe.capacity, err, errlen) < 0 ||
	    meta_num(s, "moe.aux", 0, &d->moe_aux, err, errlen) < 0)
		return -1;
	if (d->moe.experts < 1)
		return cli_fail(err, errlen, "__metadata__ 'moe.experts' is %d: "
		    "need at least 1 expert", d->moe.experts);
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

/* The shape of prefix+name in layer i of the model. */
static int
layer_shape(const struct tensor_set *s, const struct nn_dims *d, int i,
    const char *name, int ndim, int64_t *shape, char *err, size_t errlen)
{
	char full[NN_NAME_MAX], prefix[NN_NAME_MAX];

	snprintf(full, sizeof(full), "%s%s", nn_layer_prefix(prefix,
	    sizeof(prefix), d, i), name);
	return key_shape(s, full, ndim, shape, err, errlen);
}

/* The stack's input and output, and layer 0's hidden width. */
static int
dims_mlp(const struct tensor_set *s, struct nn_dims *d, char *err,
    size_t errlen)
{
	int64_t a[2], b[2];

	d->layers = count_layers(s);
	if (layer_shape(s, d, 0, "fc1.weight", 2, a, err, errlen) < 0 ||
	    layer_shape(s, d, d->layers > 0 ? d->layers - 1 : 0, "fc2.weight",
	    2, b, err, errlen) < 0)
		return -1;
	d->d_hidden = (int)a[0], d->d_in = (int)a[1], d->d_out = (int)b[0];
	return 0;
}

int
nn_mlp_shapes_read(const struct tensor_set *s, const struct nn_dims *d,
    struct nn_mlp_shape **out, char *err, size_t errlen)
{
	int L = d->layers > 0 ? d->layers : 1;
	struct nn_mlp_shape *ms = calloc((size_t)L, sizeof(*ms));
	int64_t a[2], b[2];

	*out = NULL;
	if (ms == NULL)
		return cli_fail(err, errlen, "out of memory");
	for (int i = 0; i < L; i++) {
		if (layer_shape(s, d, i, "fc1.weight", 2, a, err, errlen) < 0 ||
		    layer_shape(s, d, i, "fc2.weight", 2, b, err, errlen) < 0) {
			free(ms);
			return -1;
		}
		ms[i].in = i > 0 ? ms[i - 1].out : (int)a[1];
		ms[i].hidden = (int)a[0];
		ms[i].out = (int)b[0];
	}
	*out = ms;
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
	if (layer_shape(s, d, 0, "ln1.weight", 1, ln, err, errlen) < 0 ||
	    layer_shape(s, d, 0, "mlp.fc1.weight", 2, fc1, err,
	    errlen) < 0)
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
	if (dims_moe(s, d, err, errlen) < 0 || nn_moe_valid(d, err,
	    errlen) < 0)
		return -1;
	if (key_shape(s, nn_dims_moe_layer(d, 0) ?
	    "layers.0.mlp.experts.0.fc1.weight" : "layers.0.mlp.fc1.weight", 2,
	    fc1, err, errlen) < 0 || heads_check(d, s, err, errlen) < 0)
		return -1;
	d->d_ff = (int)fc1[0];
	return 0;
}

int
nn_dims_read(const struct tensor_set *s, struct nn_dims *d, char *err,
    size_t errlen)
{
	return d->arch == NN_MLP ? dims_mlp(s, d, err, errlen) :
	    d->arch == NN_BLOCK ? dims_block(s, d, err, errlen) :
	    dims_gpt(s, d, err, errlen);
}

int
nn_dims_valid(const struct nn_dims *d, char *err, size_t errlen)
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
	return nn_moe_valid(d, err, errlen);
}

/* Experts: only in a gpt; topk 1..E; every 1..layers; capacity and aux
 * non-negative. */
int
nn_moe_valid(const struct nn_dims *d, char *err, size_t errlen)
{
	const struct nn_moe_cfg *c = &d->moe;

	if (c->experts == 0)
		return 0;
	if (d->arch != NN_GPT)
		return cli_fail(err, errlen, "experts need arch gpt, not %s",
		    nn_arch_name(d->arch));
	if (c->experts < 1 || c->experts > 65536)
		return cli_fail(err, errlen, "%d experts: need 1 to 65536",
		    c->experts);
	if (c->topk < 1 || c->topk > c->experts)
		return cli_fail(err, errlen, "topk %d %s the %d experts (need 1 "
		    "to %d)", c->topk, c->topk < 1 ? "does not fit" : "is above",
		    c->experts, c->experts);
	if (d->moe_every < 1 || d->moe_every > d->layers)
		return cli_fail(err, errlen, "moe every %d does not fit the %d "
		    "layers (need 1 to %d)", d->moe_every, d->layers, d->layers);
	if (!isfinite(c->capacity) || c->capacity < 0 ||
	    !isfinite(d->moe_aux) || d->moe_aux < 0)
		return cli_fail(err, errlen, "capacity %g and aux loss %g must be "
		    "non-negative", c->capacity, d->moe_aux);
	return 0;
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
	return nn_dims_valid(out, err, errlen);
}
