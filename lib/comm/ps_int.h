/* ps_int: the parameter server's wire format, shared by its server,
 * client and colocated parts (and the fuzz target of the parser). */
#ifndef COLLX_PS_INT_H
#define COLLX_PS_INT_H

#include <stddef.h>
#include <stdint.h>

#include "comm/ps.h"

#define PS_MAGIC 0x31505843u	/* "CXP1" */
#define PS_HDR 64
#define PS_OPCODE 14		/* comm opcode of a colocated round */
#define PS_TEXT_MAX (16u << 20)	/* layout and error texts */

enum {
	PS_HELLO = 1, PS_WELCOME, PS_PUSH, PS_PARAMS, PS_PULL, PS_DONE,
	PS_ACK, PS_BYE, PS_ERROR
};

struct ps_msg {
	uint32_t type;
	int32_t index;		/* server index, or worker id (-1 none) */
	uint32_t nserv;
	uint64_t round, off, len, total;
	double weight;
	uint64_t paylen;
};

/* The header of m into b (PS_HDR bytes), and back: -1 on a bad magic. */
void ps_msg_pack(unsigned char *b, const struct ps_msg *m);
int ps_msg_unpack(const unsigned char *b, struct ps_msg *m);
/* One message (header, then paylen bytes of pay) before deadline. */
int ps_msg_send(int fd, const struct ps_msg *m, const void *pay,
    double deadline, char *err, size_t errlen);
/* One header before deadline; its payload is left for the caller. */
int ps_msg_recv(int fd, struct ps_msg *m, double deadline, char *err,
    size_t errlen);
/* A text payload (layout, error reason), NUL-terminated, malloc'd. */
char *ps_text_recv(int fd, uint64_t len, double deadline, char *err,
    size_t errlen);
/* An ERROR message carrying text, best effort. */
int ps_send_error(int fd, const char *text, double deadline);

#endif
