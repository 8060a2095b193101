/* Ulysses' all-to-all layout, with the exchange simulated in memory: every
 * element's value encodes its (sample, global position, column), so each
 * one is checked where it lands, and the reverse exchange restores the
 * input exactly. Also fused exchanges (three tensors per block). */
#include <stdlib.h>
#include <string.h>

#include "par/ulysses.h"
#include "unit.h"

static float
code(int bi, int pos, int col, int S, int C)
{
	return (float)(((size_t)bi * S + pos) * C + col);
}

/* recv of rank r, block i = send of rank i, block r. */
static void
exchange(float **send, float **recv, int W, size_t bstride)
{
	for (int r = 0; r < W; r++)
		for (int i = 0; i < W; i++)
			memcpy(recv[r] + i * bstride, send[i] + r * bstride,
			    bstride * sizeof(float));
}

/* One tensor at offset `at` of blocks of `per` tensors. */
static void
layout(int W, int per, int at)
{
	int b = 2, S = 12, C = 24, sl = S / W, cl = C / W;
	size_t blk = (size_t)b * sl * cl, bs = per * blk, all = (size_t)b * S * C;
	float *src[4], *send[4], *recv[4], *mid[4], *back[4];
	int ok = 1, okback = 1;
	char what[96];

	for (int r = 0; r < W; r++) {
		src[r] = malloc(all / W * sizeof(float));
		send[r] = calloc(W * bs, sizeof(float));
		recv[r] = calloc(W * bs, sizeof(float));
		mid[r] = malloc(all / W * sizeof(float));
		back[r] = malloc(all / W * sizeof(float));
		for (int bi = 0; bi < b; bi++)
			for (int t = 0; t < sl; t++)
				for (int c = 0; c < C; c++)
					src[r][((size_t)bi * sl + t) * C + c] =
					    code(bi, r * sl + t, c, S, C);
		ulysses_pack_s2h(send[r] + at * blk, bs, src[r], W, b, sl, cl);
	}
	exchange(send, recv, W, bs);
	for (int r = 0; r < W; r++) {
		ulysses_unpack_s2h(mid[r], recv[r] + at * blk, bs, W, b, sl, cl);
		/* all positions of rank r's columns */
		for (int bi = 0; bi < b; bi++)
			for (int p = 0; p < S; p++)
				for (int e = 0; e < cl; e++)
					ok &= mid[r][((size_t)bi * S + p) * cl + e] ==
					    code(bi, p, r * cl + e, S, C);
		ulysses_pack_h2s(send[r] + at * blk, bs, mid[r], W, b, sl, cl);
	}
	exchange(send, recv, W, bs);
	for (int r = 0; r < W; r++) {
		ulysses_unpack_h2s(back[r], recv[r] + at * blk, bs, W, b, sl, cl);
		okback &= memcmp(back[r], src[r], all / W * sizeof(float)) == 0;
	}
	snprintf(what, sizeof what, "ulysses W=%d (tensor %d of %d per block): "
	    "sequence -> heads puts every element in place", W, at, per);
	UNIT_OK(ok, what);
	snprintf(what, sizeof what, "ulysses W=%d (tensor %d of %d per block): "
	    "heads -> sequence restores the input", W, at, per);
	UNIT_OK(okback, what);
	for (int r = 0; r < W; r++)
		free(src[r]), free(send[r]), free(recv[r]), free(mid[r]),
		    free(back[r]);
}

int
main(void)
{
	for (int W = 1; W <= 4; W++)
		layout(W, 1, 0);
	layout(3, 3, 1);
	layout(4, 3, 2);
	return unit_done();
}
