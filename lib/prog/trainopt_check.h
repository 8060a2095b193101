/* trainopt_check: the refusals the training programs share, each
 * returning 0, or -1 with the usage error (exit 2) in err: the batch and
 * the length of a run, and --ft's replicas and link. */
#ifndef COLLX_TRAINOPT_CHECK_H
#define COLLX_TRAINOPT_CHECK_H

#include <stddef.h>

#include "cli/cli.h"
#include "par/dp.h"
#include "prog/trainopt.h"

/* --batch given, and one of --steps and --epochs: neither, the reason
 * when none of them is. */
int trainopt_steps_check(const struct trainopt_common *c,
    const char *neither, char *err, size_t errlen);
/* --ft over replicas (axis: the option that counts them, "--dp"): two or
 * more, and one interface, its links read to a frame (TCP, in order, one
 * stream a pair); then g and d set for it: no shared memory, no overlap
 * (a sum runs on the step's thread, which the recovery reads), and ranks
 * started again join the group. */
int trainopt_ft_check(int replicas, const char *axis, struct cli_group *g,
    struct dp_opts *d, char *err, size_t errlen);

#endif
