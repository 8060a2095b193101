/* progress: the per-step report of the training programs on standard
 * error: the live line on a terminal and the closing summary, which
 * every run prints, a log or a pipe included. */
#include <stdio.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/util.h"
#include "prog/progress.h"

void
progress_start(struct progress *p, int on, const char *unit, long first,
    long steps)
{
	*p = (struct progress){ .unit = unit, .first = first, .steps = steps,
	    .start = cli_now() };
	p->summary = on && !cli_quiet;
	p->lines = p->summary && cli_verbose;
	p->live = p->summary && !cli_verbose && isatty(STDERR_FILENO);
}

/* "1:02:03", "2:03" */
static void
fmt_eta(double secs, char *buf, size_t len)
{
	long t = (long)(secs + 0.5);

	if (t >= 3600)
		snprintf(buf, len, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
	else
		snprintf(buf, len, "%ld:%02ld", t / 60, t % 60);
}

/* Carriage return, the line, erase to its end: redrawn in place. */
static void
redraw(struct progress *p, const struct train_step *s)
{
	double now = cli_now(), el = now - p->start;
	char eta[32];

	if (p->done < p->steps && now - p->shown < 0.1)
		return;
	p->shown = now;
	fmt_eta(p->done > 0 ? el / p->done * (p->steps - p->done) : 0, eta,
	    sizeof eta);
	fprintf(stderr, "\r%s: step %ld/%ld loss %.6f %.0f %s/s ETA %s\033[K",
	    cli_progname, s->step + 1, p->first + p->steps, s->loss,
	    p->seconds > 0 ? p->tokens / p->seconds : 0, p->unit, eta);
	fflush(stderr);
}

void
progress_step(struct progress *p, const struct train_step *s)
{
	p->done++;
	p->tokens += s->tokens;
	p->seconds += s->seconds;
	p->comm += s->comm;
	p->loss = s->loss;
	if (p->live)
		redraw(p, s);
}

void
progress_end(struct progress *p)
{
	double el = cli_now() - p->start;

	if (!p->summary)
		return;
	if (p->live && p->done > 0)
		fputc('\n', stderr);
	fprintf(stderr, "%s: %ld steps, final loss %.6f, mean %.0f %s/s, %.2f s, "
	    "%.2f s (%.0f%%) in communication\n", cli_progname, p->done, p->loss,
	    p->seconds > 0 ? p->tokens / p->seconds : 0, p->unit, el, p->comm,
	    p->seconds > 0 ? 100 * p->comm / p->seconds : 0);
}
