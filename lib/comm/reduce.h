/* reduce: local reduction kernels, one vectorizable loop per dtype and op. */
#ifndef COLLX_REDUCE_H
#define COLLX_REDUCE_H

#include <stddef.h>

#include "comm/coll.h"

/* dst[i] = dst[i] (op) src[i] for n elements; dst and src do not overlap. */
typedef void (*reduce_fn)(void *restrict dst, const void *restrict src, size_t n);

/* The kernel for dt and op (AVG is SUM), or NULL for an unknown dtype/op. */
reduce_fn reduce_kernel(enum dtype dt, enum coll_op op);

#endif
