/* trainer_pipe: the pipeline run of collx-pipe and collx-train, in the
 * trainer shell: the layer split and the run's pipe_cfg from the
 * options, the options every rank must share, and the run with its
 * per-step report, timing rows, outputs and the bubble's summary. One
 * engine: collx-pipe is collx-train's run without a mesh (one pipeline
 * over the whole group), its reports in collx-pipe's words. */
#ifndef COLLX_TRAINER_PIPE_H
#define COLLX_TRAINER_PIPE_H

#include "par/mesh.h"
#include "par/pipe.h"
#include "prog/trainer.h"

struct trainer_pipe {
	const struct trainopt_common *c;	/* -o, --loss-csv, --timing */
	const char *trace;	/* --trace F.json, or NULL */
	const struct mesh *mesh;	/* collx-train's; NULL: collx-pipe's */
	const struct cli_group *g;
};

/* The boundaries of stages stages' layers (--split, or balanced), for
 * the caller to free; a bad --split is a usage error. */
int *trainer_pipe_split(const struct nn_model *m, int stages,
    const char *split);
/* cfg's run from the options: schedule, micro-batches, batch and steps,
 * the split first, the trace, the checkpoints (their path with {world};
 * returned for the caller to free) and st when resumed. */
char *trainer_pipe_cfg(struct pipe_cfg *cfg, const struct trainopt_common *c,
    const struct trainopt_ckpt *k, struct ckpt_state *st, int micro,
    const int *first, const char *trace, int world);
/* The schedule's options every rank must share, as job j declares them
 * (split: --split as given, NULL: balanced). */
void trainer_pipe_declare(struct prog_job *j, const struct pipe_cfg *cfg,
    const char *split);
/* The optimizer, trace and checkpoint options every rank must share. */
void trainer_pipe_declare_run(struct prog_job *j, const struct pipe_cfg *cfg,
    const struct trainopt_ckpt *k);

/* Joins the group as job, trains m on d and reports: a program body. */
void trainer_pipe_run(const struct trainer_pipe *p, struct nn_model *m,
    const struct train_data *d, struct pipe_cfg *cfg,
    const struct prog_job *job);

#endif
