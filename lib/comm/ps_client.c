/* ps_client: a worker's or a shell's links to the parameter servers. */
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/auth.h"
#include "comm/ps_int.h"
#include "comm/sock.h"
#include "tensor/dtype.h"

/* ---- client ---------------------------------------------------------- */

struct ps_link {
	int fd;
	char addr[128];
	size_t off, len;
};

struct ps_client {
	int n;
	struct ps_link *srv;
	size_t total;
	char *layout;
	double timeout;
	float *scratch;		/* a discarded reply */
};

static void client_free(struct ps_client *c, int bye);

static int
link_fail(const struct ps_link *l, const char *why, char *err, size_t errlen)
{
	snprintf(err, errlen, "server %s: %s", l->addr, why);
	return -1;
}

/* Receive a reply of type want; an ERROR reply becomes the error text. */
static int
link_reply(const struct ps_client *c, const struct ps_link *l, uint32_t want,
    struct ps_msg *m, char *err, size_t errlen)
{
	double deadline = cli_now() + c->timeout;
	char e[COLLX_ERRLEN], *t;

	if (ps_msg_recv(l->fd, m, deadline, e, sizeof(e)) < 0)
		return link_fail(l, e, err, errlen);
	if (m->type == PS_ERROR) {
		t = ps_text_recv(l->fd, m->paylen, deadline, e, sizeof(e));
		link_fail(l, t ? t : e, err, errlen);
		free(t);
		return -1;
	}
	if (m->type != want || (want == PS_ACK && m->paylen != 0)) {
		snprintf(e, sizeof(e), "unexpected reply type %u", m->type);
		return link_fail(l, e, err, errlen);
	}
	return 0;
}

/* Connect (saying so through note while the server cannot be reached),
 * prove the token, say hello; keep the layout of the first. */
static int
link_open(struct ps_client *c, int i, int worker, const char *token,
    struct comm_note *note, char *err, size_t errlen)
{
	struct ps_link *l = &c->srv[i];
	struct ps_msg m = { .type = PS_HELLO, .index = worker };
	double deadline = cli_now() + c->timeout;
	struct comm_sock_addr a;
	char e[COLLX_ERRLEN], *t;

	snprintf(note->what, sizeof(note->what), "still trying to reach server "
	    "%d at %s", i, l->addr);
	if (comm_sock_resolve_hostport(l->addr, &a, e, sizeof(e)) < 0 ||
	    (l->fd = comm_sock_connect(&a, NULL, deadline, note, e,
	    sizeof(e))) < 0)
		return link_fail(l, e, err, errlen);
	comm_sock_tune(l->fd);
	if (auth_client(l->fd, token, deadline, e, sizeof(e)) < 0 ||
	    ps_msg_send(l->fd, &m, NULL, deadline, e, sizeof(e)) < 0)
		return link_fail(l, e, err, errlen);
	if (link_reply(c, l, PS_WELCOME, &m, err, errlen) < 0)
		return -1;
	t = ps_text_recv(l->fd, m.paylen, deadline, e, sizeof(e));
	if (t == NULL)
		return link_fail(l, e, err, errlen);
	if (i == 0) {
		c->layout = t;
		c->total = m.total;
	} else
		free(t);
	if ((int)m.nserv != c->n || m.index != i || m.total != c->total) {
		snprintf(e, sizeof(e), "it serves shard %d of %u of %llu elements, "
		    "but it is server %d of %d in the list", m.index, m.nserv,
		    (unsigned long long)m.total, i, c->n);
		return link_fail(l, e, err, errlen);
	}
	l->off = m.off;
	l->len = m.len;
	return 0;
}

static int
split_servers(struct ps_client *c, const char *servers, char *err,
    size_t errlen)
{
	const char *p = servers, *q;
	int n = 1;

	for (q = servers; *q; q++)
		n += *q == ',';
	c->srv = calloc((size_t)n, sizeof(*c->srv));
	if (c->srv == NULL) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	for (c->n = 0; c->n < n; c->n++) {
		size_t len = strcspn(p, ",");

		c->srv[c->n].fd = -1;
		if (len == 0 || len >= sizeof(c->srv[c->n].addr)) {
			snprintf(err, errlen, "bad server list '%s'", servers);
			return -1;
		}
		memcpy(c->srv[c->n].addr, p, len);
		p += len + (p[len] == ',');
	}
	return 0;
}

int
ps_client_open(struct ps_client **out, const char *servers, int worker,
    const char *token, double timeout, comm_note_fn note_fn, void *note_ctx,
    char *err, size_t errlen)
{
	struct ps_client *c = calloc(1, sizeof(*c));
	struct comm_note note;
	size_t next = 0;
	int i;

	*out = NULL;
	if (c == NULL) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	c->timeout = timeout;
	if (split_servers(c, servers, err, errlen) < 0)
		goto fail;
	comm_note_start(&note, note_fn, note_ctx);
	for (i = 0; i < c->n; i++) {
		if (link_open(c, i, worker, token, &note, err, errlen) < 0)
			goto fail;
		if (c->srv[i].off != next)
			goto gap;
		next += c->srv[i].len;
	}
	if (next != c->total)
		goto gap;
	c->scratch = malloc((c->total + 1) * sizeof(float));
	if (c->scratch == NULL) {
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	*out = c;
	return 0;
gap:
	snprintf(err, errlen, "the shards of servers %s do not tile one vector "
	    "(started with different models or server counts?)", servers);
fail:
	client_free(c, 1);
	return -1;
}

size_t
ps_client_total(const struct ps_client *c)
{
	return c->total;
}

const char *
ps_client_layout(const struct ps_client *c)
{
	return c->layout;
}

/* Read the PARAMS replies of every server into params (or scratch). */
static int
recv_params(struct ps_client *c, float *params, char *err, size_t errlen)
{
	struct ps_msg m;
	char e[COLLX_ERRLEN];
	int i;

	if (params == NULL)
		params = c->scratch;
	for (i = 0; i < c->n; i++) {
		struct ps_link *l = &c->srv[i];

		if (link_reply(c, l, PS_PARAMS, &m, err, errlen) < 0)
			return -1;
		if (m.off != l->off || m.len != l->len ||
		    m.paylen != l->len * sizeof(float))
			return link_fail(l, "reply of the wrong shard", err, errlen);
		if (comm_sock_recv_all(l->fd, params + l->off, m.paylen,
		    cli_now() + c->timeout, e, sizeof(e)) < 0)
			return link_fail(l, e, err, errlen);
	}
	return 0;
}

int
ps_client_push(struct ps_client *c, const float *gsum, double weight,
    float *params, char *err, size_t errlen)
{
	char e[COLLX_ERRLEN];
	int i;

	for (i = 0; i < c->n; i++) {
		struct ps_link *l = &c->srv[i];
		struct ps_msg m = {
			.type = PS_PUSH, .index = i, .nserv = (uint32_t)c->n,
			.off = l->off, .len = l->len, .total = c->total,
			.weight = weight, .paylen = l->len * sizeof(float)
		};

		if (ps_msg_send(l->fd, &m, gsum + l->off, cli_now() + c->timeout,
		    e, sizeof(e)) < 0)
			return link_fail(l, e, err, errlen);
	}
	return recv_params(c, params, err, errlen);
}

/* Send a payload-less request of type to every server. */
static int
send_all_servers(struct ps_client *c, uint32_t type, char *err, size_t errlen)
{
	char e[COLLX_ERRLEN];
	int i;

	for (i = 0; i < c->n; i++) {
		struct ps_msg m = { .type = type, .index = i };

		if (ps_msg_send(c->srv[i].fd, &m, NULL, cli_now() + c->timeout, e,
		    sizeof(e)) < 0)
			return link_fail(&c->srv[i], e, err, errlen);
	}
	return 0;
}

int
ps_client_pull(struct ps_client *c, float *params, char *err, size_t errlen)
{
	if (send_all_servers(c, PS_PULL, err, errlen) < 0)
		return -1;
	return recv_params(c, params, err, errlen);
}

int
ps_client_done(struct ps_client *c, char *err, size_t errlen)
{
	struct ps_msg m;
	int i;

	if (send_all_servers(c, PS_DONE, err, errlen) < 0)
		return -1;
	for (i = 0; i < c->n; i++)
		if (link_reply(c, &c->srv[i], PS_ACK, &m, err, errlen) < 0)
			return -1;
	return 0;
}

static void
client_free(struct ps_client *c, int bye)
{
	struct ps_msg m = { .type = PS_BYE };
	char e[COLLX_ERRLEN];
	int i;

	if (c == NULL)
		return;
	for (i = 0; i < c->n; i++) {
		if (c->srv[i].fd < 0)
			continue;
		if (bye)
			ps_msg_send(c->srv[i].fd, &m, NULL, cli_now() + 1, e,
			    sizeof(e));
		close(c->srv[i].fd);
	}
	free(c->srv);
	free(c->layout);
	free(c->scratch);
	free(c);
}

void
ps_client_close(struct ps_client *c)
{
	client_free(c, 1);
}

/* A failing worker tells every server why before it leaves (a lost
 * server, most likely), so the servers still there name that cause
 * instead of this worker's departure. */
void
ps_client_abort(struct ps_client *c, const char *why)
{
	double deadline = cli_now() + 1;
	int i;

	if (c != NULL && why != NULL)
		for (i = 0; i < c->n; i++)
			if (c->srv[i].fd >= 0)
				ps_send_error(c->srv[i].fd, why, deadline);
	client_free(c, 0);
}
