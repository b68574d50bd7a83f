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
// the same leading dimensions. The dense layers keep cublasGemmEx (runtime.cu), but for the two
// GEMMs of the GELU MLP that take GELU's epilogues (below): their shapes repeat every step, so its
// own cache serves them, and for some (the LM head's weight gradient, the router's) its choice ran
// 3–4× faster than the Lt heuristic's first. fp32 runs keep cublasGemmEx too (pedantic, no TF32).
//
// The heuristic's first answer is not always its fastest: on an H200 the experts' GEMMs ran at
// 215–410 TFLOP/s in some classes where cublasGemmEx ran the dense layers' equal shapes at
// 740–890. With TED_LT_TUNE=1 the heuristic is asked for up to kCand candidates, and the first
// call of a class times them on its own operands (tune(): the product into a scratch buffer, C
// not written), keeping the fastest whose product equals the first candidate's bit for bit. The
// choice changes speed, not results: a run computes what the heuristic's first answer computes,
// whichever candidate the clock favoured. It is off by default: a dropless run meets new classes
// for many steps (112 in 7 steps of the MoE bench), and each timing runs 8 candidates twice with
// host waits, which cost a short run far more than it gains (docs/gpus.md).
//
// cu_lt_gemm_gelu: a bf16 GEMM with GELU's epilogues (the GELU MLPs' c_fc forward, GELU_AUX_BIAS:
// GELU of the product plus the bias, its input kept; their c_proj input gradient, DGELU: the
// product times GELU' of that input), bf16 C and the epilogue's matrix at C's stride, classed and
// asked for as above, the epilogue and the alignments of its bias and matrix part of the class.
#include "common.cuh"
#include <cublasLt.h>
#include <stdint.h>
#include <string.h>
#include <unordered_map>

namespace {

constexpr size_t kWorkspace = 32u << 20;   // bytes, as cuBLAS's own default on Hopper
constexpr int kWarm = 1 << 16;              // a family's classes asked at its first call: 8 ... kWarm rows
constexpr int kCand = 8;                    // the heuristic's candidates a class keeps (and times)

// a shape class: what the heuristic is asked for (epi: the epilogue, c16: bf16 C, the alignments
// of the bias and of the epilogue's matrix)
struct Key {
    int ta, tb, m, n, k, lda, ldb, ldc, batch, beta1, align_a, align_b, align_c, epi, c16, align_bias, align_aux;
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

// a class's candidates in the heuristic's order; pick: the one that runs (0 until timed)
struct Choice {
    cublasLtMatmulAlgo_t algo[kCand];
    int n, pick, tuned;
};

struct Lt {
    cublasLtHandle_t h;
    void *ws;
    std::unordered_map<Key, Choice, KeyHash> algo;   // the classes seen
    long asked, calls, tuned, moved;   // heuristic queries, GEMMs run, classes timed, those another candidate won
    int tune_on;
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
        CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&c, k.c16 ? CUDA_R_16BF : CUDA_R_32F, k.n, k.m, k.ldc));
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

// An epilogue (kind: a cublasLtEpilogue_t) with its bf16 bias (a vector over our C's columns, the
// column-major D's rows) and its bf16 matrix of C's shape (GELU's input: written by GELU_AUX_BIAS,
// read by DGELU), ld elements a row
struct Epi {
    int kind;
    const void *bias;
    const void *aux;
    long long ld;
};

struct Desc {
    cublasLtMatmulDesc_t d;
    Desc(int ta, int tb, const Epi *e) {
        CUBLAS_CHECK(cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_32F, CUDA_R_32F));
        cublasOperation_t oa = tb ? CUBLAS_OP_T : CUBLAS_OP_N, ob = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSA, &oa, sizeof oa));
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSB, &ob, sizeof ob));
        if (e) epilogue(*e);
    }
    void epilogue(const Epi &e) {
        cublasLtEpilogue_t kind = (cublasLtEpilogue_t)e.kind;
        cudaDataType t = CUDA_R_16BF;
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_EPILOGUE, &kind, sizeof kind));
        if (e.bias) {
            CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &e.bias, sizeof e.bias));
            CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &t, sizeof t));
        }
        if (e.aux) {
            int64_t ld = e.ld;
            CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &e.aux,
                                                        sizeof e.aux));
            CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld));
            // its type: D's (bf16), the library's default
        }
    }
    ~Desc() { cublasLtMatmulDescDestroy(d); }
};

// the heuristic's candidates for class k (false: it has none)
bool ask(const Key &k, Choice *c, const Epi *e) {
    Desc d(k.ta, k.tb, e);
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
    cublasLtMatmulHeuristicResult_t r[kCand];
    int n = 0;
    cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(L.h, d.d, l.a, l.b, l.c, l.c, p, L.tune_on ? kCand : 1, r, &n);
    cublasLtMatmulPreferenceDestroy(p);
    L.asked++;
    *c = Choice{};
    for (int i = 0; s == CUBLAS_STATUS_SUCCESS && i < n; i++)
        if (r[i].state == CUBLAS_STATUS_SUCCESS) c->algo[c->n++] = r[i].algo;
    return c->n > 0;
}

// class k's candidates kept unless they are already; none kept too (a class the heuristic has no
// algorithm for is not asked again: the callers' fallbacks take it at once)
void ask_into(const Key &k, const Epi *e) {
    Choice c;
    if (!L.algo.count(k)) {
        ask(k, &c, e);
        L.algo.emplace(k, c);
    }
}

// An order-free digest of n words into *out (zeroed first): the sum of each word mixed with its
// index, in integers, so that the order in which threads add does not change it.
__global__ void digest_kernel(unsigned long long *out, const uint32_t *x, long n) {
    unsigned long long s = 0;
    GRID_STRIDE(i, n) {
        unsigned long long z = ((unsigned long long)i << 32 | x[i]) + 0x9e3779b97f4a7c15ull;
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        s += z ^ (z >> 31);
    }
    atomicAdd(out, s);
}

unsigned long long digest(const float *x, long n, unsigned long long *dev) {
    CU_CHECK(cudaMemsetAsync(dev, 0, sizeof *dev, cu_stream()));
    digest_kernel<<<cu::grid_for(n, cu::kThreads * 8L), cu::kThreads, 0, cu_stream()>>>(dev, (const uint32_t *)x, n);
    CU_LAUNCH_CHECK();
    unsigned long long h = 0;
    CU_CHECK(cudaMemcpyAsync(&h, dev, sizeof h, cudaMemcpyDeviceToHost, cu_stream()));
    CU_CHECK(cudaStreamSynchronize(cu_stream()));
    return h;
}

// The call's product by candidate i into D (C's layout, `bytes` long; C copied in first when
// beta reads it), timed: its second run (the first loads the kernel). Negative: the library
// refused the candidate.
float run_timed(const Choice &c, int i, const Desc &d, const Layouts &l, const float *alpha, const void *A,
                const void *B, const float *beta, const float *C, float *D, size_t bytes) {
    static cudaEvent_t ev[2];
    if (!ev[0]) { CU_CHECK(cudaEventCreate(&ev[0])); CU_CHECK(cudaEventCreate(&ev[1])); }
    for (int rep = 0; rep < 2; rep++) {
        if (*beta != 0.0f) CU_CHECK(cudaMemcpyAsync(D, C, bytes, cudaMemcpyDeviceToDevice, cu_stream()));
        CU_CHECK(cudaEventRecord(ev[0], cu_stream()));
        if (cublasLtMatmul(L.h, d.d, alpha, B, l.a, A, l.b, beta, D, l.c, D, l.c, &c.algo[i], L.ws, kWorkspace,
                           cu_stream()) != CUBLAS_STATUS_SUCCESS)
            return -1.0f;
        CU_CHECK(cudaEventRecord(ev[1], cu_stream()));
    }
    CU_CHECK(cudaEventSynchronize(ev[1]));
    float ms = 0.0f;
    CU_CHECK(cudaEventElapsedTime(&ms, ev[0], ev[1]));
    return ms;
}

// Class c's pick, from this call's operands (C: ext floats): the fastest candidate whose
// product has the digest of the first one the library runs. Once per class.
void tune(Choice *c, const Desc &d, const Layouts &l, const float *alpha, const void *A, const void *B,
          const float *beta, const float *C, long ext) {
    c->tuned = 1;
    if (c->n < 2) return;
    long words = (ext + 1) / 2 * 2;   // the digest's 8 bytes after the product, aligned
    float *D = (float *)ted_alloc_dev(sizeof(float) * (size_t)words + 8, MEM_TEMP);
    unsigned long long *dev = (unsigned long long *)(void *)(D + words), ref = 0;
    int have_ref = 0;
    float best = 0.0f;
    for (int i = 0; i < c->n; i++) {
        float ms = run_timed(*c, i, d, l, alpha, A, B, beta, C, D, sizeof(float) * (size_t)ext);
        if (ms < 0) continue;
        unsigned long long h = digest(D, ext, dev);
        if (!have_ref) { have_ref = 1; ref = h; c->pick = i; best = ms; }
        else if (h == ref && ms < best) { best = ms; c->pick = i; }
    }
    ted_free_buf(D);
    L.tuned++;
    L.moved += c->pick != 0;
}

void init() {
    CUBLAS_CHECK(cublasLtCreate(&L.h));
    L.ws = ted_alloc_dev(kWorkspace, MEM_TEMP);
    const char *t = getenv("TED_LT_TUNE");
    L.tune_on = t && !strcmp(t, "1");
}

// Call k (its shape, C's element size by k.c16; the alignments are found here) through its
// class's algorithm: 0, or the library's status when it has none or refused this call
int run(Key k, float alpha, const void *A, const void *B, float beta, void *C, const Epi *e) {
    if (!L.h) init();
    int batch = k.batch;
    k.align_a = alignment(A, k.sa, 2, batch);
    k.align_b = alignment(B, k.sb, 2, batch);
    k.align_c = alignment(C, k.sc, k.c16 ? 2 : 4, batch);
    k.align_bias = e && e->bias ? alignment(e->bias, 0, 2, 1) : 0;
    k.align_aux = e && e->aux ? alignment(e->aux, 0, 2, 1) : 0;
    Key cls = k;   // the class: the row count rounded up
    int *row = !k.ta ? &cls.m : !k.tb ? &cls.k : NULL;
    if (row) *row = rows(*row);
    auto it = L.algo.find(cls);
    if (it == L.algo.end()) {
        // a family not seen (one GEMM at a time): its classes up to kWarm rows are all asked now,
        // so that the steps that follow find theirs whatever the routing (a batch's strides follow
        // its row count: those are asked one class at a time)
        int want = row ? *row : 0;
        if (row && batch == 1)
            for (int c = 8; c <= (want > kWarm ? want : kWarm); c *= 2) { *row = c; ask_into(cls, e); }
        if (row) *row = want;
        ask_into(cls, e);
        it = L.algo.find(cls);
    }
    if (it->second.n == 0) return 1;   // the heuristic had none
    Desc d(k.ta, k.tb, e);
    Layouts l(k, CUDA_R_16BF);
    Choice &c = it->second;
    if (L.tune_on && !c.tuned && !e && !k.c16)   // C row-major fp32 [M, N] of stride ldc, batch problems sC apart
        tune(&c, d, l, &alpha, A, B, &beta, (const float *)C,
             (long long)(batch - 1) * k.sc + (long long)(k.m - 1) * k.ldc + k.n);
    L.calls++;
    return (int)cublasLtMatmul(L.h, d.d, &alpha, B, l.a, A, l.b, &beta, C, l.c, C, l.c, &c.algo[c.pick], L.ws,
                               kWorkspace, cu_stream());
}

// a key of the shape alone (the padding zeroed too: keys compare as bytes)
Key shape(int transA, int transB, int M, int N, int K, int lda, int ldb, int ldc, int batch, float beta) {
    Key k;
    memset(&k, 0, sizeof k);
    k.ta = transA; k.tb = transB; k.m = M; k.n = N; k.k = K; k.lda = lda; k.ldb = ldb; k.ldc = ldc;
    k.batch = batch; k.beta1 = beta != 0;
    return k;
}

}   // namespace

extern "C" int cu_lt_gemm(int transA, int transB, int M, int N, int K, float alpha, const void *A, int lda,
                          long long sA, const void *B, int ldb, long long sB, float beta, void *C, int c16, int ldc,
                          long long sC, int batch) {
    Key k = shape(transA, transB, M, N, K, lda, ldb, ldc, batch, beta);
    k.c16 = c16;
    if (batch > 1) { k.sa = sA; k.sb = sB; k.sc = sC; }
    return run(k, alpha, A, B, beta, C, NULL);
}

extern "C" int cu_lt_gemm_gelu(int backward, int transA, int transB, int M, int N, int K, const void *A, int lda,
                               const void *B, int ldb, const uint16_t *bias, uint16_t *C, uint16_t *aux, int ldc) {
    Key k = shape(transA, transB, M, N, K, lda, ldb, ldc, 1, 0.0f);
    k.c16 = 1;
    k.epi = backward ? CUBLASLT_EPILOGUE_DGELU : bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
    Epi e{k.epi, backward ? NULL : bias, aux, ldc};
    return run(k, 1.0f, A, B, 0.0f, C, &e);
}

extern "C" void cu_lt_counts(long *asked, long *calls) { *asked = L.asked; *calls = L.calls; }
extern "C" void cu_lt_tuned(long *tuned, long *moved) { *tuned = L.tuned; *moved = L.moved; }
