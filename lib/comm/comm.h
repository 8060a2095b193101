/* comm: a group of ranks over TCP — rendezvous, transport, point-to-point.
 * Knows nothing of tensors beyond the dtype tag it carries for checking. */
#ifndef COLLX_COMM_H
#define COLLX_COMM_H

#include <stddef.h>
#include <stdint.h>

struct comm;

/*
 * A long wait's word to its user: the library prints nothing itself, but
 * calls a program's function with the text, first when the wait has lasted
 * COMM_NOTE_FIRST_S seconds, then every COMM_NOTE_EVERY_S. The text starts
 * with "rank R: " and says who is awaited ("rank 0: waiting for ranks 2,3
 * (2 of 4 joined) at HOST:PORT") or what address is being tried ("rank 1:
 * still trying to reach rank 0 at HOST:PORT").
 */
typedef void (*comm_note_fn)(void *ctx, const char *text);
enum { COMM_NOTE_FIRST_S = 5, COMM_NOTE_EVERY_S = 15 };

struct comm_options {
	int rank, world;
	const char *master;	/* "host:port" (IPv6 as "[addr]:port"); unused for world 1 */
	const char *ifaces;	/* comma list: one stream per name to every peer; NULL = auto */
	double timeout;		/* seconds, for connecting and for every wait on a peer */
	const char *token;	/* shared secret (HMAC-SHA-256 challenge), or NULL */
	/* Job identity; a rank of another job is refused. Written as
	 * "PROGRAM [WORD...] KEY=VALUE...", the refusal names what runs when
	 * the words before the first KEY=VALUE differ, else the first KEY
	 * whose values differ ("rank 2 was started with --algo ring, rank 0
	 * with --algo tree"). */
	const char *job;
	/* The launch's job id (COLLX_JOB_ID), naming the flight recorder's
	 * dumps (comm_fr_dump); NULL: "0". */
	const char *job_id;
	int port_lo, port_hi;	/* data listeners' ports; 0: ephemeral */
	int no_shm;		/* 1: every pair over TCP, even on one host */
	/* For tests and unusual machines: a name standing in for the host
	 * key (hostname, boot id, network namespace). Ranks passing the same
	 * string are one host, and must share memory unless no_shm; ranks
	 * passing different strings, or one and NULL, are different hosts.
	 * NULL: the host key. */
	const char *host;
	comm_note_fn note;	/* the rendezvous's long waits, or NULL */
	void *note_ctx;
	/* comm_grow (grow.c): grow keeps the listeners open, so that ranks
	 * started again can join; rejoin: this rank was started again, and
	 * comm_open only prepares it (comm_grow joins it to the others) */
	int grow, rejoin;
};

/* What kind of failure the last -1 was; programs map it to an exit code. */
enum comm_errkind {
	COMM_ERR_NONE,
	COMM_ERR_RUNTIME,	/* peer lost, timeout, connection refused: exit 1 */
	COMM_ERR_MISMATCH	/* ranks disagree on op, size, dtype, world, job: exit 3 */
};

/* Join the group; 0 or -1 with the reason in err. A world of 1 opens no socket. */
int comm_open(struct comm **out, const struct comm_options *o, char *err, size_t errlen);
/* comm_open that also says what kind of failure a -1 was (kind may be NULL):
 * COMM_ERR_MISMATCH when rank 0 refused this rank (other job, world size or
 * a duplicate rank), COMM_ERR_RUNTIME otherwise. */
int comm_open_ex(struct comm **out, const struct comm_options *o,
    enum comm_errkind *kind, char *err, size_t errlen);
/* Close every sub-group of c (comm_split) before c itself. */
void comm_close(struct comm *c);
int comm_rank(const struct comm *c);
int comm_size(const struct comm *c);
/* "10.0.0.2:41234" style address of a peer, for messages. */
const char *comm_peer_addr(const struct comm *c, int peer);
/* Streams (connections) to every peer: one per interface in opt->ifaces. */
int comm_streams(const struct comm *c);

/*
 * Hosts. Ranks are on one host when their hostname, boot id and network
 * namespace agree; such pairs talk through shared memory (unless a rank
 * of the host opened with no_shm), others over TCP. Hosts are numbered
 * 0 .. comm_hosts-1 in order of their lowest rank in c.
 */
int comm_hosts(const struct comm *c);
int comm_host(const struct comm *c, int rank);
/* "shm", "tcp" or "self": how this rank reaches peer. */
const char *comm_transport(const struct comm *c, int peer);

/*
 * Sub-groups, as MPI_Comm_split makes them. Collective over parent:
 * ranks passing the same color form one sub-group, ranked by key, ties
 * by rank in parent; a rank passing COMM_UNDEFINED (any negative color)
 * gets *sub = NULL. A sub-group uses parent's links (no new connection)
 * and numbers its operations on its own, so point-to-point calls and
 * every collective work on it with its own ranks, and run while the
 * parent's, or another sub-group's, are in flight: each message carries
 * its group, and one that arrives before its group posted a receive
 * waits in a buffer. Mismatches are found within a group; ranks that
 * call collectives on different groups wait for each other until the
 * timeout. A failure anywhere fails parent and every sub-group, and
 * names ranks as the group comm_open made knows them. The first split of
 * a group must find none of its receives in flight; from then on, until
 * its last sub-group is closed, each message's header is read before its
 * payload. comm_close(sub) frees the sub-group only; comm_bytes_sent
 * counts each group's own sends (a group's hierarchical collectives'
 * among them, though their sub-groups carry them).
 */
#define COMM_UNDEFINED (-1)
int comm_split(struct comm *parent, int color, int key, struct comm **sub,
    char *err, size_t errlen);

/*
 * In-job recovery (shrink.c). comm_shrink: after a rank's death (or to
 * find one), every surviving rank of the group comm_open made calls it,
 * with that group or a sub-group of it: each fails (telling its peers),
 * reads every peer's link up to that peer's abort frame (a peer whose
 * frame does not come within twice the timeout and a second, the time a
 * live peer's own wait on a stopped rank may take, is gone), and the
 * survivors agree on who is left over their links, starting over when a
 * rank dies meanwhile. *sub: the survivors, in rank order, a sub-group of c's
 * links (ranks that left at an earlier shrink stay out); the links,
 * cleared of the failure, work again, and requests and sub-groups of
 * before are dead (close them). Needs TCP links, one stream a peer
 * (no_shm, one interface). A survivor that decided while another started
 * over finds it out at its next operation with it: call it again then.
 * 0, or -1 with the reason in err.
 */
int comm_shrink(struct comm *c, struct comm **sub, char *err, size_t errlen);
/*
 * comm_grow (grow.c): ranks started again join the group at a step
 * boundary. The group must have been opened with comm_options.grow (and
 * the shrink's links: TCP, one stream a peer). Every member of c calls
 * it at the same point (a step boundary): *sub is NULL when nobody joins
 * (c goes on), else the group of c's members and the ranks that joined,
 * in rank order, over c's links and the joiners' new ones (close c). A
 * rank opened with comm_options.rejoin calls it once, on the group
 * comm_open gave it: it connects to the rendezvous address with the
 * group's handshake, is admitted at the members' next call (a rank not
 * yet seen to leave is admitted once it has), within twice the timeout,
 * and *sub is the same group as theirs. The rendezvous address is
 * served by rank 0, or when it left by a member that can bind it. 0, or
 * -1 with the reason in err (comm_errkind(c) says which kind).
 */
int comm_grow(struct comm *c, struct comm **sub, char *err, size_t errlen);
/* comm_grow admits ranks by units: unit[r], for each rank r of the group
 * comm_open made, names its unit, and a joiner is admitted only with
 * every rank of its unit (the others wait at the rendezvous). Called
 * alike on every member (and on a rank started again, harmlessly). 0, or
 * -1 with the reason in err. */
int comm_grow_units(struct comm *c, const int *unit, char *err,
    size_t errlen);
/* Whether c was opened with comm_options.rejoin and has not joined yet. */
int comm_rejoining(const struct comm *c);
/* Rank r of c as the group comm_open made numbers it. */
int comm_world_rank(const struct comm *c, int r);

/* Reason and kind of the last failure on c. The text starts with
 * "rank R: " and names the peer, its address and the current step. */
const char *comm_error(const struct comm *c);
enum comm_errkind comm_errkind(const struct comm *c);
/* Record a failure found above the transport (e.g. in a collective). */
void comm_fail(struct comm *c, enum comm_errkind kind, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/*
 * Operations. A collective calls comm_op_begin() first: every message it
 * sends carries the operation's sequence number, opcode, dtype and the
 * caller's signature (say, a hash of the shape), and every receive checks
 * them, so ranks that call different collectives, or the same one with a
 * different size or dtype, fail with COMM_ERR_MISMATCH instead of hanging.
 */
void comm_op_begin(struct comm *c, int opcode, const char *name, int dtype, uint64_t sig);
/* The current operation finished, as the flight recorder tells it (an
 * operation never ended counts as done when its group begins the next). */
void comm_op_end(struct comm *c);

/*
 * The flight recorder (collx(7)): every rank keeps its last COLLX_FR_SIZE
 * (default 256, 0: none) operations of every group (comm_op_begin and
 * comm_op_end) and writes them as JSON to
 * COLLX_FR_DIR/collx-fr.JOB.RANK.json (JOB: comm_options.job_id; the
 * directory made where missing, default $TMPDIR/collx-fr-UID) when it
 * fails (a timeout, a lost peer, a mismatch, an abort) and on SIGUSR1, at
 * its next wait or operation: comm_open catches SIGUSR1 unless the program
 * has its own action for it. comm_fr_dump writes it now ("why" in the
 * file's "reason"); 0, or -1 with the reason in err (also when there is
 * no recorder).
 */
int comm_fr_dump(struct comm *c, const char *why, char *err, size_t errlen);
/* Label of the current step for error messages ("ring step 3"). */
void comm_set_step(struct comm *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/*
 * Point to point. Messages between two ranks are matched in order; the
 * receiver must post the exact byte length the sender sends (the header
 * is checked). Many requests may be in flight: comm_waitall() progresses
 * all of them together, sending and receiving with several peers at once.
 */
enum { COMM_REQ_IDLE, COMM_REQ_ACTIVE, COMM_REQ_DONE };	/* comm_req.state */

/* A zeroed (IDLE) or DONE request waits as complete. Sending to self
 * (peer == rank) copies into the matching receive from self, which must be
 * posted before either is waited on. Zero-length messages are fine. The
 * tag is checked like the length, not used to match. A buffer belongs to
 * the transport until its request is done; a request must be waited on
 * before its struct goes away. The first failure (peer lost, timeout,
 * mismatch, comm_fail) sticks: every later call returns -1 at once, and
 * only comm_close is left to do. */
struct comm_req {
	int peer, tag, is_send, state;
	char *buf;
	size_t len, done;
	void *priv;		/* transport's own */
};

int comm_isend(struct comm *c, int peer, int tag, const void *buf, size_t len,
    struct comm_req *r);
int comm_irecv(struct comm *c, int peer, int tag, void *buf, size_t len,
    struct comm_req *r);
int comm_wait(struct comm *c, struct comm_req *r);
/* Moves whatever can move now on every request in flight, without
 * waiting (so a sender computing between posts keeps its sends going);
 * 0 or -1. */
int comm_progress(struct comm *c);
/* Microseconds a wait polls before it sleeps (collx(7), COLLX_SPIN_US);
 * 0 when the waiting thread shares its core with a busy one. */
void comm_set_spin(struct comm *c, int us);
/* The spin in effect: COLLX_SPIN_US's, or comm_set_spin's. */
int comm_spin(const struct comm *c);
int comm_waitall(struct comm *c, struct comm_req *r, int n);
int comm_send(struct comm *c, int peer, int tag, const void *buf, size_t len);
int comm_recv(struct comm *c, int peer, int tag, void *buf, size_t len);
/* Payload bytes this rank has posted to other ranks (point-to-point and
 * every collective; headers and messages to itself not counted), for
 * communication-volume accounting: read it before and after an operation. */
uint64_t comm_bytes_sent(const struct comm *c);
/* Send to dst and receive from src at the same time. */
int comm_sendrecv(struct comm *c, int dst, const void *sbuf, size_t slen,
    int src, void *rbuf, size_t rlen, int tag);

#endif
