// onednn.h — oneDNN's matmul primitive behind the GEMM interface (gemm.h): one primitive per
// shape, made on first use and kept in a bounded cache, run from any thread (inside an OpenMP
// parallel region oneDNN runs it on the calling thread alone).
#pragma once
#include <stddef.h>

typedef enum { ONEDNN_F32, ONEDNN_BF16 } OnednnType;

// C[M,N] (fp32, row stride ldc) = alpha·op(A)·op(B) + beta·C, op = transpose when ta / tb; A and B
// hold fp32 or bf16 (uint16) elements by t, rows lda and ldb elements apart. The products
// accumulate in fp32. Returns 0, or -1 when oneDNN has no implementation of it here (bf16 on a
// CPU without bf16 instructions).
int onednn_matmul(OnednnType t, int ta, int tb, int M, int N, int K, float alpha, const void *A, int lda,
                  const void *B, int ldb, float beta, float *C, int ldc);
// The implementation oneDNN picks for that product (e.g. "brg:avx512_core_bf16", "gemm:jit") into
// out; returns -1 (out "none") where it has none.
int onednn_kernel(OnednnType t, int ta, int tb, int M, int N, int K, int lda, int ldb, int ldc, char *out, size_t n);
// oneDNN's version ("oneDNN 2.6.3") and the instruction set it runs here ("avx2",
// "avx512_core_bf16", "avx512_core_amx", ...).
void onednn_version(char *out, size_t n);
const char *onednn_isa(void);
// Primitives the cache holds now, and the most it holds.
int onednn_cached(void);
int onednn_cache_capacity(void);
