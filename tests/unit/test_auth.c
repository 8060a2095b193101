/* SHA-256 against FIPS 180 examples, HMAC-SHA-256 against RFC 4231 (both
 * now libcrypto's: the vectors check we call it right), and the token
 * handshake over a socket pair. */
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "comm/auth.h"
#include "comm/sock.h"
#include "unit.h"

static void
hex(const uint8_t *d, size_t n, char *out)
{
	size_t i;

	for (i = 0; i < n; i++)
		sprintf(out + 2 * i, "%02x", d[i]);
}

static int
sha_is(const void *msg, size_t len, const char *want)
{
	uint8_t d[SHA256_LEN];
	char h[65];

	auth_sha256(msg, len, d);
	hex(d, sizeof d, h);
	return strcmp(h, want) == 0;
}

static int
hmac_is(const void *key, size_t klen, const char *msg, const char *want)
{
	uint8_t d[SHA256_LEN];
	char h[65];

	auth_hmac_sha256(key, klen, msg, strlen(msg), d);
	hex(d, sizeof d, h);
	return strncmp(h, want, strlen(want)) == 0;
}

static void
test_sha256(void)
{
	/* Lengths around the padding boundaries: bytes 0, 1, 2, ... */
	static const struct { size_t n; const char *d; } b[] = {
		{ 55, "463eb28e72f82e0a96c0a4cc53690c571281131f672aa229e0d45ae59b598b59" },
		{ 56, "da2ae4d6b36748f2a318f23e7ab1dfdf45acdc9d049bd80e59de82a60895f562" },
		{ 63, "29af2686fd53374a36b0846694cc342177e428d1647515f078784d69cdb9e488" },
		{ 64, "fdeab9acf3710362bd2658cdc9a29e8f9c757fcf9811603a8c447cd1d9151108" },
		{ 65, "4bfd2c8b6f1eec7a2afeb48b934ee4b2694182027e6d0fc075074f2fabb31781" },
		{ 119, "da18797ed7c3a777f0847f429724a2d8cd5138e6ed2895c3fa1a6d39d18f7ec6" },
		{ 120, "f52b23db1fbb6ded89ef42a23ce0c8922c45f25c50b568a93bf1c075420bbb7c" },
		{ 128, "471fb943aa23c511f6f72f8d1652d9c880cfa392ad80503120547703e56a2be5" },
	};
	uint8_t seq[128];
	char *million;
	size_t i;

	UNIT_OK(sha_is("abc", 3,
	    "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"),
	    "sha256 of 'abc' (FIPS 180)");
	UNIT_OK(sha_is("", 0,
	    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"),
	    "sha256 of the empty string");
	UNIT_OK(sha_is("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", 56,
	    "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"),
	    "sha256 of the 448-bit message (FIPS 180)");
	million = malloc(1000000);
	memset(million, 'a', 1000000);
	UNIT_OK(sha_is(million, 1000000,
	    "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"),
	    "sha256 of a million 'a' (FIPS 180)");
	free(million);
	for (i = 0; i < sizeof seq; i++)
		seq[i] = (uint8_t)i;
	for (i = 0; i < sizeof b / sizeof b[0]; i++)
		UNIT_OK(sha_is(seq, b[i].n, b[i].d), "sha256 at a padding boundary length");
}

static void
test_hmac(void)
{
	uint8_t k[131];
	size_t i;

	memset(k, 0x0b, 20);
	UNIT_OK(hmac_is(k, 20, "Hi There",
	    "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"),
	    "RFC 4231 test case 1");
	UNIT_OK(hmac_is("Jefe", 4, "what do ya want for nothing?",
	    "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"),
	    "RFC 4231 test case 2");
	{
		char dd[51], cd[51];
		memset(k, 0xaa, 20);
		memset(dd, 0xdd, 50);
		dd[50] = '\0';
		UNIT_OK(hmac_is(k, 20, dd,
		    "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe"),
		    "RFC 4231 test case 3");
		for (i = 0; i < 25; i++)
			k[i] = (uint8_t)(i + 1);
		memset(cd, 0xcd, 50);
		cd[50] = '\0';
		UNIT_OK(hmac_is(k, 25, cd,
		    "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b"),
		    "RFC 4231 test case 4");
	}
	memset(k, 0x0c, 20);
	UNIT_OK(hmac_is(k, 20, "Test With Truncation", "a3b6167473100ee06e0c796c2955552b"),
	    "RFC 4231 test case 5 (truncated to 128 bits)");
	memset(k, 0xaa, 131);
	UNIT_OK(hmac_is(k, 131, "Test Using Larger Than Block-Size Key - Hash Key First",
	    "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"),
	    "RFC 4231 test case 6 (key longer than a block)");
	UNIT_OK(hmac_is(k, 131, "This is a test using a larger than block-size key and a "
	    "larger than block-size data. The key needs to be hashed before being used"
	    " by the HMAC algorithm.",
	    "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2"),
	    "RFC 4231 test case 7 (key and data longer than a block)");
	UNIT_OK(auth_equal("abc", "abc", 3) && !auth_equal("abc", "abd", 3),
	    "constant-time compare");
}

/* Run the handshake with tokens tc (client) and ts (server) on a socket
 * pair; returns the client's and the server's result via *cr and *sr. */
static void
handshake(const char *tc, const char *ts, int *cr, int *sr, char *cerr,
    size_t cerrlen)
{
	int sv[2], st;
	pid_t pid;
	char err[256];

	socketpair(AF_UNIX, SOCK_STREAM, 0, sv);
	comm_sock_set_nonblock(sv[0]);
	comm_sock_set_nonblock(sv[1]);
	pid = fork();
	if (pid == 0) {
		alarm(10);
		close(sv[0]);
		_exit(auth_server(sv[1], ts, cli_now() + 5, err, sizeof err) < 0 ? 1 : 0);
	}
	close(sv[1]);
	*cr = auth_client(sv[0], tc, cli_now() + 5, cerr, cerrlen);
	close(sv[0]);
	waitpid(pid, &st, 0);
	*sr = WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

static void
test_handshake(void)
{
	char err[256];
	int cr, sr;

	handshake("s3cret", "s3cret", &cr, &sr, err, sizeof err);
	UNIT_OK(cr == 0 && sr == 0, "handshake with the same token succeeds on both sides");
	handshake(NULL, NULL, &cr, &sr, err, sizeof err);
	UNIT_OK(cr == 0 && sr == 0, "handshake without a token succeeds");
	handshake("wrong", "s3cret", &cr, &sr, err, sizeof err);
	UNIT_OK(cr < 0 && sr < 0 && strstr(err, "wrong token"),
	    "a wrong token fails on both sides");
	handshake(NULL, "s3cret", &cr, &sr, err, sizeof err);
	UNIT_OK(cr < 0 && sr < 0 && strstr(err, "requires a token"),
	    "a client without the token is refused");
	handshake("s3cret", NULL, &cr, &sr, err, sizeof err);
	UNIT_OK(cr < 0 && sr < 0 && strstr(err, "no token"),
	    "a server without a token is not trusted by a client with one");
}

/* The handshake's wire layout (auth.c), as an outsider sees it. */
struct hello {
	uint32_t magic, flags;
	uint8_t nonce[32], mac[SHA256_LEN];
};

/* An outsider who knows the token's proofs from one connection: opens a
 * connection to a real server with a fixed client nonce, answers with
 * proof (NULL: the right one for this connection, computed here), and
 * returns the server's hello and verdict (1 accepted). */
static int
outsider(const char *token, const uint8_t *proof, struct hello *sh,
    uint8_t *mac_out)
{
	struct hello ch = { 0x31415843u, 1, { 0 }, { 0 } };
	uint8_t msg[65], mac[SHA256_LEN], status = 0;
	int sv[2], st;
	char err[256];
	pid_t pid;

	memset(ch.nonce, 0x42, sizeof ch.nonce);
	socketpair(AF_UNIX, SOCK_STREAM, 0, sv);
	comm_sock_set_nonblock(sv[0]);
	pid = fork();
	if (pid == 0) {
		alarm(10);
		close(sv[0]);
		_exit(auth_server(sv[1], token, cli_now() + 5, err, sizeof err) < 0 ? 1 : 0);
	}
	close(sv[1]);
	comm_sock_send_all(sv[0], &ch, sizeof ch, cli_now() + 5, err, sizeof err);
	comm_sock_recv_all(sv[0], sh, sizeof *sh, cli_now() + 5, err, sizeof err);
	msg[0] = 'C';
	memcpy(msg + 1, sh->nonce, 32);
	memcpy(msg + 33, ch.nonce, 32);
	auth_hmac_sha256(token, strlen(token), msg, sizeof msg, mac);
	if (mac_out)
		memcpy(mac_out, mac, sizeof mac);
	comm_sock_send_all(sv[0], proof ? proof : mac, sizeof mac, cli_now() + 5, err,
	    sizeof err);
	comm_sock_recv_all(sv[0], &status, 1, cli_now() + 5, err, sizeof err);
	close(sv[0]);
	waitpid(pid, &st, 0);
	return status == 1 && WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

static void
test_fresh(void)
{
	struct hello a, b;
	uint8_t r1[32], r2[32], mac[SHA256_LEN], msg[65];
	char err[256];

	UNIT_OK(auth_random(r1, sizeof r1, err, sizeof err) == 0 &&
	    auth_random(r2, sizeof r2, err, sizeof err) == 0 &&
	    memcmp(r1, r2, sizeof r1) != 0, "two nonces differ");
	UNIT_OK(outsider("s3cret", NULL, &a, mac),
	    "a client proving the token on its own connection is accepted");
	/* The server proved itself over the client's nonce: checked here. */
	msg[0] = 'S';
	memset(msg + 1, 0x42, 32);
	memcpy(msg + 33, a.nonce, 32);
	auth_hmac_sha256("s3cret", 6, msg, sizeof msg, r1);
	UNIT_OK(memcmp(r1, a.mac, sizeof r1) == 0,
	    "the server proves the token over the client's nonce (mutual)");
	UNIT_OK(!outsider("s3cret", mac, &b, NULL),
	    "a proof replayed on a second connection is refused");
	UNIT_OK(memcmp(a.nonce, b.nonce, sizeof a.nonce) != 0,
	    "the server draws a fresh nonce for every connection");
	UNIT_OK(!outsider("s3cret", a.mac, &b, NULL),
	    "the server's own proof reflected back is refused");
}

int
main(void)
{
	test_sha256();
	test_hmac();
	test_handshake();
	test_fresh();
	return unit_done();
}
