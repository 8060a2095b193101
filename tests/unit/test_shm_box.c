/*
 * test_shm_box: the shared-memory fast box (shm.c), where a message of
 * at most 200 payload bytes skips the ring. Forked ranks on one host
 * exchange messages at the box's edges (empty, 1 byte, exactly the limit,
 * one byte over it, a large one through the ring and a small one right
 * after it), then a burst sent before the receiver reads, so that the
 * box fills and later messages take the ring behind it: every byte is
 * checked against the pattern it was sent with, so a message out of
 * order or cut fails. Each also with the group split, where headers are
 * read alone. Then a peer that puts its last message in the box and is
 * killed: the receiver gets the message, then a failure naming the
 * peer, whether it sleeps or spins while that happens.
 */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cli/util.h"
#include "comm/comm.h"
#include "ranks.h"
#include "unit.h"

#define BOX_MAX 200		/* shm.c's SHM_BOX_MAX */
#define BURST 48

static const size_t edges[] = {
	0, 1, 8, BOX_MAX - 1, BOX_MAX, BOX_MAX + 1, (1 << 20) + 3, 8, BOX_MAX,
	70000, 0, BOX_MAX + 1, 8
};
static const size_t burst[] = { 8, BOX_MAX, BOX_MAX + 1, 5000, 0, 70000 };

struct box_run {
	char master[64];
	int split;		/* 1: a sub-group open, receipt by group */
	int spin_us;		/* killed: rank 0's spin, 0: the default */
	int fd;
};

static uint8_t
pat(int from, int k, size_t i)
{
	return (uint8_t)(k * 131 + (int)(i % 251) * 7 + from * 29 + 1);
}

static void
fill(uint8_t *b, size_t len, int from, int k)
{
	for (size_t i = 0; i < len; i++)
		b[i] = pat(from, k, i);
}

/* The first byte of b that differs from what from sent as message k, or
 * -1 when none does. */
static long
differs(const uint8_t *b, size_t len, int from, int k)
{
	for (size_t i = 0; i < len; i++)
		if (b[i] != pat(from, k, i))
			return (long)i;
	return -1;
}

static int
say(int fd, int r, const char *what, const char *why)
{
	dprintf(fd, "rank %d: %s: %s\n", r, what, why);
	return 1;
}

static int
open_pair(const struct box_run *run, int rank, struct comm **c)
{
	struct comm_options o = { .rank = rank, .world = 2,
	    .master = run->master, .timeout = 5, .job = "test_shm_box" };
	char err[COLLX_ERRLEN];

	if (comm_open(c, &o, err, sizeof err) < 0)
		return say(run->fd, rank, "open", err);
	if (strcmp(comm_transport(*c, 1 - rank), "shm") != 0) {
		comm_close(*c);
		return say(run->fd, rank, "transport", "not shm");
	}
	return 0;
}

/* Each edge size there and back: rank 1 echoes what rank 0 sent. */
static int
ping_edges(struct comm *c, int me, uint8_t *buf, int fd)
{
	char why[96];
	long bad;

	for (int k = 0; k < (int)(sizeof edges / sizeof *edges); k++) {
		size_t len = edges[k];
		if (me == 0)
			fill(buf, len, 0, k);
		if ((me == 0 ? comm_send(c, 1, k, buf, len) : comm_recv(c, 0, k,
		    buf, len)) < 0 || (me == 0 ? comm_recv(c, 1, k, buf, len) :
		    comm_send(c, 0, k, buf, len)) < 0)
			return say(fd, me, "edges", comm_error(c));
		if ((bad = differs(buf, len, 0, k)) >= 0) {
			snprintf(why, sizeof why, "%zu bytes: byte %ld", len,
			    bad);
			return say(fd, me, "edges", why);
		}
	}
	return 0;
}

/* Rank 0 sends BURST messages, half of them before rank 1 reads any:
 * the first fills the box, the rest queue in the ring behind it. Rank 1
 * takes the first alone, which empties the box, and says so; rank 0 then
 * sends the other half while the ring still holds the first half's
 * unread: those must queue behind it, not take the empty box. */
static int
burst_order(struct comm *c, int me, uint8_t *buf, int fd)
{
	static struct comm_req rq[BURST];
	size_t off[BURST + 1] = { 0 };
	char why[96];
	long bad;
	int k;

	for (k = 0; k < BURST; k++)
		off[k + 1] = off[k] + burst[k % 6];
	for (k = 0; me == 0 && k < BURST; k++) {
		fill(buf + off[k], burst[k % 6], 0, k);
		if ((k == BURST / 2 && comm_recv(c, 1, BURST, NULL, 0) < 0) ||
		    comm_isend(c, 1, k, buf + off[k], burst[k % 6], &rq[k]) < 0)
			return say(fd, me, "burst", comm_error(c));
	}
	if (me == 1) {
		usleep(100 * 1000);
		if (comm_recv(c, 0, 0, buf, burst[0]) < 0 ||
		    comm_send(c, 0, BURST, NULL, 0) < 0)
			return say(fd, me, "burst", comm_error(c));
		usleep(100 * 1000);
	}
	for (k = 1; me == 1 && k < BURST; k++)
		if (comm_irecv(c, 0, k, buf + off[k], burst[k % 6], &rq[k]) < 0)
			return say(fd, me, "burst", comm_error(c));
	if (comm_waitall(c, rq + me, BURST - me) < 0)
		return say(fd, me, "burst", comm_error(c));
	for (k = 0; me == 1 && k < BURST; k++)
		if ((bad = differs(buf + off[k], burst[k % 6], 0, k)) >= 0) {
			snprintf(why, sizeof why, "message %d of %zu bytes: "
			    "byte %ld", k, burst[k % 6], bad);
			return say(fd, me, "burst", why);
		}
	return 0;
}

static int
rank_order(int rank, int world, void *arg)
{
	const struct box_run *run = arg;
	uint8_t *buf = malloc((size_t)4 << 20);
	struct comm *c, *sub = NULL;
	char err[COLLX_ERRLEN];
	int rc;

	(void)world;
	if (buf == NULL || (rc = open_pair(run, rank, &c)) != 0)
		return 1;
	if (run->split && comm_split(c, 0, rank, &sub, err, sizeof err) < 0)
		rc = say(run->fd, rank, "split", err);
	comm_op_begin(c, 1, "p2p", 0, 0);
	if (rc == 0)
		rc = ping_edges(c, rank, buf, run->fd);
	if (rc == 0)
		rc = burst_order(c, rank, buf, run->fd);
	comm_close(sub);
	comm_close(c);
	free(buf);
	return rc;
}

/* Rank 1 puts its last message in the box and is killed; rank 0 gets
 * the message, then fails naming rank 1, within the timeout. */
static int
rank_killed(int rank, int world, void *arg)
{
	const struct box_run *run = arg;
	uint8_t buf[8];
	struct comm *c;
	double t0;

	(void)world;
	if (open_pair(run, rank, &c) != 0)
		return 1;
	comm_op_begin(c, 1, "p2p", 0, 0);
	if (rank == 1) {
		usleep(300 * 1000);
		fill(buf, sizeof buf, 1, 0);
		if (comm_send(c, 0, 0, buf, sizeof buf) < 0)
			return say(run->fd, rank, "send", comm_error(c));
		raise(SIGKILL);
	}
	if (run->spin_us > 0)
		comm_set_spin(c, run->spin_us);
	t0 = cli_now();
	if (comm_recv(c, 1, 0, buf, sizeof buf) < 0)
		return say(run->fd, rank, "last message", comm_error(c));
	if (differs(buf, sizeof buf, 1, 0) >= 0)
		return say(run->fd, rank, "last message", "bytes differ");
	if (comm_recv(c, 1, 1, buf, sizeof buf) == 0)
		return say(run->fd, rank, "after death", "a receive worked");
	if (strstr(comm_error(c), "peer rank 1 (127.0.0.1:") == NULL ||
	    strstr(comm_error(c), "closed the connection") == NULL)
		return say(run->fd, rank, "after death", comm_error(c));
	if (cli_now() - t0 > 3)
		return say(run->fd, rank, "after death", "noticed too late");
	comm_close(c);
	return 0;
}

static int
run_pair(unit_rank_fn fn, struct box_run *run, int *st)
{
	pid_t pid[2];
	int fd;

	snprintf(run->master, sizeof run->master, "127.0.0.1:%d",
	    unit_free_port(AF_INET));
	if ((fd = unit_fork_reporting(2, 20, fn, run, &run->fd, pid)) < 0)
		return -1;
	unit_echo_reports(fd, NULL, 0);
	return unit_wait_ranks(2, pid, st);
}

int
main(void)
{
	struct box_run run = { .split = 0 };
	int st[2];

	setvbuf(stdout, NULL, _IOLBF, 0);
	unsetenv("COLLX_SHM");
	UNIT_OK(run_pair(rank_order, &run, st) == 0, "fast box: messages at "
	    "and around its limit, a small one after a large one, a burst "
	    "behind a full box, all whole and in order");
	run.split = 1;
	UNIT_OK(run_pair(rank_order, &run, st) == 0, "the same with the group "
	    "split (headers read alone)");
	run.split = 0;
	run_pair(rank_killed, &run, st);
	UNIT_OK(st[0] == 0 && st[1] == 128 + SIGKILL,
	    "a peer killed after its last message (in the box): the sleeping "
	    "receiver gets it, then fails naming the peer");
	run.spin_us = 1000 * 1000;
	run_pair(rank_killed, &run, st);
	UNIT_OK(st[0] == 0 && st[1] == 128 + SIGKILL,
	    "the same while the receiver spins");
	return unit_done();
}
