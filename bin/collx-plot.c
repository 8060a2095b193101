/* collx-plot: charts from collx-bench CSV, collx-dp loss CSV and
 * collx-pipe traces, drawn by gnuplot (lib/chart). */
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "chart/chart.h"

enum { OPT_KIND = CLI_OPT_PROGRAM, OPT_TITLE, OPT_SIZE, OPT_STEP };

static const struct option longopts[] = {
	CLI_STD_LONGOPTS,
	{ "output", 1, 0, 'o' }, { "kind", 1, 0, OPT_KIND },
	{ "title", 1, 0, OPT_TITLE }, { "size", 1, 0, OPT_SIZE },
	{ "step", 1, 0, OPT_STEP },
	{ 0, 0, 0, 0 }
};

static _Noreturn void
usage(void)
{
	printf("usage: %s [--kind KIND] [-o OUT.png|OUT.svg] [--title T]\n"
	    "           [--size W,H] [--step N|last|all] FILE...\n\n"
	    "Draw collx-bench CSV, collx-dp loss CSVs (several runs on one chart)\n"
	    "or a collx-pipe trace with gnuplot.\n\n"
	    "  --kind KIND           busbw, latency, p2p, scaling, loss, loss-bytes,\n"
	    "                        mesh, predicted, breakdown, experts or "
	    "pipeline\n"
	    "                        (default: guessed from the columns)\n"
	    "  -o, --output F        .png or .svg (default: the first FILE's name\n"
	    "                        with .png)\n"
	    "  --title T             the chart's title (default: made from the data)\n"
	    "  --size W,H            pixels (900,560)\n"
	    "  --step N|last|all     pipeline: the step drawn, N counted from 0 as in\n"
	    "                        the trace, last (default) or all (the whole run)\n"
	    "  -v, --verbose         say what was drawn\n"
	    "  -q, --quiet           nothing on success\n"
	    "  -h, --help            this help\n"
	    "  -V, --version         version\n"
	    "Exit status: 0 ok, 1 gnuplot failed, 2 usage, 3 bad or empty input\n"
	    "(the message names the file and line).\n", cli_progname);
	cli_close_stdout();
	exit(CLI_EXIT_OK);
}

/* FILE with its extension replaced by .png. */
static char *
default_out(const char *in)
{
	const char *slash = strrchr(in, '/'), *dot = strrchr(in, '.');
	size_t n = dot && (!slash || dot > slash) ? (size_t)(dot - in) : strlen(in);
	char *out = cli_calloc(n + 5, 1);

	memcpy(out, in, n);
	strcpy(out + n, ".png");
	return out;
}

/* --step: a step number, last or all. */
static int
parse_step(const char *s)
{
	if (strcmp(s, "last") == 0)
		return CHART_STEP_LAST;
	if (strcmp(s, "all") == 0)
		return CHART_STEP_ALL;
	if (*s < '0' || *s > '9')
		cli_usage_error("--step: want a step number, last or all, "
		    "not '%s'", s);
	return (int)cli_parse_long("--step", s, 0, INT_MAX);
}

int
main(int argc, char **argv)
{
	struct chart_plot p = { .width = 900, .height = 560,
	    .step = CHART_STEP_LAST };
	char e[COLLX_ERRLEN], *owned = NULL;
	long v[2];
	int c, rc;

	cli_init(argv[0]);
	while ((c = getopt_long(argc, argv, "hVvqo:", longopts, NULL)) != -1)
		switch (c) {
		case 'h': usage();
		case 'V': cli_version();
		case 'v': cli_verbose++; break;
		case 'q': cli_quiet = 1; break;
		case 'o': p.out = optarg; break;
		case OPT_KIND:
			if (chart_kind_parse(optarg, &p.kind) < 0)
				cli_usage_error("--kind: want busbw, latency, p2p, "
				    "scaling, loss, loss-bytes, mesh, predicted, "
				    "breakdown, experts or pipeline, not '%s'",
				    optarg);
			break;
		case OPT_TITLE: p.title = optarg; break;
		case OPT_SIZE:
			if (cli_parse_list("--size", optarg, v, 2) != 2 || v[0] < 64 ||
			    v[1] < 64 || v[0] > 10000 || v[1] > 10000)
				cli_usage_error("--size: want W,H in pixels (64..10000), "
				    "not '%s'", optarg);
			p.width = (int)v[0];
			p.height = (int)v[1];
			break;
		case OPT_STEP: p.step = parse_step(optarg); break;
		default: cli_option_error(argc, argv, "hVvqo:");
		}
	if (optind >= argc)
		cli_usage_error("no input file");
	p.files = argv + optind;
	p.nfiles = argc - optind;
	if (p.kind == CHART_PIPELINE && p.nfiles > 1)
		cli_usage_error("a pipeline chart takes one trace");
	if (p.out == NULL) {
		if (strcmp(p.files[0], "-") == 0)
			cli_usage_error("-o is needed when the input is standard input");
		p.out = owned = default_out(p.files[0]);
	} else if (chart_format_of(p.out) < 0)
		cli_usage_error("-o %s: want a name ending in .png or .svg",
		    p.out);
	if ((rc = chart_draw(&p, e, sizeof e)) != 0)
		cli_die(rc, "%s", e);
	if (cli_verbose)
		fprintf(stderr, "%s: %s chart%s%s in %s\n", cli_progname,
		    chart_kind_name(p.kind), p.drawn[0] ? " of " : "", p.drawn,
		    p.out);
	free(owned);
	cli_close_stdout();
	return CLI_EXIT_OK;
}
