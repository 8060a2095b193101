/*
 * grow: ranks started again join a running group (comm_grow). A group
 * opened with comm_options.grow keeps each rank's data listener open,
 * and one member, the holder, keeps listening at the rendezvous
 * address: rank 0 first, then (when it left) whichever member can bind
 * that address again. A rank started again (comm_options.rejoin) opens
 * its own listener, connects to the rendezvous address with the group's
 * handshake (auth.c) and says who it is; the holder answers only at a
 * step boundary, the members' comm_grow: they learn who joins (an
 * allreduce of a flag per rank, the next group id and whether a holder
 * is left), the holder sends each joiner the table (the new group, its
 * members' listeners, hosts and the group id), the joiners connect to
 * every member's listener (and to the joiners below them), each link
 * opened with the handshake and a hello, and all make the same sub-group
 * of the links (comm_sub_make). A rank of the group that has not been
 * seen to leave waits, its joiner held, until it has.
 */
#include "comm/comm_impl.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/coll.h"
#include "tensor/dtype.h"

#define GROW_MAGIC 0x57475843u	/* "CXGW" */
#define GROW_HELLO 0x48475843u	/* "CXGH" */
#define GROW_HANDSHAKE_S 5.0	/* for a connection's first words */

/* The listeners a growing group keeps, and the holder's joiners. */
struct comm_grow {
	int lfd;		/* this rank's data listener (stream 0) */
	char laddr[80];
	int mfd;		/* the rendezvous listener (the holder), or -1 */
	struct comm_sock_addr master;
	int rejoin;		/* started again, not yet in a group */
	int *pend;		/* holder: per rank, a joiner's connection, or -1 */
	char (*paddr)[80];	/* its listener */
	int *unit;		/* per rank, its unit (comm_grow_units), or NULL */
};

/* Joiner -> holder, after the handshake. */
struct grow_join {
	uint32_t magic;
	int32_t rank, world;
	uint8_t job[SHA256_LEN];
	char addr[80];
};

/* Holder -> joiner: status 0 and the table, or why not. */
struct grow_reply {
	int32_t status;
	uint32_t ctx;
	int32_t nhosts, machine_ranks;
	char msg[COLLX_ERRLEN];
};

/* Joiner -> member, first thing on a new link, after the handshake. */
struct grow_hello {
	uint32_t magic;
	int32_t rank, world;
	uint8_t job[SHA256_LEN];
	char addr[80];
};

/* What a new group is: per rank of the world, a member of it, a joiner
 * (also a member), its host and its listener. */
struct grow_table {
	uint8_t *member, *joiner;
	int32_t *host;
	char (*addr)[80];
};

static int
table_alloc(struct grow_table *t, int w)
{
	t->member = calloc((size_t)w, 2);
	t->host = calloc((size_t)w, sizeof *t->host);
	t->addr = calloc((size_t)w, sizeof *t->addr);
	t->joiner = t->member != NULL ? t->member + w : NULL;
	return t->member && t->host && t->addr ? 0 : -1;
}

static void
table_free(struct grow_table *t)
{
	free(t->member);
	free(t->host);
	free(t->addr);
}

int
comm_grow_keep(struct comm *c, int lfd, const char *laddr, int mfd,
    const struct comm_sock_addr *master, int rejoin)
{
	struct comm_grow *g = calloc(1, sizeof *g);
	int p;

	if (g == NULL || (g->pend = malloc((size_t)c->world *
	    sizeof *g->pend)) == NULL || (g->paddr = calloc((size_t)c->world,
	    sizeof *g->paddr)) == NULL) {
		if (g != NULL)
			free(g->pend);
		free(g);
		comm_fail(c, COMM_ERR_RUNTIME, "out of memory");
		return -1;
	}
	for (p = 0; p < c->world; p++)
		g->pend[p] = -1;
	g->lfd = lfd;
	snprintf(g->laddr, sizeof g->laddr, "%s", laddr);
	g->mfd = mfd;
	g->master = *master;
	g->rejoin = rejoin;
	c->grow = g;
	return 0;
}

void
comm_grow_free(struct comm *c)
{
	struct comm_grow *g = c->grow;
	int p;

	if (g == NULL)
		return;
	for (p = 0; p < c->world; p++)
		if (g->pend[p] >= 0)
			close(g->pend[p]);
	if (g->lfd >= 0)
		close(g->lfd);
	if (g->mfd >= 0)
		close(g->mfd);
	free(g->pend);
	free(g->paddr);
	free(g->unit);
	free(g);
	c->grow = NULL;
}

int
comm_grow_units(struct comm *c, const int *unit, char *err, size_t errlen)
{
	struct comm_grow *g = c->net->grow;
	size_t w = (size_t)c->net->world;

	if (g == NULL)
		return cli_fail(err, errlen, "comm_grow_units: the group was "
		    "not opened to grow (comm_options.grow)");
	if (g->unit == NULL && (g->unit = malloc(w * sizeof *g->unit)) == NULL)
		return cli_fail(err, errlen, "out of memory");
	memcpy(g->unit, unit, w * sizeof *g->unit);
	return 0;
}

/* The joiners of v (per rank, 1: joins) left waiting where their unit
 * is not all there: a unit joins whole or not at all. */
static void
whole_units(const struct comm_grow *g, int64_t *v, int w)
{
	int p, q;

	for (p = 0; p < w && g->unit != NULL; p++)
		for (q = 0; q < w && v[p]; q++)
			if (g->unit[q] == g->unit[p] && !v[q])
				v[p] = 0;
}

int
comm_rejoining(const struct comm *c)
{
	return c->net->grow != NULL && c->net->grow->rejoin;
}

/* Whether net's rank r is one of c's. */
static int
in_group(const struct comm *c, int r)
{
	int i;

	for (i = 0; i < c->world; i++)
		if (comm_net_rank(c, i) == r)
			return 1;
	return 0;
}

/* The holder's answer to a joiner of another job (or other options,
 * world size, rank): why, so that it stops at once. */
static void
refuse(struct comm *net, int fd, const struct grow_join *j, double deadline)
{
	struct grow_reply rep = { 1, 0, 0, 0, "" };
	char err[COLLX_ERRLEN];

	if (j->magic != GROW_MAGIC)
		snprintf(rep.msg, sizeof rep.msg, "not a collx rank of this "
		    "version");
	else if (j->world != net->world)
		snprintf(rep.msg, sizeof rep.msg, "world size %d differs from "
		    "the group's %d", j->world, net->world);
	else if (j->rank < 0 || j->rank >= net->world || j->rank == net->rank)
		snprintf(rep.msg, sizeof rep.msg, "rank %d is not one the group "
		    "lacks", j->rank);
	else
		snprintf(rep.msg, sizeof rep.msg, "job identity differs from "
		    "the group's (another job, or other options)");
	comm_sock_send_all(fd, &rep, sizeof rep, deadline, err, sizeof err);
}

/* The holder: every joiner waiting at the rendezvous address now, its
 * handshake and join read (a stranger, or a rank of another job,
 * dropped; a rank already waiting replaced by its newer self). */
static void
take_joins(struct comm *net)
{
	struct comm_grow *g = net->grow;
	struct comm_sock_addr from;
	struct grow_join j;
	char err[COLLX_ERRLEN];
	double dl;
	int fd;

	/* the listener does not block: what is there now */
	while ((fd = comm_sock_accept(g->mfd, cli_now(), &from, err,
	    sizeof err)) >= 0) {
		dl = cli_now() + GROW_HANDSHAKE_S;
		if (auth_server(fd, net->token, dl, err, sizeof err) < 0 ||
		    comm_sock_recv_all(fd, &j, sizeof j, dl, err,
		    sizeof err) < 0) {
			comm_log(net, "dropped connection from %s: %s",
			    from.str, err);
			close(fd);
			continue;
		}
		if (j.magic != GROW_MAGIC || j.world != net->world ||
		    j.rank < 0 || j.rank >= net->world ||
		    j.rank == net->rank ||
		    !auth_equal(j.job, net->job, sizeof j.job)) {
			refuse(net, fd, &j, dl);
			comm_log(net, "refused a rank rejoining from %s: not "
			    "of this job", from.str);
			close(fd);
			continue;
		}
		if (g->pend[j.rank] >= 0)
			close(g->pend[j.rank]);
		g->pend[j.rank] = fd;
		j.addr[sizeof j.addr - 1] = '\0';
		memcpy(g->paddr[j.rank], j.addr, sizeof j.addr);
	}
}

/* No member holds the rendezvous address (its holder left): take it
 * when this rank can bind it (it runs where the address is). */
static void
hold(struct comm *net)
{
	struct comm_grow *g = net->grow;
	struct comm_sock_addr a = g->master;
	char err[COLLX_ERRLEN];

	if (g->mfd < 0)
		g->mfd = comm_sock_listen(&a, err, sizeof err);
}

/* Link of a joiner to peer p (its listener addr), handshake and hello
 * sent: 0, or -1 (comm_fail). */
static int
link_to(struct comm *net, int p, const char *addr, double deadline)
{
	struct grow_hello h = { GROW_HELLO, net->rank, net->world, { 0 },
	    "" };
	struct comm_sock_addr a;
	char err[COLLX_ERRLEN];
	int fd = -1;

	memcpy(h.job, net->job, sizeof h.job);
	snprintf(h.addr, sizeof h.addr, "%s", net->grow->laddr);
	if (comm_sock_resolve_hostport(addr, &a, err, sizeof err) < 0 ||
	    (fd = comm_sock_connect_once(&a, NULL, deadline, err,
	    sizeof err)) < 0 || auth_client(fd, net->token, deadline, err,
	    sizeof err) < 0 || comm_sock_send_all(fd, &h, sizeof h, deadline,
	    err, sizeof err) < 0) {
		if (fd >= 0)
			close(fd);
		comm_fail(net, COMM_ERR_RUNTIME, "rejoining: connecting to "
		    "rank %d (%s): %s", p, addr, err);
		return -1;
	}
	net->peers[p].st[0].fd = fd;
	snprintf(net->peers[p].addr, sizeof net->peers[p].addr, "%s", addr);
	return 0;
}

/* The links from the joiners of t above this rank (every joiner, on a
 * member), each filed under its rank: 0, or -1 (comm_fail) with the
 * links taken so far closed. */
static int
links_from(struct comm *net, const struct grow_table *t, double deadline)
{
	struct comm_grow *g = net->grow;
	struct comm_sock_addr from;
	struct grow_hello h;
	char err[COLLX_ERRLEN];
	int want = 0, p, fd;
	double dl;

	for (p = 0; p < net->world; p++)
		want += t->joiner[p] && (!t->joiner[net->rank] ||
		    p > net->rank);
	while (want > 0) {
		fd = comm_sock_accept(g->lfd, deadline, &from, err,
		    sizeof err);
		if (fd < 0)
			goto fail;
		dl = cli_now() + GROW_HANDSHAKE_S;
		dl = dl < deadline ? dl : deadline;
		if (auth_server(fd, net->token, dl, err, sizeof err) < 0 ||
		    comm_sock_recv_all(fd, &h, sizeof h, dl, err,
		    sizeof err) < 0 || h.magic != GROW_HELLO ||
		    h.world != net->world || h.rank < 0 ||
		    h.rank >= net->world || !t->joiner[h.rank] ||
		    net->peers[h.rank].st[0].fd >= 0 ||
		    !auth_equal(h.job, net->job, sizeof h.job)) {
			comm_log(net, "dropped connection from %s while ranks "
			    "rejoin", from.str);
			close(fd);
			continue;
		}
		h.addr[sizeof h.addr - 1] = '\0';
		net->peers[h.rank].st[0].fd = fd;
		snprintf(net->peers[h.rank].addr, sizeof net->peers[0].addr,
		    "%s", h.addr);
		want--;
	}
	return 0;
fail:
	for (p = 0; p < net->world; p++)
		if (t->joiner[p] && p != net->rank &&
		    net->peers[p].st[0].fd >= 0) {
			close(net->peers[p].st[0].fd);
			net->peers[p].st[0].fd = -1;
		}
	comm_fail(net, COMM_ERR_RUNTIME, "rank %d: ranks started again did not "
	    "connect while rejoining: %s", net->rank, err);
	return -1;
}

/* The group of t's members, in rank order, id ctx; the joiners' links
 * clear, and no longer gone. */
static int
make_group(struct comm *net, const struct grow_table *t, uint32_t ctx,
    struct comm **sub)
{
	int *ranks = malloc((size_t)net->world * sizeof *ranks), n = 0, p, rc;

	if (ranks == NULL || (net->gone == NULL && (net->gone =
	    calloc((size_t)net->world, sizeof *net->gone)) == NULL)) {
		free(ranks);
		comm_fail(net, COMM_ERR_RUNTIME, "out of memory");
		return -1;
	}
	for (p = 0; p < net->world; p++) {
		if (!t->member[p])
			continue;
		ranks[n++] = p;
		net->gone[p] = 0;
		if (t->joiner[p])
			comm_link_clear(net, p);
	}
	rc = comm_sub_make(net, ctx, ranks, n, sub);
	free(ranks);
	return rc;
}

/* The holder to joiner p: the table (the reply, then the members, the
 * joiners, the hosts and the listeners). */
static int
send_table(struct comm *net, int p, const struct grow_table *t,
    uint32_t ctx, double deadline)
{
	struct grow_reply rep = { 0, ctx, net->nhosts, net->machine_ranks,
	    "" };
	size_t w = (size_t)net->world;
	char err[COLLX_ERRLEN];
	int fd = net->grow->pend[p];

	return comm_sock_send_all(fd, &rep, sizeof rep, deadline, err,
	    sizeof err) < 0 || comm_sock_send_all(fd, t->member, 2 * w,
	    deadline, err, sizeof err) < 0 || comm_sock_send_all(fd, t->host,
	    w * sizeof *t->host, deadline, err, sizeof err) < 0 ||
	    comm_sock_send_all(fd, t->addr, w * sizeof *t->addr, deadline, err,
	    sizeof err) < 0 ? -1 : 0;
}

/* A member's comm_grow. */
static int
admit(struct comm *c, struct comm **sub)
{
	struct comm *net = c->net;
	struct comm_grow *g = net->grow;
	int w = net->world, p, n = 0, rc = -1;
	int64_t *v = calloc((size_t)w + 2, sizeof *v);
	struct grow_table t = { 0 };
	double deadline;

	if (v == NULL || table_alloc(&t, w) < 0) {
		comm_fail(c, COMM_ERR_RUNTIME, "out of memory");
		goto out;
	}
	if (g->mfd >= 0)
		take_joins(net);
	for (p = 0; p < w; p++)
		v[p] = g->pend[p] >= 0 && !in_group(c, p);
	v[w] = net->next_ctx;
	v[w + 1] = g->mfd >= 0 ? c->rank + 1 : 0;
	comm_set_step(c, "--ft: who rejoins");
	if (coll_allreduce(c, v, (size_t)w + 2, DT_I64, COLL_MAX,
	    COLL_AUTO) < 0)
		goto out;
	if (v[w + 1] == 0)
		hold(net);
	whole_units(g, v, w);
	for (p = 0; p < w; p++) {
		t.joiner[p] = (uint8_t)v[p];
		t.member[p] = (uint8_t)(v[p] || in_group(c, p));
		t.host[p] = net->host != NULL ? net->host[p] : 0;
		snprintf(t.addr[p], sizeof t.addr[p], "%s", v[p] ?
		    g->paddr[p] : net->peers[p].addr);
		n += (int)v[p];
		/* a joiner's predecessor left alive (a sub-group left it
		 * out, not a shrink): its link, still open, is dead */
		if (v[p] && net->peers[p].st[0].fd >= 0) {
			close(net->peers[p].st[0].fd);
			net->peers[p].st[0].fd = -1;
		}
	}
	if (n == 0) {
		rc = 0;
		goto out;
	}
	snprintf(t.addr[net->rank], sizeof t.addr[0], "%s", g->laddr);
	deadline = cli_now() + net->timeout;
	/* a joiner the holder cannot answer does not connect: the members'
	 * wait for it fails, and the group shrinks back */
	for (p = 0; p < w && c->rank + 1 == v[w + 1]; p++)
		if (t.joiner[p] && send_table(net, p, &t, (uint32_t)v[w],
		    deadline) < 0)
			comm_log(net, "rank %d, rejoining, left", p);
	for (p = 0; p < w && c->rank + 1 == v[w + 1]; p++)
		if (t.joiner[p]) {
			close(g->pend[p]);
			g->pend[p] = -1;
		}
	if (links_from(net, &t, deadline) == 0 &&
	    make_group(net, &t, (uint32_t)v[w], sub) == 0)
		rc = 0;
out:
	free(v);
	table_free(&t);
	return rc;
}

/* The rejoiner: its join said at the rendezvous address, retried while
 * the holder's connection ends (it left) until deadline; the reply
 * read. The connection's fd, or -1 (comm_fail). */
static int
ask(struct comm *net, struct grow_reply *rep, struct grow_table *t,
    double deadline)
{
	struct comm_grow *g = net->grow;
	struct grow_join j = { GROW_MAGIC, net->rank, net->world, { 0 }, "" };
	struct comm_note note;
	size_t w = (size_t)net->world;
	char err[COLLX_ERRLEN] = "";
	int fd;

	memcpy(j.job, net->job, sizeof j.job);
	snprintf(j.addr, sizeof j.addr, "%s", g->laddr);
	comm_note_start(&note, NULL, NULL);
	while (cli_now() < deadline) {
		fd = comm_sock_connect(&g->master, NULL, deadline, &note, err,
		    sizeof err);
		if (fd < 0)
			break;
		if (auth_client(fd, net->token, deadline, err,
		    sizeof err) == 0 && comm_sock_send_all(fd, &j, sizeof j,
		    deadline, err, sizeof err) == 0 && comm_sock_recv_all(fd,
		    rep, sizeof *rep, deadline, err, sizeof err) == 0 &&
		    (rep->status != 0 || (comm_sock_recv_all(fd, t->member,
		    2 * w, deadline, err, sizeof err) == 0 &&
		    comm_sock_recv_all(fd, t->host, w * sizeof *t->host,
		    deadline, err, sizeof err) == 0 && comm_sock_recv_all(fd,
		    t->addr, w * sizeof *t->addr, deadline, err,
		    sizeof err) == 0)))
			return fd;
		close(fd);
		/* the holder left, or the group shrank: ask again */
		usleep(20000);
	}
	comm_fail(net, COMM_ERR_RUNTIME, "rejoining: no member of the group "
	    "admitted rank %d at %s within %g s: %s", net->rank,
	    g->master.str, 2 * net->timeout, err[0] ? err : "timed out");
	return -1;
}

/* The links a failed admission left, closed, and its failure cleared:
 * the rank asks again. */
static void
unlink_all(struct comm *net)
{
	int p;

	for (p = 0; p < net->world; p++)
		if (p != net->rank && net->peers[p].st[0].fd >= 0) {
			close(net->peers[p].st[0].fd);
			net->peers[p].st[0].fd = -1;
		}
	net->kind = COMM_ERR_NONE;
	net->err[0] = '\0';
}

/* A rank started again: admitted at the members' step boundary, linked
 * to each of them, in the group they made. When a link fails (a member
 * left meanwhile, and the others, waiting for this rank's links, shrink
 * back), it asks again, until twice the timeout has passed. */
static int
rejoin(struct comm *net, struct comm **sub)
{
	int w = net->world, p, fd, rc = -1;
	struct grow_table t = { 0 };
	struct grow_reply rep;
	double deadline = cli_now() + 2 * net->timeout, dl;

	if (table_alloc(&t, w) < 0 || (net->gone == NULL &&
	    (net->gone = calloc((size_t)w, sizeof *net->gone)) == NULL) ||
	    (net->host == NULL && (net->host = calloc((size_t)w,
	    sizeof *net->host)) == NULL)) {
		comm_fail(net, COMM_ERR_RUNTIME, "out of memory");
		goto out;
	}
	snprintf(net->peers[net->rank].addr, sizeof net->peers[0].addr, "%s",
	    net->grow->laddr);
	for (;;) {
		if ((fd = ask(net, &rep, &t, deadline)) < 0)
			goto out;
		close(fd);
		if (rep.status != 0) {
			rep.msg[sizeof rep.msg - 1] = '\0';
			comm_fail(net, COMM_ERR_MISMATCH, "rejoining: refused: "
			    "%s", rep.msg);
			goto out;
		}
		for (p = 0; p < w; p++) {
			t.addr[p][sizeof t.addr[p] - 1] = '\0';
			net->host[p] = t.host[p];
			net->gone[p] = !t.member[p];
		}
		net->nhosts = rep.nhosts;
		net->machine_ranks = rep.machine_ranks;
		dl = cli_now() + net->timeout;
		for (p = 0; p < w; p++)
			if (p != net->rank && t.member[p] && (!t.joiner[p] ||
			    p < net->rank) && link_to(net, p, t.addr[p], dl) < 0)
				break;
		if (p == w && links_from(net, &t, dl) == 0)
			break;
		if (cli_now() >= deadline)
			goto out;
		unlink_all(net);
	}
	comm_spin_default(net);
	net->meshed = 1;
	net->grow->rejoin = 0;
	rc = make_group(net, &t, rep.ctx, sub);
out:
	table_free(&t);
	return rc;
}

int
comm_grow(struct comm *c, struct comm **sub, char *err, size_t errlen)
{
	struct comm *net = c->net;
	int rc;

	*sub = NULL;
	if (net->grow == NULL)
		return cli_fail(err, errlen, "comm_grow: the group was not "
		    "opened to grow (comm_options.grow)");
	if (net->grow->rejoin)
		rc = rejoin(net, sub);
	else if (net->nstreams != 1)
		return cli_fail(err, errlen, "comm_grow: the group has %d "
		    "streams a peer (one interface only)", net->nstreams);
	else
		rc = admit(c, sub);
	if (rc < 0)
		cli_fail(err, errlen, "%s", comm_error(c));
	return rc;
}
