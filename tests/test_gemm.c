// test_gemm.c — the one CPU GEMM (nn/gemm.h) in fp32 and its machinery:
//   - OpenBLAS and oneDNN's fp32 matmul (TED_GEMM openblas / onednn) on every transpose, strided
//     operands, alpha and beta: equal to the product in double within fp32's bound K·2⁻²³·Σ|a·b|;
//     columns of C past N (ldc) untouched;
//   - the rule: fp32 products on this CPU's engine as gemm_f32_engine says, the same bits run
//     after run (the rule reads no clock);
//   - under bf16 compute, gemm_fp32_only: the same bits as the fp32 product (the router's logits);
//   - the experts' changing row counts meet a bounded set of primitives (sizes padded to 32), and
//     the primitive cache never holds more than its capacity, whatever the number of shapes;
//   - products from many OpenMP threads at once (attention runs its per-head products so) are right;
//   - an unknown engine name is refused.
// The bf16 products and the ops' gradients in bf16 compute: tests/test_bf16_ops.c.
#include "core/alloc.h"
#include "core/rng.h"
#include "nn/gemm.h"
#include "nn/onednn.h"
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <string.h>

static int failures, passes;
static uint64_t counter = 1;
static void fill(float *x, long n) { for (long i = 0; i < n; i++) x[i] = rng_normal(41, 5, counter++); }
static float *buf(long n) { return ted_alloc(sizeof(float) * n, MEM_TEMP); }
static void report(const char *what, int ok) {
    printf("%-78s %s\n", what, ok ? "ok" : "FAIL");
    failures += !ok; passes += ok;
}

// worst |C − ref| over fp32's accumulation bound
static double err_of(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B, int ldb,
                     float beta, const float *C0, const float *C, int ldc) {
    double worst = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0, mag = 0;
            for (int k = 0; k < K; k++) {
                double p = (double)(ta ? A[(long)k * lda + i] : A[(long)i * lda + k]) * (tb ? B[(long)j * ldb + k] : B[(long)k * ldb + j]);
                s += p; mag += fabs(p);
            }
            double c0 = C0[(long)i * ldc + j], bound = ldexp((double)K + 2, -23) * (fabs(alpha) * mag + fabs(beta * c0)) + 1e-30;
            worst = fmax(worst, fabs(C[(long)i * ldc + j] - (alpha * s + beta * c0)) / bound);
        }
    return worst;
}

// one product on the engine in effect against double; 0 or 1 failures
static int product_ok(int ta, int tb, int M, int N, int K, float alpha, float beta, double *worst) {
    int lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 1, ldc = N + 2;
    long na = (long)(ta ? K : M) * lda, nb = (long)(tb ? N : K) * ldb, nc = (long)M * ldc;
    float *A = buf(na), *B = buf(nb), *C0 = buf(nc), *C = buf(nc);
    fill(A, na); fill(B, nb); fill(C0, nc);
    memcpy(C, C0, sizeof(float) * nc);
    gemm_cpu(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    double e = err_of(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C0, C, ldc);
    int pad = 0;
    for (int i = 0; i < M; i++) pad |= memcmp(C + (long)i * ldc + N, C0 + (long)i * ldc + N, sizeof(float) * 2);
    *worst = fmax(*worst, e);
    ted_free(A); ted_free(B); ted_free(C0); ted_free(C);
    return e <= 1 && !pad;
}

static void test_engine(const char *name) {
    gemm_choose(name);
    gemm_setup(0);
    int sizes[][3] = {{1, 1, 1}, {7, 5, 9}, {64, 64, 64}, {130, 97, 300}}, bad = 0;
    double worst = 0;
    for (int s = 0; s < 4; s++)
        for (int t = 0; t < 4; t++)
            for (int ab = 0; ab < 3; ab++)
                bad += !product_ok(t >> 1, t & 1, sizes[s][0], sizes[s][1], sizes[s][2], ab == 2 ? 0.37f : 1.0f,
                                   ab == 0 ? 0.0f : ab == 1 ? 1.0f : 0.5f, &worst);
    GemmF32Engine e = gemm_f32_engine(0, 0, 64, 64, 64);
    int want = !strcmp(name, "onednn") ? GEMM_ONEDNN : GEMM_OPENBLAS;
    char what[128];
    snprintf(what, sizeof what, "fp32 on %s: 48 products (4 transposes, strides, alpha, beta), worst err/bound %.2f",
             name, worst);
    report(what, bad == 0 && (int)e == want);
}

// the same product twice, and with fp32_only under bf16 compute against OpenBLAS's
static void test_bits(void) {
    int M = 200, N = 150, K = 260;
    float *A = buf((long)M * K), *B = buf((long)K * N), *C1 = buf((long)M * N), *C2 = buf((long)M * N), *C3 = buf((long)M * N);
    fill(A, (long)M * K); fill(B, (long)K * N);
    gemm_choose("auto");
    gemm_setup(0);
    gemm_cpu(0, 0, M, N, K, 1, A, K, B, N, 0, C1, N);
    gemm_cpu(0, 0, M, N, K, 1, A, K, B, N, 0, C2, N);
    report("fp32 by the rule: the same product twice gives the same bits", !memcmp(C1, C2, sizeof(float) * M * N));
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1, A, K, B, N, 0, C3, N);
    gemm_choose("bf16-emulated");
    gemm_setup(1);
    gemm_cpu(0, 0, M, N, K, 1, A, K, B, N, 0, C2, N);
    int was = gemm_fp32_only(1);
    gemm_cpu(0, 0, M, N, K, 1, A, K, B, N, 0, C1, N);
    gemm_fp32_only(was);
    report("bf16 compute: gemm_fp32_only gives OpenBLAS's fp32 bits, and without it other bits",
           gemm_bf16_compute() && !memcmp(C1, C3, sizeof(float) * M * N) && memcmp(C2, C3, sizeof(float) * M * N));
    ted_free(A); ted_free(B); ted_free(C1); ted_free(C2); ted_free(C3);
}

// the experts' products for row counts 33 … 288 under bf16 compute: a new primitive per 32 rows at most
static void test_buckets(void) {
    int d = 40, f = 72, maxr = 288;
    float *x = buf((long)maxr * d), *w = buf((long)d * f), *h = buf((long)maxr * f), *dw = buf((long)d * f);
    fill(x, (long)maxr * d); fill(w, (long)d * f);
    gemm_choose("bf16-emulated");
    gemm_setup(1);
    int before = onednn_cached();
    for (int n = 33; n <= maxr; n++) {
        gemm_cpu(0, 0, n, f, d, 1, x, d, w, f, 0, h, f);   // forward: M = n
        gemm_cpu(1, 0, d, f, n, 1, x, d, h, f, 1, dw, f);  // weight gradient: K = n
    }
    int made = onednn_cached() - before, buckets = (maxr - 33) / 32 + 2;
    char what[128];
    snprintf(what, sizeof what, "bf16 compute, rows 33..%d: %d primitives made (at most %d: 2 products x %d sizes)",
             maxr, made, 2 * buckets, buckets);
    report(what, made > 0 && made <= 2 * buckets);
    ted_free(x); ted_free(w); ted_free(h); ted_free(dw);
}

// more shapes than the cache holds: it stays at capacity, and the products stay right
static void test_cache_bound(void) {
    gemm_choose("onednn");
    gemm_setup(0);
    int cap = onednn_cache_capacity(), bad = 0;
    double worst = 0;
    for (int i = 0; i < cap + 40; i++) bad += !product_ok(0, i & 1, 3 + i % 29, 2 + i / 29, 5, 1, 0, &worst);
    char what[128];
    snprintf(what, sizeof what, "oneDNN: %d shapes, cache holds %d (capacity %d), products right", cap + 40,
             onednn_cached(), cap);
    report(what, bad == 0 && onednn_cached() == cap);
}

// every thread its own products at once (attention's per-head loop), on each engine
static void test_threads(const char *name, int bf16) {
    gemm_choose(name);
    gemm_setup(bf16);
    int bad = 0, nt = 4;
    float *ref = buf(64L * 64 * nt), *out = buf(64L * 64 * nt), *A = buf(64L * 64 * nt), *B = buf(64L * 64);
    fill(A, 64L * 64 * nt); fill(B, 64L * 64);
    omp_set_num_threads(1);   // the reference on one thread, as each of the parallel loop's runs
    for (int t = 0; t < nt; t++) gemm_cpu(0, 1, 64, 40 + t, 64, 0.5f, A + 64L * 64 * t, 64, B, 64, 0, ref + 64L * 64 * t, 64);
    omp_set_num_threads(2);
    #pragma omp parallel for num_threads(nt) schedule(static, 1) reduction(+ : bad)
    for (int r = 0; r < 8 * nt; r++) {
        int t = r % nt;
        gemm_cpu(0, 1, 64, 40 + t, 64, 0.5f, A + 64L * 64 * t, 64, B, 64, 0, out + 64L * 64 * t, 64);
        for (int i = 0; i < 64; i++) bad += memcmp(out + 64L * (64 * t + i), ref + 64L * (64 * t + i), sizeof(float) * (40 + t)) != 0;
    }
    char what[128];
    snprintf(what, sizeof what, "%s%s: %d products on %d threads at once, the bits of one thread's", name,
             bf16 ? " (bf16 compute)" : "", 8 * nt, nt);
    report(what, bad == 0);
    ted_free(ref); ted_free(out); ted_free(A); ted_free(B);
}

int main(void) {
    omp_set_num_threads(2);
    test_engine("openblas");
    test_engine("onednn");
    test_bits();
    test_buckets();
    test_cache_bound();
    test_threads("onednn", 0);
    test_threads("bf16-emulated", 1);
    report("an unknown engine name is refused", gemm_choose("mkl") == -1);
    printf("%d passed, %d failed\n", passes, failures);
    return failures != 0;
}
