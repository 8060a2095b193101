/* test_tensor_set: whole sets compared, cut into parts, joined back and
 * converted (lib/tensor/setops.h), on small sets whose results are
 * worked out by hand. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensor/setops.h"
#include "tensor/tensor.h"
#include "unit.h"

static char err[COLLX_ERRLEN];

/* Adds tensor name (NULL: unnamed) of dtype dt and shape to s, element i
 * holding v[i] (or i itself when v is NULL). */
static void
add(struct tensor_set *s, const char *name, enum dtype dt, int ndim,
    const int64_t *shape, const double *v)
{
	struct tensor t;
	int64_t i;

	if (tensor_init(&t, dt, ndim, shape, err, sizeof err) < 0)
		abort();
	for (i = 0; i < tensor_numel(&t); i++)
		dtype_put(dt, t.data, (size_t)i, v ? v[i] : (double)i);
	if (tensor_set_add(s, name, &t, err, sizeof err) < 0)
		abort();
}

static double
at(const struct tensor *t, int64_t i)
{
	return dtype_get(t->dtype, t->data, (size_t)i);
}

/* The report lines of comparing a with b. */
static char *
diff_text(const struct tensor_set *a, const struct tensor_set *b, double rtol,
    double atol, struct tensor_set_diff *tot)
{
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);

	memset(tot, 0, sizeof *tot);
	tensor_set_diff(a, b, rtol, atol, f, tot);
	fclose(f);
	return text;
}

static void
test_diff(void)
{
	static const double w1[4] = { 1, 2, 3, 4 }, w2[4] = { 1, 2, 3, 4.5 };
	struct tensor_set a = { .format = TENSOR_SAFETENSORS };
	struct tensor_set b = { .format = TENSOR_SAFETENSORS };
	struct tensor_set_diff tot;
	int64_t four = 4, two = 2;
	char *text;

	add(&a, "w", DT_F32, 1, &four, w1);
	add(&a, "b", DT_I32, 1, &two, NULL);
	add(&b, "w", DT_F32, 1, &four, w2);
	add(&b, "c", DT_I32, 1, &two, NULL);
	text = diff_text(&a, &b, 1e-5, 1e-8, &tot);
	/* |4 - 4.5| = 0.5, relative to the expected 4.5: 1/9. */
	UNIT_OK(strcmp(text, "b: only in the first file\n"
	    "w: max abs error 0.5, max rel error 0.111111, 1 of 4 out of "
	    "tolerance\n"
	    "c: only in the second file\n") == 0,
	    "diff reports each tensor in name order, then the second's own");
	UNIT_OK(tot.bad == 1 && tot.count == 4 && tot.structural == 2 &&
	    strcmp(tot.first, "tensor 'b' only in the first file") == 0,
	    "diff totals: 1 of 4 elements, 2 names in one set only, the first named");
	UNIT_CLOSE(tot.max_rel, 1.0 / 9, 1e-7, 0, "max rel error over failing tensors");
	UNIT_OK(tensor_set_diff_rtol_hint(&tot) == 0, "no rounding hint when names differ");
	free(text);
	tensor_set_free(&b);

	b.format = TENSOR_SAFETENSORS;
	add(&b, "w", DT_F32, 1, &four, w1);
	add(&b, "b", DT_I64, 1, &two, NULL);
	text = diff_text(&a, &b, 1e-5, 1e-8, &tot);
	UNIT_OK(strcmp(text, "b: dtypes differ: i32 and i64\n"
	    "w: max abs error 0, max rel error 0, 0 of 4 out of tolerance\n") == 0 &&
	    tot.structural == 1 && tot.bad == 0 && tot.count == 4 &&
	    strcmp(tot.first, "b: dtypes differ: i32 and i64") == 0,
	    "a dtype mismatch is structural and named");
	free(text);
	tensor_set_free(&a);
	tensor_set_free(&b);
}

/* An unnamed tensor is compared with the lone tensor of the other set,
 * whatever its name; report NULL prints nothing. */
static void
test_diff_single(void)
{
	struct tensor_set a = { .format = TENSOR_NPY };
	struct tensor_set b = { .format = TENSOR_SAFETENSORS };
	struct tensor_set_diff tot;
	double one_ulp[2], ones[2] = { 1, 2 };
	int64_t two = 2;
	char *text;

	/* 20 units in the last place of 1.0f and of 2.0f: a relative error
	 * of 20 * 2^-23 (2.38e-6), below f32 rounding's 1e-5. */
	one_ulp[0] = 1 + 20 * ldexp(1, -23);
	one_ulp[1] = 2 + 20 * ldexp(1, -22);
	add(&a, NULL, DT_F32, 1, &two, one_ulp);
	add(&b, "x", DT_F32, 1, &two, ones);
	text = diff_text(&a, &b, 1e-7, 0, &tot);
	UNIT_OK(strcmp(text, "max abs error 4.76837e-06, max rel error 2.38419e-06, "
	    "2 of 2 out of tolerance\n") == 0, "an unnamed tensor against a lone named one");
	UNIT_OK(tot.bad == 2 && !tot.not_rounding && tensor_set_diff_rtol_hint(&tot) == 1e-5,
	    "f32 differences of 2.4e-6: the hint is --rtol 1e-5");
	free(text);
	memset(&tot, 0, sizeof tot);
	tensor_set_diff(&a, &b, 1e-5, 0, NULL, &tot);
	UNIT_OK(tot.bad == 0 && tot.count == 2 && tensor_set_diff_rtol_hint(&tot) == 0,
	    "within rtol 1e-5: nothing out of tolerance, no hint");
	tensor_set_free(&a);
	tensor_set_free(&b);

	a.format = b.format = TENSOR_NPY;
	add(&a, NULL, DT_F64, 1, &two, one_ulp);
	add(&b, NULL, DT_F64, 1, &two, ones);
	memset(&tot, 0, sizeof tot);
	tensor_set_diff(&a, &b, 1e-7, 0, NULL, &tot);
	UNIT_OK(tot.bad == 2 && tot.not_rounding && tensor_set_diff_rtol_hint(&tot) == 0,
	    "the same differences in f64 are not f32 rounding: no hint");
	tensor_set_free(&a);
	tensor_set_free(&b);
}

/* A set {a: arange(10), m: arange(24) as 4 x 6}, with metadata. */
static void
two_tensors(struct tensor_set *s)
{
	int64_t ten = 10, m[2] = { 4, 6 };

	memset(s, 0, sizeof *s);
	s->format = TENSOR_SAFETENSORS;
	add(s, "a", DT_I32, 1, &ten, NULL);
	add(s, "m", DT_F32, 2, m, NULL);
	if (tensor_set_meta_put(s, "step", "7", err, sizeof err) < 0)
		abort();
}

static void
test_split_dims(void)
{
	struct tensor_set s;
	int dims[2];

	two_tensors(&s);
	UNIT_OK(tensor_set_split_dims(&s, -1, 3, 0, dims, err, sizeof err) == 0 &&
	    dims[0] == 0 && dims[1] == 1, "dim -1: the last dimension of each tensor");
	UNIT_OK(tensor_set_split_dims(&s, 0, 2, 1, dims, err, sizeof err) == 0,
	    "10 and 4 both split evenly in 2");
	UNIT_OK(tensor_set_split_dims(&s, 0, 4, 1, dims, err, sizeof err) < 0 &&
	    strcmp(err, "dimension 0 of size 10 is not divisible into 4 parts") == 0,
	    "--even: 10 in 4 parts refused");
	UNIT_OK(tensor_set_split_dims(&s, 1, 2, 0, dims, err, sizeof err) < 0 &&
	    strcmp(err, "dimension 1 out of range for tensor 'a' with 1 dimensions")
	    == 0, "dim 1 of a 1-d tensor refused, the tensor named");
	UNIT_OK(tensor_set_split_dims(&s, -3, 2, 0, dims, err, sizeof err) < 0,
	    "dim -3 of a 1-d tensor refused");
	tensor_set_free(&s);
}

static void
test_part_cat(void)
{
	struct tensor_set s, parts[3], back = { 0 };
	const char *labels[3] = { "p0", "p1", "p2" };
	const struct tensor *a, *m;
	int dims[2], i, ok = 1;
	int64_t r, c, col;

	two_tensors(&s);
	tensor_set_split_dims(&s, -1, 3, 0, dims, err, sizeof err);
	for (i = 0; i < 3; i++) {
		memset(&parts[i], 0, sizeof parts[i]);
		ok &= tensor_set_part(&s, dims, 3, i, &parts[i], err, sizeof err) == 0;
	}
	UNIT_OK(ok, "3 parts cut");
	/* numpy.array_split: 10 as 4, 3, 3 and 6 as 2, 2, 2. */
	a = tensor_set_find(&parts[1], "a");
	m = tensor_set_find(&parts[2], "m");
	UNIT_OK(parts[1].count == 2 && parts[1].format == TENSOR_SAFETENSORS &&
	    parts[1].nmeta == 0 && a && a->shape[0] == 3 && at(a, 0) == 4 &&
	    at(a, 2) == 6, "part 1 of a: elements 4 to 6");
	for (r = 0; m && r < 4; r++)
		for (c = 0; c < 2; c++)
			ok &= at(m, 2 * r + c) == 6 * r + 4 + c;
	UNIT_OK(m && m->shape[0] == 4 && m->shape[1] == 2 && ok,
	    "part 2 of m (4 x 6): columns 4 and 5, element (r, c) = 6r + 4 + c");
	UNIT_OK(tensor_set_cat(parts, 3, labels, -1, &back, err, sizeof err) == 0 &&
	    back.count == 2 && back.format == TENSOR_SAFETENSORS,
	    "the parts joined back");
	a = tensor_set_find(&back, "a");
	m = tensor_set_find(&back, "m");
	ok = a && m && a->shape[0] == 10 && m->shape[1] == 6;
	for (col = 0; ok && col < 24; col++)
		ok &= at(m, col) == col && (col >= 10 || at(a, col) == col);
	UNIT_OK(ok, "joined: arange(10) and arange(24) as 4 x 6 again");
	tensor_set_free(&back);

	UNIT_OK(tensor_set_cat(parts, 3, labels, 2, &back, err, sizeof err) < 0 &&
	    strcmp(err, "dimension 2 out of range for tensor 'a' with 1 dimensions") == 0 &&
	    back.count == 0, "cat along a missing dimension refused, out left empty");
	tensor_set_free(&parts[2]);
	parts[2].format = TENSOR_SAFETENSORS;
	add(&parts[2], "a", DT_I32, 1, (int64_t[]){ 3 }, NULL);
	add(&parts[2], "z", DT_F32, 1, (int64_t[]){ 3 }, NULL);
	UNIT_OK(tensor_set_cat(parts, 3, labels, 0, &back, err, sizeof err) < 0 &&
	    strcmp(err, "p2 has no tensor 'm'") == 0, "a name missing from one input");
	tensor_set_free(&parts[2]);
	parts[2].format = TENSOR_SAFETENSORS;
	add(&parts[2], "a", DT_I32, 1, (int64_t[]){ 3 }, NULL);
	UNIT_OK(tensor_set_cat(parts, 3, labels, 0, &back, err, sizeof err) < 0 &&
	    strcmp(err, "p2 holds 1 tensors, p0 holds 2") == 0, "a count mismatch");
	add(&parts[2], "m", DT_F64, 2, (int64_t[]){ 4, 2 }, NULL);
	UNIT_OK(tensor_set_cat(parts, 3, labels, -1, &back, err, sizeof err) < 0 &&
	    strncmp(err, "m: ", 3) == 0 && back.count == 0,
	    "a dtype mismatch names the tensor, out left empty");
	for (i = 0; i < 3; i++)
		tensor_set_free(&parts[i]);
	tensor_set_free(&s);
}

/* A stream's arrays are named by index and kept in stream order: a part
 * keeps that order, "10" after "9", not sorted by name before "2". */
static void
test_part_stream(void)
{
	struct tensor_set s = { .format = TENSOR_NPYS }, part = { 0 };
	int64_t two = 2;
	char name[8];
	int dims[12], k, ok = 1;
	double v[2];

	for (k = 0; k < 12; k++) {
		snprintf(name, sizeof name, "%d", k);
		v[0] = 2 * k;
		v[1] = 2 * k + 1;
		add(&s, name, DT_F32, 1, &two, v);
	}
	tensor_set_split_dims(&s, 0, 2, 1, dims, err, sizeof err);
	UNIT_OK(tensor_set_part(&s, dims, 2, 1, &part, err, sizeof err) == 0 &&
	    part.format == TENSOR_NPYS && part.count == 12, "part 1 of a stream of 12");
	for (k = 0; ok && k < 12; k++) {
		snprintf(name, sizeof name, "%d", k);
		ok &= strcmp(part.items[k].name, name) == 0 &&
		    at(&part.items[k], 0) == 2 * k + 1;
	}
	UNIT_OK(ok, "a part of a stream keeps stream order: array k holds 2k + 1");
	tensor_set_free(&part);
	tensor_set_free(&s);
}

static void
test_set_ops(void)
{
	static const double v[4] = { 2.7, -2.7, 300, 0.5 };
	struct tensor_set s, d = { .format = TENSOR_SAFETENSORS };
	struct tensor_set one = { .format = TENSOR_NPY };
	const struct tensor *a, *m;
	int64_t four = 4;

	two_tensors(&s);
	tensor_set_meta_put(&d, "b", "2", err, sizeof err);
	UNIT_OK(tensor_set_meta_copy(&d, &s, err, sizeof err) == 0 && d.nmeta == 2 &&
	    strcmp(tensor_set_meta(&d, "step"), "7") == 0 &&
	    strcmp(tensor_set_meta(&d, "b"), "2") == 0, "metadata copied beside the own");
	tensor_set_free(&d);

	UNIT_OK(tensor_set_cast(&s, DT_F64, err, sizeof err) == 0, "cast to f64");
	a = tensor_set_find(&s, "a");
	m = tensor_set_find(&s, "m");
	UNIT_OK(a->dtype == DT_F64 && m->dtype == DT_F64 && at(a, 9) == 9 &&
	    at(m, 23) == 23 && a->shape[0] == 10 && m->shape[1] == 6,
	    "every tensor f64, values and shapes kept");
	tensor_set_free(&s);

	add(&one, NULL, DT_F64, 1, &four, v);
	UNIT_OK(tensor_set_cast(&one, DT_I8, err, sizeof err) == 0 &&
	    at(&one.items[0], 0) == 2 && at(&one.items[0], 1) == -2 &&
	    at(&one.items[0], 2) == 127 && at(&one.items[0], 3) == 0,
	    "cast to i8 truncates toward zero and saturates at 127");
	UNIT_OK(tensor_set_name_unnamed(&one, "t", err, sizeof err) == 0 &&
	    one.items[0].name && strcmp(one.items[0].name, "t") == 0,
	    "a lone unnamed tensor named");
	UNIT_OK(tensor_set_name_unnamed(&one, "u", err, sizeof err) == 0 &&
	    strcmp(one.items[0].name, "t") == 0, "a named tensor keeps its name");
	tensor_set_free(&one);
}

int
main(void)
{
	test_diff();
	test_diff_single();
	test_split_dims();
	test_part_cat();
	test_part_stream();
	test_set_ops();
	return unit_done();
}
