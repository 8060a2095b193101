/* npy: NumPy's .npy format, versions 1.0 to 3.0, whole images and streams
 * of them (.npys: one image after another). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensor/format.h"

/* NumPy itself refuses headers over 10000 bytes unless told otherwise. */
#define NPY_MAX_HEADER (1u << 20)

struct npy_info {
	enum dtype dtype;
	int swap, fortran, ndim;
	int64_t shape[TENSOR_MAX_DIM];
};

/* Magic and version from the first 8 bytes; *size is 10 or 12, the bytes
 * before the header text. */
static int
npy_prelude_size(const unsigned char *p, size_t *size, char *err, size_t errlen)
{
	if (memcmp(p, "\x93NUMPY", 6) != 0) {
		snprintf(err, errlen, "not a .npy file (bad magic)");
		return -1;
	}
	if (p[7] != 0 || p[6] < 1 || p[6] > 3) {
		snprintf(err, errlen, "unsupported .npy version %d.%d", p[6], p[7]);
		return -1;
	}
	*size = p[6] == 1 ? 10 : 12;
	return 0;
}

static size_t
npy_header_len(const unsigned char *p, size_t prelude)
{
	return (size_t)cli_le_get(p + 8, prelude == 10 ? 2 : 4);
}

/* A tiny reader for the Python dict literal NumPy writes as the header. */
struct pyp {
	const char *s;
	size_t n, i;
	char *err;
	size_t errlen;
};

static int
py_peek(struct pyp *p)
{
	while (p->i < p->n && strchr(" \t\r\n", p->s[p->i]) && p->s[p->i])
		p->i++;
	return p->i < p->n ? (unsigned char)p->s[p->i] : -1;
}

static int
py_eat(struct pyp *p, int c)
{
	if (py_peek(p) != c)
		return 0;
	p->i++;
	return 1;
}

static int
py_fail(struct pyp *p, const char *what)
{
	snprintf(p->err, p->errlen, "bad .npy header: %s at byte %zu", what, p->i);
	return -1;
}

static int
py_str(struct pyp *p, char *out, size_t cap)
{
	int q = py_peek(p);
	size_t len = 0;

	if (q != '\'' && q != '"')
		return py_fail(p, "expected a string");
	for (p->i++; p->i < p->n && p->s[p->i] != q; p->i++) {
		if (p->s[p->i] == '\\' || len + 1 >= cap)
			return py_fail(p, "unexpected string");
		out[len++] = p->s[p->i];
	}
	if (p->i++ >= p->n)
		return py_fail(p, "unterminated string");
	out[len] = 0;
	return 0;
}

static int
py_int(struct pyp *p, int64_t *v)
{
	int neg = py_eat(p, '-'), digits = 0;
	uint64_t x = 0;

	while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') {
		x = x * 10 + (uint64_t)(p->s[p->i++] - '0');
		if (x > INT64_MAX)
			return py_fail(p, "dimension too large");
		digits++;
	}
	if (!digits)
		return py_fail(p, "expected an integer");
	if (p->i < p->n && p->s[p->i] == 'L')	/* Python 2 long */
		p->i++;
	*v = neg ? -(int64_t)x : (int64_t)x;
	return 0;
}

static int
npy_descr(const char *d, struct npy_info *info, char *err, size_t errlen)
{
	static const struct { const char *code; enum dtype dt; } codes[] = {
		{ "f4", DT_F32 }, { "f8", DT_F64 }, { "f2", DT_F16 }, { "i1", DT_I8 },
		{ "i2", DT_I16 }, { "i4", DT_I32 }, { "i8", DT_I64 }, { "u1", DT_U8 },
		{ "b1", DT_BOOL },
	};
	size_t i;

	for (i = 0; i < sizeof codes / sizeof codes[0]; i++)
		if (strchr("<>|=", d[0]) && d[0] && strcmp(d + 1, codes[i].code) == 0)
			break;
	if (i == sizeof codes / sizeof codes[0]) {
		snprintf(err, errlen, "unsupported .npy dtype '%s'", d);
		return -1;
	}
	info->dtype = codes[i].dt;
	if (d[0] == '|' && dtype_size(info->dtype) > 1) {
		snprintf(err, errlen, "dtype '%s' lacks a byte order", d);
		return -1;
	}
	info->swap = d[0] == '>' ? !tensor_host_is_big() :
	    d[0] == '<' ? tensor_host_is_big() : 0;
	return 0;
}

static int
py_shape(struct pyp *p, struct npy_info *info)
{
	if (!py_eat(p, '('))
		return py_fail(p, "shape is not a tuple");
	info->ndim = 0;
	while (py_peek(p) != ')') {
		if (info->ndim == TENSOR_MAX_DIM)
			return py_fail(p, "more than 8 dimensions");
		if (py_int(p, &info->shape[info->ndim++]) < 0)
			return -1;
		if (!py_eat(p, ','))
			break;
	}
	return py_eat(p, ')') ? 0 : py_fail(p, "expected ')'");
}

static int
py_value(struct pyp *p, const char *key, struct npy_info *info)
{
	char word[64];

	if (strcmp(key, "descr") == 0) {
		if (py_peek(p) == '[') {
			snprintf(p->err, p->errlen, "structured .npy dtypes are not supported");
			return -1;
		}
		return py_str(p, word, sizeof word) < 0 ? -1 :
		    npy_descr(word, info, p->err, p->errlen);
	}
	if (strcmp(key, "shape") == 0)
		return py_shape(p, info);
	if (strcmp(key, "fortran_order") == 0) {
		py_peek(p);
		if (p->n - p->i >= 4 && memcmp(p->s + p->i, "True", 4) == 0)
			info->fortran = 1, p->i += 4;
		else if (p->n - p->i >= 5 && memcmp(p->s + p->i, "False", 5) == 0)
			info->fortran = 0, p->i += 5;
		else
			return py_fail(p, "fortran_order is not True or False");
		return 0;
	}
	snprintf(p->err, p->errlen, "bad .npy header: unknown key '%s'", key);
	return -1;
}

static int
npy_dict(const char *h, size_t n, struct npy_info *info, char *err, size_t errlen)
{
	static const char *const keys[] = { "descr", "fortran_order", "shape" };
	struct pyp p = { h, n, 0, err, errlen };
	char key[32];
	int seen = 0, k;

	memset(info, 0, sizeof *info);
	if (!py_eat(&p, '{'))
		return py_fail(&p, "not a dict");
	while (py_peek(&p) != '}') {
		if (py_str(&p, key, sizeof key) < 0 || !py_eat(&p, ':'))
			return py_fail(&p, "expected 'key':");
		for (k = 0; k < 3 && strcmp(key, keys[k]) != 0; k++)
			;
		if (k < 3 && (seen & 1 << k))
			return py_fail(&p, "repeated key");
		seen |= 1 << k;
		if (py_value(&p, key, info) < 0)
			return -1;
		if (!py_eat(&p, ','))
			break;
	}
	if (!py_eat(&p, '}') || py_peek(&p) != -1)
		return py_fail(&p, "expected the end of the dict");
	if (seen != 7)
		return py_fail(&p, "missing descr, fortran_order or shape");
	return 0;
}

/* Fortran-order data to C order: walk the C index, find its F offset. */
static int
npy_to_c_order(struct tensor *t, char *err, size_t errlen)
{
	size_t n = (size_t)tensor_numel(t), es = dtype_size(t->dtype), c, f, rest;
	size_t fstride[TENSOR_MAX_DIM], acc = 1;
	unsigned char *dst = malloc(n * es + 1);
	int d;

	if (!dst) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	for (d = 0; d < t->ndim; d++) {
		fstride[d] = acc;
		acc *= (size_t)t->shape[d];
	}
	for (c = 0; c < n; c++) {
		rest = c;
		f = 0;
		for (d = t->ndim - 1; d >= 0; d--) {
			f += rest % (size_t)t->shape[d] * fstride[d];
			rest /= (size_t)t->shape[d];
		}
		memcpy(dst + c * es, (unsigned char *)t->data + f * es, es);
	}
	free(t->data);
	t->data = dst;
	return 0;
}

/* Host layout: byte order and booleans, then C order. */
static int
npy_finish(struct tensor *t, const struct npy_info *info, char *err, size_t errlen)
{
	tensor_to_host(t, info->swap);
	if (info->fortran && t->ndim > 1 && tensor_numel(t) > 1)
		return npy_to_c_order(t, err, errlen);
	return 0;
}

/* Prelude and header dict of an image holding at least 8 bytes; *off is
 * where the data starts. */
static int
npy_head(const unsigned char *buf, size_t len, struct npy_info *info,
    size_t *off, char *err, size_t errlen)
{
	size_t prelude, hlen;

	if (len < 8) {
		snprintf(err, errlen, "truncated .npy header");
		return -1;
	}
	if (npy_prelude_size(buf, &prelude, err, errlen) < 0)
		return -1;
	if (len < prelude || (hlen = npy_header_len(buf, prelude)) > len - prelude) {
		snprintf(err, errlen, "truncated .npy header");
		return -1;
	}
	if (npy_dict((const char *)buf + prelude, hlen, info, err, errlen) < 0)
		return -1;
	*off = prelude + hlen;
	return 0;
}

/* The image at buf: one array, *used bytes of the len there are. */
static int
npy_image(const unsigned char *buf, size_t len, struct tensor *out,
    size_t *used, char *err, size_t errlen)
{
	struct npy_info info;
	uint64_t bytes;
	size_t off;

	memset(out, 0, sizeof *out);
	if (npy_head(buf, len, &info, &off, err, errlen) < 0 ||
	    tensor_shape_bytes(info.dtype, info.ndim, info.shape, &bytes, err,
	    errlen) < 0)
		return -1;
	if (bytes > len - off) {	/* checked before any allocation */
		snprintf(err, errlen, "truncated: shape needs %llu data bytes, "
		    "file has %zu", (unsigned long long)bytes, len - off);
		return -1;
	}
	if (tensor_init(out, info.dtype, info.ndim, info.shape, err, errlen) < 0)
		return -1;
	memcpy(out->data, buf + off, (size_t)bytes);
	if (npy_finish(out, &info, err, errlen) < 0) {
		tensor_free(out);
		return -1;
	}
	*used = off + (size_t)bytes;
	return 0;
}

/* An image followed by another: a stream of arrays (.npys). */
static int
npy_more(const unsigned char *buf, size_t len, size_t used)
{
	return len - used >= 6 && memcmp(buf + used, "\x93NUMPY", 6) == 0;
}

int
tensor_npy_parse(const unsigned char *buf, size_t len, struct tensor *out,
    char *err, size_t errlen)
{
	size_t used;

	if (npy_image(buf, len, out, &used, err, errlen) < 0)
		return -1;
	if (used == len)
		return 0;
	snprintf(err, errlen, "%zu trailing bytes after the data%s", len - used,
	    npy_more(buf, len, used) ? " (more arrays follow: a .npy stream, "
	    "which --stream and collx-tensor read)" : "");
	tensor_free(out);
	return -1;
}

int
tensor_npys_parse(const unsigned char *buf, size_t len,
    struct tensor_set *out, char *err, size_t errlen)
{
	struct tensor t;
	size_t off = 0, used;
	char name[24], why[COLLX_ERRLEN];

	memset(out, 0, sizeof *out);
	out->format = TENSOR_NPYS;
	do {
		snprintf(name, sizeof name, "%zu", out->count);
		if (npy_image(buf + off, len - off, &t, &used, why,
		    sizeof why) < 0)
			goto fail;
		if (tensor_set_add(out, name, &t, why, sizeof why) < 0) {
			tensor_free(&t);
			goto fail;
		}
		off += used;
	} while (off < len && npy_more(buf, len, off));
	if (off < len) {
		snprintf(err, errlen, "%zu trailing bytes after the data%s%s",
		    len - off, out->count > 1 ? " of array " : "",
		    out->count > 1 ? name : "");
		tensor_set_free(out);
		return -1;
	}
	if (out->count == 1) {		/* one array: a .npy file */
		out->format = TENSOR_NPY;
		free(out->items[0].name);
		out->items[0].name = NULL;
	}
	return 0;
fail:
	if (out->count == 0)
		snprintf(err, errlen, "%s", why);
	else
		snprintf(err, errlen, "array %zu (byte %zu): %s", out->count,
		    off, why);
	tensor_set_free(out);
	return -1;
}

static const char *
npy_code(enum dtype dt)
{
	switch (dt) {
	case DT_F32: return "<f4";
	case DT_F64: return "<f8";
	case DT_F16: return "<f2";
	case DT_I8: return "|i1";
	case DT_I16: return "<i2";
	case DT_I32: return "<i4";
	case DT_I64: return "<i8";
	case DT_U8: return "|u1";
	case DT_BOOL: return "|b1";
	default: return NULL;
	}
}

/* Version 1.0 prelude and header, padded with spaces and a newline to a
 * multiple of 64 bytes as NumPy does; returns its length. With at most 8
 * dimensions the header always fits version 1.0's 16-bit length. */
static size_t
npy_header(const struct tensor *t, const char *code, char *h, size_t cap)
{
	size_t n, total;
	int d;

	memcpy(h, "\x93NUMPY\x01\x00", 8);
	n = 10 + (size_t)snprintf(h + 10, cap - 10, "{'descr': '%s', "
	    "'fortran_order': False, 'shape': (", code);
	for (d = 0; d < t->ndim; d++)
		n += (size_t)snprintf(h + n, cap - n, "%s%lld%s", d ? " " : "",
		    (long long)t->shape[d], d + 1 < t->ndim || t->ndim == 1 ? "," : "");
	n += (size_t)snprintf(h + n, cap - n, "), }");
	total = (n + 1 + 63) / 64 * 64;
	memset(h + n, ' ', total - 1 - n);
	h[total - 1] = '\n';
	h[8] = (char)((total - 10) & 0xff);
	h[9] = (char)((total - 10) >> 8);
	return total;
}

int
tensor_npy_encode(const struct tensor *t, void **buf, size_t *len,
    char *err, size_t errlen)
{
	const char *code = npy_code(t->dtype);
	char head[512];
	size_t hlen, bytes = tensor_nbytes(t);
	unsigned char *out;

	if (!code) {
		snprintf(err, errlen, "%s has no .npy type code; write .safetensors, "
		    "or convert with --dtype f32", dtype_name(t->dtype));
		return -1;
	}
	hlen = npy_header(t, code, head, sizeof head);
	if (!(out = malloc(hlen + bytes))) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	memcpy(out, head, hlen);
	memcpy(out + hlen, t->data, bytes);
	if (tensor_host_is_big())
		tensor_swap_bytes(out + hlen, (size_t)tensor_numel(t), dtype_size(t->dtype));
	*buf = out;
	*len = hlen + bytes;
	return 0;
}

int
tensor_npys_encode(const struct tensor_set *s, void **buf, size_t *len,
    char *err, size_t errlen)
{
	unsigned char *out = NULL, *grown;
	size_t i, n, total = 0;
	void *img;

	if (s->count == 0) {
		snprintf(err, errlen, "a .npy stream holds one array or more");
		return -1;
	}
	for (i = 0; i < s->count; i++) {
		if (tensor_npy_encode(&s->items[i], &img, &n, err, errlen) < 0)
			goto fail;
		if ((grown = realloc(out, total + n)) == NULL) {
			free(img);
			snprintf(err, errlen, "out of memory");
			goto fail;
		}
		out = grown;
		memcpy(out + total, img, n);
		total += n;
		free(img);
	}
	*buf = out;
	*len = total;
	return 0;
fail:
	free(out);
	return -1;
}

/* Exactly n bytes from f, or -1 naming what was cut short. */
static int
read_exact(FILE *f, void *p, size_t n, const char *what, char *err, size_t errlen)
{
	if (fread(p, 1, n, f) == n)
		return 0;
	if (ferror(f))
		snprintf(err, errlen, "read error in %s: %s", what, strerror(errno));
	else
		snprintf(err, errlen, "stream ended inside %s", what);
	return -1;
}

/* The data of one array, grown as it arrives so that a header claiming
 * a huge shape costs memory only for bytes really sent. */
static int
stream_data(FILE *f, struct tensor *t, uint64_t bytes, char *err, size_t errlen)
{
	size_t have = 0, cap = bytes < (1u << 24) ? (size_t)bytes : (1u << 24), step;
	unsigned char *p = malloc(cap + 1), *q;

	while (p && have < bytes) {
		if (have == cap) {
			cap = bytes - cap < cap ? (size_t)bytes : cap * 2;
			if (!(q = realloc(p, cap + 1)))
				break;
			p = q;
		}
		step = cap - have;
		if (read_exact(f, p + have, step, ".npy data", err, errlen) < 0) {
			free(p);
			return -1;
		}
		have += step;
	}
	if (!p || have < bytes) {
		free(p);
		snprintf(err, errlen, "out of memory for %llu bytes", (unsigned long long)bytes);
		return -1;
	}
	t->data = p;
	return 0;
}

static int
stream_head(FILE *f, unsigned char *pre, struct npy_info *info,
    char *err, size_t errlen)
{
	size_t prelude, hlen;
	char *h;
	int rc;

	if (npy_prelude_size(pre, &prelude, err, errlen) < 0 ||
	    read_exact(f, pre + 8, prelude - 8, ".npy header", err, errlen) < 0)
		return -1;
	hlen = npy_header_len(pre, prelude);
	if (hlen > NPY_MAX_HEADER) {
		snprintf(err, errlen, ".npy header of %zu bytes is too long", hlen);
		return -1;
	}
	if (!(h = malloc(hlen + 1))) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	rc = read_exact(f, h, hlen, ".npy header", err, errlen);
	if (rc == 0)
		rc = npy_dict(h, hlen, info, err, errlen);
	free(h);
	return rc;
}

int
tensor_npy_read_stream(FILE *f, struct tensor *out, char *err, size_t errlen)
{
	unsigned char pre[12];
	struct npy_info info;
	uint64_t bytes;
	size_t got;

	memset(out, 0, sizeof *out);
	got = fread(pre, 1, 8, f);
	if (got == 0 && !ferror(f))
		return 0;
	if (got < 8) {
		snprintf(err, errlen, ferror(f) ? "read error in .npy header" :
		    "stream ended inside .npy header");
		return -1;
	}
	if (stream_head(f, pre, &info, err, errlen) < 0 ||
	    tensor_shape_bytes(info.dtype, info.ndim, info.shape, &bytes, err, errlen) < 0)
		return -1;
	out->dtype = info.dtype;
	out->ndim = info.ndim;
	memcpy(out->shape, info.shape, sizeof info.shape);
	if (stream_data(f, out, bytes, err, errlen) < 0 ||
	    npy_finish(out, &info, err, errlen) < 0) {
		tensor_free(out);
		return -1;
	}
	return 1;
}

int
tensor_npy_write_stream(FILE *f, const struct tensor *t, char *err, size_t errlen)
{
	void *buf;
	size_t len;
	int rc = 0;

	if (tensor_npy_encode(t, &buf, &len, err, errlen) < 0)
		return -1;
	if (fwrite(buf, 1, len, f) != len || fflush(f) != 0) {
		snprintf(err, errlen, "write error: %s", strerror(errno));
		rc = -1;
	}
	free(buf);
	return rc;
}
