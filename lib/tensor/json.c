/* json: a strict JSON reader pulled by its caller (see json.h). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensor/json.h"

/* Longer numbers are refused: no double needs more digits to be exact,
 * and a bounded copy is what strtod reads (the text need not end in NUL). */
#define JSON_MAX_NUMBER 128

void
tensor_json_init(struct tensor_json *j, const void *text, size_t len,
    const char *path, char *err, size_t errlen)
{
	*j = (struct tensor_json){ .s = text, .n = len, .path = path,
	    .err = err, .errlen = errlen };
}

int
tensor_json_fail(struct tensor_json *j, const char *fmt, ...)
{
	char what[160];
	size_t k, line = 1, at = j->i < j->n ? j->i : j->n;
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(what, sizeof what, fmt, ap);
	va_end(ap);
	if (j->path == NULL) {
		snprintf(j->err, j->errlen, "bad JSON at byte %zu: %s", at,
		    what);
		return -1;
	}
	/* Lines are counted only here, so reading costs nothing for them. */
	for (k = 0; k < at; k++)
		line += j->s[k] == '\n';
	snprintf(j->err, j->errlen, "%s:%zu: %s", j->path, line, what);
	return -1;
}

int
tensor_json_peek(struct tensor_json *j)
{
	while (j->i < j->n && j->s[j->i] != '\0' &&
	    strchr(" \t\r\n", j->s[j->i]))
		j->i++;
	return j->i < j->n ? j->s[j->i] : -1;
}

int
tensor_json_eat(struct tensor_json *j, int c)
{
	if (tensor_json_peek(j) != c)
		return 0;
	j->i++;
	return 1;
}

int
tensor_json_expect(struct tensor_json *j, int c)
{
	if (tensor_json_eat(j, c))
		return 0;
	return tensor_json_fail(j, "expected '%c'", c);
}

/* 1 past word when it comes next (blanks skipped), else 0. */
static int
json_word(struct tensor_json *j, const char *word)
{
	size_t len = strlen(word);

	if (tensor_json_peek(j) < 0 || j->n - j->i < len ||
	    memcmp(j->s + j->i, word, len) != 0)
		return 0;
	j->i += len;
	return 1;
}

int
tensor_json_null(struct tensor_json *j)
{
	return json_word(j, "null");
}

static int
json_hex4(struct tensor_json *j, uint32_t *v)
{
	int k, c;

	*v = 0;
	for (k = 0; k < 4; k++) {
		if (j->i >= j->n)
			return tensor_json_fail(j, "short \\u escape");
		c = j->s[j->i++];
		*v <<= 4;
		if (c >= '0' && c <= '9')
			*v |= (uint32_t)(c - '0');
		else if (c >= 'a' && c <= 'f')
			*v |= (uint32_t)(c - 'a' + 10);
		else if (c >= 'A' && c <= 'F')
			*v |= (uint32_t)(c - 'A' + 10);
		else
			return tensor_json_fail(j, "bad \\u escape");
	}
	return 0;
}

/* Code point c as UTF-8 into out; returns the bytes written. */
static int
json_utf8(uint32_t c, char *out)
{
	if (c < 0x80)
		return out[0] = (char)c, 1;
	if (c < 0x800) {
		out[0] = (char)(0xc0 | c >> 6);
		out[1] = (char)(0x80 | (c & 0x3f));
		return 2;
	}
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

/* \uXXXX (with surrogate pairs) as UTF-8 into out; returns bytes written. */
static int
json_unicode(struct tensor_json *j, char *out)
{
	uint32_t c, lo;

	if (json_hex4(j, &c) < 0)
		return -1;
	if (c >= 0xd800 && c <= 0xdbff) {
		if (j->n - j->i < 6 || j->s[j->i] != '\\' ||
		    j->s[j->i + 1] != 'u')
			return tensor_json_fail(j, "lone surrogate");
		j->i += 2;
		if (json_hex4(j, &lo) < 0)
			return -1;
		if (lo < 0xdc00 || lo > 0xdfff)
			return tensor_json_fail(j, "bad surrogate pair");
		c = 0x10000 + ((c - 0xd800) << 10) + (lo - 0xdc00);
	} else if (c >= 0xdc00 && c <= 0xdfff)
		return tensor_json_fail(j, "lone surrogate");
	if (c == 0)
		return tensor_json_fail(j, "NUL in string");
	return json_utf8(c, out);
}

static int
json_escape(struct tensor_json *j, char *out)
{
	static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
	const char *e;

	if (j->i >= j->n)
		return tensor_json_fail(j, "unterminated string");
	if (j->s[j->i] == 'u') {
		j->i++;
		return json_unicode(j, out);
	}
	if (j->s[j->i] == '\0' || (e = strchr(from, j->s[j->i])) == NULL)
		return tensor_json_fail(j, "bad escape");
	j->i++;
	out[0] = to[e - from];
	return 1;
}

/* A decoded string is never longer than its source, so one allocation
 * of the source's length suffices. */
int
tensor_json_string(struct tensor_json *j, char **out)
{
	size_t start, len = 0;
	char *s;
	int k;

	if (tensor_json_peek(j) != '"')
		return tensor_json_fail(j, "expected a string");
	start = ++j->i;
	while (j->i < j->n && j->s[j->i] != '"')
		j->i += j->s[j->i] == '\\' ? 2 : 1;
	if (j->i >= j->n)
		return tensor_json_fail(j, "unterminated string");
	if ((s = malloc(j->i - start + 1)) == NULL)
		return tensor_json_fail(j, "out of memory");
	for (j->i = start; j->s[j->i] != '"';) {
		if (j->s[j->i] < 0x20) {
			free(s);
			return tensor_json_fail(j,
			    "control character in string");
		}
		if (j->s[j->i] != '\\') {
			s[len++] = (char)j->s[j->i++];
			continue;
		}
		j->i++;
		if ((k = json_escape(j, s + len)) < 0) {
			free(s);
			return -1;
		}
		len += (size_t)k;
	}
	j->i++;
	s[len] = '\0';
	*out = s;
	return 0;
}

static size_t
json_digits(struct tensor_json *j)
{
	size_t start = j->i;

	while (j->i < j->n && j->s[j->i] >= '0' && j->s[j->i] <= '9')
		j->i++;
	return j->i - start;
}

/* Past -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?, the only numbers
 * JSON has. */
static int
json_scan_number(struct tensor_json *j)
{
	size_t start;

	j->i += j->i < j->n && j->s[j->i] == '-';
	start = j->i;
	if (!json_digits(j) || (j->s[start] == '0' && j->i - start > 1))
		return tensor_json_fail(j, "bad number");
	if (j->i < j->n && j->s[j->i] == '.' && (j->i++, !json_digits(j)))
		return tensor_json_fail(j, "bad number");
	if (j->i < j->n && (j->s[j->i] == 'e' || j->s[j->i] == 'E')) {
		j->i++;
		if (j->i < j->n && (j->s[j->i] == '+' || j->s[j->i] == '-'))
			j->i++;
		if (!json_digits(j))
			return tensor_json_fail(j, "bad number");
	}
	return 0;
}

int
tensor_json_uint(struct tensor_json *j, uint64_t *v)
{
	size_t start;
	unsigned d;
	int c = tensor_json_peek(j);

	if (c == '-')
		return tensor_json_fail(j, "negative number");
	if (c < '0' || c > '9')
		return tensor_json_fail(j, "expected an integer");
	start = j->i;
	for (*v = 0; j->i < j->n && j->s[j->i] >= '0' && j->s[j->i] <= '9';
	    j->i++) {
		d = (unsigned)(j->s[j->i] - '0');
		if (*v > UINT64_MAX / 10 ||
		    (*v == UINT64_MAX / 10 && d > UINT64_MAX % 10))
			return tensor_json_fail(j, "integer too large");
		*v = *v * 10 + d;
	}
	if (j->s[start] == '0' && j->i - start > 1)
		return tensor_json_fail(j, "leading zero");
	if (j->i < j->n && j->s[j->i] != '\0' && strchr(".eE", j->s[j->i]))
		return tensor_json_fail(j, "expected an integer");
	return 0;
}

int
tensor_json_number(struct tensor_json *j, double *v)
{
	char copy[JSON_MAX_NUMBER + 1];
	size_t start;
	int c = tensor_json_peek(j);

	if (c != '-' && (c < '0' || c > '9'))
		return tensor_json_fail(j, "expected a number");
	start = j->i;
	if (json_scan_number(j) < 0)
		return -1;
	if (j->i - start > JSON_MAX_NUMBER) {
		j->i = start;
		return tensor_json_fail(j, "number longer than %d characters",
		    JSON_MAX_NUMBER);
	}
	memcpy(copy, j->s + start, j->i - start);
	copy[j->i - start] = '\0';
	*v = strtod(copy, NULL);
	if (isinf(*v)) {
		j->i = start;
		return tensor_json_fail(j, "number out of range");
	}
	return 0;
}

static int
json_skip_items(struct tensor_json *j, int close, int keyed)
{
	char *key;

	if (tensor_json_eat(j, close))
		return 0;
	do {
		if (keyed) {
			if (tensor_json_string(j, &key) < 0)
				return -1;
			free(key);
			if (tensor_json_expect(j, ':') < 0)
				return -1;
		}
		if (tensor_json_skip(j) < 0)
			return -1;
	} while (tensor_json_eat(j, ','));
	return tensor_json_expect(j, close);
}

int
tensor_json_skip(struct tensor_json *j)
{
	int c = tensor_json_peek(j), rc;
	char *s;

	if (c == '{' || c == '[') {
		if (++j->depth > TENSOR_JSON_MAX_DEPTH)
			return tensor_json_fail(j, "nested too deeply");
		j->i++;
		rc = json_skip_items(j, c == '{' ? '}' : ']', c == '{');
		j->depth--;
		return rc;
	}
	if (c == '"') {
		if ((rc = tensor_json_string(j, &s)) == 0)
			free(s);
		return rc;
	}
	if (json_word(j, "true") || json_word(j, "false") ||
	    json_word(j, "null"))
		return 0;
	if (c == '-' || (c >= '0' && c <= '9'))
		return json_scan_number(j);
	if (c < 0)
		return tensor_json_fail(j, "expected a value, found the end");
	return tensor_json_fail(j, "expected a value");
}

int
tensor_json_end(struct tensor_json *j)
{
	if (tensor_json_peek(j) < 0)
		return 0;
	return tensor_json_fail(j, "text after the JSON value");
}

int
tensor_json_object(struct tensor_json *j, tensor_json_member_fn *fn, void *arg)
{
	char *key;
	int rc;

	if (tensor_json_expect(j, '{') < 0)
		return -1;
	if (tensor_json_eat(j, '}'))
		return 0;
	do {
		if (tensor_json_string(j, &key) < 0)
			return -1;
		rc = tensor_json_expect(j, ':');
		if (rc == 0)
			rc = fn(j, key, arg);
		free(key);
		if (rc < 0)
			return -1;
	} while (tensor_json_eat(j, ','));
	return tensor_json_expect(j, '}');
}

int
tensor_json_array(struct tensor_json *j, tensor_json_item_fn *fn, void *arg)
{
	if (tensor_json_expect(j, '[') < 0)
		return -1;
	if (tensor_json_eat(j, ']'))
		return 0;
	do
		if (fn(j, arg) < 0)
			return -1;
	while (tensor_json_eat(j, ','));
	return tensor_json_expect(j, ']');
}

int
tensor_json_strbuf(struct tensor_json *j, char *buf, size_t len)
{
	char *s;

	buf[0] = '\0';
	if (tensor_json_null(j))
		return 0;
	if (tensor_json_string(j, &s) < 0)
		return -1;
	snprintf(buf, len, "%s", s);
	free(s);
	return 0;
}
