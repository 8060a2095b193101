/* test_pipe_sched: the GPipe and 1F1B tables against their closed forms,
 * and the properties a runner relies on: forward before backward, every
 * send matched in order by its receive, the action lists run to the end
 * with blocking receives, 1F1B holds at most W micro-batches. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* On every stage each forward comes before its backward, each pass once. */
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
		}
		for (k = 0; k < s->m; k++)
			ok &= seen[k] == 2;
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
		int want = kind == PIPE_SCHED_GPIPE ? m :
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
	    "9      B3    .\n";
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
		}
	check(PIPE_SCHED_1F1B, 32, 4);
	check_print();
	UNIT_OK(pipe_sched_build(&s, PIPE_SCHED_GPIPE, 0, 2, e, sizeof(e)) < 0,
	    "M = 0 is refused");
	UNIT_OK(pipe_sched_parse("1f1b", &k) == 0 && k == PIPE_SCHED_1F1B &&
	    pipe_sched_parse("gpipe", &k) == 0 && k == PIPE_SCHED_GPIPE &&
	    pipe_sched_parse("zb", &k) < 0, "schedule names parse");
	UNIT_CLOSE(pipe_sched_bubble(4, 3), 2.0 / 6.0, 1e-12, 0, "bubble formula");
	return unit_done();
}
