/* par_world.h: the lib/par unit tests' world of forked ranks (ranks.h),
 * each holding a comm group on loopback, and their models (par_model). A
 * rank states what it checked with par_check(); the line travels up a
 * pipe and the parent prints it as a TAP line, so checks made inside the
 * ranks count like the parent's. A rank that cannot join, dies or exits
 * non-zero fails the world's own line. Ranks run under an alarm and the
 * group under a timeout, so nothing hangs. */
#ifndef COLLX_PAR_WORLD_H
#define COLLX_PAR_WORLD_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/comm.h"
#include "nn/nn.h"
#include "ranks.h"
#include "unit.h"

#define PAR_MAXW 8

/* A fresh model of sizes d (nn_init from seed), loaded; 0 or -1. */
static inline int
par_model(struct nn_model *m, const struct nn_dims *d, uint64_t seed)
{
	struct tensor_set s;
	char e[256];
	int rc;

	if (nn_init(&s, d, seed, e, sizeof e) < 0)
		return -1;
	rc = nn_model_load(m, &s, e, sizeof e);
	tensor_set_free(&s);
	return rc;
}

/* Runs in every rank with its group; returns the rank's exit code. */
typedef int (*par_rank_fn)(struct comm *c, void *arg);

static int par_fd = -1;		/* the report pipe, in a rank */

/* In a rank: one check, as a line "1 what" or "0 what" (one write, so
 * lines of several ranks do not mix). Returns ok. */
static int
par_check(int ok, const char *fmt, ...)
{
	char line[512];
	va_list ap;
	int n;

	n = snprintf(line, sizeof line, "%d ", ok != 0);
	va_start(ap, fmt);
	n += vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
	va_end(ap);
	if (n > (int)sizeof line - 2)
		n = (int)sizeof line - 2;
	line[n++] = '\n';
	if (write(par_fd, line, (size_t)n) != n)
		_exit(99);
	return ok != 0;
}

struct par_run {
	par_rank_fn fn;
	void *arg;
	const char *master;
};

static int
par_rank(int rank, int world, void *arg)
{
	const struct par_run *run = arg;
	struct comm_options o = { .rank = rank, .world = world,
	    .master = run->master, .timeout = 20, .job = "test_par" };
	struct comm *c;
	char err[512];
	int rc;

	if (comm_open(&c, &o, err, sizeof err) < 0) {
		par_check(0, "rank %d joins: %s", rank, err);
		return 1;
	}
	rc = run->fn(c, run->arg);
	comm_close(c);
	return rc;
}

/* Forks world ranks running fn, prints their checks, and one line for the
 * world: every rank exited 0. */
static void
par_world(int world, const char *name, par_rank_fn fn, void *arg)
{
	char master[64], *line = NULL, what[160];
	struct par_run run = { fn, arg, master };
	pid_t pid[PAR_MAXW];
	size_t cap = 0;
	int p[2], st[PAR_MAXW], bad;
	FILE *f;

	snprintf(master, sizeof master, "127.0.0.1:%d",
	    unit_free_port(AF_INET));
	if (pipe(p) < 0) {
		UNIT_OK(0, "a pipe for the ranks' reports");
		return;
	}
	fflush(stdout);
	par_fd = p[1];
	unit_fork_ranks(world, 120, par_rank, &run, pid);
	close(p[1]);
	par_fd = -1;
	f = fdopen(p[0], "r");
	while (getline(&line, &cap, f) > 0) {
		line[strcspn(line, "\n")] = '\0';
		UNIT_OK(line[0] == '1', line + 2);
	}
	free(line);
	fclose(f);
	bad = unit_wait_ranks(world, pid, st);
	snprintf(what, sizeof what, "%s: all %d ranks exit 0", name, world);
	if (!UNIT_OK(bad == 0, what))
		for (int r = 0; r < world; r++)
			printf("#   rank %d: status %d\n", r, st[r]);
}

#endif
