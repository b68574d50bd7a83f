// runtime.cu — the CUDA runtime of ted: one device per rank, one stream, one cuBLAS handle,
// and the GEMMs every op builds on (see cuda_ops.h).
#include "cuda_ops.h"
#include <stdio.h>
#include <stdlib.h>

static cudaStream_t stream;
static cublasHandle_t blas;
static cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
static cudaDeviceProp prop;
static void *ptr_buf;                  // device pointer arrays of the grouped GEMM
static size_t ptr_cap;
static void **ptr_host;                // pinned host copy of them

extern "C" void cu_check_(cudaError_t e, const char *what, const char *file, int line) {
    if (e == cudaSuccess) return;
    fprintf(stderr, "ted: CUDA error %s (%s) in %s at %s:%d\n", cudaGetErrorName(e), cudaGetErrorString(e), what,
            file, line);
    exit(1);
}

extern "C" void cu_check_blas_(int status, const char *what, const char *file, int line) {
    if (status == CUBLAS_STATUS_SUCCESS) return;
    fprintf(stderr, "ted: cuBLAS error %d (%s) in %s at %s:%d\n", status,
            cublasGetStatusString((cublasStatus_t)status), what, file, line);
    exit(1);
}

cudaStream_t cu_stream(void) { return stream; }
cublasHandle_t cu_blas(void) { return blas; }
cublasComputeType_t cu_compute(void) { return compute; }

extern "C" int cu_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) { cudaGetLastError(); return 0; }
    return n;
}

extern "C" void cu_init(int local_rank, int bf16) {
    int n = cu_device_count();
    if (n == 0) { fprintf(stderr, "ted: --device cuda: no CUDA device found\n"); exit(2); }
    int dev = local_rank % n;
    CU_CHECK(cudaSetDevice(dev));
    CU_CHECK(cudaGetDeviceProperties(&prop, dev));
    CU_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    CUBLAS_CHECK(cublasCreate(&blas));
    CUBLAS_CHECK(cublasSetStream(blas, stream));
    // fp32 runs must match the CPU: no TF32 behind our back
    CUBLAS_CHECK(cublasSetMathMode(blas, CUBLAS_PEDANTIC_MATH));
    compute = bf16 ? CUBLAS_COMPUTE_32F_FAST_16BF : CUBLAS_COMPUTE_32F;
    if (bf16) CUBLAS_CHECK(cublasSetMathMode(blas, CUBLAS_DEFAULT_MATH));
}

extern "C" const char *cu_device_name(void) { return prop.name; }

extern "C" void *cu_malloc(size_t bytes) {
    void *p = NULL;
    if (cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess) { cudaGetLastError(); return NULL; }
    CU_CHECK(cudaMemsetAsync(p, 0, bytes, stream));
    return p;
}

extern "C" void cu_free(void *p) {
    if (!p) return;
    CU_CHECK(cudaStreamSynchronize(stream));
    CU_CHECK(cudaFree(p));
}

extern "C" void cu_memcpy(void *dst, const void *src, size_t bytes) {
    if (!bytes || dst == src) return;
    CU_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream));
    CU_CHECK(cudaStreamSynchronize(stream));
}

extern "C" void cu_memset0(void *p, size_t bytes) {
    if (bytes) CU_CHECK(cudaMemsetAsync(p, 0, bytes, stream));
}

extern "C" void cu_sync(void) { CU_CHECK(cudaStreamSynchronize(stream)); }

extern "C" int cu_is_device_ptr(const void *p) {
    cudaPointerAttributes a;
    if (!p || cudaPointerGetAttributes(&a, p) != cudaSuccess) { cudaGetLastError(); return 0; }
    return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

// Row-major C = op(A)·op(B) is column-major Cᵀ = op(B)ᵀ·op(A)ᵀ: swap the operands.
extern "C" void cu_gemm(int transA, int transB, int M, int N, int K, float alpha, const float *A, int lda,
                        const float *B, int ldb, float beta, float *C, int ldc) {
    if (M == 0 || N == 0) return;
    CUBLAS_CHECK(cublasGemmEx(blas, transB ? CUBLAS_OP_T : CUBLAS_OP_N, transA ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K,
                              &alpha, B, CUDA_R_32F, ldb, A, CUDA_R_32F, lda, &beta, C, CUDA_R_32F, ldc, compute,
                              CUBLAS_GEMM_DEFAULT));
}

extern "C" void cu_gemm_grouped(int transA, int transB, int n, const int *M, int N, int K, const float *const *A,
                                int lda, const float *const *B, int ldb, float beta, float *const *C, int ldc) {
    // the groups that have rows; each group holds one problem
    int g = 0;
    enum { MAXG = 1024 };
    static int m[MAXG], nn[MAXG], kk[MAXG], la[MAXG], lb[MAXG], lc[MAXG], size[MAXG];
    static cublasOperation_t ta[MAXG], tb[MAXG];
    static float alpha[MAXG], betas[MAXG];
    if (n > MAXG) { fprintf(stderr, "ted: more than %d experts on one rank\n", MAXG); exit(2); }
    size_t need = 3 * (size_t)n * sizeof(void *);
    if (need > ptr_cap) {   // grows once, to the number of local experts (planned at the first call)
        if (ptr_buf) { CU_CHECK(cudaStreamSynchronize(stream)); CU_CHECK(cudaFree(ptr_buf)); CU_CHECK(cudaFreeHost(ptr_host)); }
        CU_CHECK(cudaMalloc(&ptr_buf, need));
        CU_CHECK(cudaMallocHost((void **)&ptr_host, need));
        ptr_cap = need;
    }
    static const void *pa[MAXG], *pb[MAXG];
    static void *pc[MAXG];
    for (int i = 0; i < n; i++) {
        if (M[i] == 0) continue;
        // column-major view, as in cu_gemm: B first
        ta[g] = transB ? CUBLAS_OP_T : CUBLAS_OP_N; tb[g] = transA ? CUBLAS_OP_T : CUBLAS_OP_N;
        m[g] = N; nn[g] = M[i]; kk[g] = K; la[g] = ldb; lb[g] = lda; lc[g] = ldc; size[g] = 1;
        alpha[g] = 1.0f; betas[g] = beta;
        pa[g] = B[i]; pb[g] = A[i]; pc[g] = C[i];
        g++;
    }
    if (!g) return;
    // equal groups at equal strides (capacity mode: every expert has E·C slots) are one
    // strided batched GEMM, which also runs the bf16 fast path
    long long sa = g > 1 ? (const char *)pa[1] - (const char *)pa[0] : 0;
    long long sb = g > 1 ? (const char *)pb[1] - (const char *)pb[0] : 0;
    long long sc = g > 1 ? (const char *)pc[1] - (const char *)pc[0] : 0;
    int uniform = 1;
    for (int i = 1; i < g && uniform; i++)
        uniform = nn[i] == nn[0] && (const char *)pa[i] - (const char *)pa[i - 1] == sa &&
                  (const char *)pb[i] - (const char *)pb[i - 1] == sb && (const char *)pc[i] - (const char *)pc[i - 1] == sc;
    if (uniform) {
        CUBLAS_CHECK(cublasGemmStridedBatchedEx(blas, ta[0], tb[0], m[0], nn[0], kk[0], &alpha[0], pa[0], CUDA_R_32F,
                                                la[0], sa / 4, pb[0], CUDA_R_32F, lb[0], sb / 4, &betas[0], pc[0],
                                                CUDA_R_32F, lc[0], sc / 4, g, compute, CUBLAS_GEMM_DEFAULT));
        return;
    }
    // grouped GEMM takes fp32 operands with fp32 or TF32 compute only
    cublasComputeType_t gc = compute == CUBLAS_COMPUTE_32F_FAST_16BF ? CUBLAS_COMPUTE_32F_FAST_TF32 : compute;
    const void **dA = (const void **)ptr_buf, **dB = dA + n;
    void **dC = (void **)(dB + n);
    CU_CHECK(cudaStreamSynchronize(stream));   // the pinned table may still be in flight from the last call
    for (int i = 0; i < g; i++) { ptr_host[i] = (void *)pa[i]; ptr_host[n + i] = (void *)pb[i]; ptr_host[2 * n + i] = pc[i]; }
    CU_CHECK(cudaMemcpyAsync(ptr_buf, ptr_host, need, cudaMemcpyHostToDevice, stream));
    CUBLAS_CHECK(cublasGemmGroupedBatchedEx(blas, ta, tb, m, nn, kk, alpha, (const void *const *)dA, CUDA_R_32F, la,
                                            (const void *const *)dB, CUDA_R_32F, lb, betas, dC, CUDA_R_32F, lc, g,
                                            size, gc));
}
