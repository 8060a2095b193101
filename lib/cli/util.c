/* util: error text, clock, hash and the small reads of /proc shared by
 * every layer. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "cli/util.h"

int
cli_fail(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (err != NULL && errlen > 0) {
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return -1;
}

double
cli_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

uint64_t
cli_fnv1a(uint64_t h, const void *p, size_t n)
{
	const unsigned char *b = p;
	size_t i;

	for (i = 0; i < n; i++) {
		h ^= b[i];
		h *= 0x100000001b3ULL;
	}
	return h;
}

uint64_t
cli_le_get(const unsigned char *b, int n)
{
	uint64_t v = 0;

	while (n-- > 0)
		v = v << 8 | b[n];
	return v;
}

void
cli_le_put(unsigned char *b, uint64_t v, int n)
{
	for (int i = 0; i < n; i++)
		b[i] = (unsigned char)(v >> (8 * i));
}

int
cli_name_index(const char *const *names, int n, const char *s)
{
	for (int i = 0; i < n; i++)
		if (names[i] != NULL && strcmp(s, names[i]) == 0)
			return i;
	return -1;
}

void
cli_first_line(const char *path, char *buf, size_t len)
{
	FILE *f = fopen(path, "r");

	buf[0] = '\0';
	if (f == NULL)
		return;
	if (fgets(buf, (int)len, f) != NULL)
		buf[strcspn(buf, "\n")] = '\0';
	fclose(f);
}

void
cli_ephemeral_range(int *lo, int *hi)
{
	FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");

	*lo = 32768, *hi = 60999;
	if (f == NULL)
		return;
	if (fscanf(f, "%d %d", lo, hi) != 2 || *lo < 1024 || *hi < *lo)
		*lo = 32768, *hi = 60999;
	fclose(f);
}
