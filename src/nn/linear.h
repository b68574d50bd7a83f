// linear.h — a linear layer in torch.nn.Linear's layout, w[OC, C] (Llama's and Mixtral's
// weights), over row-major buffers with row strides (so q, k, v can sit in one qkv buffer).
#pragma once

// out[N,OC] (row stride ldo) = inp[N,C] (stride ldi)·wᵀ, or += when accumulate
void linear_forward(float *out, long ldo, const float *inp, long ldi, const float *w, long N, int C, int OC,
                    int accumulate);
// dinp[N,C] (stride ldd) = or += (accumulate) dout[N,OC] (stride ldo)·w; dw[OC,C] += doutᵀ·inp (stride
// ldi). dinp or dw may be NULL.
void linear_backward(float *dinp, long ldd, float *dw, const float *dout, long ldo, const float *inp, long ldi,
                     const float *w, long N, int C, int OC, int accumulate);
// out[N,OC] (row stride ldo) += b[OC] on every row (Qwen2's q, k, v biases); db[OC] += the column
// sums of dout.
void linear_bias_forward(float *out, long ldo, const float *b, long N, int OC);
void linear_bias_backward(float *db, const float *dout, long ldo, long N, int OC);
// The tied LM head with its fused loss, as a training step runs it on one vocabulary shard:
// logits[N,Vl] = inp[N,C]·w[Vl,C]ᵀ (linear_forward), then ops.h's crossentropy_fused. On a --bf16
// GPU run the logits are kept in bf16 only (in the first half of their room), the loss gradient
// written there in place, and head_loss_backward reads it as it is: logits is for these two ops
// alone. inp16: inp holds only its bf16 copy (a --bf16 GPU run's ln_f, layernorm_forward's
// gemm_input), read as it is by both.
void head_loss_forward(float *losses, float *logits, float *stats, const float *inp, int inp16, const float *w,
                       const int *targets, long N, int C, int V, int Vl, float scale);
// Its backward: dinp[N,C] written (inp16: in bf16 alone, as qkv_backward's), dw[Vl,C] +=
// dlogitsᵀ·inp (linear_backward), dlogits as head_loss_forward leaves it.
void head_loss_backward(float *dinp, float *dw, const float *dlogits, const float *inp, int inp16, const float *w,
                        long N, int C, int Vl);
