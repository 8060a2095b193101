/* bench_p2p: point-to-point latency and bandwidth between two ranks, as
 * the OSU micro-benchmarks measure them: osu_latency's ping-pong (half the
 * round trip), osu_bw's window of messages one way closed by a short
 * acknowledgement, osu_bibw's windows both ways at once. */
#include <stdlib.h>
#include <string.h>

#include "bench/bench.h"

#define P2P_OPCODE 16		/* past coll's kinds and collref's check */
#define TAG_DATA 0x62
#define TAG_ACK 0x63

/* One timed iteration on rank a (the other end only answers); the time
 * of the whole exchange, or -1 on a comm failure. */
static double
latency_iter(struct comm *c, int me, int a, int b, char *buf, size_t bytes)
{
	double t0 = cli_now();

	if (me == a) {
		if (comm_send(c, b, TAG_DATA, buf, bytes) < 0 ||
		    comm_recv(c, b, TAG_DATA, buf, bytes) < 0)
			return -1;
	} else if (comm_recv(c, a, TAG_DATA, buf, bytes) < 0 ||
	    comm_send(c, a, TAG_DATA, buf, bytes) < 0)
		return -1;
	return (cli_now() - t0) / 2;
}

/* A window of messages (both ways for bibw), then the acknowledgement. */
static double
window_iter(struct comm *c, const struct bench_p2p *p, int me, int a, int b,
    char *sbuf, char *rbuf, size_t bytes, struct comm_req *rq)
{
	int peer = me == a ? b : a, n = 0, sends, recvs;
	char ack[4] = { 0 };
	double t0 = cli_now();

	sends = me == a || p->test == BENCH_BIBW ? p->window : 0;
	recvs = me == b || p->test == BENCH_BIBW ? p->window : 0;
	memset(rq, 0, 2 * (size_t)p->window * sizeof *rq);
	for (int i = 0; i < recvs; i++)
		if (comm_irecv(c, peer, TAG_DATA, rbuf, bytes, &rq[n++]) < 0)
			return -1;
	for (int i = 0; i < sends; i++)
		if (comm_isend(c, peer, TAG_DATA, sbuf, bytes, &rq[n++]) < 0)
			return -1;
	if (comm_waitall(c, rq, n) < 0)
		return -1;
	if (me == a) {
		if (comm_recv(c, b, TAG_ACK, ack, sizeof ack) < 0)
			return -1;
	} else if (comm_send(c, a, TAG_ACK, ack, sizeof ack) < 0)
		return -1;
	return (cli_now() - t0) / p->window;
}

int
bench_p2p_measure(struct comm *c, const struct bench_p2p *p, int a, int b,
    size_t bytes, struct bench_p2p_row *r)
{
	int me = comm_rank(c), total = p->warmup + p->iters, rc = -1;
	char *sbuf = NULL, *rbuf = NULL;
	struct comm_req *rq = NULL;
	double *t = NULL, dt;

	memset(r, 0, sizeof *r);
	r->a = a;
	r->b = b;
	r->bytes = bytes;
	r->iters = p->iters;
	sbuf = cli_calloc(bytes + 1, 1);
	rbuf = cli_calloc(bytes + 1, 1);
	t = cli_calloc((size_t)p->iters + 1, sizeof *t);
	rq = cli_calloc(2 * (size_t)p->window + 1, sizeof *rq);
	memset(sbuf, 0x5a, bytes + 1);
	if (coll_barrier(c) < 0)
		goto out;
	comm_op_begin(c, P2P_OPCODE, "p2p", DT_U8, (uint64_t)bytes);
	comm_set_step(c, "p2p %s between ranks %d and %d",
	    bench_p2p_name(p->test), a, b);
	if (me == a || me == b)
		for (int i = 0; i < total; i++) {
			dt = p->test == BENCH_LATENCY ?
			    latency_iter(c, me, a, b, sbuf, bytes) :
			    window_iter(c, p, me, a, b, sbuf, rbuf, bytes, rq);
			if (dt < 0)
				goto out;
			if (i >= p->warmup)
				t[i - p->warmup] = dt;
		}
	/* Rank a's times are the measurement; everyone gets them, and after
	 * them how a reaches b (only the pair's ranks know): 1 shm, 0 tcp. */
	if (me == a)
		t[p->iters] = strcmp(comm_transport(c, b), "shm") == 0;
	if (coll_broadcast(c, t, (size_t)p->iters + 1, DT_F64, a,
	    COLL_AUTO) < 0)
		goto out;
	r->transport = t[p->iters] != 0 ? "shm" : "tcp";
	bench_stats(t, p->iters, &r->st);
	if (r->st.med > 0)
		r->gbps = (double)bytes * (p->test == BENCH_BIBW ? 2 : 1) /
		    r->st.med / 1e9;
	rc = 0;
out:
	free(sbuf);
	free(rbuf);
	free(t);
	free(rq);
	return rc;
}
