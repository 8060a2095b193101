/* auth: SHA-256, HMAC-SHA-256 and the connection handshake that proves a
 * shared secret in both directions without sending it. */
#ifndef COLLX_AUTH_H
#define COLLX_AUTH_H

#include <stddef.h>
#include <stdint.h>

#define SHA256_LEN 32

struct sha256 {
	uint32_t h[8];
	uint64_t total;		/* bytes hashed so far */
	uint8_t block[64];
	size_t fill;
};

void auth_sha256_init(struct sha256 *s);
void auth_sha256_update(struct sha256 *s, const void *data, size_t len);
void auth_sha256_final(struct sha256 *s, uint8_t out[SHA256_LEN]);
void auth_sha256(const void *data, size_t len, uint8_t out[SHA256_LEN]);
/* RFC 2104 HMAC over SHA-256; any key length. */
void auth_hmac_sha256(const void *key, size_t keylen, const void *msg, size_t len,
    uint8_t out[SHA256_LEN]);
/* Constant-time equality of n bytes. */
int auth_equal(const void *a, const void *b, size_t n);
/* n bytes from the kernel's random source. */
int auth_random(void *buf, size_t n, char *err, size_t errlen);

/*
 * Handshake on a fresh connection; token NULL or "" means none. The side
 * that connected calls auth_client, the side that accepted auth_server.
 * Both sides must agree whether a token is used, and when one is, each
 * proves it knows the token with an HMAC over both sides' nonces. On
 * failure err says why and the caller drops the connection.
 */
int auth_client(int fd, const char *token, double deadline, char *err,
    size_t errlen);
int auth_server(int fd, const char *token, double deadline, char *err,
    size_t errlen);

#endif
