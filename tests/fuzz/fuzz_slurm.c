/* fuzz_slurm: the rendezvous read from Slurm's variables under srun
 * (lib/cli/slurm.c). The input is up to five lines, the values of
 * SLURM_JOB_ID, SLURM_STEP_ID, SLURM_STEP_NODELIST, SLURM_JOB_NODELIST
 * and SLURMD_NODENAME in that order (a missing line leaves its variable
 * unset); the first byte's low bit picks rank 0 or 1. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const vars[] = { "SLURM_JOB_ID", "SLURM_STEP_ID",
    "SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURMD_NODENAME" };
#define NVARS (sizeof vars / sizeof vars[0])

/* The variables' "NAME=VALUE" strings, put in the environment as they are:
 * setenv would keep every value ever set (glibc never frees them), and a
 * long run would end on the fuzzer's memory limit. */
static char envs[NVARS][4200];

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct cli_slurm s;
	char err[256] = "", *buf, *line, *next;
	size_t i;
	int rank, rc;

	if (size == 0 || size > 4096 || (buf = malloc(size)) == NULL)
		return 0;
	rank = data[0] & 1;
	memcpy(buf, data + 1, size - 1);
	buf[size - 1] = '\0';
	line = buf;
	for (i = 0; i < NVARS; i++) {
		if (line == NULL) {
			unsetenv(vars[i]);
			continue;
		}
		if ((next = strchr(line, '\n')) != NULL)
			*next++ = '\0';
		snprintf(envs[i], sizeof envs[i], "%s=%s", vars[i], line);
		putenv(envs[i]);
		line = next;
	}
	rc = cli_slurm_read(&s, rank, 1, err, sizeof err);
	if (rc < 0 && err[0] == '\0')
		abort();	/* a failure says why */
	if (rc == 1) {
		/* the master is the first host on the step's port */
		const char *colon = strrchr(s.master, ':');
		char port[16];

		snprintf(port, sizeof port, ":%d",
		    cli_slurm_port(s.job, s.step));
		if (s.job < 0 || s.step < 0 || colon == NULL ||
		    colon == s.master || strcmp(colon, port) != 0)
			abort();
	}
	free(buf);
	return 0;
}
