/* cli: what every collx program shares — messages, exit codes, option
 * conventions, group membership from options and environment, timing CSV. */
#ifndef COLLX_CLI_H
#define COLLX_CLI_H

#include <stddef.h>
#include <stdio.h>

#include "cli/util.h"

enum cli_exit {
	CLI_EXIT_OK = 0,
	CLI_EXIT_RUNTIME = 1,	/* connection, peer lost, timeout, I/O */
	CLI_EXIT_USAGE = 2,
	CLI_EXIT_DATA = 3,	/* bad tensor file, mismatch between ranks */
	CLI_EXIT_CHECK = 4	/* --check or diff outside tolerance */
};

extern const char *cli_progname;
extern int cli_verbose;		/* -v count */
extern int cli_quiet;		/* -q */
/* The largest world collx runs: what a rank's options and environment may
 * say, and what a file it wrote may claim. */
#define CLI_MAX_WORLD (1 << 20)

/* This process's rank and world size once cli_group_finish() knows them,
 * else -1. */
extern int cli_rank, cli_world;

void cli_init(const char *argv0);
/* The options every program has: -h (usage(), which prints the help; the
 * program then exits 0), -V, -v and -q. 1 when opt was one of them. */
int cli_std_option(int opt, void (*usage)(void));
/* Their long forms, for a getopt_long table. */
#define CLI_STD_LONGOPTS \
	{ "help", 0, 0, 'h' }, { "version", 0, 0, 'V' }, \
	{ "verbose", 0, 0, 'v' }, { "quiet", 0, 0, 'q' }
/* "program: message" on stderr, then exit(code). */
_Noreturn void cli_die(int code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* "program: rank R: message" (in a world of 1 "program: message") on
 * stderr, then exit(code): a failure of this rank's own, such as a file
 * it could not read. */
_Noreturn void cli_die_rank(int code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Usage error: message plus "Try 'program --help'.", exit 2. Every rank
 * of a launch finds the same one (the command line is theirs alike), so
 * rank 0 alone says it, as does a rank with -v or whose standard error is
 * a terminal (started by hand); the others exit 2 in silence. The rank is
 * cli_rank, or before the group is known the launcher's variable. */
_Noreturn void cli_usage_error(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));
/* A usage error of this rank's own (its group settings, which may differ
 * from rank to rank): said by every rank, exit 2. */
_Noreturn void cli_own_usage_error(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));
/* The usage error for getopt's '?' (cli_init turns getopt's own messages
 * off): an unknown option, or one missing its value, named once. */
_Noreturn void cli_option_error(int argc, char *const argv[],
    const char *shortopts);
void cli_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Shown unless -q. */
void cli_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Shown with -v. */
void cli_debug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* "program (collx) VERSION" on stdout, exit 0. */
_Noreturn void cli_version(void);
/* fclose(stdout) checked: dies (exit 1) on a write error. Call before exit 0. */
void cli_close_stdout(void);

/* Strict number parsing; a bad value is a usage error naming the option.
 * opt is named as given when it starts with '-' or is an environment
 * variable ("COLLX_RANK"); a bare lowercase name gets dashes ("iters" ->
 * "--iters", "n" -> "-n"). */
long cli_parse_long(const char *opt, const char *s, long min, long max);
double cli_parse_double(const char *opt, const char *s, double min, double max);
/* The same for the library: 0, or -1 with the usage error's text in err. */
int cli_long_value(const char *opt, const char *s, long min, long max,
    long *out, char *err, size_t errlen);
int cli_double_value(const char *opt, const char *s, double min, double max,
    double *out, char *err, size_t errlen);
/* cli_long_value into an int (min and max within int's range). */
int cli_int_value(const char *opt, const char *s, long min, long max,
    int *out, char *err, size_t errlen);
/* An option handler's answer from such a call's 0 / -1: 1 (the option
 * was its and is taken) or -1. */
int cli_taken(int rc);
/* Sizes with an optional K/M/G/T suffix (powers of 1024; "64K", "4KiB",
 * "1.5M" when that is a whole number of bytes). */
size_t cli_parse_size(const char *opt, const char *s);
/* The same for the library: 0, or -1 with the usage error's text in err. */
int cli_size_arg(const char *opt, const char *s, size_t *out, char *err,
    size_t errlen);
/* The same without dying: 0, or -1 for a bad size. */
int cli_size_value(const char *s, size_t *out);
/* "host:port" or "[v6addr]:port" (port 1..65535) into host and port; 0 or -1. */
int cli_hostport_parse(const char *s, char *host, size_t hostlen, int *port);
/* Comma-separated integers ("2,3,4"); returns the count, at most max. */
int cli_parse_list(const char *opt, const char *s, long *out, int max);
/* The same for the library: the count, or -1 with the usage error's text. */
int cli_list_value(const char *opt, const char *s, long *out, int max,
    char *err, size_t errlen);

/* Allocation for programs: out of memory is a runtime failure (exit 1).
 * cli_calloc never returns NULL, even for a zero size. */
char *cli_strdup(const char *s);
char *cli_asprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void *cli_calloc(size_t n, size_t size);
/* realloc of n items of size (overflow checked), never NULL. */
void *cli_reallocarray(void *p, size_t n, size_t size);

/* {rank} and {world} replaced; malloc'd, NULL when out of memory. */
char *cli_expand(const char *pattern, int rank, int world);
/* The same for programs: never NULL (dies on ENOMEM). */
char *cli_subst(const char *pattern, int rank, int world);

/*
 * Group membership. Long options shared by all rank programs: add
 * CLI_GROUP_LONGOPTS to the getopt_long table and pass every option value
 * to cli_group_option() before your own switch.
 */
enum {
	CLI_OPT_RANK = 0x1000, CLI_OPT_WORLD, CLI_OPT_MASTER, CLI_OPT_IFACE,
	CLI_OPT_TIMEOUT, CLI_OPT_TOKEN_FILE, CLI_OPT_TIMING, CLI_OPT_NO_SHM,
	CLI_OPT_PROGRAM = 0x1100	/* first value free for a program */
};
#define CLI_GROUP_LONGOPTS \
	{ "rank", 1, 0, CLI_OPT_RANK }, \
	{ "world-size", 1, 0, CLI_OPT_WORLD }, \
	{ "master", 1, 0, CLI_OPT_MASTER }, \
	{ "iface", 1, 0, CLI_OPT_IFACE }, \
	{ "timeout", 1, 0, CLI_OPT_TIMEOUT }, \
	{ "token-file", 1, 0, CLI_OPT_TOKEN_FILE }, \
	{ "no-shm", 0, 0, CLI_OPT_NO_SHM }

struct cli_group {
	int rank;		/* -1 until known */
	int world;		/* -1 until known */
	int local_rank;		/* COLLX_LOCAL_RANK / LOCAL_RANK, else -1 */
	char *master;		/* "host:port", NULL until known */
	char *iface;		/* comma list or NULL */
	double timeout;		/* seconds; < 0 until known */
	char *token;		/* shared secret or NULL */
	char *job_id;		/* COLLX_JOB_ID (collx-run draws one) or NULL */
	int port_lo, port_hi;	/* COLLX_PORT_RANGE, data ports; 0: ephemeral */
	int no_shm;		/* --no-shm or COLLX_SHM=0: every pair over TCP */
	long slurm_job, slurm_step;	/* whose master Slurm's ids gave; -1 */
	int pmix;		/* no master: rank 0's comes through PMIx */
	int grow;		/* --ft: the group lets ranks started again
				 * join (comm_options.grow; rejoin when
				 * COLLX_REJOIN=1) */
};

void cli_group_defaults(struct cli_group *g);
/* The rank the launcher's environment names (collx(7) order) to a program
 * that runs as a rank (it has called cli_group_defaults), else -1. */
int cli_group_env_rank(void);
/* "LO-HI", 1 <= LO <= HI <= 65535 (COLLX_PORT_RANGE); 0 or -1. */
int cli_port_range_parse(const char *s, int *lo, int *hi);
/* Returns 1 when opt was a group option (and records it), 0 otherwise;
 * -1 with the reason in err for a bad value (errno EINVAL: a usage error)
 * or out of memory (errno ENOMEM). */
int cli_group_option(struct cli_group *g, int opt, const char *arg,
    char *err, size_t errlen);
/* Fill what options left unset from the environment (collx(7) order),
 * then defaults: world 1 / rank 0 when nothing says otherwise, timeout 60.
 * 0, or -1 as above: a bad variable or inconsistent values (rank >= world,
 * no master for world > 1) are usage errors. */
int cli_group_resolve(struct cli_group *g, char *err, size_t errlen);
/* The two for program bodies: a usage error exits 2, out of memory 1. */
int cli_group_getopt(struct cli_group *g, int opt, const char *arg);
void cli_group_finish(struct cli_group *g);
void cli_group_free(struct cli_group *g);
/* The group options as "--help" text lines, for usage(). */
extern const char cli_group_help[];

/* A Slurm step, as srun tells its tasks. */
struct cli_slurm {
	long job, step;		/* SLURM_JOB_ID, SLURM_STEP_ID */
	char ident[64];		/* the step as a job identity: "slurm-JOB.STEP" */
	char master[300];	/* "HOST:PORT" when asked for, else "" */
};
/*
 * Under srun (cli_group_resolve asks when the rank came from
 * SLURM_PROCID): 1 with the step in s when SLURM_JOB_ID and SLURM_STEP_ID
 * are set, and with want_master the rendezvous: the first host of
 * SLURM_STEP_NODELIST (else SLURM_JOB_NODELIST) on cli_slurm_port(); 0
 * when they are not set; -1 with the reason in err, a usage error (errno
 * EINVAL): a malformed variable, or rank 0 started on another host than
 * that one (SLURMD_NODENAME).
 */
int cli_slurm_read(struct cli_slurm *s, int rank, int want_master,
    char *err, size_t errlen);
/* The rendezvous port of a Slurm job's step: 10240 + 64 * (job mod 352) +
 * step mod 64, below Linux's ephemeral range; steps whose ids are equal
 * modulo 64 share it, and so do jobs whose ids are equal modulo 352. */
int cli_slurm_port(long job, long step);
/*
 * Slurm's host list expression ("n[01-04,07],login1"; in brackets numbers
 * and ranges, zero padding kept, and several brackets in one host their
 * product, the last varying fastest): the number of hosts, and the n-th
 * (from 0) in host when there is one (else ""); -1 with the reason in err
 * for a malformed list or a host longer than hostlen - 1 bytes.
 */
long cli_hostlist(const char *expr, long n, char *host, size_t hostlen,
    char *err, size_t errlen);
/* The whole file (PATH "-" is standard input), NUL-terminated, for
 * programs (out of memory ends the program); NULL with "PATH: reason" in
 * err. */
char *cli_slurp(const char *path, size_t *len, char *err, size_t errlen);

/* Write all of buf, retrying on EINTR and short writes; 0 or -1. */
int cli_write_all(int fd, const void *buf, size_t len);

/* Timing CSV (collx(7), TIMING CSV). Every writer and reader of the file
 * names its columns through this one constant; programs append their own
 * extra columns after them. */
#define CLI_TIMING_COLUMNS "program,op,algo,rank,world_size,dtype,count," \
	"bytes,iter,seconds,algbw_gbps,busbw_gbps"
struct cli_timing_row {
	const char *program, *op, *algo;
	int rank, world;
	const char *dtype;
	size_t count, bytes;
	int iter;
	double seconds;
	const char *extra;	/* values of the program's extra columns, or NULL */
};
struct cli_timing;
/* path "-" is stdout; NULL means timing is off (*out NULL, and the calls
 * below are no-ops). The header goes into a regular file when it is new or
 * empty (checked under flock, so ranks may share one file); into a pipe or
 * terminal before the first row of rank 0, since a launcher merges all
 * ranks' output. extra_header names program-specific extra columns ("a,b")
 * or NULL. Each returns 0, or -1 with "timing PATH: reason" (or "out of
 * memory") in err: a runtime failure. */
int cli_timing_open(struct cli_timing **out, const char *path,
    const char *extra_header, char *err, size_t errlen);
int cli_timing_write(struct cli_timing *t, const struct cli_timing_row *r,
    char *err, size_t errlen);
/* Closes and frees t, even when closing fails. */
int cli_timing_close(struct cli_timing *t, char *err, size_t errlen);
/* nccl-tests bus-bandwidth factor for op ("allreduce", "allgather", ...). */
double cli_busbw_factor(const char *op, int world);

#endif
