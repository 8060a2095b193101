/* gemm_int: between nn_gemm (gemm.c), which rounds the inputs to bf16,
 * and its oneDNN backend (gemm_dnnl.c, built where oneDNN is found). */
#ifndef COLLX_NN_GEMM_INT_H
#define COLLX_NN_GEMM_INT_H

#include <stddef.h>
#include <stdint.h>

/* Engine and stream: 1 where the CPU runs bf16 matmuls natively
 * (AVX512-BF16 or AMX, as oneDNN sees it, DNNL_MAX_CPU_ISA included),
 * 0 where it does not, -1 with the reason in err. */
int nn_dnnl_init(char *err, size_t errlen);
/* c[m,n] = alpha * op(a) op(b) + beta * c, ldc c's row stride; a and b
 * are the stored matrices packed dense in bf16 (a [m,k], or [k,m] when ta;
 * b [k,n], or [n,k] when tb). One primitive per shape, kept in a small
 * cache. 0, or -1 when oneDNN refused the shape. */
int nn_dnnl_run(int ta, int tb, int m, int n, int k, float alpha,
    const uint16_t *a, const uint16_t *b, float beta, float *c, int ldc);
/* The implementations that ran, oneDNN's names with each one's share of
 * the multiply-adds: "brg:avx512_core_bf16 (93%), gemm:jit (7%)"; "" before
 * the first. */
const char *nn_dnnl_impl(void);
/* oneDNN's version, "2.6.3". */
const char *nn_dnnl_version(void);
/* OpenMP threads of oneDNN's parallel regions (oneDNN's runtime here). */
void nn_dnnl_threads(int n);

#endif
