/*
 * test_fr: the flight recorder. On one rank: the ring keeps the last
 * COLLX_FR_SIZE operations in order, each queued, started (a wait of it
 * completed) and done, a sub-group's in its own sequence; the dump is
 * read back with lib/tensor's JSON reader. On three forked ranks: one
 * rank calling another collective than the others, and one that never
 * enters an operation, are named with the operation's sequence number by
 * launch_diagnose over the dumps the ranks wrote.
 */
#include <dirent.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cli/cli.h"
#include "comm/coll.h"
#include "launch/diagnose.h"
#include "ranks.h"
#include "tensor/json.h"
#include "unit.h"

#define MAXOPS 16

struct rd_op {
	uint64_t seq, group, bytes;
	char op[32], algo[32], state[16];
	double start, end;
};

struct rd {
	uint64_t rank, world, size, recorded;
	char job[32], reason[32];
	int error_null, ngroups, nops;
	uint64_t group_id[MAXOPS];
	struct rd_op ops[MAXOPS];
};

static int
rd_op_member(struct tensor_json *j, const char *key, void *arg)
{
	struct rd_op *o = arg;

	if (strcmp(key, "seq") == 0)
		return tensor_json_uint(j, &o->seq);
	if (strcmp(key, "group") == 0)
		return tensor_json_uint(j, &o->group);
	if (strcmp(key, "bytes") == 0)
		return tensor_json_uint(j, &o->bytes);
	if (strcmp(key, "op") == 0)
		return tensor_json_strbuf(j, o->op, sizeof o->op);
	if (strcmp(key, "algo") == 0)
		return tensor_json_strbuf(j, o->algo, sizeof o->algo);
	if (strcmp(key, "state") == 0)
		return tensor_json_strbuf(j, o->state, sizeof o->state);
	if (strcmp(key, "start") == 0)
		return tensor_json_number(j, &o->start);
	if (strcmp(key, "end") == 0) {
		o->end = -1;
		return tensor_json_null(j) ? 0 : tensor_json_number(j, &o->end);
	}
	return tensor_json_skip(j);
}

static int
rd_group_member(struct tensor_json *j, const char *key, void *arg)
{
	struct rd *d = arg;

	if (strcmp(key, "group") == 0)
		return tensor_json_uint(j, &d->group_id[d->ngroups - 1]);
	return tensor_json_skip(j);
}

/* Items of an array: ops or groups. */
static int
rd_items(struct tensor_json *j, struct rd *d, int ops)
{
	if (tensor_json_expect(j, '[') < 0)
		return -1;
	if (tensor_json_eat(j, ']'))
		return 0;
	do {
		int *n = ops ? &d->nops : &d->ngroups;
		if (*n >= MAXOPS)
			return tensor_json_fail(j, "too many");
		(*n)++;
		if ((ops ? tensor_json_object(j, rd_op_member, &d->ops[*n - 1]) :
		    tensor_json_object(j, rd_group_member, d)) < 0)
			return -1;
	} while (tensor_json_eat(j, ','));
	return tensor_json_expect(j, ']');
}

static int
rd_member(struct tensor_json *j, const char *key, void *arg)
{
	struct rd *d = arg;

	if (strcmp(key, "rank") == 0)
		return tensor_json_uint(j, &d->rank);
	if (strcmp(key, "world") == 0)
		return tensor_json_uint(j, &d->world);
	if (strcmp(key, "size") == 0)
		return tensor_json_uint(j, &d->size);
	if (strcmp(key, "recorded") == 0)
		return tensor_json_uint(j, &d->recorded);
	if (strcmp(key, "job") == 0)
		return tensor_json_strbuf(j, d->job, sizeof d->job);
	if (strcmp(key, "reason") == 0)
		return tensor_json_strbuf(j, d->reason, sizeof d->reason);
	if (strcmp(key, "error") == 0) {
		d->error_null = tensor_json_null(j);
		return d->error_null ? 0 : tensor_json_skip(j);
	}
	if (strcmp(key, "groups") == 0)
		return rd_items(j, d, 0);
	if (strcmp(key, "ops") == 0)
		return rd_items(j, d, 1);
	return tensor_json_skip(j);
}

/* The dump at path read into d; 0 or -1 (the reason as a TAP comment). */
static int
rd_read(const char *path, struct rd *d)
{
	char err[COLLX_ERRLEN], *buf;
	struct tensor_json j;
	size_t len;
	int rc;

	memset(d, 0, sizeof *d);
	if ((buf = cli_slurp(path, &len, err, sizeof err)) == NULL) {
		printf("# %s\n", err);
		return -1;
	}
	tensor_json_init(&j, buf, len, path, err, sizeof err);
	rc = tensor_json_object(&j, rd_member, d);
	if (rc == 0)
		rc = tensor_json_end(&j);
	if (rc < 0)
		printf("# %s\n", err);
	free(buf);
	return rc;
}

/* The dump's operations as "SEQ/GROUP:op:state ..." for comparison. */
static const char *
rd_ops(const struct rd *d)
{
	static char s[512];
	size_t n = 0;

	s[0] = '\0';
	for (int i = 0; i < d->nops && n < sizeof s; i++)
		n += (size_t)snprintf(s + n, sizeof s - n, "%s%llu/%llu:%s:%s",
		    i ? " " : "", (unsigned long long)d->ops[i].seq,
		    (unsigned long long)d->ops[i].group, d->ops[i].op,
		    d->ops[i].state);
	printf("# ops: %s\n", s);
	return s;
}

static int
entries(const char *dir)
{
	DIR *dp = opendir(dir);
	struct dirent *e;
	int n = 0;

	while (dp && (e = readdir(dp)) != NULL)
		n += e->d_name[0] != '.';
	if (dp)
		closedir(dp);
	return n;
}

static struct comm *
open_one(const char *job_id, char *err)
{
	struct comm_options o = { .rank = 0, .world = 1, .job = "test_fr",
	    .job_id = job_id };
	struct comm *c;

	return comm_open(&c, &o, err, COLLX_ERRLEN) < 0 ? NULL : c;
}

static void
test_ring(const char *dir)
{
	char err[COLLX_ERRLEN], path[512], x = 1, y = 0;
	float v[3] = { 1, 2, 3 };
	struct comm *c, *sub;
	struct rd d;
	int ok = 1;

	setenv("COLLX_FR_SIZE", "4", 1);
	setenv("COLLX_FR_DIR", dir, 1);
	snprintf(path, sizeof path, "%s/collx-fr.a_b.0.json", dir);
	if (!UNIT_OK((c = open_one("a/b", err)) != NULL, "open, COLLX_FR_SIZE=4"))
		return;
	for (int i = 0; i < 6; i++)
		ok &= coll_allreduce(c, v, 3, DT_F32, COLL_SUM, COLL_RING) == 0;
	UNIT_OK(ok && comm_fr_dump(c, "t1", err, sizeof err) == 0, "6 allreduces, dumped");
	UNIT_OK(entries(dir) == 1, "one file in the directory (no temporary left)");
	UNIT_OK(rd_read(path, &d) == 0, "the dump is JSON, named for job a/b as a_b");
	UNIT_OK(d.rank == 0 && d.world == 1 && d.size == 4 && d.recorded == 6 &&
	    strcmp(d.job, "a_b") == 0 && strcmp(d.reason, "t1") == 0 &&
	    d.error_null, "rank, world, size 4, 6 recorded, job, reason, no error");
	UNIT_OK(strcmp(rd_ops(&d), "3/0:allreduce:done 4/0:allreduce:done "
	    "5/0:allreduce:done 6/0:allreduce:done") == 0,
	    "the ring wrapped: the last 4 of 6, oldest first, done");
	UNIT_OK(strcmp(d.ops[3].algo, "ring") == 0 && d.ops[3].bytes == 12 &&
	    d.ops[3].end >= d.ops[3].start && d.ops[3].start > 1.7e9,
	    "algorithm, bytes (3 floats), Unix start <= end");

	comm_op_begin(c, 77, "mine", DT_U8, 0);
	comm_fr_dump(c, "t2", err, sizeof err);
	UNIT_OK(rd_read(path, &d) == 0 && d.nops == 4 && d.ops[3].seq == 7 &&
	    strcmp(d.ops[3].state, "queued") == 0 && d.ops[3].algo[0] == '\0' &&
	    d.ops[3].end == -1, "an operation begun: queued, no algorithm, no end");
	UNIT_OK(comm_sendrecv(c, 0, &x, 1, 0, &y, 1, 0) == 0 && y == 1,
	    "a message to self in it");
	comm_fr_dump(c, "t3", err, sizeof err);
	UNIT_OK(rd_read(path, &d) == 0 && strcmp(d.ops[3].state, "started") == 0,
	    "a wait of it completed: started");
	comm_op_end(c);
	comm_fr_dump(c, "t4", err, sizeof err);
	UNIT_OK(rd_read(path, &d) == 0 && strcmp(d.ops[3].state, "done") == 0 &&
	    d.ops[3].end >= d.ops[3].start, "comm_op_end: done");

	/* 8 never ended, then a split (9, its allgather) and the sub-group's
	 * own operation 1 */
	comm_op_begin(c, 78, "unended", DT_U8, 0);
	UNIT_OK(comm_split(c, 0, 0, &sub, err, sizeof err) == 0 &&
	    coll_barrier(sub) == 0, "a split and a barrier of the sub-group");
	comm_fr_dump(c, "t5", err, sizeof err);
	UNIT_OK(rd_read(path, &d) == 0 && strcmp(rd_ops(&d), "7/0:mine:done "
	    "8/0:unended:done 9/0:allgather:done 1/1:barrier:done") == 0,
	    "one never ended is done when the next begins; the sub-group "
	    "counts from 1 as group 1");
	UNIT_OK(d.ngroups == 2 && d.group_id[0] == 0 && d.group_id[1] == 1,
	    "both groups named");
	comm_close(sub);
	comm_close(c);
	unlink(path);

	setenv("COLLX_FR_SIZE", "0", 1);
	c = open_one("z", err);
	UNIT_OK(c != NULL && comm_fr_dump(c, "t", err, sizeof err) < 0 &&
	    entries(dir) == 0, "COLLX_FR_SIZE=0: no recorder, no dump");
	comm_close(c);
	setenv("COLLX_FR_SIZE", "12x", 1);
	c = open_one("z", err);
	UNIT_OK(c == NULL && strstr(err, "COLLX_FR_SIZE: '12x'") != NULL,
	    "COLLX_FR_SIZE=12x refused by name");
	printf("# %s\n", err);
	unsetenv("COLLX_FR_SIZE");
}

/* ---- three ranks ---- */

enum fault { CALLS_OTHER, NEVER_ENTERS };

struct world {
	char master[64];
	enum fault fault;
};

/* Five good allreduces, then at operation 6 rank 2 calls an allgather
 * (CALLS_OTHER) or dumps and waits out the others (NEVER_ENTERS); every
 * rank but that one expected to fail. */
static int
faulty_rank(int rank, int world, void *arg)
{
	const struct world *w = arg;
	struct comm_options o = { .rank = rank, .world = world,
	    .master = w->master, .timeout = 2, .job = "test_fr", .job_id = "mm" };
	float v[4] = { 1, 2, 3, 4 }, all[12];
	char err[COLLX_ERRLEN];
	struct comm *c;
	int rc;

	if (comm_open(&c, &o, err, sizeof err) < 0)
		return 10;
	for (int i = 0; i < 5; i++)
		if (coll_allreduce(c, v, 4, DT_F32, COLL_SUM, COLL_RING) < 0)
			return 11;
	if (rank == 2 && w->fault == NEVER_ENTERS) {
		rc = comm_fr_dump(c, "test", err, sizeof err) < 0;
		sleep(4);	/* the others time out */
		return rc;
	}
	if (rank == 2)
		rc = coll_allgather(c, v, all, 4, DT_F32, COLL_RING);
	else
		rc = coll_allreduce(c, v, 4, DT_F32, COLL_SUM, COLL_RING);
	comm_close(c);
	return rc == -1 ? 0 : 12;
}

/* The diagnosis of dir as text (in buf). */
static const char *
diagnosis(const char *dir, char *buf, size_t len)
{
	char err[COLLX_ERRLEN];
	FILE *f = tmpfile();
	size_t n;

	buf[0] = '\0';
	if (f == NULL || launch_diagnose(dir, f, err, sizeof err) != 0) {
		printf("# diagnose: %s\n", err);
		return buf;
	}
	rewind(f);
	n = fread(buf, 1, len - 1, f);
	buf[n] = '\0';
	fclose(f);
	for (char *l = buf, *e; *l; l = e + 1) {
		if ((e = strchr(l, '\n')) == NULL)
			break;
		printf("# | %.*s\n", (int)(e - l), l);
	}
	return buf;
}

static void
test_world(const char *dir, enum fault fault)
{
	struct world w = { .fault = fault };
	char path[512], text[4096];
	pid_t pid[3];
	int st[3];

	setenv("COLLX_FR_DIR", dir, 1);
	snprintf(w.master, sizeof w.master, "127.0.0.1:%d", unit_free_port(AF_INET));
	unit_fork_ranks(3, 30, faulty_rank, &w, pid);
	UNIT_OK(unit_wait_ranks(3, pid, st) == 0, fault == CALLS_OTHER ?
	    "rank 2 calls allgather at #6, the others allreduce: all fail" :
	    "rank 2 never enters #6: the others time out");
	for (int r = 0; r < 3; r++) {
		snprintf(path, sizeof path, "%s/collx-fr.mm.%d.json", dir, r);
		UNIT_OK(access(path, R_OK) == 0, "every rank's dump written");
	}
	diagnosis(dir, text, sizeof text);
	UNIT_OK(strstr(text, "job mm group 0: first unfinished operation #6 "
	    "allreduce (ring, 16 bytes)\n") != NULL,
	    "the diagnosis names operation #6");
	if (fault == CALLS_OTHER)
		UNIT_OK(strstr(text, "\ncalled another operation: 2\n") &&
		    strstr(text, "\nentered, not finished: 0 1 2\n") &&
		    strstr(text, "\nculprit: rank 2 (called another operation "
		    "there)\n"), "... and rank 2 as the one that called another");
	else
		UNIT_OK(strstr(text, "\nnever entered: 2\n") &&
		    strstr(text, "\nentered, not finished: 0 1\n") &&
		    strstr(text, "\nculprit: rank 2 (never entered it)\n"),
		    "... and rank 2 as the one that never entered it");
	for (int r = 0; r < 3; r++) {
		snprintf(path, sizeof path, "%s/collx-fr.mm.%d.json", dir, r);
		unlink(path);
	}
}

int
main(void)
{
	char dir[] = "/tmp/test_fr.XXXXXX";

	signal(SIGPIPE, SIG_IGN);
	if (!UNIT_OK(mkdtemp(dir) != NULL, "scratch directory"))
		return unit_done();
	test_ring(dir);
	test_world(dir, CALLS_OTHER);
	test_world(dir, NEVER_ENTERS);
	unit_rmdir(dir);
	return unit_done();
}
