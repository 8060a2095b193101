/* chart_csv: collx-plot's CSV reader. CSV as cli_timing writes it
 * (commas, "quoted" fields with doubled quotes), every row as wide as the
 * header, each row's file line kept for the messages. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chart/chart_int.h"
#include "cli/cli.h"

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
	char *buf = cli_slurp(path, &len, err, errlen), *p, **f;
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
			cli_fail(err, errlen, "%s:%d: unterminated quote",
			    path, line);
			goto fail;
		}
		if (n != t->ncol) {
			cli_fail(err, errlen, "%s:%d: %d fields, the header "
			    "has %d", path, line, n, t->ncol);
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
		return cli_fail(err, errlen, "%s:%d: column %s: '%s' is not "
		    "a number", t->path, t->line[row], t->cols[col], s);
	return 0;
}
