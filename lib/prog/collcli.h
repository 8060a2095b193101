/* collcli: what the five collective programs (collx-allreduce, -broadcast,
 * -allgather, -reduce-scatter, -alltoall) share: their options, reading
 * inputs, agreement between ranks, bucket fusion, timing rows, --check,
 * --stream and the mapping of failures to exit codes. */
#ifndef COLLX_COLLCLI_H
#define COLLX_COLLCLI_H

#include <getopt.h>
#include <stddef.h>

#include "cli/cli.h"
#include "comm/coll.h"

enum {
	COLLCLI_OPT_ALGO = CLI_OPT_PROGRAM, COLLCLI_OPT_ITERS,
	COLLCLI_OPT_WARMUP, COLLCLI_OPT_CHECK, COLLCLI_OPT_STREAM,
	COLLCLI_OPT_BUCKET, COLLCLI_OPT_OP, COLLCLI_OPT_ROOT,
	COLLCLI_OPT_SDIM, COLLCLI_OPT_GDIM,
	COLLCLI_OPT_COUNTS		/* collx-alltoall --send-counts */
};

#define COLLCLI_OPTSTRING "hVvqi:o:"

/* Options every collective program takes; a program adds its own
 * (--op, --root, --scatter-dim, --gather-dim) from the enum above. */
#define COLLCLI_LONGOPTS \
	{ "help", 0, 0, 'h' }, \
	{ "version", 0, 0, 'V' }, \
	{ "verbose", 0, 0, 'v' }, \
	{ "quiet", 0, 0, 'q' }, \
	{ "input", 1, 0, 'i' }, \
	{ "output", 1, 0, 'o' }, \
	{ "algo", 1, 0, COLLCLI_OPT_ALGO }, \
	{ "iters", 1, 0, COLLCLI_OPT_ITERS }, \
	{ "warmup", 1, 0, COLLCLI_OPT_WARMUP }, \
	{ "timing", 1, 0, CLI_OPT_TIMING }, \
	{ "check", 0, 0, COLLCLI_OPT_CHECK }, \
	{ "stream", 0, 0, COLLCLI_OPT_STREAM }, \
	{ "bucket", 1, 0, COLLCLI_OPT_BUCKET }, \
	CLI_GROUP_LONGOPTS

#define COLLCLI_BUCKET_DEFAULT ((size_t)4 << 20)

struct collcli {
	enum coll_kind kind;
	const char *in, *out, *timing;	/* as given, before {rank} */
	enum coll_algo algo;
	enum coll_op op;
	int root;			/* broadcast */
	int sdim, gdim;			/* alltoall; negative counts from the end */
	int iters, warmup;
	int check, stream;
	size_t bucket;			/* fusion limit in bytes, 0 = none */
	struct cli_group group;
	/* alltoall --send-counts: the [W, W] counts file (NULL: equal
	 * chunks); --algo as given, read once the kind is known */
	const char *counts, *algo_arg;
};

/* The shared options' --help lines (after the program's own). */
extern const char collcli_help[];

void collcli_init(struct collcli *o, enum coll_kind kind);
/* Handles every option of the table above, -h, -V, -v and -q included;
 * getopt's '?' (or anything unknown) is a usage error. */
void collcli_option(struct collcli *o, int opt, const char *arg,
    void (*usage)(void));
/* Runs the collective on a resolved group (o->group after
 * cli_group_resolve, the input given where one is needed): 0, or the exit
 * code with the one-line reason in err. */
int collcli_run(struct collcli *o, char *err, size_t errlen);

/* What a collective program is beyond the shared part: its collective,
 * its own options and their help. The program's main() is one call. */
struct collcli_program {
	enum coll_kind kind;
	const struct option *longopts;	/* its own options, then COLLCLI_LONGOPTS */
	const char *synopsis;		/* usage lines, "%s" standing for the name */
	const char *options;		/* --help lines of its own options */
};
int collcli_main(const struct collcli_program *p, int argc, char **argv);

/* Name of the collective as in timing rows ("allreduce", "reduce-scatter"). */
const char *collcli_kind_name(enum coll_kind kind);
/* The collective o runs: alltoall with --send-counts is alltoallv. */
enum coll_kind collcli_coll_kind(const struct collcli *o);

#endif
