/* launch_end: how the ranks of a job ended: the order of their deaths, and
 * which failure a launcher names, the one that came first. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "cli/cli.h"
#include "launch/launch.h"

void
launch_ends_init(struct launch_ends *e, int n)
{
	e->n = n;
	e->rank = cli_calloc((size_t)n, sizeof *e->rank);
	e->deaths = 0;
}

void
launch_ends_reset(struct launch_ends *e)
{
	memset(e->rank, 0, (size_t)e->n * sizeof *e->rank);
	e->deaths = 0;
}

void
launch_ends_free(struct launch_ends *e)
{
	free(e->rank);
	e->rank = NULL;
	e->n = 0;
}

int
launch_status_failed(int status)
{
	return !WIFEXITED(status) || WEXITSTATUS(status) != 0;
}

int
launch_killed_from_outside(int status)
{
	int sig = WIFSIGNALED(status) ? WTERMSIG(status) : 0;

	return sig == SIGKILL || sig == SIGTERM || sig == SIGINT ||
	    sig == SIGHUP || sig == SIGQUIT;
}

void
launch_ends_died(struct launch_ends *e, pid_t pid)
{
	struct launch_end *r;
	int i;

	for (i = 0; i < e->n; i++) {
		r = &e->rank[i];
		if (r->pid == pid) {
			if (r->died == 0)
				r->died = ++e->deaths;
			return;
		}
	}
}

int
launch_ends_reaped(struct launch_ends *e, pid_t pid, int status)
{
	int i;

	for (i = 0; i < e->n; i++)
		if (e->rank[i].pid == pid &&
		    e->rank[i].state == LAUNCH_RUNNING) {
			e->rank[i].state = LAUNCH_REAPED;
			e->rank[i].status = status;
			return i;
		}
	return -1;
}

void
launch_ends_number(struct launch_ends *e)
{
	struct launch_end *r;
	int i, pass;

	for (pass = 0; pass < 2; pass++)
		for (i = 0; i < e->n; i++) {
			r = &e->rank[i];
			if (r->state == LAUNCH_REAPED && r->died == 0 &&
			    launch_killed_from_outside(r->status) == !pass)
				r->died = ++e->deaths;
		}
}

int
launch_ends_first_failure(const struct launch_ends *e, int outside)
{
	const struct launch_end *r;
	int i, first = -1;

	for (i = 0; i < e->n; i++) {
		r = &e->rank[i];
		if (r->state == LAUNCH_REAPED &&
		    launch_status_failed(r->status) &&
		    (!outside || launch_killed_from_outside(r->status)) &&
		    (first < 0 || r->died < e->rank[first].died))
			first = i;
	}
	return first;
}

int
launch_pid_stopped(pid_t pid)
{
	char path[64], buf[512], *p;
	FILE *f;
	size_t n;

	snprintf(path, sizeof path, "/proc/%ld/stat", (long)pid);
	if ((f = fopen(path, "r")) == NULL)
		return 0;
	n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = '\0';
	/* "PID (COMM) STATE ...": COMM may hold ") ", the state follows
	 * the last one */
	if ((p = strrchr(buf, ')')) == NULL || p[1] != ' ')
		return 0;
	return p[2] == 'T' || p[2] == 't';
}
