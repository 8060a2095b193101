/* launch_sig: a launcher's own process state: the signals it catches into
 * a pipe its loop polls (SIGCHLD numbering the deaths of its ranks), the
 * descriptor limit it raises, and all of it given back in a rank's child
 * before PROGRAM starts. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include "cli/cli.h"
#include "launch/launch.h"

static int sig_pipe[2] = { -1, -1 };
static struct launch_ends *sig_ends;	/* whose deaths are numbered */

/* The signals caught, and what they were before (the ranks get them
 * back). */
static const int handled[] = { SIGINT, SIGTERM, SIGHUP, SIGCHLD, SIGPIPE };
#define NHANDLED (sizeof handled / sizeof handled[0])
static struct sigaction saved_action[NHANDLED];
static struct rlimit saved_nofile = { RLIM_INFINITY, RLIM_INFINITY };

void
launch_sig_give_back(void)
{
	size_t k;

	for (k = 0; k < NHANDLED; k++)
		sigaction(handled[k], &saved_action[k], NULL);
	if (saved_nofile.rlim_cur != RLIM_INFINITY)
		setrlimit(RLIMIT_NOFILE, &saved_nofile);
}

static void
on_signal(int sig)
{
	int saved = errno;
	unsigned char c = (unsigned char)sig;

	if (write(sig_pipe[1], &c, 1) < 0) {
		/* full pipe: the loop is already awake */
	}
	errno = saved;
}

static void
on_child(int sig, siginfo_t *si, void *context)
{
	(void)context;
	if (sig_ends)
		launch_ends_died(sig_ends, si->si_pid);
	on_signal(sig);
}

int
launch_sig_catch(struct launch_ends *e, char *err, size_t errlen)
{
	struct sigaction sa;
	size_t k;

	if (pipe2(sig_pipe, O_CLOEXEC | O_NONBLOCK) < 0)
		return cli_fail(err, errlen, "pipe: %s", strerror(errno));
	memset(&sa, 0, sizeof sa);
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
	for (k = 0; k < NHANDLED; k++) {
		sigaction(handled[k], NULL, &saved_action[k]);
		if (handled[k] == SIGPIPE)
			sa.sa_handler = SIG_IGN;	/* a closed stdout is an error */
		else if (handled[k] != SIGCHLD &&
		    saved_action[k].sa_handler == SIG_IGN)
			continue;
		else
			sa.sa_handler = on_signal;
		if (handled[k] == SIGCHLD) {
			sa.sa_sigaction = on_child;
			sa.sa_flags |= SA_SIGINFO;
		}
		sigaction(handled[k], &sa, NULL);
		sa.sa_flags &= ~SA_SIGINFO;
	}
	sig_ends = e;
#ifdef __linux__
	/* Orphans of the ranks become ours to reap, so a finished straggler
	 * never lingers as a zombie that still looks alive. */
	prctl(PR_SET_CHILD_SUBREAPER, 1);
#endif
	return sig_pipe[0];
}

void
launch_sig_raise_nofile(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &saved_nofile) == 0 &&
	    saved_nofile.rlim_cur < saved_nofile.rlim_max) {
		rl = saved_nofile;
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
}
