/* join: how every rank program enters its group, so all of them treat a
 * refused rank (another job, other options, a wrong world size or a
 * duplicate rank) as bad input, exit 3, and anything else (timeout,
 * connection refused) as a runtime failure, exit 1. */
#ifndef COLLX_JOIN_H
#define COLLX_JOIN_H

#include <stddef.h>

#include "cli/cli.h"
#include "comm/comm.h"

/* A long wait's note (comm_note_fn) on standard error, unless -q:
 * "program: rank 0: waiting for rank 2 (2 of 3 joined) at HOST:PORT". */
void prog_note(void *ctx, const char *text);

/*
 * Opens the group g describes, saying who it waits for (prog_note) when
 * joining takes long. job is the identity ranks must share: the
 * program and every option whose value must agree, so ranks started
 * differently refuse each other at once. 0, or the exit code
 * (CLI_EXIT_DATA or CLI_EXIT_RUNTIME) with "rank R: reason" in err.
 */
int prog_join(struct comm **out, const struct cli_group *g, const char *job,
    char *err, size_t errlen);

#endif
