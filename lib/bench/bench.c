/* bench: what collx-bench's subcommands share — stopping together on
 * Ctrl-C, statistics over the slowest rank's times, host counting, sweep
 * sizes and the progress line. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/bench.h"

volatile sig_atomic_t bench_interrupted;

static void
on_signal(int sig)
{
	(void)sig;
	bench_interrupted = 1;
}

void
bench_catch_signals(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
}

int
bench_agree_stop(struct comm *c)
{
	int32_t v = bench_interrupted ? 1 : 0;

	if (coll_allreduce(c, &v, 1, DT_I32, COLL_MAX, COLL_AUTO) < 0)
		return -1;
	return v != 0;
}

static int
cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

void
bench_stats(double *t, int n, struct bench_stat *s)
{
	int k;

	memset(s, 0, sizeof *s);
	if (n <= 0)
		return;
	qsort(t, (size_t)n, sizeof *t, cmp_double);
	s->min = t[0];
	s->max = t[n - 1];
	/* The median of an even count is the mean of the middle two. */
	s->med = n % 2 ? t[n / 2] : (t[n / 2 - 1] + t[n / 2]) / 2;
	/* p99: nearest rank, ceil(0.99 n). */
	k = (int)ceil(0.99 * n);
	s->p99 = t[k < 1 ? 0 : k - 1];
}

int
bench_slowest(struct comm *c, double *t, int n)
{
	if (comm_size(c) == 1 || n == 0)
		return 0;
	return coll_allreduce(c, t, (size_t)n, DT_F64, COLL_MAX, COLL_AUTO);
}

#define HOSTKEY 128

int
bench_hosts(struct comm *c)
{
	int w = comm_size(c), hosts = 0;
	char key[HOSTKEY], ns[64], *all;
	ssize_t k;

	memset(key, 0, sizeof key);
	memset(ns, 0, sizeof ns);
	if (gethostname(key, 60) < 0)
		strcpy(key, "?");
	/* Ranks in different network namespaces are different hosts (as
	 * in an emulated cluster), although they share a hostname. */
	if ((k = readlink("/proc/self/ns/net", ns, sizeof ns - 1)) < 0)
		k = 0;
	ns[k] = '\0';
	snprintf(key + strlen(key), sizeof key - strlen(key), "/%s", ns);
	if (w == 1)
		return 1;
	all = cli_calloc((size_t)w, HOSTKEY);
	if (coll_allgather(c, key, all, HOSTKEY, DT_U8, COLL_AUTO) < 0) {
		free(all);
		return -1;
	}
	for (int i = 0; i < w; i++) {
		int seen = 0;

		for (int j = 0; j < i && !seen; j++)
			seen = memcmp(all + (size_t)i * HOSTKEY,
			    all + (size_t)j * HOSTKEY, HOSTKEY) == 0;
		hosts += !seen;
	}
	free(all);
	return hosts;
}

size_t
bench_next_size(const struct bench_sizes *z, size_t cur)
{
	size_t next;

	if (z->step > 0)
		next = cur + z->step;
	else {
		double d = ceil((double)cur * z->factor);

		next = d > (double)SIZE_MAX / 2 ? SIZE_MAX : (size_t)d;
		if (next <= cur)
			next = cur + 1;
	}
	return next > z->max || next < cur ? 0 : next;
}

int
bench_count_sizes(const struct bench_sizes *z)
{
	int n = 0;

	for (size_t s = z->min; s != 0; s = bench_next_size(z, s))
		n++;
	return n;
}

const char *
bench_size_str(size_t bytes, char *buf, size_t len)
{
	static const char units[] = "KMGT";
	size_t v = bytes;
	int u = -1;

	while (v >= 1024 && v % 1024 == 0 && u < 3) {
		v /= 1024;
		u++;
	}
	if (u < 0)
		snprintf(buf, len, "%zu", bytes);
	else
		snprintf(buf, len, "%zu%c", v, units[u]);
	return buf;
}

void
bench_progress_start(struct bench_progress *p, int on, int total)
{
	p->on = on;
	p->done = 0;
	p->total = total;
	p->start = cli_now();
}

void
bench_progress_show(struct bench_progress *p, const char *what)
{
	double el, left;

	if (!p->on)
		return;
	el = cli_now() - p->start;
	if (p->done > 0) {
		left = el / p->done * (p->total - p->done);
		fprintf(stderr, "\r\033[K%s: %s (%d/%d), about %.0f s left",
		    cli_progname, what, p->done + 1, p->total, left);
	} else
		fprintf(stderr, "\r\033[K%s: %s (%d/%d)", cli_progname, what,
		    p->done + 1, p->total);
	fflush(stderr);
}

void
bench_progress_end(struct bench_progress *p)
{
	if (p->on)
		fprintf(stderr, "\r\033[K");
}
