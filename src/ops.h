// ops.h — the model's operations, each a forward/backward pair over flat row-major
// buffers (shapes in the comments). Backward functions ADD into parameter gradients
// (gradient accumulation) and either write or add into input gradients as noted.
// Every matrix product is OpenBLAS sgemm; element-wise loops are OpenMP.
#pragma once
#include <stdint.h>

// out[N,d] = wte[tok] + wpe[pos]; N = B·T
void encoder_forward(float *out, const int *tok, const float *wte, const float *wpe, int B, int T, int d);
// dwte += ..., dwpe += ... (deterministic: rows are gathered per vocabulary entry)
void encoder_backward(float *dwte, float *dwpe, const float *dout, const int *tok, int B, int T, int d, int V);

// out[N,d] = (inp - mean)·rstd·w + b; mean[N], rstd[N] saved for backward
void layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w,
                       const float *b, long N, int d);
// dinp += ..., dw += ..., db += ...
void layernorm_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                        const float *w, const float *mean, const float *rstd, long N, int d);

// out[N,OC] = inp[N,C]·w[C,OC] + bias[OC] (+ out if accumulate); bias may be NULL
void matmul_forward(float *out, const float *inp, const float *w, const float *bias, long N, int C,
                    int OC, int accumulate);
// dinp[N,C] (= or += by accumulate) dout·wᵀ; dw[C,OC] += inpᵀ·dout; dbias[OC] += Σ rows dout.
// Any of dinp, dw, dbias may be NULL.
void matmul_backward(float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                     const float *w, long N, int C, int OC, int accumulate);

// Causal multi-head attention. qkv[N,3H·hd] (q|k|v), att[B,H,T,T] probabilities, out[N,H·hd].
// ld is the row stride of qkv (3·H·hd) and of out (H·hd), so a TP shard of heads works as is.
void attention_forward(float *out, float *att, const float *qkv, int B, int T, int H, int hd);
// dqkv[N,3H·hd] written (not added); scratch holds T·T floats per OpenMP thread.
void attention_backward(float *dqkv, const float *dout, const float *att, const float *qkv, int B, int T,
                        int H, int hd, float *scratch);

// GELU, tanh approximation
void gelu_forward(float *out, const float *inp, long n);
void gelu_backward(float *dinp, const float *inp, const float *dout, long n);   // dinp = written

// Cross-entropy over rows of logits[N,Vp] (only the first V columns are real).
// Forward: losses[N] per row; the logits are turned into probabilities in place.
void crossentropy_forward(float *losses, float *probs_inout, const int *targets, long N, int V, int Vp);
// dlogits = (probs - onehot)·scale, in place over probs
void crossentropy_backward(float *probs_inout, const int *targets, long N, int V, int Vp, float scale);

// Row softmax in place over x[N,C]
void softmax_rows(float *x, long N, int C);
