/* ps_wire: the parameter server's TCP messages: a 64-byte header of
 * little-endian fields, then the payload. */
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/auth.h"
#include "comm/ps_int.h"
#include "comm/sock.h"
#include "tensor/dtype.h"

/* ---- wire messages --------------------------------------------------- */

void
ps_msg_pack(unsigned char *b, const struct ps_msg *m)
{
	uint64_t w;

	memcpy(&w, &m->weight, sizeof(w));
	cli_le_put(b, PS_MAGIC, 4);
	cli_le_put(b + 4, m->type, 4);
	cli_le_put(b + 8, (uint32_t)m->index, 4);
	cli_le_put(b + 12, m->nserv, 4);
	cli_le_put(b + 16, m->round, 8);
	cli_le_put(b + 24, m->off, 8);
	cli_le_put(b + 32, m->len, 8);
	cli_le_put(b + 40, m->total, 8);
	cli_le_put(b + 48, w, 8);
	cli_le_put(b + 56, m->paylen, 8);
}

int
ps_msg_unpack(const unsigned char *b, struct ps_msg *m)
{
	uint64_t w;

	if (cli_le_get(b, 4) != PS_MAGIC)
		return -1;
	m->type = cli_le_get(b + 4, 4);
	m->index = (int32_t)cli_le_get(b + 8, 4);
	m->nserv = cli_le_get(b + 12, 4);
	m->round = cli_le_get(b + 16, 8);
	m->off = cli_le_get(b + 24, 8);
	m->len = cli_le_get(b + 32, 8);
	m->total = cli_le_get(b + 40, 8);
	w = cli_le_get(b + 48, 8);
	memcpy(&m->weight, &w, sizeof(w));
	m->paylen = cli_le_get(b + 56, 8);
	return 0;
}

int
ps_msg_send(int fd, const struct ps_msg *m, const void *pay, double deadline,
    char *err, size_t errlen)
{
	unsigned char h[PS_HDR];

	ps_msg_pack(h, m);
	if (comm_sock_send_all(fd, h, sizeof(h), deadline, err, errlen) < 0)
		return -1;
	if (m->paylen > 0 && comm_sock_send_all(fd, pay, m->paylen, deadline, err,
	    errlen) < 0)
		return -1;
	return 0;
}

int
ps_msg_recv(int fd, struct ps_msg *m, double deadline, char *err, size_t errlen)
{
	unsigned char h[PS_HDR];

	if (comm_sock_recv_all(fd, h, sizeof(h), deadline, err, errlen) < 0)
		return -1;
	if (ps_msg_unpack(h, m) < 0) {
		snprintf(err, errlen, "not a collx-ps peer (bad message magic)");
		return -1;
	}
	return 0;
}

/* A text payload (layout, error reason), NUL-terminated, malloc'd. */
char *
ps_text_recv(int fd, uint64_t len, double deadline, char *err, size_t errlen)
{
	char *t;

	if (len > PS_TEXT_MAX) {
		snprintf(err, errlen, "text of %llu bytes is too long",
		    (unsigned long long)len);
		return NULL;
	}
	t = malloc(len + 1);
	if (t == NULL) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	if (comm_sock_recv_all(fd, t, len, deadline, err, errlen) < 0) {
		free(t);
		return NULL;
	}
	t[len] = '\0';
	return t;
}

int
ps_send_error(int fd, const char *text, double deadline)
{
	struct ps_msg m = { .type = PS_ERROR, .index = -1, .paylen = strlen(text) };
	char e[COLLX_ERRLEN];

	return ps_msg_send(fd, &m, text, deadline, e, sizeof(e));
}

