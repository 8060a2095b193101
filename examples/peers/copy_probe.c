/*
 * copy_probe: the machine's own launch-to-launch spread, with no collx and
 * no MPI in it. One process a CPU of its affinity mask, each pinned to its
 * CPU, copies BYTES from one buffer to another and back ITERS times after
 * 3 warm-up rounds, all started together; prints median_s=SECONDS, the
 * slowest process's median round (a job waits for its slowest rank). A launch of
 * examples/bench-launch.sh runs it beside collx and Open MPI, so a slow
 * launch that all three share is the machine's (the memory the host gives
 * the guest at that moment), not the library's.
 * usage: copy_probe BYTES ITERS
 */
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double
now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec * 1e-9;
}

static int
cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* One pinned process's median round, into *out. */
static void
probe(int cpu, size_t bytes, int iters, double *out)
{
	cpu_set_t one;
	char *a = malloc(bytes), *b = malloc(bytes);
	double *t = malloc(iters * sizeof *t), s;
	int i;

	CPU_ZERO(&one);
	CPU_SET(cpu, &one);
	if (!a || !b || !t || sched_setaffinity(0, sizeof one, &one) < 0)
		_exit(1);
	memset(a, 1, bytes);
	memset(b, 2, bytes);
	for (i = -3; i < iters; i++) {
		s = now();
		memcpy(b, a, bytes);
		memcpy(a, b, bytes);
		if (i >= 0)
			t[i] = now() - s;
	}
	qsort(t, iters, sizeof *t, cmp);
	*out = t[iters / 2];
}

int
main(int argc, char **argv)
{
	cpu_set_t mask;
	double *res, med[CPU_SETSIZE];
	size_t bytes;
	int iters, cpu, n = 0, st, ok = 1;

	if (argc != 3 || (bytes = strtoul(argv[1], NULL, 10)) == 0 ||
	    (iters = atoi(argv[2])) <= 0) {
		fprintf(stderr, "usage: copy_probe BYTES ITERS\n");
		return 2;
	}
	res = mmap(NULL, CPU_SETSIZE * sizeof *res, PROT_READ | PROT_WRITE,
	    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (res == MAP_FAILED || sched_getaffinity(0, sizeof mask, &mask) < 0)
		return 1;
	for (cpu = 0; cpu < CPU_SETSIZE; cpu++) {
		if (!CPU_ISSET(cpu, &mask))
			continue;
		if (fork() == 0) {
			probe(cpu, bytes, iters, &res[cpu]);
			_exit(0);
		}
	}
	while (wait(&st) > 0)
		ok &= WIFEXITED(st) && WEXITSTATUS(st) == 0;
	if (!ok)
		return 1;
	for (cpu = 0; cpu < CPU_SETSIZE; cpu++)
		if (CPU_ISSET(cpu, &mask))
			med[n++] = res[cpu];
	qsort(med, n, sizeof *med, cmp);
	printf("median_s=%.9g\n", med[n - 1]);
	return 0;
}
