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
