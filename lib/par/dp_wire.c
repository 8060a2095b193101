/*
 * dp_wire: gradient sums that travel in a narrower type than f32
 * (--wire), each addition done in f32. A bucket's gradients round in
 * these places, and nowhere else:
 *
 * bf16, f16: each rank rounds its gradients to the wire type once (to
 * nearest even; f16 beyond its range is infinite). The collective then
 * runs on wire values: every addition widens both operands to f32 (exact),
 * adds and rounds the partial sum to the wire type before it is sent on or
 * kept; the result is widened back. The collective is the one f32 would
 * run (--sync's allreduce; ZeRO's reduce-scatter of the zero-padded
 * bucket), so its order of additions is that algorithm's.
 *
 * int8: a bucket is cut into ZeRO's chunks (ceil(n / world) floats, the
 * bucket padded with zeros), each chunk into blocks of DP_WIRE_BLOCK
 * values from its start. A rank adds its error feedback e to its
 * gradients (v = g + e); each block of v gets the scale s = max|v| / 127
 * and the values q = rint(v / s) (ties to even, 0 where s is 0), and e
 * keeps what that lost, v - q * s. An alltoall hands rank r chunk r of
 * every rank, which it dequantizes (q * s) and sums in f32 in rank order,
 * ((d0 + d1) + d2) ... . With ZeRO that sum is the rank's reduced slice.
 * Otherwise the rank quantizes the sum the same way, adds what that lost
 * to its own e over chunk r, and an allgather hands every rank every
 * quantized sum, which each dequantizes alike. Summing int8 values on the
 * wire would overflow; this way each sum stays in f32, and a chunk
 * travels as its scales (f32) then its values, padded to 4 bytes.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cli/util.h"
#include "comm/reduce.h"
#include "par/dp_int.h"

static const char *const wire_names[] = { "f32", "bf16", "f16", "int8" };

int
dp_wire_parse(const char *s, enum dp_wire_type *out)
{
	int i = cli_name_index(wire_names, DP_WIRE_INT8 + 1, s);

	return i < 0 ? -1 : (*out = (enum dp_wire_type)i, 0);
}

const char *
dp_wire_name(enum dp_wire_type t)
{
	return (unsigned)t <= DP_WIRE_INT8 ? wire_names[t] : "?";
}

static void *
alloc(size_t bytes)
{
	return malloc(bytes ? bytes : 1);
}

static size_t
chunk_of(size_t n, int world)
{
	return (n + (size_t)world - 1) / (size_t)world;
}

static size_t
blocks_of(size_t c)
{
	return (c + DP_WIRE_BLOCK - 1) / DP_WIRE_BLOCK;
}

/* Bytes of a chunk of c values on the wire: scales, then values. */
static size_t
msg_bytes(size_t c)
{
	return blocks_of(c) * sizeof(float) + (c + 3) / 4 * 4;
}

int
dp_wire_init(struct dp_wire *w, enum dp_wire_type type, int rank, int world,
    size_t n, size_t maxn, char *err, size_t errlen)
{
	size_t c = chunk_of(maxn, world), total = c * (size_t)world;

	memset(w, 0, sizeof(*w));
	w->type = type;
	w->rank = rank;
	w->world = world;
	if (type == DP_WIRE_F32)
		return 0;
	if (type != DP_WIRE_INT8) {
		w->send = alloc(total * sizeof(uint16_t));
		w->recv = alloc(c * sizeof(uint16_t));
	} else {
		w->nef = n;
		w->ef = calloc(n ? n : 1, sizeof(float));
		/* zeroed: the padding after a chunk's values travels too */
		w->send = calloc(msg_bytes(c) * (size_t)world + 1, 1);
		w->recv = alloc(msg_bytes(c) * (size_t)world);
		w->sum = alloc(c * sizeof(float));
	}
	if (w->send == NULL || w->recv == NULL || (type == DP_WIRE_INT8 &&
	    (w->ef == NULL || w->sum == NULL))) {
		dp_wire_free(w);
		return cli_fail(err, errlen, "rank %d: out of memory", rank);
	}
	return 0;
}

void
dp_wire_free(struct dp_wire *w)
{
	free(w->ef);
	free(w->send);
	free(w->recv);
	free(w->sum);
	w->ef = w->sum = NULL;
	w->send = w->recv = NULL;
}

/* ---- bf16 and f16 ----------------------------------------------------- */

static void
narrow(enum dp_wire_type t, uint16_t *out, const float *in, size_t n)
{
	(t == DP_WIRE_BF16 ? comm_reduce_bf16_narrow :
	    comm_reduce_f16_narrow)(out, in, n);
}

static void
widen(enum dp_wire_type t, float *out, const uint16_t *in, size_t n)
{
	(t == DP_WIRE_BF16 ? comm_reduce_bf16_widen :
	    comm_reduce_f16_widen)(out, in, n);
}

static enum dtype
half_dtype(enum dp_wire_type t)
{
	return t == DP_WIRE_BF16 ? DT_BF16 : DT_F16;
}

int
dp_wire_allgatherv(struct dp_wire *w, struct comm *c, float *v,
    const size_t *counts, enum coll_algo algo)
{
	uint16_t *send = w->send;
	size_t off = 0, mine = 0;
	int q;

	for (q = 0; q < w->rank; q++)
		mine += counts[q];
	narrow(w->type, send + mine, v + mine, counts[w->rank]);
	if (coll_allgatherv(c, send + mine, send, counts, half_dtype(w->type),
	    algo) < 0)
		return -1;
	for (q = 0; q < w->world; off += counts[q++])
		if (q != w->rank)
			widen(w->type, v + off, send + off, counts[q]);
	return 0;
}

/* ---- int8 ------------------------------------------------------------- */

/* Quantizes the k values of one block into q, leaving in v what that
 * lost; returns the block's scale. NaN quantizes to 0. Branch-free loops
 * the compiler vectorizes: rint by the 1.5 * 2^23 trick (exact, ties to
 * even, for the |t| <= 127 it sees). */
static float
q8_block(float *v, size_t k, int8_t *q)
{
	float amax = 0, s;
	size_t i;

	for (i = 0; i < k; i++)
		amax = fabsf(v[i]) > amax ? fabsf(v[i]) : amax;
	s = amax / 127.0f;
	if (!(s > 0)) {
		memset(q, 0, k);
		return s;
	}
	for (i = 0; i < k; i++) {
		float t = v[i] / s;

		t = t > 127 ? 127 : t;
		t = t < -127 ? -127 : t;
		t = t == t ? t : 0;
		t = (t + 0x1.8p23f) - 0x1.8p23f;
		q[i] = (int8_t)(int)t;
		v[i] -= t * s;
	}
	return s;
}

/* Chunk v of c values into message m; v keeps what rounding lost. */
static void
q8_pack(float *v, size_t c, unsigned char *m)
{
	int8_t *q = (int8_t *)(m + blocks_of(c) * sizeof(float));

	for (size_t b = 0; b * DP_WIRE_BLOCK < c; b++) {
		size_t a = b * DP_WIRE_BLOCK;
		size_t k = c - a < DP_WIRE_BLOCK ? c - a : DP_WIRE_BLOCK;
		float s = q8_block(v + a, k, q + a);

		memcpy(m + b * sizeof(float), &s, sizeof(float));
	}
}

/* The first len values of message m (a chunk of c): into out, or added
 * to it. */
static void
q8_unpack(const unsigned char *m, size_t c, size_t len, float *out, int add)
{
	const int8_t *q = (const int8_t *)(m + blocks_of(c) * sizeof(float));
	float s;

	for (size_t a = 0; a < len; a += DP_WIRE_BLOCK) {
		size_t k = len - a < DP_WIRE_BLOCK ? len - a : DP_WIRE_BLOCK, j;

		memcpy(&s, m + a / DP_WIRE_BLOCK * sizeof(float), sizeof(float));
		if (add)
			for (j = a; j < a + k; j++)
				out[j] += (float)q[j] * s;
		else
			for (j = a; j < a + k; j++)
				out[j] = (float)q[j] * s;
	}
}

/* Values of chunk q of a bucket of n floats cut into chunks of c. */
static size_t
chunk_len(size_t n, size_t c, int q)
{
	size_t a = (size_t)q * c;

	return a < n ? (n - a < c ? n - a : c) : 0;
}

/* Every rank's chunk r, quantized with error feedback, into w->sum: their
 * dequantized sum in rank order (c floats, zero past the bucket). */
static int
q8_reduce(struct dp_wire *w, struct comm *c, const float *g, size_t off,
    size_t n, size_t cs)
{
	size_t mb = msg_bytes(cs), len, j;
	unsigned char *send = w->send, *recv = w->recv;
	float *v = w->sum, *e = w->ef + off;
	int q;

	for (q = 0; q < w->world; q++) {
		size_t a = (size_t)q * cs;

		len = chunk_len(n, cs, q);
		for (j = 0; j < len; j++)
			v[j] = g[a + j] + e[a + j];
		memset(v + len, 0, (cs - len) * sizeof(float));
		q8_pack(v, cs, send + (size_t)q * mb);
		memcpy(e + a, v, len * sizeof(float));
	}
	if (coll_alltoall(c, send, recv, mb, DT_U8, COLL_AUTO) < 0)
		return -1;
	for (q = 0; q < w->world; q++)
		q8_unpack(recv + (size_t)q * mb, cs, cs, v, q > 0);
	return 0;
}

/* This rank's reduced chunk quantized again (what that loses into its
 * error feedback), every rank's gathered and dequantized into g. */
static int
q8_gather(struct dp_wire *w, struct comm *c, float *g, size_t off, size_t n,
    size_t cs)
{
	size_t mb = msg_bytes(cs), a = (size_t)w->rank * cs, j;
	size_t len = chunk_len(n, cs, w->rank);
	unsigned char *mine = w->send, *all = w->recv;
	float *e = w->ef + off + a;
	int q;

	q8_pack(w->sum, cs, mine);
	for (j = 0; j < len; j++)
		e[j] += w->sum[j];
	if (coll_allgather(c, mine, all, mb, DT_U8, COLL_AUTO) < 0)
		return -1;
	for (q = 0; q < w->world; q++)
		q8_unpack(all + (size_t)q * mb, cs, chunk_len(n, cs, q),
		    g + (size_t)q * cs, 0);
	return 0;
}

/* ---- the bucket's sync ------------------------------------------------ */

int
dp_wire_allreduce(struct dp_wire *w, struct comm *c, float *g, size_t off,
    size_t n, enum coll_algo algo)
{
	size_t cs = chunk_of(n, w->world);

	if (w->type == DP_WIRE_INT8)
		return q8_reduce(w, c, g, off, n, cs) < 0 ? -1 :
		    q8_gather(w, c, g, off, n, cs);
	narrow(w->type, w->send, g, n);
	if (coll_allreduce(c, w->send, n, half_dtype(w->type), COLL_SUM,
	    algo) < 0)
		return -1;
	widen(w->type, g, w->send, n);
	return 0;
}

int
dp_wire_reduce_scatter(struct dp_wire *w, struct comm *c, const float *g,
    size_t off, size_t n, float *out, size_t len, enum coll_algo algo)
{
	size_t cs = chunk_of(n, w->world), total = cs * (size_t)w->world;
	uint16_t *send = w->send;

	if (w->type == DP_WIRE_INT8) {
		if (q8_reduce(w, c, g, off, n, cs) < 0)
			return -1;
		memcpy(out, w->sum, len * sizeof(float));
		return 0;
	}
	narrow(w->type, send, g, n);
	memset(send + n, 0, (total - n) * sizeof(uint16_t));
	if (coll_reduce_scatter(c, send, w->recv, cs, half_dtype(w->type),
	    COLL_SUM, algo) < 0)
		return -1;
	widen(w->type, out, w->recv, len);
	return 0;
}
