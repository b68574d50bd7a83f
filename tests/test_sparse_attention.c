// test_sparse_attention.c — block-sparse attention (design) against dense attention with the
// layout's mask (every absent key −∞), computed here independently in double: for each mode,
// block 16 and 32, T = 256, 3 heads with per-head layouts, the output and dQ, dK, dV agree within
// 1e-6 relative (2-norm of the difference over that of the reference; and no element off by more
// than 4e-6 of the reference's largest magnitude: fp32 rounding). Also: a shorter T (generation: the layout's leading
// blocks, a partial last block), a finite-difference check of the sparse op, and the layouts'
// shape (never above the diagonal, the rules of each mode, per-head, a TP shard of heads equal to
// the same heads of the whole layout).
#include "core/alloc.h"
#include "core/rng.h"
#include "nn/sparse_attention.h"
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <string.h>

static int failures = 0, passes = 0;
static uint64_t counter = 1;
static float randn(void) { return rng_normal(7, 11, counter++); }
static void fill(float *x, long n, float s) { for (long i = 0; i < n; i++) x[i] = s * randn(); }
static float *buf(long n) { return ted_alloc(sizeof(float) * n, MEM_TEMP); }

static void expect(int ok, const char *fmt, const char *what, double v) {
    printf(fmt, what, v);
    printf("  %s\n", ok ? "ok" : "FAIL");
    failures += !ok; passes += ok;
}

// Dense masked attention in double: out [N,H·hd], and with dout the gradients dqkv [N,3H·hd].
static void reference(double *out, double *dqkv, const float *qkv, const float *dout, const SparseLayout *L, int B,
                      int T, int H, int hd) {
    int D = H * hd, ld = 3 * D, blk = L->block, nb = L->nb;
    unsigned char *m = ted_alloc((size_t)nb * nb, MEM_TEMP);
    double *p = ted_alloc(sizeof(double) * T, MEM_TEMP), *dp = ted_alloc(sizeof(double) * T, MEM_TEMP);
    memset(dqkv, 0, sizeof(double) * B * T * ld);
    for (int h = 0; h < H; h++) {
        sparse_layout_mask(L, h, m);
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++) {
                const float *q = qkv + ((long)b * T + t) * ld + h * hd;
                double mx = -INFINITY, s = 0, ds = 0;
                for (int u = 0; u <= t; u++) {
                    if (!m[(t / blk) * nb + u / blk]) { p[u] = -INFINITY; continue; }
                    const float *k = qkv + ((long)b * T + u) * ld + D + h * hd;
                    double x = 0;
                    for (int e = 0; e < hd; e++) x += (double)q[e] * k[e];
                    p[u] = x / sqrt(hd);
                    if (p[u] > mx) mx = p[u];
                }
                for (int u = 0; u <= t; u++) { p[u] = exp(p[u] - mx); s += p[u]; }
                const float *dO = dout + ((long)b * T + t) * D + h * hd;
                for (int e = 0; e < hd; e++) {
                    double o = 0;
                    for (int u = 0; u <= t; u++) o += p[u] / s * qkv[((long)b * T + u) * ld + 2 * D + h * hd + e];
                    out[((long)b * T + t) * D + h * hd + e] = o;
                }
                for (int u = 0; u <= t; u++) {   // dP, dV
                    p[u] /= s;
                    const float *v = qkv + ((long)b * T + u) * ld + 2 * D + h * hd;
                    double *dv = dqkv + ((long)b * T + u) * ld + 2 * D + h * hd;
                    dp[u] = 0;
                    for (int e = 0; e < hd; e++) { dp[u] += (double)dO[e] * v[e]; dv[e] += p[u] * dO[e]; }
                    ds += p[u] * dp[u];
                }
                for (int u = 0; u <= t; u++) {   // dS → dQ, dK
                    double g = p[u] * (dp[u] - ds) / sqrt(hd);
                    const float *k = qkv + ((long)b * T + u) * ld + D + h * hd;
                    double *dq = dqkv + ((long)b * T + t) * ld + h * hd, *dk = dqkv + ((long)b * T + u) * ld + D + h * hd;
                    for (int e = 0; e < hd; e++) { dq[e] += g * k[e]; dk[e] += g * q[e]; }
                }
            }
    }
    ted_free(m); ted_free(p); ted_free(dp);
}

// ‖a − ref‖ / ‖ref‖ (2-norm), and in *max the largest |a − ref| over the largest |ref|
static double rel_err(const float *a, const double *ref, long n, long stride, long len, long off, double *max) {
    double worst = 0, big = 0, d2 = 0, r2 = 0;
    for (long i = 0; i < n; i++)
        for (long e = off; e < off + len; e++) {
            double r = ref[i * stride + e], d = a[i * stride + e] - r;
            worst = fmax(worst, fabs(d)); big = fmax(big, fabs(r));
            d2 += d * d; r2 += r * r;
        }
    *max = worst / big;
    return sqrt(d2 / r2);
}

static void compare(const char *name, const SparseConfig *c, int T_layout, int T) {
    int B = 2, H = 3, hd = 16, D = H * hd, ld = 3 * D;
    long N = (long)B * T;
    SparseLayout L;
    sparse_layout_build(&L, c, 1234, 1, 0, H, T_layout);
    float *qkv = buf(N * ld), *out = buf(N * D), *dout = buf(N * D), *dqkv = buf(N * ld);
    float *att = buf(sparse_attention_att_floats(&L, B)), *scratch = buf(sparse_attention_scratch_floats(&L, hd) * omp_get_max_threads() +
                                                                 sparse_attention_recompute_floats(&L, B));
    double *ro = ted_alloc(sizeof(double) * N * D, MEM_TEMP), *rd = ted_alloc(sizeof(double) * N * ld, MEM_TEMP);
    fill(qkv, N * ld, 1.0f); fill(dout, N * D, 1.0f);
    for (long i = 0; i < N * ld; i += ld) for (int e = 0; e < D; e++) qkv[i + e] *= 2.0f;   // peakier softmax
    sparse_attention_forward(out, att, qkv, &L, B, T, H, hd, scratch);
    sparse_attention_backward(dqkv, dout, att, qkv, &L, B, T, H, hd, scratch);
    reference(ro, rd, qkv, dout, &L, B, T, H, hd);
    char what[160];
    const char *part[4] = {"out", "dQ", "dK", "dV"};
    for (int k = 0; k < 4; k++) {
        double mx, e = k == 0 ? rel_err(out, ro, N, D, D, 0, &mx) : rel_err(dqkv, rd, N, ld, D, (long)(k - 1) * D, &mx);
        snprintf(what, sizeof what, "%s T %d/%d block %d: %s  max %.1e", name, T, T_layout, c->block, part[k], mx);
        expect(e <= 1e-6 && mx <= 4e-6, "%-62s rel err %.2e", what, e);
    }
    ted_free(qkv); ted_free(out); ted_free(dout); ted_free(dqkv); ted_free(att); ted_free(scratch);
    ted_free(ro); ted_free(rd);
    sparse_layout_free(&L);
}

// ---------------------------------------------------------------------------------------
// finite differences: f = Σ out ⊙ R

typedef struct { const SparseLayout *L; float *qkv, *out, *att, *R; int B, T, H, hd; float *scratch; } FdCtx;
static double f_sparse(FdCtx *c) {
    sparse_attention_forward(c->out, c->att, c->qkv, c->L, c->B, c->T, c->H, c->hd, c->scratch);
    double s = 0;
    for (long i = 0; i < (long)c->B * c->T * c->H * c->hd; i++) s += (double)c->out[i] * c->R[i];
    return s;
}

static void finite_differences(const SparseConfig *cfg) {
    int B = 1, T = 64, H = 2, hd = 8, ld = 3 * H * hd;
    SparseLayout L;
    sparse_layout_build(&L, cfg, 5, 0, 0, H, T);
    FdCtx c = {&L, buf((long)T * ld), buf((long)T * H * hd), buf(sparse_attention_att_floats(&L, B)),
               buf((long)T * H * hd), B, T, H, hd, buf(sparse_attention_scratch_floats(&L, hd) * omp_get_max_threads() +
                                                                   sparse_attention_recompute_floats(&L, B))};
    float *g = buf((long)T * ld), *scratch = c.scratch;
    fill(c.qkv, (long)T * ld, 1.0f); fill(c.R, (long)T * H * hd, 1.0f);
    f_sparse(&c);
    sparse_attention_backward(g, c.R, c.att, c.qkv, &L, B, T, H, hd, scratch);
    double worst = 0;
    float h = 1e-2f;
    for (long i = 0; i < (long)T * ld; i += 37) {
        float keep = c.qkv[i];
        c.qkv[i] = keep + h; double fp = f_sparse(&c);
        c.qkv[i] = keep - h; double fm = f_sparse(&c);
        c.qkv[i] = keep;
        double fd = (fp - fm) / (2.0 * h);
        worst = fmax(worst, fabs(fd - g[i]) / fmax(fabs(fd) + fabs(g[i]), 1e-2));
    }
    expect(worst < 1e-2, "%-58s max rel err %.2e", "finite differences of the sparse op (bigbird, T 64)", worst);
    ted_free(c.qkv); ted_free(c.out); ted_free(c.att); ted_free(c.R); ted_free(g); ted_free(scratch);
    sparse_layout_free(&L);
}

// ---------------------------------------------------------------------------------------
// layouts

static int lower_with_diagonal(const unsigned char *m, int nb) {
    for (int i = 0; i < nb; i++)
        for (int j = 0; j < nb; j++)
            if ((j > i && m[i * nb + j]) || (j == i && !m[i * nb + j])) return 0;
    return 1;
}

static void layouts(void) {
    SparseConfig c;
    sparse_config_defaults(&c);
    c.mode = SPARSE_FIXED;   // 4 local, 1 global, block 16, T 256: 16 blocks
    SparseLayout L;
    sparse_layout_build(&L, &c, 1, 0, 0, 2, 256);
    unsigned char m[256], m2[256];
    sparse_layout_mask(&L, 0, m);
    // row 5 (window 4..7): its window's blocks 4, 5 and the global block 3; not 0, 1, 2, 6
    int ok = m[5 * 16 + 4] && m[5 * 16 + 5] && m[5 * 16 + 3] && !m[5 * 16 + 0] && !m[5 * 16 + 2] && !m[5 * 16 + 6];
    ok &= m[15 * 16 + 3] && m[15 * 16 + 7] && m[15 * 16 + 11] && !m[15 * 16 + 10] && lower_with_diagonal(m, 16);
    expect(ok, "%-58s %g", "fixed layout: local windows and global blocks", 0);
    sparse_layout_free(&L);

    c.mode = SPARSE_BIGBIRD; c.num_random_blocks = 2; c.different_layout_per_head = 1;
    sparse_layout_build(&L, &c, 1, 0, 0, 4, 256);
    SparseLayout S;   // a TP shard: heads 2, 3
    sparse_layout_build(&S, &c, 1, 0, 2, 2, 256);
    sparse_layout_mask(&L, 0, m); sparse_layout_mask(&L, 1, m2);
    ok = memcmp(m, m2, 256) != 0 && lower_with_diagonal(m, 16);
    int extra = 0;
    for (int i = 0; i < 16; i++) {   // window of 3 (i−1, i) and global block 0; at most 2 random ones more
        int n = 0, fixed_ = i < 2 ? i + 1 : 3;
        for (int j = 0; j <= i; j++) n += m[i * 16 + j];
        ok &= m[i * 16] && (i == 0 || m[i * 16 + i - 1]) && n - fixed_ >= 0 && n - fixed_ <= 2;
        extra += n - fixed_;
    }
    ok &= extra > 8;
    expect(ok, "%-58s %g", "bigbird layout: per head, window, global, random", 0);
    int same = 1;
    for (int h = 0; h < 2; h++) { sparse_layout_mask(&L, 2 + h, m); sparse_layout_mask(&S, h, m2); same &= !memcmp(m, m2, 256); }
    expect(same, "%-58s %g", "a shard of heads has the same layouts as the whole", 0);
    sparse_layout_free(&S);
    sparse_layout_build(&S, &c, 1, 1, 0, 4, 256);   // another layer: other random blocks
    sparse_layout_mask(&L, 0, m); sparse_layout_mask(&S, 0, m2);
    expect(memcmp(m, m2, 256) != 0, "%-58s %g", "random blocks differ between layers", 0);
    sparse_layout_free(&S); sparse_layout_free(&L);

    c.mode = SPARSE_BSLONGFORMER; c.n_global = 1; c.global_block_indices[0] = 2;
    sparse_layout_build(&L, &c, 1, 0, 0, 1, 256);
    sparse_layout_mask(&L, 0, m);
    ok = m[2 * 16 + 0] && m[2 * 16 + 1] && m[9 * 16 + 2] && !m[9 * 16 + 3] && m[9 * 16 + 8] && !m[9 * 16 + 6];
    expect(ok && lower_with_diagonal(m, 16), "%-58s %g", "bslongformer layout: global row and column, window", 0);
    sparse_layout_free(&L);
}

int main(void) {
    omp_set_num_threads(2);
    layouts();
    SparseConfig c;
    for (int blk = 16; blk <= 32; blk *= 2) {
        sparse_config_defaults(&c);
        c.block = blk; c.different_layout_per_head = 1;
        c.mode = SPARSE_FIXED; c.num_different_global_patterns = 2;
        compare("fixed", &c, 256, 256);
        c.mode = SPARSE_BIGBIRD; c.num_random_blocks = 2;
        compare("bigbird", &c, 256, 256);
        c.mode = SPARSE_BSLONGFORMER; c.n_global = 2; c.global_block_indices[0] = 0; c.global_block_indices[1] = 3;
        c.n_global_end = 2; c.global_block_end_indices[0] = 1; c.global_block_end_indices[1] = 5;
        compare("bslongformer", &c, 256, 256);
        c.mode = SPARSE_VARIABLE; c.num_random_blocks = 1; c.n_local_windows = 2;
        c.local_window_blocks[0] = 2; c.local_window_blocks[1] = 3; c.n_global_end = 0;
        compare("variable", &c, 256, 256);
        c.mode = SPARSE_DENSE;
        compare("dense (every block)", &c, 256, 256);
    }
    // recompute: no probabilities kept; the backward recomputes them one chunk of query blocks at
    // a time: one chunk for the whole call, then about 3 query blocks per chunk
    for (int small = 0; small <= 1; small++) {
        sparse_attention_chunk_floats = small ? 2L * 3 * 8 * 16 * 16 : 1L << 24;   // B·H·8 blocks of 16²
        const char *how = small ? "recompute, small chunks" : "recompute, one chunk";
        char name[64];
        sparse_config_defaults(&c);
        c.block = 16; c.different_layout_per_head = 1; c.recompute = 1;
        c.mode = SPARSE_FIXED; c.num_different_global_patterns = 2;
        snprintf(name, sizeof name, "fixed, %s", how);
        compare(name, &c, 256, 256);
        c.mode = SPARSE_BIGBIRD; c.num_random_blocks = 2; c.block = 32;
        snprintf(name, sizeof name, "bigbird, %s", how);
        compare(name, &c, 256, 256);
        snprintf(name, sizeof name, "bigbird, %s, shorter T", how);
        compare(name, &c, 256, 200);
    }
    SparseLayout Lr;
    sparse_layout_build(&Lr, &c, 1, 0, 0, 3, 256);
    expect(sparse_attention_att_floats(&Lr, 2) == 0, "%-58s %g", "recompute keeps no probabilities", 0);
    sparse_layout_free(&Lr);
    sparse_attention_chunk_floats = 1L << 24;
    sparse_config_defaults(&c);
    c.mode = SPARSE_BIGBIRD; c.block = 32; c.different_layout_per_head = 1;
    compare("bigbird, shorter T (generation)", &c, 256, 200);
    finite_differences(&c);
    printf("%d passed, %d failed\n", passes, failures);
    return failures ? 1 : 0;
}
