/* tplayer: collx-tp's run: a layer split over ranks (lib/par/tp.c's
 * Megatron tensor parallelism or lib/par/ulysses.c's sequence
 * parallelism): its inputs, forward and backward with a timing row per
 * phase, --check against the serial layer, the outputs rank 0 writes; or
 * --train, full-batch SGD in the trainer shell. A program body. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "comm/coll.h"
#include "comm/comm.h"
#include "par/ckpt.h"
#include "par/cp_ring.h"
#include "prog/tplayer.h"
#include "tensor/tensor.h"

/* Loads a tensor file as f32 (bad input: exit 3). */
static void
load_f32(const struct tplayer_opts *o, const char *path, struct tensor *t)
{
	struct tensor raw = { 0 };
	char e[COLLX_ERRLEN];
	char *p = cli_subst(path, o->g.rank, o->g.world);

	if (tensor_load_one(p, &raw, e, sizeof e) < 0)	/* names p */
		cli_die_rank(CLI_EXIT_DATA, "%s", e);
	if (!dtype_is_float(raw.dtype))
		cli_die_rank(CLI_EXIT_DATA, "%s: %s is not a float type", p,
		    dtype_name(raw.dtype));
	if (tensor_cast(&raw, DT_F32, t, e, sizeof e) < 0)
		cli_die_rank(CLI_EXIT_DATA, "%s: %s", p, e);
	tensor_free(&raw);
	free(p);
}

/* The whole of a tensor shaped like ref but with last dimension last. */
static void
save_rows(const char *pattern, int rank, int world, const struct tensor *ref,
    int64_t last, const float *data)
{
	struct tensor t = { 0 };
	int64_t shape[TENSOR_MAX_DIM];
	char e[COLLX_ERRLEN], *p = cli_subst(pattern, rank, world);

	memcpy(shape, ref->shape, sizeof shape);
	shape[ref->ndim - 1] = last;
	if (tensor_init(&t, DT_F32, ref->ndim, shape, e, sizeof e) < 0)
		cli_die(CLI_EXIT_RUNTIME, "%s: %s", p, e);
	memcpy(t.data, data, tensor_nbytes(&t));
	if (tensor_save_one(p, &t, e, sizeof e) < 0)
		cli_die(CLI_EXIT_RUNTIME, "%s", e);
	tensor_free(&t);
	free(p);
}

static void
save_set(const char *pattern, int rank, int world, struct tensor_set *s,
    const struct tensor_set *meta_from)
{
	char e[COLLX_ERRLEN], *p = cli_subst(pattern, rank, world);

	s->format = TENSOR_SAFETENSORS;
	for (size_t i = 0; meta_from && i < meta_from->nmeta; i++)
		if (tensor_set_meta_put(s, meta_from->meta[i].key,
		    meta_from->meta[i].value, e, sizeof e) < 0)
			cli_die(CLI_EXIT_RUNTIME, "%s: %s", p, e);
	if (tensor_save(p, s, e, sizeof e) < 0)
		cli_die(CLI_EXIT_RUNTIME, "%s", e);
	free(p);
}

/* ---- timing --------------------------------------------------------------- */

/* The modes whose timing rows say how much communication was hidden. */
static int
has_hidden(const struct tplayer_opts *o)
{
	return o->cfg.mode == TP_MODE_RING || o->cfg.mode == TP_MODE_ZIGZAG ||
	    o->cfg.mode == TP_MODE_USP || o->cfg.mode == TP_MODE_SP ||
	    o->cfg.overlap;
}

/* A row per phase of the iteration's log, with the bytes this rank sent,
 * (has_hidden) the microseconds its transfers ran hidden behind compute
 * and exposed after it, and the phase's name. */
static void
timing_rows(struct trainer *t, const struct tp_log *l, int iter, int hidden)
{
	char extra[160];

	for (int i = 0; i < l->n; i++) {
		const struct tp_phase *p = &l->p[i];

		if (hidden)
			snprintf(extra, sizeof extra, "%llu,%.1f,%.1f,%s",
			    (unsigned long long)p->bytes, p->hidden * 1e6,
			    p->exposed * 1e6, p->name);
		else
			snprintf(extra, sizeof extra, "%llu,%s",
			    (unsigned long long)p->bytes, p->name);
		trainer_row(t, p->op, p->algo, dtype_name(p->dt), p->count,
		    p->count * dtype_size(p->dt), iter, p->seconds, extra);
	}
}

/* One stderr line: the iteration's time and its communication share. */
static void
report(const struct tp_log *l, int iter)
{
	double all = 0, comm = 0;
	unsigned long long bytes = 0;

	for (int i = 0; i < l->n; i++) {
		all += l->p[i].seconds;
		bytes += l->p[i].bytes;
		if (strcmp(l->p[i].op, "compute") != 0)
			comm += l->p[i].seconds;
	}
	fprintf(stderr, "%s: iter %d: %.3f ms, communication %.3f ms (%.0f%%), "
	    "%llu bytes sent\n", cli_progname, iter, all * 1e3, comm * 1e3,
	    all > 0 ? 100 * comm / all : 0.0, bytes);
}

/* ---- the run -------------------------------------------------------------- */

struct job {
	struct tplayer_opts *o;
	struct tensor_set w;	/* the weights file */
	struct tensor x, dy, yt;
	struct tp_model m;
	struct tp_run r;
	struct comm *c;
	struct tp_log log;
	struct trainer t;	/* the timing rows; --train's report */
	int rank, world;
	long first;		/* steps done before this run (--resume) */
	char err[COLLX_ERRLEN];
};

static void
load_inputs(struct job *j)
{
	struct tplayer_opts *o = j->o;
	char e[COLLX_ERRLEN], *p = cli_subst(o->ckpt.resume ? o->ckpt.resume :
	    o->c.model, j->rank, j->world);

	if (tensor_load(p, &j->w, e, sizeof e) < 0)	/* names p */
		cli_die_rank(CLI_EXIT_DATA, "%s", e);
	/* the checkpoint's step out of the metadata the output copies */
	if (o->ckpt.resume && ckpt_meta_take_step(&j->w, &j->first, e,
	    sizeof e) < 0)
		cli_die_rank(CLI_EXIT_DATA, "%s: %s", p, e);
	if (tp_model_load(&j->m, &o->cfg, &j->w, j->rank, j->world, j->err,
	    sizeof j->err) < 0)
		cli_die_rank(CLI_EXIT_DATA, "%s: %s", p, j->err);
	free(p);
	load_f32(o, o->input, &j->x);
	if (tp_input_check(&j->m, &j->x, j->err, sizeof j->err) < 0)
		cli_die_rank(CLI_EXIT_DATA, "%s: %s", o->input, j->err);
	if (o->dy)
		load_f32(o, o->dy, &j->dy);
	if (o->targets)
		load_f32(o, o->targets, &j->yt);
}

/* Y's element count, for DY and the targets. */
static void
check_like_y(const struct job *j, const struct tensor *t, const char *what)
{
	int64_t want = (int64_t)j->r.n * j->r.out;

	if (tensor_numel(t) != want)
		cli_die(CLI_EXIT_DATA, "%s: %lld elements, want %lld (the "
		    "shape of Y)", what, (long long)tensor_numel(t),
		    (long long)want);
}

static void
join_group(struct job *j)
{
	const struct tplayer_opts *o = j->o;
	const struct tp_cfg *c = &o->cfg;
	struct prog_job job;
	int code;

	if (c->mode == TP_MODE_SERIAL)
		return;
	prog_job_init(&job, "collx-tp");
	prog_job_add(&job, "--layer", "%s", tp_layer_name(c->layer));
	prog_job_add(&job, "--mode", "%s", tp_mode_name(c->mode));
	if (c->heads > 0)
		prog_job_add(&job, "--heads", "%d", c->heads);
	else
		prog_job_add(&job, "--heads", "from-the-model");
	prog_job_flag(&job, "--causal", c->causal);
	prog_job_add(&job, "--ulysses", "%d", c->ulysses);
	prog_job_add(&job, "--overlap", "%s", c->overlap ? "ring" : "none");
	prog_job_add(&job, "--norm", "%s", c->post_norm ? "post" : "pre");
	prog_job_add(&job, "--activation", "%s", nn_act_name(c->act));
	prog_job_flag(&job, "--local-output", c->local_output);
	prog_job_flag(&job, "--input-is-parallel", c->input_parallel);
	prog_job_flag(&job, "--backward", o->backward);
	/* these gather what every rank holds */
	prog_job_flag(&job, "--grad-weights", o->gw != NULL);
	prog_job_flag(&job, "--check", o->check);
	prog_job_flag(&job, "--trace", o->trace != NULL);
	prog_job_add(&job, "--iters", "%d", o->iters);
	prog_job_flag(&job, "--train", o->train);
	prog_job_add(&job, "--steps", "%ld", o->c.steps);
	prog_job_add(&job, "--lr", "%.10g", o->lr);
	trainer_declare_ckpt(&job, &o->ckpt, j->first);
	if (o->train)
		prog_job_flag(&job, "--output", o->c.out != NULL);
	if ((code = prog_join(&j->c, &o->g, &job, j->err, sizeof j->err)) != 0)
		cli_die(code, "%s", j->err);
}

static _Noreturn void
run_failed(const struct job *j)
{
	if (strncmp(j->err, "rank ", 5) == 0)
		cli_die(CLI_EXIT_RUNTIME, "%s", j->err);
	cli_die(CLI_EXIT_RUNTIME, "rank %d: %s", j->rank, j->err);
}

/* ---- --check: the serial layer on this rank ------------------------------- */

static int
close_enough(const char *what, const float *got, const float *want,
    size_t n, double rtol)
{
	double atol = rtol / 10;

	for (size_t i = 0; i < n; i++) {
		double d = (double)got[i] - want[i];
		if (!(d <= atol + rtol * (want[i] < 0 ? -want[i] : want[i]) &&
		    -d <= atol + rtol * (want[i] < 0 ? -want[i] : want[i]))) {
			fprintf(stderr, "%s: check: %s differs at element %zu: "
			    "%.9g, serial %.9g\n", cli_progname, what, i,
			    (double)got[i], (double)want[i]);
			return 0;
		}
	}
	return 1;
}

static int
check_sets(const struct tensor_set *got, const struct tensor_set *want,
    double rtol)
{
	int ok = 1;

	for (size_t i = 0; i < want->count; i++) {
		struct tensor *g = tensor_set_find(got, want->items[i].name);
		ok &= g != NULL && close_enough(want->items[i].name, g->data,
		    want->items[i].data, (size_t)tensor_numel(g), rtol);
	}
	return ok;
}

/* 1 when the parallel results (j->r, grads gs) match the serial layer's. */
static int
check_serial(struct job *j, const struct tensor_set *gs)
{
	struct tp_cfg cfg = j->o->cfg;
	struct tp_model m;
	struct tp_run r;
	struct tensor_set sg = { 0 };
	double rtol = j->o->rtol;
	char e[COLLX_ERRLEN];
	int ok;

	cfg.mode = TP_MODE_SERIAL;
	cfg.overlap = 0;
	if (tp_model_load(&m, &cfg, &j->w, 0, 1, e, sizeof e) < 0 ||
	    tp_run_init(&r, &m, NULL, NULL, &j->x, e, sizeof e) < 0 ||
	    tp_forward(&r, j->x.data, 1) < 0)
		cli_die(CLI_EXIT_RUNTIME, "check: %s", e);
	ok = close_enough("Y", j->r.y, r.y, (size_t)r.n * r.out, rtol);
	if (j->o->backward) {
		if (tp_backward(&r, j->dy.data) < 0 ||
		    tp_gather_set(&r, 1, &sg) < 0)
			cli_die(CLI_EXIT_RUNTIME, "check: %s", e);
		ok &= close_enough("DX", j->r.dx, r.dx, (size_t)r.n * r.in, rtol);
		ok &= check_sets(gs, &sg, rtol);
	}
	tensor_set_free(&sg);
	tp_run_free(&r);
	tp_model_free(&m);
	return ok;
}

/* ---- forward and backward ------------------------------------------------- */

static void
write_outputs(struct job *j, struct tensor_set *gs)
{
	struct tplayer_opts *o = j->o;

	if (o->c.out && o->cfg.local_output)
		save_rows(o->c.out, j->rank, j->world, &j->x,
		    j->m.out / j->m.shards, j->r.ylocal);
	if (j->rank != 0)
		return;
	if (o->c.out && !o->cfg.local_output)
		save_rows(o->c.out, j->rank, j->world, &j->x, j->r.out, j->r.y);
	if (o->dx)	/* whole, also when X is a shard (--input-is-parallel) */
		save_rows(o->dx, j->rank, j->world, &j->x, j->r.in, j->r.dx);
	if (o->gw)
		save_set(o->gw, j->rank, j->world, gs, NULL);
}

static void
run_layer(struct job *j)
{
	struct tplayer_opts *o = j->o;
	struct tensor_set gs = { 0 };

	for (int it = 0; it < o->iters; it++) {
		tp_log_start(&j->log, j->c);
		if (tp_forward(&j->r, j->x.data, 1) < 0)
			run_failed(j);
		if (o->backward && tp_backward(&j->r, j->dy.data) < 0)
			run_failed(j);
		timing_rows(&j->t, &j->log, it, has_hidden(o));
		if (j->rank == 0 && !cli_quiet && cli_verbose)
			report(&j->log, it);
	}
	if (o->backward && (o->gw || o->check)) {
		tp_log_start(&j->log, j->c);
		if (tp_gather_set(&j->r, 1, &gs) < 0)
			run_failed(j);
	}
	if (j->r.cp && cli_verbose && !cli_quiet)
		fprintf(stderr, "%s: rank %d: attention work %llu query-key "
		    "pairs\n", cli_progname, j->rank,
		    (unsigned long long)tp_ring_work(j->r.cp));
	write_outputs(j, &gs);
	if (o->check) {
		if (!check_serial(j, &gs))
			cli_die(CLI_EXIT_CHECK, "rank %d: check: %s %s differs "
			    "from the serial layer", j->rank,
			    tp_mode_name(o->cfg.mode),
			    tp_layer_name(o->cfg.layer));
		if (j->rank == 0 && !cli_quiet)
			fprintf(stderr, "%s: check: %s %s on %d ranks matches the "
			    "serial layer\n", cli_progname,
			    tp_mode_name(o->cfg.mode),
			    tp_layer_name(o->cfg.layer), j->world);
	}
	tensor_set_free(&gs);
}

/* ---- training ------------------------------------------------------------- */

static void
log_split(const struct tp_log *l, double *compute, double *comm)
{
	*compute = *comm = 0;
	for (int i = 0; i < l->n; i++)
		*(strcmp(l->p[i].op, "compute") == 0 ? compute : comm) +=
		    l->p[i].seconds;
}

/* The weights gathered whole on rank 0 and written to pattern with the
 * input's metadata; with the steps done when step >= 0 (a checkpoint). */
static void
save_weights(struct job *j, const char *pattern, long step)
{
	struct tensor_set ws = { 0 };
	char e[COLLX_ERRLEN];

	tp_log_start(&j->log, j->c);
	if (tp_gather_set(&j->r, 0, &ws) < 0)
		run_failed(j);
	if (j->rank == 0 && step >= 0 && ckpt_meta_put_step(&ws, step, e,
	    sizeof e) < 0)
		cli_die(CLI_EXIT_RUNTIME, "%s: %s", pattern, e);
	if (j->rank == 0)
		save_set(pattern, j->rank, j->world, &ws, &j->w);
	tensor_set_free(&ws);
}

static void
train(struct job *j)
{
	struct tplayer_opts *o = j->o;
	long cap = 0, first, k;
	struct train_step *steps = NULL, *s;
	long tokens = j->r.n;	/* mlp: samples; block: positions */

	trainer_begin(&j->t, o->cfg.layer == TP_MLP ? "samples" : "tokens",
	    j->first, o->c.steps);
	for (k = first = j->t.from; k < o->c.steps; k++) {
		double t0 = cli_now();

		if ((s = train_grow(steps, &cap, k - first, sizeof(*s))) == NULL)
			cli_die_rank(1, "out of memory");
		steps = s;
		s = &steps[k - first];
		tp_log_start(&j->log, j->c);
		if (tp_train_step(&j->r, j->x.data, j->yt.data, (float)o->lr,
		    &s->loss) < 0)
			run_failed(j);
		s->step = k;
		s->tokens = tokens;
		s->seconds = cli_now() - t0;
		log_split(&j->log, &s->compute, &s->comm);
		timing_rows(&j->t, &j->log, (int)k, has_hidden(o));
		progress_step(&j->t.pr, s);
		if (j->t.pr.lines)
			fprintf(stderr, "%s: step %ld loss %.6f %.1f ms "
			    "(communication %.1f ms)\n", cli_progname, k,
			    s->loss, s->seconds * 1e3, s->comm * 1e3);
		trainer_save_loss_due(&j->t, o->c.loss_csv, &o->ckpt, s, 0);
		if (trainer_ckpt_due(&o->ckpt, k, o->c.steps))
			save_weights(j, o->ckpt.path, k + 1);
	}
	trainer_end(&j->t);
	if (o->c.out)
		save_weights(j, o->c.out, -1);
	if (o->c.loss_csv && j->rank == 0)
		trainer_save_loss(o->c.loss_csv, j->world, steps, k - first, 0);
	free(steps);
}

void
tplayer_run(struct tplayer_opts *o)
{
	struct job j = { .o = o, .rank = o->g.rank, .world = o->g.world };

	nn_set_threads(o->c.threads);
	load_inputs(&j);
	join_group(&j);
	if (tp_run_init(&j.r, &j.m, j.c, &j.log, &j.x, j.err, sizeof j.err) < 0)
		cli_die(CLI_EXIT_DATA, "%s: %s", o->input, j.err);
	if (o->dy)
		check_like_y(&j, &j.dy, o->dy);
	if (o->targets)
		check_like_y(&j, &j.yt, o->targets);
	if (o->trace && j.c && coll_barrier(j.c) < 0)	/* one origin */
		cli_die(CLI_EXIT_RUNTIME, "rank %d: %s", j.rank,
		    comm_error(j.c));
	if (o->trace)
		tp_log_trace(&j.log);
	trainer_open(&j.t, o->c.timing, has_hidden(o) ? "comm_bytes,hidden_us,"
	    "exposed_us,phase" : "comm_bytes,phase", j.rank, j.world);
	if (o->train)
		train(&j);
	else
		run_layer(&j);
	if (o->trace && tp_trace_write(o->trace, &j.log, j.c, j.err,
	    sizeof j.err) < 0)
		run_failed(&j);
	free(j.log.spans);
	trainer_close(&j.t);
	tp_run_free(&j.r);
	tp_model_free(&j.m);
	comm_close(j.c);
	tensor_set_free(&j.w);
	tensor_free(&j.x), tensor_free(&j.dy), tensor_free(&j.yt);
}
