/* dp_bucket: where the data-parallel axis cuts a flat gradient vector into
 * buckets, one rule for collx-dp's model (dp.c) and collx-train's stages
 * (pipe_dp_sync.c). */
#include "par/dp_sync.h"

/* Consecutive tensors of one backward stage (and one group) fused while
 * the bucket stays within lim floats; a bigger tensor is a bucket alone.
 * One stage a bucket, so that none waits for a later stage's gradients (a
 * gpt's last block's fc2 for the tied embeddings at the very end of the
 * backward pass). */
int
dp_buckets_cut(const struct dp_tensor *t, size_t n, size_t total, size_t lim,
    size_t *b)
{
	size_t i, first = 0;
	int nb = 0, stage = 0, group = 0;

	b[0] = 0;
	for (i = 0; i < n; i++) {
		size_t end = t[i].off + t[i].count;

		if ((end - first > lim || t[i].stage != stage ||
		    t[i].group != group) && t[i].off > first)
			b[++nb] = first = t[i].off;
		stage = t[i].stage;
		group = t[i].group;
	}
	if (total > first || nb == 0)
		b[++nb] = total;
	return nb;
}

void
dp_buckets_ready(const struct dp_tensor *t, size_t n, const size_t *b, int nb,
    int *ready)
{
	size_t i;
	int k;

	for (k = 0; k < nb; k++)
		ready[k] = 0;
	for (i = 0; i < n; i++)
		for (k = 0; k < nb && t[i].count > 0; k++)
			if (t[i].off < b[k + 1] && t[i].off + t[i].count > b[k] &&
			    t[i].stage > ready[k])
				ready[k] = t[i].stage;
}
