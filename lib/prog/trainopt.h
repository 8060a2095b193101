/* trainopt: what the training programs share above the library: the
 * optimizer's options (torch.optim names and defaults) and the loss CSV. */
#ifndef COLLX_TRAINOPT_H
#define COLLX_TRAINOPT_H

#include <stddef.h>

#include "cli/cli.h"
#include "nn/nn.h"
#include "par/ckpt.h"
#include "par/train.h"

/* Optimizer options as a command line gives them (NULL: not given),
 * applied over the torch.optim defaults of the chosen kind. */
struct trainopt_optim {
	const char *kind, *lr, *momentum, *weight_decay, *betas, *eps;
};

/* The optimizer's long options: put TRAINOPT_OPTIM_LONGOPTS in the
 * getopt_long table and offer every option to trainopt_optim_option(),
 * which records it (1) or says it is not one (0). */
enum {
	TRAINOPT_OPTIMIZER = 0x1280, TRAINOPT_LR, TRAINOPT_MOMENTUM,
	TRAINOPT_WD, TRAINOPT_BETAS, TRAINOPT_EPS
};
#define TRAINOPT_OPTIM_LONGOPTS \
	{ "optimizer", 1, 0, TRAINOPT_OPTIMIZER }, { "lr", 1, 0, TRAINOPT_LR }, \
	{ "momentum", 1, 0, TRAINOPT_MOMENTUM }, \
	{ "weight-decay", 1, 0, TRAINOPT_WD }, \
	{ "betas", 1, 0, TRAINOPT_BETAS }, { "eps", 1, 0, TRAINOPT_EPS }
int trainopt_optim_option(struct trainopt_optim *o, int opt, const char *arg);

/* 0, or -1 with "--option: reason" in err (a usage error). */
int trainopt_optim_config(const struct trainopt_optim *o,
    struct nn_optim_cfg *c, char *err, size_t errlen);

/* Checkpoint options, shared by the training programs: --checkpoint F,
 * --checkpoint-every K and --resume F, put in the getopt_long table as
 * TRAINOPT_CKPT_LONGOPTS and offered to trainopt_ckpt_option(), which
 * records one (1), says it is not one (0), or returns -1 with the usage
 * error in err. */
struct trainopt_ckpt {
	const char *path, *resume;
	long every;
};
enum { TRAINOPT_CKPT = 0x1290, TRAINOPT_CKPT_EVERY, TRAINOPT_RESUME };
#define TRAINOPT_CKPT_LONGOPTS \
	{ "checkpoint", 1, 0, TRAINOPT_CKPT }, \
	{ "checkpoint-every", 1, 0, TRAINOPT_CKPT_EVERY }, \
	{ "resume", 1, 0, TRAINOPT_RESUME }
#define TRAINOPT_CKPT_HELP \
	"  --checkpoint F        rank 0 writes model, optimizer state and step\n" \
	"                        to F (atomically) after the last step\n" \
	"  --checkpoint-every K  ... and after every K steps\n" \
	"  --resume F            continue from checkpoint F (model, optimizer\n" \
	"                        state, step); -m is not read\n"
int trainopt_ckpt_option(struct trainopt_ckpt *o, int opt, const char *arg,
    char *err, size_t errlen);

/* The model a run starts from: checkpoint k->resume when given (its
 * optimizer state and step into st), else the model file. 0, or -1 with
 * "PATH: reason" (bad input, exit 3). */
int trainopt_model_start(const struct trainopt_ckpt *k, const char *model,
    struct nn_model *m, struct ckpt_state *st, char *err, size_t errlen);
/* A resumed run keeps the checkpoint's batch (the data position is step
 * times batch): 0, or -1 with the reason (exit 3). */
int trainopt_resume_check(const struct trainopt_ckpt *k,
    const struct ckpt_state *st, long batch, char *err, size_t errlen);

/* The loss CSV (step,epoch,loss,tokens,seconds,tokens_per_s), written
 * atomically. */
#define TRAINOPT_LOSS_HEADER "step,epoch,loss,tokens,seconds,tokens_per_s"
int trainopt_loss_csv_write(const char *path, const struct train_step *s,
    long n, char *err, size_t errlen);

/* The model file at path, loaded and checked: 0, or -1 with "PATH: reason"
 * (bad input, exit 3). */
int trainopt_model_load(const char *path, struct nn_model *m, char *err,
    size_t errlen);

#endif
