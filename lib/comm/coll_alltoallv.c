/*
 * coll_alltoallv: all-to-all with per-peer counts, any of them zero.
 * Pairwise: in step s (1 .. w-1) a rank sends its block for rank+s and
 * receives the block of rank-s, one exchange at a time, so each link
 * carries one message per step and a zero count costs nothing. Linear:
 * every block posted at once, so no step waits for a skewed step's
 * largest block. The hierarchical form is coll_alltoallv_hier.c's.
 */
#include <stdlib.h>
#include <string.h>

#include "comm/coll_int.h"

int
coll_alltoallv_pairwise(struct coll_call *x, const char *send,
    const size_t *soff, char *recv, const size_t *roff)
{
	int w = x->world, r = x->rank;
	size_t e = x->esz;

	coll_copy(recv + roff[r] * e, send + soff[r] * e,
	    (soff[r + 1] - soff[r]) * e);
	for (int s = 1; s < w; s++) {
		int to = (r + s) % w, from = (r - s + w) % w;
		size_t out = (soff[to + 1] - soff[to]) * e;
		size_t in = (roff[from + 1] - roff[from]) * e;
		comm_set_step(x->c, "%s alltoallv step %d", x->algo, s);
		if (coll_xchg(x, to, send + soff[to] * e, out, from,
		    recv + roff[from] * e, in, 0) < 0)
			return -1;
	}
	return 0;
}

/* Every receive, then every send, posted at once (rank+s order, so the
 * ranks do not all start on one peer); zero-length blocks not at all. */
static int
alltoallv_linear(struct coll_call *x, const char *send, const size_t *soff,
    char *recv, const size_t *roff)
{
	int w = x->world, r = x->rank, n = 0, rc = 0;
	struct comm_req *rq = coll_alloc(x, 2 * (size_t)w * sizeof *rq);
	size_t e = x->esz;

	if (rq == NULL)
		return -1;
	coll_copy(recv + roff[r] * e, send + soff[r] * e,
	    (soff[r + 1] - soff[r]) * e);
	comm_set_step(x->c, "linear alltoallv");
	for (int s = 1; rc == 0 && s < w; s++) {
		int from = (r - s + w) % w;
		if (roff[from + 1] > roff[from])
			rc = comm_irecv(x->c, from, 0, recv + roff[from] * e,
			    (roff[from + 1] - roff[from]) * e, &rq[n++]);
	}
	for (int s = 1; rc == 0 && s < w; s++) {
		int to = (r + s) % w;
		if (soff[to + 1] > soff[to])
			rc = comm_isend(x->c, to, 0, send + soff[to] * e,
			    (soff[to + 1] - soff[to]) * e, &rq[n++]);
	}
	if (rc == 0)
		rc = comm_waitall(x->c, rq, n);
	free(rq);
	return rc;
}

int
coll_alltoallv(struct comm *c, const void *send, const size_t *scounts,
    void *recv, const size_t *rcounts, enum dtype dt, enum coll_algo algo)
{
	struct coll_call x;
	enum coll_algo a = algo;
	size_t *soff = NULL, *roff = NULL;
	int rc = -1, me = comm_rank(c);

	/* the counts differ between ranks: they cannot choose */
	if (a == COLL_AUTO)
		a = coll_auto_group(c, COLL_KIND_ALLTOALLV, 0);
	if (coll_begin(&x, c, COLL_KIND_ALLTOALLV, dt, COLL_SUM, a,
	    coll_sig(COLL_KIND_ALLTOALLV, 0, 0, -1, algo, NULL, 0), 0, 0) < 0)
		return -1;
	if ((soff = coll_prefix(&x, scounts)) == NULL ||
	    (roff = coll_prefix(&x, rcounts)) == NULL)
		goto out;
	if (scounts[me] != rcounts[me]) {
		comm_fail(c, COMM_ERR_MISMATCH, "alltoallv: rank %d sends itself "
		    "%zu elements but receives %zu", me, scounts[me], rcounts[me]);
		goto out;
	}
	if (soff[x.world] > SIZE_MAX / x.esz ||
	    roff[x.world] > SIZE_MAX / x.esz || coll_overlap(send,
	    soff[x.world] * x.esz, recv, roff[x.world] * x.esz)) {
		comm_fail(c, COMM_ERR_MISMATCH, "alltoallv: the send and receive "
		    "buffers overlap or do not fit in memory");
		goto out;
	}
	if (a == COLL_HIER)
		rc = coll_hier_alltoallv(&x, send, scounts, recv, rcounts);
	else if (a == COLL_LINEAR)
		rc = alltoallv_linear(&x, send, soff, recv, roff);
	else
		rc = coll_alltoallv_pairwise(&x, send, soff, recv, roff);
out:
	free(soff);
	free(roff);
	return coll_end(&x, rc);
}
