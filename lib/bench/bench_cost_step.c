/* bench_cost_step: a collective's time step by step, as lib/comm runs
 * it on p ranks placed host by host, l to a host: each step's messages
 * (partner and bytes as the algorithm's code picks them), a step costing
 * the slower of its legs: shared memory (alpha + bytes / beta of one
 * message) and TCP, where the messages that leave one host at once share
 * its link (alpha + their bytes / beta). bench_cost.c scales a measured
 * sweep by this model's ratio between two placements, so that a sweep
 * of 2 ranks on 2 hosts predicts 2 x 2 ranks: there half the steps stay
 * in a host and the others put two ranks' messages on one link. */
#include <math.h>

#include "bench/bench_cost.h"

/* Messages leaving host 0 when every rank r sends to r + d. */
static int
shift_out(int p, int l, int d)
{
	d = ((d % p) + p) % p;
	if (l >= p || d == 0)
		return 0;
	return d >= l ? l : d;
}

/* Messages leaving host 0 when every rank r talks to r ^ m. */
static int
xor_out(int p, int l, int m)
{
	int n = 0;

	if (l >= p)
		return 0;
	for (int j = 0; j < l; j++)
		n += (j ^ m) / l != 0;
	return n;
}

/* A step of out messages of B bytes leaving each host (times conc
 * groups alike beside them), in a host too unless every one leaves. */
static double
leg(const struct bench_legs *k, int l, int out, double B)
{
	double t = 0;

	if (out > 0)
		t = k->at + out * k->conc * B / k->bt;
	if (out < l && k->as + B / k->bs > t)
		t = k->as + B / k->bs;
	return t;
}

/* Binomial trees' step at distance m: one message a pair, leaving its
 * host once m reaches l (one a host: the senders are 2m apart). */
static double
tree_leg(const struct bench_legs *k, int l, double m, double B)
{
	return m >= l ? leg(k, l, 1, B) : leg(k, l, 0, B);
}

/* One message after another from (or to) rank 0: l - 1 in its host, p - l
 * leaving it. */
static double
linear(const struct bench_legs *k, int p, int l, double B)
{
	int in = l < p ? l : p;

	return (in - 1) * leg(k, in, 0, B) + (p - in) * leg(k, in, 1, B);
}

static double
allreduce(const struct bench_legs *k, enum coll_algo a, int p, int l,
    double b)
{
	double t = 0, lg = 0, p2 = 1;

	while (p2 * 2 <= p)
		p2 *= 2, lg++;
	switch (a) {
	case COLL_NAIVE:		/* gather and reduce, then send back */
		return 2 * linear(k, p, l, b) + (p - 1) * b / k->g;
	case COLL_RING:
		return (p - 1) * (2 * leg(k, l, shift_out(p, l, 1), b / p) +
		    b / p / k->g);
	case COLL_TREE:			/* binomial reduce, then broadcast */
		for (double m = 1; m < p; m *= 2)
			t += 2 * tree_leg(k, l, m, b) + b / k->g;
		return t;
	case COLL_RD:
	case COLL_RABENSEIFNER:
		if (p2 < p)		/* the ranks past p2 fold in and out */
			t = 2 * leg(k, l, shift_out(p, l, (int)p2), b) + b / k->g;
		for (int m = 1; m < p2; m *= 2) {
			double B = a == COLL_RD ? b : b * m / p2;

			t += (a == COLL_RD ? 1 : 2) * leg(k, l, xor_out(p, l, m),
			    B) + B / k->g;
		}
		return t;
	default:
		return -1;
	}
}

static double
broadcast(const struct bench_legs *k, enum coll_algo a, int p, int l,
    double b)
{
	double t = 0;

	switch (a) {
	case COLL_LINEAR:
		return linear(k, p, l, b);
	case COLL_BINOMIAL:
		for (double m = 1; m < p; m *= 2)
			t += tree_leg(k, l, m, b);
		return t;
	case COLL_RING:		/* a chain of segments: all links at once */
		return leg(k, l, l < p, b) + (p - 2) * (l < p ? k->at : k->as);
	case COLL_SCATTER_ALLGATHER:
		for (double m = 1; m < p; m *= 2)
			t += tree_leg(k, l, m, b * m / p);
		return t + (p - 1) * leg(k, l, shift_out(p, l, 1), b / p);
	default:
		return -1;
	}
}

/* allgather, reduce-scatter (red: 1, each step's bytes reduced) and
 * alltoall: b the whole vector, b / p a rank's block */
static double
blocks(const struct bench_legs *k, enum coll_algo a, int p, int l, double b,
    int red)
{
	double t = 0, B = b / p, g = red ? 1 / k->g : 0;
	int in = l < p ? l : p;

	switch (a) {
	case COLL_RING:
		return (p - 1) * (leg(k, l, shift_out(p, l, 1), B) + B * g);
	case COLL_PAIRWISE:	/* each step's sends leave before the next
				 * step's: the link carries them back to back */
		t = (p - 1) * (k->as + B / k->bs + B * g);
		if (in < p)
			t = fmax(t, (p - 1) * (k->at + B * g) + in * (p - in) *
			    k->conc * B / k->bt);
		return t;
	case COLL_BRUCK:
		for (int s = 1; s < p; s *= 2)
			t += leg(k, l, shift_out(p, l, s), B * (s < p - s ? s :
			    p - s));
		return t;
	case COLL_RD:
	case COLL_HALVING:
		for (int m = 1; m < p; m *= 2)
			t += leg(k, l, xor_out(p, l, m), B * m) + B * m * g;
		return t;
	case COLL_LINEAR:		/* every message posted at once */
		t = (in - 1) * (k->as + B / k->bs);
		if (in < p && k->at + in * (p - in) * k->conc * B / k->bt > t)
			t = k->at + in * (p - in) * k->conc * B / k->bt;
		return t;
	default:
		return -1;
	}
}

/* Allreduce's ring, tree and recursive algorithms run 1 MiB slices one
 * after another (coll_allreduce.c's SLICE_BYTES): each slice its steps. */
#define SLICE_BYTES 1048576.0

double
bench_cost_steps(const struct bench_legs *k, enum coll_kind kind,
    enum coll_algo algo, int p, int l, double bytes)
{
	double s;

	if (p <= 1)
		return 0;
	if (l < 1 || l > p)
		l = p;
	switch (kind) {
	case COLL_KIND_ALLREDUCE:
		s = algo == COLL_NAIVE ? 1 : ceil(bytes / SLICE_BYTES);
		s = s > 1 ? s : 1;
		return s * allreduce(k, algo, p, l, bytes / s);
	case COLL_KIND_BROADCAST:
		return broadcast(k, algo, p, l, bytes);
	case COLL_KIND_ALLGATHER:
	case COLL_KIND_ALLTOALL:
		return blocks(k, algo, p, l, bytes, 0);
	case COLL_KIND_REDUCE_SCATTER:
		return blocks(k, algo, p, l, bytes, 1);
	default:
		return -1;
	}
}
