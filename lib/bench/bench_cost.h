/* bench_cost: collx-bench's cost model of a cluster. What `collx-bench
 * fit` measures (the alpha-beta constants of each link class and of each
 * collective algorithm, the reduction rate, the compute rates of the
 * model's layers), the closed forms that turn them into a collective's
 * time at any group size, and the model's JSON file. */
#ifndef COLLX_BENCH_COST_H
#define COLLX_BENCH_COST_H

#include <stddef.h>

#include "comm/coll.h"

/* The file's "version"; a file of another version is refused. */
#define BENCH_COST_VERSION 1
#define BENCH_COST_MAXMM 64
#define BENCH_COST_MAXPT 32

enum bench_link { BENCH_SHM, BENCH_TCP, BENCH_NLINK };
/* The kinds fit measures and plan uses. */
enum { BENCH_NKIND = COLL_KIND_ALLTOALL + 1 };

/* t = alpha * steps + bytes moved / beta (+ bytes reduced / gamma).
 * The sweep's own times at the fit's world (bytes ascending, seconds)
 * when kept: a collective's time is then the measured one, interpolated
 * in log-log between sizes, scaled to another group size or a size
 * past the sweep by the closed form's ratio (a line through 4 KiB -
 * 64 MiB misses the step where vectors leave the caches). */
struct bench_ab {
	double alpha;			/* seconds a step */
	double beta;			/* bytes per second */
	int points;			/* sizes fitted; 0: not measured */
	int nt;				/* sweep points kept; 0: the line */
	int ranks, hosts;		/* where the sweep ran; 0: the file's */
	double tb[BENCH_COST_MAXPT], tt[BENCH_COST_MAXPT];
};

/* A matmul rate at a size: flops of one forward call (2 rows in out). */
struct bench_mm {
	double flops, rate;		/* rate in flop/s, forward + backward */
};

struct bench_cost {
	int version, world, hosts;
	int cores;			/* the fit's host's (one thread) */
	char arch[16], dims[128];	/* the model whose layers were timed */
	struct bench_ab link[BENCH_NLINK];	/* a point-to-point message */
	struct bench_ab coll[BENCH_NLINK][BENCH_NKIND][COLL_ALGO_COUNT];
	double gamma;			/* reduction, bytes of input a second */
	struct bench_mm mm[BENCH_COST_MAXMM];	/* by flops, ascending */
	int nmm;
	double attn_rate;		/* attention core, flop/s */
	double elem_rate;		/* elementwise passes, bytes/s */
	int compute_ranks;		/* processes timing it at once (1) */
	int machine_hosts;		/* hosts sharing one machine's cores
					 * (an emulated cluster's namespaces;
					 * cores: the machine's); 1 */
};

/* The closed form's counts for kind's algo on p ranks: steps (alpha
 * terms), the share of the vector's bytes each rank sends along the
 * critical path (beta) and reduces (gamma). bytes is the whole vector
 * (the gathered size for allgather, the input for reduce-scatter). -1
 * for a pair the model does not cover (hier: bench_cost_coll composes
 * it). */
int bench_cost_shape(enum coll_kind kind, enum coll_algo algo, int p,
    double *steps, double *vol, double *red);
/* Predicted seconds of kind's algo over p ranks of one link class
 * (COLL_AUTO: coll_auto's choice); algo COLL_HIER over hosts h of l
 * ranks each (p = h l): within the host by shm, across by tcp. The
 * algorithm's own fitted constants when the file has them, else the
 * link's. */
double bench_cost_coll(const struct bench_cost *c, enum coll_kind kind,
    enum coll_algo algo, enum bench_link link, int p, int l, double bytes);
/* collx-bench coll --cost: kind's algo on w ranks of hosts hosts (tcp:
 * every link TCP), as libcomm runs it there: across hosts over tcp, auto
 * as hier where hosts hold several ranks. -1 where the model has no
 * form. */
double bench_cost_expect(const struct bench_cost *c, enum coll_kind kind,
    enum coll_algo algo, int w, int hosts, int tcp, double bytes);
/* The step model's constants: a message in a host (as, bs) and across
 * hosts (at, bt), the reduction rate, and the groups alike that share a
 * host's link at once (hier's cross step: one a local rank). */
struct bench_legs {
	double as, bs, at, bt, g;
	int conc;
};
/* Seconds of kind's algo on p ranks placed l to a host, step by step
 * (bench_cost_step.c); -1 for a pair it does not cover. */
double bench_cost_steps(const struct bench_legs *k, enum coll_kind kind,
    enum coll_algo algo, int p, int l, double bytes);
/* A point-to-point message of bytes. */
double bench_cost_p2p(const struct bench_cost *c, enum bench_link link,
    double bytes);
/* Seconds of a linear layer's forward and backward, rows x in -> out. */
double bench_cost_linear(const struct bench_cost *c, double rows, double in,
    double out);

/* Weighted least squares of t_i = a + b x_i (relative errors weigh alike);
 * a >= 0, b >= 0. */
void bench_cost_line(const double *x, const double *t, int n, double *a,
    double *b);

const char *bench_link_name(enum bench_link l);

/* The JSON file: written whole (a temporary name renamed into place), or
 * read back strictly: 0, or -1 with one line naming the file and the
 * missing or wrong field, or the version. */
int bench_cost_write(const struct bench_cost *c, const char *path, char *err,
    size_t errlen);
int bench_cost_read(struct bench_cost *c, const char *path, char *err,
    size_t errlen);
/* bench_cost_read's reading of the text of len bytes, named name in its
 * messages. */
int bench_cost_parse(struct bench_cost *c, const char *text, size_t len,
    const char *name, char *err, size_t errlen);

#endif
