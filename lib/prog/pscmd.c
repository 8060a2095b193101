/* pscmd: the bodies of collx-ps's commands: the server (lib/comm/ps.c's
 * protocol, nn's optimizer on its shard) and the flat files its clients
 * read and write. A program body: a failure ends the program. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

#include "cli/cli.h"
#include "comm/coll.h"
#include "comm/sock.h"
#include "par/dp.h"
#include "prog/join.h"
#include "prog/pscmd.h"
#include "prog/trainopt.h"
#include "tensor/flat.h"
#include "tensor/tensor.h"

static volatile sig_atomic_t stop_requested;

/* A safetensors file as one flat f32 vector and its layout; exit 3 if bad. */
void
pscmd_load_flat(const char *path, float **flat, size_t *total, char **layout)
{
	struct tensor_set s = { 0 };
	char e[COLLX_ERRLEN];

	if (tensor_load(path, &s, e, sizeof(e)) < 0)	/* names path */
		cli_die_rank(CLI_EXIT_DATA, "%s", e);
	if (tensor_set_flatten(&s, flat, total, layout, e, sizeof(e)) < 0)
		cli_die_rank(CLI_EXIT_DATA, "%s: %s", path, e);
	tensor_set_free(&s);
}

void
pscmd_save_flat(const char *path, const char *layout, const float *flat,
    size_t total)
{
	struct tensor_set s = { 0 };
	char e[COLLX_ERRLEN];

	if (tensor_set_unflatten(layout, flat, total, &s, e, sizeof(e)) < 0)
		cli_die(CLI_EXIT_DATA, "%s: %s", path, e);
	if (tensor_save(path, &s, e, sizeof(e)) < 0)	/* names path */
		cli_die(CLI_EXIT_RUNTIME, "%s", e);
	tensor_set_free(&s);
}

static void
on_signal(int sig)
{
	(void)sig;
	stop_requested = 1;
}

static void
log_event(void *ctx, const char *msg)
{
	(void)ctx;
	cli_info("%s", msg);
}

/* Servers of one job update their shards alike: they refuse each other
 * when started with another rule. */
static struct comm *
join_servers(const struct pscmd_serve *o, const struct nn_optim_cfg *oc)
{
	struct prog_job job;
	struct comm *c;
	char e[COLLX_ERRLEN];
	int code;

	prog_job_init(&job, "collx-ps serve");
	prog_job_add(&job, "--workers", "%d", o->workers);
	prog_job_add(&job, "--mode", "%s", ps_mode_name(o->mode));
	if (o->staleness >= 0)
		prog_job_add(&job, "--staleness", "%d", o->staleness);
	else
		prog_job_add(&job, "--staleness", "none");
	trainopt_optim_agree(&job, oc);
	if ((code = prog_join(&c, o->g, &job, e, sizeof e)) != 0)
		cli_die(code, "%s", e);
	return c;
}

static int
listen_port(const struct pscmd_serve *o)
{
	struct comm_sock_addr bound;
	char hp[96], e[COLLX_ERRLEN];
	int fd;

	/* Only the chosen interface's address when there is one. */
	snprintf(hp, sizeof(hp), "%s:%d", o->g->iface ? o->g->iface : "",
	    o->port ? o->port + o->g->rank : 0);
	fd = comm_sock_listen_iface(o->g->iface, o->port ? o->port + o->g->rank : 0, &bound,
	    e, sizeof(e));
	if (fd < 0)
		cli_die(CLI_EXIT_RUNTIME, "server %d: listen on %s: %s", o->g->rank,
		    hp, e);
	printf("%d\n", comm_sock_addr_port(&bound));
	fflush(stdout);
	cli_debug("server %d of %d listening on %s", o->g->rank, o->g->world,
	    bound.str);
	return fd;
}

/* The servers gather every shard; rank 0 writes the whole vector. */
static void
write_final(const struct pscmd_serve *o, struct comm *c, float *flat, size_t total,
    const char *layout)
{
	size_t *counts = cli_calloc((size_t)o->g->world, sizeof(size_t)), off;
	char *path;
	int r;

	for (r = 0; r < o->g->world; r++)
		ps_shard(total, o->g->world, r, &off, &counts[r]);
	ps_shard(total, o->g->world, o->g->rank, &off, &counts[o->g->rank]);
	if (coll_allgatherv(c, flat + off, flat, counts, DT_F32, COLL_AUTO) < 0)
		cli_die(CLI_EXIT_RUNTIME, "%s", comm_error(c));
	free(counts);
	if (o->g->rank != 0)
		return;
	path = cli_subst(o->out, o->g->rank, o->g->world);
	pscmd_save_flat(path, layout, flat, total);
	free(path);
}

void
pscmd_serve_run(const struct pscmd_serve *o)
{
	struct ps_server_cfg sc = { 0 };
	struct nn_optim opt;
	struct sigaction sa = { 0 };
	struct comm *c;
	float *flat;
	size_t total, off, len;
	char *layout, *path, e[COLLX_ERRLEN];
	int rc;

	path = cli_subst(o->model, o->g->rank, o->g->world);
	pscmd_load_flat(path, &flat, &total, &layout);
	free(path);
	ps_shard(total, o->g->world, o->g->rank, &off, &len);
	if (nn_optim_init(&opt, &o->optim, len, e, sizeof(e)) < 0)
		cli_die(CLI_EXIT_RUNTIME, "%s", e);
	c = join_servers(o, &o->optim);
	sa.sa_handler = on_signal;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	sc = (struct ps_server_cfg){
		.lfd = listen_port(o), .index = o->g->rank, .nserv = o->g->world,
		.total = total, .shard = flat + off, .layout = layout,
		.workers = o->workers, .mode = o->mode, .staleness = o->staleness,
		.timeout = o->g->timeout, .token = o->g->token,
		.update = dp_optim_update, .ctx = &opt, .stop = &stop_requested,
		.log = log_event
	};
	rc = ps_serve(&sc, e, sizeof(e));
	if (o->out != NULL)
		write_final(o, c, flat, total, layout);
	if (rc < 0)
		cli_die(CLI_EXIT_RUNTIME, "%s", e);
	comm_close(c);
	nn_optim_free(&opt);
	free(flat);
	free(layout);
}

