/* join: how every rank program enters its group, so all of them treat a
 * refused rank (another job, other options, a wrong world size or a
 * duplicate rank) as bad input, exit 3, and anything else (timeout,
 * connection refused) as a runtime failure, exit 1. */
#ifndef COLLX_JOIN_H
#define COLLX_JOIN_H

#include <stddef.h>

#include "cli/cli.h"
#include "comm/comm.h"

/*
 * The job's identity: what runs and every option whose value ranks must
 * share, declared one by one, so that rank 0 refuses a rank started
 * differently and names the first option that differs with both values
 * ("rank 1 was started with --mode ulysses, rank 0 with --mode tp").
 * Written as "PROGRAM [SUBCOMMAND] OPT=VALUE ..." (comm_options.job).
 */
struct prog_job {
	char text[1024];
	size_t len;
	char overflow[64];	/* the first option that did not fit, or "" */
};

/* Starts the declaration with what runs: "collx-tp", "collx-bench coll". */
void prog_job_init(struct prog_job *j, const char *what);
/* Option opt as the user writes it ("--mode", "-b") and its value, a
 * word without spaces (a number, a name, a list). One past the buffer's
 * end is recorded, and prog_join refuses to open the group (exit 1): the
 * declarations are the program's own. */
void prog_job_add(struct prog_job *j, const char *opt, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* An option without a value: "--causal on" or "--causal off". */
void prog_job_flag(struct prog_job *j, const char *opt, int on);

/* A long wait's note (comm_note_fn) on standard error, unless -q:
 * "program: rank 0: waiting for rank 2 (2 of 3 joined) at HOST:PORT". */
void prog_note(void *ctx, const char *text);

/*
 * Opens the group g describes, saying who it waits for (prog_note) when
 * joining takes long. Ranks whose jobs differ refuse each other at once.
 * 0, or the exit code (CLI_EXIT_DATA or CLI_EXIT_RUNTIME, also for a job
 * identity that did not fit) with "rank R: reason" in err.
 */
int prog_join(struct comm **out, const struct cli_group *g,
    const struct prog_job *job, char *err, size_t errlen);

#endif
