/* test_par_dp: data parallelism in one process and over forked ranks.
 * Gradient buckets: the boundaries of a hand-laid mlp stack, and on a gpt
 * the rules they follow (one backward stage a bucket, within the size
 * unless one tensor is bigger, as full as the size allows). The overlap
 * thread: each bucket posted once per step, never before the backward
 * stage completing it, in the order fixed before training. ZeRO's slices
 * against hand cases and as a partition. Training: overlapped, ZeRO-1 and
 * ZeRO-2 runs against plain data parallelism (bit for bit on 2 ranks,
 * where every gradient sum is one addition; overlap bit for bit on any
 * world), plain runs against one process, and every rank's memory figures
 * against their closed forms. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "par/dp_int.h"
#include "par_world.h"
#include "unit.h"

/* An mlp stack 6 -> 5 -> 4, then 4 -> 5 -> 4 twice. Its tensors, in
 * name order (fc1.bias, fc1.weight, fc2.bias, fc2.weight), hold 5, 30, 4
 * and 20 floats in layer 0, 5, 20, 4 and 20 in layers 1 and 2: offsets
 * 0 5 35 39 | 59 64 84 88 | 108 113 133 137, 157 floats. Layer n's
 * gradients are complete after backward stage 2 - n. */
static const struct nn_dims mlp3 = { .arch = NN_MLP, .d_in = 6,
	.d_hidden = 5, .d_out = 4, .layers = 3 };
#define MLP3_N 157

static void
print_sizes(const char *what, const size_t *v, int n)
{
	printf("#   %s:", what);
	for (int i = 0; i < n; i++)
		printf(" %zu", v[i]);
	printf("\n");
}

/* ---- buckets ---------------------------------------------------------- */

static void
buckets_mlp(size_t bytes, const size_t *want, int nwant)
{
	struct nn_model m;
	struct dp_cfg cfg = { .dpo.bucket_bytes = bytes };
	char e[256], what[128];
	struct dp_run r = { .m = &m, .cfg = &cfg, .err = e, .errlen = sizeof e };
	int ok;

	if (!UNIT_OK(par_model(&m, &mlp3, 3) == 0, "mlp stack loads"))
		return;
	ok = dp_buckets_make(&r) == 0 && r.nbucket == nwant - 1 &&
	    memcmp(r.bucket, want, (size_t)nwant * sizeof(size_t)) == 0;
	snprintf(what, sizeof what, "buckets of %zu bytes over the mlp stack: "
	    "the hand-derived boundaries", bytes);
	if (!UNIT_OK(ok, what) && r.bucket != NULL)
		print_sizes("got", r.bucket, r.nbucket + 1);
	free(r.bucket);
	free(r.ready);
	nn_model_free(&m);
}

/* The backward stage after which a gpt tensor's gradient is complete
 * (nn.h): the final LayerNorm first, then from the last block down each
 * block's mlp.* and then the rest of it, the embeddings last. */
static int
gpt_stage(const char *name, int L)
{
	int n;

	if (strncmp(name, "lnf.", 4) == 0)
		return 0;
	if (sscanf(name, "layers.%d.", &n) == 1)
		return 2 * (L - 1 - n) + (strstr(name, ".mlp.") ? 1 : 2);
	return 2 * L + 1;
}

/* Buckets cover the vector at tensor boundaries, hold one stage's
 * tensors, stay within lim floats unless they hold one tensor, and a
 * bucket followed by one of its stage could not have taken that one's
 * first tensor. */
static int
buckets_follow_rules(const struct nn_model *m, const size_t *b, int nb,
    size_t lim, int L)
{
	size_t t = 0;
	int i, stage = -1;

	if (b[0] != 0 || b[nb] != m->nparams)
		return 0;
	for (i = 0; i < nb; i++) {
		size_t first = t, ntens = 0;

		if (t == m->ntensors || m->table[t].offset != b[i])
			return 0;
		stage = gpt_stage(m->table[t].name, L);
		for (; t < m->ntensors && m->table[t].offset < b[i + 1]; t++) {
			if (gpt_stage(m->table[t].name, L) != stage ||
			    m->table[t].offset + m->table[t].count > b[i + 1])
				return 0;
			ntens++;
		}
		if (b[i + 1] - b[i] > lim && ntens > 1)
			return 0;
		if (t < m->ntensors && gpt_stage(m->table[t].name, L) ==
		    stage && m->table[t].offset + m->table[t].count -
		    m->table[first].offset <= lim)
			return 0;
	}
	return t == m->ntensors;
}

static void
buckets_gpt(void)
{
	static const size_t sizes[] = { 0, 64, 1000, 4096, 1 << 20 };
	const struct nn_dims d = { .arch = NN_GPT, .vocab = 13, .d_model = 8,
	    .layers = 3, .heads = 2, .seq = 4 };
	struct nn_model m;
	char e[256], what[128];

	if (!UNIT_OK(par_model(&m, &d, 3) == 0, "gpt loads"))
		return;
	for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
		struct dp_cfg cfg = { .dpo.bucket_bytes = sizes[k] };
		struct dp_run r = { .m = &m, .cfg = &cfg, .err = e,
		    .errlen = sizeof e };
		int ok = dp_buckets_make(&r) == 0 &&
		    buckets_follow_rules(&m, r.bucket, r.nbucket, sizes[k] / 4,
		    d.layers);

		snprintf(what, sizeof what, "gpt buckets of %zu bytes: one "
		    "stage each, within the size, as full as it allows",
		    sizes[k]);
		if (!UNIT_OK(ok, what) && r.bucket != NULL)
			print_sizes("got", r.bucket, r.nbucket + 1);
		free(r.bucket);
		free(r.ready);
	}
	nn_model_free(&m);
}

/* ---- the overlap thread ------------------------------------------------ */

static atomic_int ovl_now;		/* backward stages done, the last */
static int ovl_seen[3][16], ovl_nseen, ovl_early;
static int ovl_step;
static const int *ovl_ready;		/* completing stage of each bucket */

static int
ovl_record(void *ctx, int b)
{
	(void)ctx;
	if (ovl_ready[b] > atomic_load(&ovl_now))
		ovl_early++;
	if (ovl_nseen < 16)
		ovl_seen[ovl_step][ovl_nseen] = b;
	ovl_nseen++;
	return 0;
}

/* The 100-byte buckets of the mlp stack (25 floats), in a thread beside a
 * backward pass that says when each of its three stages is done. */
static void
overlap_order(void)
{
	/* buckets [0,5) [5,35) [35,59) of layer 0, [59,84) [84,108) of
	 * layer 1, [108,133) [133,157) of layer 2 */
	static const int ready[] = { 2, 2, 2, 1, 1, 0, 0 };
	static const int order[] = { 6, 5, 4, 3, 2, 1, 0 };
	struct nn_model m;
	struct dp_cfg cfg = { .dpo.bucket_bytes = 100 };
	char e[256];
	struct dp_run r = { .m = &m, .cfg = &cfg, .err = e, .errlen = sizeof e };
	double busy;
	int ok = 1, once = 1;

	if (!UNIT_OK(par_model(&m, &mlp3, 3) == 0, "mlp stack loads"))
		return;
	ovl_ready = ready;
	if (!UNIT_OK(dp_buckets_make(&r) == 0 && r.nbucket == 7 &&
	    memcmp(r.ready, ready, sizeof ready) == 0, "buckets' completing "
	    "stages") || !UNIT_OK((r.ovl = dp_ovl_new(r.nbucket, r.ready,
	    ovl_record, NULL, NULL, e, sizeof e)) != NULL,
	    "overlap thread starts"))
		goto out;
	for (ovl_step = 0; ovl_step < 3; ovl_step++) {
		ovl_nseen = 0;
		dp_ovl_begin(r.ovl);
		for (int s = 0; s < 3; s++) {
			atomic_store(&ovl_now, s);
			dp_ovl_stage(r.ovl, s);
			usleep(2000);	/* the thread runs what was posted */
		}
		ok &= dp_ovl_wait(r.ovl, &busy) == 0;
		once &= ovl_nseen == 7;
		ok &= memcmp(ovl_seen[ovl_step], order, sizeof order) == 0;
	}
	UNIT_OK(once, "overlap: every bucket synced once per step");
	UNIT_OK(ovl_early == 0, "overlap: no bucket synced before the backward "
	    "stage completing it");
	UNIT_OK(ok, "overlap: buckets go by completing stage, the later "
	    "first within one, the same every step");
out:
	dp_ovl_free(r.ovl);
	free(r.bucket);
	free(r.ready);
	nn_model_free(&m);
}

/* ---- ZeRO slices ------------------------------------------------------- */

static void
zero_slices(void)
{
	/* n floats over w ranks: chunks of ceil(n / w), the last ones short */
	static const struct {
		size_t n;
		int w;
		size_t off[4], len[4];
	} hand[] = {
		{ 10, 4, { 0, 3, 6, 9 }, { 3, 3, 3, 1 } },
		{ 12, 4, { 0, 3, 6, 9 }, { 3, 3, 3, 3 } },
		{ 2, 4, { 0, 1, 2, 2 }, { 1, 1, 0, 0 } },
		{ 7, 3, { 0, 3, 6 }, { 3, 3, 1 } },
		{ 1, 2, { 0, 1 }, { 1, 0 } },
	};
	size_t off, len;
	int ok = 1, part = 1;

	for (size_t k = 0; k < sizeof hand / sizeof hand[0]; k++) {
		for (int q = 0; q < hand[k].w; q++) {
			dp_zero_cut(hand[k].n, hand[k].w, q, &off, &len);
			ok &= off == hand[k].off[q] && len == hand[k].len[q];
		}
	}
	UNIT_OK(ok, "ZeRO slices: rank q owns the hand-derived part of a "
	    "bucket");
	for (size_t n = 0; n <= 40; n++)
		for (int w = 1; w <= 8; w++) {
			size_t at = 0, c = (n + (size_t)w - 1) / (size_t)w;

			for (int q = 0; q < w; q++) {
				dp_zero_cut(n, w, q, &off, &len);
				/* in rank order, adjacent, none over the
				 * chunk, only trailing ones shorter */
				part &= off == at && len <= c &&
				    (len == c || at + len == n);
				at += len;
			}
			part &= at == n;
		}
	UNIT_OK(part, "ZeRO slices of 0..40 floats over 1..8 ranks: in rank "
	    "order, covering the bucket once, the short ones last");
}

/* ---- ZeRO over flat ranges (dp_zero.c), on 3 ranks ---------------------- */

/* Three ranges of a vector of 16 floats, gaps at 7-8 and 15; over 3
 * ranks their slices are 3,3,1 / 2,2,1 / 1,0,0 floats. Rank q's gradient
 * j is (q+1)(j+1), so the sum is 6(j+1); SGD (lr 0.5, momentum 0.9, one
 * step: the buffer is the gradient) moves p[j] = 100 + j by 3(j+1). */
#define ZN 16
static const struct dp_range zrg[] = { { 0, 7 }, { 9, 5 }, { 14, 1 } };
/* range i's slice on rank q: zlen[i][q] floats from zoff[i][q] */
static const size_t zoff[3][3] = { { 0, 3, 6 }, { 0, 2, 4 }, { 0, 1, 1 } };
static const size_t zlen[3][3] = { { 3, 3, 1 }, { 2, 2, 1 }, { 1, 0, 0 } };
static const size_t zmine[3] = { 6, 5, 2 };	/* each rank's slice floats */

static int
in_ranges(size_t j)
{
	for (int i = 0; i < 3; i++)
		if (j >= zrg[i].off && j < zrg[i].off + zrg[i].len)
			return 1;
	return 0;
}

static int
zero_rank(struct comm *c, void *arg)
{
	int q = comm_rank(c), w = comm_size(c), ok;
	struct nn_optim_cfg oc;
	struct nn_optim opt[3];
	struct ckpt_piece pc[9];
	struct dp_wire wire;
	struct dp_zero z;
	float p[ZN], g[ZN];
	char e[256];

	(void)arg;
	nn_optim_defaults(&oc, NN_SGD);
	oc.lr = 0.5, oc.momentum = 0.9;
	for (int stage = 1; stage <= 2; stage++) {
		memset(opt, 0, sizeof(opt));
		for (size_t j = 0; j < ZN; j++)
			p[j] = 100.0f + (float)j, g[j] = (float)((q + 1) *
			    ((int)j + 1));
		if (dp_wire_init(&wire, DP_WIRE_F32, q, w, ZN, 7, e,
		    sizeof(e)) < 0 || dp_zero_init(&z, stage, c, &wire,
		    COLL_AUTO, zrg, 3, opt, &oc, "range", e, sizeof(e)) < 0)
			return !par_check(0, "ZeRO-%d init: %s", stage, e);
		for (int i = 0; i < 3; i++)
			if (dp_zero_reduce(&z, g, i) < 0)
				return !par_check(0, "reduce-scatter");
		dp_zero_step(&z, p, g, 1.0f);
		if (dp_zero_allgather(&z, p) < 0)
			return !par_check(0, "allgather");
		ok = 1;
		for (size_t j = 0; j < ZN; j++)
			ok &= p[j] == 100.0f + (float)j - (in_ranges(j) ?
			    3.0f * (float)(j + 1) : 0.0f);
		par_check(ok, "rank %d ZeRO-%d over ranges: every rank holds "
		    "the step of the summed gradients, the gaps untouched", q,
		    stage);
		/* stage 2 leaves the gradient vector as the rank made it */
		ok = 1;
		for (size_t j = 0; j < ZN && stage == 2; j++)
			ok &= g[j] == (float)((q + 1) * ((int)j + 1));
		par_check(ok && dp_zero_grad_bytes(&z, ZN) == (stage == 2 ?
		    zmine[q] : ZN) * sizeof(float), "rank %d ZeRO-%d: the "
		    "reduced gradients kept (%zu bytes)", q, stage,
		    dp_zero_grad_bytes(&z, ZN));
		/* the pieces: each rank's slice of each range */
		ok = dp_zero_pieces(&z, pc) == 9;
		for (int i = 0, k = 0; i < 3; i++)
			for (int r = 0; r < w; r++, k++)
				ok &= pc[k].rank == r && pc[k].off ==
				    zrg[i].off + zoff[i][r] && pc[k].len ==
				    zlen[i][r] && (pc[k].o != NULL) == (r == q);
		par_check(ok, "rank %d ZeRO-%d: checkpoint pieces are each "
		    "rank's slices, this rank's with its optimizer", q, stage);
		/* each rank's momentum slice is its slice of the sums */
		ok = 1;
		for (int i = 0; i < 3; i++) {
			ok &= opt[i].t == 1 && opt[i].count == zlen[i][q];
			for (size_t j = 0; j < opt[i].count; j++)
				ok &= opt[i].m[j] == 6.0f * (float)(zrg[i].off +
				    zoff[i][q] + j + 1);
		}
		par_check(ok, "rank %d ZeRO-%d: its momentum slice is the "
		    "summed gradients'", q, stage);
		dp_zero_free(&z);
		dp_wire_free(&wire);
		for (int i = 0; i < 3; i++)
			nn_optim_free(&opt[i]);
	}
	return 0;
}

/* ---- training over ranks ---------------------------------------------- */

#define NSAMP 12
#define BATCH 6
#define STEPS 5

/* Samples of exact small values, the same on every rank. */
static void
data_make(struct train_data *d)
{
	memset(d, 0, sizeof(*d));
	d->arch = NN_MLP;
	d->n = NSAMP;
	d->seq = 1;
	d->xrow = 6, d->yrow = 4;
	d->x = malloc(NSAMP * 6 * sizeof(float));
	d->y = malloc(NSAMP * 4 * sizeof(float));
	for (int i = 0; i < NSAMP * 6; i++)
		d->x[i] = (float)((i * 7) % 11 - 5) / 8;
	for (int i = 0; i < NSAMP * 4; i++)
		d->y[i] = (float)((i * 5) % 9 - 4) / 8;
}

struct result {
	float p[MLP3_N];
	double loss[STEPS];
	struct dp_mem mem;
};

static int
train(struct comm *c, enum nn_optim_kind opt, int zero, int overlap,
    struct result *res)
{
	struct dp_cfg cfg = { .batch = BATCH, .steps = STEPS, .sync =
	    DP_ALLREDUCE, .algo = COLL_RING, .dpo.bucket_bytes = 100, .dpo.zero = zero,
	    .dpo.overlap = overlap };
	struct train_data d;
	struct nn_model m;
	struct train_step *s = NULL;
	enum train_err kind;
	char e[COLLX_ERRLEN];
	int rc;

	nn_optim_defaults(&cfg.optim, opt);
	cfg.optim.lr = 0.05;
	if (opt == NN_SGD)
		cfg.optim.momentum = 0.9;
	data_make(&d);
	if (par_model(&m, &mlp3, 3) < 0) {
		train_data_free(&d);
		return par_check(0, "rank %d: model loads", comm_rank(c)) - 1;
	}
	rc = dp_train(&m, &d, c, &cfg, NULL, NULL, &res->mem, &s, &kind, e,
	    sizeof e);
	if (rc < 0)
		par_check(0, "rank %d: training (zero %d, overlap %d): %s",
		    comm_rank(c), zero, overlap, e);
	else {
		memcpy(res->p, m.params, sizeof res->p);
		for (int k = 0; k < STEPS; k++)
			res->loss[k] = s[k].loss;
	}
	free(s);
	nn_model_free(&m);
	train_data_free(&d);
	return rc;
}

static int
same_bits(const struct result *a, const struct result *b)
{
	return memcmp(a->p, b->p, sizeof a->p) == 0 &&
	    memcmp(a->loss, b->loss, sizeof a->loss) == 0;
}

static int
close_to(const struct result *a, const struct result *b)
{
	for (int i = 0; i < MLP3_N; i++)
		if (fabsf(a->p[i] - b->p[i]) > 1e-6f + 1e-5f * fabsf(b->p[i]))
			return 0;
	for (int k = 0; k < STEPS; k++)
		if (fabs(a->loss[k] - b->loss[k]) > 1e-6 + 1e-5 * b->loss[k])
			return 0;
	return 1;
}

/* This rank's memory against the closed forms: plain data parallelism
 * keeps the whole optimizer state and gradient vector; ZeRO the state of
 * its slices, ceil(n/W) floats of bucket n or fewer for the last ranks;
 * ZeRO-2 also only the reduced slices, as many floats, compact. */
static void
check_mem(const struct dp_mem *mem, int zero, int moments, int rank, int w)
{
	static const size_t bucket[] = { 5, 30, 24, 25, 24, 25, 24 };
	size_t optim = 0, grad;

	for (int i = 0; i < 7; i++) {
		size_t c = (bucket[i] + (size_t)w - 1) / (size_t)w;
		size_t a = (size_t)rank * c;

		optim += a >= bucket[i] ? 0 : bucket[i] - a < c ?
		    bucket[i] - a : c;
	}
	grad = optim;
	if (zero == 0)
		optim = MLP3_N;
	if (zero < 2)
		grad = MLP3_N;
	par_check(mem->optim_bytes == optim * moments * sizeof(float) &&
	    mem->grad_bytes == grad * sizeof(float), "W=%d rank %d ZeRO-%d "
	    "memory: %zu optimizer and %zu gradient bytes (closed form %zu, "
	    "%zu)",
	    w, rank, zero, mem->optim_bytes, mem->grad_bytes,
	    optim * moments * sizeof(float), grad * sizeof(float));
}

static const struct {
	int zero, overlap;
} variants[] = { { 0, 1 }, { 1, 0 }, { 2, 0 }, { 1, 1 }, { 2, 1 } };
#define NVARIANT (sizeof variants / sizeof variants[0])

/* One process training alone, for rank 0 to compare with. */
static int
train_alone(enum nn_optim_kind opt, struct result *res)
{
	struct comm_options o = { .rank = 0, .world = 1, .timeout = 20,
	    .job = "test_par alone" };
	struct comm *c;
	char e[256];
	int rc;

	if (comm_open(&c, &o, e, sizeof e) < 0)
		return par_check(0, "a group of one: %s", e) - 1;
	rc = train(c, opt, 0, 0, res);
	comm_close(c);
	return rc;
}

static int
dp_rank(struct comm *c, void *arg)
{
	static struct result plain, v, alone;
	static const char *oname[] = { "SGD", "AdamW" };
	int r = comm_rank(c), w = comm_size(c), bad = 0;

	(void)arg;
	for (int o = NN_SGD; o <= NN_ADAMW; o++) {
		int moments = o == NN_SGD ? 1 : 2;

		if (train(c, o, 0, 0, &plain) < 0)
			return 1;
		check_mem(&plain.mem, 0, moments, r, w);
		for (size_t k = 0; k < NVARIANT; k++) {
			int z = variants[k].zero, ov = variants[k].overlap;
			int exact = w == 2 || z == 0;

			if (train(c, o, z, ov, &v) < 0)
				return 1;
			if (ov == 0)
				check_mem(&v.mem, z, moments, r, w);
			/* ZeRO on 3 ranks adds in another order: SGD only,
			 * as AdamW's step divides by tiny moments */
			if (r != 0 || (!exact && o == NN_ADAMW))
				continue;
			bad += !par_check(exact ? same_bits(&v, &plain) :
			    close_to(&v, &plain), "W=%d %s, ZeRO-%d%s: the "
			    "parameters and losses of plain data parallelism%s",
			    w, oname[o], z, ov ? " overlapped" : "",
			    exact ? ", bit for bit" : " up to rounding");
		}
		if (r == 0 && o == NN_SGD) {
			if (train_alone(o, &alone) < 0)
				return 1;
			par_check(close_to(&plain, &alone), "W=%d %s: the "
			    "parameters and losses of one process up to "
			    "rounding", w, oname[o]);
		}
	}
	return bad != 0;
}

int
main(void)
{
	static const size_t whole[] = { 0, 59, 108, 157 };
	/* 25 floats: a new bucket where the next tensor would overflow it
	 * (at 5, 35, 84, 133) or a new layer starts (59, 108) */
	static const size_t b100[] = { 0, 5, 35, 59, 84, 108, 133, 157 };
	static const size_t each[] = { 0, 5, 35, 39, 59, 64, 84, 88, 108,
	    113, 133, 137, 157 };

	buckets_mlp(1 << 20, whole, 4);
	buckets_mlp(100, b100, 8);
	buckets_mlp(0, each, 13);
	buckets_gpt();
	overlap_order();
	zero_slices();
	par_world(3, "ZeRO over flat ranges on 3 ranks", zero_rank, NULL);
	par_world(2, "data parallel on 2 ranks", dp_rank, NULL);
	par_world(3, "data parallel on 3 ranks", dp_rank, NULL);
	return unit_done();
}
