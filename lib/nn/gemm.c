/* gemm: every matrix product of nn's layers, in the precision the program
 * chose. f32: OpenBLAS's cblas_sgemm as called before. bf16: both inputs
 * rounded to bf16 (nearest even), products accumulated in f32, through
 * oneDNN where the CPU has bf16 instructions, else through sgemm on the
 * rounded values (bf16 products are exact in f32: the same values). */
#include <cblas.h>
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define GEMM_X86 1
#endif
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/util.h"
#include "nn/gemm_int.h"
#include "nn/nn.h"
#include "nn/vec_int.h"

static enum nn_precision precision = NN_PREC_F32;
/* bf16 without bf16 instructions: the portable path. */
static int portable;
/* The processor converts f32 to bf16 itself (AVX512-BF16). */
static int cpu_bf16;
static char impl[768];
/* One caller at a time: the packed inputs and oneDNN's cache are shared
 * (tests run ranks as threads of one process). */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static void *abuf, *bbuf, *rbuf;	/* rbuf: nn_gemm_linear_grad_made's */
static size_t acap, bcap, rcap;
#ifdef COLLX_DNNL
static void *tbuf, *sbuf;	/* nn_gemm_linear_grad3's */
static size_t tcap, scap;
static void *cbuf;	/* oneDNN's dense output, copied to a spaced one */
static size_t ccap;
#endif

void
nn_set_threads(int n)
{
	openblas_set_num_threads(n < 1 ? 1 : n);
#ifdef COLLX_DNNL
	nn_dnnl_threads(n);
#endif
}

int
nn_precision_parse(const char *s, enum nn_precision *out)
{
	if (!strcmp(s, "f32"))
		*out = NN_PREC_F32;
	else if (!strcmp(s, "bf16"))
		*out = NN_PREC_BF16;
	else
		return -1;
	return 0;
}

const char *
nn_precision_name(enum nn_precision p)
{
	return p == NN_PREC_BF16 ? "bf16" : "f32";
}

enum nn_precision
nn_get_precision(void)
{
	return precision;
}

int
nn_gemm_portable(void)
{
	return precision == NN_PREC_BF16 && portable;
}

int
nn_set_precision(enum nn_precision p, char *err, size_t errlen)
{
	if (p == NN_PREC_F32) {
		precision = p;
		return 0;
	}
#ifdef COLLX_DNNL
	int native = nn_dnnl_init(err, errlen);

	if (native < 0)
		return -1;
	portable = !native;
#ifdef GEMM_X86
	cpu_bf16 = !portable && __builtin_cpu_supports("avx512bf16");
#endif
	precision = p;
	return 0;
#else
	return cli_fail(err, errlen, "needs oneDNN (libdnnl), which this "
	    "build of collx lacks");
#endif
}

const char *
nn_gemm_impl(void)
{
	if (precision == NN_PREC_F32)
		return nn_blas_kernels();
	if (portable)
		return "portable bf16 (OpenBLAS sgemm on bf16-rounded inputs; "
		    "no AVX512-BF16 or AMX)";
#ifdef COLLX_DNNL
	pthread_mutex_lock(&lock);
	snprintf(impl, sizeof impl, "oneDNN %s matmul %s", nn_dnnl_version(),
	    *nn_dnnl_impl() ? nn_dnnl_impl() : "(none run yet)");
	pthread_mutex_unlock(&lock);
#endif
	return impl;
}

/* f32 bits to bf16 bits as the processors' own conversion (AVX512-BF16's
 * vcvtne2ps2bf16) gives them: rounded to nearest even, a NaN kept (quiet),
 * a denormal input taken as zero (of its sign). Branch-free, so that
 * pack's loops vectorize. */
NN_INLINE uint32_t
bf16_bits(float f)
{
	uint32_t u, r;

	memcpy(&u, &f, sizeof u);
	r = (u + 0x7fffu + (u >> 16 & 1)) >> 16;
	r = (u & 0x7fffffffu) > 0x7f800000u ? (u >> 16 | 0x40) : r;
	return (u & 0x7f800000u) == 0 ? (u >> 16 & 0x8000) : r;
}

/* n values rounded: as bf16 (h) or as f32 holding the bf16 value (w),
 * the other NULL; inlined with n = NN_LANES it vectorizes (vec_int.h). */
NN_INLINE void
round_span(uint16_t *restrict h, uint32_t *restrict w,
    const float *restrict s, size_t n)
{
	if (w)
		for (size_t j = 0; j < n; j++)
			w[j] = bf16_bits(s[j]) << 16;
	else
		for (size_t j = 0; j < n; j++)
			h[j] = (uint16_t)bf16_bits(s[j]);
}

#ifdef GEMM_X86
/* The processor's conversion, 32 values an instruction (vcvtne2ps2bf16),
 * where it has AVX512-BF16: the rounding is memory-bound then. */
__attribute__((target("avx512bf16,avx512f,avx512bw"))) static size_t
round_avx512bf16(uint16_t *h, const float *s, size_t n)
{
	size_t j = 0;

	for (; j + 32 <= n; j += 32)
		_mm512_storeu_si512(h + j, (__m512i)_mm512_cvtne2ps_pbh(
		    _mm512_loadu_ps(s + j + 16), _mm512_loadu_ps(s + j)));
	return j;
}
#endif

/* rows x cols of src (row stride ld) rounded and packed dense into h or
 * w (round_span); sum (or NULL) += the rows, in order, while each is at
 * hand. */
NN_CLONES static void
pack(uint16_t *h, uint32_t *w, const float *src, int rows, int cols, int ld,
    float *sum)
{
	for (int r = 0; r < rows; r++) {
		const float *s = src + (size_t)r * ld;
		size_t o = (size_t)r * cols, j = 0;
#ifdef GEMM_X86
		if (h && cpu_bf16)
			j = round_avx512bf16(h + o, s, (size_t)cols);
#endif
		for (; j + NN_LANES <= (size_t)cols; j += NN_LANES)
			round_span(h ? h + o + j : NULL, w ? w + o + j : NULL,
			    s + j, NN_LANES);
		round_span(h ? h + o + j : NULL, w ? w + o + j : NULL, s + j,
		    cols - j);
		if (sum)
			vec_add(sum, s, (size_t)cols);
	}
}

static void *
grow(void **buf, size_t *cap, size_t bytes)
{
	if (bytes > *cap) {
		void *p = realloc(*buf, bytes);
		if (!p)
			return NULL;
		*buf = p;
		*cap = bytes;
	}
	return *buf;
}

static void
sgemm(int ta, int tb, int m, int n, int k, float alpha, const float *a,
    int lda, const float *b, int ldb, float beta, float *c, int ldc)
{
	cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans,
	    tb ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb,
	    beta, c, ldc);
}

static uint16_t *keep_find(const struct nn_bview *v);

/* x (rows x cols, row stride ld) rounded into w as f32: from its kept
 * bf16 copy where there is one (the same values; a pass that keeps one
 * may leave x itself unwritten, nn_act_forward_h). */
static void
widen(uint32_t *w, const float *x, int rows, int cols, int ld)
{
	struct nn_bview v = { (float *)x, 1, rows, cols, ld, 1, 0, 0 };
	const uint16_t *h = keep_find(&v);

	if (!h) {
		pack(NULL, w, x, rows, cols, ld, NULL);
		return;
	}
	for (size_t i = 0; i < (size_t)rows * cols; i++)
		w[i] = (uint32_t)h[i] << 16;
}

/* Both inputs rounded and packed into abuf and bbuf as f32 (the portable
 * path's operands, and those of a shape oneDNN refused); 0 or -1 (out of
 * memory). */
static int
pack_wide(int ta, int tb, int m, int n, int k, const float *a, int lda,
    const float *b, int ldb)
{
	int ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;

	if (!grow(&abuf, &acap, (size_t)ar * ac * sizeof(float)) ||
	    !grow(&bbuf, &bcap, (size_t)br * bc * sizeof(float)))
		return -1;
	widen(abuf, a, ar, ac, lda);
	widen(bbuf, b, br, bc, ldb);
	return 0;
}

/*
 * The bf16 copies kept between a forward pass and its backward pass
 * (nn_bf16_keep), this thread's: while recording, every operand packed
 * goes into the arena (while it has room) and is listed; until the end,
 * an operand listed (same matrix, same shape) is taken from there.
 */
#define KEEP_MAX 512
static _Thread_local struct {
	uint16_t *arena;
	size_t cap, used;
	int record, n;
	struct {
		struct nn_bview v;
		uint16_t *h;
	} e[KEEP_MAX];
} keep;

/* v's kept copy, or NULL. */
static uint16_t *
keep_find(const struct nn_bview *v)
{
	for (int i = 0; i < keep.n; i++) {
		const struct nn_bview *k = &keep.e[i].v;
		if (k->p == v->p && k->nb == v->nb && k->rows == v->rows &&
		    k->cols == v->cols && k->ld == v->ld && k->per == v->per &&
		    k->outer == v->outer && k->inner == v->inner)
			return keep.e[i].h;
	}
	return NULL;
}

/* While recording, the arena's room for v's copy (listed), else NULL. */
static uint16_t *
keep_add(const struct nn_bview *v)
{
	size_t count = (size_t)v->nb * v->rows * v->cols;
	uint16_t *h = keep_find(v);

	if (h || !keep.record || keep.n == KEEP_MAX ||
	    count > keep.cap - keep.used)
		return h;
	h = keep.arena + keep.used;
	keep.used += count;
	keep.e[keep.n].v = *v;
	keep.e[keep.n++].h = h;
	return h;
}

#ifdef COLLX_DNNL
/* The copy keep_add listed last (room) taken off the list again. */
static void
keep_unlist(const uint16_t *room)
{
	keep.n--;
	keep.used = (size_t)(room - keep.arena);
}
#endif

void
nn_bf16_keep(uint16_t *arena, size_t count)
{
	keep.n = 0;
	keep.used = 0;
	keep.arena = arena;
	keep.cap = count;
	keep.record = precision == NN_PREC_BF16 && !portable && arena;
}

uint16_t *
nn_bf16_keep_room(const float *x, int rows, int cols)
{
	struct nn_bview v = { (float *)x, 1, rows, cols, cols, 1, 0, 0 };

	return keep.record && !keep_find(&v) ? keep_add(&v) : NULL;
}

float *
nn_bf16_keep_f32(const float *x, int rows, int cols, int add)
{
	/* nb 0 marks f32 values: no operand's view has it */
	struct nn_bview v = { (float *)x, 0, rows, cols, cols, 1, 0, 0 };
	uint16_t *h = keep_find(&v);
	size_t need = 2 * (size_t)rows * cols, at = (keep.used + 1) & ~1UL;

	if (h || !add || !keep.record || keep.n == KEEP_MAX ||
	    at > keep.cap || need > keep.cap - at)
		return (float *)h;
	h = keep.arena + at;	/* the arena is float-aligned, at even */
	keep.used = at + need;
	keep.e[keep.n].v = v;
	keep.e[keep.n++].h = h;
	return (float *)h;
}

void
nn_bf16_keep_replay(void)
{
	keep.record = 0;
}

void
nn_bf16_keep_end(void)
{
	keep.n = keep.record = 0;
	keep.arena = NULL;
}

#ifdef COLLX_DNNL
/* x (rows x cols, row stride ld) in bf16: its kept copy, else packed into
 * the arena (recording) or into *buf, *sum (or sum NULL) += its rows then
 * and *sum set to NULL; NULL when out of memory. */
static const uint16_t *
operand(void **buf, size_t *cap, const float *x, int rows, int cols,
    int ld, float **sum)
{
	struct nn_bview v = { (float *)x, 1, rows, cols, ld, 1, 0, 0 };
	uint16_t *h = keep_find(&v);

	if (h)
		return h;
	if (!(h = keep_add(&v)) && !(h = grow(buf, cap, (size_t)rows * cols *
	    sizeof(*h))))
		return NULL;
	pack(h, NULL, x, rows, cols, ld, sum ? *sum : NULL);
	if (sum)
		*sum = NULL;
	return h;
}

/* oneDNN's product of pa and pb into c, bias (or NULL) added to every
 * row. Its fast kernels (brgemm) take a dense output only: one whose rows
 * lie apart (a head of attention) is computed into a dense copy, then c =
 * copy + beta * c. */
static int
dnnl_product(int ta, int tb, int m, int n, int k, float alpha,
    const uint16_t *pa, const uint16_t *pb, float beta, const float *bias,
    const float *res, float *c, int ldc)
{
	if (ldc == n)
		return nn_dnnl_run(1, ta, tb, m, n, k, alpha, pa, pb, beta,
		    bias, res, c, ldc);
	if (bias || res || !grow(&cbuf, &ccap, (size_t)m * n *
	    sizeof(float)) || nn_dnnl_run(1, ta, tb, m, n, k, alpha, pa, pb,
	    0.0f, NULL, NULL, cbuf, n) < 0)
		return -1;
	for (int i = 0; i < m; i++) {
		float *row = c + (size_t)i * ldc;
		const float *t = (const float *)cbuf + (size_t)i * n;
		if (beta == 0.0f)
			memcpy(row, t, (size_t)n * sizeof(float));
		else if (beta == 1.0f)
			vec_add(row, t, (size_t)n);
		else
			for (int j = 0; j < n; j++)
				row[j] = t[j] + beta * row[j];
	}
	return 0;
}
#endif

/* c's rows = bias (beta 0 then; the linear layers' way in f32). */
static void
bias_rows(float *c, int ldc, const float *bias, int m, int n)
{
	for (int i = 0; i < m; i++)
		memcpy(c + (size_t)i * ldc, bias, (size_t)n * sizeof(float));
}

/* product's native bf16 path (pa, asum as there), res (or NULL) added
 * to c as dnnl_product's: 0, or -1 with nothing written (portable, out of
 * memory, or a shape oneDNN refused). */
static int
native_product(const uint16_t **pa, float **asum, int ta, int tb, int m,
    int n, int k, float alpha, const float *a, int lda, const float *b,
    int ldb, float beta, const float *bias, const float *res, float *c,
    int ldc)
{
	const uint16_t *ha = pa ? *pa : NULL;

	if (pa)
		*pa = NULL;
#ifdef COLLX_DNNL
	const uint16_t *hb;

	if (!portable && (ha || (ha = operand(&abuf, &acap, a, ta ? k : m,
	    ta ? m : k, lda, asum))) && (hb = operand(&bbuf, &bcap, b,
	    tb ? n : k, tb ? k : n, ldb, NULL)) && dnnl_product(ta, tb, m, n, k, alpha, ha,
	    hb, beta, bias, res, c, ldc) == 0) {
		if (pa)
			*pa = ha;
		return 0;
	}
#else
	(void)ha, (void)asum, (void)ta, (void)tb, (void)m, (void)n, (void)k;
	(void)alpha, (void)a, (void)lda, (void)b, (void)ldb, (void)beta;
	(void)bias, (void)res, (void)c, (void)ldc;
#endif
	return -1;
}

/*
 * One product in the process's precision, bias (or NULL, beta 0 with it)
 * added to every row of c; bf16 ones with the lock held. pa (or NULL):
 * a's bf16 copy, from the product before when *pa is set, else set to it
 * (NULL where there is none). asum (or NULL): where a is rounded here,
 * *asum += the stored rows of a and *asum is set to NULL.
 */
static void
product(const uint16_t **pa, float **asum, int ta, int tb, int m, int n,
    int k, float alpha, const float *a, int lda, const float *b, int ldb,
    float beta, const float *bias, float *c, int ldc)
{
	if (precision == NN_PREC_F32 || m <= 0 || n <= 0 || k <= 0) {
		if (pa)
			*pa = NULL;
		if (bias)
			bias_rows(c, ldc, bias, m, n), beta = 1.0f;
		sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
		return;
	}
	if (native_product(pa, asum, ta, tb, m, n, k, alpha, a, lda, b, ldb,
	    beta, bias, NULL, c, ldc) == 0)
		return;
	if (bias)
		bias_rows(c, ldc, bias, m, n), beta = 1.0f;
	/* Portable, or a shape oneDNN refused: the same values, from sgemm
	 * on the rounded inputs (packed dense: row strides ac and bc). */
	if (pack_wide(ta, tb, m, n, k, a, lda, b, ldb) == 0)
		sgemm(ta, tb, m, n, k, alpha, abuf, ta ? m : k, bbuf,
		    tb ? k : n, beta, c, ldc);
	else	/* no memory for the packed copies: f32, not a crash */
		sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void
nn_gemm(int ta, int tb, int m, int n, int k, float alpha, const float *a,
    int lda, const float *b, int ldb, float beta, float *c, int ldc)
{
	int bf = precision == NN_PREC_BF16;

	if (bf)
		pthread_mutex_lock(&lock);
	product(NULL, NULL, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, NULL,
	    c, ldc);
	if (bf)
		pthread_mutex_unlock(&lock);
}

void
nn_gemm_linear(float *out, const float *inp, const float *w,
    const float *b, int n, int in, int o)
{
	int bf = precision == NN_PREC_BF16;

	if (bf)
		pthread_mutex_lock(&lock);
	product(NULL, NULL, 0, 1, n, o, in, 1.0f, inp, in, w, in, 0.0f, b, out,
	    o);
	if (bf)
		pthread_mutex_unlock(&lock);
}

void
nn_gemm_linear_add(float *out, const float *inp, const float *w,
    const float *b, const float *res, int n, int in, int o)
{
	int rc = -1;

	if (precision == NN_PREC_BF16 && res != out && n > 0 && in > 0 &&
	    o > 0) {
		pthread_mutex_lock(&lock);
		rc = native_product(NULL, NULL, 0, 1, n, o, in, 1.0f, inp, in,
		    w, in, 0.0f, b, res, out, o);
		pthread_mutex_unlock(&lock);
	}
	if (rc == 0)
		return;
	nn_gemm_linear(out, inp, w, b, n, in, o);
	nn_add(out, res, (size_t)n * o);
}

int
nn_gemm_linear_heads(const struct nn_bview *hv, const float *inp,
    const float *w, const float *b, int n, int in, int o)
{
	int rc = -1;

	if (precision != NN_PREC_BF16 || portable || !keep.record ||
	    keep_find(hv))
		return -1;
#ifdef COLLX_DNNL
	const uint16_t *ha, *hb;
	uint16_t *room = NULL, *t;

	pthread_mutex_lock(&lock);
	/* the room listed last, after the operands' copies: unlisted
	 * again on a failure */
	if ((ha = operand(&abuf, &acap, inp, n, in, in, NULL)) &&
	    (hb = operand(&bbuf, &bcap, w, o, in, in, NULL)) &&
	    (room = keep_add(hv)) &&
	    (t = grow(&cbuf, &ccap, (size_t)n * o * sizeof(*t))) &&
	    nn_dnnl_linear_h(n, o, in, ha, hb, b, t) == 0) {
		/* the [n, o] rows into the heads' dense matrices */
		for (int i = 0; i < hv->nb; i++)
			for (int r = 0; r < hv->rows; r++)
				memcpy(room + ((size_t)i * hv->rows + r) *
				    hv->cols, t + (nn_bview_at(hv, i) - hv->p) +
				    (size_t)r * hv->ld, (size_t)hv->cols *
				    sizeof(*t));
		rc = 0;
	}
	if (rc < 0 && room)	/* the caller writes the f32 values */
		keep_unlist(room);
	pthread_mutex_unlock(&lock);
#else
	(void)inp, (void)w, (void)b, (void)n, (void)in, (void)o;
#endif
	return rc;
}

void
nn_bf16_widen_kept(const struct nn_bview *v)
{
	const uint16_t *h = keep_find(v);

	for (int i = 0; h && i < v->nb; i++)
		for (int r = 0; r < v->rows; r++) {
			float *d = nn_bview_at(v, i) + (size_t)r * v->ld;
			const uint16_t *e = h + ((size_t)i * v->rows + r) *
			    v->cols;
			for (int j = 0; j < v->cols; j++) {
				uint32_t u = (uint32_t)e[j] << 16;
				memcpy(d + j, &u, sizeof(u));
			}
		}
}

/* db += dout's rows, one after another. */
NN_CLONES static void
row_sums(float *db, const float *dout, int n, int o)
{
	for (int r = 0; r < n; r++)
		vec_add(db, dout + (size_t)r * o, (size_t)o);
}

void
nn_gemm_linear_grad(float *dinp, float *dw, float *db, const float *dout,
    const float *inp, const float *w, int n, int in, int o, int set)
{
	int bf = precision == NN_PREC_BF16;
	const uint16_t *hd = NULL;
	/* native bf16 sums db as it rounds dout, else first as before */
	float *dsum = bf && !portable ? db : NULL;

	if (db && !dsum)
		row_sums(db, dout, n, o);

	/* f32 zeroes and adds, the bits callers had from their own zeroing */
	if (dinp && set && !bf)
		memset(dinp, 0, (size_t)n * in * sizeof(float));
	if (bf)
		pthread_mutex_lock(&lock);
	/* dout is a of both: [n, o], transposed for dw */
	if (dinp)
		product(&hd, &dsum, 0, 0, n, in, o, 1.0f, dout, o, w, in,
		    set && bf ? 0.0f : 1.0f, NULL, dinp, in);
	if (dw)
		product(&hd, &dsum, 1, 0, o, in, n, 1.0f, dout, o, inp, in,
		    1.0f, NULL, dw, in);
	if (dsum)	/* dout not rounded here */
		row_sums(dsum, dout, n, o);
	if (bf)
		pthread_mutex_unlock(&lock);
}

void
nn_gemm_linear_grad_made(float *dinp, float *dw, float *db, float *dout,
    void (*make)(void *, int, int, float *), void *ctx, const float *inp,
    const float *w, int n, int in, int o, int set)
{
	const uint16_t *hd;
	uint16_t *h = NULL;
	float *rows = NULL, *dsum = NULL;
	int step = o < NN_CHUNK ? NN_CHUNK / o : 1, fdinp, fdw;

	if (precision == NN_PREC_BF16 && !portable) {
		pthread_mutex_lock(&lock);
		if (!(h = grow(&abuf, &acap, (size_t)n * o * sizeof(*h))) ||
		    !(rows = grow(&rbuf, &rcap, (size_t)step * o *
		    sizeof(*rows)))) {
			h = NULL;
			pthread_mutex_unlock(&lock);
		}
	}
	if (!h) {	/* f32 or portable (or no memory): as it was */
		make(ctx, 0, n, dout);
		nn_gemm_linear_grad(dinp, dw, db, dout, inp, w, n, in, o, set);
		return;
	}
	/* dout's rows made, rounded and summed in a cache-sized buffer:
	 * dout itself is written only where oneDNN refuses a product */
	for (int r0 = 0; r0 < n; r0 += step) {
		int r1 = r0 + step < n ? r0 + step : n;
		make(ctx, r0, r1, rows);
		pack(h + (size_t)r0 * o, NULL, rows, r1 - r0, o, o, db);
	}
	/* a product oneDNN refuses: the f32 rows after all, for sgemm */
	hd = h;
	fdinp = dinp && native_product(&hd, &dsum, 0, 0, n, in, o, 1.0f,
	    dout, o, w, in, set ? 0.0f : 1.0f, NULL, NULL, dinp, in) < 0;
	fdw = dw && (fdinp || native_product(&hd, &dsum, 1, 0, o, in, n,
	    1.0f, dout, o, inp, in, 1.0f, NULL, NULL, dw, in) < 0);
	if (fdinp || fdw)
		make(ctx, 0, n, dout);
	if (fdinp)
		product(NULL, NULL, 0, 0, n, in, o, 1.0f, dout, o, w, in,
		    set ? 0.0f : 1.0f, NULL, dinp, in);
	if (fdw)
		product(NULL, NULL, 1, 0, o, in, n, 1.0f, dout, o, inp, in,
		    1.0f, NULL, dw, in);
	pthread_mutex_unlock(&lock);
}

#ifdef COLLX_DNNL
/* nn_gemm_linear_grad3's native path, the lock held: 0, or -1 with
 * nothing written (no memory). */
static int
grad3_native(float *dinp, float *const dw[3], float *const db[3],
    const float *const dout[3], const float *inp, const float *const w[3],
    int n, int in, int o)
{
	size_t row = 3 * (size_t)o, one = (size_t)o * in;
	const uint16_t *hw, *hi;
	uint16_t *h, *st;
	int j;

	if (!(h = grow(&tbuf, &tcap, (size_t)n * row * sizeof(*h))) ||
	    !(st = grow(&sbuf, &scap, 3 * one * sizeof(*st))))
		return -1;
	for (j = 0; j < 3; j++) {
		if (!(hw = operand(&bbuf, &bcap, w[j], o, in, in, NULL)))
			return -1;
		memcpy(st + j * one, hw, one * sizeof(*st));
	}
	if (!(hi = operand(&abuf, &acap, inp, n, in, in, NULL)))
		return -1;
	/* the three douts side by side, [n, 3o], db summed meanwhile */
	for (int r = 0; r < n; r++)
		for (j = 0; j < 3; j++)
			pack(h + r * row + (size_t)j * o, NULL, dout[j] +
			    (size_t)r * o, 1, o, o, db[j]);
	if (nn_dnnl_run(1, 0, 0, n, in, 3 * o, 1.0f, h, st, 0.0f, NULL, NULL,
	    dinp, in) < 0) {
		/* refused (not seen): the f32 rows, as three products */
		for (j = 0; j < 3; j++)
			product(NULL, NULL, 0, 0, n, in, o, 1.0f, dout[j], o,
			    w[j], in, j ? 1.0f : 0.0f, NULL, dinp, in);
		hi = NULL;	/* abuf may hold a dout now */
	}
	for (j = 0; j < 3; j++)
		if (dw[j] && (!hi || nn_dnnl_run_lda(1, 1, 0, o, in, n, 1.0f,
		    h + (size_t)j * o, (int)row, hi, 1.0f, NULL, NULL, dw[j],
		    in) < 0)) {
			product(NULL, NULL, 1, 0, o, in, n, 1.0f, dout[j], o,
			    inp, in, 1.0f, NULL, dw[j], in);
			hi = NULL;
		}
	return 0;
}
#endif

int
nn_gemm_linear_grad3(float *dinp, float *const dw[3], float *const db[3],
    const float *const dout[3], const float *inp, const float *const w[3],
    int n, int in, int o)
{
	int rc = -1;

	if (precision != NN_PREC_BF16 || portable || n <= 0 || in <= 0 ||
	    o <= 0)
		return -1;
#ifdef COLLX_DNNL
	pthread_mutex_lock(&lock);
	rc = grad3_native(dinp, dw, db, dout, inp, w, n, in, o);
	pthread_mutex_unlock(&lock);
#else
	(void)dinp, (void)dw, (void)db, (void)dout, (void)inp, (void)w;
#endif
	return rc;
}

/* The batched products' workspace: a few buffers, held with the lock. */
#define BF16_SLOTS 6
static struct {
	void *p;
	size_t cap;
} ws[BF16_SLOTS];

int
nn_bf16_begin(void)
{
#ifdef COLLX_DNNL
	if (precision == NN_PREC_BF16 && !portable) {
		pthread_mutex_lock(&lock);
		return 0;
	}
#endif
	return -1;
}

void
nn_bf16_end(void)
{
	pthread_mutex_unlock(&lock);
}

void *
nn_bf16_ws(int slot, size_t bytes)
{
	return grow(&ws[slot].p, &ws[slot].cap, bytes);
}

uint16_t *
nn_bf16_out(int slot, const struct nn_bview *v)
{
	uint16_t *h = keep_add(v);

	return h ? h : nn_bf16_ws(slot, (size_t)v->nb * v->rows * v->cols *
	    sizeof(*h));
}

const uint16_t *
nn_bf16_pack(int slot, const struct nn_bview *v)
{
	size_t one = (size_t)v->rows * v->cols;
	uint16_t *h = keep_find(v);

	if (h)
		return h;
	if ((h = nn_bf16_out(slot, v)))
		for (int i = 0; i < v->nb; i++)
			pack(h + i * one, NULL, nn_bview_at(v, i), v->rows,
			    v->cols, v->ld, NULL);
	return h;
}

void
nn_bf16_round(uint16_t *h, const float *src, int n)
{
	pack(h, NULL, src, 1, n, n, NULL);
}

int
nn_bf16_bmm_heads(int ta, int k, float alpha, const uint16_t *a,
    const uint16_t *x, float beta, const struct nn_bview *hv, int kept)
{
#ifdef COLLX_DNNL
	int rows = hv->nb / hv->per * hv->rows, rc;
	uint16_t *room = NULL;

	if (kept && !(room = nn_bf16_keep_room(hv->p, rows, hv->ld)))
		return -1;
	rc = nn_dnnl_run_heads(hv->nb / hv->per, hv->per, ta, hv->rows,
	    hv->cols, k, alpha, a, x, beta, room ? (void *)room : hv->p,
	    room != NULL, hv->outer, hv->inner, hv->ld);
	if (rc < 0 && room)
		keep_unlist(room);
	return rc;
#else
	(void)ta, (void)k, (void)alpha, (void)a, (void)x, (void)beta;
	(void)hv, (void)kept;
	return -1;
#endif
}

int
nn_bf16_bmm(int nb, int ta, int tb, int m, int n, int k, float alpha,
    const uint16_t *a, const uint16_t *b, float *c)
{
#ifdef COLLX_DNNL
	return nn_dnnl_run(nb, ta, tb, m, n, k, alpha, a, b, 0.0f, NULL, NULL,
	    c, n);
#else
	(void)nb, (void)ta, (void)tb, (void)m, (void)n, (void)k, (void)alpha;
	(void)a, (void)b, (void)c;
	return -1;
#endif
}
