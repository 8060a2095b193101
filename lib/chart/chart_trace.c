/* chart_trace: the complete ("X") events of a Chrome trace, as
 * collx-pipe --trace writes it, read by a small JSON scanner that knows
 * line numbers for its messages. */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chart/chart_int.h"
#include "cli/cli.h"

struct js {
	const char *p, *path;
	int line;
	char *err;
	size_t errlen;
	struct chart_event *ev;
	int n, cap;
};

static int
js_fail(struct js *j, const char *what)
{
	return cli_fail(j->err, j->errlen, "%s:%d: %s", j->path, j->line, what);
}

static void
js_space(struct js *j)
{
	for (; *j->p != '\0' && strchr(" \t\n\r", *j->p) != NULL; j->p++)
		if (*j->p == '\n')
			j->line++;
}

/* A string into buf (truncated to len), escapes kept simple. */
static int
js_string(struct js *j, char *buf, size_t len)
{
	size_t n = 0;

	j->p++;
	for (; *j->p != '"'; j->p++) {
		if (*j->p == '\0' || *j->p == '\n')
			return js_fail(j, "unterminated string");
		if (*j->p == '\\' && j->p[1] != '\0')
			j->p++;
		if (n + 1 < len)
			buf[n++] = *j->p;
	}
	j->p++;
	if (len > 0)
		buf[n] = '\0';
	return 0;
}

static int js_value(struct js *j, char *s, size_t slen, double *num,
    int depth);

/* An object; a complete event among them is kept. Its member "step", when
 * a number, goes to *step (the event's "args" say its step that way). */
static int
js_object(struct js *j, int depth, double *step)
{
	struct chart_event e = { .step = -1 };
	char key[32], sval[32], ph[8] = "", cat[32] = "";
	double num;
	int have = 0;

	j->p++;
	js_space(j);
	if (*j->p == '}') {
		j->p++;
		return 0;
	}
	for (;;) {
		js_space(j);
		if (*j->p != '"')
			return js_fail(j, "expected a key");
		if (js_string(j, key, sizeof key) < 0)
			return -1;
		js_space(j);
		if (*j->p++ != ':')
			return js_fail(j, "expected ':'");
		sval[0] = '\0';
		num = NAN;
		if (js_value(j, sval, sizeof sval, &num, depth + 1) < 0)
			return -1;
		if (strcmp(key, "ph") == 0)
			snprintf(ph, sizeof ph, "%s", sval);
		else if (strcmp(key, "name") == 0)
			snprintf(e.name, sizeof e.name, "%s", sval);
		else if (strcmp(key, "cat") == 0)
			snprintf(cat, sizeof cat, "%s", sval);
		else if (strcmp(key, "pid") == 0 && !isnan(num))
			e.pid = num;
		else if (strcmp(key, "tid") == 0 && !isnan(num))
			e.tid = num;
		else if (strcmp(key, "ts") == 0 && !isnan(num))
			e.ts = num, have |= 1;
		else if (strcmp(key, "dur") == 0 && !isnan(num))
			e.dur = num, have |= 2;
		else if (strcmp(key, "args") == 0 && num >= 0 && num < INT_MAX)
			e.step = (int)num;
		else if (strcmp(key, "step") == 0 && step != NULL)
			*step = num;
		js_space(j);
		if (*j->p == ',') {
			j->p++;
			continue;
		}
		if (*j->p++ != '}')
			return js_fail(j, "expected ',' or '}'");
		break;
	}
	if (strcmp(ph, "X") == 0) {
		if (have != 3)
			return js_fail(j, "an \"X\" event without ts and dur");
		/* The category says the kind (collx-pipe names spans F3). */
		if (cat[0] != '\0')
			snprintf(e.name, sizeof e.name, "%s", cat);
		if (j->n == j->cap) {
			j->cap = j->cap ? 2 * j->cap : 256;
			j->ev = cli_reallocarray(j->ev, (size_t)j->cap,
			    sizeof *j->ev);
		}
		j->ev[j->n++] = e;
	}
	return 0;
}

/* A value: a string into s, a number into *num, an object's "step"
 * member into *num too (s and num may be NULL). */
static int
js_value(struct js *j, char *s, size_t slen, double *num, int depth)
{
	char *end;

	if (depth > 64)
		return js_fail(j, "nested too deeply");
	js_space(j);
	switch (*j->p) {
	case '{':
		return js_object(j, depth, num);
	case '[':
		j->p++;
		js_space(j);
		if (*j->p == ']') {
			j->p++;
			return 0;
		}
		for (;;) {
			if (js_value(j, NULL, 0, NULL, depth + 1) < 0)
				return -1;
			js_space(j);
			if (*j->p == ',') {
				j->p++;
				continue;
			}
			if (*j->p++ != ']')
				return js_fail(j, "expected ',' or ']'");
			return 0;
		}
	case '"':
		return js_string(j, s ? s : (char[1]){ 0 }, s ? slen : 1);
	default:
		if (strncmp(j->p, "true", 4) == 0 ||
		    strncmp(j->p, "null", 4) == 0) {
			j->p += 4;
			return 0;
		}
		if (strncmp(j->p, "false", 5) == 0) {
			j->p += 5;
			return 0;
		}
		{
			double v = strtod(j->p, &end);

			if (end == j->p)
				return js_fail(j, "not JSON");
			if (num)
				*num = v;
			j->p = end;
		}
		return 0;
	}
}

int
chart_trace_read(const char *path, struct chart_event **ev, int *n, char *err,
    size_t errlen)
{
	size_t len;
	char *buf = chart_slurp(path, &len, err, errlen);
	struct js j = { .path = path, .line = 1, .err = err, .errlen = errlen };
	int rc = -1;

	*ev = NULL;
	*n = 0;
	if (buf == NULL)
		return -1;
	j.p = buf;
	js_space(&j);
	if (*j.p == '\0') {
		js_fail(&j, "empty file");
		goto out;
	}
	if (js_value(&j, NULL, 0, NULL, 0) < 0)
		goto out;
	js_space(&j);
	if (*j.p != '\0') {
		js_fail(&j, "trailing text after the JSON value");
		goto out;
	}
	if (j.n == 0) {
		j.line = 1;	/* the whole file */
		js_fail(&j, "no complete (\"ph\":\"X\") events");
		goto out;
	}
	*ev = j.ev;
	*n = j.n;
	j.ev = NULL;
	rc = 0;
out:
	free(j.ev);
	free(buf);
	return rc;
}
