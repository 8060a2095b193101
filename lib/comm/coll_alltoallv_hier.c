/*
 * coll_alltoallv_hier: alltoallv with one message per ordered pair of
 * hosts (COLL_HIER). Host offsets s = 1 .. H-1 are dealt to the local
 * ranks, s to local rank (s-1) mod L on every host (its agent for s),
 * so each local rank carries its share of the crossings. Then:
 *  0. the host's ranks allgather their send and receive counts (shared
 *     memory), from which every size below follows, so no count crosses
 *     a host boundary;
 *  1. within the host (pairwise over shared memory), each rank hands
 *     local rank j its block for j itself and its blocks for the ranks of
 *     every host j is the agent for;
 *  2. each agent, for each of its offsets s, sends host A+s one message
 *     (the blocks of A's ranks, source by source, each holding its blocks
 *     for A+s's ranks in order) and receives one from host A-s;
 *  3. within the host, each agent hands every local rank its blocks.
 * Everything travels as bytes; the data is copied, never combined, so the
 * result is bitwise the pairwise one.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "comm/coll_int.h"

/* One call: W ranks on H hosts, this host A of L ranks, me the local
 * rank; cnt[q][0..W-1] local rank q's send counts, cnt[q][W..2W-1] its
 * receive counts. */
struct a2h {
	const struct coll_hier *h;
	struct coll_call lb, xb;	/* local group, whole group; in bytes */
	int W, H, A, L, me;
	const uint64_t *cnt;
	size_t e;			/* bytes per element */
};

static int
nranks(const struct a2h *t, int k)
{
	return t->h->first[k + 1] - t->h->first[k];
}

/* Rank i of host k. */
static int
at(const struct a2h *t, int k, int i)
{
	return t->h->byhost[t->h->first[k] + i];
}

/* The hosts offset s sends to and receives from. */
static int
dst_host(const struct a2h *t, int s)
{
	return (t->A + s) % t->H;
}

static int
src_host(const struct a2h *t, int s)
{
	return (t->A - s + t->H) % t->H;
}

/* Host k's local rank that carries offset s. */
static int
agent(const struct a2h *t, int k, int s)
{
	return (s - 1) % nranks(t, k);
}

enum { SENT, RECEIVED };

/* Bytes local rank q sends rank p (way SENT), or receives from it. */
static size_t
bytes(const struct a2h *t, int way, int q, int p)
{
	return (size_t)t->cnt[((size_t)q * 2 + (size_t)way) * (size_t)t->W +
	    (size_t)p] * t->e;
}

/* Bytes local rank q sends host k's ranks altogether, or receives. */
static size_t
host_bytes(const struct a2h *t, int way, int q, int k)
{
	size_t n = 0;

	for (int i = 0; i < nranks(t, k); i++)
		n += bytes(t, way, q, at(t, k, i));
	return n;
}

/* World+1 prefix offsets of n sizes into off; the total. */
static size_t
prefix(const size_t *n, size_t *off, int k)
{
	off[0] = 0;
	for (int i = 0; i < k; i++)
		off[i + 1] = off[i] + n[i];
	return off[k];
}

/* Step 0: every local rank's counts, as 64-bit words. */
static uint64_t *
counts_gather(struct a2h *t, const size_t *scounts, const size_t *rcounts)
{
	struct coll_call w = t->lb;
	size_t row = 2 * (size_t)t->W, *off;
	uint64_t *mine, *all;
	int rc;

	w.dt = DT_I64;
	w.esz = sizeof(uint64_t);
	mine = coll_alloc(&w, row * sizeof *mine);
	all = mine ? coll_alloc(&w, row * (size_t)t->L * sizeof *all) : NULL;
	off = all ? coll_alloc(&w, ((size_t)t->L + 1) * sizeof *off) : NULL;
	if (off == NULL) {
		free(mine);
		free(all);
		return NULL;
	}
	for (int p = 0; p < t->W; p++) {
		mine[p] = scounts[p];
		mine[t->W + p] = rcounts[p];
	}
	for (int q = 0; q <= t->L; q++)
		off[q] = (size_t)q * row;
	comm_set_step(w.c, "hier alltoallv counts");
	rc = coll_allgatherv_algo(&w, mine, (char *)all, off,
	    coll_auto(COLL_KIND_ALLGATHER, off[t->L] * sizeof *all, t->L));
	free(mine);
	free(off);
	if (rc < 0) {
		free(all);
		return NULL;
	}
	return all;
}

/* Step 1's buffer: for each local rank j, this rank's block for j, then
 * its blocks for the hosts j carries. off: L+1 offsets. */
static char *
pack_local(struct a2h *t, const char *send, const size_t *soff, size_t *off)
{
	size_t *n = coll_alloc(&t->lb, (size_t)t->L * sizeof *n);
	char *buf, *o;

	if (n == NULL)
		return NULL;
	for (int j = 0; j < t->L; j++) {
		n[j] = bytes(t, SENT, t->me, at(t, t->A, j));
		for (int s = j + 1; s < t->H; s += t->L)
			n[j] += host_bytes(t, SENT, t->me, dst_host(t, s));
	}
	buf = coll_alloc(&t->lb, prefix(n, off, t->L));
	free(n);
	for (int j = 0; buf && j < t->L; j++) {
		int p = at(t, t->A, j);
		o = buf + off[j];
		coll_copy(o, send + soff[p] * t->e, bytes(t, SENT, t->me, p));
		o += bytes(t, SENT, t->me, p);
		for (int s = j + 1; s < t->H; s += t->L) {
			int k = dst_host(t, s);
			for (int i = 0; i < nranks(t, k); i++) {
				p = at(t, k, i);
				size_t g = bytes(t, SENT, t->me, p);
				coll_copy(o, send + soff[p] * t->e, g);
				o += g;
			}
		}
	}
	return buf;
}

/* Step 1's receive offsets: from local rank q, its block for this rank
 * and its blocks for the hosts this rank carries. */
static size_t
recv_local_sizes(const struct a2h *t, size_t *off, size_t *n)
{
	for (int q = 0; q < t->L; q++) {
		n[q] = bytes(t, SENT, q, at(t, t->A, t->me));
		for (int s = t->me + 1; s < t->H; s += t->L)
			n[q] += host_bytes(t, SENT, q, dst_host(t, s));
	}
	return prefix(n, off, t->L);
}

/*
 * Step 2 for every offset this rank carries, into xr (what each host
 * sends, one after the other); cur[q]: where local rank q's next blocks
 * for the hosts wait in rb1.
 */
static int
cross(struct a2h *t, const char *rb1, size_t *cur, char *xr)
{
	size_t out, in, most = 0;
	char *xs;
	int rc = 0;

	for (int s = t->me + 1; s < t->H; s += t->L)
		for (int q = 0, k = dst_host(t, s); q < t->L; q++)
			most += host_bytes(t, SENT, q, k);
	if ((xs = coll_alloc(&t->xb, most)) == NULL)
		return -1;
	for (int s = t->me + 1; rc == 0 && s < t->H; s += t->L) {
		int to = dst_host(t, s), from = src_host(t, s);
		out = in = 0;
		for (int q = 0; q < t->L; q++) {
			size_t g = host_bytes(t, SENT, q, to);
			memcpy(xs + out, rb1 + cur[q], g);
			cur[q] += g;
			out += g;
			in += host_bytes(t, RECEIVED, q, from);
		}
		comm_set_step(t->xb.c, "hier alltoallv hosts %d -> %d", t->A,
		    to);
		rc = coll_xchg(&t->xb, at(t, to, agent(t, to, s)), xs, out,
		    at(t, from, agent(t, from, s)), xr, in, 0);
		xr += in;
	}
	free(xs);
	return rc;
}

/* Step 3's buffer: for each local rank b, the blocks the hosts this rank
 * carries sent it, offset by offset, source by source. off: L+1. */
static char *
pack_back(struct a2h *t, const char *xr, size_t *off)
{
	size_t *cur = coll_alloc(&t->lb, (size_t)t->L * sizeof *cur), g;
	char *buf;

	if (cur == NULL)
		return NULL;
	for (int b = 0; b < t->L; b++) {
		cur[b] = 0;
		for (int s = t->me + 1; s < t->H; s += t->L)
			cur[b] += host_bytes(t, RECEIVED, b, src_host(t, s));
	}
	buf = coll_alloc(&t->lb, prefix(cur, off, t->L));
	memcpy(cur, off, (size_t)t->L * sizeof *cur);
	for (int s = t->me + 1; buf && s < t->H; s += t->L) {
		int k = src_host(t, s);
		for (int i = 0; i < nranks(t, k); i++)
			for (int b = 0; b < t->L; b++) {
				g = bytes(t, RECEIVED, b, at(t, k, i));
				memcpy(buf + cur[b], xr, g);
				cur[b] += g;
				xr += g;
			}
	}
	free(cur);
	return buf;
}

/* Step 3's receive sizes: from agent j, what the hosts it carries sent
 * this rank. */
static size_t
recv_back_sizes(const struct a2h *t, size_t *off, size_t *n)
{
	for (int j = 0; j < t->L; j++) {
		n[j] = 0;
		for (int s = j + 1; s < t->H; s += t->L)
			n[j] += host_bytes(t, RECEIVED, t->me, src_host(t, s));
	}
	return prefix(n, off, t->L);
}

/* The received blocks into recv: the host's own from rb1, the others'
 * from rb2, agent by agent, offset by offset, source by source. */
static void
unpack(const struct a2h *t, const char *rb1, const size_t *off1,
    const char *rb2, const size_t *off2, char *recv, const size_t *roff)
{
	for (int q = 0; q < t->L; q++) {
		int p = at(t, t->A, q);
		coll_copy(recv + roff[p] * t->e, rb1 + off1[q],
		    bytes(t, RECEIVED, t->me, p));
	}
	for (int j = 0; j < t->L; j++) {
		const char *in = rb2 + off2[j];
		for (int s = j + 1; s < t->H; s += t->L) {
			int k = src_host(t, s);
			for (int i = 0; i < nranks(t, k); i++) {
				int p = at(t, k, i);
				size_t g = bytes(t, RECEIVED, t->me, p);
				coll_copy(recv + roff[p] * t->e, in, g);
				in += g;
			}
		}
	}
}

/* Steps 1 to 3, once the counts are known; off: 4 (L+1) offsets. */
static int
exchange(struct a2h *t, const char *send, const size_t *soff, char *recv,
    const size_t *roff, size_t *off)
{
	size_t *o1 = off, *i1 = o1 + t->L + 1, *o2 = i1 + t->L + 1;
	size_t *i2 = o2 + t->L + 1;
	size_t *n = coll_alloc(&t->lb, (size_t)t->L * sizeof *n);
	char *pk1 = NULL, *rb1 = NULL, *xr = NULL, *pk2 = NULL, *rb2 = NULL;
	size_t xin = 0;
	int rc = -1;

	if (n == NULL || (pk1 = pack_local(t, send, soff, o1)) == NULL ||
	    (rb1 = coll_alloc(&t->lb, recv_local_sizes(t, i1, n))) == NULL ||
	    coll_alltoallv_pairwise(&t->lb, pk1, o1, rb1, i1) < 0)
		goto out;
	for (int s = t->me + 1; s < t->H; s += t->L)
		for (int q = 0; q < t->L; q++)
			xin += host_bytes(t, RECEIVED, q, src_host(t, s));
	/* cursors past the blocks for this rank itself */
	for (int q = 0; q < t->L; q++)
		n[q] = i1[q] + bytes(t, SENT, q, at(t, t->A, t->me));
	if ((xr = coll_alloc(&t->xb, xin)) == NULL ||
	    cross(t, rb1, n, xr) < 0 ||
	    (pk2 = pack_back(t, xr, o2)) == NULL ||
	    (rb2 = coll_alloc(&t->lb, recv_back_sizes(t, i2, n))) == NULL ||
	    coll_alltoallv_pairwise(&t->lb, pk2, o2, rb2, i2) < 0)
		goto out;
	unpack(t, rb1, i1, rb2, i2, recv, roff);
	rc = 0;
out:
	free(n);
	free(pk1);
	free(rb1);
	free(xr);
	free(pk2);
	free(rb2);
	return rc;
}

int
coll_hier_alltoallv(struct coll_call *x, const char *send,
    const size_t *scounts, char *recv, const size_t *rcounts)
{
	struct coll_call lx, cx;
	struct a2h t;
	size_t *soff = NULL, *roff = NULL, *off = NULL;
	uint64_t *cnt = NULL;
	int rc = -1;

	memset(&t, 0, sizeof t);
	if ((t.h = coll_hier_begin(x, COLL_KIND_ALLTOALLV, &lx, &cx)) == NULL)
		return -1;
	t.lb = lx;
	t.xb = *x;
	t.lb.dt = t.xb.dt = DT_U8;
	t.lb.esz = t.xb.esz = 1;
	t.W = x->world;
	t.H = t.h->hosts;
	t.A = comm_host(x->c, x->rank);
	t.L = lx.world;
	t.me = lx.rank;
	t.e = x->esz;
	if ((soff = coll_prefix(x, scounts)) == NULL ||
	    (roff = coll_prefix(x, rcounts)) == NULL ||
	    (off = coll_alloc(x, 4 * ((size_t)t.L + 1) * sizeof *off)) ==
	    NULL ||
	    (cnt = counts_gather(&t, scounts, rcounts)) == NULL)
		goto out;
	t.cnt = cnt;
	rc = exchange(&t, send, soff, recv, roff, off);
out:
	free(soff);
	free(roff);
	free(off);
	free(cnt);
	return rc;
}
