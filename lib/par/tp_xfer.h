/* tp_xfer: point-to-point transfers posted before a piece of compute and
 * moved along between its blocks, with the time they ran while it
 * computed (hidden): the overlap of ring attention (par/cp_ring.c). The
 * overlap's accounting (struct tp_overlap) is also the collective
 * matmuls' (par/tp_sp.c), whose transfers run on a thread. */
#ifndef COLLX_TP_XFER_H
#define COLLX_TP_XFER_H

#include <stddef.h>

#include "comm/comm.h"
#include "par/tp.h"

#define TP_XFER_MAX 4
struct tp_xfer {
	struct comm *c;
	struct tp_log *log;	/* traced: the compute and transfer spans */
	const char *name;
	struct comm_req req[TP_XFER_MAX];
	int n;
	double t0, done;	/* posted; seen complete (0: not yet) */
};

/* Starts an empty set of transfers on c (the clock too), for the step of
 * phase name (its spans in log's trace; log may be NULL). */
void tp_xfer_begin(struct tp_xfer *x, struct comm *c, struct tp_log *log,
    const char *name);
/* Posts a send to (or, send 0, a receive from) peer. 0, or -1 when c
 * failed (comm_error says why). */
int tp_xfer_post(struct tp_xfer *x, int send, int peer, int tag, void *buf,
    size_t bytes);
/* Between blocks of compute: moves the transfers on, noting when they are
 * all done. 0 or -1. */
int tp_xfer_progress(struct tp_xfer *x);
/* Seconds transfers ran while compute ran (hidden) and then alone, the
 * compute done (exposed). */
struct tp_overlap {
	double hidden, exposed;
};
/* After the compute: waits for the transfers, adding to o the time they
 * ran while it computed (until seen done, or until now) and the wait
 * after it. 0 or -1. */
int tp_xfer_end(struct tp_xfer *x, struct tp_overlap *o);
/* The same for transfers that ran beside others tp_xfer_end counts (a
 * previous step's send): only the wait for them adds (to exposed), so
 * that time is not counted twice. */
int tp_xfer_end_beside(struct tp_xfer *x, struct tp_overlap *o);

#endif
