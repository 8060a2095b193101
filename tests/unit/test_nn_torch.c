/* test_nn_torch: every model against an independent PyTorch reference
 * (tests/nn_ref.py). For each case this writes the model, a batch, the
 * C loss and gradients, and the parameters after a few optimizer steps;
 * nn_ref.py rebuilds the model in PyTorch from the same file and compares.
 * Without torch (COLLX_PYTHON names the interpreter; default
 * /usr/bin/python3, where python3-torch installs) a case skips, and fails
 * under CI (CI=true), so a green CI means every case ran. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nn/nn.h"
#include "nn_check.h"

#define ERRLEN 256
#define STEPS 3

static char dir[] = "/tmp/collx-nn-torch-XXXXXX";
static char script[512];
static const char *python;

/* The parameters (or, swapped in, the gradients) under the model's names. */
static int
save_params(struct nn_model *m, const char *name, int grads,
    double loss)
{
	struct tensor_set s;
	char path[600], err[ERRLEN], v[64];
	float *keep = m->params;
	int rc;

	if (grads)
		m->params = m->grads;
	rc = nn_model_to_set(m, &s, err, sizeof(err));
	m->params = keep;
	if (rc < 0)
		return -1;
	snprintf(v, sizeof(v), "%.17g", loss);
	snprintf(path, sizeof(path), "%s/%s.safetensors", dir, name);
	rc = tensor_set_meta_put(&s, "loss_sum", v, err, sizeof(err)) < 0 ? -1 :
	    tensor_save(path, &s, err, sizeof(err));
	if (rc < 0)
		printf("# %s: %s\n", path, err);
	tensor_set_free(&s);
	return rc;
}

static int
save_batch(const char *name, const struct nn_model *m,
    const struct nn_batch *b)
{
	struct tensor_set s = { .format = TENSOR_SAFETENSORS };
	struct tensor t = { 0 };
	char path[600], err[ERRLEN];
	int64_t shape[3] = { b->n, b->seq, m->dims.d_model };
	int rc = 0;

	if (m->dims.arch == NN_GPT) {
		shape[1] = b->seq + 1;
		rc = tensor_init(&t, DT_I32, 2, shape, err, sizeof(err));
		if (!rc)
			memcpy(t.data, b->tokens, tensor_nbytes(&t));
		rc = rc ? rc : tensor_set_add(&s, "tokens", &t, err, sizeof(err));
	} else {
		int nd = m->dims.arch == NN_MLP ? 2 : 3;
		for (int i = 0; i < 2 && !rc; i++) {
			if (nd == 2)
				shape[1] = i ? m->dims.d_out : m->dims.d_in;
			rc = tensor_init(&t, DT_F32, nd, shape, err, sizeof(err));
			if (!rc)
				memcpy(t.data, i ? b->y : b->x, tensor_nbytes(&t));
			rc = rc ? rc : tensor_set_add(&s, i ? "y" : "x", &t, err,
			    sizeof(err));
		}
	}
	snprintf(path, sizeof(path), "%s/%s.safetensors", dir, name);
	rc = rc ? rc : tensor_save(path, &s, err, sizeof(err));
	if (rc < 0)
		printf("# %s: %s\n", name, err);
	tensor_set_free(&s);
	return rc;
}

/* Writes NAME-{model,batch,grads,trained}.safetensors, then asks the
 * reference. opt: the optimizer for the training steps. */
static void
run_case(const char *name, const struct nn_dims *d,
    const char **drop, struct nn_batch *b, enum nn_optim_kind opt)
{
	struct tensor_set s;
	struct nn_model m;
	struct nn_optim o;
	struct nn_optim_cfg c;
	char err[ERRLEN], file[128], cmd[1200], what[128];
	double loss;
	int ok = 0, rc;

	if (nn_init(&s, d, 11, err, sizeof(err)) < 0)
		goto out;
	for (; drop && *drop; drop++) {
		struct tensor *t = tensor_set_find(&s, *drop);
		size_t i = (size_t)(t - s.items);
		tensor_free(t);
		memmove(&s.items[i], &s.items[i + 1],
		    (s.count - i - 1) * sizeof(*t));
		s.count--;
	}
	rc = nn_model_load(&m, &s, err, sizeof(err));
	tensor_set_free(&s);
	if (rc < 0)
		goto out;
	/* random parameters, so every bias and LayerNorm weight matters */
	for (size_t i = 0; i < m.nparams; i++)
		m.params[i] += 0.2f * check_rand();
	snprintf(file, sizeof(file), "%s-model", name);
	if (save_params(&m, file, 0, 0) < 0 || (snprintf(file, sizeof(file),
	    "%s-batch", name), save_batch(file, &m, b) < 0))
		goto free;
	nn_model_zero_grad(&m);
	nn_model_step(&m, b, &loss, err, sizeof(err));
	snprintf(file, sizeof(file), "%s-grads", name);
	if (save_params(&m, file, 1, loss) < 0)
		goto free;

	nn_optim_defaults(&c, opt);
	c.lr = 0.01, c.momentum = opt == NN_SGD ? 0.9 : 0.0;
	c.weight_decay = 0.01;
	/* eps 1e-4, not 1e-8: some true gradients are exactly zero (a key
	 * bias shifts every score of a row alike) and Adam would blow their
	 * rounding noise up to steps of lr, in C and torch differently */
	c.eps = 1e-4;
	nn_optim_init(&o, &c, m.nparams, err, sizeof(err));
	for (int t = 0; t < STEPS; t++) {
		nn_model_zero_grad(&m);
		nn_model_step(&m, b, &loss, err, sizeof(err));
		nn_optim_step(&o, m.params, m.grads, 1.0f / b->n);
	}
	nn_optim_free(&o);
	snprintf(file, sizeof(file), "%s-trained", name);
	if (save_params(&m, file, 0, 0) < 0)
		goto free;
	snprintf(cmd, sizeof(cmd), "%s %s %s %s %s %d", python, script, dir, name,
	    opt == NN_SGD ? "sgd" : "adamw", STEPS);
	rc = access(script, R_OK) == 0 ? system(cmd) : 77 << 8;
	if (check_torch_skip(rc)) {
		printf("ok %d - %s # skip no python3 torch or no %s\n",
		    ++unit_n, name, script);
		nn_model_free(&m);
		return;
	}
	ok = WIFEXITED(rc) && WEXITSTATUS(rc) == 0;
free:
	nn_model_free(&m);
out:
	snprintf(what, sizeof(what), "%s: loss, gradients and %d %s steps "
	    "match PyTorch", name, STEPS, opt == NN_SGD ? "SGD" : "AdamW");
	UNIT_OK(ok, what);
}

int
main(void)
{
	char rm[600];

	/* tests/unit/test_nn_torch.c -> tests/nn_ref.py */
	if (check_torch_begin(__FILE__, "../nn_ref.py", script, sizeof(script),
	    &python, dir) < 0)
		return unit_done();

	struct nn_dims mlp = { .arch = NN_MLP, .d_in = 6, .d_hidden = 16,
		.d_out = 3 };
	float *x = check_fill(8 * 6, 1.0f), *y = check_fill(8 * 3, 1.0f);
	struct nn_batch bm = { .n = 8, .x = x, .y = y };
	run_case("mlp", &mlp, NULL, &bm, NN_SGD);
	const char *nobias[] = { "fc1.bias", NULL };
	run_case("mlp-nobias", &mlp, nobias, &bm, NN_ADAMW);
	free(x), free(y);

	mlp.layers = 3;
	x = check_fill(5 * 6, 1.0f), y = check_fill(5 * 3, 1.0f);
	struct nn_batch bs = { .n = 5, .x = x, .y = y };
	run_case("mlp-stack", &mlp, NULL, &bs, NN_SGD);
	free(x), free(y);

	struct nn_dims blk = { .arch = NN_BLOCK, .d_model = 16, .heads = 4,
		.d_ff = 24 };
	x = check_fill(3 * 7 * 16, 1.0f), y = check_fill(3 * 7 * 16, 1.0f);
	struct nn_batch bb = { .n = 3, .seq = 7, .x = x, .y = y };
	const char *someb[] = { "attn.k.bias", "ln2.bias", "mlp.fc2.bias", NULL };
	run_case("block", &blk, someb, &bb, NN_SGD);
	blk.causal = 1;
	run_case("block-causal", &blk, NULL, &bb, NN_ADAMW);
	blk.layers = 2;
	const char *stackb[] = { "layers.1.attn.q.bias", NULL };
	run_case("block-stack", &blk, stackb, &bb, NN_SGD);
	free(x), free(y);

	/* seq 70: causal attention in row blocks of 32, 32 and 6 */
	blk.layers = 0;
	x = check_fill(2 * 70 * 16, 1.0f), y = check_fill(2 * 70 * 16, 1.0f);
	struct nn_batch b70 = { .n = 2, .seq = 70, .x = x, .y = y };
	run_case("block-causal-70", &blk, NULL, &b70, NN_ADAMW);
	free(x), free(y);

	struct nn_dims gpt = { .arch = NN_GPT, .vocab = 23, .d_model = 16,
		.layers = 2, .heads = 2, .seq = 6 };
	int32_t tok[4 * 7];
	for (int i = 0; i < 4 * 7; i++)
		tok[i] = (int32_t)((i * 13 + i / 3) % 23);
	struct nn_batch bg = { .n = 4, .seq = 6, .tokens = tok };
	run_case("gpt", &gpt, NULL, &bg, NN_ADAMW);

	snprintf(rm, sizeof(rm), "rm -rf %s", dir);
	if (system(rm) != 0)
		printf("# could not remove %s\n", dir);
	return unit_done();
}
