/* launch_rank: what each rank of a job is started with: the rendezvous
 * address, the job's identity, its environment and its command line. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "comm/auth.h"
#include "comm/sock.h"
#include "launch/launch.h"

/* The remote shell's first step with a token: its first line of input. */
#define TOKEN_SCRIPT \
	"IFS= read -r COLLX_TOKEN && export COLLX_TOKEN && exec env \"$@\""

/*
 * PyTorch's pair, MASTER_ADDR and MASTER_PORT: collx's host and another
 * port, so that a PyTorch store and collx's rendezvous never clash: a free
 * one locally, else the next (collx programs take COLLX_MASTER first).
 */
static int
choose_torch_port(struct launch_job *j, int port, char *err, size_t errlen)
{
	int k;

	if (launch_hosts_all_local(&j->hosts) &&
	    strncmp(j->master, "127.0.0.1:", 10) == 0) {
		for (k = 0; k < 16; k++) {
			if (comm_sock_free_port("127.0.0.1", &j->torch_port, err,
			    errlen) < 0)
				return -1;
			if (j->torch_port != port)
				return 0;
		}
	}
	j->torch_port = port < 65535 ? port + 1 : port - 1;
	return 0;
}

/* The rendezvous address: --master, else a free local port when every
 * rank is local, else the first host's address on LAUNCH_DEFAULT_PORT:
 * this machine's name when that host is its loopback. */
static int
choose_master(struct launch_job *j, char *err, size_t errlen)
{
	char host[256], self[256] = "";
	const char *addr;
	int port;

	if (j->master == NULL && launch_hosts_all_local(&j->hosts)) {
		if (comm_sock_free_port("127.0.0.1", &port, err, errlen) < 0)
			return -1;
		j->master = cli_asprintf("127.0.0.1:%d", port);
	} else if (j->master == NULL) {
		addr = launch_host_addr(j->hosts.names[0]);
		if (launch_host_loopback(addr) &&
		    gethostname(self, sizeof self - 1) == 0 && *self)
			addr = self;	/* as the remote hosts reach it */
		j->master = cli_asprintf(strchr(addr, ':') && addr[0] != '[' ?
		    "[%s]:%d" : "%s:%d", addr, LAUNCH_DEFAULT_PORT);
	}
	if (cli_hostport_parse(j->master, host, sizeof host, &port) < 0)
		return cli_fail(err, errlen, "%s: not HOST:PORT", j->master);
	j->torch_addr = cli_strdup(host);
	return choose_torch_port(j, port, err, errlen);
}

/* This launch's identity: the ranks of two launches that meet at one
 * rendezvous port refuse each other even without a token. */
static int
draw_job_id(struct launch_job *j, char *err, size_t errlen)
{
	const char *v = getenv("COLLX_JOB_ID");
	unsigned char r[16];
	int k;

	if (v && *v && strlen(v) < sizeof j->job_id &&
	    strspn(v, "0123456789abcdefABCDEF-_") == strlen(v)) {
		snprintf(j->job_id, sizeof j->job_id, "%s", v);
		return 0;
	}
	if (auth_random(r, sizeof r, err, errlen) < 0)
		return -1;
	for (k = 0; k < 16; k++)
		snprintf(j->job_id + 2 * k, 3, "%02x", r[k]);
	return 0;
}

int
launch_job_prepare(struct launch_job *j, char *err, size_t errlen)
{
	if (choose_master(j, err, errlen) < 0 ||
	    draw_job_id(j, err, errlen) < 0)
		return -1;
	if (!launch_hosts_all_local(&j->hosts) && j->wdir == NULL)
		j->cwd = getcwd(NULL, 0);	/* NULL (removed): no cd */
	return 0;
}

void
launch_job_free(struct launch_job *j)
{
	int i;

	for (i = 0; i < j->nexports; i++)
		free(j->exports[i]);
	free(j->exports);
	free(j->master);
	free(j->timeout);
	free(j->torch_addr);
	free(j->cwd);
	launch_words_free(j->ssh);
	launch_hosts_free(&j->hosts);
	memset(j, 0, sizeof *j);
}

/* Whether the launcher sets variable name for each rank itself. */
static int
per_rank_var(const char *name)
{
	static const char *const vars[] = { "COLLX_RANK", "COLLX_WORLD_SIZE",
	    "COLLX_LOCAL_RANK", "COLLX_MASTER", "RANK", "WORLD_SIZE",
	    "LOCAL_RANK", "LOCAL_WORLD_SIZE", NULL };
	const char *const *p;

	for (p = vars; *p; p++)
		if (strcmp(name, *p) == 0)
			return 1;
	return 0;
}

int
launch_job_export(struct launch_job *j, const char *arg, char *err,
    size_t errlen)
{
	const char *eq = strchr(arg, '='), *v;
	size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
	char name[256];

	if (len == 0 || len >= sizeof name || strspn(arg, "ABCDEFGHIJKLMNOPQRS"
	    "TUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_") != len ||
	    (arg[0] >= '0' && arg[0] <= '9'))
		return cli_fail(err, errlen, "invalid variable name in '%s'",
		    arg);
	memcpy(name, arg, len);
	name[len] = '\0';
	if (per_rank_var(name))
		return cli_fail(err, errlen, "%s is set by %s for each rank",
		    name, cli_progname);
	if (eq == NULL && (v = getenv(name)) == NULL)
		return cli_fail(err, errlen, "%s is not set", name);
	j->exports = cli_reallocarray(j->exports, (size_t)j->nexports + 1,
	    sizeof *j->exports);
	j->exports[j->nexports++] = eq ? cli_strdup(arg) :
	    cli_asprintf("%s=%s", name, v);
	return 0;
}

const char *
launch_token(void)
{
	const char *v = getenv("COLLX_TOKEN");

	return v && *v ? v : NULL;
}

/* NAME=VALUE appended to the vector *v of *n words. */
static void
var(char ***v, int *n, const char *name, const char *value)
{
	launch_words_push(v, n, cli_asprintf("%s=%s", name, value));
}

static void
var_int(char ***v, int *n, const char *name, int value)
{
	launch_words_push(v, n, cli_asprintf("%s=%d", name, value));
}

/* Whether -x gives variable name. */
static int
exported(const struct launch_job *j, const char *name)
{
	size_t len = strlen(name);

	for (int k = 0; k < j->nexports; k++)
		if (strncmp(j->exports[k], name, len) == 0 &&
		    j->exports[k][len] == '=')
			return 1;
	return 0;
}

char **
launch_rank_env(const struct launch_job *j, int i, const struct launch_rank *r)
{
	static const char *const passed[] = { "COLLX_TOKEN", "COLLX_IFNAME",
	    "COLLX_SHM", NULL };
	const char *const *p, *v;
	char **env = NULL;
	int n = 0, k;

	var_int(&env, &n, "COLLX_RANK", i);
	var_int(&env, &n, "COLLX_WORLD_SIZE", j->n);
	var_int(&env, &n, "COLLX_LOCAL_RANK", r->local_rank);
	var(&env, &n, "COLLX_JOB_ID", j->job_id);
	var(&env, &n, "COLLX_MASTER", j->master);
	/* torchrun's names, so a PyTorch script runs unchanged. */
	var_int(&env, &n, "RANK", i);
	var_int(&env, &n, "WORLD_SIZE", j->n);
	var_int(&env, &n, "LOCAL_RANK", r->local_rank);
	var_int(&env, &n, "LOCAL_WORLD_SIZE", r->local_world);
	var(&env, &n, "MASTER_ADDR", j->torch_addr);
	var_int(&env, &n, "MASTER_PORT", j->torch_port);
	if (j->port_range)
		var(&env, &n, "COLLX_PORT_RANGE", j->port_range);
	if (j->timeout)
		var(&env, &n, "COLLX_TIMEOUT", j->timeout);
	else if ((v = getenv("COLLX_TIMEOUT")) != NULL)
		var(&env, &n, "COLLX_TIMEOUT", v);
	for (p = passed; *p; p++)
		if ((v = getenv(*p)) != NULL && !(r->host >= 0 &&
		    strcmp(*p, "COLLX_TOKEN") == 0))
			var(&env, &n, *p, v);
	for (k = 0; k < j->nexports; k++)
		launch_words_push(&env, &n, cli_strdup(j->exports[k]));
	/* A rank computes on one thread unless asked (--threads grows the
	 * pool): OpenBLAS would start a worker per core when it loads, which
	 * spin on the cores the ranks share. */
	if (getenv("OPENBLAS_NUM_THREADS") == NULL &&
	    !exported(j, "OPENBLAS_NUM_THREADS"))
		var(&env, &n, "OPENBLAS_NUM_THREADS", "1");
	return env;
}

char **
launch_rank_argv(const struct launch_job *j, int i, const struct launch_rank *r,
    char *const *env)
{
	char **argv = NULL, *a;
	const char *dir;
	int n = 0, remote = r->host >= 0, k;

	if (remote) {
		for (k = 0; j->ssh[k]; k++)
			launch_words_push(&argv, &n, cli_strdup(j->ssh[k]));
		launch_words_push(&argv, &n,
		    cli_strdup(j->hosts.names[r->host]));
		/* As mpirun: this directory when the host has it, else the
		 * remote shell's own; wdir or fail. */
		if (j->wdir || j->cwd) {
			launch_words_push(&argv, &n, cli_strdup("cd"));
			dir = j->wdir ? j->wdir : j->cwd;
			launch_words_push(&argv, &n, launch_shquote(dir));
			launch_words_push(&argv, &n,
			    cli_strdup(j->wdir ? "&&" : "2>/dev/null;"));
		}
		if (launch_token()) {
			launch_words_push(&argv, &n, cli_strdup("sh"));
			launch_words_push(&argv, &n, cli_strdup("-c"));
			launch_words_push(&argv, &n,
			    launch_shquote(TOKEN_SCRIPT));
			launch_words_push(&argv, &n, cli_strdup("sh"));
		} else {
			launch_words_push(&argv, &n, cli_strdup("env"));
		}
		for (k = 0; env[k]; k++)
			launch_words_push(&argv, &n, launch_shquote(env[k]));
	}
	for (k = 0; j->prog[k]; k++) {
		a = cli_subst(j->prog[k], i, j->n);
		if (remote) {
			launch_words_push(&argv, &n, launch_shquote(a));
			free(a);
		} else {
			launch_words_push(&argv, &n, a);
		}
	}
	return argv;
}
