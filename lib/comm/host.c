/* host: which ranks share a host. Two ranks are on one host when their
 * hostname, boot id and network namespace agree (collx(7), TRANSPORTS):
 * ranks in different namespaces of one machine are different hosts, so
 * an emulated cluster keeps its shaped links. Once the mesh is up, every
 * rank tells every peer its host key, process id and whether it allows
 * shared memory, on stream 0, and numbers the hosts by their lowest
 * rank. */
#include "cli/util.h"
#include "comm/comm_impl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define HOST_MAGIC 0x54485843u	/* "CXHT" */

struct host_hello {
	uint32_t magic;
	int32_t pid;
	int32_t shm;		/* 1: this rank allows shared memory */
	uint32_t machine;	/* the machine's: hostname and boot id */
	uint8_t key[SHA256_LEN];
};

/* Which machine this is, whatever its network namespace: ranks of one
 * machine share its cores, also when they are different hosts. */
static uint32_t
machine_id(void)
{
	char text[512], name[256] = "", boot[64];
	uint8_t h[SHA256_LEN];

	gethostname(name, sizeof name - 1);
	cli_first_line("/proc/sys/kernel/random/boot_id", boot, sizeof boot);
	snprintf(text, sizeof text, "%s\n%s", name, boot);
	auth_sha256(text, strlen(text), h);
	return (uint32_t)h[0] | (uint32_t)h[1] << 8 | (uint32_t)h[2] << 16 |
	    (uint32_t)h[3] << 24;
}

void
comm_host_key(const char *host, uint8_t key[SHA256_LEN])
{
	char text[512], name[256] = "", boot[64], ns[64] = "";
	ssize_t n;

	if (host != NULL) {	/* the caller's word: never a real key's text */
		snprintf(text, sizeof text, "collx host option\n%s", host);
		auth_sha256(text, strlen(text), key);
		return;
	}
	gethostname(name, sizeof name - 1);
	cli_first_line("/proc/sys/kernel/random/boot_id", boot, sizeof boot);
	if ((n = readlink("/proc/self/ns/net", ns, sizeof ns - 1)) > 0)
		ns[n] = '\0';
	snprintf(text, sizeof text, "%s\n%s\n%s", name, boot, ns);
	auth_sha256(text, strlen(text), key);
}

static int
host_fail(struct comm *c, int peer, const char *what)
{
	comm_cause_set(c, peer, COMM_WHY_FAILED, EPROTO);
	comm_fail(c, COMM_ERR_RUNTIME, "telling hosts apart with peer rank %d "
	    "(%s): %s", peer, c->peers[peer].addr, what);
	return -1;
}

/* Host numbers from the keys: in order of each host's lowest rank. */
static void
host_number(struct comm *c, uint8_t (*keys)[SHA256_LEN])
{
	int r, q;

	c->nhosts = 0;
	for (r = 0; r < c->world; r++) {
		for (q = 0; q < r; q++)
			if (memcmp(keys[q], keys[r], SHA256_LEN) == 0)
				break;
		c->host[r] = q < r ? c->host[q] : c->nhosts++;
	}
}

int
comm_host_exchange(struct comm *c, int shm, const char *host)
{
	struct host_hello mine = { HOST_MAGIC, (int32_t)getpid(), shm,
	    machine_id(), { 0 } };
	struct host_hello h;
	uint8_t (*keys)[SHA256_LEN] = calloc((size_t)c->world, sizeof *keys);
	double deadline = cli_now() + c->timeout;
	char err[COLLX_ERRLEN];
	int peer, rc = -1;

	c->host = calloc((size_t)c->world, sizeof *c->host);
	c->pid = calloc((size_t)c->world, sizeof *c->pid);
	c->shm_ok = calloc((size_t)c->world, sizeof *c->shm_ok);
	if (!keys || !c->host || !c->pid || !c->shm_ok) {
		comm_fail(c, COMM_ERR_RUNTIME, "out of memory");
		goto out;
	}
	comm_host_key(host, mine.key);
	memcpy(keys[c->rank], mine.key, SHA256_LEN);
	c->pid[c->rank] = mine.pid;
	c->shm_ok[c->rank] = shm;
	c->machine_ranks = 1;
	/* Small enough for any socket buffer: send all, then read all. */
	for (peer = 0; peer < c->world; peer++)
		if (peer != c->rank && comm_sock_send_all(c->peers[peer].st[0].fd,
		    &mine, sizeof mine, deadline, err, sizeof err) < 0) {
			host_fail(c, peer, err);
			goto out;
		}
	for (peer = 0; peer < c->world; peer++) {
		if (peer == c->rank)
			continue;
		if (comm_sock_recv_all(c->peers[peer].st[0].fd, &h, sizeof h,
		    deadline, err, sizeof err) < 0) {
			host_fail(c, peer, err);
			goto out;
		}
		if (h.magic != HOST_MAGIC) {
			host_fail(c, peer, "garbled host message");
			goto out;
		}
		memcpy(keys[peer], h.key, SHA256_LEN);
		c->pid[peer] = h.pid;
		c->shm_ok[peer] = h.shm == 1;
		c->machine_ranks += h.machine == mine.machine;
	}
	host_number(c, keys);
	rc = 0;
out:
	free(keys);
	return rc;
}

/* A sub-group's host numbers, from net's: its hosts numbered again by
 * their lowest rank in s, once, so comm_host is a lookup. */
int
comm_host_sub(struct comm *s)
{
	const struct comm *n = s->net;
	int *seen, r, h;

	if (n->host == NULL)
		return 0;
	s->host = malloc((size_t)s->world * sizeof *s->host);
	seen = malloc((size_t)n->nhosts * sizeof *seen);
	if (s->host == NULL || seen == NULL) {
		free(seen);
		comm_fail(s, COMM_ERR_RUNTIME, "out of memory");
		return -1;
	}
	for (h = 0; h < n->nhosts; h++)
		seen[h] = -1;
	s->nhosts = 0;
	for (r = 0; r < s->world; r++) {
		h = n->host[comm_net_rank(s, r)];
		if (seen[h] < 0)
			seen[h] = s->nhosts++;
		s->host[r] = seen[h];
	}
	free(seen);
	return 0;
}

int
comm_host(const struct comm *c, int r)
{
	if (r < 0 || r >= c->world || c->host == NULL)
		return 0;
	return c->host[r];
}

int
comm_hosts(const struct comm *c)
{
	return c->host == NULL ? 1 : c->nhosts;
}

const char *
comm_transport(const struct comm *c, int peer)
{
	if (peer < 0 || peer >= c->world)
		return "?";
	if (peer == c->rank)
		return "self";
	return c->net->peers[comm_net_rank(c, peer)].st[0].rx != NULL ?
	    "shm" : "tcp";
}
