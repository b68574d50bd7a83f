// emu_probe.cpp — calls cuBLAS as the emulation must answer them, one case per run
// (tests/test_cuda_emu.sh runs each and checks the outcome):
//   bf16         bf16 A and B, fp32 C and bf16 C (CUBLAS_COMPUTE_32F): the products of the bf16
//                values, C rounded to its type; exits 0 when they match a double reference
//   fast16bf     fp32 operands with CUBLAS_COMPUTE_32F_FAST_16BF: the emulation stops the run
//   fasttf32     fp32 operands with CUBLAS_COMPUTE_32F_FAST_TF32: likewise
//   mixed        bf16 A with fp32 B: refused (CUBLAS_STATUS_NOT_SUPPORTED), exits 3
//   grouped      cublasGemmGroupedBatchedEx with bf16 A and B and fp32 C: refused, exits 3
//   join-wait, join-nowait, fork-wait, fork-nowait   two streams: a side stream makes what the
//                first reads (join) or reads what the first makes (fork), the reader waiting on
//                an event of the maker's or not; prints whether it read the value made (exit 0)
//                or memory not yet written (exit 4). Without the wait, TED_EMU_STREAMS=late
//                (join) or early (fork) runs the reader first.
#include <cuda_runtime.h>
#include <cublas_v2.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static uint16_t bf16(float x) {   // exact for the small integers and halves used here
    uint32_t u;
    memcpy(&u, &x, 4);
    return (uint16_t)(u >> 16);
}
static float f32(uint16_t h) { uint32_t u = (uint32_t)h << 16; float f; memcpy(&f, &u, 4); return f; }

static void *dev(const void *host, size_t bytes) {
    void *d = NULL;
    cudaMalloc(&d, bytes);
    cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice);
    return d;
}

enum { M = 3, N = 2, K = 4 };   // column-major C[M,N] = A[M,K]·B[K,N]

static int run_bf16(cublasHandle_t h) {
    uint16_t a[M * K], b[K * N];
    float ref[M * N], one = 1.0f, zero = 0.0f;
    for (int i = 0; i < M * K; i++) a[i] = bf16(0.5f * (float)(i % 5) - 1.0f + 1.0f / 128);   // not fp16-exact sums
    for (int i = 0; i < K * N; i++) b[i] = bf16(0.25f * (float)i - 0.75f);
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0;
            for (int l = 0; l < K; l++) s += (double)f32(a[i + l * M]) * f32(b[l + j * K]);
            ref[i + j * M] = (float)s;
        }
    void *da = dev(a, sizeof a), *db = dev(b, sizeof b), *dc = NULL, *dh = NULL;
    cudaMalloc(&dc, sizeof(float) * M * N);
    cudaMalloc(&dh, sizeof(uint16_t) * M * N);
    cublasStatus_t s1 = cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &one, da, CUDA_R_16BF, M, db, CUDA_R_16BF, K,
                                     &zero, dc, CUDA_R_32F, M, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    cublasStatus_t s2 = cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &one, da, CUDA_R_16BF, M, db, CUDA_R_16BF, K,
                                     &zero, dh, CUDA_R_16BF, M, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    float c[M * N];
    uint16_t ch[M * N];
    cudaMemcpy(c, dc, sizeof c, cudaMemcpyDeviceToHost);
    cudaMemcpy(ch, dh, sizeof ch, cudaMemcpyDeviceToHost);
    int bad = s1 != CUBLAS_STATUS_SUCCESS || s2 != CUBLAS_STATUS_SUCCESS;
    for (int i = 0; i < M * N; i++) {
        uint32_t u;
        memcpy(&u, &ref[i], 4);
        uint16_t want = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);   // nearest even
        bad |= c[i] != ref[i] || ch[i] != want;
    }
    printf("bf16 GEMM into fp32 and bf16: %s\n", bad ? "WRONG" : "the products of the bf16 values, C rounded to its type");
    return bad;
}

// the streams' probe: first made (main) and side; join: side makes y, main copies it to z; fork:
// main makes y, side copies it to z; "-wait": the copy waits on an event recorded after the maker
static int run_streams(const char *mode) {
    const size_t n = 64;
    cudaStream_t main_s, side_s;
    cudaStreamCreate(&main_s);
    cudaStreamCreate(&side_s);
    cudaEvent_t made;
    cudaEventCreate(&made);
    void *y = NULL, *z = NULL;
    cudaMalloc(&y, n);
    cudaMalloc(&z, n);
    bool join = !strncmp(mode, "join", 4), wait = strstr(mode, "nowait") == NULL;
    cudaStream_t maker = join ? side_s : main_s, reader = join ? main_s : side_s;
    cudaMemsetAsync(y, 7, n, maker);
    cudaEventRecord(made, maker);
    if (wait) cudaStreamWaitEvent(reader, made, 0);
    cudaMemcpyAsync(z, y, n, cudaMemcpyDeviceToDevice, reader);
    cudaDeviceSynchronize();
    unsigned char out[64];
    cudaMemcpy(out, z, n, cudaMemcpyDeviceToHost);
    bool ok = true;
    for (size_t i = 0; i < n; i++) ok &= out[i] == 7;
    printf("%s: %s\n", mode, ok ? "read the value made" : "read memory not yet written");
    return ok ? 0 : 4;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    if (!strncmp(mode, "join-", 5) || !strncmp(mode, "fork-", 5)) return run_streams(mode);
    cublasHandle_t h;
    cudaStream_t st;
    cudaStreamCreate(&st);
    cublasCreate(&h);
    cublasSetStream(h, st);
    if (!strcmp(mode, "bf16")) return run_bf16(h);
    float one = 1.0f, zero = 0.0f, x[M * K * 2] = {0};
    void *a = dev(x, sizeof x), *b = dev(x, sizeof x), *c = dev(x, sizeof x);
    cublasStatus_t st1 = CUBLAS_STATUS_SUCCESS;
    if (!strcmp(mode, "fast16bf") || !strcmp(mode, "fasttf32"))
        st1 = cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &one, a, CUDA_R_32F, M, b, CUDA_R_32F, K, &zero, c,
                           CUDA_R_32F, M, mode[4] == '1' ? CUBLAS_COMPUTE_32F_FAST_16BF : CUBLAS_COMPUTE_32F_FAST_TF32,
                           CUBLAS_GEMM_DEFAULT);
    else if (!strcmp(mode, "mixed"))
        st1 = cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &one, a, CUDA_R_16BF, M, b, CUDA_R_32F, K, &zero, c,
                           CUDA_R_32F, M, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    else if (!strcmp(mode, "grouped")) {
        cublasOperation_t op = CUBLAS_OP_N;
        int m = M, n = N, k = K, lda = M, ldb = K, ldc = M, size = 1;
        void *ptrs[3] = {a, b, c}, *dptr = dev(ptrs, sizeof ptrs);
        void **dp = (void **)dptr;
        st1 = cublasGemmGroupedBatchedEx(h, &op, &op, &m, &n, &k, &one, (const void *const *)dp, CUDA_R_16BF, &lda,
                                         (const void *const *)(dp + 1), CUDA_R_16BF, &ldb, &zero, dp + 2, CUDA_R_32F,
                                         &ldc, 1, &size, CUBLAS_COMPUTE_32F);
    } else {
        fprintf(stderr, "usage: emu_probe bf16|fast16bf|fasttf32|mixed|grouped|{join,fork}-{wait,nowait}\n");
        return 2;
    }
    cudaStreamSynchronize(st);
    if (st1 == CUBLAS_STATUS_NOT_SUPPORTED) { printf("%s: refused (CUBLAS_STATUS_NOT_SUPPORTED)\n", mode); return 3; }
    printf("%s: accepted\n", mode);
    return 0;
}
