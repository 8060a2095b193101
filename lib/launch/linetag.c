/* linetag: tagged lines of a rank's output (see linetag.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "launch/linetag.h"

int
linetag_open(struct linetag *t, int rank, int to, int *wfd, char *err,
    size_t errlen)
{
	int p[2];

	if (pipe2(p, O_CLOEXEC) < 0)
		return cli_fail(err, errlen, "pipe: %s", strerror(errno));
	fcntl(p[0], F_SETFL, O_NONBLOCK);
	t->fd = p[0];
	t->to = to;
	t->rank = rank;
	t->len = 0;
	t->buf = cli_calloc(LINETAG_MAX, 1);
	*wfd = p[1];
	return 0;
}

/* "[R] line\n" in one write; a line without its newline gets one. */
static void
emit(const struct linetag *t, const char *line, size_t len)
{
	char *out;
	int k;

	out = cli_calloc(len + 32, 1);
	k = snprintf(out, 32, "[%d] ", t->rank);
	memcpy(out + k, line, len);
	if (len == 0 || line[len - 1] != '\n')
		out[k + len++] = '\n';
	/* a reader gone: the line is dropped */
	(void)cli_write_all(t->to, out, (size_t)k + len);
	free(out);
}

void
linetag_close(struct linetag *t)
{
	if (t->len > 0)
		emit(t, t->buf, t->len);
	close(t->fd);
	free(t->buf);
	t->fd = -1;
	t->buf = NULL;
	t->len = 0;
}

void
linetag_read(struct linetag *t)
{
	ssize_t n;
	char *nl, *p;

	n = read(t->fd, t->buf + t->len, LINETAG_MAX - t->len);
	if (n < 0 && (errno == EINTR || errno == EAGAIN))
		return;
	if (n <= 0) {
		linetag_close(t);
		return;
	}
	t->len += (size_t)n;
	p = t->buf;
	while ((nl = memchr(p, '\n', t->len - (size_t)(p - t->buf))) != NULL) {
		emit(t, p, (size_t)(nl - p) + 1);
		p = nl + 1;
	}
	t->len -= (size_t)(p - t->buf);
	memmove(t->buf, p, t->len);
	if (t->len == LINETAG_MAX) {	/* an overlong line: split it */
		emit(t, t->buf, t->len);
		t->len = 0;
	}
}
