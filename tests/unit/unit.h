/* unit.h: a tiny TAP producer for the C unit tests.
 *   int main(void) { ...; UNIT_OK(x == 1, "x is one"); ...; return unit_done(); } */
#ifndef COLLX_UNIT_H
#define COLLX_UNIT_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static int unit_n, unit_failed;

static inline int
unit_ok(int cond, const char *file, int line, const char *what)
{
	unit_n++;
	printf("%sok %d - %s\n", cond ? "" : "not ", unit_n, what);
	if (!cond) {
		printf("#   failed at %s:%d\n", file, line);
		unit_failed++;
	}
	fflush(stdout);
	return cond;
}

#define UNIT_OK(cond, what) unit_ok(!!(cond), __FILE__, __LINE__, (what))
/* |a - b| <= atol + rtol * |b| */
#define UNIT_CLOSE(a, b, rtol, atol, what) \
	UNIT_OK(fabs((double)(a) - (double)(b)) <= (atol) + (rtol) * fabs((double)(b)), what)

static inline int
unit_done(void)
{
	printf("1..%d\n", unit_n);
	return unit_failed ? 1 : 0;
}

/* Remove a test's scratch directory (made with mkdtemp); 0 or -1. */
static inline int
unit_rmdir(const char *dir)
{
	char cmd[256];

	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	return system(cmd) == 0 ? 0 : -1;
}

#endif
