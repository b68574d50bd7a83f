// classifier.cu — the LM head's softmax cross-entropy in one kernel (see ops_cuda.h): what
// crossentropy_max, _exp, _finish and _backward (ops.c) do to an unsharded head (v0 = 0), in one
// launch that reads each row of logits twice and writes it once, in place: the loss of the row
// and the gradient of the logits, (softmax − onehot(target))·scale, padded columns 0.
//
// One block per row. Pass 1: each thread an online (max, sum of exp) over its columns; the
// pairs meet by warp shuffles, then warp 0 over the warps, always in the same order
// (deterministic). Pass 2: the gradient over the same columns. The target's logit is read in
// pass 1, before any column is overwritten.
#include "cuda_ops.h"
#include <cuda_bf16.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

namespace {

constexpr int kThreads = 256, kWarps = kThreads / 32;
constexpr unsigned kFull = 0xffffffffu;

__device__ __forceinline__ float to_f(float x) { return x; }
__device__ __forceinline__ float to_f(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ void put(float *p, float x) { *p = x; }
__device__ __forceinline__ void put(__nv_bfloat16 *p, float x) { *p = __float2bfloat16(x); }

// (m, s) ⊕ (m2, s2): the sum of exp(x − m) over both sets, against their common max
__device__ __forceinline__ void combine(float &m, float &s, float m2, float s2) {
    float mx = fmaxf(m, m2);
    if (mx == -INFINITY) return;   // both empty
    s = s * expf(m - mx) + s2 * expf(m2 - mx);
    m = mx;
}

// the block's (max, sum) pair, the same in every thread (red: 2·kWarps floats of shared memory)
__device__ void block_combine(float &m, float &s, float *red) {
    for (int o = 16; o > 0; o >>= 1) combine(m, s, __shfl_xor_sync(kFull, m, o), __shfl_xor_sync(kFull, s, o));
    int w = threadIdx.x / 32;
    if (threadIdx.x % 32 == 0) { red[w] = m; red[kWarps + w] = s; }
    __syncthreads();
    m = red[0];
    s = red[kWarps];
    for (int i = 1; i < kWarps; i++) combine(m, s, red[i], red[kWarps + i]);
}

// losses[i], and row i of logits [N, Vl] (V real columns) → (softmax − onehot)·scale
template <class E>
__global__ void __launch_bounds__(kThreads) fused_classifier_kernel(float *losses, E *logits, const int *targets,
                                                                    int V, int Vl, float scale) {
    __shared__ float red[2 * kWarps];
    __shared__ float target_logit;
    E *row = logits + (long)blockIdx.x * Vl;
    int t = targets[blockIdx.x];
    float m = -INFINITY, s = 0.0f;
    for (int c = threadIdx.x; c < V; c += kThreads) {
        float x = to_f(row[c]);
        if (x > m) { s = s * expf(m - x) + 1.0f; m = x; }
        else s += expf(x - m);
    }
    if (threadIdx.x == 0) target_logit = t >= 0 && t < Vl ? to_f(row[t]) : 0.0f;
    block_combine(m, s, red);   // its barrier also publishes target_logit
    if (threadIdx.x == 0) losses[blockIdx.x] = logf(s) + m - target_logit;
    float inv = 1.0f / s;
    for (int c = threadIdx.x; c < Vl; c += kThreads) {
        float p = c < V ? expf(to_f(row[c]) - m) * inv : 0.0f;
        put(&row[c], (p - (c == t ? 1.0f : 0.0f)) * scale);
    }
}

template <class E> void classifier(float *losses, E *logits, const int *targets, long N, int V, int Vl, float scale) {
    PROF(PROF_LOSS);
    if (N <= 0) return;
    if (N > 0x7fffffffL || V < 1 || V > Vl) {
        fprintf(stderr, "ted: fused classifier: %ld rows of %d columns (%d real) are out of its range\n", N, Vl, V);
        exit(1);
    }
    fused_classifier_kernel<E><<<(unsigned)N, kThreads, 0, cu_stream()>>>(losses, logits, targets, V, Vl, scale);
    CU_LAUNCH_CHECK();
}

}   // namespace

extern "C" void cu_fused_classifier(float *losses, float *logits, const int *targets, long N, int V, int Vl,
                                    float scale) {
    classifier<float>(losses, logits, targets, N, V, Vl, scale);
}

extern "C" void cu_fused_classifier_bf16(float *losses, uint16_t *logits, const int *targets, long N, int V, int Vl,
                                         float scale) {
    classifier<__nv_bfloat16>(losses, (__nv_bfloat16 *)logits, targets, N, V, Vl, scale);
}
