/* trainopt_slow: the options of data parallelism for slow links, read
 * alike by collx-dp and collx-train (trainopt.h). */
#include "cli/cli.h"
#include "prog/trainopt.h"

int
trainopt_slow_option(struct trainopt_slow *o, int opt, const char *a)
{
	switch (opt) {
	case TRAINOPT_POWERSGD:
		o->powersgd = (int)cli_parse_long("--powersgd", a, 1, 1 << 20);
		break;
	case TRAINOPT_POWERSGD_START:
		o->powersgd_start = cli_parse_long("--powersgd-start", a, 0,
		    1L << 40);
		o->have_psgd_start = 1;
		break;
	case TRAINOPT_SYNC_EVERY:
		o->sync_every = cli_parse_long("--sync-every", a, 0, 1L << 30);
		break;
	case TRAINOPT_OUTER_LR:
		o->outer_lr = cli_parse_double("--outer-lr", a, 0, 1e6);
		o->have_outer = 1;
		break;
	case TRAINOPT_OUTER_MOMENTUM:
		o->outer_momentum = cli_parse_double("--outer-momentum", a, 0,
		    1);
		o->have_outer = 1;
		break;
	case TRAINOPT_WIRE:
		if (dp_wire_parse(a, &o->wire) < 0)
			cli_usage_error("--wire: want f32, bf16, f16 or int8, "
			    "not '%s'", a);
		break;
	default: return 0;
	}
	return 1;
}

void
trainopt_slow_check(const struct trainopt_slow *o, int zero)
{
	if (o->powersgd > 0 && zero > 0)
		cli_usage_error("--powersgd and --zero %d: PowerSGD sums whole "
		    "matrices, not ZeRO's slices", zero);
	if (o->sync_every > 1 && zero > 0)
		cli_usage_error("--sync-every %ld and --zero %d: each replica's "
		    "own steps need its whole optimizer state", o->sync_every,
		    zero);
	if (o->have_outer && o->sync_every == 0)
		cli_usage_error("--outer-lr and --outer-momentum go with "
		    "--sync-every");
	if (o->have_psgd_start && o->powersgd == 0)
		cli_usage_error("--powersgd-start goes with --powersgd");
	if (o->powersgd == 0)
		return;
	if (o->wire != DP_WIRE_F32)
		cli_usage_error("--powersgd and --wire %s: PowerSGD's factors "
		    "travel in f32", dp_wire_name(o->wire));
	if (o->sync_every > 0)
		cli_usage_error("--powersgd and --sync-every: local SGD syncs "
		    "parameters, not gradients");
}
