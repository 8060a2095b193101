/* test_cli: option parsing, group discovery, timing CSV. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/cli.h"
#include "unit.h"

static const char *const group_vars[] = {
	"COLLX_RANK", "RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID",
	"COLLX_WORLD_SIZE", "WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE",
	"SLURM_NTASKS", "COLLX_LOCAL_RANK", "LOCAL_RANK",
	"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "COLLX_MASTER",
	"MASTER_ADDR", "MASTER_PORT", "COLLX_IFNAME", "COLLX_TIMEOUT",
	"COLLX_TOKEN", "COLLX_SHM", "COLLX_JOB_ID", "SLURM_JOB_ID",
	"SLURM_STEP_ID", "SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST",
	"SLURMD_NODENAME", "PMIX_NAMESPACE", NULL
};

static char tmpdir[] = "/tmp/test_cli.XXXXXX";

static void
clear_env(void)
{
	const char *const *v;

	for (v = group_vars; *v; v++)
		unsetenv(*v);
}

/* Run fn in a child; its exit status, stderr captured into msg. */
static int
in_child(void (*fn)(const void *), const void *arg, char *msg, size_t msglen)
{
	int p[2], status;
	size_t got = 0;
	ssize_t n;
	pid_t pid;

	if (pipe(p) < 0)
		return -1;
	fflush(stdout);
	if ((pid = fork()) == 0) {
		close(p[0]);
		dup2(p[1], 2);
		fn(arg);
		_exit(0);
	}
	close(p[1]);
	while (got < msglen - 1 && (n = read(p[0], msg + got, msglen - 1 - got)) > 0)
		got += (size_t)n;
	msg[got] = '\0';
	close(p[0]);
	waitpid(pid, &status, 0);
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void
resolve_fn(const void *arg)
{
	struct cli_group g;

	(void)arg;
	cli_group_defaults(&g);
	cli_group_finish(&g);
}

static void
long_fn(const void *arg)
{
	cli_parse_long("iters", arg, 0, 100);
}

static void
size_fn(const void *arg)
{
	cli_parse_size("b", arg);
}

static void
list_fn(const void *arg)
{
	long v[3];

	cli_parse_list("shape", arg, v, 3);
}

static void
resolved(struct cli_group *g)
{
	cli_group_defaults(g);
	cli_group_finish(g);
}

static void
test_env_precedence(void)
{
	struct cli_group g;

	clear_env();
	resolved(&g);
	UNIT_OK(g.rank == 0 && g.world == 1 && g.master == NULL && g.timeout == 60 &&
	    g.local_rank == -1 && g.token == NULL, "nothing set: rank 0 of 1, timeout 60");
	cli_group_free(&g);

	setenv("SLURM_PROCID", "3", 1);
	setenv("SLURM_NTASKS", "8", 1);
	setenv("SLURM_LOCALID", "1", 1);
	setenv("MASTER_ADDR", "node0", 1);
	setenv("MASTER_PORT", "29400", 1);
	resolved(&g);
	UNIT_OK(g.rank == 3 && g.world == 8 && g.local_rank == 1, "Slurm variables");
	UNIT_OK(g.master && strcmp(g.master, "node0:29400") == 0, "MASTER_ADDR+MASTER_PORT");
	cli_group_free(&g);

	setenv("PMI_RANK", "4", 1);
	setenv("PMI_SIZE", "9", 1);
	resolved(&g);
	UNIT_OK(g.rank == 4 && g.world == 9, "PMI before Slurm");
	cli_group_free(&g);

	setenv("OMPI_COMM_WORLD_RANK", "5", 1);
	setenv("OMPI_COMM_WORLD_SIZE", "10", 1);
	setenv("OMPI_COMM_WORLD_LOCAL_RANK", "2", 1);
	resolved(&g);
	UNIT_OK(g.rank == 5 && g.world == 10 && g.local_rank == 2, "Open MPI before PMI");
	cli_group_free(&g);

	setenv("RANK", "6", 1);
	setenv("WORLD_SIZE", "11", 1);
	setenv("LOCAL_RANK", "3", 1);
	resolved(&g);
	UNIT_OK(g.rank == 6 && g.world == 11 && g.local_rank == 3, "torchrun before Open MPI");
	cli_group_free(&g);

	setenv("COLLX_RANK", "7", 1);
	setenv("COLLX_WORLD_SIZE", "12", 1);
	setenv("COLLX_LOCAL_RANK", "4", 1);
	setenv("COLLX_MASTER", "10.0.0.1:1234", 1);
	setenv("COLLX_TIMEOUT", "2.5", 1);
	setenv("COLLX_IFNAME", "eth0,eth1", 1);
	setenv("COLLX_TOKEN", "s3cret", 1);
	resolved(&g);
	UNIT_OK(g.rank == 7 && g.world == 12 && g.local_rank == 4, "COLLX_ first");
	UNIT_OK(strcmp(g.master, "10.0.0.1:1234") == 0, "COLLX_MASTER before MASTER_ADDR");
	UNIT_OK(g.timeout == 2.5 && strcmp(g.iface, "eth0,eth1") == 0 &&
	    strcmp(g.token, "s3cret") == 0, "timeout, interfaces, token from environment");
	cli_group_free(&g);

	setenv("COLLX_RANK", "", 1);	/* empty counts as unset */
	resolved(&g);
	UNIT_OK(g.rank == 6, "an empty variable is skipped");
	cli_group_free(&g);
	clear_env();
}

static void
test_options_override(void)
{
	struct cli_group g;
	char path[64], e[COLLX_ERRLEN];
	FILE *f;

	clear_env();
	setenv("COLLX_RANK", "1", 1);
	setenv("COLLX_WORLD_SIZE", "4", 1);
	setenv("COLLX_MASTER", "a:1", 1);
	setenv("COLLX_TIMEOUT", "9", 1);
	setenv("COLLX_TOKEN", "fromenv", 1);
	snprintf(path, sizeof path, "%s/token", tmpdir);
	f = fopen(path, "w");
	fputs("fromfile\n", f);
	fclose(f);
	cli_group_defaults(&g);
	UNIT_OK(cli_group_option(&g, CLI_OPT_RANK, "2", e, sizeof e) == 1,
	    "--rank is a group option");
	UNIT_OK(cli_group_option(&g, 'x', "2", e, sizeof e) == 0,
	    "other options are not");
	cli_group_option(&g, CLI_OPT_WORLD, "3", e, sizeof e);
	cli_group_option(&g, CLI_OPT_MASTER, "[::1]:99", e, sizeof e);
	cli_group_option(&g, CLI_OPT_TIMEOUT, "0.5", e, sizeof e);
	cli_group_option(&g, CLI_OPT_TOKEN_FILE, path, e, sizeof e);
	cli_group_option(&g, CLI_OPT_IFACE, "lo", e, sizeof e);
	cli_group_resolve(&g, e, sizeof e);
	UNIT_OK(g.rank == 2 && g.world == 3, "options override the environment");
	UNIT_OK(strcmp(g.master, "[::1]:99") == 0 && g.timeout == 0.5 &&
	    strcmp(g.iface, "lo") == 0, "master, timeout, iface options");
	UNIT_OK(strcmp(g.token, "fromfile") == 0, "token file, newline stripped");
	cli_group_free(&g);
	clear_env();

	setenv("MASTER_ADDR", "fe80::1", 1);
	setenv("MASTER_PORT", "5", 1);
	setenv("WORLD_SIZE", "2", 1);
	setenv("RANK", "1", 1);
	resolved(&g);
	UNIT_OK(strcmp(g.master, "[fe80::1]:5") == 0, "IPv6 MASTER_ADDR is bracketed");
	cli_group_free(&g);
	clear_env();
}

static void
expect_usage(const char *var, const char *val, const char *want, const char *what)
{
	char msg[512];
	int rc;

	clear_env();
	setenv("COLLX_MASTER", "h:1", 1);
	if (var)
		setenv(var, val, 1);
	rc = in_child(resolve_fn, NULL, msg, sizeof msg);
	UNIT_OK(rc == CLI_EXIT_USAGE && strstr(msg, want) != NULL &&
	    strstr(msg, "--help") != NULL, what);
	if (rc != CLI_EXIT_USAGE || strstr(msg, want) == NULL)
		printf("#   exit %d, message: %s", rc, msg);
	clear_env();
}

/* The library's forms return the usage error instead of exiting. */
static void
test_group_returns(void)
{
	struct cli_group g;
	char e[COLLX_ERRLEN];
	long v;

	clear_env();
	cli_group_defaults(&g);
	errno = 0;
	UNIT_OK(cli_group_option(&g, CLI_OPT_RANK, "x", e, sizeof e) == -1 &&
	    errno == EINVAL && strcmp(e, "--rank: invalid integer 'x'") == 0,
	    "bad --rank: -1, EINVAL, the message");
	UNIT_OK(cli_group_option(&g, CLI_OPT_MASTER, "h", e, sizeof e) == -1 &&
	    strstr(e, "--master: invalid address 'h'") == e, "bad --master");
	setenv("COLLX_WORLD_SIZE", "2", 1);
	errno = 0;
	UNIT_OK(cli_group_resolve(&g, e, sizeof e) == -1 && errno == EINVAL &&
	    strcmp(e, "world size 2 given but no rank (use --rank or set"
	    " COLLX_RANK)") == 0, "resolve: -1, EINVAL, the message");
	cli_group_free(&g);
	clear_env();
	UNIT_OK(cli_long_value("iters", "101", 0, 100, &v, e, sizeof e) == -1 &&
	    strcmp(e, "--iters: 101 is out of range (0 to 100)") == 0,
	    "cli_long_value: the usage error's text");
}

/* The group resolved with COLLX_SHM set to env (NULL: unset) and with
 * --no-shm when option: its no_shm, or -1 when resolving failed (the
 * reason in e, errno as resolving left it). */
static int
no_shm_with(const char *env, int option, char *e, size_t elen)
{
	struct cli_group g;
	int rc, saved;

	clear_env();
	if (env != NULL)
		setenv("COLLX_SHM", env, 1);
	cli_group_defaults(&g);
	if (option && cli_group_option(&g, CLI_OPT_NO_SHM, NULL, e, elen) != 1)
		rc = -2;
	else
		rc = cli_group_resolve(&g, e, elen) < 0 ? -1 : g.no_shm;
	saved = errno;
	cli_group_free(&g);
	clear_env();
	errno = saved;
	return rc;
}

/* --no-shm, else COLLX_SHM (0 or 1), else shared memory allowed. */
static void
test_no_shm(void)
{
	char e[COLLX_ERRLEN];

	UNIT_OK(no_shm_with(NULL, 0, e, sizeof e) == 0,
	    "shared memory allowed unless told otherwise");
	UNIT_OK(no_shm_with(NULL, 1, e, sizeof e) == 1,
	    "--no-shm is a group option: every pair over TCP");
	UNIT_OK(no_shm_with("0", 0, e, sizeof e) == 1,
	    "COLLX_SHM=0: every pair over TCP");
	UNIT_OK(no_shm_with("1", 0, e, sizeof e) == 0,
	    "COLLX_SHM=1: shared memory allowed");
	UNIT_OK(no_shm_with("", 0, e, sizeof e) == 0,
	    "an empty COLLX_SHM counts as unset");
	UNIT_OK(no_shm_with("1", 1, e, sizeof e) == 1,
	    "--no-shm beats COLLX_SHM=1");
	UNIT_OK(no_shm_with("yes", 1, e, sizeof e) == 1,
	    "with --no-shm COLLX_SHM is not read");
	errno = 0;
	UNIT_OK(no_shm_with("yes", 0, e, sizeof e) == -1 && errno == EINVAL &&
	    strcmp(e, "COLLX_SHM: want 0 (every pair over TCP) or 1 (shared"
	    " memory on one host), not 'yes'") == 0,
	    "bad COLLX_SHM: -1, EINVAL, the message");
	expect_usage("COLLX_SHM", "00", "COLLX_SHM", "COLLX_SHM=00 exits 2 naming it");
	expect_usage("COLLX_SHM", "off", "COLLX_SHM", "COLLX_SHM=off exits 2 naming it");
	UNIT_OK(strstr(cli_group_help, "\n  --no-shm ") != NULL &&
	    strstr(cli_group_help, "COLLX_SHM=0") != NULL,
	    "--help's group options list --no-shm and COLLX_SHM");
}

static void
test_env_errors(void)
{
	char msg[512];
	int rc;

	expect_usage("COLLX_RANK", "x1", "COLLX_RANK", "bad COLLX_RANK names it");
	expect_usage("WORLD_SIZE", "0", "WORLD_SIZE", "WORLD_SIZE 0 is refused");
	expect_usage("COLLX_TIMEOUT", "-3", "COLLX_TIMEOUT", "negative timeout refused");
	expect_usage("SLURM_PROCID", "2", "no world size", "rank without world size");
	expect_usage("COLLX_WORLD_SIZE", "2", "no rank", "world size without rank");
	expect_usage("COLLX_MASTER", "nohost", "COLLX_MASTER", "master without port");

	clear_env();
	setenv("RANK", "4", 1);
	setenv("WORLD_SIZE", "4", 1);
	setenv("COLLX_MASTER", "h:1", 1);
	rc = in_child(resolve_fn, NULL, msg, sizeof msg);
	UNIT_OK(rc == 2 && strstr(msg, "out of range"), "rank >= world refused");

	clear_env();
	setenv("RANK", "0", 1);
	setenv("WORLD_SIZE", "2", 1);
	rc = in_child(resolve_fn, NULL, msg, sizeof msg);
	UNIT_OK(rc == 2 && strstr(msg, "rendezvous"), "world > 1 needs a master");

	setenv("MASTER_ADDR", "h", 1);
	rc = in_child(resolve_fn, NULL, msg, sizeof msg);
	UNIT_OK(rc == 2 && strstr(msg, "MASTER_PORT"), "MASTER_ADDR without MASTER_PORT");
	setenv("MASTER_PORT", "70000", 1);
	rc = in_child(resolve_fn, NULL, msg, sizeof msg);
	UNIT_OK(rc == 2 && strstr(msg, "MASTER_PORT"), "MASTER_PORT out of range");
	clear_env();
}

static void
usage_fn(const void *arg)
{
	(void)arg;
	cli_usage_error("9 stages for 8 layers");
}

/* A usage error is every rank's: rank 0 says it, another rank exits 2 in
 * silence (stderr here is a pipe, not a terminal) unless -v. Before the
 * group is known a rank program (it has a group) goes by the launcher's
 * variable. */
static void
test_usage_once(void)
{
	struct cli_group g;
	char msg[512];
	int rc;

	clear_env();
	setenv("COLLX_RANK", "1", 1);
	setenv("COLLX_WORLD_SIZE", "3", 1);
	setenv("COLLX_MASTER", "127.0.0.1:9", 1);
	resolved(&g);
	cli_group_free(&g);
	rc = in_child(usage_fn, NULL, msg, sizeof msg);
	UNIT_OK(rc == 2 && msg[0] == '\0', "rank 1: a usage error, exit 2, unsaid");
	cli_verbose = 1;
	rc = in_child(usage_fn, NULL, msg, sizeof msg);
	cli_verbose = 0;
	UNIT_OK(rc == 2 && strstr(msg, "9 stages for 8 layers") &&
	    strstr(msg, "Try "), "rank 1 with -v says it");
	cli_rank = 0;
	rc = in_child(usage_fn, NULL, msg, sizeof msg);
	UNIT_OK(rc == 2 && strstr(msg, "9 stages for 8 layers"), "rank 0 says it");
	cli_rank = cli_world = -1;	/* not known yet: COLLX_RANK tells */
	UNIT_OK(cli_group_env_rank() == 1, "the launcher's rank, before the group");
	rc = in_child(usage_fn, NULL, msg, sizeof msg);
	UNIT_OK(rc == 2 && msg[0] == '\0', "rank 1 by COLLX_RANK: unsaid");
	setenv("COLLX_RANK", "x1", 1);
	UNIT_OK(cli_group_env_rank() == -1, "a bad COLLX_RANK is no rank");
	setenv("COLLX_RANK", " 1", 1);	/* --rank and env_fill refuse these */
	UNIT_OK(cli_group_env_rank() == -1, "a spaced COLLX_RANK is no rank");
	setenv("COLLX_RANK", "1048576", 1);
	UNIT_OK(cli_group_env_rank() == -1, "COLLX_RANK 2^20 is no rank");
	setenv("COLLX_RANK", "1048575", 1);
	UNIT_OK(cli_group_env_rank() == 1048575, "the last rank, 2^20 - 1");
	clear_env();	/* and the rank unknown: later usage errors are said */
}

static void
test_numbers(void)
{
	char msg[512];
	long v[4];
	size_t z;

	UNIT_OK(cli_parse_long("n", "42", 0, 100) == 42, "parse_long");
	UNIT_OK(cli_parse_long("n", "-7", -10, 10) == -7, "parse_long negative");
	UNIT_OK(in_child(long_fn, "12x", msg, sizeof msg) == 2 &&
	    strstr(msg, "--iters") && strstr(msg, "12x"), "trailing garbage names option");
	UNIT_OK(in_child(long_fn, "101", msg, sizeof msg) == 2 &&
	    strstr(msg, "out of range"), "out of range");
	UNIT_OK(in_child(long_fn, " 5", msg, sizeof msg) == 2, "leading blank refused");
	UNIT_OK(in_child(long_fn, "", msg, sizeof msg) == 2, "empty refused");
	UNIT_OK(in_child(long_fn, "99999999999999999999", msg, sizeof msg) == 2,
	    "overflow refused");
	UNIT_OK(cli_parse_double("lr", "1e-3", 0, 1) == 1e-3, "parse_double");

	UNIT_OK(cli_parse_size("b", "8") == 8, "size plain");
	UNIT_OK(cli_parse_size("b", "64K") == 65536, "size K");
	UNIT_OK(cli_parse_size("b", "3m") == 3145728, "size m");
	UNIT_OK(cli_parse_size("b", "2G") == 2147483648UL, "size G");
	UNIT_OK(cli_parse_size("b", "1.5K") == 1536, "size 1.5K");
	UNIT_OK(cli_parse_size("b", "4KiB") == 4096 && cli_parse_size("b", "4kb") == 4096,
	    "size KiB/kb spellings");
	UNIT_OK(cli_size_value("1.1", &z) < 0, "fraction of a byte refused");
	UNIT_OK(cli_size_value("-1", &z) < 0 && cli_size_value("K", &z) < 0 &&
	    cli_size_value("1Q", &z) < 0 && cli_size_value("1KK", &z) < 0 &&
	    cli_size_value("", &z) < 0, "bad sizes refused");
	UNIT_OK(cli_size_value("99999999T", &z) < 0, "size overflow refused");
	UNIT_OK(in_child(size_fn, "12Q", msg, sizeof msg) == 2 && strstr(msg, "-b"),
	    "bad size names -b");

	UNIT_OK(cli_parse_list("shape", "2,3,4", v, 4) == 3 && v[0] == 2 && v[1] == 3 &&
	    v[2] == 4, "list");
	UNIT_OK(cli_parse_list("shape", "-1", v, 4) == 1 && v[0] == -1, "one-item list");
	UNIT_OK(in_child(list_fn, "1,2,3,4", msg, sizeof msg) == 2 &&
	    strstr(msg, "at most 3"), "too many items");
	UNIT_OK(in_child(list_fn, "1,,2", msg, sizeof msg) == 2, "empty item");
	UNIT_OK(in_child(list_fn, "1,2,", msg, sizeof msg) == 2, "trailing comma");
	UNIT_OK(in_child(list_fn, "1,a", msg, sizeof msg) == 2, "non-number item");
}

/* Numbers are decimal, '-' their only sign: what strtol and strtod
 * would take besides is refused by every parser, with the usage error's
 * one line; leading zeros are decimal and "-0" is zero. */
static void
test_number_grammar(void)
{
	static const char *bad_long[] = { "+5", " 5", "5 ", "\t5", "0x10",
	    "0X10", "--5", "-", "+", "-+5", "5e2", "1.0", "9223372036854775808",
	    "-9223372036854775809" };
	static const char *bad_double[] = { "+0.5", " 0.5", "0.5 ", "0x1p-3",
	    "0x10", "inf", "-inf", "infinity", "nan", "NAN", "-", ".", "e5",
	    "1e", "1e+", "1.5.2", "1e999", "0.5x", "--1" };
	static const char *bad_size[] = { "+8", " 8", "8 ", "0x10", "1.5e3",
	    "1.5e3K", "1.K", "8.5e1", "18446744073709551616" };
	char e[COLLX_ERRLEN], msg[512], what[80];
	size_t i, z;
	double d;
	long v, l[2];

	for (i = 0; i < sizeof bad_long / sizeof *bad_long; i++) {
		snprintf(what, sizeof what, "integer '%s' refused", bad_long[i]);
		UNIT_OK(cli_long_value("steps", bad_long[i], LONG_MIN, LONG_MAX,
		    &v, e, sizeof e) == -1 && strstr(e, "--steps: invalid "
		    "integer '") == e, what);
	}
	for (i = 0; i < sizeof bad_double / sizeof *bad_double; i++) {
		snprintf(what, sizeof what, "real '%s' refused", bad_double[i]);
		UNIT_OK(cli_double_value("lr", bad_double[i], -1e300, 1e300, &d,
		    e, sizeof e) == -1 && strstr(e, "--lr: invalid number '") == e,
		    what);
	}
	for (i = 0; i < sizeof bad_size / sizeof *bad_size; i++) {
		snprintf(what, sizeof what, "size '%s' refused", bad_size[i]);
		UNIT_OK(cli_size_value(bad_size[i], &z) == -1, what);
	}
	UNIT_OK(in_child(long_fn, "+5", msg, sizeof msg) == 2 &&
	    strstr(msg, ": --iters: invalid integer '+5'\n"),
	    "--iters +5: exit 2, the usage error naming the value");
	UNIT_OK(in_child(list_fn, "1,+2", msg, sizeof msg) == 2, "list item +2");
	UNIT_OK(in_child(list_fn, "1, 2", msg, sizeof msg) == 2, "list item ' 2'");

	UNIT_OK(cli_long_value("n", "010", 0, 100, &v, e, sizeof e) == 0 &&
	    v == 10, "010 is ten");
	UNIT_OK(cli_long_value("n", "-0", 0, 100, &v, e, sizeof e) == 0 &&
	    v == 0, "-0 is zero");
	UNIT_OK(cli_parse_list("shape", "-3,007", l, 2) == 2 && l[0] == -3 &&
	    l[1] == 7, "list -3,007");
	UNIT_OK(cli_double_value("lr", "-0", 0, 1, &d, e, sizeof e) == 0 &&
	    d == 0 && !signbit(d), "real -0 is +0");
	UNIT_OK(cli_double_value("lr", ".5", 0, 1, &d, e, sizeof e) == 0 &&
	    d == 0.5, "real .5");
	UNIT_OK(cli_double_value("lr", "5.", 0, 9, &d, e, sizeof e) == 0 &&
	    d == 5, "real 5.");
	UNIT_OK(cli_double_value("lr", "-2.5E-1", -1, 1, &d, e, sizeof e) == 0 &&
	    d == -0.25, "real -2.5E-1");
	UNIT_OK(cli_double_value("lr", "1e+2", 0, 1e3, &d, e, sizeof e) == 0 &&
	    d == 100, "real 1e+2");
	UNIT_OK(cli_double_value("lr", "010.5", 0, 100, &d, e, sizeof e) == 0 &&
	    d == 10.5, "real 010.5");
	UNIT_OK(cli_size_value("010K", &z) == 0 && z == 10240, "size 010K");
}

static void
test_subst(void)
{
	char *s;

	s = cli_subst("out.{rank}-of-{world}.npy", 3, 8);
	UNIT_OK(strcmp(s, "out.3-of-8.npy") == 0, "subst rank and world");
	free(s);
	s = cli_subst("{rank}{rank}{world}", 123456789, 1000000000);
	UNIT_OK(strcmp(s, "1234567891234567891000000000") == 0, "subst long numbers");
	free(s);
	s = cli_subst("{ranks} {i} {rank", 1, 2);
	UNIT_OK(strcmp(s, "{ranks} {i} {rank") == 0, "other braces untouched");
	free(s);
}

/* Byte orders written out by hand: 0x0102 is 02 01, and so on. */
static void
test_le(void)
{
	static const unsigned char want[8] = { 0x08, 0x07, 0x06, 0x05, 0x04,
	    0x03, 0x02, 0x01 };
	unsigned char b[9] = { 0 };

	cli_le_put(b, 0x0102030405060708ULL, 8);
	UNIT_OK(memcmp(b, want, 8) == 0 && b[8] == 0, "8 bytes, least first");
	UNIT_OK(cli_le_get(want, 8) == 0x0102030405060708ULL &&
	    cli_le_get(want, 4) == 0x05060708 && cli_le_get(want, 2) == 0x0708,
	    "8, 4 and 2 bytes read back");
	cli_le_put(b, 0xfffffffe, 4);
	UNIT_OK(b[0] == 0xfe && b[1] == 0xff && b[3] == 0xff && b[4] == 0x04,
	    "4 bytes written, the fifth untouched");
}

static void
test_names(void)
{
	static const char *const names[] = { "a", NULL, "bc", "a" };

	UNIT_OK(cli_name_index(names, 4, "bc") == 2 &&
	    cli_name_index(names, 4, "a") == 0 &&
	    cli_name_index(names, 2, "bc") == -1 &&
	    cli_name_index(names, 4, "") == -1 && cli_name_index(names, 4, "b") == -1,
	    "name lookup: first match, NULL skipped, only the first n, whole names");
}

static void
test_busbw(void)
{
	UNIT_CLOSE(cli_busbw_factor("allreduce", 4), 1.5, 1e-12, 0, "allreduce 2(n-1)/n");
	UNIT_CLOSE(cli_busbw_factor("allreduce", 1), 0, 0, 1e-12, "allreduce n=1");
	UNIT_CLOSE(cli_busbw_factor("allgather", 8), 0.875, 1e-12, 0, "allgather (n-1)/n");
	UNIT_CLOSE(cli_busbw_factor("reduce-scatter", 2), 0.5, 1e-12, 0, "reduce-scatter");
	UNIT_CLOSE(cli_busbw_factor("alltoall", 5), 0.8, 1e-12, 0, "alltoall");
	UNIT_CLOSE(cli_busbw_factor("broadcast", 16), 1, 0, 0, "broadcast 1");
	UNIT_CLOSE(cli_busbw_factor("reduce", 16), 1, 0, 0, "reduce 1");
	UNIT_CLOSE(cli_busbw_factor("sendrecv", 3), 1, 0, 0, "others 1");
}

static char *
slurp(const char *path)
{
	static char buf[1 << 20];
	size_t n;
	FILE *f = fopen(path, "r");

	if (f == NULL)
		return strcpy(buf, "");
	n = fread(buf, 1, sizeof buf - 1, f);
	buf[n] = '\0';
	fclose(f);
	return buf;
}

static int
count_lines(const char *s, const char *prefix)
{
	int n = 0;

	for (; *s; s = strchr(s, '\n') + 1) {
		if (strncmp(s, prefix, strlen(prefix)) == 0)
			n++;
		if (strchr(s, '\n') == NULL)
			break;
	}
	return n;
}

static void
test_timing(void)
{
	struct cli_timing_row r = { "collx-allreduce", "allreduce", "ring", 1, 4,
	    "f32", 250000000, 1000000000, 0, 2.0, NULL };
	struct cli_timing *t;
	char path[64], e[COLLX_ERRLEN], *s;
	int k;

	snprintf(path, sizeof path, "%s/t.csv", tmpdir);
	UNIT_OK(cli_timing_open(&t, NULL, NULL, e, sizeof e) == 0 && t == NULL,
	    "NULL path: timing off");
	UNIT_OK(cli_timing_write(NULL, &r, e, sizeof e) == 0 &&
	    cli_timing_close(NULL, e, sizeof e) == 0, "and its calls no-ops");
	UNIT_OK(cli_timing_open(&t, "/nonexistent/t.csv", NULL, e, sizeof e) ==
	    -1 && t == NULL && strcmp(e, "timing /nonexistent/t.csv: "
	    "No such file or directory") == 0, "open failure: -1 and the reason");
	cli_timing_open(&t, path, NULL, e, sizeof e);
	cli_timing_write(t, &r, e, sizeof e);
	r.op = "broadcast", r.iter = 1, r.seconds = 0.5, r.algo = "a,b";
	cli_timing_write(t, &r, e, sizeof e);
	cli_timing_close(t, e, sizeof e);
	s = slurp(path);
	UNIT_OK(strcmp(s, "program,op,algo,rank,world_size,dtype,count,bytes,iter,"
	    "seconds,algbw_gbps,busbw_gbps\n"
	    "collx-allreduce,allreduce,ring,1,4,f32,250000000,1000000000,0,2,0.5,0.75\n"
	    "collx-allreduce,broadcast,\"a,b\",1,4,f32,250000000,1000000000,1,0.5,2,2\n")
	    == 0, "header, rows, algbw = bytes/s/1e9, busbw factor, quoting");
	cli_timing_open(&t, path, NULL, e, sizeof e);
	cli_timing_write(t, &r, e, sizeof e);
	cli_timing_close(t, e, sizeof e);
	UNIT_OK(count_lines(slurp(path), "program,") == 1 &&
	    count_lines(slurp(path), "collx-") == 3, "no second header when appending");

	snprintf(path, sizeof path, "%s/x.csv", tmpdir);
	cli_timing_open(&t, path, "step,note", e, sizeof e);
	r.extra = "7,hi";
	r.seconds = 0;
	cli_timing_write(t, &r, e, sizeof e);
	cli_timing_close(t, e, sizeof e);
	s = slurp(path);
	UNIT_OK(strstr(s, "busbw_gbps,step,note\n") != NULL &&
	    strstr(s, ",0,0,0,7,hi\n") != NULL, "extra columns; zero seconds gives 0 GB/s");

	/* Four processes append at once to a new file: one header, whole rows. */
	snprintf(path, sizeof path, "%s/shared.csv", tmpdir);
	for (k = 0; k < 4; k++)
		if (fork() == 0) {
			struct cli_timing *c;
			struct cli_timing_row row = r;
			int i;

			cli_timing_open(&c, path, NULL, e, sizeof e);
			row.extra = NULL, row.rank = k, row.seconds = 1;
			for (i = 0; i < 300; i++) {
				row.iter = i;
				cli_timing_write(c, &row, e, sizeof e);
			}
			cli_timing_close(c, e, sizeof e);
			_exit(0);
		}
	while (wait(NULL) > 0)
		;
	s = slurp(path);
	UNIT_OK(count_lines(s, "program,") == 1 && count_lines(s, "collx-allreduce,") ==
	    1200 && strncmp(s, "program,", 8) == 0, "concurrent appenders: one header, 1200 rows");
}

/* Rows of one rank written to "-" when standard output is a pipe. */
static void
pipe_rows(const void *arg)
{
	struct cli_timing_row r = { "p", "allreduce", "ring", *(const int *)arg, 2,
	    "f32", 1, 4, 0, 1.0, NULL };
	struct cli_timing *t;
	char e[COLLX_ERRLEN];

	dup2(2, 1);		/* in_child's pipe */
	cli_timing_open(&t, "-", NULL, e, sizeof e);
	cli_timing_write(t, &r, e, sizeof e);
	cli_timing_write(t, &r, e, sizeof e);
	cli_timing_close(t, e, sizeof e);
}

static void
test_timing_pipe(void)
{
	char out[1024];
	int rank = 0;

	in_child(pipe_rows, &rank, out, sizeof out);
	UNIT_OK(strncmp(out, "program,op,", 11) == 0 && count_lines(out, "program,") == 1 &&
	    count_lines(out, "p,allreduce,") == 2, "pipe: rank 0 writes the header once");
	rank = 1;
	in_child(pipe_rows, &rank, out, sizeof out);
	UNIT_OK(count_lines(out, "program,") == 0 && count_lines(out, "p,allreduce,") == 2,
	    "pipe: other ranks write rows only");
}

static void
test_hostport(void)
{
	char host[64];
	int port;

	UNIT_OK(cli_hostport_parse("node1:29500", host, sizeof host, &port) == 0 &&
	    strcmp(host, "node1") == 0 && port == 29500, "host:port");
	UNIT_OK(cli_hostport_parse("[::1]:80", host, sizeof host, &port) == 0 &&
	    strcmp(host, "::1") == 0 && port == 80, "[v6]:port");
	UNIT_OK(cli_hostport_parse("::1:80", host, sizeof host, &port) < 0 &&
	    cli_hostport_parse("h:0", host, sizeof host, &port) < 0 &&
	    cli_hostport_parse("h:65536", host, sizeof host, &port) < 0 &&
	    cli_hostport_parse(":80", host, sizeof host, &port) < 0 &&
	    cli_hostport_parse("h:8x", host, sizeof host, &port) < 0, "bad addresses");
}

/* expr's hosts, each asked for by its index, joined by spaces; the count
 * cli_hostlist returned, or -1 with the reason in e. */
static long
hostlist_words(const char *expr, char *out, size_t outlen, char *e,
    size_t elen)
{
	char host[256];
	long n, k;

	out[0] = '\0';
	if ((n = cli_hostlist(expr, 0, host, sizeof host, e, elen)) < 0)
		return -1;
	for (k = 0; k < n && k < 64; k++) {
		if (cli_hostlist(expr, k, host, sizeof host, e, elen) != n)
			return -1;
		snprintf(out + strlen(out), outlen - strlen(out), "%s%s",
		    k ? " " : "", host);
	}
	return n;
}

/* Slurm's host lists, expanded by hand as Slurm's documentation and
 * scontrol show hostnames write them. */
static void
test_hostlist(void)
{
	static const char *const good[][2] = {
		{ "node1", "node1" },
		{ "n[1-3]", "n1 n2 n3" },
		{ "n[01-04,07]", "n01 n02 n03 n04 n07" },
		{ "a,b[1-2]", "a b1 b2" },
		{ "n[8-11]", "n8 n9 n10 n11" },
		{ "n[098-101]", "n098 n099 n100 n101" },
		{ "n[007]", "n007" },
		{ "n[0]", "n0" },
		{ "n[1-2]-ib", "n1-ib n2-ib" },
		{ "rack[1-2]n[01-02]", "rack1n01 rack1n02 rack2n01 rack2n02" },
		{ "gpu-a[3],gpu-b[1,3-4],login.example.org",
		    "gpu-a3 gpu-b1 gpu-b3 gpu-b4 login.example.org" },
		{ "x[1,2],y,z[5-6,9]", "x1 x2 y z5 z6 z9" },
		{ "[1-2]x", "1x 2x" },
		{ "c_1[9-10]", "c_19 c_110" },
	};
	static const char *const bad[][2] = {
		{ "", "an empty host name at its end" },
		{ ",", "an empty host name at ','" },
		{ "a,", "an empty host name at its end" },
		{ ",a", "an empty host name at ',a'" },
		{ "a,,b", "an empty host name at ',b'" },
		{ "n[", "a number expected at its end" },
		{ "n[1", "',' or ']' expected at its end" },
		{ "n[1-]", "a number expected at ']'" },
		{ "n[]", "a number expected at ']'" },
		{ "n[1,]", "a number expected at ']'" },
		{ "n[2-1]", "a range that runs backwards at '2-1]'" },
		{ "n]", "a ']' without its '[' at ']'" },
		{ "n[1]]", "a ']' without its '[' at ']'" },
		{ "n[[1]]", "a number expected at '[1]]'" },
		{ "n[a]", "a number expected at 'a]'" },
		{ "n[1:2]", "',' or ']' expected at ':2]'" },
		{ "n[1-2", "',' or ']' expected at its end" },
		{ "n 1", "a character not allowed in a host name at ' 1'" },
		{ "n[1234567890]", "a number of more than 9 digits" },
		{ "n[0-99999999]", "more than 16777216 hosts" },
		{ "a[1-5000]b[1-5000]", "more than 16777216 hosts" },
		{ "a[1]b[1]c[1]d[1]e[1]f[1]g[1]h[1]i[1]",
		    "more than 8 brackets in a host" },
	};
	char out[1024], e[COLLX_ERRLEN], host[8], what[160];
	size_t i;
	long n;

	for (i = 0; i < sizeof good / sizeof good[0]; i++) {
		n = hostlist_words(good[i][0], out, sizeof out, e, sizeof e);
		snprintf(what, sizeof what, "host list '%s' is %s", good[i][0],
		    good[i][1]);
		UNIT_OK(n >= 0 && strcmp(out, good[i][1]) == 0, what);
		if (n < 0 || strcmp(out, good[i][1]) != 0)
			printf("#   got %ld: '%s' %s\n", n, out, n < 0 ? e : "");
	}
	for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		n = cli_hostlist(bad[i][0], 0, out, sizeof out, e, sizeof e);
		snprintf(what, sizeof what, "host list '%s' refused: %s",
		    bad[i][0], bad[i][1]);
		UNIT_OK(n == -1 && strstr(e, bad[i][1]) != NULL &&
		    strncmp(e, "host list '", 11) == 0, what);
		if (n != -1 || strstr(e, bad[i][1]) == NULL)
			printf("#   got %ld: %s\n", n, n < 0 ? e : out);
	}
	UNIT_OK(cli_hostlist("n[1-3]", 3, out, sizeof out, e, sizeof e) == 3 &&
	    out[0] == '\0', "past the last host: the count, host empty");
	UNIT_OK(cli_hostlist("n[0-16777215]", 16777215, out, sizeof out, e,
	    sizeof e) == 16777216 && strcmp(out, "n16777215") == 0,
	    "the last of 2^24 hosts, found without listing them");
	UNIT_OK(cli_hostlist("longname1", 0, host, sizeof host, e, sizeof e) ==
	    -1 && strstr(e, "longer than 7 bytes") != NULL &&
	    cli_hostlist("ab[100]", 0, host, 5, e, sizeof e) == -1 &&
	    cli_hostlist("ab[100]", 0, host, 6, e, sizeof e) == 1 &&
	    strcmp(host, "ab100") == 0,
	    "a host longer than the buffer is refused");
	UNIT_OK(cli_hostlist("longname1,n[1-2]", 2, host, sizeof host, e,
	    sizeof e) == 3 && strcmp(host, "n2") == 0,
	    "a long host not asked for is no fault");
	/* found by fuzz_hostlist: a refusal left the previous host's tail in
	 * the buffer, unterminated within its hostlen bytes */
	memcpy(host, "node1", 6);
	UNIT_OK(cli_hostlist("node1", 0, host, 5, e, sizeof e) == -1 &&
	    host[0] == '\0', "a host too long: refused, host left empty");
	memcpy(host, "ab1000", 7);
	UNIT_OK(cli_hostlist("ab[100]", 0, host, 5, e, sizeof e) == -1 &&
	    host[0] == '\0', "a bracket too long: refused, host left empty");
}

/* Rank r of 4 under srun's variables: job 1234, step 5, the nodes of
 * the step (or only the job's when step is NULL). */
static void
srun_env(const char *r, const char *step_nodes)
{
	clear_env();
	setenv("SLURM_PROCID", r, 1);
	setenv("SLURM_NTASKS", "4", 1);
	setenv("SLURM_LOCALID", r, 1);
	setenv("SLURM_JOB_ID", "1234", 1);
	setenv("SLURM_STEP_ID", "5", 1);
	setenv("SLURM_JOB_NODELIST", "login1,gpu[01-09]", 1);
	if (step_nodes != NULL)
		setenv("SLURM_STEP_NODELIST", step_nodes, 1);
}

/* The group resolved from the environment: 0 or -1 with the reason. */
static int
resolve_env(struct cli_group *g, char *e, size_t elen)
{
	cli_group_defaults(g);
	return cli_group_resolve(g, e, elen);
}

/*
 * Under srun nothing of collx's own is needed: the rendezvous is the
 * first host of the step on port 10240 + 64 * (job mod 352) + step mod 64;
 * for job 1234 step 5: 1234 mod 352 = 178, 10240 + 11392 + 5 = 21637.
 */
static void
test_slurm(void)
{
	struct cli_group g;
	char e[COLLX_ERRLEN];
	int rc;

	srun_env("2", "gpu[07-09],cpu1");
	rc = resolve_env(&g, e, sizeof e);
	UNIT_OK(rc == 0 && g.rank == 2 && g.world == 4 && g.local_rank == 2 &&
	    strcmp(g.master, "gpu07:21637") == 0 && g.slurm_job == 1234 &&
	    g.slurm_step == 5, "srun: the step's first host, port from the ids");
	UNIT_OK(rc == 0 && strcmp(g.job_id, "slurm-1234.5") == 0,
	    "srun: the step is the job's identity");
	cli_group_free(&g);

	srun_env("0", NULL);
	setenv("SLURMD_NODENAME", "login1", 1);
	rc = resolve_env(&g, e, sizeof e);
	UNIT_OK(rc == 0 && strcmp(g.master, "login1:21637") == 0,
	    "no SLURM_STEP_NODELIST: the job's first host");
	cli_group_free(&g);

	UNIT_OK(cli_slurm_port(0, 0) == 10240 && cli_slurm_port(351, 63) ==
	    32767 && cli_slurm_port(352, 64) == 10240 &&
	    cli_slurm_port(7, 1) == 10240 + 7 * 64 + 1,
	    "ports 10240 to 32767, below the ephemeral range");
	UNIT_OK(cli_slurm_port(1234, 69) == 21637 &&
	    cli_slurm_port(1234 + 352, 5) == 21637 &&
	    cli_slurm_port(1234, 6) == 21638 && cli_slurm_port(1235, 5) ==
	    21637 + 64, "steps equal modulo 64, jobs modulo 352 share a port");

	srun_env("1", "gpu[07-09]");
	setenv("COLLX_MASTER", "10.0.0.1:9", 1);
	rc = resolve_env(&g, e, sizeof e);
	UNIT_OK(rc == 0 && strcmp(g.master, "10.0.0.1:9") == 0 &&
	    g.slurm_step == -1 && strcmp(g.job_id, "slurm-1234.5") == 0,
	    "COLLX_MASTER beats Slurm's address; the identity stays");
	cli_group_free(&g);
	unsetenv("COLLX_MASTER");
	setenv("MASTER_ADDR", "head", 1);
	setenv("MASTER_PORT", "29500", 1);
	rc = resolve_env(&g, e, sizeof e);
	UNIT_OK(rc == 0 && strcmp(g.master, "head:29500") == 0,
	    "MASTER_ADDR and MASTER_PORT beat Slurm's address");
	cli_group_free(&g);

	srun_env("1", "gpu[07-09]");
	setenv("COLLX_JOB_ID", "abc", 1);
	cli_group_defaults(&g);
	cli_group_option(&g, CLI_OPT_MASTER, "h:7", e, sizeof e);
	rc = cli_group_resolve(&g, e, sizeof e);
	UNIT_OK(rc == 0 && strcmp(g.master, "h:7") == 0 &&
	    strcmp(g.job_id, "abc") == 0, "--master and COLLX_JOB_ID win");
	cli_group_free(&g);

	/* Another launcher named the rank: Slurm's variables are not its. */
	srun_env("1", "gpu[07-09]");
	setenv("OMPI_COMM_WORLD_RANK", "1", 1);
	rc = resolve_env(&g, e, sizeof e);
	UNIT_OK(rc == -1 && strstr(e, "needs a rendezvous address") &&
	    g.job_id == NULL, "a rank from mpirun: no Slurm rendezvous");
	cli_group_free(&g);
	srun_env("1", "gpu[07-09]");
	cli_group_defaults(&g);
	cli_group_option(&g, CLI_OPT_RANK, "1", e, sizeof e);
	rc = cli_group_resolve(&g, e, sizeof e);
	UNIT_OK(rc == -1 && strstr(e, "needs a rendezvous address"),
	    "--rank given: no Slurm rendezvous");
	cli_group_free(&g);

	/* Under a PMIx server, rank 0's address comes through PMIx
	 * (prog_join): resolving needs none. */
	srun_env("1", "gpu[07-09]");
	setenv("OMPI_COMM_WORLD_RANK", "1", 1);
	setenv("PMIX_NAMESPACE", "prterun-x-7@1", 1);
	rc = resolve_env(&g, e, sizeof e);
#ifdef COLLX_PMIX
	UNIT_OK(rc == 0 && g.pmix && g.master == NULL &&
	    strcmp(g.job_id, "pmix-prterun-x-7@1") == 0,
	    "mpirun with PMIx: no address needed, the namespace is the job");
#else
	UNIT_OK(rc == -1 && strstr(e, "needs a rendezvous address"),
	    "built without PMIx: mpirun needs an address");
#endif
	cli_group_free(&g);
	srun_env("1", "gpu[07-09]");
	setenv("PMIX_NAMESPACE", "slurm.pmix.1234.5", 1);
	rc = resolve_env(&g, e, sizeof e);
#ifdef COLLX_PMIX
	UNIT_OK(rc == 0 && g.pmix && g.master == NULL,
	    "srun --mpi=pmix: PMIx before Slurm's derived address");
#else
	UNIT_OK(rc == 0 && strcmp(g.master, "gpu07:21637") == 0,
	    "built without PMIx: srun --mpi=pmix takes Slurm's address");
#endif
	cli_group_free(&g);
	srun_env("1", "gpu[07-09]");
	setenv("PMIX_NAMESPACE", "ns", 1);
	setenv("COLLX_MASTER", "h:9", 1);
	rc = resolve_env(&g, e, sizeof e);
	UNIT_OK(rc == 0 && !g.pmix && strcmp(g.master, "h:9") == 0,
	    "an address given beats PMIx");
	cli_group_free(&g);

	srun_env("0", "n[");
	setenv("SLURM_NTASKS", "1", 1);
	rc = resolve_env(&g, e, sizeof e);
	UNIT_OK(rc == 0 && g.master == NULL, "a world of 1 needs no address");
	cli_group_free(&g);

	srun_env("1", "gpu[07-");
	errno = 0;
	rc = resolve_env(&g, e, sizeof e);
	UNIT_OK(rc == -1 && errno == EINVAL && strcmp(e, "SLURM_STEP_NODELIST:"
	    " host list 'gpu[07-': a number expected at its end") == 0,
	    "a bad node list: a usage error naming the variable");
	cli_group_free(&g);
	srun_env("1", NULL);
	unsetenv("SLURM_JOB_NODELIST");
	rc = resolve_env(&g, e, sizeof e);
	UNIT_OK(rc == -1 && errno == EINVAL && strstr(e, "neither "
	    "SLURM_STEP_NODELIST nor SLURM_JOB_NODELIST is set"),
	    "no node list: a usage error naming both");
	cli_group_free(&g);
	srun_env("1", "gpu1");
	setenv("SLURM_JOB_ID", "12x", 1);
	rc = resolve_env(&g, e, sizeof e);
	UNIT_OK(rc == -1 && errno == EINVAL && strstr(e, "SLURM_JOB_ID"),
	    "a bad SLURM_JOB_ID: a usage error naming it");
	cli_group_free(&g);

	srun_env("0", "gpu[07-09]");
	setenv("SLURMD_NODENAME", "gpu08", 1);
	rc = resolve_env(&g, e, sizeof e);
	UNIT_OK(rc == -1 && errno == EINVAL && strcmp(e, "rank 0 runs on gpu08,"
	    " not on gpu07, the first host of SLURM_STEP_NODELIST, where the "
	    "others look for it (use --master HOST:PORT or set COLLX_MASTER)")
	    == 0, "rank 0 elsewhere than the first host: a usage error");
	cli_group_free(&g);
	setenv("SLURM_PROCID", "3", 1);
	rc = resolve_env(&g, e, sizeof e);
	UNIT_OK(rc == 0 && strcmp(g.master, "gpu07:21637") == 0,
	    "another rank may run anywhere");
	cli_group_free(&g);
	clear_env();
}

int
main(int argc, char **argv)
{
	(void)argc;
	cli_init(argv[0]);
	if (mkdtemp(tmpdir) == NULL)
		return 1;
	test_env_precedence();
	test_options_override();
	test_group_returns();
	test_env_errors();
	test_no_shm();
	test_usage_once();
	test_numbers();
	test_number_grammar();
	test_subst();
	test_le();
	test_names();
	test_busbw();
	test_timing();
	test_timing_pipe();
	test_hostport();
	test_hostlist();
	test_slurm();
	UNIT_CLOSE(cli_now() - cli_now(), 0, 0, 0.1, "cli_now is monotonic seconds");
	if (unit_rmdir(tmpdir) < 0)
		return 1;
	return unit_done();
}
