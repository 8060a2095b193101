/* tensor: the n-dimensional array type and its collections (safetensors). */
#ifndef COLLX_TENSOR_H
#define COLLX_TENSOR_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "cli/util.h"
#include "tensor/dtype.h"

#define TENSOR_MAX_DIM 8

struct tensor {
	char *name;			/* NULL for an unnamed (.npy) tensor */
	enum dtype dtype;
	int ndim;
	int64_t shape[TENSOR_MAX_DIM];
	void *data;			/* C order, host (little-endian) layout, malloc'd */
};

struct tensor_meta {
	char *key, *value;
};

/* TENSOR_NPYS: a stream of .npy arrays, one image after another (.npys,
 * what the collective programs' --stream writes). */
enum tensor_format { TENSOR_NPY, TENSOR_SAFETENSORS, TENSOR_NPYS };

/* A named collection: one tensor for .npy, any number for .safetensors
 * (kept sorted by name) and for a stream (kept in stream order, named by
 * index: "0", "1", ...), plus the safetensors __metadata__ strings. */
struct tensor_set {
	enum tensor_format format;
	size_t count;
	struct tensor *items;
	size_t nmeta;
	struct tensor_meta *meta;
};

int64_t tensor_numel(const struct tensor *t);
size_t tensor_nbytes(const struct tensor *t);
/* Allocates zeroed data for the shape; 0 or -1 with the reason in err
 * (negative dimension, size overflow, allocation failure). */
int tensor_init(struct tensor *t, enum dtype dt, int ndim, const int64_t *shape,
    char *err, size_t errlen);
void tensor_free(struct tensor *t);
/* The one shape formatter: "[2, 3]" text of t's shape into buf; and of
 * any dims, with sep between sizes ("," gives "[2,3]") and a negative
 * size printed as "*" (a size that may differ, such as allgather rows). */
const char *tensor_shape_str(const struct tensor *t, char *buf, size_t len);
const char *tensor_dims_str(const int64_t *shape, int ndim, const char *sep,
    char *buf, size_t len);

void tensor_set_free(struct tensor_set *s);
/* Takes ownership of t (its data and name); name may be NULL for npy.
 * The set stays sorted by name (a TENSOR_NPYS set in the order added);
 * a duplicate name is an error, and then t is left as it was (the caller
 * still owns it). */
int tensor_set_add(struct tensor_set *s, const char *name, struct tensor *t,
    char *err, size_t errlen);
struct tensor *tensor_set_find(const struct tensor_set *s, const char *name);
const char *tensor_set_meta(const struct tensor_set *s, const char *key);
int tensor_set_meta_put(struct tensor_set *s, const char *key, const char *value,
    char *err, size_t errlen);

/* Parse a whole file image, format recognised from the first bytes: one
 * .npy array or a .safetensors file. */
int tensor_parse(const void *buf, size_t len, struct tensor_set *out,
    char *err, size_t errlen);
/* As tensor_parse, and a stream of two or more .npy arrays is a set of
 * format TENSOR_NPYS (one array is a .npy file): for a reader of every
 * file collx writes, where a program's input is one tensor file. */
int tensor_parse_any(const void *buf, size_t len, struct tensor_set *out,
    char *err, size_t errlen);
/* Encode to a malloc'd image. npy needs exactly one tensor and refuses
 * bf16 (it has no .npy type code), as does each array of a stream;
 * safetensors writes __metadata__ first, then the tensors in name order,
 * an unnamed one as "tensor". */
int tensor_encode(const struct tensor_set *s, enum tensor_format fmt,
    void **buf, size_t *len, char *err, size_t errlen);

/* Read from a path, "-" (stdin) or a URL. Every failure is bad input (exit 3). */
int tensor_load(const char *src, struct tensor_set *out, char *err, size_t errlen);
/* As tensor_load, parsed by tensor_parse_any. */
int tensor_load_any(const char *src, struct tensor_set *out, char *err,
    size_t errlen);
/* As tensor_load, for inputs that must hold exactly one tensor. */
int tensor_load_one(const char *src, struct tensor *out, char *err, size_t errlen);
/* The __metadata__ of the .safetensors file at path, from its header
 * alone (the tensors are not read): out holds no tensors. */
int tensor_meta_load(const char *path, struct tensor_set *out, char *err,
    size_t errlen);
/* Write atomically (temporary file + rename); "-" is stdout. The format
 * follows the extension (.npy, .safetensors), else the set's own format. */
int tensor_save(const char *dst, const struct tensor_set *s, char *err, size_t errlen);
int tensor_save_one(const char *dst, const struct tensor *t, char *err, size_t errlen);

/* .npy, .npys or .safetensors from dst's extension, else fallback (also
 * for "-"). */
enum tensor_format tensor_format_for(const char *dst, enum tensor_format fallback);

/* Deep copy; out is a new tensor (name copied too). */
int tensor_copy(const struct tensor *t, struct tensor *out, char *err, size_t errlen);
/* Copy converted element by element to dtype dt (dtype_put rules). */
int tensor_cast(const struct tensor *t, enum dtype dt, struct tensor *out,
    char *err, size_t errlen);
/* Elements [start, start+len) along dim, copied (torch.narrow). */
int tensor_narrow(const struct tensor *t, int dim, int64_t start, int64_t len,
    struct tensor *out, char *err, size_t errlen);
/* Concatenate n tensors along dim: same dtype and ndim, equal sizes in
 * every other dimension. */
int tensor_cat(const struct tensor *parts, size_t n, int dim, struct tensor *out,
    char *err, size_t errlen);
/* Start of part i (0 <= i <= parts) when len items are cut into parts as
 * numpy.array_split does: the first len % parts parts get one more. */
int64_t tensor_split_offset(int64_t len, int parts, int i);

/* Fill a tensor. CONST stores value; ARANGE stores the flat index;
 * RAND and RANDN draw from tensor_rng seeded with seed (see rng.h). */
enum tensor_fill { TENSOR_FILL_CONST, TENSOR_FILL_ARANGE, TENSOR_FILL_RAND,
	TENSOR_FILL_RANDN };
int tensor_fill(struct tensor *t, enum tensor_fill how, double value, uint64_t seed,
    char *err, size_t errlen);

/* Element-wise comparison of a (actual) with b (expected): an element is
 * out of tolerance unless |a - b| <= atol + rtol * |b|; NaN matches NaN
 * and an infinity the same infinity. -1 when dtypes or shapes differ. */
struct tensor_diff {
	double max_abs, max_rel;
	int64_t count, mismatched;
};
int tensor_compare(const struct tensor *a, const struct tensor *b, double rtol,
    double atol, struct tensor_diff *d, char *err, size_t errlen);

/* Text as NumPy's str() lays it out: summarised with "..." past threshold
 * elements (edgeitems kept at each end), floats with at most precision
 * fraction digits, lines wrapped at 75 columns. */
struct tensor_print_opts {
	int64_t threshold;
	int edgeitems, precision;
};
void tensor_print_defaults(struct tensor_print_opts *o);
int tensor_print(FILE *f, const struct tensor *t, const struct tensor_print_opts *o);

/* A stream of .npy arrays (pipes, FIFOs): 1 = one read, 0 = clean end of
 * input, -1 = error. */
int tensor_npy_read_stream(FILE *f, struct tensor *out, char *err, size_t errlen);
int tensor_npy_write_stream(FILE *f, const struct tensor *t, char *err, size_t errlen);

/* Bytes of a path, "-" or URL (http, https, file, ftp) with timeouts and a retry. */
int tensor_fetch(const char *src, void **buf, size_t *len, char *err, size_t errlen);
/* A file written a piece at a time, atomically as tensor_write_file
 * writes one (a temporary beside dst, renamed over it): open (-1 with
 * the reason in err), write (a failure is kept for close), close (commit:
 * renamed into place, 0, or -1 with the reason; else the temporary
 * removed). */
struct tensor_out {
	int fd, failed, saved;
	const char *dst;
	char *tmp, *dir;
};
int tensor_out_open(struct tensor_out *o, const char *dst, char *err,
    size_t errlen);
void tensor_out_write(struct tensor_out *o, const void *buf, size_t len);
/* count values of size bytes in host order, written little-endian (buf
 * may be left byte-swapped). */
void tensor_out_values(struct tensor_out *o, void *buf, size_t count,
    size_t size);
/* A safetensors file's bytes before the data (tensor_save's; the tensors'
 * data is not read), malloc'd: a writer then appends each tensor's
 * values, in set order. */
int tensor_st_header(const struct tensor_set *s, void **buf, size_t *len,
    char *err, size_t errlen);
int tensor_out_close(struct tensor_out *o, int commit, char *err,
    size_t errlen);
/* Write bytes to dst atomically ("-" = stdout). */
int tensor_write_file(const char *dst, const void *buf, size_t len,
    char *err, size_t errlen);

#endif
