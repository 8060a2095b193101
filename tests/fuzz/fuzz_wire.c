/* fuzz_wire: the transport's receive path as a peer's bytes drive it:
 * message headers (magic, operation, dtype, tag, signature, length),
 * abort frames, and the search for an abort on a lost connection. A
 * two-rank group whose link to rank 1 is a socket pair: the input is
 * written to the far end, which then closes, and rank 0 receives (or
 * first sends, which finds the link lost and reads what is left). Split
 * mode reads as a group with sub-groups does: header first, a message of
 * another group kept aside as unexpected.
 *
 * Input: byte 0 picks the mode (bit 0: send first, bit 1: split) and the
 * length of the messages expected (bits 2-7, times 8); the rest is rank
 * 1's bytes. */
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cli/cli.h"
#include "comm/comm_impl.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct comm *
fuzz_comm(int fd)
{
	struct comm *c = calloc(1, sizeof *c);
	int p, s;

	c->rank = 0;
	c->world = 2;
	c->net = c;
	c->nstreams = 1;
	c->timeout = 1;
	c->peers = calloc(2, sizeof *c->peers);
	c->pfd = calloc(2 * COMM_MAX_STREAMS, sizeof *c->pfd);
	for (p = 0; p < 2; p++)
		for (s = 0; s < COMM_MAX_STREAMS; s++) {
			struct comm_stream *st = &c->peers[p].st[s];
			st->fd = -1;
			st->sq_tail = &st->sq;
			st->rq_tail = &st->rq;
			st->ux_tail = &st->ux;
		}
	strcpy(c->peers[0].addr, "self");
	strcpy(c->peers[1].addr, "fuzz");
	c->peers[1].st[0].fd = fd;
	c->meshed = 1;
	return c;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static char buf[1024];
	struct comm *c;
	size_t len;
	int sv[2], i;

	if (size < 1 || size > 65536)
		return 0;
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) < 0)
		return 0;
	/* All of the input fits the pair's buffer: write it, then hang up. */
	{
		int sz = 262144;
		setsockopt(sv[1], SOL_SOCKET, SO_SNDBUF, &sz, sizeof sz);
		setsockopt(sv[0], SOL_SOCKET, SO_RCVBUF, &sz, sizeof sz);
	}
	comm_sock_set_nonblock(sv[0]);
	if (cli_write_all(sv[1], data + 1, size - 1) < 0) {
		close(sv[0]);
		close(sv[1]);
		return 0;
	}
	close(sv[1]);
	c = fuzz_comm(sv[0]);
	len = (size_t)(data[0] >> 2) * 8;
	c->split = (data[0] >> 1) & 1;
	comm_op_begin(c, 2, "allreduce", 0, 0x1234);
	comm_set_step(c, "fuzz step 1");
	if (data[0] & 1)
		comm_send(c, 1, 7, buf, len);
	for (i = 0; i < 4 && comm_recv(c, 1, 7, buf, len) == 0; i++)
		;
	comm_close(c);
	return 0;
}
