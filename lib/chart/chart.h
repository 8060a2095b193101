/* bench_plot: collx-plot's inputs (collx-bench CSV, loss CSV, Chrome
 * trace JSON), read strictly so a bad file is reported with its line, and
 * the gnuplot charts drawn from them. */
#ifndef COLLX_BENCH_PLOT_H
#define COLLX_BENCH_PLOT_H

#include <stddef.h>

/* A CSV file: a header and rows with exactly its column count. */
struct bench_table {
	char *path;
	int ncol, nrow;
	char **cols;
	char ***cells;		/* cells[row][col] */
	int *line;		/* the file line of each row */
};

/* 0, or -1 with "PATH:LINE: reason" in err (empty file, a row with the
 * wrong number of fields, an unterminated quote). */
int bench_csv_read(const char *path, struct bench_table *t, char *err,
    size_t errlen);
void bench_table_free(struct bench_table *t);
/* The column's index, or -1. */
int bench_table_col(const struct bench_table *t, const char *name);
/* Cell (row, col) as a number; -1 with "PATH:LINE: column NAME: ..." */
int bench_table_num(const struct bench_table *t, int row, int col, double *v,
    char *err, size_t errlen);

/* A complete event ("ph":"X") of a Chrome trace; name is its "cat"
 * (forward, backward, send, recv, idle) when it has one, else its "name". */
struct bench_event {
	char name[32];
	double pid, tid;
	double ts, dur;		/* microseconds */
};
/* The "X" events of a trace (an array, or an object with traceEvents);
 * -1 with "PATH:LINE: reason" on malformed JSON or none found. */
int bench_trace_read(const char *path, struct bench_event **ev, int *n,
    char *err, size_t errlen);

enum bench_plot_kind {
	PLOT_GUESS, PLOT_BUSBW, PLOT_LATENCY, PLOT_P2P, PLOT_SCALING,
	PLOT_LOSS, PLOT_PIPELINE
};
int bench_plot_kind_parse(const char *s, enum bench_plot_kind *out);
const char *bench_plot_kind_name(enum bench_plot_kind k);

struct bench_plot {
	enum bench_plot_kind kind;
	const char *out;		/* .png or .svg */
	const char *title;		/* NULL: made from the data */
	int width, height;		/* pixels */
	char **files;
	int nfiles;
};

/* Draw the chart; 0, or an exit code (3 bad input, 1 gnuplot failed)
 * with the reason in err. p->kind is set to the kind drawn. */
int bench_plot_draw(struct bench_plot *p, char *err, size_t errlen);

#endif
