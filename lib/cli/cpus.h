/* cpus: where the ranks of one machine run (cpus.c). */
#ifndef COLLX_CLI_CPUS_H
#define COLLX_CLI_CPUS_H

#include <sched.h>
#include <stddef.h>

/*
 * The cores a launcher binds ranks to: the CPUs this process may run on,
 * grouped by core (hardware threads of one core together, as
 * /sys/devices/system/cpu/cpuN/topology tells: package and core id; each
 * CPU a core of its own where it does not), cores in the order of their
 * first CPU.
 */
struct cli_cores {
	int n;
	cpu_set_t *core;	/* core k's CPUs */
};

/* The CPUs this process may run on, grouped: 0, or -1 with the reason
 * in err. sysfs: the topology's directory ("/sys/devices/system/cpu").
 * cli_cores_group: the CPUs of cpus grouped. */
void cli_cores_group(struct cli_cores *c, const cpu_set_t *cpus,
    const char *sysfs);
int cli_cores_read(struct cli_cores *c, const char *sysfs, char *err,
    size_t errlen);
void cli_cores_free(struct cli_cores *c);
/* --bind: never; core: local rank i on core i when each has a core of its
 * own; auto: so, else on a CPU of its own (thread t of every core before
 * thread t + 1 of any) when each has one, when there are two or more. */
enum { CLI_BIND_NONE, CLI_BIND_CORE, CLI_BIND_AUTO };
/* c fitted to here ranks on this machine by mode: 0; else -1 with why, c
 * emptied (none bound). none: c emptied, 0. */
int cli_cores_place(struct cli_cores *c, int here, int mode,
    char *why, size_t len);
/*
 * A rank that another launcher (srun, mpirun) started, local rank local
 * of nlocal on this machine, placed as collx-run's --bind auto places
 * it, within its affinity; kept as it is when that launcher bound it
 * already (its affinity is less than its cgroup's cpuset, or than the
 * machine's online CPUs), or when local or nlocal is unknown (< 0). 0
 * with what was done in what, or -1 with why.
 */
int cli_place_self(int local, int nlocal, char *what, size_t len);

#endif
