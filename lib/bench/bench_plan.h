/* bench_plan: collx-bench plan, the analytic model of a training step on
 * a cluster the cost model describes, for every mesh of a world that may
 * be far larger than the one measured. */
#ifndef COLLX_BENCH_PLAN_H
#define COLLX_BENCH_PLAN_H

#include <stddef.h>

#include "bench/bench_cost.h"
#include "nn/nn.h"
#include "par/pipe_sched.h"

struct bench_plan_opts {
	const struct bench_cost *cost;
	int hosts, per_host;		/* N hosts of L ranks */
	struct nn_dims dims;
	long batch;			/* the global batch, samples */
	double mem;			/* bytes a rank holds at most; 0: any */
	int mesh[3];			/* dp, tp, pp: only this mesh; 0: all */
	int as_mesh;			/* only what collx-bench mesh runs:
					 * ZeRO 0, 1F1B, P micro-batches, no
					 * cp or ep */
	int adamw;			/* the optimizer priced: AdamW (0:
					 * SGD, collx-train's default) */
};

/* One mesh and its options, predicted. Axes of the step, seconds:
 * compute, the exposed communication of each axis (tp and pp inside
 * the passes, dp after them), the pipeline's bubble; step their sum.
 * cp and ep: the context- and expert-parallel axes' exposed times. */
struct bench_plan_row {
	int dp, tp, pp, zero, micro;
	enum pipe_sched_kind sched;
	int cp, ep;			/* context, expert parallel (1: none) */
	int zigzag;			/* cp: zigzag's chunks (0: ring's) */
	int hsdp;			/* zero 3: shards within a host */
	int gather;			/* ep: allgather dispatch (0: alltoallv) */
	double step, compute, dp_s, tp_s, pp_s, bubble, cp_s, ep_s;
	double bytes_dp, bytes_tp, bytes_pp;	/* sent by a rank a step */
	double bytes_cp, bytes_ep;
	double mem;			/* bytes a rank holds at its peak */
	double bubble_frac;		/* the schedule table's idle share */
	double tokens;			/* a step's */
};

/* Every mesh and option that fits N*L ranks and the model, predicted,
 * fastest first (*rows, *n); those over o->mem after those under it, with
 * *nfit how many are under it. 0; -1 with the reason in err and *code 2
 * (usage: a mesh that is no factorization) or 3 (the model admits no mesh,
 * or no rank's memory holds it). */
int bench_plan(const struct bench_plan_opts *o, struct bench_plan_row **rows,
    int *n, int *nfit, int *code, char *err, size_t errlen);

struct bench_out;
struct bench_dp;
/* collx-bench plan: bench_plan's rows printed (the top fastest that fit,
 * as a table or CSV rows), the fastest's ASTRA-sim inputs written to
 * export_dir when set, or with validate (the runs' settings) every row
 * run here as collx-bench mesh runs it, predicted beside measured.
 * Returns the exit code with the reason in err. */
int bench_plan_run(struct bench_out *out, const struct bench_plan_opts *o,
    const struct bench_dp *validate, int top, const char *export_dir,
    int progress, char *err, size_t errlen);

/* The model's parameter count (the formula, no allocation), and of it
 * the experts' (0 without experts). */
double bench_plan_params(const struct nn_dims *d);
double bench_plan_expert_params(const struct nn_dims *d);

/* ASTRA-sim's inputs for row r: DIR/workload.txt (its text workload
 * format: a parallelism line, the layer count, one line a layer with
 * compute in cycles and collectives with bytes) and DIR/system.json,
 * DIR/network.yml. 0, or -1 (err). */
int bench_plan_astra(const struct bench_plan_opts *o,
    const struct bench_plan_row *r, const char *dir, char *err,
    size_t errlen);

#endif
