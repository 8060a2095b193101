/*
 * collref: --check's reference. It shares no code with the collective
 * programs' planning and packing (collcli.c) nor with the collectives
 * (lib/comm): inputs travel by point-to-point messages, and every output
 * element is derived from input elements by index arithmetic alone.
 *
 * Reductions follow the documented semantics of lib/comm's kernels:
 * integers wrap in their own width, AVG is the wrapped sum divided with C's
 * truncation, bool SUM/MAX/AVG are "or" and PROD/MIN "and", float MIN/MAX
 * propagate NaN. Float sums and products are computed in double; the
 * result may differ from it by the rounding of w - 1 partial results in
 * the element type, so the tolerance is (w + 1) eps times the sum of
 * magnitudes (or the magnitude of the product).
 */
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "prog/collref.h"
#include "tensor/flat.h"

#define REF_OPCODE 15		/* past coll's kinds; a mismatch stays a mismatch */
#define REF_TAG_HDR 0x7c01
#define REF_TAG_DATA 0x7c02
#define REF_TAG_VERDICT 0x7c03

/* What a rank says of its input before sending it. */
struct ref_hdr {
	int64_t has, dtype, ndim;
	int64_t shape[TENSOR_MAX_DIM];
};

struct ref {
	const struct collref_spec *s;
	int rank, world;
	struct tensor *in;		/* every rank's input; data NULL where none */
	int *has;
	const struct tensor *out;
	struct tensor want;		/* expected shape and dtype (no data) */
	int sdim, gdim;			/* alltoall, normalized */
	int64_t *starts;		/* allgather: first row of each rank, world+1 */
	size_t inner;			/* allgather: elements per row */
};

/* The element reference: value, tolerance, or bytes to match exactly. */
struct ref_val {
	int exact;			/* compare bytes of src element */
	const struct tensor *src;
	size_t at;
	int is_int;
	int64_t iv;
	double dv, tol;
};

static int ref_fail(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int
ref_fail(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
	return 1;
}

static size_t
numel(const struct tensor *t)
{
	size_t n = 1;
	int i;

	for (i = 0; i < t->ndim; i++)
		n *= (size_t)t->shape[i];
	return n;
}

/* Send mine to every peer and receive each peer's into theirs[q]. */
static int
ref_alltoall(struct comm *c, int tag, const void *mine, size_t mylen,
    void **theirs, const size_t *lens)
{
	int w = comm_size(c), me = comm_rank(c), q, n = 0, rc = -1;
	struct comm_req *rq = calloc(2 * (size_t)w, sizeof *rq);

	if (rq == NULL) {
		comm_fail(c, COMM_ERR_RUNTIME, "out of memory");
		return -1;
	}
	for (q = 0; q < w; q++) {
		if (q == me)
			continue;
		if (comm_isend(c, q, tag, mine, mylen, &rq[n++]) < 0 ||
		    comm_irecv(c, q, tag, theirs[q], lens[q], &rq[n++]) < 0)
			goto out;
	}
	rc = comm_waitall(c, rq, n);
out:
	free(rq);
	return rc;
}

static int
hdr_valid(const struct ref_hdr *h)
{
	size_t bytes = 1;
	int i;

	if (h->has == 0)
		return 1;
	if (h->has != 1 || h->dtype < 0 || h->dtype >= DT_COUNT ||
	    h->ndim < 0 || h->ndim > TENSOR_MAX_DIM)
		return 0;
	for (i = 0; i < h->ndim; i++) {
		if (h->shape[i] < 0 || (h->shape[i] > 0 &&
		    bytes > ((size_t)1 << 48) / (size_t)h->shape[i]))
			return 0;
		bytes *= (size_t)h->shape[i];
	}
	return 1;
}

/* Every rank's header, then every rank's data, into x->in. */
static int
ref_gather(struct comm *c, struct ref *x, const struct tensor *in)
{
	struct ref_hdr *h = calloc((size_t)x->world, sizeof *h);
	void **ptr = calloc((size_t)x->world, sizeof *ptr);
	size_t *len = calloc((size_t)x->world, sizeof *len);
	char err[COLLX_ERRLEN];
	int q, rc = -1;

	if (!h || !ptr || !len) {
		comm_fail(c, COMM_ERR_RUNTIME, "out of memory");
		goto out;
	}
	if (in) {
		h[x->rank].has = 1;
		h[x->rank].dtype = in->dtype;
		h[x->rank].ndim = in->ndim;
		memcpy(h[x->rank].shape, in->shape, sizeof in->shape[0] * (size_t)in->ndim);
	}
	for (q = 0; q < x->world; q++) {
		ptr[q] = &h[q];
		len[q] = sizeof h[q];
	}
	if (ref_alltoall(c, REF_TAG_HDR, &h[x->rank], sizeof *h, ptr, len) < 0)
		goto out;
	for (q = 0; q < x->world; q++) {
		if (!hdr_valid(&h[q])) {
			comm_fail(c, COMM_ERR_MISMATCH, "check: bad header from rank %d", q);
			goto out;
		}
		x->has[q] = (int)h[q].has;
		if (x->has[q] && tensor_init(&x->in[q], (enum dtype)h[q].dtype,
		    (int)h[q].ndim, h[q].shape, err, sizeof err) < 0) {
			comm_fail(c, COMM_ERR_RUNTIME, "check: %s", err);
			goto out;
		}
		ptr[q] = x->in[q].data;
		len[q] = x->has[q] ? tensor_nbytes(&x->in[q]) : 0;
	}
	if (in && len[x->rank] > 0)
		memcpy(x->in[x->rank].data, in->data, len[x->rank]);
	rc = ref_alltoall(c, REF_TAG_DATA, in ? in->data : NULL, len[x->rank], ptr, len);
out:
	free(h);
	free(ptr);
	free(len);
	return rc;
}

static int
same_shape(const struct tensor *a, const struct tensor *b)
{
	return a->dtype == b->dtype && a->ndim == b->ndim &&
	    memcmp(a->shape, b->shape, sizeof a->shape[0] * (size_t)a->ndim) == 0;
}

/* Every rank that must have an input has one of the same dtype and
 * shape (allgather: the same but for the rows). */
static int
ref_inputs_agree(struct ref *x, char *err, size_t errlen)
{
	int q, first = x->s->kind == COLL_KIND_BROADCAST ? x->s->root : 0;
	const struct tensor *a = &x->in[first];

	for (q = 0; q < x->world; q++) {
		struct tensor b;

		if (x->s->kind == COLL_KIND_BROADCAST && q != first)
			continue;
		if (!x->has[q])
			return ref_fail(err, errlen, "rank %d sent no input", q);
		b = x->in[q];
		if ((x->s->kind == COLL_KIND_ALLGATHER || x->s->counts) &&
		    b.ndim > 0 && a->ndim > 0)
			b.shape[0] = a->shape[0];
		if (!same_shape(a, &b))
			return ref_fail(err, errlen,
			    "inputs of rank %d and rank %d differ", first, q);
	}
	return 0;
}

/* Rows rank q sends rank p by the counts. */
static int64_t
ref_count(const struct ref *x, int q, int p)
{
	return x->s->counts[(size_t)q * (size_t)x->world + (size_t)p];
}

/* Alltoallv: every rank's rows are its row's sum; this rank's output
 * is the blocks sent to it, source by source (starts: their first
 * output rows). */
static int
ref_expect_counts(struct ref *x, char *err, size_t errlen)
{
	int w = x->world, q, p;
	int64_t rows;

	if (x->want.ndim < 1)
		return ref_fail(err, errlen, "alltoallv of a scalar");
	for (q = 0; q < w; q++) {
		for (rows = 0, p = 0; p < w; p++)
			rows += ref_count(x, q, p);
		if (rows != x->in[q].shape[0])
			return ref_fail(err, errlen, "rank %d has %lld rows, its "
			    "counts send %lld", q, (long long)x->in[q].shape[0],
			    (long long)rows);
	}
	for (x->inner = 1, p = 1; p < x->want.ndim; p++)
		x->inner *= (size_t)x->want.shape[p];
	for (x->starts[0] = 0, q = 0; q < w; q++)
		x->starts[q + 1] = x->starts[q] + ref_count(x, q, x->rank);
	x->want.shape[0] = x->starts[w];
	return 0;
}

/* The expected output shape from the inputs, into x->want. */
static int
ref_expect(struct ref *x, char *err, size_t errlen)
{
	const struct tensor *mine = &x->in[x->rank];
	int64_t *sh = x->want.shape;
	int q, w = x->world;

	if (ref_inputs_agree(x, err, errlen))
		return 1;
	x->want = x->s->kind == COLL_KIND_BROADCAST ? x->in[x->s->root] : *mine;
	x->want.data = NULL;
	x->want.name = NULL;
	switch (x->s->kind) {
	case COLL_KIND_ALLGATHER:
		if (x->want.ndim < 1)
			return ref_fail(err, errlen, "allgather of a scalar");
		x->starts[0] = 0;
		for (q = 0; q < w; q++)
			x->starts[q + 1] = x->starts[q] + x->in[q].shape[0];
		sh[0] = x->starts[w];
		x->inner = sh[0] ? numel(&x->want) / (size_t)sh[0] : 0;
		break;
	case COLL_KIND_REDUCE_SCATTER:
		if (x->want.ndim < 1 || sh[0] % w)
			return ref_fail(err, errlen, "rows not divisible by %d", w);
		sh[0] /= w;
		break;
	case COLL_KIND_ALLTOALL:
		if (x->s->counts)
			return ref_expect_counts(x, err, errlen);
		x->sdim = tensor_dim_norm(x->s->sdim, x->want.ndim);
		x->gdim = tensor_dim_norm(x->s->gdim, x->want.ndim);
		if (x->sdim < 0 || x->sdim >= x->want.ndim || x->gdim < 0 ||
		    x->gdim >= x->want.ndim || sh[x->sdim] % w)
			return ref_fail(err, errlen, "cannot split dimension %d", x->sdim);
		sh[x->sdim] /= w;
		sh[x->gdim] *= w;
		break;
	default:
		break;
	}
	return 0;
}

static int64_t
get_int(enum dtype dt, const void *buf, size_t i)
{
	switch (dt) {
	case DT_I8: return ((const int8_t *)buf)[i];
	case DT_I16: return ((const int16_t *)buf)[i];
	case DT_I32: return ((const int32_t *)buf)[i];
	case DT_I64: return ((const int64_t *)buf)[i];
	case DT_U8: return ((const uint8_t *)buf)[i];
	case DT_BOOL: return ((const uint8_t *)buf)[i] != 0;
	default: return 0;
	}
}

/* v reduced to the element type's width, two's complement. */
static int64_t
wrap(enum dtype dt, uint64_t v)
{
	switch (dt) {
	case DT_I8: return (int8_t)(uint8_t)v;
	case DT_I16: return (int16_t)(uint16_t)v;
	case DT_I32: return (int32_t)(uint32_t)v;
	case DT_U8: return (uint8_t)v;
	case DT_BOOL: return v != 0;
	default: return (int64_t)v;
	}
}

static void
ref_int(const struct ref *x, size_t f, struct ref_val *v)
{
	enum dtype dt = x->want.dtype;
	enum coll_op op = x->s->op;
	uint64_t acc = op == COLL_PROD ? 1 : 0;
	int64_t m = 0, e;
	int q;

	for (q = 0; q < x->world; q++) {
		e = get_int(dt, x->in[q].data, f);
		if (dt == DT_BOOL)
			acc = (op == COLL_PROD || op == COLL_MIN) ?
			    (q == 0 ? (uint64_t)e : (acc && e)) : (acc || e);
		else if (op == COLL_PROD)
			acc *= (uint64_t)e;
		else
			acc += (uint64_t)e;
		if (q == 0 || (op == COLL_MIN && e < m) || (op == COLL_MAX && e > m))
			m = e;
	}
	v->is_int = 1;
	if (dt != DT_BOOL && (op == COLL_MIN || op == COLL_MAX))
		v->iv = m;
	else if (dt != DT_BOOL && op == COLL_AVG)
		v->iv = wrap(dt, acc) / x->world;
	else
		v->iv = wrap(dt, acc);
}

static double
ref_eps(enum dtype dt)
{
	switch (dt) {
	case DT_F64: return ldexp(1, -52);
	case DT_F16: return ldexp(1, -10);
	case DT_BF16: return ldexp(1, -7);
	default: return ldexp(1, -23);
	}
}

static void
ref_float(const struct ref *x, size_t f, struct ref_val *v)
{
	enum dtype dt = x->want.dtype;
	enum coll_op op = x->s->op;
	double s = 0, p = 1, mag = 0, m = 0, e, eps = ref_eps(dt);
	int q, w = x->world;

	for (q = 0; q < w; q++) {
		e = dtype_get(dt, x->in[q].data, f);
		s += e;
		p *= e;
		mag += fabs(e);
		if (q == 0 || isnan(e) || (op == COLL_MIN && e < m) ||
		    (op == COLL_MAX && e > m))
			m = isnan(m) && q ? m : e;
	}
	switch (op) {
	case COLL_SUM: v->dv = s; v->tol = (w + 1) * eps * mag; break;
	case COLL_AVG:
		v->dv = s / w;
		v->tol = (w + 1) * eps * mag / w + eps * fabs(v->dv);
		break;
	case COLL_PROD: v->dv = p; v->tol = (w + 1) * eps * fabs(p); break;
	default: v->dv = m; v->tol = 0; break;
	}
	/* The smallest subnormal step of the type, for results near zero. */
	v->tol += dt == DT_F16 ? ldexp(1, -24) : dt == DT_F64 ? 0 : ldexp(1, -149);
}

/* Flat index of out element i in the gathered inputs: which rank, where. */
static void
ref_locate(const struct ref *x, size_t i, int *rank, size_t *at)
{
	int64_t idx[TENSOR_MAX_DIM], cg;
	const struct tensor *src;
	size_t rest = i, f = 0;
	int d, q = 0;

	switch (x->s->kind) {
	case COLL_KIND_BROADCAST:
		*rank = x->s->root, *at = i;
		return;
	case COLL_KIND_ALLGATHER:
		while (x->starts[q + 1] * (int64_t)x->inner <= (int64_t)i)
			q++;
		*rank = q, *at = i - (size_t)x->starts[q] * x->inner;
		return;
	case COLL_KIND_REDUCE_SCATTER:
		*rank = -1, *at = (size_t)x->rank * numel(&x->want) + i;
		return;
	case COLL_KIND_ALLTOALL:
		if (x->s->counts == NULL)
			break;
		while (x->starts[q + 1] * (int64_t)x->inner <= (int64_t)i)
			q++;
		cg = (int64_t)(i / x->inner) - x->starts[q];	/* row in the block */
		for (d = 0; d < x->rank; d++)
			cg += ref_count(x, q, d);
		*rank = q, *at = (size_t)cg * x->inner + i % x->inner;
		return;
	default:
		*rank = -1, *at = i;
		return;
	}
	for (d = x->want.ndim - 1; d >= 0; d--) {
		idx[d] = (int64_t)(rest % (size_t)x->want.shape[d]);
		rest /= (size_t)x->want.shape[d];
	}
	cg = x->want.shape[x->gdim] / x->world;
	q = (int)(idx[x->gdim] / cg);
	src = &x->in[q];
	idx[x->gdim] -= q * cg;
	idx[x->sdim] += x->rank * (src->shape[x->sdim] / x->world);
	for (d = 0; d < src->ndim; d++)
		f = f * (size_t)src->shape[d] + (size_t)idx[d];
	*rank = q, *at = f;
}

static void
ref_value(const struct ref *x, size_t i, struct ref_val *v)
{
	int q;

	memset(v, 0, sizeof *v);
	ref_locate(x, i, &q, &v->at);
	if (q >= 0) {
		v->exact = 1;
		v->src = &x->in[q];
	} else if (dtype_is_float(x->want.dtype)) {
		ref_float(x, v->at, v);
	} else {
		ref_int(x, v->at, v);
	}
}

/* Error of out element i against v; 0 when within tolerance. HUGE_VAL
 * stands for any difference that has no size (NaN, infinity, bits). */
static double
ref_error(const struct ref *x, size_t i, const struct ref_val *v, double *err)
{
	enum dtype dt = x->want.dtype;
	size_t esz = dtype_size(dt);
	double got = dtype_get(dt, x->out->data, i), d;

	if (v->exact) {
		d = dtype_get(dt, v->src->data, v->at);
		*err = isnan(got) || isnan(d) ? 0 : fabs(got - d);
		return memcmp((const char *)x->out->data + i * esz,
		    (const char *)v->src->data + v->at * esz, esz) ? HUGE_VAL : 0;
	}
	if (v->is_int) {
		*err = fabs(got - (double)v->iv);
		return get_int(dt, x->out->data, i) != v->iv ? HUGE_VAL : 0;
	}
	if (isnan(v->dv) || isinf(v->dv)) {
		*err = 0;
		return (isnan(v->dv) ? isnan(got) : got == v->dv) ? 0 : HUGE_VAL;
	}
	*err = isnan(got) ? HUGE_VAL : fabs(got - v->dv);
	return *err > v->tol ? *err : 0;
}

static void
index_text(const struct tensor *t, size_t i, char *buf, size_t len)
{
	int64_t idx[TENSOR_MAX_DIM];
	int d;

	for (d = t->ndim - 1; d >= 0; d--) {
		idx[d] = t->shape[d] ? (int64_t)(i % (size_t)t->shape[d]) : 0;
		i = t->shape[d] ? i / (size_t)t->shape[d] : 0;
	}
	tensor_dims_str(idx, t->ndim, ", ", buf, len);
}

static int
ref_compare(const struct ref *x, double *maxerr, char *err, size_t errlen)
{
	size_t i, n = numel(&x->want), worst = 0;
	double e, bad, worst_bad = 0;
	struct ref_val v, wv;
	char where[128];

	*maxerr = 0;
	memset(&wv, 0, sizeof wv);
	for (i = 0; i < n; i++) {
		ref_value(x, i, &v);
		bad = ref_error(x, i, &v, &e);
		if (e > *maxerr)
			*maxerr = e;
		if (bad > worst_bad) {
			worst_bad = bad, worst = i, wv = v;
		}
	}
	if (worst_bad == 0)
		return 0;
	index_text(x->out, worst, where, sizeof where);
	if (wv.exact)
		wv.dv = dtype_get(x->want.dtype, wv.src->data, wv.at);
	else if (wv.is_int)
		wv.dv = (double)wv.iv;
	return ref_fail(err, errlen, "%s%s%s element %s is %.9g, expected %.9g "
	    "(max error %.3g, tolerance %.3g)",
	    x->out->name ? "tensor '" : "the result", x->out->name ? x->out->name : "",
	    x->out->name ? "'" : "", where, dtype_get(x->want.dtype, x->out->data, worst),
	    wv.dv, *maxerr, wv.tol);
}

static int
ref_run(struct comm *c, struct ref *x, const struct tensor *in, double *maxerr,
    char *err, size_t errlen)
{
	char a[128], b[128];

	comm_op_begin(c, REF_OPCODE, "check", 0, 0);
	comm_set_step(c, "gathering inputs");
	if (ref_gather(c, x, in) < 0)
		return -1;
	if (ref_expect(x, err, errlen))
		return 1;
	if (!same_shape(x->out, &x->want)) {
		tensor_dims_str(x->out->shape, x->out->ndim, ", ", a, sizeof a);
		tensor_dims_str(x->want.shape, x->want.ndim, ", ", b, sizeof b);
		return ref_fail(err, errlen, "result is %s %s, expected %s %s",
		    dtype_name(x->out->dtype), a, dtype_name(x->want.dtype), b);
	}
	return ref_compare(x, maxerr, err, errlen);
}

int
collref_check(struct comm *c, const struct collref_spec *s,
    const struct tensor *in, const struct tensor *out, double *maxerr,
    char *err, size_t errlen)
{
	struct ref x;
	int q, rc = -1;

	memset(&x, 0, sizeof x);
	x.s = s;
	x.out = out;
	x.rank = comm_rank(c);
	x.world = comm_size(c);
	x.in = calloc((size_t)x.world, sizeof *x.in);
	x.has = calloc((size_t)x.world, sizeof *x.has);
	x.starts = calloc((size_t)x.world + 1, sizeof *x.starts);
	*maxerr = 0;
	if (!x.in || !x.has || !x.starts)
		comm_fail(c, COMM_ERR_RUNTIME, "out of memory");
	else
		rc = ref_run(c, &x, in, maxerr, err, errlen);
	for (q = 0; x.in && q < x.world; q++)
		tensor_free(&x.in[q]);
	free(x.in);
	free(x.has);
	free(x.starts);
	return rc;
}

int
collref_verdict(struct comm *c, int failed)
{
	int w = comm_size(c), q, rc = -1;
	int32_t mine = failed != 0, *all = calloc((size_t)w, sizeof *all);
	void **ptr = calloc((size_t)w, sizeof *ptr);
	size_t *len = calloc((size_t)w, sizeof *len);

	if (!all || !ptr || !len) {
		comm_fail(c, COMM_ERR_RUNTIME, "out of memory");
		rc = -2;
		goto out;
	}
	for (q = 0; q < w; q++) {
		ptr[q] = &all[q];
		len[q] = sizeof all[q];
	}
	all[comm_rank(c)] = mine;
	comm_op_begin(c, REF_OPCODE, "check", 0, 0);
	comm_set_step(c, "verdict");
	if (ref_alltoall(c, REF_TAG_VERDICT, &mine, sizeof mine, ptr, len) < 0) {
		rc = -2;
		goto out;
	}
	for (q = w - 1; q >= 0; q--)
		if (all[q])
			rc = q;
out:
	free(all);
	free(ptr);
	free(len);
	return rc;
}
