/* cli hostlist: Slurm's compressed host lists, such as
 * "n[01-04,07],login1" or "rack[1-2]n[1-3]", read without scontrol (which
 * containers often lack). */
#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"

#define HL_MAX_HOSTS (1L << 24)	/* in one list: more is a mistake */
#define HL_MAX_DIGITS 9		/* in one number: fits a long anywhere */
#define HL_MAX_BRACKETS 8	/* in one host ("a[1-2]b[3-4]": a product) */

struct hl {
	const char *expr;	/* the whole list, for messages */
	char *err;
	size_t errlen;
};

/* One range of a bracket: lo to hi, each printed with width digits. */
struct hl_range {
	long lo, hi;
	int width;
};

static int
hl_bad(const struct hl *h, const char *at, const char *why)
{
	if (*at == '\0')
		return cli_fail(h->err, h->errlen, "host list '%s': %s at its end",
		    h->expr, why);
	return cli_fail(h->err, h->errlen, "host list '%s': %s at '%.20s'",
	    h->expr, why, at);
}

/* A character of a host name outside brackets. */
static int
hl_name_char(int c)
{
	return isalnum(c) || c == '-' || c == '.' || c == '_';
}

/* The number at *s; its digits counted, *s moved past it. */
static int
hl_number(const struct hl *h, const char **s, long *v, int *digits)
{
	const char *p = *s;

	if (!isdigit((unsigned char)*p))
		return hl_bad(h, p, "a number expected");
	for (*v = 0; isdigit((unsigned char)*p); p++) {
		if (p - *s == HL_MAX_DIGITS)
			return hl_bad(h, *s, "a number of more than 9 digits");
		*v = *v * 10 + (*p - '0');
	}
	*digits = (int)(p - *s);
	*s = p;
	return 0;
}

/* "N" or "LO-HI" at *s, inside a bracket; *s moved past it. The padding
 * is LO's width: "01-10" is 01 to 10, "1-10" is 1 to 10. */
static int
hl_range(const struct hl *h, const char **s, struct hl_range *r)
{
	const char *at = *s;
	int digits;

	if (hl_number(h, s, &r->lo, &r->width) < 0)
		return -1;
	r->hi = r->lo;
	if (**s == '-') {
		(*s)++;
		if (hl_number(h, s, &r->hi, &digits) < 0)
			return -1;
		if (r->hi < r->lo)
			return hl_bad(h, at, "a range that runs backwards");
	}
	return 0;
}

/* The hosts a bracket at s ("[01-04,07]") stands for; *end past its ']'. */
static long
hl_bracket_count(const struct hl *h, const char *s, const char **end)
{
	struct hl_range r;
	long n = 0;

	do {
		s++;		/* '[' or ',' */
		if (hl_range(h, &s, &r) < 0)
			return -1;
		n += r.hi - r.lo + 1;
		if (n > HL_MAX_HOSTS)
			return hl_bad(h, s, "more than 16777216 hosts");
	} while (*s == ',');
	if (*s != ']')
		return hl_bad(h, s, "',' or ']' expected");
	*end = s + 1;
	return n;
}

/* The k-th number of the (valid) bracket at s, appended at out. */
static int
hl_bracket_nth(const struct hl *h, const char *s, long k, char *out,
    size_t len)
{
	struct hl_range r;

	for (;;) {
		s++;
		hl_range(h, &s, &r);
		if (k <= r.hi - r.lo)
			return snprintf(out, len, "%0*ld", r.width, r.lo + k);
		k -= r.hi - r.lo + 1;
	}
}

/* One host expression (up to a ',' outside brackets, or the end): its
 * brackets and the number of hosts it stands for; *end where it ends. */
static long
hl_host_count(const struct hl *h, const char *s, const char **end,
    const char **bracket, long *counts, int *nbrackets)
{
	const char *p = s;
	long n = 1;

	for (*nbrackets = 0; *p != '\0' && *p != ','; ) {
		if (*p == '[') {
			if (*nbrackets == HL_MAX_BRACKETS)
				return hl_bad(h, p, "more than 8 brackets in a host");
			bracket[*nbrackets] = p;
			if ((counts[*nbrackets] = hl_bracket_count(h, p, &p)) < 0)
				return -1;
			n *= counts[(*nbrackets)++];
			if (n > HL_MAX_HOSTS)
				return hl_bad(h, p, "more than 16777216 hosts");
		} else if (hl_name_char((unsigned char)*p)) {
			p++;
		} else {
			return hl_bad(h, p, *p == ']' ? "a ']' without its '['" :
			    "a character not allowed in a host name");
		}
	}
	if (p == s)
		return hl_bad(h, p, "an empty host name");
	*end = p;
	return n;
}

/* The k-th host of the (valid) expression s..end into host: the last
 * bracket varies fastest, as Slurm counts. */
static int
hl_host_nth(const struct hl *h, const char *s, const char *end, long k,
    const char **bracket, const long *counts, int nbrackets, char *host,
    size_t hostlen)
{
	long index[HL_MAX_BRACKETS];
	size_t len = 0;
	int b, n;

	for (b = nbrackets - 1; b >= 0; b--) {
		index[b] = k % counts[b];
		k /= counts[b];
	}
	for (b = 0; s < end; ) {
		if (len + 1 >= hostlen)
			goto toolong;
		if (*s != '[') {
			host[len++] = *s++;
			continue;
		}
		n = hl_bracket_nth(h, bracket[b], index[b], host + len,
		    hostlen - len);
		if ((size_t)n >= hostlen - len)
			goto toolong;
		len += (size_t)n;
		s = strchr(s, ']') + 1;
		b++;
	}
	host[len] = '\0';
	return 0;
toolong:
	/* nothing half-written: a caller may print host */
	if (hostlen > 0)
		host[0] = '\0';
	return cli_fail(h->err, h->errlen, "host list '%s': a host name "
	    "longer than %zu bytes", h->expr, hostlen > 0 ? hostlen - 1 : 0);
}

long
cli_hostlist(const char *expr, long n, char *host, size_t hostlen,
    char *err, size_t errlen)
{
	struct hl h = { expr, err, errlen };
	const char *s = expr, *end = expr, *bracket[HL_MAX_BRACKETS];
	long counts[HL_MAX_BRACKETS], total = 0, k;
	int nbrackets;

	if (hostlen > 0)
		host[0] = '\0';
	for (;;) {
		if ((k = hl_host_count(&h, s, &end, bracket, counts,
		    &nbrackets)) < 0)
			return -1;
		if (n >= total && n - total < k && hl_host_nth(&h, s, end,
		    n - total, bracket, counts, nbrackets, host, hostlen) < 0)
			return -1;
		if ((total += k) > HL_MAX_HOSTS)
			return hl_bad(&h, s, "more than 16777216 hosts");
		if (*end == '\0')
			return total;
		s = end + 1;	/* past the ',' */
	}
}
