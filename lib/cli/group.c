/* cli group: who this rank is and where the group meets, from options,
 * then the environment of the common launchers, then defaults. */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/cli.h"

#define CLI_DEFAULT_TIMEOUT 60.0
#define CLI_TOKEN_MAX 4096

/* Launcher variables, in the order of collx(7) ENVIRONMENT; the first one
 * set wins. */
static const char *const rank_vars[] = {
	"COLLX_RANK", "RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID", NULL
};
static const char *const world_vars[] = {
	"COLLX_WORLD_SIZE", "WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE",
	"SLURM_NTASKS", NULL
};
static const char *const local_vars[] = {
	"COLLX_LOCAL_RANK", "LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK",
	"SLURM_LOCALID", NULL
};

/* The program runs as a rank: it has a group (cli_group_defaults). */
static int is_rank;

const char cli_group_help[] =
"  --rank R              this process's rank (COLLX_RANK, RANK,\n"
"                        OMPI_COMM_WORLD_RANK, PMI_RANK, SLURM_PROCID)\n"
"  --world-size N        number of ranks (COLLX_WORLD_SIZE, WORLD_SIZE,\n"
"                        OMPI_COMM_WORLD_SIZE, PMI_SIZE, SLURM_NTASKS)\n"
"  --master HOST:PORT    rendezvous address of rank 0 (COLLX_MASTER,\n"
"                        MASTER_ADDR and MASTER_PORT; under srun the\n"
"                        step's first host, a port from its ids)\n"
"  --iface NAME[,NAME]   network interface(s) to use (COLLX_IFNAME)\n"
"  --timeout S           give up on a peer after S seconds (COLLX_TIMEOUT,\n"
"                        default 60)\n"
"  --token-file F        shared secret for connections (COLLX_TOKEN)\n"
"  --no-shm              TCP between ranks of one host too, no shared\n"
"                        memory (COLLX_SHM=0)\n";

/* A usage error: the reason in err, errno EINVAL; -1. */
#define bad(err, errlen, ...) \
	(cli_fail(err, errlen, __VA_ARGS__), errno = EINVAL, -1)

/* A copy of v into *slot, replacing what was there: 0, or -1 (ENOMEM). */
static int
set(char **slot, const char *v, char *err, size_t errlen)
{
	char *d;

	if ((d = strdup(v)) == NULL) {
		cli_fail(err, errlen, "out of memory");
		errno = ENOMEM;
		return -1;
	}
	free(*slot);
	*slot = d;
	return 0;
}

/* Value and name of the first variable set (and non-empty) in list. */
static const char *
env_first(const char *const *list, const char **name)
{
	const char *v;

	for (; *list; list++) {
		v = getenv(*list);
		if (v != NULL && *v != '\0') {
			*name = *list;
			return v;
		}
	}
	return NULL;
}

int
cli_hostport_parse(const char *s, char *host, size_t hostlen, int *port)
{
	const char *colon, *h = s;
	size_t hl;
	long p;
	char *end;

	if (s == NULL)
		return -1;
	if (*s == '[') {		/* [v6addr]:port */
		colon = strstr(s, "]:");
		if (colon == NULL)
			return -1;
		h = s + 1;
		hl = (size_t)(colon - h);
		colon++;
	} else {
		colon = strrchr(s, ':');
		if (colon == NULL || memchr(s, ':', (size_t)(colon - s)))
			return -1;	/* none, or a bare IPv6 address */
		hl = (size_t)(colon - s);
	}
	if (hl == 0 || hl >= hostlen || !isdigit((unsigned char)colon[1]))
		return -1;
	errno = 0;
	p = strtol(colon + 1, &end, 10);
	if (errno || *end != '\0' || p < 1 || p > 65535)
		return -1;
	memcpy(host, h, hl);
	host[hl] = '\0';
	*port = (int)p;
	return 0;
}

int
cli_port_range_parse(const char *s, int *lo, int *hi)
{
	char *end;
	long a, b;

	if (s == NULL || !isdigit((unsigned char)*s))
		return -1;
	errno = 0;
	a = strtol(s, &end, 10);
	if (errno || *end != '-' || !isdigit((unsigned char)end[1]))
		return -1;
	b = strtol(end + 1, &end, 10);
	if (errno || *end != '\0' || a < 1 || a > b || b > 65535)
		return -1;
	*lo = (int)a;
	*hi = (int)b;
	return 0;
}

static int
check_master(char **slot, const char *what, const char *v, char *err,
    size_t errlen)
{
	char host[256];
	int port;

	if (cli_hostport_parse(v, host, sizeof host, &port) < 0)
		return bad(err, errlen, "%s: invalid address '%s' (want HOST:PORT,"
		    " [IPV6]:PORT)", what, v);
	return set(slot, v, err, errlen);
}

static int
check_iface(char **slot, const char *what, const char *v, char *err,
    size_t errlen)
{
	const char *p = v, *comma;
	size_t len;

	for (;;) {
		comma = strchr(p, ',');
		len = comma ? (size_t)(comma - p) : strlen(p);
		if (len == 0 || len > 15)
			return bad(err, errlen, "%s: invalid interface list '%s'",
			    what, v);
		if (comma == NULL)
			return set(slot, v, err, errlen);
		p = comma + 1;
	}
}

static int
read_token_file(char **slot, const char *path, char *err, size_t errlen)
{
	char buf[CLI_TOKEN_MAX + 1];
	struct stat st;
	size_t n;
	FILE *f;
	int rc;

	if ((f = fopen(path, "r")) == NULL)
		return bad(err, errlen, "--token-file: %s: %s", path,
		    strerror(errno));
	/* A secret others can read (or replace) protects nothing. */
	if (fstat(fileno(f), &st) == 0 && S_ISREG(st.st_mode) &&
	    (st.st_mode & (S_IRGRP | S_IROTH | S_IWGRP | S_IWOTH)))
		cli_warn("--token-file: %s: readable or writable by group or others "
		    "(mode %03o); chmod 600 it", path, (unsigned)(st.st_mode & 0777));
	n = fread(buf, 1, sizeof buf, f);
	rc = ferror(f);
	fclose(f);
	if (rc)
		return bad(err, errlen, "--token-file: %s: read error", path);
	if (n > CLI_TOKEN_MAX)
		return bad(err, errlen, "--token-file: %s: longer than %d bytes",
		    path, CLI_TOKEN_MAX);
	while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
		n--;
	buf[n] = '\0';
	if (n == 0 || strlen(buf) != n)
		return bad(err, errlen, "--token-file: %s: empty or not text",
		    path);
	return set(slot, buf, err, errlen);
}

void
cli_group_defaults(struct cli_group *g)
{
	is_rank = 1;
	memset(g, 0, sizeof *g);
	g->rank = g->world = g->local_rank = -1;
	g->timeout = -1;
	g->slurm_job = g->slurm_step = -1;
}

/* A whole number from option or variable name into *out: 0 or -1. */
static int
number(int *out, const char *name, const char *v, long min, long max,
    char *err, size_t errlen)
{
	long n;

	if (cli_long_value(name, v, min, max, &n, err, errlen) < 0) {
		errno = EINVAL;
		return -1;
	}
	*out = (int)n;
	return 0;
}

static int
seconds(double *out, const char *name, const char *v, char *err,
    size_t errlen)
{
	if (cli_double_value(name, v, 0.001, 1e9, out, err, errlen) < 0) {
		errno = EINVAL;
		return -1;
	}
	return 0;
}

int
cli_group_option(struct cli_group *g, int opt, const char *arg, char *err,
    size_t errlen)
{
	int rc;

	switch (opt) {
	case CLI_OPT_RANK:
		rc = number(&g->rank, "--rank", arg, 0, CLI_MAX_WORLD - 1,
		    err, errlen);
		break;
	case CLI_OPT_WORLD:
		rc = number(&g->world, "--world-size", arg, 1, CLI_MAX_WORLD,
		    err, errlen);
		break;
	case CLI_OPT_MASTER:
		rc = check_master(&g->master, "--master", arg, err, errlen);
		break;
	case CLI_OPT_IFACE:
		rc = check_iface(&g->iface, "--iface", arg, err, errlen);
		break;
	case CLI_OPT_TIMEOUT:
		rc = seconds(&g->timeout, "--timeout", arg, err, errlen);
		break;
	case CLI_OPT_TOKEN_FILE:
		rc = read_token_file(&g->token, arg, err, errlen);
		break;
	case CLI_OPT_NO_SHM:
		g->no_shm = 1;
		rc = 0;
		break;
	default:
		return 0;
	}
	return cli_taken(rc);
}

/* The first variable of vars set into *out (left alone when none is). */
static int
env_int(int *out, const char *const *vars, long min, long max, char *err,
    size_t errlen)
{
	const char *name, *v = env_first(vars, &name);

	return v ? number(out, name, v, min, max, err, errlen) : 0;
}

/* Parsed as env_fill parses it, so the two never disagree. */
int
cli_group_env_rank(void)
{
	char err[COLLX_ERRLEN];
	int r = -1;

	if (!is_rank || env_int(&r, rank_vars, 0, CLI_MAX_WORLD - 1, err,
	    sizeof err) < 0)
		return -1;
	return r;
}

/* COLLX_MASTER, else MASTER_ADDR and MASTER_PORT (torchrun's pair). */
static int
env_master(struct cli_group *g, char *err, size_t errlen)
{
	const char *v = getenv("COLLX_MASTER"), *addr, *port;
	char buf[300];
	int p;

	if (v != NULL && *v != '\0')
		return check_master(&g->master, "COLLX_MASTER", v, err, errlen);
	addr = getenv("MASTER_ADDR");
	port = getenv("MASTER_PORT");
	if (addr == NULL || *addr == '\0')
		return 0;
	if (port == NULL || *port == '\0') {
		if (g->world > 1)
			return bad(err, errlen,
			    "MASTER_ADDR is set but MASTER_PORT is not");
		return 0;
	}
	if (number(&p, "MASTER_PORT", port, 1, 65535, err, errlen) < 0)
		return -1;
	snprintf(buf, sizeof buf, strchr(addr, ':') && addr[0] != '[' ?
	    "[%s]:%s" : "%s:%s", addr, port);
	return check_master(&g->master, "MASTER_ADDR", buf, err, errlen);
}

#ifdef COLLX_PMIX
/* A PMIx server started this rank (Open MPI's mpirun, srun --mpi=pmix). */
#define pmix_launched() (getenv("PMIX_NAMESPACE") != NULL)
#else
#define pmix_launched() 0
#endif

/* Under a PMIx launcher: its namespace as the job's identity, and rank 0's
 * address through PMIx when none was given (prog_join asks for it). */
static int
env_pmix(struct cli_group *g, char *err, size_t errlen)
{
	char ident[300];

	snprintf(ident, sizeof ident, "pmix-%s", getenv("PMIX_NAMESPACE"));
	if (g->job_id == NULL && set(&g->job_id, ident, err, errlen) < 0)
		return -1;
	g->pmix = g->master == NULL && g->world > 1;
	return 0;
}

/* Under srun: the step as the job's identity, and where the group meets
 * unless an address was given (collx(7), Slurm). */
static int
env_slurm(struct cli_group *g, char *err, size_t errlen)
{
	struct cli_slurm s;
	int rc;

	rc = cli_slurm_read(&s, g->rank, g->world > 1 && g->master == NULL,
	    err, errlen);
	if (rc <= 0)
		return rc;
	/* Ranks of two steps that meet at one address refuse each other
	 * rather than form one group. */
	if (g->job_id == NULL && set(&g->job_id, s.ident, err, errlen) < 0)
		return -1;
	if (s.master[0] == '\0')
		return 0;
	g->slurm_job = s.job;
	g->slurm_step = s.step;
	return set(&g->master, s.master, err, errlen);
}

/* The variables that fill what options left unset, in collx(7) order. */
static int
env_fill(struct cli_group *g, char *err, size_t errlen)
{
	const char *v, *rank_var = NULL;
	int by_srun, by_pmix;

	/* srun started this rank: its variables say where the group meets. */
	by_srun = g->rank < 0 && env_first(rank_vars, &rank_var) != NULL &&
	    strcmp(rank_var, "SLURM_PROCID") == 0;
	by_pmix = g->rank < 0 && rank_var != NULL && pmix_launched() &&
	    (by_srun || strcmp(rank_var, "OMPI_COMM_WORLD_RANK") == 0 ||
	    strcmp(rank_var, "PMI_RANK") == 0);
	if ((g->rank < 0 && env_int(&g->rank, rank_vars, 0,
	    CLI_MAX_WORLD - 1, err, errlen) < 0) ||
	    (g->world < 0 && env_int(&g->world, world_vars, 1,
	    CLI_MAX_WORLD, err, errlen) < 0) ||
	    env_int(&g->local_rank, local_vars, 0, CLI_MAX_WORLD - 1,
	    err, errlen) < 0 ||
	    (g->master == NULL && env_master(g, err, errlen) < 0))
		return -1;
	if (g->iface == NULL && (v = getenv("COLLX_IFNAME")) && *v &&
	    check_iface(&g->iface, "COLLX_IFNAME", v, err, errlen) < 0)
		return -1;
	if (g->timeout < 0 && (v = getenv("COLLX_TIMEOUT")) && *v &&
	    seconds(&g->timeout, "COLLX_TIMEOUT", v, err, errlen) < 0)
		return -1;
	if (g->token == NULL && (v = getenv("COLLX_TOKEN")) && *v &&
	    set(&g->token, v, err, errlen) < 0)
		return -1;
	if (g->job_id == NULL && (v = getenv("COLLX_JOB_ID")) && *v &&
	    set(&g->job_id, v, err, errlen) < 0)
		return -1;
	if (!g->no_shm && (v = getenv("COLLX_SHM")) && *v) {
		if (strcmp(v, "0") != 0 && strcmp(v, "1") != 0)
			return bad(err, errlen, "COLLX_SHM: want 0 (every pair"
			    " over TCP) or 1 (shared memory on one host), not"
			    " '%s'", v);
		g->no_shm = *v == '0';
	}
	if ((v = getenv("COLLX_PORT_RANGE")) && *v &&
	    cli_port_range_parse(v, &g->port_lo, &g->port_hi) < 0)
		return bad(err, errlen, "COLLX_PORT_RANGE: invalid range '%s'"
		    " (want LO-HI, 1 <= LO <= HI <= 65535)", v);
	if (by_pmix)
		return env_pmix(g, err, errlen);
	return by_srun ? env_slurm(g, err, errlen) : 0;
}

int
cli_group_resolve(struct cli_group *g, char *err, size_t errlen)
{
	if (env_fill(g, err, errlen) < 0)
		return -1;
	if (g->timeout < 0)
		g->timeout = CLI_DEFAULT_TIMEOUT;
	if (g->world < 0) {
		if (g->rank > 0)
			return bad(err, errlen, "rank %d given but no world size"
			    " (use --world-size or set COLLX_WORLD_SIZE)", g->rank);
		g->world = 1;
	}
	if (g->rank < 0) {
		if (g->world > 1)
			return bad(err, errlen, "world size %d given but no rank"
			    " (use --rank or set COLLX_RANK)", g->world);
		g->rank = 0;
	}
	if (g->rank >= g->world)
		return bad(err, errlen, "rank %d is out of range for world size %d",
		    g->rank, g->world);
	if (g->world > 1 && g->master == NULL && !g->pmix)
		return bad(err, errlen, "world size %d needs a rendezvous address"
		    " (use --master HOST:PORT or set COLLX_MASTER)", g->world);
	return 0;
}

void
cli_group_free(struct cli_group *g)
{
	if (g->token)
		memset(g->token, 0, strlen(g->token));
	free(g->master);
	free(g->iface);
	free(g->token);
	free(g->job_id);
	cli_group_defaults(g);
}

/* A group failure: out of memory (errno ENOMEM) ends the program as
 * cli_calloc does, anything else is the user's. */
static void
group_die(const char *err)
{
	if (errno == ENOMEM)
		cli_die(CLI_EXIT_RUNTIME, "%s", err);
	cli_own_usage_error("%s", err);
}

int
cli_group_getopt(struct cli_group *g, int opt, const char *arg)
{
	char err[COLLX_ERRLEN];
	int rc;

	if ((rc = cli_group_option(g, opt, arg, err, sizeof err)) < 0)
		group_die(err);
	return rc;
}

void
cli_group_finish(struct cli_group *g)
{
	char err[COLLX_ERRLEN];

	if (cli_group_resolve(g, err, sizeof err) < 0)
		group_die(err);
	cli_rank = g->rank;
	cli_world = g->world;
}
