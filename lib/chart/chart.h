/* chart: collx-plot's charts. Its inputs (collx-bench CSV, loss CSV,
 * Chrome trace JSON) are read strictly, so a bad file is reported with
 * its line (chart_csv.c, chart_trace.c), and drawn by gnuplot (chart.c,
 * with chart_data.c, chart_script.c and chart_timeline.c). */
#ifndef COLLX_CHART_H
#define COLLX_CHART_H

#include <stddef.h>

/* A CSV file: a header and rows with exactly its column count. */
struct chart_table {
	char *path;
	int ncol, nrow;
	char **cols;
	char ***cells;		/* cells[row][col] */
	int *line;		/* the file line of each row */
};

/* 0, or -1 with "PATH:LINE: reason" in err (empty file, a row with the
 * wrong number of fields, an unterminated quote). */
int chart_csv_read(const char *path, struct chart_table *t, char *err,
    size_t errlen);
void chart_table_free(struct chart_table *t);
/* The column's index, or -1. */
int chart_table_col(const struct chart_table *t, const char *name);
/* Cell (row, col) as a number; -1 with "PATH:LINE: column NAME: ..." */
int chart_table_num(const struct chart_table *t, int row, int col, double *v,
    char *err, size_t errlen);

/* A complete event ("ph":"X") of a Chrome trace; name is its "cat"
 * (forward, backward, send, recv, idle) when it has one, else its "name". */
struct chart_event {
	char name[32];
	double pid, tid;
	double ts, dur;		/* microseconds */
	int step;		/* its "args":{"step":N}, or -1 */
};
/* The "X" events of a trace (an array, or an object with traceEvents);
 * -1 with "PATH:LINE: reason" on malformed JSON or none found. */
int chart_trace_read(const char *path, struct chart_event **ev, int *n,
    char *err, size_t errlen);
/* The same, with the process_name metadata's name (collx-pipe,
 * collx-tp; "" without one) into process (plen bytes). */
int chart_trace_read_named(const char *path, struct chart_event **ev, int *n,
    char *process, size_t plen, char *err, size_t errlen);

enum chart_kind {
	CHART_GUESS, CHART_BUSBW, CHART_LATENCY, CHART_P2P, CHART_SCALING,
	CHART_LOSS, CHART_PIPELINE, CHART_LOSS_BYTES, CHART_MESH,
	CHART_PREDICTED, CHART_BREAKDOWN, CHART_EXPERTS
};
int chart_kind_parse(const char *s, enum chart_kind *out);
const char *chart_kind_name(enum chart_kind k);

/* What an output's name ends in, in any case: .png or .svg; -1 for any
 * other name (gnuplot would write a PNG under it). */
enum chart_format { CHART_PNG, CHART_SVG };
int chart_format_of(const char *path);

/* A pipeline chart's step besides a step number (from 0, as the trace's
 * args.step): the trace's last, or the whole run. */
#define CHART_STEP_LAST	(-1)
#define CHART_STEP_ALL	(-2)

struct chart_plot {
	enum chart_kind kind;
	const char *out;		/* its name ends in .png or .svg */
	const char *title;		/* NULL: made from the data */
	int width, height;		/* pixels */
	char **files;
	int nfiles;
	int step;			/* pipeline: the step to draw */
	char drawn[96];			/* set: what of the data was drawn
					 * ("step 2: 40 spans in 1.2 ms") */
};

/* Draw the chart; 0, or an exit code (3 bad input, 2 an output neither
 * .png nor .svg or a --step for a CSV chart, 1 gnuplot failed) with the
 * reason in err. p->kind is set to the kind drawn, p->drawn for a
 * pipeline. */
int chart_draw(struct chart_plot *p, char *err, size_t errlen);

#endif
