/* nn_check.h: helpers shared by the nn unit tests: a seeded data
 * generator and a central-difference gradient check. */
#ifndef COLLX_NN_CHECK_H
#define COLLX_NN_CHECK_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/nn.h"

#include "unit.h"

static uint64_t check_state = 12345;

/* Uniform in [-1, 1) (64-bit LCG, high bits). */
static inline float
check_rand(void)
{
	check_state = check_state * 6364136223846793005ULL + 1442695040888963407ULL;
	return (float)((check_state >> 40) * 0x1.0p-24 * 2.0 - 1.0);
}

static inline float *
check_fill(size_t n, float scale)
{
	float *p = malloc((n ? n : 1) * sizeof(float));

	for (size_t i = 0; i < n; i++)
		p[i] = scale * check_rand();
	return p;
}

/* A scalar function of some parameters: the test recomputes the forward
 * pass and returns a loss in double. */
typedef double (*check_fn)(void *ctx);

/*
 * Compares the analytic gradient g[0..n) of f with respect to p[0..n)
 * against (f(p + h) - f(p - h)) / 2h, at every index (or a spread of at
 * most limit indices). Passes when |num - ana| <= atol + rtol * |num|;
 * the worst case is printed as a TAP comment on failure.
 */
static inline int
check_grad_ok(const char *what, check_fn f, void *ctx,
    float *p, const float *g, size_t n, size_t limit, float h, double rtol,
    double atol)
{
	size_t step = limit && n > limit ? n / limit : 1;
	double worst = 0.0, wnum = 0.0, wana = 0.0;
	int ok = 1;

	for (size_t i = 0; i < n; i += step) {
		float keep = p[i];
		p[i] = keep + h;
		double up = f(ctx);
		p[i] = keep - h;
		double down = f(ctx);
		p[i] = keep;
		double num = (up - down) / (2.0 * h), ana = g[i];
		double excess = fabs(num - ana) - (atol + rtol * fabs(num));
		if (excess > 0)
			ok = 0;
		if (fabs(num - ana) > worst)
			worst = fabs(num - ana), wnum = num, wana = ana;
	}
	if (!ok || getenv("CHECK_VERBOSE"))
		printf("# %s: worst |num - ana| %.3g (numeric %.6g, analytic "
		    "%.6g)\n", what, worst, wnum, wana);
	return ok;
}

#define check_grad(what, f, ctx, p, g, n, limit, h, rtol, atol) \
	UNIT_OK(check_grad_ok(what, f, ctx, p, g, n, limit, h, rtol, atol), what)

#endif
