/* rendezvous: every rank opens a listener per stream and registers its
 * addresses with rank 0 at the master address; rank 0 checks world size,
 * job and rank, then sends the table to all. Then the mesh: rank i
 * connects to every rank j < i (one connection per stream) and accepts
 * the rest. Every connection first runs the token handshake (auth.c). */
#include "comm/comm_impl.h"

#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define RV_MAGIC 0x56525843u	/* "CXRV" */
#define MESH_MAGIC 0x484d5843u	/* "CXMH" */
#define RV_VERSION 2
/* A joiner speaks first, at once: one that says nothing for this long is
 * dropped, so a silent stranger cannot hold rank 0's gathering up. */
#define RV_HANDSHAKE_S 5.0
#define RV_JOBTEXT 512
/* A joiner waits this much longer than rank 0 gathers. */
#define RV_GRACE_S 1.0

/* Rank -> rank 0: who I am and where I listen. */
struct rv_join {
	uint32_t magic, version;
	int32_t rank, world, nstreams;
	uint8_t job[SHA256_LEN];
	char addr[COMM_MAX_STREAMS][80];
	char jobtext[RV_JOBTEXT];	/* the job's text, to explain a mismatch */
};

/* Rank 0 -> rank: accepted (status 0) or why not. */
struct rv_reply {
	int32_t status;
	char msg[COLLX_ERRLEN];
};

/* Rank i -> rank j < i, first thing on every mesh connection. */
struct mesh_hello {
	uint32_t magic;
	int32_t rank, world, stream;
	uint8_t job[SHA256_LEN];
};

/* What one rank needs while joining. */
struct rv {
	struct comm_sock_addr master;
	struct comm_sock_addr local[COMM_MAX_STREAMS];	/* listening, per stream */
	struct comm_sock_addr from[COMM_MAX_STREAMS];	/* the same, port 0: to bind */
	int lfd[COMM_MAX_STREAMS];
	int bind_local;		/* ifaces given: bind outgoing connections too */
	const char *jobtext;	/* comm_options.job */
	char (*table)[COMM_MAX_STREAMS][80];	/* world rows */
	struct comm_note note;	/* comm_options.note, while joining */
	int keep_mfd;		/* comm_options.grow: rank 0 keeps listening */
	int mfd;		/* and its listener, kept */
};

static int
rv_fail(struct comm *c, enum comm_errkind kind, const char *what,
    const char *why)
{
	comm_fail(c, kind, "%s: %s", what, why);
	return -1;
}

/* Local address for each stream: the named interfaces, else the route to
 * the master. */
static int
rv_pick_addrs(struct comm *c, const struct comm_options *o, struct rv *v)
{
	char names[256], *save = NULL, *name, err[COLLX_ERRLEN];
	int n = 0;

	if (!o->ifaces || !o->ifaces[0]) {
		if (comm_sock_route_addr(&v->master, &v->local[0], err, sizeof err) < 0)
			return rv_fail(c, COMM_ERR_RUNTIME, "choosing an address", err);
		c->nstreams = 1;
		return 0;
	}
	snprintf(names, sizeof names, "%s", o->ifaces);
	for (name = strtok_r(names, ",", &save); name; name = strtok_r(NULL, ",", &save)) {
		if (n == COMM_MAX_STREAMS) {
			comm_fail(c, COMM_ERR_RUNTIME, "more than %d interfaces in '%s'",
			    COMM_MAX_STREAMS, o->ifaces);
			return -1;
		}
		if (comm_sock_iface_addr(name, v->master.ss.ss_family, &v->local[n], err,
		    sizeof err) < 0)
			return rv_fail(c, COMM_ERR_RUNTIME, "choosing an address", err);
		n++;
	}
	if (n == 0)
		return rv_fail(c, COMM_ERR_RUNTIME, "choosing an address", "empty interface list");
	c->nstreams = n;
	v->bind_local = 1;
	return 0;
}

/* A listener on the first free port of lo..hi (all of them ephemeral when
 * lo is 0): firewalls can open a known range for the data connections. */
static int
rv_listen_range(struct comm_sock_addr *a, int lo, int hi, char *err,
    size_t errlen)
{
	struct comm_sock_addr try;
	int port, fd;

	if (lo <= 0)
		return comm_sock_listen(a, err, errlen);
	for (port = lo; port <= hi; port++) {
		try = *a;
		comm_sock_addr_set_port(&try, port);
		if ((fd = comm_sock_listen(&try, err, errlen)) >= 0) {
			*a = try;
			return fd;
		}
		if (errno != EADDRINUSE)
			return -1;
	}
	snprintf(err, errlen, "no free port in %d-%d", lo, hi);
	return -1;
}

static int
rv_listen(struct comm *c, const struct comm_options *o, struct rv *v)
{
	char err[COLLX_ERRLEN];
	int s;

	for (s = 0; s < c->nstreams; s++) {
		v->from[s] = v->local[s];
		v->lfd[s] = rv_listen_range(&v->local[s], o->port_lo, o->port_hi,
		    err, sizeof err);
		if (v->lfd[s] < 0)
			return rv_fail(c, COMM_ERR_RUNTIME, "opening a listener", err);
	}
	return 0;
}

static void
rv_join_fill(const struct comm *c, const struct rv *v, struct rv_join *j)
{
	int s;

	memset(j, 0, sizeof *j);
	j->magic = RV_MAGIC;
	j->version = RV_VERSION;
	j->rank = c->rank;
	j->world = c->world;
	j->nstreams = c->nstreams;
	memcpy(j->job, c->job, sizeof j->job);
	snprintf(j->jobtext, sizeof j->jobtext, "%s", v->jobtext);
	for (s = 0; s < c->nstreams; s++)
		snprintf(j->addr[s], sizeof j->addr[s], "%s", v->local[s].str);
}

/* Addresses come from the network: make every row's strings end. */
static void
rv_terminate(struct rv *v, int from, int to)
{
	int r, s;

	for (r = from; r < to; r++)
		for (s = 0; s < COMM_MAX_STREAMS; s++)
			v->table[r][s][sizeof v->table[r][s] - 1] = '\0';
}

/* Word k of a job text ("PROGRAM KEY=VALUE ..."): its start and length;
 * 0 past the last. */
static int
rv_word(const char *s, int k, const char **w, size_t *len)
{
	for (;;) {
		s += strspn(s, " ");
		if (*s == '\0')
			return 0;
		*len = strcspn(s, " ");
		if (k-- == 0) {
			*w = s;
			return 1;
		}
		s += *len;
	}
}

/* The VALUE of KEY (klen bytes) in a job text; NULL when absent. */
static const char *
rv_value(const char *s, const char *key, size_t klen,
    size_t *vlen)
{
	const char *w;
	size_t len;
	int k;

	for (k = 1; rv_word(s, k, &w, &len); k++)
		if (len > klen && memcmp(w, key, klen) == 0 && w[klen] == '=') {
			*vlen = len - klen - 1;
			return w + klen + 1;
		}
	return NULL;
}

/* One key of a's words whose value b lacks or differs; 1 with the
 * sentence in why ("rank R was started with K V, rank 0 with K W"). */
static int
rv_key_differs(const char *a, const char *b, int rank, int a_is_rank0,
    char *why, size_t len)
{
	const char *w, *av, *bv;
	size_t wl, kl, al, bl;
	int k;

	for (k = 1; rv_word(a, k, &w, &wl); k++) {
		if ((av = memchr(w, '=', wl)) == NULL)
			continue;
		kl = (size_t)(av - w);
		/* Another launch is another job, not another option. */
		if (kl == 12 && memcmp(w, "COLLX_JOB_ID", 12) == 0)
			continue;
		av++;
		al = wl - kl - 1;
		bv = rv_value(b, w, kl, &bl);
		if (bv && bl == al && memcmp(av, bv, al) == 0)
			continue;
		if (a_is_rank0)
			snprintf(why, len, "rank %d was started with%s%.*s%s%.*s, rank 0 "
			    "with %.*s %.*s", rank, bv ? " " : "out ", (int)kl, w,
			    bv ? " " : "", bv ? (int)bl : 0, bv ? bv : "", (int)kl, w,
			    (int)al, av);
		else
			snprintf(why, len, "rank %d was started with %.*s %.*s, rank 0 "
			    "without it", rank, (int)kl, w, (int)al, av);
		return 1;
	}
	return 0;
}

/* What runs, the words of a job text before its first KEY=VALUE (the
 * program and any subcommand, "collx-bench coll"): their length. */
static size_t
rv_head(const char *s)
{
	const char *w;
	size_t len, end = 0;
	int k;

	for (k = 0; rv_word(s, k, &w, &len) && !memchr(w, '=', len); k++)
		end = (size_t)(w + len - s);
	return end;
}

/* Why job texts mine (rank 0's) and theirs differ: what runs, or the
 * first option; 0 when the texts do not tell (old or overlong). */
static int
rv_job_diff(const char *mine, const char *theirs, int rank,
    char *why, size_t len)
{
	size_t pl = rv_head(mine), ql = rv_head(theirs);

	if (pl == 0 || ql == 0)
		return 0;
	if (pl != ql || memcmp(mine, theirs, pl) != 0) {
		snprintf(why, len, "rank %d runs %.*s, rank 0 %.*s", rank,
		    (int)ql, theirs, (int)pl, mine);
		return 1;
	}
	return rv_key_differs(mine, theirs, rank, 1, why, len) ||
	    rv_key_differs(theirs, mine, rank, 0, why, len);
}

/* Rank 0's check of a joiner; 0, or -1 with the reason in why. */
static int
rv_validate(const struct comm *c, const struct rv *v,
    struct rv_join *j, const int *joined, char *why, size_t len)
{
	if (j->magic != RV_MAGIC || j->version != RV_VERSION)
		snprintf(why, len, "not a collx rank of this version");
	else if (j->world != c->world)
		snprintf(why, len, "world size %d differs from rank 0's %d", j->world, c->world);
	else if (!auth_equal(j->job, c->job, sizeof j->job)) {
		j->jobtext[sizeof j->jobtext - 1] = '\0';
		if (!rv_job_diff(v->jobtext, j->jobtext, j->rank, why, len))
			snprintf(why, len, "job identity differs from rank 0's (another job?)");
	}
	else if (j->rank <= 0 || j->rank >= c->world)
		snprintf(why, len, "rank %d is not within world size %d", j->rank, c->world);
	else if (joined[j->rank] >= 0)
		snprintf(why, len, "rank %d has already joined (duplicate rank)", j->rank);
	else if (j->nstreams != c->nstreams)
		snprintf(why, len, "%d interfaces differ from rank 0's %d", j->nstreams,
		    c->nstreams);
	else
		return 0;
	return -1;
}

/* The deadline for a new connection's first words: a joiner speaks at
 * once, so a silent stranger holds the listener up RV_HANDSHAKE_S at most. */
static double
handshake_deadline(double deadline)
{
	double cap = cli_now() + RV_HANDSHAKE_S;

	return deadline < cap ? deadline : cap;
}

/* Rank 0: take one registration from a new connection; the rank or -1. */
static int
rv_take_one(struct comm *c, struct rv *v, int fd, const char *from,
    int *joined, double deadline)
{
	struct rv_join j;
	struct rv_reply rep;
	char err[COLLX_ERRLEN];

	deadline = handshake_deadline(deadline);
	if (auth_server(fd, c->token, deadline, err, sizeof err) < 0 ||
	    comm_sock_recv_all(fd, &j, sizeof j, deadline, err, sizeof err) < 0) {
		comm_log(c, "dropped connection from %s: %s", from, err);
		return -1;
	}
	memset(&rep, 0, sizeof rep);
	if (rv_validate(c, v, &j, joined, rep.msg, sizeof rep.msg) < 0) {
		rep.status = 1;
		comm_log(c, "refused rank %d from %s: %s", j.rank, from, rep.msg);
		comm_sock_send_all(fd, &rep, sizeof rep, deadline, err, sizeof err);
		return -1;
	}
	if (comm_sock_send_all(fd, &rep, sizeof rep, deadline, err, sizeof err) < 0) {
		comm_log(c, "dropped rank %d from %s: %s", j.rank, from, err);
		return -1;
	}
	memcpy(v->table[j.rank], j.addr, sizeof j.addr);
	rv_terminate(v, j.rank, j.rank + 1);
	joined[j.rank] = fd;
	return j.rank;
}

static void
rv_missing(const struct comm *c, const int *joined, char *buf, size_t len)
{
	size_t n = 0;
	int r;

	buf[0] = '\0';
	for (r = 1; r < c->world && n + 16 < len; r++)
		if (joined[r] < 0)
			n += (size_t)snprintf(buf + n, len - n, "%s%d", n ? "," : "", r);
}

/* Rank 0's note while n of the ranks have joined, when one is due. */
static int
rv_note_missing(const struct comm *c, struct rv *v, const int *joined, int n)
{
	char missing[128];

	rv_missing(c, joined, missing, sizeof missing);
	return comm_note_say(&v->note, "rank 0: waiting for rank%s %s (%d of "
	    "%d joined) at %s", c->world - n > 1 ? "s" : "", missing, n,
	    c->world, v->master.str);
}

static int
rv_gather(struct comm *c, struct rv *v, int mfd, int *joined)
{
	double deadline = cli_now() + c->timeout;
	struct comm_sock_addr from;
	char err[COLLX_ERRLEN], missing[128];
	int n = 1, fd;

	while (n < c->world) {
		fd = comm_sock_accept(mfd, comm_note_until(&v->note, deadline),
		    &from, err, sizeof err);
		if (fd < 0 && cli_now() < deadline &&
		    rv_note_missing(c, v, joined, n))
			continue;
		if (fd < 0) {
			rv_missing(c, joined, missing, sizeof missing);
			comm_fail(c, COMM_ERR_RUNTIME, "timed out after %g s waiting for "
			    "rank(s) %s to join at %s", c->timeout, missing, v->master.str);
			return -1;
		}
		if (rv_take_one(c, v, fd, from.str, joined, deadline) < 0)
			close(fd);
		else
			n++;
	}
	return 0;
}

/* Rank 0 to one joined rank: the table, or why there is none (the
 * failure rank 0 hit, so every rank can tell its user). */
static int
rv_send_table(struct comm *c, struct rv *v, int fd, int failed,
    size_t tlen)
{
	struct rv_reply rep;
	double deadline = cli_now() + (failed ? 1 : c->timeout);
	char err[COLLX_ERRLEN];

	memset(&rep, 0, sizeof rep);
	if (failed) {
		rep.status = 2;
		memcpy(rep.msg, c->err, sizeof rep.msg - 1);
	}
	if (comm_sock_send_all(fd, &rep, sizeof rep, deadline, err, sizeof err) < 0)
		return -1;
	return failed ? 0 : comm_sock_send_all(fd, v->table, tlen, deadline, err, sizeof err);
}

/* Rank 0: listen at the master address (when the name is not one of ours:
 * the first chosen interface's address, or with none chosen every address
 * of its family), gather the others, send them the table. */
static int
rv_serve(struct comm *c, struct rv *v)
{
	struct comm_sock_addr m = v->master;
	size_t tlen = (size_t)c->world * sizeof v->table[0];
	int *joined, mfd, r, rc = -1;
	char err[COLLX_ERRLEN];

	mfd = comm_sock_listen(&m, err, sizeof err);
	if (mfd < 0 && errno == EADDRNOTAVAIL && v->bind_local) {
		/* Interfaces chosen: their first address, never all of them. */
		m = v->local[0];
		comm_sock_addr_set_port(&m, comm_sock_addr_port(&v->master));
		mfd = comm_sock_listen(&m, err, sizeof err);
	} else if (mfd < 0 && errno == EADDRNOTAVAIL) {
		m.ss.ss_family = v->master.ss.ss_family;
		memset((char *)&m.ss + sizeof(sa_family_t), 0, sizeof m.ss - sizeof(sa_family_t));
		comm_sock_addr_set_port(&m, comm_sock_addr_port(&v->master));
		mfd = comm_sock_listen(&m, err, sizeof err);
	}
	if (mfd < 0)
		return rv_fail(c, COMM_ERR_RUNTIME, "rendezvous", err);
	joined = malloc((size_t)c->world * sizeof *joined);
	if (!joined) {
		rv_fail(c, COMM_ERR_RUNTIME, "rendezvous", "out of memory");
		goto out;
	}
	for (r = 0; r < c->world; r++)
		joined[r] = -1;
	for (r = 0; r < c->nstreams; r++)
		snprintf(v->table[0][r], sizeof v->table[0][r], "%s", v->local[r].str);
	rc = rv_gather(c, v, mfd, joined);
	for (r = 1; r < c->world; r++)
		if (joined[r] >= 0 && rv_send_table(c, v, joined[r], rc, tlen) < 0 && rc == 0) {
			comm_fail(c, COMM_ERR_RUNTIME, "sending the rank table to rank %d (%s)",
			    r, v->table[r][0]);
			rc = -1;
		}
out:
	for (r = 1; joined && r < c->world; r++)
		if (joined[r] >= 0)
			close(joined[r]);
	free(joined);
	if (v->keep_mfd && rc == 0)
		v->mfd = mfd;
	else
		close(mfd);
	return rc;
}

/* Every other rank: register with rank 0 and receive the table. */
static int
rv_join(struct comm *c, struct rv *v)
{
	struct rv_join j;
	struct rv_reply rep;
	char err[COLLX_ERRLEN], what[160];
	double deadline;
	int fd, rc = -1;

	snprintf(what, sizeof what, "rendezvous with rank 0 at %s", v->master.str);
	snprintf(v->note.what, sizeof v->note.what, "rank %d: still trying to "
	    "reach rank 0 at %s", c->rank, v->master.str);
	fd = comm_sock_connect(&v->master, NULL, cli_now() + c->timeout,
	    &v->note, err, sizeof err);
	if (fd < 0)
		return rv_fail(c, COMM_ERR_RUNTIME, what, err);
	rv_join_fill(c, v, &j);
	if (auth_client(fd, c->token, cli_now() + c->timeout, err, sizeof err) < 0 ||
	    comm_sock_send_all(fd, &j, sizeof j, cli_now() + c->timeout, err, sizeof err) < 0 ||
	    comm_sock_recv_all(fd, &rep, sizeof rep, cli_now() + c->timeout, err, sizeof err) < 0) {
		rv_fail(c, COMM_ERR_RUNTIME, what, err);
		goto out;
	}
	if (rep.status != 0) {
		rep.msg[sizeof rep.msg - 1] = '\0';
		comm_fail(c, COMM_ERR_MISMATCH, "refused by rank 0 at %s: %s",
		    v->master.str, rep.msg);
		goto out;
	}
	/* The table comes once every rank has joined: a fresh timeout, and a
	 * moment more, so that when ranks are missing rank 0's word naming
	 * them arrives before this rank gives up on its own. */
	deadline = cli_now() + c->timeout + RV_GRACE_S;
	if (comm_sock_recv_all(fd, &rep, sizeof rep, deadline, err,
	    sizeof err) < 0 || (rep.status == 0 && comm_sock_recv_all(fd, v->table,
	    (size_t)c->world * sizeof v->table[0], cli_now() + c->timeout, err,
	    sizeof err) < 0)) {
		rv_fail(c, COMM_ERR_RUNTIME, what, err);
		goto out;
	}
	if (rep.status != 0) {
		rep.msg[sizeof rep.msg - 1] = '\0';
		comm_fail(c, COMM_ERR_RUNTIME, "rendezvous failed at %s", rep.msg);
		goto out;
	}
	rv_terminate(v, 0, c->world);
	rc = 0;
out:
	close(fd);
	return rc;
}

static int
mesh_connect_one(struct comm *c, struct rv *v, int peer, int s,
    double deadline)
{
	struct mesh_hello h = { MESH_MAGIC, c->rank, c->world, s, { 0 } };
	struct comm_sock_addr a;
	char err[COLLX_ERRLEN];
	int fd;

	memcpy(h.job, c->job, sizeof h.job);
	if (comm_sock_resolve_hostport(v->table[peer][s], &a, err, sizeof err) < 0)
		goto fail;
	/* Every listener was open before the table went out: a refusal means
	 * the peer is gone, and waiting for it would only burn the timeout. */
	fd = comm_sock_connect_once(&a, v->bind_local ? &v->from[s] : NULL, deadline,
	    err, sizeof err);
	if (fd < 0)
		goto fail;
	c->peers[peer].st[s].fd = fd;
	if (auth_client(fd, c->token, deadline, err, sizeof err) < 0 ||
	    comm_sock_send_all(fd, &h, sizeof h, deadline, err, sizeof err) < 0)
		goto fail;
	return 0;
fail:
	comm_fail(c, COMM_ERR_RUNTIME, "connecting to peer rank %d (%s): %s", peer,
	    v->table[peer][s], err);
	return -1;
}

/* Check a mesh connection's hello and file it; -1 drops the connection. */
static int
mesh_take_one(struct comm *c, int fd, const char *from, double deadline)
{
	struct mesh_hello h;
	char err[COLLX_ERRLEN];

	deadline = handshake_deadline(deadline);
	if (auth_server(fd, c->token, deadline, err, sizeof err) < 0 ||
	    comm_sock_recv_all(fd, &h, sizeof h, deadline, err, sizeof err) < 0) {
		comm_log(c, "dropped connection from %s: %s", from, err);
		return -1;
	}
	if (h.magic != MESH_MAGIC || h.world != c->world || h.rank <= c->rank ||
	    h.rank >= c->world || h.stream < 0 || h.stream >= c->nstreams ||
	    !auth_equal(h.job, c->job, sizeof h.job) ||
	    c->peers[h.rank].st[h.stream].fd >= 0) {
		comm_log(c, "dropped connection from %s: unexpected mesh hello "
		    "(rank %d, stream %d)", from, h.rank, h.stream);
		return -1;
	}
	c->peers[h.rank].st[h.stream].fd = fd;
	return 0;
}

static int
mesh_accept(struct comm *c, struct rv *v, double deadline)
{
	int want = (c->world - 1 - c->rank) * c->nstreams, s, fd, ready;
	struct pollfd p[COMM_MAX_STREAMS];
	struct comm_sock_addr from;
	char err[COLLX_ERRLEN];

	while (want > 0) {
		for (s = 0; s < c->nstreams; s++)
			p[s] = (struct pollfd){ .fd = v->lfd[s], .events = POLLIN };
		ready = poll(p, (nfds_t)c->nstreams, comm_sock_poll_ms(deadline));
		if (ready < 0 && errno != EINTR)
			return rv_fail(c, COMM_ERR_RUNTIME, "poll", strerror(errno));
		if (cli_now() >= deadline) {
			comm_fail(c, COMM_ERR_RUNTIME, "timed out after %g s waiting for "
			    "connections from higher ranks", c->timeout);
			return -1;
		}
		for (s = 0; s < c->nstreams; s++) {
			if (!(p[s].revents & POLLIN))
				continue;
			/* Ready, so no wait: a connection aborted meanwhile is skipped. */
			fd = comm_sock_accept(v->lfd[s], cli_now(), &from, err, sizeof err);
			if (fd < 0)
				continue;
			if (mesh_take_one(c, fd, from.str, deadline) < 0)
				close(fd);
			else
				want--;
		}
	}
	return 0;
}

static int
mesh_build(struct comm *c, struct rv *v)
{
	double deadline = cli_now() + c->timeout;
	int peer, s;

	for (peer = 0; peer < c->world; peer++)
		snprintf(c->peers[peer].addr, sizeof c->peers[peer].addr, "%s",
		    v->table[peer][0]);
	for (peer = 0; peer < c->rank; peer++)
		for (s = 0; s < c->nstreams; s++)
			if (mesh_connect_one(c, v, peer, s, deadline) < 0)
				return -1;
	return mesh_accept(c, v, deadline);
}

int
comm_connect_all(struct comm *c, const struct comm_options *o)
{
	struct rv v;
	char err[COLLX_ERRLEN];
	int s, rc = -1;

	memset(&v, 0, sizeof v);
	for (s = 0; s < COMM_MAX_STREAMS; s++)
		v.lfd[s] = -1;
	v.mfd = -1;
	v.keep_mfd = o->grow;
	if (!o->master || !o->master[0])
		return rv_fail(c, COMM_ERR_RUNTIME, "rendezvous", "no master address");
	if (comm_sock_resolve_hostport(o->master, &v.master, err, sizeof err) < 0)
		return rv_fail(c, COMM_ERR_RUNTIME, "rendezvous", err);
	v.table = calloc((size_t)c->world, sizeof *v.table);
	if (!v.table)
		return rv_fail(c, COMM_ERR_RUNTIME, "rendezvous", "out of memory");
	v.jobtext = o->job ? o->job : "";
	comm_note_start(&v.note, o->note, o->note_ctx);
	if (rv_pick_addrs(c, o, &v) < 0 || rv_listen(c, o, &v) < 0)
		goto out;
	/* a rank started again meets the others in comm_grow (grow.c) */
	if (!o->rejoin && (c->rank == 0 ? rv_serve(c, &v) :
	    rv_join(c, &v)) < 0)
		goto out;
	rc = o->rejoin ? 0 : mesh_build(c, &v);
	/* comm_grow's: the data listener, and rank 0's rendezvous one */
	if (rc == 0 && (o->grow || o->rejoin)) {
		rc = comm_grow_keep(c, v.lfd[0], v.local[0].str, v.mfd,
		    &v.master, o->rejoin);
		if (rc == 0)
			v.lfd[0] = v.mfd = -1;
	}
out:
	if (v.mfd >= 0)
		close(v.mfd);
	for (s = 0; s < COMM_MAX_STREAMS; s++)
		if (v.lfd[s] >= 0)
			close(v.lfd[s]);
	free(v.table);
	return rc;
}
