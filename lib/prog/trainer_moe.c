/* trainer_moe: what a training program says of a model's experts: with
 * -v, the assignments routed to each expert in the step just run. */
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
