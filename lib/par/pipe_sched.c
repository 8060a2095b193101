/* pipe_sched: schedules as per-stage pass orders, placed on clocks by
 * simulation and expanded into receive/compute/send action lists. A new
 * schedule is an order function and its row in schedules[] (or orders
 * from elsewhere: pipe_sched_file.c's); a new kind of pass (the weight
 * pass of a backward split in two) is a case in ready() and expand().
 * With v chunks per rank (interleaved), the virtual stages c*w + j form
 * the pipeline and every table is indexed by them. */
#include <stdlib.h>
#include <string.h>

#include "cli/util.h"
#include "par/pipe_sched.h"

/* Rank j's passes in order (v * pipe_sched_passes of them), for m
 * micro-batches over w ranks of v chunks each. */
typedef void (*order_fn)(struct pipe_pass *ord, int m, int w, int v, int j);

/* GPipe: all forwards, then all backwards. */
static void
gpipe_order(struct pipe_pass *ord, int m, int w, int v, int j)
{
	int i;

	(void)w, (void)v, (void)j;
	for (i = 0; i < m; i++)
		ord[i] = (struct pipe_pass){ 'F', i, 0 };
	for (i = 0; i < m; i++)
		ord[m + i] = (struct pipe_pass){ 'B', i, 0 };
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
		ord[k++] = (struct pipe_pass){ 'F', f++, 0 };
	while (b < m) {
		if (f < m)
			ord[k++] = (struct pipe_pass){ 'F', f++, 0 };
		ord[k++] = (struct pipe_pass){ 'B', b++, 0 };
		while (defer >= 0 && b - wd > defer)
			ord[k++] = (struct pipe_pass){ 'W', wd++, 0 };
	}
	while (defer >= 0 && wd < m)
		ord[k++] = (struct pipe_pass){ 'W', wd++, 0 };
}

static void
f1b1_order(struct pipe_pass *ord, int m, int w, int v, int j)
{
	(void)v;
	f1b1_split(ord, m, w, j, -1);
}

/* ZB-H1: 1F1B's order of F and B with stage j's W passes deferred, j of
 * them kept waiting: the last stage's wait fills the slots 1F1B leaves
 * idle at the end of the earlier stages, each stage holds at most w
 * micro-batches from F to W (1F1B's stage 0), and with unit passes the
 * table meets the closed form (pipe_sched_bubble). */
static void
zbh1_order(struct pipe_pass *ord, int m, int w, int v, int j)
{
	(void)v;
	f1b1_split(ord, m, w, j, j);
}

/* The k-th forward (or backward) pass of the interleaved order, the same
 * on every rank: the micro-batches in groups of w, each group through
 * chunk 0, 1, .. v-1 (backwards: v-1 down to 0) before the next group
 * starts. */
static struct pipe_pass
interleaved_pass(char kind, int k, int w, int v)
{
	int group = k / (w * v), r = k % (w * v), c = r / w;

	return (struct pipe_pass){ kind, group * w + r % w,
	    kind == 'B' ? v - 1 - c : c };
}

/* Megatron's interleaved 1F1B: (v-1)w + 2(w-1-j) warm-up forwards (the
 * forwards rank j can run before its first backward comes back), then
 * forward and backward alternating, then the remaining backwards. Its
 * groups need m to be a multiple of w; for any other m the order is the
 * one of the next multiple with the passes of the micro-batches past m
 * left out. That keeps it free of deadlock (leaving passes out of orders
 * that never wait on each other cannot make them) and the messages in
 * one order on both ends; the table's bubble is then at most that of
 * the padded order. With v = 1 it is 1F1B. */
static void
interleaved_order(struct pipe_pass *ord, int m, int w, int v, int j)
{
	int n = (m + w - 1) / w * w * v, k = 0, f = 0, b = 0;
	int warm = v > 1 ? (v - 1) * w + 2 * (w - 1 - j) : w - 1 - j;
	struct pipe_pass p;

	if (warm > n)
		warm = n;
	while (b < n) {
		if (f < n && (f < warm || f - warm <= b)) {
			p = interleaved_pass('F', f++, w, v);
		} else
			p = interleaved_pass('B', b++, w, v);
		if (p.mb < m)
			ord[k++] = p;
	}
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
	[PIPE_SCHED_INTERLEAVED] = { "interleaved", interleaved_order, 0 },
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
pipe_sched_bubble(enum pipe_sched_kind kind, int m, int w, int v)
{
	if (kind == PIPE_SCHED_INTERLEAVED)
		return m % w ? -1 : (double)(w - 1) / (double)(v * m + w - 1);
	if (kind != PIPE_SCHED_ZBH1)
		return (double)(w - 1) / (double)(m + w - 1);
	if (m >= w)
		return (double)(w - 1) / (double)(3 * m + w - 1);
	return (double)(2 * w - m - 1) / (double)(2 * m + 2 * w - 1);
}

const char *
pipe_sched_formula(enum pipe_sched_kind kind, int m, int w, int v)
{
	(void)v;
	if (kind == PIPE_SCHED_INTERLEAVED)
		return m % w ? "(the table's)" : "(W-1)/(VM+W-1)";
	if (kind != PIPE_SCHED_ZBH1)
		return "(W-1)/(M+W-1)";
	return m >= w ? "(W-1)/(3M+W-1)" : "(2W-M-1)/(2M+2W-1)";
}

/* Where the clocks of virtual stage `stage`, micro-batch mb lie. */
static int
at(const struct pipe_sched *s, int stage, int mb)
{
	return stage * s->m + mb;
}

/* Whether the input of rank j's pass p exists before clock t: a forward
 * needs the previous virtual stage's forward (stage 0 has its batch at
 * once), a backward the next stage's backward (the last stage its own
 * forward); a weight pass only the stage's own B, which its order puts
 * before it. */
static int
ready(const struct pipe_sched *s, int j, const struct pipe_pass *p, int t)
{
	int vs = p->chunk * s->w + j, dep;

	if ((p->kind == 'F' && vs == 0) || p->kind == 'W')
		return 1;
	if (p->kind == 'F')
		dep = s->fclock[at(s, vs - 1, p->mb)];
	else if (vs == s->w * s->v - 1)
		dep = s->fclock[at(s, vs, p->mb)];
	else
		dep = s->bclock[at(s, vs + 1, p->mb)];
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
	int np = s->v * pipe_sched_passes(m, s->split), left = np * w;
	int *done = calloc((size_t)w, sizeof(int));

	if (done == NULL)
		return -1;
	for (j = 0; j < m * w * s->v; j++)
		s->fclock[j] = s->bclock[j] = s->wclock[j] = -1;
	for (t = 0; left > 0; t++) {
		for (j = 0; j < w; j++) {
			const struct pipe_pass *p = &ord[j][next[j]];

			done[j] = next[j] < np && ready(s, j, p, t);
			if (done[j])
				(p->kind == 'F' ? s->fclock : p->kind == 'B' ?
				    s->bclock : s->wclock)[at(s, p->chunk * w +
				    j, p->mb)] = t;
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
add(struct pipe_sched *s, int j, enum pipe_op op, const struct pipe_pass *p,
    int peer, int clock)
{
	s->act[j][s->nact[j]++] = (struct pipe_action){ op, p->mb, peer,
	    clock, p->chunk };
}

/* Expands rank j's passes, in clock order, into actions: a pass's input
 * received, the pass, its output sent (a weight pass: itself alone); the
 * neighbours of a virtual stage are on the ranks before and after j,
 * round the ring. */
static void
expand(struct pipe_sched *s, int j, const struct pipe_pass *ord)
{
	int k, w = s->w, prev = (j + w - 1) % w, next = (j + 1) % w;

	for (k = 0; k < s->v * pipe_sched_passes(s->m, s->split); k++) {
		const struct pipe_pass *p = &ord[k];
		int vs = p->chunk * w + j, i = at(s, vs, p->mb);
		int first = vs == 0, last = vs == w * s->v - 1;
		int fc = s->fclock[i], bc = s->bclock[i];

		if (p->kind == 'W')
			add(s, j, PIPE_WGT, p, -1, s->wclock[i]);
		else if (p->kind == 'F') {
			if (!first)
				add(s, j, PIPE_RECV_ACT, p, prev, fc);
			add(s, j, PIPE_FWD, p, -1, fc);
			if (!last)
				add(s, j, PIPE_SEND_ACT, p, next, fc);
		} else {
			if (!last)
				add(s, j, PIPE_RECV_GRAD, p, next, bc);
			add(s, j, PIPE_BWD, p, -1, bc);
			if (!first)
				add(s, j, PIPE_SEND_GRAD, p, prev, bc);
		}
	}
}

/* The tables' memory for m micro-batches over w ranks of v chunks. */
static int
sched_alloc(struct pipe_sched *s, enum pipe_sched_kind kind, int m, int w,
    int v, int split)
{
	size_t n = (size_t)m * w * v;
	int j;

	s->kind = kind, s->m = m, s->w = w, s->v = v, s->split = split;
	s->fclock = malloc(n * sizeof(int));
	s->bclock = malloc(n * sizeof(int));
	s->wclock = malloc(n * sizeof(int));
	s->act = calloc((size_t)w, sizeof(*s->act));
	s->nact = calloc((size_t)w, sizeof(int));
	if (!s->fclock || !s->bclock || !s->wclock || !s->act || !s->nact)
		return -1;
	for (j = 0; j < w; j++)
		/* F and B of at most 3 actions each, W of one */
		if ((s->act[j] = malloc(7 * (size_t)m * v *
		    sizeof(struct pipe_action))) == NULL)
			return -1;
	return 0;
}

int
pipe_sched_orders(struct pipe_sched *s, enum pipe_sched_kind kind, int m,
    int w, int v, int split, struct pipe_pass *const *ord, int *at,
    char *err, size_t errlen)
{
	int j, rc;

	memset(s, 0, sizeof(*s));
	memset(at, 0, (size_t)w * sizeof(int));
	if (sched_alloc(s, kind, m, w, v, split) < 0 ||
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
	return pipe_sched_build_virtual(s, kind, m, w, 1, err, errlen);
}

int
pipe_sched_build_virtual(struct pipe_sched *s, enum pipe_sched_kind kind,
    int m, int w, int v, char *err, size_t errlen)
{
	struct pipe_pass **ord = NULL;
	int j, *at = NULL, rc = -1;

	memset(s, 0, sizeof(*s));
	if (m < 1 || w < 1 || v < 1)
		return cli_fail(err, errlen, "schedule needs at least one "
		    "micro-batch, stage and chunk (got %d, %d and %d)", m, w,
		    v);
	if ((size_t)kind >= sizeof(schedules) / sizeof(schedules[0]))
		return cli_fail(err, errlen, "no built-in schedule %d", kind);
	if (v > 1 && kind != PIPE_SCHED_INTERLEAVED)
		return cli_fail(err, errlen, "%d chunks per rank need the "
		    "interleaved schedule, not %s", v, schedules[kind].name);
	ord = calloc((size_t)w, sizeof(*ord));
	at = calloc((size_t)w, sizeof(int));
	for (j = 0; ord != NULL && at != NULL && j < w; j++) {
		if ((ord[j] = malloc((size_t)v * pipe_sched_passes(m,
		    schedules[kind].split) * sizeof(**ord))) == NULL)
			break;
		schedules[kind].order(ord[j], m, w, v, j);
	}
	if (ord == NULL || at == NULL || j < w)
		cli_fail(err, errlen, "out of memory for a schedule of %d x %d",
		    m, w);
	else	/* the built-in orders never deadlock */
		rc = pipe_sched_orders(s, kind, m, w, v, schedules[kind].split,
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
pipe_sched_cell(const struct pipe_sched *s, int t, int j, int *mb,
    int *chunk)
{
	int i, c, k;

	for (c = 0; c < s->v; c++)
		for (i = 0; i < s->m; i++) {
			k = at(s, c * s->w + j, i);
			*mb = i, *chunk = c;
			if (s->fclock[k] == t)
				return 'F';
			if (s->bclock[k] == t)
				return 'B';
			if (s->wclock[k] == t)
				return 'W';
		}
	return 0;
}

int
pipe_sched_inflight(const struct pipe_sched *s, int j)
{
	int t, mb, ch, c, live = 0, peak = 0, end = s->split ? 'W' : 'B';

	for (t = 0; t < s->nclocks; t++) {
		c = pipe_sched_cell(s, t, j, &mb, &ch);
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
	    s->v * s->w) / cells : 0;
}

unsigned long long
pipe_sched_digest(const struct pipe_sched *s)
{
	uint64_t h = CLI_FNV1A_INIT;
	size_t n = (size_t)s->m * s->w * s->v * sizeof(int);

	h = cli_fnv1a(h, s->fclock, n);
	h = cli_fnv1a(h, s->bclock, n);
	return cli_fnv1a(h, s->wclock, n);
}

/* Rank j's pass at clock t, from its action list (in clock order; *at
 * its place, moved on), as a cell: F<i>, F<i>:<c>, or "." (idle). */
static void
cell_at(const struct pipe_sched *s, int j, int t, int *at, char *cell,
    size_t len)
{
	static const char kind[] = { [PIPE_FWD] = 'F', [PIPE_BWD] = 'B',
	    [PIPE_WGT] = 'W' };
	const struct pipe_action *a;

	for (; *at < s->nact[j]; ++*at) {
		a = &s->act[j][*at];
		if (a->op != PIPE_FWD && a->op != PIPE_BWD && a->op != PIPE_WGT)
			continue;
		if (a->clock != t)
			break;
		++*at;
		if (s->v > 1)
			snprintf(cell, len, "%c%d:%d", kind[a->op], a->mb,
			    a->chunk);
		else
			snprintf(cell, len, "%c%d", kind[a->op], a->mb);
		return;
	}
	snprintf(cell, len, ".");
}

int
pipe_sched_print(FILE *f, const struct pipe_sched *s)
{
	int t, j, wd = s->v > 1 ? 7 : 5, *at = calloc((size_t)s->w,
	    sizeof(int));
	char cell[32];

	if (at == NULL)
		return -1;
	fprintf(f, "%-6s", "clock");
	for (j = 0; j < s->w; j++) {
		snprintf(cell, sizeof(cell), "s%d", j);
		fprintf(f, " %-*s", j == s->w - 1 ? 0 : wd, cell);
	}
	fputc('\n', f);
	for (t = 0; t < s->nclocks; t++) {
		fprintf(f, "%-6d", t);
		for (j = 0; j < s->w; j++) {
			cell_at(s, j, t, &at[j], cell, sizeof(cell));
			fprintf(f, " %-*s", j == s->w - 1 ? 0 : wd, cell);
		}
		fputc('\n', f);
	}
	free(at);
	fprintf(f, "bubble %.4f (%d idle of %d cells)\n",
	    pipe_sched_table_bubble(s), (s->nclocks - s->v *
	    pipe_sched_passes(s->m, s->split)) * s->w, s->nclocks * s->w);
	return ferror(f) ? -1 : 0;
}

int
pipe_sched_print_csv(FILE *f, const struct pipe_sched *s)
{
	char cell[32];
	int at;

	for (int j = 0; j < s->w; j++)
		for (int t = at = 0; t < s->nclocks; t++) {
			cell_at(s, j, t, &at, cell, sizeof(cell));
			if (strcmp(cell, ".") != 0)
				fprintf(f, "%d,%d,%s\n", j, t, cell);
		}
	return ferror(f) ? -1 : 0;
}
