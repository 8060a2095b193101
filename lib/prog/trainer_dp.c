/* trainer_dp: collx-dp's per-step report, memory figures and outputs. */
#include <stdio.h>
#include <stdlib.h>

#include "cli/cli.h"
#include "comm/coll.h"
#include "comm/ps.h"
#include "prog/trainer_dp.h"

void
trainer_dp_begin(struct trainer_dp *r, struct dp_cfg *cfg,
    const struct nn_model *m, const struct trainopt_common *c,
    const struct trainopt_ckpt *k, const struct cli_group *g)
{
	static const size_t esz[] = { 4, 2, 2, 1 };
	int ps = cfg->sync == DP_PS, rs = cfg->dpo.zero > 0;

	*r = (struct trainer_dp){ .nparams = m->nparams,
	    .esz = esz[cfg->dpo.wire], .dtype = dp_wire_name(cfg->dpo.wire),
	    .zero = cfg->dpo.zero, .m = m };
	r->comm_op = ps ? "ps" : rs ? "reduce_scatter" : "allreduce";
	r->hidden_op = ps ? "ps_hidden" : rs ? "reduce_scatter_hidden" :
	    "allreduce_hidden";
	r->exposed_op = ps ? "ps_exposed" : rs ? "reduce_scatter_exposed" :
	    "allreduce_exposed";
	r->comm_algo = ps ? ps_mode_name(cfg->ps_mode) :
	    coll_algo_name(cfg->algo);
	trainer_open(&r->t, c->timing, NULL, g->rank, g->world);
	trainer_begin(&r->t, trainer_unit(m), cfg->resume != NULL ?
	    cfg->resume->step : 0, cfg->steps);
	if (k->path != NULL)
		cfg->ckpt_path = r->ckpt_path = cli_subst(k->path, g->rank,
		    g->world);
	cfg->ckpt_every = k->every;
	r->loss_csv = c->loss_csv;
	r->ckpt = k;
	r->cols = TRAINOPT_LOSS_SENT | (cfg->ft ? TRAINOPT_LOSS_REPLICAS : 0);
	if (cfg->ft)	/* the survivors' rank 0 writes the outputs */
		cfg->ft_rank = &r->t.rank;
	cfg->timeout = g->timeout;
	cfg->token = g->token;
	cfg->note = prog_note;
}

static void
row(struct trainer_dp *r, const char *op, const char *algo, long step,
    double seconds)
{
	trainer_row(&r->t, op, algo, r->dtype, r->nparams, r->nparams * r->esz,
	    step, seconds, NULL);
}

void
trainer_dp_step(void *ctx, const struct train_step *s)
{
	struct trainer_dp *r = ctx;

	progress_step(&r->t.pr, s);
	/* --ft: the rank 0 of the replicas left takes the lines over */
	r->t.pr.lines |= (r->cols & TRAINOPT_LOSS_REPLICAS) &&
	    r->t.rank == 0 && cli_verbose && !cli_quiet;
	if (r->t.pr.lines)
		fprintf(stderr, "%s: step %ld epoch %ld loss %.6f %.1f ms %.0f "
		    "%s/s (compute %.1f ms, %s %.1f ms, %.1f hidden)\n",
		    cli_progname, s->step, s->epoch, s->loss, s->seconds * 1e3,
		    s->seconds > 0 ? s->tokens / s->seconds : 0,
		    r->t.pr.unit, s->compute * 1e3, r->comm_op, s->comm * 1e3,
		    s->hidden * 1e3);
	if (r->t.pr.lines && r->t.rank == 0)
		trainer_moe_line(&r->m->dims, s);
	row(r, "compute", "-", s->step, s->compute);
	row(r, r->comm_op, r->comm_algo, s->step, s->comm);
	row(r, r->hidden_op, r->comm_algo, s->step, s->hidden);
	row(r, r->exposed_op, r->comm_algo, s->step, s->exposed);
	if (r->zero == 3) {
		row(r, "gather", r->comm_algo, s->step, s->gather);
		row(r, "reduce-scatter", r->comm_algo, s->step,
		    s->reduce_scatter);
	}
	trainer_save_loss_due(&r->t, r->loss_csv, r->ckpt, s, r->cols);
}

/* -v: every rank's memory figures and mean step time (steps after the
 * first, which warms up, when there are several). */
static void
report_mem(const struct trainer_dp *r, const struct dp_mem *mem,
    const struct train_step *s, long n)
{
	double sum = 0;
	long i, from = n > 1;

	if (!cli_verbose || cli_quiet)
		return;
	for (i = from; i < n; i++)
		sum += s[i].seconds;
	fprintf(stderr, "%s: rank %d: zero %d: optimizer state %zu bytes, "
	    "reduced gradients %zu bytes, mean step %.3f ms\n", cli_progname,
	    r->t.rank, r->zero, mem->optim_bytes, mem->grad_bytes,
	    n > from ? sum / (double)(n - from) * 1e3 : 0.0);
	if (r->zero == 3)
		fprintf(stderr, "%s: rank %d: params peak %zu bytes\n",
		    cli_progname, r->t.rank, mem->params_peak);
	if (r->zero == 3 && mem->ckpt_peak > 0)
		fprintf(stderr, "%s: rank %d: checkpoint params peak %zu bytes\n",
		    cli_progname, r->t.rank, mem->ckpt_peak);
}

/* -v, ZeRO-3, rank 0: the share of the gathers' time the passes waited
 * for them (not hidden behind a layer's compute). */
static void
report_gather(const struct trainer_dp *r, const struct train_step *s, long n)
{
	double g = 0, w = 0;

	if (!cli_verbose || cli_quiet || r->zero != 3 || r->t.rank != 0)
		return;
	for (long i = 0; i < n; i++) {
		g += s[i].gather;
		w += s[i].gather_wait;
	}
	fprintf(stderr, "%s: gather exposed %.0f%%\n", cli_progname,
	    g > 0 ? 100 * (w < g ? w : g) / g : 0.0);
}

/* --ft: the summary is the rank 0 of the replicas at the end's, over
 * every step's records (it may have joined late, or rank 0 left). */
static void
ft_summary(struct trainer_dp *r, const struct train_step *s, long n)
{
	struct progress *p = &r->t.pr;
	long i;

	p->summary = r->t.rank == 0 && !cli_quiet;
	p->done = n;
	p->tokens = p->seconds = p->comm = 0;
	for (i = 0; i < n; i++) {
		p->tokens += s[i].tokens;
		p->seconds += s[i].seconds;
		p->comm += s[i].comm;
	}
	p->loss = n > 0 ? s[n - 1].loss : p->loss;
}

void
trainer_dp_end(struct trainer_dp *r, const struct dp_mem *mem,
    const struct train_step *steps, const struct trainopt_common *c,
    const struct nn_model *m)
{
	long first = r->t.from, n = r->t.steps - first;

	if (r->cols & TRAINOPT_LOSS_REPLICAS)
		ft_summary(r, steps + first, n);
	trainer_end(&r->t);
	report_mem(r, mem, steps + first, n);
	report_gather(r, steps + first, n);
	if (r->t.rank == 0 && c->out != NULL)
		trainer_save_model(c->out, r->t.world, m);
	if (r->t.rank == 0 && c->loss_csv != NULL)
		trainer_save_loss(c->loss_csv, r->t.world, steps + first, n,
		    r->cols);
	trainer_close(&r->t);
	free(r->ckpt_path);
}
