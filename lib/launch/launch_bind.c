/* launch_bind: the cores ranks are bound to: the CPUs this process may run
 * on, grouped by the core they belong to. */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "launch/launch.h"

/* A number from sysfs, or -1 where it cannot be read. */
static long
topology(const char *sysfs, int cpu, const char *what)
{
	char path[512];
	FILE *f;
	long v;

	snprintf(path, sizeof path, "%s/cpu%d/topology/%s", sysfs, cpu, what);
	if ((f = fopen(path, "re")) == NULL)
		return -1;
	if (fscanf(f, "%ld", &v) != 1)
		v = -1;
	fclose(f);
	return v;
}

void
launch_cores_group(struct launch_cores *c, const cpu_set_t *cpus,
    const char *sysfs)
{
	long *pkg, *id;
	int cpu, k, n = 0;

	memset(c, 0, sizeof *c);
	c->core = cli_calloc(CPU_SETSIZE, sizeof *c->core);
	pkg = cli_calloc(CPU_SETSIZE, sizeof *pkg);
	id = cli_calloc(CPU_SETSIZE, sizeof *id);
	for (cpu = 0; cpu < CPU_SETSIZE; cpu++) {
		if (!CPU_ISSET(cpu, cpus))
			continue;
		pkg[n] = topology(sysfs, cpu, "physical_package_id");
		id[n] = topology(sysfs, cpu, "core_id");
		/* a thread of a core seen before joins it */
		for (k = 0; k < n && (id[n] < 0 || pkg[k] != pkg[n] ||
		    id[k] != id[n]); k++)
			;
		if (k == n)
			CPU_ZERO(&c->core[n++]);
		CPU_SET(cpu, &c->core[k]);
	}
	c->n = n;
	free(pkg);
	free(id);
}

int
launch_cores_read(struct launch_cores *c, const char *sysfs, char *err,
    size_t errlen)
{
	cpu_set_t mine;

	memset(c, 0, sizeof *c);
	if (sched_getaffinity(0, sizeof mine, &mine) < 0)
		return cli_fail(err, errlen, "sched_getaffinity: %s",
		    strerror(errno));
	launch_cores_group(c, &mine, sysfs);
	return 0;
}

void
launch_cores_free(struct launch_cores *c)
{
	free(c->core);
	memset(c, 0, sizeof *c);
}

int
launch_cores_fit(struct launch_cores *c, const struct launch_rank *r, int n,
    char *why, size_t len)
{
	int i, here = 0;

	for (i = 0; i < n; i++)
		here += r[i].host < 0;
	if (here <= c->n)
		return 0;
	snprintf(why, len, "%d ranks on this machine need %d cores, it has %d",
	    here, here, c->n);
	launch_cores_free(c);
	return -1;
}
