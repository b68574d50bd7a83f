// runtime.cu — the CUDA runtime of ted: one device per rank, one stream, one cuBLAS handle,
// and the GEMMs every op builds on (see cuda_ops.h; the experts' bf16 GEMMs through gemm_lt.cu).
// A run's GEMMs are all of one type: fp32 (CUBLAS_COMPUTE_32F, pedantic: no TF32, so that fp32
// runs match the CPU) or, on a --bf16 run, bf16 A and B with fp32 accumulation and fp32 C
// (CUBLAS_COMPUTE_32F); never a FAST_* compute type, which would let the library round fp32
// operands as it likes (TF32).
#include "cuda_ops.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static cudaStream_t stream;
static cublasHandle_t blas;
static const cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
static int bf16_run;                   // the GEMMs take bf16 operands (cu_init, cu_set_bf16)
static int lt_on = 1;                  // the experts' bf16 GEMMs go through cuBLASLt (TED_GEMM_LT=0: not)
static cudaDeviceProp prop;

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
    cu_set_bf16(bf16);
    const char *lt = getenv("TED_GEMM_LT");
    lt_on = !(lt && !strcmp(lt, "0"));
    cu_prof_init(local_rank);
}

extern "C" void cu_set_bf16(int bf16) {
    bf16_run = bf16 != 0;
    // fp32 runs must match the CPU: no TF32 behind our back; bf16 operands take the tensor cores
    CUBLAS_CHECK(cublasSetMathMode(blas, bf16_run ? CUBLAS_DEFAULT_MATH : CUBLAS_PEDANTIC_MATH));
}

extern "C" int cu_bf16(void) { return bf16_run; }

int cu_gemm_lt_on(void) { return bf16_run && lt_on; }

extern "C" const char *cu_device_name(void) { return prop.name; }

extern "C" int cu_sm_count(void) { return prop.multiProcessorCount > 0 ? prop.multiProcessorCount : 1; }

extern "C" size_t cu_smem_per_sm(void) { return prop.sharedMemPerMultiprocessor; }

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
    cu_stream_sync();
    CU_CHECK(cudaFree(p));
}

static int pinned(const void *p) {
    cudaPointerAttributes a;
    if (!p || cudaPointerGetAttributes(&a, p) != cudaSuccess) { cudaGetLastError(); return 0; }
    return a.type == cudaMemoryTypeHost;
}

extern "C" void cu_memcpy(void *dst, const void *src, size_t bytes) {
    if (!bytes || dst == src) return;
    int dst_dev = cu_is_device_ptr(dst);
    // host to host (a size-1 group's counts, say): no stream and no wait; no copy into the host
    // is ever left pending (each is waited for below), so the source is settled
    if (!dst_dev && !cu_is_device_ptr(src)) { memmove(dst, src, bytes); return; }
    PROF(PROF_COPY);
    CU_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream));
    cu_prof_launch(1);
    // the host may read or reuse its side at once: a copy to the host is waited for; one from
    // pageable host memory is staged by the driver before cudaMemcpyAsync returns (no wait); one
    // from pinned memory is read when the stream gets to it (wait); device to device: in the stream
    if (!dst_dev || pinned(src)) cu_stream_sync();
}

extern "C" void cu_memset(void *p, int byte, size_t bytes) {
    if (!bytes) return;
    PROF(PROF_COPY);
    CU_CHECK(cudaMemsetAsync(p, byte, bytes, stream));
    cu_prof_launch(1);
}

extern "C" void cu_sync(void) { cu_stream_sync(); }

extern "C" int cu_is_device_ptr(const void *p) {
    cudaPointerAttributes a;
    if (!p || cudaPointerGetAttributes(&a, p) != cudaSuccess) { cudaGetLastError(); return 0; }
    return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

// ---- GEMM operands in the run's type --------------------------------------------------

static cudaDataType op_type(void) { return bf16_run ? CUDA_R_16BF : CUDA_R_32F; }
static size_t op_size(void) { return bf16_run ? 2 : 4; }

const void *cu_at(const void *p, long i) { return (const char *)p + (long)op_size() * i; }

// bf16 copies of fp32 activations, one buffer per slot, grown to the largest asked for (counted)
enum { kSlots = 4 };
static void *slot_buf[kSlots];
static size_t slot_cap[kSlots];

uint16_t *cu_half_slot(long n, int slot) {
    if (slot < 0 || slot >= kSlots) { fprintf(stderr, "ted: GEMM operand slot %d out of range\n", slot); exit(1); }
    size_t bytes = sizeof(uint16_t) * (size_t)(n > 0 ? n : 1);
    if (bytes > slot_cap[slot]) {
        ted_free_buf(slot_buf[slot]);   // waits for the stream first
        slot_buf[slot] = ted_alloc_dev(bytes, MEM_TEMP);
        slot_cap[slot] = bytes;
    }
    return (uint16_t *)slot_buf[slot];
}

const void *cu_operand(const float *x, long n, int slot) {
    if (!bf16_run || !x || n <= 0) return x;
    uint16_t *h = cu_half_slot(n, slot);
    cu_f32_to_half(h, x, n, 1);
    return h;
}

// Row-major C = op(A)·op(B) is column-major Cᵀ = op(B)ᵀ·op(A)ᵀ: swap the operands. batch < 0:
// one GEMM (cublasGemmEx), else batch problems at strides sA, sB, sC. lt: the experts' GEMMs,
// whose row counts follow the routing: through cuBLASLt on a bf16 run (gemm_lt.cu). C: fp32, or
// bf16 (c16, a bf16 run: the product and beta·C in fp32, rounded once).
static void gemm(int lt, int transA, int transB, int M, int N, int K, float alpha, const void *A, int lda,
                 long long sA, const void *B, int ldb, long long sB, float beta, void *C, int c16, int ldc,
                 long long sC, int batch) {
    if (M == 0 || N == 0 || batch == 0) return;
    PROF(PROF_GEMM);
    int nb = batch < 0 ? 1 : batch;
    cu_prof_gemm(transA, transB, M, N, K, nb, beta);
    cu_prof_launch(1);
    if (lt && bf16_run && lt_on &&
        !cu_lt_gemm(transA, transB, M, N, K, alpha, A, lda, sA, B, ldb, sB, beta, C, c16, ldc, sC, nb))
        return;
    cublasOperation_t ta = transA ? CUBLAS_OP_T : CUBLAS_OP_N, tb = transB ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (batch < 0)
        CUBLAS_CHECK(cublasGemmEx(blas, tb, ta, N, M, K, &alpha, B, op_type(), ldb, A, op_type(), lda, &beta, C,
                                  c16 ? CUDA_R_16BF : CUDA_R_32F, ldc, compute, CUBLAS_GEMM_DEFAULT));
    else
        CUBLAS_CHECK(cublasGemmStridedBatchedEx(blas, tb, ta, N, M, K, &alpha, B, op_type(), ldb, sB, A, op_type(),
                                                lda, sA, &beta, C, c16 ? CUDA_R_16BF : CUDA_R_32F, ldc, sC, batch,
                                                compute, CUBLAS_GEMM_DEFAULT));
}

void cu_gemm_op(int transA, int transB, int M, int N, int K, float alpha, const void *A, int lda, const void *B,
                int ldb, float beta, float *C, int ldc) {
    gemm(0, transA, transB, M, N, K, alpha, A, lda, 0, B, ldb, 0, beta, C, 0, ldc, 0, -1);
}

void cu_gemm_op_sb(int transA, int transB, int M, int N, int K, float alpha, const void *A, int lda, long long sA,
                   const void *B, int ldb, long long sB, float beta, float *C, int ldc, long long sC, int batch) {
    gemm(0, transA, transB, M, N, K, alpha, A, lda, sA, B, ldb, sB, beta, C, 0, ldc, sC, batch);
}

void cu_gemm_op_c16(int transA, int transB, int M, int N, int K, float alpha, const void *A, int lda, const void *B,
                    int ldb, float beta, uint16_t *C, int ldc) {
    gemm(0, transA, transB, M, N, K, alpha, A, lda, 0, B, ldb, 0, beta, C, 1, ldc, 0, -1);
}

// The extent of a row-major operand of `rows` rows of stride ld (its last row: `cols` elements)
static long extent(long rows, long cols, long ld) { return rows > 0 ? (rows - 1) * ld + cols : 0; }

// The GEMM of ops.c's gemm on fp32 buffers (a bf16 run: through bf16 copies of A and B).
extern "C" void cu_gemm(int transA, int transB, int M, int N, int K, float alpha, const float *A, int lda,
                        const float *B, int ldb, float beta, float *C, int ldc) {
    if (M == 0 || N == 0) return;
    const void *a = cu_operand(A, extent(transA ? K : M, transA ? M : K, lda), 0);
    const void *b = cu_operand(B, extent(transB ? N : K, transB ? K : N, ldb), 1);
    cu_gemm_op(transA, transB, M, N, K, alpha, a, lda, b, ldb, beta, C, ldc);
}

// Groups with work as one strided batched GEMM when they are equal at equal strides (capacity
// mode: every expert has E·C slots), else one GEMM each. Neither needs the host to wait: the
// sizes are host numbers, the pointers are passed by value. (cuBLAS's grouped GEMM takes no
// bf16 A and B with fp32 C, which the weight gradients need, and wants a device pointer table.)
extern "C" void cu_gemm_grouped(int transA, int transB, int n, const int *M, const int *N, const int *K,
                                const void *const *A, int lda, const void *const *B, int ldb, float beta,
                                void *const *C, int c16, int ldc) {
    int first = -1, count = 0, uniform = 1;
    long long sa = 0, sb = 0, sc = 0;
    for (int i = 0; i < n; i++) {
        if (M[i] == 0 || N[i] == 0 || K[i] == 0) continue;
        if (first < 0) first = i;
        else {
            long long da = (const char *)A[i] - (const char *)A[first];
            long long db = (const char *)B[i] - (const char *)B[first], dc = (const char *)C[i] - (const char *)C[first];
            if (count == 1) { sa = da; sb = db; sc = dc; }
            uniform &= M[i] == M[first] && N[i] == N[first] && K[i] == K[first] && da == sa * count &&
                       db == sb * count && dc == sc * count;
        }
        count++;
    }
    if (!count) return;
    if (uniform && count > 1) {
        long long es = (long long)op_size();
        gemm(1, transA, transB, M[first], N[first], K[first], 1.0f, A[first], lda, sa / es, B[first], ldb, sb / es,
             beta, C[first], c16, ldc, sc / (c16 ? 2 : 4), count);
        return;
    }
    for (int i = 0; i < n; i++)
        if (M[i] && N[i] && K[i])
            gemm(1, transA, transB, M[i], N[i], K[i], 1.0f, A[i], lda, 0, B[i], ldb, 0, beta, C[i], c16, ldc, 0,
                 -1);
}
