/* split: sub-groups of a group (comm_split), as MPI_Comm_split makes
 * them. A sub-group has its own ranks and operation numbers and a group
 * id (ctx) stamped on its messages; it sends over the links of the group
 * the program opened (its net), whose transport matches each arriving
 * message to its group's receives (transport.c). */
#include "comm/coll.h"
#include "comm/comm_impl.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct member {
	int32_t key;
	int rank;		/* in the parent */
};

static int
member_cmp(const void *a, const void *b)
{
	const struct member *x = a, *y = b;

	if (x->key != y->key)
		return x->key < y->key ? -1 : 1;
	return (x->rank > y->rank) - (x->rank < y->rank);
}

/* Whether net has a receive or a message half read on some stream. */
static int
net_busy(const struct comm *net)
{
	int peer, s;

	for (peer = 0; peer < net->world; peer++)
		for (s = 0; s < net->nstreams; s++) {
			const struct comm_stream *st = &net->peers[peer].st[s];
			if (st->rq || st->cur || st->ux || st->indone)
				return 1;
		}
	return 0;
}

/* From the first split on, receives match by group. The switch happens
 * before this rank's part of the split, so before any peer can send it
 * a sub-group's message; nothing may be half received then. */
static int
split_begin(struct comm *parent)
{
	struct comm *net = parent->net;

	if (net->kind != COMM_ERR_NONE)
		return -1;
	if (net->split || net->world == 1)
		return 0;
	if (net_busy(net)) {
		comm_fail(parent, COMM_ERR_RUNTIME, "comm_split called with "
		    "receives in flight on the group");
		return -1;
	}
	net->split = 1;
	return 0;
}

static int
split_new(struct comm *parent, uint32_t ctx, const struct member *m, int n,
    struct comm **out)
{
	struct comm *s = calloc(1, sizeof *s);
	int i;

	if (!s || !(s->map = malloc((size_t)n * sizeof *s->map))) {
		free(s);
		comm_fail(parent, COMM_ERR_RUNTIME, "out of memory");
		return -1;
	}
	for (i = 0; i < n; i++) {
		s->map[i] = comm_net_rank(parent, m[i].rank);
		if (m[i].rank == parent->rank)
			s->rank = i;
	}
	s->world = n;
	s->net = parent->net;
	s->ctx = ctx;
	s->nstreams = parent->nstreams;
	s->timeout = parent->timeout;
	s->spin_us = parent->spin_us;
	s->spin_yield = parent->spin_yield;
	s->opcode = -1;
	s->dtype = -1;
	s->net->nsubs++;
	if (comm_fr_group(s) < 0) {
		comm_close_sub(s);
		comm_fail(parent, COMM_ERR_RUNTIME, "out of memory");
		return -1;
	}
	if (comm_host_sub(s) < 0) {
		comm_close_sub(s);
		return -1;
	}
	*out = s;
	return 0;
}

int
comm_split(struct comm *parent, int color, int key, struct comm **sub,
    char *err, size_t errlen)
{
	struct comm *net = parent->net;
	int32_t mine[3], *all = NULL;
	struct member *m = NULL;
	uint32_t ctx = 0;
	int i, n = 0, w = parent->world;

	*sub = NULL;
	if (split_begin(parent) < 0)
		goto fail;
	all = malloc((size_t)w * sizeof mine);
	m = malloc((size_t)w * sizeof *m);
	if (!all || !m) {
		comm_fail(parent, COMM_ERR_RUNTIME, "out of memory");
		goto fail;
	}
	/* The new group's id: above every id any member has used, so no two
	 * groups sharing a pair of ranks ever share an id. Groups made by one
	 * split share it, but they have no rank in common. */
	mine[0] = color < 0 ? COMM_UNDEFINED : color;
	mine[1] = key;
	mine[2] = (int32_t)net->next_ctx;
	/* The flat model's choice: AUTO could be hier, which splits. */
	if (coll_allgather(parent, mine, all, 3, DT_I32, coll_auto(COLL_KIND_ALLGATHER,
	    (size_t)w * sizeof mine, w)) < 0)
		goto fail;
	for (i = 0; i < w; i++)
		if ((uint32_t)all[3 * i + 2] > ctx)
			ctx = (uint32_t)all[3 * i + 2];
	net->next_ctx = ctx + 1;
	for (i = 0; color >= 0 && i < w; i++)
		if (all[3 * i] == color)
			m[n++] = (struct member){ all[3 * i + 1], i };
	qsort(m, (size_t)n, sizeof *m, member_cmp);
	if (color >= 0 && split_new(parent, ctx, m, n, sub) < 0)
		goto fail;
	free(all);
	free(m);
	return 0;
fail:
	free(all);
	free(m);
	snprintf(err, errlen, "%s", comm_error(parent));
	return -1;
}

void
comm_close_sub(struct comm *c)
{
	struct comm *net = c->net;

	comm_free_queues(c);
	free(c->map);
	free(c->host);
	free(c);
	/* With no sub-group left and nothing half received, the group goes
	 * back to reading straight into posted buffers. */
	if (--net->nsubs == 0 && net->split && !net_busy(net))
		net->split = 0;
}

int
comm_sub_make(struct comm *net, uint32_t ctx, const int *ranks, int n,
    struct comm **out)
{
	struct member *m = malloc((size_t)n * sizeof *m);
	int i, rc;

	if (m == NULL) {
		comm_fail(net, COMM_ERR_RUNTIME, "out of memory");
		return -1;
	}
	for (i = 0; i < n; i++)
		m[i] = (struct member){ i, ranks[i] };
	if (net->next_ctx <= ctx)
		net->next_ctx = ctx + 1;
	rc = split_begin(net) < 0 ? -1 : split_new(net, ctx, m, n, out);
	free(m);
	return rc;
}
