/* bench_cost: the closed forms of the collectives' times under the
 * alpha-beta-gamma model (Thakur, Rabenseifner and Gropp, "Optimization
 * of collective communication operations in MPICH", 2005), and the cost
 * model's arithmetic for a layer. Its JSON file is bench_cost_file.c's. */
#include <math.h>
#include <string.h>

#include "bench/bench_cost.h"

static const char *const link_names[BENCH_NLINK] = { "shm", "tcp" };

const char *
bench_link_name(enum bench_link l)
{
	return link_names[l];
}

int
bench_cost_shape(enum coll_kind kind, enum coll_algo algo, int p,
    double *steps, double *vol, double *red)
{
	double lg = ceil(log2(p > 1 ? p : 1)), f = (double)(p - 1) / p;

	*red = 0;
	switch (kind) {
	case COLL_KIND_ALLREDUCE:
		switch (algo) {
		case COLL_NAIVE:	/* the root receives and sends p-1 */
			*steps = 2.0 * (p - 1), *vol = 2.0 * (p - 1);
			*red = p - 1;
			return 0;
		case COLL_RING:
			*steps = 2.0 * (p - 1), *vol = 2 * f, *red = f;
			return 0;
		case COLL_TREE:		/* binomial reduce, then broadcast */
			*steps = 2 * lg, *vol = 2 * lg, *red = lg;
			return 0;
		case COLL_RD:
			*steps = lg, *vol = lg, *red = lg;
			return 0;
		case COLL_RABENSEIFNER:
			*steps = 2 * lg, *vol = 2 * f, *red = f;
			return 0;
		default:
			return -1;
		}
	case COLL_KIND_BROADCAST:
		switch (algo) {
		case COLL_LINEAR: *steps = p - 1, *vol = p - 1; return 0;
		case COLL_BINOMIAL: *steps = lg, *vol = lg; return 0;
		case COLL_RING: *steps = p - 1, *vol = 1; return 0;
		case COLL_SCATTER_ALLGATHER:
			*steps = lg + p - 1, *vol = 2 * f;
			return 0;
		default:
			return -1;
		}
	case COLL_KIND_ALLGATHER:
	case COLL_KIND_REDUCE_SCATTER:
	case COLL_KIND_ALLTOALL:
		if (kind == COLL_KIND_REDUCE_SCATTER)
			*red = f;
		*vol = f;
		switch (algo) {
		case COLL_RING: case COLL_PAIRWISE: case COLL_LINEAR:
			*steps = p - 1;
			return 0;
		case COLL_RD: case COLL_BRUCK: case COLL_HALVING:
			*steps = lg;
			return 0;
		default:
			return -1;
		}
	default:
		return -1;
	}
}

/* The constants for kind's algo on link: its own fit, else the link's. */
static const struct bench_ab *
constants(const struct bench_cost *c, enum coll_kind kind,
    enum coll_algo algo, enum bench_link link)
{
	const struct bench_ab *a = &c->coll[link][kind][algo];

	if (a->points > 0)
		return a;
	if (c->link[link].points > 0)
		return &c->link[link];
	link = link == BENCH_SHM ? BENCH_TCP : BENCH_SHM;	/* the other */
	return &c->link[link];
}

/* The closed form's seconds for algo's counts on p ranks, conc groups
 * alike sharing each link. */
static double
closed_on(const struct bench_cost *c, const struct bench_ab *a,
    enum coll_kind kind, enum coll_algo algo, int p, int conc, double bytes)
{
	double steps, vol, red;

	if (bench_cost_shape(kind, algo, p, &steps, &vol, &red) < 0)
		return -1;
	return steps * a->alpha + vol * conc * bytes / a->beta +
	    red * bytes / c->gamma;
}

static double
closed(const struct bench_cost *c, const struct bench_ab *a,
    enum coll_kind kind, enum coll_algo algo, int p, double bytes)
{
	return closed_on(c, a, kind, algo, p, 1, bytes);
}

/* The sweep's time at bytes, log-log between the two sizes around it,
 * bytes held to its ends. */
static double
interp(const struct bench_ab *a, double bytes)
{
	int i, n = a->nt;

	if (bytes <= a->tb[0])
		return a->tt[0];
	if (bytes >= a->tb[n - 1])
		return a->tt[n - 1];
	for (i = 1; a->tb[i] < bytes; i++)
		;
	return exp(log(a->tt[i - 1]) + (log(a->tt[i]) - log(a->tt[i - 1])) *
	    (log(bytes) - log(a->tb[i - 1])) / (log(a->tb[i]) -
	    log(a->tb[i - 1])));
}

/* The sweep's time at bytes on its p0 ranks; past either end, that end's
 * time grown as the closed form grows. */
static double
swept(const struct bench_cost *c, const struct bench_ab *a,
    enum coll_kind kind, enum coll_algo algo, int p0, double bytes)
{
	double x = bytes < a->tb[0] ? a->tb[0] : bytes > a->tb[a->nt - 1] ?
	    a->tb[a->nt - 1] : bytes;

	if (x == bytes)
		return interp(a, bytes);
	return interp(a, x) * closed(c, a, kind, algo, p0, bytes) /
	    closed(c, a, kind, algo, p0, x);
}

/* The step model's constants: each link class's line (the other's where
 * one was not measured), the reduction rate; a step's latency times the
 * ranks a core where a host holds more ranks than cores (l ranks a host
 * across hosts; 0: as the sweep's): a rank waking for its message waits
 * for a core. */
static void
legs_of(const struct bench_cost *c, int conc, int l, struct bench_legs *k)
{
	const struct bench_ab *s = &c->link[BENCH_SHM], *t = &c->link[BENCH_TCP];
	double f = c->cores > 0 && l > c->cores ? (double)l / c->cores : 1;

	s = s->points > 0 ? s : t;
	t = t->points > 0 ? t : s;
	k->as = s->alpha * f, k->bs = s->beta;
	k->at = t->alpha * f, k->bt = t->beta;
	k->g = c->gamma, k->conc = conc;
}

/* Where a sweep on link ran: ranks, and ranks a host (shm: one host;
 * tcp: every rank its own link where it ran on one host, --no-shm). */
static void
sweep_place(const struct bench_cost *c, const struct bench_ab *a,
    enum bench_link link, int *p0, int *l0)
{
	int h0 = a->hosts > 0 ? a->hosts : link == BENCH_TCP ? c->hosts : 1;

	*p0 = a->ranks > 0 ? a->ranks : c->world;
	*l0 = link == BENCH_SHM ? *p0 : h0 > 1 && *p0 % h0 == 0 ? *p0 / h0 : 1;
}

/* kind's algo (auto: coll_auto's choice) on p ranks of link, l to a host
 * (tcp: l < p ranks share a host, the rest every rank its own), conc
 * groups alike beside it on each host's link. A kept sweep: its time
 * scaled from where it ran by the step model's ratio; else the closed
 * form on the algorithm's (or the link's) line. */
static double
flat_on(const struct bench_cost *c, enum coll_kind kind, enum coll_algo algo,
    enum bench_link link, int p, int l, int conc, double bytes)
{
	const struct bench_ab *a;
	struct bench_legs k;
	double t, m, m0;
	int p0, l0;

	if (p <= 1)
		return 0;
	if (algo == COLL_AUTO || algo == COLL_HIER)
		algo = coll_auto(kind, (size_t)bytes, p);
	a = constants(c, kind, algo, link);
	if ((t = closed_on(c, a, kind, algo, p, conc, bytes)) < 0 ||
	    a->nt < 2 || a != &c->coll[link][kind][algo] || c->world < 2 ||
	    bytes <= 0)
		return t;
	sweep_place(c, a, link, &p0, &l0);
	l = link == BENCH_SHM ? p : l >= 1 && l < p ? l : 1;
	/* shm: the sweep's host and the group's hold the same ranks (a
	 * group's p ranks run beside the host's others) */
	legs_of(c, conc, link == BENCH_TCP ? l * conc : 0, &k);
	m = bench_cost_steps(&k, kind, algo, p, l, bytes);
	legs_of(c, 1, link == BENCH_TCP ? l0 : 0, &k);
	m0 = bench_cost_steps(&k, kind, algo, p0, l0, bytes);
	if (m > 0 && m0 > 0)
		return swept(c, a, kind, algo, p0, bytes) * m / m0;
	/* measured at the fit's world, grown to p as the closed form grows */
	return swept(c, a, kind, algo, p0, bytes) * t /
	    closed(c, a, kind, algo, p0, bytes);
}

static double
flat(const struct bench_cost *c, enum coll_kind kind, enum coll_algo algo,
    enum bench_link link, int p, double bytes)
{
	return flat_on(c, kind, algo, link, p, 1, 1, bytes);
}

/* A pass over bytes in memory (hier's packing copies): one shared-memory
 * message's bandwidth. */
static double
copy(const struct bench_cost *c, double bytes)
{
	const struct bench_ab *s = &c->link[BENCH_SHM];

	return bytes / (s->points > 0 ? s->beta : c->link[BENCH_TCP].beta);
}

/* coll_hier.c's allreduce takes the shares (ring reduce-scatter and
 * allgather in the host) on even hosts from some 32 KiB a step past the
 * leader's log2 l, else the leader's reduce, cross and broadcast. */
static int
hier_shares(int l, double bytes)
{
	int steps = l - 1;

	for (int q = 1; q < l; q *= 2)
		steps--;
	return bytes >= steps * 32768.0;
}

/* coll_hier.c's phases over h hosts of l ranks: within the host by shm,
 * across by tcp, the l cross groups at once on each host's link, and the
 * packing copies. */
static double
hier(const struct bench_cost *c, enum coll_kind kind, int h, int l,
    double bytes)
{
	double in, across;

	switch (kind) {
	case COLL_KIND_ALLREDUCE:
		if (!hier_shares(l, bytes))
			return flat_on(c, kind, COLL_TREE, BENCH_SHM, l, l, 1,
			    bytes) / 2 + flat(c, kind, COLL_AUTO, BENCH_TCP, h,
			    bytes) + flat(c, COLL_KIND_BROADCAST, COLL_AUTO,
			    BENCH_SHM, l, bytes);
		return flat(c, kind, COLL_RING, BENCH_SHM, l, bytes) +
		    flat_on(c, kind, COLL_AUTO, BENCH_TCP, h, 1, l, bytes / l);
	case COLL_KIND_ALLGATHER:
		in = flat(c, kind, COLL_AUTO, BENCH_SHM, l, bytes);
		across = flat_on(c, kind, COLL_AUTO, BENCH_TCP, h, 1, l,
		    bytes / l);
		return in + across + copy(c, bytes);
	case COLL_KIND_REDUCE_SCATTER:
		in = flat(c, kind, COLL_AUTO, BENCH_SHM, l, bytes);
		across = flat_on(c, kind, COLL_AUTO, BENCH_TCP, h, 1, l,
		    bytes / l);
		return copy(c, bytes) + in + across;
	default:
		return flat(c, kind, COLL_AUTO, BENCH_TCP, h, bytes) +
		    flat(c, kind, COLL_AUTO, BENCH_SHM, l, bytes);
	}
}

/* hier on one host: every phase within it, with the packing copies. */
static double
hier_one(const struct bench_cost *c, enum coll_kind kind, int p, double bytes)
{
	switch (kind) {
	case COLL_KIND_ALLREDUCE:
		if (hier_shares(p, bytes))
			return flat(c, kind, COLL_RING, BENCH_SHM, p, bytes);
		return flat(c, kind, COLL_TREE, BENCH_SHM, p, bytes) / 2 +
		    flat(c, COLL_KIND_BROADCAST, COLL_AUTO, BENCH_SHM, p,
		    bytes);
	case COLL_KIND_ALLGATHER:
	case COLL_KIND_REDUCE_SCATTER:
		return flat(c, kind, COLL_AUTO, BENCH_SHM, p, bytes) +
		    copy(c, bytes);
	default:
		return flat(c, kind, COLL_AUTO, BENCH_SHM, p, bytes);
	}
}

double
bench_cost_coll(const struct bench_cost *c, enum coll_kind kind,
    enum coll_algo algo, enum bench_link link, int p, int l, double bytes)
{
	const struct bench_ab *a;
	int h = l > 0 ? p / l : 1, p0, l0;
	double x;

	if (algo != COLL_HIER || (link == BENCH_TCP && h > 1 && l > 1))
		return algo == COLL_HIER ? hier(c, kind, h, l, bytes) :
		    flat_on(c, kind, algo, link, p, l, 1, bytes);
	if (link == BENCH_TCP)	/* one rank a host: cross alone */
		return flat_on(c, kind, COLL_AUTO, link, p, l, 1, bytes);
	if (p <= 1 || (int)kind >= BENCH_NKIND ||
	    (a = &c->coll[BENCH_SHM][kind][COLL_HIER])->nt < 2)
		return hier_one(c, kind, p, bytes);
	/* hier's own sweep, grown as its phases grow past its ends and to
	 * other worlds */
	sweep_place(c, a, BENCH_SHM, &p0, &l0);
	x = bytes < a->tb[0] ? a->tb[0] : bytes > a->tb[a->nt - 1] ?
	    a->tb[a->nt - 1] : bytes;
	return interp(a, x) * hier_one(c, kind, p, bytes) / hier_one(c, kind,
	    p0, x);
}

double
bench_cost_expect(const struct bench_cost *c, enum coll_kind kind,
    enum coll_algo algo, int w, int hosts, int tcp, double bytes)
{
	double steps, vol, red;
	int l = hosts > 0 ? w / hosts : w;

	if ((int)kind >= BENCH_NKIND)
		return -1;
	if (algo == COLL_AUTO && hosts > 1 && l > 1 && w % hosts == 0 &&
	    kind != COLL_KIND_ALLTOALL)
		algo = COLL_HIER;	/* coll_auto_group's choice */
	if (algo != COLL_HIER && algo != COLL_AUTO &&
	    bench_cost_shape(kind, algo, w, &steps, &vol, &red) < 0)
		return -1;
	return bench_cost_coll(c, kind, algo, tcp || hosts > 1 ? BENCH_TCP :
	    BENCH_SHM, w, l, bytes);
}

double
bench_cost_p2p(const struct bench_cost *c, enum bench_link link, double bytes)
{
	const struct bench_ab *a = &c->link[link];

	if (a->points == 0)
		a = &c->link[link == BENCH_SHM ? BENCH_TCP : BENCH_SHM];
	return a->alpha + bytes / a->beta;
}

/* The rate at a forward call of flops, log-linear between the fitted
 * sizes, the end rates beyond them. */
static double
mm_rate(const struct bench_cost *c, double flops)
{
	const struct bench_mm *m = c->mm;
	int i;

	if (flops <= m[0].flops)
		return m[0].rate;
	for (i = 1; i < c->nmm && m[i].flops < flops; i++)
		;
	if (i == c->nmm)
		return m[c->nmm - 1].rate;
	return m[i - 1].rate + (m[i].rate - m[i - 1].rate) *
	    (log(flops) - log(m[i - 1].flops)) /
	    (log(m[i].flops) - log(m[i - 1].flops));
}

double
bench_cost_linear(const struct bench_cost *c, double rows, double in,
    double out)
{
	double f = 2 * rows * in * out;

	/* forward 2 n i o, backward twice that (input and weight parts) */
	return f > 0 ? 3 * f / mm_rate(c, f) : 0;
}

void
bench_cost_line(const double *x, const double *t, int n, double *a,
    double *b)
{
	double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0, det;

	for (int i = 0; i < n; i++) {
		double w = 1 / (t[i] * t[i]);

		sw += w, sx += w * x[i], sy += w * t[i];
		sxx += w * x[i] * x[i], sxy += w * x[i] * t[i];
	}
	det = sw * sxx - sx * sx;
	*a = det != 0 ? (sxx * sy - sx * sxy) / det : sy / sw;
	*b = det != 0 ? (sw * sxy - sx * sy) / det : 0;
	if (*b < 0) {			/* no growth measured: the mean */
		*b = 0;
		*a = sy / sw;
	} else if (*a < 0) {		/* no fixed cost: through the origin */
		*a = 0;
		*b = sxy / sxx;
	}
}
