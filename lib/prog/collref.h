/* collref: the --check of the collective programs. Every rank's input is
 * gathered with plain point-to-point messages (not the collective under
 * test) and this rank's expected result is computed by one process, by a
 * separately written element-by-element reference: doubles for floats
 * (tolerance scaled to the dtype and world size), exact wrapping integer
 * arithmetic for integers. */
#ifndef COLLX_COLLREF_H
#define COLLX_COLLREF_H

#include <stddef.h>
#include <stdint.h>

#include "comm/coll.h"
#include "tensor/tensor.h"

struct collref_spec {
	enum coll_kind kind;	/* allreduce, broadcast, allgather,
				 * reduce-scatter or alltoall */
	enum coll_op op;
	int root;
	int sdim, gdim;		/* alltoall; negative counts from the end */
	/* alltoall along dimension 0 by counts (alltoallv): [world][world],
	 * row q the rows rank q sends each rank; NULL: equal chunks */
	const int64_t *counts;
};

/*
 * Check this rank's result out of one collective whose input here was in
 * (NULL where a rank has none: broadcast non-roots). Collective over the
 * group: every rank calls it for the same tensors in the same order.
 * Returns 0 when out matches (largest error in *maxerr), 1 when it does
 * not (what and where in err), -1 on a comm failure (see comm_error).
 */
int collref_check(struct comm *c, const struct collref_spec *s,
    const struct tensor *in, const struct tensor *out, double *maxerr,
    char *err, size_t errlen);

/* Tell every rank whether this one failed; returns the lowest failed
 * rank, -1 when none did, -2 on a comm failure. */
int collref_verdict(struct comm *c, int failed);

#endif
