/* model_int: what the model's files share: model.c (loading),
 * model_names.c (the tensors of a model), model_dims.c (its sizes),
 * model_bind.c (views into its buffers), model_init.c (fresh models) and
 * run.c (passes over a batch); not part of the nn API. */
#ifndef COLLX_NN_MODEL_INT_H
#define COLLX_NN_MODEL_INT_H

#include <stddef.h>
#include <stdint.h>

#include "cli/util.h"
#include "nn/nn.h"
#include "tensor/tensor.h"

/* Per-layer weight and gradient pointers into the model's buffers, and
 * activation memory sized for the largest batch seen. */
struct nn_work {
	int nlayers;			/* max(dims.layers, 1) */
	struct nn_mlp_w *mw, *mg;	/* mlp */
	struct nn_mlp_shape *ms;	/* mlp: each layer's widths */
	struct nn_block_w *w, *g;	/* block, gpt */
	struct nn_moe_w *moew, *moeg;	/* gpt's MoE blocks, per layer */
	struct nn_mlp_w *exw, *exg;	/* their experts, layer by layer */
	double *moe_sum;		/* nn_model_moe_stats' */
	float *wte, *wpe, *lnf_w, *lnf_b;
	float *dwte, *dwpe, *dlnf_w, *dlnf_b;
	float *buf;
	size_t cap;
	int32_t *tok;			/* gpt inputs then targets, 2*n*seq */
	size_t tokcap;
};

/* A tensor the arch expects: its full name, shape and whether a model may
 * leave it out (biases). */
struct nn_expect {
	char name[NN_NAME_MAX];
	int ndim;
	int64_t shape[2];
	int optional;
};

struct nn_expect_list {
	struct nn_expect *e;
	size_t n, cap;
};

/* Every tensor of a model with these sizes, in a fixed order, appended
 * to l (-1: out of memory); the one named name, or NULL. An mlp's
 * layers take their widths from ms (nn_mlp_shapes_read), or NULL: d's
 * uniform stack. */
int nn_expect_model(struct nn_expect_list *l, const struct nn_dims *d,
    const struct nn_mlp_shape *ms);
const struct nn_expect *nn_expect_find(const struct nn_expect_list *l,
    const char *name);
/* "layers.I." for a stack or gpt, "" for a single unprefixed layer. */
const char *nn_layer_prefix(char *buf, size_t len, const struct nn_dims *d,
    int i);

/* The sizes of d->arch's model from s's shapes and metadata. */
int nn_dims_read(const struct tensor_set *s, struct nn_dims *d, char *err,
    size_t errlen);
int nn_dims_valid(const struct nn_dims *d, char *err, size_t errlen);
/* An mlp's widths, layer by layer, from each layer's fc1.weight [hidden,
 * in] and fc2.weight [out, hidden]; layer i + 1's in is layer i's out
 * (its fc1.weight is checked against it with the other shapes). *out
 * is malloc'd, max(d->layers, 1) of them. */
int nn_mlp_shapes_read(const struct tensor_set *s, const struct nn_dims *d,
    struct nn_mlp_shape **out, char *err, size_t errlen);

/* m->work's per-layer weight and gradient pointers into m's buffers; an
 * mlp's widths ms (nn_mlp_shapes_read) become the model's, freed with it
 * (also on failure). */
int nn_model_bind(struct nn_model *m, struct nn_mlp_shape *ms, char *err,
    size_t errlen);

/* model_moe.c: the statistics buffer (allocated on first use, NULL when
 * out of memory), and a training pass over no samples joining the sum. */
double *nn_moe_stats_buf(struct nn_model *m);
int nn_moe_idle(struct nn_model *m, char *err, size_t errlen);

#endif
