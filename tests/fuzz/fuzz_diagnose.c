/* fuzz_diagnose: collx-run --diagnose (lib/launch/diagnose.c) on flight
 * recorder dumps it did not write. The input is up to four dumps split
 * at form feeds, written as collx-fr.f.K.json into one directory that
 * launch_diagnose then reads whole; it reports a line or more, or refuses
 * with a message and its exit code, never more. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "launch/diagnose.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAXDUMPS 4

static char dir[64];

static void
cleanup(void)
{
	char path[128];

	for (int k = 0; k < MAXDUMPS; k++) {
		snprintf(path, sizeof path, "%s/collx-fr.f.%d.json", dir, k);
		unlink(path);
	}
	rmdir(dir);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *p = data, *end = data + size, *ff;
	char path[128], err[COLLX_ERRLEN] = "", *text = NULL;
	size_t len = 0;
	FILE *f, *out;
	int k, more, rc;

	if (dir[0] == '\0') {
		snprintf(dir, sizeof dir, "/tmp/fuzz_diagnose.XXXXXX");
		if (mkdtemp(dir) == NULL)
			abort();
		atexit(cleanup);
	}
	for (k = 0, more = 1; k < MAXDUMPS; k++) {
		snprintf(path, sizeof path, "%s/collx-fr.f.%d.json", dir, k);
		if (!more) {	/* fewer dumps this time */
			unlink(path);
			continue;
		}
		ff = memchr(p, '\f', (size_t)(end - p));
		if (ff == NULL || k == MAXDUMPS - 1)
			ff = end;
		if ((f = fopen(path, "w")) == NULL)
			abort();
		fwrite(p, 1, (size_t)(ff - p), f);
		fclose(f);
		more = ff < end;
		p = more ? ff + 1 : end;
	}
	if ((out = open_memstream(&text, &len)) == NULL)
		abort();
	rc = launch_diagnose(dir, out, err, sizeof err);
	fclose(out);
	if (rc != 0 && (err[0] == '\0' || (rc != CLI_EXIT_RUNTIME &&
	    rc != CLI_EXIT_DATA)))
		abort();	/* a refusal says why, with its exit code */
	if (rc == 0 && (len == 0 || text[len - 1] != '\n'))
		abort();	/* a diagnosis is whole lines, at least one */
	free(text);
	return 0;
}
