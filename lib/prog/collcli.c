/*
 * collcli: the body of the five collective programs.
 *
 * One item (a tensor file, or one array of a --stream) goes through:
 *  1. agreement: every rank learns what every other holds (a status that
 *     also says "end of input" or "unreadable input", and a hash of the
 *     names, dtypes and shapes; the full descriptions are exchanged only to
 *     explain a mismatch), so no rank waits on a collective another will
 *     never call. Broadcast instead sends the root's description.
 *  2. a plan: the output tensors, their shapes checked (divisibility).
 *  3. buckets: tensors of one dtype, in name order, fused into buffers of
 *     at most --bucket bytes; a bucket's send buffer holds block b of each
 *     of its tensors for every destination b, its receive buffer block j
 *     of each for every source j, so one collective serves them all.
 *  4. warmup and timed runs, each on a fresh copy of the input, then the
 *     output unpacked, --check'ed against collref, and written.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "prog/collcli_int.h"
#include "prog/collref.h"
#include "prog/join.h"

/* ---- failures ---- */

/* Records the failure (its exit code and one line) and returns -1. */
int
collcli_fail(struct cc_run *r, int code, const char *fmt, ...)
{
	va_list ap;

	r->code = code;
	va_start(ap, fmt);
	vsnprintf(r->err, sizeof r->err, fmt, ap);
	va_end(ap);
	return -1;
}

int
collcli_comm_failed(struct cc_run *r)
{
	return collcli_fail(r, comm_errkind(r->comm) == COMM_ERR_MISMATCH ?
	    CLI_EXIT_DATA : CLI_EXIT_RUNTIME, "%s", comm_error(r->comm));
}

int
collcli_no_memory(struct cc_run *r)
{
	return collcli_fail(r, CLI_EXIT_RUNTIME, "rank %d: out of memory", r->rank);
}

const char *
collcli_tname(const struct tensor *t)
{
	return t->name ? t->name : "input";
}

/* ---- runs and timing ---- */

/* The algorithms used ("ring", or "ring+rd" when buckets differ) and the
 * dtype ("mixed" when they differ). */
static void
describe_buckets(const struct cc_bucket *b, size_t nb, char *algo, size_t alen,
    const char **dt)
{
	size_t i, k;

	algo[0] = '\0';
	*dt = nb ? dtype_name(b[0].dt) : "none";
	for (i = 0; i < nb; i++) {
		for (k = 0; k < i && b[k].algo != b[i].algo; k++)
			;
		if (k == i)
			snprintf(algo + strlen(algo), alen - strlen(algo), "%s%s",
			    i ? "+" : "", coll_algo_name(b[i].algo));
		if (b[i].dt != b[0].dt)
			*dt = "mixed";
	}
}

static int
timing_row(struct cc_run *r, const struct cc_bucket *b, size_t nb, double secs)
{
	struct cli_timing_row row;
	char algo[128], err[COLLX_ERRLEN];
	size_t i;

	memset(&row, 0, sizeof row);
	describe_buckets(b, nb, algo, sizeof algo, &row.dtype);
	for (i = 0; i < nb; i++) {
		size_t n = b[i].bytes / dtype_size(b[i].dt);
		if (r->counts)	/* alltoallv: what this rank sent the others */
			n = b[i].stotal - b[i].scounts[r->rank];
		row.bytes += n * dtype_size(b[i].dt);
		row.count += n;
	}
	row.program = cli_progname;
	row.op = collcli_kind_name(collcli_coll_kind(r->o));
	row.algo = algo;
	row.rank = r->rank;
	row.world = r->world;
	row.iter = r->iter++;
	row.seconds = secs;
	if (cli_timing_write(r->timing, &row, err, sizeof err) < 0)
		return collcli_fail(r, CLI_EXIT_RUNTIME, "%s", err);
	return 0;
}

/*
 * The timed iterations' rows wait and are written after the loop (ROWS_HELD
 * at a time): written between iterations, with every rank appending to one
 * file, a rank slept in write() in about half of them (25-30 voluntary
 * switches in 53 iterations by COLLX_DEBUG=info's shm line, 0-2 without
 * --timing) and its peer, spinning past its limit in the next barrier,
 * slept too; the wake-up then fell inside a timed collective.
 */
#define ROWS_HELD 4096

static int
rows_write(struct cc_run *r, const struct cc_bucket *b, size_t nb,
    const double *secs, int *n)
{
	int k, held = *n;

	*n = 0;
	for (k = 0; k < held; k++)
		if (timing_row(r, b, nb, secs[k]) < 0)
			return -1;
	return 0;
}

static int
run_buckets(struct cc_run *r, const struct cc_plan *p, struct cc_bucket *b,
    size_t nb)
{
	int k, total = r->o->warmup + r->o->iters, held = 0;
	double t0, secs[ROWS_HELD];
	size_t i;

	r->secs = 0;
	for (k = 0; k < total; k++) {
		for (i = 0; collcli_inplace(r) && p->in && i < nb; i++)
			collcli_bucket_pack(r, p, &b[i]);
		/* Start timed runs together, as nccl-tests and the peers'
		 * benchmarks do, so a rank's time is the collective's own. */
		if (k >= r->o->warmup && coll_barrier(r->comm) < 0)
			goto failed;
		t0 = cli_now();
		for (i = 0; i < nb; i++)
			if (collcli_bucket_run(r, &b[i]) < 0)
				goto failed;
		if (k >= r->o->warmup) {
			double took = cli_now() - t0;

			r->secs += took;
			if (nb > 0)
				secs[held++] = took;
		}
		if (held == ROWS_HELD && rows_write(r, b, nb, secs, &held) < 0)
			return -1;
	}
	if (rows_write(r, b, nb, secs, &held) < 0)
		return -1;
	for (i = 0; i < nb; i++)
		if (b[i].own_recv)
			collcli_bucket_unpack(r, p, &b[i]);
	return 0;
failed:		/* the rows of the iterations that ended, then the failure */
	rows_write(r, b, nb, secs, &held);
	return collcli_comm_failed(r);
}

static int
collective(struct cc_run *r, const struct cc_plan *p)
{
	struct cc_bucket *b;
	const char *dt;
	char algo[128];
	size_t nb;
	int rc;

	if ((b = collcli_buckets(r, p, &nb)) == NULL)
		return -1;
	describe_buckets(b, nb, algo, sizeof algo, &dt);
	if (r->rank == 0 && r->items == 0)
		cli_debug("rank 0: %s of %zu tensor%s in %zu collective%s, "
		    "algorithm %s, world %d", collcli_kind_name(collcli_coll_kind(r->o)),
		    p->out.count, p->out.count == 1 ? "" : "s", nb,
		    nb == 1 ? "" : "s", nb ? algo : "none", r->world);
	rc = run_buckets(r, p, b, nb);
	collcli_buckets_free(b, nb);
	return rc;
}

/* ---- check and output ---- */

static int
check(struct cc_run *r, const struct cc_plan *p)
{
	struct collref_spec s = { r->o->kind, r->o->op, r->o->root, r->o->sdim,
	    r->o->gdim, r->counts };
	char err[COLLX_ERRLEN], first[COLLX_ERRLEN] = "";
	double e, maxerr = 0;
	size_t i;
	int rc, bad;

	for (i = 0; i < p->out.count; i++) {
		rc = collref_check(r->comm, &s, p->in ? &p->in->items[i] : NULL,
		    &p->out.items[i], &e, err, sizeof err);
		if (rc < 0)
			return collcli_comm_failed(r);
		if (rc > 0 && first[0] == '\0')
			snprintf(first, sizeof first, "%s", err);
		maxerr = e > maxerr ? e : maxerr;
	}
	if ((bad = collref_verdict(r->comm, first[0] != '\0')) == -2)
		return collcli_comm_failed(r);
	if (first[0])
		return collcli_fail(r, CLI_EXIT_CHECK, "rank %d: check failed: %s",
		    r->rank, first);
	if (bad >= 0)
		return collcli_fail(r, CLI_EXIT_CHECK, "rank %d: check failed on rank %d",
		    r->rank, bad);
	cli_debug("rank %d: check ok (%zu tensor%s, max error %.3g)", r->rank,
	    p->out.count, p->out.count == 1 ? "" : "s", maxerr);
	r->checked += p->out.count;
	r->maxerr = maxerr > r->maxerr ? maxerr : r->maxerr;
	return 0;
}

/* A run whose every check passed says so once, from rank 0, so --check
 * is never silent. */
static void
check_passed(const struct cc_run *r)
{
	if (r->rank != 0 || !r->o->check || r->checked == 0)
		return;
	cli_info("check passed: %zu tensor%s on %d rank%s, max error %.3g on "
	    "rank 0", r->checked, r->checked == 1 ? "" : "s", r->world,
	    r->world == 1 ? "" : "s", r->maxerr);
}

/* Without -o, rank 0 says what came out, so a run is never silent: shape,
 * dtype, the sum of the elements (a checksum to compare with NumPy's) and
 * the mean time of a timed run. */
static void
summary(const struct cc_run *r, const struct cc_plan *p)
{
	const struct tensor *t;
	char shape[160], dims[128];
	double sum = 0;
	int64_t n = 0, k;
	size_t i;

	if (r->rank != 0 || cli_quiet)
		return;
	for (i = 0; i < p->out.count; i++) {
		t = &p->out.items[i];
		for (k = 0; k < tensor_numel(t); k++)
			sum += dtype_get(t->dtype, t->data, (size_t)k);
		n += tensor_numel(t);
	}
	if (p->out.count == 1)
		snprintf(shape, sizeof shape, "%s %s", dtype_name(p->out.items[0].dtype),
		    tensor_shape_str(&p->out.items[0], dims, sizeof dims));
	else
		snprintf(shape, sizeof shape, "%zu tensors, %lld elements",
		    p->out.count, (long long)n);
	printf("%s: %s, sum %.9g, %.3g s per run (rank 0; no -o, nothing "
	    "written)\n", cli_progname, shape, sum, r->secs / r->o->iters);
	fflush(stdout);
}

static int
write_output(struct cc_run *r, const struct cc_plan *p)
{
	char err[COLLX_ERRLEN];

	if (r->out == NULL) {
		summary(r, p);
		return 0;
	}
	if (r->o->stream) {
		if (tensor_npy_write_stream(r->sout, &p->out.items[0], err,
		    sizeof err) < 0)
			return collcli_fail(r, CLI_EXIT_RUNTIME, "rank %d: %s: %s",
			    r->rank, r->out, err);
		return 0;
	}
	if (tensor_format_for(r->out, p->out.format) == TENSOR_NPY &&
	    p->out.count != 1)
		return collcli_fail(r, CLI_EXIT_DATA, "rank %d: %s: a .npy file holds "
		    "one tensor, the result has %zu (write .safetensors)",
		    r->rank, r->out, p->out.count);
	if (tensor_save(r->out, &p->out, err, sizeof err) < 0)
		return collcli_fail(r, CLI_EXIT_RUNTIME, "rank %d: %s", r->rank, err);
	return 0;
}

/* One item: agree, plan, run, check, write. Returns 1 when done, 0 when
 * every rank's input has ended, 2 when some rank's has not arrived yet
 * (--stream), -1 on a failure. in is NULL where there is no input. */
static int
run_item(struct cc_run *r, const struct tensor_set *in, int status, const char *why)
{
	struct cc_plan p;
	int go;

	memset(&p, 0, sizeof p);
	p.in = status == ST_ITEM ? in : NULL;
	if (r->o->kind == COLL_KIND_BROADCAST)
		go = collcli_agree_broadcast(r, &p, status, why);
	else
		go = collcli_agree(r, &p, status, why);
	if (go == 1) {
		if ((p.in && collcli_plan_outputs(r, &p) < 0) || collective(r, &p) < 0 ||
		    (r->o->check && check(r, &p) < 0) || write_output(r, &p) < 0)
			go = -1;
		else
			r->items++;
	}
	tensor_set_free(&p.out);
	free(p.rows);
	return go;
}

/* ---- setup and the two modes ---- */

static int
has_input(const struct cc_run *r)
{
	return r->o->kind != COLL_KIND_BROADCAST || r->rank == r->o->root;
}

/* pattern with {rank} and {world} replaced into *out (NULL stays NULL). */
static int
expand(struct cc_run *r, const char *pattern, char **out)
{
	*out = NULL;
	if (pattern != NULL &&
	    (*out = cli_expand(pattern, r->rank, r->world)) == NULL)
		return collcli_no_memory(r);
	return 0;
}

static int
setup(struct cc_run *r, struct collcli *o)
{
	char err[COLLX_ERRLEN];

	memset(r, 0, sizeof *r);
	r->o = o;
	r->rank = o->group.rank;
	r->world = o->group.world;
	/* A reader gone from -o is a write error to report, not a signal. */
	signal(SIGPIPE, SIG_IGN);
	if (expand(r, has_input(r) ? o->in : NULL, &r->in) < 0 ||
	    expand(r, o->out, &r->out) < 0 ||
	    expand(r, o->timing, &r->timing_path) < 0)
		return -1;
	if (cli_timing_open(&r->timing, r->timing_path, NULL, err,
	    sizeof err) < 0)
		return collcli_fail(r, CLI_EXIT_RUNTIME, "%s", err);
	return 0;
}

static int
open_comm(struct cc_run *r)
{
	struct collcli *o = r->o;
	struct prog_job job;

	prog_job_init(&job, cli_progname);
	prog_job_add(&job, "--op", "%s", coll_op_name(o->op));
	prog_job_add(&job, "--root", "%d", o->root);
	prog_job_add(&job, "--scatter-dim", "%d", o->sdim);
	prog_job_add(&job, "--gather-dim", "%d", o->gdim);
	prog_job_add(&job, "--algo", "%s", coll_algo_name(o->algo));
	prog_job_add(&job, "--iters", "%d", o->iters);
	prog_job_add(&job, "--warmup", "%d", o->warmup);
	prog_job_flag(&job, "--check", o->check);
	prog_job_flag(&job, "--stream", o->stream);
	prog_job_add(&job, "--bucket", "%zu", o->bucket);
	r->code = prog_join(&r->comm, &o->group, &job, r->err, sizeof r->err);
	return r->code ? -1 : 0;
}

static int
run_file(struct cc_run *r)
{
	struct tensor_set in;
	char err[COLLX_ERRLEN] = "";
	int status = ST_ITEM, rc;

	memset(&in, 0, sizeof in);
	if (r->in && tensor_load(r->in, &in, err, sizeof err) < 0)
		status = ST_BAD;
	/* bad counts go to the peers as a bad input, before any data moves */
	if (status == ST_ITEM && r->o->counts &&
	    collcli_counts_load(r, err, sizeof err) < 0)
		status = ST_BAD;
	rc = open_comm(r) < 0 ? -1 :
	    run_item(r, r->in ? &in : NULL, r->in ? status : ST_END, err);
	tensor_set_free(&in);
	return rc < 0 ? -1 : 0;
}

/* The --stream input, unbuffered so that poll() on it tells whether an
 * array has come. A FIFO is opened without waiting for its writer, so a
 * late writer does not keep this rank from its peers. */
static int
open_input(struct cc_run *r)
{
	int fd;

	r->sin = stdin;
	if (strcmp(r->in, "-") != 0) {
		fd = open(r->in, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
		if (fd < 0 || fcntl(fd, F_SETFL, 0) < 0 ||
		    (r->sin = fdopen(fd, "r")) == NULL) {
			if (fd >= 0)
				close(fd);
			return collcli_fail(r, CLI_EXIT_DATA, "rank %d: %s: %s", r->rank,
			    r->in, strerror(errno));
		}
	}
	setvbuf(r->sin, NULL, _IONBF, 0);
	return 0;
}

static int
open_output(struct cc_run *r)
{
	if (strcmp(r->out, "-") == 0)
		r->sout = stdout;
	else if ((r->sout = fopen(r->out, "w")) == NULL)
		return collcli_fail(r, CLI_EXIT_RUNTIME, "rank %d: %s: %s", r->rank,
		    r->out, strerror(errno));
	return 0;
}

/* Whether f has bytes (or its end) to read within secs. f is unbuffered,
 * so its descriptor tells. */
static int
input_ready(FILE *f, double secs)
{
	struct pollfd p = { .fd = fileno(f), .events = POLLIN };
	int rc;

	do
		rc = poll(&p, 1, (int)(secs * 1000));
	while (rc < 0 && errno == EINTR);
	return rc != 0;
}

/* Next array of the stream into in: ST_ITEM, ST_END, ST_BAD, or ST_WAIT
 * when nothing came within a third of the timeout, so that peers waiting
 * on this rank hear from it before they give up. */
static int
read_item(struct cc_run *r, struct tensor_set *in, char *err, size_t errlen)
{
	struct tensor t;
	int rc;

	memset(in, 0, sizeof *in);
	if (r->sin == NULL)
		return ST_END;
	if (!input_ready(r->sin, r->o->group.timeout / 3))
		return ST_WAIT;
	rc = tensor_npy_read_stream(r->sin, &t, err, errlen);
	if (rc == 0)
		return ST_END;
	if (rc < 0)
		return ST_BAD;
	if (tensor_set_add(in, NULL, &t, err, errlen) < 0) {
		tensor_free(&t);
		return ST_BAD;
	}
	return ST_ITEM;
}

static int
run_stream(struct cc_run *r)
{
	struct tensor_set in;
	char err[COLLX_ERRLEN];
	int status, go;

	if (open_comm(r) < 0 || (r->in && open_input(r) < 0) ||
	    (r->out && open_output(r) < 0))
		return -1;
	memset(&in, 0, sizeof in);
	status = ST_WAIT;
	do {
		if (status == ST_WAIT) {
			err[0] = '\0';
			status = read_item(r, &in, err, sizeof err);
			if (status == ST_BAD)
				snprintf(err + strlen(err), sizeof err - strlen(err),
				    " (item %ld of %s)", r->items + 1, r->in);
		}
		/* 2: a peer is still waiting; keep what we have and ask again. */
		if ((go = run_item(r, &in, status, err)) != 2) {
			tensor_set_free(&in);
			status = ST_WAIT;
		}
	} while (go > 0);
	return go < 0 ? -1 : 0;
}

/* Closes the stream files; a failed close of -o is a write error. */
static int
close_stream(struct cc_run *r, int rc)
{
	if (r->sin && r->sin != stdin)
		fclose(r->sin);
	if (r->sout && r->sout != stdout && fclose(r->sout) != 0 && rc == 0)
		rc = collcli_fail(r, CLI_EXIT_RUNTIME, "rank %d: %s: %s", r->rank,
		    r->out, strerror(errno));
	return rc;
}

int
collcli_run(struct collcli *o, char *err, size_t errlen)
{
	struct cc_run r;
	char why[COLLX_ERRLEN];
	int rc;

	if ((rc = setup(&r, o)) == 0)
		rc = o->stream ? close_stream(&r, run_stream(&r)) : run_file(&r);
	if (cli_timing_close(r.timing, why, sizeof why) < 0 && rc == 0)
		rc = collcli_fail(&r, CLI_EXIT_RUNTIME, "%s", why);
	if (rc == 0)
		check_passed(&r);
	if (rc < 0)
		snprintf(err, errlen, "%s", r.err);
	comm_close(r.comm);
	free(r.counts);
	free(r.in);
	free(r.out);
	free(r.timing_path);
	return rc < 0 ? r.code : CLI_EXIT_OK;
}

