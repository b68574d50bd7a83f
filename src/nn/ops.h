// ops.h — the model's operations, each a forward/backward pair over flat row-major
// buffers (shapes in the comments). Backward functions ADD into parameter gradients
// (gradient accumulation) and either write or add into input gradients as noted.
// Every matrix product goes through the one GEMM (nn/gemm.h); element-wise loops are OpenMP.
#pragma once
#include <stdint.h>
#include "core/precision.h"

// out[N,d] = wte[tok] + wpe[pos]; N = B·T. wte holds the vocabulary rows [v0, v0+Vl) (a TP
// shard); tokens outside give 0 there. wpe may be NULL (added on one TP rank only).
void encoder_forward(float *out, const int *tok, const float *wte, int v0, int Vl, const float *wpe, int B, int T,
                     int d);
// dwte += ..., dwpe += ... (dwpe may be NULL); deterministic: rows are gathered per vocabulary entry
void encoder_backward(float *dwte, float *dwpe, const float *dout, const int *tok, int v0, int Vl, int B, int T,
                      int d);

// out[N,d] = (inp - mean)·rstd·w + b; mean[N], rstd[N] saved for backward. gemm_input: out is
// read only as a GEMM operand (ln_f: head_loss_forward, head_loss_backward), which on a --bf16 GPU
// run holds only its bf16 copy, in the first half of its room
void layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w,
                       const float *b, long N, int d, int gemm_input);
// res[N,d] = a + b (the residual stream), then out = layernorm(res) as layernorm_forward: on a GPU
// one pass (the residual add and the norm after it; layernorm_backward is its backward, the
// residual's gradient being the one layernorm_backward adds into). gemm_input: out is read only by
// ops that take it as it is left so, which on a --bf16 GPU run holds only its bf16 copy, in the
// first half of its room: the dense MLP (mlp_forward, mlp_backward) or an MoE layer with
// MoeLayer.rows16 (its router through matmul_forward_x16 / matmul_backward_x16, its dispatch).
void residual_layernorm_forward(float *res, float *out, float *mean, float *rstd, const float *a, const float *b,
                                const float *w, const float *bias, long N, int d, int gemm_input);
// out[N,OC] = inp·w[C,OC] and its backward (dinp[N,C] (+)= dout·wᵀ, dw += inpᵀ·dout), no bias, with
// inp as residual_layernorm_forward leaves it with gemm_input: on a --bf16 GPU run its bf16 copy
// alone (the CPU: fp32, matmul_forward's and matmul_backward's). The MoE router's logits from ln2.
void matmul_forward_x16(float *out, const float *inp, const float *w, long N, int C, int OC);
void matmul_backward_x16(float *dinp, float *dw, const float *dout, const float *inp, const float *w, long N, int C,
                         int OC, int accumulate);
// dinp += ..., dw += ..., db += ... dout16: dout as qkv_backward, mlp_backward and head_loss_backward
// (inp16) write it, on a --bf16 GPU run its bf16 copy alone, in the first half of its room
void layernorm_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                        const float *w, const float *mean, const float *rstd, long N, int d, int dout16);

// out[N,OC] = inp[N,C]·w[C,OC] + bias[OC] (+ out if accumulate); bias may be NULL
void matmul_forward(float *out, const float *inp, const float *w, const float *bias, long N, int C,
                    int OC, int accumulate);
// dinp[N,C] (= or += by accumulate) dout·wᵀ; dw[C,OC] += inpᵀ·dout; dbias[OC] += Σ rows dout.
// Any of dinp, dw, dbias may be NULL.
void matmul_backward(float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                     const float *w, long N, int C, int OC, int accumulate);

// Causal multi-head attention. qkv[N,3H·hd] (q|k|v), att[B,H,T,T] probabilities, out[N,H·hd].
// ld is the row stride of qkv (3·H·hd) and of out (H·hd), so a TP shard of heads works as is.
// On a GPU it is flash attention: att holds only each query's log-sum-exp [B,H,T] (ops_cuda.h).
void attention_forward(float *out, float *att, const float *qkv, int B, int T, int H, int hd);
// dqkv[N,3H·hd] written (not added); out: the forward's output; scratch holds
// attention_scratch_floats(T) floats per OpenMP thread (on the GPU: B·H·T floats).
void attention_backward(float *dqkv, const float *dout, const float *att, const float *qkv, const float *out, int B,
                        int T, int H, int hd, float *scratch);
long attention_scratch_floats(int T);
// The GPT block's LayerNorm and q, k, v: ln[N,C] = layernorm(inp) with lnw, lnb (mean, rstd
// kept, layernorm_forward), then qkv[N,OC] = ln·w[C,OC] + bias (matmul_forward). On a --bf16 GPU
// run ln and qkv hold only their bf16 copies (in the first half of their rooms): ln is for
// qkv_backward alone, qkv for attn_proj_forward and attn_proj_backward.
void qkv_forward(float *qkv, float *ln, float *mean, float *rstd, const float *inp, const float *lnw, const float *lnb,
                 const float *w, const float *bias, long N, int C, int OC);
// Its GEMMs' backward: matmul_backward from dqkv[N,OC] (dinp written, not added), dqkv as
// attn_proj_backward leaves it and ln as qkv_forward leaves it (the LayerNorm's backward reads
// inp, mean and rstd: layernorm_backward). On a --bf16 GPU run dinp is written in bf16 alone (in
// the first half of its room: layernorm_backward's dout16; a TP sum adds it as DT_BF16).
void qkv_backward(float *dinp, float *dw, float *dbias, const float *dqkv, const float *ln, const float *w, long N,
                  int C, int OC);
// Attention and its output projection, the pair the GPT block runs: atty = attention(qkv), then
// out[N,OC] = atty·wproj[H·hd,OC] + bproj (bproj may be NULL; out NULL: atty alone, CAC's
// recompute). On a --bf16 GPU run atty holds only its bf16 copy (in the first half of its room),
// which the projection and attn_proj_backward read: atty is for these two ops alone. The backward
// from dout[N,OC]: datty = dout·wprojᵀ, gwproj += attyᵀ·dout, gbproj += Σ rows dout (gbproj may
// be NULL), then attention_backward from datty into dqkv. Both take qkv as qkv_forward leaves it;
// on a --bf16 GPU run the backward writes dqkv in bf16 only (its first half), for qkv_backward.
void attn_proj_forward(float *out, float *atty, float *att, const float *qkv, const float *wproj, const float *bproj,
                       int B, int T, int H, int hd, int OC);
void attn_proj_backward(float *dqkv, float *gwproj, float *gbproj, float *datty, const float *dout, const float *att,
                        const float *qkv, const float *atty, const float *wproj, int B, int T, int H, int hd, int OC,
                        float *scratch);

// GELU, tanh approximation
void gelu_forward(float *out, const float *inp, long n);
void gelu_backward(float *dinp, const float *inp, const float *dout, long n);   // dinp = written

// The MLP's first half: h[N,OC] = inp[N,C]·w[C,OC] + bias (kept for the backward), hg = GELU(h);
// bias may be NULL. Its backward: dh = dhg ⊙ GELU'(h) with dbias += Σ rows dh in the same pass
// (dh may be dhg itself), then dinp[N,C] = dh·wᵀ (written) and dw += inpᵀ·dh. dinp, dw, dbias may be NULL.
void matmul_bias_gelu_forward(float *h, float *hg, const float *inp, const float *w, const float *bias, long N,
                              int C, int OC);
void matmul_bias_gelu_backward(float *dinp, float *dw, float *dbias, float *dh, const float *dhg, const float *h,
                               const float *inp, const float *w, long N, int C, int OC);

// The dense MLP: matmul_bias_gelu_forward (h[N,F], hg), then out[N,OC] = hg·wproj[F,OC] + bproj
// (bproj may be NULL; out NULL: the first half alone). Both ops take inp[N,C] as
// residual_layernorm_forward leaves it with gemm_input (on a --bf16 GPU run its bf16 copy alone).
// On a --bf16 GPU run hg holds only its bf16 copy (in the first half of its room), which the
// second GEMM and mlp_backward read: hg is for these two ops alone. Its backward: dh[N,F] = dout·wprojᵀ, gwproj += hgᵀ·dout, gbproj += Σ rows
// dout (gbproj may be NULL), then matmul_bias_gelu_backward from dh (in place) into dinp[N,C]
// (on a --bf16 GPU run in bf16 alone, as qkv_backward's).
// dh is scratch: on a --bf16 GPU run it ends holding dout·wprojᵀ, the GELU's gradient going to
// the GEMMs in bf16 only.
void mlp_forward(float *out, float *h, float *hg, const float *inp, const float *wfc, const float *bfc,
                 const float *wproj, const float *bproj, long N, int C, int F, int OC);
void mlp_backward(float *dinp, float *gwfc, float *gbfc, float *gwproj, float *gbproj, float *dh, const float *dout,
                  const float *h, const float *hg, const float *inp, const float *wfc, const float *wproj, long N,
                  int C, int F, int OC);

// Cross-entropy over a vocabulary shard: logits[N,Vl] are the columns v0 … v0+Vl−1 of the full
// logits, and only global columns < V are real (the rest is padding that never wins). Three
// passes around the caller's reductions over the shards (no-ops for one shard):
//   crossentropy_max:    mx[N] local row max, tl[N] target logit if the target is here else 0
//                        → caller: max-reduce mx, sum-reduce tl
//   crossentropy_exp:    logits → exp(logit − mx) in place, sum[N] local sums → caller: sum-reduce
//   crossentropy_finish: probabilities in place, losses[N] = log(sum) + mx − tl
void crossentropy_max(float *mx, float *tl, const float *logits, const int *targets, long N, int v0, int Vl, int V);
void crossentropy_exp(float *sum, float *logits, const float *mx, long N, int v0, int Vl, int V);
void crossentropy_finish(float *losses, float *probs, const float *mx, const float *sum, const float *tl, long N,
                         int Vl);
// dlogits = (probs − onehot)·scale, in place over probs
void crossentropy_backward(float *probs, const int *targets, long N, int v0, int Vl, float scale);
// The four above on an unsharded head (v0 0, one shard) in training: losses[N], and logits
// overwritten by crossentropy_backward's gradient (scale). stats [3N]: the CPU's mx | sum | tl.
// On a GPU one kernel that reads each row twice and writes it once (ops_cuda.h: cu_fused_classifier).
void crossentropy_fused(float *losses, float *logits, float *stats, const int *targets, long N, int V, int Vl,
                        float scale);

// Row-major C[M,N] = alpha·op(A)·op(B) + beta·C, as cblas_sgemm (the LM head's products; the CPU: gemm_cpu).
void gemm(int transA, int transB, int M, int N, int K, float alpha, const float *A, int lda, const float *B, int ldb,
          float beta, float *C, int ldc);
// out[n] = a + b (the residual after a row-parallel layer)
void residual_forward(float *out, const float *a, const float *b, long n);
// 16-bit storage (half PREC_BF16 or PREC_FP16): up-cast, round to nearest even, dst = half(dst + src)
void convert_to_f32(float *dst, const uint16_t *src, long n, Precision half);
void convert_from_f32(uint16_t *dst, const float *src, long n, Precision half);
void accumulate_half(uint16_t *dst, const float *src, long n, Precision half);
// Σ x in double (the batch's summed token losses)
double sum_forward(const float *x, long n);
