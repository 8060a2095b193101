/* sock: TCP helpers over non-blocking sockets with deadlines. */
#include "comm/sock.h"
#include "comm/auth.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Socket buffers: 0 leaves them to the kernel's autotuning, which grows
 * them to the path's bandwidth-delay product (up to tcp_rmem/tcp_wmem
 * max). On loopback, fixed 256 KiB to 4 MiB buffers measured no faster
 * for 1, 4 and 64 MiB exchanges (and slower at 1 MiB), and a fixed size
 * would cap long fat links. */
#ifndef SOCK_BUFSIZE
#define SOCK_BUFSIZE 0
#endif
#define SOCK_RETRY_S 0.05

int
comm_sock_poll_ms(double deadline)
{
	double left = deadline - cli_now();

	if (left <= 0)
		return 0;
	return left > 60 ? 60000 : (int)(left * 1000) + 1;
}

int
comm_sock_split(const char *hp, char *host, size_t hostlen, char *port,
    size_t portlen, char *err, size_t errlen)
{
	const char *colon, *h = hp;
	size_t hl;

	if (hp[0] == '[') {
		const char *end = strchr(hp, ']');
		if (!end || end[1] != ':')
			goto bad;
		h = hp + 1;
		hl = (size_t)(end - h);
		colon = end + 1;
	} else {
		colon = strrchr(hp, ':');
		if (!colon || strchr(hp, ':') != colon)
			goto bad;
		hl = (size_t)(colon - hp);
	}
	if (colon[1] == '\0' || hl >= hostlen || strlen(colon + 1) >= portlen)
		goto bad;
	memcpy(host, h, hl);
	host[hl] = '\0';
	strcpy(port, colon + 1);
	return 0;
bad:
	snprintf(err, errlen, "bad address '%s' (want HOST:PORT or [IPV6]:PORT)", hp);
	return -1;
}

void
comm_sock_addr_format(struct comm_sock_addr *a)
{
	char host[64], serv[8];	/* numeric: an IPv6 address with scope fits */

	if (getnameinfo((struct sockaddr *)&a->ss, a->len, host, sizeof host,
	    serv, sizeof serv, NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
		snprintf(a->str, sizeof a->str, "?");
		return;
	}
	if (a->ss.ss_family == AF_INET6)
		snprintf(a->str, sizeof a->str, "[%s]:%s", host, serv);
	else
		snprintf(a->str, sizeof a->str, "%s:%s", host, serv);
}

int
comm_sock_addr_port(const struct comm_sock_addr *a)
{
	if (a->ss.ss_family == AF_INET6)
		return ntohs(((const struct sockaddr_in6 *)&a->ss)->sin6_port);
	return ntohs(((const struct sockaddr_in *)&a->ss)->sin_port);
}

void
comm_sock_addr_set_port(struct comm_sock_addr *a, int port)
{
	if (a->ss.ss_family == AF_INET6)
		((struct sockaddr_in6 *)&a->ss)->sin6_port = htons((uint16_t)port);
	else
		((struct sockaddr_in *)&a->ss)->sin_port = htons((uint16_t)port);
	comm_sock_addr_format(a);
}

int
comm_sock_resolve(const char *host, const char *port, int family,
    struct comm_sock_addr *out, char *err, size_t errlen)
{
	struct addrinfo hints, *res;
	int rc;

	memset(&hints, 0, sizeof hints);
	hints.ai_family = family;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = host[0] ? 0 : AI_PASSIVE;
	rc = getaddrinfo(host[0] ? host : NULL, port, &hints, &res);
	if (rc != 0) {
		snprintf(err, errlen, "cannot resolve '%s' port '%s': %s", host,
		    port, gai_strerror(rc));
		return -1;
	}
	memset(out, 0, sizeof *out);
	memcpy(&out->ss, res->ai_addr, res->ai_addrlen);
	out->len = res->ai_addrlen;
	freeaddrinfo(res);
	comm_sock_addr_format(out);
	return 0;
}

int
comm_sock_resolve_hostport(const char *hp, struct comm_sock_addr *out, char *err,
    size_t errlen)
{
	char host[NI_MAXHOST], port[NI_MAXSERV];

	if (comm_sock_split(hp, host, sizeof host, port, sizeof port, err, errlen) < 0)
		return -1;
	return comm_sock_resolve(host, port, AF_UNSPEC, out, err, errlen);
}

/* How well an interface address suits: 0 not at all; IPv4 before IPv6
 * when the family is open, and an IPv6 link-local address last. */
static int
iface_score(const struct ifaddrs *ifa, const char *name, int family)
{
	int fam;

	if (!ifa->ifa_addr || strcmp(ifa->ifa_name, name) != 0)
		return 0;
	fam = ifa->ifa_addr->sa_family;
	if ((fam != AF_INET && fam != AF_INET6) || (family != AF_UNSPEC && fam != family))
		return 0;
	if (fam == AF_INET)
		return 3;
	return IN6_IS_ADDR_LINKLOCAL(&((struct sockaddr_in6 *)ifa->ifa_addr)->sin6_addr) ? 1 : 2;
}

int
comm_sock_iface_addr(const char *name, int family, struct comm_sock_addr *out,
    char *err, size_t errlen)
{
	struct ifaddrs *all, *ifa, *best = NULL;
	int score, top = 0, seen = 0;

	if (getifaddrs(&all) < 0) {
		snprintf(err, errlen, "getifaddrs: %s", strerror(errno));
		return -1;
	}
	for (ifa = all; ifa; ifa = ifa->ifa_next) {
		seen |= strcmp(ifa->ifa_name, name) == 0;
		if ((score = iface_score(ifa, name, family)) > top) {
			top = score;
			best = ifa;
		}
	}
	if (best) {
		memset(out, 0, sizeof *out);
		out->len = best->ifa_addr->sa_family == AF_INET6 ?
		    sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
		memcpy(&out->ss, best->ifa_addr, out->len);
		comm_sock_addr_set_port(out, 0);
	} else if (!seen) {
		snprintf(err, errlen, "no network interface named '%s'", name);
	} else {
		snprintf(err, errlen, "interface '%s' has no %s address", name,
		    family == AF_INET6 ? "IPv6" : family == AF_INET ? "IPv4" : "IP");
	}
	freeifaddrs(all);
	return best ? 0 : -1;
}

int
comm_sock_route_addr(const struct comm_sock_addr *dst, struct comm_sock_addr *out,
    char *err, size_t errlen)
{
	int fd = socket(dst->ss.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);

	memset(out, 0, sizeof *out);
	out->len = sizeof out->ss;
	if (fd < 0 || connect(fd, (const struct sockaddr *)&dst->ss, dst->len) < 0 ||
	    getsockname(fd, (struct sockaddr *)&out->ss, &out->len) < 0) {
		snprintf(err, errlen, "no route to %s: %s", dst->str, strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	close(fd);
	comm_sock_addr_set_port(out, 0);
	return 0;
}

int
comm_sock_set_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);

	return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

void
comm_sock_tune(int fd)
{
	int one = 1, sz = SOCK_BUFSIZE;

	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	if (sz > 0) {
		setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof sz);
		setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof sz);
	}
}

int
comm_sock_listen(struct comm_sock_addr *a, char *err, size_t errlen)
{
	int one = 1, fd, e;

	fd = socket(a->ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		goto fail;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	/* Accepted sockets inherit the buffer sizes; set them before listen. */
	comm_sock_tune(fd);
	if (bind(fd, (struct sockaddr *)&a->ss, a->len) < 0 || listen(fd, 128) < 0)
		goto fail;
	a->len = sizeof a->ss;
	if (getsockname(fd, (struct sockaddr *)&a->ss, &a->len) < 0)
		goto fail;
	comm_sock_addr_format(a);
	return fd;
fail:
	e = errno;
	snprintf(err, errlen, "cannot listen on %s: %s", a->str, strerror(e));
	if (fd >= 0)
		close(fd);
	errno = e;	/* callers look for EADDRINUSE */
	return -1;
}

int
comm_sock_listen_hostport(const char *hp, struct comm_sock_addr *bound, char *err,
    size_t errlen)
{
	if (comm_sock_resolve_hostport(hp, bound, err, errlen) < 0)
		return -1;
	return comm_sock_listen(bound, err, errlen);
}

int
comm_sock_listen_iface(const char *ifaces, int port, struct comm_sock_addr *bound,
    char *err, size_t errlen)
{
	char name[64];

	if (!ifaces || !ifaces[0]) {
		snprintf(name, sizeof name, ":%d", port);
		return comm_sock_listen_hostport(name, bound, err, errlen);
	}
	snprintf(name, sizeof name, "%.*s", (int)strcspn(ifaces, ","), ifaces);
	if (comm_sock_iface_addr(name, AF_UNSPEC, bound, err, errlen) < 0)
		return -1;
	comm_sock_addr_set_port(bound, port);
	return comm_sock_listen(bound, err, errlen);
}

int
comm_sock_wait(int fd, short events, double deadline)
{
	struct pollfd p = { .fd = fd, .events = events };
	int rc;

	for (;;) {
		if (cli_now() >= deadline)
			return 0;
		rc = poll(&p, 1, comm_sock_poll_ms(deadline));
		if (rc > 0)
			return 1;
		if (rc < 0 && errno != EINTR)
			return -1;
	}
}

int
comm_sock_accept(int lfd, double deadline, struct comm_sock_addr *peer, char *err,
    size_t errlen)
{
	struct comm_sock_addr tmp, *a = peer ? peer : &tmp;
	int fd;

	for (;;) {
		memset(a, 0, sizeof *a);
		a->len = sizeof a->ss;
		fd = accept4(lfd, (struct sockaddr *)&a->ss, &a->len,
		    SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd >= 0) {
			comm_sock_addr_format(a);
			comm_sock_tune(fd);
			return fd;
		}
		if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED) {
			snprintf(err, errlen, "accept: %s", strerror(errno));
			return -1;
		}
		if (errno == EAGAIN && comm_sock_wait(lfd, POLLIN, deadline) == 0) {
			snprintf(err, errlen, "timed out waiting for a connection");
			return -1;
		}
	}
}

/* Wait for a non-blocking connect: 0 connected, -1 with errno set. */
static int
connect_wait(int fd, const struct comm_sock_addr *a, double deadline)
{
	int e = 0;
	socklen_t el = sizeof e;

	if (connect(fd, (const struct sockaddr *)&a->ss, a->len) == 0)
		return 0;
	if (errno != EINPROGRESS)
		return -1;
	if (comm_sock_wait(fd, POLLOUT, deadline) <= 0) {
		errno = ETIMEDOUT;
		return -1;
	}
	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el) < 0)
		return -1;
	errno = e;
	return e ? -1 : 0;
}

int
comm_sock_connect_once(const struct comm_sock_addr *a, const struct comm_sock_addr *from,
    double deadline, char *err, size_t errlen)
{
	int fd, e;

	fd = socket(a->ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		snprintf(err, errlen, "socket: %s", strerror(errno));
		return -1;
	}
	comm_sock_tune(fd);
	if (from && bind(fd, (const struct sockaddr *)&from->ss, from->len) < 0) {
		e = errno;
		snprintf(err, errlen, "cannot bind %s: %s", from->str, strerror(e));
	} else if (connect_wait(fd, a, deadline) < 0) {
		e = errno;
		snprintf(err, errlen, "cannot connect to %s: %s", a->str,
		    e == ETIMEDOUT ? "timed out" : strerror(e));
	} else {
		return fd;
	}
	close(fd);
	errno = e;
	return -1;
}

static int
connect_retryable(int e)
{
	return e == ECONNREFUSED || e == ECONNRESET || e == ETIMEDOUT ||
	    e == EHOSTUNREACH || e == ENETUNREACH || e == EAGAIN;
}

/* An attempt that hangs (a host that drops the packets) gives up when a
 * note is due, so the note comes on time, and the next one begins. */
int
comm_sock_connect(const struct comm_sock_addr *a, const struct comm_sock_addr *from,
    double deadline, struct comm_note *note, char *err, size_t errlen)
{
	int fd;

	for (;;) {
		fd = comm_sock_connect_once(a, from, comm_note_until(note,
		    deadline), err, errlen);
		if (fd >= 0 || !connect_retryable(errno) ||
		    cli_now() + SOCK_RETRY_S >= deadline)
			return fd;
		if (note != NULL)
			comm_note_say(note, "%s", note->what);
		nanosleep(&(struct timespec){ 0, (long)(SOCK_RETRY_S * 1e9) }, NULL);
	}
}

int
comm_sock_connect_hostport(const char *hp, double deadline, char *err, size_t errlen)
{
	struct comm_sock_addr a;

	if (comm_sock_resolve_hostport(hp, &a, err, errlen) < 0)
		return -1;
	return comm_sock_connect(&a, NULL, deadline, NULL, err, errlen);
}

/* Shared loop of send_all/recv_all: is_send picks the direction. */
static int
xfer_all(int fd, char *p, size_t len, double deadline, int is_send,
    char *err, size_t errlen)
{
	ssize_t n;

	while (len > 0) {
		n = is_send ? send(fd, p, len, MSG_NOSIGNAL) : recv(fd, p, len, 0);
		if (n > 0) {
			p += n;
			len -= (size_t)n;
			continue;
		}
		if (n == 0) {
			snprintf(err, errlen, "connection closed");
			return -1;
		}
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN) {
			snprintf(err, errlen, "%s", errno == EPIPE || errno == ECONNRESET ?
			    "connection closed" : strerror(errno));
			return -1;
		}
		if (comm_sock_wait(fd, is_send ? POLLOUT : POLLIN, deadline) == 0) {
			snprintf(err, errlen, "timed out");
			return -1;
		}
	}
	return 0;
}

int
comm_sock_send_all(int fd, const void *buf, size_t len, double deadline,
    char *err, size_t errlen)
{
	return xfer_all(fd, (char *)buf, len, deadline, 1, err, errlen);
}

int
comm_sock_recv_all(int fd, void *buf, size_t len, double deadline, char *err,
    size_t errlen)
{
	return xfer_all(fd, buf, len, deadline, 0, err, errlen);
}

/* Whether port on a is free now: bound, then released at once. */
static int
port_free(struct sockaddr_in *a, int port)
{
	int fd, ok;

	if ((fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0)
		return -1;
	a->sin_port = htons((uint16_t)port);
	ok = bind(fd, (struct sockaddr *)a, sizeof *a) == 0;
	close(fd);
	return ok;
}

/*
 * A port the kernel would never hand out by itself: one from the
 * ephemeral range can be taken, between the check and rank 0's bind, by
 * another rank's listener or outgoing connection. Random, so that two
 * jobs starting together do not pick the same one.
 */
int
comm_sock_free_port(const char *host, int *port, char *err, size_t errlen)
{
	struct sockaddr_in a;
	uint32_t r;
	int lo, hi, below, above, n, k, p;

	memset(&a, 0, sizeof a);
	a.sin_family = AF_INET;
	if (inet_pton(AF_INET, host, &a.sin_addr) != 1) {
		snprintf(err, errlen, "%s: not an IPv4 address", host);
		return -1;
	}
	cli_ephemeral_range(&lo, &hi);
	below = lo > 10240 ? lo - 10240 : 0;	/* [10240, lo) */
	above = 65535 - hi;			/* (hi, 65535] */
	if (below + above == 0) {
		snprintf(err, errlen, "choosing a free port on %s: the "
		    "ephemeral range %d-%d leaves none", host, lo, hi);
		return -1;
	}
	for (k = 0; k < 256; k++) {
		if (auth_random(&r, sizeof r, err, errlen) < 0)
			return -1;
		n = (int)(r % (uint32_t)(below + above));
		p = n < below ? 10240 + n : hi + 1 + (n - below);
		switch (port_free(&a, p)) {
		case 1:
			*port = p;
			return 0;
		case -1:
			snprintf(err, errlen, "choosing a free port on %s: %s",
			    host, strerror(errno));
			return -1;
		}
	}
	snprintf(err, errlen, "choosing a free port on %s: 256 tries outside "
	    "%d-%d all taken", host, lo, hi);
	return -1;
}
