/* chart_data: the CSV kinds' data. The kind is guessed from a table's
 * columns; the rows are sorted into series (one per op, algorithm and
 * placement, per pair, or per run), written as plain columns into the
 * chart's private directory, or, for p2p, into one matrix. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chart/chart_int.h"
#include "cli/cli.h"

static struct chart_series *
series_get(struct chart_data *c, const char *title)
{
	for (int i = 0; i < c->ns; i++)
		if (strcmp(c->s[i].title, title) == 0)
			return &c->s[i];
	c->s = cli_reallocarray(c->s, (size_t)c->ns + 1, sizeof *c->s);
	memset(&c->s[c->ns], 0, sizeof *c->s);
	snprintf(c->s[c->ns].title, sizeof c->s[c->ns].title, "%s", title);
	return &c->s[c->ns++];
}

static void
series_add(struct chart_series *s, double x, double y)
{
	if (s->n == s->cap) {
		s->cap = s->cap ? 2 * s->cap : 64;
		s->pt = cli_reallocarray(s->pt, (size_t)s->cap, sizeof *s->pt);
	}
	s->pt[s->n].x = x;
	s->pt[s->n++].y = y;
}

static int
cmp_point(const void *a, const void *b)
{
	const struct chart_point *p = a, *q = b;

	return p->x < q->x ? -1 : p->x > q->x;
}

void
chart_data_free(struct chart_data *c)
{
	for (int i = 0; i < c->ns; i++)
		free(c->s[i].pt);
	free(c->s);
	c->s = NULL;
	c->ns = 0;
}

/* Series i as two columns in DIR/s<i>.dat, sorted by x. */
static int
write_series(struct chart_data *c, char *err, size_t errlen)
{
	char path[128];
	FILE *f;

	for (int i = 0; i < c->ns; i++) {
		struct chart_series *s = &c->s[i];

		qsort(s->pt, (size_t)s->n, sizeof *s->pt, cmp_point);
		snprintf(path, sizeof path, "%s/s%d.dat", c->dir, i);
		if ((f = fopen(path, "w")) == NULL)
			return cli_fail(err, errlen, "%s: %s", path,
			    strerror(errno));
		for (int k = 0; k < s->n; k++)
			fprintf(f, "%.10g %.10g\n", s->pt[k].x, s->pt[k].y);
		if (fclose(f) != 0)
			return cli_fail(err, errlen, "%s: %s", path,
			    strerror(errno));
	}
	return 0;
}

int
chart_need_col(const struct chart_table *t, const char *name, const char *kind,
    char *err, size_t errlen)
{
	int c = chart_table_col(t, name);

	if (c < 0)
		cli_fail(err, errlen, "%s:1: no column '%s' for a %s chart",
		    t->path, name, kind);
	return c;
}

enum chart_kind
chart_guess_kind(const struct chart_table *t)
{
	int src = chart_table_col(t, "src"), dst = chart_table_col(t, "dst");
	int pairs = 0;

	if (chart_table_col(t, "measured_s") >= 0 &&
	    chart_table_col(t, "seconds") >= 0)
		return CHART_PREDICTED;
	if (chart_table_col(t, "compute_s") >= 0 &&
	    chart_table_col(t, "bubble_s") >= 0)
		return CHART_BREAKDOWN;
	if (chart_table_col(t, "dp") >= 0 && chart_table_col(t, "tp") >= 0 &&
	    chart_table_col(t, "pp") >= 0 &&
	    chart_table_col(t, "tokens_per_s") >= 0)
		return CHART_MESH;
	if (chart_table_col(t, "expert") >= 0 &&
	    chart_table_col(t, "tokens") >= 0)
		return CHART_EXPERTS;
	if (chart_table_col(t, "efficiency") >= 0 &&
	    chart_table_col(t, "tokens_per_s") >= 0)
		return CHART_SCALING;
	if (src >= 0 && dst >= 0) {
		for (int r = 1; r < t->nrow; r++)
			if (strcmp(t->cells[r][src], t->cells[0][src]) ||
			    strcmp(t->cells[r][dst], t->cells[0][dst]))
				pairs = 1;
		return pairs ? CHART_P2P : CHART_LATENCY;
	}
	if (chart_table_col(t, "busbw_gbps") >= 0)
		return CHART_BUSBW;
	if (chart_table_col(t, "loss") >= 0 && chart_table_col(t, "step") >= 0)
		return CHART_LOSS;
	return CHART_GUESS;
}

/* World size and hosts seen in a table, for the title. */
static int
note_group(struct chart_data *c, const struct chart_table *t, int r,
    char *err, size_t errlen)
{
	int wc = chart_table_col(t, "world_size");
	int hc = chart_table_col(t, "hosts");
	double v;

	if (wc >= 0) {
		if (chart_table_num(t, r, wc, &v, err, errlen) < 0)
			return -1;
		if (v > c->world)
			c->world = (int)v;
	}
	if (hc >= 0) {
		if (chart_table_num(t, r, hc, &v, err, errlen) < 0)
			return -1;
		if (v > c->hosts)
			c->hosts = (int)v;
	}
	return 0;
}

/* busbw and latency against size: one series per op, algorithm and
 * placement (p2p: per pair). */
static int
read_sizes(struct chart_data *c, const struct chart_table *t,
    enum chart_kind kind, char *err, size_t errlen)
{
	const char *k = chart_kind_name(kind);
	int bc = chart_need_col(t, "bytes", k, err, errlen);
	int yc = chart_need_col(t, kind == CHART_BUSBW ? "busbw_gbps" : "seconds", k,
	    err, errlen);
	int oc = chart_table_col(t, "op"), ac = chart_table_col(t, "algo");
	int pc = chart_table_col(t, "place"), sc = chart_table_col(t, "src");
	int dc = chart_table_col(t, "dst"), dtc = chart_table_col(t, "dtype");
	char title[128];
	double x, y;
	int ops = 1;

	if (bc < 0 || yc < 0)
		return -1;
	for (int r = 1; r < t->nrow && oc >= 0; r++)
		if (strcmp(t->cells[r][oc], t->cells[0][oc]) != 0)
			ops = 2;
	for (int r = 0; r < t->nrow; r++) {
		char **row = t->cells[r];

		if (chart_table_num(t, r, bc, &x, err, errlen) < 0 ||
		    chart_table_num(t, r, yc, &y, err, errlen) < 0 ||
		    note_group(c, t, r, err, errlen) < 0)
			return -1;
		if (sc >= 0 && dc >= 0)
			snprintf(title, sizeof title, "%s %s to %s",
			    oc >= 0 ? row[oc] : "", row[sc], row[dc]);
		else
			snprintf(title, sizeof title, "%s%s%s%s%s",
			    ops > 1 ? row[oc] : "", ops > 1 ? " " : "",
			    ac >= 0 ? row[ac] : "", pc >= 0 ? " " : "",
			    pc >= 0 ? (strcmp(row[pc], "in") ? "out-of-place" :
			    "in-place") : "");
		if (c->what[0] == '\0' && dtc >= 0)
			snprintf(c->what, sizeof c->what, "%s%s%s",
			    ops == 1 && oc >= 0 ? row[oc] : "",
			    ops == 1 && oc >= 0 ? ", " : "", row[dtc]);
		series_add(series_get(c, title), x,
		    kind == CHART_BUSBW ? y : y * 1e6);
	}
	return 0;
}

/* Tokens/s and efficiency against world size, per algorithm. */
static int
read_scaling(struct chart_data *c, const struct chart_table *t, char *err,
    size_t errlen)
{
	int wc = chart_need_col(t, "world_size", "scaling", err, errlen);
	int tc = chart_need_col(t, "tokens_per_s", "scaling", err, errlen);
	int ec = chart_need_col(t, "efficiency", "scaling", err, errlen);
	int ac = chart_table_col(t, "algo");
	char title[128];
	double w, tok, eff;

	if (wc < 0 || tc < 0 || ec < 0)
		return -1;
	for (int r = 0; r < t->nrow; r++) {
		const char *name = ac >= 0 ? t->cells[r][ac] : "dp";

		if (chart_table_num(t, r, wc, &w, err, errlen) < 0 ||
		    chart_table_num(t, r, tc, &tok, err, errlen) < 0 ||
		    chart_table_num(t, r, ec, &eff, err, errlen) < 0 ||
		    note_group(c, t, r, err, errlen) < 0)
			return -1;
		snprintf(title, sizeof title, "%s tokens/s", name);
		series_add(series_get(c, title), w, tok);
		snprintf(title, sizeof title, "%s efficiency", name);
		series_add(series_get(c, title), w, eff);
	}
	return 0;
}

/* Loss against step, or (bytes) against the MB sent up to the end of
 * each step: a series per file, named after it. */
static int
read_loss(struct chart_data *c, const struct chart_table *t, int bytes,
    char *err, size_t errlen)
{
	const char *what = bytes ? "loss-bytes" : "loss";
	int sc = chart_need_col(t, bytes ? "bytes_sent" : "step", what, err, errlen);
	int lc = chart_need_col(t, "loss", what, err, errlen);
	const char *base = strrchr(t->path, '/');
	struct chart_series *s;
	double x, y, sent = 0;

	if (sc < 0 || lc < 0)
		return -1;
	s = series_get(c, base ? base + 1 : t->path);
	for (int r = 0; r < t->nrow; r++) {
		if (chart_table_num(t, r, sc, &x, err, errlen) < 0 ||
		    chart_table_num(t, r, lc, &y, err, errlen) < 0)
			return -1;
		sent += bytes ? x / 1e6 : 0;
		series_add(s, bytes ? sent : x, y);
	}
	return 0;
}

/* collx-train --expert-counts: the assignments routed to each expert
 * against the step, a series per MoE layer and expert. */
static int
read_experts(struct chart_data *c, const struct chart_table *t, char *err,
    size_t errlen)
{
	static const char *const name[4] = { "step", "layer", "expert",
	    "tokens" };
	int col[4];
	double v[4];
	char title[64];

	for (int k = 0; k < 4; k++)
		if ((col[k] = chart_need_col(t, name[k], "experts", err,
		    errlen)) < 0)
			return -1;
	for (int r = 0; r < t->nrow; r++) {
		for (int k = 0; k < 4; k++)
			if (chart_table_num(t, r, col[k], &v[k], err,
			    errlen) < 0)
				return -1;
		snprintf(title, sizeof title, "layer %.0f expert %.0f", v[1],
		    v[2]);
		series_add(series_get(c, title), v[0], v[3]);
	}
	return 0;
}

/* Tokens/s of each mesh, a bar each in the files' order (collx-bench
 * mesh's: fastest first): DIR/mesh.dat, "index tokens/s DxTxP". */
static int
write_mesh(struct chart_data *c, const struct chart_table *t, int ntab,
    char *err, size_t errlen)
{
	char path[128];
	double v[4], cv;
	int col[4], bars = 0, cp;
	FILE *f;

	snprintf(path, sizeof path, "%s/mesh.dat", c->dir);
	if ((f = fopen(path, "w")) == NULL)
		return cli_fail(err, errlen, "%s: %s", path, strerror(errno));
	for (int i = 0; i < ntab; i++) {
		static const char *const names[4] = { "dp", "tp", "pp",
		    "tokens_per_s" };

		for (int k = 0; k < 4; k++)
			if ((col[k] = chart_need_col(&t[i], names[k], "mesh", err,
			    errlen)) < 0)
				goto fail;
		cp = chart_table_col(&t[i], "cp");
		for (int r = 0; r < t[i].nrow; r++) {
			for (int k = 0; k < 4; k++)
				if (chart_table_num(&t[i], r, col[k], &v[k], err,
				    errlen) < 0)
					goto fail;
			if (note_group(c, &t[i], r, err, errlen) < 0)
				goto fail;
			fprintf(f, "%d %.10g %.0fx%.0fx%.0f", bars++, v[3],
			    v[0], v[1], v[2]);
			/* collx-bench mesh's gpt rows with --cp C */
			if (cp >= 0 && chart_table_num(&t[i], r, cp, &cv, err,
			    errlen) == 0 && cv > 1)
				fprintf(f, "/cp%.0f", cv);
			fputc('\n', f);
		}
	}
	return fclose(f) == 0 ? 0 : cli_fail(err, errlen, "%s: %s", path,
	    strerror(errno));
fail:
	fclose(f);
	return -1;
}

/* The p2p matrix at the largest size: DIR/m.dat, NaN on the diagonal. */
static int
write_matrix(struct chart_data *c, const struct chart_table *t, char *err,
    size_t errlen)
{
	int sc = chart_need_col(t, "src", "p2p", err, errlen);
	int dc = chart_need_col(t, "dst", "p2p", err, errlen);
	int bc = chart_need_col(t, "bytes", "p2p", err, errlen);
	int tc = chart_need_col(t, "seconds", "p2p", err, errlen);
	int gc = chart_need_col(t, "algbw_gbps", "p2p", err, errlen);
	int oc = chart_table_col(t, "op");
	double *m, v, a, b, x;
	char path[128];
	int w;
	FILE *f;

	if (sc < 0 || dc < 0 || bc < 0 || tc < 0 || gc < 0)
		return -1;
	c->size = 0;
	c->world = 0;
	for (int r = 0; r < t->nrow; r++) {
		if (chart_table_num(t, r, bc, &x, err, errlen) < 0 ||
		    chart_table_num(t, r, sc, &a, err, errlen) < 0 ||
		    chart_table_num(t, r, dc, &b, err, errlen) < 0 ||
		    note_group(c, t, r, err, errlen) < 0)
			return -1;
		if (x > c->size)
			c->size = x;
		if (a < 0 || b < 0 || a > 4096 || b > 4096)
			return cli_fail(err, errlen, "%s:%d: rank out of range",
			    t->path, t->line[r]);
		if (a + 1 > c->world || b + 1 > c->world)
			c->world = (int)(a > b ? a : b) + 1;
	}
	w = c->world;
	c->latency = oc < 0 || strcmp(t->cells[0][oc], "p2p-latency") == 0;
	m = cli_calloc((size_t)w * (size_t)w, sizeof *m);
	for (int k = 0; k < w * w; k++)
		m[k] = NAN;
	for (int r = 0; r < t->nrow; r++) {
		chart_table_num(t, r, bc, &x, err, errlen);
		if (x != c->size)
			continue;
		chart_table_num(t, r, sc, &a, err, errlen);
		chart_table_num(t, r, dc, &b, err, errlen);
		if (chart_table_num(t, r, c->latency ? tc : gc, &v, err,
		    errlen) < 0) {
			free(m);
			return -1;
		}
		m[(int)a * w + (int)b] = c->latency ? v * 1e6 : v;
	}
	snprintf(path, sizeof path, "%s/m.dat", c->dir);
	if ((f = fopen(path, "w")) == NULL) {
		free(m);
		return cli_fail(err, errlen, "%s: %s", path, strerror(errno));
	}
	for (int i = 0; i < w; i++) {
		for (int j = 0; j < w; j++)
			fprintf(f, "%s%.6g", j ? " " : "", m[i * w + j]);
		fputc('\n', f);
	}
	free(m);
	return fclose(f) == 0 ? 0 : cli_fail(err, errlen, "%s: %s", path,
	    strerror(errno));
}

int
chart_data_read(struct chart_data *c, enum chart_kind kind,
    const struct chart_table *t, int ntab, char *err, size_t errlen)
{
	int rc = 0;

	if (kind == CHART_P2P)
		return write_matrix(c, t, err, errlen);
	if (kind == CHART_MESH)
		return write_mesh(c, t, ntab, err, errlen);
	if (kind == CHART_PREDICTED || kind == CHART_BREAKDOWN)
		return chart_plan_data(c, kind, t, ntab, err, errlen);
	for (int i = 0; i < ntab && rc == 0; i++)
		switch (kind) {
		case CHART_BUSBW:
		case CHART_LATENCY:
			rc = read_sizes(c, &t[i], kind, err, errlen);
			break;
		case CHART_SCALING:
			rc = read_scaling(c, &t[i], err, errlen);
			break;
		case CHART_LOSS:
		case CHART_LOSS_BYTES:
			rc = read_loss(c, &t[i], kind == CHART_LOSS_BYTES, err,
			    errlen);
			break;
		case CHART_EXPERTS:
			rc = read_experts(c, &t[i], err, errlen);
			break;
		default:
			rc = cli_fail(err, errlen, "not a CSV chart kind");
			break;
		}
	return rc < 0 ? -1 : write_series(c, err, errlen);
}
