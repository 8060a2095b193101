/* tp_log: the phase log of collx-tp's layers (par/tp.h): each phase's
 * time and the bytes this rank sent in it, on its group and the
 * sub-groups it names. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/util.h"
#include "par/tp.h"

/* Bytes sent on l's group and its sub-groups (each counts its own). */
static uint64_t
log_sent(const struct tp_log *l)
{
	uint64_t n = comm_bytes_sent(l->c);

	for (int i = 0; i < 2; i++)
		if (l->sub[i])
			n += comm_bytes_sent(l->sub[i]);
	return n;
}

void
tp_log_start(struct tp_log *l, struct comm *c)
{
	l->c = c;
	l->n = 0;
	l->t = cli_now();
	l->sent = log_sent(l);
}

void
tp_log_mark(struct tp_log *l, const char *name, const char *op,
    const char *algo, size_t count)
{
	tp_log_mark_dt(l, name, op, algo, count, DT_F32);
}

void
tp_log_mark_dt(struct tp_log *l, const char *name, const char *op,
    const char *algo, size_t count, enum dtype dt)
{
	double now = cli_now();
	uint64_t sent = log_sent(l);

	if (l->trace)
		tp_log_span(l, strcmp(op, "compute") != 0,
		    strcmp(op, "compute") != 0 ? 'S' : 0, name, l->t, now);

	if (l->n < TP_PHASE_MAX)
		l->p[l->n++] = (struct tp_phase){ name, op, algo, count, dt,
		    now - l->t, sent - l->sent, 0, 0 };
	l->t = now;
	l->sent = sent;
}

void
tp_log_mark_overlap(struct tp_log *l, const char *name, const char *op,
    const char *algo, size_t count, double hidden, double exposed)
{
	int n = l->n, trace = l->trace;

	l->trace = 0;		/* the caller's spans say it in detail */
	tp_log_mark(l, name, op, algo, count);
	l->trace = trace;
	if (l->n > n)
		l->p[n].hidden = hidden, l->p[n].exposed = exposed;
}

void
tp_log_trace(struct tp_log *l)
{
	l->trace = 1;
	l->origin = cli_now();
}

void
tp_log_span(struct tp_log *l, int lane, char kind, const char *name,
    double t0, double t1)
{
	struct tp_span *s;

	if (l == NULL || !l->trace)
		return;
	if (l->nspans == l->capspans) {
		size_t cap = l->capspans ? 2 * l->capspans : 256;
		if ((s = realloc(l->spans, cap * sizeof(*s))) == NULL)
			return;		/* the trace ends short, the run goes on */
		l->spans = s, l->capspans = cap;
	}
	s = &l->spans[l->nspans++];
	memset(s, 0, sizeof(*s));	/* sent as bytes, padding included */
	s->t0 = t0 - l->origin, s->t1 = t1 - l->origin;
	s->lane = lane;
	s->kind = kind ? kind : strncmp(name, "bwd", 3) == 0 ? 'B' :
	    strncmp(name, "fwd", 3) == 0 ? 'F' : 'O';
	snprintf(s->name, sizeof s->name, "%s", name);
}
