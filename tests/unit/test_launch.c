/* test_launch: where collx-run's ranks run, what they are passed, how they
 * ended and which failure it names. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/cli.h"
#include "prog/launch.h"
#include "unit.h"

/* Whether r[0..n-1] are the ranks want (host, local rank, world each). */
static int
ranks_are(const struct launch_rank *r, int n, const int want[][3])
{
	int i;

	for (i = 0; i < n; i++)
		if (r[i].host != want[i][0] || r[i].local_rank != want[i][1] ||
		    r[i].local_world != want[i][2])
			return 0;
	return 1;
}

static void
test_place_ranks(void)
{
	static const int alone[3][3] = { { -1, 0, 3 }, { -1, 1, 3 },
	    { -1, 2, 3 } };
	/* Host 0 (this machine) takes 1 rank a visit, host 1 two. */
	static const int slots[7][3] = { { -1, 0, 3 }, { 1, 0, 4 }, { 1, 1, 4 },
	    { -1, 1, 3 }, { 1, 2, 4 }, { 1, 3, 4 }, { -1, 2, 3 } };
	static const int blocks[5][3] = { { -1, 0, 3 }, { -1, 1, 3 },
	    { -1, 2, 3 }, { 1, 0, 2 }, { 1, 1, 2 } };
	struct launch_hosts h = { 0 };
	struct launch_rank r[7];
	char err[256];

	launch_place_ranks(&h, 3, 0, r);
	UNIT_OK(ranks_are(r, 3, alone), "without hosts every rank is local, "
	    "rank i of n on this machine");
	UNIT_OK(launch_hosts_add_list(&h, "localhost,192.0.2.1:2", err,
	    sizeof err) == 0, "hosts parsed");
	launch_hosts_find_local(&h);
	launch_place_ranks(&h, 7, 0, r);
	UNIT_OK(ranks_are(r, 7, slots), "by slots: localhost's ranks local, "
	    "the other host's remote, each counted on its host");
	launch_place_ranks(&h, 5, 3, r);
	UNIT_OK(ranks_are(r, 5, blocks), "--per-host 3: blocks of three");
	launch_hosts_free(&h);
}

static void
test_export(void)
{
	struct launch_job j = { 0 };
	char err[256];

	setenv("TL_FROM_HERE", "a b", 1);
	unsetenv("TL_UNSET");
	UNIT_OK(launch_job_export(&j, "TL_FROM_HERE", err, sizeof err) == 0 &&
	    launch_job_export(&j, "X_1=", err, sizeof err) == 0 &&
	    launch_job_export(&j, "_y=1=2", err, sizeof err) == 0 &&
	    j.nexports == 3 && strcmp(j.exports[0], "TL_FROM_HERE=a b") == 0 &&
	    strcmp(j.exports[1], "X_1=") == 0 && strcmp(j.exports[2], "_y=1=2") == 0,
	    "NAME takes its value here; NAME=VALUE as given");
	UNIT_OK(launch_job_export(&j, "1X=2", err, sizeof err) < 0 &&
	    strcmp(err, "invalid variable name in '1X=2'") == 0 &&
	    launch_job_export(&j, "=2", err, sizeof err) < 0 &&
	    launch_job_export(&j, "A-B=2", err, sizeof err) < 0 &&
	    launch_job_export(&j, "", err, sizeof err) < 0 && j.nexports == 3,
	    "names that are no variable's refused");
	UNIT_OK(launch_job_export(&j, "LOCAL_RANK=0", err, sizeof err) < 0 &&
	    strcmp(err, "LOCAL_RANK is set by test_launch for each rank") == 0 &&
	    launch_job_export(&j, "COLLX_MASTER", err, sizeof err) < 0 &&
	    launch_job_export(&j, "MASTER_ADDR=h", err, sizeof err) == 0,
	    "what each rank is given by the launcher refused; MASTER_ADDR not");
	UNIT_OK(launch_job_export(&j, "TL_UNSET", err, sizeof err) < 0 &&
	    strcmp(err, "TL_UNSET is not set") == 0 && j.nexports == 4,
	    "NAME unset here refused");
	launch_job_free(&j);
}

static int made_ok = 1;		/* every status ended() made is as asked */

/* A real wait status, from a child that exits with code or, when sig is
 * nonzero, is killed by sig (without a core file). */
static int
ended(int code, int sig)
{
	struct rlimit none = { 0, 0 };
	int status = -1;
	pid_t pid;

	if ((pid = fork()) == 0) {
		setrlimit(RLIMIT_CORE, &none);
		if (sig) {
			signal(sig, SIG_DFL);
			raise(sig);
		}
		_exit(code);
	}
	if (pid < 0 || waitpid(pid, &status, 0) != pid ||
	    (sig ? !WIFSIGNALED(status) || WTERMSIG(status) != sig :
	    !WIFEXITED(status) || WEXITSTATUS(status) != code))
		made_ok = 0;
	return status;
}

#define EXITED(code) ended((code), 0)
#define KILLED(sig) ended(0, (sig))

static void
test_statuses(void)
{
	static const int outside[] = { SIGKILL, SIGTERM, SIGINT, SIGHUP,
	    SIGQUIT };
	/* Crashes a sanitizer does not catch first. */
	static const int inside[] = { SIGABRT, SIGUSR1, SIGPIPE, SIGALRM };
	size_t k;
	int all = 1;

	UNIT_OK(!launch_status_failed(EXITED(0)) && launch_status_failed(EXITED(1)) &&
	    launch_status_failed(EXITED(255)) && launch_status_failed(KILLED(SIGTERM)),
	    "a failure: a nonzero exit or any signal");
	for (k = 0; k < sizeof outside / sizeof outside[0]; k++)
		all &= launch_killed_from_outside(KILLED(outside[k]));
	UNIT_OK(all, "KILL, TERM, INT, HUP and QUIT come from outside");
	all = 1;
	for (k = 0; k < sizeof inside / sizeof inside[0]; k++)
		all &= !launch_killed_from_outside(KILLED(inside[k]));
	UNIT_OK(all && !launch_killed_from_outside(EXITED(0)) &&
	    !launch_killed_from_outside(EXITED(137)) &&
	    !launch_killed_from_outside(EXITED(143)),
	    "a crash or an exit (even with 128+N) does not");
}

/* A table of four ranks with processes 101..104, all running. */
static void
table(struct launch_ends *e)
{
	int i;

	launch_ends_init(e, 4);
	for (i = 0; i < 4; i++)
		e->rank[i].pid = 101 + i;
}

static void
test_died(void)
{
	struct launch_ends e;

	table(&e);
	launch_ends_died(&e, 103);
	launch_ends_died(&e, 101);
	launch_ends_died(&e, 103);
	launch_ends_died(&e, 999);
	UNIT_OK(e.rank[2].died == 1 && e.rank[0].died == 2 && e.rank[1].died == 0 &&
	    e.rank[3].died == 0 && e.deaths == 2, "deaths numbered as signalled, "
	    "once each; an unknown process (an orphan reaped) none");
	UNIT_OK(launch_ends_reaped(&e, 102, 7) == 1 && e.rank[1].reaped == -1 &&
	    e.rank[1].status == 7 && launch_ends_reaped(&e, 102, 9) == -1 &&
	    e.rank[1].status == 7 && launch_ends_reaped(&e, 999, 0) == -1,
	    "a status recorded for its rank, once");
	launch_ends_free(&e);
}

static void
test_number(void)
{
	struct launch_ends e;

	table(&e);
	e.rank[3].died = e.deaths = 1;	/* its SIGCHLD came */
	launch_ends_reaped(&e, 101, EXITED(1));
	launch_ends_reaped(&e, 102, KILLED(SIGTERM));
	launch_ends_reaped(&e, 104, EXITED(0));
	launch_ends_reaped(&e, 103, KILLED(SIGKILL));
	launch_ends_number(&e);
	UNIT_OK(e.rank[3].died == 1 && e.rank[1].died == 2 && e.rank[2].died == 3 &&
	    e.rank[0].died == 4 && e.deaths == 4, "unnumbered deaths: killed from "
	    "outside first, then the rest, in rank order; a numbered one kept");
	launch_ends_free(&e);

	table(&e);
	e.rank[0].reaped = 0;
	e.rank[1].reaped = 1;
	e.rank[1].status = EXITED(2);
	launch_ends_number(&e);
	UNIT_OK(e.rank[0].died == 0 && e.rank[1].died == 0 && e.deaths == 0,
	    "running and reported ranks are not numbered");
	launch_ends_free(&e);
}

/* Rank i reaped with status and death number died. */
static void
set(struct launch_ends *e, int i, int status, int died)
{
	e->rank[i].reaped = -1;
	e->rank[i].status = status;
	e->rank[i].died = died;
}

static void
test_first_failure(void)
{
	struct launch_ends e;

	table(&e);
	UNIT_OK(launch_ends_first_failure(&e, 0) == -1, "none ended: none named");
	set(&e, 0, EXITED(0), 1);
	set(&e, 1, EXITED(3), 4);
	set(&e, 2, KILLED(SIGABRT), 3);
	UNIT_OK(launch_ends_first_failure(&e, 0) == 2 &&
	    launch_ends_first_failure(&e, 1) == -1, "the failure that died first, "
	    "not the lowest rank nor one that succeeded before it");
	e.rank[3].died = 2;		/* died, not yet reaped */
	e.rank[3].status = EXITED(1);
	UNIT_OK(launch_ends_first_failure(&e, 0) == 2, "a rank not reaped "
	    "waits, whatever its number");
	e.rank[2].reaped = 1;
	UNIT_OK(launch_ends_first_failure(&e, 0) == 1, "a reported rank is "
	    "passed over");
	launch_ends_free(&e);

	/* Rank 1 killed: rank 0 left because of it, and ended first. */
	table(&e);
	set(&e, 0, EXITED(1), 1);
	set(&e, 1, KILLED(SIGKILL), 2);
	set(&e, 2, KILLED(SIGTERM), 3);
	set(&e, 3, KILLED(SIGPIPE), 4);
	UNIT_OK(launch_ends_first_failure(&e, 0) == 0 &&
	    launch_ends_first_failure(&e, 1) == 1, "of those killed from "
	    "outside, the first");
	launch_ends_free(&e);
}

int
main(int argc, char **argv)
{
	(void)argc;
	cli_init(argv[0]);
	test_place_ranks();
	test_export();
	test_statuses();
	test_died();
	test_number();
	test_first_failure();
	UNIT_OK(made_ok, "every wait status used is the exit or signal asked for");
	return unit_done();
}
