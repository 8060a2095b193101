/*
 * test_par_mesh: the device mesh of lib/par/mesh.c. Factorizations and
 * their refusals, each rank's place against rank = (pp*D + dp)*T + tp,
 * the checks against models, and the three sub-groups over forked ranks:
 * each group's size, the rank's place in it and its members (an
 * allgather of world ranks) against closed forms written out here, and a
 * sum over each group at once.
 */
#include <signal.h>
#include <stdint.h>
#include <string.h>

#include "comm/coll.h"
#include "par/mesh.h"
#include "par_world.h"

static void
resolve(void)
{
	struct mesh m;
	char e[256];

	UNIT_OK(mesh_resolve(&m, 2, 2, 2, 8, e, sizeof e) == 0 && m.dp == 2 &&
	    m.tp == 2 && m.pp == 2 && m.world == 8, "2 x 2 x 2 on 8 ranks");
	UNIT_OK(mesh_resolve(&m, -1, 2, 1, 6, e, sizeof e) == 0 && m.dp == 3,
	    "--dp -1 takes 6 / (2 * 1) = 3");
	UNIT_OK(mesh_resolve(&m, 1, 1, -1, 5, e, sizeof e) == 0 && m.pp == 5,
	    "--pp -1 takes all 5");
	UNIT_OK(mesh_resolve(&m, 2, 1, 2, 6, e, sizeof e) < 0 &&
	    strcmp(e, "mesh --dp 2 x --tp 1 x --pp 2 = 4 ranks, but the world "
	    "has 6") == 0, "a product that is not the world: the numbers");
	UNIT_OK(mesh_resolve(&m, 4, -1, 1, 6, e, sizeof e) < 0 &&
	    strstr(e, "6 ranks are not a multiple of the other sizes' product "
	    "4") != NULL, "-1 where the others do not divide the world");
	UNIT_OK(mesh_resolve(&m, 8, -1, 1, 4, e, sizeof e) < 0,
	    "-1 where the others exceed the world");
	UNIT_OK(mesh_resolve(&m, -1, 1, -1, 4, e, sizeof e) < 0 &&
	    strstr(e, "only one of") != NULL, "two sizes of -1");
	UNIT_OK(mesh_resolve(&m, 0, 1, 4, 4, e, sizeof e) < 0 &&
	    strstr(e, "--dp 0 is not a positive size") != NULL, "a size of 0");
}

static void
places(void)
{
	struct mesh m = { .dp = 3, .tp = 2, .pp = 2, .world = 12 };
	struct mesh_coord c;
	int r, ok = 1, want;

	for (r = 0; r < m.world; r++) {
		mesh_coord(&m, r, &c);
		want = (c.pp * 3 + c.dp) * 2 + c.tp;
		ok &= want == r && c.tp < 2 && c.dp < 3 && c.pp < 2 &&
		    mesh_rank(&m, c.pp, c.dp, c.tp) == r;
	}
	mesh_coord(&m, 7, &c);
	UNIT_OK(ok && c.pp == 1 && c.dp == 0 && c.tp == 1,
	    "3 x 2 x 2: every rank's place gives it back; rank 7 is stage 1, "
	    "replica 0, shard 1");
}

static const struct nn_dims gpt2 = { .arch = NN_GPT, .vocab = 13,
	.d_model = 8, .layers = 2, .heads = 2, .d_ff = 12, .seq = 4 };
static const struct nn_dims mlp3 = { .arch = NN_MLP, .d_in = 4,
	.d_hidden = 6, .d_out = 4, .layers = 3 };

static void
model_checks(void)
{
	struct mesh m = { .dp = 1, .tp = 2, .pp = 2, .world = 4 };
	struct nn_model g, p;
	char e[256];

	if (!UNIT_OK(par_model(&g, &gpt2, 1) == 0 && par_model(&p, &mlp3, 1) ==
	    0, "models load"))
		return;
	UNIT_OK(mesh_check_model(&m, &g, e, sizeof e) == 0,
	    "gpt: 2 heads, d_ff 12, 2 layers fit tp 2 x pp 2");
	m.tp = 4;
	UNIT_OK(mesh_check_model(&m, &g, e, sizeof e) < 0 && strcmp(e,
	    "mesh: 2 attention heads are not divisible by --tp 4") == 0,
	    "gpt: 2 heads on tp 4");
	m.tp = 1;
	m.pp = 3;
	UNIT_OK(mesh_check_model(&m, &g, e, sizeof e) < 0 && strcmp(e,
	    "mesh: 2 layers cannot fill --pp 3 stages (a stage holds at least "
	    "one)") == 0, "gpt: 2 layers on 3 stages");
	m.tp = 3;
	UNIT_OK(mesh_check_model(&m, &p, e, sizeof e) == 0,
	    "mlp: hidden 6 on tp 3, 3 layers on 3 stages");
	m.tp = 4;
	UNIT_OK(mesh_check_model(&m, &p, e, sizeof e) < 0 && strcmp(e,
	    "mesh: hidden width 6 of layers.0.fc1.weight is not divisible by "
	    "--tp 4") == 0, "mlp: hidden 6 on tp 4");
	nn_model_free(&g);
	nn_model_free(&p);
}

/* The members of one group, world ranks in group order, n of them: the
 * rank r plus (k - own) * stride for k = 0 .. n-1. */
static int
members_ok(struct comm *sub, int r, int own, int n, int stride)
{
	int32_t me = r, got[PAR_MAXW];

	if (sub == NULL || comm_size(sub) != n || comm_rank(sub) != own ||
	    coll_allgather(sub, &me, got, 1, DT_I32, COLL_AUTO) < 0)
		return 0;
	for (int k = 0; k < n; k++)
		if (got[k] != r + (k - own) * stride)
			return 0;
	return 1;
}

static int
groups_rank(struct comm *c, void *arg)
{
	const struct mesh *m = arg;
	int r = comm_rank(c), D = m->dp, T = m->tp, P = m->pp;
	int tp = r % T, dp = r / T % D, pp = r / (T * D);
	struct mesh_groups g;
	char e[256];
	int64_t v[3] = { r, r, r };
	int ok;

	ok = mesh_split(m, c, &g, e, sizeof e) == 0;
	if (!par_check(ok, "rank %d of %d x %d x %d: mesh_split%s%s", r, D, T,
	    P, ok ? "" : ": ", ok ? "" : e))
		return 1;
	ok = members_ok(g.tp, r, tp, T, 1) && members_ok(g.dp, r, dp, D, T) &&
	    members_ok(g.pp, r, pp, P, T * D);
	par_check(ok, "rank %d of %d x %d x %d: tp, dp and pp groups hold "
	    "r + (k - own) * 1, T, T*D", r, D, T, P);
	/* one sum over each group: the members' world ranks */
	ok = coll_allreduce(g.tp, &v[0], 1, DT_I64, COLL_SUM, COLL_AUTO) == 0 &&
	    coll_allreduce(g.dp, &v[1], 1, DT_I64, COLL_SUM, COLL_AUTO) == 0 &&
	    coll_allreduce(g.pp, &v[2], 1, DT_I64, COLL_SUM, COLL_AUTO) == 0;
	par_check(ok && v[0] == (int64_t)T * (r - tp) + T * (T - 1) / 2 &&
	    v[1] == (int64_t)D * (r - dp * T) + (int64_t)T * D * (D - 1) / 2 &&
	    v[2] == (int64_t)P * (r - pp * T * D) +
	    (int64_t)T * D * P * (P - 1) / 2,
	    "rank %d of %d x %d x %d: sums over the three groups", r, D, T, P);
	mesh_groups_close(&g);
	return 0;
}

/* --cp: rank = ((pp*D + dp)*C + cp)*T + tp, written out here. */
static void
cp_places(void)
{
	struct mesh m;
	struct mesh_coord c;
	char e[256];
	int r, ok = 1;

	UNIT_OK(mesh_resolve_cp(&m, -1, 2, 2, 3, 24, e, sizeof e) == 0 &&
	    m.dp == 2 && m.cp == 3, "--dp -1 x tp 2 x pp 2 x cp 3 on 24: dp 2");
	UNIT_OK(mesh_resolve_cp(&m, 2, 1, 1, 2, 6, e, sizeof e) < 0 &&
	    strcmp(e, "mesh --dp 2 x --tp 1 x --pp 1 x --cp 2 = 4 ranks, but "
	    "the world has 6") == 0, "cp in the product and the message");
	UNIT_OK(mesh_resolve(&m, 2, 2, 1, 4, e, sizeof e) == 0 && m.cp == 1,
	    "mesh_resolve: no cp");
	mesh_resolve_cp(&m, 2, 2, 2, 3, 24, e, sizeof e);
	for (r = 0; r < m.world; r++) {
		mesh_coord(&m, r, &c);
		ok &= ((c.pp * 2 + c.dp) * 3 + c.cp) * 2 + c.tp == r &&
		    c.cp < 3 && c.tp < 2 && c.dp < 2 && c.pp < 2 &&
		    mesh_rank_cp(&m, c.pp, c.dp, c.cp, c.tp) == r;
	}
	UNIT_OK(ok, "dp 2 x cp 3 x tp 2 x pp 2: every rank's place gives it "
	    "back");
}

/* The groups of dp 2 x cp 2 x tp 2: cp groups of stride T, and one DP
 * group of the D*C ranks of a stage and shard (own index dp*C + cp). */
static int
cp_groups_rank(struct comm *c, void *arg)
{
	const struct mesh *m = arg;
	int r = comm_rank(c), T = m->tp, C = m->cp, D = m->dp;
	int tp = r % T, cp = r / T % C, dp = r / T / C % D;
	struct mesh_groups g;
	char e[256];
	int ok;

	ok = mesh_split(m, c, &g, e, sizeof e) == 0;
	if (!par_check(ok, "rank %d: mesh_split with cp%s%s", r, ok ? "" :
	    ": ", ok ? "" : e))
		return 1;
	par_check(members_ok(g.tp, r, tp, T, 1) &&
	    members_ok(g.cp, r, cp, C, T) &&
	    members_ok(g.dp, r, dp * C + cp, D * C, T) &&
	    members_ok(g.pp, r, 0, 1, 1), "rank %d: tp, cp, dp x cp and pp "
	    "groups hold r + (k - own) * 1, T, T, -", r);
	mesh_groups_close(&g);
	return 0;
}

int
main(void)
{
	static struct mesh m8 = { .dp = 2, .tp = 2, .pp = 2, .world = 8 };
	static struct mesh m6 = { .dp = 3, .tp = 1, .pp = 2, .world = 6 };
	static struct mesh m4 = { .dp = 1, .tp = 4, .pp = 1, .world = 4 };
	static struct mesh m8cp = { .dp = 2, .tp = 2, .pp = 1, .world = 8,
	    .cp = 2 };

	signal(SIGPIPE, SIG_IGN);
	resolve();
	places();
	model_checks();
	par_world(8, "groups of 2 x 2 x 2", groups_rank, &m8);
	par_world(6, "groups of 3 x 1 x 2", groups_rank, &m6);
	par_world(4, "groups of 1 x 4 x 1", groups_rank, &m4);
	cp_places();
	par_world(8, "groups of dp 2 x cp 2 x tp 2", cp_groups_rank, &m8cp);
	return unit_done();
}
