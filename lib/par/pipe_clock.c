/* pipe_clock: each stage's clock against rank 0's, so that the trace
 * puts every stage's spans on one clock. A stage's times count from its
 * own origin, the moment it left the opening barrier, and the ranks leave
 * it apart (by hundreds of microseconds under load, by a network's delay
 * between hosts): on their own clocks a stage's receive could end before
 * the send it received began. Ranks may be on different hosts, so no
 * clock is taken as shared. As NTP does, a rank sends rank 0 a ping at
 * its time t0 and has the answer, rank 0's time t, at t1: its clock is
 * ahead of rank 0's by (t0 + t1) / 2 - t, give or take half the round
 * trip, so the shortest of a few round trips is kept. Sampled at the start
 * and at the end of a run, the offset is taken to change linearly between
 * the two, as clocks of two hosts drift apart. */
#include <math.h>

#include "cli/util.h"
#include "par/pipe_int.h"

/* Round trips per sample. */
#define PIPE_CLOCK_PINGS 8

/* This rank's time, since its origin. */
static double
clock_now(const struct pipe_run *r)
{
	return cli_now() - r->origin;
}

/* Rank 0: each other rank's pings in turn, answered with its time. */
static int
clock_answer(struct pipe_run *r)
{
	double t;
	char ping;
	int q, k;

	for (q = 1; q < r->world; q++)
		for (k = 0; k < PIPE_CLOCK_PINGS; k++) {
			if (comm_recv(r->c, q, PIPE_TAG_CLOCK, &ping, 1) < 0)
				return pipe_comm_failed(r);
			t = clock_now(r);
			if (comm_send(r->c, q, PIPE_TAG_CLOCK, &t,
			    sizeof(t)) < 0)
				return pipe_comm_failed(r);
		}
	return 0;
}

int
pipe_clock_sample(struct pipe_run *r, struct pipe_clock *out)
{
	double t0, t1, t, best = INFINITY;
	char ping = 0;
	int k;

	*out = (struct pipe_clock){ 0 };
	comm_set_step(r->c, "setting the trace's clock");
	if (r->rank == 0)
		return clock_answer(r);
	for (k = 0; k < PIPE_CLOCK_PINGS; k++) {
		t0 = clock_now(r);
		if (comm_send(r->c, 0, PIPE_TAG_CLOCK, &ping, 1) < 0 ||
		    comm_recv(r->c, 0, PIPE_TAG_CLOCK, &t, sizeof(t)) < 0)
			return pipe_comm_failed(r);
		t1 = clock_now(r);
		if (t1 - t0 < best) {
			best = t1 - t0;
			out->at = (t0 + t1) / 2;
			out->ahead = out->at - t;
		}
	}
	return 0;
}

double
pipe_clock_root(const struct pipe_clock *a, const struct pipe_clock *b,
    double t)
{
	if (b->at <= a->at)
		return t - b->ahead;
	return t - (a->ahead + (b->ahead - a->ahead) * (t - a->at) /
	    (b->at - a->at));
}
