/* join: one way into the group for every rank program. */
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "prog/join.h"
#include "cli/cpus.h"
#ifdef COLLX_PMIX
#include "prog/pmix.h"
#endif

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

/* Whether binding the wildcard address of family to port fails for a
 * listener holding it (on any address of that family). */
static int
bind_refused(int family, int port)
{
	struct sockaddr_storage ss;
	struct sockaddr_in *a4 = (struct sockaddr_in *)&ss;
	struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&ss;
	int one = 1, fd, held;

	memset(&ss, 0, sizeof ss);
	ss.ss_family = (sa_family_t)family;
	if (family == AF_INET)
		a4->sin_port = htons((uint16_t)port);
	else
		a6->sin6_port = htons((uint16_t)port);
	if ((fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0)
		return 0;
	/* As the rendezvous listens: a closing connection holds nothing. */
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (family == AF_INET6)
		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
	held = bind(fd, (struct sockaddr *)&ss, family == AF_INET ?
	    sizeof *a4 : sizeof *a6) < 0 && errno == EADDRINUSE;
	close(fd);
	return held;
}

/* Whether a listener of this host, on any address, holds port. */
static int
port_held(int port)
{
	return bind_refused(AF_INET, port) || bind_refused(AF_INET6, port);
}

/*
 * Rank 0 of a Slurm step whose rendezvous port (cli_slurm_port) was taken:
 * most likely by a step of the same job, with a step id equal modulo 64,
 * meeting on the same first host at the same time. 1 with the reason in
 * err when so.
 */
static int
slurm_collision(const struct cli_group *g, char *err, size_t errlen)
{
	char host[256];
	int port;

	if (g->rank != 0 || g->slurm_step < 0 ||
	    cli_hostport_parse(g->master, host, sizeof host, &port) < 0 ||
	    !port_held(port))
		return 0;
	snprintf(err, errlen, "rank 0: rendezvous port %d on %s (Slurm job "
	    "%ld step %ld) is taken: a step of this job whose id is equal "
	    "modulo 64 is meeting there at the same time, or another program"
	    " holds it (give one of them --master HOST:PORT or COLLX_MASTER)",
	    port, host, g->slurm_job, g->slurm_step);
	return 1;
}

/* The number of ranks on this machine as the launcher that started this
 * one tells it (torchrun's, Open MPI's, Slurm's tasks of this node), or
 * -1. */
static int
local_size(void)
{
	const char *v, *node;
	char *end;
	long n, times;
	int k, at = 0;

	if ((v = getenv("LOCAL_WORLD_SIZE")) != NULL ||
	    (v = getenv("OMPI_COMM_WORLD_LOCAL_SIZE")) != NULL)
		return (n = strtol(v, &end, 10)) > 0 && *end == '\0' ?
		    (int)n : -1;
	/* "2(x3),1": 2 tasks on each of nodes 0-2, 1 on node 3 */
	if ((v = getenv("SLURM_STEP_TASKS_PER_NODE")) == NULL ||
	    (node = getenv("SLURM_NODEID")) == NULL)
		return -1;
	k = atoi(node);
	for (;;) {
		n = strtol(v, &end, 10);
		times = 1;
		if (strncmp(end, "(x", 2) == 0) {
			times = strtol(end + 2, &end, 10);
			end += *end == ')';
		}
		if (end == v || n < 1 || times < 1)
			return -1;
		if (k < at + times)
			return (int)n;
		at += (int)times;
		if (*end != ',')
			return -1;
		v = end + 1;
	}
}

int
prog_join(struct comm **out, const struct cli_group *g,
    const struct prog_job *job, char *err, size_t errlen)
{
	struct comm_options co = {
		.rank = g->rank, .world = g->world, .master = g->master,
		.ifaces = g->iface, .timeout = g->timeout, .token = g->token,
		.port_lo = g->port_lo, .port_hi = g->port_hi,
		.no_shm = g->no_shm, .note = prog_note, .grow = g->grow,
		.rejoin = g->grow && getenv("COLLX_REJOIN") != NULL &&
		    strcmp(getenv("COLLX_REJOIN"), "1") == 0
	};
	enum comm_errkind kind;
	char why[COLLX_ERRLEN], ident[sizeof job->text + 64];
	char *pmix_master = NULL;
	int rc;

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
	/* Placed as collx-run places its ranks (it did so already where it
	 * started this one: it sets COLLX_JOB_ID), before the rings' pages
	 * are touched. */
	if (getenv("COLLX_JOB_ID") == NULL && cli_place_self(g->local_rank,
	    local_size(), why, sizeof why) < 0)
		cli_warn("rank %d: not bound: %s", g->rank, why);
#ifdef COLLX_PMIX
	if (g->pmix && prog_pmix_master(g->timeout, &pmix_master, why,
	    sizeof why) < 0) {
		snprintf(err, errlen, "rank %d: %s", g->rank, why);
		return CLI_EXIT_RUNTIME;
	}
	if (g->pmix)
		co.master = pmix_master;
#endif
	rc = comm_open_ex(out, &co, &kind, why, sizeof why);
	free(pmix_master);
	if (rc == 0)
		return 0;
	if (slurm_collision(g, err, errlen))
		return CLI_EXIT_RUNTIME;
	/* The transport's own messages already start with "rank R: ". */
	if (strncmp(why, "rank ", 5) == 0)
		snprintf(err, errlen, "%s", why);
	else
		snprintf(err, errlen, "rank %d: %s", g->rank, why);
	return kind == COMM_ERR_MISMATCH ? CLI_EXIT_DATA : CLI_EXIT_RUNTIME;
}
