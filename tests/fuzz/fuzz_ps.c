/* fuzz_ps: the parameter server's message parser as either side reads
 * it: headers (ps_msg_recv / ps_msg_unpack), text payloads (layouts and
 * error reasons, ps_text_recv) and the payloads skipped or taken by
 * length. The input is the peer's byte stream on a socket pair. */
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cli/cli.h"
#include "comm/ps_int.h"
#include "comm/sock.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	unsigned char h[PS_HDR], skip[4096];
	struct ps_msg m, back;
	char err[256], *t;
	int sv[2], sz = 262144, i;

	/* The header alone, and its packing back. */
	if (size >= PS_HDR && ps_msg_unpack(data, &m) == 0) {
		ps_msg_pack(h, &m);
		if (ps_msg_unpack(h, &back) < 0 || memcmp(h, data, PS_HDR) != 0)
			abort();
	}
	if (size > 65536 || socketpair(AF_UNIX, SOCK_STREAM, 0, sv) < 0)
		return 0;
	setsockopt(sv[1], SOL_SOCKET, SO_SNDBUF, &sz, sizeof sz);
	setsockopt(sv[0], SOL_SOCKET, SO_RCVBUF, &sz, sizeof sz);
	comm_sock_set_nonblock(sv[0]);
	if (cli_write_all(sv[1], data, size) < 0)
		goto out;
	close(sv[1]);
	sv[1] = -1;
	for (i = 0; i < 16; i++) {
		if (ps_msg_recv(sv[0], &m, cli_now() + 1, err, sizeof err) < 0)
			break;
		if (m.type == PS_ERROR || m.type == PS_WELCOME) {
			if ((t = ps_text_recv(sv[0], m.paylen, cli_now() + 1, err,
			    sizeof err)) == NULL)
				break;
			free(t);
		} else if (m.paylen > 0) {
			/* A payload of floats: the server takes it by length. */
			if (m.paylen > sizeof skip || comm_sock_recv_all(sv[0], skip,
			    (size_t)m.paylen, cli_now() + 1, err, sizeof err) < 0)
				break;
		}
	}
out:
	close(sv[0]);
	if (sv[1] >= 0)
		close(sv[1]);
	return 0;
}
