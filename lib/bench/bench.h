/* bench: the measurement logic of collx-bench — collective sweeps in the
 * manner of nccl-tests, point-to-point latency and bandwidth in the manner
 * of the OSU micro-benchmarks, data-parallel training scaling — and the
 * table and CSV rows they print. Times are always the slowest rank's. */
#ifndef COLLX_BENCH_H
#define COLLX_BENCH_H

#include <signal.h>
#include <stddef.h>
#include <stdio.h>

#include "cli/cli.h"
#include "comm/coll.h"
#include "comm/comm.h"
#include "tensor/dtype.h"

struct bench_cost;

/* Set by the program's SIGINT handler; sweeps stop, all ranks together,
 * after the row being measured. */
extern volatile sig_atomic_t bench_interrupted;
/* Installs the SIGINT/SIGTERM handler that sets bench_interrupted. */
void bench_catch_signals(void);
/* Whether any rank was interrupted (a collective: every rank calls it);
 * 1, 0, or -1 on a comm failure. */
int bench_agree_stop(struct comm *c);

/* Statistics of n per-iteration times (sorted in place). */
struct bench_stat {
	double med, min, max, p99;
};
void bench_stats(double *t, int n, struct bench_stat *s);
/* Replace every rank's t[0..n-1] with the largest over ranks (the slowest
 * rank's time of each iteration). 0 or -1 (comm_error). */
int bench_slowest(struct comm *c, double *t, int n);
/* Distinct hosts in the group (hostname and network namespace); a
 * collective. -1 on a comm failure. */
int bench_hosts(struct comm *c);

/* The sizes of a sweep: min..max by factor (> 1) or step (> 0). */
struct bench_sizes {
	size_t min, max, step;
	double factor;
};
/* The next size after cur, or 0 past the end. */
size_t bench_next_size(const struct bench_sizes *z, size_t cur);
int bench_count_sizes(const struct bench_sizes *z);
/* "4K", "1M" style (powers of 1024, exact), else plain bytes. */
const char *bench_size_str(size_t bytes, char *buf, size_t len);

/* A progress line on stderr ("\r", erased at the end), shown only when
 * on: rank 0, stderr a terminal, not quiet. */
struct bench_progress {
	int on, done, total;
	double start;
};
void bench_progress_start(struct bench_progress *p, int on, int total);
void bench_progress_show(struct bench_progress *p, const char *what);
void bench_progress_end(struct bench_progress *p);

/* Output of collx-bench: an aligned table on a terminal, CSV otherwise. */
struct bench_out {
	int csv;
	const char *file;		/* --timing: the rows appended here too */
	struct cli_timing *timing;	/* CSV rows to stdout */
	struct cli_timing *ftiming;	/* and to file */
	int rows;
	double busbw_sum;		/* for the table's footer */
};
/* Open the CSV destinations (stdout when csv, file when set), whose
 * extra columns are extra; write a row to each; close them. Each 0, or -1
 * with the reason in err (a runtime failure). */
int bench_out_open(struct bench_out *o, const char *extra, char *err,
    size_t errlen);
int bench_out_row(struct bench_out *o, const struct cli_timing_row *r,
    char *err, size_t errlen);
int bench_out_close(struct bench_out *o, char *err, size_t errlen);

/* ---- coll ---- */

struct bench_coll {
	enum coll_kind kind;
	enum coll_op op;
	enum dtype dt;
	int root;			/* broadcast */
	int warmup, iters;
	double seconds;			/* > 0: measure about this long per size */
	int check;
	long fault;			/* test only: corrupt this many elements */
	int hosts;
	double skew;			/* alltoallv: Zipf exponent (0: even) */
	const struct bench_cost *cost;	/* --cost: each row's expected time */
	int cost_tcp;			/* --no-shm: the ranks' links are tcp */
};

struct bench_coll_row {
	enum coll_algo algo;
	int inplace;
	size_t count, bytes;		/* the whole vector (gathered size) */
	int iters;
	struct bench_stat st;
	double algbw, busbw;		/* GB/s, 10^9 */
	long wrong;			/* -1 when not checked */
	double expected;		/* --cost: seconds (<= 0: no model) */
};

/* The collective's name as in timing rows ("allreduce", "reduce-scatter"). */
const char *bench_kind_name(enum coll_kind kind);
int bench_kind_parse(const char *s, enum coll_kind *out);
/* Every algorithm kind implements (auto first); returns the count. */
int bench_all_algos(enum coll_kind kind, enum coll_algo *out, int max);

/*
 * Measure one size with one algorithm, in place or not: warm-up, timed
 * iterations (each after a barrier), the slowest rank's time of each,
 * then with check a run on inputs whose exact result is known and a
 * count of wrong elements over all ranks. bytes is rounded down to whole
 * elements (and whole blocks per rank). 0, or -1: a comm failure
 * (comm_error(c)).
 */
int bench_coll_measure(struct comm *c, const struct bench_coll *b,
    enum coll_algo algo, int inplace, size_t bytes, struct bench_coll_row *r);
/* The element count a sweep size becomes (0: too small for the world). */
size_t bench_coll_count(const struct bench_coll *b, size_t bytes, int world);
/* Alltoallv's counts: the n elements every rank sends, spread over the
 * world's ranks into out[world] (bench_coll.c says how). */
void bench_skew_counts(const struct bench_coll *b, size_t n, int world,
    size_t *out);

/* The table's head, a row, its foot (and the CSV rows): 0 or -1 (err). */
int bench_coll_begin(struct bench_out *o, const struct bench_coll *b,
    int world, char *err, size_t errlen);
int bench_coll_print(struct bench_out *o, const struct bench_coll *b,
    int world, const struct bench_coll_row *r, char *err, size_t errlen);
int bench_coll_end(struct bench_out *o, int interrupted, char *err,
    size_t errlen);

/* ---- p2p ---- */

enum bench_p2p_test { BENCH_LATENCY, BENCH_BW, BENCH_BIBW };

struct bench_p2p {
	enum bench_p2p_test test;
	int a, b;			/* the pair; a < 0: every pair */
	int warmup, iters, window;
	int hosts;
};

struct bench_p2p_row {
	int a, b;
	size_t bytes;
	int iters;
	struct bench_stat st;		/* latency: one way; bw: per message */
	double gbps;			/* bytes / st.med / 1e9 (bibw: both ways) */
	const char *transport;		/* "shm" or "tcp" (comm_transport) */
};

const char *bench_p2p_name(enum bench_p2p_test t);
/* One pair, one size; every rank calls it (ranks outside the pair only
 * take part in the barriers). 0 or -1 (comm_error). */
int bench_p2p_measure(struct comm *c, const struct bench_p2p *p, int a, int b,
    size_t bytes, struct bench_p2p_row *r);
/* The same for p2p; bench_out_close ends it. */
int bench_p2p_begin(struct bench_out *o, const struct bench_p2p *p, int world,
    char *err, size_t errlen);
int bench_p2p_print(struct bench_out *o, const struct bench_p2p *p, int world,
    const struct bench_p2p_row *r, char *err, size_t errlen);
/* The all-pairs matrix (rows[i*world+j], i != j) as a table. */
void bench_p2p_matrix(FILE *f, const struct bench_p2p *p, int world,
    const struct bench_p2p_row *rows);

/* ---- the sweeps ---- */

/*
 * Every algorithm at every size, out of place then in place (coll), or
 * every size for the pair or every ordered pair (p2p): rank 0 prints each
 * row as it is measured (and the progress line when progress); every rank
 * stops after the same row on Ctrl-C. b->hosts and p->hosts are found
 * first. 0, 1 when interrupted, or -1: a comm failure (comm_errkind(c)
 * set) or the reason in err. *wrong: --check's count over the sweep.
 */
int bench_coll_sweep(struct comm *c, struct bench_coll *b,
    const struct bench_sizes *z, const enum coll_algo *algos, int nalgo,
    struct bench_out *out, int progress, long *wrong, char *err,
    size_t errlen);
int bench_p2p_sweep(struct comm *c, struct bench_p2p *p,
    const struct bench_sizes *z, struct bench_out *out, int progress,
    char *err, size_t errlen);

/* ---- dp ---- */

struct bench_dp {
	int max_world;
	const char *syncs;		/* comma list */
	const char *wire;		/* collx-dp --wire, or NULL */
	const char *precisions;		/* --precision comma list, or NULL */
	const char *powersgd, *powersgd_start;		/* or NULL */
	const char *sync_every, *outer_lr, *outer_momentum;	/* or NULL */
	const char *zeros;		/* comma list of --zero stages, or NULL */
	const char *optimizer;		/* the runs' --optimizer, or NULL */
	const char *arch, *dims;	/* collx-dp --init */
	int experts;			/* mesh: its gpt's --experts (0: none);
					 * each mesh also runs with every --ep */
	long batch;			/* per rank */
	long steps;
	int rounds;			/* mesh: rounds at most (--repeat) */
	const char *fit_min, *fit_max;	/* fit: the sweep's sizes, as given */
	const char *fit_out;		/* fit: the cost file */
	const char *bindir;		/* where collx-run and collx-dp are */
	double timeout;
	int no_shm;			/* the runs' ranks: --no-shm */
	int hosts;
	/* mesh on given hosts: collx-run's -H, --ssh, --master (its port
	 * plus the run's index), the ranks' --iface; each NULL when not. */
	const char *host_list, *ssh, *master, *iface;
};

/* One training run's result: median step time and tokens/s past the
 * first step (its loss CSV), communication share (its timing rows). */
struct bench_run_result {
	double step_s, tokens_per_s, comm_share;
	double tokens;			/* per timed step, their mean */
	size_t nparams;
	int steps;
};
/* Run argv (argv[0] a path) to its end, output to log; its exit status,
 * 128+N for a signal, or -1 when it could not start. */
int bench_run_child(char *const argv[], const char *log);
/* A fresh working directory, dir (len >= 4096 bytes), under TMPDIR
 * (else /tmp). 0 or -1 (err). */
int bench_workdir(char *dir, size_t len, char *err, size_t errlen);
/* d's model (collx-dp --init, seed 1) and data in dir: model.safetensors,
 * x.npy (and y.npy for mlp). 0 or -1 (err). */
int bench_make_inputs(const struct bench_dp *d, const char *dir,
    char *err, size_t errlen);
/* argv of a training run: collx-run -n world [-H .. --ssh .. --master
 * ADDR:PORT+run] -- prog [--iface ..] -m MODEL --data X [--targets Y]
 * --batch batch --steps K over dir's inputs (from bench_make_inputs),
 * held in a; returns the count so far, the caller adds its options (argv
 * has room for 21 more) and the NULL. */
struct bench_argv {
	char run[4200], prog[4200], model[4200], x[4200], y[4200];
	char n[16], batch[32], steps[32], tmo[32], master[300];
	char *argv[64];
};
int bench_train_argv(struct bench_argv *a, const struct bench_dp *d,
    const char *dir, const char *prog, int world, long batch, int run);
/* A loss CSV's timed steps into r (step_s, tokens_per_s, steps). */
int bench_read_loss(const char *path, struct bench_run_result *r, char *err,
    size_t errlen);

/* Run the scaling sweep, printing to o (and the progress line when
 * progress); returns the exit code (0, or the failing run's status with
 * the reason in err). */
int bench_dp_run(struct bench_out *o, const struct bench_dp *d, int progress,
    char *err, size_t errlen);

/* ---- mesh ---- */

/* The planner: every factorization of the world d->max_world into
 * collx-train's --dp x --tp x --pp, each trained d->steps steps on a
 * global batch of d->batch, in rounds (every mesh once a round) until two
 * rounds in a row rank them alike or d->rounds have run; rows fastest
 * first (the median over every timed step), with their spread and which
 * tie with the fastest; refused meshes listed with collx-train's reason.
 * Returns the exit code, as bench_dp_run. */
int bench_mesh_run(struct bench_out *o, const struct bench_dp *d,
    int progress, char *err, size_t errlen);

/* The meshes mesh[i] = { dp, tp, pp } of the world d->max_world, run as
 * bench_mesh_run runs them, in rounds: step[i] the median step, spread[i]
 * half the quartile range over it (both 0 for a mesh collx-train
 * refuses). Returns the exit code, as bench_dp_run. */
int bench_mesh_measure(const struct bench_dp *d, const int (*mesh)[3], int n,
    double *step, double *spread, int progress, char *err, size_t errlen);

/* ---- fit ---- */

/* collx-bench fit: the cost model of this cluster (bench_cost.h) from
 * collective sweeps on d->max_world ranks (of d->host_list when set),
 * each link class, and the compute of d's model timed here; written to
 * d->fit_out (o, the runs' table, is unused: as bench_dp_run's shape).
 * Returns the exit code, as bench_dp_run. */
int bench_fit_run(struct bench_out *o, const struct bench_dp *d,
    int progress, char *err, size_t errlen);

#endif
