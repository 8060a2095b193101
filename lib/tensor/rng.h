/* rng: the portable random generator behind "create --fill rand|randn".
 * The same seed gives the same bits on every IEEE-754 machine; the exact
 * algorithm is documented in collx-tensor(1). */
#ifndef COLLX_RNG_H
#define COLLX_RNG_H

#include <stdint.h>

/* xoshiro256** state, seeded by four SplitMix64 outputs. */
struct tensor_rng {
	uint64_t s[4];
};

void tensor_rng_seed(struct tensor_rng *r, uint64_t seed);
uint64_t tensor_rng_next(struct tensor_rng *r);
/* (next >> (64 - bits)) * 2^-bits: uniform on [0, 1), bits in 1..53. */
double tensor_rng_uniform(struct tensor_rng *r, int bits);
/* Two standard normal deviates (Marsaglia's polar method). */
void tensor_rng_normal2(struct tensor_rng *r, double out[2]);
/* Natural logarithm from + - * / only, so it rounds the same everywhere. */
double tensor_rng_log(double x);

#endif
