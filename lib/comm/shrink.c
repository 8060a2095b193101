/*
 * shrink: the group that goes on after ranks died (comm_shrink). The
 * transport's first failure sticks, and every rank that fails tells its
 * peers with an abort frame where its next message header would go (the
 * stripe being sent finished with zeros first; abort.c). So to go on over
 * the same links, each survivor fails too (its frames out), then reads
 * every peer's stream up to that peer's frame, skipping whole messages:
 * each stream is then at a message boundary both ways, and a peer whose
 * frame does not come (its connection ended, or the timeout passed) is
 * gone. With the failure cleared, the survivors agree on who is left:
 * rounds in which every member sends its view (a byte per rank, and the
 * lowest group id it has not used) to every other, each taking the
 * intersection, until a round in which every view a rank receives equals
 * its own. A death during the rounds fails them; the rank starts over,
 * its frames out again, the streams read to the peers' next frames. The
 * group is then a sub-group of the survivors, as comm_split makes one.
 */
#include "comm/comm_impl.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tensor/dtype.h"

#define SHRINK_OPCODE 0x5348	/* "SH" */
#define SHRINK_TAG 0x5348
#define SHRINK_EPOCHS 8		/* starts over at most this often */

/* Only TCP links, one stream a peer: their bytes can be read up to a
 * frame and skipped; shared memory's rings cannot be. */
static int
shrinkable(const struct comm *net, char *err, size_t errlen)
{
	int p;

	if (net->world > 1 && net->nstreams != 1)
		return cli_fail(err, errlen, "comm_shrink: the group has %d "
		    "streams a peer (one interface only)", net->nstreams);
	for (p = 0; p < net->world; p++)
		if (p != net->rank && !net->gone[p] &&
		    net->peers[p].st[0].rx != NULL)
			return cli_fail(err, errlen, "comm_shrink: rank %d is "
			    "reached through shared memory; open the group "
			    "with no_shm (COLLX_SHM=0)", p);
	return 0;
}

/* This rank's frames out (failing now when it had not failed, so that
 * its peers learn at once), then every peer's read up to its own before
 * deadline: view[p] 1 for this rank and each peer whose frame came. */
static void
resync(struct comm *net, uint8_t *view, double deadline)
{
	struct comm_hdr f;
	int p;

	if (net->kind == COMM_ERR_NONE)
		comm_fail(net, COMM_ERR_RUNTIME, "comm_shrink: agreeing on "
		    "the group");
	if (!net->aborted) {
		comm_cause_set(net, net->rank, COMM_WHY_LOCAL, 0);
		comm_abort_send(net);
	}
	for (p = 0; p < net->world; p++)
		view[p] = p == net->rank || (!net->gone[p] &&
		    (net->peers[p].abort_in ||
		    comm_abort_find(net, p, 0, deadline, &f)));
}

void
comm_link_clear(struct comm *net, int p)
{
	struct comm_stream *st = &net->peers[p].st[0];

	st->sq_tail = &st->sq;
	st->rq_tail = &st->rq;
	st->ux_tail = &st->ux;
	st->indone = 0;
	net->peers[p].pending = 0;
	net->peers[p].abort_in = 0;
}

/* The failure cleared, the queues dropped, the peers not in view gone
 * for good (their connections closed). */
static void
reset(struct comm *net, const uint8_t *view)
{
	struct comm_stream *st;
	int p;

	coll_hier_free(net);
	comm_free_queues(net);
	for (p = 0; p < net->world; p++) {
		comm_link_clear(net, p);
		if (view[p] || net->gone[p])
			continue;
		st = &net->peers[p].st[0];
		net->gone[p] = 1;
		if (st->fd >= 0)
			close(st->fd);
		st->fd = -1;
	}
	net->kind = COMM_ERR_NONE;
	net->err[0] = '\0';
	memset(&net->cause, 0, sizeof net->cause);
	net->aborted = 0;
	net->seq = 0;
	net->opname[0] = net->step[0] = '\0';
}

/* Rounds of views until one where all agree: 0 with view and *ctx the
 * group's, or -1 when a round failed (comm_error(net)). */
static int
rounds(struct comm *net, uint8_t *view, uint32_t *ctx)
{
	int w = net->world, me = net->rank, p, k, r, same = 0;
	size_t len = (size_t)w + 4;
	uint8_t *mine = malloc(len), *got = malloc(len * (size_t)w);
	struct comm_req *req = calloc((size_t)w * 2, sizeof *req);
	uint32_t theirs;

	if (mine == NULL || got == NULL || req == NULL) {
		comm_fail(net, COMM_ERR_RUNTIME, "out of memory");
		goto out;
	}
	for (r = 0; r <= w && !same; r++) {
		memcpy(mine, view, (size_t)w);
		cli_le_put(mine + w, *ctx, 4);
		comm_op_begin(net, SHRINK_OPCODE, "shrink", DT_U8, (uint64_t)r);
		comm_set_step(net, "agreement round %d", r);
		for (p = k = 0; p < w; p++) {
			if (p == me || !view[p])
				continue;
			if (comm_irecv(net, p, SHRINK_TAG, got + len * p, len,
			    &req[k++]) < 0 || comm_isend(net, p, SHRINK_TAG,
			    mine, len, &req[k++]) < 0)
				goto out;
		}
		if (comm_waitall(net, req, k) < 0)
			goto out;
		same = 1;
		for (p = 0; p < w; p++) {
			if (p == me || !mine[p])
				continue;
			same &= memcmp(got + len * p, mine, (size_t)w) == 0;
			for (k = 0; k < w; k++)
				view[k] &= got[len * p + k];
			theirs = (uint32_t)cli_le_get(got + len * p + w, 4);
			*ctx = theirs > *ctx ? theirs : *ctx;
		}
	}
	if (!same)
		comm_fail(net, COMM_ERR_RUNTIME, "comm_shrink: no agreement "
		    "in %d rounds", w + 1);
out:
	free(mine);
	free(got);
	free(req);
	return same ? 0 : -1;
}

int
comm_shrink(struct comm *c, struct comm **sub, char *err, size_t errlen)
{
	struct comm *net = c->net;
	int w = net->world, *ranks = NULL, n = 0, p, epoch, rc = -1;
	uint8_t *view = calloc((size_t)w, 1);
	uint32_t ctx;

	*sub = NULL;
	if (net->gone == NULL)
		net->gone = calloc((size_t)w, sizeof *net->gone);
	ranks = calloc((size_t)w, sizeof *ranks);
	if (view == NULL || net->gone == NULL || ranks == NULL) {
		cli_fail(err, errlen, "comm_shrink: out of memory");
		goto out;
	}
	if (shrinkable(net, err, errlen) < 0)
		goto out;
	for (epoch = 0; epoch < SHRINK_EPOCHS; epoch++) {
		/* a live peer may be in a wait of its own on a stopped rank,
		 * failing (and sending its frame) only at that wait's end */
		resync(net, view, cli_now() + 2 * net->timeout + 1);
		reset(net, view);
		ctx = net->next_ctx;
		if (rounds(net, view, &ctx) == 0)
			break;
	}
	if (epoch == SHRINK_EPOCHS) {
		cli_fail(err, errlen, "%s", comm_error(net));
		goto out;
	}
	for (p = 0; p < w; p++)
		if (view[p])
			ranks[n++] = p;
	if (comm_sub_make(net, ctx, ranks, n, sub) < 0)
		cli_fail(err, errlen, "%s", comm_error(net));
	else
		rc = 0;
out:
	free(view);
	free(ranks);
	return rc;
}

int
comm_world_rank(const struct comm *c, int r)
{
	return comm_net_rank(c, r);
}
