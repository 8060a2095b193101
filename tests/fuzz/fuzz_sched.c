/* fuzz_sched: schedule files (--schedule-file, lib/par/pipe_sched_file.c)
 * of any bytes, read for a few micro-batch counts, with the ranks from
 * the file and with a world size given: a file is refused with a message
 * or built into tables that print, and whose every stage runs each of its
 * passes once. The bytes reach the parser as a file (a memfd), as
 * collx-pipe's path does. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "par/pipe_sched.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Each stage's actions hold each pass of its chunks once. */
static void
check_built(const struct pipe_sched *s)
{
	int passes = s->v * pipe_sched_passes(s->m, s->split), runs;

	for (int j = 0; j < s->w; j++) {
		runs = 0;
		for (int k = 0; k < s->nact[j]; k++)
			runs += s->act[j][k].op == PIPE_FWD ||
			    s->act[j][k].op == PIPE_BWD ||
			    s->act[j][k].op == PIPE_WGT;
		if (runs != passes)
			abort();
	}
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const int ms[] = { 1, 2, 4 }, ws[] = { 0, 2 };
	static int fd = -1;
	static FILE *null;
	struct pipe_sched s;
	char path[64], err[512];

	if (fd < 0 && ((fd = memfd_create("sched.csv", 0)) < 0 ||
	    (null = fopen("/dev/null", "w")) == NULL))
		abort();
	if (ftruncate(fd, 0) < 0 || pwrite(fd, data, size, 0) != (ssize_t)size)
		abort();
	snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
	for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++)
		for (size_t k = 0; k < sizeof ws / sizeof ws[0]; k++) {
			err[0] = '\0';
			if (pipe_sched_file(&s, path, ms[i], ws[k], err,
			    sizeof err) < 0) {
				if (err[0] == '\0')
					abort();
				continue;
			}
			check_built(&s);
			pipe_sched_print(null, &s);
			(void)pipe_sched_table_bubble(&s);
			(void)pipe_sched_digest(&s);
			pipe_sched_free(&s);
		}
	return 0;
}
