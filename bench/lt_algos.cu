// lt_algos.cu — how fast each of cuBLASLt's candidate algorithms runs the experts' GEMM shapes
// (not a test). On an H200 the dropless experts' GEMMs ran at 215–410 TFLOP/s in some classes
// (src/cuda/gemm_lt.cu: the heuristic's first answer for the row count rounded up to a power of
// two) where cublasGemmEx ran the dense layers' equal shapes at 740–890. For each shape (bf16 A and
// B, fp32 C, row-major as runtime.cu calls them) and row count r this times, per call (the mean of
// 3 after one untimed):
//   gemmex      cublasGemmEx at the exact shape
//   class       the heuristic's first answer for r rounded up to a power of two, run at r (ted)
//   exact i     the heuristic's i-th answer (of up to 8) for the exact shape, with its tile, stages
//               and split-K count (CUBLASLT_ALGO_CONFIG_*)
// One JSON line each. Build: cmake (CUDA builds), or nvcc -O2 -arch=sm_90 bench/lt_algos.cu
// -lcublasLt -lcublas.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <vector>

#define CK(x) do { auto s_ = (x); if ((int)s_ != 0) { fprintf(stderr, "%s: %d (line %d)\n", #x, (int)s_, __LINE__); exit(1); } } while (0)

namespace {

constexpr size_t kWs = 32u << 20;
cudaStream_t s;
cublasHandle_t blas;
cublasLtHandle_t lt;
void *ws;
cudaEvent_t e0, e1;

// row-major C[M,N] = op(A)·op(B); A [M,K] (ta: [K,M]), B [K,N] (tb: [N,K]); leading dims as stored
struct Shape {
    const char *name;
    int ta, tb, M, N, K;
    int lda() const { return ta ? M : K; }
    int ldb() const { return tb ? K : N; }
    double flop() const { return 2.0 * M * N * K; }
};

// cuBLASLt's column-major view: Cᵀ = op(B)ᵀ·op(A)ᵀ (its "A" is our B)
struct Op {
    cublasLtMatmulDesc_t d;
    cublasLtMatrixLayout_t a, b, c;
    explicit Op(const Shape &x) {
        CK(cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_32F, CUDA_R_32F));
        cublasOperation_t oa = x.tb ? CUBLAS_OP_T : CUBLAS_OP_N, ob = x.ta ? CUBLAS_OP_T : CUBLAS_OP_N;
        CK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSA, &oa, sizeof oa));
        CK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSB, &ob, sizeof ob));
        CK(cublasLtMatrixLayoutCreate(&a, CUDA_R_16BF, x.tb ? x.K : x.N, x.tb ? x.N : x.K, x.ldb()));
        CK(cublasLtMatrixLayoutCreate(&b, CUDA_R_16BF, x.ta ? x.M : x.K, x.ta ? x.K : x.M, x.lda()));
        CK(cublasLtMatrixLayoutCreate(&c, CUDA_R_32F, x.N, x.M, x.N));
    }
    ~Op() { cublasLtMatrixLayoutDestroy(a); cublasLtMatrixLayoutDestroy(b); cublasLtMatrixLayoutDestroy(c); cublasLtMatmulDescDestroy(d); }
};

int candidates(const Shape &x, cublasLtMatmulHeuristicResult_t *r, int want) {
    Op o(x);
    cublasLtMatmulPreference_t p;
    CK(cublasLtMatmulPreferenceCreate(&p));
    uint64_t w = kWs;
    CK(cublasLtMatmulPreferenceSetAttribute(p, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &w, sizeof w));
    int n = 0;
    if (cublasLtMatmulAlgoGetHeuristic(lt, o.d, o.a, o.b, o.c, o.c, p, want, r, &n) != CUBLAS_STATUS_SUCCESS) n = 0;
    cublasLtMatmulPreferenceDestroy(p);
    return n;
}

// ms per call of f (the mean of 3 after one untimed); negative when a call failed
template <class F> float timed(F f) {
    if (!f()) return -1;
    CK(cudaEventRecord(e0, s));
    for (int i = 0; i < 3; i++)
        if (!f()) return -1;
    CK(cudaEventRecord(e1, s));
    CK(cudaEventSynchronize(e1));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    return ms / 3;
}

bool lt_run(const Shape &x, const cublasLtMatmulAlgo_t *algo, const void *A, const void *B, float *C) {
    Op o(x);
    float one = 1, zero = 0;
    return cublasLtMatmul(lt, o.d, &one, B, o.a, A, o.b, &zero, C, o.c, C, o.c, algo, ws, kWs, s) == CUBLAS_STATUS_SUCCESS;
}

bool gemmex(const Shape &x, const void *A, const void *B, float *C) {
    float one = 1, zero = 0;
    return cublasGemmEx(blas, x.tb ? CUBLAS_OP_T : CUBLAS_OP_N, x.ta ? CUBLAS_OP_T : CUBLAS_OP_N, x.N, x.M, x.K, &one, B,
                        CUDA_R_16BF, x.ldb(), A, CUDA_R_16BF, x.lda(), &zero, C, CUDA_R_32F, x.N, CUBLAS_COMPUTE_32F,
                        CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS;
}

int pow2(int x) { int r = 8; while (r < x) r *= 2; return r; }

int cfg(const cublasLtMatmulAlgo_t &a, cublasLtMatmulAlgoConfigAttributes_t k) {
    uint32_t v = 0;
    size_t got = 0;
    if (cublasLtMatmulAlgoConfigGetAttribute(&a, k, &v, sizeof v, &got) != CUBLAS_STATUS_SUCCESS) return -1;
    return (int)v;
}

void line(const Shape &x, int r, const char *what, int i, float ms, const cublasLtMatmulAlgo_t *a) {
    printf("{\"shape\": \"%s\", \"rows\": %d, \"case\": \"%s\", \"i\": %d, \"ms\": %.4f, \"tflops\": %.1f", x.name, r,
           what, i, ms, ms > 0 ? x.flop() / ms * 1e-9 : 0.0);
    if (a)
        printf(", \"algo_id\": %d, \"tile\": %d, \"stages\": %d, \"splitk\": %d, \"reduction\": %d, \"cluster\": %d", cfg(*a, CUBLASLT_ALGO_CONFIG_ID),
               cfg(*a, CUBLASLT_ALGO_CONFIG_TILE_ID), cfg(*a, CUBLASLT_ALGO_CONFIG_STAGES_ID),
               cfg(*a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM), cfg(*a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME),
               cfg(*a, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID));
    printf("}\n");
    fflush(stdout);
}

}   // namespace

int main(int argc, char **argv) {
    std::vector<int> rows = {2457, 1024, 4096};
    if (argc > 1) { rows.clear(); for (int i = 1; i < argc; i++) rows.push_back(atoi(argv[i])); }
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CK(cublasCreate(&blas));
    CK(cublasSetStream(blas, s));
    CK(cublasLtCreate(&lt));
    CK(cudaMalloc(&ws, kWs));
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    size_t most = (size_t)8192 * 8192;
    void *A, *B;
    float *C;
    CK(cudaMalloc(&A, most * 2));
    CK(cudaMalloc(&B, most * 2));
    CK(cudaMalloc(&C, most * 4));
    {
        std::vector<__nv_bfloat16> v(most);
        for (size_t i = 0; i < most; i++) v[i] = __float2bfloat16((float)((i * 2654435761u) % 1000) / 1000 - 0.5f);
        CK(cudaMemcpy(A, v.data(), most * 2, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(B, v.data(), most * 2, cudaMemcpyHostToDevice));
    }
    for (int r : rows) {
        // the experts' six GEMMs (d 2048, f 8192), r rows: forward fc, proj; backward dhg, dxin; the two weight gradients
        Shape shapes[] = {{"NN rx8192x2048", 0, 0, r, 8192, 2048}, {"NN rx2048x8192", 0, 0, r, 2048, 8192},
                          {"NT rx8192x2048", 0, 1, r, 8192, 2048}, {"NT rx2048x8192", 0, 1, r, 2048, 8192},
                          {"TN 8192x2048xr", 1, 0, 8192, 2048, r}, {"TN 2048x8192xr", 1, 0, 2048, 8192, r}};
        for (const Shape &x : shapes) {
            line(x, r, "gemmex", 0, timed([&] { return gemmex(x, A, B, C); }), NULL);
            Shape cls = x;
            (x.ta ? cls.K : cls.M) = pow2(r);
            cublasLtMatmulHeuristicResult_t res[8];
            if (candidates(cls, res, 1) > 0)
                line(x, r, "class", 0, timed([&] { return lt_run(x, &res[0].algo, A, B, C); }), &res[0].algo);
            int n = candidates(x, res, 8);
            for (int i = 0; i < n; i++)
                line(x, r, "exact", i, timed([&] { return lt_run(x, &res[i].algo, A, B, C); }), &res[i].algo);
        }
    }
    return 0;
}
