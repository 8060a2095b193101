/* linetag: a rank's output read from a pipe and passed on a line at a
 * time, each line "[rank] ..." in one write, so that the lines of ranks
 * sharing one terminal or file never mix (collx-run --tag-output). */
#ifndef COLLX_LINETAG_H
#define COLLX_LINETAG_H

#include <stddef.h>

/* Lines longer than this are passed on in pieces of this size. */
#define LINETAG_MAX 65536

struct linetag {
	int fd;			/* read end of the pipe; -1 once closed */
	int to;			/* where tagged lines go */
	int rank;
	char *buf;		/* the line so far */
	size_t len;
};

/* A pipe for rank's output: *wfd is its write end, for the rank (both
 * ends close on exec); lines read from it go to to. 0 or -1 with the
 * reason in err. */
int linetag_open(struct linetag *t, int rank, int to, int *wfd, char *err,
    size_t errlen);
/* Read what is there (the pipe does not block) and pass on every whole
 * line; at end of file, the unfinished line too, and close. */
void linetag_read(struct linetag *t);
/* Pass on the unfinished line, if any, and close. */
void linetag_close(struct linetag *t);

#endif
