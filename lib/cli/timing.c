/* cli timing: the timing CSV (collx(7), TIMING CSV), appended by many ranks
 * (and many runs) to one file: each row is one locked O_APPEND write. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"

struct cli_timing {
	int fd;
	int own;		/* fd is ours to close (not stdout) */
	int regular;		/* a regular file: lock it, header by its size */
	int header_pending;	/* pipe or terminal: header before rank 0's first row */
	char *path;
	char *header;		/* with its newline */
};

double
cli_busbw_factor(const char *op, int world)
{
	double n = world;

	if (op == NULL || world < 1)
		return 1;
	if (strcmp(op, "allreduce") == 0)
		return 2 * (n - 1) / n;
	if (strcmp(op, "allgather") == 0 || strcmp(op, "reduce-scatter") == 0 ||
	    strcmp(op, "reduce_scatter") == 0 || strcmp(op, "reducescatter") == 0 ||
	    strcmp(op, "alltoall") == 0)
		return (n - 1) / n;
	return 1;		/* broadcast, reduce and everything else */
}

static int
timing_fail(struct cli_timing *t, char *err, size_t errlen)
{
	return cli_fail(err, errlen, "timing %s: %s", t->path, strerror(errno));
}

/* Write buf, locking a regular file; the header first when it is empty. */
static int
timing_append(struct cli_timing *t, const char *buf, size_t len,
    int may_header, char *err, size_t errlen)
{
	struct stat st;
	int rc = 0;

	if (t->fd == STDOUT_FILENO)
		fflush(stdout);		/* keep order with the program's printf */
	if (t->regular) {
		if (flock(t->fd, LOCK_EX) < 0)
			return timing_fail(t, err, errlen);
		if (fstat(t->fd, &st) < 0 || (st.st_size == 0 &&
		    cli_write_all(t->fd, t->header, strlen(t->header)) < 0))
			rc = timing_fail(t, err, errlen);
	} else if (t->header_pending && may_header) {
		if (cli_write_all(t->fd, t->header, strlen(t->header)) < 0)
			rc = timing_fail(t, err, errlen);
	}
	t->header_pending = 0;
	if (rc == 0 && len > 0 && cli_write_all(t->fd, buf, len) < 0)
		rc = timing_fail(t, err, errlen);
	if (t->regular)
		flock(t->fd, LOCK_UN);
	return rc;
}

static struct cli_timing *
timing_new(const char *path, const char *extra_header)
{
	struct cli_timing *t;
	size_t hlen;

	if ((t = calloc(1, sizeof *t)) == NULL)
		return NULL;
	t->fd = -1;
	hlen = sizeof CLI_TIMING_COLUMNS +
	    (extra_header ? strlen(extra_header) + 1 : 0) + 1;
	if ((t->path = strdup(path)) == NULL ||
	    (t->header = malloc(hlen)) == NULL) {
		free(t->path);
		free(t);
		return NULL;
	}
	snprintf(t->header, hlen, "%s%s%s\n", CLI_TIMING_COLUMNS,
	    extra_header && *extra_header ? "," : "",
	    extra_header ? extra_header : "");
	return t;
}

int
cli_timing_open(struct cli_timing **out, const char *path,
    const char *extra_header, char *err, size_t errlen)
{
	struct cli_timing *t;
	struct stat st;
	int created = 0;

	*out = NULL;
	if (path == NULL)
		return 0;
	if ((t = timing_new(path, extra_header)) == NULL)
		return cli_fail(err, errlen, "out of memory");
	if (strcmp(path, "-") == 0) {
		t->fd = STDOUT_FILENO;
		fflush(stdout);
	} else {
		t->fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_APPEND |
		    O_CLOEXEC, 0644);
		created = t->fd >= 0;
		if (t->fd < 0 && errno == EEXIST)
			t->fd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC);
		t->own = t->fd >= 0;
	}
	if (t->fd < 0 || fstat(t->fd, &st) < 0) {
		timing_fail(t, err, errlen);
		goto fail;
	}
	t->regular = S_ISREG(st.st_mode);
	t->header_pending = !t->regular;
	/* The header, if the file is new or empty. */
	if (t->regular && timing_append(t, NULL, 0, 0, err, errlen) < 0)
		goto fail;
	*out = t;
	return 0;
fail:
	/* A file this run made and could not write to (a full disk) goes. */
	if (created && fstat(t->fd, &st) == 0 && st.st_size == 0)
		unlink(path);
	cli_timing_close(t, NULL, 0);
	return -1;
}

/* A CSV field, quoted when it holds a separator, quote or newline. */
static void
csv_field(FILE *f, const char *s)
{
	if (s == NULL)
		return;
	if (strpbrk(s, ",\"\r\n") == NULL) {
		fputs(s, f);
		return;
	}
	fputc('"', f);
	for (; *s; s++) {
		if (*s == '"')
			fputc('"', f);
		fputc(*s, f);
	}
	fputc('"', f);
}

int
cli_timing_write(struct cli_timing *t, const struct cli_timing_row *r,
    char *err, size_t errlen)
{
	double algbw = 0, busbw;
	char *buf = NULL;
	size_t len = 0;
	FILE *f;
	int rc;

	if (t == NULL)
		return 0;
	if (r->seconds > 0)
		algbw = (double)r->bytes / r->seconds / 1e9;
	busbw = algbw * cli_busbw_factor(r->op, r->world);
	if ((f = open_memstream(&buf, &len)) == NULL)
		return cli_fail(err, errlen, "out of memory");
	csv_field(f, r->program);
	fputc(',', f);
	csv_field(f, r->op);
	fputc(',', f);
	csv_field(f, r->algo);
	fprintf(f, ",%d,%d,", r->rank, r->world);
	csv_field(f, r->dtype);
	fprintf(f, ",%zu,%zu,%d,%.9g,%.6g,%.6g", r->count, r->bytes, r->iter,
	    r->seconds, algbw, busbw);
	if (r->extra)
		fprintf(f, ",%s", r->extra);
	fputc('\n', f);
	if (fclose(f) != 0 || buf == NULL)
		rc = cli_fail(err, errlen, "out of memory");
	else
		rc = timing_append(t, buf, len, r->rank <= 0, err, errlen);
	free(buf);
	return rc;
}

int
cli_timing_close(struct cli_timing *t, char *err, size_t errlen)
{
	int rc = 0;

	if (t == NULL)
		return 0;
	if (t->own && close(t->fd) < 0)
		rc = timing_fail(t, err, errlen);
	free(t->header);
	free(t->path);
	free(t);
	return rc;
}
