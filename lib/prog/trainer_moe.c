/* trainer_moe: what a training program says of a model's experts: with
 * -v, the assignments routed to each expert in the step just run, and the
 * same as CSV rows (--expert-counts, for collx-plot's experts chart). */
#include <stdio.h>

#include "cli/cli.h"
#include "prog/trainer.h"

void
trainer_moe_line(const struct nn_dims *d, const struct train_step *st)
{
	const double *s = st->moe_counts;
	int E = d->moe.experts, at = 0;

	if (s == NULL || !cli_verbose || cli_quiet)
		return;
	fprintf(stderr, "%s: step %ld tokens per expert:", cli_progname,
	    st->step);
	for (int l = 0; l < d->layers; l++) {
		if (!nn_dims_moe_layer(d, l))
			continue;
		fprintf(stderr, " layer %d", l);
		for (int e = 0; e < E; e++)
			fprintf(stderr, "%s%.0f", e ? "," : " ", s[at + e]);
		fprintf(stderr, " (%.0f dropped);", s[at + E]);
		at += E + 1;
	}
	fputc('\n', stderr);
}

int
trainer_moe_csv(FILE *f, const struct nn_dims *d, const struct train_step *st,
    int first)
{
	const double *s = st->moe_counts;
	int E = d->moe.experts, at = 0;

	if (s == NULL)
		return 0;
	if (first)
		fprintf(f, "step,layer,expert,tokens,dropped\n");
	for (int l = 0; l < d->layers; l++) {
		if (!nn_dims_moe_layer(d, l))
			continue;
		for (int e = 0; e < E; e++)
			fprintf(f, "%ld,%d,%d,%.0f,%.0f\n", st->step, l, e,
			    s[at + e], s[at + E]);
		at += E + 1;
	}
	return fflush(f) == 0 && !ferror(f) ? 0 : -1;
}
