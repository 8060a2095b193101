/* fillname: the names of the ways to fill a tensor, as collx-tensor
 * create's --fill takes them. */
#ifndef COLLX_TENSOR_FILLNAME_H
#define COLLX_TENSOR_FILLNAME_H

#include <stddef.h>

#include "tensor/tensor.h"

/* zeros and ones (TENSOR_FILL_CONST with *value 0 and 1), arange, rand,
 * randn, or a number (strtod: TENSOR_FILL_CONST with that *value). */
int tensor_fill_parse(const char *s, enum tensor_fill *how, double *value,
    char *err, size_t errlen);

#endif
