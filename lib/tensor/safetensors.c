/* safetensors: reading Hugging Face's format, with every validation rule
 * of its reference reader, and a strict JSON reader for the header; the
 * writer is safetensors_write.c. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/util.h"
#include "tensor/format.h"

#define ST_MAX_HEADER 100000000u	/* the reference reader's cap */
#define JSON_MAX_DEPTH 64

const char *const tensor_st_dtype_names[DT_COUNT] = {
	[DT_F32] = "F32", [DT_F64] = "F64", [DT_F16] = "F16", [DT_BF16] = "BF16",
	[DT_I8] = "I8", [DT_I16] = "I16", [DT_I32] = "I32", [DT_I64] = "I64",
	[DT_U8] = "U8", [DT_BOOL] = "BOOL",
};

/* One header entry, before its data is copied out. */
struct st_entry {
	char *name;
	enum dtype dtype;
	int ndim;
	int64_t shape[TENSOR_MAX_DIM];
	uint64_t begin, end;
};

struct jp {
	const unsigned char *s;
	size_t n, i;
	int depth;
	char *err;
	size_t errlen;
};

static int jp_fail(struct jp *p, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static int
jp_fail(struct jp *p, const char *fmt, ...)
{
	char what[160];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(what, sizeof what, fmt, ap);
	va_end(ap);
	snprintf(p->err, p->errlen, "bad header JSON at byte %zu: %s", p->i, what);
	return -1;
}

static int
jp_peek(struct jp *p)
{
	while (p->i < p->n && strchr(" \t\r\n", p->s[p->i]) && p->s[p->i])
		p->i++;
	return p->i < p->n ? p->s[p->i] : -1;
}

static int
jp_eat(struct jp *p, int c)
{
	if (jp_peek(p) != c)
		return 0;
	p->i++;
	return 1;
}

static int
jp_expect(struct jp *p, int c)
{
	return jp_eat(p, c) ? 0 : jp_fail(p, "expected '%c'", c);
}

static int
jp_hex4(struct jp *p, uint32_t *v)
{
	int k, c;

	*v = 0;
	for (k = 0; k < 4; k++) {
		if (p->i >= p->n)
			return jp_fail(p, "short \\u escape");
		c = p->s[p->i++];
		*v <<= 4;
		if (c >= '0' && c <= '9') *v |= (uint32_t)(c - '0');
		else if (c >= 'a' && c <= 'f') *v |= (uint32_t)(c - 'a' + 10);
		else if (c >= 'A' && c <= 'F') *v |= (uint32_t)(c - 'A' + 10);
		else return jp_fail(p, "bad \\u escape");
	}
	return 0;
}

/* \uXXXX (with surrogate pairs) as UTF-8 into out; returns bytes written. */
static int
jp_unicode(struct jp *p, char *out)
{
	uint32_t c, lo;

	if (jp_hex4(p, &c) < 0)
		return -1;
	if (c >= 0xd800 && c <= 0xdbff) {
		if (p->n - p->i < 6 || p->s[p->i] != '\\' || p->s[p->i + 1] != 'u')
			return jp_fail(p, "lone surrogate");
		p->i += 2;
		if (jp_hex4(p, &lo) < 0)
			return -1;
		if (lo < 0xdc00 || lo > 0xdfff)
			return jp_fail(p, "bad surrogate pair");
		c = 0x10000 + ((c - 0xd800) << 10) + (lo - 0xdc00);
	} else if (c >= 0xdc00 && c <= 0xdfff)
		return jp_fail(p, "lone surrogate");
	if (c == 0)
		return jp_fail(p, "NUL in string");
	if (c < 0x80)
		return out[0] = (char)c, 1;
	if (c < 0x800)
		return out[0] = (char)(0xc0 | c >> 6), out[1] = (char)(0x80 | (c & 0x3f)), 2;
	if (c < 0x10000) {
		out[0] = (char)(0xe0 | c >> 12);
		out[1] = (char)(0x80 | ((c >> 6) & 0x3f));
		out[2] = (char)(0x80 | (c & 0x3f));
		return 3;
	}
	out[0] = (char)(0xf0 | c >> 18);
	out[1] = (char)(0x80 | ((c >> 12) & 0x3f));
	out[2] = (char)(0x80 | ((c >> 6) & 0x3f));
	out[3] = (char)(0x80 | (c & 0x3f));
	return 4;
}

static int
jp_escape(struct jp *p, char *out)
{
	static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
	const char *e;

	if (p->i >= p->n)
		return jp_fail(p, "unterminated string");
	if (p->s[p->i] == 'u') {
		p->i++;
		return jp_unicode(p, out);
	}
	if (!p->s[p->i] || !(e = strchr(from, p->s[p->i])))
		return jp_fail(p, "bad escape");
	p->i++;
	out[0] = to[e - from];
	return 1;
}

/* A string, decoded, malloc'd into *out (a decoded string is never
 * longer than its source, so one allocation suffices). */
static int
jp_string(struct jp *p, char **out)
{
	size_t start, len = 0;
	char *s;
	int k;

	if (jp_peek(p) != '"')
		return jp_fail(p, "expected a string");
	start = ++p->i;
	while (p->i < p->n && p->s[p->i] != '"')
		p->i += p->s[p->i] == '\\' ? 2 : 1;
	if (p->i >= p->n)
		return jp_fail(p, "unterminated string");
	if (!(s = malloc(p->i - start + 1)))
		return jp_fail(p, "out of memory");
	for (p->i = start; p->s[p->i] != '"'; ) {
		if (p->s[p->i] < 0x20) {
			free(s);
			return jp_fail(p, "control character in string");
		}
		if (p->s[p->i] != '\\') {
			s[len++] = (char)p->s[p->i++];
			continue;
		}
		p->i++;
		if ((k = jp_escape(p, s + len)) < 0) {
			free(s);
			return -1;
		}
		len += (size_t)k;
	}
	p->i++;
	s[len] = 0;
	*out = s;
	return 0;
}

/* A JSON number that must be a non-negative integer. */
static int
jp_uint(struct jp *p, uint64_t *v)
{
	size_t start;
	int c = jp_peek(p);

	if (c == '-')
		return jp_fail(p, "negative number");
	if (c < '0' || c > '9')
		return jp_fail(p, "expected an integer");
	start = p->i;
	for (*v = 0; p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9'; p->i++) {
		if (*v > (UINT64_MAX - 9) / 10)
			return jp_fail(p, "integer too large");
		*v = *v * 10 + (uint64_t)(p->s[p->i] - '0');
	}
	if (p->s[start] == '0' && p->i - start > 1)
		return jp_fail(p, "leading zero");
	if (p->i < p->n && strchr(".eE", p->s[p->i]) && p->s[p->i])
		return jp_fail(p, "expected an integer");
	return 0;
}

static int jp_skip(struct jp *p);

static size_t
jp_digits(struct jp *p)
{
	size_t start = p->i;

	while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9')
		p->i++;
	return p->i - start;
}

/* -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)? */
static int
jp_skip_number(struct jp *p)
{
	size_t start;

	p->i += p->s[p->i] == '-';
	start = p->i;
	if (!jp_digits(p) || (p->s[start] == '0' && p->i - start > 1))
		return jp_fail(p, "bad number");
	if (p->i < p->n && p->s[p->i] == '.' && (p->i++, !jp_digits(p)))
		return jp_fail(p, "bad number");
	if (p->i < p->n && (p->s[p->i] == 'e' || p->s[p->i] == 'E')) {
		p->i++;
		if (p->i < p->n && (p->s[p->i] == '+' || p->s[p->i] == '-'))
			p->i++;
		if (!jp_digits(p))
			return jp_fail(p, "bad number");
	}
	return 0;
}

/* Members or elements of a container being skipped. */
static int
jp_skip_items(struct jp *p, int close, int keyed)
{
	char *key;

	if (jp_eat(p, close))
		return 0;
	do {
		if (keyed) {
			if (jp_string(p, &key) < 0)
				return -1;
			free(key);
			if (jp_expect(p, ':') < 0)
				return -1;
		}
		if (jp_skip(p) < 0)
			return -1;
	} while (jp_eat(p, ','));
	return jp_expect(p, close);
}

/* Any well-formed value (fields the format does not define). */
static int
jp_skip(struct jp *p)
{
	static const char *const words[] = { "true", "false", "null" };
	int c = jp_peek(p), rc, k;
	char *s;

	if (c == '{' || c == '[') {
		if (++p->depth > JSON_MAX_DEPTH)
			return jp_fail(p, "nested too deeply");
		p->i++;
		rc = jp_skip_items(p, c == '{' ? '}' : ']', c == '{');
		p->depth--;
		return rc;
	}
	if (c == '"') {
		if ((rc = jp_string(p, &s)) == 0)
			free(s);
		return rc;
	}
	for (k = 0; k < 3; k++)
		if (p->n - p->i >= strlen(words[k]) &&
		    memcmp(p->s + p->i, words[k], strlen(words[k])) == 0) {
			p->i += strlen(words[k]);
			return 0;
		}
	if (c == '-' || (c >= '0' && c <= '9'))
		return jp_skip_number(p);
	return jp_fail(p, "unexpected character");
}

static int
st_dtype(const char *s, enum dtype *dt)
{
	int i = cli_name_index(tensor_st_dtype_names, DT_COUNT, s);

	return i < 0 ? -1 : (*dt = (enum dtype)i, 0);
}

/* "[a, b, ...]" of non-negative integers, at most max of them. */
static int
jp_uint_list(struct jp *p, uint64_t *v, int max, int *count)
{
	*count = 0;
	if (jp_expect(p, '[') < 0)
		return -1;
	if (jp_eat(p, ']'))
		return 0;
	do {
		if (*count == max)
			return jp_fail(p, "more than %d entries", max);
		if (jp_uint(p, &v[(*count)++]) < 0)
			return -1;
	} while (jp_eat(p, ','));
	return jp_expect(p, ']');
}

static int
st_field(struct jp *p, const char *key, struct st_entry *e, int *seen)
{
	uint64_t v[TENSOR_MAX_DIM];
	char *s;
	int n, i, bit = !strcmp(key, "dtype") ? 1 : !strcmp(key, "shape") ? 2 :
	    !strcmp(key, "data_offsets") ? 4 : 0;

	if (*seen & bit)
		return jp_fail(p, "tensor '%s': repeated field '%s'", e->name, key);
	*seen |= bit;
	if (bit == 1) {
		if (jp_string(p, &s) < 0)
			return -1;
		n = st_dtype(s, &e->dtype);
		if (n < 0)
			snprintf(p->err, p->errlen, "tensor '%s': unknown dtype '%s'",
			    e->name, s);
		free(s);
		return n;
	}
	if (bit == 2) {
		if (jp_uint_list(p, v, TENSOR_MAX_DIM, &e->ndim) < 0)
			return -1;
		for (i = 0; i < e->ndim; i++) {
			if (v[i] > INT64_MAX)
				return jp_fail(p, "tensor '%s': dimension too large", e->name);
			e->shape[i] = (int64_t)v[i];
		}
		return 0;
	}
	if (bit == 4) {
		if (jp_uint_list(p, v, 2, &n) < 0)
			return -1;
		if (n != 2)
			return jp_fail(p, "tensor '%s': data_offsets needs 2 numbers", e->name);
		e->begin = v[0];
		e->end = v[1];
		return 0;
	}
	return jp_skip(p);	/* a field the format does not define */
}

static int
st_info(struct jp *p, struct st_entry *e)
{
	char *key;
	int seen = 0, rc;

	if (jp_expect(p, '{') < 0)
		return -1;
	if (!jp_eat(p, '}')) {
		do {
			if (jp_string(p, &key) < 0)
				return -1;
			rc = jp_expect(p, ':');
			if (rc == 0)
				rc = st_field(p, key, e, &seen);
			free(key);
			if (rc < 0)
				return -1;
		} while (jp_eat(p, ','));
		if (jp_expect(p, '}') < 0)
			return -1;
	}
	if (seen != 7)
		return jp_fail(p, "tensor '%s' lacks dtype, shape or data_offsets", e->name);
	return 0;
}

static int
st_metadata(struct jp *p, struct tensor_set *set)
{
	char *key, *value;
	int rc;

	/* Peek first: it skips blanks, and the length check must count
	 * from where "null" would start. */
	if (jp_peek(p) == 'n' && p->n - p->i >= 4 &&
	    memcmp(p->s + p->i, "null", 4) == 0) {
		p->i += 4;
		return 0;
	}
	if (jp_expect(p, '{') < 0)
		return -1;
	if (jp_eat(p, '}'))
		return 0;
	do {
		if (jp_string(p, &key) < 0)
			return -1;
		value = NULL;
		rc = jp_expect(p, ':');
		if (rc == 0 && jp_peek(p) != '"')
			rc = jp_fail(p, "__metadata__ '%s' is not a string", key);
		if (rc == 0)
			rc = jp_string(p, &value);
		if (rc == 0 && tensor_set_meta(set, key))
			rc = jp_fail(p, "repeated __metadata__ key '%s'", key);
		if (rc == 0)
			rc = tensor_set_meta_put(set, key, value, p->err, p->errlen);
		free(key);
		free(value);
		if (rc < 0)
			return -1;
	} while (jp_eat(p, ','));
	return jp_expect(p, '}');
}

struct st_header {
	struct st_entry *e;
	size_t n, cap;
};

static int
st_member(struct jp *p, struct st_header *h, struct tensor_set *set,
    int *have_meta)
{
	struct st_entry *grown;
	char *name;

	if (jp_string(p, &name) < 0)
		return -1;
	if (jp_expect(p, ':') < 0) {
		free(name);
		return -1;
	}
	if (strcmp(name, "__metadata__") == 0) {
		free(name);
		if ((*have_meta)++)
			return jp_fail(p, "repeated __metadata__");
		return st_metadata(p, set);
	}
	if (h->n == h->cap) {
		h->cap = h->cap ? h->cap * 2 : 16;
		if (!(grown = realloc(h->e, h->cap * sizeof *grown))) {
			free(name);
			return jp_fail(p, "out of memory");
		}
		h->e = grown;
	}
	memset(&h->e[h->n], 0, sizeof h->e[0]);
	h->e[h->n++].name = name;
	return st_info(p, &h->e[h->n - 1]);
}

static int
st_json(struct jp *p, struct st_header *h, struct tensor_set *set)
{
	int have_meta = 0;

	if (jp_expect(p, '{') < 0)
		return -1;
	if (!jp_eat(p, '}')) {
		do {
			if (st_member(p, h, set, &have_meta) < 0)
				return -1;
		} while (jp_eat(p, ','));
		if (jp_expect(p, '}') < 0)
			return -1;
	}
	return jp_peek(p) == -1 ? 0 : jp_fail(p, "text after the header object");
}

static int
by_offset(const void *a, const void *b)
{
	const struct st_entry *x = a, *y = b;

	if (x->begin != y->begin)
		return x->begin < y->begin ? -1 : 1;
	return x->end < y->end ? -1 : x->end > y->end;
}

static int
by_name(const void *a, const void *b)
{
	return strcmp(((const struct st_entry *)a)->name, ((const struct st_entry *)b)->name);
}

/* Every byte of the data section belongs to exactly one tensor, in
 * offset order, and each tensor's span matches its shape. */
static int
st_check_one(const struct st_entry *e, uint64_t expect, uint64_t data_len,
    char *err, size_t errlen)
{
	uint64_t bytes;

	if (e->begin > e->end || e->end > data_len) {
		snprintf(err, errlen, "tensor '%s': data_offsets [%llu, %llu] out of range "
		    "(data section is %llu bytes)", e->name, (unsigned long long)e->begin,
		    (unsigned long long)e->end, (unsigned long long)data_len);
		return -1;
	}
	if (e->begin != expect) {
		snprintf(err, errlen, "tensor '%s': data starts at %llu, expected %llu (%s)",
		    e->name, (unsigned long long)e->begin, (unsigned long long)expect,
		    e->begin > expect ? "hole" : "overlap");
		return -1;
	}
	if (tensor_shape_bytes(e->dtype, e->ndim, e->shape, &bytes, err, errlen) < 0) {
		char why[COLLX_ERRLEN];

		snprintf(why, sizeof why, "%s", err);
		snprintf(err, errlen, "tensor '%s': %s", e->name, why);
		return -1;
	}
	if (bytes != e->end - e->begin) {
		snprintf(err, errlen, "tensor '%s': shape needs %llu bytes, data_offsets "
		    "span %llu", e->name, (unsigned long long)bytes,
		    (unsigned long long)(e->end - e->begin));
		return -1;
	}
	return 0;
}

static int
st_check(struct st_header *h, uint64_t data_len, char *err, size_t errlen)
{
	uint64_t expect = 0;
	size_t i;

	/* A header with no tensors leaves h->e NULL, which qsort's contract
	 * forbids even for zero elements (UBSan's nonnull check). */
	if (h->n > 1)
		qsort(h->e, h->n, sizeof *h->e, by_name);
	for (i = 1; i < h->n; i++)
		if (strcmp(h->e[i - 1].name, h->e[i].name) == 0) {
			snprintf(err, errlen, "duplicate tensor name '%s'", h->e[i].name);
			return -1;
		}
	if (h->n > 1)
		qsort(h->e, h->n, sizeof *h->e, by_offset);
	for (i = 0; i < h->n; i++) {
		if (st_check_one(&h->e[i], expect, data_len, err, errlen) < 0)
			return -1;
		expect = h->e[i].end;
	}
	if (expect != data_len) {
		snprintf(err, errlen, "%llu trailing bytes after the last tensor",
		    (unsigned long long)(data_len - expect));
		return -1;
	}
	return 0;
}

static int
st_build(const struct st_header *h, const unsigned char *data,
    struct tensor_set *set, char *err, size_t errlen)
{
	struct tensor t;
	size_t i;

	for (i = 0; i < h->n; i++) {
		const struct st_entry *e = &h->e[i];

		if (tensor_init(&t, e->dtype, e->ndim, e->shape, err, errlen) < 0)
			return -1;
		memcpy(t.data, data + e->begin, (size_t)(e->end - e->begin));
		tensor_to_host(&t, tensor_host_is_big());
		if (tensor_set_add(set, e->name, &t, err, errlen) < 0) {
			tensor_free(&t);
			return -1;
		}
	}
	return 0;
}

int
tensor_st_parse(const unsigned char *buf, size_t len, struct tensor_set *out,
    char *err, size_t errlen)
{
	struct st_header h = { 0 };
	struct jp p = { 0 };
	uint64_t hlen = 0;
	size_t i;
	int rc = -1;

	memset(out, 0, sizeof *out);
	out->format = TENSOR_SAFETENSORS;
	if (len < 8)
		snprintf(err, errlen, "truncated safetensors header");
	else if ((hlen = cli_le_get(buf, 8)) > ST_MAX_HEADER)
		snprintf(err, errlen, "header length %llu exceeds the %u-byte limit",
		    (unsigned long long)hlen, ST_MAX_HEADER);
	else if (hlen > len - 8)
		snprintf(err, errlen, "header length %llu runs past the end of the file "
		    "(%zu bytes)", (unsigned long long)hlen, len);
	else if (!tensor_utf8_valid(buf + 8, (size_t)hlen))
		snprintf(err, errlen, "header is not valid UTF-8");
	else {
		p = (struct jp){ buf + 8, (size_t)hlen, 0, 0, err, errlen };
		rc = st_json(&p, &h, out);
		if (rc == 0)
			rc = st_check(&h, len - 8 - hlen, err, errlen);
		if (rc == 0)
			rc = st_build(&h, buf + 8 + hlen, out, err, errlen);
	}
	for (i = 0; i < h.n; i++)
		free(h.e[i].name);
	free(h.e);
	if (rc < 0)
		tensor_set_free(out);
	return rc;
}
