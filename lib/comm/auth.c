/* auth: SHA-256 (FIPS 180-4), HMAC (RFC 2104) and the token handshake. */
#include "comm/auth.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

#include "comm/sock.h"

static const uint32_t K[64] = {
	0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1,
	0x923f82a4, 0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3,
	0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786,
	0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
	0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147,
	0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
	0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
	0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
	0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a,
	0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208,
	0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2
};

#define ROR(x, n) (((x) >> (n)) | ((x) << (32 - (n))))

static void sha256_block(uint32_t h[8], const uint8_t *p)
{
	uint32_t w[64], v[8], t1, t2;
	int i;

	for (i = 0; i < 16; i++)
		w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 |
		    (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
	for (i = 16; i < 64; i++)
		w[i] = w[i - 16] + (ROR(w[i - 15], 7) ^ ROR(w[i - 15], 18) ^ (w[i - 15] >> 3)) +
		    w[i - 7] + (ROR(w[i - 2], 17) ^ ROR(w[i - 2], 19) ^ (w[i - 2] >> 10));
	memcpy(v, h, sizeof v);
	for (i = 0; i < 64; i++) {
		t1 = v[7] + (ROR(v[4], 6) ^ ROR(v[4], 11) ^ ROR(v[4], 25)) +
		    ((v[4] & v[5]) ^ (~v[4] & v[6])) + K[i] + w[i];
		t2 = (ROR(v[0], 2) ^ ROR(v[0], 13) ^ ROR(v[0], 22)) +
		    ((v[0] & v[1]) ^ (v[0] & v[2]) ^ (v[1] & v[2]));
		memmove(v + 1, v, 7 * sizeof v[0]);
		v[4] += t1;
		v[0] = t1 + t2;
	}
	for (i = 0; i < 8; i++)
		h[i] += v[i];
}

void auth_sha256_init(struct sha256 *s)
{
	static const uint32_t iv[8] = {
		0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
		0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19
	};

	memcpy(s->h, iv, sizeof iv);
	s->total = 0;
	s->fill = 0;
}

void auth_sha256_update(struct sha256 *s, const void *data, size_t len)
{
	const uint8_t *p = data;
	size_t n;

	s->total += len;
	while (len > 0) {
		n = 64 - s->fill < len ? 64 - s->fill : len;
		memcpy(s->block + s->fill, p, n);
		s->fill += n;
		p += n;
		len -= n;
		if (s->fill == 64) {
			sha256_block(s->h, s->block);
			s->fill = 0;
		}
	}
}

void auth_sha256_final(struct sha256 *s, uint8_t out[SHA256_LEN])
{
	uint64_t bits = s->total * 8;
	uint8_t pad[72] = { 0x80 };
	size_t padlen = (s->fill < 56 ? 56 : 120) - s->fill;
	int i;

	for (i = 0; i < 8; i++)
		pad[padlen + i] = (uint8_t)(bits >> (56 - 8 * i));
	auth_sha256_update(s, pad, padlen + 8);
	for (i = 0; i < 32; i++)
		out[i] = (uint8_t)(s->h[i / 4] >> (24 - 8 * (i % 4)));
}

void auth_sha256(const void *data, size_t len, uint8_t out[SHA256_LEN])
{
	struct sha256 s;

	auth_sha256_init(&s);
	auth_sha256_update(&s, data, len);
	auth_sha256_final(&s, out);
}

void auth_hmac_sha256(const void *key, size_t keylen, const void *msg, size_t len,
    uint8_t out[SHA256_LEN])
{
	uint8_t k[64] = { 0 }, pad[64], inner[SHA256_LEN];
	struct sha256 s;
	int i;

	if (keylen > 64)
		auth_sha256(key, keylen, k);
	else
		memcpy(k, key, keylen);
	for (i = 0; i < 64; i++)
		pad[i] = k[i] ^ 0x36;
	auth_sha256_init(&s);
	auth_sha256_update(&s, pad, 64);
	auth_sha256_update(&s, msg, len);
	auth_sha256_final(&s, inner);
	for (i = 0; i < 64; i++)
		pad[i] = k[i] ^ 0x5c;
	auth_sha256_init(&s);
	auth_sha256_update(&s, pad, 64);
	auth_sha256_update(&s, inner, sizeof inner);
	auth_sha256_final(&s, out);
}

int auth_equal(const void *a, const void *b, size_t n)
{
	const uint8_t *x = a, *y = b;
	uint8_t d = 0;
	size_t i;

	for (i = 0; i < n; i++)
		d |= x[i] ^ y[i];
	return d == 0;
}

int auth_random(void *buf, size_t n, char *err, size_t errlen)
{
	uint8_t *p = buf;
	ssize_t got;

	while (n > 0) {
		got = getrandom(p, n, 0);
		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0) {
			snprintf(err, errlen, "getrandom: %s", strerror(errno));
			return -1;
		}
		p += got;
		n -= (size_t)got;
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

static int has_token(const char *token)
{
	return token && token[0];
}

static void auth_mac(const char *token, char side, const uint8_t *first,
    const uint8_t *second, uint8_t out[SHA256_LEN])
{
	uint8_t msg[1 + 2 * NONCE];

	msg[0] = (uint8_t)side;
	memcpy(msg + 1, first, NONCE);
	memcpy(msg + 1 + NONCE, second, NONCE);
	auth_hmac_sha256(token, strlen(token), msg, sizeof msg, out);
}

static int auth_hello_init(struct auth_hello *h, const char *token, char *err,
    size_t errlen)
{
	memset(h, 0, sizeof *h);
	h->magic = AUTH_MAGIC;
	h->flags = has_token(token) ? AUTH_TOKEN : 0;
	return auth_random(h->nonce, NONCE, err, errlen);
}

/* Both sides: the peer's hello must be ours and agree on the token. */
static int auth_hello_check(const struct auth_hello *peer, const char *token,
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

int auth_client(int fd, const char *token, double deadline, char *err,
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

int auth_server(int fd, const char *token, double deadline, char *err,
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
