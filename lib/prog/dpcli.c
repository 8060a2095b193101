/* dpcli: collx-dp's command line and its refusals (dpcli.h). */
#include <string.h>

#include "comm/coll.h"
#include "comm/ps.h"
#include "prog/dpcli.h"
#include "prog/trainer.h"
#include "prog/trainopt_check.h"

void
dpcli_defaults(struct dpcli *o)
{
	o->c.steps = -1;
	o->c.threads = 1;
	o->cfg.algo = COLL_AUTO;
	o->cfg.ps_servers = 1;
	o->cfg.staleness = -1;
	o->cfg.dpo = (struct dp_opts)DP_OPTS_DEFAULTS;
	o->moe.moe = (struct nn_moe_cfg){ .topk = 1 };
	o->moe.moe_every = 1;
}

static int
parse_sync(struct dpcli *o, const char *s, char *err, size_t errlen)
{
	o->sync_name = s;
	if (strcmp(s, "ps") == 0) {
		o->cfg.sync = DP_PS;
		return 1;
	}
	o->cfg.sync = DP_ALLREDUCE;
	if (coll_algo_parse(s, &o->cfg.algo) < 0 ||
	    !coll_algo_valid(COLL_KIND_ALLREDUCE, o->cfg.algo))
		return cli_fail(err, errlen, "--sync: unknown algorithm '%s'",
		    s);
	return 1;
}

/* Options of training; 0 when c was not one of them. */
static int
train_option(struct dpcli *o, int c, const char *a, char *err, size_t errlen)
{
	struct dp_cfg *f = &o->cfg;
	long seed;
	int rc = 0;

	switch (c) {
	case DPCLI_SYNC: return parse_sync(o, a, err, errlen);
	case DPCLI_PS_SERVERS:
		o->have_ps_servers = 1;
		rc = cli_int_value("--ps-servers", a, 1, 1 << 20,
		    &f->ps_servers, err, errlen);
		break;
	case DPCLI_PS: f->ps_addrs = a; break;
	case DPCLI_PS_MODE:
		if (ps_mode_parse(a, &f->ps_mode) < 0)
			return cli_fail(err, errlen, "--ps-mode: want sync or "
			    "async, not '%s'", a);
		break;
	case DPCLI_STALENESS:
		rc = cli_int_value("--staleness", a, 0, 1 << 30, &f->staleness,
		    err, errlen);
		break;
	case DPCLI_SHUFFLE: f->shuffle = 1; break;
	case DPCLI_FT: f->ft = 1; break;
	case DPCLI_SEED:
		if ((rc = cli_long_value("--seed", a, 0, 0x7fffffffffffffffL,
		    &seed, err, errlen)) == 0)
			f->seed = (uint64_t)seed;
		break;
	default: return 0;
	}
	return cli_taken(rc);
}

/* --init's experts options; 0 when c is not one of them. */
static int
moe_option(struct dpcli *o, int c, const char *a, char *err, size_t errlen)
{
	const long big = 1L << 30;
	struct nn_moe_cfg *m = &o->moe.moe;
	int r;

	switch (c) {
	case DPCLI_EXPERTS:
		o->have_experts = 1;
		r = cli_int_value("--experts", a, -big, big, &m->experts, err,
		    errlen);
		return cli_taken(r);
	case DPCLI_TOPK:
		r = cli_int_value("--topk", a, -big, big, &m->topk, err, errlen);
		break;
	case DPCLI_MOE_EVERY:
		r = cli_int_value("--moe-every", a, -big, big, &o->moe.moe_every,
		    err, errlen);
		break;
	case DPCLI_CAPACITY:
		r = cli_double_value("--capacity", a, 0, 1e9, &m->capacity, err,
		    errlen);
		break;
	case DPCLI_AUX_LOSS:
		r = cli_double_value("--aux-loss", a, 0, 1e9, &o->moe.moe_aux,
		    err, errlen);
		break;
	default: return 0;
	}
	if (r < 0)
		return -1;
	o->moe_opt = c == DPCLI_TOPK ? "--topk" : c == DPCLI_MOE_EVERY ?
	    "--moe-every" : c == DPCLI_CAPACITY ? "--capacity" : "--aux-loss";
	return 1;
}

int
dpcli_option(struct dpcli *o, int c, const char *a, char *err,
    size_t errlen)
{
	int r;

	if ((r = train_option(o, c, a, err, errlen)) != 0)
		return r;
	switch (c) {
	case DPCLI_DATA: o->data = a; break;
	case DPCLI_TARGETS: o->targets = a; break;
	case DPCLI_INIT: o->init = a; break;
	case DPCLI_DIMS: o->dims = a; break;
	default: return moe_option(o, c, a, err, errlen);
	}
	return 1;
}

int
dpcli_check_init(const struct dpcli *o, char *err, size_t errlen)
{
	if (o->moe_opt != NULL && !o->have_experts)
		return cli_fail(err, errlen, "%s goes with --init gpt "
		    "--experts E", o->moe_opt);
	if (o->have_experts && o->init == NULL)
		return cli_fail(err, errlen, "--experts goes with --init gpt");
	return 0;
}

/* The parameter servers' options, and what goes with allreduce alone. */
static int
check_sync(struct dpcli *o, char *err, size_t errlen)
{
	struct dp_cfg *f = &o->cfg;

	if (f->ps_addrs != NULL && o->sync_name == NULL)
		f->sync = DP_PS;
	if (f->sync != DP_PS && (f->ps_addrs || o->have_ps_servers))
		return cli_fail(err, errlen, "--ps and --ps-servers go with "
		    "--sync ps");
	if (f->ps_addrs != NULL && o->have_ps_servers)
		return cli_fail(err, errlen, "--ps (external servers) and "
		    "--ps-servers (colocated) exclude each other");
	if (f->staleness >= 0 && (f->sync != DP_PS || f->ps_mode != PS_ASYNC))
		return cli_fail(err, errlen, "--staleness goes with --sync ps "
		    "--ps-mode async");
	if (f->dpo.zero > 0 && f->sync == DP_PS)
		return cli_fail(err, errlen, "--zero goes with allreduce, not "
		    "--sync ps");
	if (f->dpo.wire != DP_WIRE_F32 && f->sync == DP_PS)
		return cli_fail(err, errlen, "--wire %s goes with allreduce, "
		    "not --sync ps", dp_wire_name(f->dpo.wire));
	if (f->dpo.wire == DP_WIRE_INT8 && f->algo != COLL_AUTO)
		return cli_fail(err, errlen, "--wire int8 sends by alltoall and "
		    "allgather; --sync %s does not apply", o->sync_name);
	return 0;
}

/* Local SGD's and PowerSGD's refusals, then --ft's, each naming the
 * options: the state a replica takes with it (error feedback,
 * PowerSGD's, local SGD's, a server's shard, a host's shards of hybrid
 * ZeRO-3) would be lost with it. ZeRO 1, 2 and 3 keep each slice
 * mirrored at the ring predecessor (dp_ft_zero.c). */
static int
check_replicas(struct dpcli *o, char *err, size_t errlen)
{
	struct dp_cfg *f = &o->cfg;
	const char *with = f->sync == DP_PS ? "--sync ps" :
	    dpopt_ft_with(&f->dpo);

	if (f->dpo.sync_every > 0 && f->sync == DP_PS)
		return cli_fail(err, errlen, "--sync-every goes with allreduce, "
		    "not --sync ps");
	if (f->dpo.powersgd > 0 && f->sync == DP_PS)
		return cli_fail(err, errlen, "--powersgd goes with allreduce, "
		    "not --sync ps");
	if (!f->ft)
		return 0;
	if (with != NULL)
		return cli_fail(err, errlen, "--ft goes with plain allreduce, "
		    "not %s (the state a replica holds would leave with it)",
		    with);
	return trainopt_ft_check(o->g.world, "--world-size", &o->g, &f->dpo,
	    err, errlen);
}

int
dpcli_check(struct dpcli *o, char *err, size_t errlen)
{
	struct dp_cfg *f = &o->cfg;

	if (trainopt_steps_check(&o->c, "give one of --steps and --epochs",
	    err, errlen) < 0 || check_sync(o, err, errlen) < 0 ||
	    dpopt_check(&f->dpo, o->ckpt.every, err, errlen) < 0 ||
	    check_replicas(o, err, errlen) < 0)
		return -1;
	if ((o->ckpt.path != NULL || o->ckpt.resume != NULL) &&
	    f->sync == DP_PS && (f->ps_addrs != NULL || f->ps_mode == PS_ASYNC))
		return cli_fail(err, errlen, "--checkpoint and --resume go with "
		    "allreduce or synchronous colocated servers (external and "
		    "asynchronous servers keep the optimizer state themselves)");
	if (f->ps_addrs == NULL && f->ps_servers > o->g.world)
		return cli_fail(err, errlen, "--ps-servers %d: more servers than "
		    "the %d ranks", f->ps_servers, o->g.world);
	return 0;
}

void
dpcli_declare(struct prog_job *job, const struct dpcli *o)
{
	const struct dp_cfg *f = &o->cfg;

	prog_job_init(job, "collx-dp");
	prog_job_add(job, "--sync", "%s", f->sync == DP_PS ? "ps" :
	    coll_algo_name(f->algo));
	prog_job_add(job, "--batch", "%ld", f->batch);
	prog_job_add(job, "--steps", "%ld", f->steps);
	trainopt_optim_agree(job, &f->optim);
	dpopt_agree(job, &f->dpo, 1);
	prog_job_flag(job, "--shuffle", f->shuffle);
	prog_job_add(job, "--seed", "%llu", (unsigned long long)f->seed);
	prog_job_add(job, "--ps-servers", "%d", f->ps_servers);
	prog_job_add(job, "--ps-mode", "%s", ps_mode_name(f->ps_mode));
	prog_job_add(job, "--staleness", "%d", f->staleness);
	if (f->ft)
		prog_job_flag(job, "--ft", 1);
	trainer_declare_ckpt(job, &o->ckpt, f->resume != NULL ?
	    f->resume->step : 0L);
}
