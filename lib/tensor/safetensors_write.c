/* safetensors_write: the .safetensors image of a tensor set: the JSON
 * header (__metadata__ first, tensors in name order), then the data. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/util.h"
#include "tensor/format.h"

/* A growing text buffer; oom is sticky, checked once at the end. */
struct sbuf {
	char *p;
	size_t n, cap;
	int oom;
};

static void
sb_put(struct sbuf *b, const char *s, size_t n)
{
	char *grown;
	size_t cap;

	if (b->oom)
		return;
	if (b->n + n + 1 > b->cap) {
		cap = (b->n + n + 1) * 2;
		if (!(grown = realloc(b->p, cap))) {
			b->oom = 1;
			return;
		}
		b->p = grown;
		b->cap = cap;
	}
	memcpy(b->p + b->n, s, n);
	b->n += n;
	b->p[b->n] = 0;
}

static void sb_printf(struct sbuf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void
sb_printf(struct sbuf *b, const char *fmt, ...)
{
	char tmp[128];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(tmp, sizeof tmp, fmt, ap);
	va_end(ap);
	sb_put(b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

static void
sb_json_str(struct sbuf *b, const char *s)
{
	const unsigned char *c;

	sb_put(b, "\"", 1);
	for (c = (const unsigned char *)s; *c; c++) {
		if (*c == '"' || *c == '\\') {
			sb_put(b, "\\", 1);
			sb_put(b, (const char *)c, 1);
		} else if (*c < 0x20)
			sb_printf(b, "\\u%04x", *c);
		else
			sb_put(b, (const char *)c, 1);
	}
	sb_put(b, "\"", 1);
}

static const char *
st_name(const struct tensor *t)
{
	return t->name ? t->name : "tensor";
}

static int
st_strings_ok(const struct tensor_set *s, char *err, size_t errlen)
{
	size_t i;

	for (i = 0; i < s->count; i++)
		if (!tensor_utf8_valid((const unsigned char *)st_name(&s->items[i]),
		    strlen(st_name(&s->items[i])))) {
			snprintf(err, errlen, "tensor name is not valid UTF-8");
			return -1;
		}
	for (i = 0; i < s->nmeta; i++)
		if (!tensor_utf8_valid((const unsigned char *)s->meta[i].key,
		    strlen(s->meta[i].key)) || !tensor_utf8_valid(
		    (const unsigned char *)s->meta[i].value, strlen(s->meta[i].value))) {
			snprintf(err, errlen, "metadata is not valid UTF-8");
			return -1;
		}
	return 0;
}

/* Header JSON: __metadata__ first, then tensors in the set's (name)
 * order with consecutive offsets; padded with spaces to 8 bytes. */
static void
st_header_json(const struct tensor_set *s, struct sbuf *b)
{
	uint64_t off = 0;
	size_t i;
	int d;

	sb_put(b, "{", 1);
	if (s->nmeta) {
		sb_put(b, "\"__metadata__\":{", 16);
		for (i = 0; i < s->nmeta; i++) {
			sb_put(b, ",", i > 0);
			sb_json_str(b, s->meta[i].key);
			sb_put(b, ":", 1);
			sb_json_str(b, s->meta[i].value);
		}
		sb_put(b, "}", 1);
	}
	for (i = 0; i < s->count; i++) {
		const struct tensor *t = &s->items[i];

		sb_put(b, ",", i > 0 || s->nmeta);
		sb_json_str(b, st_name(t));
		sb_printf(b, ":{\"dtype\":\"%s\",\"shape\":[", tensor_st_dtype_names[t->dtype]);
		for (d = 0; d < t->ndim; d++)
			sb_printf(b, "%s%lld", d ? "," : "", (long long)t->shape[d]);
		sb_printf(b, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off,
		    (unsigned long long)(off + tensor_nbytes(t)));
		off += tensor_nbytes(t);
	}
	sb_put(b, "}", 1);
	while (b->n % 8)
		sb_put(b, " ", 1);
}

/* The file's bytes up to the data (its length, then the header) into
 * a malloc'd *out of *hlen bytes, and room for the data after them. */
static int
st_head(const struct tensor_set *s, int room, unsigned char **out,
    size_t *hlen, size_t *total, char *err, size_t errlen)
{
	struct sbuf b = { 0 };
	size_t i;

	if (st_strings_ok(s, err, errlen) < 0)
		return -1;
	for (i = 1; i < s->count; i++)
		if (strcmp(st_name(&s->items[i - 1]), st_name(&s->items[i])) >= 0) {
			snprintf(err, errlen, "tensor names not unique and sorted");
			return -1;
		}
	st_header_json(s, &b);
	*total = *hlen = 8 + b.n;
	for (i = 0; i < s->count; i++)
		*total += tensor_nbytes(&s->items[i]);
	if (b.oom || !(*out = malloc(room ? *total : *hlen))) {
		free(b.p);
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	cli_le_put(*out, b.n, 8);
	memcpy(*out + 8, b.p, b.n);
	free(b.p);
	return 0;
}

int
tensor_st_header(const struct tensor_set *s, void **buf, size_t *len,
    char *err, size_t errlen)
{
	unsigned char *out;
	size_t total;

	if (st_head(s, 0, &out, len, &total, err, errlen) < 0)
		return -1;
	*buf = out;
	return 0;
}

int
tensor_st_encode(const struct tensor_set *s, void **buf, size_t *len,
    char *err, size_t errlen)
{
	unsigned char *out, *p;
	size_t i, total, hlen;

	if (st_head(s, 1, &out, &hlen, &total, err, errlen) < 0)
		return -1;
	p = out + hlen;
	for (i = 0; i < s->count; i++) {
		memcpy(p, s->items[i].data, tensor_nbytes(&s->items[i]));
		if (tensor_host_is_big())
			tensor_swap_bytes(p, (size_t)tensor_numel(&s->items[i]),
			    dtype_size(s->items[i].dtype));
		p += tensor_nbytes(&s->items[i]);
	}
	*buf = out;
	*len = total;
	return 0;
}
