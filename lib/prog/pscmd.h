/* pscmd: collx-ps's commands after their options: the server of one
 * shard, and the safetensors files of one flat f32 vector that push and
 * pull read and write. */
#ifndef COLLX_PSCMD_H
#define COLLX_PSCMD_H

#include <stddef.h>

#include "cli/cli.h"
#include "comm/ps.h"
#include "nn/nn.h"

/* collx-ps serve, its options checked. */
struct pscmd_serve {
	const char *model, *out;	/* -m INIT, -o FINAL (or NULL) */
	int workers, port, staleness;
	enum ps_mode mode;
	struct nn_optim_cfg optim;
	const struct cli_group *g;
};

/* Serves shard g->rank of the model until the workers are done (or a
 * SIGTERM or SIGINT), then rank 0 writes the final parameters to out. */
void pscmd_serve_run(const struct pscmd_serve *o);

/* A safetensors file as one flat f32 vector and its layout (exit 3 if
 * bad); the vector written back as the tensors of layout. */
void pscmd_load_flat(const char *path, float **flat, size_t *total,
    char **layout);
void pscmd_save_flat(const char *path, const char *layout, const float *flat,
    size_t total);

#endif
