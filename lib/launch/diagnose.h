/* diagnose: collx-run --diagnose, the reading of the flight recorder's
 * dumps (collx(7), FLIGHT RECORDER). */
#ifndef COLLX_DIAGNOSE_H
#define COLLX_DIAGNOSE_H

#include <stddef.h>
#include <stdio.h>

/*
 * Reads every collx-fr.JOB.RANK.json in dir and writes to out, for each
 * job, the first operation (lowest sequence number of its group, the
 * job's whole group first) that some ranks never entered or never
 * finished, which ranks did what, and the ranks to blame: those that
 * called another operation there, else those that never entered it,
 * else those that left no dump, else the rank the failure names. A job
 * whose dumps show every operation finished gets a line saying so.
 * 0; or CLI_EXIT_RUNTIME (dir unreadable, no dump in it) or
 * CLI_EXIT_DATA (a dump that is not a flight recorder's), with the reason
 * in err.
 */
int launch_diagnose(const char *dir, FILE *out, char *err, size_t errlen);

#endif
