/* format: the .npy, .npy stream and .safetensors codecs and their shared
 * helpers; internal to lib/tensor (programs use tensor.h). */
#ifndef COLLX_TENSOR_FORMAT_H
#define COLLX_TENSOR_FORMAT_H

#include "tensor/tensor.h"

/* Largest input accepted: 64 GiB. */
#define TENSOR_MAX_INPUT ((uint64_t)64 << 30)

int tensor_npy_parse(const unsigned char *buf, size_t len, struct tensor *out,
    char *err, size_t errlen);
int tensor_npy_encode(const struct tensor *t, void **buf, size_t *len,
    char *err, size_t errlen);
/* A stream of .npy images: TENSOR_NPYS, the arrays named by their index,
 * or TENSOR_NPY when it holds one array. */
int tensor_npys_parse(const unsigned char *buf, size_t len,
    struct tensor_set *out, char *err, size_t errlen);
/* Every tensor of s as a .npy image, one after another, in set order. */
int tensor_npys_encode(const struct tensor_set *s, void **buf, size_t *len,
    char *err, size_t errlen);
int tensor_st_parse(const unsigned char *buf, size_t len, struct tensor_set *out,
    char *err, size_t errlen);
int tensor_st_encode(const struct tensor_set *s, void **buf, size_t *len,
    char *err, size_t errlen);
/* The safetensors name of each dtype ("F32", "BF16", ...), for its reader
 * and its writer. */
extern const char *const tensor_st_dtype_names[DT_COUNT];

/* Byte size of a shape, or -1 with the reason when a dimension is
 * negative or the size overflows. */
int tensor_shape_bytes(enum dtype dt, int ndim, const int64_t *shape, uint64_t *bytes,
    char *err, size_t errlen);
int tensor_host_is_big(void);
void tensor_swap_bytes(void *data, size_t count, size_t size);
/* Freshly read data to host layout: bytes swapped when swap is set,
 * booleans stored as 0 or 1. */
void tensor_to_host(struct tensor *t, int swap);
/* 1 when s[0..n) is well-formed UTF-8. */
int tensor_utf8_valid(const unsigned char *s, size_t n);

#endif
