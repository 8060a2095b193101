/*
 * coll: names, the AUTO cost model, and the machinery every collective
 * algorithm shares: the operation stamp, the pipelined segmented exchange
 * (coll_xchg), even block partitions, the fold of a world to a power of two,
 * and the ring / recursive-halving / recursive-doubling passes.
 */
#include <stdlib.h>
#include <string.h>

#include "cli/util.h"
#include "comm/coll_int.h"
#include "comm/comm_impl.h"

#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))

/*
 * Segments: by default a message is cut into about SEGMENTS_PER_MESSAGE
 * pieces of SEGMENT_MIN to SEGMENT_MAX bytes, enough to overlap the
 * reduction of one with the transfer of the next without paying a wakeup
 * per few kilobytes. coll_set_segment() fixes the size instead (tests use
 * tiny ones to exercise the pipeline on small vectors).
 */
#define SEGMENT_MIN ((size_t)64 << 10)
#define SEGMENT_MAX ((size_t)1 << 20)
#define SEGMENTS_PER_MESSAGE 4

static size_t segment_bytes;	/* 0: adaptive */

/* Reducing receives land in tmp, whole working blocks in scratch; both
 * kept between calls (one per thread), so large calls do not fault in
 * fresh pages every time. */
static _Thread_local char *tmp_cache, *scratch_cache;
static _Thread_local size_t tmp_cap, scratch_cap;

static const char *const op_names[] = { "sum", "prod", "min", "max", "avg" };

static const char *const algo_names[COLL_ALGO_COUNT] = {
	"auto", "naive", "ring", "tree", "rd", "rabenseifner", "linear",
	"binomial", "scatter-allgather", "bruck", "pairwise", "halving", "hier"
};

static const char *const kind_names[] = {
	"allreduce", "broadcast", "allgather", "reduce-scatter", "alltoall",
	"reduce", "gather", "scatter", "barrier", "alltoallv"
};

#define BIT(a) (1u << (a))
static const unsigned kind_algos[] = {
	[COLL_KIND_ALLREDUCE] = BIT(COLL_NAIVE) | BIT(COLL_RING) | BIT(COLL_TREE) |
	    BIT(COLL_RD) | BIT(COLL_RABENSEIFNER) | BIT(COLL_HIER),
	[COLL_KIND_BROADCAST] = BIT(COLL_LINEAR) | BIT(COLL_BINOMIAL) |
	    BIT(COLL_SCATTER_ALLGATHER) | BIT(COLL_RING) | BIT(COLL_HIER),
	[COLL_KIND_ALLGATHER] = BIT(COLL_RING) | BIT(COLL_RD) | BIT(COLL_BRUCK) |
	    BIT(COLL_HIER),
	[COLL_KIND_REDUCE_SCATTER] = BIT(COLL_RING) | BIT(COLL_PAIRWISE) |
	    BIT(COLL_HALVING) | BIT(COLL_HIER),
	[COLL_KIND_ALLTOALL] = BIT(COLL_PAIRWISE) | BIT(COLL_LINEAR),
	[COLL_KIND_REDUCE] = BIT(COLL_BINOMIAL),
	[COLL_KIND_GATHER] = BIT(COLL_LINEAR),
	[COLL_KIND_SCATTER] = BIT(COLL_LINEAR),
	[COLL_KIND_BARRIER] = 0,
	[COLL_KIND_ALLTOALLV] = BIT(COLL_PAIRWISE) | BIT(COLL_LINEAR) |
	    BIT(COLL_HIER),
};

int
coll_op_parse(const char *s, enum coll_op *out)
{
	int i = cli_name_index(op_names, COLL_AVG + 1, s);

	return i < 0 ? -1 : (*out = (enum coll_op)i, 0);
}

const char *
coll_op_name(enum coll_op op)
{
	return (unsigned)op <= COLL_AVG ? op_names[op] : "?";
}

const char *
coll_kind_name(enum coll_kind kind)
{
	return (unsigned)kind <= COLL_KIND_ALLTOALLV ? kind_names[kind] : "?";
}

int
coll_algo_parse(const char *s, enum coll_algo *out)
{
	int i = cli_name_index(algo_names, COLL_ALGO_COUNT, s);

	return i < 0 ? -1 : (*out = (enum coll_algo)i, 0);
}

const char *
coll_algo_name(enum coll_algo a)
{
	return (unsigned)a < COLL_ALGO_COUNT ? algo_names[a] : "?";
}

int
coll_algo_valid(enum coll_kind kind, enum coll_algo a)
{
	if ((unsigned)kind > COLL_KIND_ALLTOALLV || (unsigned)a >= COLL_ALGO_COUNT)
		return 0;
	return a == COLL_AUTO || (kind_algos[kind] & BIT(a)) != 0;
}

void
coll_set_segment(size_t bytes)
{
	bytes &= ~(size_t)7;	/* whole elements of every dtype */
	segment_bytes = bytes;
}

/* The segment size for a len-byte message: the same on both ends, since
 * both know len. A multiple of 8, so segments hold whole elements. */
size_t
coll_segment(size_t len)
{
	size_t s = len / SEGMENTS_PER_MESSAGE;

	if (segment_bytes)
		return segment_bytes;
	s = s < SEGMENT_MIN ? SEGMENT_MIN : s > SEGMENT_MAX ? SEGMENT_MAX : s;
	return s & ~(size_t)7;
}

static uint64_t
mix(uint64_t h, uint64_t v)
{
	h ^= v;
	h *= 0x9e3779b97f4a7c15ull;
	return h ^ (h >> 29);
}

uint64_t
coll_sig(enum coll_kind kind, size_t count, int op, int root,
    enum coll_algo algo, const size_t *counts, int ncounts)
{
	uint64_t h = mix(0x636f6c6c78ull, (uint64_t)kind);

	h = mix(h, count);
	h = mix(h, (uint64_t)(int64_t)op);
	h = mix(h, (uint64_t)(int64_t)root);
	h = mix(h, (uint64_t)algo);
	for (int i = 0; i < ncounts; i++)
		h = mix(h, counts[i]);
	return mix(h, segment_bytes);	/* segmenting must agree too */
}

int
coll_begin(struct coll_call *x, struct comm *c, enum coll_kind kind,
    enum dtype dt, enum coll_op op, enum coll_algo algo, uint64_t sig,
    size_t count, size_t blocks)
{
	memset(x, 0, sizeof *x);
	x->c = c;
	x->rank = comm_rank(c);
	x->world = comm_size(c);
	x->dt = dt;
	x->esz = dtype_size(dt);
	x->red = comm_reduce_kernel(dt, op);
	x->algo = coll_algo_name(algo);
	comm_op_begin(c, (int)kind, kind_names[kind], (int)dt, sig);
	comm_fr_algo(c, x->algo, (uint64_t)count * x->esz);
	if (c->net->debug >= COMM_DEBUG_TRACE)
		comm_debug(c, COMM_DEBUG_TRACE, "#%u %s of %zu bytes on %d "
		    "ranks: %s", c->seq, kind_names[kind], count * x->esz,
		    x->world, x->algo);
	if (x->esz == 0 || x->red == NULL) {
		comm_fail(c, COMM_ERR_MISMATCH, "%s: bad dtype or op", kind_names[kind]);
		return -1;
	}
	if (blocks && count > SIZE_MAX / x->esz / blocks) {
		comm_fail(c, COMM_ERR_MISMATCH, "%s: %zu elements of %s do not fit in memory",
		    kind_names[kind], count, dtype_name(dt));
		return -1;
	}
	if (!coll_algo_valid(kind, algo)) {
		comm_fail(c, COMM_ERR_MISMATCH, "%s has no algorithm '%s'",
		    kind_names[kind], coll_algo_name(algo));
		return -1;
	}
	return 0;
}

int
coll_end(struct coll_call *x, int rc)
{
	if (rc == 0)
		comm_op_end(x->c);
	return rc;
}

void *
coll_alloc(struct coll_call *x, size_t bytes)
{
	void *p = malloc(bytes ? bytes : 1);

	if (p == NULL)
		comm_fail(x->c, COMM_ERR_RUNTIME, "out of memory (%zu bytes)", bytes);
	return p;
}

static char *
grow(struct coll_call *x, char **cache, size_t *cap, size_t bytes)
{
	if (*cap < bytes) {
		char *p = realloc(*cache, bytes);
		if (p == NULL) {
			comm_fail(x->c, COMM_ERR_RUNTIME, "out of memory (%zu bytes)", bytes);
			return NULL;
		}
		*cache = p;
		*cap = bytes;
	}
	return *cache;
}

/* Two segments of seg bytes where reduced data lands. */
static char *
coll_tmp(struct coll_call *x, size_t seg)
{
	return grow(x, &tmp_cache, &tmp_cap, 2 * seg);
}

void *
coll_scratch(struct coll_call *x, size_t bytes)
{
	return grow(x, &scratch_cache, &scratch_cap, bytes ? bytes : 1);
}

void
coll_thread_release(void)
{
	free(tmp_cache);
	free(scratch_cache);
	tmp_cache = scratch_cache = NULL;
	tmp_cap = scratch_cap = 0;
}

struct xmove {
	int to, from;
	const char *sbuf, *init;	/* init: what rbuf starts as, when reducing */
	char *rbuf, *tmp;	/* tmp: NULL unless reducing */
	size_t sbytes, rbytes, sseg, rseg;
};

struct xslot {
	struct comm_req r[2];
	int n;
};

/* Post segment j of m: its receive (into a tmp slot when reducing), then its send. */
static int
xpost(struct coll_call *x, const struct xmove *m, struct xslot *s, size_t j)
{
	size_t roff = j * m->rseg, soff = j * m->sseg;

	s->n = 0;
	if (roff < m->rbytes) {
		char *dst = m->tmp ? m->tmp + (j & 1) * m->rseg : m->rbuf + roff;
		if (comm_irecv(x->c, m->from, 0, dst, MIN(m->rseg, m->rbytes - roff),
		    &s->r[s->n++]) < 0)
			return -1;
	}
	if (soff < m->sbytes)
		if (comm_isend(x->c, m->to, 0, m->sbuf + soff,
		    MIN(m->sseg, m->sbytes - soff), &s->r[s->n++]) < 0)
			return -1;
	return 0;
}

/* Received segment j reduced into rbuf (first set from init, a segment at
 * a time so the copy is still in cache for the reduction). */
static void
xreduce(struct coll_call *x, const struct xmove *m, size_t j)
{
	size_t off = j * m->rseg, len;

	if (off >= m->rbytes)
		return;
	len = MIN(m->rseg, m->rbytes - off);
	if (m->init != m->rbuf)
		memmove(m->rbuf + off, m->init + off, len);
	x->red(m->rbuf + off, m->tmp + (j & 1) * m->rseg, len / x->esz);
}

static int
xrun(struct coll_call *x, struct xmove *m)
{
	struct xslot s[2];
	size_t n, j;

	m->sseg = coll_segment(m->sbytes);
	m->rseg = coll_segment(m->rbytes);
	n = MAX((m->sbytes + m->sseg - 1) / m->sseg, (m->rbytes + m->rseg - 1) / m->rseg);
	if (n == 0)
		return 0;
	if (m->init && m->rbytes && (m->tmp = coll_tmp(x, m->rseg)) == NULL)
		return -1;
	if (xpost(x, m, &s[0], 0) < 0)
		return -1;
	for (j = 0; j < n; j++) {
		/* the next segment is in flight while this one is reduced */
		if (j + 1 < n && xpost(x, m, &s[(j + 1) & 1], j + 1) < 0)
			return -1;
		if (s[j & 1].n && comm_waitall(x->c, s[j & 1].r, s[j & 1].n) < 0)
			return -1;
		if (m->tmp)
			xreduce(x, m, j);
	}
	return 0;
}

int
coll_xchg(struct coll_call *x, int to, const void *sbuf, size_t sbytes,
    int from, void *rbuf, size_t rbytes, int reduce)
{
	struct xmove m = { to, from, sbuf, reduce ? rbuf : NULL, rbuf, NULL,
	    to < 0 ? 0 : sbytes, from < 0 ? 0 : rbytes, 0, 0 };

	return xrun(x, &m);
}

int
coll_xchg_init(struct coll_call *x, int to, const void *sbuf, size_t sbytes,
    int from, void *rbuf, const void *init, size_t rbytes)
{
	struct xmove m = { to, from, sbuf, init, rbuf, NULL, to < 0 ? 0 : sbytes,
	    from < 0 ? 0 : rbytes, 0, 0 };

	return xrun(x, &m);
}

int
coll_send(struct coll_call *x, int to, const void *buf, size_t bytes)
{
	return coll_xchg(x, to, buf, bytes, -1, NULL, 0, 0);
}

int
coll_recv(struct coll_call *x, int from, void *buf, size_t bytes, int reduce)
{
	return coll_xchg(x, -1, NULL, 0, from, buf, bytes, reduce);
}

size_t
coll_part(size_t n, int parts, int i)
{
	size_t q = n / (size_t)parts, r = n % (size_t)parts;

	return (size_t)i * q + MIN((size_t)i, r);
}

size_t *
coll_parts(struct coll_call *x, size_t n, int parts)
{
	size_t *off = coll_alloc(x, ((size_t)parts + 1) * sizeof *off);

	for (int i = 0; off && i <= parts; i++)
		off[i] = coll_part(n, parts, i);
	return off;
}

size_t *
coll_prefix(struct coll_call *x, const size_t *counts)
{
	size_t *off = coll_alloc(x, ((size_t)x->world + 1) * sizeof *off);

	if (off != NULL) {
		off[0] = 0;
		for (int r = 0; r < x->world; r++)
			off[r + 1] = off[r] + counts[r];
	}
	return off;
}

int
coll_overlap(const void *a, size_t alen, const void *b, size_t blen)
{
	uintptr_t pa = (uintptr_t)a, pb = (uintptr_t)b;

	return alen && blen && pa < pb + blen && pb < pa + alen;
}

int
coll_pow2_below(int w)
{
	int p = 1;

	while (p <= w / 2)
		p *= 2;
	return p;
}

int
coll_fold_rank(int r, int rem)
{
	if (r < 2 * rem)
		return r % 2 ? r / 2 : -1;
	return r - rem;
}

int
coll_unfold_rank(int nr, int rem)
{
	return nr < rem ? 2 * nr + 1 : nr + rem;
}

int
coll_fold_first(int nr, int rem)
{
	return nr < rem ? 2 * nr : nr + rem;
}

int
coll_fold(struct coll_call *x, char *buf, size_t bytes, int rem, int in)
{
	int r = x->rank;

	if (r >= 2 * rem)
		return 0;
	comm_set_step(x->c, "%s fold %s", x->algo, in ? "in" : "out");
	if (r % 2 == 0)
		return in ? coll_send(x, r + 1, buf, bytes) : coll_recv(x, r + 1, buf, bytes, 0);
	return in ? coll_recv(x, r - 1, buf, bytes, 1) : coll_send(x, r - 1, buf, bytes);
}

int
coll_ring(struct coll_call *x, char *buf, const size_t *off, int own,
    int reduce, const char *what)
{
	int w = x->world, next = (x->rank + 1) % w, prev = (x->rank + w - 1) % w;
	size_t e = x->esz;

	for (int s = 0; s < w - 1; s++) {
		int sb = coll_mod(own - s, w), rb = coll_mod(own - s - 1, w);
		comm_set_step(x->c, "%s %s step %d", x->algo, what, s);
		if (coll_xchg(x, next, buf + off[sb] * e, (off[sb + 1] - off[sb]) * e,
		    prev, buf + off[rb] * e, (off[rb + 1] - off[rb]) * e, reduce) < 0)
			return -1;
	}
	return 0;
}

int
coll_halving(struct coll_call *x, char *buf, const size_t *off, int nr, int p2,
    int rem)
{
	int lo = 0, hi = p2, step = 0;
	size_t e = x->esz;

	for (int mask = p2 / 2; mask >= 1; mask /= 2, step++) {
		int mid = lo + mask, peer = coll_unfold_rank(nr ^ mask, rem);
		int klo = nr < mid ? lo : mid, khi = nr < mid ? mid : hi;
		int slo = nr < mid ? mid : lo, shi = nr < mid ? hi : mid;
		comm_set_step(x->c, "%s halving step %d", x->algo, step);
		if (coll_xchg(x, peer, buf + off[slo] * e, (off[shi] - off[slo]) * e,
		    peer, buf + off[klo] * e, (off[khi] - off[klo]) * e, 1) < 0)
			return -1;
		lo = klo;
		hi = khi;
	}
	return 0;
}

int
coll_doubling(struct coll_call *x, char *buf, const size_t *off, int nr,
    int p2, int rem)
{
	size_t e = x->esz;
	int step = 0;

	for (int mask = 1; mask < p2; mask *= 2, step++) {
		int pnr = nr ^ mask, peer = coll_unfold_rank(pnr, rem);
		int mine = nr & ~(mask - 1), theirs = pnr & ~(mask - 1);
		comm_set_step(x->c, "%s doubling step %d", x->algo, step);
		if (coll_xchg(x, peer, buf + off[mine] * e,
		    (off[mine + mask] - off[mine]) * e, peer, buf + off[theirs] * e,
		    (off[theirs + mask] - off[theirs]) * e, 0) < 0)
			return -1;
	}
	return 0;
}
