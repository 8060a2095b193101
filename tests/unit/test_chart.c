/* test_chart: collx-plot's readers on good and bad files: the CSV reader's
 * quoting, blank lines and line numbers. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "chart/chart.h"
#include "cli/util.h"
#include "unit.h"

static int
write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	if (f == NULL)
		return -1;
	fputs(text, f);
	return fclose(f);
}

static void
test_csv(void)
{
	char dir[] = "/tmp/test_chart.XXXXXX", p[64], e[COLLX_ERRLEN];
	struct chart_table t;
	double v = 0;

	if (mkdtemp(dir) == NULL) {
		UNIT_OK(0, "mkdtemp");
		return;
	}
	snprintf(p, sizeof p, "%s/a.csv", dir);
	write_file(p, "a,b,c\n1,\"x,\"\"y\",3\n\n4,5,6e2\n");
	UNIT_OK(chart_csv_read(p, &t, e, sizeof e) == 0 && t.ncol == 3 &&
	    t.nrow == 2 && strcmp(t.cells[0][1], "x,\"y") == 0 && t.line[1] == 4,
	    "CSV: quoted field, blank line skipped, line numbers kept");
	UNIT_OK(chart_table_num(&t, 1, 2, &v, e, sizeof e) == 0 && v == 600,
	    "6e2 is 600");
	UNIT_OK(chart_table_num(&t, 0, 1, &v, e, sizeof e) < 0 &&
	    strstr(e, "a.csv:2: column b:") != NULL, "a text field is not a number, at line 2");
	chart_table_free(&t);
	write_file(p, "a,b\n1,2\n3\n");
	UNIT_OK(chart_csv_read(p, &t, e, sizeof e) < 0 &&
	    strstr(e, "a.csv:3: 1 fields, the header has 2") != NULL,
	    "a short row: its line named");
	write_file(p, "");
	UNIT_OK(chart_csv_read(p, &t, e, sizeof e) < 0 && strstr(e, ":1: empty file"),
	    "an empty file");
	write_file(p, "a,b\n\"1,2\n");
	UNIT_OK(chart_csv_read(p, &t, e, sizeof e) < 0 && strstr(e, "unterminated quote"),
	    "an unterminated quote");
	unlink(p);
	rmdir(dir);
}

int
main(void)
{
	test_csv();
	return unit_done();
}
