// gemm.c — the one CPU GEMM (see gemm.h): the compute mode, the fp32 rule, bf16 operands.
// bf16 compute packs op(A) and op(B) into plain row-major scratch of this thread, rounded to bf16
// (round to nearest even), and runs oneDNN's matmul on them with C in fp32. The packing is
// O(n²) against the product's O(n³), and it lets every product take oneDNN's plain layout,
// whatever the caller's transposes and strides. Sizes above BUCKET round up to a multiple of it
// (zeros in the padding, the extra rows and columns of C computed into scratch and dropped), so
// the experts' row counts, which change every step, meet a bounded set of primitives.
#include "nn/gemm.h"
#include "nn/onednn.h"
#include "core/alloc.h"
#include "core/error.h"
#include "core/half.h"
#include <cblas.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum { PICK_AUTO, PICK_OPENBLAS, PICK_ONEDNN, PICK_FP32, PICK_EMULATED, PICK_N } Pick;
static const char *const pick_names[PICK_N] = {"auto", "openblas", "onednn", "fp32", "bf16-emulated"};
typedef enum { MODE_F32, MODE_BF16, MODE_BF16_EMULATED } Mode;

static struct {
    int read, probed, bf16_hw, asked;   // asked: the run stores in bf16 (--bf16 on the CPU)
    Pick pick;
    Mode mode;
} G;
static _Thread_local int fp32_only;

// ---------------------------------------------------------------------------------------
// the mode

int gemm_choose(const char *name) {
    for (int p = 0; p < PICK_N; p++)
        if (!strcmp(name, pick_names[p])) { G.pick = (Pick)p; G.read = 1; return 0; }
    return -1;
}

static void read_env(void) {
    const char *v = getenv("TED_GEMM");
    G.read = 1;
    if (v && *v && gemm_choose(v))
        ted_fatal(TED_EXIT_USAGE, "TED_GEMM=%s: unknown GEMM engine (auto, openblas, onednn, fp32, bf16-emulated)", v);
}

// Whether oneDNN has a bf16 matmul here: it has none without bf16 instructions.
static int probe_bf16(void) {
    char impl[64];
    if (!G.probed) G.bf16_hw = onednn_kernel(ONEDNN_BF16, 0, 0, 64, 64, 64, 64, 64, 64, impl, sizeof impl) == 0;
    G.probed = 1;
    return G.bf16_hw;
}

void gemm_setup(int bf16) {
    if (!G.read) read_env();
    G.asked = bf16;
    G.mode = MODE_F32;
    if (bf16 && G.pick == PICK_EMULATED) G.mode = MODE_BF16_EMULATED;
    else if (bf16 && G.pick != PICK_FP32 && probe_bf16()) G.mode = MODE_BF16;
}

int gemm_bf16_compute(void) { return G.mode != MODE_F32; }

int gemm_fp32_only(int on) {
    int was = fp32_only;
    fp32_only = on;
    return was;
}

// The fixed rule for fp32 products (measured: docs/gemm.md): OpenBLAS. On AVX2 oneDNN's fp32 matmul
// is its own sgemm (gemm:jit): 0–12 % ahead on the products of an untransposed A and K ≤ 256, up
// to 2.3× behind on the weight gradients; sending it just the first would take about 2 % off the
// step's GEMMs, which ted bench does not resolve. The place for a rule of shape and instruction set
// where one pays (never a timing taken at run time: the same run gives the same bits).
GemmF32Engine gemm_f32_engine(int ta, int tb, int M, int N, int K) {
    return G.pick == PICK_ONEDNN ? GEMM_ONEDNN : GEMM_OPENBLAS;
}

// ---------------------------------------------------------------------------------------
// bf16 operands

#define BUCKET 32
#define TILE 32
static int bucket(int n) { return n <= BUCKET ? n : (n + BUCKET - 1) / BUCKET * BUCKET; }

// This thread's scratch i (0: A, 1: B, 2: C), at least `bytes` long.
static _Thread_local struct { void *p; size_t bytes; } scr[3];
static void *scratch(int i, size_t bytes) {
    if (scr[i].bytes < bytes) {
        ted_free(scr[i].p);
        scr[i].bytes = bytes + bytes / 4;   // room for the next few sizes up
        scr[i].p = ted_alloc(scr[i].bytes, MEM_TEMP);
    }
    return scr[i].p;
}

// n values to bf16 (bf: as uint16) or to the fp32 value of that bf16 (else)
static void round_row(void *dst, int bf, const float *src, int n) {
    if (bf) {
        uint16_t *d = dst;
        #pragma omp simd
        for (int i = 0; i < n; i++) d[i] = bf16_from_f32(src[i]);
    } else {
        float *d = dst;
        #pragma omp simd
        for (int i = 0; i < n; i++) d[i] = bf16_to_f32(bf16_from_f32(src[i]));
    }
}

// Rows r0..r1−1 (at most TILE) of the packed [pr, pc] matrix (element size es) of op(src), src rows
// ld apart; transposed, a TILE × TILE block at a time through t, so that src is read along its rows.
static void pack_rows(char *dst, int bf, size_t es, const float *src, int ld, int trans, int rows, int cols,
                      int pc, int r0, int r1) {
    float t[TILE][TILE];
    int h = (rows < r1 ? rows : r1) - r0;   // rows of op(src) here; the rest is padding
    for (int r = r0; r < r1; r++) {
        char *d = dst + (size_t)r * pc * es;
        int from = r - r0 < h ? cols : 0;
        memset(d + (size_t)from * es, 0, (size_t)(pc - from) * es);
        if (!trans && r - r0 < h) round_row(d, bf, src + (long)r * ld, cols);
    }
    if (!trans || h <= 0) return;
    for (int c0 = 0; c0 < cols; c0 += TILE) {
        int w = cols - c0 < TILE ? cols - c0 : TILE;
        for (int c = 0; c < w; c++) {
            const float *s = src + (long)(c0 + c) * ld + r0;
            for (int r = 0; r < h; r++) t[r][c] = s[r];
        }
        for (int r = 0; r < h; r++) round_row(dst + ((size_t)(r0 + r) * pc + c0) * es, bf, t[r], w);
    }
}

// dst[pr, pc] row-major = op(src) [rows, cols] rounded to bf16, zero beyond it; op = transpose when
// trans (src is then [cols, rows]).
static void pack(void *dst, int bf, const float *src, int ld, int trans, int rows, int cols, int pr, int pc) {
    size_t es = bf ? 2 : 4;
    int nt = (long)pr * pc >= (1 << 16) && !omp_in_parallel() ? omp_get_max_threads() : 1;
    #pragma omp parallel for schedule(static) num_threads(nt)
    for (int r0 = 0; r0 < pr; r0 += TILE)
        pack_rows(dst, bf, es, src, ld, trans, rows, cols, pc, r0, r0 + TILE < pr ? r0 + TILE : pr);
}

// rows × cols of src (row stride ls) into dst (row stride ld)
static void copy_block(float *dst, int ld, const float *src, int ls, int rows, int cols) {
    for (int r = 0; r < rows; r++) memcpy(dst + (long)r * ld, src + (long)r * ls, sizeof(float) * cols);
}

static void gemm_bf16(int bf, int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                      const float *B, int ldb, float beta, float *C, int ldc) {
    int Mp = bucket(M), Np = bucket(N), Kp = bucket(K);
    size_t es = bf ? 2 : 4;
    void *a = scratch(0, (size_t)Mp * Kp * es), *b = scratch(1, (size_t)Kp * Np * es);
    pack(a, bf, A, lda, ta, M, K, Mp, Kp);
    pack(b, bf, B, ldb, tb, K, N, Kp, Np);
    float *c = C;
    int ldp = ldc;
    if (Mp != M || Np != N) {   // padded: C's share of the product comes back from scratch
        c = scratch(2, (size_t)Mp * Np * sizeof(float));
        ldp = Np;
        if (beta != 0.0f) copy_block(c, ldp, C, ldc, M, N);
    }
    int rc = onednn_matmul(bf ? ONEDNN_BF16 : ONEDNN_F32, 0, 0, Mp, Np, Kp, alpha, a, Kp, b, Np, beta, c, ldp);
    CHECK(rc == 0, "oneDNN: no %s matmul for %d x %d x %d", bf ? "bf16" : "fp32", Mp, Np, Kp);
    if (c != C) copy_block(C, ldc, c, ldp, M, N);
}

// ---------------------------------------------------------------------------------------
// the product

void gemm_cpu(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B, int ldb,
              float beta, float *C, int ldc) {
    if (M <= 0 || N <= 0) return;
    if (G.mode != MODE_F32 && !fp32_only && K > 0) {
        gemm_bf16(G.mode == MODE_BF16, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    if (K > 0 && gemm_f32_engine(ta, tb, M, N, K) == GEMM_ONEDNN &&
        onednn_matmul(ONEDNN_F32, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc) == 0)
        return;
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K, alpha, A,
                lda, B, ldb, beta, C, ldc);
}

// ---------------------------------------------------------------------------------------
// what runs, and its peak

// The kernel oneDNN picks for a 1024³ product of type t (plain operands, as bf16 compute packs them).
static void kernel_1024(OnednnType t, char *out, size_t n) {
    onednn_kernel(t, 0, 0, 1024, 1024, 1024, 1024, 1024, 1024, out, n);
}

void gemm_engine_name(char *engine, size_t ne, char *kernel, size_t nk) {
    if (G.mode == MODE_BF16) { snprintf(engine, ne, "onednn-bf16"); kernel_1024(ONEDNN_BF16, kernel, nk); return; }
    if (G.mode == MODE_BF16_EMULATED) { snprintf(engine, ne, "bf16-emulated"); kernel_1024(ONEDNN_F32, kernel, nk); return; }
    snprintf(engine, ne, G.pick == PICK_ONEDNN ? "onednn" : "openblas");
    if (G.pick == PICK_ONEDNN) kernel_1024(ONEDNN_F32, kernel, nk);
    else snprintf(kernel, nk, "sgemm %s", openblas_get_corename());
}

// fp32 products: the engines and kernels
static void describe_f32(char *out, size_t n) {
    char kernel[64];
    if (G.pick != PICK_ONEDNN) { snprintf(out, n, "fp32 on OpenBLAS sgemm (%s kernels)", openblas_get_corename()); return; }
    kernel_1024(ONEDNN_F32, kernel, sizeof kernel);
    snprintf(out, n, "fp32 on oneDNN's matmul (TED_GEMM=onednn), kernel %s", kernel);
}

void gemm_describe(char *out, size_t n) {
    char version[32], kernel[64], f32[256];
    onednn_version(version, sizeof version);
    describe_f32(f32, sizeof f32);
    if (G.mode == MODE_BF16) {
        kernel_1024(ONEDNN_BF16, kernel, sizeof kernel);
        snprintf(out, n, "gemm: bf16 compute (bf16 inputs, fp32 accumulation) on %s's matmul, kernel %s (%s); "
                 "the router: %s", version, kernel, onednn_isa(), f32);
    } else if (G.mode == MODE_BF16_EMULATED) {
        kernel_1024(ONEDNN_F32, kernel, sizeof kernel);
        snprintf(out, n, "gemm: bf16 compute emulated (TED_GEMM=bf16-emulated): inputs rounded to bf16, fp32 "
                 "accumulation on %s's fp32 matmul, kernel %s (%s)", version, kernel, onednn_isa());
    } else if (G.asked && G.pick == PICK_FP32)
        snprintf(out, n, "gemm: %s; --bf16 stores in 16 bits and computes in fp32 (TED_GEMM=fp32)", f32);
    else if (G.asked)
        snprintf(out, n, "gemm: %s; --bf16 stores in 16 bits and computes in fp32: this CPU has no bf16 instructions "
                 "for %s's matmul (%s: no AVX512-BF16 or AMX)", f32, version, onednn_isa());
    else snprintf(out, n, "gemm: %s", f32);
}

double gemm_peak_rate(int n, int reps, double (*timer)(void)) {
    size_t es = G.mode == MODE_BF16 ? 2 : 4, nn = (size_t)n * n;
    float *c = ted_alloc(sizeof(float) * nn, MEM_TEMP);
    char *a = ted_alloc(es * nn, MEM_TEMP), *b = ted_alloc(es * nn, MEM_TEMP);
    for (size_t i = 0; i < nn; i++) {
        float x = (float)(i % 7) * 0.1f, y = (float)(i % 5) * 0.1f;
        if (es == 2) { ((uint16_t *)a)[i] = bf16_from_f32(x); ((uint16_t *)b)[i] = bf16_from_f32(y); }
        else { ((float *)a)[i] = x; ((float *)b)[i] = y; }
    }
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0 = timer();
        if (G.mode == MODE_BF16) onednn_matmul(ONEDNN_BF16, 0, 0, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
        else if (G.mode == MODE_BF16_EMULATED) onednn_matmul(ONEDNN_F32, 0, 0, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
        else gemm_cpu(0, 0, n, n, n, 1.0f, (float *)a, n, (float *)b, n, 0.0f, c, n);
        double t = timer() - t0;
        if (t < best) best = t;
    }
    ted_free(a); ted_free(b); ted_free(c);
    return 2.0 * n * n * (double)n / (best * 1e-3);
}
