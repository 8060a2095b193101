/* collx-ps: parameter servers, and a shell client that pushes gradients to
 * them or pulls parameters from them. The protocol is lib/comm/ps.c's; the
 * update rule is nn's optimizer on each server's shard; the server runs in
 * lib/prog/pscmd.c. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "comm/ps.h"
#include "prog/join.h"
#include "prog/pscmd.h"
#include "prog/trainopt.h"
#include "tensor/flat.h"

enum {
	OPT_WORKERS = CLI_OPT_PROGRAM, OPT_PORT, OPT_MODE, OPT_STALENESS, OPT_SERVER,
	OPT_WEIGHT, OPT_DONE
};

static const struct option longopts[] = {
	CLI_STD_LONGOPTS,
	TRAINOPT_FILE_LONGOPTS,
	{ "workers", 1, 0, OPT_WORKERS }, { "port", 1, 0, OPT_PORT },
	{ "mode", 1, 0, OPT_MODE }, { "staleness", 1, 0, OPT_STALENESS },
	{ "server", 1, 0, OPT_SERVER }, { "weight", 1, 0, OPT_WEIGHT },
	{ "done", 0, 0, OPT_DONE },
	TRAINOPT_OPTIM_LONGOPTS,
	CLI_GROUP_LONGOPTS,
	{ 0, 0, 0, 0 }
};

struct opts {
	struct trainopt_common c;	/* -m and -o */
	const char *cmd, *server, *file;
	int workers, port, staleness, done;
	double weight;
	enum ps_mode mode;
	struct trainopt_optim optim;
	struct cli_group g;
};

static _Noreturn void
usage(void)
{
	printf("usage: %s serve -m INIT.safetensors --workers N [--port P]\n"
	    "           [--optimizer sgd|adamw] [--lr LR] [--momentum M]\n"
	    "           [--weight-decay WD] [--betas B1,B2] [--eps E]\n"
	    "           [--mode sync|async] [--staleness K] [-o FINAL.safetensors]\n"
	    "       %s push --server HOST:PORT[,...] [--weight W] [--done]\n"
	    "           [-o NEW.safetensors] GRADS.safetensors\n"
	    "       %s pull --server HOST:PORT[,...] -o PARAMS.safetensors\n\n"
	    "Parameter servers and their shell client. Several servers started\n"
	    "together (collx-run -n S) share the parameters: server r serves\n"
	    "shard r and listens on port P+r. A client names every server, in\n"
	    "rank order.\n\n"
	    "serve:\n"
	    "  -m, --model F         initial parameters (safetensors)\n"
	    "  --workers N           workers in a round; the server ends when N\n"
	    "                        workers said done (or on SIGTERM/SIGINT)\n"
	    "  --port P              listen on port P + rank (default: any, printed)\n"
	    "  --optimizer NAME      sgd (default) or adamw; --lr, --momentum,\n"
	    "  --weight-decay, --betas, --eps as in collx-dp (torch.optim defaults)\n"
	    "  --mode MODE           sync (rounds, default) or async\n"
	    "  --staleness K         async: hold a worker K pushes ahead of the\n"
	    "                        slowest\n"
	    "  -o, --output F        rank 0 writes the final parameters at the end\n"
	    "push:\n"
	    "  --server LIST         the servers, in rank order\n"
	    "  --weight W            the gradient is a sum over W samples (1)\n"
	    "  --done                then tell the servers this worker has finished\n"
	    "  -o, --output F        write the parameters after the round\n"
	    "pull:\n"
	    "  --server LIST         the servers, in rank order\n"
	    "  -o, --output F        write the current parameters\n\n"
	    "  -v, --verbose         log server events\n"
	    "  -q, --quiet           no messages but errors\n"
	    "  -h, --help            this help\n"
	    "  -V, --version         version\n"
	    "%s"
	    "Exit status: 0 ok, 1 runtime failure (server or worker lost, timeout),\n"
	    "2 usage, 3 bad input (gradients of another model).\n",
	    cli_progname, cli_progname, cli_progname, cli_group_help);
	cli_close_stdout();
	exit(CLI_EXIT_OK);
}

static int
server_option(struct opts *o, int c, const char *a)
{
	switch (c) {
	case OPT_WORKERS:
		o->workers = (int)cli_parse_long("--workers", a, 1, 1 << 20);
		break;
	case OPT_PORT: o->port = (int)cli_parse_long("--port", a, 0, 65535); break;
	case OPT_MODE:
		if (ps_mode_parse(a, &o->mode) < 0)
			cli_usage_error("--mode: want sync or async, not '%s'", a);
		break;
	case OPT_STALENESS:
		o->staleness = (int)cli_parse_long("--staleness", a, 0, 1 << 30);
		break;
	default: return 0;
	}
	return 1;
}

/* The options of collx-ps's own; 0 when c is not one of them. */
static int
own_option(void *ctx, int c, const char *a)
{
	struct opts *o = ctx;

	if (server_option(o, c, a))
		return 1;
	switch (c) {
	case OPT_SERVER: o->server = a; break;
	case OPT_WEIGHT:
		o->weight = cli_parse_double("--weight", a, 0, 1e18);
		break;
	case OPT_DONE: o->done = 1; break;
	default: return 0;
	}
	return 1;
}

/* Options, then the command and a file. */
static void
parse_args(struct opts *o, int argc, char **argv)
{
	struct trainopt_parser p = { .usage = usage, .g = &o->g,
	    .common = &o->c, .optim = &o->optim, .own = own_option, .ctx = o,
	    .operands = 2 };
	int i = trainopt_parse(&p, argc, argv, "hVvqm:o:", longopts);

	o->cmd = i < argc ? argv[i] : NULL;
	o->file = i + 1 < argc ? argv[i + 1] : NULL;
}

/* serve's checks, then the server. */
static void
serve(struct opts *o)
{
	struct pscmd_serve s = { .model = o->c.model, .out = o->c.out,
	    .workers = o->workers, .port = o->port, .staleness = o->staleness,
	    .mode = o->mode, .g = &o->g };
	char e[COLLX_ERRLEN];

	if (o->c.model == NULL || o->workers < 1)
		cli_usage_error("serve needs -m INIT and --workers N");
	if (o->staleness >= 0 && o->mode != PS_ASYNC)
		cli_usage_error("--staleness goes with --mode async");
	if (trainopt_optim_config(&o->optim, &s.optim, e, sizeof(e)) < 0)
		cli_usage_error("%s", e);
	pscmd_serve_run(&s);
}

static struct ps_client *
connect_servers(const struct opts *o)
{
	struct ps_client *cl;
	char e[COLLX_ERRLEN];

	if (o->server == NULL)
		cli_usage_error("%s needs --server HOST:PORT[,...]", o->cmd);
	if (ps_client_open(&cl, o->server, -1, o->g.token, o->g.timeout,
	    prog_note, NULL, e, sizeof(e)) < 0)
		cli_die(CLI_EXIT_RUNTIME, "%s", e);
	return cl;
}

static void
push(struct opts *o)
{
	struct ps_client *cl;
	float *g, *p = NULL;
	size_t total;
	char *layout, e[COLLX_ERRLEN];

	if (o->file == NULL)
		cli_usage_error("push needs a GRADS.safetensors file");
	pscmd_load_flat(o->file, &g, &total, &layout);
	cl = connect_servers(o);
	if (total != ps_client_total(cl) ||
	    !tensor_layout_same(layout, ps_client_layout(cl))) {
		/* Let the servers go before leaving: nothing was pushed. */
		ps_client_abort(cl, NULL);
		cli_die(CLI_EXIT_DATA, "%s: its tensors differ from the model of "
		    "the servers %s", o->file, o->server);
	}
	if (o->c.out != NULL)
		p = cli_calloc(total + 1, sizeof(float));
	if (ps_client_push(cl, g, o->weight, p, e, sizeof(e)) < 0 ||
	    (o->done && ps_client_done(cl, e, sizeof(e)) < 0)) {
		ps_client_abort(cl, e);
		cli_die(CLI_EXIT_RUNTIME, "%s", e);
	}
	if (o->c.out != NULL)
		pscmd_save_flat(o->c.out, ps_client_layout(cl), p, total);
	ps_client_close(cl);
	free(g);
	free(p);
	free(layout);
}

static void
pull(struct opts *o)
{
	struct ps_client *cl;
	float *p;
	size_t total;
	char e[COLLX_ERRLEN];

	if (o->c.out == NULL)
		cli_usage_error("pull needs -o PARAMS.safetensors");
	if (o->file != NULL)
		cli_usage_error("unexpected argument '%s'", o->file);
	cl = connect_servers(o);
	total = ps_client_total(cl);
	p = cli_calloc(total + 1, sizeof(float));
	if (ps_client_pull(cl, p, e, sizeof(e)) < 0) {
		ps_client_abort(cl, e);
		cli_die(CLI_EXIT_RUNTIME, "%s", e);
	}
	pscmd_save_flat(o->c.out, ps_client_layout(cl), p, total);
	ps_client_close(cl);
	free(p);
}

int
main(int argc, char **argv)
{
	struct opts o = { .staleness = -1, .weight = 1 };

	cli_init(argv[0]);
	cli_group_defaults(&o.g);
	parse_args(&o, argc, argv);
	if (o.cmd == NULL)
		cli_usage_error("a command is required: serve, push or pull");
	cli_group_finish(&o.g);
	if (strcmp(o.cmd, "serve") == 0) {
		if (o.file != NULL)
			cli_usage_error("unexpected argument '%s'", o.file);
		serve(&o);
	} else if (strcmp(o.cmd, "push") == 0)
		push(&o);
	else if (strcmp(o.cmd, "pull") == 0)
		pull(&o);
	else
		cli_usage_error("unknown command '%s' (serve, push, pull)", o.cmd);
	cli_group_free(&o.g);
	cli_close_stdout();
	return CLI_EXIT_OK;
}
