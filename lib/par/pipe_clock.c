/* pipe_clock: each stage's clock against rank 0's, so that the trace
 * puts every stage's spans on one clock. A stage's times count from its
 * own origin, the moment it left the opening barrier, and the ranks leave
 * it apart (by hundreds of microseconds under load, by a network's delay
 * between hosts): on their own clocks a stage's receive could end before
 * the send it received began. Ranks may be on different hosts, so no
 * clock is taken as shared. As NTP does, a rank sends rank 0 a ping at
 * its time t0 and has the answer, rank 0's time t, at t1: rank 0 read its
 * clock between the two, so this rank's clock is ahead of rank 0's by
 * (t0 + t1) / 2 - t to within half the round trip t1 - t0, and the
 * shortest of several round trips is kept. On a loaded machine a round
 * trip is mostly the time each side waits to be woken, and the two waits
 * differ (a rank's estimate was seen 580 us off, its best of 8 round
 * trips 1.6 ms): so a rank pings on until 8 pings in a row have found no
 * shorter round trip (up to PIPE_CLOCK_PINGS_MAX), and the half round
 * trip kept is the estimate's error bar, which the trace reports.
 * Sampled at the start and at the end of a run, the offset is taken to
 * change linearly between the two, as clocks of two hosts drift apart. */
#include <math.h>

#include "cli/util.h"
#include "par/pipe_int.h"

/* Pings that find no shorter round trip before a rank stops, and the
 * most it sends. */
#define PIPE_CLOCK_PINGS 8
#define PIPE_CLOCK_PINGS_MAX 64

/* A ping's byte: answer it, or the rank is done. */
#define PING_MORE 1
#define PING_DONE 0

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
	int q;

	for (q = 1; q < r->world; q++)
		for (;;) {
			if (comm_recv(r->c, q, PIPE_TAG_CLOCK, &ping, 1) < 0)
				return pipe_comm_failed(r);
			if (ping == PING_DONE)
				break;
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
	char ping = PING_MORE, done = PING_DONE;
	int k, since = 0;

	*out = (struct pipe_clock){ 0 };
	comm_set_step(r->c, "setting the trace's clock");
	if (r->rank == 0)
		return clock_answer(r);
	for (k = 0; k < PIPE_CLOCK_PINGS_MAX && since < PIPE_CLOCK_PINGS;
	    k++, since++) {
		t0 = clock_now(r);
		if (comm_send(r->c, 0, PIPE_TAG_CLOCK, &ping, 1) < 0 ||
		    comm_recv(r->c, 0, PIPE_TAG_CLOCK, &t, sizeof(t)) < 0)
			return pipe_comm_failed(r);
		t1 = clock_now(r);
		if (t1 - t0 < best) {
			best = t1 - t0;
			out->at = (t0 + t1) / 2;
			out->ahead = out->at - t;
			out->err = best / 2;
			since = 0;
		}
	}
	if (comm_send(r->c, 0, PIPE_TAG_CLOCK, &done, 1) < 0)
		return pipe_comm_failed(r);
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

/* Spans lie between the two samples, where the offset is a mix of
 * theirs, and so is its error: the larger of the two bounds it. */
double
pipe_clock_err(const struct pipe_clock *a, const struct pipe_clock *b)
{
	return a->err > b->err ? a->err : b->err;
}
