/* bench_fit: collx-bench fit, the measuring half of the cost model. The
 * collectives are what `collx-bench coll` measures, run under collx-run
 * once per link class and collective (shared memory between the ranks of
 * this host; TCP: --no-shm here, or one rank on each host of -H); each
 * algorithm's alpha and beta come from a least-squares line through its
 * times over the sizes, under its closed form's step and volume counts
 * (bench_cost_shape). The reduction rate and the compute of the model's
 * layers are timed here, one thread, as a rank runs them. */
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench/bench.h"
#include "bench/bench_cost.h"
#include "comm/reduce.h"
#include "nn/nn.h"

/* alltoall too: coll --cost and plan's ep dispatch use it, and the
 * link's line misses it by half (measured in 4 ranks here) */
static const enum coll_kind fit_kinds[] = { COLL_KIND_ALLREDUCE,
	COLL_KIND_ALLGATHER, COLL_KIND_REDUCE_SCATTER, COLL_KIND_BROADCAST,
	COLL_KIND_ALLTOALL };
#define NFITKIND (int)(sizeof fit_kinds / sizeof fit_kinds[0])
#define MAXPTS 256

struct pts {
	double x[MAXPTS], t[MAXPTS];
	int n;
};

/* Seconds of fn(arg) a call: the median of five runs of 10 ms or more,
 * as collx-bench mesh and plan --validate take the median step: a busy
 * machine's compute is what its ranks will see. */
static double
timeit(void (*fn)(void *), void *arg)
{
	double t[5];
	struct bench_stat st;

	fn(arg);			/* warm: pages, caches */
	for (int k = 0; k < 5; k++) {
		double t0 = cli_now();
		int n = 0;

		do {
			fn(arg);
			n++;
		} while ((t[k] = cli_now() - t0) < 0.01);
		t[k] /= n;
	}
	bench_stats(t, 5, &st);
	return st.med;
}

/* ---- the compute ---- */

struct lin {
	float *x, *w, *y, *dx, *dw;
	int n, in, out;
};

static void
lin_run(void *arg)
{
	struct lin *l = arg;

	nn_linear_forward(l->y, l->x, l->w, NULL, l->n, l->in, l->out);
	nn_linear_backward(l->dx, l->dw, NULL, l->y, l->x, l->w, l->n, l->in,
	    l->out);
}

static double
time_linear(int n, int in, int out)
{
	struct lin l = { .n = n, .in = in, .out = out };
	double t;

	l.x = cli_calloc((size_t)n * in, sizeof(float));
	l.dx = cli_calloc((size_t)n * in, sizeof(float));
	l.w = cli_calloc((size_t)in * out, sizeof(float));
	l.dw = cli_calloc((size_t)in * out, sizeof(float));
	l.y = cli_calloc((size_t)n * out, sizeof(float));
	t = timeit(lin_run, &l);
	free(l.x), free(l.dx), free(l.w), free(l.dw), free(l.y);
	return t;
}

static int
cmp_mm(const void *a, const void *b)
{
	const struct bench_mm *x = a, *y = b;

	return (x->flops > y->flops) - (x->flops < y->flops);
}

/* The model's matmul shapes, each width cut by 1, 2 and 4 (tensor
 * parallel shards), at three row counts; sorted by size, equal sizes
 * merged. */
static void
fit_matmul(struct bench_cost *c, const struct nn_dims *d)
{
	int shapes[5][2], ns = 0, rows0;

	if (d->arch == NN_MLP) {
		shapes[ns][0] = d->d_in, shapes[ns++][1] = d->d_hidden;
		shapes[ns][0] = d->d_hidden, shapes[ns++][1] = d->d_hidden;
		shapes[ns][0] = d->d_hidden, shapes[ns++][1] = d->d_out;
		rows0 = 8;
	} else {
		shapes[ns][0] = d->d_model, shapes[ns++][1] = 3 * d->d_model;
		shapes[ns][0] = d->d_model, shapes[ns++][1] = d->d_model;
		shapes[ns][0] = d->d_model, shapes[ns++][1] = d->d_ff;
		shapes[ns][0] = d->d_ff, shapes[ns++][1] = d->d_model;
		shapes[ns][0] = d->d_model, shapes[ns++][1] = d->vocab;
		rows0 = d->seq;
	}
	c->nmm = 0;
	for (int s = 0; s < ns; s++)
		for (int t = 1; t <= 4; t *= 2)
			for (int r = rows0; r <= rows0 * 16; r *= 4) {
				int in = shapes[s][0], o = shapes[s][1] / t;
				double f;

				o = o > 0 ? o : 1;
				f = 2.0 * r * in * o;

				if (c->nmm == BENCH_COST_MAXMM)
					break;
				c->mm[c->nmm].flops = f;
				c->mm[c->nmm++].rate = 3 * f /
				    time_linear(r, in, o);
			}
	qsort(c->mm, (size_t)c->nmm, sizeof *c->mm, cmp_mm);
	int k = 0;
	for (int i = 0; i < c->nmm; i++) {	/* one rate per size */
		if (k > 0 && c->mm[i].flops == c->mm[k - 1].flops) {
			c->mm[k - 1].rate = (c->mm[k - 1].rate +
			    c->mm[i].rate) / 2;
			continue;
		}
		c->mm[k++] = c->mm[i];
	}
	c->nmm = k;
}

struct attn {
	float *q, *k, *v, *o, *att, *dq, *dk, *dv, *scr;
	int b, s, nh, hd;
};

static void
attn_run(void *arg)
{
	struct attn *a = arg;

	nn_attention_forward(a->o, a->att, a->q, a->k, a->v, a->b, a->s,
	    a->nh, a->hd, 1);
	nn_attention_backward(a->dq, a->dk, a->dv, a->scr, a->o, a->att, a->q,
	    a->k, a->v, a->b, a->s, a->nh, a->hd, 1);
}

/* The attention core on the model's heads and sequence (mlp: a small
 * one), in flop/s of 12 b nh s^2 hd (forward 4, backward 8). */
static double
fit_attention(const struct nn_dims *d)
{
	struct attn a = { .b = 4, .s = 32, .nh = 2, .hd = 32 };
	size_t n, m;
	double t;

	if (d->arch != NN_MLP)
		a.s = d->seq, a.nh = d->heads, a.hd = d->d_model / d->heads;
	n = (size_t)a.b * a.s * a.nh * a.hd;
	m = (size_t)a.b * a.nh * a.s * a.s;
	a.q = cli_calloc(n, 4), a.k = cli_calloc(n, 4), a.v = cli_calloc(n, 4);
	a.o = cli_calloc(n, 4), a.dq = cli_calloc(n, 4);
	a.dk = cli_calloc(n, 4), a.dv = cli_calloc(n, 4);
	a.att = cli_calloc(m, 4);
	a.scr = cli_calloc((size_t)a.s * a.s, 4);
	t = timeit(attn_run, &a);
	free(a.q), free(a.k), free(a.v), free(a.o), free(a.dq), free(a.dk);
	free(a.dv), free(a.att), free(a.scr);
	return 12.0 * a.b * a.nh * a.s * a.s * a.hd / t;
}

struct elem {
	float *x, *y, *dx;
	size_t n;
};

static void
elem_run(void *arg)
{
	struct elem *e = arg;

	nn_gelu_forward(e->y, e->x, e->n);
	nn_gelu_backward(e->dx, e->x, e->y, e->n);
}

/* GELU forward and backward, bytes 4 n (2 + 3) a second. */
static double
fit_elementwise(void)
{
	struct elem e = { .n = 1 << 20 };
	double t;

	e.x = cli_calloc(e.n, 4), e.y = cli_calloc(e.n, 4);
	e.dx = cli_calloc(e.n, 4);
	t = timeit(elem_run, &e);
	free(e.x), free(e.y), free(e.dx);
	return 20.0 * e.n / t;
}

struct red {
	reduce_fn fn;
	float *a, *b;
	size_t n;
};

static void
red_run(void *arg)
{
	struct red *r = arg;

	r->fn(r->a, r->b, r->n);
}

/* A sum of 4 MiB into 4 MiB, the collectives' kernel. */
static double
fit_reduce(void)
{
	struct red r = { .fn = comm_reduce_kernel(DT_F32, COLL_SUM),
	    .n = 1 << 20 };
	double t;

	r.a = cli_calloc(r.n, 4), r.b = cli_calloc(r.n, 4);
	t = timeit(red_run, &r);
	free(r.a), free(r.b);
	return 4.0 * r.n / t;
}

/* One process's compute rates into c. */
static void
fit_rates(struct bench_cost *c, const struct nn_dims *d)
{
	c->gamma = fit_reduce();
	fit_matmul(c, d);
	c->attn_rate = fit_attention(d);
	c->elem_rate = fit_elementwise();
}

/* What a rank sends up the pipe: its compute rates, in one write under
 * PIPE_BUF, so that the ranks' writes do not interleave. */
struct rates {
	double gamma, attn, elem;
	int nmm;
	struct bench_mm mm[BENCH_COST_MAXMM];
};

static void
rates_of(struct rates *r, const struct nn_dims *d)
{
	struct bench_cost *c = cli_calloc(1, sizeof *c);

	fit_rates(c, d);
	r->gamma = c->gamma, r->attn = c->attn_rate, r->elem = c->elem_rate;
	r->nmm = c->nmm;
	memcpy(r->mm, c->mm, sizeof r->mm);
	free(c);
}

/* The compute, timed in k processes at once as k ranks of this host run
 * it (sharing its cores and memory), their rates averaged. Each process
 * keeps computing after its own timing until every one has reported, so
 * that every timing ran beside k - 1 busy processes: one that finished
 * early left the late ones a core of their own, rates up to twice the
 * shared ones (the fit then saw less sharing than the runs, and plan
 * fell 10-28% under measured steps). */
static void
fit_compute(struct bench_cost *c, const struct nn_dims *d, int k)
{
	struct rates *r = cli_calloc((size_t)k + 1, sizeof *r);
	pid_t *kid = cli_calloc((size_t)k, sizeof *kid);
	pid_t me = getpid();
	int fd[2], n = 0;

	nn_set_threads(1);
	fflush(stdout);
	if (k < 2 || pipe(fd) < 0)
		k = 1;
	for (int i = 1; i < k; i++)
		if ((kid[i] = fork()) == 0) {
			/* a rank: its rates up the pipe, then busy until
			 * killed, or until the fit is gone */
			close(fd[0]);
			rates_of(&r[0], d);
			(void)!write(fd[1], &r[0], sizeof r[0]);
			while (getppid() == me)
				rates_of(&r[k], d);
			_exit(0);
		}
	rates_of(&r[0], d);
	n = 1;
	if (k > 1) {
		struct pollfd p = { .fd = fd[0], .events = POLLIN };

		close(fd[1]);
		while (n < k) {
			/* busy beside the ranks not yet done */
			if (poll(&p, 1, 0) == 0) {
				if (waitpid(-1, NULL, WNOHANG) > 0)
					break;	/* a rank died */
				rates_of(&r[k], d);
				continue;
			}
			if (read(fd[0], &r[n], sizeof r[n]) !=
			    (ssize_t)sizeof r[n])
				break;	/* a rank died: those reported */
			n++;
		}
		close(fd[0]);
		for (int i = 1; i < k; i++)
			if (kid[i] > 0)
				kill(kid[i], SIGKILL);
		while (wait(NULL) > 0)
			;
	}
	k = n;
	c->nmm = r[0].nmm;
	memcpy(c->mm, r[0].mm, sizeof c->mm);
	c->gamma = c->attn_rate = c->elem_rate = 0;
	for (int j = 0; j < c->nmm; j++)
		c->mm[j].rate = 0;
	for (int i = 0; i < k; i++) {
		c->gamma += r[i].gamma / k, c->attn_rate += r[i].attn / k;
		c->elem_rate += r[i].elem / k;
		for (int j = 0; j < c->nmm; j++)
			c->mm[j].rate += r[i].mm[j].rate / k;
	}
	c->compute_ranks = k;
	free(kid);
	free(r);
}

/* ---- the collectives ---- */

/* collx-bench coll's CSV rows in log, kind's algo at world p, into pts
 * per algorithm (x: the vector's bytes, t: seconds): the in-place rows,
 * as the trainers call them, or an algorithm's out-of-place rows where
 * it ran only those. pts holds 2 COLL_ALGO_COUNT (out-of-place after). */
static void
read_sweep(const char *log, struct pts *pts)
{
	char line[512], algo[32], place[8];
	unsigned long bytes;
	double s;
	FILE *f = fopen(log, "r");

	if (f == NULL)
		return;
	while (fgets(line, sizeof line, f) != NULL) {
		enum coll_algo a;
		struct pts *p;

		if (sscanf(line, "collx-bench,%*[^,],%31[^,],%*d,%*d,%*[^,],"
		    "%*u,%lu,%*d,%lg,%*[^,],%*[^,],%7[^,]", algo, &bytes, &s,
		    place) != 4 || coll_algo_parse(algo, &a) < 0 ||
		    a == COLL_AUTO || s <= 0)
			continue;
		p = &pts[a + (strcmp(place, "in") != 0) * COLL_ALGO_COUNT];
		if (p->n < MAXPTS) {
			p->x[p->n] = (double)bytes;
			p->t[p->n++] = s;
		}
	}
	fclose(f);
	for (int a = 0; a < COLL_ALGO_COUNT; a++)
		if (pts[a].n < 2)
			pts[a] = pts[a + COLL_ALGO_COUNT];
}

/* Each algorithm's line through its points, as alpha and beta, and its
 * times kept as measured (the sweep ascends in size), with where they
 * ran: p ranks on hosts hosts. hier (its phases composed, no closed
 * form of its own) is kept on shm alone, where all its phases run in
 * the host, with the counts of auto's choice at its middle size for its
 * line; bench_cost_coll reads its sweep on one host. */
static void
fit_algos(struct bench_cost *c, enum bench_link l, enum coll_kind k, int p,
    int hosts, struct pts *pts)
{
	for (int a = 0; a < COLL_ALGO_COUNT; a++) {
		double steps, vol, red, A, B;
		struct bench_ab *ab = &c->coll[l][k][a];
		enum coll_algo as = a;

		if (a == COLL_HIER && (l != BENCH_SHM || pts[a].n < 2))
			continue;
		if (a == COLL_HIER)
			as = coll_auto(k, (size_t)pts[a].x[pts[a].n / 2], p);
		if (pts[a].n < 2 || bench_cost_shape(k, as, p, &steps, &vol,
		    &red) < 0)
			continue;
		for (int i = 0; i < pts[a].n; i++) {	/* less the reduction */
			double t = pts[a].t[i];
			double r = red * pts[a].x[i] / c->gamma;

			if (i < BENCH_COST_MAXPT && (i == 0 ||
			    pts[a].x[i] > ab->tb[ab->nt - 1])) {
				ab->tb[ab->nt] = pts[a].x[i];
				ab->tt[ab->nt++] = t;
			}
			pts[a].t[i] = t - r > t / 10 ? t - r : t / 10;
		}
		bench_cost_line(pts[a].x, pts[a].t, pts[a].n, &A, &B);
		ab->alpha = A / steps;
		ab->beta = B > 0 ? vol / B : 1e15;
		ab->points = pts[a].n;
		ab->ranks = p, ab->hosts = hosts;
	}
}

static int
sweep(const struct bench_dp *d, const char *dir, enum bench_link l,
    enum coll_kind k, int p, struct bench_cost *c, char *err, size_t errlen)
{
	char run[4200], prog[4200], log[4200], n[16];
	char *argv[40];
	struct pts *pts = cli_calloc(2 * COLL_ALGO_COUNT, sizeof *pts);
	int i = 0, rc;

	snprintf(run, sizeof run, "%s/collx-run", d->bindir);
	snprintf(prog, sizeof prog, "%s/collx-bench", d->bindir);
	snprintf(log, sizeof log, "%s/sweep.csv", dir);
	snprintf(n, sizeof n, "%d", p);
	argv[i++] = run;
	if (l == BENCH_TCP && d->host_list != NULL) {
		argv[i++] = "-H";
		argv[i++] = (char *)d->host_list;
		if (d->ssh != NULL)
			argv[i++] = "--ssh", argv[i++] = (char *)d->ssh;
		if (d->master != NULL)
			argv[i++] = "--master", argv[i++] = (char *)d->master;
	} else
		argv[i++] = "-n", argv[i++] = n;
	argv[i++] = "--";
	argv[i++] = prog;
	argv[i++] = "coll";
	argv[i++] = "--op", argv[i++] = (char *)bench_kind_name(k);
	argv[i++] = "--algo", argv[i++] = "all";
	argv[i++] = "-b", argv[i++] = (char *)d->fit_min;
	argv[i++] = "-e", argv[i++] = (char *)d->fit_max;
	argv[i++] = "-f", argv[i++] = "4", argv[i++] = "-n", argv[i++] = "5";
	argv[i++] = "-w", argv[i++] = "2", argv[i++] = "--csv";
	argv[i++] = "-q";
	if (l == BENCH_TCP && d->host_list == NULL)
		argv[i++] = "--no-shm";
	if (d->iface != NULL)
		argv[i++] = "--iface", argv[i++] = (char *)d->iface;
	argv[i] = NULL;
	if ((rc = bench_run_child(argv, log)) != 0) {
		char why[COLLX_ERRLEN];

		cli_first_line(log, why, sizeof why);
		free(pts);
		cli_fail(err, errlen, "%s %s sweep failed (exit %d): %s",
		    bench_link_name(l), bench_kind_name(k), rc, why);
		return rc == 130 ? 130 : CLI_EXIT_RUNTIME;
	}
	read_sweep(log, pts);
	fit_algos(c, l, k, p, l == BENCH_TCP && d->host_list != NULL ?
	    c->hosts : 1, pts);
	free(pts);
	return 0;
}

static int
cores(void)
{
	cpu_set_t s;

	if (sched_getaffinity(0, sizeof s, &s) < 0)
		return 1;
	return CPU_COUNT(&s) > 0 ? CPU_COUNT(&s) : 1;
}

int
bench_fit_run(struct bench_out *o, const struct bench_dp *d, int progress,
    char *err, size_t errlen)
{
	struct bench_cost *c = cli_calloc(1, sizeof *c);
	struct bench_progress pr;
	struct nn_dims dims;
	char dir[4096], p[4200];
	int rc = 0, world = d->max_world, nl = BENCH_NLINK;

	if (nn_arch_parse(d->arch, &dims.arch) < 0 ||
	    nn_dims_parse(d->dims, dims.arch, &dims, err, errlen) < 0) {
		free(c);
		return CLI_EXIT_USAGE;
	}
	if (bench_workdir(dir, sizeof dir, err, errlen) < 0) {
		free(c);
		return CLI_EXIT_RUNTIME;
	}
	c->version = BENCH_COST_VERSION;
	c->world = world;
	c->hosts = d->host_list != NULL ? d->hosts : 1;
	c->cores = cores();
	snprintf(c->arch, sizeof c->arch, "%s", d->arch);
	snprintf(c->dims, sizeof c->dims, "%s", d->dims);
	bench_progress_start(&pr, progress, nl * NFITKIND + 1);
	bench_progress_show(&pr, "compute");
	fit_compute(c, &dims, d->host_list != NULL ? 1 : world);
	pr.done++;
	for (int l = 0; l < nl && rc == 0; l++)
		for (int k = 0; k < NFITKIND && rc == 0; k++) {
			char what[64];

			snprintf(what, sizeof what, "%s %s", bench_link_name(l),
			    bench_kind_name(fit_kinds[k]));
			bench_progress_show(&pr, what);
			rc = sweep(d, dir, l, fit_kinds[k], world, c, err,
			    errlen);
			pr.done++;
			if (bench_interrupted)
				rc = 130;
		}
	bench_progress_end(&pr);
	/* a link's own constants: ring allgather's, p - 1 messages of 1/p */
	for (int l = 0; l < nl; l++)
		c->link[l] = c->coll[l][COLL_KIND_ALLGATHER][COLL_RING];
	(void)o;			/* the file is the output */
	if (rc == 0 && bench_cost_write(c, d->fit_out, err, errlen) < 0)
		rc = CLI_EXIT_RUNTIME;
	snprintf(p, sizeof p, "%s/sweep.csv", dir);
	unlink(p);
	rmdir(dir);
	free(c);
	return rc;
}
