/* note: what a long wait tells its user, through the program's function
 * (comm_note_fn), on a clock of its own: the library never prints. */
#include "comm/sock.h"

#include <stdarg.h>
#include <stdio.h>

void
comm_note_start(struct comm_note *n, comm_note_fn fn, void *ctx)
{
	n->fn = fn;
	n->ctx = ctx;
	n->next = cli_now() + COMM_NOTE_FIRST_S;
	n->what[0] = '\0';
}

double
comm_note_until(const struct comm_note *n, double deadline)
{
	if (n == NULL || n->fn == NULL || n->next >= deadline)
		return deadline;
	return n->next;
}

int
comm_note_say(struct comm_note *n, const char *fmt, ...)
{
	char text[COLLX_ERRLEN];
	va_list ap;

	if (n->fn == NULL || cli_now() < n->next)
		return 0;
	va_start(ap, fmt);
	vsnprintf(text, sizeof text, fmt, ap);
	va_end(ap);
	n->fn(n->ctx, text);
	n->next = cli_now() + COMM_NOTE_EVERY_S;
	return 1;
}
