/* bench_opts: collx-bench's command line: its options (BENCH_OPTS_LONGOPTS),
 * their values and the subcommand read into one struct bench_opts, the
 * defaults that differ by subcommand, and every refusal before a run
 * (-1 with the usage error in err; exit 2). The sync options of dp
 * (lib/prog's dpopt) and the launcher's host lists (lib/launch) are the
 * program's, reached through the two functions it sets. */
#ifndef COLLX_BENCH_OPTS_H
#define COLLX_BENCH_OPTS_H

#include <stddef.h>

#include "bench/bench.h"
#include "bench/bench_plan.h"
#include "cli/cli.h"
#include "comm/coll.h"
#include "par/dp.h"

enum {
	BENCH_OPT_OP = CLI_OPT_PROGRAM, BENCH_OPT_ALGO, BENCH_OPT_DTYPE,
	BENCH_OPT_REDOP, BENCH_OPT_ROOT, BENCH_OPT_SECONDS, BENCH_OPT_CHECK,
	BENCH_OPT_CSV, BENCH_OPT_TABLE, BENCH_OPT_TEST, BENCH_OPT_PAIR,
	BENCH_OPT_ALL, BENCH_OPT_WINDOW, BENCH_OPT_SYNC, BENCH_OPT_ARCH,
	BENCH_OPT_DIMS, BENCH_OPT_BATCH, BENCH_OPT_STEPS, BENCH_OPT_SSH,
	BENCH_OPT_SKEW, BENCH_OPT_REPEAT, BENCH_OPT_COST, BENCH_OPT_RPH,
	BENCH_OPT_TOP, BENCH_OPT_MEM, BENCH_OPT_VALIDATE, BENCH_OPT_EXPORT,
	BENCH_OPT_MESH, BENCH_OPT_ZERO, BENCH_OPT_EXPERTS, BENCH_OPT_TOPK,
	BENCH_OPT_CAPACITY, BENCH_OPT_MOE_EVERY, BENCH_OPT_OPTIMIZER
};
#define BENCH_OPTS_SHORTOPTS "hVvqb:e:f:i:n:w:N:H:o:"
/* collx-bench's own; the program adds dp's sync options and
 * --precision (lib/prog), the standard and the group options */
#define BENCH_OPTS_LONGOPTS \
	{ "minbytes", 1, 0, 'b' }, { "maxbytes", 1, 0, 'e' }, \
	{ "stepfactor", 1, 0, 'f' }, { "stepbytes", 1, 0, 'i' }, \
	{ "iters", 1, 0, 'n' }, { "warmup", 1, 0, 'w' }, \
	{ "op", 1, 0, BENCH_OPT_OP }, { "algo", 1, 0, BENCH_OPT_ALGO }, \
	{ "dtype", 1, 0, BENCH_OPT_DTYPE }, \
	{ "redop", 1, 0, BENCH_OPT_REDOP }, \
	{ "root", 1, 0, BENCH_OPT_ROOT }, \
	{ "seconds", 1, 0, BENCH_OPT_SECONDS }, \
	{ "check", 0, 0, BENCH_OPT_CHECK }, { "csv", 0, 0, BENCH_OPT_CSV }, \
	{ "table", 0, 0, BENCH_OPT_TABLE }, \
	{ "timing", 1, 0, CLI_OPT_TIMING }, \
	{ "test", 1, 0, BENCH_OPT_TEST }, { "pair", 1, 0, BENCH_OPT_PAIR }, \
	{ "all-pairs", 0, 0, BENCH_OPT_ALL }, \
	{ "window", 1, 0, BENCH_OPT_WINDOW }, \
	{ "sync", 1, 0, BENCH_OPT_SYNC }, { "max-world", 1, 0, 'N' }, \
	{ "arch", 1, 0, BENCH_OPT_ARCH }, { "dims", 1, 0, BENCH_OPT_DIMS }, \
	{ "experts", 1, 0, BENCH_OPT_EXPERTS }, \
	{ "batch", 1, 0, BENCH_OPT_BATCH }, \
	{ "steps", 1, 0, BENCH_OPT_STEPS }, \
	{ "zero", 1, 0, BENCH_OPT_ZERO }, \
	{ "hosts", 1, 0, 'H' }, { "ssh", 1, 0, BENCH_OPT_SSH }, \
	{ "skew", 1, 0, BENCH_OPT_SKEW }, \
	{ "repeat", 1, 0, BENCH_OPT_REPEAT }, { "output", 1, 0, 'o' }, \
	{ "cost", 1, 0, BENCH_OPT_COST }, \
	{ "ranks-per-host", 1, 0, BENCH_OPT_RPH }, \
	{ "top", 1, 0, BENCH_OPT_TOP }, \
	{ "mem-per-rank", 1, 0, BENCH_OPT_MEM }, \
	{ "validate", 0, 0, BENCH_OPT_VALIDATE }, \
	{ "export", 1, 0, BENCH_OPT_EXPORT }, \
	{ "mesh", 1, 0, BENCH_OPT_MESH }, { "topk", 1, 0, BENCH_OPT_TOPK }, \
	{ "capacity", 1, 0, BENCH_OPT_CAPACITY }, \
	{ "moe-every", 1, 0, BENCH_OPT_MOE_EVERY }, \
	{ "optimizer", 1, 0, BENCH_OPT_OPTIMIZER }

#define BENCH_OPTS_MAXALGOS 16

struct bench_opts {
	const char *sub;
	struct bench_sizes sizes;
	int have_b, have_e, have_n, have_w, have_batch, have_sync, have_world;
	int have_skew;
	int have_repeat;
	int have_optim;			/* plan --optimizer given */
	const char *out;		/* fit -o */
	const char *cost;		/* plan, coll --cost */
	struct bench_plan_opts plan;
	int per_host, top, validate;
	const char *export_fmt, *export_dir;
	const char *algos;
	struct bench_coll coll;
	struct bench_p2p p2p;
	struct bench_dp dp;
	struct dp_opts dpo;	/* dp's sync options, read as collx-dp reads
				 * them; passed on as given (dp.wire, ...) */
	int csv;
	const char *timing;
	char fit_lo[32], fit_hi[32];	/* fit's sizes, when given */
	struct cli_group g;
	/* the program's: dpo checked as collx-dp checks it (0 or -1), and
	 * a collx-run host list's hosts and ranks (0 or -1) */
	int (*sync_check)(struct dp_opts *dpo, char *err, size_t errlen);
	int (*host_slots)(const char *list, int *hosts, int *slots, char *err,
	    size_t errlen);
};

/* o cleared, then the defaults of every subcommand. */
void bench_opts_init(struct bench_opts *o);
/* Option opt with its value a into o: 1, 0 when it is none of
 * BENCH_OPTS_LONGOPTS' (nor of the short options), or -1. */
int bench_opts_option(struct bench_opts *o, int opt, const char *a,
    char *err, size_t errlen);
/* --export FORMAT DIR (dir NULL: missing). */
int bench_opts_export(struct bench_opts *o, const char *fmt,
    const char *dir, char *err, size_t errlen);
/* The n operands: one subcommand. */
int bench_opts_sub(struct bench_opts *o, int n, char *const *operands,
    char *err, size_t errlen);
/* After the command line: the defaults that differ by subcommand, where
 * options left them unset, and what the subcommand refuses. */
int bench_opts_check(struct bench_opts *o, char *err, size_t errlen);
/* coll's --algo list into algos (at most BENCH_OPTS_MAXALGOS): their
 * count, or -1. */
int bench_opts_algos(const struct bench_opts *o, enum coll_algo *algos,
    char *err, size_t errlen);
/* coll's and p2p's options against the world of world ranks. */
int bench_opts_check_world(const struct bench_opts *o, int world,
    char *err, size_t errlen);

#endif
