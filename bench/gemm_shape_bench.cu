// gemm_shape_bench.cu — what a GEMM of a shape cuBLAS has not seen costs the host (not a test).
// The dropless experts' GEMMs take a new row count nearly every call. This times, at the experts'
// shapes (bf16 A and B, fp32 C, row-major as runtime.cu calls them), the host's time per call and
// the GPU's per call for: one row count repeated; a new row count each call (cublasGemmEx); and
// cuBLASLt with the algorithm its heuristic chose for the row count rounded up to a bucket, kept
// and used for every row count of the bucket (as src/cuda/gemm_lt.cu does), the first time
// (a heuristic query per new bucket) and again (every bucket known: the steady state). One JSON
// line per case; the Lt results are checked against cublasGemmEx's (max relative difference).
// Build: nvcc -O2 -arch=sm_90 bench/gemm_shape_bench.cu -lcublasLt -lcublas
#include <chrono>
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <vector>

#define CK(x) do { auto s_ = (x); if ((int)s_ != 0) { fprintf(stderr, "%s: %d (line %d)\n", #x, (int)s_, __LINE__); exit(1); } } while (0)

static double now_us() {
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// row-major C[M,N] = A[M,K]·op(B) with B [K,N] (NN) or [N,K] (NT): column-major Cᵀ = op(B)ᵀ·Aᵀ
static void gemm_ex(cublasHandle_t h, int nt, int M, int N, int K, const void *A, const void *B, float *C) {
    float one = 1, zero = 0;
    CK(cublasGemmEx(h, nt ? CUBLAS_OP_T : CUBLAS_OP_N, CUBLAS_OP_N, N, M, K, &one, B, CUDA_R_16BF, nt ? K : N, A,
                    CUDA_R_16BF, K, &zero, C, CUDA_R_32F, N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

struct Lt { cublasLtHandle_t h; void *ws; size_t ws_bytes; };

static void layouts(int nt, int M, int N, int K, cublasLtMatrixLayout_t *la, cublasLtMatrixLayout_t *lb,
                    cublasLtMatrixLayout_t *lc) {
    // column-major: "A" of Lt is B (N×K op), "B" of Lt is Aᵀ (K×M), C is N×M
    CK(cublasLtMatrixLayoutCreate(la, CUDA_R_16BF, nt ? K : N, nt ? N : K, nt ? K : N));
    CK(cublasLtMatrixLayoutCreate(lb, CUDA_R_16BF, K, M, K));
    CK(cublasLtMatrixLayoutCreate(lc, CUDA_R_32F, N, M, N));
}

static cublasLtMatmulDesc_t desc(int nt) {
    cublasLtMatmulDesc_t d;
    CK(cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t ta = nt ? CUBLAS_OP_T : CUBLAS_OP_N, tb = CUBLAS_OP_N;
    CK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    CK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    return d;
}

static cublasLtMatmulAlgo_t heuristic(Lt &lt, int nt, int M, int N, int K) {
    cublasLtMatmulDesc_t d = desc(nt);
    cublasLtMatrixLayout_t la, lb, lc;
    layouts(nt, M, N, K, &la, &lb, &lc);
    cublasLtMatmulPreference_t p;
    CK(cublasLtMatmulPreferenceCreate(&p));
    CK(cublasLtMatmulPreferenceSetAttribute(p, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &lt.ws_bytes, sizeof lt.ws_bytes));
    cublasLtMatmulHeuristicResult_t r;
    int n = 0;
    CK(cublasLtMatmulAlgoGetHeuristic(lt.h, d, la, lb, lc, lc, p, 1, &r, &n));
    if (!n) { fprintf(stderr, "no algorithm\n"); exit(1); }
    cublasLtMatmulPreferenceDestroy(p);
    cublasLtMatrixLayoutDestroy(la); cublasLtMatrixLayoutDestroy(lb); cublasLtMatrixLayoutDestroy(lc);
    cublasLtMatmulDescDestroy(d);
    return r.algo;
}

static int lt_run(Lt &lt, cudaStream_t s, const cublasLtMatmulAlgo_t *algo, int nt, int M, int N, int K, const void *A,
                  const void *B, float *C) {
    cublasLtMatmulDesc_t d = desc(nt);
    cublasLtMatrixLayout_t la, lb, lc;
    layouts(nt, M, N, K, &la, &lb, &lc);
    float one = 1, zero = 0;
    int st = (int)cublasLtMatmul(lt.h, d, &one, B, la, A, lb, &zero, C, lc, C, lc, algo, lt.ws, lt.ws_bytes, s);
    cublasLtMatrixLayoutDestroy(la); cublasLtMatrixLayoutDestroy(lb); cublasLtMatrixLayoutDestroy(lc);
    cublasLtMatmulDescDestroy(d);
    return st;
}

int main(void) {
    const int Mmax = 8192, calls = 24;
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cublasHandle_t h;
    CK(cublasCreate(&h));
    CK(cublasSetStream(h, s));
    Lt lt;
    CK(cublasLtCreate(&lt.h));
    lt.ws_bytes = 32 << 20;
    CK(cudaMalloc(&lt.ws, lt.ws_bytes));
    void *A, *B;
    float *C, *C2;
    CK(cudaMalloc(&A, (size_t)Mmax * 8192 * 2));
    CK(cudaMalloc(&B, (size_t)8192 * 2048 * 2));
    CK(cudaMalloc(&C, (size_t)Mmax * 8192 * 4));
    CK(cudaMalloc(&C2, (size_t)Mmax * 8192 * 4));
    {   // operands: small values from a fixed pattern
        std::vector<__nv_bfloat16> x((size_t)Mmax * 8192);
        for (size_t i = 0; i < x.size(); i++) x[i] = __float2bfloat16((float)((i * 2654435761u) % 1000) / 1000 - 0.5f);
        CK(cudaMemcpy(A, x.data(), x.size() * 2, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(B, x.data(), (size_t)8192 * 2048 * 2, cudaMemcpyHostToDevice));
    }
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0); cudaEventCreate(&e1);
    struct Shape { const char *name; int nt, N, K; } shapes[] = {{"fc NN rx8192x2048", 0, 8192, 2048},
                                                                {"proj NN rx2048x8192", 0, 2048, 8192},
                                                                {"dgrad NT rx2048x8192", 1, 2048, 8192}};
    for (auto &sh : shapes) {
        std::vector<cublasLtMatmulAlgo_t> bucket(Mmax / 256 + 1);
        std::vector<int> have(Mmax / 256 + 1);
        for (int mode = 0; mode < 4; mode++) {   // repeated M, new M (GemmEx), new M (Lt, first), again (Lt)
            double host = 0, flop = 0;
            float gpu = 0;
            int failed = 0, base = 700 + 37 * (mode < 3 ? mode : 2) + 977 * (&sh - shapes);   // rows not seen before
            CK(cudaStreamSynchronize(s));
            gemm_ex(h, sh.nt, 512, sh.N, sh.K, A, B, C);   // a first call of the shape (handle set up)
            CK(cudaStreamSynchronize(s));
            CK(cudaEventRecord(e0, s));
            for (int c = 0; c < calls; c++) {
                int M = mode == 0 ? base : base + 131 * c;
                double t0 = now_us();
                if (mode < 2) gemm_ex(h, sh.nt, M, sh.N, sh.K, A, B, C);
                else {
                    int b = (M + 255) / 256;
                    if (!have[b]) { bucket[b] = heuristic(lt, sh.nt, b * 256, sh.N, sh.K); have[b] = 1; }
                    if (lt_run(lt, s, &bucket[b], sh.nt, M, sh.N, sh.K, A, B, C)) failed++;
                }
                host += now_us() - t0;
                flop += 2.0 * M * sh.N * sh.K;
            }
            CK(cudaEventRecord(e1, s));
            CK(cudaEventSynchronize(e1));
            cudaEventElapsedTime(&gpu, e0, e1);
            double err = 0;
            if (mode >= 2) {   // the last call's result against cublasGemmEx's
                int M = base + 131 * (calls - 1);
                gemm_ex(h, sh.nt, M, sh.N, sh.K, A, B, C2);
                std::vector<float> x((size_t)M * sh.N), y((size_t)M * sh.N);
                CK(cudaMemcpy(x.data(), C, x.size() * 4, cudaMemcpyDeviceToHost));
                CK(cudaMemcpy(y.data(), C2, y.size() * 4, cudaMemcpyDeviceToHost));
                double mx = 0;
                for (size_t i = 0; i < x.size(); i++) { err = fmax(err, fabs(x[i] - y[i])); mx = fmax(mx, fabs(y[i])); }
                err /= mx > 0 ? mx : 1;
            }
            printf("{\"shape\": \"%s\", \"case\": \"%s\", \"calls\": %d, \"host_us_per_call\": %.1f, \"gpu_ms\": %.3f, "
                   "\"tflops\": %.1f, \"lt_failed\": %d, \"lt_vs_gemmex_rel\": %.2e}\n", sh.name,
                   mode == 0 ? "same rows" : mode == 1 ? "new rows, cublasGemmEx"
                   : mode == 2 ? "new rows, Lt bucket algorithm (asked)" : "the same rows again, Lt (buckets known)",
                   calls, host / calls, gpu, flop / gpu * 1e-9, failed, err);
        }
    }
    return 0;
}
