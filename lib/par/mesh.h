/* mesh: the device mesh of a composed-parallel job: D data-parallel
 * replicas x T tensor-parallel shards x P pipeline stages over W ranks,
 * rank = (pp * D + dp) * T + tp (tp fastest, so a TP group is a run of
 * consecutive ranks, on one host when the launcher places them so), its
 * checks against a model, and the three sub-groups of each rank. */
#ifndef COLLX_MESH_H
#define COLLX_MESH_H

#include <stddef.h>
#include <stdio.h>

#include "comm/comm.h"
#include "nn/nn.h"

struct mesh {
	int dp, tp, pp;		/* D, T, P */
	int world;
	int cp;			/* C: each sequence's ranks (collx-train --cp;
				 * 1: none), between tp and dp: rank =
				 * ((pp * D + dp) * C + cp) * T + tp */
};

/* A rank's place: stage, replica, shard. */
struct mesh_coord {
	int pp, dp, tp;
	int cp;
};

/* The rank's sub-groups: the T ranks of its shard group (same pp, dp),
 * the D replicas of its stage and shard (same pp, tp) and the P stages of
 * its pipeline (same dp, tp); each numbered by that axis's index. */
struct mesh_groups {
	struct comm *tp, *dp, *pp;
	struct comm *cp;	/* the C ranks of its sequences (same pp, dp,
				 * tp); with C above 1 dp holds the D*C ranks
				 * of its stage and shard, dp * C + cp */
};

/* m from D, T, P (at most one of them -1: what the others leave) and the
 * world size. 0, or -1 with the numbers in err (bad input, exit 3). */
int mesh_resolve(struct mesh *m, int dp, int tp, int pp, int world,
    char *err, size_t errlen);
/* The same with C (positive) ranks per sequence: D*T*P*C is the world. */
int mesh_resolve_cp(struct mesh *m, int dp, int tp, int pp, int cp,
    int world, char *err, size_t errlen);
/* Whether model md can run on m: heads and hidden widths divisible by T,
 * at least P layers. 0, or -1 with the numbers (bad input, exit 3). */
int mesh_check_model(const struct mesh *m, const struct nn_model *md,
    char *err, size_t errlen);

void mesh_coord(const struct mesh *m, int rank, struct mesh_coord *c);
int mesh_rank(const struct mesh *m, int pp, int dp, int tp);	/* cp 0 */
int mesh_rank_cp(const struct mesh *m, int pp, int dp, int cp, int tp);

/* Collective over world (m->world ranks): g's three sub-groups, for
 * mesh_groups_close to close before world. 0, or -1 with the reason. */
int mesh_split(const struct mesh *m, struct comm *world,
    struct mesh_groups *g, char *err, size_t errlen);
void mesh_groups_close(struct mesh_groups *g);

/* The mesh as text: a row rank,pp,dp,tp,host (C above 1:
 * rank,pp,dp,cp,tp,host) per rank, hosts numbered
 * as a launcher placing per_host consecutive ranks on each fills them
 * (per_host <= 0: one host), then each group's ranks. */
void mesh_print(FILE *f, const struct mesh *m, int per_host);

#endif
