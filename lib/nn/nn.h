/* nn: f32 layers (forward and backward pairs), the built-in models
 * (mlp, block, gpt) over safetensors collections, and optimizers with
 * torch.optim semantics.
 *
 * Conventions, for every layer function below:
 * - Plain row-major f32 arrays with explicit sizes; "n" counts rows
 *   (samples, or batch*seq positions), a row is contiguous.
 * - Weights use the PyTorch nn.Linear layout [out, in]. A NULL bias means
 *   no bias (zero). Shards work as they are: a column-parallel shard is a
 *   linear with the shard's rows of W (out = shard size); a row-parallel
 *   shard is a linear on the shard's columns of W (copied contiguous) with
 *   bias NULL, the bias added once after the reduction.
 * - Backward functions ADD (+=) into every gradient they produce: input
 *   gradients (so residual branches and micro-batches accumulate) and
 *   weight/bias gradients. Callers zero gradients when they start a step.
 *   A NULL gradient pointer (dinp, dw, db) skips that gradient.
 * - Matrix products go through nn_gemm, in the process's precision
 *   (nn_set_precision): OpenBLAS cblas_sgemm in f32, oneDNN in bf16. nn
 *   never changes the thread count by itself; programs call
 *   nn_set_threads() (collx programs run one rank per core and use 1).
 */
#ifndef COLLX_NN_H
#define COLLX_NN_H

#include <stddef.h>
#include <stdint.h>

#include "tensor/tensor.h"

#define NN_LN_EPS 1e-5f
#define NN_NAME_MAX 64

/* Sets the OpenBLAS (and oneDNN) thread count (1 for one rank per core). */
void nn_set_threads(int n);

/* ---- matrix products and their precision ------------------------------ */

/*
 * NN_PREC_F32: cblas_sgemm, today's arithmetic bit for bit (the default).
 * NN_PREC_BF16: both inputs of every product rounded to bf16 (nearest
 * even, denormals as zero: the processors' conversion), products
 * accumulated in f32; parameters, gradients and every
 * other layer stay f32. Through oneDNN's matmul where the CPU has
 * AVX512-BF16 or AMX, else a portable path (sgemm on the rounded inputs:
 * the same values, slower; nn_gemm_portable() says which).
 */
enum nn_precision { NN_PREC_F32, NN_PREC_BF16 };

/* "f32", "bf16"; 0 or -1. */
int nn_precision_parse(const char *s, enum nn_precision *out);
const char *nn_precision_name(enum nn_precision p);
/* For the whole process, before the first product; -1 when bf16 is asked
 * and this build has no oneDNN (or oneDNN fails to start). */
int nn_set_precision(enum nn_precision p, char *err, size_t errlen);
enum nn_precision nn_get_precision(void);
/* 1 when bf16 runs on the portable path. */
int nn_gemm_portable(void);
/* What computes the products, e.g. "OpenBLAS sgemm" or "oneDNN 2.6.3
 * matmul brg:avx512_core_bf16 (95%), gemm:jit (5%)" (oneDNN's
 * implementations so far, with their shares of the multiply-adds). */
const char *nn_gemm_impl(void);
/* Under f32, e.g. "OpenBLAS sgemm, SkylakeX kernels (OpenBLAS's choice for
 * this CPU)": the set and who chose it, with the faster one where
 * nn_blas_better_core() names one. */
const char *nn_blas_kernels(void);
/* A kernel set faster than the one OpenBLAS chose for this CPU, to name in
 * OPENBLAS_CORETYPE ("SkylakeX", "Haswell"), or NULL: none, the set was
 * chosen by OPENBLAS_CORETYPE, or the products are oneDNN's (bf16). */
const char *nn_blas_better_core(void);
/* nn_blas_better_core()'s rule, for a set named core on a CPU with
 * AVX-512 (F, CD, BW, DQ, VL) and with AVX2 and FMA. */
const char *nn_blas_advice(const char *core, int cpu_avx512, int cpu_avx2);
/* c[m,n] = alpha * op(a) op(b) + beta * c, row-major as cblas_sgemm's
 * CblasRowMajor (ta, tb: transpose a, b), in the process's precision.
 * Thread-safe (bf16 calls take turns). */
void nn_gemm(int ta, int tb, int m, int n, int k, float alpha,
    const float *a, int lda, const float *b, int ldb, float beta, float *c,
    int ldc);

/* ---- layers ---------------------------------------------------------- */

/* dst[i] += src[i] (residual adds, partial sums); no overlap. */
void nn_add(float *dst, const float *src, size_t count);
/* b (c floats) added to each of the n rows of out; b NULL adds nothing. */
void nn_add_rows(float *out, const float *b, size_t n, size_t c);

/* out[n,o] = inp[n,i] @ w[o,i]^T + b[o]. */
void nn_linear_forward(float *out, const float *inp, const float *w,
    const float *b, int n, int in, int o);
/* nn_linear_forward, then out += res ([n, o], not out; NULL adds nothing):
 * the bits of nn_add after it; native bf16 adds res in the product's own
 * pass (a oneDNN post-op) rather than reading out again. */
void nn_linear_forward_add(float *out, const float *inp, const float *w,
    const float *b, const float *res, int n, int in, int o);
/* dinp += dout @ w; dw += dout^T @ inp; db += column sums of dout. The
 * input-gradient part alone (dw, db NULL; inp unread) and the weight part
 * alone (dinp NULL; w unread) add the same bits as both at once. */
void nn_linear_backward(float *dinp, float *dw, float *db, const float *dout,
    const float *inp, const float *w, int n, int in, int o);
/* As nn_linear_backward with dinp = dout @ w (dinp not NULL): in f32 the
 * bits of zeroing dinp first; bf16 skips that pass and its reading. */
void nn_linear_backward_to(float *dinp, float *dw, float *db,
    const float *dout, const float *inp, const float *w, int n, int in,
    int o);

/* Exact (erf) GELU: x * 0.5 * (1 + erf(x / sqrt(2))) elementwise, and its
 * derivative, within 2e-6 relative (absolute near zeros) of the double
 * formula everywhere: a branch-free erfc that keeps the negative tail
 * accurate and vectorizes. out/dinp may not alias the inputs. */
void nn_gelu_forward(float *out, const float *inp, size_t count);
void nn_gelu_backward(float *dinp, const float *inp, const float *dout,
    size_t count);

/* LayerNorm over the last dimension c (eps NN_LN_EPS, biased variance).
 * mean and rstd ([n] each) are saved for the backward pass. w and b may
 * be NULL (1 and 0). */
void nn_layernorm_forward(float *out, float *mean, float *rstd,
    const float *inp, const float *w, const float *b, int n, int c);
/* As nn_linear_backward: dinp NULL is the weight part (w unread), dw and
 * db NULL the input part, each adding the bits it adds with the other. */
void nn_layernorm_backward(float *dinp, float *dw, float *db,
    const float *dout, const float *inp, const float *w, const float *mean,
    const float *rstd, int n, int c);

/*
 * Multi-head attention core (no projections), on nh heads of size hd:
 * q, k, v and out are [b, s, nh*hd] (head h is columns h*hd..h*hd+hd-1 of
 * every row), att [b, nh, s, s] receives the softmax probabilities
 * softmax(q k^T / sqrt(hd)) (masked to j <= i when causal), saved for the
 * backward pass. A tensor-parallel or Ulysses form calls it on its own
 * subset of heads. In native bf16 while a model's pass records its bf16
 * copies (lib/nn's run), out is kept in bf16 only: every reader of it
 * there is a product, which takes that copy.
 */
void nn_attention_forward(float *out, float *att, const float *q,
    const float *k, const float *v, int b, int s, int nh, int hd, int causal);
/* dq, dk, dv += ... (any may be NULL); scratch holds s*s floats. causal
 * must be the forward call's: a causal pass skips the masked triangle
 * (the forward pass too). */
void nn_attention_backward(float *dq, float *dk, float *dv, float *scratch,
    const float *dout, const float *att, const float *q, const float *k,
    const float *v, int b, int s, int nh, int hd, int causal);
/* As nn_attention_backward with dq, dk, dv = (none NULL): in f32 the bits
 * of zeroing them first; native bf16 skips that pass and its reading. */
void nn_attention_backward_to(float *dq, float *dk, float *dv,
    float *scratch, const float *dout, const float *att, const float *q,
    const float *k, const float *v, int b, int s, int nh, int hd,
    int causal);

/* out[b,s,d] = wte[tok[b,s]] + wpe[s]; tokens must lie in [0, vocab). */
void nn_embedding_forward(float *out, const int32_t *tok, const float *wte,
    const float *wpe, int b, int s, int d);
/* dwte[tok] += dout; dwpe[s] += dout (either may be NULL). */
void nn_embedding_backward(float *dwte, float *dwpe, const float *dout,
    const int32_t *tok, int b, int s, int d);

/* Softmax cross-entropy per row: probs[n,v] = softmax(logits), returns the
 * SUM over rows of -log probs[target] (targets in [0, v)). probs may alias
 * logits. */
double nn_xent_forward(float *probs, const float *logits,
    const int32_t *target, int n, int v);
/* dlogits += scale * (probs - onehot(target)); scale = d loss / d row loss,
 * e.g. 1/n for the mean over rows. */
void nn_xent_backward(float *dlogits, const float *probs,
    const int32_t *target, float scale, int n, int v);

/* Squared error: returns the SUM over count of (pred - target)^2. */
double nn_sqerr_forward(const float *pred, const float *target, size_t count);
/* dpred += scale * 2 * (pred - target); scale 1/count gives the MSE. */
void nn_sqerr_backward(float *dpred, const float *pred, const float *target,
    float scale, size_t count);

/* ---- activations ------------------------------------------------------ */

enum nn_act { NN_ACT_GELU, NN_ACT_RELU };

/* max(x, 0) and its derivative (0 at x = 0, as torch). */
void nn_relu_forward(float *out, const float *inp, size_t count);
void nn_relu_backward(float *dinp, const float *inp, const float *dout,
    size_t count);
/* The chosen activation's pair; dinp += as the others. */
void nn_act_forward(enum nn_act act, float *out, const float *inp,
    size_t count);
void nn_act_backward(enum nn_act act, float *dinp, const float *inp,
    const float *dout, size_t count);
/* As nn_act_backward with dinp = (as nn_linear_backward_to). */
void nn_act_backward_to(enum nn_act act, float *dinp, const float *inp,
    const float *dout, size_t count);
/* "gelu", "relu"; 0 or -1. */
int nn_act_parse(const char *s, enum nn_act *out);
const char *nn_act_name(enum nn_act act);

/* ---- feed-forward layer (mlp) ----------------------------------------- */

struct nn_mlp_w {
	float *fc1_w, *fc1_b, *fc2_w, *fc2_b;
};

/* Saved by nn_mlp_forward for its backward pass: [n,h] each (fc1's
 * output and the activation's; the field keeps GELU's name). */
struct nn_mlp_acts {
	float *fc1, *gelu;
};

/* y[n,o] = fc2(act(fc1(x))), fc1 [h,in], fc2 [o,h]. A tensor-parallel
 * form runs it on a shard of h (fc2 bias NULL, added after the sum). */
void nn_mlp_forward(float *y, struct nn_mlp_acts *a, const struct nn_mlp_w *w,
    const float *x, int n, int in, int h, int o, enum nn_act act);
/* nn_mlp_forward, then y += res (nn_linear_forward_add's). */
void nn_mlp_forward_add(float *y, struct nn_mlp_acts *a,
    const struct nn_mlp_w *w, const float *x, const float *res, int n,
    int in, int h, int o, enum nn_act act);
/* dx += d/dx (dx may be NULL), g.* += weight grads; scratch 2*n*h floats.
 * It is the two parts below run together. */
void nn_mlp_backward(float *dx, const struct nn_mlp_w *g, float *scratch,
    const float *dy, const struct nn_mlp_acts *a, const struct nn_mlp_w *w,
    const float *x, int n, int in, int h, int o, enum nn_act act);

/* The backward pass split in two, as zero-bubble pipelines run it: the
 * input-gradient part (dx += d/dx, dx may be NULL) writes fc1's output
 * gradient into dfc1 [n,h] (scratch: n*h floats); the weight-gradient
 * part, run any time later, adds g.* from it, fc2's output gradient dy
 * and the saved activations. Together they add the bits nn_mlp_backward
 * adds (the activation's backward has no weights: all of it is input). */
void nn_mlp_backward_input(float *dx, float *dfc1, float *scratch,
    const float *dy, const struct nn_mlp_acts *a, const struct nn_mlp_w *w,
    int n, int in, int h, int o, enum nn_act act);
void nn_mlp_backward_weight(const struct nn_mlp_w *g, const float *dy,
    const float *dfc1, const struct nn_mlp_acts *a, const float *x, int n,
    int in, int h, int o);

/* ---- mixture of experts (moe.c) ---------------------------------------- */

struct nn_moe_ep;
struct nn_moe_router;

/* experts 0: no MoE (the plain mlp). capacity 0: no capacity limit. ep:
 * a parallel form's expert parallelism, NULL: every expert runs here.
 * route: a parallel form's routing of tokens that are part of a larger
 * micro-batch, NULL: nn_moe_route over the n tokens at hand. */
struct nn_moe_cfg {
	int experts, topk;
	double capacity;
	const struct nn_moe_ep *ep;
	const struct nn_moe_router *route;
};

/* router [E, d] (no bias); ex[e] expert e's mlp weights (fc1 [f, d], fc2
 * [d, f]). The same struct describes gradients. */
struct nn_moe_w {
	float *router;
	struct nn_mlp_w *ex;
};

/*
 * Saved by nn_moe_forward over n tokens: probs [n, E] the router's
 * softmax; the kept assignments expert by expert, rows[start[e] ..
 * start[e+1]) the tokens expert e runs (in token order), xe their inputs
 * [n*K, d], fc1 and gelu the experts' activations [n*K, f], ye their
 * outputs [n*K, d]. Statistics of the call: routed[e] the assignments the
 * router made to e before capacity, psum[e] the sum over tokens of p_e,
 * dropped the assignments capacity refused. daux[e] is the caller's: the
 * derivative of the loss with respect to every token's p_e (the auxiliary
 * loss's), read by nn_moe_backward (0 when there is none).
 */
struct nn_moe_acts {
	float *probs;
	int32_t *rows, *start;
	float *xe, *fc1, *gelu, *ye;
	float *routed, *psum, *daux, *dropped;
	float *sort;		/* [2n], the routing's own */
};

/*
 * Expert parallelism (a parallel form's; lib/par/ep.c): the E experts
 * spread over ranks ranks, E/ranks consecutive ones each, every rank
 * routing its own tokens. forward, after the routing (a's probs, rows,
 * start and statistics made), puts into y [n, d] the sum over the kept
 * assignments of p_e * expert_e(x), this rank's experts running every
 * rank's tokens routed to them, keeping what backward reads (the hooks'
 * own, found again by a's address: a micro-batch's layer).
 * backward adds the experts' share of dx (NULL: none) and of dp [n, E]
 * (d/dp_e of each token), and this rank's experts' weight gradients into
 * g (the others' stay as they are). Each 0, or -1 (a failed exchange;
 * the reason is the hooks' own).
 */
struct nn_moe_ep {
	int ranks;
	int (*forward)(void *ctx, float *y, struct nn_moe_acts *a,
	    const struct nn_moe_w *w, const float *x,
	    const struct nn_moe_cfg *c, int n, int d, int f, enum nn_act act);
	int (*backward)(void *ctx, float *dx, float *dp,
	    const struct nn_moe_w *g, const float *dy,
	    const struct nn_moe_acts *a, const struct nn_moe_w *w,
	    const struct nn_moe_cfg *c, int n, int d, int f, enum nn_act act);
	void *ctx;
};

/*
 * Routing over ranks (a parallel form's; lib/par/cp_stage.c): this
 * rank's n tokens are some of a micro-batch whose other tokens other
 * ranks hold, and capacity counts the whole micro-batch's. route does
 * what nn_moe_route does from a->probs, keeping what the whole
 * micro-batch's routing keeps of this rank's tokens, the statistics this
 * rank's tokens'. 0, or -1 (a failed exchange; the reason is the hook's).
 */
struct nn_moe_router {
	int (*route)(void *ctx, struct nn_moe_acts *a,
	    const struct nn_moe_cfg *c, int n);
	void *ctx;
};

/* ceil(F * n * K / E) (in double, F*n*K/E left to right), or n when F is
 * 0: the most assignments one expert takes of n tokens. */
int nn_moe_capacity(const struct nn_moe_cfg *c, int n);
/* Floats of nn_moe_acts for n tokens (an int32 counts one float). */
size_t nn_moe_acts_size(const struct nn_moe_cfg *c, int n, int d, int f);
void nn_moe_acts_bind(struct nn_moe_acts *a, float *buf,
    const struct nn_moe_cfg *c, int n, int d, int f);
/* y[n, d] = sum over the kept chosen e of p_e * expert_e(x); the top K
 * experts of highest p (ties: lower index), and with a capacity each
 * expert keeps its assignments of highest p (ties: lower token). daux is
 * zeroed. Every matrix product is nn_linear_forward's (nn_mlp_forward).
 * 0, or -1 when c->ep's or c->route's hook failed. */
int nn_moe_forward(float *y, struct nn_moe_acts *a, const struct nn_moe_w *w,
    const float *x, const struct nn_moe_cfg *c, int n, int d, int f,
    enum nn_act act);
/* dx += d/dx (dx may be NULL), g.* += weight grads, with a->daux added to
 * d/dp of every token. scratch: nn_moe_scratch_size floats. 0, or -1 when
 * c->ep's hook failed. */
size_t nn_moe_scratch_size(const struct nn_moe_cfg *c, int n, int d, int f);
int nn_moe_backward(float *dx, const struct nn_moe_w *g, float *scratch,
    const float *dy, const struct nn_moe_acts *a, const struct nn_moe_w *w,
    const float *x, const struct nn_moe_cfg *c, int n, int d, int f,
    enum nn_act act);
/*
 * The layer's pieces, for expert-parallel hooks. nn_moe_route: a->rows,
 * start and the statistics from a->probs of n tokens (a->sort its
 * scratch). nn_moe_gather: a->xe, the kept assignments' inputs. combine:
 * y = sum of p_e * a->ye over them. grad_out: dye [kept, d] = p_e * dy of
 * each, and dp[t, e] += dy_t . ye of each. scatter: dx_t += dxe of each.
 */
void nn_moe_route(struct nn_moe_acts *a, const struct nn_moe_cfg *c, int n);
void nn_moe_gather(struct nn_moe_acts *a, const float *x, int E, int d);
void nn_moe_combine(float *y, const struct nn_moe_acts *a, int n, int E,
    int d);
void nn_moe_grad_out(float *dye, float *dp, const struct nn_moe_acts *a,
    const float *dy, int E, int d);
void nn_moe_scatter(float *dx, const float *dxe, const struct nn_moe_acts *a,
    int E, int d);
/*
 * The auxiliary load-balancing loss A * E * sum_e f_e * P_e over a batch
 * of T tokens, f_e = routed[e] / sum(routed) (the counts of the whole
 * batch), P_e = psum[e] / T. This one's share of it is returned for
 * psum over some of the tokens (the sum over all parts is the loss), and
 * daux[e] = scale * A * E * f_e / T, the derivative of scale * loss by
 * each token's p_e.
 */
double nn_moe_aux(float *daux, const double *routed, const float *psum,
    int experts, double aux, double tokens, double scale);

/* ---- transformer block ----------------------------------------------- */

/* Parameter (or gradient) pointers of one block; biases may be NULL. The
 * same struct describes gradients, with NULL where the parameter is absent.
 * With local widths (see nn_block_shape) q, k, v are [nh*hd, d], o is
 * [d, nh*hd], fc1 [f, d], fc2 [d, f]: a tensor-parallel rank's shards. */
struct nn_block_w {
	float *ln1_w, *ln1_b;
	float *q_w, *q_b, *k_w, *k_b, *v_w, *v_b, *o_w, *o_b;
	float *ln2_w, *ln2_b;
	float *fc1_w, *fc1_b, *fc2_w, *fc2_b;
	struct nn_moe_w *moe;	/* NULL: the mlp fc1/fc2; else the MoE's */
};

/*
 * The sizes one call of the block works on: b samples of s positions of
 * width d; nh heads of size hd and f feed-forward features held HERE (all
 * of them serially; a tensor-parallel rank's share of heads and features,
 * a Ulysses rank's s/W positions). post_norm: h = ln1(x + attn(x)),
 * y = ln2(h + mlp(h)); otherwise (pre) h = x + attn(ln1(x)),
 * y = h + mlp(ln2(h)).
 */
struct nn_block_shape {
	int b, s, d;
	int nh, hd, f;
	int causal, post_norm;
	enum nn_act act;
	struct nn_moe_cfg moe;	/* experts > 0: an MoE replaces the mlp */
};

/* The serial shape: all of d/nh-sized heads and f features, pre-norm GELU. */
struct nn_block_shape nn_block_serial(int b, int s, int d, int nh, int f,
    int causal);

/*
 * Hooks a parallel form puts into the block (NULL, or a NULL member: none).
 * reduce sums a partial result over the ranks in place: the attention's
 * output projection and fc2's output forward (their biases are then added
 * once, after the sum), the input gradients of q/k/v and of fc1 backward.
 * Backward, NN_HOOK_MLP_BWD also marks where the block's mlp.* gradients
 * are final (a model's backward stages: a reduce that sums nothing).
 * An MoE is whole on every rank: its two reduces come with count 0.
 * attn_fwd/attn_bwd replace the attention core (nn_attention_*) on q, k, v
 * of [b*s, nh*hd]; att in nn_block_acts is then unused. Each returns 0 or
 * -1 (the block returns -1 at once).
 */
enum nn_hook { NN_HOOK_ATTN_FWD, NN_HOOK_MLP_FWD, NN_HOOK_MLP_BWD,
    NN_HOOK_ATTN_BWD };
struct nn_block_hooks {
	int (*reduce)(void *ctx, enum nn_hook where, float *buf, size_t count);
	int (*attn_fwd)(void *ctx, float *out, const float *q, const float *k,
	    const float *v);
	int (*attn_bwd)(void *ctx, float *dq, float *dk, float *dv,
	    const float *dout);
	void *ctx;
};

/* Activations saved by nn_block_forward for its backward pass, n = b*s
 * rows, c = nh*hd. Post-norm keeps x + attn(x) in h, ln1(that) in ln1 and
 * the second residual sum (before ln2) in ln2. */
struct nn_block_acts {
	float *ln1, *ln1_mean, *ln1_rstd;	/* [n,d], [n], [n] */
	float *q, *k, *v, *att, *atty;		/* [n,c] x3, [b,nh,s,s], [n,c] */
	float *h;				/* x + attn, [n,d] */
	float *ln2, *ln2_mean, *ln2_rstd;
	float *fc1, *gelu;			/* [n,f] x2 */
	struct nn_moe_acts moe;			/* sh->moe.experts > 0 */
};

/* Floats needed by nn_block_acts_bind. */
size_t nn_block_acts_size(const struct nn_block_shape *sh);
/* Points the fields into buf (nn_block_acts_size floats). */
void nn_block_acts_bind(struct nn_block_acts *a, float *buf,
    const struct nn_block_shape *sh);

/* y[b,s,d] = the block of x; y may not alias x. 0, or -1 when a hook
 * failed. */
int nn_block_forward(float *y, struct nn_block_acts *a,
    const struct nn_block_w *w, const float *x,
    const struct nn_block_shape *sh, const struct nn_block_hooks *hk);
/* dx += d/dx (dx may be NULL), g.* += weight grads. scratch:
 * nn_block_scratch_size floats. */
size_t nn_block_scratch_size(const struct nn_block_shape *sh);
int nn_block_backward(float *dx, const struct nn_block_w *g, float *scratch,
    const float *dy, const struct nn_block_acts *a,
    const struct nn_block_w *w, const float *x,
    const struct nn_block_shape *sh, const struct nn_block_hooks *hk);

/* The pre-norm block's backward split in two (zero-bubble pipelines):
 * nn_block_backward_input adds dx (may be NULL), runs hk's sums (0, or -1
 * when a hook failed) and keeps in sv the output gradients of the layers
 * with weights (fc2, fc1, ln2, o, q, k, v, ln1); nn_block_backward_weight,
 * run any time later while a, x and sv are kept, adds g.* from them.
 * Together they add the bits nn_block_backward adds with the same hooks.
 * Attention and GELU have no weights: all of their backward is the input
 * part. An MoE block (sh->moe.experts > 0) has no split: -1. */
struct nn_block_wsave {
	float *dy, *dfc1, *dln2, *dattn;	/* [n,d], [n,f], [n,d] x2 */
	float *dq, *dk, *dv, *dln1;		/* [n,c] x3, [n,d] */
};

size_t nn_block_wsave_size(const struct nn_block_shape *sh);
void nn_block_wsave_bind(struct nn_block_wsave *sv, float *buf,
    const struct nn_block_shape *sh);
int nn_block_backward_input(float *dx, const struct nn_block_wsave *sv,
    float *scratch, const float *dy, const struct nn_block_acts *a,
    const struct nn_block_w *w, const float *x,
    const struct nn_block_shape *sh, const struct nn_block_hooks *hk);
void nn_block_backward_weight(const struct nn_block_w *g,
    const struct nn_block_wsave *sv, const struct nn_block_acts *a,
    const float *x, const struct nn_block_shape *sh);

/* ---- models ---------------------------------------------------------- */

enum nn_arch { NN_MLP, NN_BLOCK, NN_GPT };

/*
 * Sizes of a model. Only those of its arch are used.
 * layers: gpt, the blocks layers.0 .. layers.L-1. mlp and block: 0 for one
 * layer with unprefixed names (fc1.weight, ln1.weight, ...), L >= 1 for a
 * stack layers.0.* .. layers.L-1.* (collx-pipe's models) run in sequence;
 * a block stack keeps d_model throughout. An mlp stack nn_init makes is
 * d_in -> d_hidden -> d_out, then d_out -> d_hidden -> d_out for every
 * later layer; one loaded may change width from layer to layer (layer i
 * in_i -> hidden_i -> out_i, out_i = in_(i+1); nn_model_mlp_shape), and
 * then d_in is its input, d_out its output, d_hidden layer 0's.
 */
struct nn_dims {
	enum nn_arch arch;
	int d_in, d_hidden, d_out;	/* mlp */
	int d_model, heads, d_ff;	/* block, gpt */
	int causal;			/* block (gpt is always causal) */
	int vocab, seq;			/* gpt */
	int layers;
	/* gpt with experts (moe.experts > 0): block i has an MoE instead of
	 * the mlp when (i + 1) % moe_every == 0; moe_aux the auxiliary
	 * loss's weight A (0: none). */
	struct nn_moe_cfg moe;
	int moe_every;
	double moe_aux;
};

/* Whether block i of a model with sizes d has an MoE. */
int nn_dims_moe_layer(const struct nn_dims *d, int i);
/* d's experts settings, naming the numbers when they do not fit: only a
 * gpt, 1 <= topk <= experts, 1 <= moe_every <= layers, capacity and aux
 * non-negative (0 when d has no experts). */
int nn_moe_valid(const struct nn_dims *d, char *err, size_t errlen);

/* One parameter tensor inside the contiguous buffer. */
struct nn_param {
	char name[NN_NAME_MAX];
	size_t offset, count;		/* in floats */
	int ndim;
	int64_t shape[2];
};

struct nn_model {
	struct nn_dims dims;
	size_t nparams;			/* floats in params and grads */
	float *params, *grads;		/* contiguous, table order */
	size_t ntensors;
	struct nn_param *table;		/* in name order */
	struct tensor_meta *meta;	/* __metadata__ to write back */
	size_t nmeta;
	struct nn_work *work;		/* activations, private */
	/* A gpt with experts: sums count doubles over the data-parallel
	 * ranks in place (0, or -1), called once in every training pass
	 * (nn_model_step*) after the forward pass, also by a rank with no
	 * samples; NULL: one rank holds the whole batch. */
	int (*moe_sum)(void *ctx, double *buf, size_t count);
	void *moe_ctx;
};

/*
 * A batch of n samples:
 * - mlp: x [n, d_in], y [n, d_out] (f32).
 * - block: x and y [n, seq, d_model] (f32); seq is any positive length.
 * - gpt: tokens [n, seq+1] (each sample a window: the first seq tokens the
 *   input, the last seq the targets); seq must equal the model's.
 */
struct nn_batch {
	int n, seq;
	const float *x, *y;
	const int32_t *tokens;
};

/* Pointers to layer i's weights and gradients (mlp or block stacks, gpt
 * blocks; i = 0 for an unprefixed model), for stage-wise (pipeline) use
 * of nn_mlp_* and nn_block_* with the caller's own activations. -1 when
 * the model has no such layer. */
int nn_model_mlp(const struct nn_model *m, int i, struct nn_mlp_w *w,
    struct nn_mlp_w *g);
int nn_model_block(const struct nn_model *m, int i, struct nn_block_w *w,
    struct nn_block_w *g);

/* The widths of mlp layer i (of a stack, or 0 for one layer): x [n, in]
 * -> [n, hidden] -> [n, out]. -1 when the model has no such layer. */
struct nn_mlp_shape {
	int in, hidden, out;
};
int nn_model_mlp_shape(const struct nn_model *m, int i,
    struct nn_mlp_shape *s);

/* Per-sample loss: mlp and block the mean squared error over the sample's
 * elements, gpt the mean cross-entropy over its seq positions. So the
 * usual batch loss (F.mse_loss, F.cross_entropy on the whole batch) is
 * loss_sum / n. */

/* Builds a model from a collection: arch from __metadata__ collx.arch,
 * heads from "heads", causal from "causal" (block, default 0); every size
 * from the shapes. Tensors of any float dtype are converted to f32. Any
 * failure (unknown arch, missing or extra tensor, inconsistent shape,
 * bad metadata) is -1 with the reason in err: bad input, exit 3. */
int nn_model_load(struct nn_model *m, const struct tensor_set *s,
    char *err, size_t errlen);
void nn_model_free(struct nn_model *m);
/* Writes the parameters (f32) under the same names with the same
 * metadata into a fresh set (freed by tensor_set_free). */
int nn_model_to_set(const struct nn_model *m, struct tensor_set *out,
    char *err, size_t errlen);
const struct nn_param *nn_model_param(const struct nn_model *m,
    const char *name);

void nn_model_zero_grad(struct nn_model *m);
/* Forward and backward over a batch: *loss_sum = sum of the per-sample
 * losses; grads += d(loss_sum)/d(params). The caller divides by the
 * global sample count (e.g. grad_scale 1/B in nn_optim_step), so the
 * gradients of several ranks or micro-batches simply add up. -1 on a bad
 * batch (token out of range, seq mismatch) with the reason in err. */
int nn_model_step(struct nn_model *m, const struct nn_batch *b,
    double *loss_sum, char *err, size_t errlen);
/*
 * Backward-pass hook, for overlapping gradient communication with the rest
 * of the backward pass. The backward pass runs in stages: an mlp stack
 * one per layer from the last; a block stack two per block from the last,
 * its feed-forward part (mlp.*) and then the rest (attention, ln1, ln2);
 * gpt the final LayerNorm (stage 0), the blocks' two each from the last
 * (1 .. 2L), the embeddings wte and wpe (2L + 1).
 * nn_model_step_hook calls fn(ctx, stage) as soon as a stage's gradients
 * are final (not written again in this pass), in order 0, 1, ...; fn must
 * not touch gradients of later stages. The gradients are those of
 * nn_model_step, bit for bit.
 */
typedef void (*nn_grad_fn)(void *ctx, int stage);
int nn_model_step_hook(struct nn_model *m, const struct nn_batch *b,
    double *loss_sum, nn_grad_fn fn, void *ctx, char *err, size_t errlen);
/*
 * Weight hook, for weights gathered just before use (fully sharded data
 * parallelism): nn_model_step_use calls use(ctx, layer, backward) before
 * the pass reads layer's weights (a stack's layer or a gpt's block; -1: a
 * gpt's wte, wpe and final LayerNorm), forward in the order the pass runs:
 * mlp and block stacks 0 .. L-1 forward, then L-1 .. 0 backward; gpt -1
 * (embeddings), 0 .. L-1, -1 (final LayerNorm and logits), then backward
 * -1 (logits and final LayerNorm), L-1 .. 0 (the embeddings' backward
 * reads no weight). fn as nn_model_step_hook's, interleaved with use.
 */
typedef void (*nn_use_fn)(void *ctx, int layer, int backward);
int nn_model_step_use(struct nn_model *m, const struct nn_batch *b,
    double *loss_sum, nn_grad_fn fn, nn_use_fn use, void *ctx, char *err,
    size_t errlen);
/* Stages of the backward pass, and the one after which tensor i (index
 * into m->table) is final. */
int nn_model_grad_stages(const struct nn_model *m);
int nn_model_grad_stage(const struct nn_model *m, size_t i);
/* Forward only: *loss_sum as nn_model_step, gradients untouched. */
int nn_model_loss(struct nn_model *m, const struct nn_batch *b,
    double *loss_sum, char *err, size_t errlen);

/*
 * A fresh model with GPT-2 style initialisation from a seed: weights
 * normal(0, 0.02), residual projections (attn.o, mlp fc2 of a block)
 * normal(0, 0.02/sqrt(2*layers)), biases 0, LayerNorm weight 1 and bias 0;
 * metadata collx.arch, heads, causal (and a gpt with experts moe.experts,
 * moe.topk, moe.every, moe.capacity, moe.aux; router weights and expert
 * fc1 normal(0, 0.02), expert fc2 as the residual projections). Sizes
 * used: mlp d_in, d_hidden,
 * d_out, layers; block d_model, heads, d_ff (0 = 4*d_model), causal,
 * layers; gpt vocab, d_model, layers, heads, seq, d_ff (0 = 4*d_model).
 * The residual scale uses max(layers, 1) blocks. Deterministic on every
 * machine for a given seed (normals from tensor_rng, see tensor/rng.h).
 * -1 on bad sizes.
 */
int nn_init(struct tensor_set *out, const struct nn_dims *dims,
    uint64_t seed, char *err, size_t errlen);
/* "mlp", "block", "gpt"; 0 or -1. */
int nn_arch_parse(const char *s, enum nn_arch *out);
const char *nn_arch_name(enum nn_arch a);
/* Parses --dims text for an arch: mlp "DIN,H,DOUT[,LAYERS]"; block
 * "D,HEADS[,FF[,CAUSAL[,LAYERS]]]"; gpt "VOCAB,D,LAYERS,HEADS,SEQ[,FF]"
 * (FF 0 or absent = 4*D; LAYERS absent or 0 = one unprefixed layer). -1
 * with the reason on malformed or non-positive sizes or heads not
 * dividing D. */
int nn_dims_parse(const char *s, enum nn_arch arch, struct nn_dims *out,
    char *err, size_t errlen);

/*
 * Experts. The auxiliary loss of a training pass uses f_e over the whole
 * batch (moe_sum's), its P_e this batch's; the loss sum includes the
 * batch's share of n times it (n samples), so the usual batch loss is
 * still loss_sum / B. A forward-only pass uses its own counts.
 * nn_model_moe_stats: the last pass's statistics, per MoE block in layer
 * order E assignments routed to each expert (before capacity) and the
 * number dropped, summed over ranks; NULL before any pass.
 * nn_model_moe_summary: their share of assignments dropped and the
 * imbalance, the most routed to one expert over the mean, worst block;
 * -1 for a model without experts or before any pass.
 */
int nn_model_moe_layers(const struct nn_model *m);
const double *nn_model_moe_stats(const struct nn_model *m);
int nn_model_moe_summary(const struct nn_model *m, double *dropped,
    double *imbalance);
/* The summary of statistics laid out as nn_model_moe_stats' (L MoE
 * blocks of E experts), wherever they were summed. */
void nn_moe_summary(const double *stats, int L, int E, double *dropped,
    double *imbalance);

/* ---- optimizers ------------------------------------------------------ */

enum nn_optim_kind { NN_SGD, NN_ADAMW };

struct nn_optim_cfg {
	enum nn_optim_kind kind;
	double lr, momentum, weight_decay;	/* momentum: SGD only */
	double beta1, beta2, eps;		/* AdamW only */
};

/* torch.optim defaults: SGD lr 0.01 (torch requires one), momentum 0,
 * weight decay 0; AdamW lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight
 * decay 0.01. */
void nn_optim_defaults(struct nn_optim_cfg *c, enum nn_optim_kind kind);
int nn_optim_parse(const char *s, enum nn_optim_kind *out);

/* State for a contiguous range of count parameters (all of a model, or a
 * parameter server's shard). */
struct nn_optim {
	struct nn_optim_cfg cfg;
	size_t count;
	long t;			/* steps taken */
	float *m, *v;		/* SGD momentum buffer in m; AdamW moments */
};

/* Moment buffers the optimizer keeps: AdamW 2 (m, v), SGD 1 with
 * momentum (m), else 0. */
int nn_optim_moments(const struct nn_optim_cfg *cfg);
int nn_optim_init(struct nn_optim *o, const struct nn_optim_cfg *cfg,
    size_t count, char *err, size_t errlen);
void nn_optim_free(struct nn_optim *o);
/* Bytes of the moment buffers o keeps. */
size_t nn_optim_bytes(const struct nn_optim *o);
/*
 * One update of p[0..count) with gradient g = grad_scale * grads[i], in
 * torch.optim's order. SGD: g += wd*p; buf = g on the first step, else
 * momentum*buf + g (when momentum != 0); p -= lr*buf (or lr*g). AdamW:
 * p *= 1 - lr*wd; m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g^2;
 * p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps).
 */
void nn_optim_step(struct nn_optim *o, float *p, const float *grads,
    float grad_scale);
/* The same update at step o->t, not counted (a range updated in pieces
 * whose step was counted once for all of them). */
void nn_optim_update(const struct nn_optim *o, float *p, const float *grads,
    float grad_scale);

#endif
