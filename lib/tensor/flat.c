/* flat: tensor sets as flat f32 vectors plus layout text; slices along
 * one dimension as contiguous blocks. */
#include <stdlib.h>
#include <string.h>

#include "cli/util.h"
#include "tensor/flat.h"

/* Names, keys and values go between tabs and newlines. */
static int
field_ok(const char *s)
{
	return s[strcspn(s, "\t\n")] == '\0';
}

static int
layout_tensor(char **buf, size_t *len, size_t *cap, const struct tensor *t)
{
	char line[512];
	int n = snprintf(line, sizeof(line), "t\t%s\t", t->name ? t->name : "");

	for (int i = 0; i < t->ndim; i++)
		n += snprintf(line + n, sizeof(line) - (size_t)n, "%s%lld",
		    i ? "," : "", (long long)t->shape[i]);
	n += snprintf(line + n, sizeof(line) - (size_t)n, "\n");
	if (*len + (size_t)n + 1 > *cap) {
		size_t c = 2 * (*cap + (size_t)n + 1);
		char *p = realloc(*buf, c);

		if (p == NULL)
			return -1;
		*buf = p;
		*cap = c;
	}
	memcpy(*buf + *len, line, (size_t)n + 1);
	*len += (size_t)n;
	return 0;
}

static int
layout_meta(char **buf, size_t *len, size_t *cap, const struct tensor_meta *m)
{
	size_t n = strlen(m->key) + strlen(m->value) + 5;

	if (*len + n > *cap) {
		size_t c = 2 * (*cap + n);
		char *p = realloc(*buf, c);

		if (p == NULL)
			return -1;
		*buf = p;
		*cap = c;
	}
	*len += (size_t)snprintf(*buf + *len, *cap - *len, "m\t%s\t%s\n", m->key,
	    m->value);
	return 0;
}

static int
make_layout(const struct tensor_set *s, char **out, char *err, size_t errlen)
{
	size_t i, len = 0, cap = 256;
	char *buf = malloc(cap);

	if (buf == NULL)
		return cli_fail(err, errlen, "out of memory");
	buf[0] = '\0';
	for (i = 0; i < s->count; i++)
		if (!field_ok(s->items[i].name ? s->items[i].name : "") ||
		    strlen(s->items[i].name ? s->items[i].name : "") > 300 ||
		    layout_tensor(&buf, &len, &cap, &s->items[i]) < 0)
			goto bad;
	for (i = 0; i < s->nmeta; i++)
		if (!field_ok(s->meta[i].key) || !field_ok(s->meta[i].value) ||
		    layout_meta(&buf, &len, &cap, &s->meta[i]) < 0)
			goto bad;
	*out = buf;
	return 0;
bad:
	free(buf);
	return cli_fail(err, errlen, "a tensor name or metadata entry holds a tab "
	    "or newline, or memory ran out");
}

int
tensor_set_flatten(const struct tensor_set *s, float **flat, size_t *total,
    char **layout, char *err, size_t errlen)
{
	size_t i, j, n = 0, at = 0;
	float *f;

	for (i = 0; i < s->count; i++) {
		if (!dtype_is_float(s->items[i].dtype))
			return cli_fail(err, errlen, "tensor %s: dtype %s is not a float "
			    "type", s->items[i].name ? s->items[i].name : "",
			    dtype_name(s->items[i].dtype));
		n += (size_t)tensor_numel(&s->items[i]);
	}
	f = malloc((n ? n : 1) * sizeof(float));
	if (f == NULL)
		return cli_fail(err, errlen, "out of memory for %zu parameters", n);
	for (i = 0; i < s->count; i++) {
		const struct tensor *t = &s->items[i];
		size_t c = (size_t)tensor_numel(t);

		for (j = 0; j < c; j++)
			f[at + j] = (float)dtype_get(t->dtype, t->data, j);
		at += c;
	}
	if (make_layout(s, layout, err, errlen) < 0) {
		free(f);
		return -1;
	}
	*flat = f;
	*total = n;
	return 0;
}

/* One "t NAME DIMS" line into a fresh tensor holding the next values. */
static int
unflatten_tensor(char *line, const float *flat, size_t total, size_t *at,
    struct tensor_set *out, char *err, size_t errlen)
{
	char *name = line + 2, *dims = strchr(name, '\t'), *p, *end;
	int64_t shape[TENSOR_MAX_DIM];
	struct tensor t = { 0 };
	int nd = 0;
	size_t n;

	if (dims == NULL)
		return cli_fail(err, errlen, "bad layout line '%s'", line);
	*dims++ = '\0';
	for (p = dims; *p && nd < TENSOR_MAX_DIM; p = end + (*end == ',')) {
		shape[nd++] = strtoll(p, &end, 10);
		if (end == p || shape[nd - 1] < 0)
			return cli_fail(err, errlen, "bad shape '%s' of %s", dims, name);
	}
	if (*p || tensor_init(&t, DT_F32, nd, shape, err, errlen) < 0)
		return *p ? cli_fail(err, errlen, "bad shape of %s", name) : -1;
	n = (size_t)tensor_numel(&t);
	if (n > total - *at) {
		tensor_free(&t);
		return cli_fail(err, errlen, "layout names more than %zu values", total);
	}
	memcpy(t.data, flat + *at, n * sizeof(float));
	*at += n;
	if (tensor_set_add(out, name, &t, err, errlen) < 0) {
		tensor_free(&t);
		return -1;
	}
	return 0;
}

int
tensor_set_unflatten(const char *layout, const float *flat, size_t total,
    struct tensor_set *out, char *err, size_t errlen)
{
	char *text = strdup(layout), *line, *save = NULL, *v;
	size_t at = 0;
	int rc = 0;

	memset(out, 0, sizeof(*out));
	out->format = TENSOR_SAFETENSORS;
	if (text == NULL)
		return cli_fail(err, errlen, "out of memory");
	for (line = strtok_r(text, "\n", &save); line && rc == 0;
	    line = strtok_r(NULL, "\n", &save)) {
		if (strncmp(line, "t\t", 2) == 0)
			rc = unflatten_tensor(line, flat, total, &at, out, err, errlen);
		else if (strncmp(line, "m\t", 2) == 0 &&
		    (v = strchr(line + 2, '\t')) != NULL) {
			*v++ = '\0';
			rc = tensor_set_meta_put(out, line + 2, v, err, errlen);
		} else
			rc = cli_fail(err, errlen, "bad layout line '%s'", line);
	}
	if (rc == 0 && at != total)
		rc = cli_fail(err, errlen, "layout names %zu values, the vector has "
		    "%zu", at, total);
	free(text);
	if (rc < 0)
		tensor_set_free(out);
	return rc;
}

/* The next tensor line of a layout, or NULL; *len its length. */
static const char *
next_tensor_line(const char *p, size_t *len)
{
	while (p && *p) {
		size_t n = strcspn(p, "\n");

		if (p[0] == 't') {
			*len = n;
			return p;
		}
		p += n + (p[n] == '\n');
	}
	return NULL;
}

int
tensor_layout_same(const char *a, const char *b)
{
	size_t la = 0, lb = 0;

	for (;;) {
		a = next_tensor_line(a, &la);
		b = next_tensor_line(b, &lb);
		if (a == NULL || b == NULL)
			return a == b;
		if (la != lb || memcmp(a, b, la) != 0)
			return 0;
		a += la;
		b += lb;
	}
}

/* ---- slices along one dimension ---- */

int
tensor_dim_norm(int d, int ndim)
{
	return d < 0 ? d + ndim : d;
}

void
tensor_dim_split(const struct tensor *t, int dim, size_t *outer, size_t *inner)
{
	int i;

	*outer = 1;
	*inner = dtype_size(t->dtype);
	for (i = 0; i < dim; i++)
		*outer *= (size_t)t->shape[i];
	for (i = dim + 1; i < t->ndim; i++)
		*inner *= (size_t)t->shape[i];
}

struct tensor_slice
tensor_slice_of(const struct tensor *t, int dim, int64_t start, int64_t len)
{
	struct tensor_slice s = { dim, 0, 0, (size_t)tensor_numel(t) };
	size_t outer, inner;

	if (dim < 0)
		return s;
	tensor_dim_split(t, dim, &outer, &inner);
	s.start = start;
	s.len = len;
	s.count = outer * (inner / dtype_size(t->dtype)) * (size_t)len;
	return s;
}

void
tensor_slice_copy(const struct tensor *t, const struct tensor_slice *s,
    void *blk, int to_blk)
{
	size_t outer, inner, o, n;
	char *base = t->data, *b = blk, *a;

	if (s->count == 0)
		return;
	if (s->dim < 0) {
		n = s->count * dtype_size(t->dtype);
		memcpy(to_blk ? b : base, to_blk ? base : b, n);
		return;
	}
	tensor_dim_split(t, s->dim, &outer, &inner);
	n = (size_t)s->len * inner;
	for (o = 0; o < outer; o++, b += n) {
		a = base + (o * (size_t)t->shape[s->dim] + (size_t)s->start) * inner;
		memcpy(to_blk ? b : a, to_blk ? a : b, n);
	}
}
