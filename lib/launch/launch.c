/* launch: host lists, placement, quoting, and why a program could not be
 * executed; for collx-run. */
#include <ctype.h>
#include <errno.h>
#include <ifaddrs.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "launch/launch.h"

#define LAUNCH_MAX_HOSTS 65536
#define LAUNCH_MAX_SLOTS 4096
#define HOSTFILE_MAX (16 << 20)

/* A host name must not be able to pass itself off as an ssh option. */
static int
host_ok(const char *s, size_t len)
{
	size_t i;

	if (len == 0 || len > 255 || s[0] == '-')
		return 0;
	for (i = 0; i < len; i++)
		if (isspace((unsigned char)s[i]) || iscntrl((unsigned char)s[i]) ||
		    s[i] == ',' || s[i] == '#')
			return 0;
	return 1;
}

static int
hosts_add(struct launch_hosts *h, const char *name, size_t len, int slots,
    char *err, size_t errlen)
{
	if (!host_ok(name, len)) {
		snprintf(err, errlen, "invalid host name '%.*s'", (int)len, name);
		return -1;
	}
	if (h->n >= LAUNCH_MAX_HOSTS) {
		snprintf(err, errlen, "more than %d hosts", LAUNCH_MAX_HOSTS);
		return -1;
	}
	h->names = cli_reallocarray(h->names, (size_t)h->n + 1, sizeof *h->names);
	h->slots = cli_reallocarray(h->slots, (size_t)h->n + 1, sizeof *h->slots);
	h->local = cli_reallocarray(h->local, (size_t)h->n + 1, sizeof *h->local);
	h->names[h->n] = cli_calloc(len + 1, 1);
	memcpy(h->names[h->n], name, len);
	h->local[h->n] = 0;	/* mark_local's to say */
	h->slots[h->n++] = slots;
	return 0;
}

static void mark_local(struct launch_hosts *h, int from);

/*
 * mpirun's "host:K": K slots on host. Only a name with one colon (or
 * "[v6addr]:K") and digits after it; a bare IPv6 address stays a name.
 * Shortens *len to the host part; 1 when slots were given, 0 when not, -1
 * when they are out of range.
 */
static int
split_slots(const char *s, size_t *len, int *slots)
{
	const char *colon = NULL;
	size_t i, hl;
	long v = 0;

	for (i = 0; i < *len; i++)
		if (s[i] == ':') {
			if (colon && s[0] != '[')
				return 0;
			colon = s + i;
		}
	if (colon == NULL || colon + 1 == s + *len)
		return 0;
	hl = (size_t)(colon - s);
	if (s[0] == '[' && (hl < 2 || s[hl - 1] != ']'))
		return 0;
	for (i = hl + 1; i < *len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return 0;
		if ((v = v * 10 + (s[i] - '0')) > LAUNCH_MAX_SLOTS)
			return -1;
	}
	if (v < 1)
		return -1;
	*slots = (int)v;
	*len = hl;
	return 1;
}

static int
add_list(struct launch_hosts *h, const char *list, char *err, size_t errlen)
{
	const char *p = list, *comma;
	size_t len;
	int slots;

	for (;;) {
		comma = strchr(p, ',');
		len = comma ? (size_t)(comma - p) : strlen(p);
		slots = 1;
		if (split_slots(p, &len, &slots) < 0) {
			snprintf(err, errlen, "'%.*s': slots out of range (1 to %d)",
			    (int)(comma ? (size_t)(comma - p) : strlen(p)), p,
			    LAUNCH_MAX_SLOTS);
			return -1;
		}
		if (p[0] == '[' && len > 2 && p[len - 1] == ']') {
			if (hosts_add(h, p + 1, len - 2, slots, err, errlen) < 0)
				return -1;
		} else if (hosts_add(h, p, len, slots, err, errlen) < 0)
			return -1;
		if (comma == NULL)
			return 0;
		p = comma + 1;
	}
}

int
launch_hosts_add_list(struct launch_hosts *h, const char *list, char *err,
    size_t errlen)
{
	int before = h->n, rc = add_list(h, list, err, errlen);

	mark_local(h, before);
	return rc;
}

/* "slots=K", 1 <= K <= LAUNCH_MAX_SLOTS. */
static int
parse_slots(const char *tok, size_t len, int *slots)
{
	char buf[32], *end;
	long v;

	if (len <= 6 || len >= sizeof buf || strncmp(tok, "slots=", 6) != 0)
		return -1;
	memcpy(buf, tok + 6, len - 6);
	buf[len - 6] = '\0';
	errno = 0;
	v = strtol(buf, &end, 10);
	if (errno || *end || !isdigit((unsigned char)buf[0]) || v < 1 ||
	    v > LAUNCH_MAX_SLOTS)
		return -1;
	*slots = (int)v;
	return 0;
}

/* One line without its newline; blank and comment-only lines add nothing. */
static int
hostfile_line(struct launch_hosts *h, const char *s, size_t len, const char *name,
    int lineno, char *err, size_t errlen)
{
	const char *tok[3];
	size_t tlen[3], i = 0, ntok = 0;
	int slots = 1;

	while (i < len && s[i] != '#') {
		while (i < len && isblank((unsigned char)s[i]))
			i++;
		if (i >= len || s[i] == '#')
			break;
		if (ntok == 3)
			goto bad;
		tok[ntok] = s + i;
		while (i < len && !isspace((unsigned char)s[i]) && s[i] != '#')
			i++;
		tlen[ntok] = (size_t)(s + i - tok[ntok]);
		ntok++;
	}
	if (ntok == 0)
		return 0;
	if (ntok > 2 || split_slots(tok[0], &tlen[0], &slots) < 0 ||
	    (ntok == 2 && parse_slots(tok[1], tlen[1], &slots) < 0))
		goto bad;
	if (hosts_add(h, tok[0], tlen[0], slots, err, errlen) == 0)
		return 0;
bad:
	snprintf(err, errlen, "%s:%d: expected HOST[:K] [slots=K]: '%.*s'", name,
	    lineno, (int)(len > 80 ? 80 : len), s);
	return -1;
}

int
launch_hostfile_parse(struct launch_hosts *h, const char *text, const char *name,
    char *err, size_t errlen)
{
	const char *p = text, *nl;
	int lineno = 0, before = h->n;
	size_t len;

	while (*p) {
		nl = strchr(p, '\n');
		len = nl ? (size_t)(nl - p) : strlen(p);
		if (len > 0 && p[len - 1] == '\r')
			len--;
		if (hostfile_line(h, p, len, name, ++lineno, err, errlen) < 0) {
			mark_local(h, before);
			return -1;
		}
		if (nl == NULL)
			break;
		p = nl + 1;
	}
	mark_local(h, before);
	if (h->n == before) {
		snprintf(err, errlen, "%s: no hosts", name);
		return -1;
	}
	return 0;
}

int
launch_hostfile_read(struct launch_hosts *h, const char *path, char *err,
    size_t errlen)
{
	char *text = NULL;
	size_t len = 0, cap = 0, n;
	FILE *f;
	int rc = -1;

	if ((f = strcmp(path, "-") == 0 ? stdin : fopen(path, "r")) == NULL) {
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		return -1;
	}
	do {
		if (cap - len < 4096)
			text = cli_reallocarray(text, cap = cap ? cap * 2 : 8192, 1);
		n = fread(text + len, 1, cap - len - 1, f);
		len += n;
	} while (n > 0 && len < HOSTFILE_MAX);
	text[len] = '\0';
	if (ferror(f))
		snprintf(err, errlen, "%s: read error", path);
	else if (len >= HOSTFILE_MAX || strlen(text) != len)
		snprintf(err, errlen, "%s: not a host list", path);
	else
		rc = launch_hostfile_parse(h, text, path, err, errlen);
	if (f != stdin)
		fclose(f);
	free(text);
	return rc;
}

void
launch_hosts_free(struct launch_hosts *h)
{
	int i;

	for (i = 0; i < h->n; i++)
		free(h->names[i]);
	free(h->names);
	free(h->slots);
	free(h->local);
	memset(h, 0, sizeof *h);
}

int
launch_hosts_slots(const struct launch_hosts *h, int per_host)
{
	long total = 0;
	int i;

	for (i = 0; i < h->n; i++)
		total += per_host > 0 ? per_host : h->slots[i];
	return total > INT_MAX ? INT_MAX : (int)total;
}

int
launch_host_loopback(const char *host)
{
	static const char *const names[] = { "localhost",
	    "localhost.localdomain", "ip6-localhost", "ip6-loopback", NULL };
	const char *const *p;
	unsigned char a[sizeof(struct in6_addr)];

	for (p = names; *p; p++)
		if (strcasecmp(host, *p) == 0)
			return 1;
	if (inet_pton(AF_INET, host, a) == 1)
		return a[0] == 127;
	if (inet_pton(AF_INET6, host, a) == 1)
		return IN6_IS_ADDR_LOOPBACK((struct in6_addr *)a) ||
		    (IN6_IS_ADDR_V4MAPPED((struct in6_addr *)a) && a[12] == 127);
	return 0;
}

/* Whether host is the address of one of the interfaces ifs. */
static int
interface_address(const char *host, const struct ifaddrs *ifs)
{
	struct in6_addr a6;
	struct in_addr a4;
	const struct sockaddr *sa;
	int v4 = inet_pton(AF_INET, host, &a4) == 1;

	if (!v4 && inet_pton(AF_INET6, host, &a6) != 1)
		return 0;
	for (; ifs; ifs = ifs->ifa_next) {
		if ((sa = ifs->ifa_addr) == NULL)
			continue;
		if (v4 && sa->sa_family == AF_INET && memcmp(&a4,
		    &((const struct sockaddr_in *)sa)->sin_addr, sizeof a4) == 0)
			return 1;
		if (!v4 && sa->sa_family == AF_INET6 && memcmp(&a6,
		    &((const struct sockaddr_in6 *)sa)->sin6_addr, sizeof a6) == 0)
			return 1;
	}
	return 0;
}

/* Whether host names the machine whose host name is self. */
static int
host_local(const char *host, const char *self, const struct ifaddrs *ifs)
{
	size_t label = strcspn(self, ".");

	if (strchr(host, '@'))
		return 0;
	return launch_host_loopback(host) || interface_address(host, ifs) ||
	    (*self && (strcasecmp(host, self) == 0 || (strlen(host) == label &&
	    strncasecmp(host, self, label) == 0)));
}

/* Mark hosts from.. that name this machine: once per list or hostfile
 * added, so no caller can place ranks before the marks are made. */
static void
mark_local(struct launch_hosts *h, int from)
{
	struct ifaddrs *ifs = NULL;
	char self[256] = "";
	int i;

	if (from == h->n)
		return;
	if (gethostname(self, sizeof self - 1) < 0)
		self[0] = '\0';
	if (getifaddrs(&ifs) < 0)
		ifs = NULL;
	for (i = from; i < h->n; i++)
		h->local[i] = host_local(h->names[i], self, ifs);
	if (ifs)
		freeifaddrs(ifs);
}

int
launch_hosts_all_local(const struct launch_hosts *h)
{
	int i;

	for (i = 0; i < h->n; i++)
		if (!h->local[i])
			return 0;
	return 1;
}

/* Whether hosts i and j are one machine: one name, or both this one. */
static int
same_host(const struct launch_hosts *h, int i, int j)
{
	return strcmp(h->names[i], h->names[j]) == 0 ||
	    (h->local[i] && h->local[j]);
}

/* Hosts that are one machine share local ranks, counted by the first of
 * them: first[i] is the index of the first host that is host i's machine. */
static int *
first_names(const struct launch_hosts *h)
{
	int i, j, *first = cli_calloc((size_t)h->n, sizeof *first);

	for (i = 0; i < h->n; i++)
		for (first[i] = i, j = 0; j < i; j++)
			if (same_host(h, i, j)) {
				first[i] = first[j];
				break;
			}
	return first;
}

void
launch_place(const struct launch_hosts *h, int n, int per_host, int *host_of,
    int *local_rank)
{
	int i, host = 0, used = 0, cap, *first, *count;

	first = first_names(h);
	count = cli_calloc((size_t)h->n, sizeof *count);
	for (i = 0; i < n; i++) {
		cap = per_host > 0 ? per_host : h->slots[host];
		if (used == cap) {
			host = (host + 1) % h->n;
			used = 0;
		}
		host_of[i] = host;
		used++;
		local_rank[i] = count[first[host]]++;
	}
	free(first);
	free(count);
}

void
launch_local_worlds(const struct launch_hosts *h, int n, const int *host_of,
    const int *local_rank, int *local_world)
{
	int i, *first, *count;

	first = first_names(h);
	count = cli_calloc((size_t)h->n, sizeof *count);
	for (i = 0; i < n; i++)
		if (local_rank[i] + 1 > count[first[host_of[i]]])
			count[first[host_of[i]]] = local_rank[i] + 1;
	for (i = 0; i < n; i++)
		local_world[i] = count[first[host_of[i]]];
	free(first);
	free(count);
}

void
launch_place_ranks(const struct launch_hosts *h, int n, int per_host,
    struct launch_rank *r)
{
	int *host_of, *local, *world, i;

	for (i = 0; i < n; i++)
		r[i] = (struct launch_rank){ -1, i, n };
	if (h->n == 0)
		return;
	host_of = cli_calloc((size_t)n, sizeof *host_of);
	local = cli_calloc((size_t)n, sizeof *local);
	world = cli_calloc((size_t)n, sizeof *world);
	launch_place(h, n, per_host, host_of, local);
	launch_local_worlds(h, n, host_of, local, world);
	/* This machine's ranks start without ssh. */
	for (i = 0; i < n; i++)
		r[i] = (struct launch_rank){ h->local[host_of[i]] ? -1 :
		    host_of[i], local[i], world[i] };
	free(world);
	free(host_of);
	free(local);
}

const char *
launch_host_addr(const char *host)
{
	const char *at = strrchr(host, '@');

	return at ? at + 1 : host;
}

char *
launch_shquote(const char *s)
{
	const char *p;
	char *out, *q;
	size_t n = 3;

	if (*s != '\0' && strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOP"
	    "QRSTUVWXYZ0123456789_-+=/.,:@%^") == strlen(s) && s[0] != '=') {
		out = cli_strdup(s);
		return out;
	}
	for (p = s; *p; p++)
		n += *p == '\'' ? 4 : 1;
	out = cli_calloc(n, 1);
	q = out;
	*q++ = '\'';
	for (p = s; *p; p++) {
		if (*p == '\'') {	/* close, escaped quote, reopen */
			memcpy(q, "'\\''", 4);
			q += 4;
		} else {
			*q++ = *p;
		}
	}
	*q++ = '\'';
	*q = '\0';
	return out;
}

void
launch_words_push(char ***v, int *n, char *w)
{
	*v = cli_reallocarray(*v, (size_t)*n + 2, sizeof **v);
	(*v)[(*n)++] = w;
	(*v)[*n] = NULL;
}

/* One word starting at *sp; advances past it. NULL on an open quote. */
static char *
next_word(const char **sp)
{
	const char *p = *sp;
	char *w, *q, quote = 0;

	w = cli_calloc(strlen(p) + 1, 1);
	for (q = w; *p && (quote || !isspace((unsigned char)*p)); p++) {
		if (quote == '\'' && *p == '\'')
			quote = 0;
		else if (quote == '\'')
			*q++ = *p;
		else if (*p == '\\' && p[1] && (!quote || strchr("\"\\$`", p[1])))
			*q++ = *++p;
		else if (*p == '"')
			quote = quote ? 0 : '"';
		else if (*p == '\'' && !quote)
			quote = '\'';
		else
			*q++ = *p;
	}
	*q = '\0';
	*sp = p;
	if (quote) {
		free(w);
		return NULL;
	}
	return w;
}

int
launch_split_words(const char *s, char ***argv, int *argc, char *err, size_t errlen)
{
	char **v = NULL, *w;
	int n = 0;

	for (;;) {
		while (isspace((unsigned char)*s))
			s++;
		if (*s == '\0')
			break;
		if ((w = next_word(&s)) == NULL) {
			launch_words_free(v);
			snprintf(err, errlen, "unbalanced quotes");
			return -1;
		}
		launch_words_push(&v, &n, w);
	}
	if (n == 0) {
		snprintf(err, errlen, "empty command");
		return -1;
	}
	*argv = v;
	*argc = n;
	return 0;
}

void
launch_words_free(char **argv)
{
	char **p;

	if (argv == NULL)
		return;
	for (p = argv; *p; p++)
		free(*p);
	free(argv);
}

/* The PATH execvp searches: env's, the environment's, or its default. */
static const char *
exec_path(char *const *env)
{
	const char *v;

	for (; env && *env; env++)
		if (strncmp(*env, "PATH=", 5) == 0)
			return *env + 5;
	return (v = getenv("PATH")) != NULL ? v : "/bin:/usr/bin";
}

/* Whether a directory of path (an empty entry: the current one) holds name. */
static int
on_path(const char *name, const char *path)
{
	const char *p = path, *colon;
	char *file;
	int len, found = 0;

	while (!found) {
		colon = strchr(p, ':');
		len = colon ? (int)(colon - p) : (int)strlen(p);
		file = len ? cli_asprintf("%.*s/%s", len, p, name) :
		    cli_strdup(name);
		found = access(file, F_OK) == 0;
		free(file);
		if (colon == NULL)
			break;
		p = colon + 1;
	}
	return found;
}

void
launch_exec_why(const char *prog, int errnum, char *const *env,
    const char *dir, char *buf, size_t len)
{
	struct stat st;
	char *here;
	int is_file;

	if (errnum != ENOENT || strchr(prog, '/') || on_path(prog,
	    exec_path(env))) {
		snprintf(buf, len, "cannot execute %s: %s", prog,
		    strerror(errnum));
		return;
	}
	here = cli_asprintf("%s/%s", dir ? dir : ".", prog);
	is_file = stat(here, &st) == 0 && S_ISREG(st.st_mode);
	if (!is_file)
		snprintf(buf, len, "cannot execute %s: not found on PATH", prog);
	else if (access(here, X_OK) == 0)
		snprintf(buf, len, "cannot execute %s: not found on PATH (for "
		    "the file in this directory, say ./%s)", prog, prog);
	else
		snprintf(buf, len, "cannot execute %s: not found on PATH (for "
		    "the file in this directory, say ./%s; it is not executable: "
		    "chmod +x it, or name its interpreter)", prog, prog);
	free(here);
}
