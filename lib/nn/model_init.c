/* model_init: fresh models with GPT-2 style initialisation. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/nn.h"
#include "nn/model_int.h"
#include "tensor/rng.h"

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
	    ends_with(name, "mlp.fc2.weight") || (strstr(name, ".experts.") &&
	    ends_with(name, ".fc2.weight"))))
		std /= sqrt(2.0 * (d->layers > 0 ? d->layers : 1));
	for (size_t i = 0; i < n; i += 2) {
		double z[2];
		tensor_rng_normal2(r, z);
		p[i] = (float)(std * z[0]);
		if (i + 1 < n)
			p[i + 1] = (float)(std * z[1]);
	}
}

/* The shortest text that reads back as x ("0.1", not 0.10000000000000001). */
static void
shortest(char *buf, size_t len, double x)
{
	for (int p = 1; p <= 17; p++) {
		snprintf(buf, len, "%.*g", p, x);
		if (strtod(buf, NULL) == x)
			return;
	}
}

/* moe.experts, moe.topk, moe.every, moe.capacity, moe.aux. */
static int
init_moe_meta(struct tensor_set *out, const struct nn_dims *d, char *err,
    size_t errlen)
{
	char v[5][32];
	const char *k[5] = { "moe.experts", "moe.topk", "moe.every",
		"moe.capacity", "moe.aux" };

	snprintf(v[0], sizeof(v[0]), "%d", d->moe.experts);
	snprintf(v[1], sizeof(v[1]), "%d", d->moe.topk);
	snprintf(v[2], sizeof(v[2]), "%d", d->moe_every);
	shortest(v[3], sizeof(v[3]), d->moe.capacity);
	shortest(v[4], sizeof(v[4]), d->moe_aux);
	for (int i = 0; i < 5; i++)
		if (tensor_set_meta_put(out, k[i], v[i], err, errlen) < 0)
			return -1;
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
		return d->moe.experts > 0 ? init_moe_meta(out, d, err, errlen) : 0;
	return tensor_set_meta_put(out, "causal", d->causal ? "1" : "0", err,
	    errlen);
}

int
nn_init(struct tensor_set *out, const struct nn_dims *dims, uint64_t seed,
    char *err, size_t errlen)
{
	struct nn_dims d = *dims;
	struct nn_expect_list l = { 0 };
	struct tensor_rng r;

	tensor_rng_seed(&r, seed);
	memset(out, 0, sizeof(*out));
	out->format = TENSOR_SAFETENSORS;
	if (d.arch != NN_MLP && d.d_ff == 0)
		d.d_ff = 4 * d.d_model;
	if (nn_dims_valid(&d, err, errlen) < 0)
		return -1;
	if (nn_expect_model(&l, &d, NULL) < 0) {
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
