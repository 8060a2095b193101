/* fuzz_hostlist: Slurm's host list expressions (lib/cli/hostlist.c), as
 * SLURM_*_NODELIST hands them over. The input is one expression; its
 * count is asked for, then its first, last and one-past-the-end hosts,
 * each into a roomy buffer and into one a byte too short for it. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char err[256];

/* A failure says why; a host fits its buffer. */
static void
checked(long rc, const char *host, size_t hostlen)
{
	if (rc < 0 && err[0] == '\0')
		abort();
	if (hostlen > 0 && strlen(host) >= hostlen)
		abort();
	err[0] = '\0';
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char host[256], *s;
	long n, k, want[3];
	size_t len;

	if (size > 4096 || (s = malloc(size + 1)) == NULL)
		return 0;
	memcpy(s, data, size);
	s[size] = '\0';
	n = cli_hostlist(s, -1, host, sizeof host, err, sizeof err);
	checked(n, host, sizeof host);
	if (n >= 0 && host[0] != '\0')
		abort();	/* no n-th host asked for, none given */
	want[0] = 0;
	want[1] = n - 1;
	want[2] = n;
	for (int i = 0; n >= 0 && i < 3; i++) {
		k = cli_hostlist(s, want[i], host, sizeof host, err,
		    sizeof err);
		checked(k, host, sizeof host);
		if (k >= 0 && k != n)
			abort();	/* the count does not depend on n */
		if (k < 0 || want[i] < 0)
			continue;
		if ((want[i] < n) != (host[0] != '\0'))
			abort();	/* a host within the list, none past it */
		if ((len = strlen(host)) == 0)
			continue;
		/* one byte too short: refused, never cut */
		k = cli_hostlist(s, want[i], host, len, err, sizeof err);
		checked(k, host, len);
		if (k >= 0)
			abort();
	}
	free(s);
	return 0;
}
