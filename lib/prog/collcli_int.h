/* collcli_int: the state of one collective program's run, shared by its
 * parts: collcli.c (runs, check, output, --stream), collcli_agree.c,
 * collcli_plan.c and collcli_main.c. */
#ifndef COLLX_COLLCLI_INT_H
#define COLLX_COLLCLI_INT_H

#include <stdio.h>

#include "cli/util.h"
#include "prog/collcli.h"
#include "tensor/flat.h"
#include "tensor/tensor.h"


/* A rank's status for the next item; ST_WAIT: its next --stream array
 * has not arrived yet (the others keep theirs and ask again). */
enum { ST_END = 0, ST_ITEM = 1, ST_BAD = 2, ST_WAIT = 3 };

struct cc_run {
	struct collcli *o;
	struct comm *comm;
	int rank, world;
	char *in, *out, *timing_path;	/* {rank} and {world} replaced */
	struct cli_timing *timing;
	FILE *sin, *sout;		/* --stream */
	long items;
	size_t checked;			/* --check: tensors that passed */
	double maxerr;			/* ... and this rank's largest error */
	int iter;
	double secs;			/* of this item's timed runs, summed */
	int code;			/* exit code of the failure in err */
	char err[COLLX_ERRLEN];
	int64_t *counts;		/* --send-counts, [world][world], or NULL */
	uint64_t counts_hash;		/* of its values, for the agreement */
};

/* What one item becomes: the input (NULL on a broadcast non-root), the
 * output tensors in the same (name) order, allgather's rows per rank. */
struct cc_plan {
	const struct tensor_set *in;
	struct tensor_set out;
	int64_t *rows;			/* rows[q * out.count + t] */
};

struct cc_bucket {
	enum dtype dt;
	size_t n, *idx;			/* its tensors, in plan order */
	size_t scount;			/* elements per send block */
	size_t *scounts, stotal;	/* alltoallv: elements per send block, all */
	size_t *rcounts;		/* elements per receive block */
	size_t bytes;			/* the collective's size, nccl-tests style */
	char *send, *recv;		/* the same buffer for in-place kinds */
	int own_send, own_recv;
	enum coll_algo algo;
};

/* Failures: record the exit code and one line in r, return -1. */
int collcli_fail(struct cc_run *r, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int collcli_comm_failed(struct cc_run *r);
int collcli_no_memory(struct cc_run *r);
/* A tensor's name for messages ("input" when unnamed). */
const char *collcli_tname(const struct tensor *t);

/* Agreement (collcli_agree.c): 1 an item everywhere, 0 every input ended,
 * 2 some rank still waits for its input, -1 a failure. */
int collcli_agree(struct cc_run *r, struct cc_plan *p, int status, const char *why);
int collcli_agree_broadcast(struct cc_run *r, struct cc_plan *p, int status,
    const char *why);

/* The kinds' blocks (collcli_plan.c). */
int collcli_inplace(const struct cc_run *r);
int collcli_send_blocks(const struct cc_run *r);
int collcli_recv_blocks(const struct cc_run *r);
int collcli_send_dim(const struct cc_run *r, const struct tensor *t);
int collcli_recv_dim(const struct cc_run *r, const struct tensor *t);
/* Send block b, receive block j, of plan tensor i (the input's, or the
 * output's shape where this rank has no input: broadcast non-roots). */
struct tensor_slice collcli_send_slice(const struct cc_run *r,
    const struct cc_plan *p, size_t i, int b);
struct tensor_slice collcli_recv_slice(const struct cc_run *r,
    const struct cc_plan *p, size_t i, int j);
/* The output tensors of p's input; 0 or -1. */
int collcli_plan_outputs(struct cc_run *r, struct cc_plan *p);
/* The buckets of plan p, each set up, or NULL (why in r). */
struct cc_bucket *collcli_buckets(struct cc_run *r, const struct cc_plan *p,
    size_t *nb);
void collcli_buckets_free(struct cc_bucket *b, size_t nb);
/* Input into a bucket's send buffer, its receive buffer into the output. */
void collcli_bucket_pack(const struct cc_run *r, const struct cc_plan *p,
    struct cc_bucket *b);
void collcli_bucket_unpack(const struct cc_run *r, const struct cc_plan *p,
    struct cc_bucket *b);
int collcli_bucket_run(const struct cc_run *r, struct cc_bucket *b);

/* --send-counts (collcli_counts.c): the file read and checked (integer
 * [world, world], none negative) into r->counts; 0, or -1 with the
 * reason in err (bad input, told the peers as an unreadable input). */
int collcli_counts_load(struct cc_run *r, char *err, size_t errlen);
/* Every rank's rows (p->rows) against its row of the counts: 0, or -1
 * (exit 3 naming the rank, tensor and numbers) on every rank alike. */
int collcli_counts_check(struct cc_run *r, const struct cc_plan *p);
/* First row and rows of the block rank q sends rank p. */
int64_t collcli_counts_start(const struct cc_run *r, int q, int p);
int64_t collcli_counts_len(const struct cc_run *r, int q, int p);
/* Rows rank r sends altogether (row sum), and receives (column sum). */
int64_t collcli_counts_sent(const struct cc_run *r, int q);
int64_t collcli_counts_received(const struct cc_run *r, int q);

#endif
