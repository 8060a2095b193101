/* test_launch: where collx-run's ranks run, what they are passed, how
 * their processes start, how they ended and which failure it names. */
#include <fcntl.h>
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

/* What a started rank did: launch_spawn's result, its process, what it
 * wrote on each stream and its wait status. */
struct ran {
	int rc, status;
	pid_t pid;
	char out[512], err[512];
};

/* Everything on fd until end of file, in buf. */
static void
slurp(int fd, char *buf, size_t len)
{
	size_t off = 0;
	ssize_t n;

	while (off < len - 1 && (n = read(fd, buf + off, len - 1 - off)) > 0)
		off += (size_t)n;
	buf[off] = '\0';
	close(fd);
}

/* Start rank i of j at r and wait for it. With in, standard input is a
 * pipe holding it (as when the launcher's own input is a pipe). */
static void
start(struct ran *w, const struct launch_job *j, int i,
    const struct launch_rank *r, char **env, char **argv, const char *in,
    void (*setup)(void))
{
	struct launch_child c = { -1, -1, -1, setup };
	int none[2], out[2], err[2], feed[2], saved = dup(STDIN_FILENO);

	memset(w, 0, sizeof *w);
	if (pipe2(none, O_CLOEXEC) < 0 || pipe2(out, O_CLOEXEC) < 0 ||
	    pipe2(err, O_CLOEXEC) < 0 || pipe(feed) < 0) {
		w->rc = -2;
		return;
	}
	close(none[1]);
	if (write(feed[1], in ? in : "", in ? strlen(in) : 0) < 0)
		w->rc = -2;
	close(feed[1]);
	dup2(feed[0], STDIN_FILENO);
	close(feed[0]);
	c.no_input = none[0];
	c.out = out[1];
	c.err = err[1];
	w->rc = launch_spawn(j, i, r, env, argv, &c, &w->pid, w->err,
	    sizeof w->err);
	dup2(saved, STDIN_FILENO);
	close(saved);
	close(none[0]);
	close(out[1]);
	close(err[1]);
	slurp(out[0], w->out, sizeof w->out);
	if (w->rc == 0)
		slurp(err[0], w->err, sizeof w->err);
	else
		close(err[0]);
	if (w->pid <= 0 || waitpid(w->pid, &w->status, 0) != w->pid)
		w->status = -1;
}

/* Whether w ran to an exit with code and rc from launch_spawn. */
static int
exited(const struct ran *w, int rc, int code)
{
	return w->rc == rc && w->status != -1 && WIFEXITED(w->status) &&
	    WEXITSTATUS(w->status) == code;
}

static void
set_marker(void)
{
	setenv("TL_SETUP", "ran", 1);
}

static void
test_spawn_local(void)
{
	char *env[] = { "TL_VAR=x y", NULL };
	char *argv[] = { "sh", "-c", "echo \"$TL_VAR\" $TL_SETUP; "
	    "read -r pid comm state ppid pgrp rest </proc/$$/stat; "
	    "[ $pid = $pgrp ] && echo own group; cat; echo eof; "
	    "echo to err >&2; exit 3", NULL };
	struct launch_job j = { .n = 2 };
	struct launch_rank r = { -1, 1, 2 };
	struct ran w;

	start(&w, &j, 1, &r, env, argv, "launcher's input\n", set_marker);
	UNIT_OK(exited(&w, 0, 3) && strcmp(w.out, "x y ran\nown group\neof\n") == 0 &&
	    strcmp(w.err, "to err\n") == 0, "a local rank: its variables, the "
	    "setup run in it, its own process group, no input but rank 0's, "
	    "its streams and status");
	UNIT_OK(getenv("TL_VAR") == NULL && getenv("TL_SETUP") == NULL,
	    "the launcher's environment untouched");
	start(&w, &j, 0, &r, env, argv, "launcher's input\n", NULL);
	UNIT_OK(exited(&w, 0, 3) && strcmp(w.out, "x y\nown group\n"
	    "launcher's input\neof\n") == 0, "rank 0 reads the launcher's input");
	j.wdir = "/";
	argv[2] = "pwd";
	start(&w, &j, 1, &r, env, argv, NULL, NULL);
	UNIT_OK(exited(&w, 0, 0) && strcmp(w.out, "/\n") == 0, "in --wdir");
	j.wdir = "/nonexistent/tl";
	start(&w, &j, 1, &r, env, argv, NULL, NULL);
	UNIT_OK(exited(&w, 0, 1) && w.out[0] == '\0' && strcmp(w.err,
	    "test_launch: --wdir: /nonexistent/tl: No such file or directory\n")
	    == 0, "a missing --wdir: the child says so and exits 1");
}

static void
test_spawn_remote(void)
{
	char *env[] = { "TL_VAR=local only", NULL };
	char *argv[] = { "sh", "-c", "echo \"${TL_VAR-unset}\"; cat", NULL };
	struct launch_job j = { .n = 2, .wdir = "/nonexistent/tl" };
	struct launch_rank r = { 0, 0, 1 };
	struct ran w;

	setenv("COLLX_TOKEN", "s3cret", 1);
	start(&w, &j, 1, &r, env, argv, "launcher's input\n", NULL);
	UNIT_OK(exited(&w, 0, 0) && strcmp(w.out, "unset\ns3cret\n") == 0,
	    "a remote rank: its remote shell reads the token's line, then "
	    "nothing; variables and directory are the command line's");
	start(&w, &j, 0, &r, env, argv, "launcher's input\n", NULL);
	UNIT_OK(exited(&w, 0, 0) && strcmp(w.out, "unset\ns3cret\n"
	    "launcher's input\n") == 0, "rank 0: the token's line, then the "
	    "launcher's input");
	unsetenv("COLLX_TOKEN");
	start(&w, &j, 1, &r, env, argv, NULL, NULL);
	UNIT_OK(exited(&w, 0, 0) && strcmp(w.out, "unset\n") == 0,
	    "no token: nothing to read");
}

static void
test_spawn_fails(void)
{
	char file[] = "/tmp/test_launch.XXXXXX";
	char *env[] = { "PATH=/nonexistent", NULL };
	char *argv[] = { "tl-no-such-program", NULL };
	struct launch_job j = { .n = 1 };
	struct launch_rank r = { -1, 0, 1 };
	char want[128];
	struct ran w;
	int fd;

	start(&w, &j, 0, &r, env, argv, NULL, NULL);
	UNIT_OK(exited(&w, 127, 127) && strcmp(w.err, "cannot execute "
	    "tl-no-such-program: not found on PATH") == 0,
	    "not found: 127, the rank's PATH searched");
	if ((fd = mkstemp(file)) >= 0)
		close(fd);
	argv[0] = file;
	start(&w, &j, 0, &r, env, argv, NULL, NULL);
	snprintf(want, sizeof want, "cannot execute %s: Permission denied", file);
	UNIT_OK(fd >= 0 && exited(&w, 126, 126) && strcmp(w.err, want) == 0,
	    "not executable: 126 and the system's reason");
	unlink(file);
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
	test_spawn_local();
	test_spawn_remote();
	test_spawn_fails();
	test_statuses();
	test_died();
	test_number();
	test_first_failure();
	UNIT_OK(made_ok, "every wait status used is the exit or signal asked for");
	return unit_done();
}
