/*
 * collx-run: start N ranks of a program, locally or over ssh, and keep them
 * together: when one fails the others are stopped (and, with
 * --max-restarts, all started again from the newest checkpoint), signals
 * reach them all, and no process is left behind.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
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
#include "prog/diagnose.h"
#include "prog/launch.h"
#include "prog/linetag.h"

#define MAX_RANKS 65536
#define GRACE_SECONDS 3.0	/* between TERM and KILL */
#define KILLED_GRACE_MS 200	/* for a killed rank behind a failed one */
#define PROBE_SECONDS 5.0	/* for a host's remote shell to answer */

enum {
	OPT_HOSTFILE = CLI_OPT_PROGRAM, OPT_PER_HOST, OPT_SSH, OPT_MASTER,
	OPT_TAG, OPT_TIMEOUT, OPT_TIME_LIMIT, OPT_WDIR, OPT_PORT_RANGE,
	OPT_DIAGNOSE, OPT_MAX_RESTARTS, OPT_BIND, OPT_MIN_HOSTS
};

static const struct option longopts[] = {
	{ "np", 1, 0, 'n' },
	{ "hosts", 1, 0, 'H' },
	{ "hostfile", 1, 0, OPT_HOSTFILE },
	{ "per-host", 1, 0, OPT_PER_HOST },
	{ "ssh", 1, 0, OPT_SSH },
	{ "master", 1, 0, OPT_MASTER },
	{ "tag-output", 0, 0, OPT_TAG },
	{ "timeout", 1, 0, OPT_TIMEOUT },
	{ "time-limit", 1, 0, OPT_TIME_LIMIT },
	{ "wdir", 1, 0, OPT_WDIR },
	{ "port-range", 1, 0, OPT_PORT_RANGE },
	{ "export", 1, 0, 'x' },
	{ "diagnose", 1, 0, OPT_DIAGNOSE },
	{ "max-restarts", 1, 0, OPT_MAX_RESTARTS },
	{ "bind", 1, 0, OPT_BIND },
	{ "min-hosts", 1, 0, OPT_MIN_HOSTS },
	{ "help", 0, 0, 'h' },
	{ "version", 0, 0, 'V' },
	{ "verbose", 0, 0, 'v' },
	{ "quiet", 0, 0, 'q' },
	{ 0, 0, 0, 0 }
};

struct job {
	struct launch_job spec;	/* what the ranks are started with */
	int per_host, tag;
	const char *hostfile, *ssh_cmd;
	const char *diagnose;	/* --diagnose DIR, or NULL */
	double time_limit;
	int bind;		/* --bind core */
	struct launch_cores cores;	/* with enough of them, or none */
	/* --max-restarts: how many, how many so far, and the failure that
	 * ends this attempt when it is to be restarted (cause, and when) */
	int max_restarts, restarts, restart;
	int min_hosts;		/* --min-hosts: go on with those answering */
	int master_given;	/* --master: kept when hosts are lost */
	char cause[400];
	double failed_at;
	struct launch_resume resume;	/* the program's checkpoint */
	/* rank i: */
	struct launch_rank *place;	/* where it runs */
	struct launch_ends ends;	/* its process and how it ended */
	struct linetag *out, *err;	/* its output, with --tag-output */
	int running, stopping, exit_code, killed, draining, interrupted;
	double kill_at, drain_until, limit_at;
	int no_input;		/* read end of an empty pipe: stdin of ranks but 0 */
	/* The rank being started: held here so that a child whose exec
	 * fails leaves with them reachable, not lost. */
	char **env, **argv;
};

static int sig_fd = -1;	/* read end of launch_sig_catch's pipe */

static _Noreturn void
usage(void)
{
	printf("usage: %s [-qv] [-n N] [-H HOST[,HOST...] | --hostfile F]\n"
	    "       [--per-host K] [--ssh CMD] [--master HOST:PORT] [--tag-output]\n"
	    "       [--timeout S] [--time-limit S] [--wdir DIR] [--port-range LO-HI]\n"
	    "       [--max-restarts N [--min-hosts K]] [--bind core|none]\n"
	    "       [-x NAME[=VALUE]] -- PROGRAM [ARG...]\n"
	    "       %s --diagnose DIR\n"
	    "Start N ranks of PROGRAM, locally or on hosts over ssh; stop them all\n"
	    "when one fails. Or read the flight recorder's dumps of a hung or\n"
	    "failed job.\n\n"
	    "  -n, -np, --np N       number of ranks (default: 1 locally, the hosts'\n"
	    "                        slots with hosts)\n"
	    "  -H, --hosts LIST      hosts HOST[:K],...: K ranks (slots) per visit,\n"
	    "                        default 1, so rank i runs on host i mod H;\n"
	    "                        this machine (localhost, 127.0.0.1, ::1, its\n"
	    "                        name or address) runs its ranks without ssh\n"
	    "      --hostfile F      hosts from F: one per line, optional slots=K\n"
	    "      --per-host K      K consecutive ranks per host\n"
	    "      --ssh CMD         remote shell command (default: ssh)\n"
	    "      --master HOST:PORT  collx's rendezvous address, COLLX_MASTER\n"
	    "                        (default: 127.0.0.1 and a free port; with remote\n"
	    "                        hosts the first host, port %d); MASTER_PORT, for\n"
	    "                        PyTorch, is another port (PORT + 1 with remote\n"
	    "                        hosts)\n"
	    "      --tag-output      prefix each output line with [RANK]\n"
	    "      --timeout S       COLLX_TIMEOUT for the ranks, in seconds\n"
	    "      --time-limit S    stop all ranks after S seconds (exit 124)\n"
	    "      --wdir DIR        start the ranks in DIR (default: remote ranks\n"
	    "                        in this directory, when the host has it)\n"
	    "      --port-range LO-HI  data ports of collx ranks (COLLX_PORT_RANGE;\n"
	    "                        default: ephemeral ports)\n"
	    "      --max-restarts N  when a rank fails, stop the job and start it\n"
	    "                        again, up to N times (default 0), with --resume\n"
	    "                        from the checkpoint PROGRAM's --checkpoint F\n"
	    "                        wrote, once it has written one\n"
	    "      --min-hosts K     with hosts: start again on the hosts whose\n"
	    "                        remote shell still answers, with the ranks\n"
	    "                        they ran, when at least K do\n"
	    "      --bind core|none  core: local rank i bound to core i (all its\n"
	    "                        hardware threads) when this machine has a core\n"
	    "                        for each; none (default): not bound\n"
	    "  -x, --export NAME[=VALUE]  pass an environment variable to the ranks\n"
	    "      --diagnose DIR    read the flight recorder's dumps in DIR\n"
	    "                        (collx-fr.JOB.RANK.json) and name, per job, the\n"
	    "                        first operation some ranks never entered or\n"
	    "                        never finished, and those ranks; starts nothing\n"
	    "  -v, --verbose         show each rank's command\n"
	    "  -q, --quiet           no messages but errors\n"
	    "  -h, --help            show this help\n"
	    "  -V, --version         show the version\n"
	    "Exit status: 0 when all ranks succeed; else the failing rank's status\n"
	    "(128+N for signal N), 2 usage, 124 time limit, 126/127 PROGRAM not\n"
	    "executable / not found; with restarts, the last attempt's. --diagnose: 0 when the dumps were read, 1 no\n"
	    "dump in DIR, 3 a file that is not a flight recorder dump.\n",
	    cli_progname, cli_progname, LAUNCH_DEFAULT_PORT);
	cli_close_stdout();
	exit(CLI_EXIT_OK);
}

static void
parse_option(struct job *j, int c, const char **hostlist)
{
	char host[256], err[COLLX_ERRLEN];
	int port, lo, hi;

	switch (c) {
	case 'n':
		j->spec.n = (int)cli_parse_long("-n", optarg, 1, MAX_RANKS);
		break;
	case 'H':
		*hostlist = optarg;
		break;
	case OPT_HOSTFILE:
		j->hostfile = optarg;
		break;
	case OPT_PER_HOST:
		j->per_host = (int)cli_parse_long("--per-host", optarg, 1, MAX_RANKS);
		break;
	case OPT_SSH:
		j->ssh_cmd = optarg;
		break;
	case OPT_MASTER:
		if (cli_hostport_parse(optarg, host, sizeof host, &port) < 0)
			cli_usage_error("--master: invalid address '%s' (want"
			    " HOST:PORT)", optarg);
		free(j->spec.master);
		j->spec.master = cli_strdup(optarg);
		j->master_given = 1;
		break;
	case OPT_TAG:
		j->tag = 1;
		break;
	case OPT_TIMEOUT:
		cli_parse_double("--timeout", optarg, 0.001, 1e9);
		free(j->spec.timeout);
		j->spec.timeout = cli_strdup(optarg);
		break;
	case OPT_TIME_LIMIT:
		j->time_limit = cli_parse_double("--time-limit", optarg, 0.001, 1e9);
		break;
	case OPT_WDIR:
		if (*optarg == '\0')
			cli_usage_error("--wdir: empty directory");
		j->spec.wdir = optarg;
		break;
	case OPT_PORT_RANGE:
		if (cli_port_range_parse(optarg, &lo, &hi) < 0)
			cli_usage_error("--port-range: invalid range '%s' (want LO-HI,"
			    " 1 <= LO <= HI <= 65535)", optarg);
		j->spec.port_range = optarg;
		break;
	case OPT_DIAGNOSE:
		j->diagnose = optarg;
		break;
	case OPT_MAX_RESTARTS:
		j->max_restarts = (int)cli_parse_long("--max-restarts", optarg,
		    0, 1000000);
		break;
	case OPT_MIN_HOSTS:
		j->min_hosts = (int)cli_parse_long("--min-hosts", optarg, 1,
		    MAX_RANKS);
		break;
	case OPT_BIND:
		if (strcmp(optarg, "core") != 0 && strcmp(optarg, "none") != 0)
			cli_usage_error("--bind: want core or none, not '%s'",
			    optarg);
		j->bind = strcmp(optarg, "core") == 0;
		break;
	case 'x':
		if (launch_job_export(&j->spec, optarg, err, sizeof err) < 0)
			cli_usage_error("-x: %s", err);
		break;
	case 'h':
		usage();
	case 'V':
		cli_version();
	case 'v':
		cli_verbose++;
		break;
	case 'q':
		cli_quiet = 1;
		break;
	default:
		cli_usage_error("unknown option");
	}
}

static void
load_hosts(struct job *j, const char *hostlist)
{
	char err[COLLX_ERRLEN];
	int nssh;

	if (hostlist && j->hostfile)
		cli_usage_error("-H and --hostfile exclude each other");
	if (hostlist && launch_hosts_add_list(&j->spec.hosts, hostlist, err,
	    sizeof err) < 0)
		cli_usage_error("-H: %s", err);
	if (j->hostfile && launch_hostfile_read(&j->spec.hosts, j->hostfile, err,
	    sizeof err) < 0)
		cli_usage_error("--hostfile: %s", err);
	if (j->spec.hosts.n == 0 && (j->ssh_cmd || j->per_host ||
	    j->min_hosts))
		cli_usage_error("%s needs hosts (-H or --hostfile)",
		    j->ssh_cmd ? "--ssh" : j->per_host ? "--per-host" :
		    "--min-hosts");
	if (j->min_hosts > j->spec.hosts.n)
		cli_usage_error("--min-hosts %d: only %d hosts", j->min_hosts,
		    j->spec.hosts.n);
	if (j->min_hosts && j->max_restarts == 0)
		cli_usage_error("--min-hosts goes with --max-restarts");
	if (j->spec.hosts.n > 0 && launch_split_words(j->ssh_cmd ? j->ssh_cmd :
	    "ssh", &j->spec.ssh, &nssh, err, sizeof err) < 0)
		cli_usage_error("--ssh: %s", err);
}

static void
parse_args(struct job *j, int argc, char **argv)
{
	const char *hostlist = NULL;
	char err[COLLX_ERRLEN];
	int c;

	while ((c = getopt_long(argc, argv, "+n:H:x:hVvq", longopts, NULL)) != -1) {
		if (c == '?')
			cli_option_error(argc, argv, "n:H:x:");
		/* mpirun's "-np N": getopt reads -n with the value "p". */
		if (c == 'n' && strcmp(argv[optind - 1], "-np") == 0) {
			if (optind >= argc)
				cli_usage_error("option '-np' needs a value");
			optarg = argv[optind++];
		}
		parse_option(j, c, &hostlist);
	}
	if (j->diagnose != NULL) {
		if (optind < argc)
			cli_usage_error("--diagnose starts no PROGRAM");
		return;
	}
	if (optind >= argc)
		cli_usage_error("no PROGRAM given");
	j->spec.prog = argv + optind;
	load_hosts(j, hostlist);
	if (j->spec.n == 0)
		j->spec.n = j->spec.hosts.n ?
		    launch_hosts_slots(&j->spec.hosts, j->per_host) : 1;
	if (j->spec.n > MAX_RANKS)
		cli_usage_error("more than %d ranks", MAX_RANKS);
	if (launch_job_prepare(&j->spec, err, sizeof err) < 0)
		cli_die(CLI_EXIT_RUNTIME, "%s", err);
	/* The remote shell reads the token as one line. */
	if (!launch_hosts_all_local(&j->spec.hosts) && launch_token() &&
	    strchr(launch_token(), '\n'))
		cli_usage_error("COLLX_TOKEN has a newline: a remote rank reads it as"
		    " one line");
}

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

/* Start rank i; 0, or 127 (not found) or 126 (not executable) when
 * PROGRAM could not be executed. */
static int
spawn(struct job *j, int i)
{
	struct launch_child c = { j->no_input, -1, -1, launch_sig_give_back,
	    NULL };
	const struct launch_rank *r = &j->place[i];
	char why[COLLX_ERRLEN];
	int rc;

	if (r->host < 0 && r->local_rank < j->cores.n)
		c.cpus = &j->cores.core[r->local_rank];

	j->env = launch_rank_env(&j->spec, i, r);
	j->argv = launch_rank_argv(&j->spec, i, r, j->env);
	show_command(i, r->host >= 0 ? j->argv : j->env);
	if (r->host < 0)
		show_command(i, j->argv);
	if (j->tag && (linetag_open(&j->out[i], i, STDOUT_FILENO, &c.out, why,
	    sizeof why) < 0 || linetag_open(&j->err[i], i, STDERR_FILENO,
	    &c.err, why, sizeof why) < 0))
		cli_die(CLI_EXIT_RUNTIME, "%s", why);
	rc = launch_spawn(&j->spec, i, r, j->env, j->argv, &c,
	    &j->ends.rank[i].pid, why, sizeof why);
	if (rc < 0)
		cli_die(CLI_EXIT_RUNTIME, "%s", why);
	j->running++;
	if (c.out >= 0) {
		close(c.out);
		close(c.err);
	}
	if (rc > 0)
		cli_warn("%s", why);
	launch_words_free(j->env);
	launch_words_free(j->argv);
	j->env = j->argv = NULL;
	return rc;
}

/* Signal every rank's process group, stragglers of finished ranks too. */
static void
signal_all(struct job *j, int sig)
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
stop_all(struct job *j, int sig, int code)
{
	if (j->stopping)
		return;
	j->stopping = 1;
	j->exit_code = code;
	j->kill_at = cli_now() + GRACE_SECONDS;
	signal_all(j, sig);
}

static void
describe(const struct job *j, int i, char *buf, size_t len)
{
	const struct launch_rank *r = &j->place[i];

	if (r->host >= 0)
		snprintf(buf, len, "rank %d (host %s)", i,
		    j->spec.hosts.names[r->host]);
	else
		snprintf(buf, len, "rank %d (pid %ld)", i,
		    (long)j->ends.rank[i].pid);
}

/* A rank ended: the first failure names itself and stops the rest; the
 * job is to start again when restarts are left and this one could help
 * (the restart's line then names it). */
static void
rank_ended(struct job *j, int i, int status)
{
	char who[320];
	int sig;

	j->ends.rank[i].state = LAUNCH_REPORTED;
	j->running--;
	if (!launch_status_failed(status)) {
		cli_debug("rank %d finished", i);
		return;
	}
	if (j->stopping) {
		cli_debug("rank %d stopped", i);
		return;
	}
	describe(j, i, who, sizeof who);
	sig = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
	if (sig == 0)
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
collect(struct job *j)
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
reap(struct job *j)
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
handle_signals(struct job *j)
{
	unsigned char sigs[64];
	ssize_t n, k;

	while ((n = read(sig_fd, sigs, sizeof sigs)) > 0)
		for (k = 0; k < n; k++) {
			if (sigs[k] == SIGCHLD) {
				reap(j);
			} else if (j->interrupted) {
				signal_all(j, SIGKILL);	/* asked twice: now */
			} else {
				cli_debug("forwarding signal %d to all ranks", sigs[k]);
				j->interrupted = 1;
				j->stopping = 0;	/* forward even while stopping */
				stop_all(j, sigs[k], 128 + sigs[k]);
			}
		}
}

/* poll set: the signal pipe, then every open stream; returns its size. */
static nfds_t
poll_set(struct job *j, struct pollfd *fds, struct linetag **owner)
{
	struct linetag *t;
	nfds_t n = 1;
	int i, k;

	fds[0].fd = sig_fd;
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
next_wait(const struct job *j, double now)
{
	double t = INFINITY;

	if (j->stopping && !j->killed)
		t = fmin(t, j->kill_at);
	if (j->limit_at > 0 && !j->stopping)
		t = fmin(t, j->limit_at);
	if (j->draining)		/* look for stragglers now and then */
		t = fmin(fmin(t, j->drain_until), now + 0.1);
	if (isinf(t))
		return -1;
	return t <= now ? 0 : (int)ceil((t - now) * 1000);
}

static void
check_deadlines(struct job *j)
{
	double now = cli_now();

	if (j->limit_at > 0 && now >= j->limit_at && !j->stopping) {
		cli_warn("time limit of %g seconds reached; stopping all ranks",
		    j->time_limit);
		stop_all(j, SIGTERM, 124);
	}
	if (j->stopping && !j->killed && now >= j->kill_at)
		signal_all(j, SIGKILL);
	if (j->draining && now >= j->drain_until && !j->killed)
		signal_all(j, SIGKILL);	/* stragglers ignoring TERM */
}

/* Whether any rank's process group still has members. */
static int
groups_alive(const struct job *j)
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
drained(struct job *j, nfds_t nfds)
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
	return now > j->drain_until + GRACE_SECONDS;	/* unkillable: give up */
}

static void
supervise(struct job *j)
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
		if (poll(fds, n, next_wait(j, cli_now())) < 0 && errno != EINTR)
			cli_die(CLI_EXIT_RUNTIME, "poll: %s", strerror(errno));
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
}

/* --diagnose DIR: the dumps read and their verdict on standard output. */
static int
diagnose(const char *dir)
{
	char err[COLLX_ERRLEN];
	int rc = prog_diagnose(dir, stdout, err, sizeof err);

	if (rc != 0)
		cli_die(rc, "--diagnose: %s", err);
	cli_close_stdout();
	return CLI_EXIT_OK;
}

static void
place_ranks(struct job *j)
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
static void
open_no_input(struct job *j)
{
	int p[2];

	if (pipe2(p, O_CLOEXEC) < 0)
		cli_die(CLI_EXIT_RUNTIME, "pipe: %s", strerror(errno));
	close(p[1]);
	j->no_input = p[0];
}

/* --bind core: the cores of this machine, kept only when every rank here
 * gets one of its own. */
static void
bind_cores(struct job *j)
{
	char err[COLLX_ERRLEN];

	if (!j->bind)
		return;
	if (launch_cores_read(&j->cores, "/sys/devices/system/cpu", err,
	    sizeof err) < 0)
		cli_die(CLI_EXIT_RUNTIME, "--bind: %s", err);
	if (!launch_hosts_all_local(&j->spec.hosts))
		cli_warn("--bind core: ranks on remote hosts are not bound");
	if (launch_cores_fit(&j->cores, j->place, j->spec.n, err,
	    sizeof err) < 0)
		cli_warn("--bind core: %s: no rank bound", err);
}

static void
start_ranks(struct job *j)
{
	int i, rc;

	for (i = 0; i < j->spec.n && !j->stopping; i++) {
		if ((rc = spawn(j, i)) != 0)
			stop_all(j, SIGTERM, rc);
		handle_signals(j);
	}
}

/* --min-hosts: the job on the hosts whose remote shell still answers,
 * with the ranks that ran there, and a new rendezvous unless --master
 * named one; said tells where. 0: every host answers; -1: fewer than
 * --min-hosts do (or none of their ranks is left), and the job ends. */
static int
regroup(struct job *j, char *said, size_t len)
{
	char err[COLLX_ERRLEN], lost[1024] = "";
	int *up, i, h, n = 0, kept = 0, all = j->spec.hosts.n;
	size_t off = 0;
	sigset_t chld, old;

	up = cli_calloc((size_t)all, sizeof *up);
	if (launch_hosts_probe(&j->spec, PROBE_SECONDS, up, err,
	    sizeof err) < 0)
		cli_die(CLI_EXIT_RUNTIME, "%s", err);
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
		return -1;
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
	if (launch_job_prepare(&j->spec, err, sizeof err) < 0) {
		cli_warn("%s; no restart: %s", j->cause, err);
		return -1;
	}
	snprintf(said, len, " on %d hosts, %d ranks (%s lost)", kept, n, lost);
	return 0;
}

/* Every rank started again once the last attempt's are gone; one line
 * says why, from where, and what it cost: from the failure to the ranks
 * started, the hosts' answers and the checkpoint's step (read from its
 * header) included; the ranks' reading of it and their meeting again come
 * after. */
static int
restart(struct job *j)
{
	char from[4200], err[COLLX_ERRLEN], where[1200] = "";
	double read;
	sigset_t chld, old;

	if (j->min_hosts && regroup(j, where, sizeof where) < 0)
		return -1;
	read = cli_now();
	if (launch_resume_next(&j->resume, &j->spec.prog, from, sizeof from,
	    err, sizeof err) < 0) {
		cli_warn("%s; no restart: %s", j->cause, err);
		return -1;
	}
	read = cli_now() - read;
	j->restarts++;
	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	sigprocmask(SIG_BLOCK, &chld, &old);
	launch_ends_reset(&j->ends);
	sigprocmask(SIG_SETMASK, &old, NULL);
	j->running = j->stopping = j->killed = j->draining = j->restart = 0;
	j->exit_code = 0;
	start_ranks(j);
	cli_warn("restart %d of %d: %s; started again %s%s in %.3f s (%.3f s "
	    "of it reading the checkpoint's header)", j->restarts,
	    j->max_restarts, j->cause, from, where, cli_now() - j->failed_at,
	    read);
	return 0;
}

static void
job_free(struct job *j)
{
	launch_resume_free(&j->resume);
	launch_cores_free(&j->cores);
	launch_job_free(&j->spec);
	free(j->place);
	free(j->out);
	free(j->err);
	launch_ends_free(&j->ends);
	if (j->no_input > 0)
		close(j->no_input);
}

int
main(int argc, char **argv)
{
	static struct job j;	/* static: what usage errors leave is reachable */
	char err[COLLX_ERRLEN];
	int rc;

	cli_init(argv[0]);
	parse_args(&j, argc, argv);
	if (j.diagnose != NULL)
		return diagnose(j.diagnose);
	place_ranks(&j);
	bind_cores(&j);
	launch_resume_init(&j.resume, &j.spec);
	launch_sig_raise_nofile();
	open_no_input(&j);
	if ((sig_fd = launch_sig_catch(&j.ends, err, sizeof err)) < 0)
		cli_die(CLI_EXIT_RUNTIME, "%s", err);
	if (j.time_limit > 0)
		j.limit_at = cli_now() + j.time_limit;
	start_ranks(&j);
	for (;;) {
		supervise(&j);
		if (!j.restart)
			break;
		if (j.interrupted) {
			cli_warn("%s", j.cause);
			break;
		}
		if (restart(&j) < 0)
			break;
	}
	rc = j.exit_code;
	job_free(&j);
	return rc;
}
