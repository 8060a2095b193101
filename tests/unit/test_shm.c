/*
 * test_shm: the shared-memory transport gives what TCP gives, bit for
 * bit. Forked ranks on 127.0.0.1 run every collective with every
 * algorithm that implements it (coll_algo_valid, AUTO included), several
 * sizes (one element, an odd count, more than a ring holds) and ops, on
 * random floats whose sums depend on the order of their terms, and a
 * ring of point-to-point messages: once with shared memory, once with
 * no_shm, each rank keeping a hash of every result. The two lists must
 * agree, and the transports must be the ones asked for (comm_transport),
 * so that neither run can pass for the other. One integer allreduce is
 * checked against its closed form, so that agreeing garbage fails too.
 * Then with several hosts (comm_options.host), shared memory within and
 * TCP across, and with large payloads read in place (COLLX_SHM_CMA=1).
 */
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

#define MAXW 5
#define MAXHASH 512
#define BIG 300001		/* f32 elements: 1.2 MB, more than one ring */

static const size_t counts[] = { 1, 1023, BIG };

struct hashes {
	int n;
	uint64_t h[MAXHASH];
};

static uint64_t
fnv(const void *p, size_t len)
{
	const unsigned char *b = p;
	uint64_t h = 0xcbf29ce484222325ull;

	for (size_t i = 0; i < len; i++)
		h = (h ^ b[i]) * 0x100000001b3ull;
	return h;
}

static void
keep(struct hashes *hs, const void *p, size_t len)
{
	if (hs->n < MAXHASH)
		hs->h[hs->n++] = fnv(p, len);
}

/* Floats of varied magnitude, the same for a rank, case and index in
 * both runs. */
static void
fill(float *x, size_t n, int rank, unsigned salt)
{
	uint64_t s = 0x9e3779b97f4a7c15ull * (uint64_t)(rank + 1) + salt;

	for (size_t i = 0; i < n; i++) {
		s = s * 6364136223846793005ull + 1442695040888963407ull;
		x[i] = (float)((int64_t)(s >> 11) % 2000001 - 1000000) *
		    (1.0f / (float)(1u << (s >> 60)));
	}
}

static int
reduce_kinds(struct comm *c, float *buf, float *out, struct hashes *hs)
{
	static const enum coll_op ops[] = { COLL_SUM, COLL_AVG, COLL_MAX };
	int r = comm_rank(c), w = comm_size(c);
	unsigned salt = 0;

	for (int a = 0; a < COLL_ALGO_COUNT; a++)
		for (size_t k = 0; k < sizeof counts / sizeof *counts; k++) {
			size_t n = counts[k];
			/* The ops differ in the kernel, not in what travels:
			 * all three on the small counts, the sum on BIG. */
			size_t nops = n < BIG ? 3 : 1;
			for (size_t o = 0; o < nops &&
			    coll_algo_valid(COLL_KIND_ALLREDUCE, a); o++) {
				fill(buf, n, r, ++salt);
				if (coll_allreduce(c, buf, n, DT_F32, ops[o], a) < 0)
					return -1;
				keep(hs, buf, n * 4);
			}
			if (coll_algo_valid(COLL_KIND_REDUCE_SCATTER, a)) {
				fill(buf, n * (size_t)w, r, ++salt);
				if (coll_reduce_scatter(c, buf, out, n, DT_F32,
				    COLL_SUM, a) < 0)
					return -1;
				keep(hs, out, n * 4);
			}
		}
	fill(buf, BIG, r, ++salt);
	if (coll_reduce(c, buf, BIG, DT_F32, COLL_SUM, w - 1) < 0)
		return -1;
	keep(hs, buf, BIG * 4);
	return 0;
}

static int
move_kinds(struct comm *c, float *buf, float *out, struct hashes *hs)
{
	int r = comm_rank(c), w = comm_size(c);
	size_t cnt[MAXW];
	unsigned salt = 1000;

	for (int a = 0; a < COLL_ALGO_COUNT; a++)
		for (size_t k = 0; k < sizeof counts / sizeof *counts; k++) {
			size_t n = counts[k];
			if (coll_algo_valid(COLL_KIND_BROADCAST, a)) {
				fill(buf, n, r, ++salt);
				if (coll_broadcast(c, buf, n, DT_F32, w / 2, a) < 0)
					return -1;
				keep(hs, buf, n * 4);
			}
			if (coll_algo_valid(COLL_KIND_ALLGATHER, a)) {
				fill(buf, n, r, ++salt);
				if (coll_allgather(c, buf, out, n, DT_F32, a) < 0)
					return -1;
				keep(hs, out, n * (size_t)w * 4);
			}
			if (coll_algo_valid(COLL_KIND_ALLTOALL, a) && n < BIG) {
				fill(buf, n * (size_t)w, r, ++salt);
				if (coll_alltoall(c, buf, out, n, DT_F32, a) < 0)
					return -1;
				keep(hs, out, n * (size_t)w * 4);
			}
		}
	for (int i = 0; i < w; i++)
		cnt[i] = (size_t)(i * 7919 + 3);
	fill(buf, cnt[r], r, ++salt);
	if (coll_gatherv(c, buf, out, cnt, DT_F32, 0) < 0)
		return -1;
	if (r == 0)
		keep(hs, out, (size_t)(w * (w - 1) / 2 * 7919 + 3 * w) * 4);
	fill(buf, (size_t)(w * (w - 1) / 2 * 7919 + 3 * w), r, ++salt);
	if (coll_scatterv(c, buf, out, cnt, DT_F32, 0) < 0)
		return -1;
	keep(hs, out, cnt[r] * 4);
	/* A ring of messages larger than a ring buffer, both ways at once. */
	fill(buf, BIG, r, ++salt);
	if (coll_barrier(c) < 0 || comm_sendrecv(c, (r + 1) % w, buf, BIG * 4,
	    (r + w - 1) % w, out, BIG * 4, 7) < 0)
		return -1;
	keep(hs, out, BIG * 4);
	return 0;
}

/* Integers whose sum is known: rank r holds i + r at index i. */
static int
closed_form(struct comm *c, int32_t *v)
{
	int r = comm_rank(c), w = comm_size(c);

	for (int i = 0; i < 4099; i++)
		v[i] = i + r;
	if (coll_allreduce(c, v, 4099, DT_I32, COLL_SUM, COLL_AUTO) < 0)
		return -1;
	for (int i = 0; i < 4099; i++)
		if (v[i] != w * i + w * (w - 1) / 2)
			return 1;
	return 0;
}

/* Large operations last, nothing after them: a rank that has taken its
 * peer's payload in place may leave at once, while the peer has yet to
 * see that it was taken (and must not take the departure for a loss). */
static int
last_large(struct comm *c, float *buf, struct hashes *hs)
{
	for (int i = 0; i < 8; i++) {
		fill(buf, BIG, comm_rank(c), 5000 + (unsigned)i);
		if (coll_allreduce(c, buf, BIG, DT_F32, COLL_SUM, COLL_TREE) < 0 ||
		    coll_broadcast(c, buf, BIG, DT_F32, 0, COLL_BINOMIAL) < 0)
			return -1;
		keep(hs, buf, BIG * 4);
	}
	return 0;
}

struct run {
	char master[2][64];
	const char *layout;	/* rank r's host is layout[r], or NULL: one */
	int fd;
};

static int
say(int fd, int r, const char *what, const char *why)
{
	dprintf(fd, "rank %d: %s: %s\n", r, what, why);
	return 1;
}

/* One pass: open (with or without shared memory), check the transports,
 * run everything, close. */
static int
pass(const struct run *run, int rank, int world, int no_shm,
    struct hashes *hs, float *buf, float *out)
{
	char host[2] = { run->layout ? run->layout[rank] : 0, 0 };
	struct comm_options o = { .rank = rank, .world = world,
	    .master = run->master[no_shm], .timeout = 30, .job = "test_shm",
	    .no_shm = no_shm, .host = run->layout ? host : NULL };
	char err[COLLX_ERRLEN];
	struct comm *c;
	int rc = 0;

	if (comm_open(&c, &o, err, sizeof err) < 0)
		return say(run->fd, rank, "open", err);
	for (int p = 0; p < world && rc == 0; p++) {
		int local = !run->layout || run->layout[p] == run->layout[rank];
		if (p != rank && strcmp(comm_transport(c, p),
		    !no_shm && local ? "shm" : "tcp") != 0)
			rc = say(run->fd, rank, "transport", comm_transport(c, p));
	}
	if (rc == 0 && (reduce_kinds(c, buf, out, hs) < 0 ||
	    move_kinds(c, buf, out, hs) < 0))
		rc = say(run->fd, rank, "collective", comm_error(c));
	if (rc == 0 && (rc = closed_form(c, (int32_t *)buf)) != 0)
		rc = say(run->fd, rank, "closed form", rc < 0 ? comm_error(c) :
		    "an integer sum is wrong");
	if (rc == 0 && last_large(c, buf, hs) < 0)
		rc = say(run->fd, rank, "last", comm_error(c));
	comm_close(c);
	return rc;
}

static int
rank_main(int rank, int world, void *arg)
{
	const struct run *run = arg;
	struct hashes *hs = calloc(2, sizeof *hs);
	float *buf = malloc((size_t)BIG * MAXW * 4);
	float *out = malloc((size_t)BIG * MAXW * 4);
	int rc = 1;

	if (hs && buf && out && pass(run, rank, world, 0, &hs[0], buf, out) == 0 &&
	    pass(run, rank, world, 1, &hs[1], buf, out) == 0) {
		rc = hs[0].n != hs[1].n || hs[0].n == 0;
		for (int i = 0; i < hs[0].n && !rc; i++)
			if (hs[0].h[i] != hs[1].h[i])
				rc = say(run->fd, rank, "results", "differ");
		if (hs[0].n >= MAXHASH)
			rc = say(run->fd, rank, "results", "more than MAXHASH");
	}
	free(hs);
	free(buf);
	free(out);
	return rc;
}

static int
run_world(int w, const char *layout)
{
	struct run run = { .layout = layout };
	pid_t pid[MAXW];
	int fd;

	for (int i = 0; i < 2; i++)
		snprintf(run.master[i], sizeof run.master[i], "127.0.0.1:%d",
		    unit_free_port(AF_INET));
	if ((fd = unit_fork_reporting(w, 120, rank_main, &run, &run.fd,
	    pid)) < 0)
		return -1;
	unit_echo_reports(fd, NULL, 0);
	return unit_wait_ranks(w, pid, NULL);
}

int
main(void)
{
	char what[96];

	setvbuf(stdout, NULL, _IOLBF, 0);
	for (int w = 2; w <= MAXW; w++) {
		snprintf(what, sizeof what, "%d ranks: every collective and "
		    "algorithm, shared memory bit for bit as TCP", w);
		UNIT_OK(run_world(w, NULL) == 0, what);
	}
	/* Hosts of several ranks: shared memory within, TCP across. */
	static const char *const layouts[] = { "AABB", "ABAB", "AABAB" };
	for (size_t i = 0; i < sizeof layouts / sizeof *layouts; i++) {
		snprintf(what, sizeof what, "hosts %s: shared memory within, TCP "
		    "across, bit for bit as all TCP", layouts[i]);
		UNIT_OK(run_world((int)strlen(layouts[i]), layouts[i]) == 0, what);
	}
	/* Large payloads read in place from the sender's memory. */
	setenv("COLLX_SHM_CMA", "1", 1);
	for (int w = 2; w <= MAXW; w += 2) {
		snprintf(what, sizeof what, "%d ranks, COLLX_SHM_CMA=1: the same "
		    "bit for bit", w);
		UNIT_OK(run_world(w, NULL) == 0, what);
	}
	return unit_done();
}
