/* fetch: input bytes from a path, standard input or a URL (libcurl), and
 * atomic output (temporary file, fsync, rename). */
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tensor/format.h"

#define FETCH_DEFAULT_TIMEOUT 60	/* seconds, as COLLX_TIMEOUT's default */
#define PROGRESS_MIN_BYTES (8u << 20)

struct grow {
	unsigned char *p;
	size_t n, cap;
	int too_big;
};

static int
grow_put(struct grow *g, const void *src, size_t n)
{
	unsigned char *q;
	size_t cap;

	if ((uint64_t)g->n + n > TENSOR_MAX_INPUT) {
		g->too_big = 1;
		return -1;
	}
	if (g->n + n > g->cap) {
		cap = g->cap ? g->cap : 1 << 16;
		while (cap < g->n + n)
			cap *= 2;
		if (!(q = realloc(g->p, cap)))
			return -1;
		g->p = q;
		g->cap = cap;
	}
	memcpy(g->p + g->n, src, n);
	g->n += n;
	return 0;
}

static void
cap_error(char *err, size_t errlen, const char *src)
{
	snprintf(err, errlen, "%s: larger than the %llu GiB input limit", src,
	    (unsigned long long)(TENSOR_MAX_INPUT >> 30));
}

/* A descriptor of unknown length (pipe, FIFO, terminal): grow as data comes. */
static int
read_stream(int fd, const char *src, struct grow *g, char *err, size_t errlen)
{
	unsigned char chunk[1 << 16];
	ssize_t r;

	for (;;) {
		r = read(fd, chunk, sizeof chunk);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			snprintf(err, errlen, "%s: %s", src, strerror(errno));
			return -1;
		}
		if (r == 0)
			return 0;
		if (grow_put(g, chunk, (size_t)r) < 0) {
			if (g->too_big)
				cap_error(err, errlen, src);
			else
				snprintf(err, errlen, "%s: out of memory", src);
			return -1;
		}
	}
}

/* A regular file: its size is known, so one allocation of exactly it. */
static int
read_regular(int fd, const char *src, off_t size, struct grow *g,
    char *err, size_t errlen)
{
	size_t have = 0;
	ssize_t r;

	if ((uint64_t)size > TENSOR_MAX_INPUT) {
		cap_error(err, errlen, src);
		return -1;
	}
	if (!(g->p = malloc((size_t)size + 1))) {
		snprintf(err, errlen, "%s: out of memory for %lld bytes", src, (long long)size);
		return -1;
	}
	while (have < (size_t)size) {
		r = read(fd, g->p + have, (size_t)size - have);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			snprintf(err, errlen, "%s: %s", src, r ? strerror(errno) :
			    "file shrank while being read");
			return -1;
		}
		have += (size_t)r;
	}
	g->n = have;
	return 0;
}

static int
fetch_path(const char *src, struct grow *g, char *err, size_t errlen)
{
	int fd = strcmp(src, "-") == 0 ? STDIN_FILENO : open(src, O_RDONLY | O_CLOEXEC);
	struct stat st;
	int rc;

	if (fd < 0 || fstat(fd, &st) < 0) {
		snprintf(err, errlen, "%s: %s", src, strerror(errno));
		if (fd > STDIN_FILENO)
			close(fd);
		return -1;
	}
	if (S_ISDIR(st.st_mode)) {
		snprintf(err, errlen, "%s: is a directory", src);
		rc = -1;
	} else if (S_ISREG(st.st_mode) && fd != STDIN_FILENO)
		rc = read_regular(fd, src, st.st_size, g, err, errlen);
	else
		rc = read_stream(fd, src, g, err, errlen);
	if (fd != STDIN_FILENO)
		close(fd);
	return rc;
}

static int
is_url(const char *src)
{
	static const char *const schemes[] = { "http://", "https://", "file://", "ftp://" };
	size_t i;

	for (i = 0; i < sizeof schemes / sizeof schemes[0]; i++)
		if (strncasecmp(src, schemes[i], strlen(schemes[i])) == 0)
			return 1;
	return 0;
}

static double
fetch_timeout(void)
{
	const char *s = getenv("COLLX_TIMEOUT");
	char *end;
	double t;

	if (!s || !*s)
		return FETCH_DEFAULT_TIMEOUT;
	t = strtod(s, &end);
	return *end || !(t > 0) ? FETCH_DEFAULT_TIMEOUT : t;
}

struct download {
	struct grow g;
	const char *src;
	int progress;		/* stderr is a terminal */
	int shown;		/* a progress line is on screen */
	double last;		/* bytes at the last update */
};

static size_t
on_data(char *p, size_t size, size_t n, void *arg)
{
	struct download *d = arg;

	return grow_put(&d->g, p, size * n) < 0 ? 0 : size * n;
}

static int
on_progress(void *arg, curl_off_t total, curl_off_t now, curl_off_t ut,
    curl_off_t un)
{
	struct download *d = arg;

	(void)ut;
	(void)un;
	if (!d->progress || (total < PROGRESS_MIN_BYTES && now < PROGRESS_MIN_BYTES) ||
	    now == d->last || (now - d->last < (1 << 20) && now != total))
		return 0;
	d->last = (double)now;
	if (total > 0)
		fprintf(stderr, "\r%s: %s: %.1f of %.1f MB (%.0f%%)",
		    program_invocation_short_name, d->src, now / 1e6, total / 1e6,
		    100.0 * (double)now / (double)total);
	else
		fprintf(stderr, "\r%s: %s: %.1f MB", program_invocation_short_name,
		    d->src, now / 1e6);
	d->shown = 1;
	return 0;
}

static void
curl_setup(CURL *c, struct download *d, double timeout)
{
	curl_easy_setopt(c, CURLOPT_URL, d->src);
	curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https,file,ftp");
	curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https,ftp");
	curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
	curl_easy_setopt(c, CURLOPT_MAXREDIRS, 10L);
	curl_easy_setopt(c, CURLOPT_FAILONERROR, 1L);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, (long)(timeout * 1000));
	/* a stall of the timeout ends the transfer; so does 10 timeouts in all */
	curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
	curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, (long)(timeout + 0.999));
	curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)(timeout * 10000));
	curl_easy_setopt(c, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)TENSOR_MAX_INPUT);
	curl_easy_setopt(c, CURLOPT_USERAGENT, "collx/" COLLX_VERSION);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, d);
	curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
	curl_easy_setopt(c, CURLOPT_XFERINFODATA, d);
	curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
}

/* Worth one more try: the network or the server, not the request. */
static int
transient(CURLcode rc, long status)
{
	if (rc == CURLE_HTTP_RETURNED_ERROR)
		return status >= 500;
	return rc == CURLE_COULDNT_CONNECT || rc == CURLE_OPERATION_TIMEDOUT ||
	    rc == CURLE_RECV_ERROR || rc == CURLE_SEND_ERROR || rc == CURLE_GOT_NOTHING ||
	    rc == CURLE_PARTIAL_FILE;
}

static void
curl_report(CURLcode rc, long status, struct download *d, const char *detail,
    char *err, size_t errlen)
{
	if (rc == CURLE_HTTP_RETURNED_ERROR)
		snprintf(err, errlen, "%s: HTTP status %ld", d->src, status);
	else if (d->g.too_big || rc == CURLE_FILESIZE_EXCEEDED)
		cap_error(err, errlen, d->src);
	else if (rc == CURLE_OPERATION_TIMEDOUT)
		snprintf(err, errlen, "%s: timed out (%s)", d->src, *detail ? detail :
		    curl_easy_strerror(rc));
	else
		snprintf(err, errlen, "%s: %s", d->src, *detail ? detail :
		    curl_easy_strerror(rc));
}

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;

static void
curl_start(void)
{
	curl_global_init(CURL_GLOBAL_DEFAULT);
}

static int
fetch_url(const char *src, struct grow *g, char *err, size_t errlen)
{
	struct download d = { .src = src, .progress = isatty(STDERR_FILENO) };
	char detail[CURL_ERROR_SIZE];
	CURLcode rc = CURLE_OK;
	long status = 0;
	int attempt;
	CURL *c;

	pthread_once(&curl_once, curl_start);
	if (!(c = curl_easy_init())) {
		snprintf(err, errlen, "%s: cannot start libcurl", src);
		return -1;
	}
	for (attempt = 0; attempt < 2; attempt++) {
		if (attempt)
			sleep(1);
		free(d.g.p);
		memset(&d.g, 0, sizeof d.g);
		detail[0] = 0;
		curl_setup(c, &d, fetch_timeout());
		curl_easy_setopt(c, CURLOPT_ERRORBUFFER, detail);
		rc = curl_easy_perform(c);
		curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
		if (d.shown)
			fputc('\n', stderr);
		d.shown = 0;
		if (rc == CURLE_OK || !transient(rc, status) || d.g.too_big)
			break;
	}
	if (rc != CURLE_OK)
		curl_report(rc, status, &d, detail, err, errlen);
	curl_easy_cleanup(c);
	*g = d.g;
	return rc == CURLE_OK ? 0 : -1;
}

int
tensor_fetch(const char *src, void **buf, size_t *len, char *err, size_t errlen)
{
	struct grow g = { 0 };
	int rc;

	rc = is_url(src) ? fetch_url(src, &g, err, errlen) : fetch_path(src, &g, err, errlen);
	if (rc < 0) {
		free(g.p);
		return -1;
	}
	if (!g.p && !(g.p = malloc(1))) {
		snprintf(err, errlen, "%s: out of memory", src);
		return -1;
	}
	*buf = g.p;
	*len = g.n;
	return 0;
}

static int
write_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;
	ssize_t w;

	while (len) {
		w = write(fd, p, len);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return -1;
		p += w;
		len -= (size_t)w;
	}
	return 0;
}

/* Permissions a plain open(O_CREAT, 0666) would have given. */
static int
fix_mode(int fd)
{
	mode_t mask = umask(0);

	umask(mask);
	return fchmod(fd, 0666 & ~mask);
}

int
tensor_out_open(struct tensor_out *o, const char *dst, char *err,
    size_t errlen)
{
	char *d1 = strdup(dst), *d2 = strdup(dst);

	memset(o, 0, sizeof(*o));
	o->fd = -1;
	o->dst = dst;
	if (!d1 || !d2 || asprintf(&o->tmp, "%s/.%s.XXXXXX", dirname(d1),
	    basename(d2)) < 0) {
		o->tmp = NULL;
		free(d1);
		free(d2);
		snprintf(err, errlen, "%s: %s", dst, strerror(ENOMEM));
		return -1;
	}
	free(d2);
	o->dir = d1;
	if ((o->fd = mkstemp(o->tmp)) < 0) {
		snprintf(err, errlen, "%s: %s", dst, strerror(errno));
		free(o->tmp);
		free(o->dir);
		o->tmp = o->dir = NULL;
		return -1;
	}
	return 0;
}

void
tensor_out_write(struct tensor_out *o, const void *buf, size_t len)
{
	if (!o->failed && write_all(o->fd, buf, len) < 0) {
		o->failed = 1;
		o->saved = errno;
	}
}

void
tensor_out_values(struct tensor_out *o, void *buf, size_t count, size_t size)
{
	if (tensor_host_is_big())
		tensor_swap_bytes(buf, count, size);
	tensor_out_write(o, buf, count * size);
}

int
tensor_out_close(struct tensor_out *o, int commit, char *err, size_t errlen)
{
	int rc = -1, dfd;

	if (o->fd < 0)
		return -1;
	errno = o->saved;
	if (commit && !o->failed && fix_mode(o->fd) == 0 && fsync(o->fd) == 0) {
		rc = close(o->fd);
		o->fd = -1;
		if (rc == 0 && (rc = rename(o->tmp, o->dst)) == 0 &&
		    (dfd = open(o->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) >= 0) {
			fsync(dfd);	/* so the rename itself reaches the disk */
			close(dfd);
		}
	}
	if (rc < 0) {
		int saved = errno;

		if (o->fd >= 0)
			close(o->fd);
		unlink(o->tmp);
		if (commit)
			snprintf(err, errlen, "%s: %s", o->dst, strerror(saved));
	}
	free(o->tmp);
	free(o->dir);
	memset(o, 0, sizeof(*o));
	o->fd = -1;
	return rc;
}

static int
write_temp(const char *dst, const void *buf, size_t len, char *err, size_t errlen)
{
	struct tensor_out o;

	if (tensor_out_open(&o, dst, err, errlen) < 0)
		return -1;
	tensor_out_write(&o, buf, len);
	return tensor_out_close(&o, 1, err, errlen);
}

/* Devices and FIFOs (/dev/null, a pipe to a co-process) are written in
 * place: renaming a temporary over them would replace the node itself. */
static int
write_special(const char *dst, const void *buf, size_t len,
    char *err, size_t errlen)
{
	int fd = open(dst, O_WRONLY | O_CLOEXEC);

	if (fd < 0 || write_all(fd, buf, len) < 0) {
		snprintf(err, errlen, "%s: %s", dst, strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	if (close(fd) < 0) {
		snprintf(err, errlen, "%s: %s", dst, strerror(errno));
		return -1;
	}
	return 0;
}

int
tensor_write_file(const char *dst, const void *buf, size_t len,
    char *err, size_t errlen)
{
	struct stat st;

	if (strcmp(dst, "-") != 0 && stat(dst, &st) == 0 && !S_ISREG(st.st_mode))
		return write_special(dst, buf, len, err, errlen);
	if (strcmp(dst, "-") != 0)
		return write_temp(dst, buf, len, err, errlen);
	if (fwrite(buf, 1, len, stdout) != len || fflush(stdout) != 0) {
		snprintf(err, errlen, "standard output: %s", strerror(errno));
		return -1;
	}
	return 0;
}
