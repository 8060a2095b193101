/* pipe_sched: pipeline schedules as tables computed before a step. A
 * schedule gives every stage the order of its forward and backward
 * passes; a clock simulation (one clock per pass, a pass starts once its
 * input exists) places them on clocks, and every stage's action list
 * (receive, compute, send) follows its clock order, so each send is
 * matched by its receive in order and no rank can wait on one that waits
 * on it. Pure: no sockets, no timing. */
#ifndef COLLX_PIPE_SCHED_H
#define COLLX_PIPE_SCHED_H

#include <stddef.h>
#include <stdio.h>

/* PIPE_SCHED_FILE: the orders a schedule file gives (pipe_sched_file). */
enum pipe_sched_kind { PIPE_SCHED_GPIPE, PIPE_SCHED_1F1B, PIPE_SCHED_ZBH1,
	PIPE_SCHED_INTERLEAVED, PIPE_SCHED_FILE };

/* A forward ('F') or backward ('B') pass of micro-batch mb through the
 * rank's chunk of layers (0 but for virtual stages: chunk c of rank j is
 * virtual stage c*w + j of the model's c*w layer runs); in a split
 * schedule B is the backward's input-gradient part and 'W' its
 * weight-gradient part, which needs only the stage's own B before it. */
struct pipe_pass {
	char kind;
	int mb, chunk;
};

/* Actions, in the order a stage performs them; stage +- 1 is the
 * virtual stage's neighbour, on rank j +- 1 (mod w). */
enum pipe_op {
	PIPE_RECV_ACT,		/* activation of mb from stage - 1 */
	PIPE_FWD,
	PIPE_SEND_ACT,		/* activation of mb to stage + 1 */
	PIPE_RECV_GRAD,		/* gradient of mb from stage + 1 */
	PIPE_BWD,
	PIPE_SEND_GRAD,		/* gradient of mb to stage - 1 */
	PIPE_WGT		/* weight gradients of mb (split schedules) */
};

struct pipe_action {
	enum pipe_op op;
	int mb, peer, clock;	/* peer: the other stage, or -1 */
	int chunk;		/* the rank's chunk it runs on */
};

struct pipe_sched {
	enum pipe_sched_kind kind;
	int m, w, nclocks;
	int v;				/* chunks per rank (virtual stages) */
	int split;			/* B, W passes: 3m a chunk, else 2m */
	int *fclock, *bclock, *wclock;	/* [v*w*m]: virtual stage s = c*w + j,
					 * mb i at s*m + i; wclock -1 unless
					 * split */
	struct pipe_action **act;	/* per stage */
	int *nact;
};

int pipe_sched_parse(const char *s, enum pipe_sched_kind *out);
const char *pipe_sched_name(enum pipe_sched_kind k);

/* Builds the tables for m micro-batches over w stages (both >= 1). 0, or
 * -1 with the reason in err. */
int pipe_sched_build(struct pipe_sched *s, enum pipe_sched_kind kind, int m,
    int w, char *err, size_t errlen);
/* The same with v chunks per rank (>= 1; above 1 for interleaved only). */
int pipe_sched_build_virtual(struct pipe_sched *s, enum pipe_sched_kind kind,
    int m, int w, int v, char *err, size_t errlen);
/* Passes per stage: 3m when split (F, B, W), else 2m. */
int pipe_sched_passes(int m, int split);
/* Builds them from every rank's pass order ord[j][0 .. v*passes), which
 * holds each micro-batch's F, then its B, then (split) its W once on
 * each chunk; the messages from one rank to the next (activations) and
 * back (gradients) are in one order on both (they match in order). 0;
 * -1 with the reason in err; -2 when the orders deadlock, with at[j] the
 * pass rank j waits at (v*passes: it finished). */
int pipe_sched_orders(struct pipe_sched *s, enum pipe_sched_kind kind,
    int m, int w, int v, int split, struct pipe_pass *const *ord, int *at,
    char *err, size_t errlen);
/* Reads a schedule file (rows rank,slot,action; see collx-pipe(1)) for m
 * micro-batches over w stages (w 0: as many as the file has ranks; the
 * chunks per rank: as many as its actions name, :<chunk>) and
 * builds its tables, checked for completeness, dependency order and
 * deadlock: 0, or -1 with the reason naming the row (bad input). */
int pipe_sched_file(struct pipe_sched *s, const char *path, int m, int w,
    char *err, size_t errlen);
/* A digest of the pass orders, for ranks to agree on. */
unsigned long long pipe_sched_digest(const struct pipe_sched *s);
void pipe_sched_free(struct pipe_sched *s);

/* What rank j does at clock t: 'F', 'B' or 'W' with *mb and *chunk set,
 * or 0 (idle). */
int pipe_sched_cell(const struct pipe_sched *s, int t, int j, int *mb,
    int *chunk);
/* Micro-batches whose forward has run and backward (split: weight
 * pass) not yet, at most, on rank j (a micro-batch on two chunks counts
 * twice). */
int pipe_sched_inflight(const struct pipe_sched *s, int j);
/* The clock-by-stage table: a header, then one row per clock, cells
 * F<i>, B<i>, W<i> (with :<chunk> when v > 1) or ".", and last the line
 * "bubble X (I idle of N cells)". */
int pipe_sched_print(FILE *f, const struct pipe_sched *s);
/* The table as a schedule file (pipe_sched_file reads it back): a row
 * rank,slot,action per pass, slot its clock, rank by rank. */
int pipe_sched_print_csv(FILE *f, const struct pipe_sched *s);
/* The idle fraction of a built-in schedule with equal pass times (a
 * chunk's pass 1/v of a whole stage's), its published closed form: GPipe
 * and 1F1B (w-1)/(m+w-1); interleaved (w-1)/(vm+w-1), Megatron's
 * (w-1)/(vm) of the ideal time as a share of the step, for m a multiple
 * of w (-1 for other m: the table's bubble is what there is, at most
 * 1F1B's); ZB-H1 (w-1)/(3m+w-1) for m >= w, (2w-m-1)/(2m+2w-1) below
 * (the last stage's F and B chain then bounds it); and the formula's
 * text. Of any table, its idle cells' share. */
double pipe_sched_bubble(enum pipe_sched_kind kind, int m, int w, int v);
const char *pipe_sched_formula(enum pipe_sched_kind kind, int m, int w,
    int v);
double pipe_sched_table_bubble(const struct pipe_sched *s);

#endif
