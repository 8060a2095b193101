/* safetensors: reading Hugging Face's format, with every validation rule
 * of its reference reader; the header is read by json.c, the writer is
 * safetensors_write.c. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/util.h"
#include "tensor/format.h"
#include "tensor/json.h"

#define ST_MAX_HEADER 100000000u	/* the reference reader's cap */

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

static int
st_dtype(const char *s, enum dtype *dt)
{
	int i = cli_name_index(tensor_st_dtype_names, DT_COUNT, s);

	return i < 0 ? -1 : (*dt = (enum dtype)i, 0);
}

/* "[a, b, ...]" of non-negative integers, at most max of them. */
static int
st_uint_list(struct tensor_json *p, uint64_t *v, int max, int *count)
{
	*count = 0;
	if (tensor_json_expect(p, '[') < 0)
		return -1;
	if (tensor_json_eat(p, ']'))
		return 0;
	do {
		if (*count == max)
			return tensor_json_fail(p, "more than %d entries", max);
		if (tensor_json_uint(p, &v[(*count)++]) < 0)
			return -1;
	} while (tensor_json_eat(p, ','));
	return tensor_json_expect(p, ']');
}

static int
st_field(struct tensor_json *p, const char *key, struct st_entry *e, int *seen)
{
	uint64_t v[TENSOR_MAX_DIM];
	char *s;
	int n, i, bit = !strcmp(key, "dtype") ? 1 : !strcmp(key, "shape") ? 2 :
	    !strcmp(key, "data_offsets") ? 4 : 0;

	if (*seen & bit)
		return tensor_json_fail(p, "tensor '%s': repeated field '%s'",
		    e->name, key);
	*seen |= bit;
	if (bit == 1) {
		if (tensor_json_string(p, &s) < 0)
			return -1;
		n = st_dtype(s, &e->dtype);
		if (n < 0)
			snprintf(p->err, p->errlen, "tensor '%s': unknown dtype '%s'",
			    e->name, s);
		free(s);
		return n;
	}
	if (bit == 2) {
		if (st_uint_list(p, v, TENSOR_MAX_DIM, &e->ndim) < 0)
			return -1;
		for (i = 0; i < e->ndim; i++) {
			if (v[i] > INT64_MAX)
				return tensor_json_fail(p,
				    "tensor '%s': dimension too large", e->name);
			e->shape[i] = (int64_t)v[i];
		}
		return 0;
	}
	if (bit == 4) {
		if (st_uint_list(p, v, 2, &n) < 0)
			return -1;
		if (n != 2)
			return tensor_json_fail(p,
			    "tensor '%s': data_offsets needs 2 numbers", e->name);
		e->begin = v[0];
		e->end = v[1];
		return 0;
	}
	return tensor_json_skip(p);	/* a field the format does not define */
}

static int
st_info(struct tensor_json *p, struct st_entry *e)
{
	char *key;
	int seen = 0, rc;

	if (tensor_json_expect(p, '{') < 0)
		return -1;
	if (!tensor_json_eat(p, '}')) {
		do {
			if (tensor_json_string(p, &key) < 0)
				return -1;
			rc = tensor_json_expect(p, ':');
			if (rc == 0)
				rc = st_field(p, key, e, &seen);
			free(key);
			if (rc < 0)
				return -1;
		} while (tensor_json_eat(p, ','));
		if (tensor_json_expect(p, '}') < 0)
			return -1;
	}
	if (seen != 7)
		return tensor_json_fail(p,
		    "tensor '%s' lacks dtype, shape or data_offsets", e->name);
	return 0;
}

static int
st_metadata(struct tensor_json *p, struct tensor_set *set)
{
	char *key, *value;
	int rc;

	if (tensor_json_null(p))
		return 0;
	if (tensor_json_expect(p, '{') < 0)
		return -1;
	if (tensor_json_eat(p, '}'))
		return 0;
	do {
		if (tensor_json_string(p, &key) < 0)
			return -1;
		value = NULL;
		rc = tensor_json_expect(p, ':');
		if (rc == 0 && tensor_json_peek(p) != '"')
			rc = tensor_json_fail(p,
			    "__metadata__ '%s' is not a string", key);
		if (rc == 0)
			rc = tensor_json_string(p, &value);
		if (rc == 0 && tensor_set_meta(set, key))
			rc = tensor_json_fail(p,
			    "repeated __metadata__ key '%s'", key);
		if (rc == 0)
			rc = tensor_set_meta_put(set, key, value, p->err, p->errlen);
		free(key);
		free(value);
		if (rc < 0)
			return -1;
	} while (tensor_json_eat(p, ','));
	return tensor_json_expect(p, '}');
}

struct st_header {
	struct st_entry *e;
	size_t n, cap;
};

static int
st_member(struct tensor_json *p, struct st_header *h, struct tensor_set *set,
    int *have_meta)
{
	struct st_entry *grown;
	char *name;

	if (tensor_json_string(p, &name) < 0)
		return -1;
	if (tensor_json_expect(p, ':') < 0) {
		free(name);
		return -1;
	}
	if (strcmp(name, "__metadata__") == 0) {
		free(name);
		if ((*have_meta)++)
			return tensor_json_fail(p, "repeated __metadata__");
		return st_metadata(p, set);
	}
	if (h->n == h->cap) {
		h->cap = h->cap ? h->cap * 2 : 16;
		if (!(grown = realloc(h->e, h->cap * sizeof *grown))) {
			free(name);
			return tensor_json_fail(p, "out of memory");
		}
		h->e = grown;
	}
	memset(&h->e[h->n], 0, sizeof h->e[0]);
	h->e[h->n++].name = name;
	return st_info(p, &h->e[h->n - 1]);
}

static int
st_json(struct tensor_json *p, struct st_header *h, struct tensor_set *set)
{
	int have_meta = 0;

	if (tensor_json_expect(p, '{') < 0)
		return -1;
	if (!tensor_json_eat(p, '}')) {
		do {
			if (st_member(p, h, set, &have_meta) < 0)
				return -1;
		} while (tensor_json_eat(p, ','));
		if (tensor_json_expect(p, '}') < 0)
			return -1;
	}
	return tensor_json_end(p);
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

/* The header of buf (len bytes: the 8-byte length, the JSON, whatever
 * follows) into h and out's metadata; *hlen its JSON's length. */
static int
st_header(const unsigned char *buf, size_t len, struct st_header *h,
    struct tensor_set *out, uint64_t *hlen, char *err, size_t errlen)
{
	struct tensor_json p;

	memset(out, 0, sizeof *out);
	out->format = TENSOR_SAFETENSORS;
	if (len < 8)
		return cli_fail(err, errlen, "truncated safetensors header");
	if ((*hlen = cli_le_get(buf, 8)) > ST_MAX_HEADER)
		return cli_fail(err, errlen, "header length %llu exceeds the "
		    "%u-byte limit", (unsigned long long)*hlen, ST_MAX_HEADER);
	if (*hlen > len - 8)
		return cli_fail(err, errlen, "header length %llu runs past the "
		    "end of the file (%zu bytes)", (unsigned long long)*hlen,
		    len);
	if (!tensor_utf8_valid(buf + 8, (size_t)*hlen))
		return cli_fail(err, errlen, "header is not valid UTF-8");
	tensor_json_init(&p, buf + 8, (size_t)*hlen, NULL, err, errlen);
	return st_json(&p, h, out);
}

static void
st_header_free(struct st_header *h)
{
	size_t i;

	for (i = 0; i < h->n; i++)
		free(h->e[i].name);
	free(h->e);
}

int
tensor_st_parse(const unsigned char *buf, size_t len, struct tensor_set *out,
    char *err, size_t errlen)
{
	struct st_header h = { 0 };
	uint64_t hlen = 0;
	int rc;

	rc = st_header(buf, len, &h, out, &hlen, err, errlen);
	if (rc == 0)
		rc = st_check(&h, len - 8 - hlen, err, errlen);
	if (rc == 0)
		rc = st_build(&h, buf + 8 + hlen, out, err, errlen);
	st_header_free(&h);
	if (rc < 0)
		tensor_set_free(out);
	return rc;
}

int
tensor_meta_load(const char *path, struct tensor_set *out, char *err,
    size_t errlen)
{
	struct st_header h = { 0 };
	unsigned char *buf = NULL, len8[8];
	char e[COLLX_ERRLEN];
	uint64_t hlen;
	FILE *f;
	int rc = -1;

	memset(out, 0, sizeof *out);
	if ((f = fopen(path, "rb")) == NULL)
		return cli_fail(err, errlen, "%s: %s", path, strerror(errno));
	if (fread(len8, 1, 8, f) != 8)
		cli_fail(e, sizeof e, "truncated safetensors header");
	else if ((hlen = cli_le_get(len8, 8)) > ST_MAX_HEADER)
		cli_fail(e, sizeof e, "header length %llu exceeds the %u-byte "
		    "limit", (unsigned long long)hlen, ST_MAX_HEADER);
	else if ((buf = malloc(8 + (size_t)hlen)) == NULL)
		cli_fail(e, sizeof e, "out of memory");
	else if (fread(buf + 8, 1, (size_t)hlen, f) != (size_t)hlen)
		cli_fail(e, sizeof e, "header length %llu runs past the end of "
		    "the file", (unsigned long long)hlen);
	else {
		memcpy(buf, len8, 8);
		rc = st_header(buf, 8 + (size_t)hlen, &h, out, &hlen, e,
		    sizeof e);
	}
	fclose(f);
	free(buf);
	st_header_free(&h);
	if (rc < 0) {
		tensor_set_free(out);
		return cli_fail(err, errlen, "%s: %s", path, e);
	}
	return 0;
}
