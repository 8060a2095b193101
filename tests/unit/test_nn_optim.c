/* test_nn_optim: SGD and AdamW steps against closed forms and against
 * the torch.optim update rules written out independently in double. */
#include <string.h>

#include "nn/nn.h"
#include "nn_check.h"

#define N 4
static const float p0[N] = { 1.0f, -2.0f, 0.5f, 3.0f };
static const float g0[N] = { 0.5f, 0.25f, -1.5f, 0.0625f };

static struct nn_optim
make(enum nn_optim_kind kind, double lr, double mom,
    double wd)
{
	struct nn_optim_cfg c;
	struct nn_optim o;
	char err[128];

	nn_optim_defaults(&c, kind);
	c.lr = lr, c.momentum = mom, c.weight_decay = wd;
	nn_optim_init(&o, &c, N, err, sizeof(err));
	return o;
}

static void
test_defaults(void)
{
	struct nn_optim_cfg s, a;
	enum nn_optim_kind k;

	nn_optim_defaults(&s, NN_SGD);
	nn_optim_defaults(&a, NN_ADAMW);
	UNIT_OK(s.momentum == 0 && s.weight_decay == 0, "SGD defaults: "
	    "momentum 0, weight decay 0");
	UNIT_OK(a.lr == 1e-3 && a.beta1 == 0.9 && a.beta2 == 0.999 &&
	    a.eps == 1e-8 && a.weight_decay == 0.01, "AdamW defaults as "
	    "torch.optim.AdamW");
	UNIT_OK(nn_optim_parse("sgd", &k) == 0 && k == NN_SGD &&
	    nn_optim_parse("adamw", &k) == 0 && k == NN_ADAMW &&
	    nn_optim_parse("adam", &k) < 0, "optimizer names");
}

/* Constant gradient, no decay: buf_t = g (1 - m^t) / (1 - m), so
 * p_t = p0 - lr g sum_{k=1..t} (1 - m^k) / (1 - m). */
static void
test_sgd_momentum_closed_form(void)
{
	struct nn_optim o = make(NN_SGD, 0.1, 0.9, 0.0);
	float p[N];
	int ok = 1;

	memcpy(p, p0, sizeof(p));
	for (int t = 1; t <= 6; t++) {
		nn_optim_step(&o, p, g0, 1.0f);
		double sum = 0;
		for (int k = 1; k <= t; k++)
			sum += (1 - pow(0.9, k)) / (1 - 0.9);
		for (int i = 0; i < N; i++)
			ok &= fabs(p[i] - (p0[i] - 0.1 * g0[i] * sum)) < 1e-5;
	}
	UNIT_OK(ok, "SGD momentum, constant gradient: closed form over 6 steps");
	nn_optim_free(&o);
}

static void
test_sgd_plain(void)
{
	struct nn_optim o = make(NN_SGD, 0.5, 0.0, 0.0);
	float p[N];
	int ok = 1;

	memcpy(p, p0, sizeof(p));
	nn_optim_step(&o, p, g0, 0.25f);
	for (int i = 0; i < N; i++)
		ok &= p[i] == p0[i] - 0.5f * (0.25f * g0[i]);
	UNIT_OK(ok && o.m == NULL, "SGD without momentum: p -= lr * scale * g, "
	    "no state");
	nn_optim_free(&o);
}

/* torch.optim.SGD with weight decay and momentum, written out in double
 * on a gradient that changes each step. */
static void
test_sgd_decay(void)
{
	struct nn_optim o = make(NN_SGD, 0.05, 0.8, 0.1);
	float p[N], g[N];
	double rp[N], buf[N];
	int ok = 1;

	memcpy(p, p0, sizeof(p));
	for (int i = 0; i < N; i++)
		rp[i] = p0[i];
	for (int t = 1; t <= 5; t++) {
		for (int i = 0; i < N; i++) {
			g[i] = g0[i] * (float)t - 0.1f * (float)i;
			double d = g[i] * 0.5 + 0.1 * rp[i];
			buf[i] = t == 1 ? d : 0.8 * buf[i] + d;
			rp[i] -= 0.05 * buf[i];
		}
		nn_optim_step(&o, p, g, 0.5f);
	}
	for (int i = 0; i < N; i++)
		ok &= fabs(p[i] - rp[i]) < 1e-5;
	UNIT_OK(ok, "SGD momentum + weight decay: torch's rule over 5 steps");
	nn_optim_free(&o);
}

/* Constant gradient: the bias-corrected moments are exactly g and g^2,
 * so each step is p = p (1 - lr wd) - lr g / (|g| + eps). */
static void
test_adamw_closed_form(void)
{
	struct nn_optim o = make(NN_ADAMW, 0.01, 0.0, 0.1);
	float p[N];
	double rp[N];
	int ok = 1;

	memcpy(p, p0, sizeof(p));
	for (int i = 0; i < N; i++)
		rp[i] = p0[i];
	for (int t = 1; t <= 10; t++) {
		nn_optim_step(&o, p, g0, 1.0f);
		for (int i = 0; i < N; i++) {
			rp[i] = rp[i] * (1 - 0.01 * 0.1) -
			    0.01 * g0[i] / (fabs(g0[i]) + 1e-8);
			ok &= fabs(p[i] - rp[i]) < 2e-6;
		}
	}
	UNIT_OK(ok, "AdamW, constant gradient: p(1 - lr wd) - lr sign(g) "
	    "each step, 10 steps");
	nn_optim_free(&o);
}

/* torch.optim.AdamW written out in double on changing gradients. */
static void
test_adamw_rule(void)
{
	struct nn_optim o = make(NN_ADAMW, 0.02, 0.0, 0.05);
	float p[N], g[N];
	double rp[N], m[N] = { 0 }, v[N] = { 0 };
	int ok = 1;

	o.cfg.beta1 = 0.8, o.cfg.beta2 = 0.95, o.cfg.eps = 1e-3;
	memcpy(p, p0, sizeof(p));
	for (int i = 0; i < N; i++)
		rp[i] = p0[i];
	for (int t = 1; t <= 7; t++) {
		for (int i = 0; i < N; i++) {
			g[i] = g0[i] * (float)(t % 3) - 0.2f * (float)i;
			double gd = g[i] * 2.0;
			rp[i] *= 1 - 0.02 * 0.05;
			m[i] = 0.8 * m[i] + 0.2 * gd;
			v[i] = 0.95 * v[i] + 0.05 * gd * gd;
			double mh = m[i] / (1 - pow(0.8, t));
			double vh = v[i] / (1 - pow(0.95, t));
			rp[i] -= 0.02 * mh / (sqrt(vh) + 1e-3);
		}
		nn_optim_step(&o, p, g, 2.0f);
	}
	for (int i = 0; i < N; i++)
		ok &= fabs(p[i] - rp[i]) < 1e-5;
	UNIT_OK(ok, "AdamW with betas, eps, decay: torch's rule over 7 steps");
	nn_optim_free(&o);
}

/* A shard's optimizer on [off, off+count) equals the whole one there. */
static void
test_shard(void)
{
	struct nn_optim_cfg c;
	struct nn_optim whole, shard;
	float p[N], q[N];
	char err[128];

	nn_optim_defaults(&c, NN_ADAMW);
	nn_optim_init(&whole, &c, N, err, sizeof(err));
	nn_optim_init(&shard, &c, 2, err, sizeof(err));
	memcpy(p, p0, sizeof(p));
	memcpy(q, p0, sizeof(q));
	for (int t = 0; t < 3; t++) {
		nn_optim_step(&whole, p, g0, 1.0f);
		nn_optim_step(&shard, q + 1, g0 + 1, 1.0f);
	}
	UNIT_OK(!memcmp(p + 1, q + 1, 2 * sizeof(float)) && q[0] == p0[0] &&
	    q[3] == p0[3], "optimizer on a shard: same values, rest untouched");
	nn_optim_free(&whole);
	nn_optim_free(&shard);
}

int
main(void)
{
	test_defaults();
	test_sgd_plain();
	test_sgd_momentum_closed_form();
	test_sgd_decay();
	test_adamw_closed_form();
	test_adamw_rule();
	test_shard();
	return unit_done();
}
