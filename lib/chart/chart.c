/* chart: collx-plot's charts. The data is sorted into series here,
 * written as plain columns into a private directory with a gnuplot
 * script, and gnuplot draws the PNG or SVG, which is renamed into place
 * only when gnuplot succeeded. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/cli.h"
#include "chart/chart.h"

static const char *const kind_names[] = {
	"guess", "busbw", "latency", "p2p", "scaling", "loss", "pipeline"
};

int
chart_kind_parse(const char *s, enum chart_kind *out)
{
	int n = (int)(sizeof kind_names / sizeof kind_names[0]);
	int i = cli_name_index(kind_names + 1, n - 1, s);

	return i < 0 ? -1 : (*out = (enum chart_kind)(i + 1), 0);
}

const char *
chart_kind_name(enum chart_kind k)
{
	return kind_names[k];
}

/* ---- series ---- */

struct point {
	double x, y;
};

struct series {
	char title[128];
	struct point *pt;
	int n, cap;
};

struct chart {
	struct series *s;
	int ns;
	char dir[64];
	int world, hosts;	/* largest seen; 0 unknown */
	char what[32];		/* the dtype, for the title */
};

static struct series *
series_get(struct chart *c, const char *title)
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
series_add(struct series *s, double x, double y)
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
	const struct point *p = a, *q = b;

	return p->x < q->x ? -1 : p->x > q->x;
}

static void
chart_free(struct chart *c)
{
	for (int i = 0; i < c->ns; i++)
		free(c->s[i].pt);
	free(c->s);
}

/* Series i as two columns in DIR/s<i>.dat, sorted by x. */
static int
write_series(struct chart *c, char *err, size_t errlen)
{
	char path[128];
	FILE *f;

	for (int i = 0; i < c->ns; i++) {
		struct series *s = &c->s[i];

		qsort(s->pt, (size_t)s->n, sizeof *s->pt, cmp_point);
		snprintf(path, sizeof path, "%s/s%d.dat", c->dir, i);
		if ((f = fopen(path, "w")) == NULL)
			return cli_fail(err, errlen, "%s: %s", path, strerror(errno));
		for (int k = 0; k < s->n; k++)
			fprintf(f, "%.10g %.10g\n", s->pt[k].x, s->pt[k].y);
		if (fclose(f) != 0)
			return cli_fail(err, errlen, "%s: %s", path, strerror(errno));
	}
	return 0;
}

/* A title string for gnuplot: double quotes, backslashes escaped. */
static void
gp_quote(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			fputc('\\', f);
		fputc(*s, f);
	}
	fputc('"', f);
}

/* "plot" of every series with style. */
static void
plot_series(FILE *f, const struct chart *c, const char *style)
{
	fprintf(f, "plot ");
	for (int i = 0; i < c->ns; i++) {
		fprintf(f, "%s'%s/s%d.dat' using 1:2 with %s title ", i ? ", \\\n     " : "",
		    c->dir, i, style);
		gp_quote(f, c->s[i].title);
	}
	fputc('\n', f);
}

/* Against size: a colour per algorithm (or pair), in-place dashed. */
static void
plot_sizes(FILE *f, const struct chart *c)
{
	static const char *const colors[] = { "#1f77b4", "#ff7f0e", "#2ca02c",
	    "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
	    "#17becf" };
	char names[64][128];
	int nn = 0;

	fprintf(f, "plot ");
	for (int i = 0; i < c->ns; i++) {
		const char *t = c->s[i].title, *sp = strstr(t, " in-place");
		size_t len = sp ? (size_t)(sp - t) : strcspn(t, "");
		int k = 0, dashed = sp != NULL;

		if ((sp = strstr(t, " out-of-place")) != NULL)
			len = (size_t)(sp - t);
		while (k < nn && (strlen(names[k]) != len || strncmp(names[k], t, len)))
			k++;
		if (k == nn && nn < 64)
			snprintf(names[nn++], sizeof names[0], "%.*s", (int)len, t);
		fprintf(f, "%s'%s/s%d.dat' using 1:2 with linespoints lw 2 pt 7 "
		    "ps 0.6 lc rgb '%s' dt %d title ", i ? ", \\\n     " : "",
		    c->dir, i, colors[k % 10], dashed ? 2 : 1);
		gp_quote(f, t);
	}
	fputc('\n', f);
}

/* ---- reading the kinds ---- */

static int
need_col(const struct chart_table *t, const char *name, const char *kind,
    char *err, size_t errlen)
{
	int c = chart_table_col(t, name);

	if (c < 0)
		cli_fail(err, errlen, "%s:1: no column '%s' for a %s chart", t->path,
		    name, kind);
	return c;
}

static enum chart_kind
guess_kind(const struct chart_table *t)
{
	int pairs = 0, src = chart_table_col(t, "src"), dst = chart_table_col(t, "dst");

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
note_group(struct chart *c, const struct chart_table *t, int r, char *err,
    size_t errlen)
{
	int wc = chart_table_col(t, "world_size"), hc = chart_table_col(t, "hosts");
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
read_sizes(struct chart *c, struct chart_table *t, int ntab,
    enum chart_kind kind, char *err, size_t errlen)
{
	for (int i = 0; i < ntab; i++) {
		const char *k = chart_kind_name(kind);
		int bc = need_col(&t[i], "bytes", k, err, errlen);
		int yc = need_col(&t[i], kind == CHART_BUSBW ? "busbw_gbps" : "seconds",
		    k, err, errlen);
		int oc = chart_table_col(&t[i], "op"), ac = chart_table_col(&t[i], "algo");
		int pc = chart_table_col(&t[i], "place"), sc = chart_table_col(&t[i], "src");
		int dc = chart_table_col(&t[i], "dst"), dtc = chart_table_col(&t[i], "dtype");
		char title[128];
		double x, y;
		int ops = 1;

		if (bc < 0 || yc < 0)
			return -1;
		for (int r = 1; r < t[i].nrow && oc >= 0; r++)
			if (strcmp(t[i].cells[r][oc], t[i].cells[0][oc]) != 0)
				ops = 2;
		for (int r = 0; r < t[i].nrow; r++) {
			char **row = t[i].cells[r];

			if (chart_table_num(&t[i], r, bc, &x, err, errlen) < 0 ||
			    chart_table_num(&t[i], r, yc, &y, err, errlen) < 0 ||
			    note_group(c, &t[i], r, err, errlen) < 0)
				return -1;
			if (sc >= 0 && dc >= 0)
				snprintf(title, sizeof title, "%s %s to %s", oc >= 0 ?
				    row[oc] : "", row[sc], row[dc]);
			else
				snprintf(title, sizeof title, "%s%s%s%s%s", ops > 1 ?
				    row[oc] : "", ops > 1 ? " " : "",
				    ac >= 0 ? row[ac] : "", pc >= 0 ? " " : "",
				    pc >= 0 ? (strcmp(row[pc], "in") ? "out-of-place" :
				    "in-place") : "");
			if (c->what[0] == '\0' && dtc >= 0)
				snprintf(c->what, sizeof c->what, "%s%s%s", ops == 1 &&
				    oc >= 0 ? row[oc] : "", ops == 1 && oc >= 0 ? ", " : "",
				    row[dtc]);
			series_add(series_get(c, title), x,
			    kind == CHART_BUSBW ? y : y * 1e6);
		}
	}
	return 0;
}

static int
read_scaling(struct chart *c, struct chart_table *t, int ntab, char *err,
    size_t errlen)
{
	for (int i = 0; i < ntab; i++) {
		int wc = need_col(&t[i], "world_size", "scaling", err, errlen);
		int tc = need_col(&t[i], "tokens_per_s", "scaling", err, errlen);
		int ec = need_col(&t[i], "efficiency", "scaling", err, errlen);
		int ac = chart_table_col(&t[i], "algo");
		char title[128];
		double w, tok, eff;

		if (wc < 0 || tc < 0 || ec < 0)
			return -1;
		for (int r = 0; r < t[i].nrow; r++) {
			const char *name = ac >= 0 ? t[i].cells[r][ac] : "dp";

			if (chart_table_num(&t[i], r, wc, &w, err, errlen) < 0 ||
			    chart_table_num(&t[i], r, tc, &tok, err, errlen) < 0 ||
			    chart_table_num(&t[i], r, ec, &eff, err, errlen) < 0 ||
			    note_group(c, &t[i], r, err, errlen) < 0)
				return -1;
			snprintf(title, sizeof title, "%s tokens/s", name);
			series_add(series_get(c, title), w, tok);
			snprintf(title, sizeof title, "%s efficiency", name);
			series_add(series_get(c, title), w, eff);
		}
	}
	return 0;
}

static int
read_loss(struct chart *c, struct chart_table *t, int ntab, char *err,
    size_t errlen)
{
	for (int i = 0; i < ntab; i++) {
		int sc = need_col(&t[i], "step", "loss", err, errlen);
		int lc = need_col(&t[i], "loss", "loss", err, errlen);
		const char *base = strrchr(t[i].path, '/');
		struct series *s;
		double x, y;

		if (sc < 0 || lc < 0)
			return -1;
		s = series_get(c, base ? base + 1 : t[i].path);
		for (int r = 0; r < t[i].nrow; r++) {
			if (chart_table_num(&t[i], r, sc, &x, err, errlen) < 0 ||
			    chart_table_num(&t[i], r, lc, &y, err, errlen) < 0)
				return -1;
			series_add(s, x, y);
		}
	}
	return 0;
}

/* The p2p matrix at the largest size: DIR/m.dat, NaN on the diagonal. */
static int
write_matrix(struct chart *c, struct chart_table *t, char *err, size_t errlen,
    int *latency, double *size)
{
	int sc = need_col(t, "src", "p2p", err, errlen), dc = need_col(t, "dst",
	    "p2p", err, errlen), bc = need_col(t, "bytes", "p2p", err, errlen);
	int tc = need_col(t, "seconds", "p2p", err, errlen), gc = need_col(t,
	    "algbw_gbps", "p2p", err, errlen), oc = chart_table_col(t, "op");
	double *m, v, a, b, x;
	char path[128];
	int w;
	FILE *f;

	if (sc < 0 || dc < 0 || bc < 0 || tc < 0 || gc < 0)
		return -1;
	*size = 0;
	c->world = 0;
	for (int r = 0; r < t->nrow; r++) {
		if (chart_table_num(t, r, bc, &x, err, errlen) < 0 ||
		    chart_table_num(t, r, sc, &a, err, errlen) < 0 ||
		    chart_table_num(t, r, dc, &b, err, errlen) < 0 ||
		    note_group(c, t, r, err, errlen) < 0)
			return -1;
		if (x > *size)
			*size = x;
		if (a < 0 || b < 0 || a > 4096 || b > 4096)
			return cli_fail(err, errlen, "%s:%d: rank out of range",
			    t->path, t->line[r]);
		if (a + 1 > c->world || b + 1 > c->world)
			c->world = (int)(a > b ? a : b) + 1;
	}
	w = c->world;
	*latency = oc < 0 || strcmp(t->cells[0][oc], "p2p-latency") == 0;
	m = cli_calloc((size_t)w * (size_t)w, sizeof *m);
	for (int k = 0; k < w * w; k++)
		m[k] = NAN;
	for (int r = 0; r < t->nrow; r++) {
		chart_table_num(t, r, bc, &x, err, errlen);
		if (x != *size)
			continue;
		chart_table_num(t, r, sc, &a, err, errlen);
		chart_table_num(t, r, dc, &b, err, errlen);
		if (chart_table_num(t, r, *latency ? tc : gc, &v, err, errlen) < 0) {
			free(m);
			return -1;
		}
		m[(int)a * w + (int)b] = *latency ? v * 1e6 : v;
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

/* ---- the pipeline timeline ---- */

static const struct { const char *name, *color; } stage_colors[] = {
	{ "forward", "#4C72B0" }, { "backward", "#DD8452" }, { "send", "#55A868" },
	{ "recv", "#C44E52" }, { "idle", "#BBBBBB" },
};
#define NCOLORS (sizeof stage_colors / sizeof stage_colors[0])

/* Boxes per event name in DIR/e<k>.dat: x y dx dy (ms; stage rows). */
static int
write_timeline(struct chart *c, FILE *gp, const char *path, char *err,
    size_t errlen)
{
	struct chart_event *ev;
	double keys[1024], t0 = INFINITY, t1 = -INFINITY;
	int n, nk = 0, used[NCOLORS + 1] = { 0 };
	FILE *f[NCOLORS + 1];
	char p[128];

	if (chart_trace_read(path, &ev, &n, err, errlen) < 0)
		return -1;
	/* A stage is a (pid, tid) pair, in order of pid then tid. */
	for (int i = 0; i < n; i++) {
		double k = ev[i].pid * 65536 + ev[i].tid;
		int seen = 0;

		for (int j = 0; j < nk; j++)
			seen |= keys[j] == k;
		if (!seen && nk < 1024)
			keys[nk++] = k;
		if (ev[i].ts < t0)
			t0 = ev[i].ts;
		if (ev[i].ts + ev[i].dur > t1)
			t1 = ev[i].ts + ev[i].dur;
	}
	for (int a = 0; a < nk; a++)
		for (int b = a + 1; b < nk; b++)
			if (keys[b] < keys[a]) {
				double x = keys[a];

				keys[a] = keys[b];
				keys[b] = x;
			}
	for (size_t k = 0; k <= NCOLORS; k++) {
		snprintf(p, sizeof p, "%s/e%zu.dat", c->dir, k);
		if ((f[k] = fopen(p, "w")) == NULL) {
			cli_fail(err, errlen, "%s: %s", p, strerror(errno));
			while (k-- > 0)
				fclose(f[k]);
			free(ev);
			return -1;
		}
	}
	for (int i = 0; i < n; i++) {
		double k = ev[i].pid * 65536 + ev[i].tid;
		size_t col = NCOLORS;
		int row = 0;

		for (int j = 0; j < nk; j++)
			if (keys[j] == k)
				row = j;
		for (size_t q = 0; q < NCOLORS; q++)
			if (strcmp(ev[i].name, stage_colors[q].name) == 0)
				col = q;
		used[col] = 1;
		fprintf(f[col], "%.6f %d %.6f 0.38\n",
		    (ev[i].ts - t0 + ev[i].dur / 2) / 1e3, row, ev[i].dur / 2e3);
	}
	for (size_t k = 0; k <= NCOLORS; k++)
		fclose(f[k]);
	free(ev);
	c->world = nk;
	fprintf(gp, "set xlabel 'time (ms)'\nset ylabel 'pipeline stage'\n"
	    "set yrange [%d.5:-0.5]\nset ytics 1\nset xrange [0:%.6f]\n"
	    "set style fill solid 0.9 border rgb '#333333'\n"
	    "set key outside right top\n", nk - 1, (t1 - t0) / 1e3);
	fprintf(gp, "plot ");
	for (size_t k = 0, first = 1; k <= NCOLORS; k++) {
		if (!used[k])
			continue;
		fprintf(gp, "%s'%s/e%zu.dat' using 1:2:3:4 with boxxyerror lc rgb '%s' "
		    "title '%s'", first ? "" : ", \\\n     ", c->dir, k,
		    k < NCOLORS ? stage_colors[k].color : "#8172B2",
		    k < NCOLORS ? stage_colors[k].name : "other");
		first = 0;
	}
	fputc('\n', gp);
	return 0;
}

/* ---- the script and gnuplot ---- */

static void
group_words(const struct chart *c, char *buf, size_t len)
{
	buf[0] = '\0';
	if (c->world > 0)
		snprintf(buf, len, ", %d rank%s%s", c->world, c->world == 1 ? "" : "s",
		    c->hosts > 0 ? " on " : "");
	if (c->world > 0 && c->hosts > 0)
		snprintf(buf + strlen(buf), len - strlen(buf), "%d host%s", c->hosts,
		    c->hosts == 1 ? "" : "s");
}

static void
script_head(FILE *f, const struct chart_plot *p, const char *tmp,
    const char *title)
{
	int svg = strlen(p->out) > 4 && strcmp(p->out + strlen(p->out) - 4, ".svg") == 0;

	if (svg)
		fprintf(f, "set terminal svg size %d,%d font 'DejaVu Sans,11' "
		    "background rgb 'white'\n", p->width, p->height);
	else
		fprintf(f, "set terminal pngcairo size %d,%d font 'DejaVu Sans,10'\n",
		    p->width, p->height);
	fprintf(f, "set output '%s'\nset encoding utf8\nset title ", tmp);
	gp_quote(f, title);
	fprintf(f, " noenhanced\nset grid\nset key noenhanced\n");
}

/* The chart's own part of the script; its default title into title. */
static int
script_body(FILE *f, struct chart_plot *p, struct chart *c,
    struct chart_table *t, int ntab, char *title, size_t tlen, char *err,
    size_t errlen)
{
	char g[96];
	int latency = 1;
	double size = 0;

	switch (p->kind) {
	case CHART_BUSBW:
	case CHART_LATENCY:
		if (read_sizes(c, t, ntab, p->kind, err, errlen) < 0 ||
		    write_series(c, err, errlen) < 0)
			return -1;
		group_words(c, g, sizeof g);
		snprintf(title, tlen, "%s%s%s%s", p->kind == CHART_BUSBW ?
		    "Bus bandwidth against message size" :
		    "Latency against message size", c->what[0] ? ", " : "", c->what, g);
		fprintf(f, "set logscale x 2\nset format x '%%.0b %%BB'\n"
		    "set xlabel 'message size (bytes)'\nset key outside right top\n");
		if (p->kind == CHART_BUSBW)
			fprintf(f, "set ylabel 'bus bandwidth (GB/s, 10^9 B/s)'\n"
			    "set yrange [0:*]\n");
		else
			fprintf(f, "set logscale y 10\nset ylabel 'time (us, median)'\n");
		plot_sizes(f, c);
		return 0;
	case CHART_SCALING:
		if (read_scaling(c, t, ntab, err, errlen) < 0 ||
		    write_series(c, err, errlen) < 0)
			return -1;
		group_words(c, g, sizeof g);
		snprintf(title, tlen, "Data-parallel scaling%s", g);
		fprintf(f, "set xlabel 'world size (ranks)'\nset xtics 1\n"
		    "set ylabel 'throughput (tokens/s)'\nset y2label "
		    "'scaling efficiency (tokens/s over world x one rank)'\n"
		    "set y2tics\nset yrange [0:*]\nset y2range [0:1.1]\n"
		    "set key outside top center horizontal\nplot ");
		for (int i = 0; i < c->ns; i++) {
			int eff = strstr(c->s[i].title, "efficiency") != NULL;

			fprintf(f, "%s'%s/s%d.dat' using 1:2 axes x1%s with linespoints "
			    "lw 2 lc %d %s title ", i ? ", \\\n     " : "", c->dir, i,
			    eff ? "y2" : "y1", i / 2 + 1, eff ? "dt 2 pt 6" : "pt 7");
			gp_quote(f, c->s[i].title);
		}
		fputc('\n', f);
		return 0;
	case CHART_LOSS:
		if (read_loss(c, t, ntab, err, errlen) < 0 ||
		    write_series(c, err, errlen) < 0)
			return -1;
		snprintf(title, tlen, "Training loss, %d run%s", c->ns, c->ns == 1 ?
		    "" : "s");
		fprintf(f, "set xlabel 'step'\nset ylabel 'loss'\nset key top right\n");
		plot_series(f, c, "lines lw 2");
		return 0;
	case CHART_P2P:
		if (write_matrix(c, t, err, errlen, &latency, &size) < 0)
			return -1;
		group_words(c, g, sizeof g);
		snprintf(title, tlen, "Point-to-point %s at %.0f bytes%s", latency ?
		    "latency (us)" : "bandwidth (GB/s)", size, g);
		fprintf(f, "set xlabel 'receiver rank'\nset ylabel 'sender rank'\n"
		    "set xrange [-0.5:%d.5]\nset yrange [%d.5:-0.5]\nset xtics 1\n"
		    "set ytics 1\nunset grid\nset cblabel '%s'\nset palette "
		    "defined (0 '#fff5eb', 1 '#fd8d3c', 2 '#7f2704')\n%s"
		    "plot '%s/m.dat' matrix with image notitle, '' matrix using "
		    "1:2:($3 == $3 ? sprintf('%%.%df', $3) : '') with labels notitle\n", c->world - 1,
		    c->world - 1, latency ? "latency (us)" : "bandwidth (GB/s)",
		    latency ? "" : "set palette negative\n", c->dir, latency ? 1 : 3);
		return 0;
	default:
		return cli_fail(err, errlen, "no chart kind");
	}
}

/* gnuplot SCRIPT; 0, or -1 with its first message. */
static int
run_gnuplot(const char *dir, char *err, size_t errlen)
{
	char script[128], log[128], line[256] = "";
	pid_t pid;
	int st;
	FILE *f;

	snprintf(script, sizeof script, "%s/plot.gp", dir);
	snprintf(log, sizeof log, "%s/gnuplot.log", dir);
	fflush(stdout);
	if ((pid = fork()) < 0)
		return cli_fail(err, errlen, "fork: %s", strerror(errno));
	if (pid == 0) {
		if (freopen(log, "w", stderr) == NULL)
			_exit(126);
		execlp("gnuplot", "gnuplot", script, (char *)NULL);
		fprintf(stderr, "cannot run gnuplot: %s (make deps installs "
		    "gnuplot-nox)\n", strerror(errno));
		_exit(127);
	}
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return cli_fail(err, errlen, "waitpid: %s", strerror(errno));
	if ((f = fopen(log, "r")) != NULL) {
		while (fgets(line, sizeof line, f) != NULL)
			if (strspn(line, " \t\n^") != strlen(line))
				break;
		fclose(f);
	}
	line[strcspn(line, "\n")] = '\0';
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		return cli_fail(err, errlen, "gnuplot failed: %s", line);
	return 0;
}

static void
remove_dir(const char *dir)
{
	static const char *const fixed[] = { "plot.gp", "gnuplot.log", "m.dat" };
	char p[160];

	for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) {
		snprintf(p, sizeof p, "%s/%s", dir, fixed[i]);
		unlink(p);
	}
	for (int i = 0; i < 4096; i++) {
		snprintf(p, sizeof p, "%s/s%d.dat", dir, i);
		if (unlink(p) < 0 && i >= 16)
			break;
		snprintf(p, sizeof p, "%s/e%d.dat", dir, i);
		unlink(p);
	}
	rmdir(dir);
}

static int
is_json(const char *path)
{
	FILE *f = fopen(path, "r");
	int ch = EOF;

	if (f == NULL)
		return 0;
	while ((ch = fgetc(f)) == ' ' || ch == '\n' || ch == '\t' || ch == '\r')
		;
	fclose(f);
	return ch == '{' || ch == '[';
}

static int
read_tables(struct chart_plot *p, struct chart_table *t, char *err,
    size_t errlen)
{
	for (int i = 0; i < p->nfiles; i++)
		if (chart_csv_read(p->files[i], &t[i], err, errlen) < 0)
			return -1;
	if (p->kind == CHART_GUESS && (p->kind = guess_kind(&t[0])) == CHART_GUESS)
		return cli_fail(err, errlen, "%s:1: cannot tell the chart from the "
		    "columns; name it with --kind", t[0].path);
	return 0;
}

int
chart_draw(struct chart_plot *p, char *err, size_t errlen)
{
	struct chart c = { 0 };
	struct chart_table *t = cli_calloc((size_t)p->nfiles, sizeof *t);
	char tmp[4200], gp[128], title[256] = "", *btext = NULL;
	int rc = CLI_EXIT_DATA;
	FILE *f = NULL, *body = NULL;
	size_t blen = 0;

	snprintf(c.dir, sizeof c.dir, "/tmp/collx-plot.XXXXXX");
	if (mkdtemp(c.dir) == NULL) {
		cli_fail(err, errlen, "mkdtemp: %s", strerror(errno));
		free(t);
		return CLI_EXIT_RUNTIME;
	}
	snprintf(gp, sizeof gp, "%s/plot.gp", c.dir);
	snprintf(tmp, sizeof tmp, "%s.tmp%ld", p->out, (long)getpid());
	if ((f = fopen(gp, "w")) == NULL) {
		cli_fail(err, errlen, "%s: %s", gp, strerror(errno));
		rc = CLI_EXIT_RUNTIME;
		goto out;
	}
	/* The body first, in memory: it decides the default title. */
	if ((body = open_memstream(&btext, &blen)) == NULL) {
		cli_fail(err, errlen, "out of memory");
		rc = CLI_EXIT_RUNTIME;
		goto out;
	}
	if (p->kind == CHART_PIPELINE || (p->kind == CHART_GUESS &&
	    is_json(p->files[0]))) {
		p->kind = CHART_PIPELINE;
		if (write_timeline(&c, body, p->files[0], err, errlen) < 0)
			goto out;
		snprintf(title, sizeof title, "Pipeline timeline, %d stage%s",
		    c.world, c.world == 1 ? "" : "s");
	} else if (read_tables(p, t, err, errlen) < 0 ||
	    script_body(body, p, &c, t, p->nfiles, title, sizeof title, err,
	    errlen) < 0)
		goto out;
	fclose(body);
	body = NULL;
	script_head(f, p, tmp, p->title ? p->title : title);
	fputs(btext, f);
	if (fclose(f) != 0) {
		f = NULL;
		cli_fail(err, errlen, "%s: %s", gp, strerror(errno));
		rc = CLI_EXIT_RUNTIME;
		goto out;
	}
	f = NULL;
	rc = CLI_EXIT_RUNTIME;
	if (run_gnuplot(c.dir, err, errlen) < 0)
		goto out;
	if (rename(tmp, p->out) < 0) {
		cli_fail(err, errlen, "%s: %s", p->out, strerror(errno));
		goto out;
	}
	rc = 0;
out:
	if (f != NULL)
		fclose(f);
	if (body != NULL)
		fclose(body);
	free(btext);
	unlink(tmp);
	remove_dir(c.dir);
	chart_free(&c);
	for (int i = 0; i < p->nfiles; i++)
		chart_table_free(&t[i]);
	free(t);
	return rc;
}
