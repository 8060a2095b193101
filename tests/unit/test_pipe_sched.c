/* test_pipe_sched: the GPipe and 1F1B tables against their closed forms,
 * and the properties a runner relies on: forward before backward, every
 * send matched in order by its receive, the action lists run to the end
 * with blocking receives, 1F1B holds at most W micro-batches. The
 * interleaved tables (V chunks per rank) likewise, against Megatron's
 * bubble when M is a multiple of W, and never worse than 1F1B's. */
#include <math.h>
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

/* On every rank each forward comes before its backward (split: before
 * its weight pass), each pass once, on every chunk. */
static int
fwd_before_bwd(const struct pipe_sched *s)
{
	int j, k, n = s->m * s->v, *seen = calloc((size_t)n, sizeof(int));
	int ok = 1;

	for (j = 0; j < s->w && ok; j++) {
		memset(seen, 0, (size_t)n * sizeof(int));
		for (k = 0; k < s->nact[j]; k++) {
			const struct pipe_action *a = &s->act[j][k];
			int *x = &seen[a->chunk * s->m + a->mb];
			if (a->op == PIPE_FWD)
				ok &= (*x)++ == 0;
			else if (a->op == PIPE_BWD)
				ok &= (*x)++ == 1;
			else if (a->op == PIPE_WGT)
				ok &= s->split && (*x)++ == 2;
		}
		for (k = 0; k < n; k++)
			ok &= seen[k] == (s->split ? 3 : 2);
	}
	free(seen);
	return ok;
}

/* Activations and gradients travel apart (the runner gives gradients a
 * sub-group of their own when ranks have chunks): which of the two an
 * action moves, or -1. */
static int
msg_kind(const struct pipe_action *a)
{
	return a->op == PIPE_SEND_ACT || a->op == PIPE_RECV_ACT ? 0 :
	    a->op == PIPE_SEND_GRAD || a->op == PIPE_RECV_GRAD ? 1 : -1;
}

static int
is_send(const struct pipe_action *a)
{
	return a->op == PIPE_SEND_ACT || a->op == PIPE_SEND_GRAD;
}

/* The messages of kind g rank j sends to q (send) or q receives from
 * j, in order, as micro-batch * v + the receiving chunk (the virtual
 * stage after the sender's for activations, before it for gradients);
 * how many. */
static int
messages(const struct pipe_sched *s, int j, int q, int g, int send,
    int *out)
{
	int k, n = 0, r = send ? j : q;

	for (k = 0; k < s->nact[r]; k++) {
		const struct pipe_action *a = &s->act[r][k];
		int to = (a->chunk * s->w + j + (g ? -1 : 1)) / s->w;

		if (msg_kind(a) == g && is_send(a) == send &&
		    a->peer == (send ? q : j))
			out[n++] = a->mb * s->v + (send ? to : a->chunk);
	}
	return n;
}

/* The sends of j to q of each kind, in order, are the receives of q
 * from j. */
static int
pairs(const struct pipe_sched *s)
{
	int j, q, g, n, ns, sa[512], ra[512];

	for (j = 0; j < s->w; j++)
		for (q = 0; q < s->w; q++)
			for (g = 0; g < 2; g++) {
				ns = messages(s, j, q, g, 1, sa);
				if (messages(s, j, q, g, 0, ra) != ns)
					return 0;
				for (n = 0; n < ns; n++)
					if (sa[n] != ra[n])
						return 0;
			}
	return 1;
}

/* Runs the action lists with buffered sends and blocking in-order
 * receives (per kind of message): every stage must reach its end. */
static int
runs_through(const struct pipe_sched *s)
{
	int w = s->w, *pc = calloc((size_t)w, sizeof(int));
	int *sent = calloc((size_t)w * w * 2, sizeof(int));
	int *got = calloc((size_t)w * w * 2, sizeof(int));
	int moved = 1, j, ok = 1;

	while (moved) {
		moved = 0;
		for (j = 0; j < w; j++) {
			const struct pipe_action *a;
			int g;
			if (pc[j] == s->nact[j])
				continue;
			a = &s->act[j][pc[j]];
			g = msg_kind(a);
			if (g >= 0 && is_send(a))
				sent[(j * w + a->peer) * 2 + g]++;
			else if (g >= 0) {
				int x = (a->peer * w + j) * 2 + g;
				if (got[x] == sent[x])
					continue;
				got[x]++;
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

/* A built-in schedule's passes written as a file (cells F<i>:<c> with v
 * chunks), slots its clocks, build the same tables: clocks and action
 * lists. */
static void
check_file_same(enum pipe_sched_kind kind, int m, int w, int v)
{
	struct pipe_sched a, b = { 0 };
	size_t n = (size_t)m * w * v;
	char e[256], what[128], *text = malloc(80 * n + 32), ch[16] = "";
	size_t len = 0;
	int i, j, c, k, ok;

	pipe_sched_build_virtual(&a, kind, m, w, v, e, sizeof(e));
	len += (size_t)sprintf(text, "rank,slot,action\n");
	for (j = w - 1; j >= 0; j--)	/* rows in any order */
		for (c = 0; c < v; c++)
			for (i = 0; i < m; i++) {
				k = (c * w + j) * m + i;
				if (v > 1)
					snprintf(ch, sizeof(ch), ":%d", c);
				len += (size_t)sprintf(text + len,
				    "%d,%d,F%d%s\n%d,%d,B%d%s\n", j,
				    a.fclock[k], i, ch, j, a.bclock[k], i, ch);
				if (a.split)
					len += (size_t)sprintf(text + len,
					    "%d,%d,W%d\n", j, a.wclock[k], i);
			}
	snprintf(what, sizeof(what), "%s M=%d W=%d V=%d as a file: the same "
	    "tables", pipe_sched_name(kind), m, w, v);
	ok = from_file(&b, text, m, w, e, sizeof(e)) == 0;
	if (!ok)
		printf("# %s\n", e);
	ok = ok && b.nclocks == a.nclocks && b.kind == PIPE_SCHED_FILE &&
	    b.v == v &&
	    memcmp(a.fclock, b.fclock, n * sizeof(int)) == 0 &&
	    memcmp(a.bclock, b.bclock, n * sizeof(int)) == 0 &&
	    memcmp(a.wclock, b.wclock, n * sizeof(int)) == 0 &&
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

/* The interleaved tables, W 1..6, M 1..16, V 1..4: each pass once per
 * chunk, F before B, sends paired with receives, no deadlock; V = 1 is
 * 1F1B's table; for M a multiple of W (M >= W) the step is 2(VM+W-1)
 * clocks, every rank busy 2VM of them: Megatron's (W-1)/(VM) of the
 * ideal time, the closed form, and rank j holds at most (V-1)W +
 * 2(W-1-j) + 1 chunk micro-batches (its warm-up and one); for any M the
 * bubble is at most 1F1B's, which a single micro-batch meets. */
/* What check_interleaved finds over all its tables. */
struct ilv {
	int props, v1, formula, held, below, one;
};

/* One interleaved table against 1F1B's for the same M and W. */
static void
interleaved_case(int w, int m, int v, struct ilv *x)
{
	struct pipe_sched s, f;
	size_t n = (size_t)m * w * sizeof(int);
	char e[256];
	double b, bf;

	if (pipe_sched_build_virtual(&s, PIPE_SCHED_INTERLEAVED, m, w, v, e,
	    sizeof(e)) < 0) {
		printf("# W=%d M=%d V=%d: %s\n", w, m, v, e);
		x->props = 0;
		return;
	}
	pipe_sched_build(&f, PIPE_SCHED_1F1B, m, w, e, sizeof(e));
	x->props &= fwd_before_bwd(&s) && pairs(&s) && runs_through(&s);
	if (v == 1)
		x->v1 &= s.nclocks == f.nclocks && memcmp(s.fclock, f.fclock,
		    n) == 0 && memcmp(s.bclock, f.bclock, n) == 0;
	b = pipe_sched_table_bubble(&s);
	bf = pipe_sched_table_bubble(&f);
	x->below &= b <= bf + 1e-12;
	if (m == 1)
		x->one &= fabs(b - bf) < 1e-12;
	if (m % w != 0)
		x->formula &= pipe_sched_bubble(PIPE_SCHED_INTERLEAVED, m, w,
		    v) < 0;
	else {
		x->formula &= s.nclocks == 2 * (v * m + w - 1) &&
		    fabs(pipe_sched_bubble(PIPE_SCHED_INTERLEAVED, m, w, v) -
		    b) < 1e-12;
		for (int j = 0; j < w; j++) {
			int want = v == 1 ? w - j : (v - 1) * w + 2 *
			    (w - 1 - j) + 1;
			x->held &= pipe_sched_inflight(&s, j) ==
			    (want < m * v ? want : m * v);
		}
	}
	pipe_sched_free(&s);
	pipe_sched_free(&f);
}

static void
check_interleaved(void)
{
	struct ilv x = { 1, 1, 1, 1, 1, 1 };

	for (int w = 1; w <= 6; w++)
		for (int m = 1; m <= 16; m++)
			for (int v = 1; v <= 4; v++)
				interleaved_case(w, m, v, &x);
	UNIT_OK(x.props, "interleaved W 1..6, M 1..16, V 1..4: each pass "
	    "once per chunk, F before B, sends pair with receives, runs "
	    "through");
	UNIT_OK(x.v1, "interleaved with V = 1 is 1F1B's table");
	UNIT_OK(x.formula, "interleaved, M a multiple of W: 2(VM+W-1) clocks, "
	    "bubble (W-1)/(VM+W-1); other M: no closed form (-1)");
	UNIT_OK(x.held, "interleaved, M a multiple of W: rank j holds (V-1)W "
	    "+ 2(W-1-j) + 1 chunk micro-batches at most");
	UNIT_OK(x.below, "interleaved: bubble at most 1F1B's for every M");
	UNIT_OK(x.one, "interleaved, M = 1: 1F1B's bubble (nothing to "
	    "overlap)");
}

/* Bad files with chunks: -1, the reason naming the row. */
static void
check_file_chunks_bad(void)
{
	static const struct {
		const char *text, *want;
	} bad[] = {
		/* chunk 1's B0 missing on rank 1 */
		{ "0,0,F0:0\n0,1,F0:1\n0,2,B0:1\n0,3,B0:0\n"
		    "1,0,F0:0\n1,1,F0:1\n1,2,B0:0\n",
		    "rank 1 has no B0:1 (every rank runs F<i> and B<i> of each "
		    "micro-batch i < 1 on each chunk)" },
		{ "0,0,B0:0\n0,1,F0:0\n0,2,F0:1\n0,3,B0:1\n"
		    "1,0,F0:0\n1,1,F0:1\n1,2,B0:1\n1,3,B0:0\n",
		    "row 1: B0:0 of rank 0 comes before its F0:0 (row 2)" },
		{ "0,0,F0:64\n", "row 1: chunk 64 is out of range" },
	};
	/* M = 2 on 2 ranks of 2 chunks: rank 0's chunk 1 runs micro-batch
	 * 1 before 0, and sends them so to rank 1's chunk 1, which takes
	 * 0 first */
	static const char order[] =
	    "0,0,F0:0\n0,1,F1:0\n0,2,F1:1\n0,3,F0:1\n"
	    "0,4,B0:1\n0,5,B1:1\n0,6,B0:0\n0,7,B1:0\n"
	    "1,0,F0:0\n1,1,F1:0\n1,2,F0:1\n1,3,F1:1\n"
	    "1,4,B0:1\n1,5,B1:1\n1,6,B0:0\n1,7,B1:0\n";
	struct pipe_sched s;
	char e[256], what[200];
	size_t k;

	for (k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
		snprintf(what, sizeof(what), "bad file with chunks %zu "
		    "refused: %s", k, bad[k].want);
		UNIT_OK(from_file(&s, bad[k].text, 1, 2, e, sizeof(e)) == -1 &&
		    strstr(e, bad[k].want) != NULL, what);
		printf("# %s\n", e);
	}
	UNIT_OK(from_file(&s, order, 2, 2, e, sizeof(e)) == -1 &&
	    strstr(e, "row 11: rank 1 runs F0:1 where rank 0 runs F1:1 (row "
	    "3): neighbouring ranks take the micro-batches in one order") !=
	    NULL, "chunks: the activations round the ring in the order the "
	    "next rank takes them");
	printf("# %s\n", e);
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
			check_file_same(PIPE_SCHED_GPIPE, m, w, 1);
			check_file_same(PIPE_SCHED_1F1B, m, w, 1);
			check_file_same(PIPE_SCHED_ZBH1, m, w, 1);
			check_file_same(PIPE_SCHED_INTERLEAVED, m, w, 2);
			check_file_same(PIPE_SCHED_INTERLEAVED, m, w, 3);
		}
	check_interleaved();
	check_file_chunks_bad();
	check_file_reverse();
	check_file_bad();
	UNIT_OK(pipe_sched_build(&s, PIPE_SCHED_GPIPE, 0, 2, e, sizeof(e)) < 0,
	    "M = 0 is refused");
	UNIT_OK(pipe_sched_parse("1f1b", &k) == 0 && k == PIPE_SCHED_1F1B &&
	    pipe_sched_parse("gpipe", &k) == 0 && k == PIPE_SCHED_GPIPE &&
	    pipe_sched_parse("zb-h1", &k) == 0 && k == PIPE_SCHED_ZBH1 &&
	    pipe_sched_parse("interleaved", &k) == 0 &&
	    k == PIPE_SCHED_INTERLEAVED &&
	    pipe_sched_parse("zb", &k) < 0, "schedule names parse");
	UNIT_CLOSE(pipe_sched_bubble(PIPE_SCHED_1F1B, 4, 3, 1), 2.0 / 6.0,
	    1e-12, 0, "bubble formula");
	UNIT_CLOSE(pipe_sched_bubble(PIPE_SCHED_ZBH1, 8, 4, 1), 3.0 / 27.0,
	    1e-12, 0, "zb-h1 bubble formula, M >= W");
	UNIT_CLOSE(pipe_sched_bubble(PIPE_SCHED_ZBH1, 2, 4, 1), 5.0 / 11.0,
	    1e-12, 0, "zb-h1 bubble formula, M < W");
	return unit_done();
}
