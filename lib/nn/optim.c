/* optim: SGD and AdamW with torch.optim's semantics and update order. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/nn.h"
#include "nn/vec_int.h"

void
nn_optim_defaults(struct nn_optim_cfg *c, enum nn_optim_kind kind)
{
	memset(c, 0, sizeof(*c));
	c->kind = kind;
	c->lr = kind == NN_SGD ? 0.01 : 1e-3;
	c->weight_decay = kind == NN_SGD ? 0.0 : 0.01;
	c->beta1 = 0.9;
	c->beta2 = 0.999;
	c->eps = 1e-8;
}

int
nn_optim_parse(const char *s, enum nn_optim_kind *out)
{
	if (!strcmp(s, "sgd"))
		*out = NN_SGD;
	else if (!strcmp(s, "adamw"))
		*out = NN_ADAMW;
	else
		return -1;
	return 0;
}

int
nn_optim_moments(const struct nn_optim_cfg *cfg)
{
	return cfg->kind == NN_ADAMW ? 2 : cfg->momentum != 0.0;
}

int
nn_optim_init(struct nn_optim *o, const struct nn_optim_cfg *cfg,
    size_t count, char *err, size_t errlen)
{
	int moments = nn_optim_moments(cfg);

	memset(o, 0, sizeof(*o));
	o->cfg = *cfg;
	o->count = count;
	if (moments >= 1 && !(o->m = calloc(count ? count : 1, sizeof(float))))
		goto oom;
	if (moments == 2 && !(o->v = calloc(count ? count : 1, sizeof(float))))
		goto oom;
	/* AdamW streams both through every step, as the parameters */
	if (o->m)
		nn_advise_huge(o->m, count * sizeof(float));
	if (o->v)
		nn_advise_huge(o->v, count * sizeof(float));
	return 0;
oom:
	snprintf(err, errlen, "out of memory for optimizer state of %zu "
	    "parameters", count);
	nn_optim_free(o);
	return -1;
}

void
nn_optim_free(struct nn_optim *o)
{
	free(o->m);
	free(o->v);
	memset(o, 0, sizeof(*o));
}

size_t
nn_optim_bytes(const struct nn_optim *o)
{
	return o->count * sizeof(float) * ((o->m != NULL) + (o->v != NULL));
}

NN_INLINE void
sgd_span(float *restrict p, const float *restrict grads, float lr,
    float scale, size_t n)
{
	for (size_t i = 0; i < n; i++)
		p[i] -= lr * (grads[i] * scale);
}

/* torch.optim.SGD (dampening 0, no nesterov). Plain SGD, the usual case,
 * in spans that vectorize (the branchy loop ran one element at a time,
 * 2.5% of a pipeline stage's step); the same products, the same bits. */
NN_CLONES static void
sgd_step(const struct nn_optim *o, float *p, const float *grads, float scale)
{
	float lr = (float)o->cfg.lr, wd = (float)o->cfg.weight_decay;
	float mom = (float)o->cfg.momentum;
	size_t i = 0;

	if (wd == 0.0f && o->m == NULL) {
		for (; i + NN_LANES <= o->count; i += NN_LANES)
			sgd_span(p + i, grads + i, lr, scale, NN_LANES);
		sgd_span(p + i, grads + i, lr, scale, o->count - i);
		return;
	}
	for (; i < o->count; i++) {
		float g = grads[i] * scale;
		if (wd != 0.0f)
			g += wd * p[i];
		if (o->m) {
			o->m[i] = o->t == 1 ? g : mom * o->m[i] + g;
			g = o->m[i];
		}
		p[i] -= lr * g;
	}
}

/* AdamW's constants for one step. */
struct adamw_k {
	float decay, b1, b2, a1, a2, step_size, bc2_sqrt, eps, scale;
};

NN_INLINE void
adamw_span(float *restrict p, float *restrict m, float *restrict v,
    const float *restrict grads, const struct adamw_k *k, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		float g = grads[i] * k->scale;
		p[i] *= k->decay;
		m[i] = m[i] * k->b1 + k->a1 * g;
		v[i] = v[i] * k->b2 + k->a2 * g * g;
		float denom = vec_sqrt(v[i]) / k->bc2_sqrt + k->eps;
		p[i] -= k->step_size * (m[i] / denom);
	}
}

/*
 * torch.optim.AdamW, single-tensor path: the bias corrections are
 * computed in double as Python does, the elementwise math in f32, in one
 * pass over p, m, v and the gradients.
 */
NN_CLONES static void
adamw_step(const struct nn_optim *o, float *p, const float *grads, float scale)
{
	const struct nn_optim_cfg *c = &o->cfg;
	struct adamw_k k = {
		.decay = (float)(1.0 - c->lr * c->weight_decay),
		.b1 = (float)c->beta1, .b2 = (float)c->beta2,
		.a1 = (float)(1.0 - c->beta1), .a2 = (float)(1.0 - c->beta2),
		.step_size = (float)(c->lr / (1.0 - pow(c->beta1, (double)o->t))),
		.bc2_sqrt = (float)sqrt(1.0 - pow(c->beta2, (double)o->t)),
		.eps = (float)c->eps, .scale = scale,
	};
	size_t i = 0;

	for (; i + NN_LANES <= o->count; i += NN_LANES)
		adamw_span(p + i, o->m + i, o->v + i, grads + i, &k, NN_LANES);
	adamw_span(p + i, o->m + i, o->v + i, grads + i, &k, o->count - i);
}

void
nn_optim_step(struct nn_optim *o, float *p, const float *grads,
    float grad_scale)
{
	o->t++;
	nn_optim_update(o, p, grads, grad_scale);
}

void
nn_optim_update(const struct nn_optim *o, float *p, const float *grads,
    float grad_scale)
{
	if (o->cfg.kind == NN_SGD)
		sgd_step(o, p, grads, grad_scale);
	else
		adamw_step(o, p, grads, grad_scale);
}
