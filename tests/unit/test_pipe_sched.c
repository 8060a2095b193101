/* test_pipe_sched: the GPipe and 1F1B tables against their closed forms,
 * and the properties a runner relies on: forward before backward, every
 * send matched in order by its receive, the action lists run to the end
 * with blocking receives, 1F1B holds at most W micro-batches. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "par/pipe_sched.h"
#include "unit.h"

/* GPipe: forward of i on stage j at clock i + j; backwards start after
 * the last forward leaves the last stage, in micro-batch order. */
static int
gpipe_f(int i, int j, int m, int w)
{
	(void)m, (void)w;
	return i + j;
}

static int
gpipe_b(int i, int j, int m, int w)
{
	return (m + w - 1) + i + (w - 1 - j);
}

/* 1F1B with unit passes: the first w - j forwards stream in at i + j,
 * the rest alternate with backwards every two clocks. */
static int
f1b1_f(int i, int j, int m, int w)
{
	(void)m;
	return i < w - j ? i + j : 2 * i + j;
}

static int
f1b1_b(int i, int j, int m, int w)
{
	(void)m;
	return 2 * w - 1 - j + 2 * i;
}

static int
closed_form(const struct pipe_sched *s)
{
	int i, j, m = s->m, w = s->w, gp = s->kind == PIPE_SCHED_GPIPE;

	if (s->nclocks != 2 * (m + w - 1))
		return 0;
	for (j = 0; j < w; j++)
		for (i = 0; i < m; i++) {
			int f = gp ? gpipe_f(i, j, m, w) : f1b1_f(i, j, m, w);
			int b = gp ? gpipe_b(i, j, m, w) : f1b1_b(i, j, m, w);
			if (s->fclock[j * m + i] != f || s->bclock[j * m + i] != b)
				return 0;
		}
	return 1;
}

/* On every stage each forward comes before its backward (split: before
 * its weight pass), each pass once. */
static int
fwd_before_bwd(const struct pipe_sched *s)
{
	int j, k, *seen = calloc((size_t)s->m, sizeof(int)), ok = 1;

	for (j = 0; j < s->w && ok; j++) {
		memset(seen, 0, (size_t)s->m * sizeof(int));
		for (k = 0; k < s->nact[j]; k++) {
			const struct pipe_action *a = &s->act[j][k];
			if (a->op == PIPE_FWD)
				ok &= seen[a->mb]++ == 0;
			else if (a->op == PIPE_BWD)
				ok &= seen[a->mb]++ == 1;
			else if (a->op == PIPE_WGT)
				ok &= s->split && seen[a->mb]++ == 2;
		}
		for (k = 0; k < s->m; k++)
			ok &= seen[k] == (s->split ? 3 : 2);
	}
	free(seen);
	return ok;
}

/* The sends of j to q, in order, are the receives of q from j. */
static int
pairs(const struct pipe_sched *s)
{
	int j, q, k, n;

	for (j = 0; j < s->w; j++)
		for (q = 0; q < s->w; q++) {
			int sa[256], ra[256], ns = 0, nr = 0;
			for (k = 0; k < s->nact[j]; k++) {
				const struct pipe_action *a = &s->act[j][k];
				if ((a->op == PIPE_SEND_ACT || a->op == PIPE_SEND_GRAD) &&
				    a->peer == q)
					sa[ns++] = a->mb * 2 + (a->op == PIPE_SEND_GRAD);
			}
			for (k = 0; k < s->nact[q]; k++) {
				const struct pipe_action *a = &s->act[q][k];
				if ((a->op == PIPE_RECV_ACT || a->op == PIPE_RECV_GRAD) &&
				    a->peer == j)
					ra[nr++] = a->mb * 2 + (a->op == PIPE_RECV_GRAD);
			}
			if (ns != nr)
				return 0;
			for (n = 0; n < ns; n++)
				if (sa[n] != ra[n])
					return 0;
		}
	return 1;
}

/* Runs the action lists with buffered sends and blocking in-order
 * receives: every stage must reach its end. */
static int
runs_through(const struct pipe_sched *s)
{
	int w = s->w, *pc = calloc((size_t)w, sizeof(int));
	int *sent = calloc((size_t)w * w, sizeof(int));
	int *got = calloc((size_t)w * w, sizeof(int));
	int moved = 1, j, ok = 1;

	while (moved) {
		moved = 0;
		for (j = 0; j < w; j++) {
			const struct pipe_action *a;
			if (pc[j] == s->nact[j])
				continue;
			a = &s->act[j][pc[j]];
			if (a->op == PIPE_SEND_ACT || a->op == PIPE_SEND_GRAD)
				sent[j * w + a->peer]++;
			else if (a->op == PIPE_RECV_ACT || a->op == PIPE_RECV_GRAD) {
				if (got[a->peer * w + j] == sent[a->peer * w + j])
					continue;
				got[a->peer * w + j]++;
			}
			pc[j]++;
			moved = 1;
		}
	}
	for (j = 0; j < w; j++)
		ok &= pc[j] == s->nact[j];
	free(pc), free(sent), free(got);
	return ok;
}

static void
check(enum pipe_sched_kind kind, int m, int w)
{
	struct pipe_sched s;
	char e[256], what[128];
	int j, inflight = 1;
	const char *name = pipe_sched_name(kind);

	snprintf(what, sizeof(what), "%s M=%d W=%d builds", name, m, w);
	if (!UNIT_OK(pipe_sched_build(&s, kind, m, w, e, sizeof(e)) == 0, what))
		return;
	snprintf(what, sizeof(what), "%s M=%d W=%d: clocks as the closed form",
	    name, m, w);
	if (kind == PIPE_SCHED_ZBH1)	/* the step's length; zb_tables */
		UNIT_OK(s.nclocks == (m >= w ? 3 * m + w - 1 :
		    2 * m + 2 * w - 1), what);
	else
		UNIT_OK(closed_form(&s), what);
	snprintf(what, sizeof(what), "%s M=%d W=%d: forward before backward",
	    name, m, w);
	UNIT_OK(fwd_before_bwd(&s), what);
	snprintf(what, sizeof(what), "%s M=%d W=%d: sends pair with receives",
	    name, m, w);
	UNIT_OK(pairs(&s), what);
	snprintf(what, sizeof(what), "%s M=%d W=%d: runs without deadlock",
	    name, m, w);
	UNIT_OK(runs_through(&s), what);
	for (j = 0; j < w; j++) {
		/* ZB-H1: up to w, 1F1B's stage 0, on every stage */
		int want = kind == PIPE_SCHED_GPIPE ? m :
		    kind == PIPE_SCHED_ZBH1 ? (m < w ? m : w) :
		    (m < w - j ? m : w - j);
		inflight &= pipe_sched_inflight(&s, j) == want;
		inflight &= kind == PIPE_SCHED_GPIPE || pipe_sched_inflight(&s, j) <= w;
	}
	snprintf(what, sizeof(what), "%s M=%d W=%d: in flight %s", name, m, w,
	    kind == PIPE_SCHED_GPIPE ? "M" : "min(M, W-j) <= W");
	UNIT_OK(inflight, what);
	pipe_sched_free(&s);
}

/* The printed 1F1B table for M = 4, W = 2, cell by cell. */
static void
check_print(void)
{
	static const char want[] =
	    "clock  s0    s1\n"
	    "0      F0    .\n"
	    "1      F1    F0\n"
	    "2      .     B0\n"
	    "3      B0    F1\n"
	    "4      F2    B1\n"
	    "5      B1    F2\n"
	    "6      F3    B2\n"
	    "7      B2    F3\n"
	    "8      .     B3\n"
	    "9      B3    .\n"
	    "bubble 0.2000 (4 idle of 20 cells)\n";
	struct pipe_sched s;
	char e[256], buf[1024] = { 0 };
	FILE *f = fmemopen(buf, sizeof(buf) - 1, "w");

	pipe_sched_build(&s, PIPE_SCHED_1F1B, 4, 2, e, sizeof(e));
	pipe_sched_print(f, &s);
	fclose(f);
	UNIT_OK(strcmp(buf, want) == 0, "1f1b M=4 W=2 prints the expected table");
	if (strcmp(buf, want) != 0)
		printf("# got:\n%s", buf);
	pipe_sched_free(&s);
}

/* A schedule file of the given text in a fresh temporary file, read for
 * m micro-batches on w stages: pipe_sched_file's result. */
static int
from_file(struct pipe_sched *s, const char *text, int m, int w, char *e,
    size_t elen)
{
	char path[] = "/tmp/test_pipe_sched.XXXXXX";
	int fd = mkstemp(path), rc;
	FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;

	if (f == NULL)
		return -99;
	fputs(text, f);
	fclose(f);
	rc = pipe_sched_file(s, path, m, w, e, elen);
	unlink(path);
	return rc;
}

/* A built-in schedule's passes written as a file, slots its clocks,
 * build the same tables: clocks and action lists. */
static void
check_file_same(enum pipe_sched_kind kind, int m, int w)
{
	struct pipe_sched a, b = { 0 };
	char e[256], what[128], *text = malloc(64 * (size_t)m * w + 32);
	size_t len = 0;
	int i, j, ok;

	pipe_sched_build(&a, kind, m, w, e, sizeof(e));
	len += (size_t)sprintf(text, "rank,slot,action\n");
	for (j = w - 1; j >= 0; j--)	/* rows in any order */
		for (i = 0; i < m; i++) {
			len += (size_t)sprintf(text + len,
			    "%d,%d,F%d\n%d,%d,B%d\n", j, a.fclock[j * m + i],
			    i, j, a.bclock[j * m + i], i);
			if (a.split)
				len += (size_t)sprintf(text + len,
				    "%d,%d,W%d\n", j, a.wclock[j * m + i], i);
		}
	snprintf(what, sizeof(what), "%s M=%d W=%d as a file: the same "
	    "tables", pipe_sched_name(kind), m, w);
	ok = from_file(&b, text, m, w, e, sizeof(e)) == 0;
	if (!ok)
		printf("# %s\n", e);
	ok = ok && b.nclocks == a.nclocks && b.kind == PIPE_SCHED_FILE &&
	    memcmp(a.fclock, b.fclock, (size_t)m * w * sizeof(int)) == 0 &&
	    memcmp(a.bclock, b.bclock, (size_t)m * w * sizeof(int)) == 0 &&
	    memcmp(a.wclock, b.wclock, (size_t)m * w * sizeof(int)) == 0 &&
	    pipe_sched_digest(&a) == pipe_sched_digest(&b);
	for (j = 0; ok && j < w; j++)
		ok = a.nact[j] == b.nact[j] && memcmp(a.act[j], b.act[j],
		    (size_t)a.nact[j] * sizeof(*a.act[j])) == 0;
	UNIT_OK(ok, what);
	pipe_sched_free(&a);
	pipe_sched_free(&b);
	free(text);
}

/* Another order than the built-in ones (GPipe's backwards in reverse):
 * the runner's properties hold, W comes from the file. */
static void
check_file_reverse(void)
{
	static const char text[] =
	    "0,0,F0\n0,1,F1\n0,2,F2\n0,3,B2\n0,4,B1\n0,5,B0\n"
	    "1,0,F0\n1,1,F1\n1,2,F2\n1,3,B2\n1,4,B1\n1,5,B0\n";
	struct pipe_sched s;
	char e[256];

	if (!UNIT_OK(from_file(&s, text, 3, 0, e, sizeof(e)) == 0,
	    "reversed backwards: builds, 2 stages from the file"))
		return;
	UNIT_OK(s.w == 2 && fwd_before_bwd(&s) && pairs(&s) &&
	    runs_through(&s) && s.bclock[1 * 3 + 2] == 4 &&
	    s.bclock[0 * 3 + 0] == 7, "reversed backwards: placed on clocks, "
	    "sends pair, runs through");
	UNIT_CLOSE(pipe_sched_table_bubble(&s), 4.0 / 16.0, 1e-12, 0,
	    "reversed backwards: the table's bubble");
	pipe_sched_free(&s);
}

/* Bad files: -1, the reason naming the row. */
static void
check_file_bad(void)
{
	static const struct {
		const char *text, *want;
	} bad[] = {
		{ "0,0,F0\n0,1,B0\n1,0,F0\n1,1,B0\n1,2,X\n", "row 5: '1,2,X'" },
		{ "0,0,F0\n0,1,B0\n3,0,F0\n", "row 3: rank 3 is out of range" },
		{ "0,0,F0\n0,1,B0\n1,0,F0\n", "rank 1 has no B0" },
		{ "0,0,F0\n0,1,B0\n1,1,F0\n1,0,B0\n",
		    "row 4: B0 of rank 1 comes before its F0 (row 3)" },
		{ "0,0,F0\n0,1,B0\n1,0,F0\n1,0,B0\n",
		    "row 4: slot 0 of rank 1 again (row 3)" },
		{ "0,0,F0\n0,1,B0\n1,0,F0\n1,1,B0\n1,2,W0\n",
		    "rank 0 has no W0 (every rank runs F<i>, B<i> and W<i>" },
		{ "0,0,F0\n0,1,B0\n0,2,W0\n1,0,F0\n1,2,B0\n1,1,W0\n",
		    "row 6: W0 of rank 1 comes before its B0 (row 5)" },
		{ "0,0,F0\n0,1,B0\n0,2,W0\n1,0,F0\n1,1,B0\n1,2,W0\n"
		    "1,3,W0\n", "row 7: W0 of rank 1 again (row 6)" },
		{ "rank,slot,action\n\n", "no rows" },
	};
	static const char dead[] =
	    "0,0,F0\n0,1,B0\n0,2,F1\n0,3,B1\n"
	    "1,0,F0\n1,1,F1\n1,2,B0\n1,3,B1\n";
	struct pipe_sched s;
	char e[256], what[160];
	size_t k;

	for (k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
		snprintf(what, sizeof(what), "bad file %zu refused: %s", k,
		    bad[k].want);
		UNIT_OK(from_file(&s, bad[k].text, 1, 2, e, sizeof(e)) == -1 &&
		    strstr(e, bad[k].want) != NULL, what);
		printf("# %s\n", e);
	}
	UNIT_OK(from_file(&s, dead, 2, 2, e, sizeof(e)) == -1 &&
	    strstr(e, "deadlock: row 2 (rank 0, B0) waits for rank 1, row 6 "
	    "(rank 1, F1) waits for rank 0") != NULL,
	    "two ranks waiting on each other: a deadlock, naming their rows");
	printf("# %s\n", e);
}

int
main(void)
{
	struct pipe_sched s;
	enum pipe_sched_kind k;
	char e[256];
	int m, w;

	for (w = 1; w <= 5; w++)
		for (m = 1; m <= 9; m++) {
			check(PIPE_SCHED_GPIPE, m, w);
			check(PIPE_SCHED_1F1B, m, w);
			check(PIPE_SCHED_ZBH1, m, w);
		}
	check(PIPE_SCHED_1F1B, 32, 4);
	check_print();
	for (w = 1; w <= 4; w++)
		for (m = 1; m <= 6; m++) {
			check_file_same(PIPE_SCHED_GPIPE, m, w);
			check_file_same(PIPE_SCHED_1F1B, m, w);
			check_file_same(PIPE_SCHED_ZBH1, m, w);
		}
	check_file_reverse();
	check_file_bad();
	UNIT_OK(pipe_sched_build(&s, PIPE_SCHED_GPIPE, 0, 2, e, sizeof(e)) < 0,
	    "M = 0 is refused");
	UNIT_OK(pipe_sched_parse("1f1b", &k) == 0 && k == PIPE_SCHED_1F1B &&
	    pipe_sched_parse("gpipe", &k) == 0 && k == PIPE_SCHED_GPIPE &&
	    pipe_sched_parse("zb-h1", &k) == 0 && k == PIPE_SCHED_ZBH1 &&
	    pipe_sched_parse("zb", &k) < 0, "schedule names parse");
	UNIT_CLOSE(pipe_sched_bubble(PIPE_SCHED_1F1B, 4, 3, 1), 2.0 / 6.0, 1e-12,
	    0, "bubble formula");
	UNIT_CLOSE(pipe_sched_bubble(PIPE_SCHED_ZBH1, 8, 4, 1), 3.0 / 27.0, 1e-12,
	    0, "zb-h1 bubble formula, M >= W");
	UNIT_CLOSE(pipe_sched_bubble(PIPE_SCHED_ZBH1, 2, 4, 1), 5.0 / 11.0, 1e-12,
	    0, "zb-h1 bubble formula, M < W");
	return unit_done();
}
