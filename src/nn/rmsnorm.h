// rmsnorm.h — RMSNorm (Llama's norm, docs/llama.md): weight only, no mean subtracted.
#pragma once

// out[N,d] = inp·rstd·w, rstd[N] = 1/sqrt(mean(inp²) + eps) saved for the backward
void rmsnorm_forward(float *out, float *rstd, const float *inp, const float *w, long N, int d, float eps);
// dinp[N,d] += ..., dw[d] += ... (rows summed in order: deterministic)
void rmsnorm_backward(float *dinp, float *dw, const float *dout, const float *inp, const float *w, const float *rstd,
                      long N, int d);
