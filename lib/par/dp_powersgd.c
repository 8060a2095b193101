/*
 * dp_powersgd: PowerSGD gradient compression (Vogels et al., 2019), as
 * PyTorch's powerSGD_hook runs it (error feedback and warm start on,
 * min_compression_rate 2, orthogonalization epsilon 0), per gradient
 * bucket:
 *
 * Steps before --powersgd-start: a plain f32 allreduce.
 *
 * Then, with W ranks and this rank's gradient sums g of the bucket: the
 * bucket's error feedback e is added, v = g + e. Each tensor is viewed as
 * a matrix M of n = shape[0] rows and m = count / n columns (a vector:
 * n x 1) with rank r = min(n, m, R); it is compressed when
 * (n + m) r 2 < n m, else it goes in one f32 allreduce of all the
 * bucket's uncompressed tensors, one after another. For the compressed
 * ones, in the model's order, with Q (m x r) from the step before
 * (warm start) or, on the first compressed step, drawn from collx's
 * random generator (collx-tensor create --fill randn --seed S + t, for
 * the model's tensor t counted from 0, S the --seed), each Q
 * orthogonalized:
 *
 *	P = M Q		every P of the bucket in one allreduce (sum)
 *	orthogonalize P
 *	Q = M^T P	every Q in one allreduce (sum)
 *	M' = P Q^T	this tensor's gradient sum, approximated
 *
 * Orthogonalization is torch's Gram-Schmidt, column by column: the column
 * divided by its 2-norm (a column of zeros stays zero, where torch would
 * make NaNs), then its projection taken from every later column; torch
 * uses QR beyond rank 2, which spans the same space, so P Q^T is the same
 * up to rounding. Last, e = v - s / W over the whole bucket, s its
 * synced sums (torch keeps v minus the mean it returns): so even the
 * uncompressed tensors keep what their sums differ from the rank's own
 * gradients, as in torch.
 *
 * torch averages (its Q is divided by W); collx keeps sums, divided by
 * the global batch in the update, the same gradients up to rounding.
 */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "par/dp_int.h"
#include "tensor/tensor.h"

/* A compressed tensor: its matrix in the gradient vector, its P and Q in
 * the bucket's. */
struct psgd_mat {
	size_t t;		/* the model's tensor index */
	size_t off, n, m, r, p, q;
};

struct psgd_bucket {
	struct psgd_mat *mat;
	size_t nmat;
	size_t *unc;		/* tensor indices sent uncompressed */
	size_t nunc, unc_len;
	float *p, *q;
	size_t np, nq;
	int warm;		/* q holds the last step's */
};

struct dp_psgd {
	struct psgd_bucket *b;
	int nb;
	float *ef, *buf;	/* error feedback; uncompressed, gathered */
};

static size_t
min3(size_t a, size_t b, size_t c)
{
	size_t x = a < b ? a : b;

	return x < c ? x : c;
}

/* The bucket's tensors, compressed or not. */
static int
plan_bucket(struct run *r, struct psgd_bucket *b, size_t lo, size_t hi)
{
	const struct nn_model *m = r->m;
	size_t t;

	b->mat = calloc(m->ntensors ? m->ntensors : 1, sizeof(*b->mat));
	b->unc = calloc(m->ntensors ? m->ntensors : 1, sizeof(*b->unc));
	if (b->mat == NULL || b->unc == NULL)
		return -1;
	for (t = 0; t < m->ntensors; t++) {
		const struct nn_param *pa = &m->table[t];
		size_t n = pa->ndim == 2 ? (size_t)pa->shape[0] : pa->count;
		size_t cols = n ? pa->count / n : 0;
		size_t rk = min3(n, cols, (size_t)r->cfg->powersgd);

		if (pa->offset < lo || pa->offset >= hi || pa->count == 0)
			continue;
		if ((n + cols) * rk * 2 < n * cols) {
			b->mat[b->nmat++] = (struct psgd_mat){ t, pa->offset, n,
			    cols, rk, b->np, b->nq };
			b->np += n * rk;
			b->nq += cols * rk;
		} else {
			b->unc[b->nunc++] = t;
			b->unc_len += pa->count;
		}
	}
	b->p = malloc((b->np ? b->np : 1) * sizeof(float));
	b->q = malloc((b->nq ? b->nq : 1) * sizeof(float));
	return b->p == NULL || b->q == NULL ? -1 : 0;
}

int
dp_psgd_init(struct run *r)
{
	struct dp_psgd *s = calloc(1, sizeof(*s));
	size_t n = r->m->nparams ? r->m->nparams : 1, most = 1;
	int i;

	if ((r->psgd = s) == NULL || (s->b = calloc((size_t)r->nbucket,
	    sizeof(*s->b))) == NULL || (s->ef = calloc(n, sizeof(float))) ==
	    NULL)
		goto oom;
	for (i = 0; i < r->nbucket; i++, s->nb++) {
		if (plan_bucket(r, &s->b[i], r->bucket[i], r->bucket[i + 1]) < 0)
			goto oom;
		most = s->b[i].unc_len > most ? s->b[i].unc_len : most;
	}
	if ((s->buf = malloc(most * sizeof(float))) == NULL)
		goto oom;
	return 0;
oom:
	return dp_runtime_failed(r, "rank %d: %s", "out of memory");
}

void
dp_psgd_free(struct run *r)
{
	struct dp_psgd *s = r->psgd;
	int i;

	if (s == NULL)
		return;
	for (i = 0; i < s->nb; i++) {
		free(s->b[i].mat);
		free(s->b[i].unc);
		free(s->b[i].p);
		free(s->b[i].q);
	}
	free(s->b);
	free(s->ef);
	free(s->buf);
	free(s);
	r->psgd = NULL;
}

float *
dp_psgd_ef(const struct run *r)
{
	return r->psgd != NULL ? r->psgd->ef : NULL;
}

int
dp_psgd_q_get(const struct run *r, float *flat)
{
	const struct dp_psgd *s = r->psgd;
	int warm = 0;

	memset(flat, 0, r->m->nparams * sizeof(float));
	for (int i = 0; i < s->nb; i++)
		for (size_t j = 0; j < s->b[i].nmat; j++) {
			const struct psgd_mat *x = &s->b[i].mat[j];

			memcpy(flat + x->off, s->b[i].q + x->q, x->m * x->r *
			    sizeof(float));
			warm |= s->b[i].warm;
		}
	return warm;
}

void
dp_psgd_q_put(struct run *r, const float *flat)
{
	struct dp_psgd *s = r->psgd;

	for (int i = 0; i < s->nb; i++) {
		for (size_t j = 0; j < s->b[i].nmat; j++) {
			const struct psgd_mat *x = &s->b[i].mat[j];

			memcpy(s->b[i].q + x->q, flat + x->off, x->m * x->r *
			    sizeof(float));
		}
		s->b[i].warm = 1;
	}
}

/* Gram-Schmidt on the r columns of the n x r row-major matrix a. */
static void
orthogonalize(float *a, size_t n, size_t r)
{
	size_t i, j, k;

	for (i = 0; i < r; i++) {
		double ss = 0;
		float norm;

		for (k = 0; k < n; k++)
			ss += (double)a[k * r + i] * a[k * r + i];
		norm = (float)sqrt(ss);
		for (k = 0; k < n; k++)
			a[k * r + i] = norm > 0 ? a[k * r + i] / norm : 0;
		for (j = i + 1; j < r; j++) {
			double dot = 0;

			for (k = 0; k < n; k++)
				dot += (double)a[k * r + i] * a[k * r + j];
			for (k = 0; k < n; k++)
				a[k * r + j] -= (float)dot * a[k * r + i];
		}
	}
}

/* The first Q of every compressed tensor (before its orthogonalization). */
static int
draw_q(struct run *r, struct psgd_bucket *b)
{
	char e[COLLX_ERRLEN];

	for (size_t i = 0; i < b->nmat; i++) {
		struct psgd_mat *x = &b->mat[i];
		int64_t shape[2] = { (int64_t)x->m, (int64_t)x->r };
		struct tensor t;

		if (tensor_init(&t, DT_F32, 2, shape, e, sizeof e) < 0 ||
		    tensor_fill(&t, TENSOR_FILL_RANDN, 0, r->cfg->seed + x->t, e,
		    sizeof e) < 0)
			return dp_runtime_failed(r, "rank %d: %s", e);
		memcpy(b->q + x->q, t.data, x->m * x->r * sizeof(float));
		tensor_free(&t);
	}
	return 0;
}

static int
sum(struct run *r, float *v, size_t n)
{
	if (n > 0 && coll_allreduce(r->c, v, n, DT_F32, COLL_SUM,
	    r->cfg->algo) < 0)
		return dp_comm_failed(r);
	return 0;
}

/* The bucket's uncompressed tensors summed in one allreduce. */
static int
sync_uncompressed(struct run *r, struct psgd_bucket *b)
{
	float *g = r->m->grads, *buf = r->psgd->buf;
	size_t i, at;

	for (i = 0, at = 0; i < b->nunc; i++) {
		const struct nn_param *pa = &r->m->table[b->unc[i]];

		memcpy(buf + at, g + pa->offset, pa->count * sizeof(float));
		at += pa->count;
	}
	if (sum(r, buf, b->unc_len) < 0)
		return -1;
	for (i = 0, at = 0; i < b->nunc; i++) {
		const struct nn_param *pa = &r->m->table[b->unc[i]];

		memcpy(g + pa->offset, buf + at, pa->count * sizeof(float));
		at += pa->count;
	}
	return 0;
}

/* P = M Q, summed and orthogonalized; Q = M^T P, summed; M = P Q^T. */
static int
sync_compressed(struct run *r, struct psgd_bucket *b)
{
	float *g = r->m->grads;
	size_t i;

	if (!b->warm && draw_q(r, b) < 0)
		return -1;
	b->warm = 1;
	for (i = 0; i < b->nmat; i++) {
		struct psgd_mat *x = &b->mat[i];

		orthogonalize(b->q + x->q, x->m, x->r);
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)x->n,
		    (int)x->r, (int)x->m, 1.0f, g + x->off, (int)x->m,
		    b->q + x->q, (int)x->r, 0.0f, b->p + x->p, (int)x->r);
	}
	if (sum(r, b->p, b->np) < 0)
		return -1;
	for (i = 0; i < b->nmat; i++) {
		struct psgd_mat *x = &b->mat[i];

		orthogonalize(b->p + x->p, x->n, x->r);
		cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)x->m,
		    (int)x->r, (int)x->n, 1.0f, g + x->off, (int)x->m,
		    b->p + x->p, (int)x->r, 0.0f, b->q + x->q, (int)x->r);
	}
	if (sum(r, b->q, b->nq) < 0)
		return -1;
	for (i = 0; i < b->nmat; i++) {
		struct psgd_mat *x = &b->mat[i];

		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)x->n,
		    (int)x->m, (int)x->r, 1.0f, b->p + x->p, (int)x->r,
		    b->q + x->q, (int)x->r, 0.0f, g + x->off, (int)x->m);
	}
	return 0;
}

int
dp_psgd_bucket(struct run *r, int i)
{
	struct psgd_bucket *b = &r->psgd->b[i];
	size_t a = r->bucket[i], n = r->bucket[i + 1] - a, j;
	float *g = r->m->grads + a, *e = r->psgd->ef + a;
	float w = (float)r->world;

	comm_set_step(r->c, "gradient bucket %d of %d", i + 1, r->nbucket);
	if (r->k < r->cfg->powersgd_start)
		return sum(r, g, n);
	/* e holds v until the sums are known */
	for (j = 0; j < n; j++)
		e[j] = g[j] += e[j];
	if (sync_uncompressed(r, b) < 0 || sync_compressed(r, b) < 0)
		return -1;
	for (j = 0; j < n; j++)
		e[j] -= g[j] / w;
	return 0;
}
