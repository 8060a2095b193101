/*
 * line_probe: the machine's own core-to-core latency at this moment, with
 * no collx and no MPI in it. Two processes pinned to the first two CPUs
 * of the affinity mask hand a cache line back and forth ITERS times after
 * 100 warm-up trips; prints median_s=SECONDS, the median round trip over
 * rounds of 100 trips each. A small allreduce on one host is a few such
 * trips, so a launch of examples/bench-launch.sh runs it beside collx and
 * Open MPI: a slow 4 KiB launch that all three share is the machine's
 * (where the host runs the guest's two CPUs then), not the library's.
 * usage: line_probe ITERS
 */
#define _GNU_SOURCE
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define TRIPS 100	/* a round: this many trips, timed together */

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

int
main(int argc, char **argv)
{
	_Atomic long *ball;
	cpu_set_t mask;
	double *t, s = 0;
	int rounds, cpu[2], n = 0, st;
	long i, trips;

	if (argc != 2 || (rounds = atoi(argv[1]) / TRIPS) <= 0) {
		fprintf(stderr, "usage: line_probe ITERS (at least %d)\n", TRIPS);
		return 2;
	}
	if (sched_getaffinity(0, sizeof mask, &mask) < 0)
		return 1;
	for (int c = 0; c < CPU_SETSIZE && n < 2; c++)
		if (CPU_ISSET(c, &mask))
			cpu[n++] = c;
	ball = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED |
	    MAP_ANONYMOUS, -1, 0);
	t = malloc(rounds * sizeof *t);
	if (n < 2 || ball == MAP_FAILED || t == NULL) {
		fprintf(stderr, "line_probe: needs 2 CPUs\n");
		return 1;
	}
	trips = (long)(rounds + 1) * TRIPS;
	*ball = 0;
	if (fork() == 0) {	/* the far side: answers odd with even */
		if (pin(cpu[1]) < 0)
			_exit(1);
		for (i = 0; i < trips; i++) {
			while (atomic_load(ball) != 2 * i + 1)
				;
			atomic_store(ball, 2 * i + 2);
		}
		_exit(0);
	}
	if (pin(cpu[0]) < 0)
		return 1;
	for (i = 0; i < trips; i++) {
		if (i % TRIPS == 0)
			s = now();
		atomic_store(ball, 2 * i + 1);
		while (atomic_load(ball) != 2 * i + 2)
			;
		if (i % TRIPS == TRIPS - 1 && i >= TRIPS)
			t[i / TRIPS - 1] = (now() - s) / TRIPS;
	}
	if (wait(&st) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
		return 1;
	qsort(t, rounds, sizeof *t, cmp);
	printf("median_s=%.9g\n", t[rounds / 2]);
	free(t);
	return 0;
}
