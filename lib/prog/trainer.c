/* trainer: the shell of the training programs: inputs, progress, timing
 * rows, outputs and checkpoint cadence, written once for all of them. */
#include <stdio.h>
#include <stdlib.h>

#include "cli/cli.h"
#include "prog/trainer.h"
#include "tensor/tensor.h"

void
trainer_check(const struct trainopt_ckpt *k, const char *model,
    const char *data, const char *data_opt)
{
	if ((model == NULL && k->resume == NULL) || data == NULL)
		cli_usage_error("-m MODEL (or --resume) and %s are required",
		    data_opt);
	if (k->every > 0 && k->path == NULL)
		cli_usage_error("--checkpoint-every goes with --checkpoint");
}

void
trainer_in_paths(struct trainer_in *in, const struct cli_group *g,
    const char **model, const char **data, const char **targets,
    const char **resume)
{
	const char **p[] = { model, data, targets, resume };

	trainopt_subst_paths(p, in->owned, 4, g);
}

void
trainer_in_model(struct trainer_in *in, const struct trainopt_ckpt *k,
    const char *model, int threads)
{
	char e[COLLX_ERRLEN];

	nn_set_threads(threads);
	if (trainopt_model_start(k, model, &in->m, &in->st, e, sizeof(e)) < 0)
		cli_die_rank(CLI_EXIT_DATA, "%s", e);
}

void
trainer_in_data(struct trainer_in *in, const char *data, const char *targets,
    struct trainopt_common *c, const struct trainopt_ckpt *k)
{
	char e[COLLX_ERRLEN];

	if (train_data_load(&in->d, &in->m, data, targets, e, sizeof(e)) < 0)
		cli_die_rank(CLI_EXIT_DATA, "%s", e);
	if (c->batch < 1)
		c->batch = (long)in->d.n;
	if (trainopt_resume_check(k, &in->st, c->batch, e, sizeof(e)) < 0)
		cli_die_rank(CLI_EXIT_DATA, "%s", e);
	c->steps = c->epochs > 0 ? train_epoch_steps(in->d.n, c->batch,
	    c->epochs) : c->steps >= 0 ? c->steps : 1;
}

void
trainer_in_free(struct trainer_in *in)
{
	train_data_free(&in->d);
	nn_model_free(&in->m);
	ckpt_state_free(&in->st);
	for (int i = 0; i < 4; i++)
		free(in->owned[i]);
}

_Noreturn void
trainer_init_model(const char *arch, const char *dims, uint64_t seed,
    const char *out, const struct nn_dims *moe)
{
	struct tensor_set s = { 0 };
	struct nn_dims d;
	enum nn_arch a;
	char e[COLLX_ERRLEN], *path;

	if (nn_arch_parse(arch, &a) < 0)
		cli_usage_error("--init: unknown architecture '%s' (mlp, block, "
		    "gpt)", arch);
	if (dims == NULL || out == NULL)
		cli_usage_error("--init needs --dims and -o");
	if (nn_dims_parse(dims, a, &d, e, sizeof(e)) < 0)
		cli_usage_error("%s", e);	/* names --dims */
	if (moe != NULL) {
		d.moe = moe->moe;
		d.moe_every = moe->moe_every;
		d.moe_aux = moe->moe_aux;
		if (d.moe.experts < 1)
			cli_die(CLI_EXIT_DATA, "--experts %d: need at least 1 "
			    "expert", d.moe.experts);
		if (nn_moe_valid(&d, e, sizeof(e)) < 0)
			cli_die(CLI_EXIT_DATA, "--experts: %s", e);
	}
	if (nn_init(&s, &d, seed, e, sizeof(e)) < 0)
		cli_usage_error("--dims: %s", e);
	path = cli_subst(out, 0, 1);
	if (tensor_save(path, &s, e, sizeof(e)) < 0)
		cli_die(CLI_EXIT_RUNTIME, "%s", e);
	free(path);
	tensor_set_free(&s);
	cli_close_stdout();
	exit(CLI_EXIT_OK);
}

void
trainer_targets(const struct nn_model *m, const char *targets,
    const char *topt)
{
	char e[COLLX_ERRLEN];

	if (trainopt_targets_check(m, targets, topt, e, sizeof(e)) < 0)
		cli_usage_error("%s", e);
}

const char *
trainer_unit(const struct nn_model *m)
{
	return m->dims.arch == NN_MLP ? "samples" : "tokens";
}

void
trainer_open(struct trainer *t, const char *timing, const char *columns,
    int rank, int world)
{
	char e[COLLX_ERRLEN], *path;

	*t = (struct trainer){ .rank = rank, .world = world };
	if (timing == NULL)
		return;
	path = cli_subst(timing, rank, world);
	if (cli_timing_open(&t->timing, path, columns, e, sizeof(e)) < 0)
		cli_die(CLI_EXIT_RUNTIME, "%s", e);
	free(path);
}

void
trainer_begin(struct trainer *t, const char *unit, long from, long steps)
{
	t->from = from < steps ? from : steps;	/* resumed past the end */
	t->steps = steps;
	progress_start(&t->pr, t->rank == 0, unit, t->from, steps - t->from);
}

void
trainer_row(struct trainer *t, const char *op, const char *algo,
    const char *dtype, size_t count, size_t bytes, long step, double seconds,
    const char *extra)
{
	struct cli_timing_row row = {
		.program = cli_progname, .op = op, .algo = algo, .rank = t->rank,
		.world = t->world, .dtype = dtype, .count = count,
		.bytes = bytes, .iter = (int)step, .seconds = seconds,
		.extra = extra
	};
	char e[COLLX_ERRLEN];

	if (cli_timing_write(t->timing, &row, e, sizeof(e)) < 0)
		cli_die(CLI_EXIT_RUNTIME, "%s", e);
}

/* The run's summary; with -v rank 0 then names the matmuls' kernels, known
 * only now under bf16 (oneDNN picks one per shape as its primitives are
 * made), and after a failure not at all: its message stays the last line.
 * On a terminal it names them where OpenBLAS runs a set slower than the
 * CPU's (a log keeps the summary alone). */
void
trainer_end(struct trainer *t)
{
	progress_end(&t->pr);
	if (cli_rank != 0 || cli_quiet)
		return;
	if (cli_verbose)
		cli_debug("matmuls: %s", nn_gemm_impl());
	else if (t->pr.live && nn_blas_better_core())
		cli_warn("matmuls: %s", nn_blas_kernels());
}

void
trainer_close(struct trainer *t)
{
	char e[COLLX_ERRLEN];

	if (cli_timing_close(t->timing, e, sizeof(e)) < 0)
		cli_die(CLI_EXIT_RUNTIME, "%s", e);
	t->timing = NULL;
}

int
trainer_ckpt_due(const struct trainopt_ckpt *k, long step, long steps)
{
	return k->path != NULL && (step + 1 == steps ||
	    (k->every > 0 && (step + 1) % k->every == 0));
}

void
trainer_declare_ckpt(struct prog_job *j, const struct trainopt_ckpt *k,
    long resume_step)
{
	prog_job_flag(j, "--checkpoint", k->path != NULL);
	prog_job_add(j, "--checkpoint-every", "%ld", k->every);
	prog_job_add(j, "--resume-step", "%ld", resume_step);
}

void
trainer_save_model(const char *pattern, int world, const struct nn_model *m)
{
	char e[COLLX_ERRLEN], *path = cli_subst(pattern, 0, world);

	if (trainopt_model_save(path, m, e, sizeof(e)) < 0)
		cli_die(CLI_EXIT_RUNTIME, "%s", e);
	free(path);
}

void
trainer_save_loss(const char *pattern, int world, const struct train_step *s,
    long n, int cols)
{
	char e[COLLX_ERRLEN], *path = cli_subst(pattern, 0, world);

	if (trainopt_loss_csv_write_cols(path, s, n, cols, e, sizeof(e)) < 0)
		cli_die(CLI_EXIT_RUNTIME, "%s", e);
	free(path);
}

void
trainer_save_loss_due(const struct trainer *t, const char *pattern,
    const struct trainopt_ckpt *k, const struct train_step *s, int cols)
{
	long n = s->step - t->from + 1;

	if (t->rank == 0 && pattern != NULL &&
	    trainer_ckpt_due(k, s->step, t->steps))
		trainer_save_loss(pattern, t->world, s - (n - 1), n, cols);
}
