/* tp_xfer: nonblocking transfers overlapping compute, with the comm
 * layer's requests; their completion is seen at the progress calls the
 * compute makes between its blocks. */
#include "cli/util.h"
#include "par/tp_xfer.h"

void
tp_xfer_begin(struct tp_xfer *x, struct comm *c, struct tp_log *log,
    const char *name)
{
	x->c = c;
	x->log = log, x->name = name;
	x->n = 0;
	x->done = 0;
	x->t0 = cli_now();
}

int
tp_xfer_post(struct tp_xfer *x, int send, int peer, int tag, void *buf,
    size_t bytes)
{
	int rc = send ? comm_isend(x->c, peer, tag, buf, bytes, &x->req[x->n]) :
	    comm_irecv(x->c, peer, tag, buf, bytes, &x->req[x->n]);

	if (rc < 0)
		return -1;
	x->n++;
	return 0;
}

int
tp_xfer_progress(struct tp_xfer *x)
{
	if (x->done > 0 || x->n == 0)
		return 0;
	if (comm_progress(x->c) < 0)
		return -1;
	for (int i = 0; i < x->n; i++)
		if (x->req[i].state != COMM_REQ_DONE)
			return 0;
	x->done = cli_now();
	return 0;
}

/* Waits for x's transfers; with compute, the compute since x began is
 * its own (its span, and the transfers' time during it, hidden). */
static int
finish(struct tp_xfer *x, struct tp_overlap *o, int compute)
{
	double t1 = cli_now(), t2;

	if (compute)
		tp_log_span(x->log, 0, 0, x->name, x->t0, t1);
	if (x->n == 0)
		return 0;
	if (comm_waitall(x->c, x->req, x->n) < 0)
		return -1;
	t2 = cli_now();
	if (compute)
		o->hidden += (x->done > 0 ? x->done : t1) - x->t0;
	o->exposed += t2 - t1;
	tp_log_span(x->log, 1, 'S', x->name, x->t0, x->done > 0 ? x->done : t2);
	x->n = 0;
	return 0;
}

int
tp_xfer_end(struct tp_xfer *x, struct tp_overlap *o)
{
	return finish(x, o, 1);
}

int
tp_xfer_end_beside(struct tp_xfer *x, struct tp_overlap *o)
{
	return finish(x, o, 0);
}
