/* chart_script: the gnuplot script of each CSV kind, over the data files
 * chart_data wrote, with a default title made from the data. */
#include <stdio.h>
#include <string.h>

#include "chart/chart_int.h"

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

/* ", 4 ranks on 1 host", or less of it where the data does not say. */
static void
group_words(const struct chart_data *c, char *buf, size_t len)
{
	buf[0] = '\0';
	if (c->world > 0)
		snprintf(buf, len, ", %d rank%s%s", c->world,
		    c->world == 1 ? "" : "s", c->hosts > 0 ? " on " : "");
	if (c->world > 0 && c->hosts > 0)
		snprintf(buf + strlen(buf), len - strlen(buf), "%d host%s",
		    c->hosts, c->hosts == 1 ? "" : "s");
}

/* "WHAT, 4 ranks on 1 host" as the title. */
static void
group_title(const struct chart_data *c, const char *what, char *title,
    size_t tlen)
{
	char g[96];

	group_words(c, g, sizeof g);
	snprintf(title, tlen, "%s%s", what, g);
}

void
chart_script_head(FILE *f, const struct chart_plot *p, const char *tmp,
    const char *title)
{
	if (chart_format_of(p->out) == CHART_SVG)
		fprintf(f, "set terminal svg size %d,%d font 'DejaVu Sans,11' "
		    "background rgb 'white'\n", p->width, p->height);
	else
		fprintf(f, "set terminal pngcairo size %d,%d "
		    "font 'DejaVu Sans,10'\n", p->width, p->height);
	fprintf(f, "set output '%s'\nset encoding utf8\nset title ", tmp);
	gp_quote(f, title);
	fprintf(f, " noenhanced\nset grid\nset key noenhanced\n");
}

/* Against size: a colour per algorithm (or pair), in-place dashed. */
static void
plot_sizes(FILE *f, const struct chart_data *c)
{
	static const char *const colors[] = { "#1f77b4", "#ff7f0e", "#2ca02c",
	    "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
	    "#17becf" };
	char names[64][128];
	int nn = 0;

	fprintf(f, "plot ");
	for (int i = 0; i < c->ns; i++) {
		const char *t = c->s[i].title, *sp = strstr(t, " in-place");
		size_t len = sp ? (size_t)(sp - t) : strlen(t);
		int k = 0, dashed = sp != NULL;

		if ((sp = strstr(t, " out-of-place")) != NULL)
			len = (size_t)(sp - t);
		while (k < nn && (strlen(names[k]) != len ||
		    strncmp(names[k], t, len)))
			k++;
		if (k == nn && nn < 64)
			snprintf(names[nn++], sizeof names[0], "%.*s", (int)len,
			    t);
		fprintf(f, "%s'%s/s%d.dat' using 1:2 with linespoints lw 2 "
		    "pt 7 ps 0.6 lc rgb '%s' dt %d title ",
		    i ? ", \\\n     " : "", c->dir, i, colors[k % 10],
		    dashed ? 2 : 1);
		gp_quote(f, t);
	}
	fputc('\n', f);
}

static void
script_sizes(FILE *f, enum chart_kind kind, const struct chart_data *c,
    char *title, size_t tlen)
{
	char g[96];

	group_words(c, g, sizeof g);
	snprintf(title, tlen, "%s%s%s%s", kind == CHART_BUSBW ?
	    "Bus bandwidth against message size" :
	    "Latency against message size", c->what[0] ? ", " : "", c->what,
	    g);
	fprintf(f, "set logscale x 2\nset format x '%%.0b %%BB'\n"
	    "set xlabel 'message size (bytes)'\nset key outside right top\n");
	if (kind == CHART_BUSBW)
		fprintf(f, "set ylabel 'bus bandwidth (GB/s, 10^9 B/s)'\n"
		    "set yrange [0:*]\n");
	else
		fprintf(f, "set logscale y 10\n"
		    "set ylabel 'time (us, median)'\n");
	plot_sizes(f, c);
}

/* Tokens/s on the left axis, efficiency (dashed) on the right. */
static void
script_scaling(FILE *f, const struct chart_data *c, char *title,
    size_t tlen)
{
	group_title(c, "Data-parallel scaling", title, tlen);
	fprintf(f, "set xlabel 'world size (ranks)'\nset xtics 1\n"
	    "set ylabel 'throughput (tokens/s)'\nset y2label "
	    "'scaling efficiency (tokens/s over world x one rank)'\n"
	    "set y2tics\nset yrange [0:*]\nset y2range [0:1.1]\n"
	    "set key outside top center horizontal\nplot ");
	for (int i = 0; i < c->ns; i++) {
		int eff = strstr(c->s[i].title, "efficiency") != NULL;

		fprintf(f, "%s'%s/s%d.dat' using 1:2 axes x1%s with "
		    "linespoints lw 2 lc %d %s title ", i ? ", \\\n     " : "",
		    c->dir, i, eff ? "y2" : "y1", i / 2 + 1,
		    eff ? "dt 2 pt 6" : "pt 7");
		gp_quote(f, c->s[i].title);
	}
	fputc('\n', f);
}

/* A bar per mesh, labelled DxTxP, in the data's order. */
static void
script_mesh(FILE *f, const struct chart_data *c, char *title, size_t tlen)
{
	group_title(c, "Training throughput per mesh", title, tlen);
	fprintf(f, "set xlabel 'mesh (data x tensor x pipeline)'\n"
	    "set ylabel 'throughput (tokens/s)'\nset yrange [0:*]\n"
	    "set style fill solid 0.8 border -1\nset boxwidth 0.7\n"
	    "set grid noxtics\nset xtics nomirror\n"
	    "plot '%s/mesh.dat' using 1:2:xtic(3) with boxes "
	    "lc rgb '#1f77b4' notitle\n", c->dir);
}

/* One line per run, against the step or the MB sent. Runs that train
 * alike (one model on other meshes) coincide: each run has its own dash
 * pattern and point type, its points every n/8 + i steps (so that they
 * fall apart), and an earlier run is drawn wider, showing beside the
 * later ones drawn over it. */
static void
script_loss(FILE *f, const struct chart_data *c, int bytes, char *title,
    size_t tlen)
{
	static const int points[] = { 7, 5, 9, 13, 11, 6, 4, 8 };

	snprintf(title, tlen, "Training loss, %d run%s", c->ns,
	    c->ns == 1 ? "" : "s");
	fprintf(f, "set xlabel '%s'\nset ylabel 'loss'\nset key top right\n"
	    "plot ", bytes ? "MB sent (rank 0, by the end of the step)" :
	    "step");
	for (int i = 0; i < c->ns; i++) {
		int wider = c->ns - 1 - i < 3 ? c->ns - 1 - i : 3;
		int every = (c->s[i].n / 8 > 1 ? c->s[i].n / 8 : 1) + i;

		fprintf(f, "%s'%s/s%d.dat' using 1:2 with linespoints lw %.2f "
		    "dt %d pt %d ps 1.2 pi %d title ", i ? ", \\\n     " : "",
		    c->dir, i, 2 + 0.75 * wider, i % 5 + 1,
		    points[i % (int)(sizeof points / sizeof points[0])], every);
		gp_quote(f, c->s[i].title);
	}
	fputc('\n', f);
}

/* Tokens per expert against the step, a line per layer and expert. */
static void
script_experts(FILE *f, const struct chart_data *c, char *title, size_t tlen)
{
	snprintf(title, tlen, "Tokens per expert, %d line%s (layer, expert)",
	    c->ns, c->ns == 1 ? "" : "s");
	fprintf(f, "set xlabel 'step'\nset ylabel 'assignments routed'\n"
	    "set key outside right\nplot ");
	for (int i = 0; i < c->ns; i++) {
		fprintf(f, "%s'%s/s%d.dat' using 1:2 with linespoints lw 2 "
		    "dt %d pt %d title ", i ? ", \\\n     " : "", c->dir, i,
		    i / 8 % 5 + 1, i % 8 + 4);
		gp_quote(f, c->s[i].title);
	}
	fputc('\n', f);
}

/* The sender by receiver matrix as a heat map with its values. */
static void
script_p2p(FILE *f, const struct chart_data *c, char *title, size_t tlen)
{
	const char *what = c->latency ? "latency (us)" : "bandwidth (GB/s)";
	char g[96];

	group_words(c, g, sizeof g);
	snprintf(title, tlen, "Point-to-point %s at %.0f bytes%s", what,
	    c->size, g);
	fprintf(f, "set xlabel 'receiver rank'\nset ylabel 'sender rank'\n"
	    "set xrange [-0.5:%d.5]\nset yrange [%d.5:-0.5]\nset xtics 1\n"
	    "set ytics 1\nunset grid\nset cblabel '%s'\nset palette "
	    "defined (0 '#fff5eb', 1 '#fd8d3c', 2 '#7f2704')\n%s"
	    "plot '%s/m.dat' matrix with image notitle, '' matrix using "
	    "1:2:($3 == $3 ? sprintf('%%.%df', $3) : '') with labels "
	    "notitle\n", c->world - 1, c->world - 1, what,
	    c->latency ? "" : "set palette negative\n", c->dir,
	    c->latency ? 1 : 3);
}

void
chart_script_body(FILE *f, enum chart_kind kind, const struct chart_data *c,
    char *title, size_t tlen)
{
	switch (kind) {
	case CHART_BUSBW:
	case CHART_LATENCY:
		script_sizes(f, kind, c, title, tlen);
		break;
	case CHART_SCALING:
		script_scaling(f, c, title, tlen);
		break;
	case CHART_LOSS:
	case CHART_LOSS_BYTES:
		script_loss(f, c, kind == CHART_LOSS_BYTES, title, tlen);
		break;
	case CHART_MESH:
		script_mesh(f, c, title, tlen);
		break;
	case CHART_PREDICTED:
	case CHART_BREAKDOWN:
		chart_plan_script(f, kind, c, title, tlen);
		break;
	case CHART_EXPERTS:
		script_experts(f, c, title, tlen);
		break;
	default:
		script_p2p(f, c, title, tlen);
		break;
	}
}
