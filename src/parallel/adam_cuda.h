// adam_cuda.h — the CUDA twins of the optimizer's passes (src/cuda/parallel.cu): scaling, sums
// of squares, up-casts and AdamW on device buffers, for adam.c and zero.c.
#pragma once
#include <stdint.h>
#ifdef __cplusplus
extern "C" {   // implemented in CUDA C++ (src/cuda)
#endif

// Optimizer (zero.c): x *= s; Σ (s·x)² in double into *out (a device double); AdamW as zero.c's adam().
void cu_scale(float *x, long n, float s);
void cu_sumsq(double *out, const float *x, long n);
void cu_sumsq_half(double *out, const uint16_t *x, long n, int half, float s);
void cu_upcast_scale(float *dst, const uint16_t *src, long n, int half, float s);     // dst = s·f32(src)
void cu_adamw(float *w, float *m, float *v, const float *g, long n, float lr, float decay, float b1, float b2,
              float eps, float bc1, float bc2);
// adamw_mixed_host's loop (adam.h) term for term: step = lr/bc1, sb2 = √bc2 as the host computes them
void cu_adamw_mixed(float *w, float *m, float *v, float *g, long n, float gscale, float step, float sb2, float decay,
                    float b1, float b2, float eps, uint16_t *w16);

#ifdef __cplusplus
}
#endif
