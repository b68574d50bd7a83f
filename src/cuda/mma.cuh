// mma.cuh — the warp-level matrix instructions of sm_80+ by their PTX names, with the fragment
// layouts the PTX ISA documents (unlike WMMA's, which CUDA leaves unspecified), so that a kernel
// may work on accumulators in registers: a row's softmax, a mask by row and column. The CPU
// emulation (tests/cuda_emu/emu.h) implements the same layouts.
//
// For one warp, g = lane / 4 (the group) and t = lane % 4 (the thread in the group):
//   A [16 × 16] bf16, 4 registers of 2: a[0] = A[g][2t, 2t+1], a[1] = A[g+8][2t, 2t+1],
//                                       a[2] = A[g][2t+8, 2t+9], a[3] = A[g+8][2t+8, 2t+9]
//   B [16 × 8] bf16, 2 registers:       b[0] = B[2t, 2t+1][g],   b[1] = B[2t+8, 2t+9][g]
//   C, D [16 × 8] fp32, 4 floats:       c[0], c[1] = C[g][2t, 2t+1],  c[2], c[3] = C[g+8][2t, 2t+1]
// A register's lower 16 bits hold the element of the lower index.
//
// ldmatrix: 8 × 8 matrices of 16-bit elements, row i of matrix j at the address lane 8j + i
// passes (16 bytes, 16-byte aligned, shared memory). Register j of lane l gets row g of matrix j,
// elements 2t and 2t+1; with .trans, column g, elements 2t and 2t+1 of it.
#pragma once
#include <cuda_bf16.h>
#include <stdint.h>

// two floats as a register of bf16 (lo in the lower half), rounded to nearest even
static __device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
    return (uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(lo)) |
           ((uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(hi)) << 16);
}

#ifdef TED_CUDA_EMU   // tests/cuda_emu/emu.h: the same instructions as warp collectives

static __device__ __forceinline__ void mma_bf16_16816(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    emu_mma_bf16_16816(d, a, b);
}
static __device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const void *p) { emu_ldmatrix(r, 4, false, p); }
static __device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], const void *p) { emu_ldmatrix(r, 4, true, p); }

#else

// d += A·B (bf16 in, fp32 accumulation)
static __device__ __forceinline__ void mma_bf16_16816(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
// four 8 × 8 matrices from shared memory, as they are and transposed
static __device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const void *p) {
    unsigned s = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s));
}
static __device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], const void *p) {
    unsigned s = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s));
}

#endif

// The four ldmatrix addresses patterns of a [rows × ld] row-major bf16 tile in shared memory:
// lane l gives row l % 8 + 8·(one bit of l / 8) and column 8·(the other bit).
// A operand (16 × 16 at row r0, column c0): matrices (rows +0, cols +0), (+8, +0), (+0, +8), (+8, +8)
static __device__ __forceinline__ const __nv_bfloat16 *ldsm_a(const __nv_bfloat16 *tile, int ld, int r0, int c0) {
    int l = threadIdx.x % 32;
    return tile + (r0 + l % 8 + 8 * ((l >> 3) & 1)) * ld + c0 + 8 * (l >> 4);
}
// two B operands B[k][n] = tile[n][k] (rows n0..n0+15 of the tile hold n, columns k0..k0+15 hold k):
// registers {0, 1} for n0..n0+7, {2, 3} for n0+8..n0+15 (ldsm_x4)
static __device__ __forceinline__ const __nv_bfloat16 *ldsm_bt(const __nv_bfloat16 *tile, int ld, int n0, int k0) {
    int l = threadIdx.x % 32;
    return tile + (n0 + l % 8 + 8 * (l >> 4)) * ld + k0 + 8 * ((l >> 3) & 1);
}
// two B operands B[k][n] = tile[k][n] (rows k0..k0+15 hold k, columns n0..n0+15 hold n):
// registers {0, 1} for n0..n0+7, {2, 3} for n0+8..n0+15 (ldsm_x4_t)
static __device__ __forceinline__ const __nv_bfloat16 *ldsm_b(const __nv_bfloat16 *tile, int ld, int k0, int n0) {
    int l = threadIdx.x % 32;
    return tile + (k0 + l % 8 + 8 * ((l >> 3) & 1)) * ld + n0 + 8 * (l >> 4);
}
