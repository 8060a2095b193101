/* dpopt: the data-parallel axis's sync options, read alike by collx-dp,
 * collx-train and collx-bench (dpopt.h). */
#include <string.h>

#include "cli/cli.h"
#include "prog/dpopt.h"

int
dpopt_option(struct dp_opts *o, int opt, const char *a)
{
	switch (opt) {
	case DPOPT_POWERSGD:
		o->powersgd = (int)cli_parse_long("--powersgd", a, 1, 1 << 20);
		break;
	case DPOPT_POWERSGD_START:
		o->powersgd_start = cli_parse_long("--powersgd-start", a, 0,
		    1L << 40);
		break;
	case DPOPT_SYNC_EVERY:
		o->sync_every = cli_parse_long("--sync-every", a, 0, 1L << 30);
		break;
	case DPOPT_OUTER_LR:
		o->outer_lr = cli_parse_double("--outer-lr", a, 0, 1e6);
		break;
	case DPOPT_OUTER_MOMENTUM:
		o->outer_momentum = cli_parse_double("--outer-momentum", a, 0,
		    1);
		break;
	case DPOPT_WIRE:
		if (dp_wire_parse(a, &o->wire) < 0)
			cli_usage_error("--wire: want f32, bf16, f16 or int8, "
			    "not '%s'", a);
		break;
	case DPOPT_ZERO:
		o->zero = (int)cli_parse_long("--zero", a, 0, 3);
		break;
	case DPOPT_PREFETCH:
		o->prefetch = (int)cli_parse_long("--prefetch", a, 0, 1 << 20);
		o->prefetch_given = 1;
		break;
	case DPOPT_RESHARD:
		if (strcmp(a, "yes") != 0 && strcmp(a, "no") != 0)
			cli_usage_error("--reshard-after-forward: want yes or "
			    "no, not '%s'", a);
		o->reshard = strcmp(a, "yes") == 0;
		o->reshard_given = 1;
		break;
	case DPOPT_SHARD_GROUP:
		if (strcmp(a, "all") != 0 && strcmp(a, "host") != 0)
			cli_usage_error("--shard-group: want all or host, not "
			    "'%s'", a);
		o->shard_host = strcmp(a, "host") == 0;
		o->shard_given = 1;
		break;
	case DPOPT_BUCKET:
		o->bucket_bytes = (size_t)(cli_parse_double("--bucket-mb", a, 0,
		    1 << 20) * (1 << 20));
		break;
	case DPOPT_NO_OVERLAP:
		o->overlap = 0;
		break;
	default: return 0;
	}
	return 1;
}

int
dpopt_check(struct dp_opts *o, long ckpt_every, char *err, size_t errlen)
{
	int zero = o->zero, psgd = o->powersgd;

	if ((o->prefetch_given || o->reshard_given || o->shard_given) &&
	    zero != 3)
		return cli_fail(err, errlen, "--%s goes with --zero 3",
		    o->prefetch_given ? "prefetch" : o->reshard_given ?
		    "reshard-after-forward" : "shard-group");
	if (zero == 3 && !o->overlap)
		return cli_fail(err, errlen, "--no-overlap and --zero 3: "
		    "ZeRO-3's gathers and reduce-scatters run on the "
		    "communication thread");
	if (o->powersgd > 0 && zero > 0)
		return cli_fail(err, errlen, "--powersgd and --zero %d: "
		    "PowerSGD sums whole matrices, not ZeRO's slices", zero);
	if (o->sync_every > 1 && zero > 0)
		return cli_fail(err, errlen, "--sync-every %ld and --zero %d: "
		    "each replica's own steps need its whole optimizer state",
		    o->sync_every, zero);
	if ((o->outer_lr >= 0 || o->outer_momentum >= 0) && o->sync_every == 0)
		return cli_fail(err, errlen, "--outer-lr and --outer-momentum "
		    "go with --sync-every");
	if (o->powersgd_start >= 0 && psgd == 0)
		return cli_fail(err, errlen, "--powersgd-start goes with "
		    "--powersgd");
	if (psgd > 0 && o->wire != DP_WIRE_F32)
		return cli_fail(err, errlen, "--powersgd and --wire %s: "
		    "PowerSGD's factors travel in f32", dp_wire_name(o->wire));
	if (psgd > 0 && o->sync_every > 0)
		return cli_fail(err, errlen, "--powersgd and --sync-every: local "
		    "SGD syncs parameters, not gradients");
	if (o->sync_every > 1 && ckpt_every % o->sync_every != 0)
		return cli_fail(err, errlen, "--checkpoint-every %ld is no "
		    "multiple of --sync-every %ld (a checkpoint is taken where "
		    "the replicas have synced)", ckpt_every, o->sync_every);
	o->powersgd_start = o->powersgd_start >= 0 ? o->powersgd_start : 10;
	o->outer_lr = o->outer_lr >= 0 ? o->outer_lr : 0.7;
	o->outer_momentum = o->outer_momentum >= 0 ? o->outer_momentum : 0.9;
	return 0;
}

int
dpopt_prefetch_check(const struct dp_opts *o, const struct nn_model *m,
    char *err, size_t errlen)
{
	int L = m->dims.layers > 0 ? m->dims.layers : 1;

	if (o->zero == 3 && o->prefetch > L)
		return cli_fail(err, errlen, "--prefetch %d: the model has %d "
		    "layer%s", o->prefetch, L, L > 1 ? "s" : "");
	return 0;
}

const char *
dpopt_ft_with(const struct dp_opts *d)
{
	return d->zero == 3 && d->shard_host ? "--shard-group host" :
	    d->wire != DP_WIRE_F32 ? "--wire" : d->powersgd > 0 ?
	    "--powersgd" : d->sync_every > 0 ? "--sync-every" : NULL;
}

void
dpopt_agree(struct prog_job *job, const struct dp_opts *o, int buckets)
{
	if (buckets)
		prog_job_add(job, "--bucket-mb", "%g",
		    (double)o->bucket_bytes / (1 << 20));
	prog_job_add(job, "--zero", "%d", o->zero);
	prog_job_add(job, "--prefetch", "%d", o->prefetch);
	prog_job_flag(job, "--reshard-after-forward", o->reshard);
	prog_job_add(job, "--shard-group", "%s", o->shard_host ? "host" :
	    "all");
	prog_job_add(job, "--wire", "%s", dp_wire_name(o->wire));
	prog_job_add(job, "--powersgd", "%d", o->powersgd);
	prog_job_add(job, "--powersgd-start", "%ld", o->powersgd_start);
	prog_job_add(job, "--sync-every", "%ld", o->sync_every);
	prog_job_add(job, "--outer-lr", "%.17g", o->outer_lr);
	prog_job_add(job, "--outer-momentum", "%.17g", o->outer_momentum);
	if (buckets)
		prog_job_flag(job, "--no-overlap", !o->overlap);
}
