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
enum pipe_sched_kind { PIPE_SCHED_GPIPE, PIPE_SCHED_1F1B, PIPE_SCHED_FILE };

/* A forward ('F') or backward ('B') pass of micro-batch mb. */
struct pipe_pass {
	char kind;
	int mb;
};

/* Actions, in the order a stage performs them. */
enum pipe_op {
	PIPE_RECV_ACT,		/* activation of mb from stage - 1 */
	PIPE_FWD,
	PIPE_SEND_ACT,		/* activation of mb to stage + 1 */
	PIPE_RECV_GRAD,		/* gradient of mb from stage + 1 */
	PIPE_BWD,
	PIPE_SEND_GRAD		/* gradient of mb to stage - 1 */
};

struct pipe_action {
	enum pipe_op op;
	int mb, peer, clock;	/* peer: the other stage, or -1 */
};

struct pipe_sched {
	enum pipe_sched_kind kind;
	int m, w, nclocks;
	int *fclock, *bclock;		/* [w*m]: stage j, mb i at j*m + i */
	struct pipe_action **act;	/* per stage */
	int *nact;
};

int pipe_sched_parse(const char *s, enum pipe_sched_kind *out);
const char *pipe_sched_name(enum pipe_sched_kind k);

/* Builds the tables for m micro-batches over w stages (both >= 1). 0, or
 * -1 with the reason in err. */
int pipe_sched_build(struct pipe_sched *s, enum pipe_sched_kind kind, int m,
    int w, char *err, size_t errlen);
/* Builds them from every stage's pass order ord[j][0 .. 2m), which holds
 * each micro-batch's F and then its B once; neighbouring stages take the
 * micro-batches in one order (messages between two ranks match in
 * order). 0; -1 with the reason in err; -2 when the orders deadlock,
 * with at[j] the pass stage j waits at (2m: it finished). */
int pipe_sched_orders(struct pipe_sched *s, enum pipe_sched_kind kind,
    int m, int w, struct pipe_pass *const *ord, int *at, char *err,
    size_t errlen);
/* Reads a schedule file (rows rank,slot,action; see collx-pipe(1)) for m
 * micro-batches over w stages (w 0: as many as the file has ranks) and
 * builds its tables, checked for completeness, dependency order and
 * deadlock: 0, or -1 with the reason naming the row (bad input). */
int pipe_sched_file(struct pipe_sched *s, const char *path, int m, int w,
    char *err, size_t errlen);
/* A digest of the pass orders, for ranks to agree on. */
unsigned long long pipe_sched_digest(const struct pipe_sched *s);
void pipe_sched_free(struct pipe_sched *s);

/* What stage j does at clock t: 'F' or 'B' with *mb set, or 0 (idle). */
int pipe_sched_cell(const struct pipe_sched *s, int t, int j, int *mb);
/* Micro-batches whose forward has run and backward not yet, at most,
 * on stage j. */
int pipe_sched_inflight(const struct pipe_sched *s, int j);
/* The clock-by-stage table: a header, then one row per clock, cells
 * F<i>, B<i> or ".", and last the line "bubble X (I idle of N cells)". */
int pipe_sched_print(FILE *f, const struct pipe_sched *s);
/* The idle fraction of GPipe and 1F1B with equal pass times,
 * (w-1)/(m+w-1); of any table, its idle cells' share. */
double pipe_sched_bubble(int m, int w);
double pipe_sched_table_bubble(const struct pipe_sched *s);

#endif
