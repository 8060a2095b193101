/* bench_out: how collx-bench shows its rows — an aligned table with an
 * average-busbw footer for a person at a terminal, the timing CSV of
 * collx(7) TIMING CSV (plus the statistics' columns) for everything else. */
#include <stdio.h>
#include <string.h>

#include "bench/bench.h"

#define COLL_EXTRA "place,redop,min_s,max_s,p99_s,wrong,hosts"
#define P2P_EXTRA "src,dst,min_s,max_s,p99_s,hosts,transport"

int
bench_out_open(struct bench_out *o, const char *extra, char *err,
    size_t errlen)
{
	if (cli_timing_open(&o->timing, o->csv ? "-" : NULL, extra, err,
	    errlen) < 0 ||
	    cli_timing_open(&o->ftiming, o->file, extra, err, errlen) < 0) {
		bench_out_close(o, NULL, 0);
		return -1;
	}
	return 0;
}

int
bench_out_row(struct bench_out *o, const struct cli_timing_row *r, char *err,
    size_t errlen)
{
	if (cli_timing_write(o->timing, r, err, errlen) < 0 ||
	    cli_timing_write(o->ftiming, r, err, errlen) < 0)
		return -1;
	return 0;
}

int
bench_out_close(struct bench_out *o, char *err, size_t errlen)
{
	int rc = cli_timing_close(o->timing, err, errlen);

	if (cli_timing_close(o->ftiming, err, errlen) < 0)
		rc = -1;
	o->timing = o->ftiming = NULL;
	return rc;
}

static const char *
plural(int n, const char *word, char *buf, size_t len)
{
	snprintf(buf, len, "%d %s%s", n, word, n == 1 ? "" : "s");
	return buf;
}

int
bench_coll_begin(struct bench_out *o, const struct bench_coll *b, int world,
    char *err, size_t errlen)
{
	char w[32], h[32];

	o->rows = 0;
	o->busbw_sum = 0;
	if (bench_out_open(o, b->cost ? COLL_EXTRA ",expected_us,eff" :
	    COLL_EXTRA, err, errlen) < 0)
		return -1;
	if (o->csv)
		return 0;
	printf("# collx-bench coll: %s, %s, op %s, %s on %s\n",
	    bench_kind_name(b->kind), dtype_name(b->dt), coll_op_name(b->op),
	    plural(world, "rank", w, sizeof w), plural(b->hosts, "host", h, sizeof h));
	if (b->seconds > 0)
		printf("# about %g s per size after %d warm-up iterations", b->seconds,
		    b->warmup);
	else
		printf("# %d iterations after %d warm-up", b->iters, b->warmup);
	printf("; times: the slowest rank's, per iteration; GB/s = 1e9 B/s\n#\n");
	printf("%12s %12s %5s %5s %13s %5s %10s %10s %10s %10s %8s %8s %7s%s\n",
	    "size", "count", "type", "redop", "algo", "place", "time_us",
	    "min_us", "max_us", "p99_us", "algbw", "busbw", "#wrong",
	    b->cost ? " expected_us    eff" : "");
	printf("%12s %12s %5s %5s %13s %5s %10s %10s %10s %10s %8s %8s %7s%s\n",
	    "(B)", "(elements)", "", "", "", "", "(median)", "", "", "",
	    "(GB/s)", "(GB/s)", "", b->cost ? "     (model)       " : "");
	fflush(stdout);
	return 0;
}

/* --cost's columns: the model's time and the measured busbw over the
 * model's (its time over the measured); empty where it has no form. */
static const char *
cost_cols(const struct bench_coll *b, const struct bench_coll_row *r,
    int csv, char *buf, size_t len)
{
	if (b->cost == NULL)
		return "";
	if (r->expected <= 0 || r->st.med <= 0)
		snprintf(buf, len, csv ? ",," : " %11s %6s", "-", "-");
	else
		snprintf(buf, len, csv ? ",%.4g,%.4f" : " %11.1f %6.2f",
		    r->expected * 1e6, r->expected / r->st.med);
	return buf;
}

int
bench_coll_print(struct bench_out *o, const struct bench_coll *b, int world,
    const struct bench_coll_row *r, char *err, size_t errlen)
{
	char extra[320], wrong[32], cols[64];

	o->rows++;
	o->busbw_sum += r->busbw;
	if (r->wrong >= 0)
		snprintf(wrong, sizeof wrong, "%ld", r->wrong);
	else
		snprintf(wrong, sizeof wrong, "%s", o->csv ? "" : "N/A");
	{
		struct cli_timing_row row = {
			.program = "collx-bench", .op = bench_kind_name(b->kind),
			.algo = coll_algo_name(r->algo), .rank = 0, .world = world,
			.dtype = dtype_name(b->dt), .count = r->count,
			.bytes = r->bytes, .iter = r->iters, .seconds = r->st.med,
			.extra = extra
		};

		snprintf(extra, sizeof extra, "%s,%s,%.9g,%.9g,%.9g,%s,%d%s",
		    r->inplace ? "in" : "out", coll_op_name(b->op), r->st.min,
		    r->st.max, r->st.p99, r->wrong >= 0 ? wrong : "", b->hosts,
		    cost_cols(b, r, 1, cols, sizeof cols));
		if (bench_out_row(o, &row, err, errlen) < 0)
			return -1;
		if (o->csv)
			return 0;
	}
	printf("%12zu %12zu %5s %5s %13s %5s %10.1f %10.1f %10.1f %10.1f %8.3f "
	    "%8.3f %7s", r->bytes, r->count, dtype_name(b->dt),
	    coll_op_name(b->op), coll_algo_name(r->algo), r->inplace ? "in" : "out",
	    r->st.med * 1e6, r->st.min * 1e6, r->st.max * 1e6, r->st.p99 * 1e6,
	    r->algbw, r->busbw, wrong);
	if (b->cost)
		printf("%s", cost_cols(b, r, 0, cols, sizeof cols));
	putchar('\n');
	fflush(stdout);
	return 0;
}

int
bench_coll_end(struct bench_out *o, int interrupted, char *err, size_t errlen)
{
	if (bench_out_close(o, err, errlen) < 0)
		return -1;
	if (o->csv)
		return 0;
	if (interrupted)
		printf("# interrupted after %d rows\n", o->rows);
	printf("# Avg bus bandwidth    : %.3f GB/s\n",
	    o->rows ? o->busbw_sum / o->rows : 0);
	fflush(stdout);
	return 0;
}

const char *
bench_p2p_name(enum bench_p2p_test t)
{
	return t == BENCH_LATENCY ? "latency" : t == BENCH_BW ? "bw" : "bibw";
}

int
bench_p2p_begin(struct bench_out *o, const struct bench_p2p *p, int world,
    char *err, size_t errlen)
{
	char w[32], h[32];

	o->rows = 0;
	if (bench_out_open(o, P2P_EXTRA, err, errlen) < 0)
		return -1;
	if (o->csv)
		return 0;
	printf("# collx-bench p2p %s: %s on %s, %d iterations after %d warm-up",
	    bench_p2p_name(p->test), plural(world, "rank", w, sizeof w),
	    plural(p->hosts, "host", h, sizeof h), p->iters, p->warmup);
	if (p->test != BENCH_LATENCY)
		printf(", window %d", p->window);
	printf("\n# %s\n", p->test == BENCH_LATENCY ?
	    "latency: half the round trip of a ping-pong" :
	    p->test == BENCH_BW ? "bandwidth: a window of messages one way, "
	    "then an acknowledgement" : "bandwidth: windows both ways at once");
	printf("%5s %5s %9s %12s %10s %10s %10s %10s %10s\n", "src", "dst",
	    "transport", "size(B)", p->test == BENCH_LATENCY ? "lat_us" : "time_us",
	    "min_us", "max_us", "p99_us", "GB/s");
	fflush(stdout);
	return 0;
}

int
bench_p2p_print(struct bench_out *o, const struct bench_p2p *p, int world,
    const struct bench_p2p_row *r, char *err, size_t errlen)
{
	char extra[256];

	o->rows++;
	{
		struct cli_timing_row row = {
			.program = "collx-bench", .op = NULL, .algo = "-",
			.rank = 0, .world = world, .dtype = "u8", .count = r->bytes,
			.bytes = r->bytes, .iter = r->iters, .seconds = r->st.med,
			.extra = extra
		};
		char op[32];

		snprintf(op, sizeof op, "p2p-%s", bench_p2p_name(p->test));
		row.op = op;
		if (p->test == BENCH_BIBW)	/* both directions move bytes */
			row.bytes = 2 * r->bytes;
		snprintf(extra, sizeof extra, "%d,%d,%.9g,%.9g,%.9g,%d,%s", r->a,
		    r->b, r->st.min, r->st.max, r->st.p99, p->hosts, r->transport);
		if (bench_out_row(o, &row, err, errlen) < 0)
			return -1;
		if (o->csv)
			return 0;
	}
	printf("%5d %5d %9s %12zu %10.2f %10.2f %10.2f %10.2f %10.3f\n", r->a,
	    r->b, r->transport, r->bytes, r->st.med * 1e6, r->st.min * 1e6, r->st.max * 1e6,
	    r->st.p99 * 1e6, r->gbps);
	fflush(stdout);
	return 0;
}

void
bench_p2p_matrix(FILE *f, const struct bench_p2p *p, int world,
    const struct bench_p2p_row *rows)
{
	int lat = p->test == BENCH_LATENCY;

	fprintf(f, "# %s matrix at %zu bytes (row: sender, column: receiver)\n",
	    lat ? "latency (us)" : "bandwidth (GB/s)", rows[world > 1].bytes);
	fprintf(f, "%6s", "");
	for (int j = 0; j < world; j++)
		fprintf(f, " %9d", j);
	fputc('\n', f);
	for (int i = 0; i < world; i++) {
		fprintf(f, "%6d", i);
		for (int j = 0; j < world; j++) {
			const struct bench_p2p_row *r = &rows[i * world + j];

			if (i == j)
				fprintf(f, " %9s", "-");
			else
				fprintf(f, " %9.*f", lat ? 1 : 3,
				    lat ? r->st.med * 1e6 : r->gbps);
		}
		fputc('\n', f);
	}
	fflush(f);
}
