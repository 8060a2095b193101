/* trainer_pipe: the pipeline run of collx-pipe and collx-train (without
 * and with a mesh) in the trainer shell. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "comm/coll.h"
#include "comm/comm.h"
#include "par/pipe_ft.h"
#include "par/pipe_sched.h"
#include "par/tp_stage.h"
#include "prog/pipe_report.h"
#include "prog/trainer_pipe.h"

int
trainer_pipe_option(struct trainer_pipe_opts *o, int c, const char *a,
    const char *names, int file)
{
	switch (c) {
	case TRAINER_PIPE_MICRO:
		o->micro = cli_parse_long("--microbatches", a, 1, 1 << 20);
		break;
	case TRAINER_PIPE_SCHEDULE:
		if (pipe_sched_parse(a, &o->sched) < 0 ||
		    (!file && o->sched == PIPE_SCHED_FILE))
			cli_usage_error("--schedule: want %s, not '%s'", names,
			    a);
		o->sched_given = 1;
		break;
	case TRAINER_PIPE_VIRTUAL:
		o->virt = cli_parse_long("--virtual", a, 1, 64);
		break;
	case TRAINER_PIPE_SPLIT: o->split = a; break;
	case TRAINER_PIPE_TRACE: o->trace = a; break;
	default: return 0;
	}
	return 1;
}

void
trainer_pipe_virtual(struct trainer_pipe_opts *o, const char *hint)
{
	if (o->virt > 0 && o->sched != PIPE_SCHED_INTERLEAVED)
		cli_usage_error("--virtual goes with --schedule interleaved%s",
		    hint);
	if (o->virt == 0)
		o->virt = o->sched == PIPE_SCHED_INTERLEAVED ? 2 : 1;
}

/* What a pipeline does not run of a model with experts, before any data
 * moves: a split backward (zero-bubble schedules and schedule files).
 * Under --tp the experts are whole on every TP rank; an auxiliary loss
 * under 1f1b or interleaved costs a counting forward (pipe_step.c). */
static void
trainer_pipe_moe_check(const struct trainer_pipe *p, const struct nn_model *m)
{
	const struct nn_dims *d = &m->dims;

	if (d->moe.experts == 0)
		return;
	if (p->o->sched == PIPE_SCHED_ZBH1 || p->o->sched == PIPE_SCHED_FILE)
		cli_die_rank(CLI_EXIT_DATA, "the model has %d experts: their "
		    "backward does not split, run --schedule gpipe, 1f1b or "
		    "interleaved", d->moe.experts);
}

void
trainer_pipe_split(struct trainer_pipe *p, const struct nn_model *m,
    int chunks)
{
	const struct mesh *mesh = p->mesh;
	int stages = (mesh != NULL ? mesh->pp : p->g->world) * chunks;
	int *first = cli_calloc((size_t)stages + 1, sizeof(int));
	char e[COLLX_ERRLEN];

	trainer_pipe_moe_check(p, m);
	if (pipe_split(m, stages, p->o->split, first, e, sizeof(e)) < 0)
		cli_usage_error("%s", e);
	for (int j = 0; mesh != NULL && j < stages; j++)
		if (tp_stage_check(m, first[j], first[j + 1], mesh->tp, e,
		    sizeof(e)) < 0)
			cli_die_rank(CLI_EXIT_DATA, "stage %d: %s", j, e);
	/* pipe.c's chunks_init refuses it too, after the group forms */
	if (mesh != NULL && chunks > 1 && mesh->tp > 1 && mesh->pp == 1 &&
	    m->dims.arch == NN_GPT)
		cli_die_rank(CLI_EXIT_DATA, "mesh: an interleaved gpt under "
		    "--tp %d needs --pp 2 or more (one stage would hold both "
		    "ends of the tied embedding)", mesh->tp);
	p->first = first;
}

void
trainer_pipe_cfg(struct pipe_cfg *cfg, struct trainer_pipe *p,
    const struct trainopt_ckpt *k, struct ckpt_state *st)
{
	cfg->sched = p->o->sched;
	cfg->micro = (int)p->o->micro;
	cfg->batch = p->c->batch;
	cfg->steps = p->c->steps;
	cfg->first = p->first;
	cfg->trace = p->o->trace != NULL;
	if (k->path != NULL)
		cfg->ckpt_path = p->ckpt_path = cli_subst(k->path, 0,
		    p->g->world);
	cfg->ckpt_every = k->every;
	p->ckpt = k;
	cfg->resume = k->resume != NULL ? st : NULL;
}

void
trainer_pipe_declare(struct prog_job *j, const struct pipe_cfg *cfg,
    const char *split)
{
	prog_job_add(j, "--schedule", "%s", pipe_sched_name(cfg->sched));
	if (cfg->table != NULL)
		prog_job_add(j, "--schedule-file", "%016llx",
		    pipe_sched_digest(cfg->table));
	prog_job_add(j, "--microbatches", "%d", cfg->micro);
	prog_job_add(j, "--virtual", "%d", cfg->chunks);
	prog_job_add(j, "--batch", "%ld", cfg->batch);
	prog_job_add(j, "--steps", "%ld", cfg->steps);
	prog_job_add(j, "--split", "%s", split != NULL ? split : "balanced");
}

void
trainer_pipe_declare_run(struct prog_job *j, const struct pipe_cfg *cfg,
    const struct trainopt_ckpt *k)
{
	trainopt_optim_agree(j, &cfg->optim);
	prog_job_flag(j, "--trace", cfg->trace);
	trainer_declare_ckpt(j, k, cfg->resume != NULL ? cfg->resume->step : 0L);
}

/* A run's state: the shell, the pipeline's report and, on a mesh, this
 * rank's place, its groups and the bytes sent over each axis. */
struct pipe_report_run {
	const struct trainer_pipe *p;
	const struct pipe_cfg *cfg;
	struct trainer t;
	struct prog_pipe_report pipe;
	struct mesh_coord at;
	struct mesh_groups grp;
	uint64_t sent;		/* bytes sent by the step before */
	uint64_t axis[4];	/* bytes sent so far over pp, dp, tp, cp */
	uint64_t hybrid;	/* dp's in --shard-group host's own groups */
	uint64_t axis_step[4];	/* of them, in the last step */
	double hidden_us;	/* --cp: the row's hidden_us column */
	uint64_t *bytes;	/* per step, grown with the steps */
	long capbytes;
	const struct nn_dims *dims;	/* -v's tokens per expert */
	struct ep ep;		/* --ep: the EP group (ep.c NULL: none) */
	FILE *experts;		/* --expert-counts' file, rank 0's */
	double ep_s[2];		/* its dispatch and combine seconds and */
	uint64_t ep_b[2];	/* bytes before the step */
	struct pipe_ft ft;	/* --ft: the replicas left, their groups */
	uint64_t ft_base[4];	/* the bytes over the groups before */
};

/* Bytes sent over each axis, the last step's and in all, and their sum. */
static uint64_t
bytes_sent(struct pipe_report_run *r)
{
	struct comm *g[4] = { r->grp.pp, r->grp.dp, r->grp.tp, r->grp.cp };
	uint64_t sum = 0, now;

	for (int a = 0; a < 4; a++) {
		now = comm_bytes_sent(g[a]) + (a == 1 ? r->hybrid : 0) +
		    r->ft_base[a];
		r->axis_step[a] = now - r->axis[a];
		r->axis[a] = now;
		sum += now;
	}
	return sum + (r->ep.c != NULL ? comm_bytes_sent(r->ep.c) : 0);
}

/* count: the batch's samples (compute, step) or the elements moved
 * (bytes then theirs). Every row carries the stage's bubble in the step;
 * on a mesh, its axis and place, else the stage and the micro-batches. */
static void
row(struct pipe_report_run *r, const char *op, const char *algo,
    const char *axis, long step, double seconds, size_t count, size_t bytes,
    const struct pipe_stat *st)
{
	char extra[160];
	int n;

	if (r->p->mesh != NULL && r->p->mesh->cp > 1)
		n = snprintf(extra, sizeof(extra), "%s,%d,%d,%d,%d,", axis,
		    r->at.pp, r->at.dp, r->at.cp, r->at.tp);
	else if (r->p->mesh != NULL)
		n = snprintf(extra, sizeof(extra), "%s,%d,%d,%d,", axis,
		    r->at.pp, r->at.dp, r->at.tp);
	else
		n = snprintf(extra, sizeof(extra), "%d,%d,", r->t.rank,
		    r->cfg->micro);
	prog_pipe_columns(&r->pipe, st, extra + n, sizeof(extra) - (size_t)n);
	if (r->p->mesh != NULL && r->p->mesh->cp > 1) {
		n = (int)strlen(extra);
		snprintf(extra + n, sizeof(extra) - (size_t)n, ",%.1f",
		    r->hidden_us);
	}
	trainer_row(&r->t, op, algo, "f32", count, bytes, step, seconds, extra);
}

/* --ep's timing rows: the step's dispatch and combine (forward and
 * backward each) and the bytes this rank sent in them. */
static void
ep_rows(struct pipe_report_run *r, const struct train_step *s,
    const struct pipe_stat *st)
{
	static const char *const op[2] = { "dispatch", "combine" };
	const struct ep *ep = &r->ep;

	for (int ph = 0; ph < 2; ph++) {
		uint64_t b = ep->phase_b[ph] - r->ep_b[ph];
		row(r, op[ph], ep_dispatch_name(ep->how), "ep", s->step,
		    ep->phase_s[ph] - r->ep_s[ph], b / sizeof(float), b, st);
		r->ep_s[ph] = ep->phase_s[ph];
		r->ep_b[ph] = ep->phase_b[ph];
	}
}

static void
step_rows(struct pipe_report_run *r, const struct train_step *s,
    const struct pipe_stat *st)
{
	const char *sched = pipe_sched_name(r->cfg->sched);
	size_t f = sizeof(float), b = (size_t)r->cfg->batch;

	row(r, "forward", sched, "pp", s->step, st->fwd, b, 0, st);
	row(r, "backward", sched, "pp", s->step, st->bwd, b, 0, st);
	row(r, "send", sched, "pp", s->step, st->send, st->sent / f, st->sent,
	    st);
	row(r, "recv", sched, "pp", s->step, st->recv, st->recvd / f,
	    st->recvd, st);
	if (r->p->mesh != NULL && comm_size(r->grp.dp) > 1)
		row(r, r->cfg->dpo.zero > 0 ? "reduce_scatter" : "allreduce",
		    coll_algo_name(COLL_AUTO), "dp", s->step, st->dp,
		    st->dp_sent / f, st->dp_sent, st);
	/* overlapped with the backward: its shares, as collx-dp's rows */
	if (r->p->mesh != NULL && st->dp_overlap) {
		row(r, "allreduce_hidden", coll_algo_name(COLL_AUTO), "dp",
		    s->step, st->dp_hidden, st->dp_sent / f, st->dp_sent, st);
		row(r, "allreduce_exposed", coll_algo_name(COLL_AUTO), "dp",
		    s->step, st->dp_exposed, st->dp_sent / f, st->dp_sent, st);
	}
	if (r->p->mesh != NULL && comm_size(r->grp.dp) > 1 &&
	    r->cfg->dpo.zero == 3) {
		row(r, "gather", coll_algo_name(COLL_AUTO), "dp", s->step,
		    st->dp_gather, 0, 0, st);
		row(r, "reduce-scatter", coll_algo_name(COLL_AUTO), "dp",
		    s->step, st->dp_rs, 0, 0, st);
	}
	if (r->p->mesh != NULL && comm_size(r->grp.tp) > 1)
		row(r, "allreduce", coll_algo_name(COLL_RING), "tp", s->step,
		    st->tp, st->tp_sent / f, st->tp_sent, st);
	/* the ring's K/V (and dK/dV) exchanges, with their share hidden
	 * behind the attention's blocks */
	if (r->p->mesh != NULL && r->p->mesh->cp > 1) {
		r->hidden_us = st->cp_hidden * 1e6;
		row(r, "sendrecv", r->cfg->cp_zigzag ? "zigzag" : "ring", "cp",
		    s->step, st->cp, st->cp_sent / f, st->cp_sent, st);
		r->hidden_us = 0;
	}
	if (r->ep.c != NULL)
		ep_rows(r, s, st);
	row(r, "step", sched, "-", s->step, st->wall, b, 0, st);
}

/* collx-train's step: its bytes sent, for the loss CSV and -v. */
static void
mesh_step(struct pipe_report_run *r, const struct train_step *s,
    const struct pipe_stat *st)
{
	uint64_t now, *b;

	r->hybrid += st->dp_hybrid;
	now = bytes_sent(r);

	if ((b = train_grow(r->bytes, &r->capbytes, s->step,
	    sizeof(*b))) == NULL)
		cli_die(CLI_EXIT_RUNTIME, "out of memory");
	r->bytes = b;
	b[s->step] = now - r->sent;
	r->sent = now;
}

/* A mesh's loss CSV columns: the bytes sent, under --ft the replicas. */
static int
loss_cols(const struct pipe_report_run *r)
{
	return TRAINOPT_LOSS_SENT | (r->p->ft ? TRAINOPT_LOSS_REPLICAS : 0);
}

/* --ft: the groups remade over the replicas left: this rank's place,
 * the bytes so far kept, and the rank 0 of the replicas takes the lines
 * and the outputs over. */
static void
ft_regrouped(void *ctx, int rank)
{
	struct pipe_report_run *r = ctx;

	for (int a = 0; a < 4; a++)
		r->ft_base[a] = r->axis[a];
	r->sent = bytes_sent(r);
	mesh_coord(&r->ft.mesh, rank, &r->at);
	r->t.rank = rank;
	r->t.pr.summary = rank == 0 && !cli_quiet;
	/* the lines too: a rank 0 started again takes them back */
	r->t.pr.lines = r->t.pr.summary && cli_verbose;
}

static void
ft_note(void *ctx, const char *line)
{
	(void)ctx;
	prog_note(NULL, line);
}

/* --ft: the bytes of the steps run before a rank started again came
 * (in), and its progress over them, for the outputs and the summary it
 * writes when it is, or becomes, the rank 0 of the mesh. */
static void
ft_records(void *ctx, struct train_step *s, long n, int in)
{
	struct pipe_report_run *r = ctx;
	uint64_t *b;

	if (n < 1)
		return;
	if ((b = train_grow(r->bytes, &r->capbytes, n - 1,
	    sizeof(*b))) == NULL)
		cli_die(CLI_EXIT_RUNTIME, "out of memory");
	r->bytes = b;
	for (long k = 0; k < n; k++) {
		if (!in) {
			s[k].bytes_sent = b[k];
			continue;
		}
		b[k] = s[k].bytes_sent;
		progress_step(&r->t.pr, &s[k]);
	}
}

/* The loss CSV before a checkpoint (trainer_save_loss_due), on a mesh
 * with each step's bytes sent, as write_outputs gives them. */
static void
loss_due(const struct pipe_report_run *r, const struct train_step *s)
{
	long n = s->step - r->t.from + 1, k;
	struct train_step *c;

	if (r->p->mesh == NULL) {
		trainer_save_loss_due(&r->t, r->p->c->loss_csv, r->p->ckpt,
		    s, 0);
		return;
	}
	if (r->t.rank != 0 || !trainer_ckpt_due(r->p->ckpt, s->step,
	    r->t.steps))
		return;
	c = cli_calloc((size_t)n, sizeof(*c));
	memcpy(c, s - (n - 1), (size_t)n * sizeof(*c));
	for (k = 0; k < n; k++)
		c[k].bytes_sent = r->bytes[r->t.from + k];
	trainer_save_loss_due(&r->t, r->p->c->loss_csv, r->p->ckpt, &c[n - 1],
	    loss_cols(r));
	free(c);
}

/* " cp N" on a mesh with a CP axis, for the lines of bytes per axis. */
static const char *
cp_bytes(const struct pipe_report_run *r, uint64_t n, char *buf, size_t len)
{
	buf[0] = '\0';
	if (r->p->mesh->cp > 1)
		snprintf(buf, len, " cp %" PRIu64, n);
	return buf;
}

static void
on_step(void *ctx, const struct train_step *s, const struct pipe_stat *st)
{
	struct pipe_report_run *r = ctx;
	char cp[32];

	if (r->p->mesh != NULL)
		mesh_step(r, s, st);
	progress_step(&r->t.pr, s);
	if (r->t.pr.lines && r->p->mesh != NULL)
		fprintf(stderr, "%s: step %ld epoch %ld loss %.6f %.1f ms %.0f "
		    "%s/s (compute %.1f ms, pipeline and allreduces %.1f ms; "
		    "sent pp %" PRIu64 " dp %" PRIu64 " tp %" PRIu64 "%s B)\n",
		    cli_progname, s->step, s->epoch, s->loss, s->seconds * 1e3,
		    s->seconds > 0 ? s->tokens / s->seconds : 0, r->t.pr.unit,
		    s->compute * 1e3, s->comm * 1e3, r->axis_step[0],
		    r->axis_step[1], r->axis_step[2], cp_bytes(r,
		    r->axis_step[3], cp, sizeof(cp)));
	else if (r->t.pr.lines)
		fprintf(stderr, "%s: step %ld epoch %ld loss %.6f %.1f ms\n",
		    cli_progname, s->step, s->epoch, s->loss, s->seconds * 1e3);
	if (r->t.pr.lines)
		trainer_moe_line(r->dims, s);
	if (r->experts != NULL && trainer_moe_csv(r->experts, r->dims, s,
	    s->step == r->t.from) < 0)
		cli_die(CLI_EXIT_RUNTIME, "%s: %s", r->p->expert_csv,
		    strerror(errno));
	step_rows(r, s, st);
	loss_due(r, s);
}

/* -v under --zero 3: every rank's most parameter bytes held in a pass,
 * and rank 0's share of the gathers' time its passes waited for them. */
static void
fsdp_report(const struct pipe_report_run *r, const struct pipe_result *res)
{
	size_t peak = 0;
	double g = 0, w = 0;

	if (!cli_verbose || cli_quiet || r->cfg->dpo.zero != 3 ||
	    comm_size(r->grp.dp) < 2)
		return;
	for (long k = r->t.from; k < r->t.steps; k++) {
		const struct pipe_stat *st = &res->stat[k];

		peak = st->params_peak > peak ? st->params_peak : peak;
		g += st->dp_gather;
		w += st->dp_exposed;
	}
	fprintf(stderr, "%s: rank %d: params peak %zu bytes\n", cli_progname,
	    r->t.rank, peak);
	if (r->t.rank == 0)
		fprintf(stderr, "%s: gather exposed %.0f%%\n", cli_progname,
		    g > 0 ? 100 * (w < g ? w : g) / g : 0.0);
}

/* collx-train's closing lines: with -v every rank's optimizer state and
 * the reduced gradients it keeps (the last step's; ZeRO shards them over
 * the replicas), and rank 0's bytes sent over each axis. */
static void
mesh_report(const struct pipe_report_run *r, const struct pipe_result *res)
{
	long last = r->t.steps - 1;
	char cp[32];

	if (cli_verbose && !cli_quiet && r->t.from <= last)
		fprintf(stderr, "%s: rank %d: zero %d: optimizer state %zu "
		    "bytes, reduced gradients %zu bytes\n", cli_progname,
		    r->t.rank, r->cfg->dpo.zero, res->stat[last].optim_bytes,
		    res->stat[last].grad_bytes);
	/* what --ep divides (ZeRO-3 has its own line) */
	if (cli_verbose && !cli_quiet && r->t.from <= last &&
	    r->cfg->dpo.zero != 3)
		fprintf(stderr, "%s: rank %d: parameters %zu bytes\n",
		    cli_progname, r->t.rank, res->stat[last].param_bytes);
	fsdp_report(r, res);
	if (r->t.pr.summary)
		fprintf(stderr, "%s: rank 0 sent pp %" PRIu64 " dp %" PRIu64
		    " tp %" PRIu64 "%s bytes\n", cli_progname, r->axis[0],
		    r->axis[1], r->axis[2], cp_bytes(r, r->axis[3], cp,
		    sizeof(cp)));
}

static void
write_outputs(const struct pipe_report_run *r, const struct nn_model *m,
    struct pipe_result *res)
{
	const struct trainopt_common *c = r->p->c;
	long from = r->t.from, n = r->t.steps - from;
	char e[COLLX_ERRLEN], *path;

	if (c->out != NULL)
		trainer_save_model(c->out, r->t.world, m);
	if (c->loss_csv != NULL) {
		for (long k = from; r->p->mesh != NULL && k < r->t.steps; k++)
			res->steps[k].bytes_sent = r->bytes[k];
		trainer_save_loss(c->loss_csv, r->t.world, res->steps + from, n,
		    r->p->mesh != NULL ? loss_cols(r) : 0);
	}
	if (r->p->o->trace != NULL) {
		path = cli_subst(r->p->o->trace, 0, r->t.world);
		if (pipe_trace_write(path, res, r->pipe.world, e,
		    sizeof(e)) < 0)
			cli_die(CLI_EXIT_RUNTIME, "%s", e);
		free(path);
	}
}

void
trainer_pipe_run(struct trainer_pipe *p, struct nn_model *m,
    const struct train_data *d, struct pipe_cfg *cfg,
    const struct prog_job *job)
{
	const struct mesh *mesh = p->mesh;
	struct pipe_report_run r = { .p = p, .cfg = cfg, .dims = &m->dims };
	struct pipe_result res;
	struct comm *c, *pp;
	enum train_err kind;
	char e[COLLX_ERRLEN];
	int code, rank = p->g->rank, world = p->g->world;

	if (mesh != NULL)
		mesh_coord(mesh, rank, &r.at);
	/* on a mesh, rank 0's pipeline: replica 0's, its stages' shard 0 */
	if (prog_pipe_report_init(&r.pipe, cfg, mesh != NULL ? mesh->pp :
	    world, mesh != NULL && (mesh->dp > 1 || mesh->tp > 1) ?
	    "replica 0, shard 0" : NULL, e, sizeof(e)) < 0)
		cli_die(CLI_EXIT_RUNTIME, "%s", e);
	trainer_open(&r.t, p->c->timing, mesh != NULL && mesh->cp > 1 ?
	    "axis,pp,dp,cp,tp," PROG_PIPE_COLUMNS ",hidden_us" : mesh != NULL ?
	    "axis,pp,dp,tp," PROG_PIPE_COLUMNS : "stage,microbatches,"
	    PROG_PIPE_COLUMNS, rank, world);
	if ((code = prog_join(&c, p->g, job, e, sizeof(e))) != 0)
		cli_die(code, "%s", e);
	pp = c;
	/* --ft: its replicas are the units of a rejoin; a rank started
	 * again joins the running job first, and lays its mesh */
	if (mesh != NULL && p->ft) {
		r.ft = (struct pipe_ft){ .world = c, .open = c, .orig = *mesh,
		    .mesh = *mesh, .grp = &r.grp, .regrouped = ft_regrouped,
		    .note = ft_note, .records = ft_records, .ctx = &r };
		cfg->ft = &r.ft;
		if ((code = pipe_ft_open(&r.ft, c, e, sizeof(e))) != 0)
			cli_die(code, "%s", e);
	}
	if (mesh != NULL) {
		if (mesh_split(cfg->ft != NULL ? &r.ft.mesh : mesh, cfg->ft !=
		    NULL ? r.ft.world : c, &r.grp, e, sizeof(e)) < 0)
			cli_die(CLI_EXIT_RUNTIME, "rank %d: %s", rank, e);
		if (p->ep > 1 && ep_open(&r.ep, r.grp.dp, p->ep,
		    m->dims.moe.experts, p->dispatch, e, sizeof(e)) < 0)
			cli_die(CLI_EXIT_RUNTIME, "rank %d: %s", rank, e);
		r.sent = bytes_sent(&r);
		cfg->dp = r.grp.dp;
		cfg->tp = r.grp.tp;
		cfg->cp = r.grp.cp;
		cfg->ep = r.ep.c != NULL ? &r.ep.hook : NULL;
		/* each rank holds its own experts alone where the DP sync
		 * is plain; else all of them (par/ep.h) */
		r.ep.divided = cfg->dpo.zero == 0 &&
		    cfg->dpo.wire == DP_WIRE_F32 && cfg->dpo.powersgd == 0 &&
		    cfg->dpo.sync_every == 0;
		pp = r.grp.pp;
	}
	if (rank == 0 && p->expert_csv != NULL && (r.experts =
	    fopen(p->expert_csv, "w")) == NULL)
		cli_die(CLI_EXIT_RUNTIME, "%s: %s", p->expert_csv,
		    strerror(errno));
	trainer_begin(&r.t, trainer_unit(m), cfg->resume != NULL ?
	    cfg->resume->step : 0, cfg->steps);
	if (pipe_train(m, d, pp, cfg, on_step, &r, &res, &kind, e,
	    sizeof(e)) < 0)
		cli_die((int)kind, "%s", e);
	trainer_end(&r.t);
	if (mesh != NULL)
		mesh_report(&r, &res);
	if (r.t.rank == 0)
		write_outputs(&r, m, &res);
	if (r.t.rank == 0 && (mesh == NULL || mesh->pp > 1) && !cli_quiet)
		prog_pipe_summary(&r.pipe, &res);
	trainer_close(&r.t);
	if (r.experts != NULL && fclose(r.experts) != 0)
		cli_die(CLI_EXIT_RUNTIME, "%s: %s", p->expert_csv,
		    strerror(errno));
	if (r.ep.c != NULL)
		ep_close(&r.ep);
	if (mesh != NULL)
		mesh_groups_close(&r.grp);
	if (cfg->ft != NULL)
		pipe_ft_close(cfg->ft);
	comm_close(c);
	pipe_result_free(&res);
	free(r.bytes);
	free(p->first);
	free(p->ckpt_path);
}
