/* pipe_ft: --ft on a mesh's DP axis (pipe_dp_ft.c): a rank that dies takes
 * its whole replica out (every rank of its dp index), and the ranks of
 * the other replicas go on with the step's global batch among fewer
 * replicas. */
#ifndef COLLX_PIPE_FT_H
#define COLLX_PIPE_FT_H

#include "comm/comm.h"
#include "par/mesh.h"
#include "par/pipe.h"
#include "par/train_data.h"

struct pipe_ftz;
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
	/* rejoining: a rank started again, admitted,
	 * its state not yet copied from the replicas; when it was admitted */
	int joining;
	double t_join;
	int admitted;		/* at the step's start: its grow done */
	/* the caller's part of the step records (the bytes sent) put into
	 * s[0, n) for a rank started again (in 0, on the replicas), or
	 * taken from them (in 1, on that rank) */
	void (*records)(void *ctx, struct train_step *s, long n, int in);
	struct pipe_ftz *ftz;	/* --zero 1|2: pipe_dp_ft_zero.c's, or NULL */
};

/* The world group closed when pipe_ft made it. */
void pipe_ft_close(struct pipe_ft *ft);
/* On comm_open's group c (every rank, before the mesh is laid): the
 * mesh's replicas made comm_grow's units; a rank started again
 * (comm_rejoining) is admitted, with the others of its replica, to the
 * running job: ft->world the job's ranks, ft->mesh its mesh, then. 0,
 * or the exit status (1; 3 refused: another job) with the reason in err. */
int pipe_ft_open(struct pipe_ft *ft, struct comm *c, char *err,
    size_t errlen);

#endif
