/* setdiff: two tensor sets compared tensor by tensor, with the totals
 * collx-tensor diff reports and its exit status follows. */
#include <math.h>
#include <stdio.h>

#include "cli/util.h"
#include "tensor/setops.h"

/* Relative error f32 rounding reaches in a computation of some length
 * (about 80 units in the last place): below it, differences are rounding,
 * not a wrong result. */
#define DIFF_F32_ROUNDING 1e-5

static void
diff_pair(const char *name, const struct tensor *a, const struct tensor *b,
    double rtol, double atol, FILE *report, struct tensor_set_diff *tot)
{
	const char *sep = name ? ": " : "";
	char err[COLLX_ERRLEN];
	struct tensor_diff d;

	name = name ? name : "";
	if (tensor_compare(a, b, rtol, atol, &d, err, sizeof err) < 0) {
		if (report)
			fprintf(report, "%s%s%s\n", name, sep, err);
		if (!tot->structural++)
			snprintf(tot->first, sizeof tot->first,
			    "%.200s%s%.250s", name, sep, err);
		return;
	}
	if (report)
		fprintf(report, "%s%smax abs error %.6g, max rel error %.6g, "
		    "%lld of %lld out of tolerance\n", name, sep, d.max_abs,
		    d.max_rel, (long long)d.mismatched, (long long)d.count);
	tot->bad += d.mismatched;
	tot->count += d.count;
	if (d.mismatched == 0)
		return;
	if (a->dtype != DT_F32 || b->dtype != DT_F32 ||
	    !(d.max_rel <= DIFF_F32_ROUNDING))
		tot->not_rounding = 1;
	tot->max_rel = fmax(tot->max_rel, d.max_rel);
}

/* Tensor n of one set only; which: "first" or "second". */
static void
diff_only_in(const char *n, const char *which, FILE *report,
    struct tensor_set_diff *tot)
{
	if (report)
		fprintf(report, "%s: only in the %s file\n", n, which);
	if (!tot->structural++)
		snprintf(tot->first, sizeof tot->first,
		    "tensor '%s' only in the %s file", n, which);
}

void
tensor_set_diff(const struct tensor_set *a, const struct tensor_set *b,
    double rtol, double atol, FILE *report, struct tensor_set_diff *tot)
{
	const struct tensor *other;
	const char *n;
	size_t i;

	if (a->count == 1 && b->count == 1 &&
	    (!a->items[0].name || !b->items[0].name)) {
		diff_pair(NULL, &a->items[0], &b->items[0], rtol, atol, report,
		    tot);
		return;
	}
	for (i = 0; i < a->count; i++) {
		n = a->items[i].name ? a->items[i].name : "-";
		if ((other = tensor_set_find(b, a->items[i].name)))
			diff_pair(n, &a->items[i], other, rtol, atol, report,
			    tot);
		else
			diff_only_in(n, "first", report, tot);
	}
	for (i = 0; i < b->count; i++)
		if (!tensor_set_find(a, b->items[i].name))
			diff_only_in(b->items[i].name ? b->items[i].name : "-",
			    "second", report, tot);
}

double
tensor_set_diff_rtol_hint(const struct tensor_set_diff *tot)
{
	if (tot->bad == 0 || tot->structural || tot->not_rounding)
		return 0;
	return pow(10, ceil(log10(fmax(tot->max_rel, 1e-12))));
}
