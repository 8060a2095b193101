/*
 * launch_preflight: what collx-run --preflight runs as each rank before
 * the program (collx-run --preflight-rank): the ranks meet as the program's
 * would, then every pair in turn, rank 0 calling each one, trades a few
 * small messages (latency) and a checksummed 1 MiB transfer (bandwidth);
 * rank 0 prints the matrices and names each pair that failed or ran below
 * half the median of the pairs over its transport.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "comm/comm.h"
#include "launch/launch.h"

#define PF_BYTES (1 << 20)	/* the transfer of each pair */
#define PF_PINGS 5		/* round trips; the best one counts */
#define PF_SENDS 2		/* transfers; the best one counts (the first
				 * also pays for pages touched first) */
#define PF_TIMEOUT 4.0		/* seconds for any wait, unless less given */
#define PF_TAG 0x5046		/* "PF" */

/* What the leading rank of a pair learns of it, sent to rank 0 as is. */
enum { R_LAT, R_BW, R_BAD, R_SHM, R_N };

/* n bytes from seed, the same on every rank (xorshift64). */
static void
pattern(unsigned char *b, size_t n, uint64_t seed)
{
	uint64_t x = seed * 0x9e3779b97f4a7c15ULL + 1;
	size_t i;

	for (i = 0; i < n; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		b[i] = (unsigned char)(x >> 24);
	}
}

/*
 * Pair a < b: a leads, b answers. The best of PF_PINGS round trips of 8
 * bytes, halved, is the latency; PF_BYTES from a to b, b answering with
 * the checksum of what arrived, timed at a, the bandwidth (the best of
 * PF_SENDS); a mismatch marks the pair bad. r: a's findings. 0 or -1
 * (comm_error(c)).
 */
static int
pair(struct comm *c, int a, int b, unsigned char *buf, double *r)
{
	int me = comm_rank(c), peer = me == a ? b : a, k;
	uint64_t ping = 0, want, got;
	double t, best = INFINITY, send = INFINITY;

	for (k = 0; k < PF_PINGS; k++) {
		t = cli_now();
		if (me == a ? comm_send(c, peer, PF_TAG, &ping, 8) < 0 ||
		    comm_recv(c, peer, PF_TAG, &ping, 8) < 0 :
		    comm_recv(c, peer, PF_TAG, &ping, 8) < 0 ||
		    comm_send(c, peer, PF_TAG, &ping, 8) < 0)
			return -1;
		best = fmin(best, cli_now() - t);
	}
	for (k = 0; k < PF_SENDS && me == b; k++) {
		if (comm_recv(c, a, PF_TAG, buf, PF_BYTES) < 0)
			return -1;
		got = cli_fnv1a(CLI_FNV1A_INIT, buf, PF_BYTES);
		if (comm_send(c, a, PF_TAG, &got, 8) < 0)
			return -1;
	}
	if (me == b)
		return 0;
	pattern(buf, PF_BYTES, (uint64_t)a << 32 | (uint64_t)b);
	want = cli_fnv1a(CLI_FNV1A_INIT, buf, PF_BYTES);
	r[R_BAD] = 0;
	for (k = 0; k < PF_SENDS; k++) {
		t = cli_now();
		if (comm_send(c, b, PF_TAG, buf, PF_BYTES) < 0 ||
		    comm_recv(c, b, PF_TAG, &got, 8) < 0)
			return -1;
		send = fmin(send, cli_now() - t);
		r[R_BAD] = r[R_BAD] || got != want;
	}
	r[R_LAT] = best / 2;
	r[R_BW] = PF_BYTES / send;
	r[R_SHM] = strcmp(comm_transport(c, b), "shm") == 0;
	return 0;
}

/* Every pair in order, one at a time: rank 0 tells both ranks of a pair
 * to go, and takes the leader's findings into res (n x n, [a][b], a < b)
 * before the next. 0 or -1 (comm_error(c)). */
static int
all_pairs(struct comm *c, double *res)
{
	int n = comm_size(c), me = comm_rank(c), a, b, go = 1, rc = 0;
	unsigned char *buf = cli_calloc(PF_BYTES, 1);
	double r[R_N];

	for (a = 0; a < n && rc == 0; a++)
		for (b = a + 1; b < n && rc == 0; b++) {
			if (me == 0)
				rc = (a > 0 && comm_send(c, a, PF_TAG, &go,
				    sizeof go) < 0) || comm_send(c, b, PF_TAG,
				    &go, sizeof go) < 0 ? -1 : 0;
			else if (me == a || me == b)
				rc = comm_recv(c, 0, PF_TAG, &go, sizeof go);
			if (rc == 0 && (me == a || me == b))
				rc = pair(c, a, b, buf, r);
			if (rc == 0 && me == a && a > 0)
				rc = comm_send(c, 0, PF_TAG, r, sizeof r);
			else if (rc == 0 && me == 0 && a > 0)
				rc = comm_recv(c, a, PF_TAG, r, sizeof r);
			if (rc == 0 && me == 0)
				memcpy(&res[((size_t)a * n + b) * R_N], r,
				    sizeof r);
		}
	free(buf);
	return rc;
}

static int
cmp_double(const void *x, const void *y)
{
	double a = *(const double *)x, b = *(const double *)y;

	return (a > b) - (a < b);
}

/* The median bandwidth of the sound pairs over shared memory (shm 1) or
 * TCP (0); 0 when there are none. */
static double
median(const double *res, int n, int shm)
{
	double *v = cli_calloc((size_t)n * n, sizeof *v), m = 0;
	const double *r;
	int a, b, k = 0;

	for (a = 0; a < n; a++)
		for (b = a + 1; b < n; b++) {
			r = &res[((size_t)a * n + b) * R_N];
			if (!r[R_BAD] && (int)r[R_SHM] == shm)
				v[k++] = r[R_BW];
		}
	if (k > 0) {
		qsort(v, (size_t)k, sizeof *v, cmp_double);
		m = k % 2 ? v[k / 2] : (v[k / 2 - 1] + v[k / 2]) / 2;
	}
	free(v);
	return m;
}

/* Where rank r is, as rank 0 knows it: a peer's address without its
 * port; rank 0's own, the rendezvous host. */
static void
where(struct comm *c, int r, const char *master, char *buf, size_t len)
{
	char *colon;

	snprintf(buf, len, "%s", r == 0 ? master : comm_peer_addr(c, r));
	if (r > 0 && (colon = strrchr(buf, ':')) != NULL)
		*colon = '\0';
}

/* One matrix, symmetric, with value k of each pair. */
static void
matrix(const double *res, int n, int k, const char *title, double scale)
{
	int a, b;

	fprintf(stderr, "%s\n%6s", title, "");
	for (b = 0; b < n; b++)
		fprintf(stderr, " %9d", b);
	fputc('\n', stderr);
	for (a = 0; a < n; a++) {
		fprintf(stderr, "%6d", a);
		for (b = 0; b < n; b++)
			if (a == b)
				fprintf(stderr, " %9s", "-");
			else
				fprintf(stderr, " %9.1f", res[((size_t)(a < b ?
				    a : b) * n + (a < b ? b : a)) * R_N + k] *
				    scale);
		fputc('\n', stderr);
	}
}

/* Rank 0's report: the matrices, then each pair that failed or ran slow.
 * Returns the number of pairs that failed. */
static int
report(struct comm *c, const double *res, const char *master, double secs)
{
	int n = comm_size(c), a, b, bad = 0, slow = 0;
	char wa[256], wb[256];
	double med[2] = { median(res, n, 0), median(res, n, 1) };
	const double *r;

	if (!cli_quiet) {
		fprintf(stderr, "%s: preflight of %d ranks in %.3f s: each "
		    "pair's latency (best of %d round trips, halved) and "
		    "bandwidth (best of %d transfers of %d KiB, checksummed)\n",
		    cli_progname, n, secs, PF_PINGS, PF_SENDS, PF_BYTES >> 10);
		matrix(res, n, R_LAT, "latency, us", 1e6);
		matrix(res, n, R_BW, "bandwidth, MB/s", 1e-6);
	}
	for (a = 0; a < n; a++)
		for (b = a + 1; b < n; b++) {
			r = &res[((size_t)a * n + b) * R_N];
			where(c, a, master, wa, sizeof wa);
			where(c, b, master, wb, sizeof wb);
			if (r[R_BAD]) {
				bad++;
				cli_warn("preflight: ranks %d and %d (%s, %s) "
				    "failed: a %d KiB transfer arrived "
				    "corrupted (checksum mismatch)", a, b, wa,
				    wb, PF_BYTES >> 10);
			} else if (r[R_BW] < med[(int)r[R_SHM]] / 2) {
				slow++;
				cli_warn("preflight: ranks %d and %d (%s, %s) "
				    "ran slow: %.1f MB/s, below half the "
				    "median %.1f MB/s of the pairs over %s",
				    a, b, wa, wb, r[R_BW] * 1e-6,
				    med[(int)r[R_SHM]] * 1e-6,
				    r[R_SHM] ? "shared memory" : "TCP");
			}
		}
	if (!cli_quiet && bad == 0)
		fprintf(stderr, "%s: preflight: %d pairs sound, %d of them "
		    "slow\n", cli_progname, n * (n - 1) / 2, slow);
	return bad;
}

int
launch_preflight_rank(void)
{
	struct cli_group g;
	struct comm *c = NULL;
	struct comm_options o;
	char err[COLLX_ERRLEN], host[256];
	double *res = NULL, t0 = cli_now();
	int port, rc = CLI_EXIT_OK;

	cli_group_defaults(&g);
	if (cli_group_resolve(&g, err, sizeof err) < 0)
		cli_usage_error("--preflight-rank: %s", err);
	o = (struct comm_options){ .rank = g.rank, .world = g.world,
	    .master = g.master, .ifaces = g.iface,
	    .timeout = fmin(g.timeout, PF_TIMEOUT), .token = g.token,
	    .job = "collx-run --preflight", .job_id = g.job_id,
	    .port_lo = g.port_lo, .port_hi = g.port_hi, .no_shm = g.no_shm };
	if (comm_open(&c, &o, err, sizeof err) < 0) {
		cli_warn("preflight: %s; the program is not run", err);
		return CLI_EXIT_CHECK;
	}
	if (g.rank == 0)
		res = cli_calloc((size_t)g.world * g.world * R_N, sizeof *res);
	if (all_pairs(c, res) < 0) {
		cli_warn("preflight: %s; the program is not run",
		    comm_error(c));
		rc = CLI_EXIT_CHECK;
	} else if (g.rank == 0) {
		if (g.master == NULL || cli_hostport_parse(g.master, host,
		    sizeof host, &port) < 0)
			snprintf(host, sizeof host, "rank 0");
		if (report(c, res, host, cli_now() - t0) > 0)
			rc = CLI_EXIT_CHECK;
	}
	free(res);
	comm_close(c);
	return rc;
}
