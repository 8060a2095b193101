/* chart_plan: collx-bench plan's two charts. predicted: each mesh of
 * --validate a point, measured step across, predicted up, and the line
 * y = x a perfect model would sit on. breakdown: each planned mesh a bar
 * of its predicted step, stacked in its parts (compute, the exposed
 * communication of each axis, the bubble), in the file's order. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "chart/chart_int.h"
#include "cli/cli.h"

static const char *const parts[] = { "compute_s", "dp_s", "tp_s", "pp_s",
	"bubble_s", "cp_s", "ep_s" };
#define NPART (int)(sizeof parts / sizeof parts[0])
#define NOLD 5			/* cp_s, ep_s: plan's files before them lack them */

/* Row r of t: the columns' numbers into v (0 for a column absent, -1),
 * its mesh's name into label. */
static int
row(const struct chart_table *t, int r, const int *col, int n, double *v,
    int name, char *label, size_t len, char *err, size_t errlen)
{
	for (int k = 0; k < n; k++)
		if ((v[k] = 0, col[k] >= 0) && chart_table_num(t, r, col[k],
		    &v[k], err, errlen) < 0)
			return -1;
	snprintf(label, len, "%s", t->cells[r][name]);
	for (char *p = label; *p; p++)	/* one field in the data file */
		if (*p == ' ' || *p == '\t')
			*p = '_';
	return 0;
}

int
chart_plan_data(struct chart_data *c, enum chart_kind kind,
    const struct chart_table *t, int ntab, char *err, size_t errlen)
{
	const char *what = kind == CHART_PREDICTED ? "predicted" : "breakdown";
	const char *pred[] = { "measured_s", "seconds" };
	char path[128], label[128];
	double v[NPART];
	int col[NPART], n = kind == CHART_PREDICTED ? 2 : NPART, k = 0, name;
	FILE *f;

	snprintf(path, sizeof path, "%s/plan.dat", c->dir);
	if ((f = fopen(path, "w")) == NULL)
		return cli_fail(err, errlen, "%s: %s", path, strerror(errno));
	for (int i = 0; i < ntab; i++) {
		for (int j = 0; j < n; j++)
			if (kind != CHART_PREDICTED && j >= NOLD)
				col[j] = chart_table_col(&t[i], parts[j]);
			else if ((col[j] = chart_need_col(&t[i], kind ==
			    CHART_PREDICTED ? pred[j] : parts[j], what, err,
			    errlen)) < 0)
				goto fail;
		if ((name = chart_need_col(&t[i], "algo", what, err,
		    errlen)) < 0)
			goto fail;
		for (int r = 0; r < t[i].nrow; r++) {
			if (row(&t[i], r, col, n, v, name, label, sizeof label,
			    err, errlen) < 0)
				goto fail;
			if (kind == CHART_PREDICTED && v[0] <= 0)
				continue;	/* a mesh collx-train refused */
			fprintf(f, "%d", k++);
			for (int j = 0; j < n; j++)
				fprintf(f, " %.10g", v[j] * 1e3);
			fprintf(f, " %s\n", label);
		}
	}
	if (k == 0) {
		fclose(f);
		return cli_fail(err, errlen, "%s: no measured mesh to draw",
		    t[0].path);
	}
	c->meshes = k;
	return fclose(f) == 0 ? 0 : cli_fail(err, errlen, "%s: %s", path,
	    strerror(errno));
fail:
	fclose(f);
	return -1;
}

void
chart_plan_script(FILE *f, enum chart_kind kind, const struct chart_data *c,
    char *title, size_t tlen)
{
	static const char *const names[NPART] = { "compute", "dp exposed",
	    "tp exposed", "pp", "bubble", "cp exposed", "ep exposed" };

	if (kind == CHART_PREDICTED) {
		snprintf(title, tlen, "Predicted against measured step, %d "
		    "mesh%s", c->meshes, c->meshes == 1 ? "" : "es");
		fprintf(f, "set xlabel 'measured step (ms)'\n"
		    "set ylabel 'predicted step (ms)'\nset xrange [0:*]\n"
		    "set yrange [0:*]\nset size ratio -1\nset key top left\n"
		    "plot '%s/plan.dat' using 2:3 with points pt 7 ps 1.5 "
		    "lc rgb '#1f77b4' title 'mesh', '' using 2:3:4 with "
		    "labels offset 1,1 left font ',8' notitle, x with lines "
		    "dt 2 lc rgb '#555555' title 'y = x'\n", c->dir);
		return;
	}
	snprintf(title, tlen, "Predicted step per mesh, in its parts");
	fprintf(f, "set ylabel 'predicted step (ms)'\nset yrange [0:*]\n"
	    "set style data histograms\nset style histogram rowstacked\n"
	    "set style fill solid 0.8 border -1\nset boxwidth 0.7\n"
	    "set xtics rotate by -30 nomirror\nset grid noxtics\n"
	    "set key outside right\nplot ");
	for (int j = 0; j < NPART; j++) {
		fprintf(f, "%s'%s/plan.dat' using %d%s title '%s'",
		    j ? ", " : "", c->dir, j + 2, j ? "" : ":xtic(9)",
		    names[j]);
	}
	fputc('\n', f);
}
