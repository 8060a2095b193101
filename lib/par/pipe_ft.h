/* pipe_ft: --ft on a mesh's DP axis (pipe_dp_ft.c): a rank that dies takes
 * its whole replica out (every rank of its dp index), and the ranks of
 * the other replicas go on with the step's global batch among fewer
 * replicas. */
#ifndef COLLX_PIPE_FT_H
#define COLLX_PIPE_FT_H

#include "comm/comm.h"
#include "par/mesh.h"
#include "par/pipe.h"

struct pipe_ft {
	struct comm *world;	/* the mesh's ranks: comm_open's group, then
				 * the whole replicas left (pipe_ft owns
				 * those: pipe_ft_close) */
	struct comm *open;	/* comm_open's group (the caller's) */
	struct mesh orig;	/* the mesh comm_open's ranks were laid on */
	struct mesh mesh;	/* today's: dp the replicas left */
	struct mesh_groups *grp;	/* the groups over world, remade */
	struct pipe_cfg cfg;	/* the run's cfg with grp's groups */
	/* after the groups were remade: the caller's counters of them
	 * reset, rank 0 of world taking the outputs over */
	void (*regrouped)(void *ctx, int rank);
	void (*note)(void *ctx, const char *line);	/* departures */
	void *ctx;
};

/* The world group closed when pipe_ft made it. */
void pipe_ft_close(struct pipe_ft *ft);

#endif
