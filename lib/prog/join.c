/* join: one way into the group for every rank program. */
#include <stdio.h>
#include <string.h>

#include "prog/join.h"

void
prog_note(void *ctx, const char *text)
{
	(void)ctx;
	cli_info("%s", text);
}

int
prog_join(struct comm **out, const struct cli_group *g, const char *job,
    char *err, size_t errlen)
{
	struct comm_options co = {
		.rank = g->rank, .world = g->world, .master = g->master,
		.ifaces = g->iface, .timeout = g->timeout, .token = g->token,
		.port_lo = g->port_lo, .port_hi = g->port_hi, .note = prog_note
	};
	enum comm_errkind kind;
	char why[COLLX_ERRLEN], ident[1024];

	/* The launch's own identity (collx-run draws a random one) keeps two
	 * jobs of one program on one port apart, token or not. */
	if (g->job_id != NULL)
		snprintf(ident, sizeof ident, "%s COLLX_JOB_ID=%s", job, g->job_id);
	else
		snprintf(ident, sizeof ident, "%s", job);
	co.job = ident;
	if (comm_open_ex(out, &co, &kind, why, sizeof why) == 0)
		return 0;
	/* The transport's own messages already start with "rank R: ". */
	if (strncmp(why, "rank ", 5) == 0)
		snprintf(err, errlen, "%s", why);
	else
		snprintf(err, errlen, "rank %d: %s", g->rank, why);
	return kind == COMM_ERR_MISMATCH ? CLI_EXIT_DATA : CLI_EXIT_RUNTIME;
}
