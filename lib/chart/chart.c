/* chart: collx-plot's charts. The inputs' data goes as plain columns into
 * a private directory with a gnuplot script (chart_data and chart_script
 * for the CSV kinds, chart_timeline for a pipeline trace), gnuplot draws
 * the PNG or SVG, and it is renamed into place only when gnuplot
 * succeeded. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/wait.h>
#include <unistd.h>

#include "chart/chart_int.h"
#include "cli/cli.h"

static const char *const kind_names[] = {
	"guess", "busbw", "latency", "p2p", "scaling", "loss", "pipeline",
	"loss-bytes", "mesh", "predicted", "breakdown", "experts"
};

int
chart_kind_parse(const char *s, enum chart_kind *out)
{
	int n = (int)(sizeof kind_names / sizeof kind_names[0]);
	int i = cli_name_index(kind_names + 1, n - 1, s);

	return i < 0 ? -1 : (*out = (enum chart_kind)(i + 1), 0);
}

const char *
chart_kind_name(enum chart_kind k)
{
	return kind_names[k];
}

int
chart_format_of(const char *path)
{
	size_t n = strlen(path);

	if (n > 4 && strcasecmp(path + n - 4, ".png") == 0)
		return CHART_PNG;
	if (n > 4 && strcasecmp(path + n - 4, ".svg") == 0)
		return CHART_SVG;
	return -1;
}

static int
is_json(const char *path)
{
	FILE *f = fopen(path, "r");
	int ch = EOF;

	if (f == NULL)
		return 0;
	while ((ch = fgetc(f)) == ' ' || ch == '\n' || ch == '\t' || ch == '\r')
		;
	fclose(f);
	return ch == '{' || ch == '[';
}

/* The CSV kinds: the tables read, the kind guessed where not given, the
 * data files and the script's part written. */
static int
csv_body(struct chart_plot *p, struct chart_data *c, FILE *body,
    char *title, size_t tlen, char *err, size_t errlen)
{
	struct chart_table *t = cli_calloc((size_t)p->nfiles, sizeof *t);
	int rc = -1;

	for (int i = 0; i < p->nfiles; i++)
		if (chart_csv_read(p->files[i], &t[i], err, errlen) < 0)
			goto out;
	if (p->kind == CHART_GUESS &&
	    (p->kind = chart_guess_kind(&t[0])) == CHART_GUESS) {
		cli_fail(err, errlen, "%s:1: cannot tell the chart from the "
		    "columns; name it with --kind", t[0].path);
		goto out;
	}
	if (chart_data_read(c, p->kind, t, p->nfiles, err, errlen) < 0)
		goto out;
	chart_script_body(body, p->kind, c, title, tlen);
	rc = 0;
out:
	for (int i = 0; i < p->nfiles; i++)
		chart_table_free(&t[i]);
	free(t);
	return rc;
}

/* The chart's own part of the script, in memory since it decides the
 * default title; NULL with the reason in err and the exit code in *rc. */
static char *
script_body(struct chart_plot *p, struct chart_data *c, char *title,
    size_t tlen, int *rc, char *err, size_t errlen)
{
	char *text = NULL;
	size_t len = 0;
	FILE *body;
	int failed;

	*rc = CLI_EXIT_DATA;
	if ((body = open_memstream(&text, &len)) == NULL) {
		*rc = CLI_EXIT_RUNTIME;
		cli_fail(err, errlen, "out of memory");
		return NULL;
	}
	if (p->kind == CHART_PIPELINE || (p->kind == CHART_GUESS &&
	    is_json(p->files[0]))) {
		p->kind = CHART_PIPELINE;
		failed = chart_timeline(c, body, p, title, tlen, err,
		    errlen) < 0;
	} else if (p->step != CHART_STEP_LAST) {
		*rc = CLI_EXIT_USAGE;
		failed = cli_fail(err, errlen, "--step is for a pipeline "
		    "trace, not %s", p->files[0]);
	} else
		failed = csv_body(p, c, body, title, tlen, err, errlen) < 0;
	fclose(body);
	if (failed) {
		free(text);
		return NULL;
	}
	return text;
}

/* DIR/plot.gp: the head (terminal, output TMP, title) and the body. */
static int
write_script(const struct chart_plot *p, const struct chart_data *c,
    const char *tmp, const char *title, const char *body, char *err,
    size_t errlen)
{
	char gp[128];
	FILE *f;

	snprintf(gp, sizeof gp, "%s/plot.gp", c->dir);
	if ((f = fopen(gp, "w")) == NULL)
		return cli_fail(err, errlen, "%s: %s", gp, strerror(errno));
	chart_script_head(f, p, tmp, p->title ? p->title : title);
	fputs(body, f);
	if (fclose(f) != 0)
		return cli_fail(err, errlen, "%s: %s", gp, strerror(errno));
	return 0;
}

/* gnuplot DIR/plot.gp; 0, or -1 with its first message. */
static int
run_gnuplot(const char *dir, char *err, size_t errlen)
{
	char script[128], log[128], line[256] = "";
	pid_t pid;
	int st;
	FILE *f;

	snprintf(script, sizeof script, "%s/plot.gp", dir);
	snprintf(log, sizeof log, "%s/gnuplot.log", dir);
	fflush(stdout);
	if ((pid = fork()) < 0)
		return cli_fail(err, errlen, "fork: %s", strerror(errno));
	if (pid == 0) {
		if (freopen(log, "w", stderr) == NULL)
			_exit(126);
		execlp("gnuplot", "gnuplot", script, (char *)NULL);
		fprintf(stderr, "cannot run gnuplot: %s (make deps installs "
		    "gnuplot-nox)\n", strerror(errno));
		_exit(127);
	}
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return cli_fail(err, errlen, "waitpid: %s",
			    strerror(errno));
	if ((f = fopen(log, "r")) != NULL) {
		while (fgets(line, sizeof line, f) != NULL)
			if (strspn(line, " \t\n^") != strlen(line))
				break;
		fclose(f);
	}
	line[strcspn(line, "\n")] = '\0';
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		return cli_fail(err, errlen, "gnuplot failed: %s", line);
	return 0;
}

/* The private directory and every file in it (all ours). */
static void
remove_dir(const char *dir)
{
	char p[512];
	struct dirent *d;
	DIR *dp;

	if ((dp = opendir(dir)) != NULL) {
		while ((d = readdir(dp)) != NULL) {
			if (strcmp(d->d_name, ".") == 0 ||
			    strcmp(d->d_name, "..") == 0)
				continue;
			snprintf(p, sizeof p, "%s/%s", dir, d->d_name);
			unlink(p);
		}
		closedir(dp);
	}
	rmdir(dir);
}

int
chart_draw(struct chart_plot *p, char *err, size_t errlen)
{
	struct chart_data c = { 0 };
	char tmp[4200], title[256] = "", *body;
	int rc = CLI_EXIT_RUNTIME;

	if (chart_format_of(p->out) < 0) {
		cli_fail(err, errlen, "%s: want a name ending in .png or .svg",
		    p->out);
		return CLI_EXIT_USAGE;
	}
	snprintf(c.dir, sizeof c.dir, "/tmp/collx-plot.XXXXXX");
	if (mkdtemp(c.dir) == NULL) {
		cli_fail(err, errlen, "mkdtemp: %s", strerror(errno));
		return CLI_EXIT_RUNTIME;
	}
	snprintf(tmp, sizeof tmp, "%s.tmp%ld", p->out, (long)getpid());
	if ((body = script_body(p, &c, title, sizeof title, &rc, err,
	    errlen)) == NULL)
		goto out;
	rc = CLI_EXIT_RUNTIME;
	if (write_script(p, &c, tmp, title, body, err, errlen) < 0 ||
	    run_gnuplot(c.dir, err, errlen) < 0)
		goto out;
	if (rename(tmp, p->out) < 0) {
		cli_fail(err, errlen, "%s: %s", p->out, strerror(errno));
		goto out;
	}
	rc = 0;
out:
	free(body);
	unlink(tmp);
	remove_dir(c.dir);
	chart_data_free(&c);
	return rc;
}
