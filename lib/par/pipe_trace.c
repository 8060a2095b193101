/* pipe_trace: a pipeline run's spans, recorded by every stage as it
 * runs, collected by rank 0 on its clock (pipe_clock.c) and written as
 * Chrome trace-event JSON (Perfetto, chrome://tracing): one track (tid)
 * per stage, complete ("X") events for forward, backward, send and recv,
 * and the gaps between them as idle; a TP group's sums nest within the
 * forward or backward that made them. Each stage's track names how far
 * its times may be off rank 0's clock (clock_err_us). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/util.h"
#include "comm/coll.h"
#include "par/pipe.h"
#include "par/pipe_int.h"
#include "tensor/tensor.h"

void
pipe_span(struct pipe_run *r, char kind, int mb, double t0, double t1)
{
	struct pipe_span *sp;

	if (!r->cfg->trace)
		return;
	if (r->nspans == r->capspans) {
		size_t cap = r->capspans ? 2 * r->capspans : 1024;
		struct pipe_span *s = realloc(r->spans, cap * sizeof(*s));
		if (s == NULL)
			return;		/* the trace ends short, training goes on */
		r->spans = s, r->capspans = cap;
	}
	sp = &r->spans[r->nspans++];
	/* Zeroed first: the span goes to rank 0 as bytes, padding included. */
	memset(sp, 0, sizeof(*sp));
	sp->stage = r->rank;
	sp->mb = mb;
	sp->step = (int)r->step;
	sp->kind = kind;
	sp->t0 = t0 - r->origin;
	sp->t1 = t1 - r->origin;
}

/* Rank 0 collects every stage's spans, which each stage first puts on
 * rank 0's clock. */
int
pipe_gather_spans(struct pipe_run *r, struct pipe_result *res)
{
	struct pipe_clock end;
	uint64_t n = r->nspans, i;
	int q;

	if (!r->cfg->trace)
		return 0;
	if (pipe_clock_sample(r, &end) < 0)
		return -1;
	/* Ranks done with their clocks wait for the others: one that went
	 * on to exit would load the machine while they ping. */
	if (coll_barrier(r->c) < 0)
		return pipe_comm_failed(r);
	for (i = 0; i < n; i++) {
		r->spans[i].t0 = pipe_clock_root(&r->clock, &end,
		    r->spans[i].t0);
		r->spans[i].t1 = pipe_clock_root(&r->clock, &end,
		    r->spans[i].t1);
	}
	/* The clock's error travels as one more span, kind 'C' of no step,
	 * that long: the trace writer puts it on the stage's track. */
	pipe_span(r, 'C', -1, r->origin, r->origin +
	    pipe_clock_err(&r->clock, &end));
	if (r->nspans > n)
		r->spans[n].step = -1;
	n = r->nspans;
	comm_set_step(r->c, "gathering the trace");
	if (r->rank != 0) {
		if (comm_send(r->c, 0, PIPE_TAG_SPAN, &n, sizeof(n)) < 0 ||
		    comm_send(r->c, 0, PIPE_TAG_SPAN, r->spans,
		    n * sizeof(*r->spans)) < 0)
			return pipe_comm_failed(r);
		return 0;
	}
	res->spans = r->spans, res->nspans = r->nspans;
	r->spans = NULL;
	for (q = 1; q < r->world; q++) {
		struct pipe_span *s;
		if (comm_recv(r->c, q, PIPE_TAG_SPAN, &n, sizeof(n)) < 0)
			return pipe_comm_failed(r);
		s = realloc(res->spans, (res->nspans + n + 1) * sizeof(*s));
		if (s == NULL)
			return pipe_oom(r);
		res->spans = s;
		if (comm_recv(r->c, q, PIPE_TAG_SPAN, s + res->nspans,
		    n * sizeof(*s)) < 0)
			return pipe_comm_failed(r);
		res->nspans += n;
	}
	return 0;
}

static const char *
kind_name(char k)
{
	switch (k) {
	case 'F': return "forward";
	case 'B': return "backward";
	case 'W': return "weight";	/* a split backward's weight part */
	case 'S': return "send";
	case 'R': return "recv";
	case 'A': return "allreduce";	/* over the stage's replicas */
	case 'T': return "tp-allreduce";	/* within F or B, over its TP
						 * group */
	case 'G': return "gather";	/* ZeRO-3's, on its own thread, */
	case 'Z': return "reduce-scatter";	/* beside F and B */
	case 'O': return "allreduce-runon";	/* the DP sums beside the
						 * next step's forward */
	default: return "idle";
	}
}

/* Times in whole nanoseconds, printed as microseconds with three
 * decimals, so a span ends exactly where the next begins. */
static void
event(FILE *f, int stage, char kind, int mb, int chunk, int step,
    long long t0, long long t1)
{
	char name[32];

	if (kind == 'I')
		snprintf(name, sizeof(name), "idle");
	else if (mb < 0)
		snprintf(name, sizeof(name), "%s", kind_name(kind));
	else if (chunk >= 0)	/* interleaved: F3:1, chunk 1's */
		snprintf(name, sizeof(name), "%c%d:%d", kind, mb, chunk);
	else
		snprintf(name, sizeof(name), "%c%d", kind, mb);
	fprintf(f, ",\n{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":0,"
	    "\"tid\":%d,\"ts\":%lld.%03lld,\"dur\":%lld.%03lld,"
	    "\"args\":{\"step\":%d,\"microbatch\":%d}}", name, kind_name(kind),
	    stage, t0 / 1000, t0 % 1000, (t1 - t0) / 1000, (t1 - t0) % 1000,
	    step, mb);
}

static int
by_stage_time(const void *a, const void *b)
{
	const struct pipe_span *x = a, *y = b;

	if (x->stage != y->stage)
		return x->stage < y->stage ? -1 : 1;
	return x->t0 < y->t0 ? -1 : x->t0 > y->t0;
}

int
pipe_trace_write(const char *path, const struct pipe_result *res, int world,
    char *err, size_t errlen)
{
	struct pipe_span *s;
	double *clock_err;
	char *buf = NULL;
	size_t len = 0, i, n = 0;
	long long prev = 0;
	FILE *f = NULL;
	int j, rc;

	s = malloc((res->nspans + 1) * sizeof(*s));
	clock_err = calloc((size_t)world + 1, sizeof(*clock_err));
	if (s == NULL || clock_err == NULL ||
	    (f = open_memstream(&buf, &len)) == NULL) {
		free(s);
		free(clock_err);
		return cli_fail(err, errlen, "out of memory for the trace");
	}
	for (i = 0; i < res->nspans; i++)
		if (res->spans[i].kind != 'C')
			s[n++] = res->spans[i];
		else if (res->spans[i].stage >= 0 && res->spans[i].stage < world)
			clock_err[res->spans[i].stage] = res->spans[i].t1 -
			    res->spans[i].t0;
	qsort(s, n, sizeof(*s), by_stage_time);
	fprintf(f, "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n"
	    "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":0,\"tid\":0,"
	    "\"args\":{\"name\":\"collx-pipe\"}}");
	/* how far the stage's times may be off rank 0's clock */
	for (j = 0; j < world; j++)
		fprintf(f, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":0,"
		    "\"tid\":%d,\"args\":{\"name\":\"stage %d\","
		    "\"clock_err_us\":%.3f}}", j, j, clock_err[j] * 1e6);
	free(clock_err);
	for (i = 0; i < n; i++) {
		long long t0 = (long long)(s[i].t0 * 1e9 + 0.5);
		long long t1 = (long long)(s[i].t1 * 1e9 + 0.5);

		/* A stage's first span, put on rank 0's clock, could come
		 * out a hair before rank 0's origin (the clock is known to
		 * half a round trip); event() prints no negative times. */
		if (t0 < 0)
			t0 = 0;
		if (strchr("TGZO", s[i].kind) != NULL) {	/* nested or
							 * beside: no gap,
							 * no idle */
			event(f, s[i].stage, s[i].kind, -1, -1, s[i].step, t0,
			    t1 > t0 ? t1 : t0);
			continue;
		}
		if (i == 0 || s[i].stage != s[i - 1].stage)
			prev = t0;
		if (t0 < prev + 1000)
			t0 = prev;	/* gaps under 1 us, rounding: no idle */
		if (t1 < t0)
			t1 = t0;
		if (t0 >= prev + 1000 && i > 0 && s[i].stage == s[i - 1].stage)
			event(f, s[i].stage, 'I', -1, -1, s[i].step, prev, t0);
		event(f, s[i].stage, s[i].kind, s[i].mb, s[i].chunk, s[i].step,
		    t0, t1);
		prev = t1;
	}
	fprintf(f, "\n]}\n");
	fclose(f);
	free(s);
	rc = tensor_write_file(path, buf, len, err, errlen);
	free(buf);
	return rc;
}
