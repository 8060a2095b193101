/* tp: running the tensor-parallel forms of column, row, mlp and block (the
 * block itself is lib/nn's, with a reduce hook where Megatron's g and f
 * operators sum partial results, or par/tp_sp.c's around collective
 * matmuls), the sequence-sharded modes' data movement around the attention
 * hooks of par/ulysses.c and par/cp_ring.c, and SGD training. */
#include <stdlib.h>
#include <string.h>

#include "cli/util.h"
#include "comm/coll.h"
#include "par/cp_ring.h"
#include "par/tp_int.h"
#include "par/tp_sp.h"
#include "par/ulysses.h"

/* ---- running ------------------------------------------------------------ */

static float *
param(const struct tp_model *m, float *base, int i)
{
	return m->p[i].present ? base + m->p[i].off : NULL;
}

/* An MoE block's router and experts in base (m->w or m->g), kept in m's
 * views for that buffer: the block's weights point at them. */
static struct nn_moe_w *
moe_ptrs(const struct tp_model *m, float *base)
{
	int k = base == m->g;
	struct nn_moe_w *mo = (struct nn_moe_w *)&m->moe[k];
	struct nn_mlp_w *ex = (struct nn_mlp_w *)m->ex[k];

	mo->router = param(m, base, 12);
	mo->ex = ex;
	for (int e = 0, i = 13; e < m->experts; e++, i += 4)
		ex[e] = (struct nn_mlp_w){ param(m, base, i),
		    param(m, base, i + 1), param(m, base, i + 2),
		    param(m, base, i + 3) };
	return mo;
}

struct nn_block_w
tp_block_ptrs(const struct tp_model *m, float *base)
{
	struct nn_block_w w = { 0 };
	float **f[16] = { &w.ln1_w, &w.ln1_b, &w.q_w, &w.q_b, &w.k_w, &w.k_b,
	    &w.v_w, &w.v_b, &w.o_w, &w.o_b, &w.ln2_w, &w.ln2_b, &w.fc1_w,
	    &w.fc1_b, &w.fc2_w, &w.fc2_b };

	for (int i = 0; i < (m->experts > 0 ? 12 : 16); i++)
		*f[i] = param(m, base, i);
	if (m->experts > 0)
		w.moe = moe_ptrs(m, base);
	return w;
}

struct nn_mlp_w
tp_mlp_ptrs(const struct tp_model *m, float *base)
{
	struct nn_mlp_w w = { param(m, base, 0), param(m, base, 1),
	    param(m, base, 2), param(m, base, 3) };

	return w;
}

static void
mark(struct tp_run *r, const char *name, const char *op, const char *algo,
    size_t count)
{
	if (r->log)
		tp_log_mark(r->log, name, op, algo, count);
}

static int
grouped(const struct tp_run *r)
{
	return r->c != NULL && comm_size(r->c) > 1;
}

static int
ulysses(const struct tp_run *r)
{
	return r->m->cfg.mode == TP_MODE_ULYSSES && grouped(r);
}

static int
zigzag(const struct tp_run *r)
{
	return r->m->cfg.mode == TP_MODE_ZIGZAG;
}

int
tp_seq_sharded(const struct tp_run *r)
{
	enum tp_mode md = r->m->cfg.mode;

	return grouped(r) && (md == TP_MODE_ULYSSES || md == TP_MODE_RING ||
	    md == TP_MODE_ZIGZAG || md == TP_MODE_USP || md == TP_MODE_SP);
}

/* Sequence sharded with every weight whole: the weight gradients, each
 * rank's from its positions, are summed. */
static int
seq_replicated(const struct tp_run *r)
{
	return tp_seq_sharded(r) && r->m->cfg.mode != TP_MODE_SP;
}

/* This rank's positions of the whole [b, s, w] src into dst. */
static void
seq_take(const struct tp_run *r, float *dst, const float *src, int w)
{
	tp_cp_seq_take(dst, src, zigzag(r), comm_size(r->c), r->m->rank, r->b,
	    r->s, w);
}

static int
comm_failed(struct tp_run *r)
{
	return cli_fail(r->err, r->errlen, "%s", comm_error(r->c));
}

/* Ends the compute phase before, sums buf over the ranks (ring). */
static int
sum_over(struct tp_run *r, float *buf, size_t n, const char *before,
    const char *name)
{
	mark(r, before, "compute", "-", 0);
	if (!grouped(r))
		return 0;
	if (coll_allreduce(r->c, buf, n, DT_F32, COLL_SUM, COLL_RING) < 0)
		return comm_failed(r);
	mark(r, name, "allreduce", "ring", n);
	return 0;
}

/* dst [rows, W*cl] from every rank's src [rows, cl] (column block i from
 * rank i). */
static int
gather_cols(struct tp_run *r, float *dst, const float *src, size_t rows,
    size_t cl, const char *name)
{
	int w = grouped(r) ? comm_size(r->c) : 1;
	size_t n = rows * cl;

	if (w == 1) {
		memcpy(dst, src, n * sizeof(float));
		return 0;
	}
	if (coll_allgather(r->c, src, r->tmp, n, DT_F32, COLL_RING) < 0)
		return comm_failed(r);
	for (int i = 0; i < w; i++)
		tp_cols_put(dst, r->tmp + (size_t)i * n, rows, (size_t)w * cl,
		    (size_t)i * cl, cl);
	mark(r, name, "allgather", "ring", n * w);
	return 0;
}

/* dst [b, s, w] whole from every rank's positions src [b, sl, w]. */
static int
gather_seq(struct tp_run *r, float *dst, const float *src, int w,
    const char *name)
{
	int W = comm_size(r->c);
	size_t n = (size_t)r->b * r->sl * w;

	if (coll_allgather(r->c, src, r->tmp, n, DT_F32, COLL_RING) < 0)
		return comm_failed(r);
	for (int i = 0; i < W; i++)
		tp_cp_seq_put(dst, r->tmp + (size_t)i * n, zigzag(r), W, i, r->b,
		    r->s, w);
	mark(r, name, "allgather", "ring", n * W);
	return 0;
}

static int
reduce_hook(void *ctx, enum nn_hook where, float *buf, size_t count)
{
	static const char *before[] = { "fwd attn", "fwd mlp", "bwd mlp",
	    "bwd attn" };
	static const char *name[] = { "fwd allreduce attn.o (g)",
	    "fwd allreduce mlp.fc2 (g)", "bwd allreduce mlp.fc1 (f)",
	    "bwd allreduce attn.qkv (f)" };

	return sum_over(ctx, buf, count, before[where], name[where]);
}

/* Sizes of X, and the world's divisibility of the sequence (Ulysses). */
static int
run_shape(struct tp_run *r, const struct tensor *x)
{
	struct tp_model *m = r->m;
	int want = m->in;
	char buf[64];

	if (m->cfg.layer == TP_ROW && m->cfg.input_parallel)
		want = m->in / m->shards;
	if (m->cfg.layer == TP_BLOCK) {
		if (x->ndim != 3 || x->shape[2] != m->d)
			return cli_fail(r->err, r->errlen, "input has shape %s, "
			    "want [batch, seq, %d]", tensor_shape_str(x, buf,
			    sizeof buf), m->d);
		r->b = (int)x->shape[0], r->s = (int)x->shape[1];
	} else {
		if (x->ndim < 1 || x->shape[x->ndim - 1] != want)
			return cli_fail(r->err, r->errlen, "input has shape %s, "
			    "want [..., %d]", tensor_shape_str(x, buf,
			    sizeof buf), want);
		r->b = (int)(tensor_numel(x) / want), r->s = 1;
		if (m->cfg.mode == TP_MODE_ULYSSES)	/* rows are the sequence */
			r->s = r->b, r->b = 1;
	}
	r->n = r->b * r->s;
	r->in = m->in, r->out = m->out;
	r->sl = r->s;
	if (m->cfg.mode == TP_MODE_ZIGZAG && m->world > 1) {
		if (r->s % (2 * m->world) != 0)
			return cli_fail(r->err, r->errlen, "zigzag: sequence "
			    "length %d is not divisible by %d (2 x world size "
			    "%d)", r->s, 2 * m->world, m->world);
		r->sl = r->s / m->world;
	} else if ((m->cfg.mode == TP_MODE_ULYSSES ||
	    m->cfg.mode == TP_MODE_RING || m->cfg.mode == TP_MODE_USP ||
	    m->cfg.mode == TP_MODE_SP) && m->world > 1) {
		if (r->s % m->world != 0)
			return cli_fail(r->err, r->errlen, "sequence length %d is "
			    "not divisible by world size %d", r->s, m->world);
		r->sl = r->s / m->world;
	}
	if (m->cfg.overlap && m->cfg.mode == TP_MODE_TP && m->world > 1 &&
	    r->s % m->world != 0)
		return cli_fail(r->err, r->errlen, "--overlap ring: sequence "
		    "length %d is not divisible by world size %d", r->s,
		    m->world);
	if (r->n < 1)
		return cli_fail(r->err, r->errlen, "input is empty");
	return 0;
}

int
tp_input_check(struct tp_model *m, const struct tensor *x, char *err,
    size_t errlen)
{
	struct tp_run r = { .m = m, .err = err, .errlen = errlen };

	return run_shape(&r, x);
}

/* Activation and scratch sizes; the block's shape. */
static void
run_work(struct tp_run *r, size_t *na, size_t *ns)
{
	struct tp_model *m = r->m;
	size_t nl = (size_t)r->b * r->sl;

	*na = *ns = 0;
	if (m->cfg.layer == TP_MLP)
		*na = *ns = 2 * nl * (size_t)(m->hidden / m->shards);
	if (m->cfg.layer != TP_BLOCK)
		return;
	r->sh = (struct nn_block_shape){ .b = r->b, .s = r->sl, .d = m->d,
	    .nh = m->heads / m->shards, .hd = m->d / m->heads,
	    .f = m->f / m->shards, .causal = m->cfg.causal,
	    .post_norm = m->cfg.post_norm, .act = m->cfg.act };
	*na = nn_block_acts_size(&r->sh);
	*ns = nn_block_scratch_size(&r->sh);
}

static size_t
max_whole_param(const struct tp_model *m)
{
	size_t mx = 0;

	for (int i = 0; i < m->np; i++) {
		size_t n = (size_t)(m->p[i].shape[0] * m->p[i].shape[1]);
		if (n > mx)
			mx = n;
	}
	return mx;
}

/* USP: group g = rank / U of U consecutive ranks runs Ulysses, and ranks
 * holding the same heads (rank % U) form the ring across the groups: the
 * Ulysses exchange gives each rank the group's s/R positions of its H/U
 * heads, on which the ring runs as ring mode does on its chunks. */
static int
usp_init(struct tp_run *r)
{
	struct tp_model *m = r->m;
	int U = m->cfg.ulysses, W = comm_size(r->c), R = W / U;
	int rk = comm_rank(r->c), hd = m->d / m->heads;

	if (comm_split(r->c, rk / U, rk % U, &r->grp, r->err, r->errlen) < 0 ||
	    comm_split(r->c, rk % U, rk / U, &r->ring, r->err,
	    r->errlen) < 0)
		return -1;
	if (r->log)
		r->log->sub[0] = r->grp, r->log->sub[1] = r->ring;
	if (tp_ring_new(&r->cp, r->ring, r->log, 0, r->b, r->s, m->heads / U,
	    hd, m->cfg.causal, r->err, r->errlen) < 0)
		return -1;
	tp_ring_hooks(r->cp, &r->inner);
	if (ulysses_new(&r->u, r->grp, r->log, r->b, r->s / R, m->heads, hd,
	    m->cfg.causal, &r->inner, r->err, r->errlen) < 0)
		return -1;
	ulysses_hooks(r->u, &r->hk);
	return 0;
}

int
tp_run_init(struct tp_run *r, struct tp_model *m, struct comm *c,
    struct tp_log *log, const struct tensor *x, char *err, size_t errlen)
{
	size_t na, ns, nl, whole, tmp;

	memset(r, 0, sizeof(*r));
	r->m = m, r->c = c, r->log = log, r->err = err, r->errlen = errlen;
	if (run_shape(r, x) < 0)
		return -1;
	nl = (size_t)r->b * r->sl;
	r->xl = nl * (size_t)r->in;
	r->yl = nl * (size_t)r->out;
	if (m->cfg.layer == TP_ROW)
		r->xl = (size_t)r->n * (m->in / m->shards);
	if (m->cfg.layer == TP_COLUMN)
		r->yl = (size_t)r->n * (m->out / m->shards);
	run_work(r, &na, &ns);
	whole = (size_t)r->n * (r->in > r->out ? r->in : r->out);
	tmp = whole > max_whole_param(m) ? whole : max_whole_param(m);
	r->x = malloc(r->xl * sizeof(float));
	r->ylocal = malloc(r->yl * sizeof(float));
	r->dyl = malloc(r->yl * sizeof(float));
	r->dxl = malloc((r->xl > whole ? r->xl : whole) * sizeof(float));
	r->y = malloc((size_t)r->n * r->out * sizeof(float));
	r->dx = malloc((size_t)r->n * r->in * sizeof(float));
	r->tmp = malloc(tmp * sizeof(float));
	r->acts = malloc((na ? na : 1) * sizeof(float));
	r->scratch = malloc((ns ? ns : 1) * sizeof(float));
	if (!r->x || !r->ylocal || !r->dyl || !r->dxl || !r->y || !r->dx ||
	    !r->tmp || !r->acts || !r->scratch) {
		tp_run_free(r);
		return cli_fail(err, errlen, "out of memory for a batch of %d "
		    "rows", r->n);
	}
	if (m->cfg.layer != TP_BLOCK)
		return 0;
	nn_block_acts_bind(&r->a, r->acts, &r->sh);
	if (ulysses(r)) {
		if (ulysses_new(&r->u, c, log, r->b, r->s, m->heads,
		    m->d / m->heads, m->cfg.causal, NULL, err, errlen) < 0) {
			tp_run_free(r);
			return -1;
		}
		ulysses_hooks(r->u, &r->hk);
	} else if (m->cfg.mode == TP_MODE_USP && grouped(r)) {
		if (usp_init(r) < 0) {
			tp_run_free(r);
			return -1;
		}
	} else if ((m->cfg.mode == TP_MODE_SP || m->cfg.overlap) &&
	    grouped(r)) {
		if (tp_sp_new(&r->sp, c, log, m, r->b, r->s,
		    m->cfg.mode == TP_MODE_SP, m->cfg.overlap, err,
		    errlen) < 0) {
			tp_run_free(r);
			return -1;
		}
	} else if (tp_seq_sharded(r)) {
		if (tp_ring_new(&r->cp, c, log, zigzag(r), r->b, r->s, m->heads,
		    m->d / m->heads, m->cfg.causal, err, errlen) < 0) {
			tp_run_free(r);
			return -1;
		}
		tp_ring_hooks(r->cp, &r->hk);
	} else if (m->shards > 1 && grouped(r)) {
		r->hk.reduce = reduce_hook;
		r->hk.ctx = r;
	}
	return 0;
}

void
tp_run_free(struct tp_run *r)
{
	free(r->x), free(r->ylocal), free(r->dyl), free(r->dxl);
	free(r->y), free(r->dx), free(r->tmp), free(r->acts), free(r->scratch);
	ulysses_free(r->u);
	tp_ring_free(r->cp);
	tp_sp_free(r->sp);
	if (r->log)
		r->log->sub[0] = r->log->sub[1] = NULL;
	comm_close(r->grp), comm_close(r->ring);
	memset(r, 0, sizeof(*r));
}

static const struct nn_block_hooks *
hooks(const struct tp_run *r)
{
	return r->hk.reduce || r->hk.attn_fwd ? &r->hk : NULL;
}

static int
forward_local(struct tp_run *r)
{
	struct tp_model *m = r->m;
	int n = r->b * r->sl, sp = m->shards > 1;

	switch (m->cfg.layer) {
	case TP_COLUMN:
		nn_linear_forward(r->ylocal, r->x, param(m, m->w, 0),
		    param(m, m->w, 1), n, m->in, m->out / m->shards);
		break;
	case TP_ROW:
		nn_linear_forward(r->ylocal, r->x, param(m, m->w, 0),
		    sp ? NULL : param(m, m->w, 1), n, m->in / m->shards, m->out);
		if (sp && sum_over(r, r->ylocal, (size_t)n * m->out, "fwd row",
		    "fwd allreduce y (g)") < 0)
			return -1;
		if (sp)
			nn_add_rows(r->ylocal, param(m, m->w, 1), n, m->out);
		break;
	case TP_MLP: {
		struct nn_mlp_w mw = tp_mlp_ptrs(m, m->w);
		struct nn_mlp_acts ma = { r->acts, r->acts + r->b * r->sl *
		    (size_t)(m->hidden / m->shards) };
		if (sp)
			mw.fc2_b = NULL;
		nn_mlp_forward(r->ylocal, &ma, &mw, r->x, n, m->in,
		    m->hidden / m->shards, m->out, m->cfg.act);
		if (sp && sum_over(r, r->ylocal, (size_t)n * m->out, "fwd mlp",
		    "fwd allreduce mlp.fc2 (g)") < 0)
			return -1;
		if (sp)
			nn_add_rows(r->ylocal, param(m, m->w, 3), n, m->out);
		break;
	}
	case TP_BLOCK: {
		struct nn_block_w bw = tp_block_ptrs(m, m->w);
		if (r->sp ? tp_sp_forward(r->sp, r->ylocal, &bw, r->x) < 0 :
		    nn_block_forward(r->ylocal, &r->a, &bw, r->x, &r->sh,
		    hooks(r)) < 0)
			return -1;
		break;
	}
	}
	mark(r, "fwd", "compute", "-", 0);
	return 0;
}

int
tp_forward(struct tp_run *r, const float *x, int gather)
{
	struct tp_model *m = r->m;
	size_t il = (size_t)m->in / m->shards;

	if (tp_seq_sharded(r))
		seq_take(r, r->x, x, r->in);
	else if (m->cfg.layer == TP_ROW && m->shards > 1 &&
	    !m->cfg.input_parallel)
		tp_cols_take(r->x, x, (size_t)r->n, (size_t)m->in,
		    (size_t)m->rank * il, il);
	else
		memcpy(r->x, x, r->xl * sizeof(float));
	if (forward_local(r) < 0)
		return -1;
	if (!gather)
		return 0;
	if (m->cfg.layer == TP_COLUMN && m->shards > 1) {
		if (m->cfg.local_output)
			return 0;
		return gather_cols(r, r->y, r->ylocal, (size_t)r->n,
		    (size_t)m->out / m->shards, "fwd allgather y");
	}
	if (tp_seq_sharded(r))
		return gather_seq(r, r->y, r->ylocal, r->out,
		    "fwd allgather y (output)");
	memcpy(r->y, r->ylocal, r->yl * sizeof(float));
	return 0;
}

/* Gradients from r->dyl: m->g, and r->dx when want_dx. */
static int
backward_core(struct tp_run *r, int want_dx)
{
	struct tp_model *m = r->m;
	int n = r->b * r->sl, sp = m->shards > 1;
	size_t nx = (size_t)n * m->in;

	memset(m->g, 0, m->nlocal * sizeof(float));
	memset(r->dxl, 0, r->xl * sizeof(float));
	switch (m->cfg.layer) {
	case TP_COLUMN:
		memset(r->dxl, 0, nx * sizeof(float));
		nn_linear_backward(r->dxl, param(m, m->g, 0), param(m, m->g, 1),
		    r->dyl, r->x, param(m, m->w, 0), n, m->in,
		    m->out / m->shards);
		if (sp && sum_over(r, r->dxl, nx, "bwd column",
		    "bwd allreduce dx (f)") < 0)
			return -1;
		break;
	case TP_ROW:
		nn_linear_backward(r->dxl, param(m, m->g, 0), param(m, m->g, 1),
		    r->dyl, r->x, param(m, m->w, 0), n, m->in / m->shards,
		    m->out);
		break;
	case TP_MLP: {
		struct nn_mlp_w mw = tp_mlp_ptrs(m, m->w);
		struct nn_mlp_w mg = tp_mlp_ptrs(m, m->g);
		int hl = m->hidden / m->shards;
		struct nn_mlp_acts ma = { r->acts, r->acts + (size_t)n * hl };
		nn_mlp_backward(r->dxl, &mg, r->scratch, r->dyl, &ma, &mw, r->x,
		    n, m->in, hl, m->out, m->cfg.act);
		if (sp && sum_over(r, r->dxl, nx, "bwd mlp",
		    "bwd allreduce mlp.fc1 (f)") < 0)
			return -1;
		break;
	}
	case TP_BLOCK: {
		struct nn_block_w bw = tp_block_ptrs(m, m->w);
		struct nn_block_w bg = tp_block_ptrs(m, m->g);
		if (r->sp ? tp_sp_backward(r->sp, r->dxl, &bg, r->dyl, &bw,
		    r->x) < 0 : nn_block_backward(r->dxl, &bg, r->scratch,
		    r->dyl, &r->a, &bw, r->x, &r->sh, hooks(r)) < 0)
			return -1;
		break;
	}
	}
	if (seq_replicated(r) && sum_over(r, m->g, m->nlocal, "bwd",
	    "bwd allreduce weight grads") < 0)
		return -1;
	mark(r, "bwd", "compute", "-", 0);
	if (!want_dx)
		return 0;
	if (m->cfg.layer == TP_ROW && sp)
		return gather_cols(r, r->dx, r->dxl, (size_t)r->n,
		    (size_t)m->in / m->shards, "bwd allgather dx (output)");
	if (tp_seq_sharded(r))
		return gather_seq(r, r->dx, r->dxl, r->in,
		    "bwd allgather dx (output)");
	memcpy(r->dx, r->dxl, (size_t)r->n * r->in * sizeof(float));
	return 0;
}

int
tp_backward(struct tp_run *r, const float *dy)
{
	struct tp_model *m = r->m;
	size_t ol = (size_t)m->out / m->shards;

	if (m->cfg.layer == TP_COLUMN && m->shards > 1)
		tp_cols_take(r->dyl, dy, (size_t)r->n, (size_t)m->out,
		    (size_t)m->rank * ol, ol);
	else if (tp_seq_sharded(r))
		seq_take(r, r->dyl, dy, r->out);
	else
		memcpy(r->dyl, dy, r->yl * sizeof(float));
	return backward_core(r, 1);
}

int
tp_param_gather(struct comm *c, const struct tp_param *p, int shards,
    const float *mine, float *whole, float *tmp)
{
	size_t rows = (size_t)p->shape[0], cl = p->count / rows;

	if (p->split == TP_WHOLE) {
		memcpy(whole, mine, p->count * sizeof(float));
		return 0;
	}
	if (coll_allgather(c, mine, p->split == TP_ROWS ? whole : tmp,
	    p->count, DT_F32, COLL_RING) < 0)
		return -1;
	if (p->split == TP_COLS)
		for (int j = 0; j < shards; j++)
			tp_cols_put(whole, tmp + (size_t)j * p->count, rows,
			    (size_t)shards * cl, (size_t)j * cl, cl);
	return 0;
}

int
tp_gather_set(struct tp_run *r, int grads, struct tensor_set *out)
{
	struct tp_model *m = r->m;
	float *base = grads ? m->g : m->w;

	for (int i = 0; i < m->np; i++) {
		struct tp_param *p = &m->p[i];
		struct tensor t = { 0 };
		if (!p->present)
			continue;
		if (tensor_init(&t, DT_F32, p->ndim, p->shape, r->err,
		    r->errlen) < 0)
			return -1;
		if (tp_param_gather(r->c, p, m->shards, base + p->off, t.data,
		    r->tmp) < 0) {
			tensor_free(&t);
			return comm_failed(r);
		}
		if (tensor_set_add(out, p->name, &t, r->err, r->errlen) < 0) {
			tensor_free(&t);
			return -1;
		}
	}
	mark(r, grads ? "gather grads" : "gather weights", "allgather", "ring",
	    m->nlocal);
	return 0;
}

int
tp_train_step(struct tp_run *r, const float *x, const float *yt, float lr,
    double *loss)
{
	struct tp_model *m = r->m;
	size_t total = (size_t)r->n * r->out;
	const float *ytl = yt;
	double sum;

	if (tp_forward(r, x, 0) < 0)
		return -1;
	if (tp_seq_sharded(r)) {
		seq_take(r, r->tmp, yt, r->out);
		ytl = r->tmp;
	}
	sum = nn_sqerr_forward(r->ylocal, ytl, r->yl);
	memset(r->dyl, 0, r->yl * sizeof(float));
	nn_sqerr_backward(r->dyl, r->ylocal, ytl, 1.0f / (float)total, r->yl);
	if (tp_seq_sharded(r)) {
		mark(r, "loss", "compute", "-", 0);
		if (coll_allreduce(r->c, &sum, 1, DT_F64, COLL_SUM, COLL_AUTO) < 0)
			return comm_failed(r);
		if (r->log)
			tp_log_mark_dt(r->log, "allreduce loss", "allreduce",
			    "auto", 1, DT_F64);
	}
	*loss = sum / (double)total;
	if (backward_core(r, 0) < 0)
		return -1;
	for (size_t i = 0; i < m->nlocal; i++)
		m->w[i] -= lr * m->g[i];
	mark(r, "sgd", "compute", "-", 0);
	return 0;
}
