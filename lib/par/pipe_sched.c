/* pipe_sched: GPipe and 1F1B as per-stage pass orders, placed on clocks
 * by simulation and expanded into receive/compute/send action lists. */
#include <stdlib.h>
#include <string.h>

#include "cli/util.h"
#include "par/pipe_sched.h"

static const char *const sched_names[] = { [PIPE_SCHED_GPIPE] = "gpipe",
	[PIPE_SCHED_1F1B] = "1f1b" };

int
pipe_sched_parse(const char *s, enum pipe_sched_kind *out)
{
	int i = cli_name_index(sched_names, 2, s);

	return i < 0 ? -1 : (*out = (enum pipe_sched_kind)i, 0);
}

const char *
pipe_sched_name(enum pipe_sched_kind k)
{
	return sched_names[k];
}

double
pipe_sched_bubble(int m, int w)
{
	return (double)(w - 1) / (double)(m + w - 1);
}

/* Stage j's passes in order, 2m of them: +i+1 forward of i, -(i+1)
 * backward. GPipe: all forwards, then all backwards. 1F1B: w-1-j warm-up
 * forwards (at most m), then forward and backward alternating, then the
 * remaining backwards. */
static void
pass_order(int *ord, enum pipe_sched_kind kind, int m, int w, int j)
{
	int i, k = 0, f = 0, b = 0, warm;

	if (kind == PIPE_SCHED_GPIPE) {
		for (i = 0; i < m; i++)
			ord[k++] = i + 1;
		for (i = 0; i < m; i++)
			ord[k++] = -(i + 1);
		return;
	}
	warm = w - 1 - j < m ? w - 1 - j : m;
	while (f < warm)
		ord[k++] = ++f;
	while (f < m) {
		ord[k++] = ++f;
		ord[k++] = -++b;
	}
	while (b < m)
		ord[k++] = -++b;
}

/* One clock per pass; a pass runs at the first clock after its inputs
 * exist (forward: the previous stage's forward; backward: the next
 * stage's backward) and after the stage's previous pass. */
static int
simulate(struct pipe_sched *s, int **ord)
{
	int m = s->m, w = s->w, t, j, left = 2 * m * w;
	int *next = calloc((size_t)w, sizeof(int));

	if (next == NULL)
		return -1;
	for (j = 0; j < m * w; j++)
		s->fclock[j] = s->bclock[j] = -1;
	for (t = 0; left > 0; t++) {
		int *done = calloc((size_t)w, sizeof(int));
		if (done == NULL) {
			free(next);
			return -1;
		}
		for (j = 0; j < w; j++) {
			int p, i, dep;

			if (next[j] == 2 * m)
				continue;
			p = ord[j][next[j]];
			i = (p > 0 ? p : -p) - 1;
			if (p > 0)
				dep = j == 0 ? -1 : s->fclock[(j - 1) * m + i];
			else
				dep = j == w - 1 ? s->fclock[j * m + i] :
				    s->bclock[(j + 1) * m + i];
			if (!(p > 0 && j == 0) && (dep < 0 || dep >= t))
				continue;
			(p > 0 ? s->fclock : s->bclock)[j * m + i] = t;
			done[j] = 1;
		}
		for (j = 0; j < w; j++)
			if (done[j]) {
				next[j]++;
				left--;
			}
		free(done);
		if (t > 4 * (m + w) + 4) {	/* cannot happen: orders are valid */
			free(next);
			return -1;
		}
	}
	s->nclocks = t;
	free(next);
	return 0;
}

static void
add(struct pipe_sched *s, int j, enum pipe_op op, int mb, int peer, int clock)
{
	s->act[j][s->nact[j]++] = (struct pipe_action){ op, mb, peer, clock };
}

/* Expands stage j's passes, in clock order, into actions. */
static void
expand(struct pipe_sched *s, int j, const int *ord)
{
	int k, m = s->m, last = j == s->w - 1;

	for (k = 0; k < 2 * m; k++) {
		int p = ord[k], i = (p > 0 ? p : -p) - 1;

		if (p > 0) {
			int c = s->fclock[j * m + i];
			if (j > 0)
				add(s, j, PIPE_RECV_ACT, i, j - 1, c);
			add(s, j, PIPE_FWD, i, -1, c);
			if (!last)
				add(s, j, PIPE_SEND_ACT, i, j + 1, c);
		} else {
			int c = s->bclock[j * m + i];
			if (!last)
				add(s, j, PIPE_RECV_GRAD, i, j + 1, c);
			add(s, j, PIPE_BWD, i, -1, c);
			if (j > 0)
				add(s, j, PIPE_SEND_GRAD, i, j - 1, c);
		}
	}
}

int
pipe_sched_build(struct pipe_sched *s, enum pipe_sched_kind kind, int m,
    int w, char *err, size_t errlen)
{
	int **ord = NULL, j, rc = -1;

	memset(s, 0, sizeof(*s));
	if (m < 1 || w < 1)
		return cli_fail(err, errlen, "schedule needs at least one "
		    "micro-batch and one stage (got %d and %d)", m, w);
	s->kind = kind, s->m = m, s->w = w;
	s->fclock = malloc((size_t)m * w * sizeof(int));
	s->bclock = malloc((size_t)m * w * sizeof(int));
	s->act = calloc((size_t)w, sizeof(*s->act));
	s->nact = calloc((size_t)w, sizeof(int));
	ord = calloc((size_t)w, sizeof(*ord));
	if (!s->fclock || !s->bclock || !s->act || !s->nact || !ord)
		goto oom;
	for (j = 0; j < w; j++) {
		ord[j] = malloc(2 * (size_t)m * sizeof(int));
		s->act[j] = malloc(6 * (size_t)m * sizeof(struct pipe_action));
		if (!ord[j] || !s->act[j])
			goto oom;
		pass_order(ord[j], kind, m, w, j);
	}
	if (simulate(s, ord) < 0)
		goto oom;
	for (j = 0; j < w; j++)
		expand(s, j, ord[j]);
	rc = 0;
	goto out;
oom:
	cli_fail(err, errlen, "out of memory for a schedule of %d x %d", m, w);
	pipe_sched_free(s);
out:
	for (j = 0; ord && j < w; j++)
		free(ord[j]);
	free(ord);
	return rc;
}

void
pipe_sched_free(struct pipe_sched *s)
{
	int j;

	for (j = 0; s->act && j < s->w; j++)
		free(s->act[j]);
	free(s->act);
	free(s->nact);
	free(s->fclock);
	free(s->bclock);
	memset(s, 0, sizeof(*s));
}

int
pipe_sched_cell(const struct pipe_sched *s, int t, int j, int *mb)
{
	int i;

	for (i = 0; i < s->m; i++) {
		if (s->fclock[j * s->m + i] == t) {
			*mb = i;
			return 'F';
		}
		if (s->bclock[j * s->m + i] == t) {
			*mb = i;
			return 'B';
		}
	}
	return 0;
}

int
pipe_sched_inflight(const struct pipe_sched *s, int j)
{
	int t, mb, c, live = 0, peak = 0;

	for (t = 0; t < s->nclocks; t++) {
		c = pipe_sched_cell(s, t, j, &mb);
		live += c == 'F' ? 1 : c == 'B' ? -1 : 0;
		if (live > peak)
			peak = live;
	}
	return peak;
}

int
pipe_sched_print(FILE *f, const struct pipe_sched *s)
{
	int t, j, mb, c;
	char cell[16];

	fprintf(f, "%-6s", "clock");
	for (j = 0; j < s->w; j++) {
		snprintf(cell, sizeof(cell), "s%d", j);
		fprintf(f, j == s->w - 1 ? " %s" : " %-5s", cell);
	}
	fputc('\n', f);
	for (t = 0; t < s->nclocks; t++) {
		fprintf(f, "%-6d", t);
		for (j = 0; j < s->w; j++) {
			c = pipe_sched_cell(s, t, j, &mb);
			if (c)
				snprintf(cell, sizeof(cell), "%c%d", c, mb);
			else
				snprintf(cell, sizeof(cell), ".");
			fprintf(f, j == s->w - 1 ? " %s" : " %-5s", cell);
		}
		fputc('\n', f);
	}
	return ferror(f) ? -1 : 0;
}
