/* collcli_agree: before each item, every rank learns what every other
 * holds (statuses, and a hash of names, dtypes and shapes; descriptions
 * only to explain a mismatch), so no rank waits on a collective another
 * will never call. Broadcast instead sends the root's description. */
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "prog/collcli_int.h"

/* ---- agreement ---- */

/* One line per tensor, "name dtype [shape]" (allgather and alltoallv:
 * rows as "*"), and alltoallv's counts; NULL when memory ran out. */
static char *
describe(const struct cc_run *r, const struct tensor_set *s, size_t *len)
{
	int64_t sh[TENSOR_MAX_DIM];
	char *buf = NULL, text[256];
	size_t i;
	FILE *f = open_memstream(&buf, len);

	if (f == NULL)
		return NULL;
	for (i = 0; s && i < s->count; i++) {
		const struct tensor *t = &s->items[i];

		memcpy(sh, t->shape, sizeof sh);
		if ((r->o->kind == COLL_KIND_ALLGATHER || r->counts) && t->ndim > 0)
			sh[0] = -1;
		fprintf(f, "%s %s %s\n", t->name ? t->name : "(unnamed)",
		    dtype_name(t->dtype), tensor_dims_str(sh, t->ndim, ", ", text,
		    sizeof text));
	}
	if (s && r->counts)
		fprintf(f, "send counts %016llx\n", (unsigned long long)r->counts_hash);
	if (fclose(f) != 0 || buf == NULL) {
		free(buf);
		return NULL;
	}
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
static int
explain_mismatch(struct cc_run *r, const char *mine, const uint64_t *rec, int q,
    char *msg, size_t msglen)
{
	size_t *counts = calloc((size_t)r->world, sizeof *counts), total = 0, at = 0, k;
	char *all = NULL, a[200], b[200];
	int i, rc = -1;

	if (counts == NULL)
		return collcli_no_memory(r);
	for (i = 0; i < r->world; i++) {
		counts[i] = (size_t)rec[4 * i + 3];
		at += i < q ? counts[i] : 0;
		total += counts[i];
	}
	if ((all = calloc(total ? total : 1, 1)) == NULL) {
		collcli_no_memory(r);
		goto out;
	}
	if (coll_allgatherv(r->comm, mine, all, counts, DT_U8, COLL_AUTO) < 0) {
		collcli_comm_failed(r);
		goto out;
	}
	for (k = 0;; k++) {
		line_of(all, counts[0], k, a, sizeof a);
		line_of(all + at, counts[q], k, b, sizeof b);
		if (strcmp(a, b) != 0 || strcmp(a, "nothing") == 0)
			break;
	}
	snprintf(msg, msglen, "rank %d: inputs differ between ranks: rank 0 has "
	    "%s, rank %d has %s", r->rank, a, q, b);
	rc = 0;
out:
	free(counts);
	free(all);
	return rc;
}

/* Whether the statuses agree: 1 on an item everywhere, 0 when every input
 * has ended, 2 when some rank is still waiting for its input, -1 (why in
 * msg) when they disagree. */
static int
judge_status(const struct cc_run *r, const uint64_t *rec, int stride,
    const char *why, char *msg, size_t msglen)
{
	int q, ends = 0;

	/* a rank's own reason first: a bad shared file (--send-counts) then
	 * names its numbers on every rank */
	for (q = rec[stride * r->rank] == ST_BAD ? r->rank : 0; q < r->world; q++)
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
static int
exchange_rows(struct cc_run *r, struct cc_plan *p)
{
	size_t n = p->in->count, i;
	int64_t *mine;
	int rc = 0;

	for (i = 0; i < n; i++)
		if (p->in->items[i].ndim < 1)
			return collcli_fail(r, CLI_EXIT_DATA, "rank %d: %s: %s "
			    "needs at least one dimension", r->rank,
			    collcli_tname(&p->in->items[i]),
			    collcli_kind_name(collcli_coll_kind(r->o)));
	mine = calloc(n ? n : 1, sizeof *mine);
	p->rows = calloc(n ? n * (size_t)r->world : 1, sizeof *p->rows);
	if (mine == NULL || p->rows == NULL) {
		free(mine);
		return collcli_no_memory(r);
	}
	for (i = 0; i < n; i++)
		mine[i] = p->in->items[i].shape[0];
	if (n > 0 && coll_allgather(r->comm, mine, p->rows, n, DT_I64, COLL_AUTO) < 0)
		rc = collcli_comm_failed(r);
	free(mine);
	return rc;
}

/* Every rank's status and description hash; returns judge_status's 1, 0
 * or 2, or -1 (exit 3 on every rank) when ranks disagree. */
int
collcli_agree(struct cc_run *r, struct cc_plan *p, int status, const char *why)
{
	size_t len = 0;
	char *text = describe(r, status == ST_ITEM ? p->in : NULL, &len);
	uint64_t mine[4] = { (uint64_t)status, text ? cli_fnv1a(CLI_FNV1A_INIT,
	    text, len) : 0, status == ST_ITEM ? p->in->count : 0, len };
	uint64_t *rec = calloc(4 * (size_t)r->world, sizeof *rec);
	char msg[COLLX_ERRLEN] = "";
	int q, go = -1;

	if (text == NULL || rec == NULL) {
		collcli_no_memory(r);
		goto out;
	}
	comm_set_step(r->comm, "agreement on the inputs");
	if (coll_allgather(r->comm, mine, rec, 4, DT_I64, COLL_AUTO) < 0) {
		collcli_comm_failed(r);
		goto out;
	}
	go = judge_status(r, rec, 4, why, msg, sizeof msg);
	for (q = 1; go == 1 && q < r->world && msg[0] == '\0'; q++)
		if ((rec[4 * q + 1] != rec[1] || rec[4 * q + 2] != rec[2]) &&
		    explain_mismatch(r, text, rec, q, msg, sizeof msg) < 0) {
			go = -1;
			goto out;
		}
	if (msg[0])
		go = collcli_fail(r, CLI_EXIT_DATA, "%s", msg);
	else if (go == 1 && (r->o->kind == COLL_KIND_ALLGATHER || r->counts) &&
	    (exchange_rows(r, p) < 0 || (r->counts &&
	    collcli_counts_check(r, p) < 0)))
		go = -1;
out:
	free(text);
	free(rec);
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
		return NULL;
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
	if (fclose(f) != 0 || buf == NULL) {
		free(buf);
		return NULL;
	}
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
	if ((s = malloc((size_t)n + 1)) == NULL) {
		c->bad = 1;
		return NULL;
	}
	memcpy(s, c->p, (size_t)n);
	s[n] = '\0';
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
 * the root waits for its input, -1 on a failure. */
int
collcli_agree_broadcast(struct cc_run *r, struct cc_plan *p, int status,
    const char *why)
{
	int root = r->o->root, me = r->rank == root, go = -1;
	size_t len = 0;
	char *buf = me && status == ST_ITEM ? header_encode(p->in, &len) : NULL;
	uint64_t rec[2] = { (uint64_t)status, len };
	char err[COLLX_ERRLEN];

	/* A root out of memory still tells the others, as a bad input. */
	if (me && status == ST_ITEM && buf == NULL) {
		rec[0] = ST_BAD;
		why = "out of memory";
	}
	comm_set_step(r->comm, "agreement on the inputs");
	if (coll_broadcast(r->comm, rec, 2, DT_I64, root, COLL_AUTO) < 0) {
		collcli_comm_failed(r);
		goto out;
	}
	if (rec[0] == ST_BAD) {
		collcli_fail(r, CLI_EXIT_DATA, "rank %d: %s", r->rank, me ? why :
		    "the root could not read its input");
		goto out;
	}
	if (rec[0] == ST_END || rec[0] == ST_WAIT) {
		go = rec[0] == ST_END ? 0 : 2;
		goto out;
	}
	if (rec[0] != ST_ITEM || rec[1] > ((uint64_t)1 << 40)) {
		collcli_fail(r, CLI_EXIT_DATA, "rank %d: malformed header from the root",
		    r->rank);
		goto out;
	}
	if (!me && (buf = malloc(rec[1] ? (size_t)rec[1] : 1)) == NULL) {
		collcli_no_memory(r);
		goto out;
	}
	if (coll_broadcast(r->comm, buf, (size_t)rec[1], DT_U8, root, COLL_AUTO) < 0)
		collcli_comm_failed(r);
	else if (!me && header_decode(buf, (size_t)rec[1], &p->out, err,
	    sizeof err) < 0)
		collcli_fail(r, CLI_EXIT_DATA, "rank %d: header from the root: %s",
		    r->rank, err);
	else
		go = 1;
out:
	free(buf);
	return go;
}

