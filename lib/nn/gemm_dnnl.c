/* gemm_dnnl: bf16 matmuls through oneDNN's matmul primitive, one per
 * shape, reused from a small cache (gemm_int.h). The caller holds
 * gemm.c's lock around every call. */
#include <omp.h>
#include <stdio.h>
#include <string.h>

#include <oneapi/dnnl/dnnl.h>

#include "cli/util.h"
#include "nn/gemm_int.h"

/* A training step of the built-in models uses a few dozen shapes (causal
 * attention's row blocks among them); past that, the oldest is replaced. */
#define GEMM_CACHE 128

struct gemm_key {
	int nb, ta, tb, m, n, k, lda, ldc, bias, res, hdst;
	int nh;			/* > 0: c is heads, nb / nh of nh each */
	long outer, inner;	/* c's matrix (bi, h) at bi * outer + h * inner */
	float alpha, beta;
};

struct gemm_prim {
	struct gemm_key key;
	dnnl_primitive_t prim;
	dnnl_memory_t src, wei, dst, bias, res;
	int impl;		/* index into impls */
};

/* The implementations oneDNN chose, with the multiply-adds each ran. */
#define GEMM_IMPLS 8
static struct {
	char name[64];
	double macs;
} impls[GEMM_IMPLS];
static int nimpls;

static dnnl_engine_t engine;
static dnnl_stream_t stream;
static struct gemm_prim cache[GEMM_CACHE];
static int ncache, next_slot;
static char summary[GEMM_IMPLS * 80], version[32];
static int threads = 1;

int
nn_dnnl_init(char *err, size_t errlen)
{
	const dnnl_version_t *v = dnnl_version();

	snprintf(version, sizeof version, "%d.%d.%d", v->major, v->minor,
	    v->patch);
	if (!engine && dnnl_engine_create(&engine, dnnl_cpu, 0) != dnnl_success)
		return cli_fail(err, errlen, "oneDNN: no CPU engine");
	if (!stream && dnnl_stream_create(&stream, engine,
	    dnnl_stream_default_flags) != dnnl_success)
		return cli_fail(err, errlen, "oneDNN: no stream");
	return dnnl_get_effective_cpu_isa() >= dnnl_cpu_isa_avx512_core_bf16;
}

void
nn_dnnl_threads(int n)
{
	threads = n < 1 ? 1 : n;
}

const char *
nn_dnnl_impl(void)
{
	double all = 0;
	size_t len = 0;
	int i;

	for (i = 0; i < nimpls; i++)
		all += impls[i].macs;
	summary[0] = '\0';
	for (i = 0; i < nimpls && len < sizeof summary; i++)
		len += (size_t)snprintf(summary + len, sizeof summary - len,
		    "%s%s (%.0f%%)", i ? ", " : "", impls[i].name,
		    all > 0 ? 100 * impls[i].macs / all : 0.0);
	return summary;
}

/* The index of oneDNN's implementation name (the last slot holds any
 * beyond GEMM_IMPLS). */
static int
impl_index(const char *name)
{
	int i;

	for (i = 0; i < nimpls; i++)
		if (!strcmp(impls[i].name, name))
			return i;
	if (nimpls == GEMM_IMPLS)
		return GEMM_IMPLS - 1;
	snprintf(impls[nimpls].name, sizeof impls[nimpls].name, "%s", name);
	return nimpls++;
}

const char *
nn_dnnl_version(void)
{
	return version;
}

/* Row-major [r, c] of type t, row stride ld; transposed: stored [c, r]
 * (strides 1, ld); nb > 1: nb of them one after another, [nb, r, c]
 * (dense). */
static void
md(dnnl_memory_desc_t *d, int nb, int r, int c, int trans, int ld,
    dnnl_data_type_t t)
{
	dnnl_dims_t dims = { r, c }, st = { ld, 1 };

	if (trans) {
		st[0] = 1;
		st[1] = ld;
	}
	if (nb > 1) {
		dnnl_dims_t d3 = { nb, r, c }, s3 = { (dnnl_dim_t)r * c, st[0],
		    st[1] };
		dnnl_memory_desc_init_by_strides(d, 3, d3, t, s3);
		return;
	}
	dnnl_memory_desc_init_by_strides(d, 2, dims, t, st);
}

/* The heads' problem: a [b, nh, m, k] dense (ta: each stored [k, m]),
 * b [b, nh, k, n] dense, c [b, nh, m, n] with c's own strides. */
static void
md_heads(dnnl_memory_desc_t *s, dnnl_memory_desc_t *w, dnnl_memory_desc_t *d,
    const struct gemm_key *key)
{
	dnnl_dim_t b = key->nb / key->nh, nh = key->nh, m = key->m,
	    n = key->n, k = key->k;
	dnnl_dims_t ds = { b, nh, m, k }, ss = { nh * m * k, m * k,
	    key->ta ? 1 : k, key->ta ? m : 1 };
	dnnl_dims_t dw = { b, nh, k, n }, sw = { nh * k * n, k * n, n, 1 };
	dnnl_dims_t dd = { b, nh, m, n }, sd = { key->outer, key->inner,
	    key->ldc, 1 };

	dnnl_memory_desc_init_by_strides(s, 4, ds, dnnl_bf16, ss);
	dnnl_memory_desc_init_by_strides(w, 4, dw, dnnl_bf16, sw);
	dnnl_memory_desc_init_by_strides(d, 4, dd, key->hdst ? dnnl_bf16 :
	    dnnl_f32, sd);
}

static int
create(struct gemm_prim *p, const struct gemm_key *key)
{
	dnnl_memory_desc_t s, w, d, b;
	dnnl_matmul_desc_t desc;
	dnnl_primitive_attr_t attr = NULL;
	dnnl_post_ops_t po = NULL;
	dnnl_primitive_desc_t pd = NULL;
	const char *name = NULL;
	int rc = -1;

	if (key->nh)
		md_heads(&s, &w, &d, key);
	else {
		md(&s, key->nb, key->m, key->k, key->ta, key->lda, dnnl_bf16);
		md(&w, key->nb, key->k, key->n, key->tb, key->tb ? key->k :
		    key->n, dnnl_bf16);
		md(&d, key->nb, key->m, key->n, 0, key->ldc, key->hdst ?
		    dnnl_bf16 : dnnl_f32);
	}
	md(&b, 1, 1, key->n, 0, key->n, dnnl_f32);	/* unbatched only */
	if (dnnl_matmul_desc_init(&desc, &s, &w, key->bias ? &b : NULL, &d) !=
	    dnnl_success ||
	    dnnl_primitive_attr_create(&attr) != dnnl_success)
		goto out;
	if (key->alpha != 1.0f && dnnl_primitive_attr_set_output_scales(attr,
	    1, 0, &key->alpha) != dnnl_success)
		goto out;
	if ((key->beta != 0.0f || key->res) &&
	    dnnl_post_ops_create(&po) != dnnl_success)
		goto out;
	if (key->beta != 0.0f && dnnl_post_ops_append_sum(po, key->beta) !=
	    dnnl_success)
		goto out;
	/* the residual: an f32 add of the finished output, as nn_add's */
	if (key->res && dnnl_post_ops_append_binary(po, dnnl_binary_add, &d) !=
	    dnnl_success)
		goto out;
	if (po && dnnl_primitive_attr_set_post_ops(attr, po) != dnnl_success)
		goto out;
	if (dnnl_primitive_desc_create(&pd, &desc, attr, engine, NULL) !=
	    dnnl_success || dnnl_primitive_create(&p->prim, pd) != dnnl_success)
		goto out;
	if (dnnl_memory_create(&p->src, &s, engine, DNNL_MEMORY_NONE) ||
	    dnnl_memory_create(&p->wei, &w, engine, DNNL_MEMORY_NONE) ||
	    dnnl_memory_create(&p->dst, &d, engine, DNNL_MEMORY_NONE) ||
	    (key->bias && dnnl_memory_create(&p->bias, &b, engine,
	    DNNL_MEMORY_NONE)) || (key->res && dnnl_memory_create(&p->res, &d,
	    engine, DNNL_MEMORY_NONE)))
		goto out;
	if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0,
	    &name) != dnnl_success || !name)
		name = "?";
	p->impl = impl_index(name);
	p->key = *key;
	rc = 0;
out:
	if (pd)
		dnnl_primitive_desc_destroy(pd);
	if (po)
		dnnl_post_ops_destroy(po);
	if (attr)
		dnnl_primitive_attr_destroy(attr);
	return rc;
}

static void
destroy(struct gemm_prim *p)
{
	if (p->prim)
		dnnl_primitive_destroy(p->prim);
	if (p->src)
		dnnl_memory_destroy(p->src);
	if (p->wei)
		dnnl_memory_destroy(p->wei);
	if (p->dst)
		dnnl_memory_destroy(p->dst);
	if (p->bias)
		dnnl_memory_destroy(p->bias);
	if (p->res)
		dnnl_memory_destroy(p->res);
	memset(p, 0, sizeof *p);
}

static struct gemm_prim *
lookup(const struct gemm_key *key)
{
	struct gemm_prim *p;

	for (int i = 0; i < ncache; i++)
		if (!memcmp(&cache[i].key, key, sizeof *key))
			return &cache[i];
	if (ncache < GEMM_CACHE)
		p = &cache[ncache++];
	else {
		p = &cache[next_slot];
		next_slot = (next_slot + 1) % GEMM_CACHE;
		destroy(p);
	}
	if (create(p, key) < 0) {
		destroy(p);
		return NULL;
	}
	return p;
}

/* key's product (key zeroed first: memcmp, no padding bytes unset) on
 * these operands; c is bf16 where key->hdst. 0 or -1. */
static int
run(const struct gemm_key *key, const uint16_t *a, const uint16_t *b,
    const float *bias, const float *res, void *c)
{
	struct gemm_prim *p;
	int nargs = 3;

	if (!(p = lookup(key)))
		return -1;
	dnnl_memory_set_data_handle(p->src, (void *)a);
	dnnl_memory_set_data_handle(p->wei, (void *)b);
	dnnl_memory_set_data_handle(p->dst, c);
	dnnl_exec_arg_t args[5] = {
		{ DNNL_ARG_SRC, p->src }, { DNNL_ARG_WEIGHTS, p->wei },
		{ DNNL_ARG_DST, p->dst }
	};
	if (bias) {
		dnnl_memory_set_data_handle(p->bias, (void *)bias);
		args[nargs++] = (dnnl_exec_arg_t){ DNNL_ARG_BIAS, p->bias };
	}
	if (res) {
		dnnl_memory_set_data_handle(p->res, (void *)res);
		args[nargs++] = (dnnl_exec_arg_t){
		    DNNL_ARG_ATTR_MULTIPLE_POST_OP(key->beta != 0.0f) |
		    DNNL_ARG_SRC_1, p->res };
	}
	/* oneDNN runs on OpenMP here: its regions take the program's
	 * thread count (one core per rank), not one thread per core. */
	omp_set_num_threads(threads);
	if (dnnl_primitive_execute(p->prim, stream, nargs, args) !=
	    dnnl_success ||
	    dnnl_stream_wait(stream) != dnnl_success)
		return -1;
	impls[p->impl].macs += (double)key->nb * key->m * key->n * key->k;
	return 0;
}

int
nn_dnnl_run(int nb, int ta, int tb, int m, int n, int k, float alpha,
    const uint16_t *a, const uint16_t *b, float beta, const float *bias,
    const float *res, float *c, int ldc)
{
	return nn_dnnl_run_lda(nb, ta, tb, m, n, k, alpha, a, ta ? m : k, b,
	    beta, bias, res, c, ldc);
}

int
nn_dnnl_run_lda(int nb, int ta, int tb, int m, int n, int k, float alpha,
    const uint16_t *a, int lda, const uint16_t *b, float beta,
    const float *bias, const float *res, float *c, int ldc)
{
	struct gemm_key key;

	memset(&key, 0, sizeof key);
	key.nb = nb;
	key.ta = ta;
	key.tb = tb;
	key.m = m;
	key.n = n;
	key.k = k;
	key.lda = lda;
	key.ldc = ldc;
	key.alpha = alpha;
	key.beta = beta;
	key.bias = bias != NULL;
	key.res = res != NULL;
	return run(&key, a, b, bias, res, c);
}

int
nn_dnnl_linear_h(int m, int n, int k, const uint16_t *a, const uint16_t *b,
    const float *bias, uint16_t *c)
{
	struct gemm_key key;

	memset(&key, 0, sizeof key);
	key.nb = 1;
	key.tb = 1;
	key.m = m;
	key.n = n;
	key.k = k;
	key.lda = k;
	key.ldc = n;
	key.alpha = 1.0f;
	key.bias = bias != NULL;
	key.hdst = 1;
	return run(&key, a, b, bias, NULL, c);
}

int
nn_dnnl_run_heads(int b, int nh, int ta, int m, int n, int k, float alpha,
    const uint16_t *a, const uint16_t *x, float beta, void *c, int hdst,
    size_t outer, size_t inner, int ldc)
{
	struct gemm_key key;

	memset(&key, 0, sizeof key);
	key.nb = b * nh;
	key.nh = nh;
	key.ta = ta;
	key.m = m;
	key.n = n;
	key.k = k;
	key.lda = ta ? m : k;
	key.ldc = ldc;
	key.outer = (long)outer;
	key.inner = (long)inner;
	key.alpha = alpha;
	key.beta = beta;
	key.hdst = hdst;
	return run(&key, a, x, NULL, NULL, c);
}
