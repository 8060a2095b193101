/* fr: the flight recorder. Every rank keeps its last COLLX_FR_SIZE
 * operations (of its group and every sub-group) in a ring of fixed-size
 * records, written as JSON when the rank fails or is sent SIGUSR1, so
 * that collx-run --diagnose can tell which operation some ranks never
 * entered or never finished. Recording an operation is a few stores and
 * two readings of the clock (begin, end); nothing is allocated and no
 * system call is made.
 * The signal handler only counts; the rank writes at its next wait or
 * operation (a rank asleep in poll() wakes to EINTR and looks). */
#include "cli/util.h"
#include "comm/comm_impl.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define FR_SIZE_DEFAULT 256
#define FR_SIZE_MAX (1L << 20)
#define FR_GROUPS_MAX 256	/* sub-groups named in a dump; later ones go
				 * unnamed (their operations still recorded) */

volatile sig_atomic_t comm_fr_signals;

static const char *const state_names[] = { "queued", "started", "done" };

static const char *const why_names[COMM_WHY_COUNT] = {
	"none", "closed", "failed", "timeout", "mismatch", "local"
};

static void
fr_on_signal(int sig)
{
	(void)sig;
	comm_fr_signals++;
}

/* SIGUSR1 counted, unless the program has its own use for it. SA_RESTART
 * keeps the program's reads and writes going; poll() returns EINTR
 * regardless, so a waiting rank looks at once. */
static void
fr_catch(void)
{
	struct sigaction sa, old;

	if (sigaction(SIGUSR1, NULL, &old) < 0 || (old.sa_flags & SA_SIGINFO) ||
	    old.sa_handler != SIG_DFL)
		return;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = fr_on_signal;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = SA_RESTART;
	sigaction(SIGUSR1, &sa, NULL);
}

/* The job id as a file name's part: other bytes than [A-Za-z0-9._-]
 * become '_'. */
static char *
fr_job(const char *id)
{
	char *s = strdup(id != NULL && *id != '\0' ? id : "0");

	for (char *p = s; p != NULL && *p != '\0'; p++)
		if (!isalnum((unsigned char)*p) && strchr("._-", *p) == NULL)
			*p = '_';
	return s;
}

static int
fr_size(long *size, char *err, size_t errlen)
{
	const char *s = getenv("COLLX_FR_SIZE");
	char *end;

	*size = FR_SIZE_DEFAULT;
	if (s == NULL || *s == '\0')
		return 0;
	errno = 0;
	*size = strtol(s, &end, 10);
	if (*end != '\0' || errno != 0 || *size < 0 || *size > FR_SIZE_MAX)
		return cli_fail(err, errlen, "COLLX_FR_SIZE: '%s' is not a "
		    "number of operations from 0 to %ld", s, FR_SIZE_MAX);
	return 0;
}

/* Without COLLX_FR_DIR, dumps go to a directory of the user's under
 * TMPDIR, not into whatever directory the job ran in; a failure's line
 * names it. */
static char *
fr_dir_default(void)
{
	const char *tmp = getenv("TMPDIR");
	char *dir;
	int n;

	if (tmp == NULL || *tmp == '\0')
		tmp = "/tmp";
	n = snprintf(NULL, 0, "%s/collx-fr-%ld", tmp, (long)getuid());
	if ((dir = malloc((size_t)n + 1)) != NULL)
		snprintf(dir, (size_t)n + 1, "%s/collx-fr-%ld", tmp,
		    (long)getuid());
	return dir;
}

int
comm_fr_open(struct comm *c, const char *job_id, char *err, size_t errlen)
{
	const char *dir = getenv("COLLX_FR_DIR");
	char *deflt = NULL;
	struct comm_fr *fr;
	long size;
	int n;

	if (fr_size(&size, err, errlen) < 0)
		return -1;
	if (size == 0)
		return 0;
	if ((fr = calloc(1, sizeof *fr)) == NULL ||
	    (fr->ring = calloc((size_t)size, sizeof *fr->ring)) == NULL ||
	    (fr->job = fr_job(job_id)) == NULL)
		goto nomem;
	fr->size = (uint32_t)size;
	fr->seen = comm_fr_signals;
	if ((dir == NULL || *dir == '\0') && (dir = deflt = fr_dir_default()) ==
	    NULL)
		goto nomem;
	n = snprintf(NULL, 0, "%s/collx-fr.%s.%d.json", dir, fr->job, c->rank);
	if ((fr->path = malloc((size_t)n + 1)) != NULL)
		snprintf(fr->path, (size_t)n + 1, "%s/collx-fr.%s.%d.json",
		    dir, fr->job, c->rank);
	fr->shared_tmp = deflt != NULL;
	free(deflt);
	if (fr->path == NULL)
		goto nomem;
	c->fr = fr;
	if (comm_fr_group(c) < 0)
		goto nomem;
	fr_catch();
	return 0;
nomem:
	if (c->fr == NULL && fr != NULL) {
		free(fr->ring);
		free(fr->job);
		free(fr);
	}
	return cli_fail(err, errlen, "out of memory");
}

void
comm_fr_close(struct comm *c)
{
	struct comm_fr *fr = c->fr;

	if (fr == NULL)
		return;
	for (int i = 0; i < fr->ngroups; i++)
		free(fr->groups[i].ranks);
	free(fr->groups);
	free(fr->ring);
	free(fr->path);
	free(fr->job);
	free(fr);
	c->fr = NULL;
}

int
comm_fr_group(struct comm *c)
{
	struct comm_fr *fr = c->net->fr;
	struct comm_fr_group *g;

	if (fr == NULL || fr->ngroups >= FR_GROUPS_MAX)
		return 0;
	g = realloc(fr->groups, ((size_t)fr->ngroups + 1) * sizeof *g);
	if (g == NULL)
		return -1;
	fr->groups = g;
	g += fr->ngroups;
	if ((g->ranks = malloc((size_t)c->world * sizeof *g->ranks)) == NULL)
		return -1;
	g->ctx = c->ctx;
	g->world = c->world;
	for (int r = 0; r < c->world; r++)
		g->ranks[r] = comm_net_rank(c, r);
	fr->ngroups++;
	return 0;
}

void
comm_fr_begin(struct comm *c)
{
	struct comm_fr *fr = c->net->fr;
	struct comm_fr_op *o = c->fr_op;
	double now;

	if (fr == NULL)
		return;
	now = cli_now();
	/* One its caller never ended is done when the group's next begins. */
	if (o != NULL && o->ctx == c->ctx && o->seq == c->seq - 1 &&
	    o->state != COMM_FR_DONE && c->net->kind == COMM_ERR_NONE) {
		o->state = COMM_FR_DONE;
		o->end = now;
	}
	o = &fr->ring[fr->n++ % fr->size];
	o->seq = c->seq;
	o->ctx = c->ctx;
	o->state = COMM_FR_QUEUED;
	o->bytes = 0;
	o->algo = NULL;
	o->start = now;
	o->end = 0;
	memcpy(o->op, c->opname, sizeof o->op - 1);
	o->op[sizeof o->op - 1] = '\0';
	c->fr_op = o;
	comm_fr_poll(c);
}

/* c's record of its current operation, unless the ring has moved on. */
static struct comm_fr_op *
fr_current(struct comm *c)
{
	struct comm_fr_op *o = c->fr_op;

	return o != NULL && o->seq == c->seq && o->ctx == c->ctx ? o : NULL;
}

void
comm_fr_algo(struct comm *c, const char *algo, uint64_t bytes)
{
	struct comm_fr_op *o = fr_current(c);

	if (o != NULL) {
		o->algo = algo;
		o->bytes = bytes;
	}
}

void
comm_op_end(struct comm *c)
{
	struct comm_fr_op *o = fr_current(c);

	if (o != NULL) {
		o->state = COMM_FR_DONE;
		o->end = cli_now();
	}
}

/* s as a JSON string. */
static void
json_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s != '\0'; s++) {
		unsigned char ch = (unsigned char)*s;
		if (ch == '"' || ch == '\\')
			fprintf(f, "\\%c", ch);
		else if (ch < 0x20)
			fprintf(f, "\\u%04x", ch);
		else
			fputc(ch, f);
	}
	fputc('"', f);
}

static const struct comm_fr_group *
fr_group_of(const struct comm_fr *fr, uint32_t ctx)
{
	for (int i = 0; i < fr->ngroups; i++)
		if (fr->groups[i].ctx == ctx)
			return &fr->groups[i];
	return NULL;
}

static void
json_ranks(FILE *f, const struct comm_fr_group *g)
{
	fputc('[', f);
	for (int r = 0; g != NULL && r < g->world; r++)
		fprintf(f, "%s%d", r ? "," : "", g->ranks[r]);
	fputc(']', f);
}

/* The failure, its root cause, and the peers this rank still waits on. */
static void
json_failure(FILE *f, const struct comm *net)
{
	const struct comm_cause *k = &net->cause;
	int first = 1;

	fputs("\"error\":", f);
	if (net->kind == COMM_ERR_NONE)
		fputs("null", f);
	else
		json_str(f, net->err);
	fputs(",\n\"cause\":", f);
	if (k->why == COMM_WHY_NONE || k->why >= COMM_WHY_COUNT)
		fputs("null", f);
	else
		fprintf(f, "{\"why\":\"%s\",\"culprit\":%d,\"reporter\":%d,"
		    "\"seq\":%u}", why_names[k->why], k->culprit, k->reporter,
		    k->seq);
	fputs(",\n\"waiting_on\":[", f);
	for (int p = 0; p < net->world; p++)
		if (net->peers[p].pending > 0) {
			fprintf(f, "%s%d", first ? "" : ",", p);
			first = 0;
		}
	fputs("],\n", f);
}

static void
json_op(FILE *f, const struct comm_fr *fr, const struct comm_fr_op *o,
    double shift)
{
	fprintf(f, "{\"seq\":%u,\"group\":%u,\"op\":", o->seq, o->ctx);
	json_str(f, o->op);
	fputs(",\"algo\":", f);
	if (o->algo != NULL)
		json_str(f, o->algo);
	else
		fputs("null", f);
	fprintf(f, ",\"bytes\":%llu,\"peers\":", (unsigned long long)o->bytes);
	json_ranks(f, fr_group_of(fr, o->ctx));
	fprintf(f, ",\"state\":\"%s\",\"start\":%.6f,\"end\":",
	    state_names[o->state <= COMM_FR_DONE ? o->state : 0],
	    o->start + shift);
	if (o->state == COMM_FR_DONE)
		fprintf(f, "%.6f}", o->end + shift);
	else
		fputs("null}", f);
}

static void
fr_json(FILE *f, const struct comm *net, const char *why)
{
	const struct comm_fr *fr = net->fr;
	struct timespec ts;
	uint64_t i, first = fr->n > fr->size ? fr->n - fr->size : 0;
	double wall, shift;

	clock_gettime(CLOCK_REALTIME, &ts);
	wall = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
	shift = wall - cli_now();	/* the monotonic clock to Unix time */
	fputs("{\"collx_flight_recorder\":1,\"job\":", f);
	json_str(f, fr->job);
	fprintf(f, ",\"rank\":%d,\"world\":%d,\"pid\":%ld,\"reason\":",
	    net->rank, net->world, (long)getpid());
	json_str(f, why);
	fprintf(f, ",\"time\":%.6f,\n", wall);
	json_failure(f, net);
	fprintf(f, "\"size\":%u,\"recorded\":%llu,\n\"groups\":[", fr->size,
	    (unsigned long long)fr->n);
	for (int g = 0; g < fr->ngroups; g++) {
		fprintf(f, "%s{\"group\":%u,\"ranks\":", g ? "," : "",
		    fr->groups[g].ctx);
		json_ranks(f, &fr->groups[g]);
		fputc('}', f);
	}
	fputs("],\n\"ops\":[", f);
	for (i = first; i < fr->n; i++) {
		fputs(i > first ? ",\n" : "\n", f);
		json_op(f, fr, &fr->ring[i % fr->size], shift);
	}
	fputs("]}\n", f);
}

/* The directory of the dump at path, made with its parents (mode 0700,
 * as the dumps are the user's alone) where missing. mine: the directory
 * must be a real one of this user's, not one (or a link) another user
 * made first under the guessable default name in a shared /tmp. */
static int
fr_mkdirs(const char *path, int mine, char *err, size_t errlen)
{
	struct stat st;
	char *dir = strdup(path), *p;

	/* path is DIR/collx-fr.JOB.RANK.json: it has a '/' */
	if (dir == NULL)
		return cli_fail(err, errlen, "out of memory");
	*strrchr(dir, '/') = '\0';
	for (p = dir + 1;; p++) {
		if ((p = strchr(p, '/')) != NULL)
			*p = '\0';
		if (*dir != '\0' && mkdir(dir, 0700) < 0 && errno != EEXIST) {
			cli_fail(err, errlen, "%s: %s", dir, strerror(errno));
			free(dir);
			return -1;
		}
		if (p == NULL)
			break;
		*p = '/';
	}
	if (mine && (lstat(dir, &st) < 0 || !S_ISDIR(st.st_mode) ||
	    st.st_uid != getuid() || (st.st_mode & 022) != 0)) {
		cli_fail(err, errlen, "%s: not a directory of this user's "
		    "alone (set COLLX_FR_DIR)", dir);
		free(dir);
		return -1;
	}
	free(dir);
	return 0;
}

/* Written to a temporary file beside the dump, then renamed over it. */
static int
fr_write(struct comm *net, const char *why, char *err, size_t errlen)
{
	struct comm_fr *fr = net->fr;
	size_t n = strlen(fr->path) + 8;
	char *tmp;
	FILE *f = NULL;
	int fd = -1, rc = -1, e;

	if (fr_mkdirs(fr->path, fr->shared_tmp, err, errlen) < 0)
		return -1;
	if ((tmp = malloc(n)) == NULL)
		return cli_fail(err, errlen, "out of memory");
	snprintf(tmp, n, "%s.XXXXXX", fr->path);
	if ((fd = mkstemp(tmp)) < 0 || (f = fdopen(fd, "w")) == NULL) {
		cli_fail(err, errlen, "%s: %s", fd < 0 ? tmp : fr->path,
		    strerror(errno));
		goto out;
	}
	fd = -1;
	fr_json(f, net, why);
	e = ferror(f) ? EIO : 0;
	if (fclose(f) != 0 && e == 0)
		e = errno;
	f = NULL;
	if (e == 0 && rename(tmp, fr->path) < 0)
		e = errno;
	if (e != 0) {
		cli_fail(err, errlen, "%s: %s", fr->path, strerror(e));
		unlink(tmp);
		goto out;
	}
	rc = 0;
out:
	if (fd >= 0) {
		close(fd);
		unlink(tmp);
	}
	free(tmp);
	return rc;
}

int
comm_fr_dump(struct comm *c, const char *why, char *err, size_t errlen)
{
	if (c->net->fr == NULL)
		return cli_fail(err, errlen, "no flight recorder "
		    "(COLLX_FR_SIZE=0)");
	return fr_write(c->net, why, err, errlen);
}

/* After the group's first failure: the reason is "timeout" when this
 * rank's own wait ran out, else "abort". The failure's one line gains
 * where the dump is and how to read it when the job timed out (a hang
 * is what the dumps explain), or why there is none; only where all of
 * it fits. */
void
comm_fr_fail(struct comm *c)
{
	struct comm *net = c->net;
	const char *path;
	char err[COLLX_ERRLEN], note[COLLX_ERRLEN * 2];
	size_t have = strlen(net->err);
	int n, dir;

	if (net->fr == NULL || !net->meshed)
		return;
	path = net->fr->path;
	dir = (int)(strrchr(path, '/') - path);
	if (fr_write(net, net->cause.why == COMM_WHY_TIMEOUT &&
	    net->cause.reporter == net->rank ? "timeout" : "abort", err,
	    sizeof err) < 0)
		n = snprintf(note, sizeof note, "; no flight recorder dump: %s",
		    err);
	else if (net->cause.why == COMM_WHY_TIMEOUT)
		n = snprintf(note, sizeof note, "; flight recorder dump %s, "
		    "read by collx-run --diagnose %.*s", path, dir, path);
	else
		return;
	if (n > 0 && (size_t)n < sizeof net->err - have)
		memcpy(net->err + have, note, (size_t)n + 1);
}

void
comm_fr_signaled(struct comm *c)
{
	struct comm *net = c->net;
	char err[COLLX_ERRLEN];

	net->fr->seen = comm_fr_signals;
	if (fr_write(net, "signal", err, sizeof err) < 0)
		comm_log(net, "flight recorder: %s", err);
}
