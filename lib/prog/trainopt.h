/* trainopt: what the training programs share above the library: the
 * optimizer's options (torch.optim names and defaults) and the loss CSV. */
#ifndef COLLX_TRAINOPT_H
#define COLLX_TRAINOPT_H

#include <getopt.h>
#include <stddef.h>

#include "cli/cli.h"
#include "nn/nn.h"
#include "par/ckpt.h"
#include "par/dp.h"
#include "par/train_data.h"
#include "prog/dpopt.h"
#include "prog/join.h"
#include "prog/precision.h"

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
#define TRAINOPT_OPTIM_HELP \
	"  --lr LR               learning rate (sgd 0.01, adamw 0.001)\n" \
	"  --optimizer NAME      sgd (default) or adamw\n" \
	"  --momentum M          sgd momentum (0)\n" \
	"  --weight-decay WD     weight decay (sgd 0, adamw 0.01)\n" \
	"  --betas B1,B2         adamw betas (0.9,0.999)\n" \
	"  --eps E               adamw epsilon (1e-8)\n"

/* 0, or -1 with "--option: reason" in err (a usage error). */
int trainopt_optim_config(const struct trainopt_optim *o,
    struct nn_optim_cfg *c, char *err, size_t errlen);
/* The optimizer's options declared as ones every rank must share. */
void trainopt_optim_agree(struct prog_job *j, const struct nn_optim_cfg *c);

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
 * atomically; _sent adds a last column, bytes_sent (train_step's). */
#define TRAINOPT_LOSS_HEADER "step,epoch,loss,tokens,seconds,tokens_per_s"
int trainopt_loss_csv_write(const char *path, const struct train_step *s,
    long n, char *err, size_t errlen);
int trainopt_loss_csv_write_sent(const char *path, const struct train_step *s,
    long n, char *err, size_t errlen);
/* Either, or with replicas (train_step's) last: cols the columns added. */
enum { TRAINOPT_LOSS_SENT = 1, TRAINOPT_LOSS_REPLICAS = 2 };
int trainopt_loss_csv_write_cols(const char *path, const struct train_step *s,
    long n, int cols, char *err, size_t errlen);

/* The model file at path, loaded and checked: 0, or -1 with "PATH: reason"
 * (bad input, exit 3). */
int trainopt_model_load(const char *path, struct nn_model *m, char *err,
    size_t errlen);


/* The options the training programs read alike: -m and -o
 * (TRAINOPT_FILE_LONGOPTS), --timing, --loss-csv and --threads
 * (TRAINOPT_RUN_LONGOPTS), --batch, --steps and --epochs
 * (TRAINOPT_STEPS_LONGOPTS); a program leaves out of its table those it
 * lacks, and sets the defaults. */
struct trainopt_common {
	const char *model, *out, *timing, *loss_csv;
	int threads;		/* BLAS threads per rank */
	long batch, steps;
	double epochs;
	enum nn_precision precision;	/* --precision (prog/precision.h) */
};
enum {
	TRAINOPT_THREADS = 0x12a0, TRAINOPT_LOSS_CSV, TRAINOPT_BATCH,
	TRAINOPT_STEPS, TRAINOPT_EPOCHS
};
#define TRAINOPT_FILE_LONGOPTS \
	{ "model", 1, 0, 'm' }, { "output", 1, 0, 'o' }
#define TRAINOPT_RUN_LONGOPTS \
	{ "timing", 1, 0, CLI_OPT_TIMING }, \
	{ "loss-csv", 1, 0, TRAINOPT_LOSS_CSV }, \
	{ "threads", 1, 0, TRAINOPT_THREADS }, \
	PRECISION_LONGOPTS
#define TRAINOPT_STEPS_LONGOPTS \
	{ "batch", 1, 0, TRAINOPT_BATCH }, { "steps", 1, 0, TRAINOPT_STEPS }, \
	{ "epochs", 1, 0, TRAINOPT_EPOCHS }

/* The help's last lines: -h and -V; _RUN_ adds --threads, -v and -q as
 * collx-pipe and collx-train say them. */
#define TRAINOPT_STD_HELP \
	"  -h, --help            this help\n" \
	"  -V, --version         version\n"
#define TRAINOPT_RUN_HELP \
	"  --threads N           BLAS threads per rank (1)\n" \
	PRECISION_HELP \
	"  -v, --verbose         a line per step on stderr (without -v, a\n" \
	"                        terminal gets one live progress line); rank 0\n" \
	"                        ends with a summary line either way\n" \
	"  -q, --quiet           no step lines, no progress, no summaries\n" \
	TRAINOPT_STD_HELP

/* A training program's command line as trainopt_parse() reads it: the
 * shared option sets it has (NULL: none), then its own options, offered to
 * own(ctx, opt, arg), which takes one (1) or says it is not one (0). */
struct trainopt_parser {
	void (*usage)(void);
	struct cli_group *g;
	struct trainopt_common *common;
	struct trainopt_optim *optim;
	struct trainopt_ckpt *ckpt;
	struct dp_opts *dpo;		/* dpopt.h's options */
	int (*own)(void *ctx, int opt, const char *arg);
	void *ctx;
	int operands;		/* at most this many operands */
};

/*
 * getopt_long over argv with shortopts and longopts, every option offered
 * to -h, -V, -v, -q, the group, the shared sets and own in turn. A program
 * body: an unknown option, one missing its value or an operand too many
 * ends the program with a usage error (exit 2). Returns the index in argv
 * of the first operand.
 */
int trainopt_parse(const struct trainopt_parser *p, int argc, char **argv,
    const char *shortopts, const struct option *longopts);

/* mlp and block models train on rows and their targets, a gpt on tokens
 * alone: 0, or -1 with the reason naming opt, the targets option (a usage
 * error, exit 2). */
int trainopt_targets_check(const struct nn_model *m, const char *targets,
    const char *opt, char *err, size_t errlen);

/* {rank} and {world} in the n paths *p[i] (NULL ones left as they are),
 * each replaced by a string of its own, owned[i], for the caller to free. */
void trainopt_subst_paths(const char **p[], char *owned[], size_t n,
    const struct cli_group *g);

/* Model m written to path, atomically: 0, or -1 with a reason that names
 * the file. */
int trainopt_model_save(const char *path, const struct nn_model *m,
    char *err, size_t errlen);

#endif
