/* ckpt: training checkpoints. One safetensors file holds the model, the
 * optimizer state, the steps done and the batch (the data position is
 * step * batch), written atomically by rank 0 and read by every rank. The
 * optimizer state is stored per parameter tensor, "optim.m.NAME" (AdamW's
 * first moment, or SGD's momentum buffer) and "optim.v.NAME" (AdamW's
 * second moment), whichever way the ranks shard it, so a checkpoint does
 * not depend on how the run that wrote it was laid out. */
#ifndef COLLX_CKPT_H
#define COLLX_CKPT_H

#include <stddef.h>

#include "comm/comm.h"
#include "nn/nn.h"
#include "tensor/tensor.h"

/* A run of the optimizer state: parameters [off, off+len) of the flat
 * vector, held by rank `rank` in o from o's element o_off. The writer
 * lists the whole job's pieces, each holder its own in the same order
 * (or every rank all of them); o is set on the rank that holds the piece
 * (NULL elsewhere). Together the pieces cover each parameter once, or
 * are empty (SGD without momentum has no state). w: where the holder
 * keeps the run's parameters when sharded (ckpt_save_sharded), NULL for
 * the model's own (m->params + off). */
struct ckpt_piece {
	int rank;
	size_t off, len;
	struct nn_optim *o;
	size_t o_off;
	const float *w;
};

/* What a checkpoint holds beyond the model. ef: every rank's error
 * feedback of compressed gradients ("wire.ef.RANK", a float per
 * parameter): ef_ranks vectors one after another, or NULL. vecs: the
 * "local.*" (local SGD) and "powersgd.*" vectors (ckpt_state_vec reads
 * them). */
struct ckpt_state {
	long step;		/* steps done: the next step to run */
	long batch;		/* the global batch it was trained with */
	float *m, *v;		/* flat over the parameters, or NULL */
	float *ef;
	int ef_ranks;
	struct tensor_set vecs;
};

/* A float per parameter saved beside the model under name: rank 0's v,
 * or with per_rank every rank's as "NAME.RANK". */
struct ckpt_vec {
	const char *name;
	const float *v;
	int per_rank;
};

/* Collective: rank 0 gathers the pieces' state (oc's moments of each)
 * from their ranks, a tensor at a time, and writes it with m's
 * parameters, as rank 0 holds them, to path (rank 0 only; NULL
 * elsewhere). 0, or -1 with the reason:
 * a lost peer or a failed write, a runtime failure (exit 1). */
int ckpt_save(struct comm *c, const struct nn_model *m,
    const struct nn_optim_cfg *oc, const struct ckpt_piece *p, size_t n,
    long step, long batch, const char *path, char *err, size_t errlen);

/* As ckpt_save, and the nx vectors x (listed alike on every rank): every
 * rank's error feedback ("wire.ef", per rank), local SGD's and PowerSGD's
 * state ("local.*", "powersgd.*"). */
int ckpt_save_vecs(struct comm *c, const struct nn_model *m,
    const struct nn_optim_cfg *oc, const struct ckpt_piece *p, size_t n,
    const struct ckpt_vec *x, size_t nx, long step, long batch,
    const char *path, char *err, size_t errlen);

/* As ckpt_save_vecs, the parameters sharded as the pieces are (ZeRO):
 * each piece's holder holds its floats of the parameters (at w, or in
 * m's), the rest need not be there; the writer needs the whole job's
 * pieces, the others their own. *held (may be NULL): the bytes of parameters
 * the writer held at once beyond its own (its buffer of one tensor; 0 on
 * the other ranks). */
int ckpt_save_sharded(struct comm *c, const struct nn_model *m,
    const struct nn_optim_cfg *oc, const struct ckpt_piece *p, size_t n,
    const struct ckpt_vec *x, size_t nx, long step, long batch,
    const char *path, size_t *held, char *err, size_t errlen);

/* Reads a checkpoint: the model into m (as nn_model_load) and the rest
 * into st. -1 with "PATH: reason": bad input (exit 3). */
int ckpt_load(const char *path, struct nn_model *m, struct ckpt_state *st,
    char *err, size_t errlen);
void ckpt_state_free(struct ckpt_state *st);

/* st's vector name (rank >= 0: "NAME.RANK") of count floats into *out,
 * NULL when the checkpoint has none. -1 when it is not count f32 values. */
int ckpt_state_vec(const struct ckpt_state *st, const char *name, int rank,
    size_t count, const float **out, char *err, size_t errlen);

/*
 * A checkpoint of a program that keeps no optimizer state (collx-tp's
 * full-batch SGD): any tensor set with the steps done in its metadata.
 * ckpt_meta_put_step adds it to s; ckpt_meta_take_step reads it from s
 * and drops every collx.checkpoint.* key, leaving the model's own
 * metadata (-1: s is not a checkpoint, bad input). ckpt_step_read: the
 * steps done of the checkpoint at path, whichever program wrote it.
 */
int ckpt_meta_put_step(struct tensor_set *s, long step, char *err,
    size_t errlen);
int ckpt_meta_take_step(struct tensor_set *s, long *step, char *err,
    size_t errlen);
int ckpt_step_read(const char *path, long *step, char *err, size_t errlen);

/* Puts st's state into this rank's pieces and sets their step count. -1
 * when the optimizer does not match what the checkpoint holds. */
int ckpt_restore(const struct ckpt_state *st, const struct ckpt_piece *p,
    size_t n, int rank, char *err, size_t errlen);

#endif
