/* pmix: the rendezvous under a PMIx launcher (Open MPI's mpirun, srun
 * --mpi=pmix), for a group whose cli_group_resolve set pmix. Built when
 * pkg-config finds pmix (COLLX_PMIX). */
#ifndef COLLX_PMIX_H
#define COLLX_PMIX_H

#include <stddef.h>

/*
 * Rank 0 (as PMIx numbers the ranks) puts "HOST:PORT", its host name and a
 * free port outside the ephemeral range, and every rank, after a fence of
 * them all (timeout seconds at most), gets it: 0 with *master malloc'd,
 * or -1 with the reason in err.
 */
int prog_pmix_master(double timeout, char **master, char *err,
    size_t errlen);

#endif
