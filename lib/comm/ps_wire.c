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

static void
put32(unsigned char *b, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		b[i] = (unsigned char)(v >> (8 * i));
}

static void
put64(unsigned char *b, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		b[i] = (unsigned char)(v >> (8 * i));
}

static uint32_t
get32(const unsigned char *b)
{
	uint32_t v = 0;

	for (int i = 3; i >= 0; i--)
		v = v << 8 | b[i];
	return v;
}

static uint64_t
get64(const unsigned char *b)
{
	uint64_t v = 0;

	for (int i = 7; i >= 0; i--)
		v = v << 8 | b[i];
	return v;
}

void
ps_msg_pack(unsigned char *b, const struct ps_msg *m)
{
	uint64_t w;

	memcpy(&w, &m->weight, sizeof(w));
	put32(b, PS_MAGIC);
	put32(b + 4, m->type);
	put32(b + 8, (uint32_t)m->index);
	put32(b + 12, m->nserv);
	put64(b + 16, m->round);
	put64(b + 24, m->off);
	put64(b + 32, m->len);
	put64(b + 40, m->total);
	put64(b + 48, w);
	put64(b + 56, m->paylen);
}

int
ps_msg_unpack(const unsigned char *b, struct ps_msg *m)
{
	uint64_t w;

	if (get32(b) != PS_MAGIC)
		return -1;
	m->type = get32(b + 4);
	m->index = (int32_t)get32(b + 8);
	m->nserv = get32(b + 12);
	m->round = get64(b + 16);
	m->off = get64(b + 24);
	m->len = get64(b + 32);
	m->total = get64(b + 40);
	w = get64(b + 48);
	memcpy(&m->weight, &w, sizeof(w));
	m->paylen = get64(b + 56);
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
	char e[64];

	return ps_msg_send(fd, &m, text, deadline, e, sizeof(e));
}

