/* pipe_report: the bubble a pipeline's run reports, on paper and
 * measured, for collx-pipe and collx-train alike. */
#include <stdio.h>

#include "cli/cli.h"
#include "par/pipe_sched.h"
#include "prog/pipe_report.h"

int
prog_pipe_report_init(struct prog_pipe_report *r,
    const struct pipe_cfg *cfg, int world, const char *ranks, char *err,
    size_t errlen)
{
	struct pipe_sched s;

	*r = (struct prog_pipe_report){ .cfg = cfg, .world = world,
	    .ranks = ranks };
	if (cfg->table != NULL) {
		r->theory = pipe_sched_table_bubble(cfg->table);
		return 0;
	}
	r->theory = pipe_sched_bubble(cfg->sched, cfg->micro, world,
	    cfg->chunks);
	if (r->theory >= 0)
		return 0;
	/* no closed form: the table's */
	if (pipe_sched_build_virtual(&s, cfg->sched, cfg->micro, world,
	    cfg->chunks, err, errlen) < 0)
		return -1;
	r->theory = pipe_sched_table_bubble(&s);
	pipe_sched_free(&s);
	return 0;
}

void
prog_pipe_columns(const struct prog_pipe_report *r,
    const struct pipe_stat *st, char *buf, size_t len)
{
	snprintf(buf, len, "%.6f,%.6f,%zu", pipe_stat_bubble(st), r->theory,
	    st->peak_act);
}

void
prog_pipe_summary(const struct prog_pipe_report *r,
    const struct pipe_result *res)
{
	const struct pipe_cfg *cfg = r->cfg;
	const int *first = cfg->first;
	int j, c, world = r->world, v = cfg->chunks > 1 ? cfg->chunks : 1;

	printf("%s: %s, %d micro-batches, %d stages%s%s%s: measured bubble "
	    "%.4f, theory %s %.4f\n", cli_progname, pipe_sched_name(cfg->sched),
	    cfg->micro, world, r->ranks != NULL ? " (" : "",
	    r->ranks != NULL ? r->ranks : "", r->ranks != NULL ? ")" : "",
	    res->bubble_mean, cfg->table != NULL ? "(the table's)" :
	    pipe_sched_formula(cfg->sched, cfg->micro, world, v), r->theory);
	printf("  measured: the share of each stage's schedule outside its "
	    "passes, waiting for\n"
	    "  and sending messages; theory: equal passes, free messages, no "
	    "wait for a core\n");
	for (j = 0; j < world; j++) {
		printf("  stage %d: layers", j);
		/* chunk c: virtual stage c*world + j */
		for (c = 0; c < v; c++)
			printf("%s %d-%d", c ? "," : "", first[c * world + j],
			    first[c * world + j + 1] - 1);
		printf(", bubble %.4f, peak activations %.3f MiB\n",
		    res->bubble[j], res->peak_act[j] / 1048576.0);
	}
}
