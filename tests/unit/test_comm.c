/* comm: rendezvous, mesh and point-to-point between forked ranks on
 * loopback. Each child opens a comm, runs a scenario and exits 0 when
 * everything it saw was right (anything else: a code and a line on
 * stderr). Every child runs under alarm(), so nothing hangs. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "comm/auth.h"
#include "comm/comm.h"
#include "comm/sock.h"
#include "ranks.h"
#include "unit.h"

#define MAXW 8

typedef int (*scenario)(struct comm_options *o, const void *arg);

static struct comm_options base;
static char master[64];

static void
set_master(int family)
{
	snprintf(master, sizeof master, family == AF_INET6 ? "[::1]:%d" : "127.0.0.1:%d",
	    unit_free_port(family));
	memset(&base, 0, sizeof base);
	base.master = master;
	base.timeout = 10;
	base.job = "test-job";
}

struct scenario_run {
	scenario fn;
	const void *arg;
};

static int
scenario_rank(int rank, int world, void *arg)
{
	const struct scenario_run *run = arg;
	struct comm_options o = base;

	o.rank = rank;
	o.world = world;
	return run->fn(&o, run->arg);
}

/* Fork world ranks running fn; st[r] = exit code, or 128 + signal. */
static void
run_ranks(int world, scenario fn, const void *arg, int *st)
{
	struct scenario_run run = { fn, arg };
	pid_t pid[MAXW];

	unit_fork_ranks(world, 30, scenario_rank, &run, pid);
	unit_wait_ranks(world, pid, st);
}

static int
all_zero(const int *st, int n)
{
	int i;

	for (i = 0; i < n; i++)
		if (st[i] != 0)
			return 0;
	return 1;
}

/* Child-side check: print why and return a failure code. */
#define EXPECT(cond, code, ...) do { if (!(cond)) { \
	fprintf(stderr, "# rank %d: line %d: ", o->rank, __LINE__); \
	fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); return (code); } } while (0)

static int
open_comm(struct comm_options *o, struct comm **c)
{
	char err[512];

	if (comm_open(c, o, err, sizeof err) < 0) {
		fprintf(stderr, "# rank %d: comm_open: %s\n", o->rank, err);
		return 20;
	}
	return 0;
}

static int32_t
ring_val(int rank, size_t i)
{
	return (int32_t)(rank * 1000003 + (int32_t)i);
}

/* Ring exchange of n rank-valued int32 (arg: size_t *n). */
static int
sc_ring(struct comm_options *o, const void *arg)
{
	size_t n = *(const size_t *)arg, i;
	int w = o->world, next = (o->rank + 1) % w, prev = (o->rank + w - 1) % w;
	int32_t *s = malloc(n * 4 + 4), *r = malloc(n * 4 + 4);
	struct comm *c;
	int rc;

	if (o->rank == 0)	/* the others must wait for rank 0 to listen */
		nanosleep(&(struct timespec){ 0, 300000000 }, NULL);
	if ((rc = open_comm(o, &c)))
		return rc;
	EXPECT(comm_rank(c) == o->rank && comm_size(c) == w, 21, "rank/size");
	EXPECT(w == 1 || strncmp(comm_peer_addr(c, prev), master[0] == '[' ?
	    "[::1]:" : "127.0.0.1:", 6) == 0, 22, "peer address %s", comm_peer_addr(c, prev));
	for (i = 0; i < n; i++)
		s[i] = ring_val(o->rank, i);
	EXPECT(comm_sendrecv(c, next, s, n * 4, prev, r, n * 4, 5) == 0, 23, "%s",
	    comm_error(c));
	for (i = 0; i < n; i++)
		EXPECT(r[i] == ring_val(prev, i), 24, "element %zu: %d", i, r[i]);
	comm_close(c);
	free(s);
	free(r);
	return 0;
}

static uint8_t
pat(int src, int dst, int round, size_t i)
{
	return (uint8_t)(src * 31 + dst * 17 + round * 7 + i);
}

static size_t scale = 1;

static size_t
pair_len(int src, int dst, int round)
{
	/* some are 0 */
	return (size_t)((src * 7 + dst * 3 + round) % 5) * 20011 * scale;
}

/* Every rank sends to and receives from every rank, self included, all at
 * once, three rounds in flight together. */
static int
sc_all_to_all(struct comm_options *o, const void *arg)
{
	enum { ROUNDS = 3 };
	int w = o->world, me = o->rank, p, k, n = 0, rc;
	struct comm_req req[2 * MAXW * ROUNDS];
	uint8_t *sb[MAXW][ROUNDS], *rb[MAXW][ROUNDS];
	struct comm *c;
	size_t i;

	(void)arg;
	if ((rc = open_comm(o, &c)))
		return rc;
	for (k = 0; k < ROUNDS; k++)
		for (p = 0; p < w; p++) {
			sb[p][k] = malloc(pair_len(me, p, k) + 1);
			rb[p][k] = malloc(pair_len(p, me, k) + 1);
			for (i = 0; i < pair_len(me, p, k); i++)
				sb[p][k][i] = pat(me, p, k, i);
			EXPECT(comm_irecv(c, p, k, rb[p][k], pair_len(p, me, k), &req[n++]) == 0,
			    21, "%s", comm_error(c));
			EXPECT(comm_isend(c, p, k, sb[p][k], pair_len(me, p, k), &req[n++]) == 0,
			    22, "%s", comm_error(c));
		}
	EXPECT(comm_waitall(c, req, n) == 0, 23, "%s", comm_error(c));
	for (k = 0; k < ROUNDS; k++)
		for (p = 0; p < w; p++) {
			for (i = 0; i < pair_len(p, me, k); i++)
				EXPECT(rb[p][k][i] == pat(p, me, k, i), 24, "from %d round %d byte %zu",
				    p, k, i);
			free(sb[p][k]);
			free(rb[p][k]);
		}
	comm_close(c);
	return 0;
}

/* Two ranks: zero-length messages, then len bytes both ways at once. */
static int
sc_big(struct comm_options *o, const void *arg)
{
	size_t len = *(const size_t *)arg, i, n = len / 4;
	uint32_t *s = malloc(len), *r = malloc(len);
	int peer = 1 - o->rank, rc;
	struct comm *c;

	if ((rc = open_comm(o, &c)))
		return rc;
	EXPECT(comm_sendrecv(c, peer, NULL, 0, peer, NULL, 0, 1) == 0, 21, "%s",
	    comm_error(c));
	for (i = 0; i < n; i++)
		s[i] = (uint32_t)i * 2654435761u + (uint32_t)o->rank;
	memset(r, 0, len);
	EXPECT(comm_sendrecv(c, peer, s, len, peer, r, len, 2) == 0, 22, "%s",
	    comm_error(c));
	for (i = 0; i < n; i++)
		EXPECT(r[i] == (uint32_t)i * 2654435761u + (uint32_t)peer, 23, "word %zu", i);
	if (o->rank == 0)
		EXPECT(comm_send(c, 1, 3, NULL, 0) == 0, 24, "%s", comm_error(c));
	else
		EXPECT(comm_recv(c, 0, 3, NULL, 0) == 0, 24, "%s", comm_error(c));
	comm_close(c);
	free(s);
	free(r);
	return 0;
}

/* Ring over two streams: striped and unstriped sizes, odd lengths. */
static int
sc_striped(struct comm_options *o, const void *arg)
{
	static const size_t sizes[] = { 4 << 20, 3, 300001, 0, (256 << 10) + 1, 1 << 20 };
	int w = o->world, next = (o->rank + 1) % w, prev = (o->rank + w - 1) % w, k, rc;
	struct comm *c;
	size_t i;

	(void)arg;
	if ((rc = open_comm(o, &c)))
		return rc;
	EXPECT(comm_streams(c) == 2, 21, "%d streams", comm_streams(c));
	for (k = 0; k < (int)(sizeof sizes / sizeof sizes[0]); k++) {
		uint8_t *s = malloc(sizes[k] + 1), *r = malloc(sizes[k] + 1);
		for (i = 0; i < sizes[k]; i++)
			s[i] = pat(o->rank, next, k, i);
		EXPECT(comm_sendrecv(c, next, s, sizes[k], prev, r, sizes[k], k) == 0, 22,
		    "%s", comm_error(c));
		for (i = 0; i < sizes[k]; i++)
			EXPECT(r[i] == pat(prev, o->rank, k, i), 23, "size %zu byte %zu", sizes[k], i);
		free(s);
		free(r);
	}
	comm_close(c);
	return 0;
}

/* Rank 0 sends what rank 1 does not expect (arg: which field differs);
 * rank 1 must report a mismatch naming rank 0, and rank 0 then sees
 * rank 1 go away. */
static int
sc_mismatch(struct comm_options *o, const void *arg)
{
	int what = *(const int *)arg, me = o->rank, rc;
	char buf[256] = { 0 };
	struct comm *c;

	if ((rc = open_comm(o, &c)))
		return rc;
	comm_op_begin(c, what == 1 && me == 0 ? 2 : 1, what == 1 && me == 0 ?
	    "broadcast" : "allreduce", what == 2 && me == 0 ? 1 : 0, 42);
	comm_set_step(c, "ring step 0");
	if (me == 0) {
		EXPECT(comm_send(c, 1, 0, buf, 128) == 0, 21, "%s", comm_error(c));
		EXPECT(comm_recv(c, 1, 0, buf, 1) < 0, 22, "recv from a failed rank worked");
		/* Rank 1's abort tells rank 0 the cause: the same mismatch. */
		EXPECT(comm_errkind(c) == COMM_ERR_MISMATCH, 23, "kind %d", comm_errkind(c));
		EXPECT(strstr(comm_error(c), "rank 1 found a mismatch with peer rank 0"),
		    24, "%s", comm_error(c));
	} else {
		EXPECT(comm_recv(c, 0, 0, buf, what == 0 ? 256 : 128) < 0, 21, "no mismatch seen");
		EXPECT(comm_errkind(c) == COMM_ERR_MISMATCH, 22, "kind %d: %s",
		    comm_errkind(c), comm_error(c));
		EXPECT(strstr(comm_error(c), "peer rank 0 (127.0.0.1:") &&
		    strncmp(comm_error(c), "rank 1: ", 8) == 0, 23, "%s", comm_error(c));
		EXPECT(what != 1 || strstr(comm_error(c), "broadcast"), 24, "%s", comm_error(c));
		EXPECT(what != 0 || strstr(comm_error(c), "128 bytes"), 25, "%s", comm_error(c));
		EXPECT(comm_send(c, 0, 0, buf, 1) < 0, 26, "a failed comm keeps working");
	}
	comm_close(c);
	return 0;
}

/* Join expecting failure; the code says how it failed: 1 runtime, 3
 * mismatch, 0 joined. The message must contain want (arg) when set. */
static int
join_result(struct comm_options *o, const char *want)
{
	enum comm_errkind kind;
	struct comm *c;
	char err[512];

	if (comm_open_ex(&c, o, &kind, err, sizeof err) == 0) {
		comm_close(c);
		return 0;
	}
	EXPECT(strncmp(err, "rank ", 5) == 0, 10, "%s", err);
	EXPECT(!want || strstr(err, want), 11, "'%s' lacks '%s'", err, want);
	return kind == COMM_ERR_MISMATCH ? 3 : kind == COMM_ERR_RUNTIME ? 1 : 12;
}

struct refuse {
	int bad_rank, claim;	/* claim: the rank it says it is (0: its own) */
	const char *world, *job, *want_bad, *want_0, *ifaces;
};

/* The bad rank joins with another world size, job or token. */
static int
sc_refuse(struct comm_options *o, const void *arg)
{
	const struct refuse *f = arg;

	o->timeout = 1.5;
	if (o->rank == f->bad_rank) {
		if (f->world)
			o->world = atoi(f->world);
		if (f->job)
			o->job = f->job;
		if (f->claim)
			o->rank = f->claim;
		if (f->ifaces)
			o->ifaces = f->ifaces;
		return join_result(o, f->want_bad);
	}
	return join_result(o, o->rank == 0 ? f->want_0 : NULL);
}

/* Rank 2 dies (SIGKILL) right after joining; the others wait on it. */
static int
sc_killed(struct comm_options *o, const void *arg)
{
	int silent = *(const int *)arg, rc;
	struct comm *c;
	char b[4];
	double t0;

	o->timeout = silent ? 1 : 5;
	if ((rc = open_comm(o, &c)))
		return rc;
	if (o->rank == o->world - 1) {
		if (silent)
			sleep(3);
		else
			raise(SIGKILL);
		comm_close(c);
		return 0;
	}
	comm_op_begin(c, 0, "allreduce", 0, 0);
	comm_set_step(c, "ring step %d", 3);
	t0 = cli_now();
	if (o->rank == 0 && !silent) {
		/* Sending into a dead connection: an error, never SIGPIPE. */
		size_t len = 64 << 20;
		char *big = calloc(1, len);
		EXPECT(comm_send(c, o->world - 1, 0, big, len) < 0, 20, "send worked");
		free(big);
	} else {
		EXPECT(comm_recv(c, o->world - 1, 0, b, sizeof b) < 0, 21, "recv worked");
	}
	EXPECT(comm_errkind(c) == COMM_ERR_RUNTIME, 22, "kind %d", comm_errkind(c));
	EXPECT(cli_now() - t0 < o->timeout + 1, 23, "took %.1f s", cli_now() - t0);
	EXPECT(strstr(comm_error(c), silent ? "timed out" : "closed the connection during "
	    "ring step 3 of allreduce"), 24, "%s", comm_error(c));
	EXPECT(strstr(comm_error(c), "peer rank 2 (127.0.0.1:"), 25, "%s", comm_error(c));
	comm_close(c);
	return 0;
}

/* The last rank never starts (arg: the error every other rank must
 * report, or NULL for the missing rank's timeout). */
static int
sc_absent(struct comm_options *o, const void *arg)
{
	if (o->rank == o->world - 1 && !arg)
		return 0;
	o->timeout = 1.5;
	if (arg)
		return join_result(o, arg);
	return join_result(o, o->rank == 0 ? "rank(s) 2 to join" : "timed out");
}

/* Rank 0's stderr must log the connection it dropped. */
static int
sc_wrong_token(struct comm_options *o, const void *arg)
{
	char path[] = "/tmp/collx-test-comm-XXXXXX", log[4096] = { 0 };
	int fd = -1, rc;

	(void)arg;
	o->timeout = 1.5;
	o->token = o->rank == 0 ? "right" : "wrong";
	if (o->rank == 0) {
		fd = mkstemp(path);
		dup2(fd, 2);
		unlink(path);
	}
	rc = join_result(o, o->rank == 0 ? "timed out" : "wrong token");
	if (o->rank == 0) {
		pread(fd, log, sizeof log - 1, 0);
		if (!strstr(log, "dropped connection from 127.0.0.1:") ||
		    !strstr(log, "wrong token"))
			return 30;
	}
	return rc;
}

/* Process 2 is not a rank: it connects to the master port before rank 1
 * joins, once with junk and once with a wrong token. Rank 0 must log and
 * drop both and still complete the job with rank 1. */
static int
sc_intruder(struct comm_options *o, const void *arg)
{
	char path[] = "/tmp/collx-test-comm-XXXXXX", log[4096] = { 0 }, junk[72], err[256];
	size_t n = 1000;
	int fd = -1, rc;

	o->world = 2;
	o->token = "s3cret";
	if (o->rank == 2) {
		memset(junk, 'x', sizeof junk);
		fd = comm_sock_connect_hostport(master, cli_now() + 5, err, sizeof err);
		EXPECT(fd >= 0, 31, "%s", err);
		comm_sock_send_all(fd, junk, sizeof junk, cli_now() + 5, err, sizeof err);
		EXPECT(comm_sock_recv_all(fd, junk, sizeof junk, cli_now() + 5, err, sizeof err) < 0 ||
		    comm_sock_recv_all(fd, junk, 1, cli_now() + 5, err, sizeof err) < 0, 32,
		    "junk was answered");
		close(fd);
		fd = comm_sock_connect_hostport(master, cli_now() + 5, err, sizeof err);
		EXPECT(fd >= 0 && auth_client(fd, "guess", cli_now() + 5, err, sizeof err) < 0,
		    33, "a wrong token got in");
		close(fd);
		return 0;
	}
	if (o->rank == 1)
		sleep(1);
	if (o->rank == 0) {
		fd = mkstemp(path);
		dup2(fd, 2);
		unlink(path);
	}
	rc = sc_ring(o, &n);
	if (o->rank == 0) {
		pread(fd, log, sizeof log - 1, 0);
		EXPECT(strstr(log, "not a collx peer") && strstr(log, "wrong token"), 34,
		    "log: %s", log);
	}
	(void)arg;
	return rc;
}

static void
test_rendezvous(void)
{
	size_t n = 1000;
	int st[MAXW], w;
	char what[64];

	for (w = 1; w <= MAXW; w++) {
		set_master(AF_INET);
		run_ranks(w, sc_ring, &n, st);
		snprintf(what, sizeof what, "rendezvous and ring exchange, world %d", w);
		UNIT_OK(all_zero(st, w), what);
	}
}

static void
test_p2p(void)
{
	size_t n = 1 << 18, big = 64 << 20;
	int st[MAXW];

	set_master(AF_INET);
	run_ranks(4, sc_ring, &n, st);
	UNIT_OK(all_zero(st, 4), "1 MiB ring exchange of rank-valued data, world 4");
	set_master(AF_INET);
	run_ranks(5, sc_all_to_all, NULL, st);
	UNIT_OK(all_zero(st, 5), "concurrent isend/irecv with every peer and self, 3 rounds");
	/* Messages far beyond the socket buffers, all posted before any wait:
	 * a transport that blocked in send would deadlock here. */
	scale = 50;
	set_master(AF_INET);
	run_ranks(4, sc_all_to_all, NULL, st);
	scale = 1;
	UNIT_OK(all_zero(st, 4), "everyone sends up to 4 MiB to everyone at once: no deadlock");
	set_master(AF_INET);
	run_ranks(2, sc_big, &big, st);
	UNIT_OK(all_zero(st, 2), "zero-length and 64 MiB messages both ways at once");
	set_master(AF_INET);
	base.ifaces = "lo,lo";
	run_ranks(3, sc_striped, NULL, st);
	UNIT_OK(all_zero(st, 3), "two streams per peer (lo,lo): striped messages arrive whole");
}

static void
test_mismatch(void)
{
	static const char *what[] = { "a different length", "a different collective",
	    "a different dtype" };
	char msg[96];
	int st[2], k;

	for (k = 0; k < 3; k++) {
		set_master(AF_INET);
		run_ranks(2, sc_mismatch, &k, st);
		snprintf(msg, sizeof msg, "%s is a mismatch on the receiver", what[k]);
		UNIT_OK(all_zero(st, 2), msg);
	}
}

static void
test_refusals(void)
{
	static const struct refuse world = { 1, 0, "3", NULL, "world size 3", "rank(s) 1", NULL },
	    job = { 1, 0, NULL, "other-job", "rank 1 runs other-job, rank 0 test-job",
		"rank(s) 1", NULL },
	    opt = { 1, 0, NULL, "test-job --x=1", "rank 1 was started with --x 1, rank 0 "
		"without it", "rank(s) 1", NULL },
	    subcmd = { 1, 0, NULL, "test-job sub --x=1", "rank 1 runs test-job sub, "
		"rank 0 test-job", "rank(s) 1", NULL },
	    dup = { 2, 1, NULL, NULL, NULL, "rank(s) 2", NULL },
	    streams = { 1, 0, NULL, NULL, "2 interfaces differ", "rank(s) 1", "lo,lo" };
	int st[3];

	set_master(AF_INET);
	run_ranks(2, sc_refuse, &world, st);
	UNIT_OK(st[1] == 3 && st[0] == 1, "another world size is refused (mismatch), rank 0 times out");
	set_master(AF_INET);
	run_ranks(2, sc_refuse, &job, st);
	UNIT_OK(st[1] == 3 && st[0] == 1, "another job is refused (mismatch), rank 0 times out");
	set_master(AF_INET);
	run_ranks(2, sc_refuse, &opt, st);
	UNIT_OK(st[1] == 3 && st[0] == 1, "another option is refused, naming it");
	set_master(AF_INET);
	run_ranks(2, sc_refuse, &subcmd, st);
	UNIT_OK(st[1] == 3 && st[0] == 1, "another subcommand is refused, naming what runs");
	set_master(AF_INET);
	run_ranks(2, sc_refuse, &streams, st);
	UNIT_OK(st[1] == 3 && st[0] == 1, "another number of interfaces is refused (mismatch)");
	set_master(AF_INET);
	run_ranks(3, sc_refuse, &dup, st);
	UNIT_OK(st[0] == 1 && ((st[1] == 3 && st[2] == 1) || (st[1] == 1 && st[2] == 3)),
	    "a duplicate rank is refused (mismatch); the others fail on the missing rank");
	set_master(AF_INET);
	base.ifaces = "lo,no-such-if0";
	run_ranks(2, sc_absent, "no network interface named 'no-such-if0'", st);
	UNIT_OK(st[0] == 1 && st[1] == 1, "an unknown interface name is a clear error");
	set_master(AF_INET);
	run_ranks(3, sc_absent, NULL, st);
	UNIT_OK(st[0] == 1 && st[1] == 1, "a rank that never arrives: the others time out");
	set_master(AF_INET);
	run_ranks(3, sc_intruder, NULL, st);
	UNIT_OK(all_zero(st, 3), "junk and a wrong token at the master are dropped and logged; the job completes");
	set_master(AF_INET);
	run_ranks(2, sc_wrong_token, NULL, st);
	UNIT_OK(st[0] == 1 && st[1] == 1, "a wrong token cannot join; rank 0 logs the drop");
}

static void
test_failures(void)
{
	int st[3], silent;

	silent = 0;
	set_master(AF_INET);
	run_ranks(3, sc_killed, &silent, st);
	UNIT_OK(st[0] == 0 && st[1] == 0 && st[2] == 128 + SIGKILL,
	    "a killed peer: receiver and sender fail at once, naming it and the step");
	silent = 1;
	set_master(AF_INET);
	run_ranks(3, sc_killed, &silent, st);
	UNIT_OK(st[0] == 0 && st[1] == 0, "a silent peer: the others time out, naming it");
}

static void
test_token_and_v6(void)
{
	size_t n = 4096;
	int st[MAXW], fd;

	set_master(AF_INET);
	base.token = "s3cret";
	run_ranks(4, sc_ring, &n, st);
	UNIT_OK(all_zero(st, 4), "all ranks with the same token join and exchange");
	fd = socket(AF_INET6, SOCK_STREAM, 0);
	if (fd < 0 || unit_free_port(AF_INET6) < 0) {
		printf("ok %d - IPv6 loopback # skip no IPv6\n", ++unit_n);
	} else {
		set_master(AF_INET6);
		run_ranks(3, sc_ring, &n, st);
		UNIT_OK(all_zero(st, 3), "IPv6 loopback master [::1]:port");
	}
	if (fd >= 0)
		close(fd);
}

static int
split_is(const char *hp, const char *host, const char *port)
{
	char h[64], p[16], err[128];

	if (comm_sock_split(hp, h, sizeof h, p, sizeof p, err, sizeof err) < 0)
		return host == NULL && strstr(err, hp) != NULL;
	return host && strcmp(h, host) == 0 && strcmp(p, port) == 0;
}

static void
test_addresses(void)
{
	struct comm_sock_addr a;
	char err[128];

	UNIT_OK(split_is("10.0.0.2:41234", "10.0.0.2", "41234") &&
	    split_is("[::1]:80", "::1", "80") && split_is("node-3:29500", "node-3", "29500") &&
	    split_is(":7", "", "7"), "HOST:PORT and [IPV6]:PORT split");
	UNIT_OK(split_is("::1:80", NULL, NULL) && split_is("host", NULL, NULL) &&
	    split_is("host:", NULL, NULL) && split_is("[::1]80", NULL, NULL),
	    "malformed addresses are refused, naming the input");
	UNIT_OK(comm_sock_resolve_hostport("127.0.0.1:80", &a, err, sizeof err) == 0 &&
	    strcmp(a.str, "127.0.0.1:80") == 0 && comm_sock_addr_port(&a) == 80,
	    "numeric address resolves and formats back");
}

/* World 1: no network; messages to self, and failures that stick. */
static void
test_self(void)
{
	struct comm_options o = { .rank = 0, .world = 1, .timeout = 1 };
	struct comm_req r[2];
	struct comm *c;
	char err[256], a[8] = "abcdefg", b[8] = { 0 };

	UNIT_OK(comm_open(&c, &o, err, sizeof err) == 0 && comm_size(c) == 1,
	    "a world of 1 opens without a master");
	UNIT_OK(comm_irecv(c, 0, 1, b, 8, &r[0]) == 0 && comm_isend(c, 0, 1, a, 8, &r[1]) == 0 &&
	    comm_waitall(c, r, 2) == 0 && memcmp(a, b, 8) == 0 && r[0].state == COMM_REQ_DONE,
	    "a message to self arrives");
	UNIT_OK(comm_sendrecv(c, 0, NULL, 0, 0, NULL, 0, 2) == 0, "zero-length message to self");
	UNIT_OK(comm_isend(c, 0, 3, a, 8, &r[0]) == 0 && comm_wait(c, &r[0]) < 0 &&
	    strstr(comm_error(c), "no matching receive"), "a send to self with no receive fails");
	comm_fail(c, COMM_ERR_MISMATCH, "later failure");
	UNIT_OK(comm_errkind(c) == COMM_ERR_RUNTIME && comm_send(c, 0, 0, a, 1) < 0 &&
	    !strstr(comm_error(c), "later"), "the first failure sticks");
	comm_close(c);
	UNIT_OK(comm_open(&c, &o, err, sizeof err) == 0, "reopen");
	UNIT_OK(comm_irecv(c, 0, 1, b, 4, &r[0]) == 0 && comm_isend(c, 0, 1, a, 8, &r[1]) < 0 &&
	    comm_errkind(c) == COMM_ERR_MISMATCH && strncmp(comm_error(c), "rank 0: ", 8) == 0,
	    "self messages of different lengths are a mismatch");
	comm_close(c);
	o.rank = 1;
	UNIT_OK(comm_open(&c, &o, err, sizeof err) < 0 && strstr(err, "not within"),
	    "rank outside the world is refused");
}

/* A long wait's notes (issue 16): the first 5 s after the wait begins,
 * then one every 15 s, each passed whole to the program's function; none
 * without one. The clock is moved on by hand (the note's next time set to
 * now) rather than waited through; 0.5 s allows for a loaded machine. */
struct heard {
	int n;
	char last[64];
};

static void
hear(void *ctx, const char *text)
{
	struct heard *h = ctx;

	h->n++;
	snprintf(h->last, sizeof h->last, "%s", text);
}

static void
test_notes(void)
{
	struct comm_note note;
	struct heard h = { 0 };
	double t;

	t = cli_now();
	comm_note_start(&note, hear, &h);
	UNIT_OK(comm_note_say(&note, "early") == 0 && h.n == 0,
	    "no note as the wait begins");
	UNIT_CLOSE(comm_note_until(&note, t + 100) - t, 5, 0, 0.5,
	    "a wait looks again when the first note is due, 5 s in");
	UNIT_OK(comm_note_until(&note, t + 2) == t + 2,
	    "a deadline before the note comes first");
	note.next = cli_now();
	UNIT_OK(comm_note_say(&note, "waiting for rank %d", 2) == 1 &&
	    h.n == 1 && strcmp(h.last, "waiting for rank 2") == 0,
	    "the note, once due, reaches the program's function whole");
	t = cli_now();
	UNIT_OK(comm_note_say(&note, "again") == 0 && h.n == 1,
	    "not said again at once");
	UNIT_CLOSE(comm_note_until(&note, t + 100) - t, 15, 0, 0.5,
	    "the next note is due 15 s after the last");
	comm_note_start(&note, NULL, NULL);
	note.next = cli_now();
	UNIT_OK(comm_note_say(&note, "unheard") == 0 &&
	    comm_note_until(&note, t + 100) == t + 100,
	    "without a function no note is due, the deadline alone");
}

int
main(void)
{
	test_addresses();
	test_notes();
	test_self();
	test_rendezvous();
	test_p2p();
	test_mismatch();
	test_refusals();
	test_failures();
	test_token_and_v6();
	return unit_done();
}
