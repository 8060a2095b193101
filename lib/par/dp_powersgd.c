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
	size_t t;		/* the tensor's seed index */
	size_t off, n, m, r, p, q;
};

struct psgd_bucket {
	struct psgd_mat *mat;
	size_t nmat;
	struct dp_range *unc;	/* tensors sent uncompressed */
	size_t nunc, unc_len;
	float *p, *q;
	size_t np, nq;
	int warm;		/* q holds the last step's */
};

struct dp_powersgd {
	struct psgd_bucket *b;
	struct dp_range *rg;	/* the buckets */
	int nb;
	size_t len;
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
plan_bucket(struct psgd_bucket *b, const struct dp_powersgd_tensor *tens,
    size_t nt, const struct dp_range *rg, int rank)
{
	size_t t;

	b->mat = calloc(nt ? nt : 1, sizeof(*b->mat));
	b->unc = calloc(nt ? nt : 1, sizeof(*b->unc));
	if (b->mat == NULL || b->unc == NULL)
		return -1;
	for (t = 0; t < nt; t++) {
		const struct dp_powersgd_tensor *x = &tens[t];
		size_t n = x->rows, cols = n ? x->count / n : 0;
		size_t rk = min3(n, cols, (size_t)rank);

		if (x->off < rg->off || x->off >= rg->off + rg->len ||
		    x->count == 0)
			continue;
		if ((n + cols) * rk * 2 < n * cols) {
			b->mat[b->nmat++] = (struct psgd_mat){ x->t, x->off, n,
			    cols, rk, b->np, b->nq };
			b->np += n * rk;
			b->nq += cols * rk;
		} else {
			b->unc[b->nunc++] = (struct dp_range){ x->off,
			    x->count };
			b->unc_len += x->count;
		}
	}
	b->p = malloc((b->np ? b->np : 1) * sizeof(float));
	b->q = malloc((b->nq ? b->nq : 1) * sizeof(float));
	return b->p == NULL || b->q == NULL ? -1 : 0;
}

/* The first Q of every compressed tensor (before its orthogonalization). */
static int
draw_q(struct psgd_bucket *b, uint64_t seed, char *err, size_t errlen)
{
	for (size_t i = 0; i < b->nmat; i++) {
		struct psgd_mat *x = &b->mat[i];
		int64_t shape[2] = { (int64_t)x->m, (int64_t)x->r };
		struct tensor t;

		if (tensor_init(&t, DT_F32, 2, shape, err, errlen) < 0)
			return -1;
		if (tensor_fill(&t, TENSOR_FILL_RANDN, 0, seed + x->t, err,
		    errlen) < 0) {
			tensor_free(&t);
			return -1;
		}
		memcpy(b->q + x->q, t.data, x->m * x->r * sizeof(float));
		tensor_free(&t);
	}
	return 0;
}

struct dp_powersgd *
dp_powersgd_new(const struct dp_powersgd_tensor *tens, size_t nt,
    const struct dp_range *rg, int nb, size_t len, int rank, uint64_t seed,
    char *err, size_t errlen)
{
	struct dp_powersgd *s = calloc(1, sizeof(*s));
	size_t most = 1;
	int i;

	if (s == NULL || (s->b = calloc((size_t)(nb ? nb : 1),
	    sizeof(*s->b))) == NULL || (s->rg = malloc((size_t)(nb ? nb : 1) *
	    sizeof(*s->rg))) == NULL || (s->ef = calloc(len ? len : 1,
	    sizeof(float))) == NULL)
		goto oom;
	s->len = len;
	for (i = 0; i < nb; i++, s->nb++) {
		s->rg[i] = rg[i];
		if (plan_bucket(&s->b[i], tens, nt, &rg[i], rank) < 0)
			goto oom;
		most = s->b[i].unc_len > most ? s->b[i].unc_len : most;
		if (draw_q(&s->b[i], seed, err, errlen) < 0)
			goto fail;
	}
	if ((s->buf = malloc(most * sizeof(float))) == NULL)
		goto oom;
	return s;
oom:
	cli_fail(err, errlen, "%s", "out of memory");
fail:
	dp_powersgd_delete(s);
	return NULL;
}

void
dp_powersgd_delete(struct dp_powersgd *s)
{
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
	free(s->rg);
	free(s->ef);
	free(s->buf);
	free(s);
}

size_t
dp_powersgd_tensors(const struct nn_model *m, const struct dp_range *rg, int n,
    struct dp_powersgd_tensor *tens)
{
	size_t t, nt = 0;
	int i;

	for (t = 0; t < m->ntensors; t++) {
		const struct nn_param *pa = &m->table[t];

		for (i = 0; i < n; i++)
			if (pa->offset >= rg[i].off && pa->offset < rg[i].off +
			    rg[i].len)
				break;
		if (i < n)
			tens[nt++] = (struct dp_powersgd_tensor){ t, pa->offset,
			    pa->ndim == 2 ? (size_t)pa->shape[0] : pa->count,
			    pa->count };
	}
	return nt;
}

float *
dp_powersgd_ef(const struct dp_powersgd *s)
{
	return s->ef;
}

int
dp_powersgd_q_get(const struct dp_powersgd *s, float *flat)
{
	int warm = 0;

	memset(flat, 0, s->len * sizeof(float));
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
dp_powersgd_q_put(struct dp_powersgd *s, const float *flat)
{
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

static int
sum(struct comm *c, enum coll_algo algo, float *v, size_t n)
{
	return n > 0 ? coll_allreduce(c, v, n, DT_F32, COLL_SUM, algo) : 0;
}

/* The bucket's uncompressed tensors summed in one allreduce. */
static int
sync_uncompressed(struct dp_powersgd *s, struct psgd_bucket *b, struct comm *c,
    enum coll_algo algo, float *g)
{
	size_t i, at;

	for (i = 0, at = 0; i < b->nunc; i++) {
		memcpy(s->buf + at, g + b->unc[i].off, b->unc[i].len *
		    sizeof(float));
		at += b->unc[i].len;
	}
	if (sum(c, algo, s->buf, b->unc_len) < 0)
		return -1;
	for (i = 0, at = 0; i < b->nunc; i++) {
		memcpy(g + b->unc[i].off, s->buf + at, b->unc[i].len *
		    sizeof(float));
		at += b->unc[i].len;
	}
	return 0;
}

/* P = M Q, summed and orthogonalized; Q = M^T P, summed; M = P Q^T. */
static int
sync_compressed(struct psgd_bucket *b, struct comm *c, enum coll_algo algo,
    float *g)
{
	size_t i;

	b->warm = 1;
	for (i = 0; i < b->nmat; i++) {
		struct psgd_mat *x = &b->mat[i];

		orthogonalize(b->q + x->q, x->m, x->r);
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)x->n,
		    (int)x->r, (int)x->m, 1.0f, g + x->off, (int)x->m,
		    b->q + x->q, (int)x->r, 0.0f, b->p + x->p, (int)x->r);
	}
	if (sum(c, algo, b->p, b->np) < 0)
		return -1;
	for (i = 0; i < b->nmat; i++) {
		struct psgd_mat *x = &b->mat[i];

		orthogonalize(b->p + x->p, x->n, x->r);
		cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)x->m,
		    (int)x->r, (int)x->n, 1.0f, g + x->off, (int)x->m,
		    b->p + x->p, (int)x->r, 0.0f, b->q + x->q, (int)x->r);
	}
	if (sum(c, algo, b->q, b->nq) < 0)
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
dp_powersgd_sync(struct dp_powersgd *s, int i, struct comm *c, enum coll_algo algo,
    float *g, float w)
{
	struct psgd_bucket *b = &s->b[i];
	size_t a = s->rg[i].off, n = s->rg[i].len, j;
	float *e = s->ef + a;

	/* e holds v until the sums are known */
	for (j = 0; j < n; j++)
		e[j] = g[a + j] += e[j];
	if (sync_uncompressed(s, b, c, algo, g) < 0 ||
	    sync_compressed(b, c, algo, g) < 0)
		return -1;
	for (j = 0; j < n; j++)
		e[j] -= g[a + j] / w;
	return 0;
}

/* ---- collx-dp's buckets ------------------------------------------------ */

int
dp_powersgd_init(struct dp_run *r)
{
	struct dp_range *rg = calloc((size_t)r->nbucket, sizeof(*rg));
	struct dp_powersgd_tensor *t = calloc(r->m->ntensors ? r->m->ntensors : 1,
	    sizeof(*t));
	char e[COLLX_ERRLEN];
	size_t nt;
	int i;

	if (rg == NULL || t == NULL) {
		free(rg);
		free(t);
		return dp_runtime_failed(r, "rank %d: %s", "out of memory");
	}
	for (i = 0; i < r->nbucket; i++)
		rg[i] = (struct dp_range){ r->bucket[i], r->bucket[i + 1] -
		    r->bucket[i] };
	nt = dp_powersgd_tensors(r->m, rg, r->nbucket, t);
	r->psgd = dp_powersgd_new(t, nt, rg, r->nbucket, r->m->nparams,
	    r->cfg->dpo.powersgd, r->cfg->seed, e, sizeof(e));
	free(rg);
	free(t);
	return r->psgd == NULL ? dp_runtime_failed(r, "rank %d: %s", e) : 0;
}

int
dp_powersgd_bucket(struct dp_run *r, int i)
{
	size_t a = r->bucket[i], n = r->bucket[i + 1] - a;
	int rc;

	comm_set_step(r->c, "gradient bucket %d of %d", i + 1, r->nbucket);
	if (r->k < r->cfg->dpo.powersgd_start)
		rc = sum(r->c, r->cfg->algo, r->m->grads + a, n);
	else
		rc = dp_powersgd_sync(r->psgd, i, r->c, r->cfg->algo, r->m->grads,
		    (float)r->world);
	return rc < 0 ? dp_comm_failed(r) : 0;
}

void
dp_powersgd_free(struct dp_run *r)
{
	dp_powersgd_delete(r->psgd);
	r->psgd = NULL;
}
