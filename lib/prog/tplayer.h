/* tplayer: collx-tp's run, after its options: the layer split over the
 * group's ranks, forward and backward (--iters times) with --check
 * against the serial layer, or --train in the trainer shell. */
#ifndef COLLX_TPLAYER_H
#define COLLX_TPLAYER_H

#include "par/tp.h"
#include "prog/trainer.h"

/* collx-tp's command line. */
struct tplayer_opts {
	struct trainopt_common c;
	struct trainopt_ckpt ckpt;
	const char *input, *dy, *dx, *gw, *targets, *trace;
	int have_layer, backward, check, train, iters;
	double lr, rtol;
	struct tp_cfg cfg;
	struct cli_group g;
};

/* Loads the inputs, joins the group and runs what o asks for: a program
 * body (a failure ends the program with its exit status). */
void tplayer_run(struct tplayer_opts *o);

#endif
