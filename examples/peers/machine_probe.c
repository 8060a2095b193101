/*
 * machine_probe: the machine's own speed at this moment, with no collx and
 * no MPI in it, for examples/bench-launch.sh to run beside each launch:
 * a slow launch that collx, Open MPI and the probe share is the machine's
 * (the memory and the cores the host gives the guest then), not the
 * library's. Prints median_s=SECONDS.
 *   copy BYTES ITERS  one process a CPU of the affinity mask, each pinned,
 *                     copies BYTES to and fro ITERS times after 3 warm-up
 *                     rounds, all started together: the slowest process's
 *                     median round (a job waits for its slowest rank)
 *   line ITERS        two processes pinned to the mask's first two CPUs
 *                     hand a cache line back and forth, the trips a small
 *                     allreduce is made of: the median round trip over
 *                     rounds of 100 trips, after one round of warm-up
 * usage: machine_probe copy BYTES ITERS | machine_probe line ITERS
 */
#define _GNU_SOURCE
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define TRIPS 100	/* a line round: this many trips, timed together */

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

static int
pin(int cpu)
{
	cpu_set_t one;

	CPU_ZERO(&one);
	CPU_SET(cpu, &one);
	return sched_setaffinity(0, sizeof one, &one);
}

/* Shared memory for the processes, zeroed. */
static void *
shared(size_t bytes)
{
	void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED |
	    MAP_ANONYMOUS, -1, 0);

	return p == MAP_FAILED ? NULL : p;
}

/* Whether every child exited 0. */
static int
reap(void)
{
	int st, ok = 1;

	while (wait(&st) > 0)
		ok &= WIFEXITED(st) && WEXITSTATUS(st) == 0;
	return ok;
}

/* One pinned process's median round of copies, into *out. */
static void
copy_one(int cpu, size_t bytes, int iters, double *out)
{
	char *a = malloc(bytes), *b = malloc(bytes);
	double *t = malloc(iters * sizeof *t), s;

	if (!a || !b || !t || pin(cpu) < 0)
		_exit(1);
	memset(a, 1, bytes);
	memset(b, 2, bytes);
	for (int i = -3; i < iters; i++) {
		s = now();
		memcpy(b, a, bytes);
		memcpy(a, b, bytes);
		if (i >= 0)
			t[i] = now() - s;
	}
	qsort(t, iters, sizeof *t, cmp);
	*out = t[iters / 2];
}

static int
copy(const cpu_set_t *mask, size_t bytes, int iters)
{
	double *res = shared(CPU_SETSIZE * sizeof *res), worst = 0;

	if (res == NULL)
		return 1;
	for (int cpu = 0; cpu < CPU_SETSIZE; cpu++)
		if (CPU_ISSET(cpu, mask) && fork() == 0) {
			copy_one(cpu, bytes, iters, &res[cpu]);
			_exit(0);
		}
	if (!reap())
		return 1;
	for (int cpu = 0; cpu < CPU_SETSIZE; cpu++)
		if (CPU_ISSET(cpu, mask) && res[cpu] > worst)
			worst = res[cpu];
	printf("median_s=%.9g\n", worst);
	return 0;
}

static int
line(const cpu_set_t *mask, int rounds)
{
	_Atomic long *ball = shared(4096);
	double *t = malloc(rounds * sizeof *t), s = 0;
	long trips = (long)(rounds + 1) * TRIPS;
	int cpu[2], n = 0;

	for (int c = 0; c < CPU_SETSIZE && n < 2; c++)
		if (CPU_ISSET(c, mask))
			cpu[n++] = c;
	if (n < 2 || ball == NULL || t == NULL) {
		fprintf(stderr, "machine_probe line: needs 2 CPUs\n");
		free(t);
		return 1;
	}
	if (fork() == 0) {	/* the far side: answers odd with even */
		if (pin(cpu[1]) < 0)
			_exit(1);
		for (long i = 0; i < trips; i++) {
			while (atomic_load(ball) != 2 * i + 1)
				;
			atomic_store(ball, 2 * i + 2);
		}
		_exit(0);
	}
	if (pin(cpu[0]) < 0)
		return 1;
	for (long i = 0; i < trips; i++) {
		if (i % TRIPS == 0)
			s = now();
		atomic_store(ball, 2 * i + 1);
		while (atomic_load(ball) != 2 * i + 2)
			;
		if (i % TRIPS == TRIPS - 1 && i >= TRIPS)
			t[i / TRIPS - 1] = (now() - s) / TRIPS;
	}
	if (!reap())
		return 1;
	qsort(t, rounds, sizeof *t, cmp);
	printf("median_s=%.9g\n", t[rounds / 2]);
	free(t);
	return 0;
}

int
main(int argc, char **argv)
{
	cpu_set_t mask;
	size_t bytes;
	int iters;

	if (sched_getaffinity(0, sizeof mask, &mask) < 0)
		return 1;
	if (argc == 4 && strcmp(argv[1], "copy") == 0 &&
	    (bytes = strtoul(argv[2], NULL, 10)) > 0 &&
	    (iters = atoi(argv[3])) > 0)
		return copy(&mask, bytes, iters);
	if (argc == 3 && strcmp(argv[1], "line") == 0 &&
	    (iters = atoi(argv[2]) / TRIPS) > 0)
		return line(&mask, iters);
	fprintf(stderr, "usage: machine_probe copy BYTES ITERS | "
	    "machine_probe line ITERS (at least %d)\n", TRIPS);
	return 2;
}
