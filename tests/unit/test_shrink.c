/*
 * test_shrink: comm_shrink over forked ranks on 127.0.0.1 (TCP links).
 * Ranks are killed with SIGKILL mid-run (one; one more during the
 * survivors' agreement; rank 0 after a first shrink); the survivors'
 * groups are checked against the ranks the test left alive, and an
 * allreduce on them against the closed form sum of (rank + 1) over those
 * ranks. Every rank runs under alarm() and a 2 s timeout: nothing hangs.
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
#define COUNT (1 << 18)		/* floats an allreduce: stripes in flight
				 * when a rank dies */

/* Who dies when: first before the second allreduce; late after its
 * failure, while the others agree; root_after: rank 0 after the first
 * shrink. -1: nobody. */
struct plan {
	int first, late, root_after;
	char master[64];
};

/* An allreduce of (world rank + 1) on c: 0 when it gave want, 1 when it
 * gave another sum, -1 when it failed. */
static int
sum_is(struct comm *c, float want)
{
	float *v = malloc(COUNT * sizeof *v);
	int i, rc = 0;

	for (i = 0; i < COUNT; i++)
		v[i] = (float)(comm_world_rank(c, comm_rank(c)) + 1);
	if (coll_allreduce(c, v, COUNT, DT_F32, COLL_SUM, COLL_RING) < 0)
		rc = -1;
	for (i = 0; rc == 0 && i < COUNT; i++)
		rc = v[i] != want;
	free(v);
	return rc;
}

/* The group after a shrink holds the world's ranks alive[] says, in
 * order: its members' (rank + 1) summed, or -1. */
static float
members_sum(struct comm *s, const int *alive, int world)
{
	int r, k = 0;
	float sum = 0;

	for (r = 0; r < world; r++) {
		if (!alive[r])
			continue;
		if (k >= comm_size(s) || comm_world_rank(s, k) != r)
			return -1;
		sum += (float)(r + 1);
		k++;
	}
	return k == comm_size(s) ? sum : -1;
}

static int
rank_main(int rank, int world, void *arg)
{
	const struct plan *p = arg;
	struct comm_options o = { .rank = rank, .world = world,
	    .master = p->master, .timeout = 2, .job = "test_shrink",
	    .no_shm = 1 };
	struct comm *c, *s, *s2;
	char err[COLLX_ERRLEN];
	int alive[MAXW], r, rc = 0, k;
	float want;

	if (comm_open(&c, &o, err, sizeof err) < 0)
		return unit_rank_fail(rank, __LINE__, err);
	for (r = 0; r < world; r++)
		alive[r] = r != p->first && r != p->late;
	if (sum_is(c, (float)(world * (world + 1) / 2)) != 0)
		return unit_rank_fail(rank, __LINE__, comm_error(c));
	if (rank == p->first)
		raise(SIGKILL);
	if (p->first >= 0 && sum_is(c, 0) != -1)
		return unit_rank_fail(rank, __LINE__, "an allreduce without a rank "
		    "did not fail");
	if (rank == p->late) {
		usleep(300000);
		raise(SIGKILL);
	}
	if (comm_shrink(c, &s, err, sizeof err) < 0)
		return unit_rank_fail(rank, __LINE__, err);
	want = members_sum(s, alive, world);
	if (!p->root_after && want < 0)
		return unit_rank_fail(rank, __LINE__, "not the survivors' group");
	if (!p->root_after && (rc = sum_is(s, want)) != 0)
		return unit_rank_fail(rank, __LINE__, rc < 0 ? comm_error(s) :
		    "a wrong sum");
	/* Rank 0 dies as soon as it has its group: maybe before the others
	 * have theirs, who then leave it out at once; else their next
	 * operation fails, and they shrink again, as users would. */
	for (k = 0; p->root_after; k++) {
		if (rank == 0)
			raise(SIGKILL);
		alive[0] = 0;
		want = members_sum(s, alive, world);
		if (want > 0 && (rc = sum_is(s, want)) == 0)
			break;
		if (want > 0 && rc > 0)
			return unit_rank_fail(rank, __LINE__, "a wrong sum");
		if (k == 2)
			return unit_rank_fail(rank, __LINE__, "rank 0 still there");
		if (comm_shrink(s, &s2, err, sizeof err) < 0)
			return unit_rank_fail(rank, __LINE__, err);
		comm_close(s);
		s = s2;
	}
	comm_close(s);
	comm_close(c);
	return 0;
}

/* Runs the plan on world ranks: whether every rank it kills ended by
 * SIGKILL and every other exited 0. */
static int
run(int world, struct plan p)
{
	pid_t pid[MAXW];
	int st[MAXW], r, ok = 1, dead;

	snprintf(p.master, sizeof p.master, "127.0.0.1:%d",
	    unit_free_port(AF_INET));
	unit_fork_ranks(world, 20, rank_main, &p, pid);
	unit_wait_ranks(world, pid, st);
	for (r = 0; r < world; r++) {
		dead = r == p.first || r == p.late || (p.root_after && r == 0);
		ok &= st[r] == (dead ? 128 + SIGKILL : 0);
		if (st[r] != (dead ? 128 + SIGKILL : 0))
			printf("# rank %d: status %d\n", r, st[r]);
	}
	return ok;
}

int
main(void)
{
	double t = cli_now();

	UNIT_OK(run(3, (struct plan){ -1, -1, 0, "" }),
	    "no death: every rank's shrink gives the whole group, which works");
	UNIT_OK(run(4, (struct plan){ 2, -1, 0, "" }),
	    "rank 2 of 4 killed mid-allreduce: 0, 1 and 3 agree, and sum");
	UNIT_OK(run(5, (struct plan){ 4, 3, 0, "" }),
	    "a second death during the agreement: 0, 1 and 2 start over, "
	    "agree, and sum");
	UNIT_OK(run(4, (struct plan){ 2, -1, 1, "" }),
	    "shrunk twice, rank 0 killed the second time: 1 and 3 go on");
	UNIT_OK(cli_now() - t < 30, "all within 30 s");
	return unit_done();
}
