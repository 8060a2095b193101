/* collx-tensor: create, inspect, compare, convert, split and join tensor files. */
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "tensor/fillname.h"
#include "tensor/setops.h"
#include "tensor/tensor.h"

static const char usage_text[] =
"usage: collx-tensor [-hVvq] COMMAND [ARG...]\n"
"\n"
"Create, inspect, compare, convert, split and join .npy and .safetensors files\n"
"and streams of .npy arrays (.npys, what --stream writes: arrays named 0, 1...).\n"
"Files may be paths, - (standard input/output) or URLs (http, https, file, ftp).\n"
"\n"
"commands:\n"
"  info FILE...                      name, dtype, shape and bytes of each tensor\n"
"  print [--threshold N] [--edgeitems N] [--precision N] FILE...\n"
"                                    values, laid out as NumPy prints them\n"
"  create --shape S [--dtype D] [--fill F] [--seed N] [--name NAME] -o OUT\n"
"                                    a new tensor (fill zeros|ones|arange|rand|randn|NUMBER)\n"
"  diff [--rtol R] [--atol A] A B    compare values (exit 4 when outside tolerance)\n"
"  convert [--dtype D] [--name NAME] IN OUT\n"
"                                    change format (from OUT's extension) or dtype\n"
"  split --parts N [--dim D] [--even] -o PATTERN IN\n"
"                                    cut into N parts written to PATTERN ({i} = part)\n"
"  cat [--dim D] -o OUT IN...        concatenate along a dimension\n"
"  pack [--meta KEY=VALUE]... -o OUT NAME=FILE...\n"
"                                    named tensors into one .safetensors file\n"
"  get -o OUT IN NAME                one tensor out of a .safetensors file or\n"
"                                    a stream (NAME: the array's index)\n"
"\n"
"options:\n"
"  -h, --help       this help (COMMAND --help: that command's)\n"
"  -V, --version    version\n"
"  -v, --verbose    more messages\n"
"  -q, --quiet      fewer messages; diff prints nothing\n"
"\n"
"{rank} and {world} in file names become COLLX_RANK and COLLX_WORLD_SIZE.\n"
"Exit: 0 ok, 1 runtime error, 2 usage, 3 bad input data, 4 diff out of tolerance.\n";

static char err[COLLX_ERRLEN];

_Noreturn static void
usage(const char *text)
{
	fputs(text, stdout);
	cli_close_stdout();
	exit(CLI_EXIT_OK);
}

/* getopt_long over a command's arguments, handling -h, -v, -q, -V. */
static int
next_opt(int argc, char **argv, const char *shorts, const struct option *longs,
    const char *help)
{
	int c;

	for (;;) {
		c = getopt_long(argc, argv, shorts, longs, NULL);
		switch (c) {
		case 'h': usage(help); break;
		case 'V': cli_version(); break;
		case 'v': cli_verbose++; break;
		case 'q': cli_quiet = 1; break;
		case '?': cli_option_error(argc, argv, shorts); break;
		default: return c;
		}
	}
}

#define COMMON_LONGOPTS \
	{ "help", 0, 0, 'h' }, { "version", 0, 0, 'V' }, \
	{ "verbose", 0, 0, 'v' }, { "quiet", 0, 0, 'q' }
#define COMMON_SHORTS "hVvq"

/*
 * Small allocations live until exit, freed by an atexit handler, so that
 * any cli_die() on the way leaves nothing unreachable behind (the leak
 * checker of the sanitizer build would call that a leak).
 */
static void **owned;
static size_t nowned;

static void
free_owned(void)
{
	while (nowned)
		free(owned[--nowned]);
	free(owned);
	owned = NULL;
}

static void *
own(void *p)
{
	owned = cli_reallocarray(owned, nowned + 1, sizeof *owned);
	owned[nowned++] = p;
	return p;
}

/* {rank} and {world} replaced when the name has them. */
static char *
path_arg(const char *s)
{
	static struct cli_group g;
	static int resolved;

	if (!strstr(s, "{rank}") && !strstr(s, "{world}"))
		return own(cli_strdup(s));
	if (!resolved) {
		cli_group_defaults(&g);
		cli_group_finish(&g);
		resolved = 1;
	}
	return own(cli_subst(s, g.rank, g.world));
}

static void
load(const char *arg, struct tensor_set *s)
{
	char *path = path_arg(arg);

	if (tensor_load_any(path, s, err, sizeof err) < 0)
		cli_die(CLI_EXIT_DATA, "%s", err);
	cli_debug("%s: %zu tensor(s)", path, s->count);
}

/* Write s to arg, as fmt; a set the format cannot hold is bad data. */
static void
save_as(const char *arg, const struct tensor_set *s, enum tensor_format fmt)
{
	char *path = path_arg(arg);
	void *buf;
	size_t len;

	if (tensor_encode(s, fmt, &buf, &len, err, sizeof err) < 0)
		cli_die(CLI_EXIT_DATA, "%s: %s", path, err);
	if (tensor_write_file(path, buf, len, err, sizeof err) < 0) {
		free(buf);
		cli_die(CLI_EXIT_RUNTIME, "%s", err);
	}
	cli_debug("wrote %s (%zu bytes)", path, len);
	free(buf);
}

static void
save(const char *arg, const struct tensor_set *s)
{
	save_as(arg, s, tensor_format_for(arg, s->format));
}

static const char *
fmt_name(enum tensor_format f)
{
	return f == TENSOR_NPY ? "npy" : f == TENSOR_NPYS ? "npy stream" :
	    "safetensors";
}

_Noreturn static void
done(void)
{
	cli_close_stdout();
	exit(CLI_EXIT_OK);
}

/* ---- info ---- */

static const char info_help[] =
"usage: collx-tensor info FILE...\n"
"Print each file's format and metadata, then one line per tensor:\n"
"name (- when unnamed; a stream's arrays by index), dtype, shape and size in\n"
"bytes.\n";

static void
info_one(const char *arg)
{
	static struct tensor_set s;	/* static: reachable if we die */
	const char *col;
	char shape[200];
	size_t i, total = 0;
	int w;

	load(arg, &s);
	col = s.format == TENSOR_NPYS ? "index" : "name";
	w = (int)strlen(col);
	for (i = 0; i < s.count; i++) {
		total += tensor_nbytes(&s.items[i]);
		if (s.items[i].name && (int)strlen(s.items[i].name) > w)
			w = (int)strlen(s.items[i].name);
	}
	printf("%s: %s, %zu tensor%s, %zu bytes\n", arg, fmt_name(s.format), s.count,
	    s.count == 1 ? "" : "s", total);
	for (i = 0; i < s.nmeta; i++)
		printf("  metadata %s = %s\n", s.meta[i].key, s.meta[i].value);
	printf("  %-*s  %-5s  %-16s %s\n", w, col, "dtype", "shape", "bytes");
	for (i = 0; i < s.count; i++) {
		const struct tensor *t = &s.items[i];

		tensor_dims_str(t->shape, t->ndim, ",", shape, sizeof shape);
		printf("  %-*s  %-5s  %-16s %zu\n", w, t->name ? t->name : "-",
		    dtype_name(t->dtype), shape, tensor_nbytes(t));
	}
	tensor_set_free(&s);
}

static int
cmd_info(int argc, char **argv)
{
	static const struct option longs[] = { COMMON_LONGOPTS, { 0, 0, 0, 0 } };
	int i;

	next_opt(argc, argv, COMMON_SHORTS, longs, info_help);
	if (optind == argc)
		cli_usage_error("info: no file given");
	for (i = optind; i < argc; i++)
		info_one(argv[i]);
	done();
}

/* ---- print ---- */

static const char print_help[] =
"usage: collx-tensor print [--threshold N] [--edgeitems N] [--precision N] FILE...\n"
"Print values as NumPy's print() shows them. A tensor of more than N elements\n"
"(--threshold, default 1000) is summarised, keeping --edgeitems (default 3) at\n"
"each end of every dimension; floats show at most --precision (default 8)\n"
"fraction digits. Tensors of a .safetensors file are printed in name order,\n"
"the arrays of a stream in stream order, each after a line with its name (a\n"
"stream's: its index), dtype and shape.\n";

static int
cmd_print(int argc, char **argv)
{
	enum { O_THRESHOLD = CLI_OPT_PROGRAM, O_EDGE, O_PRECISION };
	static const struct option longs[] = { COMMON_LONGOPTS,
		{ "threshold", 1, 0, O_THRESHOLD }, { "edgeitems", 1, 0, O_EDGE },
		{ "precision", 1, 0, O_PRECISION }, { 0, 0, 0, 0 } };
	struct tensor_print_opts o;
	static struct tensor_set s;
	char shape[200];
	size_t i;
	int c, a;

	tensor_print_defaults(&o);
	while ((c = next_opt(argc, argv, COMMON_SHORTS, longs, print_help)) != -1) {
		if (c == O_THRESHOLD)
			o.threshold = cli_parse_long("threshold", optarg, 0, 1L << 62);
		else if (c == O_EDGE)
			o.edgeitems = (int)cli_parse_long("edgeitems", optarg, 1, 1000);
		else
			o.precision = (int)cli_parse_long("precision", optarg, 0, 17);
	}
	if (optind == argc)
		cli_usage_error("print: no file given");
	for (a = optind; a < argc; a++) {
		load(argv[a], &s);
		for (i = 0; i < s.count; i++) {
			if (s.items[i].name)
				printf("%s: %s %s\n", s.items[i].name, dtype_name(s.items[i].dtype),
				    tensor_shape_str(&s.items[i], shape, sizeof shape));
			if (tensor_print(stdout, &s.items[i], &o) < 0)
				cli_die(CLI_EXIT_RUNTIME, "standard output: write error");
		}
		tensor_set_free(&s);
	}
	done();
}

/* ---- create ---- */

static const char create_help[] =
"usage: collx-tensor create --shape D,D,... [--dtype D] [--fill F] [--seed N]\n"
"                           [--name NAME] -o OUT\n"
"Write a new tensor. --shape '' makes a 0-dimensional tensor. --dtype: f32\n"
"(default), f64, f16, bf16, i8, i16, i32, i64, u8, bool (\"float\" is f64, as in\n"
"NumPy). --fill: zeros (default),\n"
"ones, arange (the flat index), rand (uniform on [0,1)), randn (standard normal),\n"
"or a number. rand and randn need a float dtype and are reproducible from\n"
"--seed (default 0) on every machine (see collx-tensor(1)). --name names the\n"
"tensor in a .safetensors output (default \"tensor\"). -o, --output OUT: the\n"
"file to write, as for split, cat, pack and get.\n";

static void
parse_shape(const char *s, int *ndim, int64_t *shape)
{
	long v[TENSOR_MAX_DIM];
	int i;

	*ndim = 0;
	if (strcmp(s, "") == 0 || strcmp(s, "()") == 0 || strcmp(s, "[]") == 0)
		return;
	*ndim = cli_parse_list("shape", s, v, TENSOR_MAX_DIM);
	for (i = 0; i < *ndim; i++) {
		if (v[i] < 0)
			cli_usage_error("--shape: negative dimension in '%s'", s);
		shape[i] = v[i];
	}
}

static enum dtype
parse_dtype(const char *s)
{
	enum dtype dt;

	if (dtype_parse(s, &dt) < 0)
		cli_usage_error("--dtype: unknown dtype '%s'", s);
	return dt;
}

static int
cmd_create(int argc, char **argv)
{
	enum { O_SHAPE = CLI_OPT_PROGRAM, O_DTYPE, O_FILL, O_SEED, O_NAME };
	static const struct option longs[] = { COMMON_LONGOPTS,
		{ "shape", 1, 0, O_SHAPE }, { "dtype", 1, 0, O_DTYPE }, { "fill", 1, 0, O_FILL },
		{ "seed", 1, 0, O_SEED }, { "name", 1, 0, O_NAME }, { "output", 1, 0, 'o' },
		{ 0, 0, 0, 0 } };
	const char *shape_arg = NULL, *fill_arg = "zeros", *out = NULL, *name = "tensor";
	static struct tensor_set s = { .format = TENSOR_NPY };
	enum dtype dt = DT_F32;
	int64_t shape[TENSOR_MAX_DIM];
	static struct tensor t;
	enum tensor_fill how;
	uint64_t seed = 0;
	double value;
	int c, ndim;

	while ((c = next_opt(argc, argv, COMMON_SHORTS "o:", longs, create_help)) != -1) {
		switch (c) {
		case O_SHAPE: shape_arg = optarg; break;
		case O_DTYPE: dt = parse_dtype(optarg); break;
		case O_FILL: fill_arg = optarg; break;
		case O_SEED: seed = (uint64_t)cli_parse_long("seed", optarg, 0, LONG_MAX); break;
		case O_NAME: name = optarg; break;
		case 'o': out = optarg; break;
		}
	}
	if (!shape_arg || !out || optind != argc)
		cli_usage_error("create: needs --shape and -o, and no other arguments");
	parse_shape(shape_arg, &ndim, shape);
	if (tensor_fill_parse(fill_arg, &how, &value, err, sizeof err) < 0)
		cli_usage_error("--fill: %s", err);
	if ((how == TENSOR_FILL_RAND || how == TENSOR_FILL_RANDN) && !dtype_is_float(dt))
		cli_usage_error("--fill %s needs a float dtype, not %s", fill_arg, dtype_name(dt));
	if (tensor_init(&t, dt, ndim, shape, err, sizeof err) < 0)
		cli_die(CLI_EXIT_DATA, "create: %s", err);
	if (tensor_fill(&t, how, value, seed, err, sizeof err) < 0 ||
	    tensor_set_add(&s, tensor_format_for(out, TENSOR_NPY) == TENSOR_NPY ? NULL : name,
	    &t, err, sizeof err) < 0)
		cli_die(CLI_EXIT_DATA, "create: %s", err);
	save(out, &s);
	tensor_set_free(&s);
	done();
}

/* ---- diff ---- */

static const char diff_help[] =
"usage: collx-tensor diff [--rtol R] [--atol A] A B\n"
"Compare A (actual) with B (expected) element by element and print the largest\n"
"absolute and relative error and how many elements are out of tolerance:\n"
"|a - b| > atol + rtol * |b| (defaults: rtol 1e-05, atol 1e-08, as numpy.allclose).\n"
"NaN matches NaN and an infinity the same infinity. Tensors of .safetensors files\n"
"are matched by name, arrays of streams by index. Exit 0 when all are close; 4\n"
"when any element is out of tolerance, or dtypes, shapes or names differ.\n";

static int
cmd_diff(int argc, char **argv)
{
	enum { O_RTOL = CLI_OPT_PROGRAM, O_ATOL };
	static const struct option longs[] = { COMMON_LONGOPTS,
		{ "rtol", 1, 0, O_RTOL }, { "atol", 1, 0, O_ATOL }, { 0, 0, 0, 0 } };
	struct tensor_set_diff tot = { 0 };
	static struct tensor_set a, b;
	double rtol = 1e-5, atol = 1e-8, hint;
	int c;

	while ((c = next_opt(argc, argv, COMMON_SHORTS, longs, diff_help)) != -1) {
		if (c == O_RTOL)
			rtol = cli_parse_double("rtol", optarg, 0, INFINITY);
		else
			atol = cli_parse_double("atol", optarg, 0, INFINITY);
	}
	if (argc - optind != 2)
		cli_usage_error("diff: needs two files");
	load(argv[optind], &a);
	load(argv[optind + 1], &b);
	tensor_set_diff(&a, &b, rtol, atol, cli_quiet ? NULL : stdout, &tot);
	/* f32 results that differ only by rounding (a sum in another order,
	 * an optimizer amplifying it): say so, and the --rtol that accepts
	 * them. */
	if (!cli_quiet && (hint = tensor_set_diff_rtol_hint(&tot)) > 0)
		printf("hint: differences at f32 rounding level (max rel error "
		    "%.3g); --rtol %g accepts them\n", tot.max_rel, hint);
	tensor_set_free(&a);
	tensor_set_free(&b);
	fflush(stdout);
	if (tot.structural)
		cli_die(CLI_EXIT_CHECK, "%s and %s differ: %s", argv[optind], argv[optind + 1],
		    tot.first);
	if (tot.bad)
		cli_die(CLI_EXIT_CHECK, "%s and %s differ: %lld of %lld elements out of "
		    "tolerance (rtol %g, atol %g)", argv[optind], argv[optind + 1],
		    (long long)tot.bad, (long long)tot.count, rtol, atol);
	done();
}

/* ---- convert ---- */

static const char convert_help[] =
"usage: collx-tensor convert [--dtype D] [--name NAME] IN OUT\n"
"Rewrite IN as OUT: the format follows OUT's extension (.npy, .npys,\n"
".safetensors), else IN's format. --dtype converts every tensor (rounding to\n"
"nearest even for floats, truncating and saturating for integers). An unnamed\n"
"(.npy) tensor is called NAME (default \"tensor\") in a .safetensors output.\n"
"bf16 has no .npy type code: convert it with --dtype f32 first.\n";

static int
cmd_convert(int argc, char **argv)
{
	enum { O_DTYPE = CLI_OPT_PROGRAM, O_NAME };
	static const struct option longs[] = { COMMON_LONGOPTS,
		{ "dtype", 1, 0, O_DTYPE }, { "name", 1, 0, O_NAME }, { 0, 0, 0, 0 } };
	const char *name = "tensor";
	static struct tensor_set s;
	int c, cast = 0;
	enum dtype dt = DT_F32;

	while ((c = next_opt(argc, argv, COMMON_SHORTS, longs, convert_help)) != -1) {
		if (c == O_DTYPE)
			dt = parse_dtype(optarg), cast = 1;
		else
			name = optarg;
	}
	if (argc - optind != 2)
		cli_usage_error("convert: needs IN and OUT");
	load(argv[optind], &s);
	if (cast && tensor_set_cast(&s, dt, err, sizeof err) < 0)
		cli_die(CLI_EXIT_RUNTIME, "%s", err);
	if (tensor_format_for(argv[optind + 1], s.format) == TENSOR_SAFETENSORS &&
	    tensor_set_name_unnamed(&s, name, err, sizeof err) < 0)
		cli_die(CLI_EXIT_RUNTIME, "%s", err);
	save(argv[optind + 1], &s);
	tensor_set_free(&s);
	done();
}

/* ---- split ---- */

static const char split_help[] =
"usage: collx-tensor split --parts N [--dim D] [--even] -o PATTERN IN\n"
"Cut every tensor of IN into N parts along dimension D (default 0; negative\n"
"counts from the end) and write part i to PATTERN with {i} replaced by i.\n"
"Sizes follow numpy.array_split: when N does not divide the dimension, the first\n"
"(size mod N) parts get one element more. With --even, a size N does not divide\n"
"is an error (exit 3).\n";

/* PATTERN with every {i} replaced by i (at most 11 characters for 3). */
static char *
part_name(const char *pattern, int i)
{
	char *out = own(cli_calloc(strlen(pattern) * 4 + 16, 1));
	const char *p;
	size_t o = 0;

	for (p = pattern; *p; p++) {
		if (strncmp(p, "{i}", 3) == 0) {
			o += (size_t)sprintf(out + o, "%d", i);
			p += 2;
		} else
			out[o++] = *p;
	}
	out[o] = 0;
	return out;
}

static void
split_part(const struct tensor_set *in, const int *dims, int parts, int i,
    const char *pattern)
{
	static struct tensor_set s;

	if (tensor_set_part(in, dims, parts, i, &s, err, sizeof err) < 0)
		cli_die(CLI_EXIT_DATA, "split: %s", err);
	if (tensor_set_meta_copy(&s, in, err, sizeof err) < 0)
		cli_die(CLI_EXIT_RUNTIME, "%s", err);
	save(part_name(pattern, i), &s);
	tensor_set_free(&s);
}

static int
cmd_split(int argc, char **argv)
{
	enum { O_PARTS = CLI_OPT_PROGRAM, O_DIM, O_EVEN };
	static const struct option longs[] = { COMMON_LONGOPTS,
		{ "parts", 1, 0, O_PARTS }, { "dim", 1, 0, O_DIM }, { "even", 0, 0, O_EVEN },
		{ "output", 1, 0, 'o' }, { 0, 0, 0, 0 } };
	const char *pattern = NULL;
	int c, parts = 0, dim = 0, even = 0, i, *dims;
	static struct tensor_set s;

	while ((c = next_opt(argc, argv, COMMON_SHORTS "o:", longs, split_help)) != -1) {
		switch (c) {
		case O_PARTS: parts = (int)cli_parse_long("parts", optarg, 1, 1 << 20); break;
		case O_DIM: dim = (int)cli_parse_long("dim", optarg, -8, 7); break;
		case O_EVEN: even = 1; break;
		case 'o': pattern = optarg; break;
		}
	}
	if (!parts || !pattern || argc - optind != 1)
		cli_usage_error("split: needs --parts, -o PATTERN and one input");
	if (parts > 1 && !strstr(pattern, "{i}"))
		cli_usage_error("split: -o %s has no {i} to number the parts", pattern);
	load(argv[optind], &s);
	dims = own(cli_calloc(s.count + 1, sizeof *dims));
	if (tensor_set_split_dims(&s, dim, parts, even, dims, err, sizeof err) < 0)
		cli_die(CLI_EXIT_DATA, "split: %s", err);
	for (i = 0; i < parts; i++)
		split_part(&s, dims, parts, i, pattern);
	tensor_set_free(&s);
	done();
}

/* ---- cat ---- */

static const char cat_help[] =
"usage: collx-tensor cat [--dim D] -o OUT IN...\n"
"Concatenate the inputs along dimension D (default 0; negative counts from the\n"
"end). Dtypes and all other dimensions must agree. Inputs holding several tensors\n"
"(.safetensors) must hold the same names; each name is concatenated on its own.\n"
"OUT keeps the first input's names and metadata.\n";

static int
cmd_cat(int argc, char **argv)
{
	enum { O_DIM = CLI_OPT_PROGRAM };
	static const struct option longs[] = { COMMON_LONGOPTS,
		{ "dim", 1, 0, O_DIM }, { "output", 1, 0, 'o' }, { 0, 0, 0, 0 } };
	static struct tensor_set *in, out;
	const char *dst = NULL;
	int c, dim = 0, n, i;

	while ((c = next_opt(argc, argv, COMMON_SHORTS "o:", longs, cat_help)) != -1) {
		if (c == 'o')
			dst = optarg;
		else
			dim = (int)cli_parse_long("dim", optarg, -8, 7);
	}
	if (!dst || optind == argc)
		cli_usage_error("cat: needs -o OUT and at least one input");
	n = argc - optind;
	in = cli_calloc((size_t)n, sizeof *in);
	for (i = 0; i < n; i++) {
		load(argv[optind + i], &in[i]);
		if (in[i].count != in[0].count)
			cli_die(CLI_EXIT_DATA, "cat: %s holds %zu tensors, %s holds %zu",
			    argv[optind + i], in[i].count, argv[optind], in[0].count);
	}
	if (tensor_set_cat(in, (size_t)n, (const char *const *)argv + optind, dim, &out,
	    err, sizeof err) < 0)
		cli_die(CLI_EXIT_DATA, "cat: %s", err);
	if (tensor_set_meta_copy(&out, &in[0], err, sizeof err) < 0)
		cli_die(CLI_EXIT_RUNTIME, "%s", err);
	save(dst, &out);
	for (i = 0; i < n; i++)
		tensor_set_free(&in[i]);
	free(in);
	tensor_set_free(&out);
	done();
}

/* ---- pack ---- */

static const char pack_help[] =
"usage: collx-tensor pack [--meta KEY=VALUE]... -o OUT NAME=FILE...\n"
"Write one .safetensors file holding each FILE (one tensor each) as NAME, in\n"
"name order, with the --meta strings as its __metadata__. The output is\n"
"safetensors whatever OUT's name.\n";

static void
split_eq(const char *arg, const char *what, char **key, const char **value)
{
	const char *eq = strchr(arg, '=');

	if (!eq || eq == arg)
		cli_usage_error("%s: expected %s, not '%s'", what,
		    strcmp(what, "--meta") ? "NAME=FILE" : "KEY=VALUE", arg);
	*key = own(strndup(arg, (size_t)(eq - arg)));
	*value = eq + 1;
}

static int
cmd_pack(int argc, char **argv)
{
	enum { O_META = CLI_OPT_PROGRAM };
	static const struct option longs[] = { COMMON_LONGOPTS,
		{ "meta", 1, 0, O_META }, { "output", 1, 0, 'o' }, { 0, 0, 0, 0 } };
	static struct tensor_set s = { .format = TENSOR_SAFETENSORS };
	const char *dst = NULL, *value;
	static struct tensor t;
	char *key;
	int c, i;

	while ((c = next_opt(argc, argv, COMMON_SHORTS "o:", longs, pack_help)) != -1) {
		if (c == 'o') {
			dst = optarg;
			continue;
		}
		split_eq(optarg, "--meta", &key, &value);
		if (tensor_set_meta_put(&s, key, value, err, sizeof err) < 0)
			cli_die(CLI_EXIT_RUNTIME, "%s", err);
	}
	if (!dst || optind == argc)
		cli_usage_error("pack: needs -o OUT and at least one NAME=FILE");
	for (i = optind; i < argc; i++) {
		split_eq(argv[i], "pack", &key, &value);
		if (tensor_load_one(path_arg(value), &t, err, sizeof err) < 0)
			cli_die(CLI_EXIT_DATA, "%s", err);
		if (tensor_set_add(&s, key, &t, err, sizeof err) < 0)
			cli_usage_error("pack: %s", err);
	}
	save_as(dst, &s, TENSOR_SAFETENSORS);
	tensor_set_free(&s);
	done();
}

/* ---- get ---- */

static const char get_help[] =
"usage: collx-tensor get -o OUT IN NAME\n"
"Write the tensor called NAME in IN to OUT; in a stream, NAME is the array's\n"
"index (from 0). OUT's format follows its extension, else IN's format (a\n"
".safetensors output keeps the name, not the metadata).\n";

static int
cmd_get(int argc, char **argv)
{
	static const struct option longs[] = { COMMON_LONGOPTS,
		{ "output", 1, 0, 'o' }, { 0, 0, 0, 0 } };
	static struct tensor_set s, one;
	const char *dst = NULL;
	static struct tensor copy;
	struct tensor *t;

	while (next_opt(argc, argv, COMMON_SHORTS "o:", longs, get_help) != -1)
		dst = optarg;
	if (!dst || argc - optind != 2)
		cli_usage_error("get: needs -o OUT, IN and NAME");
	load(argv[optind], &s);
	if (!(t = tensor_set_find(&s, argv[optind + 1])))
		cli_die(CLI_EXIT_DATA, "%s: no tensor named '%s' (it holds %zu)", argv[optind],
		    argv[optind + 1], s.count);
	one.format = s.format;
	if (tensor_copy(t, &copy, err, sizeof err) < 0 ||
	    tensor_set_add(&one, copy.name, &copy, err, sizeof err) < 0)
		cli_die(CLI_EXIT_RUNTIME, "%s", err);
	save(dst, &one);
	tensor_set_free(&one);
	tensor_set_free(&s);
	done();
}

static const struct command {
	const char *name;
	int (*run)(int, char **);
} commands[] = {
	{ "info", cmd_info }, { "print", cmd_print }, { "create", cmd_create },
	{ "diff", cmd_diff }, { "convert", cmd_convert }, { "split", cmd_split },
	{ "cat", cmd_cat }, { "pack", cmd_pack }, { "get", cmd_get },
};

int
main(int argc, char **argv)
{
	static const struct option longs[] = { COMMON_LONGOPTS, { 0, 0, 0, 0 } };
	size_t i;

	cli_init(argv[0]);
	atexit(free_owned);
	next_opt(argc, argv, "+" COMMON_SHORTS, longs, usage_text);
	if (optind == argc)
		cli_usage_error("no command given");
	for (i = 0; i < sizeof commands / sizeof commands[0]; i++)
		if (strcmp(argv[optind], commands[i].name) == 0) {
			argc -= optind;
			argv += optind;
			optind = 0;	/* restart getopt on the command's arguments */
			return commands[i].run(argc, argv);
		}
	cli_usage_error("unknown command '%s'", argv[optind]);
}
