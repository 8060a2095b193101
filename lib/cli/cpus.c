/* cpus: where the ranks of one machine run: the CPUs this process may run
 * on, grouped by the core they belong to, fitted to a number of local
 * ranks; and a rank that another launcher started (srun, mpirun) placing
 * itself as collx-run places its ranks. Below both the launcher and the
 * joining code, which share it. */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/cpus.h"

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
cli_cores_group(struct cli_cores *c, const cpu_set_t *cpus,
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
cli_cores_read(struct cli_cores *c, const char *sysfs, char *err,
    size_t errlen)
{
	cpu_set_t mine;

	memset(c, 0, sizeof *c);
	if (sched_getaffinity(0, sizeof mine, &mine) < 0)
		return cli_fail(err, errlen, "sched_getaffinity: %s",
		    strerror(errno));
	cli_cores_group(c, &mine, sysfs);
	return 0;
}

void
cli_cores_free(struct cli_cores *c)
{
	free(c->core);
	memset(c, 0, sizeof *c);
}

/* The CPUs of c, one a "core", thread t of every core before thread t + 1
 * of any: consecutive ranks share a core's threads only when they must. */
static void
spread(struct cli_cores *c)
{
	cpu_set_t *one = cli_calloc(CPU_SETSIZE, sizeof *one);
	int k, t, cpu, n = 0, seen, more = 1;

	for (t = 0; more; t++) {
		more = 0;
		for (k = 0; k < c->n; k++) {
			seen = 0;
			for (cpu = 0; cpu < CPU_SETSIZE; cpu++) {
				if (!CPU_ISSET(cpu, &c->core[k]) || seen++ != t)
					continue;
				CPU_ZERO(&one[n]);
				CPU_SET(cpu, &one[n++]);
				more = 1;
				break;
			}
		}
	}
	free(c->core);
	c->core = one;
	c->n = n;
}

int
cli_cores_place(struct cli_cores *c, int here, int mode, char *why,
    size_t len)
{
	int cpus = 0, k;

	/* auto leaves a rank alone on its machine free: there is no peer
	 * to spin beside, and two such jobs would share core 0 */
	if (mode == CLI_BIND_NONE || (mode == CLI_BIND_AUTO &&
	    here < 2)) {
		cli_cores_free(c);
		return 0;
	}
	if (here <= c->n)
		return 0;
	for (k = 0; k < c->n; k++)
		cpus += CPU_COUNT(&c->core[k]);
	if (mode == CLI_BIND_AUTO && here <= cpus) {
		spread(c);
		return 0;
	}
	if (mode == CLI_BIND_AUTO)
		snprintf(why, len, "%d ranks on this machine, %d CPUs", here,
		    cpus);
	else
		snprintf(why, len, "%d ranks on this machine need %d cores, it "
		    "has %d", here, here, c->n);
	cli_cores_free(c);
	return -1;
}

/* A CPU list ("0-3,6") as a set: 0, or -1 where it is not one. */
static int
cpu_list(const char *s, cpu_set_t *set)
{
	char *end;
	long lo, hi;

	CPU_ZERO(set);
	while (*s != '\0' && *s != '\n') {
		lo = hi = strtol(s, &end, 10);
		if (end == s || lo < 0)
			return -1;
		if (*end == '-')
			hi = strtol(end + 1, &end, 10);
		if (hi < lo || hi >= CPU_SETSIZE)
			return -1;
		for (; lo <= hi; lo++)
			CPU_SET(lo, set);
		s = end + (*end == ',');
	}
	return CPU_COUNT(set) > 0 ? 0 : -1;
}

/* The first line of a file as a CPU list: 0, or -1. */
static int
cpu_file(const char *path, cpu_set_t *set)
{
	char line[4096];
	FILE *f;
	int rc = -1;

	if ((f = fopen(path, "re")) == NULL)
		return -1;
	if (fgets(line, sizeof line, f) != NULL)
		rc = cpu_list(line, set);
	fclose(f);
	return rc;
}

/* The CPUs this process's cgroup lets it use (cgroup v2's
 * cpuset.cpus.effective, v1's cpuset.effective_cpus), else the machine's
 * online CPUs: what an unbound process's affinity is. 0, or -1 when
 * none can be read. */
static int
cpus_allowed(cpu_set_t *set)
{
	char line[4096], path[4200], *p;
	FILE *f;
	int rc = -1;

	if ((f = fopen("/proc/self/cgroup", "re")) != NULL) {
		while (rc < 0 && fgets(line, sizeof line, f) != NULL) {
			line[strcspn(line, "\n")] = '\0';
			if (strncmp(line, "0::", 3) == 0)
				snprintf(path, sizeof path, "/sys/fs/cgroup%s/"
				    "cpuset.cpus.effective", line + 3);
			else if ((p = strstr(line, ":cpuset:")) != NULL)
				snprintf(path, sizeof path, "/sys/fs/cgroup/"
				    "cpuset%s/cpuset.effective_cpus", p + 8);
			else
				continue;
			rc = cpu_file(path, set);
		}
		fclose(f);
	}
	if (rc < 0)
		rc = cpu_file("/sys/devices/system/cpu/online", set);
	return rc;
}

int
cli_place_self(int local, int nlocal, char *what, size_t len)
{
	struct cli_cores c;
	cpu_set_t mine, all;
	char why[256];

	if (local < 0 || nlocal < 1 || local >= nlocal) {
		snprintf(what, len, "not bound: local rank or size unknown");
		return 0;
	}
	if (sched_getaffinity(0, sizeof mine, &mine) < 0)
		return cli_fail(what, len, "sched_getaffinity: %s",
		    strerror(errno));
	if (cpus_allowed(&all) < 0) {
		snprintf(what, len, "not bound: the CPUs allowed are unknown");
		return 0;
	}
	if (!CPU_EQUAL(&all, &mine)) {
		snprintf(what, len, "not bound: the launcher bound it");
		return 0;
	}
	cli_cores_group(&c, &mine, "/sys/devices/system/cpu");
	if (cli_cores_place(&c, nlocal, CLI_BIND_AUTO, why,
	    sizeof why) < 0) {
		snprintf(what, len, "not bound: %s", why);
		return 0;
	}
	if (c.core == NULL) {	/* auto binds no rank alone on a machine */
		snprintf(what, len, "not bound: alone on this machine");
		return 0;
	}
	if (sched_setaffinity(0, sizeof c.core[local], &c.core[local]) < 0) {
		cli_cores_free(&c);
		return cli_fail(what, len, "sched_setaffinity: %s",
		    strerror(errno));
	}
	snprintf(what, len, "bound as local rank %d of %d", local, nlocal);
	cli_cores_free(&c);
	return 0;
}
