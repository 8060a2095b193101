/* bench_mesh: the mesh planner. Every factorization D x T x P of the
 * world is a real run, collx-run -n W -- collx-train --dp D --tp T --pp P
 * (a gpt's also with --cp C, the D x T x P of W/C),
 * on the same model and batches (bench_dp's inputs and runner); its loss
 * CSV gives the step time and tokens/s, every rank's timing rows the share
 * of the step each axis spent communicating. A mesh collx-train refuses
 * (exit 3) is listed with its reason. Rows print fastest first. With
 * hosts (collx-run -H) the ranks read their inputs from, and write those
 * files to, the planner's directory, so it must be one every host sees. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench/bench.h"

struct mesh_row {
	int dp, tp, pp;
	int cp;				/* --cp C above 1, else 0 or 1 */
	int ep;				/* collx-train --ep (0, 1: none) */
	int zero, host;			/* --zero Z, --shard-group host */
	struct bench_run_result r;
	double share[4];		/* pp, dp, tp, cp: summed over rounds */
	long peak;			/* bytes, the largest rank's */
	int refused;
	char why[COLLX_ERRLEN];
	double *step;			/* rank 0's timed steps, every round */
	int nstep, runs;
	double q1, q3;			/* quartiles of step[] */
	int tie;			/* quartiles overlap the fastest's */
};

static const char *const axis_names[4] = { "pp", "dp", "tp", "cp" };

static void
add_step(struct mesh_row *m, double s)
{
	m->step = cli_reallocarray(m->step, (size_t)m->nstep + 1,
	    sizeof *m->step);
	m->step[m->nstep++] = s;
}

/* Every rank's timing rows past the first step: each axis's time over
 * the rank's step time (TP's allreduces run inside forward and backward,
 * so compute plus communication would count them twice), averaged over
 * ranks. Forward and backward are compute; a pipeline send or receive
 * that moved no bytes is an axis of size 1. DP and TP rows come only for
 * an axis of more than one rank, and count whatever their bytes: across
 * hosts DP's allreduce rows (--sync auto) carry 0 bytes; their
 * allreduce_hidden and allreduce_exposed rows split that time again, as
 * ZeRO-3's gather and reduce-scatter rows give its communication
 * thread's time, mostly behind the passes. Each
 * rank writes its own file (argv holds the {rank} name). Rank 0's step
 * rows are the run's step times. */
static void
read_shares(const char *dir, int world, struct mesh_row *m)
{
	char path[4200], line[512], op[64], axis[8];
	double s, t[4], wall;
	unsigned long bytes;
	int iter;

	for (int rank = 0; rank < world; rank++) {
		FILE *f;

		snprintf(path, sizeof path, "%s/t.%d.csv", dir, rank);
		if ((f = fopen(path, "r")) == NULL)
			continue;
		t[0] = t[1] = t[2] = t[3] = wall = 0;
		while (fgets(line, sizeof line, f) != NULL) {
			if (sscanf(line, "%*[^,],%63[^,],%*[^,],%*d,%*d,%*[^,],"
			    "%*u,%lu,%d,%lg,%*[^,],%*[^,],%7[^,]", op, &bytes,
			    &iter, &s, axis) != 5 || iter == 0)
				continue;
			if (strcmp(op, "step") == 0) {
				wall += s;
				if (rank == 0)
					add_step(m, s);
			}
			else if (strcmp(op, "forward") != 0 &&
			    strcmp(op, "backward") != 0 &&
			    strstr(op, "_hidden") == NULL &&
			    strstr(op, "_exposed") == NULL &&
			    strcmp(op, "gather") != 0 &&
			    strcmp(op, "reduce-scatter") != 0 &&
			    (bytes > 0 || strcmp(axis, "pp") != 0))
				for (int a = 0; a < 4; a++)
					if (strcmp(axis, axis_names[a]) == 0)
						t[a] += s;
		}
		fclose(f);
		for (int a = 0; a < 4 && wall > 0; a++)
			m->share[a] += t[a] / wall / world;
	}
}

/* bench_run_child in a process of its own, whose children's peak
 * resident set (collx-run's and its ranks') is then this run's alone. */
static int
run_measured(char *const argv[], const char *log, long *peak)
{
	struct rusage ru;
	int fd[2], st;
	pid_t pid;
	long kb = 0;

	if (pipe(fd) < 0)
		return -1;
	fflush(stdout);
	if ((pid = fork()) < 0) {
		close(fd[0]);
		close(fd[1]);
		return -1;
	}
	if (pid == 0) {
		int rc = bench_run_child(argv, log);

		getrusage(RUSAGE_CHILDREN, &ru);
		kb = ru.ru_maxrss;
		(void)!write(fd[1], &kb, sizeof kb);
		_exit(rc < 0 ? 255 : rc);
	}
	close(fd[1]);
	if (read(fd[0], &kb, sizeof kb) != (ssize_t)sizeof kb)
		kb = 0;
	close(fd[0]);
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return -1;
	*peak = kb * 1024;
	st = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
	return st == 255 ? -1 : st;
}

/* A mesh's marks beyond dp, tp and pp: for the algo column (algo:
 * ".cp2.ep2.zero3") or a line of text (" cp 2 ep 2 zero3"); the cp
 * part left out where a table's column shows it (nocp). */
static const char *
variant(const struct mesh_row *m, int algo, int nocp, char *buf, size_t len)
{
	static const char *const z[] = { "", "zero1", "zero2", "zero3",
	    "hsdp" };
	int i = m->host ? 4 : m->zero, k = 0;

	buf[0] = '\0';
	if (m->cp > 1 && !nocp)
		k += snprintf(buf + k, len - (size_t)k, algo ? ".cp%d" :
		    " cp %d", m->cp);
	if (m->ep > 1)
		k += snprintf(buf + k, len - (size_t)k, algo ? ".ep%d" :
		    " ep %d", m->ep);
	if (i > 0)
		snprintf(buf + k, len - (size_t)k, algo ? ".%s" : " %s", z[i]);
	return buf;
}

static int
run_mesh(const struct bench_dp *d, const char *dir, int run,
    struct mesh_row *m, struct bench_progress *pr, char *err, size_t errlen)
{
	char loss[4200], timing[4200], log[4200], sd[16], st[16], sp[16];
	char sc[16], se[16], sz[16], what[96], vt[48];
	struct bench_argv a;
	char **argv = a.argv;
	int k, rc, w = d->max_world;

	snprintf(loss, sizeof loss, "%s/loss.csv", dir);
	snprintf(timing, sizeof timing, "%s/t.{rank}.csv", dir);
	snprintf(log, sizeof log, "%s/log", dir);
	snprintf(sd, sizeof sd, "%d", m->dp);
	snprintf(st, sizeof st, "%d", m->tp);
	snprintf(sp, sizeof sp, "%d", m->pp);
	snprintf(sz, sizeof sz, "%d", m->zero);
	k = bench_train_argv(&a, d, dir, "collx-train", w, d->batch, run);
	argv[k++] = "--zero"; argv[k++] = sz;
	if (m->host) {
		argv[k++] = "--shard-group"; argv[k++] = "host";
	}
	argv[k++] = "--dp"; argv[k++] = sd;
	argv[k++] = "--tp"; argv[k++] = st; argv[k++] = "--pp"; argv[k++] = sp;
	if (m->cp > 1) {
		snprintf(sc, sizeof sc, "%d", m->cp);
		argv[k++] = "--cp"; argv[k++] = sc;
	}
	/* a micro-batch per stage */
	argv[k++] = "--microbatches"; argv[k++] = sp;
	argv[k++] = "--loss-csv"; argv[k++] = loss; argv[k++] = "--timing";
	argv[k++] = timing; argv[k++] = "-q";
	snprintf(se, sizeof se, "%d", m->ep);
	if (m->ep > 1)
		argv[k++] = "--ep", argv[k++] = se;
	argv[k] = NULL;
	unlink(loss);
	for (int i = 0; i < w; i++) {	/* not in timing: argv holds it */
		snprintf(log, sizeof log, "%s/t.%d.csv", dir, i);
		unlink(log);
	}
	snprintf(log, sizeof log, "%s/log", dir);
	snprintf(what, sizeof what, "dp %d, tp %d, pp %d%s", m->dp, m->tp,
	    m->pp, variant(m, 0, 0, vt, sizeof vt));
	bench_progress_show(pr, what);
	rc = run_measured(argv, log, &m->peak);
	pr->done++;
	bench_progress_end(pr);
	if (rc == 130 || bench_interrupted)
		return 130;
	if (rc == CLI_EXIT_DATA) {	/* a mesh the model does not admit */
		m->refused = 1;
		cli_first_line(log, m->why, sizeof m->why);
		return 0;
	}
	if (rc != 0) {
		char why[COLLX_ERRLEN];

		cli_first_line(log, why, sizeof why);
		cli_fail(err, errlen, "%s: collx-train failed (exit %d): %s",
		    what, rc, why);
		return rc < 0 || rc > 4 ? CLI_EXIT_RUNTIME : rc;
	}
	read_shares(dir, w, m);
	m->runs++;
	return bench_read_loss(loss, &m->r, err, errlen) < 0 ?
	    CLI_EXIT_RUNTIME : 0;
}

/* Quantile q of sorted t[0..n-1], linear between ranks. */
static double
quantile(const double *t, int n, double q)
{
	double x = q * (n - 1);
	int i = (int)x;

	return i + 1 < n ? t[i] + (x - i) * (t[i + 1] - t[i]) : t[n - 1];
}

/* A mesh's median, quartiles and tokens/s over its steps so far. */
static void
mesh_stats(struct mesh_row *m)
{
	struct bench_stat st;

	if (m->refused || m->nstep == 0)
		return;
	bench_stats(m->step, m->nstep, &st);	/* sorts step[] */
	m->r.step_s = st.med;
	m->q1 = quantile(m->step, m->nstep, 0.25);
	m->q3 = quantile(m->step, m->nstep, 0.75);
	m->r.tokens_per_s = m->r.tokens / st.med;
	m->r.steps = m->nstep;
}

/* Refused meshes last, the rest fastest first. */
static int
cmp_rows(const void *a, const void *b)
{
	const struct mesh_row *x = a, *y = b;

	if (x->refused != y->refused)
		return x->refused - y->refused;
	return (x->r.step_s > y->r.step_s) - (x->r.step_s < y->r.step_s);
}

/* The order of meshes by median step so far into ord; whether it is the
 * order prev held (then copied over). */
static int
same_ranking(const struct mesh_row *m, int n, int *ord, int *prev)
{
	int same = 1;

	for (int i = 0; i < n; i++)
		ord[i] = i;
	for (int i = 1; i < n; i++)	/* insertion sort: n is small */
		for (int k = i; k > 0 && cmp_rows(&m[ord[k - 1]],
		    &m[ord[k]]) > 0; k--) {
			int t = ord[k];

			ord[k] = ord[k - 1];
			ord[k - 1] = t;
		}
	for (int i = 0; i < n; i++) {
		same &= prev[i] == ord[i];
		prev[i] = ord[i];
	}
	return same;
}

/* Sorted fastest first: which meshes' quartiles overlap the fastest's.
 * Returns how many tie with it (itself included when any does). */
static int
mark_ties(struct mesh_row *m, int n)
{
	int k = 0;

	for (int i = 1; i < n && !m[0].refused; i++)
		if (!m[i].refused && m[i].q1 <= m[0].q3)
			m[i].tie = 1, k++;
	if (k > 0)
		m[0].tie = 1, k++;
	return k;
}

/* The rounds' verdict: stable, or which meshes tie (with CSV only -v, on
 * stderr as refusals are). */
static void
print_verdict(const struct bench_out *o, const struct mesh_row *m, int n,
    int rounds, int stable, int ties)
{
	FILE *f = o->csv ? stderr : stdout;
	const char *lead = o->csv ? cli_progname : "#";
	char vt[48];

	if (o->csv && !cli_verbose)	/* the CSV's tie and spread say it */
		return;
	if (ties == 0) {
		fprintf(f, "%s%s ranking %s after %d round%s; the fastest's "
		    "steps overlap no other's\n", lead, o->csv ? ": mesh" : "",
		    stable ? "stable" : "not stable", rounds,
		    rounds == 1 ? "" : "s");
		return;
	}
	fprintf(f, "%s%s %d meshes tie after %d round%s (ranking %s; median "
	    "step ms, quartile spread):", lead, o->csv ? ": mesh" : "", ties,
	    rounds, rounds == 1 ? "" : "s", stable ? "stable" : "not stable");
	for (int i = 0; i < n; i++)
		if (m[i].tie)
			fprintf(f, " dp%d.tp%d.pp%d%s %.3f +-%.0f%%", m[i].dp,
			    m[i].tp, m[i].pp, variant(&m[i], 1, 0, vt,
			    sizeof vt), m[i].r.step_s * 1e3,
			    (m[i].q3 - m[i].q1) / 2 / m[i].r.step_s * 100);
	fputc('\n', f);
}

static int
print_row(struct bench_out *o, const struct bench_dp *d,
    const struct mesh_row *m, char *err, size_t errlen)
{
	char extra[320], algo[48], vt[48], tail[64];
	struct cli_timing_row row = {
		.program = "collx-bench", .op = "mesh", .algo = algo, .rank = 0,
		.world = d->max_world, .dtype = "f32", .count = (size_t)d->batch,
		.bytes = 0, .iter = m->r.steps,
		.seconds = m->r.step_s, .extra = extra
	};
	double spread = m->refused ? 0 : (m->q3 - m->q1) / m->r.step_s;

	if (m->refused) {
		if (o->csv)
			fprintf(stderr, "%s: mesh dp %d tp %d pp %d%s refused: "
			    "%s\n", cli_progname, m->dp, m->tp, m->pp,
			    variant(m, 0, 0, vt, sizeof vt), m->why);
		else
			printf("# refused: dp %d tp %d pp %d%s: %s\n", m->dp,
			    m->tp, m->pp, variant(m, 0, 0, vt, sizeof vt), m->why);
		return 0;
	}
	snprintf(algo, sizeof algo, "dp%d.tp%d.pp%d%s", m->dp, m->tp, m->pp,
	    variant(m, 1, 0, vt, sizeof vt));
	snprintf(extra, sizeof extra, "%d,%d,%d,%.6g,%.4f,%.4f,%.4f,%ld,"
	    "%.9g,%.9g,%d,%d,%d,%.4f", m->dp, m->tp, m->pp,
	    m->r.tokens_per_s, m->share[1] / m->runs, m->share[2] / m->runs,
	    m->share[0] / m->runs, m->peak, m->q1, m->q3, m->runs, m->tie,
	    m->cp > 1 ? m->cp : 1, m->share[3] / m->runs);
	if (bench_out_row(o, &row, err, errlen) < 0)
		return CLI_EXIT_RUNTIME;
	/* ep and ZeRO rows marked after the columns (cp has its own) */
	snprintf(tail, sizeof tail, "%s%s", variant(m, 0, 1, vt, sizeof vt),
	    m->tie ? "  tie" : "");
	if (!o->csv)
		printf("%4d %4d %4d %12.0f %10.3f %7.1f %6.1f %6.1f %6.1f "
		    "%12ld %4d %6.1f%s\n", m->dp, m->tp, m->pp,
		    m->r.tokens_per_s, m->r.step_s * 1e3, spread * 100,
		    m->share[1] / m->runs * 100,
		    m->share[2] / m->runs * 100, m->share[0] / m->runs * 100,
		    m->peak, m->cp > 1 ? m->cp : 1, m->share[3] / m->runs * 100,
		    tail);
	return 0;
}

static void
cleanup(const char *dir, int world)
{
	static const char *const names[] = { "model.safetensors", "x.npy",
	    "y.npy", "loss.csv", "log" };
	char p[4200];

	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
		snprintf(p, sizeof p, "%s/%s", dir, names[i]);
		unlink(p);
	}
	for (int i = 0; i < world; i++) {
		snprintf(p, sizeof p, "%s/t.%d.csv", dir, i);
		unlink(p);
	}
	rmdir(dir);
}

/* Every D x T x P = W, D outermost, then T. */
static int
factorize(int w, struct mesh_row **out)
{
	struct mesh_row *m = NULL;
	int n = 0;

	for (int dp = w; dp >= 1; dp--)
		for (int tp = w / dp; tp >= 1 && w % dp == 0; tp--)
			if ((w / dp) % tp == 0) {
				m = cli_reallocarray(m, (size_t)n + 1, sizeof *m);
				memset(&m[n], 0, sizeof *m);
				m[n].dp = dp;
				m[n].tp = tp;
				m[n++].pp = w / dp / tp;
			}
	*out = m;
	return n;
}

/* A gpt's meshes with context parallelism (C >= 2 ranks a sequence; the
 * D x T x P that leave) after the n of factorize, C innermost of the
 * sizes; the count in all. */
static int
factorize_cp(const struct bench_dp *d, int n, struct mesh_row **out)
{
	struct mesh_row *m = *out, *k;
	int w = d->max_world, c, i, nk;

	if (strcmp(d->arch, "gpt") != 0)
		return n;
	for (c = 2; c <= w; c++) {
		if (w % c != 0)
			continue;
		nk = factorize(w / c, &k);
		m = cli_reallocarray(m, (size_t)(n + nk), sizeof *m);
		for (i = 0; i < nk; i++) {
			m[n + i] = k[i];
			m[n + i].cp = c;
		}
		n += nk;
		free(k);
	}
	*out = m;
	return n;
}

/* With experts (d->experts), each mesh of D >= 2 again with every --ep X
 * above 1 dividing D and E, after the mesh's row; the new count. */
static int
add_ep(const struct bench_dp *d, struct mesh_row **mp, int n)
{
	struct mesh_row *m = *mp;
	int k = n;

	for (int i = 0; d->experts > 0 && i < n; i++)
		for (int x = 2; x <= m[i].dp; x++)
			if (m[i].dp % x == 0 && d->experts % x == 0) {
				m = cli_reallocarray(m, (size_t)k + 1, sizeof *m);
				m[k] = m[i];
				m[k++].ep = x;
			}
	*mp = m;
	return k;
}

/* Each mesh of m (n) with dp above 1 again at each stage of --zero's
 * list above 0, and at 3 on several hosts by host too; the count. */
static int
zero_rows(const struct bench_dp *d, struct mesh_row **m, int n)
{
	int k = n, i;

	for (const char *z = d->zeros; z != NULL && *z != '\0'; z++)
		for (i = 0; *z >= '1' && *z <= '3' && i < n; i++) {
			/* collx-train composes ZeRO-3 with dp, tp, pp only */
			if ((*m)[i].dp < 2 || (*z == '3' &&
			    ((*m)[i].cp > 1 || (*m)[i].ep > 1)))
				continue;
			for (int h = 0; h <= (*z == '3' && d->hosts > 1); h++) {
				*m = cli_reallocarray(*m, (size_t)k + 1,
				    sizeof **m);
				(*m)[k] = (*m)[i];
				(*m)[k].zero = *z - '0';
				(*m)[k++].host = h;
			}
		}
	return k;
}

/* Run i's rendezvous port, --master's plus i, must be a port. */
static int
check_ports(const struct bench_dp *d, int n, char *err, size_t errlen)
{
	const char *port = d->master ? strrchr(d->master, ':') : NULL;

	if (port != NULL && strtol(port + 1, NULL, 10) + n - 1 > 65535)
		return cli_fail(err, errlen, "--master %s: the %d runs take "
		    "ports PORT to PORT+%d, past 65535", d->master, n, n - 1);
	return 0;
}

/* The n meshes' rendezvous ports, and a working directory dir (len
 * bytes) holding the model and data: 0, or the exit code (nothing left
 * behind). */
static int
prepare(const struct bench_dp *d, int n, char *dir, size_t len, char *err,
    size_t errlen)
{
	if (check_ports(d, n * d->rounds, err, errlen) < 0)
		return CLI_EXIT_USAGE;
	if (bench_workdir(dir, len, err, errlen) < 0)
		return CLI_EXIT_RUNTIME;
	if (bench_make_inputs(d, dir, err, errlen) < 0) {
		cleanup(dir, d->max_world);
		return CLI_EXIT_RUNTIME;
	}
	return 0;
}

/* Rounds of every mesh not refused, each round in a rotated order so
 * that a slow spell of the machine falls on different meshes, until two
 * rounds in a row rank them alike (from the second) or d->rounds have
 * run. *rounds and *stable say how it ended. */
static int
run_rounds(const struct bench_dp *d, const char *dir, struct mesh_row *m,
    int n, struct bench_progress *pr, int *rounds, int *stable, char *err,
    size_t errlen)
{
	int *ord = cli_reallocarray(NULL, (size_t)n * 2, sizeof *ord);
	int *prev = ord + n, rc = 0, run = 0;

	for (int i = 0; i < n; i++)
		prev[i] = -1;
	*stable = 0;
	for (*rounds = 0; *rounds < d->rounds && rc == 0 && !*stable;) {
		for (int k = 0; k < n && rc == 0; k++) {
			struct mesh_row *x = &m[(k + *rounds) % n];

			if (!x->refused)
				rc = run_mesh(d, dir, run++, x, pr, err,
				    errlen);
		}
		++*rounds;
		for (int i = 0; i < n && rc == 0; i++)
			mesh_stats(&m[i]);
		*stable = rc == 0 && same_ranking(m, n, ord, prev);
	}
	free(ord);
	return rc;
}

int
bench_mesh_run(struct bench_out *o, const struct bench_dp *d, int progress,
    char *err, size_t errlen)
{
	char dir[4096], on[32] = "";
	struct bench_progress pr;
	struct mesh_row *m = NULL;
	int rc = 0, rounds = 0, stable = 0, ties;
	int n = add_ep(d, &m, factorize(d->max_world, &m));

	n = factorize_cp(d, n, &m);

	n = zero_rows(d, &m, n);

	if ((rc = prepare(d, n, dir, sizeof dir, err, errlen)) != 0) {
		free(m);
		return rc;
	}
	if (d->host_list != NULL)
		snprintf(on, sizeof on, " on %d host%s", d->hosts,
		    d->hosts == 1 ? "" : "s");
	bench_progress_start(&pr, progress, n * d->rounds);
	if ((rc = run_rounds(d, dir, m, n, &pr, &rounds, &stable, err,
	    errlen)) != 0)
		goto out;
	qsort(m, (size_t)n, sizeof *m, cmp_rows);
	ties = mark_ties(m, n);
	if (bench_out_open(o, "dp,tp,pp,tokens_per_s,comm_dp,comm_tp,comm_pp,"
	    "peak_bytes,step_q1_s,step_q3_s,rounds,tie,cp,comm_cp", err,
	    errlen) < 0) {
		rc = CLI_EXIT_RUNTIME;
		goto out;
	}
	if (!o->csv)
		printf("# collx-bench mesh: collx-train %s %s, world %d%s, "
		    "batch %ld, %ld steps (the first not timed); fastest first\n"
		    "# step_ms: the median over every round's timed steps; "
		    "spread%%: their interquartile range over it\n"
		    "# dp%% tp%% pp%% cp%%: share of the step spent communicating on each axis\n"
		    "%4s %4s %4s %12s %10s %7s %6s %6s %6s %12s %4s %6s\n",
		    d->arch, d->dims, d->max_world, on, d->batch, d->steps,
		    "dp", "tp", "pp", "tokens/s", "step_ms", "spread%", "dp%",
		    "tp%", "pp%", "peak_bytes", "cp", "cp%");
	for (int i = 0; i < n && rc == 0; i++)
		rc = print_row(o, d, &m[i], err, errlen);
	if (rc == 0)
		print_verdict(o, m, n, rounds, stable, ties);
	if (bench_out_close(o, rc ? NULL : err, errlen) < 0 && rc == 0)
		rc = CLI_EXIT_RUNTIME;
out:
	if (!o->csv && rc == 130)
		printf("# interrupted\n");
	for (int i = 0; i < n; i++)
		free(m[i].step);
	free(m);
	cleanup(dir, d->max_world);
	return rc;
}

int
bench_mesh_measure(const struct bench_dp *d, const int (*mesh)[3], int n,
    double *step, double *spread, int progress, char *err, size_t errlen)
{
	struct mesh_row *m = cli_calloc((size_t)n, sizeof *m);
	struct bench_progress pr;
	char dir[4096];
	int rc, rounds, stable;

	for (int i = 0; i < n; i++) {
		m[i].dp = mesh[i][0], m[i].tp = mesh[i][1];
		m[i].pp = mesh[i][2];
	}
	if ((rc = prepare(d, n, dir, sizeof dir, err, errlen)) != 0) {
		free(m);
		return rc;
	}
	bench_progress_start(&pr, progress, n * d->rounds);
	rc = run_rounds(d, dir, m, n, &pr, &rounds, &stable, err, errlen);
	for (int i = 0; i < n; i++) {
		step[i] = m[i].refused || rc ? 0 : m[i].r.step_s;
		spread[i] = step[i] > 0 ? (m[i].q3 - m[i].q1) / 2 / step[i] : 0;
		free(m[i].step);
	}
	free(m);
	cleanup(dir, d->max_world);
	return rc;
}
