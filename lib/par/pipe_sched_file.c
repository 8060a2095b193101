/* pipe_sched_file: a schedule from a CSV file, rows rank,slot,action:
 * each rank runs its passes in the order of their slots. All is checked
 * before anything runs: every row's syntax and ranges, then on every rank
 * each micro-batch's F and B once with the F first (and when any row is a
 * weight pass W, the backward is split: its W once after its B), then that
 * neighbouring ranks take the micro-batches in one order (messages
 * between two ranks match in order), and last the clock simulation of
 * pipe_sched.c, which finds the ranks that would wait on each other.
 * Every failure names the row, counted as the file's lines from 1. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/util.h"
#include "par/pipe_sched.h"

struct row {
	int line, rank, slot;
	struct pipe_pass p;
};

struct sfile {
	const char *path;
	struct row *rows;
	size_t n, cap;
	int m, w, from_file;	/* from_file: w is the file's ranks */
	int split;		/* some row is a W: 3m rows per rank */
	struct row ***by;	/* per rank, its rows in slot order */
	char *err;
	size_t errlen;
};

/* The row's text and what is wrong with it. */
static int
bad_row(struct sfile *f, int line, const char *text, const char *why)
{
	return cli_fail(f->err, f->errlen, "%s: row %d: '%s': %s", f->path,
	    line, text, why);
}

/* A non-negative decimal number ending at one of the chars in stop. */
static int
number(const char **p, const char *stop, int *out)
{
	char *end;
	long v;

	if (**p < '0' || **p > '9')
		return -1;
	errno = 0;
	v = strtol(*p, &end, 10);
	if (errno || v > (1L << 30) || strchr(stop, *end) == NULL)
		return -1;
	*out = (int)v;
	*p = end;
	return 0;
}

/* One row: syntax, the passes collx-pipe has, the micro-batch's range. */
static int
parse_row(struct sfile *f, const char *text, int line, struct row *r)
{
	const char *p = text;
	int chunk;

	r->line = line;
	if (number(&p, ",", &r->rank) < 0 || *p++ != ',' ||
	    number(&p, ",", &r->slot) < 0 || *p++ != ',' || p[0] == '\0' ||
	    strchr("FBW", p[0]) == NULL ||
	    (r->p.kind = *p++, number(&p, ":", &r->p.mb) < 0) ||
	    (*p == ':' && (p++, number(&p, "", &chunk) < 0)))
		return bad_row(f, line, text,
		    "want rank,slot,action with action F<i>, B<i> or W<i> "
		    "(:<chunk> after it for a virtual stage)");
	if (strchr(text, ':') != NULL)
		return bad_row(f, line, text,
		    "a virtual stage (:<chunk>) needs "
		    "--schedule interleaved, which collx-pipe does not have");
	if (r->p.mb >= f->m)
		return cli_fail(f->err, f->errlen,
		    "%s: row %d: micro-batch %d "
		    "is out of range: --microbatches %d",
		    f->path, line, r->p.mb, f->m);
	if (f->w > 0 && r->rank >= f->w)
		return cli_fail(f->err, f->errlen,
		    "%s: row %d: rank %d is out "
		    "of range: %d ranks",
		    f->path, line, r->rank, f->w);
	return 0;
}

static int
read_rows(struct sfile *f)
{
	FILE *in = fopen(f->path, "r");
	char *text = NULL;
	size_t cap = 0;
	ssize_t len;
	int line = 0, rc = -1;

	if (in == NULL)
		return cli_fail(
		    f->err, f->errlen, "%s: %s", f->path, strerror(errno));
	while ((len = getline(&text, &cap, in)) >= 0) {
		line++;
		while (
		    len > 0 && (text[len - 1] == '\n' || text[len - 1] == '\r'))
			text[--len] = '\0';
		if (len == 0 ||
		    (line == 1 && strcmp(text, "rank,slot,action") == 0))
			continue;
		if (f->n == f->cap) {
			size_t c = f->cap ? 2 * f->cap : 64;
			struct row *r = realloc(f->rows, c * sizeof(*r));
			if (r == NULL) {
				cli_fail(f->err, f->errlen, "out of memory");
				goto out;
			}
			f->rows = r, f->cap = c;
		}
		if (parse_row(f, text, line, &f->rows[f->n]) < 0)
			goto out;
		f->n++;
	}
	if (ferror(in))
		cli_fail(f->err, f->errlen, "%s: %s", f->path, strerror(errno));
	else
		rc = 0;
out:
	free(text);
	fclose(in);
	return rc;
}

static int
by_rank_slot(const void *a, const void *b)
{
	const struct row *x = a, *y = b;

	if (x->rank != y->rank)
		return x->rank < y->rank ? -1 : 1;
	if (x->slot != y->slot)
		return x->slot < y->slot ? -1 : 1;
	return x->line < y->line ? -1 : x->line > y->line;
}

/* Which of a micro-batch's passes: F 0, B 1, W 2. */
static int
pass_index(char kind)
{
	return kind == 'F' ? 0 : kind == 'B' ? 1 : 2;
}

/* Rank j's rows: one F and one B (split: and one W) of every micro-batch,
 * F before B before W. seen[np*i + pass_index]: 1 + the place of the pass
 * among them. */
static int
check_rank(struct sfile *f, int j, struct row *r, size_t n, size_t *seen)
{
	int np = f->split ? 3 : 2, i;
	size_t k, *at;

	memset(seen, 0, (size_t)np * f->m * sizeof(*seen));
	for (k = 0; k < n; k++) {
		at = &seen[np * r[k].p.mb + pass_index(r[k].p.kind)];
		if (k > 0 && r[k].slot == r[k - 1].slot)
			return cli_fail(f->err, f->errlen,
			    "%s: row %d: slot %d "
			    "of rank %d again (row %d)",
			    f->path, r[k].line, r[k].slot, j, r[k - 1].line);
		if (*at)
			return cli_fail(f->err, f->errlen,
			    "%s: row %d: %c%d of "
			    "rank %d again (row %d)",
			    f->path, r[k].line, r[k].p.kind, r[k].p.mb, j,
			    r[*at - 1].line);
		*at = k + 1;
	}
	for (i = 0; i < np * f->m; i++)
		if (!seen[i])
			return cli_fail(f->err, f->errlen,
			    "%s: rank %d has no %c%d (every rank runs F<i>%s "
			    "B<i> %sof each micro-batch i < %d)",
			    f->path, j, "FBW"[i % np], i / np,
			    f->split ? "," : " and", f->split ? "and W<i> " :
			    "", f->m);
	for (k = 0; k < n; k++) {
		int p = pass_index(r[k].p.kind);
		i = r[k].p.mb;
		if (p > 0 && seen[np * i + p - 1] > k + 1)
			return cli_fail(f->err, f->errlen,
			    "%s: row %d: %c%d of "
			    "rank %d comes before its %c%d (row %d)",
			    f->path, r[k].line, r[k].p.kind, i, j, "FB"[p - 1],
			    i, r[seen[np * i + p - 1] - 1].line);
	}
	return 0;
}

/* Ranks j and j + 1 pass the micro-batches' activations and gradients
 * in one order. */
static int
check_neighbours(struct sfile *f, int j)
{
	static const char kinds[] = "FB";

	for (int c = 0; c < 2; c++) {
		int ka = 0, kb = 0;
		for (int n = 0; n < f->m; n++, ka++, kb++) {
			while (f->by[j][ka]->p.kind != kinds[c])
				ka++;
			while (f->by[j + 1][kb]->p.kind != kinds[c])
				kb++;
			const struct row *a = f->by[j][ka],
					 *b = f->by[j + 1][kb];
			if (a->p.mb != b->p.mb)
				return cli_fail(f->err, f->errlen,
				    "%s: row %d: rank %d runs %c%d where rank %d "
				    "runs %c%d (row %d): neighbouring ranks take "
				    "the micro-batches in one order",
				    f->path, b->line, j + 1, b->p.kind, b->p.mb,
				    j, a->p.kind, a->p.mb, a->line);
		}
	}
	return 0;
}

/* The rows every stuck rank waits at, and on whom. */
static int
deadlock(struct sfile *f, const int *at)
{
	char msg[COLLX_ERRLEN] = "";
	size_t len = 0;

	for (int j = 0; j < f->w && len < sizeof(msg); j++) {
		if (at[j] == pipe_sched_passes(f->m, f->split))
			continue;
		const struct row *r = f->by[j][at[j]];
		len += (size_t)snprintf(msg + len, sizeof(msg) - len,
		    "%srow %d (rank %d, %c%d) waits for rank %d",
		    len ? ", " : "", r->line, j, r->p.kind, r->p.mb,
		    r->p.kind == 'F' ? j - 1 : j + 1);
	}
	return cli_fail(f->err, f->errlen, "%s: deadlock: %s", f->path, msg);
}

static int
build(struct sfile *f, struct pipe_sched *s)
{
	struct pipe_pass **ord = calloc((size_t)f->w, sizeof(*ord));
	int *at = calloc((size_t)f->w, sizeof(int)), j, rc = -1;
	int np = pipe_sched_passes(f->m, f->split);

	for (j = 0; ord != NULL && at != NULL && j < f->w; j++) {
		if ((ord[j] = malloc((size_t)np * sizeof(**ord))) == NULL)
			break;
		for (int k = 0; k < np; k++)
			ord[j][k] = f->by[j][k]->p;
	}
	if (ord == NULL || at == NULL || j < f->w)
		cli_fail(f->err, f->errlen, "out of memory");
	else if ((rc = pipe_sched_orders(s, PIPE_SCHED_FILE, f->m, f->w,
	    f->split, ord, at, f->err, f->errlen)) == -2)
		rc = deadlock(f, at);
	for (j = 0; ord != NULL && j < f->w; j++)
		free(ord[j]);
	free(ord);
	free(at);
	return rc;
}

static int
check(struct sfile *f, struct pipe_sched *s)
{
	size_t *seen, k = 0, k0;
	int j, rc = -1;

	if (f->n == 0)
		return cli_fail(f->err, f->errlen, "%s: no rows", f->path);
	for (size_t i = 0; i < f->n; i++) {
		if (f->from_file && f->rows[i].rank + 1 > f->w)
			f->w = f->rows[i].rank + 1;
		f->split |= f->rows[i].p.kind == 'W';
	}
	qsort(f->rows, f->n, sizeof(*f->rows), by_rank_slot);
	seen = calloc(3 * (size_t)f->m, sizeof(*seen));
	f->by = calloc((size_t)f->w, sizeof(*f->by));
	if (seen == NULL || f->by == NULL) {
		free(seen);
		return cli_fail(f->err, f->errlen, "out of memory");
	}
	for (j = 0; j < f->w; j++) {
		for (k0 = k; k < f->n && f->rows[k].rank == j; k++)
			;
		if (check_rank(f, j, f->rows + k0, k - k0, seen) < 0)
			goto out;
		if ((f->by[j] = malloc((k - k0) * sizeof(**f->by))) == NULL) {
			cli_fail(f->err, f->errlen, "out of memory");
			goto out;
		}
		for (size_t q = k0; q < k; q++)
			f->by[j][q - k0] = &f->rows[q];
	}
	for (j = 0; j + 1 < f->w; j++)
		if (check_neighbours(f, j) < 0)
			goto out;
	rc = build(f, s);
out:
	free(seen);
	return rc;
}

int
pipe_sched_file(struct pipe_sched *s, const char *path, int m, int w, char *err,
    size_t errlen)
{
	struct sfile f = { .path = path, .m = m, .w = w, .from_file = w == 0,
	    .err = err, .errlen = errlen };
	int rc = -1, j;

	memset(s, 0, sizeof(*s));
	if (m < 1 || w < 0)
		return cli_fail(err, errlen, "schedule needs at least one "
		    "micro-batch (got %d)", m);
	if (read_rows(&f) == 0)
		rc = check(&f, s);
	for (j = 0; f.by != NULL && j < f.w; j++)
		free(f.by[j]);
	free(f.by);
	free(f.rows);
	return rc;
}
