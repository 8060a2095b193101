/* test_nn_model: models end to end — sizes and validation on load, the
 * write-back, GPT-2 initialisation, closed-form losses, gradients of the
 * summed loss against central differences for every arch, and that
 * gradients of split batches add up to the whole batch's. */
#include <string.h>

#include "nn/nn.h"
#include "nn_check.h"

#define ERRLEN 256

static void
set_drop(struct tensor_set *s, const char *name)
{
	struct tensor *t = tensor_set_find(s, name);

	if (!t)
		return;
	size_t i = (size_t)(t - s->items);
	tensor_free(t);
	memmove(&s->items[i], &s->items[i + 1],
	    (s->count - i - 1) * sizeof(*t));
	s->count--;
}

static struct nn_dims
mlp_dims(void)
{
	struct nn_dims d = { .arch = NN_MLP, .d_in = 5, .d_hidden = 7,
		.d_out = 3 };
	return d;
}

static struct nn_dims
block_dims(int causal)
{
	struct nn_dims d = { .arch = NN_BLOCK, .d_model = 8, .heads = 2,
		.d_ff = 12, .causal = causal };
	return d;
}

static struct nn_dims
gpt_dims(void)
{
	struct nn_dims d = { .arch = NN_GPT, .vocab = 11, .d_model = 8,
		.layers = 2, .heads = 2, .seq = 5 };
	return d;
}

/* A loaded model from nn_init; drop names the tensors to leave out. */
static int
make(struct nn_model *m, const struct nn_dims *d,
    const char **drop)
{
	struct tensor_set s;
	char err[ERRLEN];
	int rc;

	if (nn_init(&s, d, 7, err, sizeof(err)) < 0) {
		printf("# init: %s\n", err);
		return -1;
	}
	for (; drop && *drop; drop++)
		set_drop(&s, *drop);
	rc = nn_model_load(m, &s, err, sizeof(err));
	if (rc < 0)
		printf("# load: %s\n", err);
	tensor_set_free(&s);
	return rc;
}

/* Load must fail with a reason containing want. */
static void
load_fails(struct tensor_set *s, const char *want,
    const char *what)
{
	struct nn_model m;
	char err[ERRLEN] = "";
	int rc = nn_model_load(&m, s, err, sizeof(err));

	if (rc == 0)
		nn_model_free(&m);
	if (rc == 0 || !strstr(err, want))
		printf("# got rc %d, '%s'\n", rc, err);
	UNIT_OK(rc < 0 && strstr(err, want), what);
}

static void
test_load_errors(void)
{
	struct nn_dims d = block_dims(0);
	struct tensor_set s;
	char err[ERRLEN];
	struct tensor t = { 0 };
	int64_t shape[2] = { 3, 8 };

	nn_init(&s, &d, 1, err, sizeof(err));
	tensor_set_meta_put(&s, "heads", "3", err, sizeof(err));
	load_fails(&s, "heads 3 does not divide d_model 8", "heads must "
	    "divide d_model");
	tensor_set_meta_put(&s, "heads", "two", err, sizeof(err));
	load_fails(&s, "'heads' is not a valid count", "heads must be a number");
	tensor_set_meta_put(&s, "heads", "2", err, sizeof(err));
	tensor_set_meta_put(&s, "causal", "2", err, sizeof(err));
	load_fails(&s, "'causal' must be 0 or 1", "causal must be 0 or 1");
	tensor_set_meta_put(&s, "causal", "0", err, sizeof(err));
	tensor_set_meta_put(&s, "collx.arch", "resnet", err, sizeof(err));
	load_fails(&s, "unknown collx.arch 'resnet'", "unknown arch refused");
	tensor_set_meta_put(&s, "collx.arch", "block", err, sizeof(err));

	tensor_init(&t, DT_F32, 2, shape, err, sizeof(err));
	tensor_set_add(&s, "extra.weight", &t, err, sizeof(err));
	load_fails(&s, "unexpected tensor 'extra.weight'", "extra tensor refused");
	set_drop(&s, "extra.weight");

	set_drop(&s, "attn.k.weight");
	load_fails(&s, "no tensor 'attn.k.weight'", "missing weight refused");
	tensor_init(&t, DT_F32, 2, shape, err, sizeof(err));
	tensor_set_add(&s, "attn.k.weight", &t, err, sizeof(err));
	load_fails(&s, "'attn.k.weight' has shape [3, 8], expected [8, 8]",
	    "wrong shape refused with both shapes");
	set_drop(&s, "attn.k.weight");
	tensor_init(&t, DT_I32, 2, (int64_t[]){ 8, 8 }, err, sizeof(err));
	tensor_set_add(&s, "attn.k.weight", &t, err, sizeof(err));
	load_fails(&s, "dtype i32", "integer weights refused");
	tensor_set_free(&s);

	memset(&s, 0, sizeof(s));
	load_fails(&s, "no __metadata__ 'collx.arch'", "missing arch refused");
	tensor_set_free(&s);

	d = gpt_dims();
	nn_init(&s, &d, 1, err, sizeof(err));
	set_drop(&s, "layers.1.ln2.weight");
	load_fails(&s, "no tensor 'layers.1.ln2.weight'", "gpt: a layer's "
	    "missing tensor refused");
	tensor_set_free(&s);
}

static void
test_load_sizes(void)
{
	struct nn_model m;
	struct nn_dims d = gpt_dims();
	size_t expect, ok = 1;

	if (!UNIT_OK(make(&m, &d, NULL) == 0, "gpt loads"))
		return;
	UNIT_OK(m.dims.vocab == 11 && m.dims.d_model == 8 &&
	    m.dims.layers == 2 && m.dims.heads == 2 && m.dims.seq == 5 &&
	    m.dims.d_ff == 32 && m.dims.causal == 1,
	    "gpt sizes from shapes and metadata (d_ff default 4*d_model)");
	/* wte, wpe, lnf (2), per layer: 2 LN x2, 4 attn linears x2, 2 fc x2 */
	UNIT_OK(m.ntensors == 4 + 2 * 16, "gpt tensor count");
	expect = 11 * 8 + 5 * 8 + 2 * 8 +
	    2 * (4 * 8 + 4 * (64 + 8) + (32 * 8 + 32) + (8 * 32 + 8));
	UNIT_OK(m.nparams == expect, "gpt parameter count");
	for (size_t i = 0; i < m.ntensors; i++)
		ok &= m.table[i].offset == (i ? m.table[i - 1].offset +
		    m.table[i - 1].count : 0) && (i == 0 ||
		    strcmp(m.table[i - 1].name, m.table[i].name) < 0);
	UNIT_OK(ok, "parameter table contiguous and in name order");
	const struct nn_param *p = nn_model_param(&m, "layers.1.mlp.fc1.weight");
	UNIT_OK(p && p->ndim == 2 && p->shape[0] == 32 && p->shape[1] == 8 &&
	    p->count == 256, "table entry name, shape and count");
	nn_model_free(&m);
}

static double
stddev(const float *p, size_t n)
{
	double s = 0, s2 = 0;

	for (size_t i = 0; i < n; i++)
		s += p[i], s2 += (double)p[i] * p[i];
	return sqrt(s2 / n - (s / n) * (s / n));
}

static void
test_init(void)
{
	struct nn_dims d = { .arch = NN_GPT, .vocab = 256, .d_model = 64,
		.layers = 8, .heads = 4, .seq = 32 };
	struct tensor_set a, b, c;
	char err[ERRLEN];

	nn_init(&a, &d, 42, err, sizeof(err));
	nn_init(&b, &d, 42, err, sizeof(err));
	nn_init(&c, &d, 43, err, sizeof(err));
	struct tensor *wa = tensor_set_find(&a, "wte"), *wb = tensor_set_find(&b,
	    "wte"), *wc = tensor_set_find(&c, "wte");
	UNIT_OK(wa && !memcmp(wa->data, wb->data, tensor_nbytes(wa)),
	    "init: same seed, same weights");
	UNIT_OK(wa && memcmp(wa->data, wc->data, tensor_nbytes(wa)),
	    "init: another seed, other weights");
	UNIT_CLOSE(stddev(wa->data, 256 * 64), 0.02, 0.03, 0,
	    "init: wte std 0.02");
	struct tensor *fc1 = tensor_set_find(&a, "layers.3.mlp.fc1.weight");
	UNIT_CLOSE(stddev(fc1->data, 256 * 64), 0.02, 0.03, 0,
	    "init: fc1 std 0.02");
	struct tensor *o = tensor_set_find(&a, "layers.3.attn.o.weight");
	UNIT_CLOSE(stddev(o->data, 64 * 64), 0.02 / sqrt(16), 0.05, 0,
	    "init: attn.o std 0.02/sqrt(2*layers)");
	struct tensor *fc2 = tensor_set_find(&a, "layers.7.mlp.fc2.weight");
	UNIT_CLOSE(stddev(fc2->data, 64 * 256), 0.02 / sqrt(16), 0.03, 0,
	    "init: mlp.fc2 std 0.02/sqrt(2*layers)");
	const float *lw = tensor_set_find(&a, "layers.2.ln1.weight")->data;
	const float *lb = tensor_set_find(&a, "lnf.bias")->data;
	const float *qb = tensor_set_find(&a, "layers.0.attn.q.bias")->data;
	int ok = 1;
	for (int i = 0; i < 64; i++)
		ok &= lw[i] == 1.0f && lb[i] == 0.0f && qb[i] == 0.0f;
	UNIT_OK(ok, "init: LayerNorm weight 1, biases 0");
	const char *arch = tensor_set_meta(&a, "collx.arch");
	const char *heads = tensor_set_meta(&a, "heads");
	UNIT_OK(arch && !strcmp(arch, "gpt") && heads && !strcmp(heads, "4"),
	    "init: metadata collx.arch and heads");
	tensor_set_free(&a), tensor_set_free(&b), tensor_set_free(&c);

	struct nn_dims bad = { .arch = NN_BLOCK, .d_model = 10, .heads = 3 };
	UNIT_OK(nn_init(&a, &bad, 1, err, sizeof(err)) < 0 &&
	    strstr(err, "heads"), "init: heads not dividing d_model refused");
}

static void
test_dims_parse(void)
{
	struct nn_dims d;
	char err[ERRLEN];

	UNIT_OK(nn_dims_parse("256,32,2,2,16", NN_GPT, &d, err, sizeof(err)) ==
	    0 && d.vocab == 256 && d.d_model == 32 && d.layers == 2 &&
	    d.heads == 2 && d.seq == 16 && d.d_ff == 128, "dims: gpt");
	UNIT_OK(nn_dims_parse("16,4,0,1", NN_BLOCK, &d, err, sizeof(err)) == 0 &&
	    d.d_model == 16 && d.heads == 4 && d.d_ff == 64 && d.causal == 1,
	    "dims: block with causal");
	/* Found by fuzz_options: the default d_ff, 4*D, overflowed an int. */
	UNIT_OK(nn_dims_parse("816999999,2", NN_BLOCK, &d, err, sizeof(err)) < 0 &&
	    strstr(err, "too large"), "--dims whose default d_ff overflows is refused");
	UNIT_OK(nn_dims_parse("4,8,2", NN_MLP, &d, err, sizeof(err)) == 0 &&
	    d.d_in == 4 && d.d_hidden == 8 && d.d_out == 2 && d.layers == 0,
	    "dims: mlp");
	UNIT_OK(nn_dims_parse("4,8,2,3", NN_MLP, &d, err, sizeof(err)) == 0 &&
	    d.layers == 3 && nn_dims_parse("16,4,0,0,2", NN_BLOCK, &d, err,
	    sizeof(err)) == 0 && d.layers == 2 && d.causal == 0,
	    "dims: mlp and block stacks");
	UNIT_OK(nn_dims_parse("4,8", NN_MLP, &d, err, sizeof(err)) < 0 &&
	    nn_dims_parse("4,8,2,", NN_MLP, &d, err, sizeof(err)) < 0 &&
	    nn_dims_parse("4,x,2", NN_MLP, &d, err, sizeof(err)) < 0 &&
	    nn_dims_parse("4,-8,2", NN_MLP, &d, err, sizeof(err)) < 0 &&
	    nn_dims_parse("4,3", NN_BLOCK, &d, err, sizeof(err)) < 0,
	    "dims: malformed text refused");
}

static void
test_roundtrip(void)
{
	struct nn_model m, m2;
	struct nn_dims d = block_dims(1);
	const char *drop[] = { "attn.k.bias", "mlp.fc2.bias", NULL };
	struct tensor_set s;
	char err[ERRLEN];

	if (make(&m, &d, drop) < 0)
		return;
	for (size_t i = 0; i < m.nparams; i++)
		m.params[i] = check_rand();
	UNIT_OK(nn_model_to_set(&m, &s, err, sizeof(err)) == 0,
	    "write back to a tensor set");
	UNIT_OK(s.count == m.ntensors && !tensor_set_find(&s, "attn.k.bias") &&
	    tensor_set_find(&s, "attn.q.bias"), "absent biases stay absent");
	const char *c = tensor_set_meta(&s, "causal");
	UNIT_OK(c && !strcmp(c, "1"), "metadata written back");
	UNIT_OK(nn_model_load(&m2, &s, err, sizeof(err)) == 0 &&
	    m2.nparams == m.nparams && m2.dims.causal == 1 &&
	    !memcmp(m2.params, m.params, m.nparams * sizeof(float)),
	    "reloaded model has the same parameters");
	nn_model_free(&m2);

	/* an f64 tensor is read converted to f32 */
	struct tensor *q = tensor_set_find(&s, "attn.q.weight"), t = { 0 };
	tensor_init(&t, DT_F64, 2, q->shape, err, sizeof(err));
	for (int i = 0; i < 64; i++)
		((double *)t.data)[i] = ((float *)q->data)[i];
	tensor_free(q);
	*q = t;
	q->name = strdup("attn.q.weight");
	UNIT_OK(nn_model_load(&m2, &s, err, sizeof(err)) == 0 &&
	    !memcmp(m2.params, m.params, m.nparams * sizeof(float)),
	    "an f64 weight loads converted to f32");
	nn_model_free(&m2);
	tensor_set_free(&s);
	nn_model_free(&m);
}

/* Random parameters of a healthy size: LayerNorm weights near 1. */
static void
randomize(struct nn_model *m, float scale)
{
	for (size_t i = 0; i < m->ntensors; i++) {
		const struct nn_param *p = &m->table[i];
		int ln = strstr(p->name, "ln") && strstr(p->name, ".weight");
		for (size_t j = 0; j < p->count; j++)
			m->params[p->offset + j] = (ln ? 1.0f : 0.0f) +
			    scale * check_rand();
	}
}

struct fd {
	struct nn_model *m;
	struct nn_batch *b;
};

static double
fd_loss(void *ctx)
{
	struct fd *f = ctx;
	char err[ERRLEN];
	double loss;

	nn_model_loss(f->m, f->b, &loss, err, sizeof(err));
	return loss;
}

/* Every parameter tensor's gradient against central differences. */
static void
check_model_grads(const char *name, struct nn_model *m,
    struct nn_batch *b, size_t limit, float h, double rtol, double atol)
{
	struct fd f = { m, b };
	char err[ERRLEN], what[128];
	double loss;
	int ok = 1;

	nn_model_zero_grad(m);
	nn_model_step(m, b, &loss, err, sizeof(err));
	for (size_t i = 0; i < m->ntensors; i++) {
		const struct nn_param *p = &m->table[i];
		snprintf(what, sizeof(what), "%s: d %s", name, p->name);
		ok &= check_grad_ok(what, fd_loss, &f, m->params + p->offset,
		    m->grads + p->offset, p->count, limit, h, rtol, atol);
	}
	snprintf(what, sizeof(what), "%s: every parameter's gradient matches "
	    "central differences", name);
	UNIT_OK(ok, what);
}

/* Gradients of two halves of a batch add up to the whole batch's. */
static void
check_split(const char *name, struct nn_model *m,
    const struct nn_batch *whole, const struct nn_batch *h1,
    const struct nn_batch *h2)
{
	char err[ERRLEN], what[128];
	double lw, l1, l2, worst = 0, big = 0;
	float *g = malloc(m->nparams * sizeof(float));

	nn_model_zero_grad(m);
	nn_model_step(m, whole, &lw, err, sizeof(err));
	memcpy(g, m->grads, m->nparams * sizeof(float));
	nn_model_zero_grad(m);
	nn_model_step(m, h1, &l1, err, sizeof(err));
	nn_model_step(m, h2, &l2, err, sizeof(err));
	for (size_t i = 0; i < m->nparams; i++) {
		worst = fmax(worst, fabs(g[i] - m->grads[i]));
		big = fmax(big, fabs(g[i]));
	}
	snprintf(what, sizeof(what), "%s: loss sums of two half batches add "
	    "up", name);
	UNIT_CLOSE(l1 + l2, lw, 1e-6, 1e-9, what);
	snprintf(what, sizeof(what), "%s: gradients of two half batches add "
	    "up", name);
	UNIT_OK(worst <= 1e-5 * big, what);
	free(g);
}

static void
test_mlp(void)
{
	struct nn_model m;
	struct nn_dims d = mlp_dims();
	int n = 6;
	float *x = check_fill(n * 5, 1.0f), *y = check_fill(n * 3, 1.0f);
	struct nn_batch b = { .n = n, .x = x, .y = y };
	struct nn_batch h1 = { .n = 2, .x = x, .y = y };
	struct nn_batch h2 = { .n = 4, .x = x + 2 * 5, .y = y + 2 * 3 };
	char err[ERRLEN];
	double loss, want = 0;

	if (make(&m, &d, NULL) < 0)
		return;
	/* fc2 weight 0, bias c: y = c, loss_sum = sum over rows of mean
	 * over columns of (c - t)^2 */
	memset(m.params, 0, m.nparams * sizeof(float));
	float *b2 = m.params + nn_model_param(&m, "fc2.bias")->offset;
	b2[0] = 0.5f, b2[1] = -1.0f, b2[2] = 2.0f;
	for (int i = 0; i < n; i++)
		for (int j = 0; j < 3; j++)
			want += pow(b2[j] - y[i * 3 + j], 2) / 3;
	nn_model_loss(&m, &b, &loss, err, sizeof(err));
	UNIT_CLOSE(loss, want, 1e-6, 1e-9, "mlp: loss_sum closed form");

	randomize(&m, 0.5f);
	check_model_grads("mlp", &m, &b, 0, 1e-2f, 2e-3, 2e-4);
	check_split("mlp", &m, &b, &h1, &h2);
	nn_model_free(&m);

	const char *drop[] = { "fc1.bias", "fc2.bias", NULL };
	if (make(&m, &d, drop) == 0) {
		randomize(&m, 0.5f);
		check_model_grads("mlp without biases", &m, &b, 0, 1e-2f, 2e-3,
		    2e-4);
		nn_model_free(&m);
	}
	free(x), free(y);
}

static void
test_block(int causal)
{
	struct nn_model m;
	struct nn_dims d = block_dims(causal);
	int n = 3, s = 4, D = 8;
	size_t row = (size_t)s * D;
	float *x = check_fill(n * row, 1.0f), *y = check_fill(n * row, 1.0f);
	struct nn_batch b = { .n = n, .seq = s, .x = x, .y = y };
	struct nn_batch h1 = { .n = 1, .seq = s, .x = x, .y = y };
	struct nn_batch h2 = { .n = 2, .seq = s, .x = x + row, .y = y + row };
	const char *drop[] = { "attn.v.bias", "ln2.bias", NULL };
	char name[64], err[ERRLEN];
	double loss, want = 0;

	if (make(&m, &d, drop) < 0)
		return;
	/* attn.o and mlp.fc2 zero, no biases: y = x */
	memset(m.params, 0, m.nparams * sizeof(float));
	for (size_t i = 0; i < n * row; i++)
		want += pow(x[i] - y[i], 2) / row;
	nn_model_loss(&m, &b, &loss, err, sizeof(err));
	snprintf(name, sizeof(name), "block%s", causal ? " (causal)" : "");
	UNIT_CLOSE(loss, want, 1e-6, 1e-9, "block: residual-only loss_sum "
	    "closed form");

	randomize(&m, 0.4f);
	check_model_grads(name, &m, &b, 0, 1e-2f, 5e-3, 5e-4);
	check_split(name, &m, &b, &h1, &h2);

	b.seq = 0;
	UNIT_OK(nn_model_step(&m, &b, &loss, err, sizeof(err)) < 0,
	    "block: a batch without seq refused");
	b.seq = s, b.y = NULL;
	UNIT_OK(nn_model_step(&m, &b, &loss, err, sizeof(err)) < 0 &&
	    strstr(err, "without inputs and targets"),
	    "block: a batch without targets refused");
	nn_model_free(&m);
	free(x), free(y);
}

/* Causal: changing the last input position leaves every earlier output
 * and so the loss of a target equal to the old output unchanged. */
static void
test_block_causal_mask(void)
{
	struct nn_model m;
	struct nn_dims d = block_dims(1);
	int s = 4, D = 8;
	float *x = check_fill(s * D, 1.0f), *y = calloc(s * D, sizeof(float));
	struct nn_batch b = { .n = 1, .seq = s - 1, .x = x, .y = y };
	struct nn_batch full = { .n = 1, .seq = s, .x = x, .y = y };
	char err[ERRLEN];
	double l3, l4a, l4b;

	if (make(&m, &d, NULL) < 0)
		return;
	randomize(&m, 0.4f);
	nn_model_loss(&m, &b, &l3, err, sizeof(err));
	nn_model_loss(&m, &full, &l4a, err, sizeof(err));
	for (int i = 0; i < D; i++)
		x[(s - 1) * D + i] += 1.0f;
	nn_model_loss(&m, &full, &l4b, err, sizeof(err));
	/* loss4 = (3*l3*D + e_last) / (4D): the first three rows agree */
	double e_a = l4a * s * D - l3 * (s - 1) * D;
	double e_b = l4b * s * D - l3 * (s - 1) * D;
	UNIT_OK(e_a >= 0 && e_b >= 0 && fabs(e_a - e_b) > 1e-3,
	    "causal block: earlier positions ignore later inputs");
	nn_model_free(&m);
	free(x), free(y);
}

/* Stacks layers.N.* of mlp (d_in -> d_out, then d_out -> d_out) and of
 * blocks, as collx-pipe uses them. */
static void
test_mlp_stack(void)
{
	struct nn_model m;
	struct nn_dims d = { .arch = NN_MLP, .d_in = 5, .d_hidden = 6,
		.d_out = 3, .layers = 3 };
	int n = 4;
	float *x = check_fill(n * 5, 1.0f), *y = check_fill(n * 3, 1.0f);
	struct nn_batch b = { .n = n, .x = x, .y = y };
	struct nn_batch h1 = { .n = 1, .x = x, .y = y };
	struct nn_batch h2 = { .n = 3, .x = x + 5, .y = y + 3 };
	const char *drop[] = { "layers.1.fc2.bias", NULL };

	if (!UNIT_OK(make(&m, &d, drop) == 0, "mlp stack loads"))
		return;
	const struct nn_param *p = nn_model_param(&m, "layers.2.fc1.weight");
	UNIT_OK(m.dims.layers == 3 && m.dims.d_in == 5 && m.dims.d_out == 3 &&
	    p && p->shape[0] == 6 && p->shape[1] == 3 &&
	    !nn_model_param(&m, "fc1.weight"), "mlp stack: layers and shapes");
	randomize(&m, 0.5f);
	check_model_grads("mlp stack", &m, &b, 0, 1e-2f, 2e-3, 2e-4);
	check_split("mlp stack", &m, &b, &h1, &h2);
	nn_model_free(&m);
	free(x), free(y);
}

/* An mlp stack of layers in_i -> hidden_i -> out_i (w[i] = { in, hidden,
 * out }) as a collection, weights 0 (randomize() fills them). */
static int
width_set(struct tensor_set *s, const int (*w)[3], int L)
{
	char err[ERRLEN], name[64];
	int i, k;

	memset(s, 0, sizeof(*s));
	s->format = TENSOR_SAFETENSORS;
	for (i = 0; i < L; i++)
		for (k = 0; k < 4; k++) {
			struct tensor t = { 0 };
			int64_t sh[2] = { k < 2 ? w[i][1] : w[i][2],
			    k < 2 ? w[i][0] : w[i][1] };
			snprintf(name, sizeof(name), "layers.%d.fc%d.%s", i,
			    1 + k / 2, k % 2 ? "bias" : "weight");
			if (tensor_init(&t, DT_F32, k % 2 ? 1 : 2, sh, err,
			    sizeof(err)) < 0 || tensor_set_add(s, name, &t, err,
			    sizeof(err)) < 0)
				return -1;
		}
	return tensor_set_meta_put(s, "collx.arch", "mlp", err, sizeof(err));
}

/* A stack that changes width from layer to layer (3 -> 6 -> 4,
 * 4 -> 5 -> 5, 5 -> 2 -> 2): its sizes, gradients against central
 * differences, split batches; widths that do not chain are refused. */
static void
test_mlp_widths(void)
{
	static const int w[3][3] = { { 3, 6, 4 }, { 4, 5, 5 }, { 5, 2, 2 } };
	static const int bad[2][3] = { { 3, 6, 4 }, { 3, 5, 5 } };
	struct tensor_set s;
	struct nn_model m;
	struct nn_mlp_shape ms;
	char err[ERRLEN];
	int n = 4;
	float *x = check_fill(n * 3, 1.0f), *y = check_fill(n * 2, 1.0f);
	struct nn_batch b = { .n = n, .x = x, .y = y };
	struct nn_batch h1 = { .n = 1, .x = x, .y = y };
	struct nn_batch h2 = { .n = 3, .x = x + 3, .y = y + 2 };

	width_set(&s, w, 3);
	if (!UNIT_OK(nn_model_load(&m, &s, err, sizeof(err)) == 0,
	    "mlp widths 3-6-4, 4-5-5, 5-2-2 load")) {
		printf("# %s\n", err);
		tensor_set_free(&s);
		free(x), free(y);
		return;
	}
	tensor_set_free(&s);
	UNIT_OK(m.dims.d_in == 3 && m.dims.d_out == 2 && m.dims.layers == 3 &&
	    nn_model_mlp_shape(&m, 1, &ms) == 0 && ms.in == 4 &&
	    ms.hidden == 5 && ms.out == 5 && nn_model_mlp_shape(&m, 3, &ms) < 0,
	    "mlp widths: the stack's ends and each layer's widths");
	randomize(&m, 0.5f);
	check_model_grads("mlp widths", &m, &b, 0, 1e-2f, 2e-3, 2e-4);
	check_split("mlp widths", &m, &b, &h1, &h2);
	nn_model_free(&m);
	width_set(&s, bad, 2);
	load_fails(&s, "tensor 'layers.1.fc1.weight' has shape [5, 3], "
	    "expected [5, 4]", "mlp widths that do not chain: refused");
	tensor_set_free(&s);
	free(x), free(y);
}

static void
test_block_stack(void)
{
	struct nn_model m;
	struct nn_dims d = block_dims(1);
	int n = 2, s = 3, D = 8;
	size_t row = (size_t)s * D;
	float *x = check_fill(n * row, 1.0f), *y = check_fill(n * row, 1.0f);
	struct nn_batch b = { .n = n, .seq = s, .x = x, .y = y };
	struct nn_batch h1 = { .n = 1, .seq = s, .x = x, .y = y };
	struct nn_batch h2 = { .n = 1, .seq = s, .x = x + row, .y = y + row };
	struct nn_block_w w[2], g;
	struct nn_mlp_w mw, mg;
	char err[ERRLEN];
	double loss, want;

	d.layers = 2;
	if (!UNIT_OK(make(&m, &d, NULL) == 0, "block stack loads"))
		return;
	UNIT_OK(m.dims.layers == 2 && m.ntensors == 32 &&
	    nn_model_block(&m, 1, &w[1], &g) == 0 &&
	    nn_model_block(&m, 2, &w[1], &g) < 0 &&
	    nn_model_mlp(&m, 0, &mw, &mg) < 0, "block stack: two layers, "
	    "layer accessors");
	randomize(&m, 0.4f);
	check_model_grads("block stack (causal)", &m, &b, 0, 1e-2f, 5e-3, 5e-4);
	check_split("block stack", &m, &b, &h1, &h2);

	/* a stage-wise run with caller-owned activations, as a pipeline
	 * stage does, gives the model's loss */
	struct nn_block_shape sh = nn_block_serial(n, s, D, 2, 12, 1);
	size_t na = nn_block_acts_size(&sh);
	float *buf = malloc(2 * na * sizeof(float));
	float *h = malloc(2 * n * row * sizeof(float));
	struct nn_block_acts a[2];
	nn_model_block(&m, 0, &w[0], &g);
	nn_model_block(&m, 1, &w[1], &g);
	for (int l = 0; l < 2; l++) {
		nn_block_acts_bind(&a[l], buf + l * na, &sh);
		nn_block_forward(h + l * n * row, &a[l], &w[l], l ? h : x, &sh,
		    NULL);
	}
	want = nn_sqerr_forward(h + n * row, y, n * row) / row;
	nn_model_loss(&m, &b, &loss, err, sizeof(err));
	UNIT_CLOSE(loss, want, 1e-12, 0, "block stack: stage-wise layer calls "
	    "give the model's loss");
	free(buf), free(h);
	nn_model_free(&m);
	free(x), free(y);
}

static void
test_gpt(void)
{
	struct nn_model m;
	struct nn_dims d = gpt_dims();
	int n = 3, S = 5;
	int32_t tok[3 * 6];
	struct nn_batch b = { .n = n, .seq = S, .tokens = tok };
	struct nn_batch h1 = { .n = 2, .seq = S, .tokens = tok };
	struct nn_batch h2 = { .n = 1, .seq = S, .tokens = tok + 2 * (S + 1) };
	char err[ERRLEN];
	double loss;

	for (int i = 0; i < n * (S + 1); i++)
		tok[i] = (i * 7 + 3) % 11;
	if (make(&m, &d, NULL) < 0)
		return;
	/* wte zero: every logit 0, each position's loss ln V */
	memset(m.params + nn_model_param(&m, "wte")->offset, 0,
	    11 * 8 * sizeof(float));
	nn_model_loss(&m, &b, &loss, err, sizeof(err));
	UNIT_CLOSE(loss, n * log(11.0), 1e-6, 1e-9, "gpt: zero embeddings give "
	    "n ln V");

	randomize(&m, 0.3f);
	check_model_grads("gpt", &m, &b, 0, 3e-3f, 5e-3, 5e-4);
	check_split("gpt", &m, &b, &h1, &h2);

	tok[4] = 11;
	UNIT_OK(nn_model_step(&m, &b, &loss, err, sizeof(err)) < 0 &&
	    strstr(err, "outside the vocabulary"), "gpt: token out of range "
	    "refused");
	tok[4] = 0;
	b.seq = 4;
	UNIT_OK(nn_model_step(&m, &b, &loss, err, sizeof(err)) < 0,
	    "gpt: seq other than the model's refused");
	nn_model_free(&m);
}

/* The backward hook: stages come in order 0, 1, ...; when stage k is
 * reported every tensor of stage <= k already holds its final gradient
 * (that of a plain nn_model_step) and none of a later stage does yet (so
 * a block's mlp.* stage comes before its attention's backward), and the
 * final gradients are the same bits as nn_model_step's. */
struct hook_check {
	struct nn_model *m;
	const float *want;
	int next, ok;
};

static void
hook_check_stage(void *ctx, int stage)
{
	struct hook_check *h = ctx;
	const struct nn_model *m = h->m;

	h->ok &= stage == h->next++;
	for (size_t t = 0; t < m->ntensors; t++) {
		const struct nn_param *p = &m->table[t];
		int final = !memcmp(m->grads + p->offset, h->want + p->offset,
		    p->count * sizeof(float));
		h->ok &= final == (nn_model_grad_stage(m, t) <= stage);
	}
}

/* A randomized model of d in m, its loss of b (*loss) and a malloc'd copy
 * of its gradients by nn_model_step, m's gradients zeroed again; NULL
 * when the model cannot be made. */
static float *
plain_grads(struct nn_model *m, const struct nn_dims *d,
    const struct nn_batch *b, double *loss)
{
	char err[ERRLEN];
	float *want;

	if (make(m, d, NULL) < 0)
		return NULL;
	randomize(m, 0.4f);
	want = malloc(m->nparams * sizeof(float));
	nn_model_zero_grad(m);
	nn_model_step(m, b, loss, err, sizeof(err));
	memcpy(want, m->grads, m->nparams * sizeof(float));
	nn_model_zero_grad(m);
	return want;
}

static void
test_hook(const char *name, const struct nn_dims *d,
    const struct nn_batch *b, int stages)
{
	struct nn_model m;
	struct hook_check h = { .m = &m, .ok = 1 };
	char what[96], err[ERRLEN];
	double l1, l2;
	float *want;

	if ((want = plain_grads(&m, d, b, &l1)) == NULL)
		return;
	h.want = want;
	nn_model_step_hook(&m, b, &l2, hook_check_stage, &h, err, sizeof(err));
	snprintf(what, sizeof(what), "%s: backward hook: %d stages in order, "
	    "each final when reported", name, stages);
	UNIT_OK(h.ok && h.next == stages && nn_model_grad_stages(&m) == stages &&
	    l1 == l2 && !memcmp(want, m.grads, m.nparams * sizeof(float)), what);
	free(want);
	nn_model_free(&m);
}

/* The weight uses a pass reports, as "L:f" or "L:b" words. */
struct use_trace {
	char s[256];
};

static void
use_record(void *ctx, int layer, int backward)
{
	struct use_trace *t = ctx;
	size_t n = strlen(t->s);

	snprintf(t->s + n, sizeof(t->s) - n, "%s%d:%c", n ? " " : "", layer,
	    backward ? 'b' : 'f');
}

/* nn_model_step_use reports nn.h's order of uses and changes no bit of
 * nn_model_step's loss and gradients. */
static void
test_use(const char *name, const struct nn_dims *d, const struct nn_batch *b,
    const char *order)
{
	struct nn_model m;
	struct use_trace t = { "" };
	char what[160], err[ERRLEN];
	double l1, l2;
	float *want;

	if ((want = plain_grads(&m, d, b, &l1)) == NULL)
		return;
	nn_model_step_use(&m, b, &l2, NULL, use_record, &t, err, sizeof(err));
	snprintf(what, sizeof(what), "%s: weight uses %s, the gradients "
	    "bit for bit", name, order);
	UNIT_OK(strcmp(t.s, order) == 0 && l1 == l2 &&
	    !memcmp(want, m.grads, m.nparams * sizeof(float)), what);
	if (strcmp(t.s, order) != 0)
		printf("#   got %s\n", t.s);
	free(want);
	nn_model_free(&m);
}

static void
test_hooks(void)
{
	struct nn_dims g = gpt_dims(), bl = block_dims(1), ml = mlp_dims();
	int32_t tok[3 * 6];
	float *x = check_fill(2 * 4 * 8, 1.0f), *y = check_fill(2 * 4 * 8, 1.0f);
	struct nn_batch bg = { .n = 3, .seq = 5, .tokens = tok };
	struct nn_batch bb = { .n = 2, .seq = 4, .x = x, .y = y };
	struct nn_batch bm = { .n = 2, .x = x, .y = y };

	for (int i = 0; i < 3 * 6; i++)
		tok[i] = (i * 7 + 3) % 11;
	test_hook("gpt", &g, &bg, 2 * g.layers + 2);
	bl.layers = 3;
	test_hook("block stack", &bl, &bb, 2 * 3);
	test_hook("mlp", &ml, &bm, 1);
	test_use("block stack", &bl, &bb, "0:f 1:f 2:f 2:b 1:b 0:b");
	test_use("mlp", &ml, &bm, "0:f 0:b");
	test_use("gpt", &g, &bg, "-1:f 0:f 1:f -1:f -1:b 1:b 0:b");
	free(x), free(y);
}

int
main(void)
{
	nn_set_threads(1);
	test_load_errors();
	test_load_sizes();
	test_init();
	test_dims_parse();
	test_roundtrip();
	test_mlp();
	test_block(0);
	test_block(1);
	test_block_causal_mask();
	test_mlp_stack();
	test_mlp_widths();
	test_block_stack();
	test_gpt();
	test_hooks();
	return unit_done();
}
