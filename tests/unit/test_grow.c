/*
 * test_grow: comm_grow over forked ranks on 127.0.0.1 (TCP links). A rank
 * is killed (SIGKILL) mid-run; the survivors shrink and go on, calling
 * comm_grow at each of their steps; the test starts the rank again
 * (comm_options.rejoin), and it is admitted: every rank's group is then
 * the whole world in rank order, and allreduces on it give the closed
 * form sum of (rank + 1). Killing rank 0 checks that another rank takes
 * the rendezvous address over. Every rank runs under alarm() and a 2 s
 * timeout: nothing hangs.
 */
#include <signal.h>
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
#define STEPS 200		/* a survivor's steps waiting for the rejoin */
#define AFTER 3			/* steps of all after it */

struct plan {
	int victim, rejoin;
	char master[64];
};

/* An allreduce of (world rank + 1) on c: 0 when it gave want. */
static int
sum_is(struct comm *c, float want)
{
	float v = (float)(comm_world_rank(c, comm_rank(c)) + 1);

	return coll_allreduce(c, &v, 1, DT_F32, COLL_SUM, COLL_AUTO) < 0 ||
	    v != want;
}

/* Whether c is the whole world, in rank order. */
static int
whole(struct comm *c, int world)
{
	int r;

	if (comm_size(c) != world)
		return 0;
	for (r = 0; r < world; r++)
		if (comm_world_rank(c, r) != r)
			return 0;
	return 1;
}

/* The steps after the rejoin, every rank alike: a grow that admits
 * nobody, and the whole world's sum. */
static int
steps_after(struct comm *c, int rank, int world)
{
	char err[COLLX_ERRLEN];
	struct comm *g;
	int k;

	for (k = 0; k < AFTER; k++) {
		if (comm_grow(c, &g, err, sizeof err) < 0)
			return unit_rank_fail(rank, __LINE__, err);
		if (g != NULL)
			return unit_rank_fail(rank, __LINE__, "a grow with nobody");
		if (sum_is(c, (float)(world * (world + 1) / 2)) != 0)
			return unit_rank_fail(rank, __LINE__, comm_error(c));
	}
	return 0;
}

static int
rank_main(int rank, int world, void *arg)
{
	const struct plan *p = arg;
	struct comm_options o = { .rank = rank, .world = world,
	    .master = p->master, .timeout = 2, .job = "test_grow",
	    .no_shm = 1, .grow = 1, .rejoin = p->rejoin };
	struct comm *c, *s, *g = NULL;
	char err[COLLX_ERRLEN];
	int k, rc;
	float all = (float)(world * (world + 1) / 2);

	if (comm_open(&c, &o, err, sizeof err) < 0)
		return unit_rank_fail(rank, __LINE__, err);
	if (p->rejoin) {
		if (!comm_rejoining(c) || comm_grow(c, &g, err,
		    sizeof err) < 0)
			return unit_rank_fail(rank, __LINE__, err);
		if (!whole(g, world) || sum_is(g, all) != 0)
			return unit_rank_fail(rank, __LINE__, "not the whole group");
		rc = steps_after(g, rank, world);
		comm_close(c);
		return rc;
	}
	if (comm_rejoining(c) || sum_is(c, all) != 0)
		return unit_rank_fail(rank, __LINE__, comm_error(c));
	if (rank == p->victim)
		raise(SIGKILL);
	if (sum_is(c, all) == 0)
		return unit_rank_fail(rank, __LINE__, "a sum without a rank");
	if (comm_shrink(c, &s, err, sizeof err) < 0)
		return unit_rank_fail(rank, __LINE__, err);
	for (k = 0; k < STEPS && g == NULL; k++) {
		if (comm_grow(s, &g, err, sizeof err) < 0)
			return unit_rank_fail(rank, __LINE__, err);
		if (g == NULL && sum_is(s, all - (float)(p->victim + 1)) != 0)
			return unit_rank_fail(rank, __LINE__, comm_error(s));
		usleep(10000);
	}
	if (g == NULL)
		return unit_rank_fail(rank, __LINE__, "nobody rejoined");
	if (!whole(g, world) || sum_is(g, all) != 0)
		return unit_rank_fail(rank, __LINE__, "not the whole group");
	comm_close(s);
	rc = steps_after(g, rank, world);
	comm_close(c);
	return rc;
}

/* world ranks, the victim killed and started again: whether it was
 * killed, and every rank, the one started again too, exited 0. */
static int
run(int world, int victim)
{
	struct plan p = { victim, 0, "" }, again;
	pid_t pid[MAXW], back;
	int st[MAXW], r, ok, status;

	snprintf(p.master, sizeof p.master, "127.0.0.1:%d",
	    unit_free_port(AF_INET));
	unit_fork_ranks(world, 20, rank_main, &p, pid);
	ok = waitpid(pid[victim], &status, 0) == pid[victim] &&
	    WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
	again = p;
	again.rejoin = 1;
	if ((back = fork()) == 0) {
		alarm(20);
		_exit(rank_main(victim, world, &again));
	}
	pid[victim] = back;
	unit_wait_ranks(world, pid, st);
	for (r = 0; r < world; r++) {
		ok &= st[r] == 0;
		if (st[r] != 0)
			printf("# rank %d: status %d\n", r, st[r]);
	}
	return ok;
}

int
main(void)
{
	double t = cli_now();

	UNIT_OK(run(4, 2), "rank 2 of 4 killed, started again: admitted "
	    "by the three left, all four sum");
	UNIT_OK(run(3, 0), "rank 0 of 3 killed, started again: another "
	    "rank serves the rendezvous address, it is admitted, all sum");
	UNIT_OK(cli_now() - t < 30, "all within 30 s");
	return unit_done();
}
