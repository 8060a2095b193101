/* print: tensors as text, laid out as NumPy's str() does. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensor/tensor.h"

#define LINE_WIDTH 75

struct layout {
	const struct tensor *t;
	const struct tensor_print_opts *o;
	int summary;		/* elide the middle of long dimensions */
	int exp;		/* floats in scientific notation */
	int digits;		/* float: fraction digits (the most any element needs) */
	int left, right;	/* widths before and after the decimal point */
	double lo, hi;		/* smallest and largest nonzero finite |value| */
	int nonfinite;		/* longest of nan, inf, -inf present */
	FILE *f;
	int col;		/* current column, for wrapping */
	int pending;		/* padding spaces owed before the next word */
};

/* Is the element kept when the tensor is summarised? */
static int
shown(const struct layout *l, int d, int64_t i)
{
	return !l->summary || l->t->shape[d] <= 2 * l->o->edgeitems ||
	    i < l->o->edgeitems || i >= l->t->shape[d] - l->o->edgeitems;
}

/* Does text read back as exactly the element's value in its dtype? */
static int
exact(enum dtype dt, const char *text, double v)
{
	double back = strtod(text, NULL);
	unsigned char a[8], b[8];

	dtype_put(dt, a, 0, v);
	dtype_put(dt, b, 0, back);
	return memcmp(a, b, dtype_size(dt)) == 0;
}

/* Fewest digits (up to the precision) that still name the value. */
static int
need_digits(const struct layout *l, double v)
{
	char buf[64];
	int d;

	for (d = 0; d < l->o->precision; d++) {
		snprintf(buf, sizeof buf, l->exp ? "%.*e" : "%.*f", d, v);
		if (exact(l->t->dtype, buf, v))
			break;
	}
	return d;
}

/* Element i as text, without padding. */
static void
elem_text(const struct layout *l, size_t i, char *buf, size_t len)
{
	enum dtype dt = l->t->dtype;
	double v = dtype_get(dt, l->t->data, i);
	char *e;

	if (dt == DT_BOOL)
		snprintf(buf, len, "%s", v ? "True" : "False");
	else if (dt == DT_I64)
		snprintf(buf, len, "%lld", (long long)((const int64_t *)l->t->data)[i]);
	else if (!dtype_is_float(dt))
		snprintf(buf, len, "%.0f", v);
	else if (isnan(v) || isinf(v))
		snprintf(buf, len, "%s", isnan(v) ? "nan" : v > 0 ? "inf" : "-inf");
	else if (l->exp) {
		snprintf(buf, len, "%.*e", l->digits, v);
		if (l->digits == 0 && (e = strchr(buf, 'e'))) {	/* 1e+10 -> 1.e+10 */
			memmove(e + 1, e, strlen(e) + 1);
			*e = '.';
		}
	} else {
		snprintf(buf, len, "%.*f", need_digits(l, v), v);
		if (!strchr(buf, '.'))
			strcat(buf, ".");
	}
}

/* Calls fn on the flat index of every shown element. */
static void
each_shown(struct layout *l, int d, size_t base,
    void (*fn)(struct layout *, size_t))
{
	int64_t i;

	if (d == l->t->ndim) {
		fn(l, base);
		return;
	}
	for (i = 0; i < l->t->shape[d]; i++)
		if (shown(l, d, i))
			each_shown(l, d + 1, base * (size_t)l->t->shape[d] + (size_t)i, fn);
}

static void
scan_range(struct layout *l, size_t i)
{
	double a = fabs(dtype_get(l->t->dtype, l->t->data, i));

	if (!isfinite(a) || a == 0)
		return;
	l->hi = fmax(l->hi, a);
	l->lo = fmin(l->lo, a);
}

static void
scan_digits(struct layout *l, size_t i)
{
	double v = dtype_get(l->t->dtype, l->t->data, i);
	int d;

	if (isfinite(v) && (d = need_digits(l, v)) > l->digits)
		l->digits = d;
}

static void
scan_width(struct layout *l, size_t i)
{
	char buf[128], *dot;
	int left, right;

	elem_text(l, i, buf, sizeof buf);
	if (!isfinite(dtype_get(l->t->dtype, l->t->data, i))) {
		if ((int)strlen(buf) > l->nonfinite)
			l->nonfinite = (int)strlen(buf);
		return;
	}
	dot = dtype_is_float(l->t->dtype) && !l->exp ? strchr(buf, '.') : NULL;
	left = dot ? (int)(dot - buf) : (int)strlen(buf);
	right = dot ? (int)strlen(dot) : 0;
	if (left > l->left)
		l->left = left;
	if (right > l->right)
		l->right = right;
}

/* NumPy's choices: scientific when values span too wide a range. */
static void
choose_format(struct layout *l)
{
	if (dtype_is_float(l->t->dtype)) {
		l->hi = 0;
		l->lo = INFINITY;
		each_shown(l, 0, 0, scan_range);
		l->exp = l->hi >= 1e8 || (l->hi > 0 && (l->lo < 1e-4 || l->hi / l->lo > 1e3));
		if (l->exp)
			each_shown(l, 0, 0, scan_digits);
	}
	each_shown(l, 0, 0, scan_width);
	if (l->nonfinite > l->left + l->right)	/* NumPy widens the integer part */
		l->left = l->nonfinite - l->right;
}

static void
put_elem(struct layout *l, size_t i, char *out, size_t len)
{
	char buf[128], *dot;
	int left, right;

	elem_text(l, i, buf, sizeof buf);
	dot = dtype_is_float(l->t->dtype) && !l->exp ? strchr(buf, '.') : NULL;
	left = dot ? (int)(dot - buf) : (int)strlen(buf);
	right = dot ? (int)strlen(dot) : 0;
	if (!isfinite(dtype_get(l->t->dtype, l->t->data, i)))	/* right-aligned */
		left = (int)strlen(buf) - l->right, right = l->right;
	snprintf(out, len, "%*s%s%*s", l->left - left, "", buf, l->right - right, "");
}

/* A word (padded element or "...") on an innermost line at depth d. As
 * NumPy does, a line wraps before a word that would pass 74 - d columns,
 * and a wrapped line loses its trailing padding. */
static void
put_word(struct layout *l, const char *w, int first, int d)
{
	int len = (int)strlen(w), trail = 0;

	if (!first && l->col + l->pending + 1 + len > LINE_WIDTH - 1 - d) {
		fprintf(l->f, "\n%*s", d + 1, "");
		l->col = d + 1;
		l->pending = 0;
	} else if (!first) {
		fprintf(l->f, "%*s", l->pending + 1, "");
		l->col += l->pending + 1;
	}
	while (trail < len && w[len - 1 - trail] == ' ')
		trail++;
	fwrite(w, 1, (size_t)(len - trail), l->f);
	l->col += len - trail;
	l->pending = trail;
}

static void
close_bracket(struct layout *l)
{
	fprintf(l->f, "%*s]", l->pending, "");
	l->col += l->pending + 1;
	l->pending = 0;
}

static void
print_rec(struct layout *l, int d, size_t base)
{
	int64_t i, n = l->t->shape[d], edge = l->o->edgeitems;
	int elide = l->summary && n > 2 * edge, inner = d + 1 < l->t->ndim, k;
	char word[256];

	fputc('[', l->f);
	l->col++;
	for (i = 0; i < n; i++) {
		if (i > 0 && inner) {	/* blocks: one newline per dimension left */
			for (k = d + 1; k < l->t->ndim; k++)
				fputc('\n', l->f);
			fprintf(l->f, "%*s", d + 1, "");
			l->col = d + 1;
		}
		if (elide && i == edge) {
			if (inner) {
				fputs("...", l->f);
				l->col += 3;
			} else
				put_word(l, "...", 0, d);
			i = n - edge - 1;
			continue;
		}
		if (inner)
			print_rec(l, d + 1, base * (size_t)n + (size_t)i);
		else {
			put_elem(l, base * (size_t)n + (size_t)i, word, sizeof word);
			put_word(l, word, i == 0, d);
		}
	}
	close_bracket(l);
}

void
tensor_print_defaults(struct tensor_print_opts *o)
{
	o->threshold = 1000;
	o->edgeitems = 3;
	o->precision = 8;
}

int
tensor_print(FILE *f, const struct tensor *t, const struct tensor_print_opts *o)
{
	struct layout l = { .t = t, .o = o, .f = f };
	char word[256];

	l.summary = tensor_numel(t) > o->threshold;
	if (tensor_numel(t) == 0) {
		fputs("[]\n", f);
		return ferror(f) ? -1 : 0;
	}
	choose_format(&l);
	if (t->ndim == 0) {
		put_elem(&l, 0, word, sizeof word);
		fprintf(f, "%s\n", word);
	} else {
		print_rec(&l, 0, 0);
		fputc('\n', f);
	}
	return ferror(f) ? -1 : 0;
}
