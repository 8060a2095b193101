/* meshopt: collx-train's command line: its options of its own (the
 * mesh's axes --dp, --tp, --pp and --cp, --cp-mode, the experts' --ep,
 * --dispatch and --expert-counts, --ft, --print-mesh, --ranks-per-host)
 * beside the shared sets, their refusals, the mesh they lay out for a
 * model, --print-mesh's listing and what every rank must agree on. Each
 * check returns 0, or -1 with the reason in err. */
#ifndef COLLX_MESHOPT_H
#define COLLX_MESHOPT_H

#include <stddef.h>
#include <stdio.h>

#include "cli/cli.h"
#include "par/ep.h"
#include "par/mesh.h"
#include "prog/dpopt.h"
#include "prog/trainer_pipe.h"

enum {
	MESHOPT_DATA = 0x1360, MESHOPT_DP, MESHOPT_TP, MESHOPT_PP,
	MESHOPT_PRINT, MESHOPT_PER_HOST, MESHOPT_CP, MESHOPT_CP_MODE,
	MESHOPT_EP, MESHOPT_DISPATCH, MESHOPT_EXPERT_CSV, MESHOPT_FT
};
/* --dp not given: it takes what --tp and --pp leave, unless one does */
#define MESHOPT_AXIS_UNSET (-2)

struct meshopt {
	struct trainopt_common c;
	const char *data, *targets;
	int dp, tp, pp, per_host, print;
	int cp, cp_zigzag;	/* --cp C, --cp-mode */
	int ep;			/* --ep X, 1: none */
	enum ep_dispatch dispatch;
	const char *expert_csv;	/* --expert-counts */
	int ft;			/* --ft on the DP axis */
	struct trainer_pipe_opts p;
	struct trainopt_optim optim;
	struct trainopt_ckpt ckpt;
	struct dp_opts dpo;
	struct cli_group g;
};
#define MESHOPT_DEFAULTS { .c.steps = -1, .c.threads = 1, .p.micro = 1, \
	.dp = MESHOPT_AXIS_UNSET, .tp = 1, .pp = 1, .ep = 1, \
	.p.sched = PIPE_SCHED_1F1B, .cp = 1, .cp_zigzag = 1, \
	.dpo = DP_OPTS_DEFAULTS }

/* Option opt with its value a into o: 1, 0 when it is not one of
 * collx-train's own, or -1 with the usage error. */
int meshopt_option(struct meshopt *o, int opt, const char *a, char *err,
    size_t errlen);
/* After the command line: --dp's default, interleaved's chunks. */
void meshopt_finish(struct meshopt *o);
/* The options' combinations, before any file is read: batch and steps,
 * the DP axis's (dpopt_check, its defaults put in), and those of the
 * sequence and the experts. */
int meshopt_check(struct meshopt *o, char *err, size_t errlen);
/* The mesh over world ranks, checked against model m (NULL: none): -1
 * with the numbers, bad input (exit 3, alike on every rank). */
int meshopt_mesh(const struct meshopt *o, struct mesh *mesh, int world,
    const struct nn_model *m, char *err, size_t errlen);
/* What the mesh and the model refuse of the options (usage errors):
 * micro-batches, --prefetch, the slow links' state in checkpoints, --ft
 * (then the group and the sync set for it: trainopt_ft_check) and
 * PowerSGD over TP shards. */
int meshopt_check_model(struct meshopt *o, const struct mesh *mesh,
    const struct nn_model *m, char *err, size_t errlen);
/* --print-mesh to f: the mesh over --world-size ranks (1 when not
 * given), each rank's place, the groups and --ep's groups; -1 (bad
 * input, exit 3) before a line when they do not fit. */
int meshopt_print(FILE *f, const struct meshopt *o, char *err,
    size_t errlen);
/* The mesh and everything that shapes the messages, and the optimizer
 * every replica steps with, into the job the ranks agree on. */
void meshopt_declare(struct prog_job *job, const struct meshopt *o,
    const struct mesh *m, const struct pipe_cfg *cfg);

#endif
