/* join: one way into the group for every rank program. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "prog/join.h"

void
prog_job_init(struct prog_job *j, const char *what)
{
	j->len = 0;
	j->text[0] = '\0';
	j->overflow[0] = '\0';
	prog_job_add(j, NULL, "%s", what);
}

/* " OPT=VALUE" (just VALUE first, with opt NULL) appended; the first
 * that does not fit is recorded, for prog_join to report. */
void
prog_job_add(struct prog_job *j, const char *opt, const char *fmt, ...)
{
	char *at = j->text + j->len;
	size_t left = sizeof j->text - j->len;
	va_list ap;
	int k = 0, n = -1;

	if (j->overflow[0] != '\0')
		return;		/* the identity is refused already */
	if (opt != NULL)
		k = snprintf(at, left, " %s=", opt);
	if (k >= 0 && (size_t)k < left) {
		va_start(ap, fmt);
		n = vsnprintf(at + k, left - (size_t)k, fmt, ap);
		va_end(ap);
	}
	if (n < 0 || (size_t)n >= left - (size_t)k) {
		*at = '\0';		/* the part that fitted */
		snprintf(j->overflow, sizeof j->overflow, "%s",
		    opt != NULL ? opt : fmt);
		return;
	}
	j->len += (size_t)(k + n);
}

void
prog_job_flag(struct prog_job *j, const char *opt, int on)
{
	prog_job_add(j, opt, "%s", on ? "on" : "off");
}

void
prog_note(void *ctx, const char *text)
{
	(void)ctx;
	cli_info("%s", text);
}

int
prog_join(struct comm **out, const struct cli_group *g,
    const struct prog_job *job, char *err, size_t errlen)
{
	struct comm_options co = {
		.rank = g->rank, .world = g->world, .master = g->master,
		.ifaces = g->iface, .timeout = g->timeout, .token = g->token,
		.port_lo = g->port_lo, .port_hi = g->port_hi,
		.no_shm = g->no_shm, .note = prog_note
	};
	enum comm_errkind kind;
	char why[COLLX_ERRLEN], ident[sizeof job->text + 64];

	if (job->overflow[0] != '\0') {
		snprintf(err, errlen, "rank %d: job identity too long at %s",
		    g->rank, job->overflow);
		return CLI_EXIT_RUNTIME;
	}
	/* The launch's own identity (collx-run draws a random one) keeps two
	 * jobs of one program on one port apart, token or not. */
	co.job_id = g->job_id;
	if (g->job_id != NULL)
		snprintf(ident, sizeof ident, "%s COLLX_JOB_ID=%s", job->text,
		    g->job_id);
	else
		snprintf(ident, sizeof ident, "%s", job->text);
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
