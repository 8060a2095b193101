/* trainopt_check: the training programs' shared refusals
 * (trainopt_check.h). */
#include <string.h>

#include "prog/trainopt_check.h"

int
trainopt_steps_check(const struct trainopt_common *c, const char *neither,
    char *err, size_t errlen)
{
	if (c->batch < 1)
		return cli_fail(err, errlen, "--batch B is required");
	if (c->steps >= 0 && c->epochs > 0)
		return cli_fail(err, errlen, "give one of --steps and --epochs");
	if (c->steps < 0 && c->epochs <= 0)
		return cli_fail(err, errlen, "%s", neither);
	return 0;
}

int
trainopt_ft_check(int replicas, const char *axis, struct cli_group *g,
    struct dp_opts *d, char *err, size_t errlen)
{
	if (replicas < 2)
		return cli_fail(err, errlen, "--ft needs two replicas or more "
		    "(%s %d)", axis, replicas);
	if (g->iface != NULL && strchr(g->iface, ',') != NULL)
		return cli_fail(err, errlen, "--ft takes one interface, not "
		    "--iface %s (or COLLX_IFNAME)", g->iface);
	g->no_shm = 1;
	g->grow = 1;
	d->overlap = 0;
	return 0;
}
