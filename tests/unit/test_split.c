/*
 * test_split: comm_split's sub-groups over forked ranks on 127.0.0.1.
 * Shapes and memberships are checked against closed forms, data against
 * sums computed here from the formula; every rank runs under alarm() and
 * the transport's timeout, so nothing hangs. The collective matrix on
 * sub-groups is test_coll's (world 6 split in two groups of 3).
 */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cli/util.h"
#include "comm/coll.h"
#include "ranks.h"
#include "unit.h"

#define MAXW 8

typedef int (*body_fn)(struct comm *c, const void *arg);

struct run {
	body_fn fn;
	const void *arg;
	char master[64];
	double timeout;
	const char *ifaces;
	int fd;			/* a rank's failure line goes here */
};

static int
say(int fd, int r, const char *what, const char *why)
{
	dprintf(fd, "rank %d: %s: %s\n", r, what, why);
	return 1;
}

static int
rank_main(int rank, int world, void *arg)
{
	const struct run *run = arg;
	struct comm_options o = { .rank = rank, .world = world,
	    .master = run->master, .timeout = run->timeout, .job = "test_split",
	    .ifaces = run->ifaces };
	struct comm *c;
	char err[COLLX_ERRLEN];
	int rc;

	if (comm_open(&c, &o, err, sizeof err) < 0)
		return say(run->fd, rank, "open", err);
	rc = run->fn(c, run->arg);
	if (rc != 0)
		say(run->fd, rank, "failed", comm_error(c));
	comm_close(c);
	return rc;
}

/* Runs fn on w ranks; st[r] their exit codes; failure lines echoed as
 * TAP comments (and kept in log when it is not NULL). */
static int
run_world(int w, body_fn fn, const void *arg, double timeout, const char *ifaces,
    int *st, char *log, size_t loglen)
{
	struct run run = { .fn = fn, .arg = arg, .timeout = timeout, .ifaces = ifaces };
	pid_t pid[MAXW];
	int fd;

	snprintf(run.master, sizeof run.master, "127.0.0.1:%d",
	    unit_free_port(AF_INET));
	if ((fd = unit_fork_reporting(w, 60, rank_main, &run, &run.fd, pid)) < 0)
		return -1;
	unit_echo_reports(fd, log, loglen);
	return unit_wait_ranks(w, pid, st);
}

/* ---- shapes: parity, reversed blocks, undefined ---- */

/* Checks sub's size and rank, then that an allgather of the parent ranks
 * over it lists want[0..size-1]. */
static int
check_sub(struct comm *sub, int size, int rank, const int *want)
{
	int32_t me, got[MAXW];

	if (sub == NULL || comm_size(sub) != size || comm_rank(sub) != rank)
		return -1;
	me = want[rank];
	if (coll_allgather(sub, &me, got, 1, DT_I32, COLL_AUTO) < 0)
		return -1;
	for (int i = 0; i < size; i++)
		if (got[i] != want[i])
			return -1;
	return 0;
}

static int
shapes_body(struct comm *c, const void *arg)
{
	int r = comm_rank(c), w = comm_size(c), want[MAXW], n, b, rc = 0;
	struct comm *par, *blk, *none;
	char err[COLLX_ERRLEN];

	(void)arg;
	/* parity, keys in rank order: group r%2 holds 2i + r%2 */
	if (comm_split(c, r % 2, r, &par, err, sizeof err) < 0)
		return 1;
	n = (w - r % 2 + 1) / 2;
	for (int i = 0; i < n; i++)
		want[i] = 2 * i + r % 2;
	rc |= check_sub(par, n, r / 2, want);
	/* blocks of 2, keys reversing the order: block b holds 2b+n-1-i */
	if (comm_split(c, r / 2, -r, &blk, err, sizeof err) < 0)
		return 1;
	b = r / 2;
	n = w - 2 * b < 2 ? w - 2 * b : 2;
	for (int i = 0; i < n; i++)
		want[i] = 2 * b + n - 1 - i;
	rc |= check_sub(blk, n, n - 1 - (r - 2 * b), want);
	/* the last rank stays out (negative color), the others all in, ranked
	 * by key 0 and then parent rank: */
	if (comm_split(c, r == w - 1 ? COMM_UNDEFINED : 7, 0, &none, err,
	    sizeof err) < 0)
		return 1;
	for (int i = 0; i < w - 1; i++)
		want[i] = i;
	if (r == w - 1)
		rc |= none != NULL ? -1 : 0;
	else
		rc |= check_sub(none, w - 1, r, want);
	/* the parent still works, with sub-groups open and after they are
	 * closed (when its receives read straight into posted buffers again) */
	int32_t s = r, t = r + 1;
	if (coll_allreduce(c, &s, 1, DT_I32, COLL_SUM, COLL_AUTO) < 0 ||
	    s != w * (w - 1) / 2)
		rc = -1;
	comm_close(none);
	comm_close(blk);
	comm_close(par);
	if (coll_allreduce(c, &t, 1, DT_I32, COLL_PROD, COLL_RING) < 0 ||
	    t != (w == 1 ? 1 : w == 4 ? 24 : w == 5 ? 120 : 720))
		rc = -1;
	return rc != 0;
}

static void
test_shapes(void)
{
	static const int worlds[] = { 1, 4, 5, 6 };

	for (size_t k = 0; k < sizeof worlds / sizeof worlds[0]; k++) {
		int w = worlds[k];
		char what[160];
		snprintf(what, sizeof what, "world %d: split by parity, by reversed "
		    "blocks of 2, and with one rank undefined: sizes, ranks and "
		    "members as the closed form says; undefined gets NULL", w);
		UNIT_OK(run_world(w, shapes_body, NULL, 10, NULL, NULL, NULL, 0) == 0, what);
	}
}

/* ---- a 2x2 mesh: rows and columns alternating with the whole ---- */

#define MESH_ITERS 150

/* Element i of rank r's vector at iteration it. */
static int32_t
mval(int r, int it, size_t i)
{
	return (int32_t)((r * 7 + it * 3 + (int)(i % 1009)) % 101);
}

/* Allreduce over the ranks listed, checked against the sum of mval. */
static int
mesh_reduce(struct comm *g, const int *members, int nm, int me, int it,
    size_t count, int32_t *buf, enum coll_algo algo)
{
	for (size_t i = 0; i < count; i++)
		buf[i] = mval(me, it, i);
	if (coll_allreduce(g, buf, count, DT_I32, COLL_SUM, algo) < 0)
		return -1;
	for (size_t i = 0; i < count; i++) {
		int32_t want = 0;
		for (int k = 0; k < nm; k++)
			want += mval(members[k], it, i);
		if (buf[i] != want)
			return -1;
	}
	return 0;
}

static int
mesh_body(struct comm *c, const void *arg)
{
	static const enum coll_algo algos[] = { COLL_RING, COLL_TREE, COLL_RD,
	    COLL_RABENSEIFNER, COLL_NAIVE, COLL_AUTO };
	static const size_t counts[] = { 1, 1000, 70001 };
	int r = comm_rank(c), row[2], col[2], all[4] = { 0, 1, 2, 3 }, rc = 0;
	struct comm *rg, *cg;
	char err[COLLX_ERRLEN];
	int32_t *buf = malloc(70001 * sizeof *buf);

	(void)arg;
	if (!buf || comm_split(c, r / 2, r, &rg, err, sizeof err) < 0 ||
	    comm_split(c, r % 2, r, &cg, err, sizeof err) < 0)
		return 1;
	row[0] = r / 2 * 2;
	row[1] = row[0] + 1;
	col[0] = r % 2;
	col[1] = col[0] + 2;
	for (int it = 0; it < MESH_ITERS && rc == 0; it++) {
		size_t n = counts[it % 3];
		enum coll_algo a = algos[it % 6];
		/* odd ranks take the column first, even ones the row */
		if (r % 2)
			rc = mesh_reduce(cg, col, 2, r, it, n, buf, a) < 0 ||
			    mesh_reduce(rg, row, 2, r, it + 1, n, buf, a) < 0;
		else
			rc = mesh_reduce(rg, row, 2, r, it + 1, n, buf, a) < 0 ||
			    mesh_reduce(cg, col, 2, r, it, n, buf, a) < 0;
		if (rc == 0 && it % 2)
			rc = mesh_reduce(c, all, 4, r, it + 2, n, buf, a) < 0;
	}
	free(buf);
	comm_close(cg);
	comm_close(rg);
	return rc;
}

static void
test_mesh(void)
{
	UNIT_OK(run_world(4, mesh_body, NULL, 20, NULL, NULL, NULL, 0) == 0,
	    "2x2 mesh: row and column allreduces (every algorithm, 1 to 70001 "
	    "elements) in different orders on different ranks, with allreduces "
	    "of the whole between: exact on every rank");
}

/* ---- unexpected messages ---- */

#define UX_LEN ((size_t)1 << 20)

static uint8_t
uxval(int which, size_t i)
{
	return (uint8_t)(which * 31 + i * 7 + i / 251);
}

/* Rank 0 sends a sub-group message (1 MiB, beyond the socket buffers)
 * and then one of the parent; rank 1 receives the parent's first. Only a
 * buffer for the sub-group's message keeps this from deadlocking. */
static int
ux_body(struct comm *c, const void *arg)
{
	int r = comm_rank(c), rc = 0;
	struct comm *sub;
	char err[COLLX_ERRLEN];
	uint8_t *a = malloc(UX_LEN), *b = malloc(UX_LEN);

	(void)arg;
	if (!a || !b || comm_split(c, 0, 0, &sub, err, sizeof err) < 0)
		return 1;
	if (r == 0) {
		for (size_t i = 0; i < UX_LEN; i++) {
			a[i] = uxval(1, i);
			b[i] = uxval(2, i);
		}
		rc = comm_send(sub, 1, 5, a, UX_LEN) < 0 ||
		    comm_send(c, 1, 6, b, UX_LEN / 2) < 0;
	} else if (r == 1) {
		rc = comm_recv(c, 0, 6, b, UX_LEN / 2) < 0 ||
		    comm_recv(sub, 0, 5, a, UX_LEN) < 0;
		for (size_t i = 0; rc == 0 && i < UX_LEN; i++)
			rc = a[i] != uxval(1, i) || (i < UX_LEN / 2 && b[i] != uxval(2, i));
	}
	/* and the other way round, each group's messages in its own order */
	if (rc == 0 && r < 2) {
		int32_t x[3] = { 10 + r, 20 + r, 30 + r }, y[3] = { 0, 0, 0 };
		struct comm_req q[3];
		int o = 1 - r;
		if (r == 1)
			rc = comm_isend(c, o, 1, &x[0], 4, &q[0]) < 0 ||
			    comm_isend(sub, o, 2, &x[1], 4, &q[1]) < 0 ||
			    comm_isend(c, o, 3, &x[2], 4, &q[2]) < 0;
		else	/* the sub-group's receive posted first */
			rc = comm_irecv(sub, o, 2, &y[1], 4, &q[1]) < 0 ||
			    comm_irecv(c, o, 1, &y[0], 4, &q[0]) < 0 ||
			    comm_irecv(c, o, 3, &y[2], 4, &q[2]) < 0;
		rc = rc || comm_waitall(c, q, 3) < 0;
		if (r == 0 && rc == 0)
			rc = y[0] != 11 || y[1] != 21 || y[2] != 31;
	}
	free(a);
	free(b);
	comm_close(sub);
	return rc;
}

static void
test_unexpected(void)
{
	UNIT_OK(run_world(3, ux_body, NULL, 10, NULL, NULL, NULL, 0) == 0,
	    "a sub-group's message sent before the parent's, received after it: "
	    "buffered, both arrive whole");
	UNIT_OK(run_world(2, ux_body, NULL, 10, "lo,lo", NULL, NULL, 0) == 0,
	    "the same over two streams (striped messages)");
}

/* ---- mismatch within a sub-group ---- */

static int
mismatch_body(struct comm *c, const void *arg)
{
	int r = comm_rank(c), w = comm_size(c);
	struct comm *sub;
	char err[COLLX_ERRLEN];
	float buf[16] = { 0 };

	(void)arg;
	if (comm_split(c, r % 2, -r, &sub, err, sizeof err) < 0)
		return 1;
	/* in the odd group, the last rank passes another count */
	if (coll_allreduce(sub, buf, r % 2 && r >= w - 2 ? 9 : 8, DT_F32,
	    COLL_SUM, COLL_RING) == 0)
		return r % 2 ? 2 : 0;	/* the even group is fine */
	comm_close(sub);
	return comm_errkind(c) == COMM_ERR_MISMATCH ? 3 : 4;
}

static void
test_mismatch(void)
{
	int st[MAXW];

	run_world(4, mismatch_body, NULL, 5, NULL, st, NULL, 0);
	UNIT_OK(st[1] == 3 && st[3] == 3,
	    "sub-group ranks passing different counts fail with a mismatch");
}

/* ---- a rank killed during a sub-group's collective ---- */

static int
kill_body(struct comm *c, const void *arg)
{
	int r = comm_rank(c);
	struct comm *sub;
	char err[COLLX_ERRLEN];
	int32_t *buf = calloc(50000, sizeof *buf);

	(void)arg;
	if (!buf || comm_split(c, r % 2, -r, &sub, err, sizeof err) < 0)
		return 1;
	for (int it = 0; it < 1000; it++) {
		if (r == 3 && it == 20)
			raise(SIGKILL);
		if (coll_allreduce(sub, buf, 50000, DT_I32, COLL_MAX, COLL_RING) < 0 ||
		    (it % 5 == 4 && coll_barrier(c) < 0)) {
			comm_close(sub);
			free(buf);
			return 1;
		}
	}
	return 0;
}

static void
test_kill(void)
{
	int st[MAXW], named = 0;
	char log[8192];
	double t0 = cli_now(), took;

	run_world(4, kill_body, NULL, 3, NULL, st, log, sizeof log);
	took = cli_now() - t0;
	for (int r = 0; r < 3; r++) {
		char key[64], *l;
		snprintf(key, sizeof key, "rank %d: failed: ", r);
		l = strstr(log, key);
		named += l && strstr(l, "peer rank 3 ") &&
		    strstr(l, "peer rank 3 ") < strchr(l, '\n');
	}
	UNIT_OK(st[0] == 1 && st[1] == 1 && st[2] == 1 && st[3] == 128 + SIGKILL,
	    "rank 3 killed in a sub-group allreduce: every other rank exits 1");
	UNIT_OK(named == 3, "each names the dead rank by its parent rank (3), "
	    "not its sub-group rank");
	UNIT_OK(took < 3 + 5, "within the timeout");
}

int
main(void)
{
	signal(SIGPIPE, SIG_IGN);
	test_shapes();
	test_mesh();
	test_unexpected();
	test_mismatch();
	test_kill();
	return unit_done();
}
