/* collcli_plan: what an item becomes: output shapes, the blocks each
 * kind cuts tensors into, and the buckets that fuse tensors of one dtype
 * into one collective. */
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "prog/collcli_int.h"

/* ---- the kinds' shapes: blocks, slices, sizes ---- */

int
collcli_inplace(const struct cc_run *r)
{
	return r->o->kind == COLL_KIND_ALLREDUCE || r->o->kind == COLL_KIND_BROADCAST;
}

int
collcli_send_blocks(const struct cc_run *r)
{
	return r->o->kind == COLL_KIND_REDUCE_SCATTER ||
	    r->o->kind == COLL_KIND_ALLTOALL ? r->world : 1;
}

int
collcli_recv_blocks(const struct cc_run *r)
{
	return r->o->kind == COLL_KIND_ALLGATHER ||
	    r->o->kind == COLL_KIND_ALLTOALL ? r->world : 1;
}

/* The dimension send (or receive) blocks are cut along, -1 for whole. */
int
collcli_send_dim(const struct cc_run *r, const struct tensor *t)
{
	if (r->o->kind == COLL_KIND_REDUCE_SCATTER)
		return 0;
	return r->o->kind == COLL_KIND_ALLTOALL ?
	    tensor_dim_norm(r->o->sdim, t->ndim) : -1;
}

int
collcli_recv_dim(const struct cc_run *r, const struct tensor *t)
{
	if (r->o->kind == COLL_KIND_ALLGATHER)
		return 0;
	return r->o->kind == COLL_KIND_ALLTOALL ?
	    tensor_dim_norm(r->o->gdim, t->ndim) : -1;
}

struct tensor_slice
collcli_send_slice(const struct cc_run *r, const struct cc_plan *p, size_t i,
    int b)
{
	const struct tensor *t = p->in ? &p->in->items[i] : &p->out.items[i];
	int d = collcli_send_dim(r, t);
	int64_t len = d < 0 ? 0 : t->shape[d] / r->world;

	if (r->counts)
		return tensor_slice_of(t, 0, collcli_counts_start(r, r->rank, b),
		    collcli_counts_len(r, r->rank, b));
	return tensor_slice_of(t, d, b * len, len);
}

struct tensor_slice
collcli_recv_slice(const struct cc_run *r, const struct cc_plan *p, size_t i,
    int j)
{
	const struct tensor *t = &p->out.items[i];
	int d = collcli_recv_dim(r, t), q;
	int64_t start = 0, len;
	size_t n = p->out.count;

	if (d < 0)
		return tensor_slice_of(t, d, 0, 0);
	if (r->o->kind == COLL_KIND_ALLGATHER) {
		for (q = 0; q < j; q++)
			start += p->rows[(size_t)q * n + i];
		len = p->rows[(size_t)j * n + i];
	} else if (r->counts) {
		for (q = 0; q < j; q++)
			start += collcli_counts_len(r, q, r->rank);
		len = collcli_counts_len(r, j, r->rank);
	} else {
		len = t->shape[d] / r->world;
		start = j * len;
	}
	return tensor_slice_of(t, d, start, len);
}

/* ---- the plan: output tensors ---- */

static int
out_shape(struct cc_run *r, const struct cc_plan *p, size_t i, int64_t *sh)
{
	const struct tensor *t = &p->in->items[i];
	int w = r->world, q, sd, gd;

	memcpy(sh, t->shape, sizeof t->shape);
	if (r->o->kind == COLL_KIND_ALLGATHER) {
		for (sh[0] = 0, q = 0; q < w; q++)
			sh[0] += p->rows[(size_t)q * p->in->count + i];
	} else if (r->o->kind == COLL_KIND_REDUCE_SCATTER) {
		if (t->ndim < 1 || t->shape[0] % w)
			return collcli_fail(r, CLI_EXIT_DATA, "rank %d: %s: %lld rows are not "
			    "divisible by the world size %d", r->rank, collcli_tname(t),
			    t->ndim ? (long long)t->shape[0] : 0LL, w);
		sh[0] /= w;
	} else if (r->counts) {
		sh[0] = collcli_counts_received(r, r->rank);	/* rows checked */
	} else if (r->o->kind == COLL_KIND_ALLTOALL) {
		sd = collcli_send_dim(r, t), gd = collcli_recv_dim(r, t);
		if (sd < 0 || sd >= t->ndim || gd < 0 || gd >= t->ndim)
			return collcli_fail(r, CLI_EXIT_DATA, "rank %d: %s has %d dimensions: "
			    "--scatter-dim %d or --gather-dim %d is out of range",
			    r->rank, collcli_tname(t), t->ndim, r->o->sdim, r->o->gdim);
		if (t->shape[sd] % w)
			return collcli_fail(r, CLI_EXIT_DATA, "rank %d: %s: size %lld of dimension "
			    "%d is not divisible by the world size %d", r->rank,
			    collcli_tname(t), (long long)t->shape[sd], sd, w);
		sh[sd] /= w;
		sh[gd] *= w;
	}
	return 0;
}

int
collcli_plan_outputs(struct cc_run *r, struct cc_plan *p)
{
	int64_t sh[TENSOR_MAX_DIM];
	struct tensor t;
	char err[COLLX_ERRLEN];
	size_t i;

	p->out.format = p->in->format;
	for (i = 0; i < p->in->count; i++) {
		if (out_shape(r, p, i, sh) < 0)
			return -1;
		if (tensor_init(&t, p->in->items[i].dtype, p->in->items[i].ndim, sh,
		    err, sizeof err) < 0)
			return collcli_fail(r, CLI_EXIT_RUNTIME, "rank %d: %s", r->rank, err);
		if (tensor_set_add(&p->out, p->in->items[i].name, &t, err,
		    sizeof err) < 0) {
			tensor_free(&t);
			return collcli_fail(r, CLI_EXIT_RUNTIME, "rank %d: %s", r->rank, err);
		}
	}
	for (i = 0; i < p->in->nmeta; i++)
		if (tensor_set_meta_put(&p->out, p->in->meta[i].key,
		    p->in->meta[i].value, err, sizeof err) < 0)
			return collcli_fail(r, CLI_EXIT_RUNTIME, "rank %d: %s", r->rank, err);
	return 0;
}

/* ---- buckets ---- */

/* The collective's size for tensor i: allgather the gathered whole,
 * reduce-scatter the whole input, alltoallv what all ranks send (the
 * same on every rank, so they fuse alike), the rest the tensor
 * (nccl-tests). */
static size_t
tensor_bytes(const struct cc_run *r, const struct cc_plan *p, size_t i)
{
	const struct tensor *t = &p->out.items[i];
	size_t b = tensor_nbytes(t), row = dtype_size(t->dtype);

	if (r->counts) {
		for (int d = 1; d < t->ndim; d++)
			row *= (size_t)t->shape[d];
		for (int q = 0; q < r->world; q++)
			b = (q ? b : 0) + (size_t)collcli_counts_sent(r, q) * row;
	}
	return r->o->kind == COLL_KIND_REDUCE_SCATTER ? b * (size_t)r->world : b;
}

/* Tensors of one dtype, in name order, fused up to the bucket size; a
 * tensor larger than it goes alone. Empty tensors need no collective. */
static struct cc_bucket *
plan_buckets(struct cc_run *r, const struct cc_plan *p, size_t *nb)
{
	size_t n = p->out.count, i, bytes, k;
	struct cc_bucket *b = calloc(n ? n : 1, sizeof *b);
	long open[DT_COUNT];
	enum dtype dt;
	size_t *idx;

	*nb = 0;
	if (b == NULL) {
		collcli_no_memory(r);
		return NULL;
	}

	for (i = 0; i < DT_COUNT; i++)
		open[i] = -1;
	*nb = 0;
	for (i = 0; i < n; i++) {
		if ((bytes = tensor_bytes(r, p, i)) == 0)
			continue;
		dt = p->out.items[i].dtype;
		if (open[dt] < 0 || b[open[dt]].bytes + bytes > r->o->bucket) {
			k = (*nb)++;
			b[k].dt = dt;
			open[dt] = (long)k;
		}
		k = (size_t)open[dt];
		if ((b[k].n & (b[k].n - 1)) == 0) {
			idx = realloc(b[k].idx, (b[k].n ? 2 * b[k].n : 1) * sizeof *idx);
			if (idx == NULL) {
				collcli_buckets_free(b, *nb);
				collcli_no_memory(r);
				return NULL;
			}
			b[k].idx = idx;
		}
		b[k].idx[b[k].n++] = i;
		b[k].bytes += bytes;
		if (bytes > r->o->bucket)
			open[dt] = -1;
	}
	return b;
}

/* Block after block, each tensor's part of it: input into b->send. */
void
collcli_bucket_pack(const struct cc_run *r, const struct cc_plan *p, struct cc_bucket *b)
{
	size_t esz = dtype_size(b->dt), i;
	char *at = b->send;
	struct tensor_slice s;
	int blk;

	for (blk = 0; blk < collcli_send_blocks(r); blk++)
		for (i = 0; i < b->n; i++) {
			s = collcli_send_slice(r, p, b->idx[i], blk);
			tensor_slice_copy(&p->in->items[b->idx[i]], &s, at, 1);
			at += s.count * esz;
		}
}

void
collcli_bucket_unpack(const struct cc_run *r, const struct cc_plan *p, struct cc_bucket *b)
{
	size_t esz = dtype_size(b->dt), i;
	char *at = b->recv;
	struct tensor_slice s;
	int blk;

	for (blk = 0; blk < collcli_recv_blocks(r); blk++)
		for (i = 0; i < b->n; i++) {
			s = collcli_recv_slice(r, p, b->idx[i], blk);
			tensor_slice_copy(&p->out.items[b->idx[i]], &s, at, 0);
			at += s.count * esz;
		}
}

/* Counts, algorithm and buffers; a lone tensor cut along dimension 0 (or
 * not at all) is its own buffer, no copy needed. */
static int
bucket_setup(struct cc_run *r, const struct cc_plan *p, struct cc_bucket *b)
{
	size_t esz = dtype_size(b->dt), rtotal = 0, i;
	struct tensor *in = p->in ? &p->in->items[b->idx[0]] : NULL;
	struct tensor *out = &p->out.items[b->idx[0]];
	int j, lone = b->n == 1;

	if ((b->rcounts = calloc((size_t)r->world, sizeof *b->rcounts)) == NULL ||
	    (b->scounts = calloc((size_t)r->world, sizeof *b->scounts)) == NULL)
		return collcli_no_memory(r);
	for (i = 0; i < b->n; i++) {
		b->scount += collcli_send_slice(r, p, b->idx[i], 0).count;
		for (j = 0; j < collcli_send_blocks(r); j++)
			b->scounts[j] += collcli_send_slice(r, p, b->idx[i], j).count;
		for (j = 0; j < collcli_recv_blocks(r); j++)
			b->rcounts[j] += collcli_recv_slice(r, p, b->idx[i], j).count;
	}
	for (j = 0; j < collcli_recv_blocks(r); j++)
		rtotal += b->rcounts[j];
	for (j = 0; j < collcli_send_blocks(r); j++)
		b->stotal += b->scounts[j];
	b->algo = r->o->algo != COLL_AUTO ? r->o->algo :
	    coll_auto_group(r->comm, collcli_coll_kind(r->o), b->bytes);
	b->own_recv = !lone || collcli_recv_dim(r, out) > 0;
	b->recv = b->own_recv ? calloc(rtotal ? rtotal : 1, esz) : out->data;
	if (b->recv == NULL)
		return collcli_no_memory(r);
	if (collcli_inplace(r)) {
		b->send = b->recv;
		return 0;
	}
	b->own_send = !lone || collcli_send_dim(r, in) > 0;
	b->send = b->own_send ? calloc(b->stotal + 1, esz) : in->data;
	if (b->send == NULL)
		return collcli_no_memory(r);
	if (b->own_send)
		collcli_bucket_pack(r, p, b);
	return 0;
}

int
collcli_bucket_run(const struct cc_run *r, struct cc_bucket *b)
{
	struct comm *c = r->comm;

	switch (r->o->kind) {
	case COLL_KIND_ALLREDUCE:
		return coll_allreduce(c, b->send, b->scount, b->dt, r->o->op, b->algo);
	case COLL_KIND_BROADCAST:
		return coll_broadcast(c, b->send, b->scount, b->dt, r->o->root, b->algo);
	case COLL_KIND_ALLGATHER:
		return coll_allgatherv(c, b->send, b->recv, b->rcounts, b->dt, b->algo);
	case COLL_KIND_REDUCE_SCATTER:
		return coll_reduce_scatter(c, b->send, b->recv, b->rcounts[0], b->dt,
		    r->o->op, b->algo);
	default:
		if (r->counts)
			return coll_alltoallv(c, b->send, b->scounts, b->recv,
			    b->rcounts, b->dt, b->algo);
		return coll_alltoall(c, b->send, b->recv, b->scount, b->dt, b->algo);
	}
}

void
collcli_buckets_free(struct cc_bucket *b, size_t nb)
{
	size_t i;

	for (i = 0; b != NULL && i < nb; i++) {
		free(b[i].idx);
		free(b[i].rcounts);
		free(b[i].scounts);
		if (b[i].own_send && b[i].send != b[i].recv)
			free(b[i].send);
		if (b[i].own_recv)
			free(b[i].recv);
	}
	free(b);
}

/* The buckets of plan p, each set up, or NULL (why in r). */
struct cc_bucket *
collcli_buckets(struct cc_run *r, const struct cc_plan *p, size_t *nb)
{
	struct cc_bucket *b = plan_buckets(r, p, nb);
	size_t i;

	for (i = 0; b != NULL && i < *nb; i++)
		if (bucket_setup(r, p, &b[i]) < 0) {
			collcli_buckets_free(b, *nb);
			return NULL;
		}
	return b;
}

