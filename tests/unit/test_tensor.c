/* test_tensor: dtype conversions, both file formats, streams, cutting and
 * joining, the generator's logarithm, and malformed input. */
#include <math.h>
#include <stdio.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#include "tensor/fillname.h"
#include "tensor/flat.h"
#include "tensor/format.h"
#include "tensor/rng.h"
#include "tensor/tensor.h"
#include "unit.h"

static char err[COLLX_ERRLEN];

static float
bits_f32(uint32_t b)
{
	float f;

	memcpy(&f, &b, sizeof f);
	return f;
}

static void
test_dtype_names(void)
{
	enum dtype dt;
	int ok = 1, i;

	for (i = 0; i < DT_COUNT; i++)
		ok &= dtype_parse(dtype_name(i), &dt) == 0 && (int)dt == i;
	UNIT_OK(ok, "every short name parses back to its dtype");
	UNIT_OK(dtype_parse("float32", &dt) == 0 && dt == DT_F32, "float32");
	UNIT_OK(dtype_parse("F32", &dt) == 0 && dt == DT_F32, "F32");
	UNIT_OK(dtype_parse("float", &dt) == 0 && dt == DT_F64, "float is f64, as NumPy's");
	UNIT_OK(dtype_parse("f32", &dt) == 0 && dt == DT_F32, "f32");
	UNIT_OK(dtype_parse("torch.float", &dt) == 0 && dt == DT_F32, "torch.float is f32");
	UNIT_OK(dtype_parse("i8", &dt) == 0 && dt == DT_I8, "i8 is int8");
	UNIT_OK(dtype_parse("int64", &dt) == 0 && dt == DT_I64, "int64");
	UNIT_OK(dtype_parse("bfloat16", &dt) == 0 && dt == DT_BF16, "bfloat16");
	UNIT_OK(dtype_parse("torch.float16", &dt) == 0 && dt == DT_F16, "torch.float16");
	UNIT_OK(dtype_parse("complex64", &dt) < 0, "complex64 refused");
	UNIT_OK(dtype_size(DT_F64) == 8 && dtype_size(DT_BF16) == 2 &&
	    dtype_size(DT_BOOL) == 1, "sizes");
}

static void
test_f16_values(void)
{
	UNIT_OK(dtype_f32_to_f16(1.0f) == 0x3c00, "f16 1.0");
	UNIT_OK(dtype_f32_to_f16(-2.0f) == 0xc000, "f16 -2.0");
	UNIT_OK(dtype_f32_to_f16(65504.0f) == 0x7bff, "f16 max");
	UNIT_OK(dtype_f32_to_f16(65519.0f) == 0x7bff, "f16 just below the overflow tie");
	UNIT_OK(dtype_f32_to_f16(65520.0f) == 0x7c00, "f16 overflow tie rounds to inf");
	UNIT_OK(dtype_f32_to_f16(ldexpf(1, -24)) == 0x0001, "f16 smallest subnormal");
	UNIT_OK(dtype_f32_to_f16(ldexpf(1, -25)) == 0x0000, "f16 half the smallest: tie to 0");
	UNIT_OK(dtype_f32_to_f16(ldexpf(3, -26)) == 0x0001, "f16 0.75 quantum rounds up");
	UNIT_OK(dtype_f32_to_f16(ldexpf(3, -25)) == 0x0002, "f16 1.5 quanta: tie to even 2");
	UNIT_OK(dtype_f32_to_f16(1.0f + ldexpf(1, -11)) == 0x3c00, "f16 tie to even (down)");
	UNIT_OK(dtype_f32_to_f16(1.0f + ldexpf(3, -11)) == 0x3c02, "f16 tie to even (up)");
	UNIT_OK(dtype_f32_to_f16(ldexpf(2047, -25)) == 0x0400, "f16 subnormal rounds up to normal");
	UNIT_OK(dtype_f32_to_f16(-0.0f) == 0x8000, "f16 negative zero");
	UNIT_OK(dtype_f32_to_f16(INFINITY) == 0x7c00 && dtype_f32_to_f16(-INFINITY) == 0xfc00, "f16 inf");
	UNIT_OK((dtype_f32_to_f16(NAN) & 0x7c00) == 0x7c00 && (dtype_f32_to_f16(NAN) & 0x3ff),
	    "f16 NaN stays NaN");
	UNIT_OK(dtype_f16_to_f32(0x0001) == ldexpf(1, -24), "f16 subnormal decodes");
	UNIT_OK(dtype_f16_to_f32(0x7bff) == 65504.0f, "f16 max decodes");
	UNIT_OK(isnan(dtype_f16_to_f32(0x7e00)), "f16 NaN decodes");
}

/* Every half value survives f16 -> f32 -> f16. */
static void
test_f16_roundtrip(void)
{
	uint32_t h;
	int ok = 1;

	for (h = 0; h < 0x10000; h++) {
		float f = dtype_f16_to_f32((uint16_t)h);

		if (isnan(f))
			ok &= isnan(dtype_f16_to_f32(dtype_f32_to_f16(f)));
		else
			ok &= dtype_f32_to_f16(f) == h;
	}
	UNIT_OK(ok, "all 65536 f16 values round-trip through f32");
}

/* Round to nearest even, checked by the definition: no neighbour of the
 * result is closer, and ties pick the even one. */
static int
rne_ok(float x, uint16_t (*to)(float), float (*from)(uint16_t))
{
	uint16_t h = to(x);
	double d = fabs((double)from(h) - x), dn, dp;

	if (isinf(from(h)))
		return 1;	/* overflow cases are checked by value above */
	dn = fabs((double)from((uint16_t)(h - 1)) - x);
	dp = fabs((double)from((uint16_t)(h + 1)) - x);
	if ((h & 0x7fff) == 0)	/* zero: the neighbour below is the other sign */
		dn = INFINITY;
	if (d > dn || (!isinf(from((uint16_t)(h + 1))) && d > dp))
		return 0;
	if ((d == dn || d == dp) && (h & 1))
		return 0;
	return 1;
}

static void
test_rne_random(void)
{
	struct tensor_rng r;
	int i, ok16 = 1, okbf = 1;
	float x;

	tensor_rng_seed(&r, 7);
	for (i = 0; i < 200000; i++) {
		x = bits_f32((uint32_t)tensor_rng_next(&r));
		if (isnan(x) || fabsf(x) > 60000.0f)
			x = ldexpf((float)tensor_rng_uniform(&r, 24), (int)(tensor_rng_next(&r) % 40) - 30);
		ok16 &= rne_ok(x, dtype_f32_to_f16, dtype_f16_to_f32);
		x = bits_f32((uint32_t)tensor_rng_next(&r));
		if (!isnan(x))
			okbf &= rne_ok(x, dtype_f32_to_bf16, dtype_bf16_to_f32);
	}
	UNIT_OK(ok16, "dtype_f32_to_f16 is round-to-nearest-even on 200000 values");
	UNIT_OK(okbf, "dtype_f32_to_bf16 is round-to-nearest-even on 200000 values");
	UNIT_OK(dtype_f32_to_bf16(1.0f) == 0x3f80, "bf16 1.0");
	UNIT_OK(dtype_f32_to_bf16(1.0f + ldexpf(1, -8)) == 0x3f80, "bf16 tie to even (down)");
	UNIT_OK(dtype_f32_to_bf16(1.0f + ldexpf(3, -8)) == 0x3f82, "bf16 tie to even (up)");
	UNIT_OK(dtype_f32_to_bf16(bits_f32(0x7f7fffff)) == 0x7f80, "bf16 FLT_MAX rounds to inf");
	UNIT_OK((dtype_f32_to_bf16(NAN) & 0x7f80) == 0x7f80 && (dtype_f32_to_bf16(NAN) & 0x7f),
	    "bf16 NaN stays NaN");
	UNIT_OK(dtype_f32_to_bf16(bits_f32(0x00018000)) == 0x0002, "bf16 subnormal tie to even");
}

static void
test_put_get(void)
{
	unsigned char b[8];

	dtype_put(DT_I8, b, 0, 300);
	UNIT_OK(dtype_get(DT_I8, b, 0) == 127, "i8 saturates high");
	dtype_put(DT_I8, b, 0, -300);
	UNIT_OK(dtype_get(DT_I8, b, 0) == -128, "i8 saturates low");
	dtype_put(DT_U8, b, 0, -5);
	UNIT_OK(dtype_get(DT_U8, b, 0) == 0, "u8 saturates at 0");
	dtype_put(DT_I32, b, 0, NAN);
	UNIT_OK(dtype_get(DT_I32, b, 0) == 0, "NaN to int is 0");
	dtype_put(DT_I32, b, 0, -2.7);
	UNIT_OK(dtype_get(DT_I32, b, 0) == -2, "int conversion truncates");
	dtype_put(DT_I64, b, 0, 1e300);
	UNIT_OK(*(int64_t *)(void *)b == INT64_MAX, "i64 saturates");
	dtype_put(DT_BOOL, b, 0, 0.5);
	UNIT_OK(b[0] == 1, "bool from nonzero");
	dtype_put(DT_F16, b, 0, 0.1);
	UNIT_OK(*(uint16_t *)(void *)b == 0x2e66, "f16 from double 0.1");
	dtype_put(DT_BF16, b, 0, 3.0);
	UNIT_OK(dtype_get(DT_BF16, b, 0) == 3.0, "bf16 put/get 3.0");
}

/* A tensor of dtype dt and ndim dims (sizes 1..3) with varied values. */
static int
make(struct tensor *t, enum dtype dt, int ndim)
{
	int64_t shape[TENSOR_MAX_DIM];
	size_t i, n;
	int d;

	for (d = 0; d < ndim; d++)
		shape[d] = 1 + (d * 7 + dt) % 3;
	if (tensor_init(t, dt, ndim, shape, err, sizeof err) < 0)
		return -1;
	n = (size_t)tensor_numel(t);
	for (i = 0; i < n; i++)
		dtype_put(dt, t->data, i, dt == DT_BOOL ? (double)(i % 3 == 0) :
		    (double)i * (i % 2 ? -1 : 1) + (dtype_is_float(dt) ? 0.5 : 0));
	return 0;
}

static int
same(const struct tensor *a, const struct tensor *b)
{
	return a->dtype == b->dtype && a->ndim == b->ndim &&
	    memcmp(a->shape, b->shape, (size_t)a->ndim * sizeof a->shape[0]) == 0 &&
	    memcmp(a->data, b->data, tensor_nbytes(a)) == 0;
}

/* Every proper prefix of an image is refused (and never read past). */
static int
prefixes_refused(const unsigned char *buf, size_t len)
{
	struct tensor_set back;
	size_t cut;
	int ok = 1;

	for (cut = 0; cut < len; cut += 1 + cut / 16) {
		unsigned char *head = malloc(cut + 1);

		memcpy(head, buf, cut);
		if (tensor_parse(head, cut, &back, err, sizeof err) == 0) {
			tensor_set_free(&back);
			ok = 0;
		}
		free(head);
	}
	return ok;
}

static int
roundtrip(const struct tensor *t, enum tensor_format fmt)
{
	struct tensor_set s = { .format = fmt, .count = 1 }, back;
	void *buf;
	size_t len;
	int ok, rc;

	s.items = (struct tensor *)t;
	if (tensor_encode(&s, fmt, &buf, &len, err, sizeof err) < 0)
		return 0;
	rc = tensor_parse(buf, len, &back, err, sizeof err);
	ok = rc == 0 && back.count == 1 && back.format == fmt && same(t, &back.items[0]);
	if (rc == 0)
		tensor_set_free(&back);
	if (fmt == TENSOR_SAFETENSORS)
		ok &= ((const unsigned char *)buf)[0] % 8 == 0;
	else
		ok &= (len - tensor_nbytes(t)) % 64 == 0;
	ok = ok && prefixes_refused(buf, len);
	free(buf);
	return ok;
}

static void
test_roundtrips(void)
{
	struct tensor t;
	char what[80];
	int dt, nd, ok;

	for (dt = 0; dt < DT_COUNT; dt++) {
		ok = 1;
		for (nd = 0; nd <= TENSOR_MAX_DIM; nd++) {
			if (make(&t, dt, nd) < 0) {
				ok = 0;
				break;
			}
			ok &= roundtrip(&t, TENSOR_SAFETENSORS);
			if (dt != DT_BF16)
				ok &= roundtrip(&t, TENSOR_NPY);
			tensor_free(&t);
		}
		snprintf(what, sizeof what, "%s round-trips, ndim 0..8, npy and safetensors",
		    dtype_name(dt));
		UNIT_OK(ok, what);
	}
	make(&t, DT_BF16, 2);
	{
		struct tensor_set s = { .format = TENSOR_NPY, .count = 1, .items = &t };
		void *buf;
		size_t len;

		UNIT_OK(tensor_encode(&s, TENSOR_NPY, &buf, &len, err, sizeof err) < 0 &&
		    strstr(err, "bf16"), "bf16 to .npy is refused with a message");
	}
	tensor_free(&t);
}

/* Safetensors image from header text and data length (data is zeros). */
static size_t
st_image(unsigned char *out, const char *json, size_t data_len)
{
	size_t n = strlen(json), i;

	for (i = 0; i < 8; i++)
		out[i] = (unsigned char)((uint64_t)n >> (8 * i));
	memcpy(out + 8, json, n);
	memset(out + 8 + n, 0, data_len);
	return 8 + n + data_len;
}

static int
st_refused(const char *json, size_t data_len, const char *needle)
{
	unsigned char buf[1024];
	struct tensor_set s;
	size_t len = st_image(buf, json, data_len);

	if (tensor_parse(buf, len, &s, err, sizeof err) == 0) {
		tensor_set_free(&s);
		return 0;
	}
	if (!strstr(err, needle))
		printf("# message '%s' lacks '%s'\n", err, needle);
	return strstr(err, needle) != NULL;
}

static void
test_st_malformed(void)
{
	unsigned char buf[64];
	struct tensor_set s;

	UNIT_OK(st_refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "") == 0,
	    "a valid one-tensor file parses");
	UNIT_OK(st_refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 9,
	    "trailing"), "trailing bytes");
	UNIT_OK(st_refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4,
	    "out of range"), "offsets past the data");
	UNIT_OK(st_refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8,
	    "needs 12 bytes"), "shape and span disagree");
	UNIT_OK(st_refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
	    "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}", 12, "hole"), "hole");
	UNIT_OK(st_refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
	    "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "overlap"),
	    "overlap");
	UNIT_OK(st_refused("{\"a\":{\"dtype\":\"F8\",\"shape\":[2],\"data_offsets\":[0,2]}}", 2,
	    "unknown dtype"), "unknown dtype");
	UNIT_OK(st_refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8,
	    "negative"), "negative dimension");
	UNIT_OK(st_refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4294967296],"
	    "\"data_offsets\":[0,8]}}", 8, "overflow"), "shape product overflows");
	UNIT_OK(st_refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],"
	    "\"data_offsets\":[0,4]}}", 4, "more than 8"), "nine dimensions");
	UNIT_OK(st_refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
	    "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "duplicate"),
	    "duplicate names");
	UNIT_OK(st_refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}", 4,
	    "JSON"), "unclosed object");
	UNIT_OK(st_refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],}}", 4,
	    "JSON"), "trailing comma");
	UNIT_OK(st_refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[01],\"data_offsets\":[0,4]}}", 4,
	    "leading zero"), "leading zero");
	UNIT_OK(st_refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[1.0],\"data_offsets\":[0,4]}}", 4,
	    "integer"), "float dimension");
	UNIT_OK(st_refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, "lacks"),
	    "missing data_offsets");
	UNIT_OK(st_refused("{\"__metadata__\":{\"k\":1}}", 0, "not a string"),
	    "non-string metadata");
	UNIT_OK(st_refused("{\"a\\ud800\":{}}", 0, "surrogate"), "lone surrogate");
	UNIT_OK(st_refused("{\"a\xff\":{}}", 0, "UTF-8"), "invalid UTF-8");
	UNIT_OK(st_refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}} x",
	    4, "after"), "text after the object");
	UNIT_OK(st_refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],"
	    "\"x\":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]"
	    "]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}}", 4, "deeply"),
	    "nesting limit");
	UNIT_OK(st_refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],"
	    "\"extra\":{\"b\":[true,null,-1.5e3,\"\\u00e9\"]}}}", 4, "") == 0,
	    "unknown fields are skipped");
	memset(buf, 0, sizeof buf);
	buf[0] = 0xff, buf[1] = 0xff, buf[2] = 0xff, buf[3] = 0xff, buf[8] = '{';
	UNIT_OK(tensor_parse(buf, sizeof buf, &s, err, sizeof err) < 0 &&
	    strstr(err, "limit"), "absurd header length refused before allocating");
	buf[0] = 100, buf[1] = buf[2] = buf[3] = 0;
	UNIT_OK(tensor_parse(buf, sizeof buf, &s, err, sizeof err) < 0 &&
	    strstr(err, "past the end"), "header length past the end");
	UNIT_OK(tensor_parse("hello world", 11, &s, err, sizeof err) < 0 &&
	    strstr(err, "not a .npy"), "unknown magic");
	UNIT_OK(tensor_parse("", 0, &s, err, sizeof err) < 0 && strstr(err, "empty"),
	    "empty input");
}

static void
test_st_set(void)
{
	struct tensor_set s = { .format = TENSOR_SAFETENSORS }, back;
	struct tensor a, b, c;
	void *buf;
	size_t len;
	const char *names[] = { "zeta", "alpha", "mid\"q\\" };

	make(&a, DT_F32, 2);
	make(&b, DT_I64, 1);
	make(&c, DT_BF16, 3);
	UNIT_OK(tensor_set_add(&s, names[0], &a, err, sizeof err) == 0 &&
	    tensor_set_add(&s, names[1], &b, err, sizeof err) == 0 &&
	    tensor_set_add(&s, names[2], &c, err, sizeof err) == 0, "set of three");
	make(&a, DT_F32, 1);
	UNIT_OK(tensor_set_add(&s, "alpha", &a, err, sizeof err) < 0 && a.data,
	    "duplicate name refused, tensor left to the caller");
	tensor_free(&a);
	UNIT_OK(!strcmp(s.items[0].name, "alpha") && !strcmp(s.items[2].name, "zeta"),
	    "kept sorted by name");
	tensor_set_meta_put(&s, "format", "pt", err, sizeof err);
	tensor_set_meta_put(&s, "collx.arch", "mlp\n\"x\"", err, sizeof err);
	tensor_set_meta_put(&s, "format", "np", err, sizeof err);
	UNIT_OK(s.nmeta == 2 && !strcmp(tensor_set_meta(&s, "format"), "np"), "meta replace");
	UNIT_OK(tensor_encode(&s, TENSOR_SAFETENSORS, &buf, &len, err, sizeof err) == 0,
	    "encode set");
	UNIT_OK(tensor_parse(buf, len, &back, err, sizeof err) == 0 && back.count == 3 &&
	    same(&back.items[1], tensor_set_find(&s, "mid\"q\\")) &&
	    same(&back.items[2], tensor_set_find(&s, "zeta")) &&
	    !strcmp(tensor_set_meta(&back, "collx.arch"), "mlp\n\"x\""),
	    "set, escaped names and metadata round-trip");
	UNIT_OK(((unsigned char *)buf)[0] % 8 == 0 && memcmp((char *)buf + 8,
	    "{\"__metadata__\":{\"collx.arch\"", 29) == 0, "metadata first, padded header");
	tensor_set_free(&back);
	free(buf);
	UNIT_OK(tensor_encode(&s, TENSOR_NPY, &buf, &len, err, sizeof err) < 0 &&
	    strstr(err, "exactly one"), "npy of a set of three is refused");
	buf = NULL;
	tensor_set_free(&s);
	free(buf);
}

/* A .npy image of the given version, header dict and data. */
static size_t
npy_image(unsigned char *out, int major, const char *dict,
    const void *data, size_t n)
{
	size_t h = strlen(dict), pre = major == 1 ? 10 : 12;

	memcpy(out, "\x93NUMPY", 6);
	out[6] = (unsigned char)major;
	out[7] = 0;
	out[8] = (unsigned char)h;
	out[9] = (unsigned char)(h >> 8);
	if (pre == 12)
		out[10] = out[11] = 0;
	memcpy(out + pre, dict, h);
	memcpy(out + pre + h, data, n);
	return pre + h + n;
}

static int
npy_result(int major, const char *dict, const void *data, size_t n,
    struct tensor *t)
{
	unsigned char buf[512];
	struct tensor_set s;
	size_t len = npy_image(buf, major, dict, data, n);

	if (tensor_parse(buf, len, &s, err, sizeof err) < 0)
		return -1;
	*t = s.items[0];
	s.count = 0;
	tensor_set_free(&s);
	return 0;
}

static void
test_npy_headers(void)
{
	const unsigned char be[] = { 0, 0, 0, 1, 0, 0, 0, 2, 0xff, 0xff, 0xff, 0xfd };
	const int32_t fort[] = { 0, 3, 1, 4, 2, 5 };	/* [[0,1,2],[3,4,5]] in F order */
	const int16_t v3[] = { 7, -8 };
	const unsigned char bools[] = { 0, 2, 1 };
	struct tensor t;
	int ok;

	ok = npy_result(1, "{'descr': '>i4', 'fortran_order': False, 'shape': (3,), }",
	    be, 12, &t) == 0;
	UNIT_OK(ok && t.dtype == DT_I32 && ((int32_t *)t.data)[0] == 1 &&
	    ((int32_t *)t.data)[1] == 2 && ((int32_t *)t.data)[2] == -3, "big-endian i4");
	tensor_free(&t);
	ok = npy_result(1, "{'fortran_order': True, 'shape': (2, 3), 'descr': '<i4'}",
	    fort, sizeof fort, &t) == 0;
	UNIT_OK(ok && t.ndim == 2 && t.shape[0] == 2 && ((int32_t *)t.data)[1] == 1 &&
	    ((int32_t *)t.data)[3] == 3 && ((int32_t *)t.data)[5] == 5,
	    "Fortran order converted to C order");
	tensor_free(&t);
	ok = npy_result(3, "{\"descr\": \"=i2\", \"fortran_order\": False, \"shape\": (2L,)}\n",
	    v3, sizeof v3, &t) == 0;
	UNIT_OK(ok && ((int16_t *)t.data)[1] == -8, "version 3.0, '=', double quotes, 2L");
	tensor_free(&t);
	ok = npy_result(2, "{'descr': '|b1', 'fortran_order': False, 'shape': (3,)}",
	    bools, 3, &t) == 0;
	UNIT_OK(ok && t.dtype == DT_BOOL && ((unsigned char *)t.data)[1] == 1,
	    "version 2.0 bool, nonzero read as 1");
	tensor_free(&t);
	UNIT_OK(npy_result(1, "{'descr': '<c8', 'fortran_order': False, 'shape': (1,)}",
	    "12345678", 8, &t) < 0 && strstr(err, "unsupported"), "complex refused");
	UNIT_OK(npy_result(1, "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,)}",
	    "1234", 4, &t) < 0 && strstr(err, "structured"), "structured refused");
	UNIT_OK(npy_result(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (-1,)}",
	    "1234", 4, &t) < 0 && strstr(err, "negative"), "negative shape");
	UNIT_OK(npy_result(1, "{'descr': '<f4', 'fortran_order': False, 'shape': "
	    "(9223372036854775807, 9223372036854775807)}", "1234", 4, &t) < 0 &&
	    strstr(err, "overflow"), "overflowing shape");
	UNIT_OK(npy_result(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1000000000,)}",
	    "1234", 4, &t) < 0 && strstr(err, "truncated"), "lying shape, no huge allocation");
	UNIT_OK(npy_result(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,)}",
	    "12345", 5, &t) < 0 && strstr(err, "trailing"), "trailing bytes");
	UNIT_OK(npy_result(1, "{'descr': '<f4', 'shape': (1,)}", "1234", 4, &t) < 0 &&
	    strstr(err, "missing"), "missing key");
	UNIT_OK(npy_result(1, "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, "
	    "'shape': (1,)}", "1234", 4, &t) < 0 && strstr(err, "repeated"), "repeated key");
	UNIT_OK(npy_result(1, "{'descr': '<f4', 'fortran_order': Maybe, 'shape': (1,)}",
	    "1234", 4, &t) < 0, "bad fortran_order");
	UNIT_OK(npy_result(1, "{'descr': '|f4', 'fortran_order': False, 'shape': (1,)}",
	    "1234", 4, &t) < 0, "'|' on a 4-byte type");
	UNIT_OK(npy_result(4, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,)}",
	    "1234", 4, &t) < 0 && strstr(err, "version"), "version 4.0 refused");
}

static void
test_stream(void)
{
	struct tensor a, b, got;
	FILE *f = tmpfile();
	long after_first;
	int rc1, rc2, rc3;

	make(&a, DT_F32, 3);
	make(&b, DT_I16, 0);
	tensor_npy_write_stream(f, &a, err, sizeof err);
	after_first = ftell(f);
	tensor_npy_write_stream(f, &b, err, sizeof err);
	rewind(f);
	rc1 = tensor_npy_read_stream(f, &got, err, sizeof err);
	UNIT_OK(rc1 == 1 && same(&got, &a) && ftell(f) == after_first,
	    "stream: first array read, not a byte more");
	tensor_free(&got);
	rc2 = tensor_npy_read_stream(f, &got, err, sizeof err);
	UNIT_OK(rc2 == 1 && same(&got, &b), "stream: second (0-d) array");
	tensor_free(&got);
	rc3 = tensor_npy_read_stream(f, &got, err, sizeof err);
	UNIT_OK(rc3 == 0, "stream: clean end of input");
	fclose(f);
	f = tmpfile();
	tensor_npy_write_stream(f, &a, err, sizeof err);
	fflush(f);
	UNIT_OK(ftruncate(fileno(f), ftell(f) - 3) == 0, "cut the stream short");
	rewind(f);
	UNIT_OK(tensor_npy_read_stream(f, &got, err, sizeof err) < 0 &&
	    strstr(err, "ended"), "stream: truncated array is an error");
	fclose(f);
	tensor_free(&a);
	tensor_free(&b);
}

/* Whether every cut of a stream image parses exactly when it ends at the
 * end of one of its arrays (at[0..n)). */
static int
stream_cuts(const unsigned char *buf, size_t len, const size_t *at, size_t n)
{
	struct tensor_set back;
	size_t cut, k;
	int ok = 1, whole, rc;

	for (cut = 0; cut <= len; cut++) {
		unsigned char *head = malloc(cut + 1);

		memcpy(head, buf, cut);
		for (whole = 0, k = 0; k < n; k++)
			whole |= cut == at[k];
		rc = tensor_parse_any(head, cut, &back, err, sizeof err);
		if (rc == 0)
			tensor_set_free(&back);
		ok &= (rc == 0) == whole;
		free(head);
	}
	return ok;
}

/* A stream image of twelve arrays (.npys): read in stream order, named by
 * index ("10" after "9", not after "1"), written back byte for byte; cut
 * anywhere but at an array's end, or followed by junk, it is refused, and
 * the one-array reader refuses it saying why. */
static void
test_npys(void)
{
	struct tensor_set s = { .format = TENSOR_NPYS }, back;
	struct tensor t;
	char name[8], order[64] = "", want[64] = "";
	size_t len, len2, i, at[12], n;
	void *buf, *again, *img;
	unsigned char *junk;
	int ok = 1;

	for (i = 0; i < 12; i++) {
		make(&t, i % 2 ? DT_I16 : DT_F32, (int)(i % 3));
		ok &= tensor_npy_encode(&t, &img, &n, err, sizeof err) == 0;
		free(img);
		at[i] = (i ? at[i - 1] : 0) + n;
		snprintf(name, sizeof name, "%zu", i);
		ok &= tensor_set_add(&s, name, &t, err, sizeof err) == 0;
		snprintf(want + strlen(want), sizeof want - strlen(want), "%s ",
		    name);
	}
	ok &= tensor_encode(&s, TENSOR_NPYS, &buf, &len, err, sizeof err) == 0;
	UNIT_OK(ok && len == at[11] &&
	    tensor_parse_any(buf, len, &back, err, sizeof err) == 0 &&
	    back.format == TENSOR_NPYS && back.count == 12,
	    "twelve arrays, one after another");
	for (i = 0; i < back.count; i++) {
		ok &= same(&back.items[i], &s.items[i]);
		snprintf(order + strlen(order), sizeof order - strlen(order),
		    "%s ", back.items[i].name);
	}
	UNIT_OK(ok && strcmp(order, want) == 0,
	    "in stream order, named by index");
	UNIT_OK(tensor_encode(&back, TENSOR_NPYS, &again, &len2, err,
	    sizeof err) == 0 && len2 == len && memcmp(again, buf, len) == 0,
	    "written back byte for byte");
	free(again);
	tensor_set_free(&back);
	UNIT_OK(stream_cuts(buf, len, at, 12),
	    "cut anywhere, it parses only at the end of an array");
	UNIT_OK(tensor_parse_any(buf, at[0], &back, err, sizeof err) == 0 &&
	    back.format == TENSOR_NPY && back.count == 1 &&
	    back.items[0].name == NULL, "a stream of one array is a .npy file");
	tensor_set_free(&back);
	junk = malloc(len + 4);
	memcpy(junk, buf, len);
	memcpy(junk + len, "junk", 4);
	UNIT_OK(tensor_parse_any(junk, len + 4, &back, err, sizeof err) < 0 &&
	    strstr(err, "4 trailing bytes after the data of array 11"),
	    "junk after the last array");
	free(junk);
	UNIT_OK(tensor_parse(buf, len, &back, err, sizeof err) < 0 &&
	    strstr(err, "more arrays follow"),
	    "the one-array reader says more arrays follow");
	tensor_set_free(&s);
	free(buf);
}

static void
test_ops(void)
{
	int64_t shape[3] = { 4, 5, 3 };
	struct tensor t, parts[3], back, c;
	int ok = 1, i, dim;

	tensor_init(&t, DT_I32, 3, shape, err, sizeof err);
	tensor_fill(&t, TENSOR_FILL_ARANGE, 0, 0, err, sizeof err);
	UNIT_OK(((int32_t *)t.data)[59] == 59, "arange fill");
	for (dim = 0; dim < 3; dim++) {
		for (i = 0; i < 3; i++) {
			int64_t lo = tensor_split_offset(t.shape[dim], 3, i);

			ok &= tensor_narrow(&t, dim, lo, tensor_split_offset(t.shape[dim], 3, i + 1)
			    - lo, &parts[i], err, sizeof err) == 0;
		}
		ok &= tensor_cat(parts, 3, dim, &back, err, sizeof err) == 0 && same(&back, &t);
		tensor_free(&back);
		for (i = 0; i < 3; i++)
			tensor_free(&parts[i]);
	}
	UNIT_OK(ok, "narrow into 3 uneven parts then cat gives back the tensor, every dim");
	UNIT_OK(tensor_split_offset(10, 3, 1) == 4 && tensor_split_offset(10, 3, 2) == 7 &&
	    tensor_split_offset(10, 3, 3) == 10 && tensor_split_offset(2, 4, 3) == 2,
	    "array_split offsets");
	tensor_narrow(&t, 1, 2, 1, &c, err, sizeof err);
	UNIT_OK(c.shape[1] == 1 && ((int32_t *)c.data)[0] == 6 && ((int32_t *)c.data)[3] == 21,
	    "narrow picks the right elements");
	UNIT_OK(tensor_narrow(&t, 1, 4, 2, &back, err, sizeof err) < 0, "narrow past the end");
	parts[0] = t;
	parts[1] = c;
	UNIT_OK(tensor_cat(parts, 2, 0, &back, err, sizeof err) < 0 && strstr(err, "dimension 1"),
	    "cat with a mismatched dimension refused");
	UNIT_OK(tensor_cast(&t, DT_F16, &back, err, sizeof err) == 0 &&
	    dtype_get(DT_F16, back.data, 59) == 59.0, "cast to f16");
	tensor_free(&back);
	tensor_free(&c);
	tensor_free(&t);
}

/* Slices of a [2, 3, 4] arange: element (a, b, c) holds 12a + 4b + c. */
static void
test_slices(void)
{
	static const int32_t mid[16] = { 4, 5, 6, 7, 8, 9, 10, 11,
	    16, 17, 18, 19, 20, 21, 22, 23 };
	static const int32_t last[6] = { 3, 7, 11, 15, 19, 23 };
	int64_t shape[3] = { 2, 3, 4 };
	struct tensor_slice s;
	struct tensor t, z;
	int32_t blk[24], *zd;
	int i, ok = 1;

	tensor_init(&t, DT_I32, 3, shape, err, sizeof err);
	tensor_init(&z, DT_I32, 3, shape, err, sizeof err);
	tensor_fill(&t, TENSOR_FILL_ARANGE, 0, 0, err, sizeof err);
	zd = z.data;
	UNIT_OK(tensor_dim_norm(-1, 3) == 2 && tensor_dim_norm(-3, 3) == 0 &&
	    tensor_dim_norm(1, 3) == 1, "negative dimensions count from the end");
	s = tensor_slice_of(&t, 1, 1, 2);
	tensor_slice_copy(&t, &s, blk, 1);
	UNIT_OK(s.count == 16 && memcmp(blk, mid, sizeof mid) == 0,
	    "dim 1 rows [1, 3): 2 x 2 x 4 elements, outer blocks in order");
	s = tensor_slice_of(&t, 2, 3, 1);
	tensor_slice_copy(&t, &s, blk, 1);
	UNIT_OK(s.count == 6 && memcmp(blk, last, sizeof last) == 0,
	    "last dimension, column 3: elements 4k + 3");
	s = tensor_slice_of(&t, 0, 1, 1);
	tensor_slice_copy(&t, &s, blk, 1);
	for (i = 0; i < 12; i++)
		ok &= blk[i] == 12 + i;
	UNIT_OK(s.count == 12 && ok, "dim 0 row 1: elements 12 to 23");
	s = tensor_slice_of(&t, -1, 0, 0);
	UNIT_OK(s.count == 24, "dim -1 is the whole tensor");
	s = tensor_slice_of(&t, 1, 1, 2);
	memcpy(blk, mid, sizeof mid);
	tensor_slice_copy(&z, &s, blk, 0);
	for (ok = 1, i = 0; i < 24; i++)
		ok &= zd[i] == ((i % 12) / 4 >= 1 ? i : 0);
	UNIT_OK(ok, "a block copied back lands in its slice, nothing else written");
	tensor_free(&z);
	tensor_free(&t);
}

static void
test_fill_parse(void)
{
	static const struct {
		const char *s;
		enum tensor_fill how;
		double value;
	} ok[] = {
		{ "zeros", TENSOR_FILL_CONST, 0 }, { "ones", TENSOR_FILL_CONST, 1 },
		{ "arange", TENSOR_FILL_ARANGE, 0 }, { "rand", TENSOR_FILL_RAND, 0 },
		{ "randn", TENSOR_FILL_RANDN, 0 }, { "2.5", TENSOR_FILL_CONST, 2.5 },
		{ "-1e3", TENSOR_FILL_CONST, -1000 }, { "0x10", TENSOR_FILL_CONST, 16 },
	};
	enum tensor_fill how;
	double value;
	size_t i;
	int good = 1;

	for (i = 0; i < sizeof ok / sizeof ok[0]; i++)
		good &= tensor_fill_parse(ok[i].s, &how, &value, err, sizeof err) == 0 &&
		    how == ok[i].how && value == ok[i].value;
	UNIT_OK(good, "fill names and numbers");
	UNIT_OK(tensor_fill_parse("nan", &how, &value, err, sizeof err) == 0 &&
	    how == TENSOR_FILL_CONST && isnan(value), "fill nan");
	UNIT_OK(tensor_fill_parse("1x", &how, &value, err, sizeof err) < 0 &&
	    strcmp(err, "expected zeros, ones, arange, rand, randn or a number, "
	    "not '1x'") == 0, "a number with trailing junk refused");
	UNIT_OK(tensor_fill_parse("", &how, &value, err, sizeof err) < 0 &&
	    tensor_fill_parse("Ones", &how, &value, err, sizeof err) < 0,
	    "an empty fill and a wrongly cased name refused");
}

static void
test_rng(void)
{
	struct tensor_rng r;
	double x, worst = 0, sum = 0, sq = 0, z[2];
	int i, ok = 1;

	for (i = 1; i < 100000; i++) {
		x = i / 100000.0;
		worst = fmax(worst, fabs(tensor_rng_log(x) - log(x)) / fabs(log(x)));
	}
	UNIT_OK(worst < 1e-15, "portable log agrees with libm to a few ulp");
	tensor_rng_seed(&r, 42);
	for (i = 0; i < 100000; i++) {
		x = tensor_rng_uniform(&r, 24);
		ok &= x >= 0 && x < 1 && x == (float)x;
	}
	UNIT_OK(ok, "24-bit uniforms lie in [0, 1) and are exact floats");
	for (i = 0; i < 50000; i++) {
		tensor_rng_normal2(&r, z);
		sum += z[0] + z[1];
		sq += z[0] * z[0] + z[1] * z[1];
	}
	UNIT_OK(fabs(sum / 1e5) < 0.02 && fabs(sq / 1e5 - 1) < 0.02,
	    "normal deviates have mean 0 and variance 1");
}

/* Random byte damage to valid images: refused or parsed, never a crash
 * (the sanitizer build watches the reads). */
static void
test_fuzz(void)
{
	struct tensor_set s = { .format = TENSOR_SAFETENSORS }, back;
	struct tensor a, b;
	struct tensor_rng r;
	unsigned char *img, *bad;
	void *buf[2];
	size_t len[2], k;
	int i, f, parsed = 0, bounded = 1;

	make(&a, DT_F32, 2);
	make(&b, DT_I8, 3);
	tensor_npy_encode(&a, &buf[0], &len[0], err, sizeof err);
	tensor_set_add(&s, "x", &a, err, sizeof err);
	tensor_set_add(&s, "y", &b, err, sizeof err);
	tensor_st_encode(&s, &buf[1], &len[1], err, sizeof err);
	tensor_rng_seed(&r, 99);
	for (f = 0; f < 2; f++) {
		img = buf[f];
		bad = malloc(len[f]);
		for (i = 0; i < 3000; i++) {
			memcpy(bad, img, len[f]);
			for (k = 0; k < 1 + tensor_rng_next(&r) % 3; k++)
				bad[tensor_rng_next(&r) % (f ? 140 : 70) % len[f]] =
				    (unsigned char)tensor_rng_next(&r);
			if (tensor_parse(bad, len[f], &back, err, sizeof err) == 0) {
				size_t j, total = 0;

				for (j = 0; j < back.count; j++)
					total += tensor_nbytes(&back.items[j]);
				bounded &= total <= len[f];
				parsed++;
				tensor_set_free(&back);
			}
		}
		free(bad);
		free(img);
	}
	UNIT_OK(bounded, "6000 damaged images: no crash, no tensor larger than its input");
	printf("# %d of them still parsed\n", parsed);
	tensor_set_free(&s);
}

int
main(void)
{
	test_dtype_names();
	test_f16_values();
	test_f16_roundtrip();
	test_rne_random();
	test_put_get();
	test_roundtrips();
	test_st_set();
	test_st_malformed();
	test_npy_headers();
	test_stream();
	test_npys();
	test_ops();
	test_slices();
	test_fill_parse();
	test_rng();
	test_fuzz();
	return unit_done();
}
