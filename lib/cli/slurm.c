/* cli slurm: a group under Slurm's srun with no setup of collx's own: the
 * rendezvous on the step's first host, at a port both derived from the
 * job and step ids, and the step's identity, which keeps steps apart. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

/*
 * Ports 10240 to 32767: below Linux's ephemeral range (32768-60999), where
 * no outgoing connection takes one first, and above the well-known
 * services. A block of 64 for each job, one for each step: steps of one
 * job whose ids differ by less than 64 never share a port, nor do jobs
 * whose ids differ by less than 352.
 */
#define SLURM_PORT_BASE 10240
#define SLURM_PORT_STEPS 64
#define SLURM_PORT_JOBS 352	/* (32768 - 10240) / 64 */

int
cli_slurm_port(long job, long step)
{
	return SLURM_PORT_BASE + (int)(job % SLURM_PORT_JOBS) *
	    SLURM_PORT_STEPS + (int)(step % SLURM_PORT_STEPS);
}

/* A usage error: the reason in err, errno EINVAL; -1. */
#define bad(err, errlen, ...) \
	(cli_fail(err, errlen, __VA_ARGS__), errno = EINVAL, -1)

/* Variable name's id into *id: 1, 0 when unset, or -1 (a usage error). */
static int
slurm_id(const char *name, long *id, char *err, size_t errlen)
{
	const char *v = getenv(name);

	if (v == NULL || *v == '\0')
		return 0;
	if (cli_long_value(name, v, 0, LONG_MAX, id, err, errlen) < 0) {
		errno = EINVAL;
		return -1;
	}
	return 1;
}

/* The rendezvous: the first host of the step's node list, which Slurm's
 * distributions give task 0; rank 0 started anywhere else would listen
 * where nobody looks. */
static int
slurm_master(struct cli_slurm *s, int rank, char *err, size_t errlen)
{
	const char *var = "SLURM_STEP_NODELIST", *list, *node;
	char host[256], why[COLLX_ERRLEN];
	int port, lo, hi;

	if ((list = getenv(var)) == NULL || *list == '\0')
		list = getenv(var = "SLURM_JOB_NODELIST");
	if (list == NULL || *list == '\0')
		return bad(err, errlen, "under srun a world above 1 needs a "
		    "rendezvous address: neither SLURM_STEP_NODELIST nor "
		    "SLURM_JOB_NODELIST is set (use --master HOST:PORT or set "
		    "COLLX_MASTER)");
	if (cli_hostlist(list, 0, host, sizeof host, why, sizeof why) < 0)
		return bad(err, errlen, "%s: %s", var, why);
	node = getenv("SLURMD_NODENAME");
	if (rank == 0 && node != NULL && *node != '\0' &&
	    strcmp(node, host) != 0)
		return bad(err, errlen, "rank 0 runs on %s, not on %s, the first"
		    " host of %s, where the others look for it (use --master "
		    "HOST:PORT or set COLLX_MASTER)", node, host, var);
	port = cli_slurm_port(s->job, s->step);
	cli_ephemeral_range(&lo, &hi);
	if (rank == 0 && port >= lo && port <= hi)
		cli_warn("rendezvous port %d (Slurm job %ld step %ld) lies in "
		    "this host's ephemeral range %d-%d, where another "
		    "connection may take it first", port, s->job, s->step, lo,
		    hi);
	snprintf(s->master, sizeof s->master, "%s:%d", host, port);
	return 0;
}

int
cli_slurm_read(struct cli_slurm *s, int rank, int want_master, char *err,
    size_t errlen)
{
	int rc;

	memset(s, 0, sizeof *s);
	if ((rc = slurm_id("SLURM_JOB_ID", &s->job, err, errlen)) <= 0 ||
	    (rc = slurm_id("SLURM_STEP_ID", &s->step, err, errlen)) <= 0)
		return rc;
	snprintf(s->ident, sizeof s->ident, "slurm-%ld.%ld", s->job, s->step);
	if (want_master && slurm_master(s, rank, err, errlen) < 0)
		return -1;
	return 1;
}
