/* mesh: the D x T x P factorization of the world, its checks against a
 * model (made before any rank talks to another, so every rank refuses a
 * bad mesh alike), the sub-groups (comm_split) and the printed layout. */
#include <stdio.h>
#include <string.h>

#include "cli/util.h"
#include "par/mesh.h"
#include "par/pipe.h"

static const char *const axis_name[3] = { "--dp", "--tp", "--pp" };

/* "--dp 2 x --tp -1 x --pp 3" (and " x --cp C" above 1), for messages. */
static void
mesh_spell(char *buf, size_t len, const int v[3], int cp)
{
	int n = snprintf(buf, len, "%s %d x %s %d x %s %d", axis_name[0],
	    v[0], axis_name[1], v[1], axis_name[2], v[2]);

	if (cp > 1 && n > 0 && (size_t)n < len)
		snprintf(buf + n, len - (size_t)n, " x --cp %d", cp);
}

int
mesh_resolve(struct mesh *m, int dp, int tp, int pp, int world, char *err,
    size_t errlen)
{
	return mesh_resolve_cp(m, dp, tp, pp, 1, world, err, errlen);
}

int
mesh_resolve_cp(struct mesh *m, int dp, int tp, int pp, int cp, int world,
    char *err, size_t errlen)
{
	int v[3] = { dp, tp, pp }, free_axis = -1, i;
	long prod = cp;
	char s[112];

	mesh_spell(s, sizeof(s), v, cp);
	for (i = 0; i < 3; i++) {
		if (v[i] == -1 && free_axis < 0)
			free_axis = i;
		else if (v[i] == -1)
			return cli_fail(err, errlen, "mesh %s: only one of "
			    "--dp, --tp and --pp may be -1", s);
		else if (v[i] < 1)
			return cli_fail(err, errlen, "mesh %s: %s %d is not a "
			    "positive size (or -1)", s, axis_name[i], v[i]);
		else
			prod *= v[i];
	}
	if (free_axis >= 0) {
		if (prod > world || world % prod != 0)
			return cli_fail(err, errlen, "mesh %s: the world's %d "
			    "ranks are not a multiple of the other sizes' "
			    "product %ld", s, world, prod);
		v[free_axis] = (int)(world / prod);
	} else if (prod != world)
		return cli_fail(err, errlen, "mesh %s = %ld ranks, but the "
		    "world has %d", s, prod, world);
	m->dp = v[0];
	m->tp = v[1];
	m->pp = v[2];
	m->world = world;
	m->cp = cp;
	return 0;
}

int
mesh_check_model(const struct mesh *m, const struct nn_model *md, char *err,
    size_t errlen)
{
	const struct nn_dims *d = &md->dims;
	int layers = pipe_layers(md);
	size_t i, n;

	if (d->arch != NN_MLP && d->heads % m->tp != 0)
		return cli_fail(err, errlen, "mesh: %d attention heads are not "
		    "divisible by --tp %d", d->heads, m->tp);
	for (i = 0; i < md->ntensors; i++) {
		const struct nn_param *p = &md->table[i];

		n = strlen(p->name);
		if (n >= 10 && strcmp(p->name + n - 10, "fc1.weight") == 0 &&
		    p->shape[0] % m->tp != 0)
			return cli_fail(err, errlen, "mesh: hidden width %lld "
			    "of %s is not divisible by --tp %d",
			    (long long)p->shape[0], p->name, m->tp);
	}
	if (layers < m->pp)
		return cli_fail(err, errlen, "mesh: %d layers cannot fill "
		    "--pp %d stages (a stage holds at least one)", layers,
		    m->pp);
	return 0;
}

/* C; a mesh written field by field without it has none (1). */
static int
cp_size(const struct mesh *m)
{
	return m->cp > 0 ? m->cp : 1;
}

void
mesh_coord(const struct mesh *m, int rank, struct mesh_coord *c)
{
	c->tp = rank % m->tp;
	c->cp = rank / m->tp % cp_size(m);
	c->dp = rank / m->tp / cp_size(m) % m->dp;
	c->pp = rank / m->tp / cp_size(m) / m->dp;
}

int
mesh_rank(const struct mesh *m, int pp, int dp, int tp)
{
	return mesh_rank_cp(m, pp, dp, 0, tp);
}

int
mesh_rank_cp(const struct mesh *m, int pp, int dp, int cp, int tp)
{
	return ((pp * m->dp + dp) * cp_size(m) + cp) * m->tp + tp;
}

int
mesh_split(const struct mesh *m, struct comm *world, struct mesh_groups *g,
    char *err, size_t errlen)
{
	struct mesh_coord c;
	int C = cp_size(m);

	memset(g, 0, sizeof(*g));
	mesh_coord(m, comm_rank(world), &c);
	/* colours: the place on the other axes; C = 1 gives the same */
	if (comm_split(world, (c.pp * m->dp + c.dp) * C + c.cp, c.tp,
	    &g->tp, err, errlen) < 0 ||
	    comm_split(world, c.pp * m->tp + c.tp, c.dp * C + c.cp,
	    &g->dp, err, errlen) < 0 ||
	    comm_split(world, (c.dp * C + c.cp) * m->tp + c.tp, c.pp,
	    &g->pp, err, errlen) < 0 ||
	    comm_split(world, (c.pp * m->dp + c.dp) * m->tp + c.tp, c.cp,
	    &g->cp, err, errlen) < 0) {
		mesh_groups_close(g);
		return -1;
	}
	return 0;
}

void
mesh_groups_close(struct mesh_groups *g)
{
	if (g->tp != NULL)
		comm_close(g->tp);
	if (g->dp != NULL)
		comm_close(g->dp);
	if (g->pp != NULL)
		comm_close(g->pp);
	if (g->cp != NULL)
		comm_close(g->cp);
	memset(g, 0, sizeof(*g));
}

/* The groups along axis (0 pp, 1 dp, 2 cp, 3 tp): "NAME groups of N:
 * [a b] [c d] ...", one bracket per place on the other axes, slower
 * ones first. */
static void
print_groups(FILE *f, const struct mesh *m, const char *name, int axis)
{
	int sz[4] = { m->pp, m->dp, cp_size(m), m->tp }, at[4], o[3], n = 0;
	int g, k;

	for (k = 0; k < 4; k++)
		if (k != axis)
			o[n++] = k;
	fprintf(f, "%s groups of %d:", name, sz[axis]);
	for (g = 0; g < sz[o[0]] * sz[o[1]] * sz[o[2]]; g++) {
		at[o[2]] = g % sz[o[2]];
		at[o[1]] = g / sz[o[2]] % sz[o[1]];
		at[o[0]] = g / sz[o[2]] / sz[o[1]];
		fputs(" [", f);
		for (k = 0; k < sz[axis]; k++) {
			at[axis] = k;
			fprintf(f, "%s%d", k ? " " : "",
			    mesh_rank_cp(m, at[0], at[1], at[2], at[3]));
		}
		fputc(']', f);
	}
	fputc('\n', f);
}

void
mesh_print(FILE *f, const struct mesh *m, int per_host)
{
	struct mesh_coord c;
	int r;

	if (per_host <= 0)
		per_host = m->world;
	/* C = 1: the columns and groups of a mesh without CP, as before */
	fprintf(f, m->cp > 1 ? "rank,pp,dp,cp,tp,host\n" :
	    "rank,pp,dp,tp,host\n");
	for (r = 0; r < m->world; r++) {
		mesh_coord(m, r, &c);
		if (m->cp > 1)
			fprintf(f, "%d,%d,%d,%d,%d,%d\n", r, c.pp, c.dp, c.cp,
			    c.tp, r / per_host);
		else
			fprintf(f, "%d,%d,%d,%d,%d\n", r, c.pp, c.dp, c.tp,
			    r / per_host);
	}
	print_groups(f, m, "tp", 3);
	if (m->cp > 1)
		print_groups(f, m, "cp", 2);
	print_groups(f, m, "dp", 1);
	print_groups(f, m, "pp", 0);
}
