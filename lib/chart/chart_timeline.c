/* chart_timeline: a pipeline trace (collx-pipe --trace) as a timeline: a
 * row per stage, a box per span coloured by its kind (forward, backward,
 * send, recv, idle, and weight: a split backward's weight part, which
 * zero-bubble schedules defer into the bubble; ZeRO-3's gathers and
 * reduce-scatters as thin boxes low in the row, as they run beside the
 * passes), time in ms from the first span. One step is drawn,
 * the last by default: the hundreds of spans of a whole run are slivers
 * in which the schedule cannot be seen. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chart/chart_int.h"
#include "cli/cli.h"

static const struct {
	const char *name, *color;
} span_kinds[] = {
	{ "forward", "#4C72B0" }, { "backward", "#DD8452" },
	{ "send", "#55A868" }, { "recv", "#C44E52" }, { "idle", "#BBBBBB" },
	{ "weight", "#E5AE38" },
	/* ZeRO-3's communication thread, beside the passes: low in the row */
	{ "gather", "#64B5CD" }, { "reduce-scatter", "#937860" },
	/* collx-train's DP sums beside the next step's forward, as low */
	{ "allreduce-runon", "#8C8C8C" },
};
#define NKINDS	(sizeof span_kinds / sizeof span_kinds[0])
#define OTHER	NKINDS		/* the box file of unknown kinds */
#define BESIDE(k)	((k) < NKINDS && (strcmp(span_kinds[k].name, "gather") \
	== 0 || strcmp(span_kinds[k].name, "reduce-scatter") == 0 || \
	strcmp(span_kinds[k].name, "allreduce-runon") == 0))

/* A stage is a (pid, tid) pair, in order of pid then tid. */
static double
stage_key(const struct chart_event *e)
{
	return e->pid * 65536 + e->tid;
}

static int
cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* The stages' keys, sorted and each once; their count. */
static int
stage_keys(const struct chart_event *ev, int n, double **keys)
{
	double *k = cli_calloc((size_t)n, sizeof *k);
	int nk = 0;

	for (int i = 0; i < n; i++)
		k[i] = stage_key(&ev[i]);
	qsort(k, (size_t)n, sizeof *k, cmp_double);
	for (int i = 0; i < n; i++)
		if (nk == 0 || k[i] != k[nk - 1])
			k[nk++] = k[i];
	*keys = k;
	return nk;
}

static size_t
kind_index(const char *name)
{
	for (size_t q = 0; q < NKINDS; q++)
		if (strcmp(name, span_kinds[q].name) == 0)
			return q;
	return OTHER;
}

/* Boxes per kind in DIR/e<k>.dat: x y dx dy (ms; stage rows), from t0;
 * used[k] says which files have any. */
static int
write_boxes(const struct chart_data *c, const struct chart_event *ev, int n,
    const double *keys, int nk, double t0, int *used, char *err,
    size_t errlen)
{
	FILE *f[NKINDS + 1];
	char p[128];
	int rc = 0;

	for (size_t k = 0; k <= NKINDS; k++) {
		snprintf(p, sizeof p, "%s/e%zu.dat", c->dir, k);
		if ((f[k] = fopen(p, "w")) == NULL) {
			cli_fail(err, errlen, "%s: %s", p, strerror(errno));
			while (k-- > 0)
				fclose(f[k]);
			return -1;
		}
	}
	for (int i = 0; i < n; i++) {
		double key = stage_key(&ev[i]);
		const double *row = bsearch(&key, keys, (size_t)nk,
		    sizeof *keys, cmp_double);
		size_t k = kind_index(ev[i].name);

		double x = (ev[i].ts - t0 + ev[i].dur / 2) / 1e3;
		int y = (int)(row - keys);

		used[k] = 1;
		if (BESIDE(k))
			fprintf(f[k], "%.6f %.2f %.6f 0.08\n", x, y + 0.3,
			    ev[i].dur / 2e3);
		else
			fprintf(f[k], "%.6f %d %.6f 0.38\n", x, y,
			    ev[i].dur / 2e3);
	}
	for (size_t k = 0; k <= NKINDS; k++)
		if (fclose(f[k]) != 0 && rc == 0) {
			snprintf(p, sizeof p, "%s/e%zu.dat", c->dir, k);
			rc = cli_fail(err, errlen, "%s: %s", p,
			    strerror(errno));
		}
	return rc;
}

/* tp: collx-tp's trace, two tracks per rank (compute, transfers), not
 * one per pipeline stage. */
static void
script(FILE *f, const struct chart_data *c, int nk, double ms,
    const int *used, int tp)
{
	int first = 1;

	fprintf(f, "set xlabel 'time (ms)'\nset ylabel '%s'\n"
	    "set yrange [%d.5:-0.5]\nset ytics 1\nset xrange [0:%.6f]\n"
	    "set style fill solid 0.9 border rgb '#333333'\n"
	    "set key outside right top\nplot ", tp ? "rank: compute, "
	    "transfers" : "pipeline stage", nk - 1, ms);
	for (size_t k = 0; k <= NKINDS; k++) {
		if (!used[k])
			continue;
		fprintf(f, "%s'%s/e%zu.dat' using 1:2:3:4 with boxxyerror "
		    "lc rgb '%s' title '%s'", first ? "" : ", \\\n     ",
		    c->dir, k, k < NKINDS ? span_kinds[k].color : "#8172B2",
		    k < NKINDS ? span_kinds[k].name : "other");
		first = 0;
	}
	fputc('\n', f);
}

static int
is_idle(const struct chart_event *e)
{
	return strcmp(e->name, "idle") == 0;
}

/* The lowest and highest step the trace marks; -1 when it marks none. */
static int
step_range(const struct chart_event *ev, int n, int *lo, int *hi)
{
	*lo = INT_MAX;
	*hi = -1;
	for (int i = 0; i < n; i++)
		if (ev[i].step >= 0) {
			*lo = ev[i].step < *lo ? ev[i].step : *lo;
			*hi = ev[i].step > *hi ? ev[i].step : *hi;
		}
	return *hi < 0 ? -1 : 0;
}

/* The spans of step s moved to the front of ev, clipped to the time from
 * its first span other than idle to its last (a stage's idle before its
 * first span began in the step before); their count. */
static int
keep_step(struct chart_event *ev, int n, int s)
{
	double t0 = INFINITY, t1 = -INFINITY, a, b;
	int m = 0;

	for (int i = 0; i < n; i++)
		if (ev[i].step == s && !is_idle(&ev[i])) {
			t0 = fmin(t0, ev[i].ts);
			t1 = fmax(t1, ev[i].ts + ev[i].dur);
		}
	for (int i = 0; i < n; i++) {
		a = fmax(ev[i].ts, t0);
		b = fmin(ev[i].ts + ev[i].dur, t1);
		if (ev[i].step != s || b < a || (b == a && is_idle(&ev[i])))
			continue;
		ev[m] = ev[i];
		ev[m].ts = a;
		ev[m++].dur = b - a;
	}
	return m;
}

/* Narrow the spans to the step p asks for (the last by default); the
 * steps drawn, in words, into what, and how the title says them into
 * tw. */
static int
select_step(struct chart_plot *p, struct chart_event *ev, int *n,
    char *what, size_t wlen, char *tw, size_t twlen, char *err,
    size_t errlen)
{
	int lo, hi, s = p->step;

	tw[0] = '\0';
	if (step_range(ev, *n, &lo, &hi) < 0) {
		if (s >= 0)
			return cli_fail(err, errlen, "%s: the trace marks no "
			    "steps (args.step); --step all draws it whole",
			    p->files[0]);
		snprintf(what, wlen, "the whole trace");
		return 0;
	}
	if (s == CHART_STEP_ALL) {
		snprintf(what, wlen, "steps %d to %d", lo, hi);
		snprintf(tw, twlen, ", %s", what);
		return 0;
	}
	if (s == CHART_STEP_LAST)
		s = hi;
	if ((*n = keep_step(ev, *n, s)) == 0)
		return cli_fail(err, errlen, "%s: no step %d in the trace "
		    "(steps %d to %d)", p->files[0], s, lo, hi);
	snprintf(what, wlen, "step %d", s);
	snprintf(tw, twlen, ", step %d (steps %d to %d)", s, lo, hi);
	return 0;
}

int
chart_timeline(struct chart_data *c, FILE *f, struct chart_plot *p,
    char *title, size_t tlen, char *err, size_t errlen)
{
	struct chart_event *ev;
	double *keys = NULL, t0 = INFINITY, t1 = -INFINITY;
	int n, nk, work = 0, used[NKINDS + 1] = { 0 }, rc = -1, tp;
	char what[48], tw[64], proc[32] = "";

	if (chart_trace_read_named(p->files[0], &ev, &n, proc, sizeof proc,
	    err, errlen) < 0)
		return -1;
	tp = strcmp(proc, "collx-tp") == 0;
	if (select_step(p, ev, &n, what, sizeof what, tw, sizeof tw, err,
	    errlen) < 0)
		goto out;
	for (int i = 0; i < n; i++) {
		t0 = fmin(t0, ev[i].ts);
		t1 = fmax(t1, ev[i].ts + ev[i].dur);
		work += !is_idle(&ev[i]);
	}
	nk = stage_keys(ev, n, &keys);
	if ((rc = write_boxes(c, ev, n, keys, nk, t0, used, err, errlen)) < 0)
		goto out;
	c->world = nk;
	if (tp)
		snprintf(title, tlen, "collx-tp timeline%s, %d track%s", tw,
		    nk, nk == 1 ? "" : "s");
	else
		snprintf(title, tlen, "Pipeline timeline%s, %d stage%s", tw,
		    nk, nk == 1 ? "" : "s");
	snprintf(p->drawn, sizeof p->drawn, "%s: %d spans in %.3f ms", what,
	    work, (t1 - t0) / 1e3);
	script(f, c, nk, (t1 - t0) / 1e3, used, tp);
out:
	free(keys);
	free(ev);
	return rc;
}
