/* auth: the token handshake; SHA-256, HMAC, randomness and constant-time
 * comparison come from OpenSSL's libcrypto. */
#include "comm/auth.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include "comm/sock.h"

void
auth_sha256(const void *data, size_t len, uint8_t out[SHA256_LEN])
{
	unsigned int n = SHA256_LEN;

	/* Only fails when libcrypto cannot allocate: leave a digest that
	 * matches nobody's rather than stack garbage. */
	if (EVP_Digest(data, len, out, &n, EVP_sha256(), NULL) != 1)
		memset(out, 0, SHA256_LEN);
}

void
auth_hmac_sha256(const void *key, size_t keylen, const void *msg, size_t len,
    uint8_t out[SHA256_LEN])
{
	static const uint8_t none;
	unsigned int n = SHA256_LEN;

	if (keylen > INT_MAX ||
	    !HMAC(EVP_sha256(), keylen ? key : &none, (int)keylen, msg, len, out, &n))
		memset(out, 0, SHA256_LEN);
}

int
auth_equal(const void *a, const void *b, size_t n)
{
	return CRYPTO_memcmp(a, b, n) == 0;
}

int
auth_random(void *buf, size_t n, char *err, size_t errlen)
{
	const char *why;

	if (n > INT_MAX || RAND_bytes(buf, (int)n) != 1) {
		why = ERR_reason_error_string(ERR_get_error());
		snprintf(err, errlen, "RAND_bytes: %s", why ? why : "no random source");
		return -1;
	}
	return 0;
}

/*
 * Wire: client sends {magic, flags, nonce_c}; server answers {magic, flags,
 * nonce_s, mac_s}. With a token, mac_s = HMAC(token, "S" nonce_c nonce_s);
 * the client checks it and sends mac_c = HMAC(token, "C" nonce_s nonce_c);
 * the server checks that and answers one status byte (1 accepted). The
 * side labels stop a peer from reflecting one side's proof back to it.
 */
#define AUTH_MAGIC 0x31415843u	/* "CXA1" */
#define AUTH_TOKEN 1u
#define NONCE 32

struct auth_hello {
	uint32_t magic, flags;
	uint8_t nonce[NONCE];
	uint8_t mac[SHA256_LEN];	/* server's proof; zero from the client */
};

static int
has_token(const char *token)
{
	return token && token[0];
}

static void
auth_mac(const char *token, char side, const uint8_t *first,
    const uint8_t *second, uint8_t out[SHA256_LEN])
{
	uint8_t msg[1 + 2 * NONCE];

	msg[0] = (uint8_t)side;
	memcpy(msg + 1, first, NONCE);
	memcpy(msg + 1 + NONCE, second, NONCE);
	auth_hmac_sha256(token, strlen(token), msg, sizeof msg, out);
}

static int
auth_hello_init(struct auth_hello *h, const char *token, char *err,
    size_t errlen)
{
	memset(h, 0, sizeof *h);
	h->magic = AUTH_MAGIC;
	h->flags = has_token(token) ? AUTH_TOKEN : 0;
	return auth_random(h->nonce, NONCE, err, errlen);
}

/* Both sides: the peer's hello must be ours and agree on the token. */
static int
auth_hello_check(const struct auth_hello *peer, const char *token,
    char *err, size_t errlen)
{
	if (peer->magic != AUTH_MAGIC) {
		snprintf(err, errlen, "not a collx peer (bad handshake)");
		return -1;
	}
	if ((peer->flags & AUTH_TOKEN) != (has_token(token) ? AUTH_TOKEN : 0)) {
		snprintf(err, errlen, "%s", has_token(token) ?
		    "peer has no token but this side requires one" :
		    "peer requires a token but this side has none");
		return -1;
	}
	return 0;
}

int
auth_client(int fd, const char *token, double deadline, char *err,
    size_t errlen)
{
	struct auth_hello me, peer;
	uint8_t mac[SHA256_LEN], status = 0;

	if (auth_hello_init(&me, token, err, errlen) < 0 ||
	    comm_sock_send_all(fd, &me, sizeof me, deadline, err, errlen) < 0 ||
	    comm_sock_recv_all(fd, &peer, sizeof peer, deadline, err, errlen) < 0 ||
	    auth_hello_check(&peer, token, err, errlen) < 0)
		return -1;
	if (!has_token(token))
		return 0;
	auth_mac(token, 'S', me.nonce, peer.nonce, mac);
	if (!auth_equal(mac, peer.mac, sizeof mac)) {
		/* A zero proof tells the server why we leave, for its log. */
		memset(mac, 0, sizeof mac);
		comm_sock_send_all(fd, mac, sizeof mac, deadline, err, errlen);
		snprintf(err, errlen, "peer failed to prove the token (wrong token)");
		return -1;
	}
	auth_mac(token, 'C', peer.nonce, me.nonce, mac);
	if (comm_sock_send_all(fd, mac, sizeof mac, deadline, err, errlen) < 0 ||
	    comm_sock_recv_all(fd, &status, 1, deadline, err, errlen) < 0)
		return -1;
	if (status != 1) {
		snprintf(err, errlen, "peer refused this side's token (wrong token)");
		return -1;
	}
	return 0;
}

int
auth_server(int fd, const char *token, double deadline, char *err,
    size_t errlen)
{
	struct auth_hello me, peer;
	uint8_t mac[SHA256_LEN];
	uint8_t status;

	if (auth_hello_init(&me, token, err, errlen) < 0 ||
	    comm_sock_recv_all(fd, &peer, sizeof peer, deadline, err, errlen) < 0)
		return -1;
	if (has_token(token))
		auth_mac(token, 'S', peer.nonce, me.nonce, me.mac);
	/* Answer even a mismatched peer, so it can tell its user why. */
	if (comm_sock_send_all(fd, &me, sizeof me, deadline, err, errlen) < 0 ||
	    auth_hello_check(&peer, token, err, errlen) < 0)
		return -1;
	if (!has_token(token))
		return 0;
	if (comm_sock_recv_all(fd, mac, sizeof mac, deadline, err, errlen) < 0)
		return -1;
	auth_mac(token, 'C', me.nonce, peer.nonce, peer.mac);
	status = auth_equal(mac, peer.mac, sizeof mac);
	if (comm_sock_send_all(fd, &status, 1, deadline, err, errlen) < 0)
		return -1;
	if (!status) {
		snprintf(err, errlen, "peer failed to prove the token (wrong token)");
		return -1;
	}
	return 0;
}
