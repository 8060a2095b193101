/*
 * coll_hier: the hierarchical algorithm (COLL_HIER) of allreduce,
 * broadcast, allgather(v) and reduce-scatter, for a group spread over
 * hosts. At its first hier collective the group is split twice
 * (comm_split): into its hosts (local groups, ranked as in the group;
 * their pairs talk through shared memory) and into the ranks holding the
 * same local rank on every host (cross groups, ranked by host). A hier
 * collective runs the existing algorithms, the cost model's choice for
 * each level's size, inside those: within every host, and across hosts
 * with each local rank carrying its own share, all cross groups at once.
 * When hosts hold different numbers of ranks, some cross groups lack a
 * host; then each host's leader (local rank 0) speaks for it, and cross
 * group 0 (the leaders) alone crosses. Every element is reduced in one
 * place, or by an algorithm that leaves it bitwise the same on every
 * member, and copied from there: every rank ends with the same bits.
 */
#include <stdlib.h>
#include <string.h>

#include "comm/coll_int.h"
#include "comm/comm_impl.h"

/*
 * Allreduce takes the shares (2 (L-1) local steps) rather than the
 * leader (2 log2 L) when hosts are even and the vector is large enough
 * for the cross step's saving, at least half of its n b once L >= 2 and
 * H >= 2, to pay for the extra local steps: with coll_auto's a ~ 5 us
 * and b ~ 1/3 GB/s, some 32 KiB a step (so always for L <= 3).
 */
#define SHARE_STEP_BYTES ((size_t)32 << 10)

static void
hier_drop(struct coll_hier *h)
{
	if (h == NULL)
		return;
	comm_close(h->cross);
	comm_close(h->local);
	free(h->lrank);
	free(h->byhost);
	free(h->first);
	free(h);
}

void
coll_hier_free(struct comm *c)
{
	hier_drop(c->hier);
	c->hier = NULL;
}

/* Local ranks and the host-by-host order, by counting the hosts' ranks. */
static int
hier_places(struct coll_hier *h, const struct comm *c)
{
	int w = comm_size(c), r, k, *fill;

	h->hosts = comm_hosts(c);
	h->lrank = malloc((size_t)w * sizeof *h->lrank);
	h->byhost = malloc((size_t)w * sizeof *h->byhost);
	h->first = calloc((size_t)h->hosts + 1, sizeof *h->first);
	fill = calloc((size_t)h->hosts, sizeof *fill);
	if (!h->lrank || !h->byhost || !h->first || !fill) {
		free(fill);
		return -1;
	}
	for (r = 0; r < w; r++)
		h->first[comm_host(c, r) + 1]++;
	h->lmin = w;
	for (k = 0; k < h->hosts; k++) {
		int n = h->first[k + 1];
		h->lmin = n < h->lmin ? n : h->lmin;
		h->lmax = n > h->lmax ? n : h->lmax;
		h->first[k + 1] += h->first[k];
	}
	for (r = 0; r < w; r++) {
		k = comm_host(c, r);
		h->lrank[r] = fill[k]++;
		h->byhost[h->first[k] + h->lrank[r]] = r;
	}
	free(fill);
	return 0;
}

/*
 * The group's sub-groups, split at the first call (every rank makes
 * it, so the split's collective is matched), with the group's current
 * timeout and spinning. They are a deliberate cache, kept until
 * comm_close(c): splitting anew costs two allgathers over the group a
 * call, as much as a small hier allreduce itself, and auto picks hier at
 * every size across hosts. What the first call leaves behind is the
 * sub-groups' state, and it serves every later call alike: c's ranks
 * and hosts do not change, so neither do the sub-groups; each hier call
 * stamps its own operation on both (coll_hier_begin), whatever size, dtype
 * or kind; each group (a sub-group of c too) has its own cache, freed
 * with it. It also leaves c's links matching receives by group (split
 * mode, split.c) while the sub-groups live: flat algorithms on c run
 * correctly so, reading each message's header before its payload.
 */
static struct coll_hier *
hier_get(struct coll_call *x)
{
	struct comm *c = x->c;
	struct coll_hier *h = c->hier;
	char err[COLLX_ERRLEN];
	int host = comm_host(c, x->rank);

	if (h == NULL) {
		if ((h = calloc(1, sizeof *h)) == NULL || hier_places(h, c) < 0) {
			hier_drop(h);
			comm_fail(c, COMM_ERR_RUNTIME, "out of memory");
			return NULL;
		}
		/* a failed split is recorded on c's links: err is a copy */
		if (comm_split(c, host, x->rank, &h->local, err, sizeof err) < 0 ||
		    comm_split(c, h->lrank[x->rank], host, &h->cross, err,
		    sizeof err) < 0) {
			hier_drop(h);
			return NULL;
		}
		c->hier = h;
	}
	h->local->timeout = h->cross->timeout = c->timeout;
	h->local->spin_us = h->cross->spin_us = c->spin_us;
	return h;
}

/* This call's operation stamped on both sub-groups under the group's
 * signature: every rank of a sub-group runs each of the group's hier
 * calls, so their operations stay in step, and ranks that disagree on
 * the call fail at their first exchange. Their reduction is x's. */
struct coll_hier *
coll_hier_begin(struct coll_call *x, enum coll_kind kind, struct coll_call *lx,
    struct coll_call *cx)
{
	uint64_t sig = x->c->sig;	/* before a first split stamps c anew */
	struct coll_hier *h = hier_get(x);

	if (h == NULL || coll_begin(lx, h->local, kind, x->dt, COLL_SUM,
	    COLL_HIER, sig, 0, 0) < 0 || coll_begin(cx, h->cross, kind, x->dt,
	    COLL_SUM, COLL_HIER, sig, 0, 0) < 0)
		return NULL;
	lx->red = cx->red = x->red;
	lx->algo = "hier local";
	cx->algo = "hier cross";
	return h;
}

/* The flat cost model's algorithm for bytes on sub-group x. */
static enum coll_algo
flat(const struct coll_call *x, enum coll_kind kind, size_t bytes)
{
	return coll_auto(kind, bytes, x->world);
}

static int
use_shares(const struct coll_hier *h, size_t bytes)
{
	int steps = h->lmax - 1;

	for (int p = 1; p < h->lmax; p *= 2)
		steps--;	/* less ceil(log2 L): the leader's steps */
	return h->lmin == h->lmax && bytes >= (size_t)steps * SHARE_STEP_BYTES;
}

/* Packed order for the shares: local rank by local rank, each of them
 * host by host (even hosts). */
static void
shares_order(const struct coll_hier *h, int *order)
{
	int L = h->lmax;

	for (int i = 0; i < L; i++)
		for (int k = 0; k < h->hosts; k++)
			order[i * h->hosts + k] = h->byhost[h->first[k] + i];
}

/* ---- allreduce ---- */

/* Reduce to each host's leader, allreduce among the leaders (cross
 * group 0, which every host has), broadcast within each host. */
static int
allreduce_leader(struct coll_call *lx, struct coll_call *cx, char *buf,
    size_t n)
{
	size_t bytes = n * lx->esz;

	if (lx->world > 1 && coll_reduce_binomial(lx, buf, n, 0) < 0)
		return -1;
	if (lx->rank == 0 && cx->world > 1 && coll_allreduce_algo(cx, buf, n,
	    flat(cx, COLL_KIND_ALLREDUCE, bytes)) < 0)
		return -1;
	if (lx->world == 1)
		return 0;
	return coll_bcast_algo(lx, buf, n, 0, flat(lx, COLL_KIND_BROADCAST, bytes));
}

/* Ring reduce-scatter within the host (local rank i ends holding part
 * i+1 reduced over its host), allreduce of each part across hosts among
 * the ranks holding it (a cross group), ring allgather within the host. */
static int
allreduce_shares(struct coll_call *lx, struct coll_call *cx, char *buf,
    size_t n)
{
	int L = lx->world, own = (lx->rank + 1) % L, rc;
	size_t *off = coll_parts(lx, n, L), e = lx->esz, len;

	if (off == NULL)
		return -1;
	len = off[own + 1] - off[own];
	rc = coll_ring(lx, buf, off, lx->rank, 1, "reduce-scatter");
	if (rc == 0 && cx->world > 1)
		rc = coll_allreduce_algo(cx, buf + off[own] * e, len,
		    flat(cx, COLL_KIND_ALLREDUCE, len * e));
	if (rc == 0)
		rc = coll_ring(lx, buf, off, lx->rank + 1, 0, "allgather");
	free(off);
	return rc;
}

/* What the sub-groups sent for c's hier calls: comm_bytes_sent(c) counts
 * it as c's, since those calls were c's operations. */
uint64_t
coll_hier_sent(const struct comm *c)
{
	const struct coll_hier *h = c->hier;

	return h == NULL ? 0 : comm_bytes_sent(h->local) +
	    comm_bytes_sent(h->cross);
}

int
coll_hier_allreduce(struct coll_call *x, char *buf, size_t n)
{
	struct coll_call lx, cx;
	struct coll_hier *h = coll_hier_begin(x, COLL_KIND_ALLREDUCE, &lx, &cx);

	if (h == NULL)
		return -1;
	if (use_shares(h, n * x->esz))
		return allreduce_shares(&lx, &cx, buf, n);
	return allreduce_leader(&lx, &cx, buf, n);
}

/* ---- broadcast ---- */

/* Across hosts among the ranks with the root's local rank, then within
 * every host from that rank. When some host has no rank of that local
 * rank, the root first hands the data to its leader, and the leaders
 * carry it. */
int
coll_hier_bcast(struct coll_call *x, char *buf, size_t n, int root)
{
	struct coll_call lx, cx;
	struct coll_hier *h = coll_hier_begin(x, COLL_KIND_BROADCAST, &lx, &cx);
	size_t bytes = n * x->esz;
	int via, rhost = comm_host(x->c, root);

	if (h == NULL)
		return -1;
	via = h->lrank[root];
	if (via >= h->lmin) {
		comm_set_step(lx.c, "hier local root to leader");
		if (x->rank == root && coll_send(&lx, 0, buf, bytes) < 0)
			return -1;
		if (lx.rank == 0 && comm_host(x->c, x->rank) == rhost &&
		    coll_recv(&lx, via, buf, bytes, 0) < 0)
			return -1;
		via = 0;
	}
	/* via < lmin: every host is in cross group via, at its host number */
	if (lx.rank == via && cx.world > 1 && coll_bcast_algo(&cx, buf, n, rhost,
	    flat(&cx, COLL_KIND_BROADCAST, bytes)) < 0)
		return -1;
	if (lx.world == 1)
		return 0;
	return coll_bcast_algo(&lx, buf, n, via, flat(&lx, COLL_KIND_BROADCAST, bytes));
}

/* ---- allgather ---- */

/*
 * The blocks gather in a packed buffer, poff its offsets in packed
 * order. Shares: across hosts, each rank gathers the blocks of its
 * local rank (a run of packed); within the host, those runs.
 */
static int
allgather_shares(const struct coll_hier *h, struct coll_call *lx,
    struct coll_call *cx, const void *send, char *packed, const size_t *poff,
    size_t *sub)
{
	int i = lx->rank, H = h->hosts, L = lx->world, k;
	size_t e = lx->esz;

	for (k = 0; k <= H; k++)
		sub[k] = poff[i * H + k] - poff[i * H];
	if (coll_allgatherv_algo(cx, send, packed + poff[i * H] * e, sub,
	    flat(cx, COLL_KIND_ALLGATHER, sub[H] * e)) < 0)
		return -1;
	for (k = 0; k <= L; k++)
		sub[k] = poff[k * H];
	return coll_allgatherv_algo(lx, packed + sub[i] * e, packed, sub,
	    flat(lx, COLL_KIND_ALLGATHER, sub[L] * e));
}

/* Uneven hosts, packed host by host: gather the host's blocks within it,
 * the hosts' runs among the leaders, then broadcast the whole within
 * each host. */
static int
allgather_leader(const struct coll_hier *h, struct coll_call *lx,
    struct coll_call *cx, int host, const void *send, char *packed,
    const size_t *poff, size_t *sub)
{
	int f = h->first[host], L = lx->world, H = h->hosts, j;
	size_t e = lx->esz, all = poff[h->first[H]];

	for (j = 0; j <= L; j++)
		sub[j] = poff[f + j] - poff[f];
	if (coll_allgatherv_algo(lx, send, packed + poff[f] * e, sub,
	    flat(lx, COLL_KIND_ALLGATHER, sub[L] * e)) < 0)
		return -1;
	if (lx->rank == 0 && cx->world > 1) {
		for (j = 0; j <= H; j++)
			sub[j] = poff[h->first[j]];
		if (coll_allgatherv_algo(cx, packed + sub[host] * e, packed, sub,
		    flat(cx, COLL_KIND_ALLGATHER, all * e)) < 0)
			return -1;
	}
	if (L == 1)
		return 0;
	return coll_bcast_algo(lx, packed, all, 0, flat(lx, COLL_KIND_BROADCAST,
	    all * e));
}

/*
 * Shares without the packed buffer, where hosts are even, their ranks lie
 * host by host in the group's order (byhost the identity) and the cross
 * step is a ring (two hosts, or the flat model's pick): across hosts a
 * ring over this local rank's blocks, each straight at its place in recv,
 * then within the host one allgather per host of its blocks, which lie
 * together. The same bytes as allgather_shares, without its copy of the
 * whole out of packed.
 */
static int
allgather_inplace(const struct coll_hier *h, struct coll_call *lx,
    struct coll_call *cx, char *recv, const size_t *off, size_t *sub)
{
	int i = lx->rank, H = h->hosts, L = lx->world, k, j, s;
	size_t e = lx->esz;

	for (s = 0; s < H - 1; s++) {
		int sr = h->first[coll_mod(cx->rank - s, H)] + i;
		int rr = h->first[coll_mod(cx->rank - s - 1, H)] + i;

		comm_set_step(cx->c, "%s allgather step %d", cx->algo, s);
		if (coll_xchg(cx, (cx->rank + 1) % H, recv + off[sr] * e,
		    (off[sr + 1] - off[sr]) * e, (cx->rank + H - 1) % H,
		    recv + off[rr] * e, (off[rr + 1] - off[rr]) * e, 0) < 0)
			return -1;
	}
	for (k = 0; k < H && L > 1; k++) {
		int f = h->first[k];

		for (j = 0; j <= L; j++)
			sub[j] = off[f + j] - off[f];
		if (coll_allgatherv_algo(lx, recv + off[f + i] * e, recv +
		    off[f] * e, sub, flat(lx, COLL_KIND_ALLGATHER, sub[L] * e)) < 0)
			return -1;
	}
	return 0;
}

/* Whether allgather_inplace serves: bytes, those of the cross step. */
static int
inplace_fits(const struct coll_hier *h, const struct coll_call *x,
    const struct coll_call *cx, size_t bytes)
{
	/* one host keeps the packed path: in place measured slower at 1 MiB
	 * (187 against 131 us, 4 ranks), faster at 16 MiB; no sweep yet
	 * says where they cross */
	if (h->hosts < 2 || h->lmin != h->lmax)
		return 0;
	for (int r = 0; r < x->world; r++)
		if (h->byhost[r] != r)
			return 0;
	return h->hosts == 2 || flat(cx, COLL_KIND_ALLGATHER, bytes) ==
	    COLL_RING;
}

int
coll_hier_allgatherv(struct coll_call *x, const void *send, char *recv,
    const size_t *off)
{
	struct coll_call lx, cx;
	struct coll_hier *h = coll_hier_begin(x, COLL_KIND_ALLGATHER, &lx, &cx);
	int w = x->world, even, rc = -1, p;
	size_t e = x->esz, *poff = NULL, *sub = NULL;
	int *order = NULL;
	char *packed = NULL;

	if (h == NULL)
		return -1;
	/* send is at recv's place already (coll_allgatherv_algo) */
	if (inplace_fits(h, x, &cx, off[w] * e / (size_t)h->lmax)) {
		if ((sub = coll_alloc(x, ((size_t)w + 1) * sizeof *sub)) == NULL)
			return -1;
		rc = allgather_inplace(h, &lx, &cx, recv, off, sub);
		free(sub);
		return rc;
	}
	if ((order = coll_alloc(x, (size_t)w * sizeof *order)) == NULL ||
	    (poff = coll_alloc(x, ((size_t)w + 1) * sizeof *poff)) == NULL ||
	    (sub = coll_alloc(x, ((size_t)w + 1) * sizeof *sub)) == NULL ||
	    (packed = coll_alloc(x, off[w] * e)) == NULL)
		goto out;
	even = h->lmin == h->lmax;
	if (even)
		shares_order(h, order);
	else
		memcpy(order, h->byhost, (size_t)w * sizeof *order);
	poff[0] = 0;
	for (p = 0; p < w; p++)
		poff[p + 1] = poff[p] + off[order[p] + 1] - off[order[p]];
	rc = even ? allgather_shares(h, &lx, &cx, send, packed, poff, sub) :
	    allgather_leader(h, &lx, &cx, comm_host(x->c, x->rank), send, packed,
	    poff, sub);
	for (p = 0; rc == 0 && p < w; p++)
		memcpy(recv + off[order[p]] * e, packed + poff[p] * e,
		    (poff[p + 1] - poff[p]) * e);
out:
	free(order);
	free(poff);
	free(sub);
	free(packed);
	return rc;
}

/* ---- reduce-scatter ---- */

/*
 * Even hosts: the input's blocks packed local rank by local rank (each
 * of those host by host), reduce-scattered within the host (local rank i
 * gets its run: the blocks of the ranks of local rank i, reduced over the
 * host), then across hosts (each rank its own block). Uneven hosts: the
 * leaders' allreduce of the whole, each rank keeping its block.
 */
int
coll_hier_reduce_scatter(struct coll_call *x, const char *send, char *recv,
    size_t n)
{
	struct coll_call lx, cx;
	struct coll_hier *h = coll_hier_begin(x, COLL_KIND_REDUCE_SCATTER, &lx, &cx);
	size_t blk = n * x->esz, w = (size_t)x->world, H, p;
	char *work = NULL, *mine = NULL;
	int *order = NULL, rc = -1;

	if (h == NULL || (work = coll_alloc(x, blk * w)) == NULL)
		return -1;
	H = (size_t)h->hosts;
	if (h->lmin != h->lmax) {
		memcpy(work, send, blk * w);
		rc = allreduce_leader(&lx, &cx, work, n * w);
		if (rc == 0)
			memcpy(recv, work + (size_t)x->rank * blk, blk);
		goto out;
	}
	if ((order = coll_alloc(x, w * sizeof *order)) == NULL ||
	    (mine = coll_alloc(x, blk * H)) == NULL)
		goto out;
	shares_order(h, order);
	for (p = 0; p < w; p++)
		memcpy(work + p * blk, send + (size_t)order[p] * blk, blk);
	rc = coll_reduce_scatter_algo(&lx, work, mine, n * H,
	    flat(&lx, COLL_KIND_REDUCE_SCATTER, blk * w));
	if (rc == 0)
		rc = coll_reduce_scatter_algo(&cx, mine, recv, n,
		    flat(&cx, COLL_KIND_REDUCE_SCATTER, blk * H));
out:
	free(work);
	free(mine);
	free(order);
	return rc;
}
