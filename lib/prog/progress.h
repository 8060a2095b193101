/* progress: how the training programs (collx-dp, collx-tp --train,
 * collx-pipe) report their steps on standard error. With -v the program
 * prints a line per step of its own; without, a terminal gets one live
 * line redrawn in place (step, loss, throughput, ETA) instead, and
 * anything else, a log or a pipe, no step at all. Either way the run ends
 * with one summary line, so a log shows how it went. -q silences all of
 * it. */
#ifndef COLLX_PROGRESS_H
#define COLLX_PROGRESS_H

#include "par/train_data.h"

struct progress {
	int summary;		/* this rank reports and -q is off */
	int lines;		/* -v: the program prints a line per step */
	int live;		/* the redrawn line */
	const char *unit;	/* what a step's tokens count */
	long first, steps, done;	/* first step, steps planned, seen */
	double start, shown;	/* clock at the start, at the last redraw */
	double tokens, seconds, comm, loss;
};

/*
 * Starts the clock for steps first .. first+steps-1. on: this rank reports
 * (rank 0); lines and live then follow -v, -q and whether standard error
 * is a terminal. unit: "samples" or "tokens", what train_step's tokens
 * count.
 */
void progress_start(struct progress *p, int on, const char *unit, long first,
    long steps);
/* Counts step s in and redraws the live line: at most ten times a second,
 * and always for the last step. */
void progress_step(struct progress *p, const struct train_step *s);
/* Ends the live line and, unless -q or another rank reports, prints the
 * summary: steps, final loss, mean throughput, wall time and time in
 * communication. */
void progress_end(struct progress *p);

#endif
