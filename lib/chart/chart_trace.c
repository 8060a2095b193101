/* chart_trace: the complete ("X") events of a Chrome trace, as
 * collx-pipe --trace writes it, read by lib/tensor's JSON reader, whose
 * messages name the file and line. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chart/chart_int.h"
#include "cli/cli.h"
#include "tensor/json.h"

struct trace {
	struct chart_event *ev;
	int n, cap;
	char *process;		/* the process_name metadata's, or NULL */
	size_t plen;
};

/* An event as its members are read: what it keeps, and what says whether
 * and how it is kept. */
struct trace_event {
	struct chart_event e;
	char ph[8], cat[32];
	char arg_name[32];	/* "args":{"name":...}, a metadata event's */
	int have;		/* 1 ts, 2 dur */
};

/* A string value into buf (truncated to len); a value of another kind is
 * passed over. */
static int
trace_string(struct tensor_json *j, char *buf, size_t len)
{
	if (tensor_json_peek(j) != '"')
		return tensor_json_skip(j);
	return tensor_json_strbuf(j, buf, len);
}

/* A number value into *v, bit set in *have; a value of another kind is
 * passed over. */
static int
trace_number(struct tensor_json *j, double *v, int *have, int bit)
{
	int c = tensor_json_peek(j);

	if (c != '-' && (c < '0' || c > '9'))
		return tensor_json_skip(j);
	*have |= bit;
	return tensor_json_number(j, v);
}

/* A member of an event's "args": "step", when a number in int's range,
 * says its step. */
static int
trace_arg(struct tensor_json *j, const char *key, void *arg)
{
	struct trace_event *t = arg;
	struct chart_event *e = &t->e;
	double step;
	int have = 0;

	if (strcmp(key, "name") == 0)
		return trace_string(j, t->arg_name, sizeof t->arg_name);
	if (strcmp(key, "step") != 0)
		return tensor_json_skip(j);
	if (trace_number(j, &step, &have, 1) < 0)
		return -1;
	if (have && step >= 0 && step < INT_MAX)
		e->step = (int)step;
	return 0;
}

static int
trace_event_member(struct tensor_json *j, const char *key, void *arg)
{
	struct trace_event *t = arg;

	if (strcmp(key, "ph") == 0)
		return trace_string(j, t->ph, sizeof t->ph);
	if (strcmp(key, "name") == 0)
		return trace_string(j, t->e.name, sizeof t->e.name);
	if (strcmp(key, "cat") == 0)
		return trace_string(j, t->cat, sizeof t->cat);
	if (strcmp(key, "pid") == 0)
		return trace_number(j, &t->e.pid, &t->have, 0);
	if (strcmp(key, "tid") == 0)
		return trace_number(j, &t->e.tid, &t->have, 0);
	if (strcmp(key, "ts") == 0)
		return trace_number(j, &t->e.ts, &t->have, 1);
	if (strcmp(key, "dur") == 0)
		return trace_number(j, &t->e.dur, &t->have, 2);
	if (strcmp(key, "args") == 0 && tensor_json_peek(j) == '{')
		return tensor_json_object(j, trace_arg, t);
	return tensor_json_skip(j);
}

/* One event object; a complete ("X") one is kept. */
static int
trace_event(struct tensor_json *j, void *arg)
{
	struct trace *t = arg;
	struct trace_event ev = { .e = { .step = -1 } };

	if (tensor_json_object(j, trace_event_member, &ev) < 0)
		return -1;
	/* the program that wrote it, which says what a track is */
	if (strcmp(ev.ph, "M") == 0 && strcmp(ev.e.name, "process_name") ==
	    0 && t->process != NULL)
		snprintf(t->process, t->plen, "%s", ev.arg_name);
	if (strcmp(ev.ph, "X") != 0)
		return 0;
	if (ev.have != 3)
		return tensor_json_fail(j, "an \"X\" event without ts and dur");
	/* The category says the kind (collx-pipe names spans F3, B3). */
	if (ev.cat[0] != '\0')
		snprintf(ev.e.name, sizeof ev.e.name, "%s", ev.cat);
	if (t->n == t->cap) {
		t->cap = t->cap ? 2 * t->cap : 256;
		t->ev = cli_reallocarray(t->ev, (size_t)t->cap, sizeof *t->ev);
	}
	t->ev[t->n++] = ev.e;
	return 0;
}

/* The array of events. */
static int
trace_events(struct tensor_json *j, struct trace *t)
{
	return tensor_json_array(j, trace_event, t);
}

/* A member of the object form: traceEvents, or one a chart does not use. */
static int
trace_top_member(struct tensor_json *j, const char *key, void *arg)
{
	if (strcmp(key, "traceEvents") == 0)
		return trace_events(j, arg);
	return tensor_json_skip(j);
}

int
chart_trace_read(const char *path, struct chart_event **ev, int *n, char *err,
    size_t errlen)
{
	return chart_trace_read_named(path, ev, n, NULL, 0, err, errlen);
}

int
chart_trace_read_named(const char *path, struct chart_event **ev, int *n,
    char *process, size_t plen, char *err, size_t errlen)
{
	size_t len;
	char *buf = cli_slurp(path, &len, err, errlen);
	struct trace t = { .process = process, .plen = plen };
	struct tensor_json j;
	int rc;

	*ev = NULL;
	*n = 0;
	if (buf == NULL)
		return -1;
	tensor_json_init(&j, buf, len, path, err, errlen);
	if (tensor_json_peek(&j) < 0)
		rc = tensor_json_fail(&j, "empty file");
	else if (tensor_json_peek(&j) == '[')
		rc = trace_events(&j, &t);
	else
		rc = tensor_json_object(&j, trace_top_member, &t);
	if (rc == 0)
		rc = tensor_json_end(&j);
	if (rc == 0 && t.n == 0)	/* the whole file, so line 1 */
		rc = cli_fail(err, errlen,
		    "%s:1: no complete (\"ph\":\"X\") events", path);
	if (rc == 0) {
		*ev = t.ev;
		*n = t.n;
		t.ev = NULL;
	}
	free(t.ev);
	free(buf);
	return rc;
}
