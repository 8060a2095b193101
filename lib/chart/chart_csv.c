/* chart_csv: collx-plot's readers. CSV as cli_timing writes it (commas,
 * "quoted" fields with doubled quotes), every row as wide as the header;
 * and the complete events of a Chrome trace, with a small JSON scanner
 * that knows line numbers for its messages. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "chart/chart.h"

static char *
slurp(const char *path, size_t *len, char *err, size_t errlen)
{
	FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
	size_t cap = 1 << 16, n = 0, k;
	char *buf;

	if (f == NULL) {
		cli_fail(err, errlen, "%s: %s", path, strerror(errno));
		return NULL;
	}
	buf = cli_reallocarray(NULL, cap + 1, 1);
	while ((k = fread(buf + n, 1, cap - n, f)) > 0) {
		n += k;
		if (n == cap) {
			buf = cli_reallocarray(buf, 2 * cap + 1, 1);
			cap *= 2;
		}
	}
	if (ferror(f)) {
		cli_fail(err, errlen, "%s: %s", path, strerror(errno));
		free(buf);
		buf = NULL;
	} else
		buf[n] = '\0';
	if (f != stdin)
		fclose(f);
	*len = n;
	return buf;
}

/* Split one record at *pp (advanced past its newline) into fields; the
 * count, or -1 for an unterminated quote. */
static int
split_record(char **pp, char ***out, int *line)
{
	char *p = *pp, *w, **f = NULL;
	int n = 0, cap = 0;

	for (;;) {
		if (n == cap) {
			cap = cap ? 2 * cap : 16;
			f = cli_reallocarray(f, (size_t)cap, sizeof *f);
		}
		f[n++] = w = p;
		if (*p == '"') {
			for (p++;;) {
				if (*p == '\0') {
					free(f);
					return -1;
				}
				if (*p == '"' && p[1] == '"')
					p++;
				else if (*p == '"') {
					p++;
					break;
				} else if (*p == '\n')
					(*line)++;
				*w++ = *p++;
			}
		}
		while (*p && *p != ',' && *p != '\n' && *p != '\r')
			*w++ = *p++;
		if (*p == ',') {
			*w = '\0';
			p++;
			continue;
		}
		if (*p == '\r')
			*p++ = '\0';
		if (*p == '\n')
			p++;
		*w = '\0';
		break;
	}
	*pp = p;
	*out = f;
	return n;
}

int
chart_csv_read(const char *path, struct chart_table *t, char *err,
    size_t errlen)
{
	size_t len;
	char *buf = slurp(path, &len, err, errlen), *p, **f;
	int line = 1, n, cap = 0;

	memset(t, 0, sizeof *t);
	if (buf == NULL)
		return -1;
	t->path = cli_strdup(path);
	p = buf;
	if (*p == '\0' || (n = split_record(&p, &t->cols, &line)) <= 1 ||
	    strlen(t->cols[0]) == 0) {
		cli_fail(err, errlen, "%s:1: %s", path, *buf ? "no CSV header" :
		    "empty file");
		goto fail;
	}
	t->ncol = n;
	while (*p != '\0') {
		line++;
		if (*p == '\n' || (*p == '\r' && p[1] == '\n')) {
			p += *p == '\r' ? 2 : 1;
			continue;	/* blank lines are allowed */
		}
		if ((n = split_record(&p, &f, &line)) < 0) {
			cli_fail(err, errlen, "%s:%d: unterminated quote", path, line);
			goto fail;
		}
		if (n != t->ncol) {
			cli_fail(err, errlen, "%s:%d: %d fields, the header has %d",
			    path, line, n, t->ncol);
			free(f);
			goto fail;
		}
		if (t->nrow == cap) {
			cap = cap ? 2 * cap : 64;
			t->cells = cli_reallocarray(t->cells, (size_t)cap,
			    sizeof *t->cells);
			t->line = cli_reallocarray(t->line, (size_t)cap,
			    sizeof *t->line);
		}
		t->cells[t->nrow] = f;
		t->line[t->nrow++] = line;
	}
	if (t->nrow == 0) {
		cli_fail(err, errlen, "%s:%d: no data rows", path, line);
		goto fail;
	}
	/* The fields point into buf: keep it as the header's first cell. */
	return 0;
fail:
	if (t->cols == NULL)
		free(buf);
	chart_table_free(t);
	return -1;
}

void
chart_table_free(struct chart_table *t)
{
	for (int r = 0; r < t->nrow; r++)
		free(t->cells[r]);
	if (t->cols != NULL)
		free(t->cols[0]);	/* the file's buffer */
	free(t->cols);
	free(t->cells);
	free(t->line);
	free(t->path);
	memset(t, 0, sizeof *t);
}

int
chart_table_col(const struct chart_table *t, const char *name)
{
	for (int c = 0; c < t->ncol; c++)
		if (strcmp(t->cols[c], name) == 0)
			return c;
	return -1;
}

int
chart_table_num(const struct chart_table *t, int row, int col, double *v,
    char *err, size_t errlen)
{
	const char *s = t->cells[row][col];
	char *end;

	errno = 0;
	*v = strtod(s, &end);
	if (*s == '\0' || *end != '\0' || errno == ERANGE || !isfinite(*v))
		return cli_fail(err, errlen, "%s:%d: column %s: '%s' is not a number",
		    t->path, t->line[row], t->cols[col], s);
	return 0;
}

/* ---- Chrome trace JSON ---- */

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
	for (; *j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'; j->p++)
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

static int js_value(struct js *j, char *s, size_t slen, double *num, int depth);

static int
js_object(struct js *j, int depth)
{
	struct chart_event e = { 0 };
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
		/* The category says the kind (collx-pipe names spans F3, B3). */
		if (cat[0] != '\0')
			snprintf(e.name, sizeof e.name, "%s", cat);
		if (j->n == j->cap) {
			j->cap = j->cap ? 2 * j->cap : 256;
			j->ev = cli_reallocarray(j->ev, (size_t)j->cap, sizeof *j->ev);
		}
		j->ev[j->n++] = e;
	}
	return 0;
}

static int
js_value(struct js *j, char *s, size_t slen, double *num, int depth)
{
	char *end;

	if (depth > 64)
		return js_fail(j, "nested too deeply");
	js_space(j);
	switch (*j->p) {
	case '{':
		return js_object(j, depth);
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
		if (strncmp(j->p, "true", 4) == 0 || strncmp(j->p, "null", 4) == 0) {
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
	char *buf = slurp(path, &len, err, errlen);
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
