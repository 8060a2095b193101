/* bench_plan_out: collx-bench plan's output: the ranked table (or CSV
 * rows), and --validate, every planned mesh of this world run as
 * collx-bench mesh runs it, predicted beside measured. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench.h"
#include "bench/bench_plan.h"

/* dpD.tpT.ppP.zZ.SCHED.mM, with .hsdp, .cpC.ring|zigzag and
 * .epX.alltoallv|allgather where the row has them. */
static void
row_name(const struct bench_plan_row *r, char *buf, size_t len)
{
	char cp[32] = "", ep[32] = "";

	if (r->cp > 1)
		snprintf(cp, sizeof cp, ".cp%d.%s", r->cp, r->zigzag ?
		    "zigzag" : "ring");
	if (r->ep > 1)
		snprintf(ep, sizeof ep, ".ep%d.%s", r->ep, r->gather ?
		    "allgather" : "alltoallv");
	snprintf(buf, len, "dp%d.tp%d.pp%d.z%d%s.%s.m%d%s%s", r->dp, r->tp,
	    r->pp, r->zero, r->hsdp ? ".hsdp" : "", pipe_sched_name(r->sched),
	    r->micro, cp, ep);
}

/* A row; meas (seconds, or NULL) adds the measured step and the error. */
static int
print_row(struct bench_out *out, const struct bench_plan_opts *o,
    const struct bench_plan_row *r, const double *meas, char *err,
    size_t errlen)
{
	char extra[512], algo[96], more[64] = "";
	double e = meas != NULL && *meas > 0 ? (r->step - *meas) / *meas : 0;
	struct cli_timing_row row = {
		.program = "collx-bench", .op = "plan", .algo = algo, .rank = 0,
		.world = o->hosts * o->per_host, .dtype = "f32",
		.count = (size_t)o->batch,
		.bytes = (size_t)(r->bytes_dp + r->bytes_tp + r->bytes_pp +
		    r->bytes_cp + r->bytes_ep),
		.iter = 0, .seconds = r->step, .extra = extra
	};

	row_name(r, algo, sizeof algo);
	if (meas != NULL)
		snprintf(more, sizeof more, ",%.6g,%.4f", *meas, e);
	snprintf(extra, sizeof extra, "%d,%d,%d,%d,%s,%d,%.6g,%.6g,%.6g,%.6g,"
	    "%.6g,%.0f,%.0f,%.0f,%.0f,%.6g,%d,%d,%.6g,%.6g,%.0f,%.0f%s", r->dp,
	    r->tp, r->pp, r->zero, pipe_sched_name(r->sched), r->micro,
	    r->compute, r->dp_s, r->tp_s, r->pp_s, r->bubble, r->mem,
	    r->bytes_dp, r->bytes_tp, r->bytes_pp, r->tokens / r->step, r->cp,
	    r->ep, r->cp_s, r->ep_s, r->bytes_cp, r->bytes_ep, more);
	if (bench_out_row(out, &row, err, errlen) < 0)
		return CLI_EXIT_RUNTIME;
	if (out->csv)
		return 0;
	/* zero 3h: HSDP; cp Cz: zigzag; ep Xg: allgather dispatch */
	printf("%5d %4d %4d %4d%s %4d%s %3d%s %-7s %4d %10.3f %10.3f %8.3f "
	    "%8.3f %8.3f %8.3f %8.3f %8.3f %12.4g %12.4g", r->dp, r->tp, r->pp,
	    r->cp, r->cp > 1 && r->zigzag ? "z" : " ", r->ep, r->ep > 1 &&
	    r->gather ? "g" : " ", r->zero, r->hsdp ? "h" : " ",
	    pipe_sched_name(r->sched), r->micro, r->step * 1e3,
	    r->compute * 1e3, r->dp_s * 1e3, r->tp_s * 1e3, r->pp_s * 1e3,
	    r->cp_s * 1e3, r->ep_s * 1e3, r->bubble * 1e3, r->mem,
	    r->tokens / r->step);
	if (meas != NULL && *meas > 0)
		printf(" %10.3f %+7.1f", *meas * 1e3, e * 100);
	else if (meas != NULL)
		printf(" %10s %7s", "refused", "-");
	putchar('\n');
	return 0;
}

#define COLS "dp,tp,pp,zero,sched,micro,compute_s,dp_s,tp_s,pp_s,bubble_s," \
	"mem_bytes,bytes_dp,bytes_tp,bytes_pp,tokens_per_s,cp,ep,cp_s,ep_s," \
	"bytes_cp,bytes_ep"

static void
head(const struct bench_plan_opts *o, int n, int nfit, const char *what)
{
	const struct nn_dims *d = &o->dims;

	printf("# collx-bench plan: %s, %d hosts x %d ranks, batch %ld; "
	    "%d options, %d fit%s; %s\n"
	    "# ms a step: compute, the exposed communication of each axis, the "
	    "pipeline's bubble\n%5s %4s %4s %5s %5s %4s %-7s %4s %10s %10s %8s "
	    "%8s %8s %8s %8s %8s %12s %12s%s\n", d->arch == NN_MLP ? "mlp" :
	    "gpt", o->hosts, o->per_host, o->batch, n, nfit, o->mem > 0 ?
	    " in memory" : "", what, "dp", "tp", "pp", "cp", "ep", "zero",
	    "sched", "mb", "step_ms", "compute", "dp", "tp", "pp", "cp", "ep",
	    "bubble", "mem_bytes", "tokens/s",
	    o->as_mesh ? "  measured    err%" : "");
}

/* Median of |e[0..n-1]| (sorted in place). */
static double
median_abs(double *e, int n)
{
	struct bench_stat st;

	for (int i = 0; i < n; i++)
		e[i] = fabs(e[i]);
	bench_stats(e, n, &st);
	return st.med;
}

static int
validate(struct bench_out *out, const struct bench_plan_opts *o,
    const struct bench_dp *d, struct bench_plan_row *r, int n, int progress,
    char *err, size_t errlen)
{
	int (*mesh)[3] = cli_calloc((size_t)n, sizeof *mesh);
	double *meas = cli_calloc((size_t)n * 3, sizeof *meas);
	double *spread = meas + n, *e = meas + 2 * n, worst = 0;
	int rc, k = 0, pf = -1, mf = -1;

	for (int i = 0; i < n; i++) {
		mesh[i][0] = r[i].dp, mesh[i][1] = r[i].tp;
		mesh[i][2] = r[i].pp;
	}
	rc = bench_mesh_measure(d, (const int (*)[3])mesh, n, meas, spread,
	    progress, err, errlen);
	if (rc == 0 && bench_out_open(out, COLS ",measured_s,error",
	    err, errlen) < 0)
		rc = CLI_EXIT_RUNTIME;
	if (rc == 0 && !out->csv)
		head(o, n, n, "predicted beside measured (mesh's runs)");
	for (int i = 0; i < n && rc == 0; i++) {
		rc = print_row(out, o, &r[i], &meas[i], err, errlen);
		if (meas[i] <= 0)
			continue;
		e[k] = (r[i].step - meas[i]) / meas[i];
		worst = fmax(worst, fabs(e[k++]));
		if (pf < 0)
			pf = i;		/* rows come fastest predicted first */
		if (mf < 0 || meas[i] < meas[mf])
			mf = i;
	}
	if (rc == 0 && k > 0) {
		char a[96], b[96];

		row_name(&r[pf], a, sizeof a);
		row_name(&r[mf], b, sizeof b);
		fprintf(out->csv ? stderr : stdout, "%s%s %d meshes: median "
		    "|error| %.1f%%, worst %.1f%%; predicted fastest %s, "
		    "measured fastest %s (the predicted one %.1f%% slower)\n",
		    out->csv ? cli_progname : "#", out->csv ?
		    ": plan --validate:" : "", k, median_abs(e, k) * 100,
		    worst * 100, a, b, (meas[pf] / meas[mf] - 1) * 100);
	}
	if (bench_out_close(out, rc ? NULL : err, errlen) < 0 && rc == 0)
		rc = CLI_EXIT_RUNTIME;
	free(mesh);
	free(meas);
	return rc;
}

int
bench_plan_run(struct bench_out *out, const struct bench_plan_opts *o,
    const struct bench_dp *val, int top, const char *export_dir,
    int progress, char *err, size_t errlen)
{
	struct bench_plan_row *r;
	int n, nfit, code = 0, rc = 0;

	if (bench_plan(o, &r, &n, &nfit, &code, err, errlen) < 0)
		return code;
	if (val != NULL) {
		rc = validate(out, o, val, r, n, progress, err, errlen);
		free(r);
		return rc;
	}
	if (export_dir != NULL) {
		/* ASTRA-sim's text workload has data, model and pipeline
		 * parallelism only: the fastest without cp or ep */
		int x = 0;

		while (x < nfit - 1 && (r[x].cp > 1 || r[x].ep > 1))
			x++;
		if (bench_plan_astra(o, &r[x], export_dir, err, errlen) < 0) {
			free(r);
			return CLI_EXIT_RUNTIME;
		}
	}
	if (bench_out_open(out, COLS, err, errlen) < 0) {
		free(r);
		return CLI_EXIT_RUNTIME;
	}
	if (!out->csv)
		head(o, n, nfit, "fastest first");
	for (int i = 0; i < nfit && i < top && rc == 0; i++)
		rc = print_row(out, o, &r[i], NULL, err, errlen);
	if (bench_out_close(out, rc ? NULL : err, errlen) < 0 && rc == 0)
		rc = CLI_EXIT_RUNTIME;
	free(r);
	return rc;
}
