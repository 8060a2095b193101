/* bench_plan_astra: a planned mesh as ASTRA-sim's inputs, written from
 * its documentation: the text workload of ASTRA-sim 1.0 (a parallelism
 * line, the layer count, then per layer its name, a reserved -1, and for
 * the forward pass, the input gradient and the weight gradient each a
 * compute time in cycles, a collective and its bytes, then the update's
 * delay), the system layer's JSON and the analytical network's
 * configuration, with the fitted links of this cluster: within a host
 * (shm) and across hosts (tcp). Cycles are nanoseconds (1 GHz). */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "bench/bench.h"
#include "bench/bench_plan.h"

static FILE *
open_in(const char *dir, const char *name, char *path, size_t len,
    char *err, size_t errlen)
{
	FILE *f;

	snprintf(path, len, "%s/%s", dir, name);
	if ((f = fopen(path, "w")) == NULL)
		cli_fail(err, errlen, "%s: %s", path, strerror(errno));
	return f;
}

static int
done(FILE *f, const char *path, char *err, size_t errlen)
{
	if (ferror(f) | (fclose(f) != 0))
		return cli_fail(err, errlen, "%s: %s", path, strerror(errno));
	return 0;
}

/* One line a layer: the step's compute split evenly over the layers and,
 * within a layer, over forward, input and weight gradients (a matmul's
 * backward is its forward twice over); TP's allreduces in the first two,
 * DP's in the third; the optimizer's share as the update delay. */
static int
workload(const struct bench_plan_opts *o, const struct bench_plan_row *r,
    const char *dir, char *err, size_t errlen)
{
	char path[4200];
	FILE *f = open_in(dir, "workload.txt", path, sizeof path, err, errlen);
	int L = o->dims.layers > 0 ? o->dims.layers : 1;
	double c = r->compute / L * 1e9 / 3, tp, dp;

	if (f == NULL)
		return -1;
	/* a replica's samples of the step: two allreduces of [t, d] a pass
	 * in a block, one of [b, dout] in an mlp layer */
	tp = (double)o->batch / r->dp * 4 * (o->dims.arch == NN_MLP ?
	    o->dims.d_out : 2.0 * o->dims.seq * o->dims.d_model);
	tp = r->tp > 1 ? tp : 0;
	dp = r->dp > 1 ? bench_plan_params(&o->dims) / r->tp / L * 4 : 0;
	fprintf(f, "%s\n%d\n", r->tp == 1 && r->pp == 1 ? "DATA" :
	    "HYBRID_TRANSFORMER", L);
	for (int i = 0; i < L; i++)
		fprintf(f, "layer%d -1 %.0f %s %.0f %.0f %s %.0f %.0f %s %.0f "
		    "%.0f\n", i, c, tp > 0 ? "ALLREDUCE" : "NONE", tp, c,
		    tp > 0 ? "ALLREDUCE" : "NONE", tp, c, dp > 0 ? "ALLREDUCE" :
		    "NONE", dp, 0.0);
	return done(f, path, err, errlen);
}

static int
system_json(const char *dir, char *err, size_t errlen)
{
	char path[4200];
	FILE *f = open_in(dir, "system.json", path, sizeof path, err, errlen);

	if (f == NULL)
		return -1;
	fprintf(f, "{\n  \"scheduling-policy\": \"LIFO\",\n"
	    "  \"endpoint-delay\": 10,\n  \"active-chunks-per-dimension\": 1,\n"
	    "  \"preferred-dataset-splits\": 4,\n"
	    "  \"all-reduce-implementation\": [\"ring\", \"ring\"],\n"
	    "  \"all-gather-implementation\": [\"ring\", \"ring\"],\n"
	    "  \"reduce-scatter-implementation\": [\"ring\", \"ring\"],\n"
	    "  \"all-to-all-implementation\": [\"direct\", \"direct\"],\n"
	    "  \"collective-optimization\": \"localBWAware\",\n"
	    "  \"local-reduction-delay\": 1\n}\n");
	return done(f, path, err, errlen);
}

static int
network_yml(const struct bench_plan_opts *o, const char *dir, char *err,
    size_t errlen)
{
	const struct bench_cost *c = o->cost;
	char path[4200];
	FILE *f = open_in(dir, "network.yml", path, sizeof path, err, errlen);
	const struct bench_ab *s = &c->link[BENCH_SHM];
	const struct bench_ab *t = &c->link[BENCH_TCP];

	if (f == NULL)
		return -1;
	if (s->points == 0)
		s = t;
	if (t->points == 0)
		t = s;
	fprintf(f, "topology-name: Hierarchical\ndimensions-count: 2\n"
	    "topologies-per-dim: [Ring, Switch]\n"
	    "dimension-type: [Node, Pod]\nunits-count: [%d, %d]\n"
	    "links-count: [1, 1]\nlink-latency: [%.0f, %.0f]\n"
	    "link-bandwidth: [%.3f, %.3f]\nnic-latency: [0, 0]\n"
	    "router-latency: [0, 0]\n", o->per_host, o->hosts,
	    s->alpha * 1e9, t->alpha * 1e9, s->beta / 1e9, t->beta / 1e9);
	return done(f, path, err, errlen);
}

int
bench_plan_astra(const struct bench_plan_opts *o,
    const struct bench_plan_row *r, const char *dir, char *err,
    size_t errlen)
{
	if (mkdir(dir, 0777) < 0 && errno != EEXIST)
		return cli_fail(err, errlen, "%s: %s", dir, strerror(errno));
	if (workload(o, r, dir, err, errlen) < 0 ||
	    system_json(dir, err, errlen) < 0 ||
	    network_yml(o, dir, err, errlen) < 0)
		return -1;
	return 0;
}
