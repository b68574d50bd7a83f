// common.cuh — the device helpers every .cu of the CUDA backend shares: launch sizes, the
// grid-stride and row loops, warp and block reductions, the 16-bit formats bit for bit as
// core/half.h, reads of a weight in its storage type, and the deterministic double
// reduction. Included by the .cu files only (after cuda_ops.h).
//
// Conventions: flat row-major buffers, shapes in the comments; long indices; grid-stride
// loops, so any grid size is correct; every launch checked. Reductions are deterministic (a
// fixed order for given sizes); no atomics.
#pragma once
#include "cuda_ops.h"
#include <cuda_fp16.h>
#include <stdint.h>

namespace cu {

constexpr int kThreads = 256;            // threads per block of the 1-D kernels (8 warps)
constexpr int kWarps = kThreads / 32;
constexpr long kMaxBlocks = 32768;       // grid-stride loops cover the rest
constexpr int kRedBlocks = 512;          // blocks of the first pass of the double reductions

// blocks for a grid-stride loop over n items, `per` items per block (at most kMaxBlocks)
static inline int grid_for(long n, long per) {
    long b = (n + per - 1) / per;
    return (int)(b < 1 ? 1 : b < kMaxBlocks ? b : kMaxBlocks);
}
// blocks for one thread (or warp) per item: every item gets its own
static inline unsigned blocks_for(long n, long per) {
    long b = (n + per - 1) / per;
    return (unsigned)(b > 0 ? b : 1);
}
// blocks for a block per row (BLOCK_ROWS and ROW_COLS): one a row, 65536 at most (the loop strides)
static inline unsigned row_grid(long rows) { return (unsigned)(rows < 65536 ? (rows > 0 ? rows : 1) : 65536); }

}   // namespace cu

#define GRID_STRIDE(i, n) \
    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (long)gridDim.x * blockDim.x)
// one warp per row i < N (all 32 lanes of a warp take the same rows: warp-uniform loop)
#define WARP_ROWS(i, N)                                                              \
    for (long i = (long)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); i < (N); \
         i += (long)gridDim.x * (blockDim.x >> 5))
// one block per row i < N
#define BLOCK_ROWS(i, N) for (long i = blockIdx.x; i < (N); i += gridDim.x)
// a block's threads over a row's d columns, V at a time (V = 4: float4, V = 8: 16 bytes of bf16)
#define ROW_COLS(c, d, V) for (int c = (V) * threadIdx.x; c < (d); c += (V) * blockDim.x)

// ---- warp and block reductions ----------------------------------------------------------

template <class T> static __device__ __forceinline__ T warp_sum(T v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// the comparison of ops.c's max loops (a NaN never wins)
static __device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) {
        float u = __shfl_xor_sync(0xffffffffu, v, o);
        v = u > v ? u : v;
    }
    return v;
}

// Sum over the whole block (blockDim.x a multiple of 32, at most 1024), returned to every
// thread; sh holds 32 T. All threads of the block must call it (it synchronises). The warp
// totals are added in warp order by every thread: deterministic, no broadcast needed.
template <class T> static __device__ T block_sum(T v, T *sh) {
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads();                     // sh may still be read from the previous call
    if (lane == 0) sh[w] = v;
    __syncthreads();
    T r = 0;
    for (int k = 0; k < nw; k++) r += sh[k];
    return r;
}

static __device__ float block_max(float v, float *sh) {
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) sh[w] = v;
    __syncthreads();
    float r = sh[0];
    for (int k = 1; k < nw; k++) r = sh[k] > r ? sh[k] : r;
    return r;
}

// ---- 16-bit formats, bit for bit as half.h (kind 1 = bf16, 2 = fp16) --------------------

static __device__ __forceinline__ float half_to_f32_d(int kind, uint16_t h) {
    if (kind == 1) return __uint_as_float((unsigned)h << 16);
    return __half2float(__ushort_as_half(h));
}

static __device__ __forceinline__ uint16_t half_from_f32_d(int kind, float f) {
    if (kind == 1) {   // bf16: round to nearest even, NaN kept a NaN — half.h's integer recipe
        unsigned u = __float_as_uint(f);
        if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
        u += 0x7fffu + ((u >> 16) & 1u);
        return (uint16_t)(u >> 16);
    }
    return __half_as_ushort(__float2half_rn(f));   // fp16: round to nearest even (as _Float16)
}

// V consecutive floats from p + c, or to it: V = 4 a float4 (p + c 16-byte aligned), V = 1 one float
template <int V> __device__ __forceinline__ void ldv(float (&r)[V], const float *p, int c) {
    if constexpr (V == 4) {
        float4 t = *(const float4 *)(p + c);
        r[0] = t.x; r[1] = t.y; r[2] = t.z; r[3] = t.w;
    } else r[0] = p[c];
}
template <int V> __device__ __forceinline__ void stv(float *p, int c, const float (&r)[V]) {
    if constexpr (V == 4) *(float4 *)(p + c) = make_float4(r[0], r[1], r[2], r[3]);
    else p[c] = r[0];
}
// two floats as bf16 in one word (a in the lower half, the lower address), rounded to nearest even
static __device__ __forceinline__ unsigned bf16x2_d(float a, float b) {
    return half_from_f32_d(1, a) | (unsigned)half_from_f32_d(1, b) << 16;
}
// V floats to p + c as bf16 (V = 4: 8 bytes, aligned for it)
template <int V> __device__ __forceinline__ void stv(uint16_t *p, int c, const float (&r)[V]) {
    if constexpr (V == 4) *(uint2 *)(p + c) = make_uint2(bf16x2_d(r[0], r[1]), bf16x2_d(r[2], r[3]));
    else p[c] = half_from_f32_d(1, r[0]);
}
// whether rows of d floats at these pointers (NULL: none) can be read and written 4 at a time
static inline int rows_vec4(int d, const void *a, const void *b, const void *c, const void *e) {
    return d % 4 == 0 && ((uintptr_t)a | (uintptr_t)b | (uintptr_t)c | (uintptr_t)e) % 16 == 0;
}

// A weight element as fp32: weights are fp32 (W = float) or, on a --bf16 run, bf16 (W = uint16_t)
static __device__ __forceinline__ float ldw(const float *w, long i) { return w[i]; }
static __device__ __forceinline__ float ldw(const uint16_t *w, long i) { return half_to_f32_d(1, w[i]); }
// w[i] as fp32, 0 when w is NULL (an optional bias)
template <class W> static __device__ __forceinline__ float ldw_or0(const W *w, long i) { return w ? ldw(w, i) : 0.0f; }
// V consecutive weight elements from w + c as fp32 (V = 4: 16 or 8 bytes, aligned for it)
template <int V, class W> __device__ __forceinline__ void ldwv(float (&r)[V], const W *w, int c) {
    if constexpr (V == 4 && sizeof(W) == 2) {
        uint2 t = *(const uint2 *)(w + c);
        r[0] = half_to_f32_d(1, (uint16_t)t.x); r[1] = half_to_f32_d(1, (uint16_t)(t.x >> 16));
        r[2] = half_to_f32_d(1, (uint16_t)t.y); r[3] = half_to_f32_d(1, (uint16_t)(t.y >> 16));
    } else if constexpr (V == 4) ldv<4>(r, (const float *)w, c);
    else r[0] = ldw(w, c);
}

// The local expert of row r of an expert buffer (off: its El+1 row offsets): the largest e < El
// with off[e] <= r (an empty expert e has off[e] == off[e+1], so e+1 qualifies too and wins).
// Needs off[0] <= r < off[El].
static __device__ __forceinline__ int expert_of(const long *off, int El, long r) {
    int lo = 0, hi = El - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (off[mid] <= r) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

// ---- deterministic double reductions: Σ f(i) for i < n -----------------------------------
// Pass 1: kRedBlocks (at most) blocks each write a partial (grid-stride, fixed order for a
// given n); pass 2: one block adds the partials in order. The partials live in a scratch of
// each .cu that is allocated once (one stream: calls never overlap).

template <class F> static __global__ void reduce_partial_kernel(double *part, long n, F f) {
    __shared__ double sh[32];
    double acc = 0;
    GRID_STRIDE(i, n) acc += f(i);
    acc = block_sum(acc, sh);
    if (threadIdx.x == 0) part[blockIdx.x] = acc;
}

static __global__ void reduce_final_kernel(double *out, const double *part, int nb) {
    __shared__ double sh[32];
    double acc = 0;
    for (int k = threadIdx.x; k < nb; k += blockDim.x) acc += part[k];
    acc = block_sum(acc, sh);
    if (threadIdx.x == 0) *out = acc;
}

// A device buffer that grows (never shrinks) to the largest size asked for so far (counted).
static inline void *grow_dev(void **buf, size_t *cap, size_t bytes) {
    if (bytes > *cap) {
        ted_free_buf(*buf);   // waits for the stream first
        *buf = ted_alloc_dev(bytes, MEM_TEMP);
        *cap = bytes;
    }
    return *buf;
}

// kRedBlocks partials + 1 result, made at the first use
static double *red_scratch(void) {
    static double *p;
    if (!p) p = (double *)ted_alloc_dev(sizeof(double) * (cu::kRedBlocks + 1), MEM_TEMP);
    return p;
}

// *out (device) = Σ_{i<n} f(i) in double
template <class F> static void reduce_sum(double *out, long n, F f) {
    double *part = red_scratch();
    if (n <= 0) {   // Σ over nothing
        CU_CHECK(cudaMemsetAsync(out, 0, sizeof(double), cu_stream()));
        return;
    }
    long nb = (n + cu::kThreads - 1) / cu::kThreads;
    int blocks = (int)(nb < cu::kRedBlocks ? nb : cu::kRedBlocks);
    reduce_partial_kernel<<<blocks, cu::kThreads, 0, cu_stream()>>>(part, n, f);
    CU_LAUNCH_CHECK();
    reduce_final_kernel<<<1, cu::kThreads, 0, cu_stream()>>>(out, part, blocks);
    CU_LAUNCH_CHECK();
}
