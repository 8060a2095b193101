/* test_chart: collx-plot's readers on good and bad files (the CSV
 * reader's quoting, blank lines and line numbers; a trace's steps) and
 * the pipeline timeline's boxes of one step, against positions worked out
 * here by hand from a two-stage, two-step trace; the output formats. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "chart/chart_int.h"
#include "cli/util.h"
#include "unit.h"

static int
write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	if (f == NULL)
		return -1;
	fputs(text, f);
	return fclose(f);
}

static void
test_csv(void)
{
	char dir[] = "/tmp/test_chart.XXXXXX", p[64], e[COLLX_ERRLEN];
	struct chart_table t;
	double v = 0;

	if (mkdtemp(dir) == NULL) {
		UNIT_OK(0, "mkdtemp");
		return;
	}
	snprintf(p, sizeof p, "%s/a.csv", dir);
	write_file(p, "a,b,c\n1,\"x,\"\"y\",3\n\n4,5,6e2\n");
	UNIT_OK(chart_csv_read(p, &t, e, sizeof e) == 0 && t.ncol == 3 &&
	    t.nrow == 2 && strcmp(t.cells[0][1], "x,\"y") == 0 && t.line[1] == 4,
	    "CSV: quoted field, blank line skipped, line numbers kept");
	UNIT_OK(chart_table_num(&t, 1, 2, &v, e, sizeof e) == 0 && v == 600,
	    "6e2 is 600");
	UNIT_OK(chart_table_num(&t, 0, 1, &v, e, sizeof e) < 0 &&
	    strstr(e, "a.csv:2: column b:") != NULL, "a text field is not a number, at line 2");
	chart_table_free(&t);
	write_file(p, "a,b\n1,2\n3\n");
	UNIT_OK(chart_csv_read(p, &t, e, sizeof e) < 0 &&
	    strstr(e, "a.csv:3: 1 fields, the header has 2") != NULL,
	    "a short row: its line named");
	write_file(p, "");
	UNIT_OK(chart_csv_read(p, &t, e, sizeof e) < 0 && strstr(e, ":1: empty file"),
	    "an empty file");
	write_file(p, "a,b\n\"1,2\n");
	UNIT_OK(chart_csv_read(p, &t, e, sizeof e) < 0 && strstr(e, "unterminated quote"),
	    "an unterminated quote");
	unlink(p);
	rmdir(dir);
}

/* Two stages (tid 0 and 1), two steps, as collx-pipe writes them: the
 * idle before a stage's first span of a step carries that step, though it
 * began in the step before. Times in us. */
static const char trace[] =
    "{\"traceEvents\":[\n"
    "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":0,\"tid\":0},\n"
    "{\"cat\":\"forward\",\"ph\":\"X\",\"pid\":0,\"tid\":0,\"ts\":0,"
    "\"dur\":100,\"args\":{\"step\":0,\"microbatch\":0}},\n"
    "{\"cat\":\"idle\",\"ph\":\"X\",\"pid\":0,\"tid\":0,\"ts\":100,"
    "\"dur\":200,\"args\":{\"step\":0,\"microbatch\":-1}},\n"
    "{\"cat\":\"forward\",\"ph\":\"X\",\"pid\":0,\"tid\":1,\"ts\":100,"
    "\"dur\":100,\"args\":{\"step\":0,\"microbatch\":0}},\n"
    "{\"cat\":\"backward\",\"ph\":\"X\",\"pid\":0,\"tid\":1,\"ts\":200,"
    "\"dur\":100,\"args\":{\"step\":0,\"microbatch\":0}},\n"
    "{\"cat\":\"backward\",\"ph\":\"X\",\"pid\":0,\"tid\":0,\"ts\":300,"
    "\"dur\":100,\"args\":{\"step\":0,\"microbatch\":0}},\n"
    "{\"cat\":\"idle\",\"ph\":\"X\",\"pid\":0,\"tid\":0,\"ts\":400,"
    "\"dur\":600,\"args\":{\"step\":1,\"microbatch\":-1}},\n"
    "{\"cat\":\"forward\",\"ph\":\"X\",\"pid\":0,\"tid\":0,\"ts\":1000,"
    "\"dur\":100,\"args\":{\"step\":1,\"microbatch\":0}},\n"
    "{\"cat\":\"idle\",\"ph\":\"X\",\"pid\":0,\"tid\":1,\"ts\":300,"
    "\"dur\":800,\"args\":{\"step\":1,\"microbatch\":-1}},\n"
    "{\"cat\":\"forward\",\"ph\":\"X\",\"pid\":0,\"tid\":1,\"ts\":1100,"
    "\"dur\":100,\"args\":{\"step\":1,\"microbatch\":0}},\n"
    "{\"cat\":\"backward\",\"ph\":\"X\",\"pid\":0,\"tid\":1,\"ts\":1200,"
    "\"dur\":100,\"args\":{\"step\":1,\"microbatch\":0}},\n"
    "{\"cat\":\"idle\",\"ph\":\"X\",\"pid\":0,\"tid\":0,\"ts\":1100,"
    "\"dur\":200,\"args\":{\"step\":1,\"microbatch\":-1}},\n"
    "{\"cat\":\"backward\",\"ph\":\"X\",\"pid\":0,\"tid\":0,\"ts\":1300,"
    "\"dur\":100,\"args\":{\"step\":1,\"microbatch\":0}}\n"
    "]}\n";

/* The whole of a file, or "" (a static buffer). */
static const char *
read_text(const char *path)
{
	static char buf[4096];
	FILE *f = fopen(path, "r");
	size_t n = 0;

	if (f != NULL) {
		n = fread(buf, 1, sizeof buf - 1, f);
		fclose(f);
	}
	buf[n] = '\0';
	return buf;
}

/* The boxes of kind k (0 forward, 1 backward, 4 idle) in the data files. */
static const char *
boxes(const char *dir, int k)
{
	char p[128];

	snprintf(p, sizeof p, "%s/e%d.dat", dir, k);
	return read_text(p);
}

/* chart_timeline of step s into dir; the script's part into script. */
static int
timeline(const char *dir, const char *path, int s, struct chart_plot *p,
    char *title, char *script, char *e)
{
	struct chart_data c = { 0 };
	char *files[] = { (char *)path }, *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	int rc;

	memset(p, 0, sizeof *p);
	p->files = files;
	p->nfiles = 1;
	p->step = s;
	snprintf(c.dir, sizeof c.dir, "%s", dir);
	rc = chart_timeline(&c, f, p, title, 256, e, COLLX_ERRLEN);
	fclose(f);
	snprintf(script, 4096, "%s", text);
	free(text);
	return rc;
}

/* What the trace reader keeps and refuses, each refusal naming the line:
 * it is lib/tensor's strict JSON reader underneath. */
static void
test_trace_read(void)
{
	static const struct {
		const char *text, *said;
	} bad[] = {
		{ "", "t.json:1: empty file" },
		{ "{\"traceEvents\":[\n{\"ph\":\"X\",\"ts\":1,\n\"dur\":}]}",
		    "t.json:3: expected a value" },
		{ "[\n{\"ph\":\"X\",\"ts\":01,\"dur\":1}]",
		    "t.json:2: bad number" },
		{ "[{\"ph\":\"X\",\"ts\":1,\"dur\":1},\n]",
		    "t.json:2: expected '{'" },
		{ "[{\"ph\":\"X\",\"ts\":1,\"dur\":1}]\n]",
		    "t.json:2: text after the JSON value" },
		{ "[{\"ph\":\"X\",\n\"ts\":1}]",
		    "t.json:2: an \"X\" event without ts and dur" },
		{ "[{\"ph\":\"B\",\"ts\":1}]",
		    "t.json:1: no complete (\"ph\":\"X\") events" },
		{ "{\"traceEvents\":\n[{\"ph\":\"X\",\"name\":\"a\nb\"}]}",
		    "t.json:2: control character in string" },
	};
	char dir[] = "/tmp/test_chart.XXXXXX", path[64], e[COLLX_ERRLEN];
	char want[96];
	struct chart_event *ev;
	int n;
	size_t k;

	if (mkdtemp(dir) == NULL) {
		UNIT_OK(0, "mkdtemp");
		return;
	}
	snprintf(path, sizeof path, "%s/t.json", dir);
	/* An escaped name; args' step, and no step where args has none or
	 * one that is not a count; members of other kinds passed over. */
	write_file(path, "[{\"name\":\"F\\u0031\",\"ph\":\"X\",\"tid\":2,"
	    "\"ts\":1.5,\"dur\":2e1,\"args\":{\"x\":[{}],\"step\":7}},\n"
	    "{\"ph\":\"M\",\"args\":{\"name\":\"stage 0\"}},\n"
	    "{\"ph\":\"X\",\"ts\":0,\"dur\":1,\"args\":{\"step\":-1},"
	    "\"other\":{\"step\":3}},\n"
	    "{\"ph\":\"X\",\"ts\":0,\"dur\":1,\"args\":{\"step\":\"2\"}}]");
	UNIT_OK(chart_trace_read(path, &ev, &n, e, sizeof e) == 0 && n == 3 &&
	    strcmp(ev[0].name, "F1") == 0 && ev[0].tid == 2 &&
	    ev[0].ts == 1.5 && ev[0].dur == 20 && ev[0].step == 7 &&
	    ev[1].step == -1 && ev[2].step == -1,
	    "trace: names unescaped, args' step read, other steps not");
	free(ev);
	for (k = 0; k < sizeof bad / sizeof bad[0]; k++) {
		write_file(path, bad[k].text);
		snprintf(want, sizeof want, "%s/%s", dir, bad[k].said);
		e[0] = '\0';
		UNIT_OK(chart_trace_read(path, &ev, &n, e, sizeof e) < 0 &&
		    strcmp(e, want) == 0, bad[k].said);
		if (strcmp(e, want) != 0)
			fprintf(stderr, "# said: %s\n", e);
	}
	unlink(path);
	rmdir(dir);
}

static void
test_timeline(void)
{
	char dir[] = "/tmp/test_chart.XXXXXX", path[64], e[COLLX_ERRLEN];
	char title[256], script[4096];
	struct chart_event *ev;
	struct chart_plot p;
	int n = 0;

	if (mkdtemp(dir) == NULL) {
		UNIT_OK(0, "mkdtemp");
		return;
	}
	snprintf(path, sizeof path, "%s/t.json", dir);
	write_file(path, trace);
	UNIT_OK(chart_trace_read(path, &ev, &n, e, sizeof e) == 0 && n == 12 &&
	    ev[0].step == 0 && ev[5].step == 1 && ev[11].step == 1 &&
	    strcmp(ev[5].name, "idle") == 0, "the trace's steps are read");
	free(ev);

	/* The last step by default: its work runs from 1000 to 1400 us, so
	 * boxes are at (ts - 1000 + dur / 2) / 1000 ms, half dur wide; the
	 * idle of stage 0 from 400 to 1000 is cut away, that of stage 1
	 * from 300 to 1100 cut to 1000..1100. */
	UNIT_OK(timeline(dir, path, CHART_STEP_LAST, &p, title, script, e) ==
	    0, "the last step is drawn");
	UNIT_OK(strcmp(boxes(dir, 0), "0.050000 0 0.050000 0.38\n"
	    "0.150000 1 0.050000 0.38\n") == 0,
	    "step 1: its two forward boxes, from its start");
	UNIT_OK(strcmp(boxes(dir, 1), "0.250000 1 0.050000 0.38\n"
	    "0.350000 0 0.050000 0.38\n") == 0,
	    "step 1: its two backward boxes");
	UNIT_OK(strcmp(boxes(dir, 4), "0.050000 1 0.050000 0.38\n"
	    "0.200000 0 0.100000 0.38\n") == 0,
	    "step 1: idle cut to the step, the idle before it gone");
	UNIT_OK(strstr(script, "set xrange [0:0.400000]") != NULL,
	    "step 1: the time axis is the step's 0.4 ms");
	UNIT_OK(strcmp(title, "Pipeline timeline, step 1 (steps 0 to 1), "
	    "2 stages") == 0 && strcmp(p.drawn, "step 1: 4 spans in 0.400 ms")
	    == 0, "step 1: the title and -v say which");

	UNIT_OK(timeline(dir, path, 0, &p, title, script, e) == 0 &&
	    strcmp(boxes(dir, 4), "0.200000 0 0.100000 0.38\n") == 0 &&
	    strcmp(boxes(dir, 1), "0.250000 1 0.050000 0.38\n"
	    "0.350000 0 0.050000 0.38\n") == 0,
	    "--step 0: that step's boxes alone");

	UNIT_OK(timeline(dir, path, CHART_STEP_ALL, &p, title, script, e) ==
	    0 && strcmp(boxes(dir, 0), "0.050000 0 0.050000 0.38\n"
	    "0.150000 1 0.050000 0.38\n1.050000 0 0.050000 0.38\n"
	    "1.150000 1 0.050000 0.38\n") == 0 &&
	    strstr(script, "set xrange [0:1.400000]") != NULL &&
	    strcmp(p.drawn, "steps 0 to 1: 8 spans in 1.400 ms") == 0,
	    "--step all: the whole run");

	UNIT_OK(timeline(dir, path, 2, &p, title, script, e) < 0 &&
	    strstr(e, "t.json: no step 2 in the trace (steps 0 to 1)") != NULL,
	    "a step the trace lacks is refused");

	for (int k = 0; k < 6; k++) {
		snprintf(path, sizeof path, "%s/e%d.dat", dir, k);
		unlink(path);
	}
	snprintf(path, sizeof path, "%s/t.json", dir);
	unlink(path);
	rmdir(dir);
}

static void
test_format(void)
{
	char *files[] = { "no-such.csv" }, e[COLLX_ERRLEN];
	struct chart_plot p = { .out = "x.jpg", .files = files, .nfiles = 1,
	    .width = 900, .height = 560 };

	UNIT_OK(chart_format_of("a.png") == CHART_PNG &&
	    chart_format_of("dir.svg/A.PNG") == CHART_PNG &&
	    chart_format_of("b.SVG") == CHART_SVG, ".png and .svg, any case");
	UNIT_OK(chart_format_of("x.jpg") < 0 && chart_format_of("png") < 0 &&
	    chart_format_of(".png") < 0 && chart_format_of("x.png.gz") < 0,
	    "other names: neither");
	UNIT_OK(chart_draw(&p, e, sizeof e) == 2 &&
	    strcmp(e, "x.jpg: want a name ending in .png or .svg") == 0 &&
	    access("x.jpg", F_OK) < 0,
	    "chart_draw refuses to write x.jpg (usage, exit 2), before input");
}

int
main(void)
{
	test_csv();
	test_trace_read();
	test_timeline();
	test_format();
	return unit_done();
}
