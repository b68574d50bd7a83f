// runtime.cu — the CUDA runtime of ted: one device per rank, one stream, one cuBLAS handle,
// and the GEMMs every op builds on (see cuda_ops.h).
#include "cuda_ops.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
extern "C" void *cu_stream_ptr(void) { return (void *)stream; }
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

// Datasheet dense bf16 tensor-core peak of the GPU, FLOP/s (0 when not known).
extern "C" double cu_peak_flops(void) {
    if (prop.major == 9) {
        if (strstr(prop.name, "PCIe")) return 756e12;
        if (strstr(prop.name, "NVL")) return 835e12;
        return 989.4e12;                       // H100 SXM, H200 SXM
    }
    if (prop.major == 8 && prop.minor == 0) return 312e12;   // A100
    return 0;
}

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
    // the host may read or reuse its side at once; device-to-device copies stay in the stream
    if (!cu_is_device_ptr(dst) || !cu_is_device_ptr(src)) CU_CHECK(cudaStreamSynchronize(stream));
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

// Host tables of the grouped GEMM, grown to the largest group count seen (the local experts).
static int tab_cap;
static int *m_, *n_, *k_, *la_, *lb_, *lc_, *size_;
static cublasOperation_t *ta_, *tb_;
static float *alpha_, *beta_;
static const void **pa_, **pb_;
static void **pc_;
static void grow_tables(int n) {
    if (n <= tab_cap) return;
    void **all[] = {(void **)&m_, (void **)&n_, (void **)&k_, (void **)&la_, (void **)&lb_, (void **)&lc_,
                    (void **)&size_, (void **)&ta_, (void **)&tb_, (void **)&alpha_, (void **)&beta_, (void **)&pa_,
                    (void **)&pb_, (void **)&pc_};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) {
        free(*all[i]);
        *all[i] = malloc(8 * (size_t)n);   // every element is at most 8 bytes
        if (!*all[i]) { fprintf(stderr, "ted: out of host memory (grouped GEMM tables)\n"); exit(1); }
    }
    tab_cap = n;
}

extern "C" void cu_gemm_grouped(int transA, int transB, int n, const int *M, const int *N, const int *K,
                                const float *const *A, int lda, const float *const *B, int ldb, float beta,
                                float *const *C, int ldc) {
    grow_tables(n);
    int g = 0;   // the groups with work; each holds one problem
    for (int i = 0; i < n; i++) {
        if (M[i] == 0 || N[i] == 0 || K[i] == 0) continue;
        // column-major view, as in cu_gemm: B first
        ta_[g] = transB ? CUBLAS_OP_T : CUBLAS_OP_N; tb_[g] = transA ? CUBLAS_OP_T : CUBLAS_OP_N;
        m_[g] = N[i]; n_[g] = M[i]; k_[g] = K[i]; la_[g] = ldb; lb_[g] = lda; lc_[g] = ldc; size_[g] = 1;
        alpha_[g] = 1.0f; beta_[g] = beta;
        pa_[g] = B[i]; pb_[g] = A[i]; pc_[g] = C[i];
        g++;
    }
    if (!g) return;
    // equal groups at equal strides (capacity mode: every expert has E·C slots) are one
    // strided batched GEMM, which also runs the bf16 fast path
    long long sa = g > 1 ? (const char *)pa_[1] - (const char *)pa_[0] : 0;
    long long sb = g > 1 ? (const char *)pb_[1] - (const char *)pb_[0] : 0;
    long long sc = g > 1 ? (const char *)pc_[1] - (const char *)pc_[0] : 0;
    int uniform = 1;
    for (int i = 1; i < g && uniform; i++)
        uniform = m_[i] == m_[0] && n_[i] == n_[0] && k_[i] == k_[0] &&
                  (const char *)pa_[i] - (const char *)pa_[i - 1] == sa &&
                  (const char *)pb_[i] - (const char *)pb_[i - 1] == sb &&
                  (const char *)pc_[i] - (const char *)pc_[i - 1] == sc;
    if (uniform) {
        CUBLAS_CHECK(cublasGemmStridedBatchedEx(blas, ta_[0], tb_[0], m_[0], n_[0], k_[0], &alpha_[0], pa_[0],
                                                CUDA_R_32F, la_[0], sa / 4, pb_[0], CUDA_R_32F, lb_[0], sb / 4,
                                                &beta_[0], pc_[0], CUDA_R_32F, lc_[0], sc / 4, g, compute,
                                                CUBLAS_GEMM_DEFAULT));
        return;
    }
    // grouped GEMM takes fp32 operands with fp32 or TF32 compute only
    cublasComputeType_t gc = compute == CUBLAS_COMPUTE_32F_FAST_16BF ? CUBLAS_COMPUTE_32F_FAST_TF32 : compute;
    size_t need = 3 * (size_t)n * sizeof(void *);
    if (need > ptr_cap) {   // grows once, to the number of local experts
        if (ptr_buf) { ted_free_buf(ptr_buf); CU_CHECK(cudaFreeHost(ptr_host)); }
        ptr_buf = ted_alloc_dev(need, MEM_TEMP);
        CU_CHECK(cudaMallocHost((void **)&ptr_host, need));
        ptr_cap = need;
    }
    CU_CHECK(cudaStreamSynchronize(stream));   // the pinned table may still be in flight from the last call
    for (int i = 0; i < g; i++) { ptr_host[i] = (void *)pa_[i]; ptr_host[n + i] = (void *)pb_[i]; ptr_host[2 * n + i] = pc_[i]; }
    const void **dA = (const void **)ptr_buf, **dB = dA + n;
    void **dC = (void **)(dB + n);
    CU_CHECK(cudaMemcpyAsync(ptr_buf, ptr_host, need, cudaMemcpyHostToDevice, stream));
    CUBLAS_CHECK(cublasGemmGroupedBatchedEx(blas, ta_, tb_, m_, n_, k_, alpha_, (const void *const *)dA, CUDA_R_32F,
                                            la_, (const void *const *)dB, CUDA_R_32F, lb_, beta_, dC, CUDA_R_32F,
                                            lc_, g, size_, gc));
}
