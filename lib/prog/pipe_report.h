/* pipe_report: what a pipeline's run reports, the same in collx-pipe and
 * on collx-train's pipeline axis: the schedule's bubble on paper, the
 * timing rows' bubble columns, and rank 0's closing summary of the
 * measured bubble and each stage's peak activations. */
#ifndef COLLX_PIPE_REPORT_H
#define COLLX_PIPE_REPORT_H

#include <stddef.h>

#include "par/pipe.h"

/* The extra timing columns prog_pipe_columns fills, in this order. */
#define PROG_PIPE_COLUMNS "bubble,bubble_theory,peak_act_bytes"

struct prog_pipe_report {
	const struct pipe_cfg *cfg;
	int world;		/* the pipeline's ranks */
	double theory;		/* the schedule's bubble on paper */
	const char *ranks;	/* whose figures rank 0 holds, when the run
				 * has other pipelines (NULL: the only one) */
};

/* r for cfg's schedule over world ranks: its bubble on paper, the closed
 * form where there is one, else its table's (cfg->table's, or the
 * built-in schedule's). 0, or -1 with the reason. */
int prog_pipe_report_init(struct prog_pipe_report *r,
    const struct pipe_cfg *cfg, int world, const char *ranks, char *err,
    size_t errlen);
/* The values of PROG_PIPE_COLUMNS for a step's statistics, into buf. */
void prog_pipe_columns(const struct prog_pipe_report *r,
    const struct pipe_stat *st, char *buf, size_t len);
/* Rank 0's summary on standard output: the measured bubble (the mean
 * over stages) beside the schedule's formula, then per stage its layers
 * (each chunk's), bubble and peak activation memory. */
void prog_pipe_summary(const struct prog_pipe_report *r,
    const struct pipe_result *res);

#endif
