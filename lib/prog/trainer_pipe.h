/* trainer_pipe: the pipeline run of collx-pipe and collx-train, in the
 * trainer shell: the layer split and the run's pipe_cfg from the
 * options, the options every rank must share, and the run with its
 * per-step report, timing rows, outputs and the bubble's summary. One
 * engine: collx-pipe is collx-train's run without a mesh (one pipeline
 * over the whole group), its reports in collx-pipe's words. */
#ifndef COLLX_TRAINER_PIPE_H
#define COLLX_TRAINER_PIPE_H

#include "par/ep.h"
#include "par/mesh.h"
#include "par/pipe.h"
#include "prog/trainer.h"

/* The pipeline's options, collx-pipe's and collx-train's alike:
 * TRAINER_PIPE_LONGOPTS in the getopt_long table, each option offered
 * to trainer_pipe_option(), which takes one (1) or says it is not one
 * (0); then trainer_pipe_virtual(). */
struct trainer_pipe_opts {
	const char *split, *trace;
	long micro, virt;	/* virt: interleaved's chunks per stage */
	enum pipe_sched_kind sched;
	int sched_given;
};
enum {
	TRAINER_PIPE_MICRO = 0x12e0, TRAINER_PIPE_SCHEDULE,
	TRAINER_PIPE_VIRTUAL, TRAINER_PIPE_SPLIT, TRAINER_PIPE_TRACE
};
#define TRAINER_PIPE_LONGOPTS \
	{ "microbatches", 1, 0, TRAINER_PIPE_MICRO }, \
	{ "schedule", 1, 0, TRAINER_PIPE_SCHEDULE }, \
	{ "virtual", 1, 0, TRAINER_PIPE_VIRTUAL }, \
	{ "split", 1, 0, TRAINER_PIPE_SPLIT }, \
	{ "trace", 1, 0, TRAINER_PIPE_TRACE }
/* names: the schedules --schedule takes, as its usage error lists them;
 * file: whether it takes "file" (a schedule file's). */
int trainer_pipe_option(struct trainer_pipe_opts *o, int c, const char *a,
    const char *names, int file);
/* --virtual V goes with interleaved (a usage error, ending with hint),
 * which has V 2 unless given; the others 1. */
void trainer_pipe_virtual(struct trainer_pipe_opts *o, const char *hint);

struct trainer_pipe {
	/* the program's, before trainer_pipe_split */
	const struct trainopt_common *c;	/* -o, --loss-csv, --timing */
	const struct trainer_pipe_opts *o;	/* --trace among them */
	const struct mesh *mesh;	/* collx-train's; NULL: collx-pipe's */
	const struct cli_group *g;
	int ep;			/* --ep X: experts over X replicas (0, 1: none) */
	enum ep_dispatch dispatch;	/* --dispatch */
	const char *expert_csv;	/* --expert-counts (rank 0), or NULL */
	int ft;			/* --ft on the DP axis (pipe_ft.h) */
	/* the run's own, freed by trainer_pipe_run */
	int *first;		/* the split's layer boundaries */
	char *ckpt_path;	/* --checkpoint, {world} substituted */
	const struct trainopt_ckpt *ckpt;	/* trainer_pipe_cfg's k */
};

/* p->first: the boundaries of the layers of p's stages, chunks virtual
 * ones per rank of the pipeline (--split, or balanced); a bad --split is
 * a usage error. On a mesh, each stage's layers must shard over its TP
 * group (exit 3). */
void trainer_pipe_split(struct trainer_pipe *p, const struct nn_model *m,
    int chunks);
/* cfg's run from the options: schedule, micro-batches, batch and steps,
 * the split, the trace, the checkpoints (k) and st when resumed. */
void trainer_pipe_cfg(struct pipe_cfg *cfg, struct trainer_pipe *p,
    const struct trainopt_ckpt *k, struct ckpt_state *st);
/* The schedule's options every rank must share, as job j declares them
 * (split: --split as given, NULL: balanced). */
void trainer_pipe_declare(struct prog_job *j, const struct pipe_cfg *cfg,
    const char *split);
/* The optimizer, trace and checkpoint options every rank must share. */
void trainer_pipe_declare_run(struct prog_job *j, const struct pipe_cfg *cfg,
    const struct trainopt_ckpt *k);

/* Joins the group as job, trains m on d and reports: a program body. */
void trainer_pipe_run(struct trainer_pipe *p, struct nn_model *m,
    const struct train_data *d, struct pipe_cfg *cfg,
    const struct prog_job *job);

#endif
