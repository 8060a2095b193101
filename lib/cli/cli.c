/* cli: messages, strict option parsing, group membership, timing CSV. */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <getopt.h>

#include "cli/cli.h"

#ifndef COLLX_VERSION
#define COLLX_VERSION "0"
#endif

const char *cli_progname = "collx";
int cli_verbose;
int cli_quiet;
int cli_rank = -1, cli_world = -1;

void
cli_init(const char *argv0)
{
	const char *slash;

	/* getopt's own messages name argv[0] as typed and add a second
	 * line to ours: cli_option_error() reports instead. */
	opterr = 0;
	if (argv0 == NULL || *argv0 == '\0')
		return;
	slash = strrchr(argv0, '/');
	cli_progname = slash ? slash + 1 : argv0;
}

static void
vmsg(const char *fmt, va_list ap)
{
	char line[4096];
	int n;

	/* One write per message, so lines of several ranks do not mix. */
	n = snprintf(line, sizeof line, "%s: ", cli_progname);
	if (n < 0 || (size_t)n >= sizeof line)
		n = 0;
	vsnprintf(line + n, sizeof line - n, fmt, ap);
	fflush(stdout);
	fprintf(stderr, "%s\n", line);
}

void
cli_die(int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vmsg(fmt, ap);
	va_end(ap);
	exit(code);
}

void
cli_die_rank(int code, const char *fmt, ...)
{
	char line[4096];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(line, sizeof line, fmt, ap);
	va_end(ap);
	if (cli_world > 1)
		cli_die(code, "rank %d: %s", cli_rank, line);
	cli_die(code, "%s", line);
}

/* A rank that keeps a usage error to itself leaves a moment later, so
 * that a launcher which stops every rank at the first exit (collx-run)
 * does not stop rank 0 before it has said it. */
#define CLI_SILENT_EXIT_DELAY_NS 250000000L

static _Noreturn void
vusage(int show, const char *fmt, va_list ap)
{
	if (show) {
		vmsg(fmt, ap);
		fprintf(stderr, "Try '%s --help'.\n", cli_progname);
	} else
		nanosleep(&(struct timespec){ 0, CLI_SILENT_EXIT_DELAY_NS },
		    NULL);
	exit(CLI_EXIT_USAGE);
}

/* Whether this rank says a usage error every rank finds alike. */
static int
usage_shown(void)
{
	int rank = cli_rank >= 0 ? cli_rank : cli_group_env_rank();

	return rank <= 0 || cli_verbose || isatty(STDERR_FILENO);
}

void
cli_usage_error(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vusage(usage_shown(), fmt, ap);
}

void
cli_own_usage_error(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vusage(1, fmt, ap);
}

void
cli_option_error(int argc, char *const argv[], const char *shortopts)
{
	const char *arg = optind > 0 && optind <= argc ? argv[optind - 1] : "";
	const char *eq;
	int len;

	if (strncmp(arg, "--", 2) == 0) {
		eq = strchr(arg, '=');
		len = eq ? (int)(eq - arg) : (int)strlen(arg);
		if (optopt == 0)
			cli_usage_error("unknown option '%.*s'", len, arg);
		if (eq)
			cli_usage_error("option '%.*s' takes no value", len, arg);
		cli_usage_error("option '%s' needs a value", arg);
	}
	if (optopt != 0 && optopt != ':' && strchr(shortopts, optopt))
		cli_usage_error("option '-%c' needs a value", optopt);
	if (optopt > ' ' && optopt < 127)
		cli_usage_error("unknown option '-%c'", optopt);
	cli_usage_error("unknown option '%s'", arg);
}

void
cli_warn(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vmsg(fmt, ap);
	va_end(ap);
}

void
cli_info(const char *fmt, ...)
{
	va_list ap;

	if (cli_quiet)
		return;
	va_start(ap, fmt);
	vmsg(fmt, ap);
	va_end(ap);
}

void
cli_debug(const char *fmt, ...)
{
	va_list ap;

	if (cli_verbose <= 0 || cli_quiet)
		return;
	va_start(ap, fmt);
	vmsg(fmt, ap);
	va_end(ap);
}

void
cli_close_stdout(void)
{
	if (fflush(stdout) != 0 || ferror(stdout) || fclose(stdout) != 0)
		cli_die(CLI_EXIT_RUNTIME, "standard output: %s",
		    errno ? strerror(errno) : "write error");
}

void
cli_version(void)
{
	printf("%s (collx) %s\n", cli_progname, COLLX_VERSION);
	cli_close_stdout();
	exit(CLI_EXIT_OK);
}

/*
 * How a value's source is named in messages: option names as the user
 * typed them ("iters" -> "--iters", "n" -> "-n"), environment variables
 * and anything already dashed as given.
 */
static const char *
label(const char *opt, char *buf, size_t len)
{
	const char *p;

	if (opt == NULL)
		return "value";
	if (opt[0] == '-')
		return opt;
	for (p = opt; *p; p++)
		if (!islower((unsigned char)*p) && !isdigit((unsigned char)*p) &&
		    *p != '-')
			return opt;
	snprintf(buf, len, "%s%s", opt[1] ? "--" : "-", opt);
	return buf;
}

/* Digits from s on: where they end, or NULL when there are none. */
static const char *
skip_digits(const char *s)
{
	const char *p = s;

	while (isdigit((unsigned char)*p))
		p++;
	return p > s ? p : NULL;
}

/*
 * Numbers are written in decimal: an optional '-', digits (leading zeros
 * do not make octal), and for a real number an optional fraction and
 * exponent. strtol and strtod would also take leading blanks, a '+',
 * "0x" (hexadecimal integers and floats), "inf" and "nan": the grammar
 * is checked first, so that such a value is refused as any other bad
 * number is (a usage error, exit 2).
 */
static int
decimal_real(const char *s)
{
	const char *p = s, *q;
	int digits = 0;

	if (s == NULL)
		return 0;
	if (*p == '-')
		p++;
	if ((q = skip_digits(p)) != NULL)
		digits = 1, p = q;
	if (*p == '.' && (q = skip_digits(p + 1)) != NULL)
		digits = 1, p = q;
	else if (*p == '.')
		p++;
	if (*p == 'e' || *p == 'E') {
		p++;
		if (*p == '-' || *p == '+')
			p++;
		if ((p = skip_digits(p)) == NULL)
			return 0;
	}
	return digits && *p == '\0';
}

static int
strict_long(const char *s, long *out)
{
	const char *digits = s != NULL && *s == '-' ? s + 1 : s;
	char *end;

	if (s == NULL || skip_digits(digits) == NULL)
		return -1;	/* no sign but '-', no blank before digits */
	errno = 0;
	*out = strtol(s, &end, 10);
	if (errno != 0 || *end != '\0')
		return -1;
	return 0;
}

int
cli_long_value(const char *opt, const char *s, long min, long max, long *out,
    char *err, size_t errlen)
{
	char buf[64];

	if (strict_long(s, out) < 0)
		return cli_fail(err, errlen, "%s: invalid integer '%s'",
		    label(opt, buf, sizeof buf), s ? s : "");
	if (*out < min || *out > max)
		return cli_fail(err, errlen, "%s: %ld is out of range (%ld to %ld)",
		    label(opt, buf, sizeof buf), *out, min, max);
	return 0;
}

int
cli_int_value(const char *opt, const char *s, long min, long max, int *out,
    char *err, size_t errlen)
{
	long v;

	if (cli_long_value(opt, s, min, max, &v, err, errlen) < 0)
		return -1;
	*out = (int)v;
	return 0;
}

int
cli_taken(int rc)
{
	return rc < 0 ? -1 : 1;
}

long
cli_parse_long(const char *opt, const char *s, long min, long max)
{
	char err[COLLX_ERRLEN];
	long v;

	if (cli_long_value(opt, s, min, max, &v, err, sizeof err) < 0)
		cli_usage_error("%s", err);
	return v;
}

int
cli_double_value(const char *opt, const char *s, double min, double max,
    double *out, char *err, size_t errlen)
{
	char buf[64], *end;

	if (!decimal_real(s))
		goto bad;
	errno = 0;
	*out = strtod(s, &end) + 0.0;	/* "-0" is zero, not negative zero */
	if (*end != '\0' || !isfinite(*out) ||
	    (errno == ERANGE && fabs(*out) > 1))
		goto bad;
	if (*out < min || *out > max)
		return cli_fail(err, errlen, "%s: %s is out of range (%g to %g)",
		    label(opt, buf, sizeof buf), s, min, max);
	return 0;
bad:
	return cli_fail(err, errlen, "%s: invalid number '%s'",
	    label(opt, buf, sizeof buf), s ? s : "");
}

double
cli_parse_double(const char *opt, const char *s, double min, double max)
{
	char err[COLLX_ERRLEN];
	double v;

	if (cli_double_value(opt, s, min, max, &v, err, sizeof err) < 0)
		cli_usage_error("%s", err);
	return v;
}

/* 0 or -1; "8", "64K", "1.5M", "2GiB", "4kb" (K/M/G/T are powers of 1024). */
int
cli_size_value(const char *s, size_t *out)
{
	unsigned long long ip;
	double frac = 0, unit = 1, v;
	const char *p = s, *q;
	char *end;

	if (s == NULL || !isdigit((unsigned char)*s))
		return -1;
	errno = 0;
	ip = strtoull(p, &end, 10);
	if (errno != 0)
		return -1;
	p = end;
	if (*p == '.') {
		/* digits only: strtod would take an exponent ("1.5e3") */
		if ((q = skip_digits(p + 1)) == NULL)
			return -1;
		frac = strtod(p, NULL);
		p = q;
	}
	switch (toupper((unsigned char)*p)) {
	case 'K': unit = 1024.0; p++; break;
	case 'M': unit = 1024.0 * 1024; p++; break;
	case 'G': unit = 1024.0 * 1024 * 1024; p++; break;
	case 'T': unit = 1024.0 * 1024 * 1024 * 1024; p++; break;
	}
	if (unit > 1 && *p == 'i')
		p++;
	if (toupper((unsigned char)*p) == 'B')
		p++;
	if (*p != '\0')
		return -1;
	v = ((double)ip + frac) * unit;
	if (v >= 18446744073709551616.0 || v > (double)SIZE_MAX)
		return -1;
	if (frac == 0 && ip <= SIZE_MAX / (size_t)unit) {
		*out = (size_t)ip * (size_t)unit;	/* exact for big values */
		return 0;
	}
	if (v != floor(v))
		return -1;		/* not a whole number of bytes */
	*out = (size_t)v;
	return 0;
}

int
cli_size_arg(const char *opt, const char *s, size_t *out, char *err,
    size_t errlen)
{
	char buf[64];

	if (cli_size_value(s, out) < 0)
		return cli_fail(err, errlen, "%s: invalid size '%s' (a whole "
		    "number of bytes, optionally with K, M, G or T)",
		    label(opt, buf, sizeof buf), s ? s : "");
	return 0;
}

size_t
cli_parse_size(const char *opt, const char *s)
{
	char err[COLLX_ERRLEN];
	size_t v;

	if (cli_size_arg(opt, s, &v, err, sizeof err) < 0)
		cli_usage_error("%s", err);
	return v;
}

int
cli_list_value(const char *opt, const char *s, long *out, int max,
    char *err, size_t errlen)
{
	char buf[64], item[64];
	const char *p = s, *comma;
	size_t len;
	int n = 0;

	if (s == NULL || *s == '\0')
		return cli_fail(err, errlen, "%s: empty list",
		    label(opt, buf, sizeof buf));
	for (;;) {
		comma = strchr(p, ',');
		len = comma ? (size_t)(comma - p) : strlen(p);
		if (len == 0 || len >= sizeof item)
			return cli_fail(err, errlen, "%s: invalid list '%s'",
			    label(opt, buf, sizeof buf), s);
		memcpy(item, p, len);
		item[len] = '\0';
		if (n >= max)
			return cli_fail(err, errlen, "%s: too many values in "
			    "'%s' (at most %d)", label(opt, buf, sizeof buf), s,
			    max);
		if (strict_long(item, &out[n]) < 0)
			return cli_fail(err, errlen, "%s: invalid integer '%s' "
			    "in '%s'", label(opt, buf, sizeof buf), item, s);
		n++;
		if (comma == NULL)
			return n;
		p = comma + 1;
	}
}

int
cli_parse_list(const char *opt, const char *s, long *out, int max)
{
	char err[COLLX_ERRLEN];
	int n;

	if ((n = cli_list_value(opt, s, out, max, err, sizeof err)) < 0)
		cli_usage_error("%s", err);
	return n;
}

/* One pass to measure (out == NULL), one to copy. */
static size_t
subst_pass(const char *p, const char *rs, const char *ws, char *out)
{
	size_t n = 0, k;
	const char *piece;

	while (*p) {
		if (strncmp(p, "{rank}", 6) == 0) {
			piece = rs, k = strlen(rs), p += 6;
		} else if (strncmp(p, "{world}", 7) == 0) {
			piece = ws, k = strlen(ws), p += 7;
		} else {
			piece = p, k = 1, p++;
		}
		if (out)
			memcpy(out + n, piece, k);
		n += k;
	}
	if (out)
		out[n] = '\0';
	return n;
}

char *
cli_strdup(const char *s)
{
	char *d = strdup(s);

	if (d == NULL)
		cli_die(CLI_EXIT_RUNTIME, "out of memory");
	return d;
}

char *
cli_asprintf(const char *fmt, ...)
{
	va_list ap;
	char *s;
	int n;

	va_start(ap, fmt);
	n = vasprintf(&s, fmt, ap);
	va_end(ap);
	if (n < 0)
		cli_die(CLI_EXIT_RUNTIME, "out of memory");
	return s;
}

void *
cli_calloc(size_t n, size_t size)
{
	void *p = calloc(n ? n : 1, size ? size : 1);

	if (p == NULL)
		cli_die(CLI_EXIT_RUNTIME, "out of memory");
	return p;
}

void *
cli_reallocarray(void *p, size_t n, size_t size)
{
	if (size != 0 && n > SIZE_MAX / size)
		cli_die(CLI_EXIT_RUNTIME, "out of memory");
	if ((p = realloc(p, n && size ? n * size : 1)) == NULL)
		cli_die(CLI_EXIT_RUNTIME, "out of memory");
	return p;
}

char *
cli_expand(const char *pattern, int rank, int world)
{
	char rs[24], ws[24], *out;

	snprintf(rs, sizeof rs, "%d", rank);
	snprintf(ws, sizeof ws, "%d", world);
	if ((out = malloc(subst_pass(pattern, rs, ws, NULL) + 1)) != NULL)
		subst_pass(pattern, rs, ws, out);
	return out;
}

char *
cli_subst(const char *pattern, int rank, int world)
{
	char *out = cli_expand(pattern, rank, world);

	if (out == NULL)
		cli_die(CLI_EXIT_RUNTIME, "out of memory");
	return out;
}

char *
cli_slurp(const char *path, size_t *len, char *err, size_t errlen)
{
	FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
	size_t cap = 1 << 16, n = 0, k;
	char *buf;

	if (f == NULL) {
		cli_fail(err, errlen, "%s: %s", path, strerror(errno));
		return NULL;
	}
	buf = cli_reallocarray(NULL, cap + 1, 1);
	while ((k = fread(buf + n, 1, cap - n, f)) > 0) {
		n += k;
		if (n == cap) {
			buf = cli_reallocarray(buf, 2 * cap + 1, 1);
			cap *= 2;
		}
	}
	if (ferror(f)) {
		cli_fail(err, errlen, "%s: %s", path, strerror(errno));
		free(buf);
		buf = NULL;
	} else
		buf[n] = '\0';
	if (f != stdin)
		fclose(f);
	*len = n;
	return buf;
}

int
cli_write_all(int fd, const void *data, size_t len)
{
	const char *buf = data;
	ssize_t n;

	while (len > 0) {
		n = write(fd, buf, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;	/* error, or a reader gone */
		buf += n;
		len -= (size_t)n;
	}
	return 0;
}

int
cli_std_option(int opt, void (*usage)(void))
{
	switch (opt) {
	case 'h':
		usage();
		exit(CLI_EXIT_OK);
	case 'V':
		cli_version();
	case 'v':
		cli_verbose++;
		return 1;
	case 'q':
		cli_quiet = 1;
		return 1;
	default:
		return 0;
	}
}
