/* bench_cost_file: the cost model as JSON (collx-bench(1), FILES: every
 * field). Times in microseconds, rates in 10^9 units a second, so that a
 * reader sees the numbers nccl-tests and the OSU benchmarks print. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/bench.h"
#include "bench/bench_cost.h"
#include "tensor/json.h"

static void
put_ab(FILE *f, const struct bench_ab *a)
{
	fprintf(f, "{ \"alpha_us\": %.6g, \"gbps\": %.6g, \"points\": %d",
	    a->alpha * 1e6, a->beta / 1e9, a->points);
	if (a->ranks > 0)
		fprintf(f, ", \"ranks\": %d, \"hosts\": %d", a->ranks,
		    a->hosts);
	if (a->nt > 0) {
		fprintf(f, ",\n          \"sweep_bytes\": [");
		for (int i = 0; i < a->nt; i++)
			fprintf(f, "%s%.0f", i ? ", " : " ", a->tb[i]);
		fprintf(f, " ],\n          \"sweep_us\": [");
		for (int i = 0; i < a->nt; i++)
			fprintf(f, "%s%.6g", i ? ", " : " ", a->tt[i] * 1e6);
		fprintf(f, " ]");
	}
	fprintf(f, " }");
}

static void
put_colls(FILE *f, const struct bench_cost *c, enum bench_link l)
{
	const char *sep = "";

	fprintf(f, "    \"%s\": {", bench_link_name(l));
	for (int k = 0; k < BENCH_NKIND; k++) {
		const char *sep2 = "";
		int any = 0;

		for (int a = 0; a < COLL_ALGO_COUNT; a++)
			any |= c->coll[l][k][a].points > 0;
		if (!any)
			continue;
		fprintf(f, "%s\n      \"%s\": {", sep, bench_kind_name(k));
		for (int a = 0; a < COLL_ALGO_COUNT; a++) {
			if (c->coll[l][k][a].points == 0)
				continue;
			fprintf(f, "%s\n        \"%s\": ", sep2,
			    coll_algo_name(a));
			put_ab(f, &c->coll[l][k][a]);
			sep2 = ",";
		}
		fprintf(f, "\n      }");
		sep = ",";
	}
	fprintf(f, "\n    }");
}

int
bench_cost_write(const struct bench_cost *c, const char *path, char *err,
    size_t errlen)
{
	char *tmp = cli_asprintf("%s.tmp%ld", path, (long)getpid());
	FILE *f = strcmp(path, "-") == 0 ? stdout : fopen(tmp, "w");
	const char *sep = "";
	int bad;

	if (f == NULL) {
		cli_fail(err, errlen, "%s: %s", path, strerror(errno));
		free(tmp);
		return -1;
	}
	fprintf(f, "{\n  \"version\": %d,\n  \"tool\": \"collx-bench fit\",\n"
	    "  \"world\": %d,\n  \"hosts\": %d,\n  \"cores\": %d,\n"
	    "  \"machine_hosts\": %d,\n"
	    "  \"model\": { \"arch\": \"%s\", \"dims\": \"%s\" },\n"
	    "  \"reduce_gbps\": %.6g,\n  \"links\": {", c->version, c->world,
	    c->hosts, c->cores, c->machine_hosts > 1 ? c->machine_hosts : 1,
	    c->arch, c->dims, c->gamma / 1e9);
	for (int l = 0; l < BENCH_NLINK; l++) {
		if (c->link[l].points == 0)
			continue;
		fprintf(f, "%s\n    \"%s\": ", sep, bench_link_name(l));
		put_ab(f, &c->link[l]);
		sep = ",";
	}
	fprintf(f, "\n  },\n  \"collectives\": {\n");
	sep = "";
	for (int l = 0; l < BENCH_NLINK; l++) {
		if (c->link[l].points == 0)
			continue;
		fputs(sep, f);
		put_colls(f, c, l);
		sep = ",\n";
	}
	fprintf(f, "\n  },\n  \"compute\": {\n    \"matmul\": [");
	for (int i = 0; i < c->nmm; i++)
		fprintf(f, "%s\n      { \"mflop\": %.6g, \"gflops\": %.6g }",
		    i ? "," : "", c->mm[i].flops / 1e6, c->mm[i].rate / 1e9);
	fprintf(f, "\n    ],\n    \"attention_gflops\": %.6g,\n"
	    "    \"elementwise_gbps\": %.6g,\n    \"ranks\": %d\n  }\n}\n",
	    c->attn_rate / 1e9, c->elem_rate / 1e9, c->compute_ranks);
	if (f == stdout) {
		free(tmp);
		return fflush(f) == 0 ? 0 : cli_fail(err, errlen, "stdout: %s",
		    strerror(errno));
	}
	bad = ferror(f) | (fclose(f) != 0);
	if (bad || rename(tmp, path) < 0) {
		cli_fail(err, errlen, "%s: %s", path, strerror(errno));
		unlink(tmp);
		free(tmp);
		return -1;
	}
	free(tmp);
	return 0;
}

/* ---- reading ---- */

struct rd {
	struct bench_cost *c;
	int nb, nu;			/* sweep_bytes, sweep_us read */
	int have;			/* bits: which required fields came */
	int link, kind;			/* inside links/collectives */
	struct bench_ab *ab;
	double mflop, gflops;
	int mm_have;
};

enum { H_VERSION = 1, H_WORLD = 2, H_HOSTS = 4, H_REDUCE = 8, H_LINKS = 16,
	H_MATMUL = 32, H_ATTN = 64, H_ELEM = 128, H_CORES = 256, NFIELD = 9 };
static const char *const fields[NFIELD] = { "version", "world", "hosts",
	"reduce_gbps", "links", "compute.matmul", "compute.attention_gflops",
	"compute.elementwise_gbps", "cores" };

/* A positive number. */
static int
positive(struct tensor_json *j, const char *key, double *v)
{
	if (tensor_json_number(j, v) < 0)
		return -1;
	if (!(*v > 0))
		return tensor_json_fail(j, "%s: want a positive number", key);
	return 0;
}

static int
sweep_item(struct tensor_json *j, void *arg)
{
	struct rd *r = arg;
	int bytes = r->nu < 0;		/* which array: nu < 0 while bytes */
	int *n = bytes ? &r->nb : &r->nu;
	double v;

	if (*n == BENCH_COST_MAXPT)
		return tensor_json_fail(j, "sweep: more than %d sizes",
		    BENCH_COST_MAXPT);
	if (positive(j, bytes ? "sweep_bytes" : "sweep_us", &v) < 0)
		return -1;
	if (bytes && *n > 0 && v <= r->ab->tb[*n - 1])
		return tensor_json_fail(j, "sweep_bytes must ascend");
	(bytes ? r->ab->tb : r->ab->tt)[(*n)++] = bytes ? v : v / 1e6;
	return 0;
}

static int count(struct tensor_json *j, const char *key, int *out);

static int
ab_member(struct tensor_json *j, const char *key, void *arg)
{
	struct rd *r = arg;
	double v;

	if (strcmp(key, "sweep_bytes") == 0 || strcmp(key, "sweep_us") == 0) {
		int bytes = key[6] == 'b', keep = r->nu;

		if (bytes)
			r->nb = 0, r->nu = -1;
		else
			r->nu = 0;
		if (tensor_json_array(j, sweep_item, r) < 0)
			return -1;
		if (bytes)
			r->nu = keep;
		return 0;
	}
	if (strcmp(key, "alpha_us") == 0) {
		if (tensor_json_number(j, &v) < 0)
			return -1;
		if (v < 0)
			return tensor_json_fail(j, "alpha_us: negative");
		r->ab->alpha = v / 1e6;
		r->mm_have |= 1;
	} else if (strcmp(key, "gbps") == 0) {
		if (positive(j, key, &v) < 0)
			return -1;
		r->ab->beta = v * 1e9;
		r->mm_have |= 2;
	} else if (strcmp(key, "ranks") == 0) {
		return count(j, "ranks", &r->ab->ranks);
	} else if (strcmp(key, "hosts") == 0) {
		return count(j, "hosts", &r->ab->hosts);
	} else if (strcmp(key, "points") == 0) {
		uint64_t u;

		if (tensor_json_uint(j, &u) < 0)
			return -1;
		r->ab->points = u > 1000 ? 1000 : (int)u;
	} else
		return tensor_json_skip(j);
	return 0;
}

static int
read_ab(struct tensor_json *j, struct rd *r, struct bench_ab *ab,
    const char *what)
{
	r->ab = ab;
	r->mm_have = 0;
	r->nb = r->nu = 0;
	if (tensor_json_object(j, ab_member, r) < 0)
		return -1;
	if (r->mm_have != 3)
		return tensor_json_fail(j, "%s: missing %s", what,
		    r->mm_have & 1 ? "gbps" : "alpha_us");
	if (r->nb != r->nu)
		return tensor_json_fail(j, "%s: %d sweep_bytes but %d "
		    "sweep_us", what, r->nb, r->nu);
	ab->nt = r->nb;
	if (ab->points == 0)
		ab->points = 1;
	return 0;
}

static int
find(const char *key, const char *(*name)(int), int n)
{
	for (int i = 0; i < n; i++)
		if (strcmp(key, name(i)) == 0)
			return i;
	return -1;
}

static const char *link_name(int i) { return bench_link_name(i); }
static const char *kind_name(int i) { return bench_kind_name(i); }
static const char *algo_name(int i) { return coll_algo_name(i); }

static int
link_member(struct tensor_json *j, const char *key, void *arg)
{
	struct rd *r = arg;
	int l = find(key, link_name, BENCH_NLINK);

	if (l < 0)
		return tensor_json_fail(j, "links: unknown link class '%s'",
		    key);
	r->have |= H_LINKS;
	return read_ab(j, r, &r->c->link[l], key);
}

static int
algo_member(struct tensor_json *j, const char *key, void *arg)
{
	struct rd *r = arg;
	int a = find(key, algo_name, COLL_ALGO_COUNT);

	if (a < 0 || !coll_algo_valid(r->kind, a))
		return tensor_json_fail(j, "collectives: %s has no algorithm "
		    "'%s'", bench_kind_name(r->kind), key);
	return read_ab(j, r, &r->c->coll[r->link][r->kind][a], key);
}

static int
kind_member(struct tensor_json *j, const char *key, void *arg)
{
	struct rd *r = arg;

	if ((r->kind = find(key, kind_name, BENCH_NKIND)) < 0)
		return tensor_json_fail(j, "collectives: unknown collective "
		    "'%s'", key);
	return tensor_json_object(j, algo_member, r);
}

static int
coll_member(struct tensor_json *j, const char *key, void *arg)
{
	struct rd *r = arg;

	if ((r->link = find(key, link_name, BENCH_NLINK)) < 0)
		return tensor_json_fail(j, "collectives: unknown link class "
		    "'%s'", key);
	return tensor_json_object(j, kind_member, r);
}

static int
mm_member(struct tensor_json *j, const char *key, void *arg)
{
	struct rd *r = arg;

	if (strcmp(key, "mflop") == 0) {
		r->mm_have |= 1;
		return positive(j, key, &r->mflop);
	}
	if (strcmp(key, "gflops") == 0) {
		r->mm_have |= 2;
		return positive(j, key, &r->gflops);
	}
	return tensor_json_skip(j);
}

static int
mm_item(struct tensor_json *j, void *arg)
{
	struct rd *r = arg;
	struct bench_cost *c = r->c;

	r->mm_have = 0;
	if (tensor_json_object(j, mm_member, r) < 0)
		return -1;
	if (r->mm_have != 3)
		return tensor_json_fail(j, "compute.matmul: an entry lacks %s",
		    r->mm_have & 1 ? "gflops" : "mflop");
	if (c->nmm == BENCH_COST_MAXMM)
		return tensor_json_fail(j, "compute.matmul: more than %d "
		    "entries", BENCH_COST_MAXMM);
	if (c->nmm > 0 && r->mflop * 1e6 <= c->mm[c->nmm - 1].flops)
		return tensor_json_fail(j, "compute.matmul: mflop must ascend");
	c->mm[c->nmm].flops = r->mflop * 1e6;
	c->mm[c->nmm++].rate = r->gflops * 1e9;
	return 0;
}

static int
compute_member(struct tensor_json *j, const char *key, void *arg)
{
	struct rd *r = arg;
	double v;

	if (strcmp(key, "matmul") == 0) {
		if (tensor_json_array(j, mm_item, r) < 0)
			return -1;
		if (r->c->nmm > 0)
			r->have |= H_MATMUL;
		return 0;
	}
	if (strcmp(key, "attention_gflops") == 0) {
		r->have |= H_ATTN;
		if (positive(j, key, &v) < 0)
			return -1;
		r->c->attn_rate = v * 1e9;
		return 0;
	}
	if (strcmp(key, "ranks") == 0)
		return count(j, "compute.ranks", &r->c->compute_ranks);
	if (strcmp(key, "elementwise_gbps") == 0) {
		r->have |= H_ELEM;
		if (positive(j, key, &v) < 0)
			return -1;
		r->c->elem_rate = v * 1e9;
		return 0;
	}
	return tensor_json_skip(j);
}

static int
model_member(struct tensor_json *j, const char *key, void *arg)
{
	struct rd *r = arg;

	if (strcmp(key, "arch") == 0)
		return tensor_json_strbuf(j, r->c->arch, sizeof r->c->arch);
	if (strcmp(key, "dims") == 0)
		return tensor_json_strbuf(j, r->c->dims, sizeof r->c->dims);
	return tensor_json_skip(j);
}

static int
count(struct tensor_json *j, const char *key, int *out)
{
	uint64_t u;

	if (tensor_json_uint(j, &u) < 0)
		return -1;
	if (u < 1 || u > 1 << 24)
		return tensor_json_fail(j, "%s: want 1 to %d", key, 1 << 24);
	*out = (int)u;
	return 0;
}

static int
top_member(struct tensor_json *j, const char *key, void *arg)
{
	struct rd *r = arg;
	double v;

	if (strcmp(key, "version") == 0) {
		r->have |= H_VERSION;
		return count(j, key, &r->c->version);
	}
	if (strcmp(key, "world") == 0) {
		r->have |= H_WORLD;
		return count(j, key, &r->c->world);
	}
	if (strcmp(key, "hosts") == 0) {
		r->have |= H_HOSTS;
		return count(j, key, &r->c->hosts);
	}
	if (strcmp(key, "cores") == 0) {
		r->have |= H_CORES;
		return count(j, key, &r->c->cores);
	}
	if (strcmp(key, "machine_hosts") == 0)	/* optional: 1 */
		return count(j, key, &r->c->machine_hosts);
	if (strcmp(key, "reduce_gbps") == 0) {
		r->have |= H_REDUCE;
		if (positive(j, key, &v) < 0)
			return -1;
		r->c->gamma = v * 1e9;
		return 0;
	}
	if (strcmp(key, "links") == 0)
		return tensor_json_object(j, link_member, r);
	if (strcmp(key, "collectives") == 0)
		return tensor_json_object(j, coll_member, r);
	if (strcmp(key, "compute") == 0)
		return tensor_json_object(j, compute_member, r);
	if (strcmp(key, "model") == 0)
		return tensor_json_object(j, model_member, r);
	return tensor_json_skip(j);
}

int
bench_cost_parse(struct bench_cost *c, const char *text, size_t len,
    const char *name, char *err, size_t errlen)
{
	struct tensor_json j;
	struct rd r = { .c = c };
	int rc;

	memset(c, 0, sizeof *c);
	tensor_json_init(&j, text, len, name, err, errlen);
	c->compute_ranks = c->machine_hosts = 1;
	rc = tensor_json_object(&j, top_member, &r);
	if (rc == 0)
		rc = tensor_json_end(&j);
	if (rc < 0)
		return -1;
	if ((r.have & H_VERSION) && c->version != BENCH_COST_VERSION)
		return cli_fail(err, errlen, "%s: version %d, this collx-bench "
		    "reads version %d (fit it again)", name, c->version,
		    BENCH_COST_VERSION);
	for (int i = 0; i < NFIELD; i++)
		if (!(r.have & 1 << i))
			return cli_fail(err, errlen, "%s: missing field %s",
			    name, fields[i]);
	return 0;
}

int
bench_cost_read(struct bench_cost *c, const char *path, char *err,
    size_t errlen)
{
	size_t len;
	char *text = cli_slurp(path, &len, err, errlen);
	int rc;

	if (text == NULL)
		return -1;
	rc = bench_cost_parse(c, text, len, path, err, errlen);
	free(text);
	return rc;
}
