/* dpcli: collx-dp's command line: its options of its own (the gradient
 * sync: --sync, the parameter servers' --ps-servers, --ps, --ps-mode and
 * --staleness; --shuffle, --seed, --ft; --init's --dims and experts)
 * beside the shared sets, their refusals, and what every rank must agree
 * on. Each check returns 0, or -1 with the usage error in err. */
#ifndef COLLX_DPCLI_H
#define COLLX_DPCLI_H

#include <stddef.h>

#include "cli/cli.h"
#include "nn/nn.h"
#include "par/dp.h"
#include "prog/trainopt.h"

enum {
	DPCLI_DATA = 0x1380, DPCLI_TARGETS, DPCLI_SYNC, DPCLI_PS_SERVERS,
	DPCLI_PS, DPCLI_PS_MODE, DPCLI_STALENESS, DPCLI_SHUFFLE, DPCLI_SEED,
	DPCLI_INIT, DPCLI_DIMS, DPCLI_EXPERTS, DPCLI_TOPK, DPCLI_MOE_EVERY,
	DPCLI_CAPACITY, DPCLI_AUX_LOSS, DPCLI_FT
};

struct dpcli {
	struct trainopt_common c;
	const char *data, *targets, *init, *dims, *sync_name;
	struct trainopt_optim optim;
	struct trainopt_ckpt ckpt;
	int have_ps_servers;
	struct dp_cfg cfg;
	struct cli_group g;
	struct nn_dims moe;	/* --init's experts, when have_experts */
	int have_experts;
	const char *moe_opt;	/* an experts option given, for its refusal */
};

/* The defaults of the options not given (the group's are
 * cli_group_defaults'). */
void dpcli_defaults(struct dpcli *o);
/* Option opt with its value a into o: 1, 0 when it is not one of
 * collx-dp's own, or -1 with the usage error. Numbers of the experts'
 * options that parse but do not fit the model are nn_moe_valid's. */
int dpcli_option(struct dpcli *o, int opt, const char *a, char *err,
    size_t errlen);
/* The experts' options go with --init gpt --experts E. */
int dpcli_check_init(const struct dpcli *o, char *err, size_t errlen);
/* The options' combinations once the group is known: batch and steps,
 * the servers', the DP axis's (dpopt_check, its defaults put in), local
 * SGD's, PowerSGD's, --ft's (then the group and the sync set for it)
 * and the checkpoints'. */
int dpcli_check(struct dpcli *o, char *err, size_t errlen);
/* The sync, the run and the optimizer into the job the ranks agree on. */
void dpcli_declare(struct prog_job *job, const struct dpcli *o);

#endif
