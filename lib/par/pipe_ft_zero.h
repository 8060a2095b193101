/* pipe_ft_zero: --ft with --zero 1, 2 or 3 on a mesh's DP axis
 * (pipe_dp_ft_zero.c): dp_ftz over each (pp, tp) coordinate's replicas
 * (cfg->dp), its slices mirrored, their state across the mesh set up
 * again (pipe_dp_ft.c's shrink and rejoin) cut again from owners and
 * mirrors. Every hook does nothing without --ft and --zero.
 *
 * init: after pipe_dp_zero_init (the first time: the mirrors from
 * their owners; a rank started again, and a set-up again: nothing);
 * mirror: after the reduce-scatters, before the step's commit; step (on
 * only): the update of this rank's slices and its mirror's (once a
 * step), 1 when
 * the allgather must wait (a recovery's: the cut after rebuilds the
 * parameters); settle: a recovery's start, before the agreement,
 * 1 when this rank is past step k's update, not its allgather (the step
 * to record: pipe_step_finish updates no more); hold:
 * before pipe_run_again, this rank's slices' moments kept for the cut;
 * recut: after it, before the copy of a rejoin, the slices cut over the
 * replicas there are; on: whether the slices are cut per replica (no
 * broadcast of the moments); free: at the run's end. 0, or -1 (r->err). */
#ifndef COLLX_PIPE_FT_ZERO_H
#define COLLX_PIPE_FT_ZERO_H

#include "par/pipe_ft.h"
#include "par/pipe_int.h"

int pipe_ftz_init(struct pipe_run *r);
int pipe_ftz_mirror(struct pipe_run *r);
int pipe_ftz_step(struct pipe_run *r, float scale);
int pipe_ftz_settle(struct pipe_run *r, long k);
void pipe_ftz_hold(struct pipe_run *r);
int pipe_ftz_recut(struct pipe_run *r);
int pipe_ftz_on(const struct pipe_run *r);
void pipe_ftz_free(struct pipe_ft *ft);
/* The mirror's bytes added to a step's: its moments and parameters to
 * the optimizer state's, its reduced gradients to the gradients'. */
void pipe_ftz_mem(const struct pipe_run *r, size_t *optim, size_t *grad);

#endif
