/* rng: SplitMix64 + xoshiro256**, uniform and normal deviates, fills. */
#include <math.h>
#include <stdio.h>

#include "tensor/rng.h"
#include "tensor/tensor.h"

/* Fused multiply-add would change the last bits on some machines. */
#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

static uint64_t
splitmix64(uint64_t *x)
{
	uint64_t z = (*x += UINT64_C(0x9e3779b97f4a7c15));

	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

void
tensor_rng_seed(struct tensor_rng *r, uint64_t seed)
{
	int i;

	for (i = 0; i < 4; i++)
		r->s[i] = splitmix64(&seed);
}

static uint64_t
rotl(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

uint64_t
tensor_rng_next(struct tensor_rng *r)
{
	uint64_t *s = r->s, result = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;

	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = rotl(s[3], 45);
	return result;
}

double
tensor_rng_uniform(struct tensor_rng *r, int bits)
{
	return ldexp((double)(tensor_rng_next(r) >> (64 - bits)), -bits);
}

/*
 * ln x = k ln 2 + ln m with x = m 2^k, m in [sqrt(1/2), sqrt(2)), and
 * ln m = 2 atanh f = 2 (f + f^3/3 + ... + f^23/23), f = (m - 1)/(m + 1),
 * summed by Horner's rule from the f^23 term down. Accurate to a few units
 * in the last place; what matters is that it is reproducible.
 */
double
tensor_rng_log(double x)
{
	int k, j;
	double m = frexp(x, &k), f, f2, p;

	if (m < 0x1.6a09e667f3bcdp-1) {
		m *= 2;
		k--;
	}
	f = (m - 1) / (m + 1);
	f2 = f * f;
	p = 1.0 / 23;
	for (j = 10; j >= 0; j--)
		p = p * f2 + 1.0 / (2 * j + 1);
	return k * 0x1.62e42fefa39efp-1 + 2 * f * p;
}

void
tensor_rng_normal2(struct tensor_rng *r, double out[2])
{
	double u, v, s, m;

	do {
		u = 2 * tensor_rng_uniform(r, 53) - 1;
		v = 2 * tensor_rng_uniform(r, 53) - 1;
		s = u * u + v * v;
	} while (s >= 1 || s == 0);
	m = sqrt(-2 * tensor_rng_log(s) / s);
	out[0] = u * m;
	out[1] = v * m;
}

/* Significand bits of a float dtype: uniform values then convert exactly,
 * so rounding can never turn 0.99999... into 1. */
static int
float_bits(enum dtype dt)
{
	switch (dt) {
	case DT_F64: return 53;
	case DT_F32: return 24;
	case DT_F16: return 11;
	default: return 8;
	}
}

int
tensor_fill(struct tensor *t, enum tensor_fill how, double value, uint64_t seed,
    char *err, size_t errlen)
{
	struct tensor_rng r;
	size_t i, n = (size_t)tensor_numel(t);
	double z[2];

	if ((how == TENSOR_FILL_RAND || how == TENSOR_FILL_RANDN) &&
	    !dtype_is_float(t->dtype)) {
		snprintf(err, errlen, "random fills need a floating dtype, not %s",
		    dtype_name(t->dtype));
		return -1;
	}
	tensor_rng_seed(&r, seed);
	for (i = 0; i < n; i++) {
		switch (how) {
		case TENSOR_FILL_CONST: z[0] = value; break;
		case TENSOR_FILL_ARANGE: z[0] = (double)i; break;
		case TENSOR_FILL_RAND: z[0] = tensor_rng_uniform(&r, float_bits(t->dtype)); break;
		case TENSOR_FILL_RANDN:
			if (i % 2 == 0)
				tensor_rng_normal2(&r, z);
			else
				z[0] = z[1];
			break;
		}
		dtype_put(t->dtype, t->data, i, z[0]);
	}
	return 0;
}
