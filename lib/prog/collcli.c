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
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "prog/collcli.h"
#include "prog/collref.h"
#include "prog/join.h"
#include "tensor/tensor.h"

#define ERRLEN 1024

/* A rank's status for the next item; ST_WAIT: its next --stream array
 * has not arrived yet (the others keep theirs and ask again). */
enum { ST_END = 0, ST_ITEM = 1, ST_BAD = 2, ST_WAIT = 3 };

const char collcli_help[] =
"  -i, --input IN        input tensors: .npy, .safetensors, - or a URL\n"
"  -o, --output OUT      write the result (.npy, .safetensors; - for stdout)\n"
"  --iters N             timed repetitions (default 1)\n"
"  --warmup W            untimed repetitions before them (default 0)\n"
"  --timing F            append one CSV row per timed repetition to F\n"
"  --check               verify the result against a one-process reference\n"
"  --stream              read .npy arrays from IN until its end, write each\n"
"                        result to OUT as soon as it is ready\n"
"  --bucket SIZE         fuse tensors of one dtype into collectives of up to\n"
"                        SIZE bytes (K, M, G suffixes; default 4M; 0: none)\n"
"  -v, --verbose         report the algorithm used and the check\n"
"  -q, --quiet           report nothing but errors\n"
"  -h, --help            print this help and exit\n"
"  -V, --version         print the version and exit\n";

struct cc_run {
	struct collcli *o;
	struct comm *comm;
	int rank, world;
	char *in, *out, *timing_path;	/* {rank} and {world} replaced */
	struct cli_timing *timing;
	FILE *sin, *sout;		/* --stream */
	long items;
	int iter;
};

/* What one item becomes: the input (NULL on a broadcast non-root), the
 * output tensors in the same (name) order, allgather's rows per rank. */
struct cc_plan {
	const struct tensor_set *in;
	struct tensor_set out;
	int64_t *rows;			/* rows[q * out.count + t] */
};

struct cc_bucket {
	enum dtype dt;
	size_t n, *idx;			/* its tensors, in plan order */
	size_t scount;			/* elements per send block */
	size_t *rcounts;		/* elements per receive block */
	size_t bytes;			/* the collective's size, nccl-tests style */
	char *send, *recv;		/* the same buffer for in-place kinds */
	int own_send, own_recv;
	enum coll_algo algo;
};

const char *
collcli_kind_name(enum coll_kind kind)
{
	switch (kind) {
	case COLL_KIND_ALLREDUCE: return "allreduce";
	case COLL_KIND_BROADCAST: return "broadcast";
	case COLL_KIND_ALLGATHER: return "allgather";
	case COLL_KIND_REDUCE_SCATTER: return "reduce-scatter";
	case COLL_KIND_ALLTOALL: return "alltoall";
	default: return "collective";
	}
}

/* ---- options ---- */

void
collcli_init(struct collcli *o, enum coll_kind kind)
{
	memset(o, 0, sizeof *o);
	o->kind = kind;
	o->algo = COLL_AUTO;
	o->op = COLL_SUM;
	o->iters = 1;
	o->bucket = COLLCLI_BUCKET_DEFAULT;
	cli_group_defaults(&o->group);
}

static void
parse_algo(struct collcli *o, const char *arg)
{
	char list[256] = "";
	int a;

	if (coll_algo_parse(arg, &o->algo) == 0 && coll_algo_valid(o->kind, o->algo))
		return;
	for (a = 0; a < COLL_ALGO_COUNT; a++)
		if (coll_algo_valid(o->kind, (enum coll_algo)a))
			snprintf(list + strlen(list), sizeof list - strlen(list),
			    "%s%s", *list ? ", " : "", coll_algo_name((enum coll_algo)a));
	cli_usage_error("--algo: '%s' is not an algorithm of %s (%s)", arg,
	    collcli_kind_name(o->kind), list);
}

static int
parse_int(const char *opt, const char *arg, long min, long max)
{
	return (int)cli_parse_long(opt, arg, min, max);
}

void
collcli_option(struct collcli *o, int opt, const char *arg, void (*usage)(void))
{
	if (cli_group_option(&o->group, opt, arg))
		return;
	switch (opt) {
	case 'h': usage(); break;
	case 'V': cli_version();
	case 'v': cli_verbose++; break;
	case 'q': cli_quiet = 1; break;
	case 'i': o->in = arg; break;
	case 'o': o->out = arg; break;
	case CLI_OPT_TIMING: o->timing = arg; break;
	case COLLCLI_OPT_ALGO: parse_algo(o, arg); break;
	case COLLCLI_OPT_ITERS: o->iters = parse_int("iters", arg, 1, 1 << 30); break;
	case COLLCLI_OPT_WARMUP: o->warmup = parse_int("warmup", arg, 0, 1 << 30); break;
	case COLLCLI_OPT_CHECK: o->check = 1; break;
	case COLLCLI_OPT_STREAM: o->stream = 1; break;
	case COLLCLI_OPT_BUCKET: o->bucket = cli_parse_size("bucket", arg); break;
	case COLLCLI_OPT_OP:
		if (coll_op_parse(arg, &o->op) < 0)
			cli_usage_error("--op: unknown operation '%s' "
			    "(sum, prod, min, max, avg)", arg);
		break;
	case COLLCLI_OPT_ROOT: o->root = parse_int("root", arg, 0, 1 << 20); break;
	case COLLCLI_OPT_SDIM:
		o->sdim = parse_int("scatter-dim", arg, -TENSOR_MAX_DIM, TENSOR_MAX_DIM - 1);
		break;
	case COLLCLI_OPT_GDIM:
		o->gdim = parse_int("gather-dim", arg, -TENSOR_MAX_DIM, TENSOR_MAX_DIM - 1);
		break;
	default:
		fprintf(stderr, "Try '%s --help'.\n", cli_progname);
		exit(CLI_EXIT_USAGE);
	}
}

/* ---- failures ---- */

static _Noreturn void
comm_die(struct cc_run *r)
{
	cli_die(comm_errkind(r->comm) == COMM_ERR_MISMATCH ? CLI_EXIT_DATA :
	    CLI_EXIT_RUNTIME, "%s", comm_error(r->comm));
}

static const char *
tname(const struct tensor *t)
{
	return t->name ? t->name : "input";
}

/* ---- the kinds' shapes: blocks, slices, sizes ---- */

static int
inplace(const struct cc_run *r)
{
	return r->o->kind == COLL_KIND_ALLREDUCE || r->o->kind == COLL_KIND_BROADCAST;
}

static int
send_blocks(const struct cc_run *r)
{
	return r->o->kind == COLL_KIND_REDUCE_SCATTER ||
	    r->o->kind == COLL_KIND_ALLTOALL ? r->world : 1;
}

static int
recv_blocks(const struct cc_run *r)
{
	return r->o->kind == COLL_KIND_ALLGATHER ||
	    r->o->kind == COLL_KIND_ALLTOALL ? r->world : 1;
}

static int
norm_dim(int d, int ndim)
{
	return d < 0 ? d + ndim : d;
}

/* The dimension send (or receive) blocks are cut along, -1 for whole. */
static int
send_dim(const struct cc_run *r, const struct tensor *t)
{
	if (r->o->kind == COLL_KIND_REDUCE_SCATTER)
		return 0;
	return r->o->kind == COLL_KIND_ALLTOALL ? norm_dim(r->o->sdim, t->ndim) : -1;
}

static int
recv_dim(const struct cc_run *r, const struct tensor *t)
{
	if (r->o->kind == COLL_KIND_ALLGATHER)
		return 0;
	return r->o->kind == COLL_KIND_ALLTOALL ? norm_dim(r->o->gdim, t->ndim) : -1;
}

/* Elements in all dimensions but d. */
static size_t
slab(const struct tensor *t, int d)
{
	size_t n = 1;
	int i;

	for (i = 0; i < t->ndim; i++)
		if (i != d)
			n *= (size_t)t->shape[i];
	return n;
}

struct cc_slice {
	int dim;			/* -1: the whole tensor */
	int64_t start, len;
	size_t count;			/* elements */
};

/* Send block b of plan tensor i (input side, or output shape where this
 * rank has no input: broadcast non-roots). */
static struct cc_slice
send_slice(const struct cc_run *r, const struct cc_plan *p, size_t i, int b)
{
	const struct tensor *t = p->in ? &p->in->items[i] : &p->out.items[i];
	struct cc_slice s = { send_dim(r, t), 0, 0, 0 };

	if (s.dim < 0) {
		s.count = (size_t)tensor_numel(t);
		return s;
	}
	s.len = t->shape[s.dim] / r->world;
	s.start = b * s.len;
	s.count = slab(t, s.dim) * (size_t)s.len;
	return s;
}

/* Receive block j of plan tensor i, in the output tensor. */
static struct cc_slice
recv_slice(const struct cc_run *r, const struct cc_plan *p, size_t i, int j)
{
	const struct tensor *t = &p->out.items[i];
	struct cc_slice s = { recv_dim(r, t), 0, 0, 0 };
	size_t n = p->out.count;
	int q;

	if (s.dim < 0) {
		s.count = (size_t)tensor_numel(t);
		return s;
	}
	if (r->o->kind == COLL_KIND_ALLGATHER) {
		for (q = 0; q < j; q++)
			s.start += p->rows[(size_t)q * n + i];
		s.len = p->rows[(size_t)j * n + i];
	} else {
		s.len = t->shape[s.dim] / r->world;
		s.start = j * s.len;
	}
	s.count = slab(t, s.dim) * (size_t)s.len;
	return s;
}

/* Copy between slice s of t and the contiguous block blk. */
static void
slice_copy(const struct tensor *t, const struct cc_slice *s, char *blk, int to_blk)
{
	size_t esz = dtype_size(t->dtype), inner = esz, outer = 1, o, n;
	char *base = t->data, *a;
	int i;

	if (s->count == 0)
		return;
	if (s->dim < 0) {
		n = s->count * esz;
		memcpy(to_blk ? blk : base, to_blk ? base : blk, n);
		return;
	}
	for (i = 0; i < s->dim; i++)
		outer *= (size_t)t->shape[i];
	for (i = s->dim + 1; i < t->ndim; i++)
		inner *= (size_t)t->shape[i];
	n = (size_t)s->len * inner;
	for (o = 0; o < outer; o++, blk += n) {
		a = base + (o * (size_t)t->shape[s->dim] + (size_t)s->start) * inner;
		memcpy(to_blk ? blk : a, to_blk ? a : blk, n);
	}
}

/* ---- agreement ---- */

static void
shape_text(FILE *f, const struct tensor *t, int skip_rows)
{
	int i;

	fputc('[', f);
	for (i = 0; i < t->ndim; i++) {
		if (i == 0 && skip_rows)
			fprintf(f, "*");
		else
			fprintf(f, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
	}
	fputc(']', f);
}

/* One line per tensor, "name dtype [shape]" (allgather: rows as "*"). */
static char *
describe(const struct cc_run *r, const struct tensor_set *s, size_t *len)
{
	char *buf = NULL;
	size_t i;
	FILE *f = open_memstream(&buf, len);

	if (f == NULL)
		cli_die(CLI_EXIT_RUNTIME, "out of memory");
	for (i = 0; s && i < s->count; i++) {
		fprintf(f, "%s %s ", s->items[i].name ? s->items[i].name :
		    "(unnamed)", dtype_name(s->items[i].dtype));
		shape_text(f, &s->items[i], r->o->kind == COLL_KIND_ALLGATHER &&
		    s->items[i].ndim > 0);
		fputc('\n', f);
	}
	if (fclose(f) != 0 || buf == NULL)
		cli_die(CLI_EXIT_RUNTIME, "out of memory");
	return buf;
}

/* Line k of text (without its newline) into buf, or "nothing". */
static void
line_of(const char *text, size_t len, size_t k, char *buf, size_t blen)
{
	const char *p = text, *end = text + len, *nl;

	for (; k > 0 && p < end; k--)
		p = (nl = memchr(p, '\n', (size_t)(end - p))) ? nl + 1 : end;
	if (p >= end) {
		snprintf(buf, blen, "nothing");
		return;
	}
	nl = memchr(p, '\n', (size_t)(end - p));
	snprintf(buf, blen, "%.*s", (int)((nl ? nl : end) - p), p);
}

/* Ranks 0 and q hold different tensors: exchange descriptions, say which
 * in msg. */
static void
explain_mismatch(struct cc_run *r, const char *mine, const uint64_t *rec, int q,
    char *msg, size_t msglen)
{
	size_t *counts = cli_calloc((size_t)r->world, sizeof *counts), total = 0, at = 0, k;
	char *all, a[256], b[256];
	int i;

	for (i = 0; i < r->world; i++) {
		counts[i] = (size_t)rec[4 * i + 3];
		at += i < q ? counts[i] : 0;
		total += counts[i];
	}
	all = cli_calloc(total, 1);
	if (coll_allgatherv(r->comm, mine, all, counts, DT_U8, COLL_AUTO) < 0)
		comm_die(r);
	for (k = 0;; k++) {
		line_of(all, counts[0], k, a, sizeof a);
		line_of(all + at, counts[q], k, b, sizeof b);
		if (strcmp(a, b) != 0 || strcmp(a, "nothing") == 0)
			break;
	}
	snprintf(msg, msglen, "rank %d: inputs differ between ranks: rank 0 has "
	    "%s, rank %d has %s", r->rank, a, q, b);
	free(counts);
	free(all);
}

/* Whether the statuses agree: 1 on an item everywhere, 0 when every input
 * has ended, 2 when some rank is still waiting for its input, -1 (why in
 * msg) when they disagree. */
static int
judge_status(const struct cc_run *r, const uint64_t *rec, int stride,
    const char *why, char *msg, size_t msglen)
{
	int q, ends = 0;

	for (q = 0; q < r->world; q++)
		if (rec[stride * q] == ST_BAD) {
			if (q == r->rank)
				snprintf(msg, msglen, "rank %d: %s", r->rank, why);
			else
				snprintf(msg, msglen, "rank %d: rank %d could not "
				    "read its input", r->rank, q);
			return -1;
		}
	for (q = 0; q < r->world; q++)
		if (rec[stride * q] == ST_WAIT)
			return 2;
	for (q = 0; q < r->world; q++)
		ends += rec[stride * q] == ST_END;
	if (ends == 0 || ends == r->world)
		return ends == 0;
	for (q = 0; q < r->world && rec[stride * q] != ST_END; q++)
		;
	snprintf(msg, msglen, "rank %d: the input of rank %d ended after %ld "
	    "item%s, other ranks have more", r->rank, q, r->items,
	    r->items == 1 ? "" : "s");
	return -1;
}

/* Allgather: every rank's rows of every tensor. */
static void
exchange_rows(struct cc_run *r, struct cc_plan *p)
{
	size_t n = p->in->count, i;
	int64_t *mine;

	for (i = 0; i < n; i++)
		if (p->in->items[i].ndim < 1)
			cli_die(CLI_EXIT_DATA, "rank %d: %s: allgather needs at least "
			    "one dimension", r->rank, tname(&p->in->items[i]));
	mine = cli_calloc(n, sizeof *mine);
	for (i = 0; i < n; i++)
		mine[i] = p->in->items[i].shape[0];
	p->rows = cli_calloc(n * (size_t)r->world, sizeof *p->rows);
	if (n > 0 && coll_allgather(r->comm, mine, p->rows, n, DT_I64, COLL_AUTO) < 0)
		comm_die(r);
	free(mine);
}

/* Every rank's status and description hash; returns judge_status's 1, 0
 * or 2. Dies (exit 3 everywhere) when ranks disagree. */
static int
agree(struct cc_run *r, struct cc_plan *p, int status, const char *why)
{
	size_t len;
	char *text = describe(r, status == ST_ITEM ? p->in : NULL, &len);
	uint64_t mine[4] = { (uint64_t)status, cli_fnv1a(CLI_FNV1A_INIT, text, len),
	    status == ST_ITEM ? p->in->count : 0, len };
	uint64_t *rec = cli_calloc(4 * (size_t)r->world, sizeof *rec);
	char msg[ERRLEN] = "";
	int q, go;

	comm_set_step(r->comm, "agreement on the inputs");
	if (coll_allgather(r->comm, mine, rec, 4, DT_I64, COLL_AUTO) < 0)
		comm_die(r);
	go = judge_status(r, rec, 4, why, msg, sizeof msg);
	for (q = 1; go == 1 && q < r->world && msg[0] == '\0'; q++)
		if (rec[4 * q + 1] != rec[1] || rec[4 * q + 2] != rec[2])
			explain_mismatch(r, text, rec, q, msg, sizeof msg);
	free(text);
	free(rec);
	if (msg[0])
		cli_die(CLI_EXIT_DATA, "%s", msg);
	if (go == 1 && r->o->kind == COLL_KIND_ALLGATHER)
		exchange_rows(r, p);
	return go;
}

/* ---- broadcast's header: the root's names, dtypes, shapes, metadata ---- */

static void
put_u64(FILE *f, uint64_t v)
{
	fwrite(&v, sizeof v, 1, f);
}

static void
put_str(FILE *f, const char *s)
{
	put_u64(f, s ? strlen(s) : UINT64_MAX);
	if (s)
		fwrite(s, 1, strlen(s), f);
}

static char *
header_encode(const struct tensor_set *s, size_t *len)
{
	char *buf = NULL;
	size_t i;
	int d;
	FILE *f = open_memstream(&buf, len);

	if (f == NULL)
		cli_die(CLI_EXIT_RUNTIME, "out of memory");
	put_u64(f, s->format);
	put_u64(f, s->count);
	put_u64(f, s->nmeta);
	for (i = 0; i < s->count; i++) {
		put_str(f, s->items[i].name);
		put_u64(f, s->items[i].dtype);
		put_u64(f, (uint64_t)s->items[i].ndim);
		for (d = 0; d < s->items[i].ndim; d++)
			put_u64(f, (uint64_t)s->items[i].shape[d]);
	}
	for (i = 0; i < s->nmeta; i++) {
		put_str(f, s->meta[i].key);
		put_str(f, s->meta[i].value);
	}
	if (fclose(f) != 0 || buf == NULL)
		cli_die(CLI_EXIT_RUNTIME, "out of memory");
	return buf;
}

struct cursor {
	const char *p;
	size_t left;
	int bad;
};

static uint64_t
get_u64(struct cursor *c)
{
	uint64_t v = 0;

	if (c->left < sizeof v) {
		c->bad = 1;
		return 0;
	}
	memcpy(&v, c->p, sizeof v);
	c->p += sizeof v;
	c->left -= sizeof v;
	return v;
}

/* A malloc'd string, NULL for none (or on a bad header: c->bad). */
static char *
get_str(struct cursor *c)
{
	uint64_t n = get_u64(c);
	char *s;

	if (n == UINT64_MAX || c->bad)
		return NULL;
	if (n > c->left) {
		c->bad = 1;
		return NULL;
	}
	s = cli_calloc((size_t)n + 1, 1);
	memcpy(s, c->p, (size_t)n);
	c->p += n;
	c->left -= (size_t)n;
	return s;
}

static int
header_tensor(struct cursor *c, struct tensor_set *out, char *err, size_t errlen)
{
	int64_t shape[TENSOR_MAX_DIM];
	struct tensor t;
	char *name = get_str(c);
	uint64_t dt = get_u64(c), nd = get_u64(c), d;
	int rc = -1;

	for (d = 0; d < nd && d < TENSOR_MAX_DIM; d++)
		shape[d] = (int64_t)get_u64(c);
	if (c->bad || dt >= DT_COUNT || nd > TENSOR_MAX_DIM)
		snprintf(err, errlen, "malformed header");
	else if (tensor_init(&t, (enum dtype)dt, (int)nd, shape, err, errlen) == 0 &&
	    (rc = tensor_set_add(out, name, &t, err, errlen)) < 0)
		tensor_free(&t);
	free(name);
	return rc;
}

static int
header_decode(const char *buf, size_t len, struct tensor_set *out,
    char *err, size_t errlen)
{
	struct cursor c = { buf, len, 0 };
	uint64_t fmt = get_u64(&c), n = get_u64(&c), nmeta = get_u64(&c), i;
	char *k, *v;
	int rc = 0;

	out->format = fmt == TENSOR_SAFETENSORS ? TENSOR_SAFETENSORS : TENSOR_NPY;
	for (i = 0; i < n && !c.bad && rc == 0; i++)
		rc = header_tensor(&c, out, err, errlen);
	for (i = 0; i < nmeta && !c.bad && rc == 0; i++) {
		k = get_str(&c);
		v = get_str(&c);
		if (k && v)
			rc = tensor_set_meta_put(out, k, v, err, errlen);
		free(k);
		free(v);
	}
	if (rc == 0 && c.bad) {
		snprintf(err, errlen, "malformed header");
		rc = -1;
	}
	return rc;
}

/* The root's status and description to all; non-roots build their
 * outputs from it. Returns 1, 0 at the end of the root's input, 2 while
 * the root waits for its input. */
static int
agree_broadcast(struct cc_run *r, struct cc_plan *p, int status, const char *why)
{
	int root = r->o->root, me = r->rank == root;
	size_t len = 0;
	char *buf = me && status == ST_ITEM ? header_encode(p->in, &len) : NULL;
	uint64_t rec[2] = { (uint64_t)status, len };
	char err[ERRLEN];

	comm_set_step(r->comm, "agreement on the inputs");
	if (coll_broadcast(r->comm, rec, 2, DT_I64, root, COLL_AUTO) < 0)
		comm_die(r);
	if (rec[0] == ST_BAD)
		cli_die(CLI_EXIT_DATA, "rank %d: %s", r->rank, me ? why :
		    "the root could not read its input");
	if (rec[0] == ST_END || rec[0] == ST_WAIT)
		return rec[0] == ST_END ? 0 : 2;
	if (rec[0] != ST_ITEM || rec[1] > ((uint64_t)1 << 40))
		cli_die(CLI_EXIT_DATA, "rank %d: malformed header from the root", r->rank);
	if (!me)
		buf = cli_calloc((size_t)rec[1], 1);
	if (coll_broadcast(r->comm, buf, (size_t)rec[1], DT_U8, root, COLL_AUTO) < 0)
		comm_die(r);
	if (!me && header_decode(buf, (size_t)rec[1], &p->out, err, sizeof err) < 0) {
		free(buf);
		cli_die(CLI_EXIT_DATA, "rank %d: header from the root: %s", r->rank, err);
	}
	free(buf);
	return 1;
}

/* ---- the plan: output tensors ---- */

static void
out_shape(const struct cc_run *r, const struct cc_plan *p, size_t i, int64_t *sh)
{
	const struct tensor *t = &p->in->items[i];
	int w = r->world, q, sd, gd;

	memcpy(sh, t->shape, sizeof t->shape);
	if (r->o->kind == COLL_KIND_ALLGATHER) {
		for (sh[0] = 0, q = 0; q < w; q++)
			sh[0] += p->rows[(size_t)q * p->in->count + i];
	} else if (r->o->kind == COLL_KIND_REDUCE_SCATTER) {
		if (t->ndim < 1 || t->shape[0] % w)
			cli_die(CLI_EXIT_DATA, "rank %d: %s: %lld rows are not "
			    "divisible by the world size %d", r->rank, tname(t),
			    t->ndim ? (long long)t->shape[0] : 0LL, w);
		sh[0] /= w;
	} else if (r->o->kind == COLL_KIND_ALLTOALL) {
		sd = send_dim(r, t), gd = recv_dim(r, t);
		if (sd < 0 || sd >= t->ndim || gd < 0 || gd >= t->ndim)
			cli_die(CLI_EXIT_DATA, "rank %d: %s has %d dimensions: "
			    "--scatter-dim %d or --gather-dim %d is out of range",
			    r->rank, tname(t), t->ndim, r->o->sdim, r->o->gdim);
		if (t->shape[sd] % w)
			cli_die(CLI_EXIT_DATA, "rank %d: %s: size %lld of dimension "
			    "%d is not divisible by the world size %d", r->rank,
			    tname(t), (long long)t->shape[sd], sd, w);
		sh[sd] /= w;
		sh[gd] *= w;
	}
}

static void
plan_outputs(struct cc_run *r, struct cc_plan *p)
{
	int64_t sh[TENSOR_MAX_DIM];
	struct tensor t;
	char err[ERRLEN];
	size_t i;

	p->out.format = p->in->format;
	for (i = 0; i < p->in->count; i++) {
		out_shape(r, p, i, sh);
		if (tensor_init(&t, p->in->items[i].dtype, p->in->items[i].ndim, sh,
		    err, sizeof err) < 0 ||
		    tensor_set_add(&p->out, p->in->items[i].name, &t, err, sizeof err) < 0)
			cli_die(CLI_EXIT_RUNTIME, "rank %d: %s", r->rank, err);
	}
	for (i = 0; i < p->in->nmeta; i++)
		if (tensor_set_meta_put(&p->out, p->in->meta[i].key,
		    p->in->meta[i].value, err, sizeof err) < 0)
			cli_die(CLI_EXIT_RUNTIME, "rank %d: %s", r->rank, err);
}

/* ---- buckets ---- */

/* The collective's size for tensor i: allgather the gathered whole,
 * reduce-scatter the whole input, the rest the tensor (nccl-tests). */
static size_t
tensor_bytes(const struct cc_run *r, const struct cc_plan *p, size_t i)
{
	size_t b = tensor_nbytes(&p->out.items[i]);

	return r->o->kind == COLL_KIND_REDUCE_SCATTER ? b * (size_t)r->world : b;
}

/* Tensors of one dtype, in name order, fused up to the bucket size; a
 * tensor larger than it goes alone. Empty tensors need no collective. */
static struct cc_bucket *
plan_buckets(const struct cc_run *r, const struct cc_plan *p, size_t *nb)
{
	size_t n = p->out.count, i, bytes, k;
	struct cc_bucket *b = cli_calloc(n, sizeof *b);
	long open[DT_COUNT];
	enum dtype dt;

	for (i = 0; i < DT_COUNT; i++)
		open[i] = -1;
	*nb = 0;
	for (i = 0; i < n; i++) {
		if ((bytes = tensor_bytes(r, p, i)) == 0)
			continue;
		dt = p->out.items[i].dtype;
		if (open[dt] < 0 || b[open[dt]].bytes + bytes > r->o->bucket) {
			k = (*nb)++;
			b[k].dt = dt;
			open[dt] = (long)k;
		}
		k = (size_t)open[dt];
		if ((b[k].n & (b[k].n - 1)) == 0 && (b[k].idx = realloc(b[k].idx,
		    (b[k].n ? 2 * b[k].n : 1) * sizeof *b[k].idx)) == NULL)
			cli_die(CLI_EXIT_RUNTIME, "out of memory");
		b[k].idx[b[k].n++] = i;
		b[k].bytes += bytes;
		if (bytes > r->o->bucket)
			open[dt] = -1;
	}
	return b;
}

/* Block after block, each tensor's part of it: input into b->send. */
static void
bucket_pack(const struct cc_run *r, const struct cc_plan *p, struct cc_bucket *b)
{
	size_t esz = dtype_size(b->dt), i;
	char *at = b->send;
	struct cc_slice s;
	int blk;

	for (blk = 0; blk < send_blocks(r); blk++)
		for (i = 0; i < b->n; i++) {
			s = send_slice(r, p, b->idx[i], blk);
			slice_copy(&p->in->items[b->idx[i]], &s, at, 1);
			at += s.count * esz;
		}
}

static void
bucket_unpack(const struct cc_run *r, const struct cc_plan *p, struct cc_bucket *b)
{
	size_t esz = dtype_size(b->dt), i;
	char *at = b->recv;
	struct cc_slice s;
	int blk;

	for (blk = 0; blk < recv_blocks(r); blk++)
		for (i = 0; i < b->n; i++) {
			s = recv_slice(r, p, b->idx[i], blk);
			slice_copy(&p->out.items[b->idx[i]], &s, at, 0);
			at += s.count * esz;
		}
}

/* Counts, algorithm and buffers; a lone tensor cut along dimension 0 (or
 * not at all) is its own buffer, no copy needed. */
static void
bucket_setup(const struct cc_run *r, const struct cc_plan *p, struct cc_bucket *b)
{
	size_t esz = dtype_size(b->dt), rtotal = 0, i;
	struct tensor *in = p->in ? &p->in->items[b->idx[0]] : NULL;
	struct tensor *out = &p->out.items[b->idx[0]];
	int j, lone = b->n == 1;

	b->rcounts = cli_calloc((size_t)r->world, sizeof *b->rcounts);
	for (i = 0; i < b->n; i++) {
		b->scount += send_slice(r, p, b->idx[i], 0).count;
		for (j = 0; j < recv_blocks(r); j++)
			b->rcounts[j] += recv_slice(r, p, b->idx[i], j).count;
	}
	for (j = 0; j < recv_blocks(r); j++)
		rtotal += b->rcounts[j];
	b->algo = r->o->algo != COLL_AUTO ? r->o->algo :
	    coll_auto(r->o->kind, b->bytes, r->world);
	b->own_recv = !lone || recv_dim(r, out) > 0;
	b->recv = b->own_recv ? cli_calloc(rtotal, esz) : out->data;
	if (inplace(r)) {
		b->send = b->recv;
		return;
	}
	b->own_send = !lone || send_dim(r, in) > 0;
	b->send = b->own_send ? cli_calloc(b->scount * (size_t)send_blocks(r), esz) :
	    in->data;
	if (b->own_send)
		bucket_pack(r, p, b);
}

static int
bucket_run(const struct cc_run *r, struct cc_bucket *b)
{
	struct comm *c = r->comm;

	switch (r->o->kind) {
	case COLL_KIND_ALLREDUCE:
		return coll_allreduce(c, b->send, b->scount, b->dt, r->o->op, b->algo);
	case COLL_KIND_BROADCAST:
		return coll_broadcast(c, b->send, b->scount, b->dt, r->o->root, b->algo);
	case COLL_KIND_ALLGATHER:
		return coll_allgatherv(c, b->send, b->recv, b->rcounts, b->dt, b->algo);
	case COLL_KIND_REDUCE_SCATTER:
		return coll_reduce_scatter(c, b->send, b->recv, b->rcounts[0], b->dt,
		    r->o->op, b->algo);
	default:
		return coll_alltoall(c, b->send, b->recv, b->scount, b->dt, b->algo);
	}
}

static void
bucket_free(struct cc_bucket *b)
{
	free(b->idx);
	free(b->rcounts);
	if (b->own_send && b->send != b->recv)
		free(b->send);
	if (b->own_recv)
		free(b->recv);
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

static void
timing_row(struct cc_run *r, const struct cc_bucket *b, size_t nb, double secs)
{
	struct cli_timing_row row;
	char algo[128];
	size_t i;

	memset(&row, 0, sizeof row);
	describe_buckets(b, nb, algo, sizeof algo, &row.dtype);
	for (i = 0; i < nb; i++) {
		row.bytes += b[i].bytes;
		row.count += b[i].bytes / dtype_size(b[i].dt);
	}
	row.program = cli_progname;
	row.op = collcli_kind_name(r->o->kind);
	row.algo = algo;
	row.rank = r->rank;
	row.world = r->world;
	row.iter = r->iter++;
	row.seconds = secs;
	cli_timing_write(r->timing, &row);
}

static void
run_buckets(struct cc_run *r, const struct cc_plan *p, struct cc_bucket *b,
    size_t nb)
{
	int k, total = r->o->warmup + r->o->iters;
	size_t i;
	double t0;

	for (k = 0; k < total; k++) {
		for (i = 0; inplace(r) && p->in && i < nb; i++)
			bucket_pack(r, p, &b[i]);
		/* Start timed runs together, as nccl-tests and the peers'
		 * benchmarks do, so a rank's time is the collective's own. */
		if (k >= r->o->warmup && coll_barrier(r->comm) < 0)
			comm_die(r);
		t0 = cli_now();
		for (i = 0; i < nb; i++)
			if (bucket_run(r, &b[i]) < 0)
				comm_die(r);
		if (k >= r->o->warmup && nb > 0)
			timing_row(r, b, nb, cli_now() - t0);
	}
	for (i = 0; i < nb; i++)
		if (b[i].own_recv)
			bucket_unpack(r, p, &b[i]);
}

static void
collective(struct cc_run *r, const struct cc_plan *p)
{
	struct cc_bucket *b;
	const char *dt;
	char algo[128];
	size_t nb, i;

	b = plan_buckets(r, p, &nb);
	for (i = 0; i < nb; i++)
		bucket_setup(r, p, &b[i]);
	describe_buckets(b, nb, algo, sizeof algo, &dt);
	if (r->rank == 0 && r->items == 0)
		cli_debug("rank 0: %s of %zu tensor%s in %zu collective%s, "
		    "algorithm %s, world %d", collcli_kind_name(r->o->kind),
		    p->out.count, p->out.count == 1 ? "" : "s", nb,
		    nb == 1 ? "" : "s", nb ? algo : "none", r->world);
	run_buckets(r, p, b, nb);
	for (i = 0; i < nb; i++)
		bucket_free(&b[i]);
	free(b);
}

/* ---- check and output ---- */

static void
check(struct cc_run *r, const struct cc_plan *p)
{
	struct collref_spec s = { r->o->kind, r->o->op, r->o->root, r->o->sdim,
	    r->o->gdim };
	char err[ERRLEN], first[ERRLEN] = "";
	double e, maxerr = 0;
	size_t i;
	int rc, bad;

	for (i = 0; i < p->out.count; i++) {
		rc = collref_check(r->comm, &s, p->in ? &p->in->items[i] : NULL,
		    &p->out.items[i], &e, err, sizeof err);
		if (rc < 0)
			comm_die(r);
		if (rc > 0 && first[0] == '\0')
			snprintf(first, sizeof first, "%s", err);
		maxerr = e > maxerr ? e : maxerr;
	}
	if ((bad = collref_verdict(r->comm, first[0] != '\0')) == -2)
		comm_die(r);
	if (first[0])
		cli_die(CLI_EXIT_CHECK, "rank %d: check failed: %s", r->rank, first);
	if (bad >= 0)
		cli_die(CLI_EXIT_CHECK, "rank %d: check failed on rank %d", r->rank, bad);
	cli_debug("rank %d: check ok (%zu tensor%s, max error %.3g)", r->rank,
	    p->out.count, p->out.count == 1 ? "" : "s", maxerr);
}

static void
write_output(struct cc_run *r, const struct cc_plan *p)
{
	char err[ERRLEN];

	if (r->out == NULL)
		return;
	if (r->o->stream) {
		if (tensor_npy_write_stream(r->sout, &p->out.items[0], err,
		    sizeof err) < 0)
			cli_die(CLI_EXIT_RUNTIME, "rank %d: %s: %s", r->rank, r->out, err);
		return;
	}
	if (tensor_format_for(r->out, p->out.format) == TENSOR_NPY &&
	    p->out.count != 1)
		cli_die(CLI_EXIT_DATA, "rank %d: %s: a .npy file holds one tensor, "
		    "the result has %zu (write .safetensors)", r->rank, r->out,
		    p->out.count);
	if (tensor_save(r->out, &p->out, err, sizeof err) < 0)
		cli_die(CLI_EXIT_RUNTIME, "rank %d: %s", r->rank, err);
}

/* One item: agree, plan, run, check, write. Returns 1 when done, 0 when
 * every rank's input has ended, 2 when some rank's has not arrived yet
 * (--stream). in is NULL where there is no input. */
static int
run_item(struct cc_run *r, const struct tensor_set *in, int status, const char *why)
{
	struct cc_plan p;
	int go;

	memset(&p, 0, sizeof p);
	p.in = status == ST_ITEM ? in : NULL;
	if (r->o->kind == COLL_KIND_BROADCAST)
		go = agree_broadcast(r, &p, status, why);
	else
		go = agree(r, &p, status, why);
	if (go == 1) {
		if (p.in)
			plan_outputs(r, &p);
		collective(r, &p);
		if (r->o->check)
			check(r, &p);
		write_output(r, &p);
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

static void
setup(struct cc_run *r, struct collcli *o)
{
	memset(r, 0, sizeof *r);
	r->o = o;
	cli_group_resolve(&o->group);
	r->rank = o->group.rank;
	r->world = o->group.world;
	if (o->kind == COLL_KIND_BROADCAST && o->root >= r->world)
		cli_usage_error("--root %d is not a rank of a world of %d", o->root,
		    r->world);
	if (o->in == NULL && has_input(r))
		cli_usage_error("an input is required (-i IN)");
	r->in = o->in && has_input(r) ? cli_subst(o->in, r->rank, r->world) : NULL;
	r->out = o->out ? cli_subst(o->out, r->rank, r->world) : NULL;
	r->timing_path = o->timing ? cli_subst(o->timing, r->rank, r->world) : NULL;
	/* A reader gone from -o is a write error to report, not a signal. */
	signal(SIGPIPE, SIG_IGN);
}

static void
open_comm(struct cc_run *r)
{
	struct collcli *o = r->o;
	char job[256], err[ERRLEN];
	int code;

	/* Ranks started with different options refuse each other at once. */
	snprintf(job, sizeof job, "%s op=%d root=%d dims=%d,%d algo=%d iters=%d "
	    "warmup=%d check=%d stream=%d bucket=%zu", cli_progname, (int)o->op,
	    o->root, o->sdim, o->gdim, (int)o->algo, o->iters, o->warmup,
	    o->check, o->stream, o->bucket);
	if ((code = prog_join(&r->comm, &o->group, job, err, sizeof err)) != 0)
		cli_die(code, "%s", err);
}

static void
run_file(struct cc_run *r)
{
	struct tensor_set in;
	char err[ERRLEN] = "";
	int status = ST_ITEM;

	memset(&in, 0, sizeof in);
	if (r->in && tensor_load(r->in, &in, err, sizeof err) < 0)
		status = ST_BAD;
	open_comm(r);
	run_item(r, r->in ? &in : NULL, r->in ? status : ST_END, err);
	tensor_set_free(&in);
}

/* The --stream input, unbuffered so that poll() on it tells whether an
 * array has come. A FIFO is opened without waiting for its writer, so a
 * late writer does not keep this rank from its peers. */
static FILE *
open_input(const char *path, int rank)
{
	FILE *f = stdin;
	int fd;

	if (strcmp(path, "-") != 0) {
		fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
		if (fd < 0 || fcntl(fd, F_SETFL, 0) < 0 || !(f = fdopen(fd, "r")))
			cli_die(CLI_EXIT_DATA, "rank %d: %s: %s", rank, path,
			    strerror(errno));
	}
	setvbuf(f, NULL, _IONBF, 0);
	return f;
}

static FILE *
open_output(const char *path, int rank)
{
	FILE *f;

	if (strcmp(path, "-") == 0)
		return stdout;
	if ((f = fopen(path, "w")) == NULL)
		cli_die(CLI_EXIT_RUNTIME, "rank %d: %s: %s", rank, path,
		    strerror(errno));
	return f;
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

static void
run_stream(struct cc_run *r)
{
	struct tensor_set in;
	char err[ERRLEN];
	int status, go;

	open_comm(r);
	if (r->in)
		r->sin = open_input(r->in, r->rank);
	if (r->out)
		r->sout = open_output(r->out, r->rank);
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
	} while (go != 0);
	if (r->sin && r->sin != stdin)
		fclose(r->sin);
	if (r->sout && r->sout != stdout && fclose(r->sout) != 0)
		cli_die(CLI_EXIT_RUNTIME, "rank %d: %s: %s", r->rank, r->out,
		    strerror(errno));
}

int
collcli_run(struct collcli *o)
{
	struct cc_run r;

	setup(&r, o);
	r.timing = cli_timing_open(r.timing_path, NULL);
	if (o->stream)
		run_stream(&r);
	else
		run_file(&r);
	cli_timing_close(r.timing);
	comm_close(r.comm);
	free(r.in);
	free(r.out);
	free(r.timing_path);
	cli_group_free(&o->group);
	cli_close_stdout();
	return CLI_EXIT_OK;
}

static const struct collcli_program *program;

static void
program_usage(void)
{
	printf(program->synopsis, cli_progname);
	fputs(program->options, stdout);
	fputs(collcli_help, stdout);
	fputs(cli_group_help, stdout);
	cli_close_stdout();
	exit(CLI_EXIT_OK);
}

int
collcli_main(const struct collcli_program *p, int argc, char **argv)
{
	struct collcli o;
	int ch;

	cli_init(argv[0]);
	program = p;
	collcli_init(&o, p->kind);
	while ((ch = getopt_long(argc, argv, COLLCLI_OPTSTRING, p->longopts,
	    NULL)) != -1)
		collcli_option(&o, ch, optarg, program_usage);
	if (optind < argc)
		cli_usage_error("unexpected argument '%s'", argv[optind]);
	return collcli_run(&o);
}
