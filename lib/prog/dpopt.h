/* dpopt: the data-parallel axis's sync options on a command line, read by
 * one function for collx-dp, collx-train and collx-bench: --zero, --wire,
 * --powersgd, --powersgd-start, --sync-every, --outer-lr,
 * --outer-momentum, --prefetch, --reshard-after-forward, --shard-group
 * (DPOPT_LONGOPTS) and collx-dp's --bucket-mb and
 * --no-overlap (DPOPT_BUCKET_LONGOPTS), into one struct dp_opts
 * (par/dp.h), started from DP_OPTS_DEFAULTS. */
#ifndef COLLX_DPOPT_H
#define COLLX_DPOPT_H

#include "par/dp.h"
#include "prog/join.h"

enum {
	DPOPT_WIRE = 0x12b0, DPOPT_POWERSGD, DPOPT_POWERSGD_START,
	DPOPT_SYNC_EVERY, DPOPT_OUTER_LR, DPOPT_OUTER_MOMENTUM, DPOPT_ZERO,
	DPOPT_BUCKET, DPOPT_NO_OVERLAP, DPOPT_PREFETCH, DPOPT_RESHARD,
	DPOPT_SHARD_GROUP
};
#define DPOPT_LONGOPTS \
	{ "zero", 1, 0, DPOPT_ZERO }, \
	{ "wire", 1, 0, DPOPT_WIRE }, \
	{ "powersgd", 1, 0, DPOPT_POWERSGD }, \
	{ "powersgd-start", 1, 0, DPOPT_POWERSGD_START }, \
	{ "sync-every", 1, 0, DPOPT_SYNC_EVERY }, \
	{ "outer-lr", 1, 0, DPOPT_OUTER_LR }, \
	{ "outer-momentum", 1, 0, DPOPT_OUTER_MOMENTUM }, \
	{ "prefetch", 1, 0, DPOPT_PREFETCH }, \
	{ "reshard-after-forward", 1, 0, DPOPT_RESHARD }, \
	{ "shard-group", 1, 0, DPOPT_SHARD_GROUP }
#define DPOPT_BUCKET_LONGOPTS \
	{ "bucket-mb", 1, 0, DPOPT_BUCKET }, \
	{ "no-overlap", 0, 0, DPOPT_NO_OVERLAP }
#define DPOPT_SYNC_HELP \
	"  --wire TYPE           gradients travel as f32 (default), bf16, f16\n" \
	"                        or int8 (a scale per 256 values, error\n" \
	"                        feedback); every sum is taken in f32\n" \
	"  --powersgd R          PowerSGD of rank R (torch's powerSGD_hook: error\n" \
	"                        feedback, warm start; vectors uncompressed)\n" \
	"  --powersgd-start K    plain allreduce for the first K steps (10)\n" \
	"  --sync-every H        local SGD: each replica steps alone, and every\n" \
	"                        H steps the replicas' mean change is applied by\n" \
	"                        an outer Nesterov SGD (0: off, plain DP)\n" \
	"  --outer-lr L          its learning rate (0.7)\n" \
	"  --outer-momentum M    its Nesterov momentum (0.9)\n"
/* --zero 3's options, in the help of the programs that run it */
#define DPOPT_FSDP_HELP \
	"  --prefetch K          --zero 3: gather the next K layers while one\n" \
	"                        computes (1; 0: each when it is needed)\n" \
	"  --reshard-after-forward yes|no\n" \
	"                        --zero 3: free a layer's gathered parameters\n" \
	"                        after its forward and gather them again for\n" \
	"                        its backward (yes, default), or keep them\n" \
	"  --shard-group all|host\n" \
	"                        --zero 3: shard over all ranks (default), or\n" \
	"                        within each host, replicas across hosts (HSDP)\n"

/* Option opt with its value a into o: 1, or 0 when opt is none of these;
 * a bad value ends the program with a usage error (exit 2). */
int dpopt_option(struct dp_opts *o, int opt, const char *a);
/* After the command line: 0, or -1 when it is a combination no program
 * can run, the usage error naming both options in err (ckpt_every:
 * --checkpoint-every's steps, 0 without checkpoints); then the defaults
 * of the options not given. */
int dpopt_check(struct dp_opts *o, long ckpt_every, char *err,
    size_t errlen);
/* Under --zero 3, --prefetch beyond m's layers: -1 with the usage error. */
int dpopt_prefetch_check(const struct dp_opts *o, const struct nn_model *m,
    char *err, size_t errlen);
/* The first of o's options that keeps state of a replica's own, which
 * --ft would lose with it ("--wire"), or NULL. */
const char *dpopt_ft_with(const struct dp_opts *o);
/* o's options into the job every rank must agree on; buckets: with
 * --bucket-mb and --no-overlap (collx-dp's). */
void dpopt_agree(struct prog_job *job, const struct dp_opts *o, int buckets);

#endif
