/* reduce: local reduction kernels, one vectorizable loop per dtype and op. */
#ifndef COLLX_REDUCE_H
#define COLLX_REDUCE_H

#include <stddef.h>
#include <stdint.h>

#include "comm/coll.h"

/* dst[i] = dst[i] (op) src[i] for n elements; dst and src do not overlap. */
typedef void (*reduce_fn)(void *restrict dst, const void *restrict src, size_t n);

/* The kernel for dt and op (AVG is SUM), or NULL for an unknown dtype/op. */
reduce_fn comm_reduce_kernel(enum dtype dt, enum coll_op op);

/* Fast vectorized half-precision conversions of n values (same results
 * as dtype.c's dtype_f16_to_f32 and friends; round to nearest even). */
void comm_reduce_f16_widen(float *restrict out, const uint16_t *restrict in, size_t n);
void comm_reduce_f16_narrow(uint16_t *restrict out, const float *restrict in, size_t n);
void comm_reduce_bf16_widen(float *restrict out, const uint16_t *restrict in, size_t n);
void comm_reduce_bf16_narrow(uint16_t *restrict out, const float *restrict in, size_t n);

#endif
