/* comm internals shared by comm.c, rendezvous.c and transport.c; not
 * part of the API. */
#ifndef COLLX_COMM_IMPL_H
#define COLLX_COMM_IMPL_H

#include <stddef.h>
#include <stdint.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "comm/auth.h"
#include "comm/comm.h"
#include "comm/sock.h"

#define COMM_MAX_STREAMS 8

/* Every message (every stripe of one) starts with this header. */
struct comm_hdr {
	uint32_t magic;
	uint32_t seq;		/* operation sequence number, the group's own */
	uint32_t ctx;		/* group: 0 comm_open's, sub-groups their own */
	int32_t tag;
	int16_t opcode, dtype;
	uint32_t pad;
	uint64_t sig;
	uint64_t len;		/* whole message, all stripes */
	char op[16];		/* operation name, for mismatch messages */
};
#define COMM_HDR_LEN ((size_t)sizeof(struct comm_hdr))
_Static_assert(sizeof(struct comm_hdr) == 56, "wire header is 56 bytes");
#define COMM_HDR_MAGIC 0x4d584343u	/* "CCXM" */
#define COMM_ABORT_MAGIC 0x42415843u	/* "CXAB" */

/* Why a rank failed, as its abort frame tells every peer (abort.c). */
enum comm_why {
	COMM_WHY_NONE, COMM_WHY_CLOSED, COMM_WHY_FAILED, COMM_WHY_TIMEOUT,
	COMM_WHY_MISMATCH, COMM_WHY_LOCAL, COMM_WHY_COUNT
};

/* The root cause of a failure: which rank, found by whom, where. A rank
 * that fails by an abort from a peer keeps that peer's cause, so every
 * rank names the same one. */
struct comm_cause {
	int why;		/* enum comm_why */
	int culprit;		/* the rank that died, stalled or differed */
	int reporter;		/* the rank that found it */
	int err;		/* errno for COMM_WHY_FAILED */
	uint32_t seq;		/* the reporter's operation number */
	char where[36];		/* the reporter's step label, cut */
};

/* One stripe of a message queued on one stream. */
struct comm_seg {
	struct comm_seg *next;
	struct comm_xfer *x;
	char *buf;
	size_t len, done;	/* payload bytes of this stripe */
	size_t cap;		/* unexpected: bytes of buf so far (it grows) */
	size_t hdone;		/* header bytes moved */
	struct comm_hdr hdr;	/* sent, or received and checked */
	struct comm_hdr want;	/* receives: what the header must say */
};

/* A request's transport state: its stripes. */
struct comm_xfer {
	struct comm_req *req;
	int left;		/* stripes not yet complete */
	int cap;		/* stripes it has room for */
	struct comm_xfer *next;	/* self-send FIFO; net's spares */
	struct comm_seg seg[];
};

/* Once a group has sub-groups, messages of several groups share a
 * stream: each header is read alone, then its payload goes to the first
 * receive its group posted on the stream, or to a buffer of its own when
 * none is posted yet (unexpected), which the group's next receive takes. */
struct comm_ring;	/* shm.c */
struct comm_stream {
	int fd;
	struct comm_ring *tx, *rx;	/* shared memory, or NULL: TCP */
	int pid;		/* shared memory: the peer's process */
	uint64_t tx_cma;	/* number of our payload the peer reads in
				 * place, while we wait for it; else 0 */
	uint64_t rx_cma_done;	/* bytes of the peer's such payload read */
	uint64_t tx_tail_seen;	/* the consumer's tail when last read */
	size_t rx_box_done;	/* bytes of the peer's fast box read */
	struct comm_seg *sq, **sq_tail;	/* FIFO of stripes to send */
	struct comm_seg *rq, **rq_tail;	/* FIFO of stripes to receive */
	struct comm_hdr in;	/* split: the header arriving */
	size_t indone;
	struct comm_seg *cur;	/* split: the stripe whose payload arrives */
	struct comm_seg *ux, **ux_tail;	/* split: unexpected, in arrival order */
};

struct comm_peer {
	struct comm_stream st[COMM_MAX_STREAMS];
	char addr[80];
	int pending;		/* queued stripes, both directions */
	double last;		/* last progress (or start of the wait) */
	int abort_in;		/* its abort frame read (comm_shrink's) */
};

/* This host's segment of rings (shm.c), mapped or base NULL. */
struct comm_shm {
	char *base;
	size_t bytes, ring;	/* the segment's, and each ring's data */
	int local, nstreams;	/* ranks of this host; streams per pair */
};

/* Flight recorder (fr.c). One record per operation, in a ring the
 * group comm_open made owns for itself and its sub-groups; recording is
 * a few stores and two reads of the clock per operation. */
enum comm_fr_state { COMM_FR_QUEUED, COMM_FR_STARTED, COMM_FR_DONE };

struct comm_fr_op {
	uint32_t seq, ctx;	/* the group's operation number, the group */
	uint32_t state;		/* enum comm_fr_state */
	uint64_t bytes;		/* elements * their size; 0: none */
	const char *algo;	/* a collective's algorithm, or NULL */
	double start, end;	/* cli_now(); end 0 until done */
	char op[16];
};

/* A group as the dumps name it: its id and its ranks as net's. */
struct comm_fr_group {
	uint32_t ctx;
	int world;
	int *ranks;
};

struct comm_fr {
	struct comm_fr_op *ring;
	uint64_t n;		/* operations so far; the next: n % size */
	uint32_t size;
	struct comm_fr_group *groups;
	int ngroups;
	char *path;		/* DIR/collx-fr.JOB.RANK.json */
	char *job;
	int shared_tmp;		/* DIR is the default, in a shared TMPDIR */
	sig_atomic_t seen;	/* comm_fr_signals when last looked at */
};

/* SIGUSR1s caught; a rank dumps when it differs from its fr->seen. */
extern volatile sig_atomic_t comm_fr_signals;

/* The group a program opens owns the links (peers, their queues) and the
 * failure state; a sub-group (comm_split) has its own ranks, operation
 * numbers and messages to itself, and reaches everything else through
 * net, with its ranks mapped to net's. */
struct comm {
	int rank, world, nstreams;
	struct comm *net;	/* the group owning the links: itself or an ancestor */
	int *map;		/* rank in this group -> rank in net; NULL: the same */
	uint32_t ctx;		/* group id in every header (0: net itself) */
	uint32_t next_ctx;	/* net: lowest group id this rank has not used */
	int nsubs;		/* net: sub-groups open */
	int split;		/* net: receives match by group (first split to last close) */
	double timeout;
	const char *token;	/* owned copy, or NULL */
	uint8_t job[SHA256_LEN];
	struct comm_peer *peers;
	struct pollfd *pfd;	/* world * COMM_MAX_STREAMS, for waits */
	int *pfd_who;		/* each pfd's peer * COMM_MAX_STREAMS + stream */
	/* per rank: host number, hosts ordered by lowest rank (net's from
	 * comm_host_exchange, a sub-group's from comm_host_sub) */
	int *host;
	int nhosts;
	int machine_ranks;	/* ranks on this machine, any namespace */
	/* net, from comm_host_exchange: per rank */
	int *pid;
	int *shm_ok;		/* the rank allows shared memory */
	struct coll_hier *hier;	/* COLL_HIER's sub-groups, or NULL (coll_hier.c) */
	struct comm_shm shm;
	struct comm_xfer *self_sq, *self_rq;	/* messages to self */
	struct comm_xfer *spares;	/* net: finished ones to reuse */
	int nspares;
	/* current operation, stamped on every header */
	uint32_t seq;
	int opcode, dtype;
	uint64_t sig;
	char opname[32], step[64];
	enum comm_errkind kind;
	char err[COLLX_ERRLEN];
	struct comm_cause cause;
	int meshed;		/* mesh complete: a failure sends aborts */
	int aborted;		/* net: abort frames sent (comm_shrink's) */
	int *gone;		/* net: per rank, left at a shrink; or NULL */
	struct comm_grow *grow;	/* net: comm_options.grow's listeners, or NULL */
	int spin_us;
	int spin_yield;		/* 1: more ranks than cores here, yield each look */
	int spin_mode;		/* net: how waits spin until spin_until,
				 * after a yield lost the core (transport.c) */
	double spin_until;
	uint64_t sent;		/* payload bytes posted to other ranks */
	struct comm_fr *fr;	/* net: the flight recorder, or NULL */
	int debug;		/* net: COLLX_DEBUG, enum comm_debug_level */
	FILE *dbg;		/* net: COLLX_DEBUG_FILE, or NULL: stderr */
	struct comm_fr_op *fr_op;	/* this group's current record */
};

/* A rank of group c as a rank of c->net. */
static inline int
comm_net_rank(const struct comm *c, int r)
{
	return c->map ? c->map[r] : r;
}

/* Rendezvous and full mesh (rendezvous.c); fills c->peers. */
int comm_connect_all(struct comm *c, const struct comm_options *o);
/* " during allreduce (ring step 3)" or "" */
const char *comm_where(const struct comm *c, char *buf, size_t len);
void comm_free_queues(struct comm *c);
/* Hosts (host.c): every rank's host, pid and shm choice, from every
 * peer on stream 0 once the mesh is up (host: comm_options's, or NULL);
 * host_sub numbers a new sub-group's hosts. */
int comm_host_exchange(struct comm *c, int shm, const char *host);
void comm_host_key(const char *host, uint8_t key[SHA256_LEN]);
int comm_host_sub(struct comm *s);
/* COLL_HIER's cached sub-groups of c closed (coll_hier.c). */
void coll_hier_free(struct comm *c);
/* Bytes c's COLL_HIER sub-groups sent for c (coll_hier.c). */
uint64_t coll_hier_sent(const struct comm *c);

/* Shared memory (shm.c). setup maps this host's rings onto the streams
 * of its local pairs (or leaves them on TCP); io moves bytes through a
 * stream's rings as recvmsg/sendmsg would (0: nothing to move; -1 with
 * errno when the peer's memory could not be read), ringing the peer when
 * it sleeps; arm marks this rank as about to sleep on what
 * it waits for (1: it need not, the ring has moved); bells drains the
 * doorbells: 0, -1 when the connection closed or failed (*closed: 0 or
 * errno), 1 when the peer's abort frame (or garbage) came, the failure
 * recorded. */
int comm_shm_setup(struct comm *c);
void comm_shm_close(struct comm *c);
ssize_t comm_shm_io(struct comm_stream *st, const struct iovec *iov, size_t n,
    int is_recv);
int comm_shm_arm(struct comm_stream *st, int recv, int send);
/* A whole message (header h, len payload bytes) into the stream's fast
 * box: 1, or 0 where it must take the ring (too large, the box full, ring
 * bytes of ours not yet read). */
int comm_shm_box_put(struct comm_stream *st, const struct comm_hdr *h,
    const void *payload, size_t len);
void comm_shm_disarm(struct comm_stream *st);
int comm_shm_bells(struct comm *c, int peer, int s, int *closed);

/* Flight recorder (fr.c): open reads COLLX_FR_SIZE and COLLX_FR_DIR
 * for net and catches SIGUSR1; group names a new group's ranks for the
 * dumps (-1: out of memory); begin records c's new operation
 * (comm_op_begin) and algo adds a collective's algorithm and size; fail
 * dumps after the first failure; signaled dumps for a SIGUSR1; close
 * frees it. */
int comm_fr_open(struct comm *c, const char *job_id, char *err, size_t errlen);
int comm_fr_group(struct comm *c);
void comm_fr_begin(struct comm *c);
void comm_fr_algo(struct comm *c, const char *algo, uint64_t bytes);
void comm_fr_fail(struct comm *c);
void comm_fr_close(struct comm *c);
void comm_fr_signaled(struct comm *c);

/* A wait's look for SIGUSR1: dump when one came since the last look. */
static inline void
comm_fr_poll(struct comm *c)
{
	struct comm_fr *fr = c->net->fr;

	if (fr != NULL && fr->seen != comm_fr_signals)
		comm_fr_signaled(c);
}

/* The current operation has moved data: queued becomes started. */
static inline void
comm_fr_moved(struct comm *c)
{
	struct comm_fr_op *o = c->fr_op;

	if (o != NULL && o->state == COMM_FR_QUEUED && o->seq == c->seq &&
	    o->ctx == c->ctx)
		o->state = COMM_FR_STARTED;
}

/* The debug log (debug.c): open reads COLLX_DEBUG and opens
 * COLLX_DEBUG_FILE for net (0, or -1 with the reason in err); debug
 * writes a line when the level is on; joined says how the group was
 * joined and how each peer is reached (info). */
enum comm_debug_level {
	COMM_DEBUG_OFF, COMM_DEBUG_WARN, COMM_DEBUG_INFO, COMM_DEBUG_TRACE
};
int comm_debug_open(struct comm *c, char *err, size_t errlen);
void comm_debug_close(struct comm *c);
void comm_debug(const struct comm *c, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void comm_debug_joined(const struct comm *c);

/* Sub-groups (split.c): comm_close of a sub-group. */
void comm_close_sub(struct comm *c);
/* "program: rank R: message" on stderr (a dropped connection, say). */
void comm_log(const struct comm *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Abort frames (abort.c). cause_set records the root cause of the
 * failure about to be reported (first one wins); abort_send tells every
 * peer; abort_received turns a peer's frame into this rank's failure;
 * abort_salvage looks for a frame left unread on a lost peer's streams
 * (1: found, and the failure is recorded). */
void comm_cause_set(struct comm *c, int culprit, enum comm_why why, int err);
void comm_abort_send(struct comm *c);
void comm_abort_received(struct comm *c, int peer, const void *frame);
int comm_abort_salvage(struct comm *c, int peer);
/* Read stream s of peer up to its abort frame, skipping whole messages,
 * until deadline (0: only what is there now): 1 with the frame in
 * frame, 0 when the stream ended, failed or ran out of time first. */
int comm_abort_find(struct comm *c, int peer, int s, double deadline,
    void *frame);
/* A sub-group of net's ranks ranks[0..n) (ascending), its id ctx: as
 * comm_split makes one, without talking (split.c). */
int comm_sub_make(struct comm *net, uint32_t ctx, const int *ranks, int n,
    struct comm **out);
/* Stream 0 of peer p at a message boundary both ways, nothing queued,
 * no abort read (shrink.c): a link cleared of a failure, or new. */
void comm_link_clear(struct comm *net, int p);
/* comm_grow's state (grow.c): keep files the listeners a growing group
 * keeps (lfd, this rank's data listener at laddr; mfd, the rendezvous
 * listener at master, or -1; rejoin: started again, not yet in a group):
 * 0, or -1 (comm_fail); free closes them. */
int comm_grow_keep(struct comm *c, int lfd, const char *laddr, int mfd,
    const struct comm_sock_addr *master, int rejoin);
void comm_grow_free(struct comm *c);
/* The spin of waits, once the ranks of this machine are known (comm.c). */
void comm_spin_default(struct comm *c);
/* Bytes of a len-byte message carried on stream s (transport.c). */
size_t comm_stripe_bytes(const struct comm *c, size_t len, int s);
/* What transport.c lends the split groups' receive path: hdr_valid, a
 * header is a message's; hdr_check, a received header against what its
 * receive expects; seg_done, a stripe complete; stream_io, one
 * non-blocking system call on a stream (bytes moved, 0: would block). */
int comm_hdr_valid(struct comm *c, int peer, const struct comm_hdr *h);
int comm_hdr_check(struct comm *c, int peer, const struct comm_seg *g);
void comm_seg_done(struct comm *c, int peer, struct comm_seg *s);
ssize_t comm_stream_io(struct comm *c, int peer, struct comm_stream *st,
    struct msghdr *m,
    int is_recv);
/* Split groups' receives (transport_mux.c): mux_posted posts receive g on
 * stream s of peer; mux_move reads on it (bytes moved, 0: would block,
 * -1); ux_free frees an unexpected stripe. */
int comm_mux_posted(struct comm *c, int peer, int s, struct comm_seg *g);
ssize_t comm_mux_move(struct comm *c, int peer, int s);
void comm_ux_free(struct comm_seg *u);

#endif
