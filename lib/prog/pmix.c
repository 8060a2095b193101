/* pmix: under a PMIx launcher (Open MPI's mpirun, srun --mpi=pmix) rank 0
 * publishes its rendezvous address through PMIx and every rank reads it,
 * so that no --master is needed. Built when pkg-config finds pmix. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <pmix.h>

#include "cli/cli.h"
#include "comm/sock.h"
#include "prog/pmix.h"

#define PMIX_MASTER_KEY "collx.master"

static int
pmix_failed(char *err, size_t errlen, const char *call, pmix_status_t rc)
{
	return cli_fail(err, errlen, "PMIx: %s: %s", call,
	    PMIx_Error_string(rc));
}

/* Rank 0: a free port of this host, outside the ephemeral range, under
 * its name: "HOST:PORT" into addr, put and committed. */
static int
pmix_publish(char *err, size_t errlen)
{
	char host[256], addr[300];
	pmix_value_t v;
	pmix_status_t rc;
	int port;

	if (gethostname(host, sizeof host) < 0 || host[0] == '\0')
		return cli_fail(err, errlen, "PMIx: this host has no name");
	host[sizeof host - 1] = '\0';
	if (comm_sock_free_port("0.0.0.0", &port, err, errlen) < 0)
		return -1;
	snprintf(addr, sizeof addr, "%s:%d", host, port);
	PMIX_VALUE_CONSTRUCT(&v);
	v.type = PMIX_STRING;
	v.data.string = addr;
	if ((rc = PMIx_Put(PMIX_GLOBAL, PMIX_MASTER_KEY, &v)) != PMIX_SUCCESS)
		return pmix_failed(err, errlen, "PMIx_Put", rc);
	if ((rc = PMIx_Commit()) != PMIX_SUCCESS)
		return pmix_failed(err, errlen, "PMIx_Commit", rc);
	return 0;
}

/* Every rank: wait for all (timeout seconds at most), then read rank 0's
 * address. */
static int
pmix_fetch(const pmix_proc_t *me, double timeout, char **master, char *err,
    size_t errlen)
{
	pmix_info_t info[2];
	pmix_value_t *got = NULL;
	pmix_proc_t root;
	pmix_status_t rc;
	bool collect = true;
	int secs = timeout < 1 ? 1 : (int)timeout;

	PMIX_INFO_LOAD(&info[0], PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
	PMIX_INFO_LOAD(&info[1], PMIX_TIMEOUT, &secs, PMIX_INT);
	rc = PMIx_Fence(NULL, 0, info, 2);
	PMIX_INFO_DESTRUCT(&info[0]);
	PMIX_INFO_DESTRUCT(&info[1]);
	if (rc != PMIX_SUCCESS)
		return pmix_failed(err, errlen, "PMIx_Fence", rc);
	PMIX_PROC_LOAD(&root, me->nspace, 0);
	if ((rc = PMIx_Get(&root, PMIX_MASTER_KEY, NULL, 0, &got)) !=
	    PMIX_SUCCESS)
		return pmix_failed(err, errlen, "PMIx_Get of rank 0's address", rc);
	if (got->type != PMIX_STRING || got->data.string == NULL)
		rc = PMIX_ERR_TYPE_MISMATCH;
	else if ((*master = strdup(got->data.string)) == NULL)
		rc = PMIX_ERR_NOMEM;
	PMIX_VALUE_RELEASE(got);
	return rc == PMIX_SUCCESS ? 0 :
	    pmix_failed(err, errlen, "rank 0's address", rc);
}

int
prog_pmix_master(double timeout, char **master, char *err, size_t errlen)
{
	pmix_proc_t me;
	pmix_status_t rc;
	int ret;

	if ((rc = PMIx_Init(&me, NULL, 0)) != PMIX_SUCCESS)
		return pmix_failed(err, errlen, "PMIx_Init", rc);
	/* Rank 0 fences even when it could not publish, so that the others
	 * fail at once (no address) instead of waiting. */
	ret = me.rank == 0 ? pmix_publish(err, errlen) : 0;
	if (pmix_fetch(&me, timeout, master, ret < 0 ? NULL : err,
	    ret < 0 ? 0 : errlen) < 0)
		ret = -1;
	PMIx_Finalize(NULL, 0);
	return ret;
}
