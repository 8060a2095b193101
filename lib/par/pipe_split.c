/* pipe_split: where the model lies on the stages: the layers of each
 * stage and the stages holding each parameter. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/util.h"
#include "par/pipe.h"
#include "par/pipe_int.h"

int
pipe_layers(const struct nn_model *m)
{
	return m->dims.layers > 0 ? m->dims.layers : 1;
}

/* Layer of a parameter name, or -1 for none (embeddings, head). */
static int
name_layer(const char *name)
{
	int l;

	return sscanf(name, "layers.%d.", &l) == 1 ? l : -1;
}

int
pipe_split(const struct nn_model *m, int world, const char *split,
    int *first, char *err, size_t errlen)
{
	int L = pipe_layers(m), j, l;
	double *cum;

	if (world > L)
		return cli_fail(err, errlen, "%d stages for %d layers: every "
		    "stage needs a layer", world, L);
	first[0] = 0;
	if (split != NULL) {
		const char *p = split;
		char *end;
		for (j = 0; j < world; j++) {
			long v = strtol(p, &end, 10);
			if (end == p || v < 1 || (*end != ',' && *end != '\0') ||
			    (*end == '\0') != (j == world - 1))
				return cli_fail(err, errlen, "--split '%s': want %d "
				    "positive layer counts, one per stage", split,
				    world);
			first[j + 1] = first[j] + (int)v;
			p = end + 1;
		}
		if (first[world] != L)
			return cli_fail(err, errlen, "--split '%s' covers %d layers, "
			    "the model has %d", split, first[world], L);
		return 0;
	}
	/* Balanced: stage j ends where the running parameter count comes
	 * nearest j+1 world-ths of the total, keeping a layer per stage. */
	if ((cum = calloc((size_t)L + 1, sizeof(double))) == NULL)
		return cli_fail(err, errlen, "out of memory");
	for (size_t i = 0; i < m->ntensors; i++) {
		l = m->dims.layers > 0 ? name_layer(m->table[i].name) : 0;
		if (l >= 0 && l < L)
			cum[l + 1] += (double)m->table[i].count;
	}
	for (l = 0; l < L; l++)
		cum[l + 1] += cum[l];
	pipe_split_balanced(cum, L, world, first);
	free(cum);
	return 0;
}

void
pipe_split_balanced(const double *cum, int L, int world, int *first)
{
	first[0] = 0;
	for (int j = 1; j < world; j++) {
		double want = cum[L] * j / world;
		int best = first[j - 1] + 1;

		for (int l = best; l <= L - (world - j); l++)
			if (fabs(cum[l] - want) < fabs(cum[best] - want))
				best = l;
		first[j] = best;
	}
	first[world] = L;
}

/* The stages (ranks) holding a parameter: a, and b (or -1). A layer's
 * is the rank of its virtual stage s, s mod world; the embeddings lie
 * with virtual stage 0 on rank 0, the head with the last on the last. */
void
pipe_owners(const struct pipe_run *r, const char *name, int *a, int *b)
{
	const int *first = r->cfg->first;
	int l = r->m->dims.layers > 0 ? name_layer(name) : 0, j;
	int S = r->world * r->nchunk;

	*b = -1;
	if (l >= 0) {
		for (j = 0; j < S - 1 && first[j + 1] <= l; j++)
			;
		*a = j % r->world;
	} else if (strcmp(name, "wte") == 0) {
		*a = 0;
		*b = r->world > 1 ? r->world - 1 : -1;
	} else
		*a = strcmp(name, "wpe") == 0 ? 0 : r->world - 1;
}
