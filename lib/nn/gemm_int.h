/* gemm_int: between nn_gemm (gemm.c), which rounds the inputs to bf16,
 * and its oneDNN backend (gemm_dnnl.c, built where oneDNN is found). */
#ifndef COLLX_NN_GEMM_INT_H
#define COLLX_NN_GEMM_INT_H

#include <stddef.h>
#include <stdint.h>

#include "nn/nn.h"

/* Engine and stream: 1 where the CPU runs bf16 matmuls natively
 * (AVX512-BF16 or AMX, as oneDNN sees it, DNNL_MAX_CPU_ISA included),
 * 0 where it does not, -1 with the reason in err. */
int nn_dnnl_init(char *err, size_t errlen);
/* c[m,n] = alpha * op(a) op(b) + beta * c (+ bias, f32 [n], to every row,
 * where not NULL; then + res, f32 [m,n] dense, where not NULL), ldc c's
 * row stride; a and b
 * are the stored matrices packed dense in bf16 (a [m,k], or [k,m] when ta;
 * b [k,n], or [n,k] when tb). nb > 1: nb such products at once, the
 * matrices of each operand one after another, c dense (ldc n). One
 * primitive per shape, kept in a small cache. 0, or -1 when oneDNN
 * refused the shape. */
int nn_dnnl_run(int nb, int ta, int tb, int m, int n, int k, float alpha,
    const uint16_t *a, const uint16_t *b, float beta, const float *bias,
    const float *res, float *c, int ldc);
/* nn_dnnl_run with a's stored rows lda apart (nb 1). */
int nn_dnnl_run_lda(int nb, int ta, int tb, int m, int n, int k,
    float alpha, const uint16_t *a, int lda, const uint16_t *b, float beta,
    const float *bias, const float *res, float *c, int ldc);
/* b * nh products c = alpha op(a) x + beta c, a [m, k] (ta: stored
 * [k, m]) and x [k, n] dense one after another, straight into the heads
 * of c (f32, or bf16 where hdst): product (bi, h) at c + bi * outer +
 * h * inner, rows ldc apart. 0 or -1. */
int nn_dnnl_run_heads(int b, int nh, int ta, int m, int n, int k,
    float alpha, const uint16_t *a, const uint16_t *x, float beta, void *c,
    int hdst, size_t outer, size_t inner, int ldc);
/* c[m,n] = a b^T (+ bias) as nn_dnnl_run's, c dense in bf16: oneDNN
 * rounds the f32 result to nearest even, as nn_bf16_round. 0 or -1. */
int nn_dnnl_linear_h(int m, int n, int k, const uint16_t *a,
    const uint16_t *b, const float *bias, uint16_t *c);
/* The implementations that ran, oneDNN's names with each one's share of
 * the multiply-adds: "brg:avx512_core_bf16 (93%), gemm:jit (7%)"; "" before
 * the first. */
const char *nn_dnnl_impl(void);
/* oneDNN's version, "2.6.3". */
const char *nn_dnnl_version(void);
/* OpenMP threads of oneDNN's parallel regions (oneDNN's runtime here). */
void nn_dnnl_threads(int n);


/* The linear layers' products (nn_linear_forward and _backward), in the
 * process's precision: out = inp w^T + b (b may be NULL); dinp += dout w
 * (set: =), dw += dout^T inp and db += dout's column sums (any NULL). f32: sgemm as nn_gemm's, bit for
 * bit; bf16: b added by oneDNN, dout rounded once for both products and
 * summed into db meanwhile. */
void nn_gemm_linear(float *out, const float *inp, const float *w,
    const float *b, int n, int in, int o);
/* nn_gemm_linear, then out += res ([n, o], not out): native bf16 adds it
 * in oneDNN's pass (the same f32 sums), else as nn_add. */
void nn_gemm_linear_add(float *out, const float *inp, const float *w,
    const float *b, const float *res, int n, int in, int o);
void nn_gemm_linear_grad(float *dinp, float *dw, float *db,
    const float *dout, const float *inp, const float *w, int n, int in,
    int o, int set);
/* nn_gemm_linear_grad (all of dinp, dw, db, set as there) with dout's
 * rows made on the way: make(ctx, r0, r1, rows) writes rows r0..r1-1 of
 * dout at rows. Native bf16 makes a few at a time in a buffer of its own,
 * rounds them and sums db while they are in cache, and writes dout only
 * where oneDNN refuses a product; otherwise all are made into dout first. */
void nn_gemm_linear_grad_made(float *dinp, float *dw, float *db,
    float *dout, void (*make)(void *, int, int, float *), void *ctx,
    const float *inp, const float *w, int n, int in, int o, int set);

/* Three layers' nn_gemm_linear_grad on the same inp (attention's q, k
 * and v), dinp set (=) to their sum, dw[j] and db[j] (any NULL) added to:
 * native bf16 rounds the three douts side by side into one [n, 3o]
 * matrix and stacks the weights, so that dinp is one product over 3o
 * (no partial sums written and read back twice) and each dw reads its
 * slice of it: 0. Else -1 with nothing written (f32, portable, no
 * memory): the caller runs the three itself. */
int nn_gemm_linear_grad3(float *dinp, float *const dw[3],
    float *const db[3], const float *const dout[3], const float *inp,
    const float *const w[3], int n, int in, int o);

/*
 * A training pass's bf16 copies, kept: between nn_bf16_keep and
 * nn_bf16_keep_replay (the forward pass) every operand this thread's
 * products and nn_bf16_pack round, and nn_bf16_out's, go into arena
 * (count bf16 values; what does not fit is rounded as usual), and until
 * nn_bf16_keep_end (after the backward pass) a product or nn_bf16_pack
 * whose operand is one of them (the same matrices, same shape) takes that
 * copy instead of rounding it again. The caller vouches that
 * no such matrix changes in between. A no-op but in native bf16.
 */
void nn_bf16_keep(uint16_t *arena, size_t count);
void nn_bf16_keep_replay(void);
void nn_bf16_keep_end(void);
/* While recording, the kept room for the bf16 copy of x [rows, cols]
 * (dense), for the pass that writes x to fill as it goes (nn_bf16_round on
 * what it has just written), so that the products after it take that copy
 * instead of reading x again to round it; else NULL. */
uint16_t *nn_bf16_keep_room(const float *x, int rows, int cols);

/* While recording (add) or until nn_bf16_keep_end (!add), the kept f32
 * values a forward pass saved for its backward under x [rows, cols]
 * (GELU's derivative at x); NULL where there are none (no room, or not
 * recording): the backward pass computes them then. */
float *nn_bf16_keep_f32(const float *x, int rows, int cols, int add);

/* LayerNorm's and the activation's forward passes that also round their
 * output into h (NULL: as nn_layernorm_forward and nn_act_forward); dg (or
 * NULL) receives GELU's derivative at each input (no other act's). With
 * h a kept copy (nn_bf16_keep_room), LayerNorm, and GELU, may have out
 * NULL: the f32 output is then not written, every product taking the
 * copy instead. */
void nn_layernorm_forward_h(float *out, uint16_t *h, float *mean,
    float *rstd, const float *inp, const float *w, const float *b, int n,
    int c);
void nn_act_forward_h(enum nn_act act, float *out, uint16_t *h, float *dg,
    const float *inp, size_t count);
/* dx += d/dx of the layer act(x w^T + b) given dact, the gradient of its
 * output, with fc = x w^T + b saved (act' kept by nn_act_forward_h where it
 * was); dfc: room for act'(fc) dact (written
 * as nn_gemm_linear_grad_made's dout); dw += and db += as
 * nn_linear_backward (dx NULL: the weight part). */
void nn_act_linear_backward(enum nn_act act, float *dx, float *dw,
    float *db, float *dfc, const float *fc, const float *dact,
    const float *x, const float *w, int n, int in, int o);

/*
 * Batched bf16 products (attention's heads at once), for lib/nn's layers.
 * nn_bf16_begin takes gemm.c's lock and returns 0 where the products run
 * natively in bf16 (oneDNN on AVX512-BF16 or AMX), else -1 without it;
 * nn_bf16_end gives it back. Between them the workspace (slots 0 to 5,
 * each grown on demand, kept until the next begin) and products are the
 * caller's alone.
 */
int nn_bf16_begin(void);
void nn_bf16_end(void);
/* Slot's buffer of at least bytes, or NULL (out of memory). */
void *nn_bf16_ws(int slot, size_t bytes);

/* nb matrices of rows x cols (row stride ld), matrix i at p + (i / per) *
 * outer + (i % per) * inner: the heads of a [b, s, nh*hd] tensor (per nh,
 * outer s*nh*hd, inner hd) or [nb, rows, cols] dense (per 1). */
struct nn_bview {
	float *p;
	int nb, rows, cols, ld, per;
	size_t outer, inner;
};

static inline float *
nn_bview_at(const struct nn_bview *v, int i)
{
	return v->p + (size_t)(i / v->per) * v->outer +
	    (size_t)(i % v->per) * v->inner;
}

/* While a pass records (nn_bf16_keep), natively: the linear layer
 * inp w^T + b (as nn_gemm_linear's) computed in bf16 straight into the
 * kept copy of hv, the heads view of its [n, o] output (attention's
 * operand), whose f32 values are left unwritten: 0. Else -1, nothing
 * written or kept. */
int nn_gemm_linear_heads(const struct nn_bview *hv, const float *inp,
    const float *w, const float *b, int n, int in, int o);
/* out[bsz*s, nh*hd] = inp w^T + b (nn_linear_forward's), in bf16 only
 * (the kept copy of out's heads, attention's operand) where
 * nn_gemm_linear_heads can; nn_attention_forward and _backward widen
 * those copies back into out before a head-by-head path reads it. */
void nn_linear_forward_heads(float *out, const float *inp, const float *w,
    const float *b, int bsz, int s, int nh, int hd, int in);
/* v's f32 values from its kept bf16 copy, where there is one (for a pass
 * that reads them after nn_gemm_linear_heads left them unwritten). */
void nn_bf16_widen_kept(const struct nn_bview *v);
/* v's matrices rounded to bf16, packed one after another into slot's
 * buffer, or their kept copy (nn_bf16_keep); NULL when out of memory. */
const uint16_t *nn_bf16_pack(int slot, const struct nn_bview *v);
/* Room for v's matrices in bf16, for the caller to fill: kept while
 * recording (nn_bf16_keep), else slot's buffer; NULL when out of
 * memory. */
uint16_t *nn_bf16_out(int slot, const struct nn_bview *v);
/* n values rounded to bf16. */
void nn_bf16_round(uint16_t *h, const float *src, int n);
/* hv's heads (hv->nb of hv->rows x hv->cols, hv->per to a row of heads,
 * the row ld = per * cols wide) = alpha op(a) x + beta hv, a's and x's
 * matrices dense one after another (a [rows, k], ta: stored [k, rows];
 * x [k, cols]). kept: the result not written to hv but, in bf16, into
 * its kept copy (nn_bf16_keep_room), -1 where there is none. 0, or -1
 * with nothing written or kept. */
int nn_bf16_bmm_heads(int ta, int k, float alpha, const uint16_t *a,
    const uint16_t *x, float beta, const struct nn_bview *hv, int kept);
/* nn_dnnl_run's nb products, c = alpha op(a) op(b) dense; 0 or -1. */
int nn_bf16_bmm(int nb, int ta, int tb, int m, int n, int k, float alpha,
    const uint16_t *a, const uint16_t *b, float *c);

#endif
