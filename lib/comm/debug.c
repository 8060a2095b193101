/* debug: the per-rank log COLLX_DEBUG asks for (collx(7), DEBUG LOG):
 * warn (failures, dropped connections), info (the group joined, each
 * peer's address and transport), trace (each collective's algorithm and
 * why AUTO chose it). Written to COLLX_DEBUG_FILE, a pattern of %h
 * (host), %p (pid) and %r (rank), else to standard error. */
#include "cli/util.h"
#include "comm/comm_impl.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

static const char *const level_names[] = { "off", "warn", "info", "trace" };

/* One %-sequence of COLLX_DEBUG_FILE (the letter after the %): its text,
 * or NULL when it is none. */
static const char *
debug_subst(int letter, int rank, char *buf, size_t len)
{
	switch (letter) {
	case 'h':
		if (gethostname(buf, len) < 0)
			snprintf(buf, len, "localhost");
		buf[len - 1] = '\0';
		return buf;
	case 'p':
		snprintf(buf, len, "%ld", (long)getpid());
		return buf;
	case 'r':
		snprintf(buf, len, "%d", rank);
		return buf;
	case '%':
		return "%";
	default:
		return NULL;
	}
}

/* COLLX_DEBUG_FILE with its %h, %p, %r and %% replaced, into path. */
static int
debug_path(const char *pat, int rank, char *path, size_t len, char *err,
    size_t errlen)
{
	char word[256];
	const char *s;
	size_t n = 0, k;

	for (const char *p = pat; *p != '\0'; p++) {
		if (*p != '%') {
			word[0] = *p;
			word[1] = '\0';
			s = word;
		} else if ((s = debug_subst(*++p, rank, word, sizeof word)) ==
		    NULL)
			return cli_fail(err, errlen, "COLLX_DEBUG_FILE: '%s': a "
			    "%% not followed by h, p, r or %%", pat);
		k = strlen(s);
		if (k >= len - n)
			return cli_fail(err, errlen, "COLLX_DEBUG_FILE: too "
			    "long");
		memcpy(path + n, s, k + 1);
		n += k;
	}
	path[n] = '\0';
	return 0;
}

int
comm_debug_open(struct comm *c, char *err, size_t errlen)
{
	const char *lv = getenv("COLLX_DEBUG");
	const char *pat = getenv("COLLX_DEBUG_FILE");
	char path[4096];
	int i;

	if (lv == NULL || *lv == '\0')
		return 0;
	/* Any case, as NCCL_DEBUG's INFO; a level misspelt is no reason
	 * to fail a job, so it logs failures and says so. */
	for (i = 1; i <= COMM_DEBUG_TRACE; i++)
		if (strcasecmp(lv, level_names[i]) == 0)
			break;
	if (i > COMM_DEBUG_TRACE) {
		i = COMM_DEBUG_WARN;
		comm_log(c, "COLLX_DEBUG: '%s' is not warn, info or trace; "
		    "logging at warn", lv);
	}
	c->debug = i;
	if (pat == NULL || *pat == '\0')
		return 0;
	if (debug_path(pat, c->rank, path, sizeof path, err, errlen) < 0)
		return -1;
	if ((c->dbg = fopen(path, "a")) == NULL)
		return cli_fail(err, errlen, "COLLX_DEBUG_FILE: %s: %s", path,
		    strerror(errno));
	setvbuf(c->dbg, NULL, _IOLBF, 0);
	return 0;
}

void
comm_debug_close(struct comm *c)
{
	if (c->dbg != NULL)
		fclose(c->dbg);
	c->dbg = NULL;
	c->debug = COMM_DEBUG_OFF;
}

void
comm_debug(const struct comm *c, int level, const char *fmt, ...)
{
	const struct comm *net = c->net;
	char msg[1024];
	va_list ap;

	if (net->debug < level)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	fprintf(net->dbg ? net->dbg : stderr, "%s: rank %d: %s: %s\n",
	    program_invocation_short_name, net->rank, level_names[level], msg);
}

/* The group as joined: its hosts, streams and spin, and how this rank
 * reaches each peer. */
void
comm_debug_joined(const struct comm *c)
{
	int hosts = comm_hosts(c);

	if (c->debug < COMM_DEBUG_INFO)
		return;
	comm_debug(c, COMM_DEBUG_INFO, "joined: rank %d of %d, %d host%s, %d "
	    "stream%s per peer, spin %d us%s", c->rank, c->world, hosts,
	    hosts == 1 ? "" : "s", c->nstreams, c->nstreams == 1 ? "" : "s",
	    c->spin_us, c->spin_yield ? ", yielding the core" : "");
	for (int p = 0; p < c->world; p++)
		if (p != c->rank)
			comm_debug(c, COMM_DEBUG_INFO, "peer %d at %s: %s "
			    "(host %d)", p, c->peers[p].addr,
			    comm_transport(c, p), comm_host(c, p));
}
