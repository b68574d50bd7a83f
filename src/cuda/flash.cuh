// flash.cuh — what the two flash-attention kernels share (flash_attention.cu: WMMA, fp32 and the
// TF32 split; flash_mma.cu: bf16 through mma.sync with registers holding the scores): the tile
// sizes, the movement of rows between global and shared memory, the carving of shared memory,
// the rows' Δ of the backward, and the host's launch checks.
//
// Layout as attention_forward (ops.c): qkv [B, T, 3, H, hd] (q | k | v of head h are the columns
// [h·hd, (h+1)·hd) of the three thirds of a row of 3·H·hd), out [B, T, H, hd], lse [B, H, T].
// A block of 4 warps owns 64 rows (queries in the forward and dQ, keys in dK/dV), 16 per warp
// (flash_mma.cu's forward: 128 rows, 32 per warp); the other side streams through shared memory
// in tiles of 64 rows at or below the diagonal.
#pragma once
#include "cuda_ops.h"
#include <cuda_bf16.h>
#include <cuda_pipeline_primitives.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <type_traits>

namespace flash {

constexpr int kWarps = 4, kThreads = 32 * kWarps;
constexpr int kTile = 16 * kWarps;      // rows a block owns, and rows of a streamed tile
constexpr unsigned kFull = 0xffffffffu;
constexpr float kLog2e = 1.4426950408889634f, kLn2 = 0.6931471805599453f;

// the last key tile that queries [q0, q0 + 64) see (causal)
static __device__ __forceinline__ int last_tile(int q0, int T) { return ((q0 + kTile < T ? q0 + kTile : T) - 1) / kTile; }

// Where the head of block y = b·H + h starts: qkv [B, T, 3, H, hd] (its q; k and v follow at +D and
// +2D, rows 3D apart) and out, dout [B, T, H, hd] (rows D apart); lse and Δ [B, H, T] at bt.
struct Head {
    long D, ld, x, o, bt;
};
static __device__ __forceinline__ Head head_of(int T, int H, int hd) {
    long b = blockIdx.y / H, h = blockIdx.y % H, D = (long)H * hd;
    return Head{D, 3 * D, b * T * 3 * D + h * hd, b * T * D + h * hd, (long)blockIdx.y * T};
}

// row stride of a tile in shared memory: 16 bytes of padding after each row (no bank conflicts
// for 16-byte row reads)
template <class E, int HD> __host__ __device__ constexpr int ld_tile() { return HD + 16 / (int)sizeof(E); }

template <class E> __device__ __forceinline__ E to_e(float x) {
    if constexpr (std::is_same<E, float>::value) return x;
    else return __float2bfloat16(x);
}
static __device__ __forceinline__ float to_f(float x) { return x; }
static __device__ __forceinline__ float to_f(__nv_bfloat16 x) { return __bfloat162float(x); }

// ---- moving rows between global and shared memory --------------------------------------------
// Rows [r0, r0 + ROWS) of a [T, hd] view (row stride ld) into the tile dst [ROWS, ld_tile]: rows
// past T and columns past hd zero. vec: 16-byte asynchronous copies (the caller commits and
// waits); else element by element, at once.
template <class E, int HD, int ROWS = kTile>
__device__ void load_tile(E *dst, const E *src, long ld, int r0, int T, int hd, bool vec) {
    constexpr int LD = ld_tile<E, HD>(), PER = 16 / sizeof(E), CH = HD / PER;
    if (vec) {
        for (int i = threadIdx.x; i < ROWS * CH; i += kThreads) {
            int r = i / CH, c = i % CH * PER;
            E *d = dst + r * LD + c;
            if (r0 + r < T && c < hd) __pipeline_memcpy_async(d, src + (long)(r0 + r) * ld + c, 16);
            else *(uint4 *)d = make_uint4(0, 0, 0, 0);
        }
    } else {
        for (int i = threadIdx.x; i < ROWS * HD; i += kThreads) {
            int r = i / HD, c = i % HD;
            dst[r * LD + c] = r0 + r < T && c < hd ? src[(long)(r0 + r) * ld + c] : to_e<E>(0.0f);
        }
    }
}

// A warp's 16 rows src [16, ld_tile] to the rows [r0, r0 + 16) of dst (row stride ld), rows past T skipped.
template <class E, int HD> __device__ void store_rows(E *dst, long ld, const E *src, int r0, int T, int hd, bool vec) {
    constexpr int LD = ld_tile<E, HD>(), PER = 16 / sizeof(E);
    int lane = threadIdx.x % 32, n = vec ? hd / PER : hd, per = vec ? PER : 1;
    for (int i = lane; i < 16 * n; i += 32) {
        int r = i / n, c = i % n * per;
        if (r0 + r >= T) continue;
        if (vec) *(uint4 *)(dst + (long)(r0 + r) * ld + c) = *(const uint4 *)(src + r * LD + c);
        else dst[(long)(r0 + r) * ld + c] = src[r * LD + c];
    }
}

// Shared memory of a block, carved in 128-byte aligned pieces; on the host (base NULL) it measures.
struct Carve {
    unsigned char *base;
    size_t off;
    template <class T> __host__ __device__ T *take(size_t n) {
        off = (off + 127) / 128 * 128;
        T *p = (T *)(base + off);
        off += n * sizeof(T);
        return p;
    }
};

// Δ_t = Σ_c dO[t, c]·O[t, c] for the warp's rows t0 + r (dO staged in do_s, O from global, row
// stride ldo) into dl[r] and delta[t], with lse2[r] = lse_t·log2 e; 0 for rows past T.
template <class E, int HD> __device__ void delta_rows(float *dl, float *lse2, float *delta, const float *lse,
                                                      const E *do_s, const E *o, long ldo, int t0, int T, int hd) {
    int lane = threadIdx.x % 32, r = lane >> 1, t = t0 + r;
    float s = 0.0f;
    if (t < T)
        for (int c = lane & 1; c < hd; c += 2) s += to_f(do_s[r * ld_tile<E, HD>() + c]) * to_f(o[(long)t * ldo + c]);
    s += __shfl_xor_sync(kFull, s, 1);
    if (!(lane & 1)) {
        dl[r] = s;
        lse2[r] = t < T ? lse[t] * kLog2e : 0.0f;
        if (t < T) delta[t] = s;
    }
    __syncwarp();
}

// ---- host ----------------------------------------------------------------------------------
template <class S> size_t smem_bytes() {
    Carve c{NULL, 0};
    S s(c);
    (void)s;
    return c.off;
}

// the kernel's dynamic shared memory limit raised once to what it takes
template <class K> void allow_smem(K *kernel, size_t bytes, bool *done) {
    if (*done) return;
    CU_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    *done = true;
}

static inline void check_shape(int B, int H, int hd) {
    if (hd < 1 || hd > 128) {
        fprintf(stderr, "ted: flash attention: head dim %d is not supported (1 to 128)\n", hd);
        exit(1);
    }
    if ((long)B * H > 65535) {   // the grid's y
        fprintf(stderr, "ted: flash attention: batch × heads %ld is over 65535\n", (long)B * H);
        exit(1);
    }
}

// 16-byte copies when every row of every view starts on 16 bytes
template <class E> int vec_ok(int hd, const void *a, const void *b, const void *c) {
    return (hd * sizeof(E)) % 16 == 0 && (uintptr_t)a % 16 == 0 && (uintptr_t)b % 16 == 0 && (uintptr_t)c % 16 == 0;
}

// the bf16 kernels of flash_mma.cu (mma.sync, scores in registers); same arguments as the
// extern "C" functions of flash_attention.cu
void mma_forward(__nv_bfloat16 *out, float *lse, const __nv_bfloat16 *qkv, int B, int T, int H, int hd);
void mma_backward(__nv_bfloat16 *dqkv, float *delta, const __nv_bfloat16 *dout, const __nv_bfloat16 *out,
                  const __nv_bfloat16 *qkv, const float *lse, int B, int T, int H, int hd);
// the same with dqkv in fp32 (written as the kernels' fp32 sums, not rounded to bf16)
void mma_backward(float *dqkv, float *delta, const __nv_bfloat16 *dout, const __nv_bfloat16 *out,
                  const __nv_bfloat16 *qkv, const float *lse, int B, int T, int H, int hd);

}   // namespace flash
