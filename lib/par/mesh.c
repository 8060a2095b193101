/* mesh: the D x T x P factorization of the world, its checks against a
 * model (made before any rank talks to another, so every rank refuses a
 * bad mesh alike), the sub-groups (comm_split) and the printed layout. */
#include <stdio.h>
#include <string.h>

#include "cli/util.h"
#include "par/mesh.h"
#include "par/pipe.h"

static const char *const axis_name[3] = { "--dp", "--tp", "--pp" };

/* "--dp 2 x --tp -1 x --pp 3", for messages. */
static void
mesh_spell(char *buf, size_t len, const int v[3])
{
	snprintf(buf, len, "%s %d x %s %d x %s %d", axis_name[0], v[0],
	    axis_name[1], v[1], axis_name[2], v[2]);
}

int
mesh_resolve(struct mesh *m, int dp, int tp, int pp, int world, char *err,
    size_t errlen)
{
	int v[3] = { dp, tp, pp }, free_axis = -1, i;
	long prod = 1;
	char s[96];

	mesh_spell(s, sizeof(s), v);
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

void
mesh_coord(const struct mesh *m, int rank, struct mesh_coord *c)
{
	c->tp = rank % m->tp;
	c->dp = rank / m->tp % m->dp;
	c->pp = rank / m->tp / m->dp;
}

int
mesh_rank(const struct mesh *m, int pp, int dp, int tp)
{
	return (pp * m->dp + dp) * m->tp + tp;
}

int
mesh_split(const struct mesh *m, struct comm *world, struct mesh_groups *g,
    char *err, size_t errlen)
{
	struct mesh_coord c;

	memset(g, 0, sizeof(*g));
	mesh_coord(m, comm_rank(world), &c);
	if (comm_split(world, c.pp * m->dp + c.dp, c.tp, &g->tp, err,
	    errlen) < 0 ||
	    comm_split(world, c.pp * m->tp + c.tp, c.dp, &g->dp, err,
	    errlen) < 0 ||
	    comm_split(world, c.dp * m->tp + c.tp, c.pp, &g->pp, err,
	    errlen) < 0) {
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
	memset(g, 0, sizeof(*g));
}

/* The groups along axis (0 pp, 1 dp, 2 tp): "NAME groups of N: [a b]
 * [c d] ...", one bracket per place on the other two axes. */
static void
print_groups(FILE *f, const struct mesh *m, const char *name, int axis)
{
	int sz[3] = { m->pp, m->dp, m->tp }, a, b, k, o1, o2;
	int at[3];

	/* the other two axes, slower one first */
	o1 = axis == 0 ? 1 : 0;
	o2 = axis == 2 ? 1 : 2;
	fprintf(f, "%s groups of %d:", name, sz[axis]);
	for (a = 0; a < sz[o1]; a++)
		for (b = 0; b < sz[o2]; b++) {
			at[o1] = a;
			at[o2] = b;
			fputs(" [", f);
			for (k = 0; k < sz[axis]; k++) {
				at[axis] = k;
				fprintf(f, "%s%d", k ? " " : "",
				    mesh_rank(m, at[0], at[1], at[2]));
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
	fprintf(f, "rank,pp,dp,tp,host\n");
	for (r = 0; r < m->world; r++) {
		mesh_coord(m, r, &c);
		fprintf(f, "%d,%d,%d,%d,%d\n", r, c.pp, c.dp, c.tp,
		    r / per_host);
	}
	print_groups(f, m, "tp", 2);
	print_groups(f, m, "dp", 1);
	print_groups(f, m, "pp", 0);
}
