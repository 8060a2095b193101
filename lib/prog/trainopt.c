/* trainopt: the optimizer options and the loss CSV that collx-dp,
 * collx-ps, collx-tp and collx-pipe share. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/util.h"
#include "prog/trainopt.h"
#include "tensor/tensor.h"

/* A number in [min, max) from option opt, written as cli's strict
 * parsers take it (collx(7): no '+', blank, hexadecimal, inf or nan),
 * or -1 with the reason. With end, the number ends at a ',' or the end
 * of s, and *end points there. */
static int
opt_number(const char *opt, const char *s, double min, double max, double *out,
    char **end, char *err, size_t errlen)
{
	size_t len = end != NULL ? strcspn(s, ",") : strlen(s);
	char num[64], why[COLLX_ERRLEN];

	if (len >= sizeof num)
		goto bad;
	memcpy(num, s, len);
	num[len] = '\0';
	if (cli_double_value(opt, num, -HUGE_VAL, HUGE_VAL, out, why,
	    sizeof why) < 0 || *out < min || *out >= max)
		goto bad;
	if (end != NULL)
		*end = (char *)s + len;
	return 0;
bad:
	return cli_fail(err, errlen, "%s: '%s' is not a number in [%g, %g)",
	    opt, s, min, max);
}

int
trainopt_optim_option(struct trainopt_optim *o, int opt, const char *arg)
{
	switch (opt) {
	case TRAINOPT_OPTIMIZER: o->kind = arg; break;
	case TRAINOPT_LR: o->lr = arg; break;
	case TRAINOPT_MOMENTUM: o->momentum = arg; break;
	case TRAINOPT_WD: o->weight_decay = arg; break;
	case TRAINOPT_BETAS: o->betas = arg; break;
	case TRAINOPT_EPS: o->eps = arg; break;
	default: return 0;
	}
	return 1;
}

int
trainopt_optim_config(const struct trainopt_optim *o, struct nn_optim_cfg *c,
    char *err, size_t errlen)
{
	enum nn_optim_kind k = NN_SGD;
	char *e;

	if (o->kind != NULL && nn_optim_parse(o->kind, &k) < 0)
		return cli_fail(err, errlen, "--optimizer: want sgd or adamw, not '%s'",
		    o->kind);
	nn_optim_defaults(c, k);
	if (k == NN_ADAMW && o->momentum != NULL)
		return cli_fail(err, errlen, "--momentum: goes with --optimizer sgd");
	if ((o->lr && opt_number("--lr", o->lr, 0, 1e9, &c->lr, NULL, err,
	    errlen) < 0) || (o->momentum && opt_number("--momentum",
	    o->momentum, 0, 1e9, &c->momentum, NULL, err, errlen) < 0) ||
	    (o->weight_decay && opt_number("--weight-decay", o->weight_decay, 0,
	    1e9, &c->weight_decay, NULL, err, errlen) < 0) ||
	    (o->eps && opt_number("--eps", o->eps, 0, 1, &c->eps, NULL, err,
	    errlen) < 0))
		return -1;
	if (o->betas == NULL)
		return 0;
	if (opt_number("--betas", o->betas, 0, 1, &c->beta1, &e, err, errlen) < 0)
		return -1;
	if (*e != ',')
		return cli_fail(err, errlen, "--betas: want B1,B2, not '%s'", o->betas);
	return opt_number("--betas", e + 1, 0, 1, &c->beta2, NULL, err, errlen);
}

void
trainopt_optim_agree(struct prog_job *j, const struct nn_optim_cfg *c)
{
	prog_job_add(j, "--optimizer", "%s", c->kind == NN_ADAMW ? "adamw" :
	    "sgd");
	prog_job_add(j, "--lr", "%.10g", c->lr);
	if (c->kind == NN_SGD)
		prog_job_add(j, "--momentum", "%.10g", c->momentum);
	prog_job_add(j, "--weight-decay", "%.10g", c->weight_decay);
	if (c->kind == NN_ADAMW) {
		prog_job_add(j, "--betas", "%.10g,%.10g", c->beta1, c->beta2);
		prog_job_add(j, "--eps", "%.10g", c->eps);
	}
}


/*
 * A resumed run (its first step past 0) keeps the rows the runs before it
 * left at path for the steps before first, when the file's header is
 * header: a restart from a checkpoint then loses no step and repeats none
 * (a failed attempt's rows from first on are dropped). The rows kept, as
 * text (malloc'd, *len bytes), or NULL.
 */
static char *
loss_csv_kept(const char *path, const char *header, long first, size_t *len)
{
	FILE *f;
	char *line = NULL, *kept = NULL, *end;
	size_t cap = 0;
	ssize_t got;
	long step;

	*len = 0;
	if (first <= 0 || (f = fopen(path, "r")) == NULL)
		return NULL;
	if ((got = getline(&line, &cap, f)) > 0 && line[got - 1] == '\n' &&
	    (size_t)got - 1 == strlen(header) &&
	    strncmp(line, header, (size_t)got - 1) == 0)
		while ((got = getline(&line, &cap, f)) > 0) {
			step = strtol(line, &end, 10);
			if (end == line || *end != ',' || step < 0 ||
			    step >= first || line[got - 1] != '\n')
				continue;
			kept = cli_reallocarray(kept, *len + (size_t)got, 1);
			memcpy(kept + *len, line, (size_t)got);
			*len += (size_t)got;
		}
	free(line);
	fclose(f);
	return kept;
}

int
trainopt_loss_csv_write_cols(const char *path, const struct train_step *s,
    long n, int cols, char *err, size_t errlen)
{
	static const char *const headers[] = { TRAINOPT_LOSS_HEADER,
	    TRAINOPT_LOSS_HEADER ",bytes_sent",
	    TRAINOPT_LOSS_HEADER ",replicas",
	    TRAINOPT_LOSS_HEADER ",bytes_sent,replicas" };
	char header[160];
	int sent = cols & TRAINOPT_LOSS_SENT;
	size_t cap, len, klen;
	char *kept, *buf;
	long k;
	int rc;

	snprintf(header, sizeof header, "%s%s", headers[cols & 3],
	    n > 0 && s[0].moe ? ",moe_dropped,moe_imbalance" : "");
	kept = loss_csv_kept(path, header, n > 0 ? s[0].step : 0, &klen);
	cap = 112 + klen + (size_t)n * 200;
	buf = cli_calloc(cap, 1);
	len = (size_t)snprintf(buf, cap, "%s\n", header);
	if (kept != NULL)
		memcpy(buf + len, kept, klen);
	len += klen;
	free(kept);
	for (k = 0; k < n; k++) {
		len += (size_t)snprintf(buf + len, cap - len, "%ld,%ld,%.9g,%ld,"
		    "%.6f,%.1f", s[k].step, s[k].epoch, s[k].loss, s[k].tokens,
		    s[k].seconds, s[k].seconds > 0 ? s[k].tokens / s[k].seconds : 0);
		if (sent)
			len += (size_t)snprintf(buf + len, cap - len, ",%llu",
			    (unsigned long long)s[k].bytes_sent);
		if (cols & TRAINOPT_LOSS_REPLICAS)
			len += (size_t)snprintf(buf + len, cap - len, ",%d",
			    s[k].replicas);
		if (s[0].moe)
			len += (size_t)snprintf(buf + len, cap - len, ",%.6g,%.6g",
			    s[k].moe_dropped, s[k].moe_imbalance);
		buf[len++] = '\n';
	}
	rc = tensor_write_file(path, buf, len, err, errlen);
	free(buf);
	return rc;
}

int
trainopt_loss_csv_write(const char *path, const struct train_step *s, long n,
    char *err, size_t errlen)
{
	return trainopt_loss_csv_write_cols(path, s, n, 0, err, errlen);
}

int
trainopt_loss_csv_write_sent(const char *path, const struct train_step *s,
    long n, char *err, size_t errlen)
{
	return trainopt_loss_csv_write_cols(path, s, n, TRAINOPT_LOSS_SENT,
	    err, errlen);
}

int
trainopt_model_load(const char *path, struct nn_model *m, char *err,
    size_t errlen)
{
	struct tensor_set s = { 0 };
	char e[COLLX_ERRLEN];
	int rc = 0;

	if (tensor_load(path, &s, err, errlen) < 0)	/* names path */
		rc = -1;
	else if (nn_model_load(m, &s, e, sizeof(e)) < 0)
		rc = cli_fail(err, errlen, "%s: %s", path, e);
	tensor_set_free(&s);
	return rc;
}

int
trainopt_ckpt_option(struct trainopt_ckpt *o, int opt, const char *arg,
    char *err, size_t errlen)
{
	switch (opt) {
	case TRAINOPT_CKPT: o->path = arg; break;
	case TRAINOPT_CKPT_EVERY:
		if (cli_long_value("--checkpoint-every", arg, 1, 1L << 40,
		    &o->every, err, errlen) < 0)
			return -1;
		break;
	case TRAINOPT_RESUME: o->resume = arg; break;
	default: return 0;
	}
	return 1;
}

int
trainopt_model_start(const struct trainopt_ckpt *k, const char *model,
    struct nn_model *m, struct ckpt_state *st, char *err, size_t errlen)
{
	if (k->resume != NULL)
		return ckpt_load(k->resume, m, st, err, errlen);
	return trainopt_model_load(model, m, err, errlen);
}

int
trainopt_resume_check(const struct trainopt_ckpt *k,
    const struct ckpt_state *st, long batch, char *err, size_t errlen)
{
	if (k->resume != NULL && st->batch != batch)
		return cli_fail(err, errlen, "%s: trained with --batch %ld, not %ld "
		    "(the data position is step * batch)", k->resume, st->batch,
		    batch);
	return 0;
}

/* An option of the shared sets p has; 0 when opt is none of them. */
static int
shared_option(const struct trainopt_parser *p, int opt, const char *arg)
{
	struct trainopt_common *c = p->common;
	char e[COLLX_ERRLEN];
	int k = 0;

	if (p->ckpt != NULL &&
	    (k = trainopt_ckpt_option(p->ckpt, opt, arg, e, sizeof(e))) < 0)
		cli_usage_error("%s", e);
	if (k || cli_std_option(opt, p->usage) ||
	    (p->g != NULL && cli_group_getopt(p->g, opt, arg)) ||
	    (p->optim != NULL && trainopt_optim_option(p->optim, opt, arg)) ||
	    (p->dpo != NULL && dpopt_option(p->dpo, opt, arg)))
		return 1;
	if (c == NULL)
		return 0;
	if (prog_precision_option(&c->precision, opt, arg))
		return 1;
	switch (opt) {
	case 'm': c->model = arg; break;
	case 'o': c->out = arg; break;
	case CLI_OPT_TIMING: c->timing = arg; break;
	case TRAINOPT_LOSS_CSV: c->loss_csv = arg; break;
	case TRAINOPT_THREADS:
		c->threads = (int)cli_parse_long("--threads", arg, 1, 1024);
		break;
	case TRAINOPT_BATCH:
		c->batch = cli_parse_long("--batch", arg, 1, 1L << 40);
		break;
	case TRAINOPT_STEPS:
		c->steps = cli_parse_long("--steps", arg, 0, 1L << 40);
		break;
	case TRAINOPT_EPOCHS:
		c->epochs = cli_parse_double("--epochs", arg, 0, 1e9);
		break;
	default: return 0;
	}
	return 1;
}

int
trainopt_parse(const struct trainopt_parser *p, int argc, char **argv,
    const char *shortopts, const struct option *longopts)
{
	int c;

	while ((c = getopt_long(argc, argv, shortopts, longopts, NULL)) != -1)
		if (!shared_option(p, c, optarg) && !p->own(p->ctx, c, optarg))
			cli_option_error(argc, argv, shortopts);
	if (argc - optind > p->operands)
		cli_usage_error("unexpected argument '%s'",
		    argv[optind + p->operands]);
	return optind;
}

int
trainopt_targets_check(const struct nn_model *m, const char *targets,
    const char *opt, char *err, size_t errlen)
{
	if (m->dims.arch == NN_GPT && targets != NULL)
		return cli_fail(err, errlen, "the gpt model takes its targets from "
		    "the token file: no %s", opt);
	if (m->dims.arch != NN_GPT && targets == NULL)
		return cli_fail(err, errlen, "the %s model needs %s",
		    nn_arch_name(m->dims.arch), opt);
	return 0;
}

void
trainopt_subst_paths(const char **p[], char *owned[], size_t n,
    const struct cli_group *g)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (*p[i] != NULL)
			*p[i] = owned[i] = cli_subst(*p[i], g->rank, g->world);
}

int
trainopt_model_save(const char *path, const struct nn_model *m, char *err,
    size_t errlen)
{
	struct tensor_set s = { 0 };
	char e[COLLX_ERRLEN];
	int rc;

	if (nn_model_to_set(m, &s, e, sizeof(e)) < 0)
		return cli_fail(err, errlen, "%s: %s", path, e);
	rc = tensor_save(path, &s, err, errlen);	/* its reason names path */
	tensor_set_free(&s);
	return rc;
}
