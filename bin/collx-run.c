/*
 * collx-run: start N ranks of a program, locally or over ssh, and keep them
 * together: when one fails the others are stopped (and, with
 * --max-restarts, all started again from the newest checkpoint), signals
 * reach them all, and no process is left behind (launch_super_run); or
 * read the flight recorder's dumps of a job (--diagnose).
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/cpus.h"
#include "launch/diagnose.h"
#include "launch/launch.h"

#define MAX_RANKS 65536

enum {
	OPT_HOSTFILE = CLI_OPT_PROGRAM, OPT_PER_HOST, OPT_SSH, OPT_MASTER,
	OPT_TAG, OPT_TIMEOUT, OPT_TIME_LIMIT, OPT_WDIR, OPT_PORT_RANGE,
	OPT_DIAGNOSE, OPT_MAX_RESTARTS, OPT_BIND, OPT_MIN_HOSTS, OPT_PREFLIGHT,
	OPT_PREFLIGHT_RANK
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
	{ "preflight", 0, 0, OPT_PREFLIGHT },
	{ "preflight-rank", 0, 0, OPT_PREFLIGHT_RANK },
	{ "help", 0, 0, 'h' },
	{ "version", 0, 0, 'V' },
	{ "verbose", 0, 0, 'v' },
	{ "quiet", 0, 0, 'q' },
	{ 0, 0, 0, 0 }
};

/* The job, and what only the options need. */
struct opts {
	struct launch_super job;
	const char *hostfile, *ssh_cmd;
	const char *diagnose;	/* --diagnose DIR, or NULL */
	int preflight, preflight_rank;
};

static _Noreturn void
usage(void)
{
	printf("usage: %s [-qv] [-n N] [-H HOST[,HOST...] | --hostfile F]\n"
	    "       [--per-host K] [--ssh CMD] [--master HOST:PORT] [--tag-output]\n"
	    "       [--timeout S] [--time-limit S] [--wdir DIR] [--port-range LO-HI]\n"
	    "       [--max-restarts N [--min-hosts K]] [--bind auto|core|none]\n"
	    "       [--preflight] [-x NAME[=VALUE]] -- PROGRAM [ARG...]\n"
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
	    "      --bind auto|core|none  auto (default): with 2 ranks or more\n"
	    "                        here, local rank i bound to core i when this\n"
	    "                        machine has a core for each,\n"
	    "                        else to a CPU of its own when it has one for\n"
	    "                        each, else not bound; core: to core i (all its\n"
	    "                        hardware threads), a warning when too few;\n"
	    "                        none: not bound\n"
	    "      --preflight       first test every pair of ranks (latency, and a\n"
	    "                        checksummed 1 MiB transfer), print the matrix,\n"
	    "                        name pairs that failed or ran below half the\n"
	    "                        median; PROGRAM runs unless a pair failed\n"
	    "                        (exit 4); each rank runs this program with\n"
	    "                        --preflight-rank, found as it was here\n"
	    "  -x, --export NAME[=VALUE]  pass an environment variable to the ranks\n"
	    "      --diagnose DIR    read the flight recorder's dumps in DIR\n"
	    "                        (collx-fr.JOB.RANK.json) and name, per job, the\n"
	    "                        first operation some ranks never entered or\n"
	    "                        never finished, and those ranks; starts nothing\n"
	    "  -v, --verbose         show each rank's command, pid and host\n"
	    "  -q, --quiet           no messages but errors\n"
	    "  -h, --help            show this help\n"
	    "  -V, --version         show the version\n"
	    "Exit status: 0 when all ranks succeed; else the failing rank's status\n"
	    "(128+N for signal N), 2 usage, 4 --preflight failed, 124 time limit,\n"
	    "126/127 PROGRAM not executable / not found; with restarts, the last\n"
	    "attempt's. --diagnose: 0 when the dumps were read, 1 no\n"
	    "dump in DIR, 3 a file that is not a flight recorder dump.\n",
	    cli_progname, cli_progname, LAUNCH_DEFAULT_PORT);
	cli_close_stdout();
	exit(CLI_EXIT_OK);
}

static void
parse_option(struct opts *o, int c, const char **hostlist)
{
	struct launch_super *j = &o->job;
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
		o->hostfile = optarg;
		break;
	case OPT_PER_HOST:
		j->per_host = (int)cli_parse_long("--per-host", optarg, 1, MAX_RANKS);
		break;
	case OPT_SSH:
		o->ssh_cmd = optarg;
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
		o->diagnose = optarg;
		break;
	case OPT_PREFLIGHT:
		o->preflight = 1;
		break;
	case OPT_PREFLIGHT_RANK:
		o->preflight_rank = 1;
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
		if (strcmp(optarg, "auto") == 0)
			j->bind = CLI_BIND_AUTO;
		else if (strcmp(optarg, "core") == 0)
			j->bind = CLI_BIND_CORE;
		else if (strcmp(optarg, "none") == 0)
			j->bind = CLI_BIND_NONE;
		else
			cli_usage_error("--bind: want auto, core or none, not "
			    "'%s'", optarg);
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
load_hosts(struct opts *o, const char *hostlist)
{
	struct launch_super *j = &o->job;
	char err[COLLX_ERRLEN];
	int nssh;

	if (hostlist && o->hostfile)
		cli_usage_error("-H and --hostfile exclude each other");
	if (hostlist && launch_hosts_add_list(&j->spec.hosts, hostlist, err,
	    sizeof err) < 0)
		cli_usage_error("-H: %s", err);
	if (o->hostfile && launch_hostfile_read(&j->spec.hosts, o->hostfile, err,
	    sizeof err) < 0)
		cli_usage_error("--hostfile: %s", err);
	if (j->spec.hosts.n == 0 && (o->ssh_cmd || j->per_host ||
	    j->min_hosts))
		cli_usage_error("%s needs hosts (-H or --hostfile)",
		    o->ssh_cmd ? "--ssh" : j->per_host ? "--per-host" :
		    "--min-hosts");
	if (j->min_hosts > j->spec.hosts.n)
		cli_usage_error("--min-hosts %d: only %d hosts", j->min_hosts,
		    j->spec.hosts.n);
	if (j->min_hosts && j->max_restarts == 0)
		cli_usage_error("--min-hosts goes with --max-restarts");
	if (j->spec.hosts.n > 0 && launch_split_words(o->ssh_cmd ? o->ssh_cmd :
	    "ssh", &j->spec.ssh, &nssh, err, sizeof err) < 0)
		cli_usage_error("--ssh: %s", err);
}

/* --preflight: what each rank runs first, this program as --preflight-
 * rank (with -q when quiet): by its absolute path when started by one
 * (the same on every host), else by its name, looked up on PATH. */
static void
preflight_argv(struct launch_super *j, const char *self)
{
	char *path = strchr(self, '/') ? realpath(self, NULL) : NULL;
	int n = 0;

	launch_words_push(&j->preflight, &n, path ? path : cli_strdup(self));
	launch_words_push(&j->preflight, &n, cli_strdup("--preflight-rank"));
	if (cli_quiet)
		launch_words_push(&j->preflight, &n, cli_strdup("-q"));
}

static void
parse_args(struct opts *o, int argc, char **argv)
{
	struct launch_super *j = &o->job;
	const char *hostlist = NULL;
	char err[COLLX_ERRLEN];
	int c;

	j->bind = CLI_BIND_AUTO;
	while ((c = getopt_long(argc, argv, "+n:H:x:hVvq", longopts, NULL)) != -1) {
		if (c == '?')
			cli_option_error(argc, argv, "n:H:x:");
		/* mpirun's "-np N": getopt reads -n with the value "p". */
		if (c == 'n' && strcmp(argv[optind - 1], "-np") == 0) {
			if (optind >= argc)
				cli_usage_error("option '-np' needs a value");
			optarg = argv[optind++];
		}
		parse_option(o, c, &hostlist);
	}
	if (o->diagnose != NULL || o->preflight_rank) {
		if (optind < argc)
			cli_usage_error("%s starts no PROGRAM", o->diagnose ?
			    "--diagnose" : "--preflight-rank");
		return;
	}
	if (optind >= argc)
		cli_usage_error("no PROGRAM given");
	j->spec.prog = argv + optind;
	if (o->preflight)
		preflight_argv(j, argv[0]);
	load_hosts(o, hostlist);
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

/* --diagnose DIR: the dumps read and their verdict on standard output. */
static int
diagnose(const char *dir)
{
	char err[COLLX_ERRLEN];
	int rc = launch_diagnose(dir, stdout, err, sizeof err);

	if (rc != 0)
		cli_die(rc, "--diagnose: %s", err);
	cli_close_stdout();
	return CLI_EXIT_OK;
}

int
main(int argc, char **argv)
{
	static struct opts o;	/* static: what usage errors leave is reachable */
	char err[COLLX_ERRLEN];
	int rc;

	cli_init(argv[0]);
	parse_args(&o, argc, argv);
	if (o.diagnose != NULL)
		return diagnose(o.diagnose);
	if (o.preflight_rank)
		return launch_preflight_rank();
	if ((rc = launch_super_run(&o.job, err, sizeof err)) < 0)
		cli_die(CLI_EXIT_RUNTIME, "%s", err);
	launch_super_free(&o.job);
	return rc;
}
