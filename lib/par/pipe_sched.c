/* pipe_sched: schedules as per-stage pass orders, placed on clocks by
 * simulation and expanded into receive/compute/send action lists. A new
 * schedule is an order function and its row in schedules[] (or orders
 * from elsewhere: pipe_sched_file.c's); a new kind of pass (the weight
 * pass of a backward split in two, a second model chunk per stage) is a
 * case in ready() and expand(). */
#include <stdlib.h>
#include <string.h>

#include "cli/util.h"
#include "par/pipe_sched.h"

/* Stage j's passes in order (pipe_sched_passes of them), for m
 * micro-batches over w stages. */
typedef void (*order_fn)(struct pipe_pass *ord, int m, int w, int j);

/* GPipe: all forwards, then all backwards. */
static void
gpipe_order(struct pipe_pass *ord, int m, int w, int j)
{
	int i;

	(void)w, (void)j;
	for (i = 0; i < m; i++)
		ord[i] = (struct pipe_pass){ 'F', i };
	for (i = 0; i < m; i++)
		ord[m + i] = (struct pipe_pass){ 'B', i };
}

/* 1F1B: w-1-j warm-up forwards (at most m), then forward and backward
 * alternating, then the remaining backwards. With defer >= 0 the
 * backward is split: after each B the oldest W passes run while more
 * than defer of them wait, and the rest at the end. */
static void
f1b1_split(struct pipe_pass *ord, int m, int w, int j, int defer)
{
	int k = 0, f = 0, b = 0, wd = 0, warm = w - 1 - j < m ? w - 1 - j : m;

	while (f < warm)
		ord[k++] = (struct pipe_pass){ 'F', f++ };
	while (b < m) {
		if (f < m)
			ord[k++] = (struct pipe_pass){ 'F', f++ };
		ord[k++] = (struct pipe_pass){ 'B', b++ };
		while (defer >= 0 && b - wd > defer)
			ord[k++] = (struct pipe_pass){ 'W', wd++ };
	}
	while (defer >= 0 && wd < m)
		ord[k++] = (struct pipe_pass){ 'W', wd++ };
}

static void
f1b1_order(struct pipe_pass *ord, int m, int w, int j)
{
	f1b1_split(ord, m, w, j, -1);
}

/* ZB-H1: 1F1B's order of F and B with stage j's W passes deferred, j of
 * them kept waiting: the last stage's wait fills the slots 1F1B leaves
 * idle at the end of the earlier stages, each stage holds at most w
 * micro-batches from F to W (1F1B's stage 0), and with unit passes the
 * table meets the closed form (pipe_sched_bubble). */
static void
zbh1_order(struct pipe_pass *ord, int m, int w, int j)
{
	f1b1_split(ord, m, w, j, j);
}

/* Indexed by enum pipe_sched_kind. */
static const struct {
	const char *name;
	order_fn order;
	int split;
} schedules[] = {
	[PIPE_SCHED_GPIPE] = { "gpipe", gpipe_order, 0 },
	[PIPE_SCHED_1F1B] = { "1f1b", f1b1_order, 0 },
	[PIPE_SCHED_ZBH1] = { "zb-h1", zbh1_order, 1 },
};

int
pipe_sched_parse(const char *s, enum pipe_sched_kind *out)
{
	size_t k;

	for (k = 0; k < sizeof(schedules) / sizeof(schedules[0]); k++)
		if (strcmp(s, schedules[k].name) == 0) {
			*out = (enum pipe_sched_kind)k;
			return 0;
		}
	return -1;
}

const char *
pipe_sched_name(enum pipe_sched_kind k)
{
	return k == PIPE_SCHED_FILE ? "file" : schedules[k].name;
}

int
pipe_sched_passes(int m, int split)
{
	return (split ? 3 : 2) * m;
}

double
pipe_sched_bubble(enum pipe_sched_kind kind, int m, int w)
{
	if (kind != PIPE_SCHED_ZBH1)
		return (double)(w - 1) / (double)(m + w - 1);
	if (m >= w)
		return (double)(w - 1) / (double)(3 * m + w - 1);
	return (double)(2 * w - m - 1) / (double)(2 * m + 2 * w - 1);
}

const char *
pipe_sched_formula(enum pipe_sched_kind kind, int m, int w)
{
	if (kind != PIPE_SCHED_ZBH1)
		return "(W-1)/(M+W-1)";
	return m >= w ? "(W-1)/(3M+W-1)" : "(2W-M-1)/(2M+2W-1)";
}

/* Whether the input of stage j's pass p exists before clock t: a forward
 * needs the previous stage's forward (stage 0 has its batch at once), a
 * backward the next stage's backward (the last stage its own forward); a
 * weight pass only the stage's own B, which its order puts before it. */
static int
ready(const struct pipe_sched *s, int j, const struct pipe_pass *p, int t)
{
	int m = s->m, dep;

	if ((p->kind == 'F' && j == 0) || p->kind == 'W')
		return 1;
	if (p->kind == 'F')
		dep = s->fclock[(j - 1) * m + p->mb];
	else if (j == s->w - 1)
		dep = s->fclock[j * m + p->mb];
	else
		dep = s->bclock[(j + 1) * m + p->mb];
	return dep >= 0 && dep < t;
}

/* One clock per pass; a pass runs at the first clock after its input
 * exists and after the stage's previous pass. A clock where no stage
 * can run its next pass ends it: they wait on each other (the stages'
 * positions left in next). */
static int
simulate(struct pipe_sched *s, struct pipe_pass *const *ord, int *next)
{
	int m = s->m, w = s->w, t, j, moved;
	int np = pipe_sched_passes(m, s->split), left = np * w;
	int *done = calloc((size_t)w, sizeof(int));

	if (done == NULL)
		return -1;
	for (j = 0; j < m * w; j++)
		s->fclock[j] = s->bclock[j] = s->wclock[j] = -1;
	for (t = 0; left > 0; t++) {
		for (j = 0; j < w; j++) {
			const struct pipe_pass *p = &ord[j][next[j]];

			done[j] = next[j] < np && ready(s, j, p, t);
			if (done[j])
				(p->kind == 'F' ? s->fclock : p->kind == 'B' ?
				    s->bclock : s->wclock)[j * m + p->mb] = t;
		}
		for (moved = 0, j = 0; j < w; j++) {
			next[j] += done[j];
			left -= done[j];
			moved |= done[j];
		}
		if (!moved)
			break;
	}
	s->nclocks = t;
	free(done);
	return left > 0 ? -2 : 0;
}

static void
add(struct pipe_sched *s, int j, enum pipe_op op, int mb, int peer, int clock)
{
	s->act[j][s->nact[j]++] = (struct pipe_action){ op, mb, peer, clock };
}

/* Expands stage j's passes, in clock order, into actions: a pass's input
 * received, the pass, its output sent (a weight pass: itself alone). */
static void
expand(struct pipe_sched *s, int j, const struct pipe_pass *ord)
{
	int k, m = s->m, last = j == s->w - 1;

	for (k = 0; k < pipe_sched_passes(m, s->split); k++) {
		int i = ord[k].mb;

		if (ord[k].kind == 'W')
			add(s, j, PIPE_WGT, i, -1, s->wclock[j * m + i]);
		else if (ord[k].kind == 'F') {
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

/* The tables' memory for m micro-batches over w stages. */
static int
sched_alloc(struct pipe_sched *s, enum pipe_sched_kind kind, int m, int w,
    int split)
{
	int j;

	s->kind = kind, s->m = m, s->w = w, s->split = split;
	s->fclock = malloc((size_t)m * w * sizeof(int));
	s->bclock = malloc((size_t)m * w * sizeof(int));
	s->wclock = malloc((size_t)m * w * sizeof(int));
	s->act = calloc((size_t)w, sizeof(*s->act));
	s->nact = calloc((size_t)w, sizeof(int));
	if (!s->fclock || !s->bclock || !s->wclock || !s->act || !s->nact)
		return -1;
	for (j = 0; j < w; j++)
		/* F and B of at most 3 actions each, W of one */
		if ((s->act[j] = malloc(7 * (size_t)m *
		    sizeof(struct pipe_action))) == NULL)
			return -1;
	return 0;
}

int
pipe_sched_orders(struct pipe_sched *s, enum pipe_sched_kind kind, int m,
    int w, int split, struct pipe_pass *const *ord, int *at, char *err,
    size_t errlen)
{
	int j, rc;

	memset(s, 0, sizeof(*s));
	memset(at, 0, (size_t)w * sizeof(int));
	if (sched_alloc(s, kind, m, w, split) < 0 ||
	    (rc = simulate(s, ord, at)) == -1) {
		pipe_sched_free(s);
		return cli_fail(err, errlen, "out of memory for a schedule of "
		    "%d x %d", m, w);
	}
	if (rc < 0) {
		pipe_sched_free(s);
		cli_fail(err, errlen, "the stages' orders deadlock");
		return -2;
	}
	for (j = 0; j < w; j++)
		expand(s, j, ord[j]);
	return 0;
}

int
pipe_sched_build(struct pipe_sched *s, enum pipe_sched_kind kind, int m,
    int w, char *err, size_t errlen)
{
	struct pipe_pass **ord = NULL;
	int j, *at = NULL, rc = -1;

	memset(s, 0, sizeof(*s));
	if (m < 1 || w < 1)
		return cli_fail(err, errlen, "schedule needs at least one "
		    "micro-batch and one stage (got %d and %d)", m, w);
	if ((size_t)kind >= sizeof(schedules) / sizeof(schedules[0]))
		return cli_fail(err, errlen, "no built-in schedule %d", kind);
	ord = calloc((size_t)w, sizeof(*ord));
	at = calloc((size_t)w, sizeof(int));
	for (j = 0; ord != NULL && at != NULL && j < w; j++) {
		if ((ord[j] = malloc((size_t)pipe_sched_passes(m,
		    schedules[kind].split) * sizeof(**ord))) == NULL)
			break;
		schedules[kind].order(ord[j], m, w, j);
	}
	if (ord == NULL || at == NULL || j < w)
		cli_fail(err, errlen, "out of memory for a schedule of %d x %d",
		    m, w);
	else	/* the built-in orders never deadlock */
		rc = pipe_sched_orders(s, kind, m, w, schedules[kind].split,
		    ord, at, err, errlen);
	for (j = 0; ord && j < w; j++)
		free(ord[j]);
	free(ord);
	free(at);
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
	free(s->wclock);
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
		if (s->wclock[j * s->m + i] == t) {
			*mb = i;
			return 'W';
		}
	}
	return 0;
}

int
pipe_sched_inflight(const struct pipe_sched *s, int j)
{
	int t, mb, c, live = 0, peak = 0, end = s->split ? 'W' : 'B';

	for (t = 0; t < s->nclocks; t++) {
		c = pipe_sched_cell(s, t, j, &mb);
		live += c == 'F' ? 1 : c == end ? -1 : 0;
		if (live > peak)
			peak = live;
	}
	return peak;
}

double
pipe_sched_table_bubble(const struct pipe_sched *s)
{
	double cells = (double)s->nclocks * s->w;

	return cells > 0 ? (cells - (double)pipe_sched_passes(s->m, s->split) *
	    s->w) / cells : 0;
}

unsigned long long
pipe_sched_digest(const struct pipe_sched *s)
{
	uint64_t h = CLI_FNV1A_INIT;
	size_t n = (size_t)s->m * s->w * sizeof(int);

	h = cli_fnv1a(h, s->fclock, n);
	h = cli_fnv1a(h, s->bclock, n);
	return cli_fnv1a(h, s->wclock, n);
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
	fprintf(f, "bubble %.4f (%d idle of %d cells)\n",
	    pipe_sched_table_bubble(s), (s->nclocks -
	    pipe_sched_passes(s->m, s->split)) * s->w, s->nclocks * s->w);
	return ferror(f) ? -1 : 0;
}
