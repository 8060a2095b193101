/* meshopt: collx-train's command line, its refusals and its mesh
 * (meshopt.h). */
#include <string.h>

#include "par/cp_stage.h"
#include "prog/meshopt.h"
#include "prog/trainopt_check.h"

/* --dp, --tp, --pp: a positive size or -1; 1, or -1. */
static int
axis_value(const char *opt, const char *a, int *v, char *err, size_t errlen)
{
	if (cli_int_value(opt, a, -1, 1 << 20, v, err, errlen) < 0)
		return -1;
	if (*v == 0)
		return cli_fail(err, errlen, "%s: want a positive size or -1, "
		    "not 0", opt);
	return 1;
}

/* --cp, --ep, --ranks-per-host: a positive count; 1, or -1. */
static int
count_value(const char *opt, const char *a, int *v, char *err,
    size_t errlen)
{
	return cli_taken(cli_int_value(opt, a, 1, 1 << 20, v, err, errlen));
}

int
meshopt_option(struct meshopt *o, int c, const char *a, char *err,
    size_t errlen)
{
	if (trainer_pipe_option(&o->p, c, a, "gpipe, 1f1b, zb-h1 or "
	    "interleaved", 0))
		return 1;
	switch (c) {
	case MESHOPT_DATA:
	case 'i': o->data = a; break;
	case 't': o->targets = a; break;
	case MESHOPT_DP: return axis_value("--dp", a, &o->dp, err, errlen);
	case MESHOPT_TP: return axis_value("--tp", a, &o->tp, err, errlen);
	case MESHOPT_PP: return axis_value("--pp", a, &o->pp, err, errlen);
	case MESHOPT_PRINT: o->print = 1; break;
	case MESHOPT_FT: o->ft = 1; break;
	case MESHOPT_CP: return count_value("--cp", a, &o->cp, err, errlen);
	case MESHOPT_CP_MODE:
		if (strcmp(a, "ring") != 0 && strcmp(a, "zigzag") != 0)
			return cli_fail(err, errlen, "--cp-mode: want ring or "
			    "zigzag, not '%s'", a);
		o->cp_zigzag = strcmp(a, "zigzag") == 0;
		break;
	case MESHOPT_EP: return count_value("--ep", a, &o->ep, err, errlen);
	case MESHOPT_EXPERT_CSV: o->expert_csv = a; break;
	case MESHOPT_DISPATCH:
		if (ep_dispatch_parse(a, &o->dispatch) < 0)
			return cli_fail(err, errlen, "--dispatch: want alltoall "
			    "or allgather, not '%s'", a);
		break;
	case MESHOPT_PER_HOST:
		return count_value("--ranks-per-host", a, &o->per_host, err,
		    errlen);
	default: return 0;
	}
	return 1;
}

void
meshopt_finish(struct meshopt *o)
{
	if (o->dp == MESHOPT_AXIS_UNSET)
		o->dp = o->tp == -1 || o->pp == -1 ? 1 : -1;
	trainer_pipe_virtual(&o->p, "");
}

int
meshopt_check(struct meshopt *o, char *err, size_t errlen)
{
	if (trainopt_steps_check(&o->c, "give --steps K or --epochs E", err,
	    errlen) < 0 || dpopt_check(&o->dpo, o->ckpt.every, err,
	    errlen) < 0)
		return -1;
	if (o->ep > 1 && o->dpo.sync_every > 0)
		return cli_fail(err, errlen, "--ep with --sync-every: a "
		    "replica's local steps would move the experts it runs on "
		    "its rows only");
	/* a sequence's ranks must step alike; local SGD's replicas drift */
	if (o->cp > 1 && o->dpo.sync_every > 0)
		return cli_fail(err, errlen, "--cp %d and --sync-every %ld: the "
		    "ranks of a sequence must step with the same gradients",
		    o->cp, o->dpo.sync_every);
	/* not yet composed: the experts' exchange over a replica's ranks
	 * routing parts of each sequence */
	if (o->cp > 1 && o->ep > 1)
		return cli_fail(err, errlen, "--cp %d and --ep %d: experts shard "
		    "over --dp replicas whose sequences are whole; take one of "
		    "them", o->cp, o->ep);
	return 0;
}

int
meshopt_mesh(const struct meshopt *o, struct mesh *mesh, int world,
    const struct nn_model *m, char *err, size_t errlen)
{
	if (mesh_resolve_cp(mesh, o->dp, o->tp, o->pp, o->cp, world, err,
	    errlen) < 0)
		return -1;
	if (m != NULL && (mesh_check_model(mesh, m, err, errlen) < 0 ||
	    cp_stage_check(m, mesh->cp, o->cp_zigzag, err, errlen) < 0 ||
	    ep_check(mesh->dp, o->ep, m, err, errlen) < 0))
		return -1;
	return 0;
}

/* The slow links' state in checkpoints, for the mesh: stages of one TP
 * rank, and --wire int8's error feedback once per parameter. */
static int
check_sync_mesh(const struct meshopt *o, const struct mesh *mesh,
    const struct nn_model *m, char *err, size_t errlen)
{
	const struct dp_opts *s = &o->dpo;
	const char *opt = s->sync_every > 0 ? "--sync-every" :
	    s->wire == DP_WIRE_INT8 ? "--wire int8" : NULL;

	if (opt == NULL || (o->ckpt.path == NULL && o->ckpt.resume == NULL))
		return 0;
	if (mesh->tp > 1)
		return cli_fail(err, errlen, "%s with --tp %d and --checkpoint or "
		    "--resume: checkpoints keep its state for stages of one TP "
		    "rank only", opt, mesh->tp);
	if (s->wire == DP_WIRE_INT8 && m->dims.arch == NN_GPT && mesh->pp > 1)
		return cli_fail(err, errlen, "--wire int8 with --pp %d on a gpt "
		    "and --checkpoint or --resume: the tied embedding's two "
		    "stages keep their own error feedback, checkpoints one",
		    mesh->pp);
	return 0;
}

/* --ft's refusals, each naming the options: the state a replica holds
 * on its own (a host's ZeRO-3 shards, error feedback, PowerSGD's, local
 * SGD's) or what is not built under it yet. */
static int
check_ft(struct meshopt *o, const struct mesh *mesh,
    const struct nn_model *m, char *err, size_t errlen)
{
	const char *with = dpopt_ft_with(&o->dpo);

	if (!o->ft)
		return 0;
	if (with == NULL)
		with = mesh->cp > 1 ? "--cp" : o->ep > 1 ? "--ep" :
		    o->ckpt.path != NULL ? "--checkpoint" : o->ckpt.resume !=
		    NULL ? "--resume" : o->p.trace != NULL ? "--trace" : NULL;
	if (with != NULL)
		return cli_fail(err, errlen, "--ft goes with plain allreduce on "
		    "--dp, --tp and --pp, not %s", with);
	if (trainopt_ft_check(mesh->dp, "--dp", &o->g, &o->dpo, err,
	    errlen) < 0)
		return -1;
	if (m->dims.moe.experts > 0)
		return cli_fail(err, errlen, "--ft and a model with experts: "
		    "their counts' sums come after the update");
	return 0;
}

int
meshopt_check_model(struct meshopt *o, const struct mesh *mesh,
    const struct nn_model *m, char *err, size_t errlen)
{
	if (o->p.micro > o->c.batch / mesh->dp)
		return cli_fail(err, errlen, "--microbatches %ld: more than the "
		    "%ld samples of the smallest replica's share of --batch %ld "
		    "over %d", o->p.micro, o->c.batch / mesh->dp, o->c.batch,
		    mesh->dp);
	if (dpopt_prefetch_check(&o->dpo, m, err, errlen) < 0 ||
	    check_sync_mesh(o, mesh, m, err, errlen) < 0 ||
	    check_ft(o, mesh, m, err, errlen) < 0)
		return -1;
	if (o->dpo.powersgd > 0 && mesh->tp > 1)
		return cli_fail(err, errlen, "--powersgd and --tp %d: PowerSGD "
		    "compresses whole matrices, not a TP rank's shards",
		    mesh->tp);
	return 0;
}

/* --print-mesh --ep X: the EP groups, X consecutive replicas of each
 * stage and shard. */
static void
print_ep(FILE *f, int X, const struct mesh *m)
{
	if (X <= 1)
		return;
	fprintf(f, "ep groups of %d:", X);
	for (int p = 0; p < m->pp; p++)
		for (int t = 0; t < m->tp; t++)
			for (int g = 0; g < m->dp; g += X)
				for (int k = 0; k < X; k++)
					fprintf(f, "%s%d%s", k ? " " : " [",
					    mesh_rank(m, p, g + k, t),
					    k == X - 1 ? "]" : "");
	fputc('\n', f);
}

int
meshopt_print(FILE *f, const struct meshopt *o, char *err, size_t errlen)
{
	struct mesh m;

	if (meshopt_mesh(o, &m, o->g.world > 0 ? o->g.world : 1, NULL, err,
	    errlen) < 0)
		return -1;
	if (m.dp % o->ep != 0)
		return cli_fail(err, errlen, "--ep %d does not divide the %d "
		    "data-parallel replicas (--dp %d)", o->ep, m.dp, m.dp);
	if (m.cp > 1)
		fprintf(f, "# mesh: dp %d x cp %d x tp %d x pp %d = %d ranks\n",
		    m.dp, m.cp, m.tp, m.pp, m.world);
	else
		fprintf(f, "# mesh: dp %d x tp %d x pp %d = %d ranks\n", m.dp,
		    m.tp, m.pp, m.world);
	mesh_print(f, &m, o->per_host);
	print_ep(f, o->ep, &m);
	return 0;
}

void
meshopt_declare(struct prog_job *job, const struct meshopt *o,
    const struct mesh *m, const struct pipe_cfg *cfg)
{
	prog_job_init(job, "collx-train");
	prog_job_add(job, "--dp", "%d", m->dp);
	prog_job_add(job, "--tp", "%d", m->tp);
	prog_job_add(job, "--pp", "%d", m->pp);
	prog_job_add(job, "--cp", "%d", m->cp);
	prog_job_add(job, "--cp-mode", "%s", cfg->cp_zigzag ? "zigzag" :
	    "ring");
	prog_job_add(job, "--ep", "%d", o->ep);
	prog_job_add(job, "--dispatch", "%s", ep_dispatch_name(o->dispatch));
	trainer_pipe_declare(job, cfg, o->p.split);
	trainer_pipe_declare_run(job, cfg, &o->ckpt);
	dpopt_agree(job, &cfg->dpo, 0);
	prog_job_flag(job, "--ft", o->ft);
}
