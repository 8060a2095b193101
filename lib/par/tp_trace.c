/* tp_trace: collx-tp's trace: every rank's spans (tp_log_trace) sent to
 * rank 0 and written as Chrome trace-event JSON, the format collx-pipe
 * writes and collx-plot's timeline draws: two tracks per rank, its
 * compute and its transfers (a ring step's transfer beside the attention
 * it hides behind), complete ("X") events whose category is forward,
 * backward or send. The ranks' times count from a barrier each passed
 * (tp_log_trace), so they agree to within its skew. */
#include <stdio.h>
#include <stdlib.h>

#include "cli/util.h"
#include "comm/coll.h"
#include "par/tp.h"
#include "tensor/tensor.h"

enum { TAG_TRACE = 0x7472 };

static const char *
kind_name(char k)
{
	return k == 'F' ? "forward" : k == 'B' ? "backward" : k == 'S' ?
	    "send" : "other";
}

static void
events(FILE *f, const struct tp_span *s, size_t n, int rank)
{
	for (size_t i = 0; i < n; i++) {
		long long t0 = (long long)(s[i].t0 * 1e9 + 0.5);
		long long d = (long long)((s[i].t1 - s[i].t0) * 1e9 + 0.5);

		if (t0 < 0)
			t0 = 0;
		if (d < 0)
			d = 0;
		fprintf(f, ",\n{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\","
		    "\"pid\":0,\"tid\":%d,\"ts\":%lld.%03lld,"
		    "\"dur\":%lld.%03lld}", s[i].name, kind_name(s[i].kind),
		    2 * rank + s[i].lane, t0 / 1000, t0 % 1000, d / 1000,
		    d % 1000);
	}
}

int
tp_trace_write(const char *path, const struct tp_log *l, struct comm *c,
    char *err, size_t errlen)
{
	int world = c ? comm_size(c) : 1, rank = c ? comm_rank(c) : 0, rc;
	uint64_t n = l->nspans;
	struct tp_span *s = NULL;
	char *buf = NULL;
	size_t len = 0;
	FILE *f;

	if (c && coll_barrier(c) < 0)
		return cli_fail(err, errlen, "%s", comm_error(c));
	if (rank != 0) {
		if (comm_send(c, 0, TAG_TRACE, &n, sizeof(n)) < 0 ||
		    comm_send(c, 0, TAG_TRACE, l->spans, n * sizeof(*s)) < 0)
			return cli_fail(err, errlen, "%s", comm_error(c));
		return 0;
	}
	if ((f = open_memstream(&buf, &len)) == NULL)
		return cli_fail(err, errlen, "out of memory for the trace");
	fprintf(f, "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n"
	    "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":0,\"tid\":0,"
	    "\"args\":{\"name\":\"collx-tp\"}}");
	for (int r = 0; r < world; r++)
		for (int lane = 0; lane < 2; lane++)
			fprintf(f, ",\n{\"name\":\"thread_name\",\"ph\":\"M\","
			    "\"pid\":0,\"tid\":%d,\"args\":{\"name\":\"rank %d "
			    "%s\"}}", 2 * r + lane, r,
			    lane ? "transfers" : "compute");
	events(f, l->spans, l->nspans, 0);
	rc = 0;
	for (int r = 1; r < world && rc == 0; r++) {
		if (comm_recv(c, r, TAG_TRACE, &n, sizeof(n)) < 0 ||
		    (s = realloc(s, (n ? n : 1) * sizeof(*s))) == NULL ||
		    comm_recv(c, r, TAG_TRACE, s, n * sizeof(*s)) < 0)
			rc = s ? cli_fail(err, errlen, "%s", comm_error(c)) :
			    cli_fail(err, errlen, "out of memory for the trace");
		else
			events(f, s, n, r);
	}
	fprintf(f, "\n]}\n");
	fclose(f);
	free(s);
	if (rc == 0)
		rc = tensor_write_file(path, buf, len, err, errlen);
	free(buf);
	return rc;
}
