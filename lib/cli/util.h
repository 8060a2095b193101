/* util: the bottom of the tree, usable from every layer. The library's
 * error convention lives here: a function that can fail returns -1 (or
 * NULL) with one line of reason written into the caller's buffer of
 * COLLX_ERRLEN bytes, and never exits; only programs exit. */
#ifndef COLLX_UTIL_H
#define COLLX_UTIL_H

#include <stddef.h>
#include <stdint.h>

/* The size of every error buffer the library writes into. */
#define COLLX_ERRLEN 512

/* Formats the reason into err (errlen bytes) and returns -1. */
int cli_fail(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Monotonic seconds. */
double cli_now(void);

/* 64-bit FNV-1a of n bytes, continuing from h (start with CLI_FNV1A_INIT). */
#define CLI_FNV1A_INIT 0xcbf29ce484222325ULL
uint64_t cli_fnv1a(uint64_t h, const void *p, size_t n);

/* The index of s among names[0..n) (NULL entries never match), or -1:
 * the one lookup behind every NAME_parse of an enum's names. */
int cli_name_index(const char *const *names, int n, const char *s);

/* Little-endian unsigned integers of n bytes (1 to 8), as the file
 * formats and the parameter server's messages store them. */
uint64_t cli_le_get(const unsigned char *b, int n);
void cli_le_put(unsigned char *b, uint64_t v, int n);

/* The first line of a small file, without its newline, into buf; "" when
 * the file cannot be read. */
void cli_first_line(const char *path, char *buf, size_t len);
/* The kernel's ephemeral port range, where bind(port 0) and connect()
 * take their local ports (Linux's default when it cannot be read). */
void cli_ephemeral_range(int *lo, int *hi);

#endif
