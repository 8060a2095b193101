/* dtype: the element types collx moves and reduces. */
#ifndef COLLX_DTYPE_H
#define COLLX_DTYPE_H

#include <stddef.h>
#include <stdint.h>

enum dtype {
	DT_F32, DT_F64, DT_F16, DT_BF16,
	DT_I8, DT_I16, DT_I32, DT_I64, DT_U8, DT_BOOL,
	DT_COUNT
};

size_t dtype_size(enum dtype dt);
/* Short command-line name: "f32", "f64", "f16", "bf16", "i8", ..., "u8", "bool". */
const char *dtype_name(enum dtype dt);
/* Accepts the short names and the NumPy/PyTorch spellings (float32, int64, ...). */
int dtype_parse(const char *s, enum dtype *out);
int dtype_is_float(enum dtype dt);

/* Half-precision conversions; float to half rounds to nearest even. */
float dtype_f16_to_f32(uint16_t h);
uint16_t dtype_f32_to_f16(float f);
float dtype_bf16_to_f32(uint16_t h);
uint16_t dtype_f32_to_bf16(float f);

/* Element i of a buffer as double (for printing, checking, tolerances). */
double dtype_get(enum dtype dt, const void *buf, size_t i);
/* Store v into element i (rounding/saturating as the C conversion does). */
void dtype_put(enum dtype dt, void *buf, size_t i, double v);

#endif
