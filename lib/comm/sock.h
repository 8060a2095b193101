/* sock: small TCP helpers shared by the comm transport and the parameter
 * server. Every socket is non-blocking; every blocking-style helper takes an
 * absolute deadline (cli_now() seconds) and fails with a reason in err. */
#ifndef COLLX_SOCK_H
#define COLLX_SOCK_H

#include <stddef.h>
#include <sys/socket.h>

#include "cli/util.h"
#include "comm/comm.h"

/* A resolved address; str is "1.2.3.4:80" or "[::1]:80". */
struct comm_sock_addr {
	struct sockaddr_storage ss;
	socklen_t len;
	char str[80];
};

/* A poll() timeout for deadline: milliseconds, rounded up, at most a
 * minute (callers loop), 0 when it has passed. */
int comm_sock_poll_ms(double deadline);

/* Split "host:port" or "[v6]:port" (host may be empty: wildcard). */
int comm_sock_split(const char *hostport, char *host, size_t hostlen, char *port,
    size_t portlen, char *err, size_t errlen);
/* Resolve host and port (numeric or name); family AF_UNSPEC takes the first. */
int comm_sock_resolve(const char *host, const char *port, int family,
    struct comm_sock_addr *out, char *err, size_t errlen);
int comm_sock_resolve_hostport(const char *hostport, struct comm_sock_addr *out,
    char *err, size_t errlen);
/* Fill a->str from a->ss. */
void comm_sock_addr_format(struct comm_sock_addr *a);
int comm_sock_addr_port(const struct comm_sock_addr *a);
void comm_sock_addr_set_port(struct comm_sock_addr *a, int port);

/* The address of interface name in family (AF_INET or AF_INET6; AF_UNSPEC:
 * IPv4 first). */
int comm_sock_iface_addr(const char *name, int family, struct comm_sock_addr *out,
    char *err, size_t errlen);
/* The local address the kernel would use to reach dst (port 0). */
int comm_sock_route_addr(const struct comm_sock_addr *dst, struct comm_sock_addr *out,
    char *err, size_t errlen);

/* A free port on host (an IPv4 address; 0.0.0.0: all of this machine's)
 * outside the kernel's ephemeral range, drawn at random so that two
 * launches starting together do not pick the same: 0 or -1 with the
 * reason in err. */
int comm_sock_free_port(const char *host, int *port, char *err,
    size_t errlen);

/* Listen on a (port 0: ephemeral; a->str and port are updated). */
int comm_sock_listen(struct comm_sock_addr *a, char *err, size_t errlen);
/* Listen on "host:port" ("" host: every address). Returns the fd or -1. */
/* Listen on port at the first interface of ifaces ("eth1,eth2"), or at
 * every address when ifaces is NULL or "" (no interface chosen). */
int comm_sock_listen_iface(const char *ifaces, int port, struct comm_sock_addr *bound,
    char *err, size_t errlen);
int comm_sock_listen_hostport(const char *hostport, struct comm_sock_addr *bound,
    char *err, size_t errlen);
/* A long wait's notes (comm_note_fn, note.c): due COMM_NOTE_FIRST_S after
 * comm_note_start, then every COMM_NOTE_EVERY_S; never with fn NULL. */
struct comm_note {
	comm_note_fn fn;
	void *ctx;
	double next;		/* when the next note is due */
	char what[256];		/* what a retrying connect says */
};
void comm_note_start(struct comm_note *n, comm_note_fn fn, void *ctx);
/* The earlier of deadline and the next note (n may be NULL): how long to
 * wait before looking at the note again. */
double comm_note_until(const struct comm_note *n, double deadline);
/* When a note is due: calls fn with the text and returns 1; else 0. */
int comm_note_say(struct comm_note *n, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Accept one connection before deadline; peer gets its address. */
int comm_sock_accept(int lfd, double deadline, struct comm_sock_addr *peer,
    char *err, size_t errlen);
/* Connect to a, retrying refused or unreachable attempts until deadline.
 * from: local address to bind first (port 0), or NULL. note (or NULL):
 * says note->what while the attempts go on. */
int comm_sock_connect(const struct comm_sock_addr *a, const struct comm_sock_addr *from,
    double deadline, struct comm_note *note, char *err, size_t errlen);
/* One attempt, no retry: for a peer that must be listening already.
 * On failure errno says why (ECONNREFUSED: nobody listens). */
int comm_sock_connect_once(const struct comm_sock_addr *a, const struct comm_sock_addr *from,
    double deadline, char *err, size_t errlen);
int comm_sock_connect_hostport(const char *hostport, double deadline,
    char *err, size_t errlen);

/* TCP_NODELAY and throughput-sized buffers on a connected socket. */
void comm_sock_tune(int fd);
int comm_sock_set_nonblock(int fd);

/* Move exactly len bytes before deadline. A closed connection is an error
 * ("connection closed"); so is the deadline ("timed out"). */
int comm_sock_send_all(int fd, const void *buf, size_t len, double deadline,
    char *err, size_t errlen);
int comm_sock_recv_all(int fd, void *buf, size_t len, double deadline,
    char *err, size_t errlen);
/* Wait for events on fd until deadline: 1 ready, 0 timed out, -1 error. */
int comm_sock_wait(int fd, short events, double deadline);

#endif
