/* test_nn_bf16: lib/nn in --precision bf16 against an independent float64
 * PyTorch reference that rounds each matmul input to bf16 and multiplies
 * exactly (tests/nn_bf16_ref.py). For each case this writes the inputs
 * and the C results: the linear layer and the attention core (forward
 * output and every input gradient), and the mlp, block and gpt models
 * (loss and every parameter gradient, through all their layers).
 * Without torch or oneDNN a case skips, and fails under CI (CI=true). */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nn/gemm_int.h"
#include "nn/nn.h"
#include "nn_check.h"
#include "pyref.h"

#define ERRLEN 256

static char dir[] = "/tmp/collx-nn-bf16-XXXXXX";
static char script[512];
static const char *python;

/* Asks the reference about case name; what: the test line. */
static void
ask(const char *name, const char *what)
{
	char cmd[1200];
	int rc;

	snprintf(cmd, sizeof(cmd), "%s %s %s %s", python, script, dir, name);
	rc = access(script, R_OK) == 0 ? system(cmd) : 77 << 8;
	if (pyref_verdict(rc, what, "no python3 torch") >= 0)
		UNIT_OK(rc == 0, what);
}

/* Adds a [rows, cols] f32 tensor (rows 0: a vector) named name to s. */
static int
add(struct tensor_set *s, const char *name, const float *p, int64_t rows,
    int64_t cols)
{
	struct tensor t = { 0 };
	int64_t shape[2] = { rows, cols };
	char err[ERRLEN];

	if (rows == 0 ? tensor_init(&t, DT_F32, 1, &shape[1], err,
	    sizeof(err)) : tensor_init(&t, DT_F32, 2, shape, err,
	    sizeof(err)))
		return -1;
	memcpy(t.data, p, tensor_nbytes(&t));
	return tensor_set_add(s, name, &t, err, sizeof(err));
}

/* s as dir/name.safetensors, the reference's input. */
static int
save_as(struct tensor_set *s, const char *name)
{
	char file[300];

	snprintf(file, sizeof(file), "%s.safetensors", name);
	return pyref_save(dir, file, s);
}

/* The rounding itself, in closed form: a [1, 40] row holding one value v
 * at column j times the unit column e_j is bf16(v), exactly. Columns 3
 * and 37: inside the processor's 32-value conversion and in its scalar
 * tail. */
static void
rounding_case(void)
{
	static const struct {
		uint32_t in, out;
		const char *what;
	} c[] = {
		{ 0x3f808000, 0x3f800000, "1 + 2^-8, a tie, to even 1" },
		{ 0x3f818000, 0x3f820000, "1 + 3 * 2^-8, a tie, to even" },
		{ 0x3f808001, 0x3f810000, "just above a tie, up" },
		{ 0xbf817fff, 0xbf810000, "negative, just below a tie, down" },
		{ 0x7f7fffff, 0x7f800000, "the largest f32 to infinity" },
		{ 0x00000001, 0x00000000, "a denormal to zero" },
		{ 0x807fffff, 0x00000000, "a negative denormal to zero" },
		{ 0xff800000, 0xff800000, "-infinity stays" },
	};
	float a[40], e[40], out;
	char what[160];

	for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++)
		for (int j = 3; j < 40; j += 34) {
			uint32_t bits;
			memset(a, 0, sizeof(a));
			memset(e, 0, sizeof(e));
			memcpy(&a[j], &c[i].in, sizeof(float));
			e[j] = 1.0f;
			nn_gemm(0, 0, 1, 1, 40, 1.0f, a, 40, e, 1, 0.0f, &out, 1);
			memcpy(&bits, &out, sizeof(bits));
			snprintf(what, sizeof(what), "bf16 rounding, column %d: "
			    "%s (%08x -> %08x, got %08x)", j, c[i].what,
			    c[i].in, c[i].out, bits);
			UNIT_OK(bits == c[i].out, what);
		}
}

/* q, k, v's linear layer into attention's kept bf16 heads only
 * (nn_linear_forward_heads while a pass records), then widened back
 * (nn_bf16_widen_kept): small integers, exact in bf16, against their
 * integer sums. The f32 output stays unwritten until widened. */
static void
kept_heads_case(void)
{
	enum { B = 2, S = 3, NH = 2, HD = 2, IN = 4, N = B * S, O = NH * HD };
	float x[N * IN], w[O * IN], b[O], out[N * O];
	uint16_t arena[4 * N * (IN + O) + O * IN];
	struct nn_bview hv = { out, B * NH, S, HD, O, NH, (size_t)S * O, HD };
	int untouched = 1, same = 1;

	if (nn_gemm_portable()) {
		printf("ok %d - kept heads # skip portable bf16\n", ++unit_n);
		return;
	}
	for (int i = 0; i < N * IN; i++)
		x[i] = (float)((i / IN + 2 * (i % IN)) % 5 - 2);
	for (int i = 0; i < O * IN; i++)
		w[i] = (float)((3 * (i / IN) + i % IN) % 7 - 3);
	for (int j = 0; j < O; j++)
		b[j] = (float)(j - 1);
	for (int i = 0; i < N * O; i++)
		out[i] = -7777.0f;
	nn_bf16_keep(arena, sizeof(arena) / sizeof(arena[0]));
	nn_linear_forward_heads(out, x, w, b, B, S, NH, HD, IN);
	for (int i = 0; i < N * O; i++)
		untouched &= out[i] == -7777.0f;
	nn_bf16_widen_kept(&hv);
	nn_bf16_keep_end();
	for (int t = 0; t < N; t++)
		for (int j = 0; j < O; j++) {
			int sum = (int)b[j];
			for (int i = 0; i < IN; i++)
				sum += (int)x[t * IN + i] * (int)w[j * IN + i];
			same &= out[t * O + j] == (float)sum;
		}
	UNIT_OK(untouched, "kept heads: q's f32 output left unwritten");
	UNIT_OK(same, "kept heads: widened, x w^T + b exactly (integers)");
}

/* out = x w^T + b, and dx, dw, db from dout (added to zeros). */
static void
linear_case(void)
{
	enum { N = 5, IN = 7, O = 6 };
	struct tensor_set s = { .format = TENSOR_SAFETENSORS };
	float *x = check_fill(N * IN, 1.0f), *w = check_fill(O * IN, 1.0f);
	float *b = check_fill(O, 1.0f), *dout = check_fill(N * O, 1.0f);
	float out[N * O], dx[N * IN] = { 0 }, dw[O * IN] = { 0 }, db[O] = { 0 };

	nn_linear_forward(out, x, w, b, N, IN, O);
	nn_linear_backward(dx, dw, db, dout, x, w, N, IN, O);
	int rc = add(&s, "x", x, N, IN) || add(&s, "w", w, O, IN) ||
	    add(&s, "b", b, 0, O) || add(&s, "dout", dout, N, O) ||
	    add(&s, "out", out, N, O) || add(&s, "dx", dx, N, IN) ||
	    add(&s, "dw", dw, O, IN) || add(&s, "db", db, 0, O);
	if (rc || save_as(&s, "linear") < 0)
		UNIT_OK(0, "linear: saved");
	else
		ask("linear", "linear: forward and backward in bf16 match the "
		    "float64 reference");
	free(x), free(w), free(b), free(dout);
}

/* The attention core on [1, S, NH*HD]: out, and dq, dk, dv added to
 * random values (saved as dq0, dk0, dv0: the backward pass adds). HD 4:
 * the scale 1/2 is a power of two, so scaling before or after rounding a
 * gradient to bf16 is the same. */
static void
attention_case(int causal)
{
	enum { S = 6, NH = 2, HD = 4, C = NH * HD };
	struct tensor_set s = { .format = TENSOR_SAFETENSORS };
	float *q = check_fill(S * C, 1.0f), *k = check_fill(S * C, 1.0f);
	float *v = check_fill(S * C, 1.0f), *dout = check_fill(S * C, 1.0f);
	float out[S * C], att[NH * S * S], scratch[S * S];
	float *dq = check_fill(S * C, 1.0f), *dk = check_fill(S * C, 1.0f);
	float *dv = check_fill(S * C, 1.0f);
	const char *name = causal ? "attention-causal" : "attention";
	char what[128], err[ERRLEN];

	int rc = add(&s, "dq0", dq, S, C) || add(&s, "dk0", dk, S, C) ||
	    add(&s, "dv0", dv, S, C);
	nn_attention_forward(out, att, q, k, v, 1, S, NH, HD, causal);
	nn_attention_backward(dq, dk, dv, scratch, dout, att, q, k, v, 1, S,
	    NH, HD, causal);
	rc = rc || add(&s, "q", q, S, C) || add(&s, "k", k, S, C) ||
	    add(&s, "v", v, S, C) || add(&s, "dout", dout, S, C) ||
	    add(&s, "out", out, S, C) || add(&s, "dq", dq, S, C) ||
	    add(&s, "dk", dk, S, C) || add(&s, "dv", dv, S, C);
	snprintf(what, sizeof(what), "%s: forward and backward in bf16 match "
	    "the float64 reference", name);
	if (rc || tensor_set_meta_put(&s, "heads", "2", err, sizeof(err)) < 0 ||
	    tensor_set_meta_put(&s, "causal", causal ? "1" : "0", err,
	    sizeof(err)) < 0 ||
	    save_as(&s, name) < 0)
		UNIT_OK(0, what);
	else
		ask(name, what);
	free(q), free(k), free(v), free(dout), free(dq), free(dk), free(dv);
}

/* The parameters (or, swapped in, the gradients) under the model's names,
 * the batch's tensors beside them (x, y or tokens). */
static int
save_model(struct nn_model *m, const struct nn_batch *b, const char *name,
    int grads, double loss)
{
	struct tensor_set s;
	struct tensor t = { 0 };
	char err[ERRLEN], v[64];
	int64_t shape[3] = { b->n, b->seq + 1, 0 };
	int rc;

	if (pyref_model_set(m, grads, loss, &s, err, sizeof(err)) < 0)
		return -1;
	snprintf(v, sizeof(v), "%d", b->n);
	rc = tensor_set_meta_put(&s, "batch_n", v, err, sizeof(err));
	if (!rc && !grads && b->tokens) {
		rc = tensor_init(&t, DT_I32, 2, shape, err, sizeof(err));
		if (!rc)
			memcpy(t.data, b->tokens, tensor_nbytes(&t));
		rc = rc ? rc : tensor_set_add(&s, "batch.tokens", &t, err,
		    sizeof(err));
	} else if (!rc && !grads) {
		int din = m->dims.arch == NN_MLP ? m->dims.d_in :
		    m->dims.d_model, dout = m->dims.arch == NN_MLP ?
		    m->dims.d_out : m->dims.d_model;
		int64_t rows = (int64_t)b->n * (b->seq ? b->seq : 1);
		rc = add(&s, "batch.x", b->x, rows, din) ||
		    add(&s, "batch.y", b->y, rows, dout);
	}
	if (rc < 0) {
		tensor_set_free(&s);
		return -1;
	}
	return save_as(&s, name);
}

/* A model of dims d (seed 11, parameters jittered so every bias and
 * LayerNorm weight matters): its loss and gradients on b in bf16. */
static void
model_case(const char *name, const struct nn_dims *d, struct nn_batch *b)
{
	struct tensor_set s;
	struct nn_model m;
	char err[ERRLEN], file[128], what[160];
	double loss;
	int ok = 0;

	snprintf(what, sizeof(what), "%s: loss and every gradient in bf16 "
	    "match the float64 reference", name);
	if (nn_init(&s, d, 11, err, sizeof(err)) < 0 ||
	    nn_model_load(&m, &s, err, sizeof(err)) < 0) {
		UNIT_OK(0, what);
		return;
	}
	tensor_set_free(&s);
	for (size_t i = 0; i < m.nparams; i++)
		m.params[i] += 0.2f * check_rand();
	snprintf(file, sizeof(file), "%s-model", name);
	ok = save_model(&m, b, file, 0, 0) == 0;
	nn_model_zero_grad(&m);
	ok = ok && nn_model_step(&m, b, &loss, err, sizeof(err)) == 0;
	snprintf(file, sizeof(file), "%s-grads", name);
	ok = ok && save_model(&m, b, file, 1, loss) == 0;
	nn_model_free(&m);
	if (!ok)
		UNIT_OK(0, what);
	else
		ask(name, what);
}

int
main(void)
{
	char err[ERRLEN];

	nn_set_threads(1);
	setvbuf(stdout, NULL, _IONBF, 0);
	if (nn_set_precision(NN_PREC_BF16, err, sizeof(err)) < 0) {
		if (pyref_under_ci())
			UNIT_OK(0, err);
		else
			printf("ok 1 - bf16 # skip %s\n", err), unit_n++;
		return unit_done();
	}
	printf("# matmuls: %s\n", nn_gemm_impl());
	pyref_script(script, sizeof(script), __FILE__, "nn_bf16_ref.py");
	python = pyref_python();
	if (!mkdtemp(dir)) {
		UNIT_OK(0, "scratch directory");
		return unit_done();
	}

	rounding_case();
	kept_heads_case();
	linear_case();
	attention_case(0);
	attention_case(1);

	struct nn_dims mlp = { .arch = NN_MLP, .d_in = 6, .d_hidden = 16,
		.d_out = 3, .layers = 2 };
	float *x = check_fill(8 * 6, 1.0f), *y = check_fill(8 * 3, 1.0f);
	struct nn_batch bm = { .n = 8, .x = x, .y = y };
	model_case("mlp", &mlp, &bm);
	free(x), free(y);

	/* heads of 4: attention's scale 1/2 (see attention_case) */
	struct nn_dims blk = { .arch = NN_BLOCK, .d_model = 8, .heads = 2,
		.d_ff = 12, .causal = 1 };
	x = check_fill(2 * 5 * 8, 1.0f), y = check_fill(2 * 5 * 8, 1.0f);
	struct nn_batch bb = { .n = 2, .seq = 5, .x = x, .y = y };
	model_case("block", &blk, &bb);
	free(x), free(y);

	struct nn_dims gpt = { .arch = NN_GPT, .vocab = 11, .d_model = 8,
		.layers = 2, .heads = 2, .seq = 5 };
	int32_t tok[3 * 6];
	for (int i = 0; i < 3 * 6; i++)
		tok[i] = (int32_t)((i * 7 + i / 3) % 11);
	struct nn_batch bg = { .n = 3, .seq = 5, .tokens = tok };
	model_case("gpt", &gpt, &bg);

	if (unit_rmdir(dir) < 0)
		printf("# could not remove %s\n", dir);
	return unit_done();
}
