/* chart_int: what the parts of a chart share. chart.c runs the drawing
 * (private directory, script, gnuplot, the output put in place);
 * chart_data.c turns the CSV tables of a kind into data files,
 * chart_script.c writes the gnuplot script of a kind, chart_timeline.c
 * does both for a pipeline trace; chart_csv.c and chart_trace.c read the
 * inputs. */
#ifndef COLLX_CHART_INT_H
#define COLLX_CHART_INT_H

#include <stddef.h>
#include <stdio.h>

#include "chart/chart.h"

struct chart_point {
	double x, y;
};

struct chart_series {
	char title[128];
	struct chart_point *pt;
	int n, cap;
};

/* A chart's data: its series (s<i>.dat in dir) or its p2p matrix (m.dat),
 * and what its default title says. */
struct chart_data {
	struct chart_series *s;
	int ns;
	char dir[64];		/* the private directory of the data files */
	int world, hosts;	/* largest seen; 0 unknown */
	char what[32];		/* the dtype, for the title */
	int latency;		/* p2p: latency (us) rather than bandwidth */
	double size;		/* p2p: the message size of the matrix */
	int meshes;		/* predicted, breakdown: the meshes drawn */
};

/* The column name of a kind's table, or -1 with "PATH:1: no column". */
int chart_need_col(const struct chart_table *t, const char *name,
    const char *kind, char *err, size_t errlen);

/* collx-bench plan's charts (chart_plan.c): predicted against measured
 * (--validate's rows) and each mesh's predicted step in its parts. */
int chart_plan_data(struct chart_data *c, enum chart_kind kind,
    const struct chart_table *t, int ntab, char *err, size_t errlen);
void chart_plan_script(FILE *f, enum chart_kind kind,
    const struct chart_data *c, char *title, size_t tlen);

/* The kind a table's columns say, or CHART_GUESS when they say none. */
enum chart_kind chart_guess_kind(const struct chart_table *t);
/* Read the tables of a CSV kind into c and write its data files; -1 with
 * "PATH:LINE: reason" in err. */
int chart_data_read(struct chart_data *c, enum chart_kind kind,
    const struct chart_table *t, int ntab, char *err, size_t errlen);
void chart_data_free(struct chart_data *c);

/* The script's terminal, output TMP and title. */
void chart_script_head(FILE *f, const struct chart_plot *p, const char *tmp,
    const char *title);
/* The script of a CSV kind, whose data c holds; its default title into
 * title. */
void chart_script_body(FILE *f, enum chart_kind kind,
    const struct chart_data *c, char *title, size_t tlen);

/* The timeline of p's trace, of the step p->step says: its boxes in
 * c->dir, the script's part in f, its default title into title, what was
 * drawn into p->drawn; -1 with the reason in err. */
int chart_timeline(struct chart_data *c, FILE *f, struct chart_plot *p,
    char *title, size_t tlen, char *err, size_t errlen);

#endif
