/* launch_bind: the cores collx-run binds its local ranks to (cli/cpus.h
 * groups and places them). */
#include "cli/cpus.h"
#include "launch/launch.h"

int
launch_cores_fit(struct cli_cores *c, const struct launch_rank *r, int n,
    int mode, char *why, size_t len)
{
	int i, here = 0;

	for (i = 0; i < n; i++)
		here += r[i].host < 0;
	return cli_cores_place(c, here, mode, why, len);
}

