/* pipe_sched_file: a schedule from a CSV file, rows rank,slot,action:
 * each rank runs its passes in the order of their slots. All is checked
 * before anything runs: every row's syntax and ranges, then on every rank
 * each micro-batch's F and B once with the F first (and when any row is a
 * weight pass W, the backward is split: its W once after its B), on every
 * chunk when actions name chunks (F<i>:<c>: virtual stages), then that
 * each rank sends its activations to the next rank and its gradients to
 * the one before in the order that rank takes them (messages between two
 * ranks match in order), and last the clock simulation of pipe_sched.c,
 * which finds the ranks that would wait on each other. Every failure
 * names the row, counted as the file's lines from 1. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/util.h"
#include "par/pipe_sched.h"

/* Chunks a file may name: far more than a rank's layers come in. */
enum { MAX_CHUNKS = 64 };

struct row {
	int line, rank, slot;
	struct pipe_pass p;
};

struct sfile {
	const char *path;
	struct row *rows;
	size_t n, cap;
	int m, w, from_file;	/* from_file: w is the file's ranks */
	int v;			/* chunks: 1 + the largest the rows name */
	int split;		/* some row is a W: 3m rows per rank, chunk */
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

/* A pass as the rows spell it: F3, or F3:1 when the file has chunks. */
static const char *
pass_name(const struct sfile *f, const struct pipe_pass *p, char *buf,
    size_t len)
{
	if (f->v > 1)
		snprintf(buf, len, "%c%d:%d", p->kind, p->mb, p->chunk);
	else
		snprintf(buf, len, "%c%d", p->kind, p->mb);
	return buf;
}

/* One row: syntax, the passes collx-pipe has, the micro-batch's and the
 * chunk's range. */
static int
parse_row(struct sfile *f, const char *text, int line, struct row *r)
{
	const char *p = text;

	r->line = line;
	r->p.chunk = 0;
	if (number(&p, ",", &r->rank) < 0 || *p++ != ',' ||
	    number(&p, ",", &r->slot) < 0 || *p++ != ',' || p[0] == '\0' ||
	    strchr("FBW", p[0]) == NULL ||
	    (r->p.kind = *p++, number(&p, ":", &r->p.mb) < 0) ||
	    (*p == ':' && (p++, number(&p, "", &r->p.chunk) < 0)))
		return bad_row(f, line, text,
		    "want rank,slot,action with action F<i>, B<i> or W<i> "
		    "(:<chunk> after it for a virtual stage)");
	if (r->p.chunk >= MAX_CHUNKS)
		return cli_fail(f->err, f->errlen, "%s: row %d: chunk %d is "
		    "out of range: at most %d chunks", f->path, line,
		    r->p.chunk, MAX_CHUNKS);
	if (r->p.chunk + 1 > f->v)
		f->v = r->p.chunk + 1;
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

/* Where a pass's first row is kept: seen[pass_at(...)], F 0, B 1, W 2
 * of each micro-batch on each chunk. */
static size_t
pass_at(const struct sfile *f, const struct pipe_pass *p)
{
	int np = f->split ? 3 : 2;

	return ((size_t)p->chunk * f->m + p->mb) * np + (p->kind == 'F' ? 0 :
	    p->kind == 'B' ? 1 : 2);
}

/* Rank j's rows: one F and one B (split: and one W) of every micro-batch
 * on every chunk, F before B before W. seen[pass_at]: 1 + the place of
 * the pass among them. */
static int
check_rank(struct sfile *f, int j, struct row *r, size_t n, size_t *seen)
{
	int np = f->split ? 3 : 2;
	size_t k, i, *at, all = (size_t)np * f->m * f->v;
	char a[32], b[32];

	memset(seen, 0, all * sizeof(*seen));
	for (k = 0; k < n; k++) {
		at = &seen[pass_at(f, &r[k].p)];
		if (k > 0 && r[k].slot == r[k - 1].slot)
			return cli_fail(f->err, f->errlen,
			    "%s: row %d: slot %d "
			    "of rank %d again (row %d)",
			    f->path, r[k].line, r[k].slot, j, r[k - 1].line);
		if (*at)
			return cli_fail(f->err, f->errlen,
			    "%s: row %d: %s of rank %d again (row %d)",
			    f->path, r[k].line, pass_name(f, &r[k].p, a,
			    sizeof(a)), j, r[*at - 1].line);
		*at = k + 1;
	}
	for (i = 0; i < all; i++) {
		struct pipe_pass p = { "FBW"[i % np], (int)(i / np % f->m),
		    (int)(i / np / f->m) };
		if (!seen[i])
			return cli_fail(f->err, f->errlen,
			    "%s: rank %d has no %s (every rank runs F<i>%s "
			    "B<i> %sof each micro-batch i < %d%s)",
			    f->path, j, pass_name(f, &p, a, sizeof(a)),
			    f->split ? "," : " and", f->split ? "and W<i> " :
			    "", f->m, f->v > 1 ? " on each chunk" : "");
	}
	for (k = 0; k < n; k++) {
		struct pipe_pass p = r[k].p;
		size_t here = pass_at(f, &p);
		if (p.kind == 'F' || seen[here - 1] <= k + 1)
			continue;
		p.kind = p.kind == 'B' ? 'F' : 'B';
		return cli_fail(f->err, f->errlen,
		    "%s: row %d: %s of rank %d comes before its %s (row %d)",
		    f->path, r[k].line, pass_name(f, &r[k].p, a, sizeof(a)),
		    j, pass_name(f, &p, b, sizeof(b)),
		    r[seen[here - 1] - 1].line);
	}
	return 0;
}

/* The next of rank j's rows from *k on of a pass that sends a message
 * to the rank `to` (F: activations to the next rank, B: gradients to the
 * one before; the pipeline's ends send none) or, with recv, receives one
 * from it; the row's pass as the other side names it (the virtual stage
 * after or before) into *as. NULL when there is none. */
static const struct row *
next_msg(const struct sfile *f, int j, char kind, int recv, size_t *k,
    struct pipe_pass *as)
{
	int np = f->v * pipe_sched_passes(f->m, f->split), last = f->w *
	    f->v - 1;
	/* F sends forward, B backward; a receive comes the other way */
	int step = (kind == 'F') != recv ? 1 : -1;

	for (; *k < (size_t)np; (*k)++) {
		const struct row *r = f->by[j][*k];
		int vs = r->p.chunk * f->w + j, to = vs + step;

		if (r->p.kind != kind || to < 0 || to > last)
			continue;
		*as = (struct pipe_pass){ kind, r->p.mb, to / f->w };
		(*k)++;
		return r;
	}
	return NULL;
}

/* Rank j sends its activations to rank j + 1 (round the ring: virtual
 * stage c*w + w-1 feeds (c+1)*w) in the order that rank takes them, and
 * rank j + 1 its gradients back in the order rank j takes them. */
static int
check_neighbours(struct sfile *f, int j)
{
	static const char kinds[] = "FB";
	int nj = (j + 1) % f->w;
	char a[32], b[32];

	for (int c = 0; c < 2; c++) {
		/* the sender and receiver of this kind of message */
		int s = c == 0 ? j : nj, d = c == 0 ? nj : j;
		size_t ks = 0, kd = 0;
		struct pipe_pass sent, got;
		const struct row *x, *y;

		while ((x = next_msg(f, s, kinds[c], 0, &ks, &sent)) != NULL &&
		    (y = next_msg(f, d, kinds[c], 1, &kd, &got)) != NULL) {
			if (sent.mb == y->p.mb && sent.chunk == y->p.chunk)
				continue;
			return cli_fail(f->err, f->errlen,
			    "%s: row %d: rank %d runs %s where rank %d runs "
			    "%s (row %d): neighbouring ranks take the "
			    "micro-batches in one order", f->path, y->line, d,
			    pass_name(f, &y->p, a, sizeof(a)), s,
			    pass_name(f, &x->p, b, sizeof(b)), x->line);
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

	char a[32];

	for (int j = 0; j < f->w && len < sizeof(msg); j++) {
		if (at[j] == f->v * pipe_sched_passes(f->m, f->split))
			continue;
		const struct row *r = f->by[j][at[j]];
		len += (size_t)snprintf(msg + len, sizeof(msg) - len,
		    "%srow %d (rank %d, %s) waits for rank %d",
		    len ? ", " : "", r->line, j, pass_name(f, &r->p, a,
		    sizeof(a)), (r->p.kind == 'F' ? j - 1 + f->w : j + 1) %
		    f->w);
	}
	return cli_fail(f->err, f->errlen, "%s: deadlock: %s", f->path, msg);
}

static int
build(struct sfile *f, struct pipe_sched *s)
{
	struct pipe_pass **ord = calloc((size_t)f->w, sizeof(*ord));
	int *at = calloc((size_t)f->w, sizeof(int)), j, rc = -1;
	int np = f->v * pipe_sched_passes(f->m, f->split);

	for (j = 0; ord != NULL && at != NULL && j < f->w; j++) {
		if ((ord[j] = malloc((size_t)np * sizeof(**ord))) == NULL)
			break;
		for (int k = 0; k < np; k++)
			ord[j][k] = f->by[j][k]->p;
	}
	if (ord == NULL || at == NULL || j < f->w)
		cli_fail(f->err, f->errlen, "out of memory");
	else if ((rc = pipe_sched_orders(s, PIPE_SCHED_FILE, f->m, f->w,
	    f->v, f->split, ord, at, f->err, f->errlen)) == -2)
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
	/* The ranks from the file: the first with no rows is refused below,
	 * so none after it needs room (a row's rank may be 2^30). */
	if (f->from_file) {
		int next = 0;
		for (size_t i = 0; i < f->n && f->rows[i].rank <= next; i++)
			next += f->rows[i].rank == next;
		if (next < f->w)
			f->w = next + 1;
	}
	seen = calloc(3 * (size_t)f->m * f->v, sizeof(*seen));
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
	for (j = 0; j < f->w; j++)
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
	    .v = 1, .err = err, .errlen = errlen };
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
