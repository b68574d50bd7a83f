// ops_cuda.h — the CUDA twins of the ops of ops.h, linear.h and sparse_attention.h (src/cuda/nn.cu,
// attention.cu, sparse_attention.cu). Each cu_X has exactly the arguments and the semantics of
// the CPU function X, on device buffers; X calls it first thing on a GPU run (backend.h). The
// fused ops of flash_attention.cu and classifier.cu have no CPU function of their own: their
// comments name the CPU ops they equal.
#pragma once
#include <stdint.h>
#include "nn/sparse_layout.h"
#ifdef __cplusplus
extern "C" {   // implemented in CUDA C++ (src/cuda)
#endif

// Row-major GEMM as cblas_sgemm: C[M,N] = alpha·op(A)·op(B) + beta·C (fp32 storage; a --bf16 run
// multiplies bf16 copies of A and B, see cuda_ops.h).
void cu_gemm(int transA, int transB, int M, int N, int K, float alpha, const float *A, int lda,
             const float *B, int ldb, float beta, float *C, int ldc);
// Row-major grouped GEMM: for g < n, C_g[M_g,N_g] = op(A_g)·op(B_g) + beta·C_g, with host arrays
// of the sizes and of the pointers (operands in the run's GEMM type, cuda_ops.h). Groups with an
// empty size are skipped (their C_g untouched, also with beta 0). Equal groups at equal strides
// run as one strided batched GEMM, the others one GEMM each. C_g fp32, or bf16 with c16 (a bf16 run).
void cu_gemm_grouped(int transA, int transB, int n, const int *M, const int *N, const int *K, const void *const *A,
                     int lda, const void *const *B, int ldb, float beta, void *const *C, int c16, int ldc);

// ---- element-wise, normalisation, embedding, loss (nn.cu) ----------------------------
void cu_encoder_forward(float *out, const int *tok, const float *wte, int v0, int Vl, const float *wpe, int B,
                        int T, int d);
void cu_encoder_backward(float *dwte, float *dwpe, const float *dout, const int *tok, int v0, int Vl, int B,
                         int T, int d);
void cu_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w, const float *b,
                          long N, int d, int gemm_input);
void cu_residual_layernorm_forward(float *res, float *out, float *mean, float *rstd, const float *a, const float *b,
                                   const float *w, const float *bias, long N, int d, int gemm_input);
void cu_matmul_forward_x16(float *out, const float *inp, const float *w, long N, int C, int OC);
void cu_matmul_backward_x16(float *dinp, float *dw, const float *dout, const float *inp, const float *w, long N,
                            int C, int OC, int accumulate);
void cu_layernorm_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp, const float *w,
                           const float *mean, const float *rstd, long N, int d, int dout16);
void cu_matmul_forward(float *out, const float *inp, const float *w, const float *bias, long N, int C, int OC,
                       int accumulate);
void cu_matmul_backward(float *dinp, float *dw, float *dbias, const float *dout, const float *inp, const float *w,
                        long N, int C, int OC, int accumulate);
void cu_linear_forward(float *out, long ldo, const float *inp, long ldi, const float *w, long N, int C, int OC,
                       int accumulate);
void cu_linear_backward(float *dinp, long ldd, float *dw, const float *dout, long ldo, const float *inp, long ldi,
                        const float *w, long N, int C, int OC, int accumulate);
void cu_gelu_forward(float *out, const float *inp, long n);
void cu_gelu_backward(float *dinp, const float *inp, const float *dout, long n);
void cu_matmul_bias_gelu_forward(float *h, float *hg, const float *inp, const float *w, const float *bias, long N,
                                 int C, int OC);
void cu_matmul_bias_gelu_backward(float *dinp, float *dw, float *dbias, float *dh, const float *dhg, const float *h,
                                  const float *inp, const float *w, long N, int C, int OC);
void cu_mlp_forward(float *out, float *h, float *hg, const float *inp, const float *wfc, const float *bfc,
                    const float *wproj, const float *bproj, long N, int C, int F, int OC);
void cu_mlp_backward(float *dinp, float *gwfc, float *gbfc, float *gwproj, float *gbproj, float *dh,
                     const float *dout, const float *h, const float *hg, const float *inp, const float *wfc,
                     const float *wproj, long N, int C, int F, int OC);
void cu_crossentropy_max(float *mx, float *tl, const float *logits, const int *targets, long N, int v0, int Vl,
                         int V);
void cu_crossentropy_exp(float *sum, float *logits, const float *mx, long N, int v0, int Vl, int V);
void cu_crossentropy_finish(float *losses, float *probs, const float *mx, const float *sum, const float *tl, long N,
                            int Vl);
void cu_crossentropy_backward(float *probs, const int *targets, long N, int v0, int Vl, float scale);
// The four above in one kernel for an unsharded head (v0 = 0; classifier.cu): losses[N] as
// crossentropy_finish's, and logits [N, Vl] (V real columns) overwritten by the gradient of
// crossentropy_backward, (softmax − onehot(target))·scale, padded columns 0. The _bf16 form takes
// bf16 logits (half.h bit patterns) and writes a bf16 gradient; fp32 inside.
void cu_fused_classifier(float *losses, float *logits, const int *targets, long N, int V, int Vl, float scale);
void cu_fused_classifier_bf16(float *losses, uint16_t *logits, const int *targets, long N, int V, int Vl,
                              float scale);
void cu_residual_forward(float *out, const float *a, const float *b, long n);          // out = a + b
void cu_half_to_f32(float *dst, const uint16_t *src, long n, int half);               // half 1 bf16, 2 fp16
void cu_f32_to_half(uint16_t *dst, const float *src, long n, int half);               // round to nearest even
void cu_half_accumulate(uint16_t *dst, const float *src, long n, int half);           // dst = half(dst + src)
double cu_sum(const float *x, long n);   // returns Σ x (in double) to the host

// ---- attention: the ops' twins are flash attention (flash_attention.cu) over the run's
// activations. On a GPU, att is the log-sum-exp [B,H,T] (fp32) of each query's scores in place of
// the CPU's probabilities [B,H,T,T]; the backward recomputes the probabilities from it; its
// scratch holds Δ = rowsum(dO∘O), B·H·T floats.
void cu_attention_forward(float *out, float *att, const float *qkv, int B, int T, int H, int hd);
void cu_attention_backward(float *dqkv, const float *dout, const float *att, const float *qkv, const float *out, int B,
                           int T, int H, int hd, float *scratch);
void cu_qkv_forward(float *qkv, float *ln, float *mean, float *rstd, const float *inp, const float *lnw,
                    const float *lnb, const float *w, const float *bias, long N, int C, int OC);
void cu_head_loss_forward(float *losses, float *logits, const float *inp, int inp16, const float *w,
                          const int *targets, long N, int C, int V, int Vl, float scale);
void cu_head_loss_backward(float *dinp, float *dw, const float *dlogits, const float *inp, int inp16, const float *w,
                           long N, int C, int Vl);
void cu_qkv_backward(float *dinp, float *dw, float *dbias, const float *dqkv, const float *inp, const float *w,
                     long N, int C, int OC);
void cu_attn_proj_forward(float *out, float *atty, float *att, const float *qkv, const float *wproj, const float *bproj,
                          int B, int T, int H, int hd, int OC);
void cu_attn_proj_backward(float *dqkv, float *gwproj, float *gbproj, float *datty, const float *dout, const float *att,
                           const float *qkv, const float *atty, const float *wproj, int B, int T, int H, int hd, int OC,
                           float *scratch);
// The T×T attention (attention.cu) the model ran before: att [B,H,T,T] as on the CPU, scratch
// B·H·T·T floats, fp32 storage. No longer the model's: flash_bench's baseline.
void cu_attention_tt_forward(float *out, float *att, const float *qkv, int B, int T, int H, int hd);
void cu_attention_tt_backward(float *dqkv, const float *dout, const float *att, const float *qkv, int B, int T, int H,
                              int hd, float *scratch);

// ---- flash attention (flash_attention.cu): causal attention as attention_forward/_backward, but
// no T×T probabilities: the forward keeps lse[B,H,T] (fp32, natural log of each query's sum of
// exp(score)) for the backward, which recomputes them. Shapes as there: qkv, dqkv [B,T,3·H·hd],
// out, dout [B,T,H·hd]; head dims 1..128; delta: B·H·T floats of scratch (written). dqkv written,
// not added. The _bf16 forms take bf16 bit patterns (as half.h) and accumulate in fp32.
// Deterministic: two runs give the same bits.
void cu_flash_attention_forward(float *out, float *lse, const float *qkv, int B, int T, int H, int hd);
void cu_flash_attention_backward(float *dqkv, float *delta, const float *dout, const float *out, const float *qkv,
                                 const float *lse, int B, int T, int H, int hd);
void cu_flash_attention_forward_bf16(uint16_t *out, float *lse, const uint16_t *qkv, int B, int T, int H, int hd);
void cu_flash_attention_backward_bf16(uint16_t *dqkv, float *delta, const uint16_t *dout, const uint16_t *out,
                                      const uint16_t *qkv, const float *lse, int B, int T, int H, int hd);
// the same with dqkv in fp32: the sums the bf16 form rounds (a --bf16 run's attention takes it
// wide, with no widening pass after)
void cu_flash_attention_backward_bf16_wide(float *dqkv, float *delta, const uint16_t *dout, const uint16_t *out,
                                           const uint16_t *qkv, const float *lse, int B, int T, int H, int hd);

// ---- block-sparse attention (sparse_attention.cu); L is host, its *_d arrays device
void cu_sparse_attention_forward(float *out, float *att, const float *qkv, const SparseLayout *L, int B, int T,
                                 int H, int hd);
void cu_sparse_attention_backward(float *dqkv, const float *dout, float *att, const float *qkv, const SparseLayout *L,
                                  int B, int T, int H, int hd);

#ifdef __cplusplus
}
#endif
