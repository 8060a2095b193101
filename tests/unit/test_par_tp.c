/* test_par_tp: tensor and sequence parallelism. Shapes, in process: every
 * rank's shard of every tensor of the column, row, mlp and block layers
 * (Megatron's split: q, k, v, fc1 and a column layer by output rows, o,
 * fc2 and a row layer by input columns, LayerNorms and the biases after a
 * sum whole), checked element by element on weights whose values encode
 * their place. Volumes, over 2 and 4 forked ranks: the collectives of a
 * forward and backward pass, each with the elements it moved and the
 * bytes this rank sent, against closed forms (ring allreduce of N floats:
 * 2 (W-1) N/W sent; ring allgather of W blocks of B: (W-1) B; pairwise
 * all-to-all of W blocks of B: (W-1) B), and the output and input
 * gradient against one process running the layer whole. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "par/tp.h"
#include "par_world.h"
#include "unit.h"

/* Sizes: n = B*S rows of IN -> H -> OUT (column, row: IN -> OUT); a block
 * of width D, HEADS heads and FF feed-forward features. */
enum { B = 2, S = 4, IN = 8, H = 12, OUT = 4, D = 8, HEADS = 4, FF = 16 };

enum split { WHOLE, ROWS, COLS };

struct tdef {
	const char *name;
	enum split split;	/* Megatron's */
	int rows, cols;		/* cols 0: 1-D */
};

static const struct tdef column_t[] = {
	{ "weight", ROWS, OUT, IN }, { "bias", ROWS, OUT, 0 } };
static const struct tdef row_t[] = {
	{ "weight", COLS, OUT, IN }, { "bias", WHOLE, OUT, 0 } };
static const struct tdef mlp_t[] = {
	{ "fc1.weight", ROWS, H, IN }, { "fc1.bias", ROWS, H, 0 },
	{ "fc2.weight", COLS, OUT, H }, { "fc2.bias", WHOLE, OUT, 0 } };
static const struct tdef block_t[] = {
	{ "ln1.weight", WHOLE, D, 0 }, { "ln1.bias", WHOLE, D, 0 },
	{ "attn.q.weight", ROWS, D, D }, { "attn.q.bias", ROWS, D, 0 },
	{ "attn.k.weight", ROWS, D, D }, { "attn.k.bias", ROWS, D, 0 },
	{ "attn.v.weight", ROWS, D, D }, { "attn.v.bias", ROWS, D, 0 },
	{ "attn.o.weight", COLS, D, D }, { "attn.o.bias", WHOLE, D, 0 },
	{ "ln2.weight", WHOLE, D, 0 }, { "ln2.bias", WHOLE, D, 0 },
	{ "mlp.fc1.weight", ROWS, FF, D }, { "mlp.fc1.bias", ROWS, FF, 0 },
	{ "mlp.fc2.weight", COLS, D, FF }, { "mlp.fc2.bias", WHOLE, D, 0 } };

static const struct {
	const struct tdef *t;
	int nt;
} layers[] = {
	[TP_COLUMN] = { column_t, 2 }, [TP_ROW] = { row_t, 2 },
	[TP_MLP] = { mlp_t, 4 }, [TP_BLOCK] = { block_t, 16 } };

/* Element (r, c) of tensor t: coded, t*1000 + r*cols + c (exact), or a
 * small smooth value; LayerNorm weights near one. */
static float
value(int t, const struct tdef *d, int r, int c, int coded)
{
	int cols = d->cols ? d->cols : 1, i = r * cols + c;

	if (coded)
		return (float)(t * 1000 + i);
	if (strstr(d->name, "ln") != NULL && strstr(d->name, "weight"))
		return 1 + (float)((i * 3) % 7 - 3) / 50;
	return (float)((i * 7 + t * 5) % 17 - 8) / 40;
}

static int
set_make(struct tensor_set *s, enum tp_layer l, int coded)
{
	char e[256];

	memset(s, 0, sizeof(*s));
	s->format = TENSOR_SAFETENSORS;
	for (int t = 0; t < layers[l].nt; t++) {
		const struct tdef *d = &layers[l].t[t];
		int64_t shape[2] = { d->rows, d->cols };
		struct tensor x;
		float *f;

		if (tensor_init(&x, DT_F32, d->cols ? 2 : 1, shape, e,
		    sizeof e) < 0)
			return -1;
		f = x.data;
		for (int r = 0; r < d->rows; r++)
			for (int c = 0; c < (d->cols ? d->cols : 1); c++)
				f[r * (d->cols ? d->cols : 1) + c] =
				    value(t, d, r, c, coded);
		if (tensor_set_add(s, d->name, &x, e, sizeof e) < 0)
			return -1;
	}
	if (l == TP_BLOCK)
		return tensor_set_meta_put(s, "heads", "4", e, sizeof e);
	return 0;
}

static const char *layer_name[] = { "column", "row", "mlp", "block" };

/* Rank's shard of tensor t as loaded, element by element. */
static int
shard_ok(const struct tp_model *m, int t, const struct tdef *d, int rank,
    int w)
{
	const struct tp_param *p = &m->p[t];
	int cols = d->cols ? d->cols : 1;
	int r0 = 0, nr = d->rows, c0 = 0, nc = cols, k = 0;

	if (d->split == ROWS)
		nr = d->rows / w, r0 = rank * nr;
	else if (d->split == COLS)
		nc = cols / w, c0 = rank * nc;
	if (!p->present || strcmp(p->name, d->name) != 0 ||
	    p->count != (size_t)nr * nc)
		return 0;
	for (int r = r0; r < r0 + nr; r++)
		for (int c = c0; c < c0 + nc; c++)
			if (m->w[p->off + k++] != value(t, d, r, c, 1))
				return 0;
	return 1;
}

static void
shapes(enum tp_layer l, enum tp_mode mode, int w)
{
	struct tp_cfg cfg = { .layer = l, .mode = mode };
	struct tensor_set s;
	struct tp_model m;
	char e[256], what[160];
	int ok = set_make(&s, l, 1) == 0;

	for (int rank = 0; ok && rank < w; rank++) {
		size_t total = 0;

		if (tp_model_load(&m, &cfg, &s, rank, w, e, sizeof e) < 0) {
			printf("#   %s\n", e);
			ok = 0;
			break;
		}
		for (int t = 0; t < layers[l].nt; t++) {
			struct tdef d = layers[l].t[t];

			if (mode != TP_MODE_TP)		/* Ulysses: whole */
				d.split = WHOLE;
			ok &= shard_ok(&m, t, &d, rank, w);
			total += m.p[t].count;
		}
		ok &= m.np == layers[l].nt && m.nlocal == total;
		tp_model_free(&m);
	}
	snprintf(what, sizeof what, "%s layer, %s on %d ranks: each rank's "
	    "shard of every tensor in place", layer_name[l], tp_mode_name(mode),
	    w);
	UNIT_OK(ok, what);
	tensor_set_free(&s);
}

/* ---- volumes ------------------------------------------------------------ */

struct want {
	const char *name, *op;
	size_t count;		/* elements the collective moved */
	size_t sent;		/* floats this rank sent */
};

/* The collectives of a forward (with the output gathered) and a
 * backward pass, in order: *n of them into v. */
static void
want_comm(enum tp_layer l, enum tp_mode mode, int w, struct want *v, int *n)
{
	size_t rows = B * S, nd = rows * D, W = (size_t)w;
	size_t ar = 2 * (W - 1);	/* ring allreduce: times N/W sent */
	size_t blk = (size_t)B * (S / w) * (D / w);	/* a block's floats */
	size_t params = 4 * D + 4 * (D * D + D) + FF * D + FF + D * FF + D;

	*n = 0;
#define W_(nm, o, c, s) (v[(*n)++] = (struct want){ nm, o, c, s })
	if (mode == TP_MODE_ULYSSES) {
		W_("fwd alltoall qkv", "alltoall", 3 * blk * W,
		    (W - 1) * 3 * blk);
		W_("fwd alltoall out", "alltoall", blk * W, (W - 1) * blk);
		W_("fwd allgather y (output)", "allgather", nd,
		    (W - 1) * nd / W);
		W_("bwd alltoall dout", "alltoall", blk * W, (W - 1) * blk);
		W_("bwd alltoall dqkv", "alltoall", 3 * blk * W,
		    (W - 1) * 3 * blk);
		W_("bwd allreduce weight grads", "allreduce", params,
		    ar * params / W);
		W_("bwd allgather dx (output)", "allgather", nd,
		    (W - 1) * nd / W);
		return;
	}
	switch (l) {
	case TP_COLUMN:
		W_("fwd allgather y", "allgather", rows * OUT,
		    (W - 1) * rows * OUT / W);
		W_("bwd allreduce dx (f)", "allreduce", rows * IN,
		    ar * rows * IN / W);
		break;
	case TP_ROW:
		W_("fwd allreduce y (g)", "allreduce", rows * OUT,
		    ar * rows * OUT / W);
		W_("bwd allgather dx (output)", "allgather", rows * IN,
		    (W - 1) * rows * IN / W);
		break;
	case TP_MLP:
		W_("fwd allreduce mlp.fc2 (g)", "allreduce", rows * OUT,
		    ar * rows * OUT / W);
		W_("bwd allreduce mlp.fc1 (f)", "allreduce", rows * IN,
		    ar * rows * IN / W);
		break;
	case TP_BLOCK:
		W_("fwd allreduce attn.o (g)", "allreduce", nd, ar * nd / W);
		W_("fwd allreduce mlp.fc2 (g)", "allreduce", nd, ar * nd / W);
		W_("bwd allreduce mlp.fc1 (f)", "allreduce", nd, ar * nd / W);
		W_("bwd allreduce attn.qkv (f)", "allreduce", nd, ar * nd / W);
		break;
	}
#undef W_
}

/* The log's collectives against want; a line on a mismatch. */
static int
log_matches(const struct tp_log *lg, const struct want *v, int n)
{
	int k = 0;

	for (int i = 0; i < lg->n; i++) {
		const struct tp_phase *p = &lg->p[i];

		if (strcmp(p->op, "compute") == 0)
			continue;
		if (k == n || strcmp(p->name, v[k].name) != 0 ||
		    strcmp(p->op, v[k].op) != 0 || p->count != v[k].count ||
		    p->bytes != v[k].sent * sizeof(float)) {
			par_check(0, "phase '%s' %s count %zu sent %llu; "
			    "wanted '%s' %s count %zu sent %zu", p->name, p->op,
			    p->count, (unsigned long long)p->bytes,
			    k < n ? v[k].name : "(none)", k < n ? v[k].op : "",
			    k < n ? v[k].count : 0,
			    k < n ? v[k].sent * sizeof(float) : 0);
			return 0;
		}
		k++;
	}
	return k == n;
}

/* Input and output gradient of the layer's shape, smooth values. */
static int
inputs(enum tp_layer l, struct tensor *x, float **dy, size_t *ny)
{
	int64_t shape[3] = { B, S, l == TP_BLOCK ? D : IN };
	int64_t flat[2] = { B * S, IN };
	char e[256];
	float *f;

	if (tensor_init(x, DT_F32, l == TP_BLOCK ? 3 : 2, l == TP_BLOCK ?
	    shape : flat, e, sizeof e) < 0)
		return -1;
	f = x->data;
	for (int64_t i = 0; i < tensor_numel(x); i++)
		f[i] = (float)((i * 11) % 13 - 6) / 6;
	*ny = (size_t)B * S * (l == TP_BLOCK ? D : OUT);
	if ((*dy = malloc(*ny * sizeof(float))) == NULL)
		return -1;
	for (size_t i = 0; i < *ny; i++)
		(*dy)[i] = (float)((int)(i * 5 % 9) - 4) / 4;
	return 0;
}

/* Forward with the output gathered and backward of the layer: output
 * and input gradient copied to y and dx. */
static int
pass(enum tp_layer l, enum tp_mode mode, struct comm *c, struct tp_log *lg,
    const struct tensor *x, const float *dy, float *y, float *dx)
{
	struct tp_cfg cfg = { .layer = l, .mode = mode };
	struct tensor_set s;
	struct tp_model m;
	struct tp_run r;
	char e[COLLX_ERRLEN];
	int rank = c ? comm_rank(c) : 0, w = c ? comm_size(c) : 1, rc = -1;

	if (set_make(&s, l, 0) < 0 ||
	    tp_model_load(&m, &cfg, &s, rank, w, e, sizeof e) < 0) {
		tensor_set_free(&s);
		return -1;
	}
	if (tp_run_init(&r, &m, c, lg, x, e, sizeof e) == 0) {
		if (lg != NULL)
			tp_log_start(lg, c);
		if (tp_forward(&r, x->data, 1) == 0 &&
		    tp_backward(&r, dy) == 0) {
			memcpy(y, r.y, (size_t)r.n * r.out * sizeof(float));
			memcpy(dx, r.dx, (size_t)r.n * r.in * sizeof(float));
			rc = 0;
		}
		tp_run_free(&r);
	}
	if (rc < 0)
		par_check(0, "rank %d: %s %s: %s", rank, layer_name[l],
		    tp_mode_name(mode), e);
	tp_model_free(&m);
	tensor_set_free(&s);
	return rc;
}

static int
close_all(const float *a, const float *b, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (fabsf(a[i] - b[i]) > 1e-5f + 1e-4f * fabsf(b[i]))
			return 0;
	return 1;
}

static void
volumes(struct comm *c, enum tp_layer l, enum tp_mode mode)
{
	static struct tp_log lg;
	struct want v[8];
	struct tensor x;
	float *dy = NULL, y[B * S * D], dx[B * S * D], y1[B * S * D],
	    dx1[B * S * D];
	size_t ny, nx;
	int n, w = comm_size(c), rank = comm_rank(c);

	if (inputs(l, &x, &dy, &ny) < 0) {
		par_check(0, "rank %d: inputs", rank);
		return;
	}
	nx = (size_t)tensor_numel(&x);
	want_comm(l, mode, w, v, &n);
	if (pass(l, mode, c, &lg, &x, dy, y, dx) == 0 &&
	    pass(l, TP_MODE_SERIAL, NULL, NULL, &x, dy, y1, dx1) == 0) {
		par_check(log_matches(&lg, v, n), "W=%d rank %d %s %s: the "
		    "collectives, elements moved and bytes sent of the closed "
		    "forms", w, rank, layer_name[l], tp_mode_name(mode));
		par_check(close_all(y, y1, ny) && close_all(dx, dx1, nx),
		    "W=%d rank %d %s %s: output and input gradient of one "
		    "process", w, rank, layer_name[l], tp_mode_name(mode));
	}
	free(dy);
	tensor_free(&x);
}

static int
tp_rank(struct comm *c, void *arg)
{
	(void)arg;
	for (int l = TP_COLUMN; l <= TP_BLOCK; l++)
		volumes(c, l, TP_MODE_TP);
	volumes(c, TP_BLOCK, TP_MODE_ULYSSES);
	return 0;
}

int
main(void)
{
	for (int l = TP_COLUMN; l <= TP_BLOCK; l++)
		for (int w = 1; w <= 4; w *= 2)
			shapes(l, TP_MODE_TP, w);
	shapes(TP_BLOCK, TP_MODE_ULYSSES, 4);
	shapes(TP_MLP, TP_MODE_ULYSSES, 2);
	par_world(2, "tensor parallel on 2 ranks", tp_rank, NULL);
	par_world(4, "tensor parallel on 4 ranks", tp_rank, NULL);
	return unit_done();
}
