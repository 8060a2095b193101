/* model: the built-in models over one contiguous parameter buffer, loaded
 * from and written back to safetensors collections. A collection's sizes
 * (model_dims.c) say which tensors it must hold (model_names.c); they are
 * checked, copied into the buffer and bound to the layers (model_bind.c).
 * Fresh models are model_init.c's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/nn.h"
#include "nn/model_int.h"
#include "nn/vec_int.h"

/* Every tensor expected with its shape, every required one present. */
static int
check_tensors(const struct tensor_set *s, const struct nn_expect_list *l,
    const char *arch, char *err, size_t errlen)
{
	char got[64];

	for (size_t i = 0; i < s->count; i++) {
		const struct tensor *t = &s->items[i];
		const struct nn_expect *e = t->name ? nn_expect_find(l, t->name) :
		    NULL;
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

/* Every MoE block's router, checked before the other tensors so that a
 * model claiming experts without them says so. */
static int
check_routers(const struct tensor_set *s, const struct nn_dims *d, char *err,
    size_t errlen)
{
	char name[NN_NAME_MAX];

	for (int i = 0; i < d->layers; i++) {
		if (!nn_dims_moe_layer(d, i))
			continue;
		snprintf(name, sizeof(name), "layers.%d.mlp.router.weight", i);
		if (!tensor_set_find(s, name))
			return cli_fail(err, errlen, "model claims %d experts "
			    "every %d layers (moe.experts, moe.every) but has no "
			    "'%s'", d->moe.experts, d->moe_every, name);
	}
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
	/* every step streams both (the optimizer, bf16's rounding of the
	 * weights, the gradients' sums and zeroing) */
	nn_advise_huge(m->params, total * sizeof(float));
	nn_advise_huge(m->grads, total * sizeof(float));
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
nn_model_load(struct nn_model *m, const struct tensor_set *s, char *err,
    size_t errlen)
{
	struct nn_expect_list l = { 0 };
	struct nn_mlp_shape *ms = NULL;
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
	if (nn_dims_read(s, &m->dims, err, errlen) < 0)
		goto out;
	if (m->dims.arch == NN_MLP &&
	    nn_mlp_shapes_read(s, &m->dims, &ms, err, errlen) < 0)
		goto out;
	if (nn_expect_model(&l, &m->dims, ms) < 0) {
		cli_fail(err, errlen, "out of memory");
		goto out;
	}
	if (check_routers(s, &m->dims, err, errlen) < 0 ||
	    check_tensors(s, &l, arch, err, errlen) < 0 ||
	    fill_params(m, s, err, errlen) < 0 ||
	    copy_meta(m, s, err, errlen) < 0)
		goto out;
	rc = nn_model_bind(m, ms, err, errlen);
	ms = NULL;		/* the model's now */
out:
	free(ms);
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
		free(m->work->moew);
		free(m->work->moeg);
		free(m->work->exw);
		free(m->work->exg);
		free(m->work->moe_sum);
		free(m->work->ms);
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
