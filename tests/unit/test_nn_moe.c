/* test_nn_moe: the mixture-of-experts layer (lib/nn/moe.c) against the
 * independent float64 PyTorch reference examples/peers/torch_moe.py:
 * output, input gradient, every weight gradient, the auxiliary loss and
 * the number of dropped assignments, for top-1 and top-2, with and
 * without capacity and auxiliary loss, and with ties (equal router rows,
 * repeated tokens) that the tie rules decide. Without torch a case skips,
 * and fails under CI (CI=true). */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nn/nn.h"
#include "nn_check.h"
#include "pyref.h"

#define ERRLEN 256
#define N 12
#define D 6
#define FF 10
#define E 4

static char dir[] = "/tmp/collx-nn-moe-XXXXXX";
static char script[512];
static const char *python;

static int
add(struct tensor_set *s, const char *name, const float *p, int ndim,
    int64_t d0, int64_t d1)
{
	struct tensor t = { 0 };
	int64_t shape[2] = { d0, d1 };
	char err[ERRLEN];

	if (tensor_init(&t, DT_F32, ndim, shape, err, sizeof(err)) < 0)
		return -1;
	memcpy(t.data, p, tensor_nbytes(&t));
	if (tensor_set_add(s, name, &t, err, sizeof(err)) < 0) {
		tensor_free(&t);
		return -1;
	}
	return 0;
}

/* The router and experts' tensors of w (prefix "grad." for gradients). */
static int
add_weights(struct tensor_set *s, const char *pre, const struct nn_moe_w *w)
{
	char name[64];
	int rc = 0;

	snprintf(name, sizeof(name), "%srouter.weight", pre);
	rc |= add(s, name, w->router, 2, E, D);
	for (int e = 0; e < E; e++) {
		const struct nn_mlp_w *x = &w->ex[e];
		snprintf(name, sizeof(name), "%sexperts.%d.fc1.weight", pre, e);
		rc |= add(s, name, x->fc1_w, 2, FF, D);
		snprintf(name, sizeof(name), "%sexperts.%d.fc1.bias", pre, e);
		rc |= add(s, name, x->fc1_b, 1, FF, 0);
		snprintf(name, sizeof(name), "%sexperts.%d.fc2.weight", pre, e);
		rc |= add(s, name, x->fc2_w, 2, D, FF);
		snprintf(name, sizeof(name), "%sexperts.%d.fc2.bias", pre, e);
		rc |= add(s, name, x->fc2_b, 1, D, 0);
	}
	return rc;
}

/* Points w's tensors into buf, in add_weights' order. */
static void
moe_bind(struct nn_moe_w *w, struct nn_mlp_w *ex, float *buf)
{
	w->router = buf, buf += E * D;
	w->ex = ex;
	for (int e = 0; e < E; e++) {
		ex[e].fc1_w = buf, buf += FF * D;
		ex[e].fc1_b = buf, buf += FF;
		ex[e].fc2_w = buf, buf += D * FF;
		ex[e].fc2_b = buf, buf += D;
	}
}

#define NW (E * D + E * (2 * FF * D + FF + D))

/*
 * One case: topk, capacity, aux; ties: router rows 1 and 2 equal and
 * tokens 0..3 repeated as 4..7. want_drop: the capacity must drop some
 * assignments (else the case would not test it).
 */
static void
run_case(const char *name, int topk, double capacity, double aux, int ties,
    int want_drop)
{
	struct nn_moe_cfg c = { .experts = E, .topk = topk, .capacity = capacity };
	struct nn_moe_w w, g;
	struct nn_mlp_w wex[E], gex[E];
	struct nn_moe_acts a;
	struct tensor_set in = { .format = TENSOR_SAFETENSORS };
	struct tensor_set out = { .format = TENSOR_SAFETENSORS };
	float *wb = check_fill(NW, 0.5f), *gb = calloc(NW, sizeof(float));
	float *x = check_fill(N * D, 1.0f), *dy = check_fill(N * D, 1.0f);
	float *y = malloc(N * D * sizeof(float));
	float *dx = calloc(N * D, sizeof(float));
	float *ab = malloc(nn_moe_acts_size(&c, N, D, FF) * sizeof(float));
	float *scr = malloc(nn_moe_scratch_size(&c, N, D, FF) * sizeof(float));
	char cmd[1400], v[64], what[160], err[ERRLEN];
	float loss, drop;
	double routed[E];
	int ok = 0, rc;

	moe_bind(&w, wex, wb);
	moe_bind(&g, gex, gb);
	for (int e = 0; e < E; e++)	/* spread the router's choices */
		w.router[e * D + e] += 2.0f;
	if (ties) {
		memcpy(w.router + 2 * D, w.router + D, D * sizeof(float));
		memcpy(x + 4 * D, x, 4 * D * sizeof(float));
	}
	nn_moe_acts_bind(&a, ab, &c, N, D, FF);
	nn_moe_forward(y, &a, &w, x, &c, N, D, FF, NN_ACT_GELU);
	/* the whole batch is these N tokens: loss sum(y * dy) + aux */
	for (int e = 0; e < E; e++)
		routed[e] = a.routed[e];
	loss = (float)nn_moe_aux(a.daux, routed, a.psum, E, aux, N, 1.0);
	drop = *a.dropped;
	nn_moe_backward(dx, &g, scr, dy, &a, &w, x, &c, N, D, FF, NN_ACT_GELU);

	snprintf(v, sizeof(v), "%d", topk);
	rc = tensor_set_meta_put(&in, "topk", v, err, sizeof(err));
	snprintf(v, sizeof(v), "%.17g", capacity);
	rc |= tensor_set_meta_put(&in, "capacity", v, err, sizeof(err));
	snprintf(v, sizeof(v), "%.17g", aux);
	rc |= tensor_set_meta_put(&in, "aux", v, err, sizeof(err));
	rc |= add(&in, "x", x, 2, N, D) | add(&in, "dy", dy, 2, N, D) |
	    add_weights(&in, "", &w);
	rc |= add(&out, "y", y, 2, N, D) | add(&out, "dx", dx, 2, N, D) |
	    add(&out, "aux_loss", &loss, 1, 1, 0) |
	    add(&out, "dropped", &drop, 1, 1, 0) | add_weights(&out, "grad.", &g);
	snprintf(what, sizeof(what), "%s-case.safetensors", name);
	rc |= pyref_save(dir, what, &in);
	snprintf(what, sizeof(what), "%s-got.safetensors", name);
	rc |= pyref_save(dir, what, &out);
	if (rc)
		goto out;
	snprintf(cmd, sizeof(cmd), "%s %s layer %s/%s-case.safetensors "
	    "%s/%s-got.safetensors", python, script, dir, name, dir, name);
	if ((ok = pyref_verdict(system(cmd), name, "no python3 torch")) < 0)
		goto free;
out:
	snprintf(what, sizeof(what), "%s: top-%d, capacity %g, aux %g: output "
	    "and every gradient match PyTorch", name, topk, capacity, aux);
	UNIT_OK(ok, what);
	if (want_drop) {
		snprintf(what, sizeof(what), "%s: capacity %g drops (%g)", name,
		    capacity, drop);
		UNIT_OK(drop > 0, what);
	}
free:
	free(wb), free(gb), free(x), free(dy), free(y), free(dx), free(ab);
	free(scr);
}

/* The capacity rule's arithmetic, by hand. */
static void
capacity_cases(void)
{
	struct nn_moe_cfg c = { .experts = 4, .topk = 2 };

	UNIT_OK(nn_moe_capacity(&c, 12) == 12, "capacity 0: no limit");
	c.capacity = 1.0;
	UNIT_OK(nn_moe_capacity(&c, 12) == 6, "ceil(1 * 12 * 2 / 4) = 6");
	c.capacity = 0.3;
	UNIT_OK(nn_moe_capacity(&c, 10) == 2, "ceil(0.3 * 10 * 2 / 4) = 2");
	c.capacity = 10.0;
	UNIT_OK(nn_moe_capacity(&c, 10) == 10, "capacity at most every token");
}

int
main(void)
{
	char rm[600];

	nn_set_threads(1);
	setvbuf(stdout, NULL, _IONBF, 0);
	pyref_script(script, sizeof(script), __FILE__,
	    "../examples/peers/torch_moe.py");
	python = pyref_python();
	if (mkdtemp(dir) == NULL) {
		UNIT_OK(0, "scratch directory");
		return unit_done();
	}
	capacity_cases();
	run_case("top1", 1, 0.0, 0.0, 0, 0);
	run_case("top2", 2, 0.0, 0.0, 0, 0);
	run_case("top1-aux", 1, 0.0, 0.01, 0, 0);
	run_case("top1-cap", 1, 1.0, 0.0, 0, 1);
	run_case("top2-cap-aux", 2, 0.75, 0.1, 0, 1);
	run_case("top2-ties", 2, 0.5, 0.05, 1, 1);
	run_case("top1-ties", 1, 0.5, 0.0, 1, 1);
	snprintf(rm, sizeof(rm), "rm -rf %s", dir);
	if (system(rm) != 0)
		printf("# could not remove %s\n", dir);
	return unit_done();
}
