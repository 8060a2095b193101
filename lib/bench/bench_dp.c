/* bench_dp: training throughput and scaling of collx-dp. Each world size
 * 1..N and each sync method is a real run, collx-run -n W -- collx-dp,
 * with a fixed batch per rank (weak scaling); its loss CSV and rank 0's
 * timing rows give the step time, tokens/s and the share of the step
 * spent communicating. World 1 is measured once and is every method's
 * baseline. */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench/bench.h"

static void
path_in(char *buf, size_t len, const char *dir, const char *name)
{
	snprintf(buf, len, "%s/%s", dir, name);
}

/* Run argv (argv[0] a path) to its end; its exit status, 128+N for a
 * signal, or -1 when it could not start. Output goes to log. */
int
bench_run_child(char *const argv[], const char *log)
{
	pid_t pid;
	int st;

	fflush(stdout);		/* or the child's freopen writes ours again */
	if ((pid = fork()) < 0)
		return -1;
	if (pid == 0) {
		FILE *f = log ? freopen(log, "w", stdout) : NULL;

		if (f != NULL)
			dup2(fileno(f), STDERR_FILENO);
		execv(argv[0], argv);
		_exit(127);
	}
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

int
bench_workdir(char *dir, size_t len, char *err, size_t errlen)
{
	const char *tmp = getenv("TMPDIR");

	snprintf(dir, len, "%s/collx-bench.XXXXXX",
	    tmp != NULL && *tmp != '\0' ? tmp : "/tmp");
	if (mkdtemp(dir) == NULL)
		return cli_fail(err, errlen, "mkdtemp %s: %s", dir,
		    strerror(errno));
	return 0;
}

/* Model and data in dir: a fresh model from seed 1; for gpt random bytes
 * as tokens, for mlp random rows. */
int
bench_make_inputs(const struct bench_dp *d, const char *dir, char *err,
    size_t errlen)
{
	char tool[4200], model[4200], x[4200], y[4200], log[4200], shape[64];
	char ex[16];
	char *init[] = { tool, "--init", (char *)d->arch, "--dims", (char *)d->dims,
	    "--seed", "1", "-o", model, "--experts", ex, NULL };
	long din = 0, dout = 0;
	int rc;

	path_in(tool, sizeof tool, d->bindir, "collx-dp");
	path_in(model, sizeof model, dir, "model.safetensors");
	path_in(log, sizeof log, dir, "log");
	snprintf(ex, sizeof ex, "%d", d->experts);
	if (d->experts == 0)
		init[9] = NULL;		/* no --experts */
	if ((rc = bench_run_child(init, log)) != 0) {
		cli_first_line(log, x, 512);
		return cli_fail(err, errlen, "collx-dp --init failed (%d): %s", rc, x);
	}
	path_in(x, sizeof x, dir, "x.npy");
	path_in(y, sizeof y, dir, "y.npy");
	if (strcmp(d->arch, "gpt") == 0) {
		FILE *f = fopen(x, "wb");
		uint64_t s = 88172645463325252ULL;

		if (f == NULL)
			return cli_fail(err, errlen, "%s: %s", x, strerror(errno));
		for (int i = 0; i < 1 << 16; i++) {	/* xorshift64 */
			s ^= s << 13, s ^= s >> 7, s ^= s << 17;
			fputc((int)(s >> 56), f);
		}
		return fclose(f) == 0 ? 0 : cli_fail(err, errlen, "%s: %s", x,
		    strerror(errno));
	}
	if (sscanf(d->dims, "%ld,%*d,%ld", &din, &dout) != 2)
		return cli_fail(err, errlen, "--dims %s: want DIN,H,DOUT for %s",
		    d->dims, d->arch);
	path_in(tool, sizeof tool, d->bindir, "collx-tensor");
	for (int k = 0; k < 2; k++) {
		char *mk[] = { tool, "create", "--shape", shape, "--fill", "randn",
		    "--seed", k ? "3" : "2", "-o", k ? y : x, NULL };

		snprintf(shape, sizeof shape, "4096,%ld", k ? dout : din);
		if ((rc = bench_run_child(mk, log)) != 0)
			return cli_fail(err, errlen, "collx-tensor create failed (%d)", rc);
	}
	return 0;
}

static int
cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* The loss CSV: median step time and tokens/s past the first step. */
int
bench_read_loss(const char *path, struct bench_run_result *r, char *err,
    size_t errlen)
{
	char line[512];
	double secs[4096], tot_s = 0, tot_tok = 0, s;
	long step, tokens;
	int n = 0;
	FILE *f = fopen(path, "r");

	if (f == NULL)
		return cli_fail(err, errlen, "%s: %s", path, strerror(errno));
	while (fgets(line, sizeof line, f) != NULL && n < 4096)
		if (sscanf(line, "%ld,%*d,%*g,%ld,%lg", &step, &tokens, &s) == 3 &&
		    step > 0) {
			secs[n++] = s;
			tot_s += s;
			tot_tok += (double)tokens;
		}
	fclose(f);
	if (n == 0 || tot_s <= 0)
		return cli_fail(err, errlen, "%s: no timed steps", path);
	qsort(secs, (size_t)n, sizeof *secs, cmp_double);
	r->step_s = n % 2 ? secs[n / 2] : (secs[n / 2 - 1] + secs[n / 2]) / 2;
	r->tokens_per_s = tot_tok / tot_s;
	r->tokens = tot_tok / n;
	r->steps = n;
	return 0;
}

/* Rank 0's timing rows: communication over compute plus communication. */
static void
read_timing(const char *path, struct bench_run_result *r)
{
	char line[512], op[64];
	double s, comp = 0, comm = 0;
	size_t count;
	int iter;
	FILE *f = fopen(path, "r");

	if (f == NULL)
		return;
	while (fgets(line, sizeof line, f) != NULL)
		if (sscanf(line, "%*[^,],%63[^,],%*[^,],%*d,%*d,%*[^,],%zu,%*u,%d,%lg",
		    op, &count, &iter, &s) == 4 && iter > 0) {
			if (strcmp(op, "compute") == 0)
				comp += s;
			else {
				comm += s;
				r->nparams = count;
			}
		}
	fclose(f);
	r->comm_share = comp + comm > 0 ? comm / (comp + comm) : 0;
}

/* argv[k..] gets option opt and its value v, when v is given. */
static int
pass(char **argv, int k, const char *opt, const char *v)
{
	if (v == NULL)
		return k;
	argv[k++] = (char *)opt;
	argv[k++] = (char *)v;
	return k;
}

int
bench_train_argv(struct bench_argv *a, const struct bench_dp *d,
    const char *dir, const char *prog, int world, long batch, int run)
{
	const char *port = d->master ? strrchr(d->master, ':') : NULL;
	int k = 0;

	path_in(a->run, sizeof a->run, d->bindir, "collx-run");
	path_in(a->prog, sizeof a->prog, d->bindir, prog);
	path_in(a->model, sizeof a->model, dir, "model.safetensors");
	path_in(a->x, sizeof a->x, dir, "x.npy");
	path_in(a->y, sizeof a->y, dir, "y.npy");
	snprintf(a->n, sizeof a->n, "%d", world);
	snprintf(a->batch, sizeof a->batch, "%ld", batch);
	snprintf(a->steps, sizeof a->steps, "%ld", d->steps);
	snprintf(a->tmo, sizeof a->tmo, "%g", d->timeout > 0 ? d->timeout : 60);
	a->argv[k++] = a->run; a->argv[k++] = "-n"; a->argv[k++] = a->n;
	a->argv[k++] = "--timeout"; a->argv[k++] = a->tmo;
	k = pass(a->argv, k, "-H", d->host_list);
	k = pass(a->argv, k, "--ssh", d->ssh);
	if (port != NULL) {	/* a fresh port: the last run's may linger */
		snprintf(a->master, sizeof a->master, "%.*s:%ld",
		    (int)(port - d->master), d->master,
		    strtol(port + 1, NULL, 10) + run);
		k = pass(a->argv, k, "--master", a->master);
	}
	a->argv[k++] = "--"; a->argv[k++] = a->prog;
	k = pass(a->argv, k, "--iface", d->iface);
	if (d->no_shm)
		a->argv[k++] = "--no-shm";
	a->argv[k++] = "-m"; a->argv[k++] = a->model;
	a->argv[k++] = "--data"; a->argv[k++] = a->x;
	if (strcmp(d->arch, "gpt") != 0) {
		a->argv[k++] = "--targets";
		a->argv[k++] = a->y;
	}
	a->argv[k++] = "--batch"; a->argv[k++] = a->batch;
	a->argv[k++] = "--steps"; a->argv[k++] = a->steps;
	return pass(a->argv, k, "--optimizer", d->optimizer);
}

/* A method: a --sync algorithm, with a --zero stage when zero is not
 * NULL, named "SYNC" or "SYNC/zSTAGE", in precision prec (NULL: the
 * default). */
struct method {
	const char *sync, *zero, *prec;
	char name[64];
};

static int
run_one(const struct bench_dp *d, const char *dir, int world,
    const struct method *m, struct bench_progress *pr,
    struct bench_run_result *r, char *err, size_t errlen)
{
	const char *sync = m->sync;
	char loss[4200], timing[4200], log[4200], what[96];
	struct bench_argv a;
	char **argv = a.argv;
	int k, rc;

	path_in(loss, sizeof loss, dir, "loss.csv");
	path_in(timing, sizeof timing, dir, "t.{rank}.csv");
	path_in(log, sizeof log, dir, "log");
	k = bench_train_argv(&a, d, dir, "collx-dp", world, d->batch * world,
	    0);
	argv[k++] = "--sync"; argv[k++] = (char *)sync;
	k = pass(argv, k, "--wire", d->wire);
	k = pass(argv, k, "--powersgd", d->powersgd);
	k = pass(argv, k, "--powersgd-start", d->powersgd_start);
	k = pass(argv, k, "--sync-every", d->sync_every);
	k = pass(argv, k, "--outer-lr", d->outer_lr);
	k = pass(argv, k, "--outer-momentum", d->outer_momentum);
	k = pass(argv, k, "--precision", m->prec);
	k = pass(argv, k, "--zero", m->zero);
	argv[k++] = "--loss-csv"; argv[k++] = loss; argv[k++] = "--timing";
	argv[k++] = timing; argv[k++] = "-q"; argv[k] = NULL;
	unlink(loss);
	for (int i = 0; i < world; i++) {
		char t[4200];

		snprintf(t, sizeof t, "%s/t.%d.csv", dir, i);
		unlink(t);
	}
	memset(r, 0, sizeof *r);
	snprintf(what, sizeof what, "world %d, sync %s", world, m->name);
	bench_progress_show(pr, what);
	rc = bench_run_child(argv, log);
	pr->done++;
	bench_progress_end(pr);
	if (rc != 0) {
		char why[COLLX_ERRLEN];

		if (rc == 130 || bench_interrupted)
			return 130;
		cli_first_line(log, why, sizeof why);
		cli_fail(err, errlen, "world %d, sync %s: collx-dp failed (exit %d): %s",
		    world, m->name, rc, why);
		return rc < 0 || rc > 4 ? CLI_EXIT_RUNTIME : rc;
	}
	path_in(timing, sizeof timing, dir, "t.0.csv");
	read_timing(timing, r);
	return bench_read_loss(loss, r, err, errlen) < 0 ? CLI_EXIT_RUNTIME : 0;
}

/* 0, or the exit code (a timing row not written) with the reason in err. */
static int
print_row(struct bench_out *o, const struct bench_dp *d, int world,
    const struct method *m, const struct bench_run_result *r, double eff,
    char *err, size_t errlen)
{
	const char *sync = m->name, *prec = m->prec;
	char extra[256], op[32];

	/* f32 rows keep their name; another precision's: dp-bf16 */
	snprintf(op, sizeof op, "dp%s%s", prec && strcmp(prec, "f32") ? "-" :
	    "", prec && strcmp(prec, "f32") ? prec : "");
	{
		struct cli_timing_row row = {
			.program = "collx-bench", .op = op, .algo = sync, .rank = 0,
			.world = world, .dtype = d->wire != NULL ? d->wire : "f32",
			.count = r->nparams,
			.bytes = r->nparams * 4, .iter = r->steps,
			.seconds = r->step_s, .extra = extra
		};

		snprintf(extra, sizeof extra, "%.6g,%.4f,%.4f,%d", r->tokens_per_s,
		    r->comm_share, eff, d->hosts > 0 ? d->hosts : 1);
		if (bench_out_row(o, &row, err, errlen) < 0)
			return CLI_EXIT_RUNTIME;
		if (o->csv)
			return 0;
	}
	printf("%6d %13s %10.2f %12.0f %7.1f %10.3f\n", world, sync,
	    r->step_s * 1e3, r->tokens_per_s, r->comm_share * 100, eff);
	fflush(stdout);
	return 0;
}

static void
cleanup(const char *dir)
{
	static const char *const names[] = { "model.safetensors", "x.npy",
	    "y.npy", "loss.csv", "log" };
	char p[4200];

	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
		path_in(p, sizeof p, dir, names[i]);
		unlink(p);
	}
	for (int i = 0; i < 1024; i++) {
		snprintf(p, sizeof p, "%s/t.%d.csv", dir, i);
		if (unlink(p) < 0 && i > 0)
			break;
	}
	rmdir(dir);
}

/* The items of a comma list, as strtok_r sees them (NULL: one). */
static int
count_items(const char *p)
{
	int n = 0;

	if (p == NULL)
		return 1;
	while (*(p += strspn(p, ",")) != '\0') {
		n++;
		p += strcspn(p, ",");
	}
	return n;
}

/* The runs of the sweep: per precision, world 1 once, then 2..N for each
 * method. */
static int
count_runs(const struct bench_dp *d)
{
	return count_items(d->precisions) * (1 + count_items(d->syncs) *
	    count_items(d->zeros) * (d->max_world - 1));
}

/* Every world of method m: 1 from base, then 2..N. */
static int
sweep(struct bench_out *o, const struct bench_dp *d, const char *dir,
    const struct method *m, const struct bench_run_result *base,
    struct bench_progress *pr, char *err, size_t errlen)
{
	struct bench_run_result r;
	int rc;

	if ((rc = print_row(o, d, 1, m, base, 1.0, err, errlen)) != 0)
		return rc;
	for (int w = 2; w <= d->max_world; w++) {
		if (bench_interrupted)
			return 130;
		if ((rc = run_one(d, dir, w, m, pr, &r, err, errlen)) != 0 ||
		    (rc = print_row(o, d, w, m, &r, r.tokens_per_s /
		    (w * base->tokens_per_s), err, errlen)) != 0)
			return rc;
	}
	return 0;
}

/* Every method in precision prec (NULL: collx-dp's default). */
static int
sweep_precision(struct bench_out *o, const struct bench_dp *d,
    const char *dir, const char *prec, struct bench_progress *pr, char *err,
    size_t errlen)
{
	char *syncs, *zeros = NULL, *tok, *z, *save = NULL, *zsave = NULL;
	struct method m = { "ring", NULL, prec, "ring" };
	struct bench_run_result base;
	int rc;

	if (prec != NULL && !o->csv)
		printf("# --precision %s\n", prec);
	if ((rc = run_one(d, dir, 1, &m, pr, &base, err, errlen)) != 0)
		return rc;
	syncs = cli_strdup(d->syncs);
	for (tok = strtok_r(syncs, ",", &save); tok && rc == 0;
	    tok = strtok_r(NULL, ",", &save)) {
		m = (struct method){ tok, NULL, prec, "" };
		snprintf(m.name, sizeof m.name, "%s", tok);
		if (d->zeros == NULL) {
			rc = sweep(o, d, dir, &m, &base, pr, err, errlen);
			continue;
		}
		free(zeros);
		zeros = cli_strdup(d->zeros);
		for (z = strtok_r(zeros, ",", &zsave); z && rc == 0;
		    z = strtok_r(NULL, ",", &zsave)) {
			m.zero = z;
			snprintf(m.name, sizeof m.name, "%s/z%s", tok, z);
			rc = sweep(o, d, dir, &m, &base, pr, err, errlen);
		}
	}
	free(syncs);
	free(zeros);
	return rc;
}

int
bench_dp_run(struct bench_out *o, const struct bench_dp *d, int progress,
    char *err, size_t errlen)
{
	char dir[4096], *precs = NULL, *tok, *save = NULL;
	struct bench_progress pr;
	int rc;

	if (bench_workdir(dir, sizeof dir, err, errlen) < 0)
		return CLI_EXIT_RUNTIME;
	if (bench_make_inputs(d, dir, err, errlen) < 0) {
		rc = CLI_EXIT_RUNTIME;
		goto out;
	}
	if (bench_out_open(o, "tokens_per_s,comm_share,efficiency,hosts", err,
	    errlen) < 0) {
		rc = CLI_EXIT_RUNTIME;
		goto out;
	}
	if (!o->csv)
		printf("# collx-bench dp: collx-dp %s %s, %ld samples per rank per "
		    "step, %ld steps (the first not timed), 1 host\n"
		    "# efficiency: tokens/s over world x tokens/s of one rank\n"
		    "%6s %13s %10s %12s %7s %10s\n", d->arch, d->dims, d->batch,
		    d->steps, "world", "sync", "step_ms", "tokens/s", "comm%",
		    "efficiency");
	bench_progress_start(&pr, progress, count_runs(d));
	if (d->precisions == NULL)
		rc = sweep_precision(o, d, dir, NULL, &pr, err, errlen);
	else {
		precs = cli_strdup(d->precisions);
		rc = 0;
		for (tok = strtok_r(precs, ",", &save); tok && rc == 0;
		    tok = strtok_r(NULL, ",", &save))
			rc = sweep_precision(o, d, dir, tok, &pr, err, errlen);
	}
out:
	if (bench_out_close(o, rc ? NULL : err, errlen) < 0 && rc == 0)
		rc = CLI_EXIT_RUNTIME;
	if (!o->csv && rc == 130)
		printf("# interrupted\n");
	free(precs);
	cleanup(dir);
	return rc;
}
