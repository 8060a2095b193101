/*
 * launch_super: a launcher's job kept together: every rank started, its
 * output passed on, its end taken; the first failure named and the others
 * stopped; the launcher's signals forwarded; nothing left behind; and,
 * with restarts, the job stopped and started again from the newest
 * checkpoint, on the hosts still answering when one is lost.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/cpus.h"
#include "launch/launch.h"
#include "launch/linetag.h"

#define GRACE_SECONDS 3.0	/* between TERM and KILL */
#define GRACE_TEXT "3"		/* GRACE_SECONDS, as the restart line says */
#define KILLED_GRACE_MS 200	/* for a killed rank behind a failed one */
#define PROBE_SECONDS 5.0	/* for a host's remote shell to answer */

static void
show_command(int i, char **argv)
{
	char line[4096];
	size_t off = 0;
	int k;

	for (k = 0; argv[k] && off < sizeof line - 1; k++)
		off += (size_t)snprintf(line + off, sizeof line - off, "%s%s",
		    k ? " " : "", argv[k]);
	cli_debug("rank %d: %s", i, line);
}

/* With -v, which process is rank i and where: its pid, or for a remote
 * rank the pid of its remote shell here, and its host. */
static void
show_started(const struct launch_super *j, int i)
{
	const struct launch_rank *r = &j->place[i];
	char self[256] = "";

	if (r->host >= 0) {
		cli_debug("rank %d: pid %ld (its remote shell) on %s", i,
		    (long)j->ends.rank[i].pid, j->spec.hosts.names[r->host]);
		return;
	}
	if (gethostname(self, sizeof self - 1) < 0)
		snprintf(self, sizeof self, "this host");
	cli_debug("rank %d: pid %ld on %s", i, (long)j->ends.rank[i].pid,
	    self);
}

/* Start rank i; 0, or 127 (not found) or 126 (not executable) when
 * PROGRAM could not be executed; -1 with the reason in err when it could
 * not be started. */
static int
spawn(struct launch_super *j, int i, char *err, size_t errlen)
{
	struct launch_child c = { j->no_input, -1, -1, launch_sig_give_back,
	    NULL };
	const struct launch_rank *r = &j->place[i];
	int rc;

	if (r->host < 0 && r->local_rank < j->cores.n)
		c.cpus = &j->cores.core[r->local_rank];

	j->env = launch_rank_env(&j->spec, i, r);
	if (j->rejoin != NULL && j->rejoin[i]) {
		int n = 0;

		while (j->env[n] != NULL)
			n++;
		launch_words_push(&j->env, &n, cli_strdup("COLLX_REJOIN=1"));
	}
	j->argv = launch_rank_argv(&j->spec, i, r, j->env);
	show_command(i, r->host >= 0 ? j->argv : j->env);
	if (r->host < 0)
		show_command(i, j->argv);
	if (j->tag && (linetag_open(&j->out[i], i, STDOUT_FILENO, &c.out, err,
	    errlen) < 0 || linetag_open(&j->err[i], i, STDERR_FILENO,
	    &c.err, err, errlen) < 0))
		return -1;
	rc = launch_spawn(&j->spec, i, r, j->env, j->argv, &c,
	    &j->ends.rank[i].pid, err, errlen);
	if (rc < 0)
		return -1;
	show_started(j, i);
	j->running++;
	if (c.out >= 0) {
		close(c.out);
		close(c.err);
	}
	if (rc > 0)
		cli_warn("%s", err);
	launch_words_free(j->env);
	launch_words_free(j->argv);
	j->env = j->argv = NULL;
	return rc;
}

/* Signal every rank's process group, stragglers of finished ranks too. */
static void
signal_all(struct launch_super *j, int sig)
{
	int i;

	for (i = 0; i < j->spec.n; i++)
		if (j->ends.rank[i].pid > 0)
			kill(-j->ends.rank[i].pid, sig);
	if (sig == SIGKILL)
		j->killed = 1;
}

/* Begin stopping every rank: sig now, SIGKILL after the grace period. */
static void
stop_all(struct launch_super *j, int sig, int code)
{
	if (j->stopping)
		return;
	j->stopping = 1;
	j->exit_code = code;
	j->kill_at = cli_now() + GRACE_SECONDS;
	signal_all(j, sig);
	/* a stopped rank takes a caught signal only once continued: else
	 * it would hold the job for the grace period, then be killed */
	signal_all(j, SIGCONT);
}

static void
describe(const struct launch_super *j, int i, char *buf, size_t len)
{
	const struct launch_rank *r = &j->place[i];

	if (r->host >= 0)
		snprintf(buf, len, "rank %d (host %s)", i,
		    j->spec.hosts.names[r->host]);
	else
		snprintf(buf, len, "rank %d (pid %ld)", i,
		    (long)j->ends.rank[i].pid);
}

/* A local rank other than i still running but stopped, or -1: when i
 * exits on its own, a timeout is the likely reason, and that rank the
 * peer it waited for. */
static int
stopped_peer(const struct launch_super *j, int i)
{
	const struct launch_end *e;
	int k;

	for (k = 0; k < j->spec.n; k++) {
		e = &j->ends.rank[k];
		if (k != i && j->place[k].host < 0 && e->pid > 0 &&
		    e->state == LAUNCH_RUNNING && launch_pid_stopped(e->pid))
			return k;
	}
	return -1;
}

/* Whether a rank of the job has finished with status 0: the job is
 * ending, a rank started again would find nobody to rejoin. */
static int
any_finished(const struct launch_super *j)
{
	int k;

	for (k = 0; k < j->spec.n; k++)
		if (j->ends.rank[k].state == LAUNCH_REPORTED &&
		    !launch_status_failed(j->ends.rank[k].status))
			return 1;
	return 0;
}

/* --ft with restarts left: rank i, killed or gone after a death (why
 * says which), started again alone (with COLLX_REJOIN=1), to rejoin the
 * others at their next step; its output so far passed on first. 0, or
 * -1 when it could not be started (the caller stops the job). */
static int
rejoin_rank(struct launch_super *j, int i, const char *who, const char *why)
{
	char err[COLLX_ERRLEN];
	double t0 = cli_now();
	sigset_t chld, old;
	int k, rc;

	for (k = 0; k < 64 && j->tag && j->out[i].fd >= 0; k++)
		linetag_read(&j->out[i]);
	for (k = 0; k < 64 && j->tag && j->err[i].fd >= 0; k++)
		linetag_read(&j->err[i]);
	if (j->tag && j->out[i].fd >= 0)
		linetag_close(&j->out[i]);
	if (j->tag && j->err[i].fd >= 0)
		linetag_close(&j->err[i]);
	if (j->rejoin == NULL)
		j->rejoin = cli_calloc((size_t)j->spec.n, sizeof *j->rejoin);
	if (j->died_then == NULL)
		j->died_then = cli_calloc((size_t)j->spec.n,
		    sizeof *j->died_then);
	j->died_then[i] = j->ft_died;
	j->restarts++;
	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	sigprocmask(SIG_BLOCK, &chld, &old);
	j->ends.rank[i] = (struct launch_end){ 0 };
	sigprocmask(SIG_SETMASK, &old, NULL);
	j->rejoin[i] = 1;
	rc = spawn(j, i, err, sizeof err);
	if (rc != 0) {
		cli_warn("%s %s; not started again: %s", who, why, rc < 0 ?
		    err : "cannot execute the program");
		return -1;
	}
	cli_warn("restart %d of %d: %s %s; started again alone in %.3f s, to "
	    "rejoin the others at their next step (--ft)", j->restarts,
	    j->max_restarts, who, why, cli_now() - t0);
	return 0;
}

/* --ft: the signal that killed rank i from outside, or 0. A remote
 * rank's shell says it as exit status 128 + the signal. */
static int
ft_killed(const struct launch_super *j, int i, int status)
{
	int code = WIFEXITED(status) ? WEXITSTATUS(status) : 0;

	if (!j->ft)
		return 0;
	if (launch_killed_from_outside(status))
		return WTERMSIG(status);
	if (j->place[i].host >= 0 && code > 128 &&
	    launch_killed_from_outside(W_EXITCODE(0, code - 128)))
		return code - 128;
	return 0;
}

/* A rank ended: the first failure names itself and stops the rest (or,
 * when it gave up on a rank that was stopped, names that one first); the
 * job is to start again when restarts are left and this one could help
 * (the restart's line then names it). */
static void
rank_ended(struct launch_super *j, int i, int status)
{
	char who[320], hung[320], why[64];
	int sig, k;

	j->ends.rank[i].state = LAUNCH_REPORTED;
	j->running--;
	if (!launch_status_failed(status)) {
		cli_debug("rank %d finished", i);
		/* --ft: the ranks of the group end together; one still
		 * there a while after may have left it (stop_left) */
		if (j->ft && j->ft_end_at == 0)
			j->ft_end_at = cli_now() + GRACE_SECONDS;
		return;
	}
	if (j->stopping) {
		cli_debug("rank %d stopped", i);
		return;
	}
	if (j->patient) {	/* each has its say, and its own wait's end */
		if (j->exit_code == 0)
			j->exit_code = WIFSIGNALED(status) ?
			    128 + WTERMSIG(status) : WEXITSTATUS(status);
		return;
	}
	describe(j, i, who, sizeof who);
	sig = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
	if (j->rejoin != NULL && j->rejoin[i] == 2)
		return;	/* stop_left's, said there */
	/* --ft: the others go on (the last replica killed ends the job) */
	if ((k = ft_killed(j, i, status)) > 0)
		j->ft_died++;
	if (k > 0 && j->running > 0 &&
	    j->restarts < j->max_restarts && !j->interrupted &&
	    !any_finished(j)) {
		snprintf(why, sizeof why, "was killed by signal %d (%s)", k,
		    strsignal(k));
		if (rejoin_rank(j, i, who, why) == 0)
			return;
	} else if (k > 0 && j->running > 0) {
		cli_warn("%s was killed by signal %d (%s); the others go on "
		    "(--ft)", who, k, strsignal(k));
		return;
	} else if (j->ft && j->rejoin != NULL && j->rejoin[i] &&
	    any_finished(j)) {
		/* started again as the others ended: nobody to rejoin */
		cli_warn("%s, started again, found the others finished (exit "
		    "status %d ignored)", who, sig ? 128 + sig :
		    WEXITSTATUS(status));
		return;
	}	/* --ft after a death: a rank whose replica lost a rank (collx-train's
	 * TP and PP peers), or one cut off from the majority, leaves saying
	 * why; whether the others go on is theirs to say. With restarts
	 * left it is started again to rejoin with its replica, unless it
	 * was started again already and no rank was killed since (its
	 * rejoin refused or failed: once more would fail alike). */
	if (j->ft && j->ft_died && sig == 0 && WEXITSTATUS(status) == 1 &&
	    j->running > 0 && j->restarts < j->max_restarts &&
	    !j->interrupted && !any_finished(j) &&
	    (j->rejoin == NULL || !j->rejoin[i] ||
	    j->died_then[i] < j->ft_died) &&
	    rejoin_rank(j, i, who, "exited with status 1 after a death") == 0)
		return;
	if (j->ft && j->ft_died && sig == 0 && WEXITSTATUS(status) == 1 &&
	    j->running > 0) {
		cli_warn("%s exited with status 1 after a death; the others go "
		    "on (--ft)", who);
		return;
	}
	if (sig == 0 && (k = stopped_peer(j, i)) >= 0) {
		describe(j, k, hung, sizeof hung);
		snprintf(j->cause, sizeof j->cause, "%s was stopped (SIGSTOP, "
		    "SIGTSTP or a debugger) and did not answer; %s, waiting "
		    "on it, exited with status %d", hung, who,
		    WEXITSTATUS(status));
	} else if (sig == 0)
		snprintf(j->cause, sizeof j->cause, "%s exited with status %d",
		    who, WEXITSTATUS(status));
	else
		snprintf(j->cause, sizeof j->cause, "%s was killed by signal %d"
		    " (%s)", who, sig, strsignal(sig));
	j->failed_at = cli_now();
	j->restart = j->restarts < j->max_restarts && !j->interrupted &&
	    launch_restartable(status);
	if (!j->restart)
		cli_warn("%s", j->cause);
	stop_all(j, SIGTERM, sig ? 128 + sig : WEXITSTATUS(status));
}

/* Take the status of every rank that has ended, numbering the deaths the
 * SIGCHLD handler did not: a SIGCHLD still pending names the first, and
 * launch_ends_number the others, queued behind it. */
static void
collect(struct launch_super *j)
{
	struct timespec now = { 0, 0 };
	sigset_t chld, old;
	siginfo_t si;
	pid_t pid;
	int status;

	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	sigprocmask(SIG_BLOCK, &chld, &old);
	if (sigtimedwait(&chld, &si, &now) == SIGCHLD)
		launch_ends_died(&j->ends, si.si_pid);
	while ((pid = waitpid(-1, &status, WNOHANG)) > 0)
		launch_ends_reaped(&j->ends, pid, status);
	launch_ends_number(&j->ends);
	sigprocmask(SIG_SETMASK, &old, NULL);
}

/*
 * Every rank that has ended; of those that failed, the one that died first
 * goes first: it names itself and stops the others, whose failures may well
 * be its consequences (a peer that left). When that is an exit, a moment
 * (KILLED_GRACE_MS at most) is given to a rank killed from outside, whose
 * exit can come after its peers'.
 */
static void
reap(struct launch_super *j)
{
	struct launch_end *end = j->ends.rank;
	int i, first, killed, waited;

	collect(j);
	first = launch_ends_first_failure(&j->ends, 0);
	for (waited = 0; first >= 0 && !j->stopping &&
	    !launch_killed_from_outside(end[first].status) &&
	    waited < KILLED_GRACE_MS; waited += 10) {
		usleep(10000);
		collect(j);
		if ((killed = launch_ends_first_failure(&j->ends, 1)) >= 0)
			first = killed;
	}
	if (first >= 0)
		rank_ended(j, first, end[first].status);
	for (i = 0; i < j->spec.n; i++)
		if (end[i].state == LAUNCH_REAPED)
			rank_ended(j, i, end[i].status);
}

static void
handle_signals(struct launch_super *j)
{
	unsigned char sigs[64];
	ssize_t n, k;

	while ((n = read(j->sig_fd, sigs, sizeof sigs)) > 0)
		for (k = 0; k < n; k++) {
			if (sigs[k] == SIGCHLD) {
				reap(j);
			} else if (j->interrupted) {
				/* asked twice: now */
				signal_all(j, SIGKILL);
			} else {
				cli_debug("forwarding signal %d to all ranks",
				    sigs[k]);
				j->interrupted = 1;
				/* forward even while stopping */
				j->stopping = 0;
				stop_all(j, sigs[k], 128 + sigs[k]);
			}
		}
}

/* poll set: the signal pipe, then every open stream; returns its size. */
static nfds_t
poll_set(struct launch_super *j, struct pollfd *fds, struct linetag **owner)
{
	struct linetag *t;
	nfds_t n = 1;
	int i, k;

	fds[0].fd = j->sig_fd;
	fds[0].events = POLLIN;
	for (i = 0; i < j->spec.n && j->tag; i++)
		for (k = 0; k < 2; k++) {
			t = k ? &j->err[i] : &j->out[i];
			if (t->fd < 0)
				continue;
			fds[n].fd = t->fd;
			fds[n].events = POLLIN;
			owner[n++] = t;
		}
	return n;
}

/* Milliseconds to the nearest deadline, or -1. */
static int
next_wait(const struct launch_super *j, double now)
{
	double t = INFINITY;

	if (j->stopping && !j->killed)
		t = fmin(t, j->kill_at);
	if (j->limit_at > 0 && !j->stopping)
		t = fmin(t, j->limit_at);
	if (j->ft_end_at > 0 && !j->stopping)
		t = fmin(t, j->ft_end_at);
	if (j->draining)		/* look for stragglers now and then */
		t = fmin(fmin(t, j->drain_until), now + 0.1);
	if (isinf(t))
		return -1;
	return t <= now ? 0 : (int)ceil((t - now) * 1000);
}

/* --ft, a while after a rank finished: a local rank still there but
 * stopped (SIGSTOP, SIGTSTP, a debugger) was left out of the group by
 * the others; it is ended (TERM, then CONT), its end not the job's. */
static void
stop_left(struct launch_super *j)
{
	char who[320];
	int k;

	for (k = 0; k < j->spec.n; k++) {
		if (j->place[k].host >= 0 || j->ends.rank[k].pid <= 0 ||
		    j->ends.rank[k].state != LAUNCH_RUNNING ||
		    !launch_pid_stopped(j->ends.rank[k].pid))
			continue;
		describe(j, k, who, sizeof who);
		cli_warn("%s is stopped (SIGSTOP, SIGTSTP or a debugger) "
		    GRACE_TEXT " s after the others finished, out of their "
		    "group (--ft): ended with SIGTERM", who);
		if (j->rejoin == NULL)
			j->rejoin = cli_calloc((size_t)j->spec.n,
			    sizeof *j->rejoin);
		j->rejoin[k] = 2;
		kill(-j->ends.rank[k].pid, SIGTERM);
		kill(-j->ends.rank[k].pid, SIGCONT);
	}
}

static void
check_deadlines(struct launch_super *j)
{
	double now = cli_now();

	if (j->limit_at > 0 && now >= j->limit_at && !j->stopping) {
		cli_warn("time limit of %g seconds reached; stopping all ranks",
		    j->time_limit);
		stop_all(j, SIGTERM, 124);
	}
	if (j->ft_end_at > 0 && now >= j->ft_end_at && !j->stopping) {
		stop_left(j);
		j->ft_end_at = 0;
	}
	if (j->stopping && !j->killed && now >= j->kill_at)
		signal_all(j, SIGKILL);
	if (j->draining && now >= j->drain_until && !j->killed)
		signal_all(j, SIGKILL);	/* stragglers ignoring TERM */
}

/* Whether any rank's process group still has members. */
static int
groups_alive(const struct launch_super *j)
{
	int i;

	for (i = 0; i < j->spec.n; i++)
		if (j->ends.rank[i].pid > 0 &&
		    kill(-j->ends.rank[i].pid, 0) == 0)
			return 1;
	return 0;
}

/* After the last rank: stop what its groups left behind, then finish. */
static int
drained(struct launch_super *j, nfds_t nfds)
{
	double now = cli_now();

	if (!j->draining) {
		j->draining = 1;
		j->drain_until = now + GRACE_SECONDS;
		if (groups_alive(j)) {
			cli_debug("stopping processes the ranks left behind");
			signal_all(j, SIGTERM);
		}
	}
	if (nfds == 1 && !groups_alive(j))
		return 1;
	/* unkillable: give up */
	return now > j->drain_until + GRACE_SECONDS;
}

/* This attempt's ranks until they have all ended: 0, or -1 with the
 * reason in err when the launcher cannot wait for them. */
static int
supervise(struct launch_super *j, char *err, size_t errlen)
{
	struct pollfd *fds;
	struct linetag **owner;
	nfds_t n, k;
	int i;

	fds = cli_calloc((size_t)j->spec.n * 2 + 1, sizeof *fds);
	owner = cli_calloc((size_t)j->spec.n * 2 + 1, sizeof *owner);
	for (;;) {
		reap(j);
		n = poll_set(j, fds, owner);
		if (j->running == 0 && drained(j, n))
			break;
		if (poll(fds, n, next_wait(j, cli_now())) < 0 &&
		    errno != EINTR) {
			cli_fail(err, errlen, "poll: %s", strerror(errno));
			goto fail;
		}
		if (fds[0].revents)
			handle_signals(j);
		for (k = 1; k < n; k++)
			if (fds[k].revents)
				linetag_read(owner[k]);
		check_deadlines(j);
	}
	for (i = 0; i < j->spec.n && j->tag; i++) {
		if (j->out[i].fd >= 0)
			linetag_close(&j->out[i]);
		if (j->err[i].fd >= 0)
			linetag_close(&j->err[i]);
	}
	free(fds);
	free(owner);
	return 0;
fail:
	free(fds);
	free(owner);
	return -1;
}

static void
place_ranks(struct launch_super *j)
{
	int n = j->spec.n, i;

	j->place = cli_calloc((size_t)n, sizeof *j->place);
	launch_place_ranks(&j->spec.hosts, n, j->per_host, j->place);
	launch_ends_init(&j->ends, n);
	j->out = cli_calloc((size_t)n, sizeof *j->out);
	j->err = cli_calloc((size_t)n, sizeof *j->err);
	for (i = 0; i < n; i++)
		j->out[i].fd = j->err[i].fd = -1;
}

/* An empty pipe, its write end closed: reading it gives end of file at
 * once, as /dev/null would, with nothing to depend on. */
static int
open_no_input(struct launch_super *j, char *err, size_t errlen)
{
	int p[2];

	if (pipe2(p, O_CLOEXEC) < 0)
		return cli_fail(err, errlen, "pipe: %s", strerror(errno));
	close(p[1]);
	j->no_input = p[0];
	return 0;
}

/* bind: the cores of this machine, kept only when every rank here gets
 * one (or with auto a CPU) of its own. */
static int
bind_cores(struct launch_super *j, char *err, size_t errlen)
{
	char why[COLLX_ERRLEN];

	if (j->bind == CLI_BIND_NONE)
		return 0;
	if (cli_cores_read(&j->cores, "/sys/devices/system/cpu", why,
	    sizeof why) < 0)	/* auto: what it cannot read runs unbound */
		return j->bind == CLI_BIND_CORE ?
		    cli_fail(err, errlen, "--bind: %s", why) : 0;
	/* auto says nothing: what it cannot place runs as --bind none */
	if (!launch_hosts_all_local(&j->spec.hosts) &&
	    j->bind == CLI_BIND_CORE)
		cli_warn("--bind core: ranks on remote hosts are not bound");
	if (launch_cores_fit(&j->cores, j->place, j->spec.n, j->bind, why,
	    sizeof why) < 0 && j->bind == CLI_BIND_CORE)
		cli_warn("--bind core: %s: no rank bound", why);
	return 0;
}

/* Every rank, until one cannot be started: 0, or -1 with the reason in
 * err. */
static int
start_ranks(struct launch_super *j, char *err, size_t errlen)
{
	int i, rc;

	for (i = 0; i < j->spec.n && !j->stopping; i++) {
		if ((rc = spawn(j, i, err, errlen)) < 0)
			return -1;
		if (rc != 0)
			stop_all(j, SIGTERM, rc);
		handle_signals(j);
	}
	return 0;
}

/* min_hosts: the job on the hosts whose remote shell still answers, with
 * the ranks that ran there, and a new rendezvous unless the caller named
 * one; said tells where. 0: every host answers, or the job goes on with
 * fewer; 1: fewer than min_hosts do (or none of their ranks is left), and
 * the job ends; -1 with the reason in err when the hosts cannot be
 * asked. */
static int
regroup(struct launch_super *j, char *said, size_t len, char *err,
    size_t errlen)
{
	char why[COLLX_ERRLEN], lost[1024] = "";
	int *up, i, h, n = 0, kept = 0, all = j->spec.hosts.n;
	size_t off = 0;
	sigset_t chld, old;

	up = cli_calloc((size_t)all, sizeof *up);
	if (launch_hosts_probe(&j->spec, PROBE_SECONDS, up, err,
	    errlen) < 0) {
		free(up);
		return -1;
	}
	for (h = 0; h < all; h++) {
		kept += up[h];
		if (!up[h] && off < sizeof lost)
			off += (size_t)snprintf(lost + off, sizeof lost - off,
			    "%s%s", off ? ", " : "", j->spec.hosts.names[h]);
	}
	for (i = 0; i < j->spec.n; i++)
		n += j->place[i].host < 0 || up[j->place[i].host];
	if (kept == all || kept < j->min_hosts || n == 0) {
		free(up);
		if (kept == all)
			return 0;
		cli_warn("%s; no restart: %s lost, %d of %d hosts left (fewer"
		    " than --min-hosts %d, or none of their ranks)", j->cause,
		    lost, kept, all, j->min_hosts);
		return 1;
	}
	launch_hosts_keep(&j->spec.hosts, up);
	free(up);
	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	sigprocmask(SIG_BLOCK, &chld, &old);
	free(j->place);
	free(j->out);
	free(j->err);
	launch_ends_free(&j->ends);
	j->spec.n = n;
	place_ranks(j);
	sigprocmask(SIG_SETMASK, &old, NULL);
	if (!j->master_given) {
		free(j->spec.master);
		j->spec.master = NULL;
	}
	free(j->spec.torch_addr);
	free(j->spec.cwd);
	j->spec.torch_addr = j->spec.cwd = NULL;
	if (launch_job_prepare(&j->spec, why, sizeof why) < 0) {
		cli_warn("%s; no restart: %s", j->cause, why);
		return 1;
	}
	snprintf(said, len, " on %d hosts, %d ranks (%s lost)", kept, n, lost);
	return 0;
}

/* Every rank back to not started, for the job's next attempt. */
static void
next_attempt(struct launch_super *j)
{
	sigset_t chld, old;

	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	sigprocmask(SIG_BLOCK, &chld, &old);
	launch_ends_reset(&j->ends);
	sigprocmask(SIG_SETMASK, &old, NULL);
	j->running = j->stopping = j->killed = j->draining = j->restart = 0;
	j->ft_end_at = 0;
	j->ft_died = 0;
	j->exit_code = 0;
	/* a fresh job: none of its ranks is to rejoin (COLLX_REJOIN) */
	free(j->rejoin);
	free(j->died_then);
	j->rejoin = j->died_then = NULL;
}

/* --preflight: every rank runs j->preflight first, never restarted, a
 * rank's failure not stopping the others: each names what it found, in a
 * bounded time (PF_TIMEOUT a wait). 0
 * when all succeeded, the job's ranks then to start; else the job's exit
 * status, 4 when the preflight failed (its lines say why), or -1 with the
 * reason in err. */
static int
preflight(struct launch_super *j, char *err, size_t errlen)
{
	char **prog = j->spec.prog;
	int max = j->max_restarts, rc;

	j->spec.prog = j->preflight;
	j->max_restarts = 0;
	j->patient = 1;
	rc = start_ranks(j, err, errlen);
	if (rc == 0)
		rc = supervise(j, err, errlen);
	j->spec.prog = prog;
	j->max_restarts = max;
	j->patient = 0;
	if (rc < 0)
		return -1;
	if (j->exit_code != 0 && !j->interrupted && j->exit_code != 124) {
		cli_warn("--preflight failed: %s not run", prog[0]);
		return CLI_EXIT_CHECK;
	}
	if (j->exit_code != 0)
		return j->exit_code;
	next_attempt(j);
	return 0;
}

/* Every rank started again once the last attempt's are gone; one line
 * says why, from where, and what it cost: from the failure to the ranks
 * started, the hosts' answers and the checkpoint's step (read from its
 * header) included; the ranks' reading of it and their meeting again come
 * after. 0, 1 when the job is not started again, or -1 with the reason in
 * err. */
static int
restart(struct launch_super *j, char *err, size_t errlen)
{
	char from[4200], why[COLLX_ERRLEN], where[1200] = "";
	double read, stopping = j->ended_at - j->failed_at;
	int rc, killed = j->killed;

	if (j->min_hosts && (rc = regroup(j, where, sizeof where, err,
	    errlen)) != 0)
		return rc;
	read = cli_now();
	if (launch_resume_next(&j->resume, &j->spec.prog, from, sizeof from,
	    why, sizeof why) < 0) {
		cli_warn("%s; no restart: %s", j->cause, why);
		return 1;
	}
	read = cli_now() - read;
	j->restarts++;
	next_attempt(j);
	if (start_ranks(j, err, errlen) < 0)
		return -1;
	cli_warn("restart %d of %d: %s; started again %s%s in %.3f s (%.3f s "
	    "of it stopping the ranks%s, %.3f s reading the checkpoint's "
	    "header)", j->restarts, j->max_restarts, j->cause, from, where,
	    cli_now() - j->failed_at, stopping, killed ? ", some of which "
	    "ignored SIGTERM for the " GRACE_TEXT " s grace period and were "
	    "killed" : "", read);
	return 0;
}

int
launch_super_run(struct launch_super *j, char *err, size_t errlen)
{
	int rc;

	place_ranks(j);
	if (bind_cores(j, err, errlen) < 0)
		return -1;
	for (rc = 1; j->spec.prog[rc] != NULL; rc++)
		j->ft |= strcmp(j->spec.prog[rc], "--ft") == 0;
	launch_resume_init(&j->resume, &j->spec);
	launch_sig_raise_nofile();
	if (open_no_input(j, err, errlen) < 0 ||
	    (j->sig_fd = launch_sig_catch(&j->ends, err, errlen)) < 0)
		return -1;
	if (j->time_limit > 0)
		j->limit_at = cli_now() + j->time_limit;
	if (j->preflight != NULL && (rc = preflight(j, err, errlen)) != 0)
		return rc;
	if (start_ranks(j, err, errlen) < 0)
		return -1;
	for (;;) {
		if (supervise(j, err, errlen) < 0)
			return -1;
		j->ended_at = cli_now();
		if (!j->restart)
			break;
		if (j->interrupted) {
			cli_warn("%s", j->cause);
			break;
		}
		if ((rc = restart(j, err, errlen)) < 0)
			return -1;
		if (rc > 0)
			break;
	}
	return j->exit_code;
}

void
launch_super_free(struct launch_super *j)
{
	launch_resume_free(&j->resume);
	cli_cores_free(&j->cores);
	launch_job_free(&j->spec);
	free(j->place);
	free(j->out);
	free(j->err);
	launch_ends_free(&j->ends);
	launch_words_free(j->preflight);
	free(j->rejoin);
	free(j->died_then);
	if (j->no_input > 0)
		close(j->no_input);
}
