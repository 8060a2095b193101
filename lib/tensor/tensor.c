/* tensor: the array type, named sets, format dispatch, load and save. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "tensor/format.h"
#include "tensor/tensor.h"

int64_t
tensor_numel(const struct tensor *t)
{
	int64_t n = 1;
	int i;

	for (i = 0; i < t->ndim; i++)
		n *= t->shape[i];
	return n;
}

size_t
tensor_nbytes(const struct tensor *t)
{
	return (size_t)tensor_numel(t) * dtype_size(t->dtype);
}

int
tensor_shape_bytes(enum dtype dt, int ndim, const int64_t *shape, uint64_t *bytes,
    char *err, size_t errlen)
{
	uint64_t n = dtype_size(dt), limit = INT64_MAX < SIZE_MAX ? INT64_MAX : SIZE_MAX;
	int i;

	if (ndim < 0 || ndim > TENSOR_MAX_DIM) {
		snprintf(err, errlen, "%d dimensions (at most %d supported)", ndim,
		    TENSOR_MAX_DIM);
		return -1;
	}
	for (i = 0; i < ndim; i++)
		if (shape[i] < 0) {
			snprintf(err, errlen, "negative dimension %lld",
			    (long long)shape[i]);
			return -1;
		}
	for (i = 0; i < ndim; i++) {
		if (shape[i] != 0 && n > limit / (uint64_t)shape[i]) {
			snprintf(err, errlen, "shape too large (size overflows)");
			return -1;
		}
		n *= (uint64_t)shape[i];
	}
	*bytes = n;
	return 0;
}

int
tensor_init(struct tensor *t, enum dtype dt, int ndim, const int64_t *shape,
    char *err, size_t errlen)
{
	uint64_t bytes;

	memset(t, 0, sizeof *t);
	if ((unsigned)dt >= DT_COUNT) {
		snprintf(err, errlen, "unknown dtype %d", (int)dt);
		return -1;
	}
	if (tensor_shape_bytes(dt, ndim, shape, &bytes, err, errlen) < 0)
		return -1;
	t->data = calloc(1, bytes ? (size_t)bytes : 1);
	if (!t->data) {
		snprintf(err, errlen, "out of memory for %llu bytes",
		    (unsigned long long)bytes);
		return -1;
	}
	t->dtype = dt;
	t->ndim = ndim;
	if (ndim)
		memcpy(t->shape, shape, (size_t)ndim * sizeof *shape);
	return 0;
}

void
tensor_free(struct tensor *t)
{
	if (!t)
		return;
	free(t->name);
	free(t->data);
	memset(t, 0, sizeof *t);
}

const char *
tensor_dims_str(const int64_t *shape, int ndim, const char *sep,
    char *buf, size_t len)
{
	size_t off = 0;
	int i;

	off += (size_t)snprintf(buf, len, "[");
	for (i = 0; i < ndim && off < len; i++)
		off += (size_t)(shape[i] < 0 ?
		    snprintf(buf + off, len - off, "%s*", i ? sep : "") :
		    snprintf(buf + off, len - off, "%s%lld", i ? sep : "",
		    (long long)shape[i]));
	if (off < len)
		snprintf(buf + off, len - off, "]");
	return buf;
}

const char *
tensor_shape_str(const struct tensor *t, char *buf, size_t len)
{
	return tensor_dims_str(t->shape, t->ndim, ", ", buf, len);
}

int
tensor_host_is_big(void)
{
	const uint16_t one = 1;

	return *(const unsigned char *)&one == 0;
}

void
tensor_swap_bytes(void *data, size_t count, size_t size)
{
	unsigned char *p = data, tmp;
	size_t i, j;

	if (size < 2)
		return;
	for (i = 0; i < count; i++, p += size)
		for (j = 0; j < size / 2; j++) {
			tmp = p[j];
			p[j] = p[size - 1 - j];
			p[size - 1 - j] = tmp;
		}
}

void
tensor_to_host(struct tensor *t, int swap)
{
	size_t i, n = (size_t)tensor_numel(t);
	unsigned char *b = t->data;

	if (swap)
		tensor_swap_bytes(t->data, n, dtype_size(t->dtype));
	if (t->dtype == DT_BOOL)
		for (i = 0; i < n; i++)
			b[i] = b[i] != 0;
}

/* Shortest forms only, no surrogates, nothing past U+10FFFF. */
int
tensor_utf8_valid(const unsigned char *s, size_t n)
{
	size_t i = 0, k, len;
	uint32_t c;

	while (i < n) {
		c = s[i];
		len = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 :
		    (c & 0xf8) == 0xf0 ? 4 : 0;
		if (!len || len > n - i)
			return 0;
		c &= len == 1 ? 0x7f : 0x7f >> len;
		for (k = 1; k < len; k++) {
			if ((s[i + k] & 0xc0) != 0x80)
				return 0;
			c = c << 6 | (s[i + k] & 0x3f);
		}
		if ((len == 2 && c < 0x80) || (len == 3 && c < 0x800) ||
		    (len == 4 && c < 0x10000) || c > 0x10ffff ||
		    (c >= 0xd800 && c <= 0xdfff))
			return 0;
		i += len;
	}
	return 1;
}

void
tensor_set_free(struct tensor_set *s)
{
	size_t i;

	if (!s)
		return;
	for (i = 0; i < s->count; i++)
		tensor_free(&s->items[i]);
	for (i = 0; i < s->nmeta; i++) {
		free(s->meta[i].key);
		free(s->meta[i].value);
	}
	free(s->items);
	free(s->meta);
	memset(s, 0, sizeof *s);
}

/* Unnamed tensors sort first; names by byte order (strcmp). */
static int
name_cmp(const char *a, const char *b)
{
	if (!a || !b)
		return !!a - !!b;
	return strcmp(a, b);
}

int
tensor_set_add(struct tensor_set *s, const char *name, struct tensor *t,
    char *err, size_t errlen)
{
	struct tensor *items;
	char *copy = NULL;
	size_t pos;

	if (s->count && (!name || !s->items[0].name)) {
		snprintf(err, errlen, "an unnamed tensor cannot share a collection");
		return -1;
	}
	for (pos = 0; pos < s->count; pos++) {
		int c = name_cmp(s->items[pos].name, name);

		if (c == 0) {
			snprintf(err, errlen, "duplicate tensor name '%s'", name);
			return -1;
		}
		if (c > 0 && s->format != TENSOR_NPYS)
			break;
	}
	if ((name && !(copy = strdup(name))) ||
	    !(items = realloc(s->items, (s->count + 1) * sizeof *items))) {
		free(copy);
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	s->items = items;
	memmove(&items[pos + 1], &items[pos], (s->count - pos) * sizeof *items);
	free(t->name);
	items[pos] = *t;
	items[pos].name = copy;
	s->count++;
	memset(t, 0, sizeof *t);
	return 0;
}

struct tensor *
tensor_set_find(const struct tensor_set *s, const char *name)
{
	size_t i;

	for (i = 0; i < s->count; i++)
		if (name_cmp(s->items[i].name, name) == 0)
			return &s->items[i];
	return NULL;
}

const char *
tensor_set_meta(const struct tensor_set *s, const char *key)
{
	size_t i;

	for (i = 0; i < s->nmeta; i++)
		if (strcmp(s->meta[i].key, key) == 0)
			return s->meta[i].value;
	return NULL;
}

/* Metadata is kept sorted by key so files come out the same every time. */
int
tensor_set_meta_put(struct tensor_set *s, const char *key, const char *value,
    char *err, size_t errlen)
{
	struct tensor_meta *m;
	char *k = NULL, *v = strdup(value);
	size_t pos;

	for (pos = 0; v && pos < s->nmeta; pos++) {
		int c = strcmp(s->meta[pos].key, key);

		if (c == 0) {
			free(s->meta[pos].value);
			s->meta[pos].value = v;
			return 0;
		}
		if (c > 0 && s->format != TENSOR_NPYS)
			break;
	}
	if (!v || !(k = strdup(key)) ||
	    !(m = realloc(s->meta, (s->nmeta + 1) * sizeof *m))) {
		free(k);
		free(v);
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	s->meta = m;
	memmove(&m[pos + 1], &m[pos], (s->nmeta - pos) * sizeof *m);
	m[pos].key = k;
	m[pos].value = v;
	s->nmeta++;
	return 0;
}

int
tensor_parse(const void *buf, size_t len, struct tensor_set *out,
    char *err, size_t errlen)
{
	const unsigned char *p = buf;
	struct tensor t;

	memset(out, 0, sizeof *out);
	if (len == 0) {
		snprintf(err, errlen, "empty input");
		return -1;
	}
	if (len >= 6 && memcmp(p, "\x93NUMPY", 6) == 0) {
		if (tensor_npy_parse(p, len, &t, err, errlen) < 0)
			return -1;
		out->format = TENSOR_NPY;
		if (tensor_set_add(out, NULL, &t, err, errlen) < 0) {
			tensor_free(&t);
			return -1;
		}
		return 0;
	}
	if (len >= 9 && p[8] == '{')
		return tensor_st_parse(p, len, out, err, errlen);
	snprintf(err, errlen, "not a .npy or .safetensors file (unrecognised first bytes)");
	return -1;
}

int
tensor_parse_any(const void *buf, size_t len, struct tensor_set *out,
    char *err, size_t errlen)
{
	if (len >= 6 && memcmp(buf, "\x93NUMPY", 6) == 0)
		return tensor_npys_parse(buf, len, out, err, errlen);
	return tensor_parse(buf, len, out, err, errlen);
}

int
tensor_encode(const struct tensor_set *s, enum tensor_format fmt,
    void **buf, size_t *len, char *err, size_t errlen)
{
	if (fmt == TENSOR_SAFETENSORS)
		return tensor_st_encode(s, buf, len, err, errlen);
	if (fmt == TENSOR_NPYS)
		return tensor_npys_encode(s, buf, len, err, errlen);
	if (s->count != 1) {
		snprintf(err, errlen, ".npy holds exactly one tensor, not %zu "
		    "(use .safetensors or .npys)", s->count);
		return -1;
	}
	return tensor_npy_encode(&s->items[0], buf, len, err, errlen);
}

/* Prefix err with the source name, so each message says where. */
static void
name_error(const char *src, char *err, size_t errlen)
{
	char *copy = strdup(err);

	if (copy) {
		snprintf(err, errlen, "%s: %s", src, copy);
		free(copy);
	}
}

static int
load_with(int (*parse)(const void *, size_t, struct tensor_set *, char *,
    size_t), const char *src, struct tensor_set *out, char *err,
    size_t errlen)
{
	void *buf;
	size_t len;
	int rc;

	memset(out, 0, sizeof *out);
	if (tensor_fetch(src, &buf, &len, err, errlen) < 0)
		return -1;	/* tensor_fetch names the source itself */
	rc = parse(buf, len, out, err, errlen);
	free(buf);
	if (rc < 0)
		name_error(src, err, errlen);
	return rc;
}

int
tensor_load(const char *src, struct tensor_set *out, char *err, size_t errlen)
{
	return load_with(tensor_parse, src, out, err, errlen);
}

int
tensor_load_any(const char *src, struct tensor_set *out, char *err,
    size_t errlen)
{
	return load_with(tensor_parse_any, src, out, err, errlen);
}

int
tensor_load_one(const char *src, struct tensor *out, char *err, size_t errlen)
{
	struct tensor_set s;

	memset(out, 0, sizeof *out);
	if (tensor_load(src, &s, err, errlen) < 0)
		return -1;
	if (s.count != 1) {
		snprintf(err, errlen, "%s: holds %zu tensors, expected one", src, s.count);
		tensor_set_free(&s);
		return -1;
	}
	*out = s.items[0];
	s.count = 0;
	tensor_set_free(&s);
	return 0;
}

enum tensor_format
tensor_format_for(const char *dst, enum tensor_format fallback)
{
	size_t n = strlen(dst);

	if (n >= 4 && strcasecmp(dst + n - 4, ".npy") == 0)
		return TENSOR_NPY;
	if (n >= 5 && strcasecmp(dst + n - 5, ".npys") == 0)
		return TENSOR_NPYS;
	if (n >= 12 && strcasecmp(dst + n - 12, ".safetensors") == 0)
		return TENSOR_SAFETENSORS;
	return fallback;
}

int
tensor_save(const char *dst, const struct tensor_set *s, char *err, size_t errlen)
{
	void *buf;
	size_t len;
	int rc;

	if (tensor_encode(s, tensor_format_for(dst, s->format), &buf, &len,
	    err, errlen) < 0) {
		name_error(dst, err, errlen);
		return -1;
	}
	rc = tensor_write_file(dst, buf, len, err, errlen);
	free(buf);
	return rc;
}

int
tensor_save_one(const char *dst, const struct tensor *t, char *err, size_t errlen)
{
	struct tensor_set s = { .format = TENSOR_NPY, .count = 1 };

	s.items = (struct tensor *)t;	/* read only: tensor_save does not modify */
	return tensor_save(dst, &s, err, errlen);
}
