/* collcli_counts: collx-alltoall --send-counts: the [W, W] counts file,
 * read and checked on every rank, every rank's rows held against its
 * row before any data moves, and the blocks the counts cut. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "prog/collcli_int.h"

/* Counts past this are no row count of a file (and past a double's
 * integers). */
#define COUNT_MAX ((int64_t)1 << 48)

int
collcli_counts_load(struct cc_run *r, char *err, size_t errlen)
{
	struct tensor t;
	char *path, dims[64];
	size_t n = (size_t)r->world * (size_t)r->world, i;
	int rc = -1;

	if ((path = cli_expand(r->o->counts, r->rank, r->world)) == NULL)
		return cli_fail(err, errlen, "out of memory");
	memset(&t, 0, sizeof t);
	if (tensor_load_one(path, &t, err, errlen) < 0)
		goto out;
	if (dtype_is_float(t.dtype) || t.dtype == DT_BOOL) {
		cli_fail(err, errlen, "--send-counts %s: counts are integers, "
		    "not %s", path, dtype_name(t.dtype));
		goto out;
	}
	if (t.ndim != 2 || t.shape[0] != r->world || t.shape[1] != r->world) {
		cli_fail(err, errlen, "--send-counts %s: shape is %s, want "
		    "[%d, %d] for %d ranks", path, tensor_shape_str(&t, dims,
		    sizeof dims), r->world, r->world, r->world);
		goto out;
	}
	if ((r->counts = calloc(n, sizeof *r->counts)) == NULL) {
		cli_fail(err, errlen, "out of memory");
		goto out;
	}
	for (i = 0; i < n; i++) {
		double v = dtype_get(t.dtype, t.data, i);
		if (v < 0 || v > (double)COUNT_MAX) {
			cli_fail(err, errlen, "--send-counts %s: count [%zu, %zu] "
			    "is %.0f, not a number of rows", path,
			    i / (size_t)r->world, i % (size_t)r->world, v);
			goto out;
		}
		r->counts[i] = (int64_t)v;
	}
	r->counts_hash = cli_fnv1a(CLI_FNV1A_INIT, r->counts, n * sizeof *r->counts);
	rc = 0;
out:
	tensor_free(&t);
	free(path);
	return rc;
}

int64_t
collcli_counts_len(const struct cc_run *r, int q, int p)
{
	return r->counts[(size_t)q * (size_t)r->world + (size_t)p];
}

int64_t
collcli_counts_start(const struct cc_run *r, int q, int p)
{
	int64_t s = 0;

	for (int i = 0; i < p; i++)
		s += collcli_counts_len(r, q, i);
	return s;
}

int64_t
collcli_counts_sent(const struct cc_run *r, int q)
{
	return collcli_counts_start(r, q, r->world);
}

int64_t
collcli_counts_received(const struct cc_run *r, int q)
{
	int64_t s = 0;

	for (int i = 0; i < r->world; i++)
		s += collcli_counts_len(r, i, q);
	return s;
}

/* "3+0+5" of row q, cut short past a few dozen. */
static void
row_text(const struct cc_run *r, int q, char *buf, size_t len)
{
	size_t at = 0;

	buf[0] = '\0';
	for (int p = 0; p < r->world && at + 24 < len; p++)
		at += (size_t)snprintf(buf + at, len - at, "%s%lld", p ? "+" : "",
		    (long long)collcli_counts_len(r, q, p));
	if (at + 24 >= len)
		snprintf(buf + at, len - at, "+...");
}

int
collcli_counts_check(struct cc_run *r, const struct cc_plan *p)
{
	size_t n = p->in->count, i;
	char sum[96];

	for (int q = 0; q < r->world; q++)
		for (i = 0; i < n; i++) {
			int64_t rows = p->rows[(size_t)q * n + i];
			if (rows == collcli_counts_sent(r, q))
				continue;
			row_text(r, q, sum, sizeof sum);
			return collcli_fail(r, CLI_EXIT_DATA, "rank %d: %s of rank %d "
			    "has %lld rows, but row %d of --send-counts sends %lld "
			    "(%s)", r->rank, collcli_tname(&p->in->items[i]), q,
			    (long long)rows, q, (long long)collcli_counts_sent(r, q),
			    sum);
		}
	return 0;
}
