/* model_moe: a gpt's experts as the model sees them: the statistics of
 * the last training pass (summed over ranks by the model's moe_sum) and
 * the pass of a rank with no samples, which still joins that sum. */
#include <stdlib.h>
#include <string.h>

#include "nn/nn.h"
#include "nn/model_int.h"

int
nn_model_moe_layers(const struct nn_model *m)
{
	int n = 0;

	for (int l = 0; l < m->dims.layers; l++)
		n += nn_dims_moe_layer(&m->dims, l);
	return n;
}

double *
nn_moe_stats_buf(struct nn_model *m)
{
	struct nn_work *k = m->work;
	size_t n = (size_t)nn_model_moe_layers(m) * (m->dims.moe.experts + 1);

	if (k->moe_sum == NULL)
		k->moe_sum = calloc(n ? n : 1, sizeof(double));
	return k->moe_sum;
}

int
nn_moe_idle(struct nn_model *m, char *err, size_t errlen)
{
	size_t n = (size_t)nn_model_moe_layers(m) * (m->dims.moe.experts + 1);
	double *sum;

	if (n == 0 || m->moe_sum == NULL)
		return 0;
	if ((sum = nn_moe_stats_buf(m)) == NULL)
		return cli_fail(err, errlen, "out of memory");
	memset(sum, 0, n * sizeof(double));
	if (m->moe_sum(m->moe_ctx, sum, n) < 0)
		return cli_fail(err, errlen, "summing the experts' counts over "
		    "ranks failed");
	return 0;
}

const double *
nn_model_moe_stats(const struct nn_model *m)
{
	return m->work != NULL ? m->work->moe_sum : NULL;
}

int
nn_model_moe_summary(const struct nn_model *m, double *dropped,
    double *imbalance)
{
	const double *s = nn_model_moe_stats(m);
	int L = nn_model_moe_layers(m);

	*dropped = *imbalance = 0.0;
	if (s == NULL || L == 0)
		return -1;
	nn_moe_summary(s, L, m->dims.moe.experts, dropped, imbalance);
	return 0;
}

void
nn_moe_summary(const double *s, int L, int E, double *dropped,
    double *imbalance)
{
	double all = 0.0, drop = 0.0, worst = 0.0;

	for (int l = 0; l < L; l++, s += E + 1) {
		double sum = 0.0, mx = 0.0;
		for (int e = 0; e < E; e++) {
			sum += s[e];
			mx = s[e] > mx ? s[e] : mx;
		}
		all += sum, drop += s[E];
		if (sum > 0 && mx * E / sum > worst)
			worst = mx * E / sum;
	}
	*dropped = all > 0 ? drop / all : 0.0;
	*imbalance = worst;
}
