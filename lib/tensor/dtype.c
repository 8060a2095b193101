/* dtype: element sizes, names, half-precision conversions, typed access. */
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>

#include "tensor/dtype.h"

static const struct {
	const char *name;
	size_t size;
	int is_float;
	const char *aliases[4];
} dtypes[DT_COUNT] = {
	/* "float" is NumPy's float, f64 (torch.float, f32, is parsed apart). */
	[DT_F32] = { "f32", 4, 1, { "float32", "f4", NULL, NULL } },
	[DT_F64] = { "f64", 8, 1, { "float64", "double", "f8", "float" } },
	[DT_F16] = { "f16", 2, 1, { "float16", "half", "f2", "F16" } },
	[DT_BF16] = { "bf16", 2, 1, { "bfloat16", "BF16", NULL, NULL } },
	[DT_I8] = { "i8", 1, 0, { "int8", "i1", "I8", NULL } },
	[DT_I16] = { "i16", 2, 0, { "int16", "i2", "short", "I16" } },
	[DT_I32] = { "i32", 4, 0, { "int32", "i4", "int", "I32" } },
	[DT_I64] = { "i64", 8, 0, { "int64", "i8", "long", "I64" } },
	[DT_U8] = { "u8", 1, 0, { "uint8", "u1", "U8", NULL } },
	[DT_BOOL] = { "bool", 1, 0, { "b1", "BOOL", "?", NULL } },
};

size_t
dtype_size(enum dtype dt)
{
	return (unsigned)dt < DT_COUNT ? dtypes[dt].size : 0;
}

const char *
dtype_name(enum dtype dt)
{
	return (unsigned)dt < DT_COUNT ? dtypes[dt].name : "?";
}

int
dtype_is_float(enum dtype dt)
{
	return (unsigned)dt < DT_COUNT && dtypes[dt].is_float;
}

/*
 * Short names first, so "i8" is int8 (collx, PyTorch) and not NumPy's
 * 8-byte "i8"; NumPy type codes are matched with case, the long names
 * without.
 */
int
dtype_parse(const char *s, enum dtype *out)
{
	int dt, a;

	for (dt = 0; dt < DT_COUNT; dt++)
		if (strcasecmp(s, dtypes[dt].name) == 0) {
			*out = dt;
			return 0;
		}
	for (dt = 0; dt < DT_COUNT; dt++)
		for (a = 0; a < 4 && dtypes[dt].aliases[a]; a++)
			if (strcasecmp(s, dtypes[dt].aliases[a]) == 0) {
				*out = dt;
				return 0;
			}
	if (strcmp(s, "torch.float") == 0) {
		*out = DT_F32;
		return 0;
	}
	if (strncmp(s, "torch.", 6) == 0)
		return dtype_parse(s + 6, out);
	return -1;
}

/* Shift m right by s bits, rounding to nearest, ties to even. */
static uint64_t
shift_rne(uint64_t m, int s)
{
	uint64_t q, rem, half;

	if (s <= 0)
		return m;
	if (s >= 64)
		return 0;
	q = m >> s;
	rem = m & ((UINT64_C(1) << s) - 1);
	half = UINT64_C(1) << (s - 1);
	if (rem > half || (rem == half && (q & 1)))
		q++;
	return q;
}

/*
 * A double to a binary floating format with ebits exponent and mbits
 * fraction bits (f16: 5/10, bf16: 8/7), rounded once, to nearest even, so
 * f32 and f64 sources both convert exactly as IEEE 754 says. Overflow
 * gives infinity, underflow a subnormal or zero; NaN stays a quiet NaN.
 */
static uint16_t
f64_to_small(double d, int ebits, int mbits)
{
	uint64_t b, man, q;
	uint16_t sign, expmask = (uint16_t)(((1u << ebits) - 1) << mbits);
	int exp, e, bias = (1 << (ebits - 1)) - 1, emin = 1 - bias;

	memcpy(&b, &d, sizeof b);
	sign = (uint16_t)((b >> 48) & 0x8000);
	exp = (int)((b >> 52) & 0x7ff);
	man = b & ((UINT64_C(1) << 52) - 1);
	if (exp == 0x7ff)
		return sign | expmask | (man ? (uint16_t)(1u << (mbits - 1)) |
		    (uint16_t)(man >> (52 - mbits)) : 0);
	if (exp == 0)		/* double subnormals are far below both formats */
		return sign;
	man |= UINT64_C(1) << 52;
	e = exp - 1023;
	if (e > bias)
		return sign | expmask;
	if (e < emin) {
		q = shift_rne(man, 52 + emin - mbits - e);
		return sign | (uint16_t)q;	/* q may carry into the exponent */
	}
	q = shift_rne(man, 52 - mbits);
	q += (uint64_t)(e + bias - 1) << mbits;
	if (q >= expmask)
		return sign | expmask;
	return sign | (uint16_t)q;
}

float
dtype_f16_to_f32(uint16_t h)
{
	int exp = (h >> 10) & 0x1f, man = h & 0x3ff;
	float v;

	if (exp == 0x1f)
		v = man ? NAN : INFINITY;
	else if (exp == 0)
		v = ldexpf((float)man, -24);
	else
		v = ldexpf((float)(man | 0x400), exp - 25);
	return (h & 0x8000) ? -v : v;
}

uint16_t
dtype_f32_to_f16(float f)
{
	return f64_to_small(f, 5, 10);
}

float
dtype_bf16_to_f32(uint16_t h)
{
	uint32_t b = (uint32_t)h << 16;
	float f;

	memcpy(&f, &b, sizeof f);
	return f;
}

uint16_t
dtype_f32_to_bf16(float f)
{
	return f64_to_small(f, 8, 7);
}

/* C conversion semantics (truncate toward zero), made defined for NaN and
 * out-of-range values by saturating. */
static int64_t
sat_int(double v, int64_t lo, int64_t hi)
{
	if (isnan(v))
		return 0;
	if (v <= (double)lo)
		return lo;
	if (v >= (double)hi)	/* INT64_MAX rounds up to 2^63: still right */
		return hi;
	return (int64_t)v;
}

double
dtype_get(enum dtype dt, const void *buf, size_t i)
{
	const unsigned char *p = (const unsigned char *)buf + i * dtype_size(dt);
	union { float f; double d; uint16_t h; int8_t i8; int16_t i16;
	    int32_t i32; int64_t i64; uint8_t u8; } u;

	memcpy(&u, p, dtype_size(dt));
	switch (dt) {
	case DT_F32: return u.f;
	case DT_F64: return u.d;
	case DT_F16: return dtype_f16_to_f32(u.h);
	case DT_BF16: return dtype_bf16_to_f32(u.h);
	case DT_I8: return u.i8;
	case DT_I16: return u.i16;
	case DT_I32: return u.i32;
	case DT_I64: return (double)u.i64;
	case DT_U8: return u.u8;
	case DT_BOOL: return u.u8 != 0;
	default: return 0;
	}
}

void
dtype_put(enum dtype dt, void *buf, size_t i, double v)
{
	unsigned char *p = (unsigned char *)buf + i * dtype_size(dt);
	union { float f; double d; uint16_t h; int8_t i8; int16_t i16;
	    int32_t i32; int64_t i64; uint8_t u8; } u;

	switch (dt) {
	case DT_F32: u.f = (float)v; break;
	case DT_F64: u.d = v; break;
	case DT_F16: u.h = f64_to_small(v, 5, 10); break;
	case DT_BF16: u.h = f64_to_small(v, 8, 7); break;
	case DT_I8: u.i8 = (int8_t)sat_int(v, INT8_MIN, INT8_MAX); break;
	case DT_I16: u.i16 = (int16_t)sat_int(v, INT16_MIN, INT16_MAX); break;
	case DT_I32: u.i32 = (int32_t)sat_int(v, INT32_MIN, INT32_MAX); break;
	case DT_I64: u.i64 = sat_int(v, INT64_MIN, INT64_MAX); break;
	case DT_U8: u.u8 = (uint8_t)sat_int(v, 0, UINT8_MAX); break;
	case DT_BOOL: u.u8 = v != 0; break;
	default: return;
	}
	memcpy(p, &u, dtype_size(dt));
}
