/* diagnose: the flight recorder's dumps (lib/comm/fr.c) read with
 * lib/tensor's JSON reader, and the first operation of a group that some
 * ranks never entered or never finished found in them. A rank runs the
 * operations of one group one at a time, in order, so its newest record
 * of the group says it all: it finished every earlier one, and this one
 * if the record says done. */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "launch/diagnose.h"
#include "tensor/json.h"

enum { ST_QUEUED, ST_STARTED, ST_DONE };
static const char *const state_names[] = { "queued", "started", "done" };

struct fr_op {
	uint64_t seq, group, bytes;
	int state;
	char op[32], algo[32];
};

struct fr_group {
	uint64_t id;
	int n;
	int *ranks;
};

struct fr_dump {
	char *path, *job, *error;
	int rank, world, culprit, reporter;
	char why[16];		/* the failure's cause, "" when none */
	uint64_t size, recorded;
	int seen;		/* bits: 1 the format's key, 2 rank, 4 world */
	struct fr_group *groups;
	int ngroups;
	struct fr_op *ops;
	int nops;
};

/* A rank's place in one group's history. */
struct fr_where {
	const struct fr_dump *d;	/* NULL: no dump */
	const struct fr_op *last;	/* its newest record; NULL: none */
	uint64_t first_open;	/* the first operation not finished */
};

/* ---- reading ---- */

static int
get_uint(struct tensor_json *j, uint64_t max, uint64_t *v)
{
	if (tensor_json_uint(j, v) < 0)
		return -1;
	return *v > max ? tensor_json_fail(j, "%llu is out of range",
	    (unsigned long long)*v) : 0;
}

static int
get_int(struct tensor_json *j, int max, int *v)
{
	uint64_t u;

	if (get_uint(j, (uint64_t)max, &u) < 0)
		return -1;
	*v = (int)u;
	return 0;
}

/* A string, or null as NULL, malloc'd. */
static int
get_strdup(struct tensor_json *j, char **out)
{
	free(*out);
	*out = NULL;
	return tensor_json_null(j) ? 0 : tensor_json_string(j, out);
}

static int
cause_member(struct tensor_json *j, const char *key, void *arg)
{
	struct fr_dump *d = arg;

	if (strcmp(key, "why") == 0)
		return tensor_json_strbuf(j, d->why, sizeof d->why);
	if (strcmp(key, "culprit") == 0)
		return get_int(j, CLI_MAX_WORLD - 1, &d->culprit);
	if (strcmp(key, "reporter") == 0)
		return get_int(j, CLI_MAX_WORLD - 1, &d->reporter);
	return tensor_json_skip(j);
}

static int
group_rank(struct tensor_json *j, void *arg)
{
	struct fr_group *g = arg;

	g->ranks = cli_reallocarray(g->ranks, (size_t)g->n + 1,
	    sizeof *g->ranks);
	return get_int(j, CLI_MAX_WORLD - 1, &g->ranks[g->n++]);
}

static int
group_member(struct tensor_json *j, const char *key, void *arg)
{
	struct fr_group *g = arg;

	if (strcmp(key, "group") == 0)
		return get_uint(j, UINT32_MAX, &g->id);
	if (strcmp(key, "ranks") == 0)
		return tensor_json_array(j, group_rank, g);
	return tensor_json_skip(j);
}

static int
dump_group(struct tensor_json *j, void *arg)
{
	struct fr_dump *d = arg;
	struct fr_group *g;

	d->groups = cli_reallocarray(d->groups, (size_t)d->ngroups + 1,
	    sizeof *d->groups);
	g = memset(&d->groups[d->ngroups++], 0, sizeof *g);
	return tensor_json_object(j, group_member, g);
}

static int
op_member(struct tensor_json *j, const char *key, void *arg)
{
	struct fr_op *o = arg;
	char state[16];
	int i;

	if (strcmp(key, "seq") == 0)
		return get_uint(j, UINT32_MAX, &o->seq);
	if (strcmp(key, "group") == 0)
		return get_uint(j, UINT32_MAX, &o->group);
	if (strcmp(key, "bytes") == 0)
		return tensor_json_uint(j, &o->bytes);
	if (strcmp(key, "op") == 0)
		return tensor_json_strbuf(j, o->op, sizeof o->op);
	if (strcmp(key, "algo") == 0)
		return tensor_json_strbuf(j, o->algo, sizeof o->algo);
	if (strcmp(key, "state") != 0)
		return tensor_json_skip(j);
	if (tensor_json_strbuf(j, state, sizeof state) < 0)
		return -1;
	for (i = ST_QUEUED; i <= ST_DONE; i++)
		if (strcmp(state, state_names[i]) == 0) {
			o->state = i;
			return 0;
		}
	return tensor_json_fail(j, "unknown state \"%s\"", state);
}

static int
dump_op(struct tensor_json *j, void *arg)
{
	struct fr_dump *d = arg;
	struct fr_op *o;

	d->ops = cli_reallocarray(d->ops, (size_t)d->nops + 1, sizeof *d->ops);
	o = memset(&d->ops[d->nops++], 0, sizeof *o);
	o->state = -1;
	if (tensor_json_object(j, op_member, o) < 0)
		return -1;
	if (o->state < 0)
		return tensor_json_fail(j, "an operation without a state");
	return 0;
}

static int
dump_member(struct tensor_json *j, const char *key, void *arg)
{
	struct fr_dump *d = arg;

	if (strcmp(key, "collx_flight_recorder") == 0) {
		d->seen |= 1;
		return tensor_json_skip(j);
	}
	if (strcmp(key, "job") == 0)
		return get_strdup(j, &d->job);
	if (strcmp(key, "error") == 0)
		return get_strdup(j, &d->error);
	if (strcmp(key, "rank") == 0) {
		d->seen |= 2;
		return get_int(j, CLI_MAX_WORLD - 1, &d->rank);
	}
	if (strcmp(key, "world") == 0) {
		d->seen |= 4;
		return get_int(j, CLI_MAX_WORLD, &d->world);
	}
	if (strcmp(key, "size") == 0)
		return tensor_json_uint(j, &d->size);
	if (strcmp(key, "recorded") == 0)
		return tensor_json_uint(j, &d->recorded);
	if (strcmp(key, "cause") == 0)
		return tensor_json_null(j) ? 0 :
		    tensor_json_object(j, cause_member, d);
	if (strcmp(key, "groups") == 0)
		return tensor_json_array(j, dump_group, d);
	if (strcmp(key, "ops") == 0)
		return tensor_json_array(j, dump_op, d);
	return tensor_json_skip(j);
}

static void
dump_free(struct fr_dump *d)
{
	for (int g = 0; g < d->ngroups; g++)
		free(d->groups[g].ranks);
	free(d->groups);
	free(d->ops);
	free(d->job);
	free(d->error);
	free(d->path);
}

/* What a dump must say to be read: who wrote it, ranks within the world. */
static int
dump_check(const struct fr_dump *d, char *err, size_t errlen)
{
	if (d->seen != 7 || d->job == NULL)
		return cli_fail(err, errlen, "%s: not a collx flight recorder "
		    "dump (no collx_flight_recorder, job, rank or world)",
		    d->path);
	if (d->world < 1 || d->rank >= d->world)
		return cli_fail(err, errlen, "%s: rank %d is not within world "
		    "size %d", d->path, d->rank, d->world);
	for (int g = 0; g < d->ngroups; g++)
		for (int i = 0; i < d->groups[g].n; i++)
			if (d->groups[g].ranks[i] >= d->world)
				return cli_fail(err, errlen, "%s: group %llu "
				    "names rank %d of a world of %d", d->path,
				    (unsigned long long)d->groups[g].id,
				    d->groups[g].ranks[i], d->world);
	return 0;
}

static int
dump_read(struct fr_dump *d, char *err, size_t errlen)
{
	struct tensor_json j;
	size_t len;
	char *buf = cli_slurp(d->path, &len, err, errlen);
	int rc;

	if (buf == NULL)
		return CLI_EXIT_RUNTIME;
	d->culprit = d->reporter = -1;
	tensor_json_init(&j, buf, len, d->path, err, errlen);
	rc = tensor_json_object(&j, dump_member, d);
	if (rc == 0)
		rc = tensor_json_end(&j);
	if (rc == 0)
		rc = dump_check(d, err, errlen);
	free(buf);
	return rc < 0 ? CLI_EXIT_DATA : 0;
}

/* "collx-fr.JOB.RANK.json" */
static int
dump_name(const char *name)
{
	size_t n = strlen(name);

	return n >= 17 && strncmp(name, "collx-fr.", 9) == 0 &&
	    strcmp(name + n - 5, ".json") == 0;
}

static int
dump_cmp(const void *a, const void *b)
{
	const struct fr_dump *x = a, *y = b;
	int c = strcmp(x->job, y->job);

	return c != 0 ? c : (x->rank > y->rank) - (x->rank < y->rank);
}

/* Every dump of dir, by job and rank; 0 or an exit code. */
static int
dumps_read(const char *dir, struct fr_dump **out, int *n, char *err,
    size_t errlen)
{
	DIR *dp = opendir(dir);
	struct dirent *e;
	struct fr_dump *d = NULL;
	int rc = 0;

	*n = 0;
	*out = NULL;
	if (dp == NULL) {
		cli_fail(err, errlen, "%s: %s", dir, strerror(errno));
		return CLI_EXIT_RUNTIME;
	}
	while (rc == 0 && (e = readdir(dp)) != NULL) {
		if (!dump_name(e->d_name))
			continue;
		d = cli_reallocarray(d, (size_t)*n + 1, sizeof *d);
		memset(&d[*n], 0, sizeof *d);
		d[*n].path = cli_asprintf("%s/%s", dir, e->d_name);
		rc = dump_read(&d[(*n)++], err, errlen);
	}
	closedir(dp);
	if (rc == 0 && *n == 0) {
		cli_fail(err, errlen, "%s: no flight recorder dump "
		    "(collx-fr.JOB.RANK.json)", dir);
		rc = CLI_EXIT_RUNTIME;
	}
	if (rc == 0)
		qsort(d, (size_t)*n, sizeof *d, dump_cmp);
	*out = d;
	return rc;
}

/* ---- diagnosis ---- */

/* The dumps of one job: d[0 .. n-1], one per rank at most. */
struct fr_job {
	const struct fr_dump *d;
	int n, world;
	const struct fr_dump **of;	/* per rank: its dump or NULL */
};

static const struct fr_op *
newest(const struct fr_dump *d, uint64_t group, uint64_t seq_max)
{
	const struct fr_op *best = NULL;

	for (int i = 0; i < d->nops; i++)
		if (d->ops[i].group == group && d->ops[i].seq <= seq_max &&
		    (best == NULL || d->ops[i].seq > best->seq))
			best = &d->ops[i];
	return best;
}

/* "0 2 5" or "none" */
static void
print_ranks(FILE *out, const char *label, const int *r, int n)
{
	fprintf(out, "%s:", label);
	for (int i = 0; i < n; i++)
		fprintf(out, " %d", r[i]);
	fputs(n ? "\n" : " none\n", out);
}

/* What ranks called at seq: the reference (what most called) into *ref;
 * the ranks that called something else into other. */
static int
others_at(const struct fr_group *g, const struct fr_where *w, uint64_t seq,
    const struct fr_op **ref, int *other)
{
	const struct fr_op **at = cli_calloc((size_t)g->n, sizeof *at);
	int i, k, votes, best = 0, n = 0;

	for (i = 0; i < g->n; i++) {
		at[i] = w[i].d ? newest(w[i].d, g->id, seq) : NULL;
		if (at[i] != NULL && at[i]->seq != seq)
			at[i] = NULL;
	}
	*ref = NULL;
	for (i = 0; i < g->n; i++) {
		for (k = 0, votes = 0; at[i] && k < g->n; k++)
			votes += at[k] && strcmp(at[k]->op, at[i]->op) == 0 &&
			    at[k]->bytes == at[i]->bytes;
		if (votes > best) {
			best = votes;
			*ref = at[i];
		}
	}
	for (i = 0; *ref && i < g->n; i++)
		if (at[i] && (strcmp(at[i]->op, (*ref)->op) != 0 ||
		    at[i]->bytes != (*ref)->bytes))
			other[n++] = g->ranks[i];
	free(at);
	return n;
}

/* The error line: the text of the rank that found the failure, else the
 * lowest rank's. */
static const char *
job_error(const struct fr_job *jb)
{
	for (int i = 0; i < jb->n; i++)
		if (jb->d[i].error && jb->d[i].reporter == jb->d[i].rank)
			return jb->d[i].error;
	for (int i = 0; i < jb->n; i++)
		if (jb->d[i].error)
			return jb->d[i].error;
	return NULL;
}

/* The rank most failures name as their root cause, or -1. */
static int
job_culprit(const struct fr_job *jb)
{
	int best = -1, votes, most = 0;

	for (int i = 0; i < jb->n; i++) {
		if (jb->d[i].culprit < 0)
			continue;
		votes = 0;
		for (int k = 0; k < jb->n; k++)
			votes += jb->d[k].culprit == jb->d[i].culprit;
		if (votes > most) {
			most = votes;
			best = jb->d[i].culprit;
		}
	}
	return best;
}

struct verdict {
	uint64_t seq;
	const struct fr_op *ref;
	int *never, *open, *done, *nodump, *other;
	int nnever, nopen, ndone, nnodump, nother;
};

static void
blame(FILE *out, const struct fr_job *jb, const struct verdict *v)
{
	const int *who = v->other;
	int n = v->nother, one;
	const char *why;

	if (n > 0)
		why = "called another operation there";
	else if ((n = v->nnever) > 0) {
		who = v->never;
		why = "never entered it";
	} else if ((n = v->nnodump) > 0) {
		who = v->nodump;
		why = "left no dump: stopped, killed or hung";
	} else if ((one = job_culprit(jb)) >= 0) {
		who = &one;
		n = 1;
		why = "named by the failure";
	} else {
		fputs("culprit: unknown\n", out);
		return;
	}
	fprintf(out, "culprit: rank%s", n > 1 ? "s" : "");
	for (int i = 0; i < n; i++)
		fprintf(out, " %d", who[i]);
	fprintf(out, " (%s)\n", why);
}

static void
verdict_print(FILE *out, const struct fr_job *jb, const struct fr_group *g,
    const struct verdict *v)
{
	const char *e = job_error(jb);

	fprintf(out, "job %s group %llu:", jb->d->job,
	    (unsigned long long)g->id);
	fprintf(out, " first unfinished operation #%llu",
	    (unsigned long long)v->seq);
	if (v->ref != NULL) {
		fprintf(out, " %s", v->ref->op[0] ? v->ref->op : "?");
		if (v->ref->algo[0])
			fprintf(out, " (%s, %llu bytes)", v->ref->algo,
			    (unsigned long long)v->ref->bytes);
	}
	fputc('\n', out);
	print_ranks(out, "ranks", g->ranks, g->n);
	print_ranks(out, "never entered", v->never, v->nnever);
	print_ranks(out, "entered, not finished", v->open, v->nopen);
	print_ranks(out, "finished", v->done, v->ndone);
	print_ranks(out, "no dump", v->nodump, v->nnodump);
	print_ranks(out, "called another operation", v->other, v->nother);
	fprintf(out, "error: %s\n", e ? e : "none");
	blame(out, jb, v);
}

/* Each member's newest record of g; 1 when some rank has one not done
 * or the ranks' newest differ (g has an unfinished operation), else 0. */
static int
group_where(const struct fr_job *jb, const struct fr_group *g,
    struct fr_where *w, uint64_t *first)
{
	int open = 0, i;
	uint64_t lo = UINT64_MAX, hi = 0;

	for (i = 0; i < g->n; i++) {
		w[i].d = jb->of[g->ranks[i]];
		w[i].last = w[i].d ? newest(w[i].d, g->id, UINT64_MAX) : NULL;
		if (w[i].d == NULL)
			continue;
		if (w[i].last == NULL) {
			/* nothing of g: it entered none, unless the ring
			 * went round and lost them */
			w[i].first_open = w[i].d->recorded > w[i].d->size ?
			    UINT64_MAX : 1;
		} else
			w[i].first_open = w[i].last->seq +
			    (w[i].last->state == ST_DONE);
		if (w[i].first_open == UINT64_MAX)
			continue;
		open |= w[i].last && w[i].last->state != ST_DONE;
		lo = w[i].first_open < lo ? w[i].first_open : lo;
		hi = w[i].first_open > hi ? w[i].first_open : hi;
	}
	*first = lo;
	return lo != UINT64_MAX && (open || lo != hi);
}

/* 1 when g has an unfinished operation (printed), else 0. */
static int
group_diagnose(FILE *out, const struct fr_job *jb, const struct fr_group *g)
{
	struct fr_where *w = cli_calloc((size_t)g->n, sizeof *w);
	int *buf = cli_calloc(5 * (size_t)g->n, sizeof *buf), i, r;
	struct verdict v = { 0 };

	if (!group_where(jb, g, w, &v.seq)) {
		free(w);
		free(buf);
		return 0;
	}
	v.never = buf;
	v.open = buf + g->n;
	v.done = buf + 2 * g->n;
	v.nodump = buf + 3 * g->n;
	v.other = buf + 4 * g->n;
	for (i = 0; i < g->n; i++) {
		r = g->ranks[i];
		if (w[i].d == NULL || w[i].first_open == UINT64_MAX)
			v.nodump[v.nnodump++] = r;
		else if (w[i].last == NULL || w[i].last->seq < v.seq)
			v.never[v.nnever++] = r;
		else if (w[i].last->seq == v.seq && w[i].last->state != ST_DONE)
			v.open[v.nopen++] = r;
		else
			v.done[v.ndone++] = r;
	}
	v.nother = others_at(g, w, v.seq, &v.ref, v.other);
	verdict_print(out, jb, g, &v);
	free(w);
	free(buf);
	return 1;
}

static int
same_group(const struct fr_group *a, const struct fr_group *b)
{
	return a->id == b->id && a->n == b->n && memcmp(a->ranks, b->ranks,
	    (size_t)a->n * sizeof *a->ranks) == 0;
}

/* The job's groups: every dump's, each once (a group is its id and its
 * ranks: groups one split made share an id), the whole group first. */
static void
job_diagnose(FILE *out, const struct fr_job *jb)
{
	const struct fr_group *seen[256];
	int nseen = 0, found = 0, i, k, s;

	for (i = 0; i < jb->n && !found; i++)
		for (k = 0; k < jb->d[i].ngroups && !found; k++) {
			const struct fr_group *g = &jb->d[i].groups[k];
			for (s = 0; s < nseen && !same_group(seen[s], g); s++)
				;
			if (s < nseen || g->n == 0)
				continue;
			if (nseen < (int)(sizeof seen / sizeof seen[0]))
				seen[nseen++] = g;
			found = group_diagnose(out, jb, g);
		}
	if (!found)
		fprintf(out, "job %s: every operation recorded was finished by "
		    "every rank (%d dump%s of %d ranks)\n", jb->d->job, jb->n,
		    jb->n == 1 ? "" : "s", jb->world);
}

/* Ranks of one job, checked: one world size, one dump per rank. */
static int
job_make(struct fr_job *jb, const struct fr_dump *d, int n, char *err,
    size_t errlen)
{
	jb->d = d;
	jb->n = n;
	jb->world = d[0].world;
	jb->of = cli_calloc((size_t)jb->world, sizeof *jb->of);
	for (int i = 0; i < n; i++) {
		if (d[i].world != jb->world)
			return cli_fail(err, errlen, "%s: world size %d, but "
			    "%s says %d", d[i].path, d[i].world, d[0].path,
			    jb->world);
		if (jb->of[d[i].rank] != NULL)
			return cli_fail(err, errlen, "%s and %s: two dumps of "
			    "rank %d of job %s", jb->of[d[i].rank]->path,
			    d[i].path, d[i].rank, d[i].job);
		jb->of[d[i].rank] = &d[i];
	}
	return 0;
}

int
launch_diagnose(const char *dir, FILE *out, char *err, size_t errlen)
{
	struct fr_dump *d = NULL;
	struct fr_job jb = { 0 };
	int n, i, k, rc;

	rc = dumps_read(dir, &d, &n, err, errlen);
	for (i = 0; rc == 0 && i < n; i = k) {
		for (k = i + 1; k < n && strcmp(d[k].job, d[i].job) == 0; k++)
			;
		if (job_make(&jb, d + i, k - i, err, errlen) < 0)
			rc = CLI_EXIT_DATA;
		else
			job_diagnose(out, &jb);
		free(jb.of);
		jb.of = NULL;
	}
	for (i = 0; i < n; i++)
		dump_free(&d[i]);
	free(d);
	return rc;
}
