// gemm_lt.cu — the experts' bf16 GEMMs through cuBLASLt, the algorithm kept per class of shape.
// cublasGemmEx asks cuBLAS's heuristic again for every shape it has not seen: 1.4–3.6 ms of host
// time a call on an H100 machine's host (bench/gemm_shape_bench.cu), while the GEMM itself takes
// 0.05 ms. The dropless experts' GEMMs see a new row count nearly every call, so the GPU waited
// for the host through most of them. Here the heuristic is asked once per class: the row count
// rounded up to a power of two (rows(): 8 at least), the other sizes, leading dimensions,
// transposes, batch and the operands' alignments exact; its algorithm then runs every shape of
// the class (14 µs of host time a call, 650–750 TFLOP/s at the experts' shapes). A family (the
// class but for its row count) met for the first time has its 14 classes up to 65536 rows asked
// at once (tens of ms of host time, once a run), so that no later step waits for the heuristic,
// whatever the routing.
//
// The row count is the dimension that varies with the tokens: M where A is not transposed
// (forward, input gradient), K where A is transposed and B is not (a weight's gradient). These are
// column counts of cuBLASLt's column-major layouts, so a rounded-up class is a valid layout of
// the same leading dimensions. The dense layers keep cublasGemmEx (runtime.cu): their shapes
// repeat every step, so its own cache serves them, and for some (the LM head's weight gradient,
// the router's) its choice ran 3–4× faster than the Lt heuristic's first. fp32 runs keep
// cublasGemmEx too (pedantic, no TF32).
#include "cuda_ops.h"
#include <cublasLt.h>
#include <stdint.h>
#include <string.h>
#include <unordered_map>

namespace {

constexpr size_t kWorkspace = 32u << 20;   // bytes, as cuBLAS's own default on Hopper
constexpr int kWarm = 1 << 16;              // a family's classes asked at its first call: 8 ... kWarm rows

// a shape class: what the heuristic is asked for
struct Key {
    int ta, tb, m, n, k, lda, ldb, ldc, batch, beta1, align_a, align_b, align_c;
    long long sa, sb, sc;
    bool operator==(const Key &o) const { return !memcmp(this, &o, sizeof *this); }
};
struct KeyHash {
    size_t operator()(const Key &k) const {
        const unsigned char *p = (const unsigned char *)&k;
        size_t h = 1469598103934665603ull;
        for (size_t i = 0; i < sizeof k; i++) h = (h ^ p[i]) * 1099511628211ull;
        return h;
    }
};

struct Lt {
    cublasLtHandle_t h;
    void *ws;
    std::unordered_map<Key, cublasLtMatmulAlgo_t, KeyHash> algo;   // the classes seen
    long asked, calls;                                            // heuristic queries, GEMMs run
} L;

// the class of a row count: the next power of two, 8 at least
int rows(int x) {
    int r = 8;
    while (r < x) r *= 2;
    return r;
}

// the alignment of an operand and its batch stride in bytes, 256 at most
int alignment(const void *p, long long stride, size_t elem, int batch) {
    uintptr_t a = (uintptr_t)p | 256;
    if (batch > 1) a |= (uintptr_t)(stride * (long long)elem) | 256;
    return (int)(a & -a);
}

// the three layouts of row-major C[M,N] = op(A)·op(B) as cuBLASLt's column-major Cᵀ = op(B)ᵀ·op(A)ᵀ:
// its "A" is our B, its "B" our A
struct Layouts {
    cublasLtMatrixLayout_t a, b, c;
    Layouts(const Key &k, cudaDataType t) {
        CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&a, t, k.tb ? k.k : k.n, k.tb ? k.n : k.k, k.ldb));
        CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&b, t, k.ta ? k.m : k.k, k.ta ? k.k : k.m, k.lda));
        CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&c, CUDA_R_32F, k.n, k.m, k.ldc));
        if (k.batch > 1) {
            batched(a, k.batch, k.sb);
            batched(b, k.batch, k.sa);
            batched(c, k.batch, k.sc);
        }
    }
    static void batched(cublasLtMatrixLayout_t l, int batch, long long stride) {
        int32_t n = batch;
        int64_t s = stride;
        CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &n, sizeof n));
        CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &s, sizeof s));
    }
    ~Layouts() { cublasLtMatrixLayoutDestroy(a); cublasLtMatrixLayoutDestroy(b); cublasLtMatrixLayoutDestroy(c); }
};

struct Desc {
    cublasLtMatmulDesc_t d;
    Desc(int ta, int tb) {
        CUBLAS_CHECK(cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_32F, CUDA_R_32F));
        cublasOperation_t oa = tb ? CUBLAS_OP_T : CUBLAS_OP_N, ob = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSA, &oa, sizeof oa));
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSB, &ob, sizeof ob));
    }
    ~Desc() { cublasLtMatmulDescDestroy(d); }
};

// the heuristic's algorithm for class k (false: it has none)
bool ask(const Key &k, cublasLtMatmulAlgo_t *algo) {
    Desc d(k.ta, k.tb);
    Layouts l(k, CUDA_R_16BF);
    cublasLtMatmulPreference_t p;
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&p));
    uint64_t ws = kWorkspace;
    uint32_t al[4] = {(uint32_t)k.align_b, (uint32_t)k.align_a, (uint32_t)k.align_c, (uint32_t)k.align_c};
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(p, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al[0], 4));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al[1], 4));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al[2], 4));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al[3], 4));
    cublasLtMatmulHeuristicResult_t r;
    int n = 0;
    cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(L.h, d.d, l.a, l.b, l.c, l.c, p, 1, &r, &n);
    cublasLtMatmulPreferenceDestroy(p);
    L.asked++;
    if (s != CUBLAS_STATUS_SUCCESS || n < 1 || r.state != CUBLAS_STATUS_SUCCESS) return false;
    *algo = r.algo;
    return true;
}

// class k's algorithm kept, unless it is already or the heuristic has none
void ask_into(const Key &k) {
    cublasLtMatmulAlgo_t a;
    if (!L.algo.count(k) && ask(k, &a)) L.algo.emplace(k, a);
}

}   // namespace

extern "C" int cu_lt_gemm(int transA, int transB, int M, int N, int K, float alpha, const void *A, int lda,
                          long long sA, const void *B, int ldb, long long sB, float beta, float *C, int ldc,
                          long long sC, int batch) {
    if (!L.h) {
        CUBLAS_CHECK(cublasLtCreate(&L.h));
        L.ws = ted_alloc_dev(kWorkspace, MEM_TEMP);
    }
    Key k;
    memset(&k, 0, sizeof k);   // the padding too: keys compare as bytes
    k.ta = transA; k.tb = transB; k.m = M; k.n = N; k.k = K; k.lda = lda; k.ldb = ldb; k.ldc = ldc;
    k.batch = batch; k.beta1 = beta != 0;
    if (batch > 1) { k.sa = sA; k.sb = sB; k.sc = sC; }
    k.align_a = alignment(A, sA, 2, batch);
    k.align_b = alignment(B, sB, 2, batch);
    k.align_c = alignment(C, sC, 4, batch);
    Key cls = k;   // the class: the row count rounded up
    int *row = !transA ? &cls.m : !transB ? &cls.k : NULL;
    if (row) *row = rows(*row);
    auto it = L.algo.find(cls);
    if (it == L.algo.end()) {
        // a family not seen (one GEMM at a time): its classes up to kWarm rows are all asked now,
        // so that the steps that follow find theirs whatever the routing (a batch's strides follow
        // its row count: those are asked one class at a time)
        int want = row ? *row : 0;
        if (row && batch == 1)
            for (int c = 8; c <= (want > kWarm ? want : kWarm); c *= 2) { *row = c; ask_into(cls); }
        if (row) *row = want;
        ask_into(cls);
        it = L.algo.find(cls);
        if (it == L.algo.end()) return 1;   // the heuristic had none
    }
    Desc d(transA, transB);
    Layouts l(k, CUDA_R_16BF);
    L.calls++;
    return (int)cublasLtMatmul(L.h, d.d, &alpha, B, l.a, A, l.b, &beta, C, l.c, C, l.c, &it->second, L.ws,
                               kWorkspace, cu_stream());
}

extern "C" void cu_lt_counts(long *asked, long *calls) { *asked = L.asked; *calls = L.calls; }
