/*
 * test_alltoallv: coll_alltoallv over forked ranks on 127.0.0.1, made
 * into hosts by comm_options.host (one host, blocked, interleaved and
 * uneven layouts of 2 to 5 ranks), over shared memory and with every
 * pair on TCP (no_shm). Counts are drawn from a seed (zeros included:
 * a zero row, a zero column, all zero, and blocks past a segment), the
 * bytes of every element from a hash of (source, destination, element,
 * byte), so any bit pattern, NaN payloads among them, must arrive as
 * sent: each rank checks what it received against the hash, for
 * pairwise, linear, hier and auto, in 1-, 2-, 4- and 8-byte elements. Ranks
 * that disagree on a count fail as a mismatch.
 */
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "comm/coll.h"
#include "ranks.h"
#include "unit.h"

#define MAXW 5
#define TRIALS 6

static uint64_t
mix(uint64_t h)
{
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdull;
	h ^= h >> 33;
	h *= 0xc4ceb9fe1a85ec53ull;
	return h ^ (h >> 33);
}

/* Elements rank q sends rank p in trial k: trial 0 small (a quarter of
 * them zero), 1 past a 64 KiB segment for some pairs, 2 with rank 0
 * sending nothing and the last rank receiving nothing, 3 all zero, 4
 * and 5 like 0 with other seeds (5 pipelined in 256-byte segments). */
static size_t
count(int k, int q, int p, int w)
{
	uint64_t h = mix(((uint64_t)k << 40) ^ ((uint64_t)q << 20) ^ (uint64_t)p ^ 0x5a5a);

	switch (k) {
	case 1: return h % 3 == 0 ? 30000 + h % 9000 : h % 50;
	case 2: return q == 0 || p == w - 1 ? 0 : h % 4 == 0 ? 0 : h % 300;
	case 3: return 0;
	default: return h % 4 == 0 ? 0 : h % 40;
	}
}

/* Byte b of element i of the block q sends p. */
static unsigned char
byte_of(int k, int q, int p, size_t i, size_t b)
{
	return (unsigned char)mix(((uint64_t)k << 56) ^ ((uint64_t)q << 48) ^
	    ((uint64_t)p << 40) ^ (i << 4) ^ b);
}

struct job {
	const char *lay;
	int no_shm;
	char master[64];
	int fd;
};

static int
host_count(const char *lay)
{
	int n = 0;

	for (int r = 0; lay[r]; r++)
		n += strchr(lay, lay[r]) == lay + r;
	return n;
}

/* One trial, one algorithm, one element size: 0, or 1 with a line on fd. */
static int
trial(const struct job *j, struct comm *c, int k, enum coll_algo a, enum dtype dt)
{
	int w = comm_size(c), me = comm_rank(c), bad = 0;
	size_t e = dtype_size(dt), sc[MAXW], rc[MAXW], sn = 0, rn = 0;
	unsigned char *s, *r, *o;

	for (int p = 0; p < w; p++) {
		sn += sc[p] = count(k, me, p, w);
		rn += rc[p] = count(k, p, me, w);
	}
	/* nothing to send or receive: NULL, as a caller may pass */
	s = sn ? malloc(sn * e) : NULL;
	r = rn ? malloc(rn * e) : NULL;
	if ((sn && s == NULL) || (rn && r == NULL))
		return 1;
	o = s;
	for (int p = 0; p < w; p++)
		for (size_t i = 0; i < sc[p] * e; i++)
			*o++ = byte_of(k, me, p, i / e, i % e);
	if (rn)
		memset(r, 0xee, rn * e);
	if (k == 5)
		coll_set_segment(256);
	if (coll_alltoallv(c, s, sc, r, rc, dt, a) < 0) {
		dprintf(j->fd, "rank %d trial %d %s %s: %s\n", me, k,
		    coll_algo_name(a), dtype_name(dt), comm_error(c));
		bad = 1;
	}
	coll_set_segment(0);
	o = r;
	for (int p = 0; !bad && p < w; p++)
		for (size_t i = 0; !bad && i < rc[p] * e; i++)
			if (*o++ != byte_of(k, p, me, i / e, i % e)) {
				dprintf(j->fd, "rank %d trial %d %s %s: byte %zu of "
				    "the block from rank %d differs\n", me, k,
				    coll_algo_name(a), dtype_name(dt), i, p);
				bad = 1;
			}
	free(s);
	free(r);
	return bad;
}

static int
rank_main(int rank, int world, void *arg)
{
	const struct job *j = arg;
	static const enum coll_algo algos[] = { COLL_PAIRWISE, COLL_LINEAR,
	    COLL_HIER, COLL_AUTO };
	static const enum dtype dts[] = { DT_U8, DT_I16, DT_F32, DT_F64 };
	char host[2] = { j->lay[rank], '\0' }, err[512];
	struct comm_options o = { .rank = rank, .world = world, .master = j->master,
	    .timeout = 20, .job = "test_alltoallv", .host = host,
	    .no_shm = j->no_shm };
	struct comm *c;
	enum coll_algo want;
	int bad = 0;

	if (comm_open(&c, &o, err, sizeof err) < 0) {
		dprintf(j->fd, "open %d %s\n", rank, err);
		return 1;
	}
	/* hier only when asked for, on any layout (coll_auto.c says why);
	 * two ranks make one exchange, which pairwise posts with less */
	want = world == 2 ? COLL_PAIRWISE : COLL_LINEAR;
	if (coll_auto_group(c, COLL_KIND_ALLTOALLV, 0) != want) {
		dprintf(j->fd, "rank %d: auto is not %s\n", rank,
		    coll_algo_name(want));
		bad = 1;
	}
	for (int k = 0; k < TRIALS; k++)
		for (size_t a = 0; a < sizeof algos / sizeof algos[0]; a++)
			bad |= trial(j, c, k, algos[a], dts[(k + a) % 4]);
	comm_close(c);
	return bad;
}

static void
test_layout(const char *lay, int no_shm)
{
	struct job j = { .lay = lay, .no_shm = no_shm };
	int w = (int)strlen(lay), fd;
	pid_t pid[MAXW];
	char what[200], log[8192];

	snprintf(j.master, sizeof j.master, "127.0.0.1:%d", unit_free_port(AF_INET));
	if ((fd = unit_fork_reporting(w, 120, rank_main, &j, &j.fd, pid)) < 0)
		return;
	unit_echo_reports(fd, log, sizeof log);
	snprintf(what, sizeof what, "layout %s (%d hosts), %s: every rank receives "
	    "exactly the bytes sent, pairwise, linear, hier and auto (linear; "
	    "pairwise at 2 ranks)",
	    lay,
	    host_count(lay), no_shm ? "all TCP" : "shared memory within hosts");
	UNIT_OK(unit_wait_ranks(w, pid, NULL) == 0 && log[0] == '\0', what);
}

/* Rank 1 expects one element more from rank 0 than rank 0 sends. */
static int
mismatch_main(int rank, int world, void *arg)
{
	const struct job *j = arg;
	struct comm_options o = { .rank = rank, .world = world, .master = j->master,
	    .timeout = 5, .job = "test_alltoallv", .host = rank ? "B" : "A" };
	size_t sc[2] = { 1, 5 }, rc[2] = { rank ? 6 : 1, 5 };
	int32_t s[8] = { 0 }, r[8];
	struct comm *c;
	char err[512];
	int rv;

	if (comm_open(&c, &o, err, sizeof err) < 0)
		return 1;
	if (rank == 1) {
		sc[0] = 5;
		sc[1] = 1;
		rc[1] = 1;
	}
	rv = coll_alltoallv(c, s, sc, r, rc, DT_I32, COLL_PAIRWISE) < 0 ?
	    2 + (comm_errkind(c) == COMM_ERR_MISMATCH) : 0;
	comm_close(c);
	return rv;
}

static void
test_mismatch(void)
{
	struct job j = { .lay = "AB", .fd = STDERR_FILENO };
	pid_t pid[2];
	int st[2];

	snprintf(j.master, sizeof j.master, "127.0.0.1:%d", unit_free_port(AF_INET));
	unit_fork_ranks(2, 30, mismatch_main, &j, pid);
	unit_wait_ranks(2, pid, st);
	UNIT_OK(st[1] == 3, "a receive count one more than its sender's count "
	    "fails as a mismatch");
}

/* One rank: its block for itself must be as long as the one it expects. */
static void
test_self(void)
{
	struct comm_options o = { .rank = 0, .world = 1, .timeout = 5,
	    .job = "test_alltoallv" };
	struct comm *c;
	size_t sc[1] = { 3 }, rc[1] = { 3 };
	int64_t s[3] = { 7, -1, 9 }, r[3] = { 0, 0, 0 };
	char err[512];

	if (comm_open(&c, &o, err, sizeof err) < 0) {
		UNIT_OK(0, err);
		return;
	}
	UNIT_OK(coll_alltoallv(c, s, sc, r, rc, DT_I64, COLL_AUTO) == 0 &&
	    r[0] == 7 && r[1] == -1 && r[2] == 9, "a world of one copies its block");
	rc[0] = 2;
	UNIT_OK(coll_alltoallv(c, s, sc, r, rc, DT_I64, COLL_AUTO) < 0 &&
	    comm_errkind(c) == COMM_ERR_MISMATCH &&
	    strstr(comm_error(c), "sends itself 3 elements but receives 2"),
	    "a rank's own send and receive counts differing is a mismatch");
	comm_close(c);
}

int
main(void)
{
	/* one host; blocked, interleaved, uneven; one rank a host */
	static const char *const layouts[] = { "AA", "AB", "AAB", "ABA",
	    "AABB", "ABAB", "ABBC", "AABBB", "ABABA", "ABCDE" };

	signal(SIGPIPE, SIG_IGN);
	test_self();
	for (size_t i = 0; i < sizeof layouts / sizeof layouts[0]; i++)
		for (int no_shm = 0; no_shm < 2; no_shm++)
			test_layout(layouts[i], no_shm);
	test_mismatch();
	return unit_done();
}
