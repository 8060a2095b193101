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

/* The closed form's seconds for algo's counts on p ranks. */
static double
closed(const struct bench_cost *c, const struct bench_ab *a,
    enum coll_kind kind, enum coll_algo algo, int p, double bytes)
{
	double steps, vol, red;

	if (bench_cost_shape(kind, algo, p, &steps, &vol, &red) < 0)
		return -1;
	return steps * a->alpha + vol * bytes / a->beta +
	    red * bytes / c->gamma;
}

/* The sweep's time at bytes on its p0 ranks: log-log between the two
 * sizes around it; past either end, that end's time grown as the closed
 * form grows. */
static double
swept(const struct bench_cost *c, const struct bench_ab *a,
    enum coll_kind kind, enum coll_algo algo, int p0, double bytes)
{
	int i, n = a->nt;

	if (bytes <= a->tb[0] || bytes >= a->tb[n - 1]) {
		i = bytes <= a->tb[0] ? 0 : n - 1;
		return a->tt[i] * closed(c, a, kind, algo, p0, bytes) /
		    closed(c, a, kind, algo, p0, a->tb[i]);
	}
	for (i = 1; a->tb[i] < bytes; i++)
		;
	return exp(log(a->tt[i - 1]) + (log(a->tt[i]) - log(a->tt[i - 1])) *
	    (log(bytes) - log(a->tb[i - 1])) / (log(a->tb[i]) -
	    log(a->tb[i - 1])));
}

static double
flat(const struct bench_cost *c, enum coll_kind kind, enum coll_algo algo,
    enum bench_link link, int p, double bytes)
{
	const struct bench_ab *a;
	double t;

	if (p <= 1)
		return 0;
	if (algo == COLL_AUTO || algo == COLL_HIER)
		algo = coll_auto(kind, (size_t)bytes, p);
	a = constants(c, kind, algo, link);
	if ((t = closed(c, a, kind, algo, p, bytes)) < 0 || a->nt < 2 ||
	    a != &c->coll[link][kind][algo] || c->world < 2 || bytes <= 0)
		return t;
	/* measured at the fit's world, grown to p as the closed form grows */
	return swept(c, a, kind, algo, c->world, bytes) * t /
	    closed(c, a, kind, algo, c->world, bytes);
}

double
bench_cost_coll(const struct bench_cost *c, enum coll_kind kind,
    enum coll_algo algo, enum bench_link link, int p, int l, double bytes)
{
	int h = l > 0 ? p / l : 1;

	if (algo != COLL_HIER || h <= 1 || l <= 1)
		return flat(c, kind, algo, link, p, bytes);
	/* within each host to a 1/l share, across hosts, back within */
	switch (kind) {
	case COLL_KIND_ALLREDUCE:
		return flat(c, COLL_KIND_REDUCE_SCATTER, COLL_AUTO, BENCH_SHM,
		    l, bytes) + flat(c, kind, COLL_AUTO, BENCH_TCP, h,
		    bytes / l) + flat(c, COLL_KIND_ALLGATHER, COLL_AUTO,
		    BENCH_SHM, l, bytes);
	case COLL_KIND_ALLGATHER:
	case COLL_KIND_REDUCE_SCATTER:
		return flat(c, kind, COLL_AUTO, BENCH_SHM, l, bytes / h) +
		    flat(c, kind, COLL_AUTO, BENCH_TCP, h, bytes);
	default:
		return flat(c, kind, COLL_AUTO, BENCH_TCP, h, bytes) +
		    flat(c, kind, COLL_AUTO, BENCH_SHM, l, bytes);
	}
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
