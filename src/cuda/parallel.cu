// parallel.cu — the CUDA twins of the optimizer's passes of parallel/ (adam.c, zero.c; see
// cuda_ops.h): scaling, sums of squares, up-casts and AdamW on device buffers.
#include "common.cuh"
#include <math.h>

using namespace cu;

namespace {

__global__ void scale_kernel(float *x, long n, float s) {
    GRID_STRIDE(i, n) x[i] *= s;
}

__global__ void upcast_scale_kernel(float *dst, const uint16_t *src, long n, int half, float s) {
    GRID_STRIDE(i, n) dst[i] = half_to_f32_d(half, src[i]) * s;
}

// AdamW, zero.c's adam() term for term
__global__ void adamw_kernel(float *w, float *m, float *v, const float *g, long n, float lr, float decay, float b1,
                             float b2, float eps, float bc1, float bc2) {
    GRID_STRIDE(j, n) {
        float mj = b1 * m[j] + (1 - b1) * g[j];
        float vj = b2 * v[j] + (1 - b2) * g[j] * g[j];
        float denom = sqrtf(vj) / sqrtf(bc2) + eps;
        m[j] = mj; v[j] = vj;
        w[j] = w[j] * decay - (lr / bc1) * mj / denom;
    }
}

// adam.c's adam_elem on g·gscale, the weight rounded to bf16, the gradient consumed
__global__ void adamw_mixed_kernel(float *w, float *m, float *v, float *g, long n, float gscale, float step, float sb2,
                                   float decay, float b1, float b2, float eps, uint16_t *w16) {
    GRID_STRIDE(j, n) {
        float gj = g[j] * gscale;
        float mj = b1 * m[j] + (1 - b1) * gj;
        float vj = b2 * v[j] + (1 - b2) * gj * gj;
        float wj = w[j] * decay - step * mj / (sqrtf(vj) / sb2 + eps);
        m[j] = mj; v[j] = vj; w[j] = wj;
        w16[j] = half_from_f32_d(1, wj);
        g[j] = 0.0f;
    }
}

struct SumSqF { const float *x; __device__ double operator()(long i) const { double v = x[i]; return v * v; } };
// zero.c: double g = half_to_f32(x) * unscale (a float product); g·g in double
struct SumSqHalfF {
    const uint16_t *x;
    int half;
    float s;
    __device__ double operator()(long i) const { double g = half_to_f32_d(half, x[i]) * s; return g * g; }
};

}   // namespace

// ---------------------------------------------------------------------------------------

extern "C" void cu_scale(float *x, long n, float s) {
    if (n <= 0) return;
    scale_kernel<<<grid_for(n, kThreads), kThreads, 0, cu_stream()>>>(x, n, s);
    CU_LAUNCH_CHECK();
}

extern "C" void cu_sumsq(double *out, const float *x, long n) { reduce_sum(out, n, SumSqF{x}); }

extern "C" void cu_sumsq_half(double *out, const uint16_t *x, long n, int half, float s) {
    reduce_sum(out, n, SumSqHalfF{x, half, s});
}

extern "C" void cu_upcast_scale(float *dst, const uint16_t *src, long n, int half, float s) {
    if (n <= 0) return;
    upcast_scale_kernel<<<grid_for(n, kThreads), kThreads, 0, cu_stream()>>>(dst, src, n, half, s);
    CU_LAUNCH_CHECK();
}

extern "C" void cu_adamw(float *w, float *m, float *v, const float *g, long n, float lr, float decay, float b1,
                         float b2, float eps, float bc1, float bc2) {
    if (n <= 0) return;
    adamw_kernel<<<grid_for(n, kThreads), kThreads, 0, cu_stream()>>>(w, m, v, g, n, lr, decay, b1, b2, eps, bc1,
                                                                         bc2);
    CU_LAUNCH_CHECK();
}

extern "C" void cu_adamw_mixed(float *w, float *m, float *v, float *g, long n, float gscale, float step, float sb2,
                               float decay, float b1, float b2, float eps, uint16_t *w16) {
    if (n <= 0) return;
    adamw_mixed_kernel<<<grid_for(n, kThreads), kThreads, 0, cu_stream()>>>(w, m, v, g, n, gscale, step, sb2, decay, b1,
                                                                             b2, eps, w16);
    CU_LAUNCH_CHECK();
}
