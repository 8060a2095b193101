/* trainer: the shell every training program (collx-dp, collx-tp --train,
 * collx-pipe, collx-train) runs its steps in, so that they report, time,
 * write and checkpoint alike: the inputs' {rank} paths, the progress on
 * standard error, the --timing rows, the outputs rank 0 writes
 * (atomically, {rank} and {world} substituted) and the checkpoint
 * cadence. A program body: a failure ends the program. */
#ifndef COLLX_TRAINER_H
#define COLLX_TRAINER_H

#include <stddef.h>
#include <stdint.h>

#include "cli/cli.h"
#include "nn/nn.h"
#include "par/ckpt.h"
#include "par/train_data.h"
#include "prog/join.h"
#include "prog/progress.h"
#include "prog/trainopt.h"

struct trainer {
	int rank, world;
	long from, steps;	/* this run's first step, the steps in all */
	struct progress pr;
	struct cli_timing *timing;	/* NULL without --timing */
};

/* Usage errors every training program makes alike: no model (-m or
 * --resume) or no data (data, named data_opt, NULL: none); --checkpoint-
 * every without --checkpoint. */
void trainer_check(const struct trainopt_ckpt *k, const char *model,
    const char *data, const char *data_opt);

/* What a run trains: the model (or the checkpoint resumed, its optimizer
 * state and step in st) and its data, read from paths whose {rank} and
 * {world} are substituted (owned: those strings). Zero it first. */
struct trainer_in {
	struct nn_model m;
	struct train_data d;
	struct ckpt_state st;
	char *owned[4];
};
/* {rank} and {world} in the input paths given (outputs: at write time). */
void trainer_in_paths(struct trainer_in *in, const struct cli_group *g,
    const char **model, const char **data, const char **targets,
    const char **resume);
/* The model: --resume's checkpoint or the model file, with threads BLAS
 * threads; exit 3 when unreadable. */
void trainer_in_model(struct trainer_in *in, const struct trainopt_ckpt *k,
    const char *model, int threads);
/* The data (exit 3 when bad), then c's batch (no --batch: all of it) and
 * steps (--epochs over the data; neither: 1); a resumed run keeps the
 * checkpoint's batch (exit 3). */
void trainer_in_data(struct trainer_in *in, const char *data,
    const char *targets, struct trainopt_common *c,
    const struct trainopt_ckpt *k);
void trainer_in_free(struct trainer_in *in);

/* --init ARCH --dims DIMS [--seed S] -o OUT: a fresh model from a seed
 * written to out (with {world} 1), and the program ends. moe: NULL, or
 * the experts' settings (moe, moe_every, moe_aux) for a gpt; settings
 * that do not fit the model are exit 3. */
_Noreturn void trainer_init_model(const char *arch, const char *dims,
    uint64_t seed, const char *out, const struct nn_dims *moe);
/* -v: the assignments routed to each expert of the MoE blocks of a model
 * of sizes d in step s (its moe_counts), one line on standard error;
 * nothing for a model without experts. */
void trainer_moe_line(const struct nn_dims *d, const struct train_step *s);
/* --expert-counts: the same counts as CSV rows step,layer,expert,tokens,
 * dropped (dropped: the layer's assignments the capacity refused), the
 * header first when step s is the run's first (first); 0, or -1 when
 * writing failed. */
int trainer_moe_csv(FILE *f, const struct nn_dims *d,
    const struct train_step *s, int first);
/* A model's targets as it needs them (usage error naming topt, exit 2). */
void trainer_targets(const struct nn_model *m, const char *targets,
    const char *topt);
/* What train_step's tokens count for m: "samples" or "tokens". */
const char *trainer_unit(const struct nn_model *m);

/*
 * --timing's file (path with {rank} and {world}; NULL: none) opened for
 * rank of world with the program's extra columns (NULL: none).
 */
void trainer_open(struct trainer *t, const char *timing, const char *columns,
    int rank, int world);
/* The steps from (clamped to steps) .. steps-1 begin: rank 0 reports. */
void trainer_begin(struct trainer *t, const char *unit, long from,
    long steps);
/* One timing row of step's; extra: the extra columns' values. */
void trainer_row(struct trainer *t, const char *op, const char *algo,
    const char *dtype, size_t count, size_t bytes, long step, double seconds,
    const char *extra);
/* Ends the progress report (the summary line). */
void trainer_end(struct trainer *t);
/* Closes the timing file. */
void trainer_close(struct trainer *t);

/* After step k (0-based) of steps: a checkpoint is due (the last step,
 * and every k->every). */
int trainer_ckpt_due(const struct trainopt_ckpt *k, long step, long steps);
/* The checkpoint's options every rank must share. */
void trainer_declare_ckpt(struct prog_job *j, const struct trainopt_ckpt *k,
    long resume_step);

/* Outputs, written by the caller's rank 0: the model, and n steps' loss
 * CSV (cols: TRAINOPT_LOSS_ columns added; 1 bytes_sent), at pattern
 * with {world} (rank 0). */
void trainer_save_model(const char *pattern, int world,
    const struct nn_model *m);
void trainer_save_loss(const char *pattern, int world,
    const struct train_step *s, long n, int cols);
/* After step s (the last of this run's steps so far, s[from..step] one
 * array): when a checkpoint follows it, the loss CSV up to it, written
 * first, so that a restart from that checkpoint finds every step before
 * it there (trainopt's loss CSV keeps them). */
void trainer_save_loss_due(const struct trainer *t, const char *pattern,
    const struct trainopt_ckpt *k, const struct train_step *s, int cols);

#endif
