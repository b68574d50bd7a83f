// ops.c — forward/backward pairs (see ops.h).
#include "core/backend.h"
#include "nn/ops.h"
#include "nn/ops_cuda.h"
#include "core/half.h"
#include "core/simd.h"
#include "nn/gemm.h"
#include <math.h>
#include <omp.h>
#include <string.h>

// glibc's libmvec has a vector expf; math.h declares it only under -ffast-math, so say it here
// (without fast-math's other licences) to let the GELU and softmax loops vectorize.
#if defined(__x86_64__) && defined(__GLIBC__)
extern float expf(float) __attribute__((__simd__("notinbranch")));
#endif

void encoder_forward(float *out, const int *tok, const float *wte, int v0, int Vl, const float *wpe, int B, int T,
                     int d) {
    ON_GPU(cu_encoder_forward(out, tok, wte, v0, Vl, wpe, B, T, d));
    #pragma omp parallel for schedule(static)
    for (long i = 0; i < (long)B * T; i++) {
        int v = tok[i] - v0;
        const float *e = v >= 0 && v < Vl ? wte + (long)v * d : NULL, *p = wpe ? wpe + (long)(i % T) * d : NULL;
        float *o = out + i * d;
        for (int c = 0; c < d; c++) o[c] = (e ? e[c] : 0.0f) + (p ? p[c] : 0.0f);
    }
}

void encoder_backward(float *dwte, float *dwpe, const float *dout, const int *tok, int v0, int Vl, int B, int T,
                      int d) {
    ON_GPU(cu_encoder_backward(dwte, dwpe, dout, tok, v0, Vl, B, T, d));
    // positions: each thread owns whole rows of dwpe, summed over b in order
    if (dwpe) {
        #pragma omp parallel for schedule(static)
        for (int t = 0; t < T; t++)
            for (int b = 0; b < B; b++) {
                const float *g = dout + ((long)b * T + t) * d;
                float *w = dwpe + (long)t * d;
                for (int c = 0; c < d; c++) w[c] += g[c];
            }
    }
    // tokens: each thread owns a range of vocabulary rows and scans the tokens in order,
    // so the sum order is fixed whatever the thread count
    long N = (long)B * T;
    #pragma omp parallel
    {
        int nt = omp_get_num_threads(), id = omp_get_thread_num();
        int r0 = (int)((long)Vl * id / nt), r1 = (int)((long)Vl * (id + 1) / nt);
        for (long i = 0; i < N; i++) {
            int v = tok[i] - v0;
            if (v < r0 || v >= r1) continue;
            const float *g = dout + i * d;
            float *w = dwte + (long)v * d;
            for (int c = 0; c < d; c++) w[c] += g[c];
        }
    }
}

void layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w,
                       const float *b, long N, int d, int gemm_input) {
    ON_GPU(cu_layernorm_forward(out, mean, rstd, inp, w, b, N, d, gemm_input));
    #pragma omp parallel for schedule(static)
    for (long i = 0; i < N; i++) {
        const float *x = inp + i * d;
        float m = 0, v = 0;   // the sums in vector lanes (8 partial sums, then added): a fixed order
        #pragma omp simd reduction(+ : m)
        for (int c = 0; c < d; c++) m += x[c];
        m /= d;
        #pragma omp simd reduction(+ : v)
        for (int c = 0; c < d; c++) { float z = x[c] - m; v += z * z; }
        float s = 1.0f / sqrtf(v / d + 1e-5f);
        float *o = out + i * d;
        for (int c = 0; c < d; c++) o[c] = (x[c] - m) * s * w[c] + b[c];
        mean[i] = m; rstd[i] = s;
    }
}

void residual_layernorm_forward(float *res, float *out, float *mean, float *rstd, const float *a, const float *b,
                                const float *w, const float *bias, long N, int d, int gemm_input) {
    ON_GPU(cu_residual_layernorm_forward(res, out, mean, rstd, a, b, w, bias, N, d, gemm_input));
    residual_forward(res, a, b, N * d);
    layernorm_forward(out, mean, rstd, res, w, bias, N, d, 0);
}

void matmul_forward_x16(float *out, const float *inp, const float *w, long N, int C, int OC) {
    ON_GPU(cu_matmul_forward_x16(out, inp, w, N, C, OC));
    matmul_forward(out, inp, w, NULL, N, C, OC, 0);
}

void matmul_backward_x16(float *dinp, float *dw, const float *dout, const float *inp, const float *w, long N, int C,
                         int OC, int accumulate) {
    ON_GPU(cu_matmul_backward_x16(dinp, dw, dout, inp, w, N, C, OC, accumulate));
    matmul_backward(dinp, dw, NULL, dout, inp, w, N, C, OC, accumulate);
}

void layernorm_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                        const float *w, const float *mean, const float *rstd, long N, int d, int dout16) {
    ON_GPU(cu_layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, d, dout16));
    #pragma omp parallel for schedule(static)
    for (long i = 0; i < N; i++) {
        const float *g = dout + i * d, *x = inp + i * d;
        float m = mean[i], s = rstd[i], a = 0, bsum = 0;
        #pragma omp simd reduction(+ : a, bsum)
        for (int c = 0; c < d; c++) {
            float gw = g[c] * w[c];
            a += gw; bsum += gw * (x[c] - m) * s;
        }
        a /= d; bsum /= d;
        float *dx = dinp + i * d;
        for (int c = 0; c < d; c++) {
            float xh = (x[c] - m) * s;
            dx[c] += (g[c] * w[c] - a - xh * bsum) * s;
        }
    }
    // parameter gradients: threads split the columns, rows summed in order
    #pragma omp parallel
    {
        int nt = omp_get_num_threads(), id = omp_get_thread_num();
        int c0 = d * id / nt, c1 = d * (id + 1) / nt;
        for (long i = 0; i < N; i++) {
            const float *g = dout + i * d, *x = inp + i * d;
            float m = mean[i], s = rstd[i];
            for (int c = c0; c < c1; c++) { dw[c] += g[c] * (x[c] - m) * s; db[c] += g[c]; }
        }
    }
}

void matmul_forward(float *out, const float *inp, const float *w, const float *bias, long N, int C,
                    int OC, int accumulate) {
    ON_GPU(cu_matmul_forward(out, inp, w, bias, N, C, OC, accumulate));
    if (N == 0) return;
    if (bias) {
        if (accumulate) {
            #pragma omp parallel for schedule(static)
            for (long i = 0; i < N; i++) for (int o = 0; o < OC; o++) out[i * OC + o] += bias[o];
        } else {
            #pragma omp parallel for schedule(static)
            for (long i = 0; i < N; i++) memcpy(out + i * OC, bias, sizeof(float) * OC);
        }
    }
    gemm_cpu(0, 0, (int)N, OC, C, 1.0f, inp, C, w, OC, (bias || accumulate) ? 1.0f : 0.0f, out, OC);
}

void matmul_backward(float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                     const float *w, long N, int C, int OC, int accumulate) {
    ON_GPU(cu_matmul_backward(dinp, dw, dbias, dout, inp, w, N, C, OC, accumulate));
    if (N == 0) return;
    if (dinp)
        gemm_cpu(0, 1, (int)N, C, OC, 1.0f, dout, OC, w, OC, accumulate ? 1.0f : 0.0f, dinp, C);
    if (dw)
        gemm_cpu(1, 0, C, OC, (int)N, 1.0f, inp, C, dout, OC, 1.0f, dw, OC);
    if (dbias) {
        #pragma omp parallel
        {
            int nt = omp_get_num_threads(), id = omp_get_thread_num();
            int o0 = OC * id / nt, o1 = OC * (id + 1) / nt;
            for (long i = 0; i < N; i++) {
                const float *g = dout + i * OC;
                for (int o = o0; o < o1; o++) dbias[o] += g[o];
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// attention: per (batch, head) two small GEMMs, run single-threaded inside the parallel loop

// Causal attention by blocks of ATT_BLOCK rows: row block i meets only the columns up to the end of
// its own block, so the products skip the masked upper triangle (about half the FLOPs at long T);
// its cells inside the diagonal block are written as zeros and nothing reads beyond it. The
// backward walks the same blocks as column strips (keys), so A is stored row-major T×T per head.
#define ATT_BLOCK 64

// One row of scores (u <= t live) to probabilities; the cells up to n (the block's end) zeroed.
static void softmax_row(float *restrict row, int t, int n) {
    float mx = -INFINITY, s = 0;
    #pragma omp simd reduction(max : mx)
    for (int u = 0; u <= t; u++) mx = row[u] > mx ? row[u] : mx;
    #pragma omp simd reduction(+ : s)
    for (int u = 0; u <= t; u++) { row[u] = expf(row[u] - mx); s += row[u]; }
    float inv = 1.0f / s;
    #pragma omp simd
    for (int u = 0; u <= t; u++) row[u] *= inv;
    for (int u = t + 1; u < n; u++) row[u] = 0;
}

// The forward takes ATT_SUPER rows at a time: their products with the keys before them are one
// GEMM each (K and V packed once per superblock, not once per row block); the superblock's own
// keys go by row blocks, each to its block's end.
#define ATT_SUPER 512

// Scores of rows s0..s0+ms−1 (× scale) into a, then each row's softmax. The cells are zeroed first
// and the products add to them (β = 1): OpenBLAS's own β = 0 pass over them is slower.
static void scores_super(float *a, const float *q, const float *k, int s0, int ms, int T, int ld, int hd,
                         float scale) {
    for (int t = s0; t < s0 + ms; t++) {
        int n = (t / ATT_BLOCK + 1) * ATT_BLOCK;
        memset(a + (long)t * T, 0, sizeof(float) * (n < T ? n : T));
    }
    if (s0)
        gemm_cpu(0, 1, ms, s0, hd, scale, q + (long)s0 * ld, ld, k, ld, 1.0f, a + (long)s0 * T, T);
    for (int r0 = s0; r0 < s0 + ms; r0 += ATT_BLOCK) {
        int m = s0 + ms - r0 < ATT_BLOCK ? s0 + ms - r0 : ATT_BLOCK, n = r0 + m;   // rows r0..n-1 meet columns 0..n-1
        gemm_cpu(0, 1, m, n - s0, hd, scale, q + (long)r0 * ld, ld,
                 k + (long)s0 * ld, ld, 1.0f, a + (long)r0 * T + s0, T);
        for (int t = r0; t < n; t++) softmax_row(a + (long)t * T, t, n);
    }
}

// O of rows s0..s0+ms−1 = P·V: the keys before s0 in one product, then the superblock's own.
static void values_super(float *o, const float *a, const float *v, int s0, int ms, int T, int ld, int D, int hd) {
    if (s0)
        gemm_cpu(0, 0, ms, hd, s0, 1.0f, a + (long)s0 * T, T, v, ld, 0.0f, o + (long)s0 * D, D);
    for (int r0 = s0; r0 < s0 + ms; r0 += ATT_BLOCK) {
        int m = s0 + ms - r0 < ATT_BLOCK ? s0 + ms - r0 : ATT_BLOCK, n = r0 + m;
        gemm_cpu(0, 0, m, hd, n - s0, 1.0f, a + (long)r0 * T + s0, T,
                 v + (long)s0 * ld, ld, s0 ? 1.0f : 0.0f, o + (long)r0 * D, D);
    }
}

void attention_forward(float *out, float *att, const float *qkv, int B, int T, int H, int hd) {
    ON_GPU(cu_attention_forward(out, att, qkv, B, T, H, hd));
    int D = H * hd, ld = 3 * D;
    float scale = 1.0f / sqrtf((float)hd);
    #pragma omp parallel for schedule(static)
    for (int bh = 0; bh < B * H; bh++) {
        int b = bh / H, h = bh % H;
        const float *q = qkv + (long)b * T * ld + h * hd, *k = q + D, *v = q + 2 * D;
        float *a = att + (long)bh * T * T, *o = out + (long)b * T * D + h * hd;
        for (int s0 = 0; s0 < T; s0 += ATT_SUPER) {
            int ms = T - s0 < ATT_SUPER ? T - s0 : ATT_SUPER;
            scores_super(a, q, k, s0, ms, T, ld, hd, scale);
            values_super(o, a, v, s0, ms, T, ld, D, hd);
        }
    }
}

long attention_scratch_floats(int T) { return (long)ATT_BLOCK * T + T; }

// Δ_t = dO_t·O_t, which equals Σ_u A_tu·dA_tu (dA = dO·Vᵀ, O = A·V): the softmax backward's row sum
// without a whole row of dA.
static void attention_delta(float *restrict delta, const float *dO, const float *O, int T, int D, int hd) {
    for (int t = 0; t < T; t++) {
        const float *x = dO + (long)t * D, *y = O + (long)t * D;
        float s = 0;
        #pragma omp simd reduction(+ : s)
        for (int c = 0; c < hd; c++) s += x[c] * y[c];
        delta[t] = s;
    }
}

// g[rows, m] = −Δ of each row, for the product dA = dO·Vᵀ to add to (β = 1: faster than OpenBLAS's
// β = 0 pass, and the subtraction comes free).
static void strip_fill_delta(float *restrict g, const float *delta, int rows, int m) {
    for (int i = 0; i < rows; i++) {
        float *gr = g + (long)i * m, dl = -delta[i];
        #pragma omp simd
        for (int u = 0; u < m; u++) gr[u] = dl;
    }
}

// g[rows, m] = dA − Δ → dS = A ⊙ (dA − Δ) · scale; a: the strip of A (row stride T). Cells above the
// diagonal hold A = 0 (the forward's zeros), so their dS is 0.
static void strip_softmax_backward(float *restrict g, const float *restrict a, int rows, int m, int T, float scale) {
    for (int i = 0; i < rows; i++) {
        float *gr = g + (long)i * m;
        const float *ar = a + (long)i * T;
        #pragma omp simd
        for (int u = 0; u < m; u++) gr[u] = ar[u] * gr[u] * scale;
    }
}

// By column strips j of ATT_BLOCK keys (the rows t ≥ c0 meet them), each strip's dS in cache:
//   G = dO[c0..]·V_jᵀ − Δ → dS;  dV_j = A[c0.., j]ᵀ·dO[c0..];  dK_j = dSᵀ·Q[c0..];  dQ[c0..] += dS·K_j.
// A is read once and no T×T buffer of dA is written. Strip 0 meets every row and sets dQ.
static void attention_backward_one(float *dq, const float *dO, const float *O, const float *a, const float *q,
                                   float *scr, int T, int D, int hd, float scale) {
    int ld = 3 * D;
    const float *k = q + D, *v = q + 2 * D;
    float *dk = dq + D, *dv = dq + 2 * D, *delta = scr + (long)ATT_BLOCK * T, *g = scr;
    attention_delta(delta, dO, O, T, D, hd);
    for (int c0 = 0; c0 < T; c0 += ATT_BLOCK) {
        int m = T - c0 < ATT_BLOCK ? T - c0 : ATT_BLOCK, rows = T - c0;
        const float *ac = a + (long)c0 * T + c0, *dOc = dO + (long)c0 * D;
        strip_fill_delta(g, delta + c0, rows, m);
        gemm_cpu(0, 1, rows, m, hd, 1.0f, dOc, D, v + (long)c0 * ld, ld, 1.0f, g, m);
        strip_softmax_backward(g, ac, rows, m, T, scale);
        gemm_cpu(1, 0, m, hd, rows, 1.0f, ac, T, dOc, D, 0.0f, dv + (long)c0 * ld, ld);
        gemm_cpu(1, 0, m, hd, rows, 1.0f, g, m, q + (long)c0 * ld, ld, 0.0f, dk + (long)c0 * ld, ld);
        gemm_cpu(0, 0, rows, hd, m, 1.0f, g, m, k + (long)c0 * ld, ld, c0 ? 1.0f : 0.0f, dq + (long)c0 * ld, ld);
    }
}

void attention_backward(float *dqkv, const float *dout, const float *att, const float *qkv, const float *out, int B,
                        int T, int H, int hd, float *scratch) {
    ON_GPU(cu_attention_backward(dqkv, dout, att, qkv, out, B, T, H, hd, scratch));
    int D = H * hd, ld = 3 * D;
    float scale = 1.0f / sqrtf((float)hd);
    #pragma omp parallel for schedule(static)
    for (int bh = 0; bh < B * H; bh++) {
        int b = bh / H, h = bh % H;
        long io = (long)b * T * D + h * hd;
        attention_backward_one(dqkv + (long)b * T * ld + h * hd, dout + io, out + io, att + (long)bh * T * T,
                               qkv + (long)b * T * ld + h * hd,
                               scratch + omp_get_thread_num() * attention_scratch_floats(T), T, D, hd, scale);
    }
}

void qkv_forward(float *qkv, float *ln, float *mean, float *rstd, const float *inp, const float *lnw, const float *lnb,
                 const float *w, const float *bias, long N, int C, int OC) {
    ON_GPU(cu_qkv_forward(qkv, ln, mean, rstd, inp, lnw, lnb, w, bias, N, C, OC));
    layernorm_forward(ln, mean, rstd, inp, lnw, lnb, N, C, 0);
    matmul_forward(qkv, ln, w, bias, N, C, OC, 0);
}

void qkv_backward(float *dinp, float *dw, float *dbias, const float *dqkv, const float *ln, const float *w, long N,
                  int C, int OC) {
    ON_GPU(cu_qkv_backward(dinp, dw, dbias, dqkv, ln, w, N, C, OC));
    matmul_backward(dinp, dw, dbias, dqkv, ln, w, N, C, OC, 0);
}

void attn_proj_forward(float *out, float *atty, float *att, const float *qkv, const float *wproj, const float *bproj,
                       int B, int T, int H, int hd, int OC) {
    ON_GPU(cu_attn_proj_forward(out, atty, att, qkv, wproj, bproj, B, T, H, hd, OC));
    attention_forward(atty, att, qkv, B, T, H, hd);
    if (out) matmul_forward(out, atty, wproj, bproj, (long)B * T, H * hd, OC, 0);
}

void attn_proj_backward(float *dqkv, float *gwproj, float *gbproj, float *datty, const float *dout, const float *att,
                        const float *qkv, const float *atty, const float *wproj, int B, int T, int H, int hd, int OC,
                        float *scratch) {
    ON_GPU(cu_attn_proj_backward(dqkv, gwproj, gbproj, datty, dout, att, qkv, atty, wproj, B, T, H, hd, OC, scratch));
    matmul_backward(datty, gwproj, gbproj, dout, atty, wproj, (long)B * T, H * hd, OC, 0);
    attention_backward(dqkv, datty, att, qkv, atty, B, T, H, hd, scratch);
}

// ---------------------------------------------------------------------------------------
#define GELU_K 0.7978845608028654f   // sqrt(2/pi)

// GELU's tanh form through one vectorised exp: 0.5·x·(1 + tanh u) = x·σ(2u), u = K(x + 0.044715x³),
// σ(z) = 1/(1 + e^−z); and d/dx = σ + 2x·σ(1 − σ)·du/dx (as 1 − tanh² u = 4σ(1 − σ)). Both tails are
// exact: e^−2u overflows to inf (σ = 0) for large negative x and vanishes for large positive x.
static inline float gelu_sigma(float x) { return 1.0f / (1.0f + expf(-2.0f * GELU_K * (x + 0.044715f * x * x * x))); }
static inline float gelu_value(float x) { return x * gelu_sigma(x); }
static inline float gelu_slope(float x) {
    float s = gelu_sigma(x);
    return s + 2.0f * x * s * (1.0f - s) * GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
}

TED_CLONES void gelu_forward(float *out, const float *inp, long n) {
    ON_GPU(cu_gelu_forward(out, inp, n));
    #pragma omp parallel for simd schedule(static)
    for (long i = 0; i < n; i++) out[i] = gelu_value(inp[i]);
}

TED_CLONES void gelu_backward(float *dinp, const float *inp, const float *dout, long n) {
    ON_GPU(cu_gelu_backward(dinp, inp, dout, n));
    #pragma omp parallel for simd schedule(static)
    for (long i = 0; i < n; i++) dinp[i] = dout[i] * gelu_slope(inp[i]);
}

void matmul_bias_gelu_forward(float *h, float *hg, const float *inp, const float *w, const float *bias, long N,
                              int C, int OC) {
    ON_GPU(cu_matmul_bias_gelu_forward(h, hg, inp, w, bias, N, C, OC));
    matmul_forward(h, inp, w, bias, N, C, OC, 0);   // the bias rows are the GEMM's C (beta 1): no pass of its own
    gelu_forward(hg, h, N * OC);                    // right after, while this block of h is in cache
}

void mlp_forward(float *out, float *h, float *hg, const float *inp, const float *wfc, const float *bfc,
                 const float *wproj, const float *bproj, long N, int C, int F, int OC) {
    ON_GPU(cu_mlp_forward(out, h, hg, inp, wfc, bfc, wproj, bproj, N, C, F, OC));
    matmul_bias_gelu_forward(h, hg, inp, wfc, bfc, N, C, F);
    if (out) matmul_forward(out, hg, wproj, bproj, N, F, OC, 0);
}

void mlp_backward(float *dinp, float *gwfc, float *gbfc, float *gwproj, float *gbproj, float *dh, const float *dout,
                  const float *h, const float *hg, const float *inp, const float *wfc, const float *wproj, long N,
                  int C, int F, int OC) {
    ON_GPU(cu_mlp_backward(dinp, gwfc, gbfc, gwproj, gbproj, dh, dout, h, hg, inp, wfc, wproj, N, C, F, OC));
    matmul_backward(dh, gwproj, gbproj, dout, hg, wproj, N, F, OC, 0);
    matmul_bias_gelu_backward(dinp, gwfc, gbfc, dh, dh, h, inp, wfc, N, C, F);
}

// dh = dhg ⊙ GELU'(h) and dbias += Σ rows dh in one pass: threads split the columns and each sums its
// columns over the rows in order, so the bias gradient is the same whatever the thread count.
TED_CLONES static void gelu_bias_backward(float *dh, float *dbias, const float *dhg, const float *h, long N, int OC) {
    #pragma omp parallel
    {
        int nt = omp_get_num_threads(), id = omp_get_thread_num();
        int o0 = OC * id / nt, o1 = OC * (id + 1) / nt;
        for (long i = 0; i < N; i++) {
            const float *x = h + i * OC, *g = dhg + i * OC;
            float *r = dh + i * OC;
            #pragma omp simd
            for (int o = o0; o < o1; o++) r[o] = g[o] * gelu_slope(x[o]);
            if (dbias) {
                #pragma omp simd
                for (int o = o0; o < o1; o++) dbias[o] += r[o];   // the row just written, still in L1
            }
        }
    }
}

void matmul_bias_gelu_backward(float *dinp, float *dw, float *dbias, float *dh, const float *dhg, const float *h,
                               const float *inp, const float *w, long N, int C, int OC) {
    ON_GPU(cu_matmul_bias_gelu_backward(dinp, dw, dbias, dh, dhg, h, inp, w, N, C, OC));
    if (N == 0) return;
    gelu_bias_backward(dh, dbias, dhg, h, N, OC);
    matmul_backward(dinp, dw, NULL, dh, inp, w, N, C, OC, 0);
}

// ---------------------------------------------------------------------------------------
// columns of this shard that are real vocabulary entries
static inline int real_cols(int v0, int Vl, int V) { int n = V - v0; return n < 0 ? 0 : n > Vl ? Vl : n; }

void crossentropy_max(float *mx, float *tl, const float *logits, const int *targets, long N, int v0, int Vl, int V) {
    ON_GPU(cu_crossentropy_max(mx, tl, logits, targets, N, v0, Vl, V));
    int nr = real_cols(v0, Vl, V);
    #pragma omp parallel for schedule(static)
    for (long i = 0; i < N; i++) {
        const float *r = logits + i * Vl;
        float m = -INFINITY;
        for (int c = 0; c < nr; c++) m = r[c] > m ? r[c] : m;
        mx[i] = m;
        int t = targets[i] - v0;
        tl[i] = t >= 0 && t < Vl ? r[t] : 0.0f;
    }
}

// r[c] = e^(r[c] − m) for c < n, every column through the same 8-wide vector expf (libmvec's
// differs from the scalar expf in the last bit): the last n mod 8 go through a buffer rather than a
// scalar epilogue, so a logit's exp does not depend on where its row or vocabulary shard ends.
#define EXP_W 8
static void exp_shifted(float *r, float m, int n) {
    int c0 = 0;
    for (; c0 + EXP_W <= n; c0 += EXP_W) {
        float *x = r + c0;
        #pragma omp simd
        for (int c = 0; c < EXP_W; c++) x[c] = expf(x[c] - m);
    }
    if (c0 == n) return;
    float t[EXP_W] = {0};
    memcpy(t, r + c0, sizeof(float) * (n - c0));
    #pragma omp simd
    for (int c = 0; c < EXP_W; c++) t[c] = expf(t[c] - m);
    memcpy(r + c0, t, sizeof(float) * (n - c0));
}

void crossentropy_exp(float *sum, float *logits, const float *mx, long N, int v0, int Vl, int V) {
    ON_GPU(cu_crossentropy_exp(sum, logits, mx, N, v0, Vl, V));
    int nr = real_cols(v0, Vl, V);
    #pragma omp parallel for schedule(static)
    for (long i = 0; i < N; i++) {
        float *r = logits + i * Vl;
        double s = 0;
        exp_shifted(r, mx[i], nr);
        #pragma omp simd reduction(+ : s)
        for (int c = 0; c < nr; c++) s += r[c];
        for (int c = nr; c < Vl; c++) r[c] = 0;          // padded columns never win
        sum[i] = (float)s;
    }
}

void crossentropy_finish(float *losses, float *probs, const float *mx, const float *sum, const float *tl, long N,
                         int Vl) {
    ON_GPU(cu_crossentropy_finish(losses, probs, mx, sum, tl, N, Vl));
    #pragma omp parallel for schedule(static)
    for (long i = 0; i < N; i++) {
        float *r = probs + i * Vl, inv = 1.0f / sum[i];
        for (int c = 0; c < Vl; c++) r[c] *= inv;
        losses[i] = (float)(log((double)sum[i]) + (double)mx[i] - (double)tl[i]);   // logsumexp − target logit
    }
}

void crossentropy_backward(float *probs, const int *targets, long N, int v0, int Vl, float scale) {
    ON_GPU(cu_crossentropy_backward(probs, targets, N, v0, Vl, scale));
    #pragma omp parallel for schedule(static)
    for (long i = 0; i < N; i++) {
        float *r = probs + i * Vl;
        for (int c = 0; c < Vl; c++) r[c] *= scale;
        int t = targets[i] - v0;
        if (t >= 0 && t < Vl) r[t] -= scale;
    }
}

void crossentropy_fused(float *losses, float *logits, float *stats, const int *targets, long N, int V, int Vl,
                        float scale) {
    ON_GPU(cu_fused_classifier(losses, logits, targets, N, V, Vl, scale));
    float *mx = stats, *sum = stats + N, *tl = stats + 2 * N;
    crossentropy_max(mx, tl, logits, targets, N, 0, Vl, V);
    crossentropy_exp(sum, logits, mx, N, 0, Vl, V);
    crossentropy_finish(losses, logits, mx, sum, tl, N, Vl);
    crossentropy_backward(logits, targets, N, 0, Vl, scale);
}

// ---------------------------------------------------------------------------------------
// plumbing: GEMM for the LM head, residual, 16-bit conversions, sum

void gemm(int transA, int transB, int M, int N, int K, float alpha, const float *A, int lda, const float *B, int ldb,
          float beta, float *C, int ldc) {
    ON_GPU(cu_gemm(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc));
    gemm_cpu(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void residual_forward(float *out, const float *a, const float *b, long n) {
    ON_GPU(cu_residual_forward(out, a, b, n));
    #pragma omp parallel for simd schedule(static)
    for (long i = 0; i < n; i++) out[i] = a[i] + b[i];
}

void convert_to_f32(float *dst, const uint16_t *src, long n, Precision half) {
    ON_GPU(cu_half_to_f32(dst, src, n, half));
    #pragma omp parallel for simd schedule(static)
    for (long i = 0; i < n; i++) dst[i] = half_to_f32(half, src[i]);
}

void convert_from_f32(uint16_t *dst, const float *src, long n, Precision half) {
    ON_GPU(cu_f32_to_half(dst, src, n, half));
    #pragma omp parallel for simd schedule(static)
    for (long i = 0; i < n; i++) dst[i] = half_from_f32(half, src[i]);
}

void accumulate_half(uint16_t *dst, const float *src, long n, Precision half) {
    ON_GPU(cu_half_accumulate(dst, src, n, half));
    #pragma omp parallel for simd schedule(static)
    for (long i = 0; i < n; i++) dst[i] = half_from_f32(half, half_to_f32(half, dst[i]) + src[i]);
}

double sum_forward(const float *x, long n) {
#ifdef TED_CUDA
    if (ted_device == DEV_CUDA) return cu_sum(x, n);
#endif
    double s = 0;
    for (long i = 0; i < n; i++) s += x[i];
    return s;
}
