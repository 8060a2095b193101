/* launch_spawn: start a rank's process: its own process group, the
 * launcher's signals given back, its standard streams, and why PROGRAM
 * could not be executed when it could not. */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include "cli/cli.h"
#include "launch/launch.h"

/* In the child: its own process group, the caller's signal mask (with
 * what the launcher changed given back first), and no life beyond the
 * launcher's. */
static void
child_signals(const struct launch_child *c, const sigset_t *mask,
    pid_t parent)
{
	setpgid(0, 0);
	if (c->setup)
		c->setup();
	sigprocmask(SIG_SETMASK, mask, NULL);
#ifdef __linux__
	/* Should the launcher itself be killed outright, take the rank with
	 * it. */
	prctl(PR_SET_PDEATHSIG, SIGTERM);
	if (getppid() != parent)
		_exit(CLI_EXIT_RUNTIME);
#else
	(void)parent;
#endif
}

/* In the child of a remote rank: standard input starts with the token's
 * line, then what the rank would have read (nothing, or the launcher's own
 * input for rank 0, copied by a helper in the rank's process group that
 * dies with it). */
static void
token_stdin(const char *token, int relay)
{
	char buf[65536];
	ssize_t n;
	int p[2];

	if (pipe(p) < 0)
		_exit(CLI_EXIT_RUNTIME);
	if (relay) {
		switch (fork()) {
		case -1:
			_exit(CLI_EXIT_RUNTIME);
		case 0:
#ifdef __linux__
			prctl(PR_SET_PDEATHSIG, SIGTERM);
#endif
			close(p[0]);
			if (cli_write_all(p[1], token, strlen(token)) < 0 ||
			    cli_write_all(p[1], "\n", 1) < 0)
				_exit(1);
			while ((n = read(STDIN_FILENO, buf, sizeof buf)) > 0 ||
			    (n < 0 && errno == EINTR))
				if (n > 0 && cli_write_all(p[1], buf,
				    (size_t)n) < 0)
					break;
			_exit(0);
		}
	} else if (cli_write_all(p[1], token, strlen(token)) < 0 ||
	    cli_write_all(p[1], "\n", 1) < 0) {
		_exit(CLI_EXIT_RUNTIME); /* a token fits a pipe's buffer */
	}
	close(p[1]);
	dup2(p[0], STDIN_FILENO);
	close(p[0]);
}

/* In the child: standard input, output and error. */
static void
child_stdio(int i, int remote, const struct launch_child *c)
{
	int pass;

	/* Standard input goes to rank 0 only, and never a terminal: a rank
	 * outside the foreground process group would stop on reading it. */
	pass = i == 0 && !isatty(STDIN_FILENO);
	if (!pass)
		dup2(c->no_input, STDIN_FILENO);
	if (remote && launch_token())
		token_stdin(launch_token(), pass);
	if (c->out >= 0) {
		dup2(c->out, STDOUT_FILENO);
		dup2(c->err, STDERR_FILENO);
	}
}

/* In the child: a local rank's environment, CPUs and directory, then
 * PROGRAM; errno through execfd when it cannot be executed. */
static _Noreturn void
child_exec(const struct launch_job *j, int remote, char **env, char **argv,
    const struct launch_child *c, int execfd)
{
	size_t k;
	int e;

	if (!remote)
		for (k = 0; env[k]; k++)
			putenv(env[k]);
	if (c->cpus && sched_setaffinity(0, sizeof *c->cpus, c->cpus) < 0) {
		e = errno;
		dprintf(STDERR_FILENO, "%s: --bind: sched_setaffinity: %s\n",
		    cli_progname, strerror(e));
		_exit(CLI_EXIT_RUNTIME);
	}
	if (!remote && j->wdir && chdir(j->wdir) < 0) {
		e = errno;
		dprintf(STDERR_FILENO, "%s: --wdir: %s: %s\n", cli_progname,
		    j->wdir, strerror(e));
		_exit(CLI_EXIT_RUNTIME);
	}
	execvp(argv[0], argv);
	e = errno;
	if (write(execfd, &e, sizeof e) < 0)
		_exit(127);
	_exit(e == ENOENT ? 127 : 126);
}

int
launch_spawn(const struct launch_job *j, int i, const struct launch_rank *r,
    char **env, char **argv, const struct launch_child *c, pid_t *pid,
    char *err, size_t errlen)
{
	int execp[2], e, remote = r->host >= 0;
	sigset_t all, old;
	pid_t parent = getpid();
	ssize_t n;

	if (pipe2(execp, O_CLOEXEC) < 0)
		return cli_fail(err, errlen, "pipe: %s", strerror(errno));
	sigfillset(&all);
	sigprocmask(SIG_BLOCK, &all, &old); /* no handler runs in the child */
	*pid = fork();
	if (*pid == 0) {
		child_signals(c, &old, parent);
		child_stdio(i, remote, c);
		child_exec(j, remote, env, argv, c, execp[1]);
	}
	e = errno;
	sigprocmask(SIG_SETMASK, &old, NULL);
	close(execp[1]);
	if (*pid < 0) {
		close(execp[0]);
		return cli_fail(err, errlen, "fork: %s", strerror(e));
	}
	setpgid(*pid, *pid);	/* either side may win the race */
	while ((n = read(execp[0], &e, sizeof e)) < 0 && errno == EINTR)
		;
	close(execp[0]);
	if (n != sizeof e)
		return 0;
	launch_exec_why(argv[0], e, remote ? NULL : env, remote ? NULL :
	    j->wdir, err, errlen);
	return e == ENOENT ? 127 : 126;
}
