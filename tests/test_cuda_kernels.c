// test_cuda_kernels.c — the CUDA kernels of nn.cu and parallel.cu against the CPU: each cu_X runs on the
// same random inputs as its CPU reference (ops.c, or a plain loop for the optimizer and
// conversion helpers) and must agree: max|gpu − cpu| / (max|cpu| + 1e-6) within 1e-5 for fp32
// element-wise ops, 1e-4 for the GEMM-based ones, bit for bit for the conversions and the
// ops that do the CPU's very additions in its order (encoder, residual, scale), 1e-9 for
// the double reductions. Shapes are deliberately not multiples of 32. Then the ops as a --bf16
// run has them (cu_set_bf16): bf16 weights, bf16 GEMM operands with fp32 accumulation, against
// the CPU ops on the same bf16-rounded values: within 1e-5 (the products are exact in fp32;
// only the order of the additions differs), bit for bit for the embedding, and the mixed AdamW
// (fp32 gradient in, bf16 weights out) against adamw_mixed_host. The fused passes (residual +
// LayerNorm, the MLP forward with bias + GELU and hg's bf16 copy, its backward with the GELU
// gradient, dh's bf16 copy and the bias gradient in one pass), in fp32 and bf16, also bit for bit
// against the GPU ops they fuse. Exits 77 (skipped) without a GPU.
#include "core/alloc.h"
#include "cuda/cuda_ops.h"
#include "core/half.h"
#include "nn/linear.h"
#include "nn/ops.h"
#include "parallel/adam.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fails;
static uint64_t rs = 0x9E3779B97F4A7C15ull;

static uint64_t next(void) {   // xorshift64*
    rs ^= rs >> 12; rs ^= rs << 25; rs ^= rs >> 27;
    return rs * 2685821657736338717ull;
}
static float frand(void) { return (float)((next() >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f; }   // [-1, 1)
static float *rnd(long n, float scale, float offset) {
    float *p = malloc(sizeof(float) * (n ? n : 1));
    for (long i = 0; i < n; i++) p[i] = frand() * scale + offset;
    return p;
}
static float *copyf(const float *h, long n) {
    float *p = malloc(sizeof(float) * (n ? n : 1));
    memcpy(p, h, sizeof(float) * n);
    return p;
}
static void *up(const void *h, size_t bytes) {
    void *d = cu_malloc(bytes);
    if (!d) { fprintf(stderr, "test_cuda_kernels: cu_malloc failed\n"); exit(1); }
    cu_memcpy(d, h, bytes);
    return d;
}

static void report(const char *name, double err, double tol) {
    int ok = err <= tol;   // false for NaN
    printf("%-40s max rel err %.3e (tol %.0e) %s\n", name, err, tol, ok ? "ok" : "FAIL");
    if (!ok) fails++;
}

// max|a − b| / (max|b| + 1e-6); a NaN where b has none (or the other way) is an infinite error
static double rel_err(const float *a, const float *b, long n) {
    double md = 0, mb = 0;
    for (long i = 0; i < n; i++) {
        if (isnan(a[i]) != isnan(b[i])) return INFINITY;
        if (isnan(b[i])) continue;
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= md)) md = d;
        if (fabs(b[i]) > mb) mb = fabs(b[i]);
    }
    return md / (mb + 1e-6);
}

// compare the device array dev[n] with the host reference ref[n]
static void cmp(const char *name, const float *dev, const float *ref, long n, double tol) {
    float *h = malloc(sizeof(float) * (n ? n : 1));
    cu_memcpy(h, dev, sizeof(float) * n);
    report(name, rel_err(h, ref, n), tol);
    free(h);
}

// bit-exact comparison of float arrays
static void cmp_bits(const char *name, const float *dev, const float *ref, long n) {
    float *h = malloc(sizeof(float) * (n ? n : 1));
    cu_memcpy(h, dev, sizeof(float) * n);
    long bad = 0;
    for (long i = 0; i < n; i++) if (memcmp(&h[i], &ref[i], 4)) bad++;
    report(name, (double)bad, 0);
    free(h);
}

static void cmp_double(const char *name, double gpu, double ref, double tol) {
    report(name, fabs(gpu - ref) / (fabs(ref) + 1e-6), tol);
}

// ---------------------------------------------------------------------------------------

// tokens in [0, vocab): some below v0, some at or past v0 + Vl, many repeated
static void test_encoder(int B, int T, int d, int v0, int Vl, int vocab) {
    int N = B * T;
    int *tok = malloc(sizeof(int) * N);
    for (int i = 0; i < N; i++) tok[i] = (int)(next() % (uint64_t)vocab);
    tok[1] = tok[4] = tok[N - 1] = v0 + 4;   // a repeated token of the shard
    tok[2] = v0 - 1; tok[3] = v0 + Vl;       // just outside it
    printf("encoder B=%d T=%d d=%d shard %d+%d\n", B, T, d, v0, Vl);
    float *wte = rnd((long)Vl * d, 1, 0), *wpe = rnd((long)T * d, 1, 0), *out = rnd((long)N * d, 1, 0);
    int *dtok = up(tok, sizeof(int) * N);
    float *dwte = up(wte, sizeof(float) * Vl * d), *dwpe = up(wpe, sizeof(float) * T * d);
    float *dout_ = up(out, sizeof(float) * N * d);
    for (int with_pos = 1; with_pos >= 0; with_pos--) {
        encoder_forward(out, tok, wte, v0, Vl, with_pos ? wpe : NULL, B, T, d);
        cu_encoder_forward(dout_, dtok, dwte, v0, Vl, with_pos ? dwpe : NULL, B, T, d);
        cmp_bits(with_pos ? "encoder_forward" : "encoder_forward (no wpe)", dout_, out, (long)N * d);
    }
    // backward: gradients start non-zero (they are added into)
    float *g = rnd((long)N * d, 1, 0), *gwte = rnd((long)Vl * d, 1, 0), *gwpe = rnd((long)T * d, 1, 0);
    float *dg = up(g, sizeof(float) * N * d), *dgwte = up(gwte, sizeof(float) * Vl * d);
    float *dgwpe = up(gwpe, sizeof(float) * T * d);
    encoder_backward(gwte, gwpe, g, tok, v0, Vl, B, T, d);
    cu_encoder_backward(dgwte, dgwpe, dg, dtok, v0, Vl, B, T, d);
    // the same additions in the same order as the CPU: bit for bit
    cmp_bits("encoder_backward dwte", dgwte, gwte, (long)Vl * d);
    cmp_bits("encoder_backward dwpe", dgwpe, gwpe, (long)T * d);
    encoder_backward(gwte, NULL, g, tok, v0, Vl, B, T, d);
    cu_encoder_backward(dgwte, NULL, dg, dtok, v0, Vl, B, T, d);
    cmp_bits("encoder_backward dwte (no dwpe)", dgwte, gwte, (long)Vl * d);
    cmp_bits("encoder_backward dwpe untouched", dgwpe, gwpe, (long)T * d);
    cu_free(dtok); cu_free(dwte); cu_free(dwpe); cu_free(dout_); cu_free(dg); cu_free(dgwte); cu_free(dgwpe);
    free(tok); free(wte); free(wpe); free(out); free(g); free(gwte); free(gwpe);
}

// N past 256 rows: the column sums of the parameter gradients in several row chunks
static void test_layernorm(long N, int d) {
    long n = N * d;
    float *x = rnd(n, 2, 0.5f), *w = rnd(d, 1, 1), *b = rnd(d, 1, 0);
    float *out = malloc(sizeof(float) * n), *mean = malloc(sizeof(float) * N), *rstd = malloc(sizeof(float) * N);
    float *dx = up(x, sizeof(float) * n), *dw = up(w, sizeof(float) * d), *db = up(b, sizeof(float) * d);
    float *dout_ = cu_malloc(sizeof(float) * n), *dmean = cu_malloc(sizeof(float) * N);
    float *drstd = cu_malloc(sizeof(float) * N);
    layernorm_forward(out, mean, rstd, x, w, b, N, d, 0);
    cu_layernorm_forward(dout_, dmean, drstd, dx, dw, db, N, d, 0);
    cmp("layernorm_forward out", dout_, out, n, 1e-5);
    cmp("layernorm_forward mean", dmean, mean, N, 1e-5);
    cmp("layernorm_forward rstd", drstd, rstd, N, 1e-5);
    // backward from the CPU's mean and rstd, so that only the backward is measured
    cu_memcpy(dmean, mean, sizeof(float) * N);
    cu_memcpy(drstd, rstd, sizeof(float) * N);
    float *g = rnd(n, 1, 0), *gin = rnd(n, 1, 0), *gw = rnd(d, 1, 0), *gb = rnd(d, 1, 0);
    float *dg = up(g, sizeof(float) * n), *dgin = up(gin, sizeof(float) * n);
    float *dgw = up(gw, sizeof(float) * d), *dgb = up(gb, sizeof(float) * d);
    layernorm_backward(gin, gw, gb, g, x, w, mean, rstd, N, d, 0);
    cu_layernorm_backward(dgin, dgw, dgb, dg, dx, dw, dmean, drstd, N, d, 0);
    cmp("layernorm_backward dinp", dgin, gin, n, 1e-5);
    cmp("layernorm_backward dw", dgw, gw, d, 1e-5);
    cmp("layernorm_backward db", dgb, gb, d, 1e-5);
    cu_free(dx); cu_free(dw); cu_free(db); cu_free(dout_); cu_free(dmean); cu_free(drstd);
    cu_free(dg); cu_free(dgin); cu_free(dgw); cu_free(dgb);
    free(x); free(w); free(b); free(out); free(mean); free(rstd); free(g); free(gin); free(gw); free(gb);
}

static void test_matmul(long N, int C, int OC) {
    float *x = rnd(N * C, 1, 0), *w = rnd((long)C * OC, 1, 0), *bias = rnd(OC, 1, 0);
    float *dx = up(x, sizeof(float) * N * C), *dw = up(w, sizeof(float) * C * OC), *dbias = up(bias, sizeof(float) * OC);
    char name[96];
    for (int with_bias = 0; with_bias < 2; with_bias++)
        for (int acc = 0; acc < 2; acc++) {
            float *out = rnd(N * OC, 1, 0);
            float *dout_ = up(out, sizeof(float) * N * OC);
            matmul_forward(out, x, w, with_bias ? bias : NULL, N, C, OC, acc);
            cu_matmul_forward(dout_, dx, dw, with_bias ? dbias : NULL, N, C, OC, acc);
            snprintf(name, sizeof name, "matmul_forward bias %d accumulate %d", with_bias, acc);
            cmp(name, dout_, out, N * OC, 1e-4);
            cu_free(dout_); free(out);
        }
    // backward: all gradients, then some NULL
    float *g = rnd(N * OC, 1, 0);
    float *dg = up(g, sizeof(float) * N * OC);
    for (int k = 0; k < 4; k++) {
        int acc = k == 1 || k == 2, has_in = k != 3, has_w = k != 2, has_b = k != 2;
        float *gin = rnd(N * C, 1, 0), *gw = rnd((long)C * OC, 1, 0), *gb = rnd(OC, 1, 0);
        float *dgin = up(gin, sizeof(float) * N * C), *dgw = up(gw, sizeof(float) * C * OC);
        float *dgb = up(gb, sizeof(float) * OC);
        float *gin0 = copyf(gin, N * C), *gw0 = copyf(gw, (long)C * OC), *gb0 = copyf(gb, OC);
        matmul_backward(has_in ? gin : NULL, has_w ? gw : NULL, has_b ? gb : NULL, g, x, w, N, C, OC, acc);
        cu_matmul_backward(has_in ? dgin : NULL, has_w ? dgw : NULL, has_b ? dgb : NULL, dg, dx, dw, N, C, OC, acc);
        snprintf(name, sizeof name, "matmul_backward dinp (acc %d%s)", acc, has_in ? "" : ", NULL");
        cmp(name, dgin, has_in ? gin : gin0, N * C, has_in ? 1e-4 : 0);
        snprintf(name, sizeof name, "matmul_backward dw (acc %d%s)", acc, has_w ? "" : ", NULL");
        cmp(name, dgw, has_w ? gw : gw0, (long)C * OC, has_w ? 1e-4 : 0);
        snprintf(name, sizeof name, "matmul_backward dbias (acc %d%s)", acc, has_b ? "" : ", NULL");
        cmp(name, dgb, has_b ? gb : gb0, OC, has_b ? 1e-5 : 0);
        cu_free(dgin); cu_free(dgw); cu_free(dgb);
        free(gin); free(gw); free(gb); free(gin0); free(gw0); free(gb0);
    }
    cu_free(dx); cu_free(dw); cu_free(dbias); cu_free(dg);
    free(x); free(w); free(bias); free(g);
}

static void test_gelu(void) {
    long n = 1037;
    float *x = rnd(n, 4, 0), *g = rnd(n, 1, 0), *out = malloc(sizeof(float) * n), *gin = malloc(sizeof(float) * n);
    float *dx = up(x, sizeof(float) * n), *dg = up(g, sizeof(float) * n);
    float *dout_ = cu_malloc(sizeof(float) * n), *dgin = cu_malloc(sizeof(float) * n);
    gelu_forward(out, x, n);
    cu_gelu_forward(dout_, dx, n);
    cmp("gelu_forward", dout_, out, n, 1e-5);
    gelu_backward(gin, x, g, n);
    cu_gelu_backward(dgin, dx, dg, n);
    cmp("gelu_backward", dgin, gin, n, 1e-5);
    cu_free(dx); cu_free(dg); cu_free(dout_); cu_free(dgin);
    free(x); free(g); free(out); free(gin);
}

// one vocabulary shard [v0, v0 + Vl) of a vocabulary of V real entries
static void test_crossentropy(int v0, int Vl, int V) {
    long N = 37, n = N * Vl;
    int targets[37];
    for (int i = 0; i < N; i++) targets[i] = (int)(next() % (uint64_t)V);
    float *logits = rnd(n, 4, 0), *mx = malloc(sizeof(float) * N), *tl = malloc(sizeof(float) * N);
    float *sum = malloc(sizeof(float) * N), *losses = malloc(sizeof(float) * N);
    int *dtg = up(targets, sizeof targets);
    float *dlog = up(logits, sizeof(float) * n), *dmx = cu_malloc(sizeof(float) * N), *dtl = cu_malloc(sizeof(float) * N);
    float *dsum = cu_malloc(sizeof(float) * N), *dloss = cu_malloc(sizeof(float) * N);
    float scale = 1.0f / (float)N;
    char name[96];
    crossentropy_max(mx, tl, logits, targets, N, v0, Vl, V);
    cu_crossentropy_max(dmx, dtl, dlog, dtg, N, v0, Vl, V);
    snprintf(name, sizeof name, "crossentropy_max mx (%d+%d/%d)", v0, Vl, V);
    cmp_bits(name, dmx, mx, N);
    snprintf(name, sizeof name, "crossentropy_max tl (%d+%d/%d)", v0, Vl, V);
    cmp_bits(name, dtl, tl, N);
    crossentropy_exp(sum, logits, mx, N, v0, Vl, V);
    cu_crossentropy_exp(dsum, dlog, dmx, N, v0, Vl, V);
    snprintf(name, sizeof name, "crossentropy_exp exp (%d+%d/%d)", v0, Vl, V);
    cmp(name, dlog, logits, n, 1e-5);
    snprintf(name, sizeof name, "crossentropy_exp sum (%d+%d/%d)", v0, Vl, V);
    cmp(name, dsum, sum, N, 1e-5);
    // finish and backward from the CPU's state, so that each stage is measured alone
    cu_memcpy(dlog, logits, sizeof(float) * n);
    cu_memcpy(dsum, sum, sizeof(float) * N);
    crossentropy_finish(losses, logits, mx, sum, tl, N, Vl);
    cu_crossentropy_finish(dloss, dlog, dmx, dsum, dtl, N, Vl);
    snprintf(name, sizeof name, "crossentropy_finish probs (%d+%d/%d)", v0, Vl, V);
    cmp(name, dlog, logits, n, 1e-5);
    snprintf(name, sizeof name, "crossentropy_finish losses (%d+%d/%d)", v0, Vl, V);
    cmp(name, dloss, losses, N, 1e-5);
    cu_memcpy(dlog, logits, sizeof(float) * n);
    crossentropy_backward(logits, targets, N, v0, Vl, scale);
    cu_crossentropy_backward(dlog, dtg, N, v0, Vl, scale);
    snprintf(name, sizeof name, "crossentropy_backward (%d+%d/%d)", v0, Vl, V);
    cmp(name, dlog, logits, n, 1e-5);
    cu_free(dtg); cu_free(dlog); cu_free(dmx); cu_free(dtl); cu_free(dsum); cu_free(dloss);
    free(logits); free(mx); free(tl); free(sum); free(losses);
}

static void test_residual(void) {
    long n = 1037;
    float *a = rnd(n, 1, 0), *b = rnd(n, 1, 0), *out = malloc(sizeof(float) * n);
    float *da = up(a, sizeof(float) * n), *db = up(b, sizeof(float) * n), *dout_ = cu_malloc(sizeof(float) * n);
    for (long i = 0; i < n; i++) out[i] = a[i] + b[i];
    cu_residual_forward(dout_, da, db, n);
    cmp_bits("residual_forward", dout_, out, n);
    cu_free(da); cu_free(db); cu_free(dout_);
    free(a); free(b); free(out);
}

static const char *kind_name(int half) { return half == 1 ? "bf16" : "fp16"; }

// values that exercise rounding: random magnitudes over many binades, ties, specials
static float *conv_inputs(long n) {
    float *x = malloc(sizeof(float) * n);
    for (long i = 0; i < n; i++) x[i] = frand() * ldexpf(1.0f, (int)(next() % 60) - 30);
    static const float special[] = {0.0f, -0.0f, 1.0f, -1.0f, INFINITY, -INFINITY, 65504.0f, 65519.0f, 65520.0f,
                                    1e5f, -1e5f, 6.1e-5f, 1e-7f, 3e-8f, 2.9802322e-8f, 1e-40f, -1e-40f, 3.4e38f,
                                    -3.4e38f, 1.00390625f, 1.01171875f, 1.00048828125f, 1.00146484375f};
    long ns = (long)(sizeof special / sizeof *special);
    for (long i = 0; i < ns && i < n; i++) x[i] = special[i];
    return x;
}

static void test_conversions(void) {
    char name[96];
    for (int half = 1; half <= 2; half++) {
        // half → f32 over every bit pattern (exact; NaN patterns need only stay NaN)
        long n = 65536;
        uint16_t *h = malloc(2 * n);
        float *f = malloc(sizeof(float) * n), *g = malloc(sizeof(float) * n);
        for (long i = 0; i < n; i++) { h[i] = (uint16_t)i; f[i] = half_to_f32(half, h[i]); }
        uint16_t *dh = up(h, 2 * n);
        float *df = cu_malloc(sizeof(float) * n);
        cu_half_to_f32(df, dh, n, half);
        cu_memcpy(g, df, sizeof(float) * n);
        long bad = 0;
        for (long i = 0; i < n; i++)
            bad += isnan(f[i]) ? !isnan(g[i]) : memcmp(&f[i], &g[i], 4) != 0;
        snprintf(name, sizeof name, "half_to_f32 %s (all patterns)", kind_name(half));
        report(name, (double)bad, 0);
        // f32 → half (exact; a NaN input must give a NaN: bf16 bit for bit, fp16 any NaN)
        long m = 4099;
        float *x = conv_inputs(m);
        x[m - 1] = NAN; x[m - 2] = -NAN;
        uint16_t *r = malloc(2 * m), *q = malloc(2 * m);
        for (long i = 0; i < m; i++) r[i] = half_from_f32(half, x[i]);
        float *dx = up(x, sizeof(float) * m);
        uint16_t *dq = cu_malloc(2 * m);
        cu_f32_to_half(dq, dx, m, half);
        cu_memcpy(q, dq, 2 * m);
        bad = 0;
        for (long i = 0; i < m; i++)
            bad += half == 2 && isnan(x[i]) ? !isnan(fp16_to_f32(q[i])) : r[i] != q[i];
        snprintf(name, sizeof name, "f32_to_half %s", kind_name(half));
        report(name, (double)bad, 0);
        // the four-a-thread path: a multiple of 4, aligned (the NaNs at the end left out)
        cu_memset(dq, 0, 2 * m);
        cu_f32_to_half(dq, dx, m - 3, half);
        cu_memcpy(q, dq, 2 * m);
        bad = 0;
        for (long i = 0; i < m; i++) bad += i < m - 3 ? r[i] != q[i] : q[i] != 0;
        snprintf(name, sizeof name, "f32_to_half %s (4 a thread)", kind_name(half));
        report(name, (double)bad, 0);
        // dst = half(f32(dst) + src)
        float *src = rnd(m, 0.01f, 0);
        for (long i = 0; i < m; i++) { r[i] = half_from_f32(half, frand()); }
        uint16_t *ddst = up(r, 2 * m);
        float *dsrc = up(src, sizeof(float) * m);
        for (long i = 0; i < m; i++) r[i] = half_from_f32(half, half_to_f32(half, r[i]) + src[i]);
        cu_half_accumulate(ddst, dsrc, m, half);
        cu_memcpy(q, ddst, 2 * m);
        bad = 0;
        for (long i = 0; i < m; i++) bad += r[i] != q[i];
        snprintf(name, sizeof name, "half_accumulate %s", kind_name(half));
        report(name, (double)bad, 0);
        // dst = s·f32(src)
        float s = 0.75f / 1024.0f;
        for (long i = 0; i < m; i++) { r[i] = half_from_f32(half, frand() * 100.0f); f[i] = half_to_f32(half, r[i]) * s; }
        uint16_t *dr = up(r, 2 * m);
        float *dup_ = cu_malloc(sizeof(float) * m);
        cu_upcast_scale(dup_, dr, m, half, s);
        snprintf(name, sizeof name, "upcast_scale %s", kind_name(half));
        cmp_bits(name, dup_, f, m);
        cu_free(dh); cu_free(df); cu_free(dx); cu_free(dq); cu_free(ddst); cu_free(dsrc); cu_free(dr); cu_free(dup_);
        free(h); free(f); free(g); free(x); free(r); free(q); free(src);
    }
}

static void test_reductions(void) {
    char name[96];
    double *dres = cu_malloc(sizeof(double)), res;
    long sizes[] = {37, 1037, 300001};   // the last one needs the grid-stride loop of the first pass
    for (int k = 0; k < 3; k++) {
        long n = sizes[k];
        float *x = rnd(n, 1, 0);
        float *dx = up(x, sizeof(float) * n);
        double ref = 0;
        // Σx on values in [0, 1) (no cancellation)
        for (long i = 0; i < n; i++) x[i] = 0.5f * x[i] + 0.5f;
        cu_memcpy(dx, x, sizeof(float) * n);
        ref = 0;
        for (long i = 0; i < n; i++) ref += x[i];
        snprintf(name, sizeof name, "sum n=%ld", n);
        cmp_double(name, cu_sum(dx, n), ref, 1e-9);
        for (int half = 1; half <= 2; half++) {
            uint16_t *h = malloc(2 * n);
            float s = 1.0f / 65536.0f * 0.8f;
            for (long i = 0; i < n; i++) h[i] = half_from_f32(half, frand() * 1000.0f);
            ref = 0;
            for (long i = 0; i < n; i++) { double g = half_to_f32(half, h[i]) * s; ref += g * g; }   // as zero.c
            uint16_t *dh = up(h, 2 * n);
            cu_sumsq_half(dres, dh, n, half, s);
            cu_memcpy(&res, dres, sizeof res);
            snprintf(name, sizeof name, "sumsq_half %s n=%ld", kind_name(half), n);
            cmp_double(name, res, ref, 1e-9);
            cu_free(dh); free(h);
        }
        cu_free(dx); free(x);
    }
    // n = 0: the result is set to 0, not added to
    res = 5.0;
    cu_memcpy(dres, &res, sizeof res);
    cu_sumsq_half(dres, NULL, 0, 1, 1.0f);
    cu_memcpy(&res, dres, sizeof res);
    report("sumsq_half n=0 sets 0", fabs(res), 0);
    report("sum n=0", fabs(cu_sum(NULL, 0)), 0);
    cu_free(dres);
}

static void test_adamw(void) {
    long n = 1037;
    float *w = rnd(n, 1, 0), *m = rnd(n, 0.01f, 0), *v = rnd(n, 0.0001f, 0.0001f), *g = rnd(n, 0.1f, 0);
    float *dw = up(w, sizeof(float) * n), *dm = up(m, sizeof(float) * n), *dv = up(v, sizeof(float) * n);
    float *dg = up(g, sizeof(float) * n);
    float lr = 3e-4f, decay = 1.0f - lr * 0.1f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f;
    int t = 7;
    float bc1 = 1.0f - powf(b1, (float)t), bc2 = 1.0f - powf(b2, (float)t);
    for (long j = 0; j < n; j++) {   // zero.c's adam()
        m[j] = b1 * m[j] + (1 - b1) * g[j];
        v[j] = b2 * v[j] + (1 - b2) * g[j] * g[j];
        float denom = sqrtf(v[j]) / sqrtf(bc2) + eps;
        w[j] = w[j] * decay - (lr / bc1) * m[j] / denom;
    }
    cu_adamw(dw, dm, dv, dg, n, lr, decay, b1, b2, eps, bc1, bc2);
    cmp("adamw w", dw, w, n, 1e-5);
    cmp("adamw m", dm, m, n, 1e-5);
    cmp("adamw v", dv, v, n, 1e-5);
    cu_free(dw); cu_free(dm); cu_free(dv); cu_free(dg);
    free(w); free(m); free(v); free(g);
}

// ---------------------------------------------------------------------------------------
// a --bf16 run's ops

// x[n] rounded to bf16 in place; returns a device copy of the bf16 values (as the ops take
// bf16 weights: through a float pointer)
static float *round_up_bf16(float *x, long n) {
    uint16_t *h = malloc(2 * (n ? n : 1));
    for (long i = 0; i < n; i++) { h[i] = bf16_from_f32(x[i]); x[i] = bf16_to_f32(h[i]); }
    void *d = up(h, 2 * n);
    free(h);
    return d;
}
static float *rounded(const float *x, long n) {
    float *r = copyf(x, n);
    for (long i = 0; i < n; i++) r[i] = bf16_to_f32(bf16_from_f32(r[i]));
    return r;
}

static void test_bf16_matmul(void) {
    long N = 37;
    int C = 48, OC = 70;
    float *x = rnd(N * C, 1, 0), *w = rnd((long)C * OC, 1, 0), *bias = rnd(OC, 1, 0), *g = rnd(N * OC, 1, 0);
    float *dx = up(x, sizeof(float) * N * C), *dw = round_up_bf16(w, (long)C * OC), *dbias = round_up_bf16(bias, OC);
    float *dg = up(g, sizeof(float) * N * OC), *xr = rounded(x, N * C), *gr = rounded(g, N * OC);
    float *out = rnd(N * OC, 1, 0), *dout_ = up(out, sizeof(float) * N * OC);
    matmul_forward(out, xr, w, bias, N, C, OC, 1);   // the GEMM sees x in bf16
    cu_matmul_forward(dout_, dx, dw, dbias, N, C, OC, 1);
    cmp("bf16 matmul_forward (bias, accumulate)", dout_, out, N * OC, 1e-5);
    float *gin = rnd(N * C, 1, 0), *gw = rnd((long)C * OC, 1, 0), *gb = rnd(OC, 1, 0);
    float *dgin = up(gin, sizeof(float) * N * C), *dgw = up(gw, sizeof(float) * C * OC), *dgb = up(gb, sizeof(float) * OC);
    matmul_backward(gin, gw, NULL, gr, xr, w, N, C, OC, 0);   // dinp and the fp32 dw (beta 1) on bf16 operands
    matmul_backward(NULL, NULL, gb, g, x, w, N, C, OC, 0);    // the bias gradient sums the fp32 dout
    cu_matmul_backward(dgin, dgw, dgb, dg, dx, dw, N, C, OC, 0);
    cmp("bf16 matmul_backward dinp", dgin, gin, N * C, 1e-5);
    cmp("bf16 matmul_backward dw (fp32, accumulated)", dgw, gw, (long)C * OC, 1e-5);
    cmp("bf16 matmul_backward dbias", dgb, gb, OC, 1e-5);
    // nn.Linear's layout, with row strides: the LM head
    int ldi = C + 3;
    float *xs = rnd(N * ldi, 1, 0), *o2 = rnd(N * OC, 1, 0), *dxs = up(xs, sizeof(float) * N * ldi);
    float *xsr = rounded(xs, N * ldi), *do2 = up(o2, sizeof(float) * N * OC);
    linear_forward(o2, OC, xsr, ldi, w, N, C, OC, 0);
    cu_linear_forward(do2, OC, dxs, ldi, dw, N, C, OC, 0);
    cmp("bf16 linear_forward (strided input)", do2, o2, N * OC, 1e-5);
    float *gi2 = rnd(N * ldi, 1, 0), *dgi2 = up(gi2, sizeof(float) * N * ldi);
    float *gw2 = rnd((long)OC * C, 1, 0), *dgw2 = up(gw2, sizeof(float) * OC * C);
    linear_backward(gi2, ldi, gw2, gr, OC, xsr, ldi, w, N, C, OC, 1);
    cu_linear_backward(dgi2, ldi, dgw2, dg, OC, dxs, ldi, dw, N, C, OC, 1);
    cmp("bf16 linear_backward dinp (accumulate)", dgi2, gi2, N * ldi, 1e-5);
    cmp("bf16 linear_backward dw", dgw2, gw2, (long)OC * C, 1e-5);
    cu_free(dx); cu_free(dw); cu_free(dbias); cu_free(dg); cu_free(dout_); cu_free(dgin); cu_free(dgw); cu_free(dgb);
    cu_free(dxs); cu_free(do2); cu_free(dgi2); cu_free(dgw2);
    free(x); free(w); free(bias); free(g); free(xr); free(gr); free(out); free(gin); free(gw); free(gb);
    free(xs); free(o2); free(xsr); free(gi2); free(gw2);
}

// The experts' bf16 GEMMs (cu_gemm_grouped) through cuBLASLt (gemm_lt.cu): the heuristic is
// asked for a family's 14 classes of row counts (8 ... 65536) at its first call and never again
// (300, 301, 512 and 513 rows), and every row count of a class gets the product (against double
// sums of the same bf16 values): forward (M rows), input gradient (M rows) and weight gradient
// (K rows). With TED_LT_TUNE=1 (main sets it) the first call of each class times the heuristic's
// candidates (3 classes at 300 rows, 3 more at 513); the result is checked as the others' (the
// emulation's faster candidate with other bits is test_cuda_emu's: TED_GEMM_LT=0 there gives the
// same bits)
static void ref_gemm(float *c, const float *a, const float *b, int ta, int tb, long M, long N, long K) {
    for (long i = 0; i < M; i++)
        for (long j = 0; j < N; j++) {
            double t = 0;
            for (long l = 0; l < K; l++) t += (double)(ta ? a[l * M + i] : a[i * K + l]) * (tb ? b[j * K + l] : b[l * N + j]);
            c[i * N + j] = (float)t;
        }
}
static void hg_room_to_f32(float *d, long n);   // below: a bf16 room's values as floats again
static void test_bf16_gemm_classes(void) {
    const int Ns[] = {300, 301, 512, 513};
    const long want_asked[] = {3 * 14, 0, 0, 0};   // forward, input gradient, weight gradient: a family each
    const long want_timed[] = {3, 0, 0, 3};         // classes 512 (300, 301, 512 rows) and 1024 (513)
    int C = 40, OC = 24;
    float *w = rnd((long)C * OC, 1, 0), *dw = round_up_bf16(w, (long)C * OC);
    for (int i = 0; i < 4; i++) {
        int N = Ns[i];
        long asked0, calls0, asked, calls, timed0, won0, timed, won;
        float *xr = rnd((long)N * C, 1, 0), *gr = rnd((long)N * OC, 1, 0);
        float *dx = round_up_bf16(xr, (long)N * C), *dg = round_up_bf16(gr, (long)N * OC);   // bf16; xr, gr rounded
        float *out = malloc(sizeof(float) * N * OC), *gin = malloc(sizeof(float) * N * C);
        float *gw = malloc(sizeof(float) * C * OC), *dout_ = cu_malloc(sizeof(float) * N * OC);
        float *dgin = cu_malloc(sizeof(float) * N * C), *dgw = cu_malloc(sizeof(float) * C * OC);
        const void *ax = dx, *ag = dg, *aw = dw;
        void *co = dout_, *ci = dgin, *cw = dgw;
        cu_lt_counts(&asked0, &calls0);
        cu_lt_tuned(&timed0, &won0);
        cu_gemm_grouped(0, 0, 1, &N, &OC, &C, &ax, C, &aw, OC, 0.0f, &co, 0, OC);   // out = x·w
        cu_gemm_grouped(0, 1, 1, &N, &C, &OC, &ag, OC, &aw, OC, 0.0f, &ci, 0, C);    // dinp = g·wᵀ
        cu_gemm_grouped(1, 0, 1, &C, &OC, &N, &ax, C, &ag, OC, 0.0f, &cw, 0, OC);     // dw = xᵀ·g
        cu_lt_counts(&asked, &calls);
        cu_lt_tuned(&timed, &won);
        ref_gemm(out, xr, w, 0, 0, N, OC, C);
        ref_gemm(gin, gr, w, 0, 1, N, C, OC);
        ref_gemm(gw, xr, gr, 1, 0, C, OC, N);
        char name[96];
        snprintf(name, sizeof name, "bf16 Lt GEMM, %d rows: forward", N);
        cmp(name, dout_, out, (long)N * OC, 1e-5);
        snprintf(name, sizeof name, "bf16 Lt GEMM, %d rows: dinp", N);
        cmp(name, dgin, gin, (long)N * C, 1e-5);
        snprintf(name, sizeof name, "bf16 Lt GEMM, %d rows: dw", N);
        cmp(name, dgw, gw, (long)C * OC, 1e-5);
        // dinp written in bf16 (c16: the experts' input gradient, MoeLayer.out16), in dgin's first half
        cu_gemm_grouped(0, 1, 1, &N, &C, &OC, &ag, OC, &aw, OC, 0.0f, &ci, 1, C);
        hg_room_to_f32(dgin, (long)N * C);
        snprintf(name, sizeof name, "bf16 Lt GEMM, %d rows: dinp in bf16", N);
        cmp(name, dgin, gin, (long)N * C, 4e-3);
        int ok = asked - asked0 == want_asked[i] && calls - calls0 == 3 && timed - timed0 == want_timed[i] &&
                 won - won0 <= timed - timed0;
        snprintf(name, sizeof name, "bf16 Lt GEMM, %d rows: classes", N);
        printf("%-40s heuristic asked %ld times, %ld GEMMs, %ld classes timed (%ld won by a later candidate) %s\n",
               name, asked - asked0, calls - calls0, timed - timed0, won - won0, ok ? "ok" : "FAIL");
        fails += !ok;
        cu_free(dx); cu_free(dg); cu_free(dout_); cu_free(dgin); cu_free(dgw);
        free(xr); free(gr); free(out); free(gin); free(gw);
    }
    // the dense layers' GEMMs keep cublasGemmEx (their shapes repeat every step)
    long asked0, calls0, asked, calls;
    cu_lt_counts(&asked0, &calls0);
    test_bf16_matmul();
    cu_lt_counts(&asked, &calls);
    int ok = asked == asked0 && calls == calls0;
    printf("%-40s %ld through cuBLASLt %s\n", "bf16 dense GEMMs: cublasGemmEx", calls - calls0, ok ? "ok" : "FAIL");
    fails += !ok;
    cu_free(dw); free(w);
}

// cu_gemm_gelu16 through cuBLASLt's GELU epilogue (F 48) or, where the library has no algorithm for
// it (F 45: the epilogue's matrix needs an ld a multiple of 8), its own passes: the family's 14
// classes asked at the first call and none at the second, also when refused (a refusal asked again
// each call would cost every GEMM 14 host queries), the GEMM through cuBLASLt only where taken, and
// the second call's h and hg the first's bits (the values are test_mlp_forward's and the experts')
static int same_dev_bits(const void *a, const void *b, size_t bytes) {
    unsigned char *x = malloc(bytes), *y = malloc(bytes);
    cu_memcpy(x, a, bytes);
    cu_memcpy(y, b, bytes);
    int same = !memcmp(x, y, bytes);
    free(x); free(y);
    return same;
}
static void test_bf16_gelu_classes(void) {
    int N = 300, C = 40;
    for (int i = 0; i < 2; i++) {
        int F = i ? 45 : 48;
        float *x = rnd((long)N * C, 1, 0), *w = rnd((long)C * F, 1, 0), *b = rnd(F, 1, 0);
        float *dx = round_up_bf16(x, (long)N * C), *dw = round_up_bf16(w, (long)C * F), *db = round_up_bf16(b, F);
        uint16_t *h[2], *hg[2];
        long asked[3], calls[3];
        cu_lt_counts(&asked[0], &calls[0]);
        for (int k = 0; k < 2; k++) {
            h[k] = cu_malloc(2 * (size_t)N * F);
            hg[k] = cu_malloc(2 * (size_t)N * F);
            cu_gemm_gelu16(dx, dw, db, h[k], hg[k], N, C, F);
            cu_lt_counts(&asked[k + 1], &calls[k + 1]);
        }
        size_t bytes = 2 * (size_t)N * F;
        int lt = F % 8 == 0, same = same_dev_bits(h[0], h[1], bytes) && same_dev_bits(hg[0], hg[1], bytes);
        int ok = asked[1] - asked[0] == 14 && asked[2] == asked[1] && calls[1] - calls[0] == lt &&
                 calls[2] - calls[1] == lt && same;
        printf("%-40s heuristic asked %ld then %ld times, %ld GEMMs through it, repeat %s %s\n",
               F % 8 ? "bf16 GEMM + GELU, F 45 (refused)" : "bf16 GEMM + GELU, F 48 (epilogue)",
               asked[1] - asked[0], asked[2] - asked[1], calls[2] - calls[0], same ? "same" : "DIFFERS",
               ok ? "ok" : "FAIL");
        fails += !ok;
        for (int k = 0; k < 2; k++) { cu_free(h[k]); cu_free(hg[k]); }
        cu_free(dx); cu_free(dw); cu_free(db);
        free(x); free(w); free(b);
    }
}

static void test_bf16_norm_embed(void) {
    long N = 37;
    int d = 48, B = 1, T = 37, Vl = 20;
    float *x = rnd(N * d, 2, 0.5f), *w = rnd(d, 1, 1), *b = rnd(d, 1, 0);
    float *out = malloc(sizeof(float) * N * d), *mean = malloc(sizeof(float) * N), *rstd = malloc(sizeof(float) * N);
    float *dx = up(x, sizeof(float) * N * d), *dw = round_up_bf16(w, d), *db = round_up_bf16(b, d);
    float *dout_ = cu_malloc(sizeof(float) * N * d), *dmean = cu_malloc(sizeof(float) * N), *drstd = cu_malloc(sizeof(float) * N);
    layernorm_forward(out, mean, rstd, x, w, b, N, d, 0);
    cu_layernorm_forward(dout_, dmean, drstd, dx, dw, db, N, d, 0);
    cmp("bf16 layernorm_forward out", dout_, out, N * d, 1e-5);
    float *g = rnd(N * d, 1, 0), *gin = rnd(N * d, 1, 0), *gw = rnd(d, 1, 0), *gb = rnd(d, 1, 0);
    float *dg = up(g, sizeof(float) * N * d), *dgin = up(gin, sizeof(float) * N * d);
    float *dgw = up(gw, sizeof(float) * d), *dgb = up(gb, sizeof(float) * d);
    cu_memcpy(dmean, mean, sizeof(float) * N);
    cu_memcpy(drstd, rstd, sizeof(float) * N);
    layernorm_backward(gin, gw, gb, g, x, w, mean, rstd, N, d, 0);
    cu_layernorm_backward(dgin, dgw, dgb, dg, dx, dw, dmean, drstd, N, d, 0);
    cmp("bf16 layernorm_backward dinp", dgin, gin, N * d, 1e-5);
    cmp("bf16 layernorm_backward dw (fp32)", dgw, gw, d, 1e-5);
    int *tok = malloc(sizeof(int) * N);
    for (long i = 0; i < N; i++) tok[i] = (int)(next() % (uint64_t)(Vl + 5));
    float *wte = rnd((long)Vl * d, 1, 0), *wpe = rnd((long)T * d, 1, 0);
    int *dtok = up(tok, sizeof(int) * N);
    float *dwte = round_up_bf16(wte, (long)Vl * d), *dwpe = round_up_bf16(wpe, (long)T * d);
    encoder_forward(out, tok, wte, 0, Vl, wpe, B, T, d);
    cu_encoder_forward(dout_, dtok, dwte, 0, Vl, dwpe, B, T, d);
    cmp_bits("bf16 encoder_forward", dout_, out, N * d);
    cu_free(dx); cu_free(dw); cu_free(db); cu_free(dout_); cu_free(dmean); cu_free(drstd); cu_free(dg); cu_free(dgin);
    cu_free(dgw); cu_free(dgb); cu_free(dtok); cu_free(dwte); cu_free(dwpe);
    free(x); free(w); free(b); free(out); free(mean); free(rstd); free(g); free(gin); free(gw); free(gb); free(tok);
    free(wte); free(wpe);
}

// ---- the fused element-wise passes of nn.cu: each against the CPU op (on a --bf16 run as the
// bf16 tests above: the CPU on the bf16-rounded values the GEMMs see) and bit for bit against
// the GPU ops it fuses (the same arithmetic, in fewer passes)

static float *dev_weights(float *w, long n) {   // as a run's ops take them (rounded in place on bf16)
    return cu_bf16() ? round_up_bf16(w, n) : up(w, sizeof(float) * n);
}
static float *dev_zeros(long n) { return cu_malloc(sizeof(float) * (n ? n : 1)); }
static void same_dev(const char *name, const float *got, const float *want, long n) {
    float *h = malloc(sizeof(float) * (n ? n : 1));
    cu_memcpy(h, want, sizeof(float) * n);
    cmp_bits(name, got, h, n);
    free(h);
}
static const char *run_name(void) { return cu_bf16() ? "bf16 " : ""; }

// Host copy of the device array d[n]
static float *down(const float *d, long n) {
    float *h = malloc(sizeof(float) * (n ? n : 1));
    cu_memcpy(h, d, sizeof(float) * n);
    return h;
}

// The emulation runs every GEMM one way; a GPU's cuBLASLt may take another kernel, with its own
// GELU, for a GEMM with GELU's epilogue than cublasGemmEx for the same product
static int emulated(void) { return strstr(cu_device_name(), "emulation") != NULL; }

// got (device) against want (device): bit for bit, or within tol where tol > 0
static void same_or_close(const char *name, const float *got, const float *want, long n, double tol) {
    if (tol == 0) { same_dev(name, got, want, n); return; }
    float *w = down(want, n);
    cmp(name, got, w, n, tol);
    free(w);
}

// The n outputs of a fused op: got[k] (device) against the CPU's ref[k] within tol[k] (0: bit for
// bit) and against the unfused GPU ops' unf[k] (device) bit for bit, or within unf_tol where it is
// not 0; the device arrays freed
static void check_fused(const char *op, int n, const char *const *what, float **got, float **ref, float **unf,
                        const long *len, const double *tol, double unf_tol) {
    char name[96];
    for (int k = 0; k < n; k++) {
        snprintf(name, sizeof name, "%s%s %s", run_name(), op, what[k]);
        if (tol[k] == 0) cmp_bits(name, got[k], ref[k], len[k]);
        else cmp(name, got[k], ref[k], len[k], tol[k]);
        snprintf(name, sizeof name, "%s%s %s = unfused gpu", run_name(), op, what[k]);
        same_or_close(name, got[k], unf[k], len[k], unf_tol);
        cu_free(got[k]);
        cu_free(unf[k]);
    }
}

// On a bf16 run some ops keep an output as its bf16 copy alone, in the first half of its room
// (cuda_ops.h: cu_hg_half): the MLP's h and hg (from c_fc's GEMM with GELU's epilogue where F is a
// multiple of 8, else from its own pass), the second LayerNorm's output for the MLP. On the device,
// such a copy made floats again in place (to compare it), and an fp32 one rounded to bf16
static void hg_room_to_f32(float *d, long n) {
    float *raw = down(d, n), *f = malloc(sizeof(float) * (n ? n : 1));
    for (long i = 0; i < n; i++) f[i] = bf16_to_f32(((const uint16_t *)raw)[i]);
    cu_memcpy(d, f, sizeof(float) * n);
    free(raw); free(f);
}
static void round_dev(float *d, long n) {
    float *x = down(d, n), *r = rounded(x, n);
    cu_memcpy(d, r, sizeof(float) * n);
    free(x); free(r);
}
// The MLP's input x[n] on the device as residual_layernorm_forward leaves it for the MLP: on a bf16
// run its bf16 copy in the first half of a room of n floats
static float *mlp_input(const float *x, long n) {
    if (!cu_bf16()) return up(x, sizeof(float) * n);
    float *r = copyf(x, n), *d = round_up_bf16(r, n);   // the op reads the bf16 half alone
    free(r);
    return d;
}

// res = a + b and its LayerNorm in one pass; gemm_input: on a bf16 run the LayerNorm's output is
// kept as its bf16 copy alone (in the first half of its room), compared as floats again
static void test_residual_layernorm(long N, int d, int gemm_input) {
    long n = N * d;
    float *a = rnd(n, 1, 0.5f), *b = rnd(n, 1, 0), *w = rnd(d, 1, 1), *bias = rnd(d, 1, 0);
    float *da = up(a, sizeof(float) * n), *db = up(b, sizeof(float) * n), *dw = dev_weights(w, d);
    float *dbias = dev_weights(bias, d);
    float *res = malloc(sizeof(float) * n), *out = malloc(sizeof(float) * n), *mean = malloc(sizeof(float) * N);
    float *rstd = malloc(sizeof(float) * N), *g[4], *u[4];
    long len[4] = {n, n, N, N};
    for (int k = 0; k < 4; k++) { g[k] = dev_zeros(len[k]); u[k] = dev_zeros(len[k]); }
    residual_layernorm_forward(res, out, mean, rstd, a, b, w, bias, N, d, gemm_input);
    cu_residual_layernorm_forward(g[0], g[1], g[2], g[3], da, db, dw, dbias, N, d, gemm_input);
    cu_residual_forward(u[0], da, db, n);
    cu_layernorm_forward(u[1], u[2], u[3], u[0], dw, dbias, N, d, 0);
    int out16 = gemm_input && cu_bf16();
    if (out16) {   // the bf16 copy, as floats; the unfused op's fp32 output rounded
        hg_room_to_f32(g[1], n);
        round_dev(u[1], n);
    }
    const char *what[4] = {"res", "out", "mean", "rstd"};
    float *ref[4] = {res, out, mean, rstd};
    double tol[4] = {0, out16 ? 4e-3 : 1e-5, 1e-5, 1e-5};   // the sum: the CPU's very addition; bf16: half a step
    check_fused(out16 ? "residual_layernorm (mlp input)" : "residual_layernorm", 4, what, g, ref, u, len, tol, 0);
    cu_free(da); cu_free(db); cu_free(dw); cu_free(dbias);
    free(a); free(b); free(w); free(bias); free(res); free(out); free(mean); free(rstd);
}

// The MoE router's GEMMs from ln2 as residual_layernorm_forward leaves it with gemm_input (a bf16
// run: its bf16 copy alone) = matmul_forward / matmul_backward (no bias) from fp32 ln2, bit for bit
static void test_matmul_x16(long N, int C, int OC) {
    float *x = rnd(N * C, 1, 0), *w = rnd((long)C * OC, 1, 0), *g = rnd(N * OC, 1, 0), *gw = rnd((long)C * OC, 1, 0);
    float *dx = up(x, sizeof(float) * N * C), *dx16 = mlp_input(x, N * C), *dw = dev_weights(w, (long)C * OC);
    float *dg = up(g, sizeof(float) * N * OC), *o[3], *u[3];
    long len[3] = {N * OC, N * C, (long)C * OC};
    for (int k = 0; k < 3; k++) { o[k] = dev_zeros(len[k]); u[k] = dev_zeros(len[k]); }
    cu_memcpy(o[2], gw, sizeof(float) * len[2]);
    cu_memcpy(u[2], gw, sizeof(float) * len[2]);
    cu_matmul_forward_x16(o[0], dx16, dw, N, C, OC);
    cu_matmul_forward(u[0], dx, dw, NULL, N, C, OC, 0);
    cu_matmul_backward_x16(o[1], o[2], dg, dx16, dw, N, C, OC, 0);
    cu_matmul_backward(u[1], u[2], NULL, dg, dx, dw, N, C, OC, 0);
    const char *what[3] = {"out", "dinp", "dw"};
    char name[96];
    for (int k = 0; k < 3; k++) {
        snprintf(name, sizeof name, "%smatmul_x16 %s = matmul from fp32 input", run_name(), what[k]);
        same_dev(name, o[k], u[k], len[k]);
        cu_free(o[k]); cu_free(u[k]);
    }
    cu_free(dx); cu_free(dx16); cu_free(dw); cu_free(dg);
    free(x); free(w); free(g); free(gw);
}

// LayerNorm's backward from dout's bf16 copy alone (dout16: the GPT path's dln on a bf16 run) against
// the CPU's from the same rounded values; N past a chunk of rows, d not a multiple of 4, 2056 columns
static void test_layernorm_dout16(long N, int d) {
    long n = N * d;
    float *x = rnd(n, 2, 0.5f), *w = rnd(d, 1, 1), *b = rnd(d, 1, 0), *g = rnd(n, 1, 0);
    float *gin = rnd(n, 1, 0), *gw = rnd(d, 1, 0), *gb = rnd(d, 1, 0), *mean = malloc(sizeof(float) * N);
    float *rstd = malloc(sizeof(float) * N), *out = malloc(sizeof(float) * n);
    float *dx = up(x, sizeof(float) * n), *dw = dev_weights(w, d), *dg16 = mlp_input(g, n);   // w, g rounded
    float *gr = rounded(g, n), *dgin = up(gin, sizeof(float) * n), *dgw = up(gw, sizeof(float) * d);
    float *dgb = up(gb, sizeof(float) * d), *dmean, *drstd;
    layernorm_forward(out, mean, rstd, x, w, b, N, d, 0);
    dmean = up(mean, sizeof(float) * N); drstd = up(rstd, sizeof(float) * N);
    layernorm_backward(gin, gw, gb, gr, x, w, mean, rstd, N, d, 0);
    cu_layernorm_backward(dgin, dgw, dgb, dg16, dx, dw, dmean, drstd, N, d, 1);
    char name[96];
    const char *what[3] = {"dinp", "dw", "db"};
    float *got[3] = {dgin, dgw, dgb}, *want[3] = {gin, gw, gb};
    for (int k = 0; k < 3; k++) {
        snprintf(name, sizeof name, "bf16 layernorm_backward %ldx%d (dout16) %s", N, d, what[k]);
        cmp(name, got[k], want[k], k ? d : n, 1e-5);
        cu_free(got[k]);
    }
    cu_free(dx); cu_free(dw); cu_free(dg16); cu_free(dmean); cu_free(drstd);
    free(x); free(w); free(b); free(g); free(gin); free(gw); free(gb); free(mean); free(rstd); free(out); free(gr);
}

// ln_f's LayerNorm, read only by the head's GEMMs (gemm_input): on a bf16 run its bf16 copy alone,
// in the first half of its room (compared as floats again; the fp32 op's output rounded, bit for bit)
static void test_layernorm_gemm_input(long N, int d) {
    long n = N * d, len[3] = {n, N, N};
    float *x = rnd(n, 2, 0.5f), *w = rnd(d, 1, 1), *b = rnd(d, 1, 0);
    float *dx = up(x, sizeof(float) * n), *dw = dev_weights(w, d), *db = dev_weights(b, d);
    float *out = malloc(sizeof(float) * n), *mean = malloc(sizeof(float) * N), *rstd = malloc(sizeof(float) * N);
    float *g[3], *u[3], *ref[3] = {out, mean, rstd};
    for (int k = 0; k < 3; k++) { g[k] = dev_zeros(len[k]); u[k] = dev_zeros(len[k]); }
    layernorm_forward(out, mean, rstd, x, w, b, N, d, 1);   // the CPU keeps fp32
    cu_layernorm_forward(g[0], g[1], g[2], dx, dw, db, N, d, 1);
    cu_layernorm_forward(u[0], u[1], u[2], dx, dw, db, N, d, 0);
    if (cu_bf16()) {
        hg_room_to_f32(g[0], n);
        round_dev(u[0], n);
    }
    const char *what[3] = {"out", "mean", "rstd"};
    double tol[3] = {cu_bf16() ? 4e-3 : 1e-5, 1e-5, 1e-5};
    check_fused("layernorm (gemm input)", 3, what, g, ref, u, len, tol, 0);
    cu_free(dx); cu_free(dw); cu_free(db);
    free(x); free(w); free(b); free(out); free(mean); free(rstd);
}

// The MLP forward: h = x·w1 + b1, GELU (with hg's bf16 copy for the second GEMM), out = hg·w2 + b2.
// On bf16 the CPU's second GEMM takes the GPU's hg rounded (the CPU's own hg may round the other
// way where h differs in its last bit), so that each stage is measured alone.
static void test_mlp_forward(long N, int C, int F, int OC, float *h_cpu) {
    int bf16 = cu_bf16();
    float *x = rnd(N * C, 1, 0), *w1 = rnd((long)C * F, 1, 0), *b1 = rnd(F, 1, 0), *w2 = rnd((long)F * OC, 1, 0);
    float *b2 = rnd(OC, 1, 0), *dx = up(x, sizeof(float) * N * C), *dw1 = dev_weights(w1, (long)C * F);
    float *db1 = dev_weights(b1, F), *dw2 = dev_weights(w2, (long)F * OC), *db2 = dev_weights(b2, OC);
    float *xr = bf16 ? rounded(x, N * C) : copyf(x, N * C), *hg = malloc(sizeof(float) * N * F);
    float *out = malloc(sizeof(float) * N * OC), *g[3], *u[3], *dx16 = mlp_input(x, N * C);
    long len[3] = {N * F, N * F, N * OC};
    for (int k = 0; k < 3; k++) { g[k] = dev_zeros(len[k]); u[k] = dev_zeros(len[k]); }
    matmul_bias_gelu_forward(h_cpu, hg, xr, w1, b1, N, C, F);
    cu_mlp_forward(g[2], g[0], g[1], dx16, dw1, db1, dw2, db2, N, C, F, OC);
    if (bf16) {   // h and hg kept as their bf16 copies
        hg_room_to_f32(g[0], N * F);
        hg_room_to_f32(g[1], N * F);
    }
    float *hgg = down(g[1], N * F), *hgr = bf16 ? rounded(hgg, N * F) : copyf(hg, N * F);
    matmul_forward(out, hgr, w2, b2, N, F, OC, 0);
    cu_matmul_bias_gelu_forward(u[0], u[1], dx, dw1, db1, N, C, F);
    cu_matmul_forward(u[2], u[1], dw2, db2, N, F, OC, 0);
    if (bf16) {   // the unfused fp32 h and hg, rounded as the fused op keeps them
        round_dev(u[0], N * F);
        round_dev(u[1], N * F);
    }
    const char *what[3] = {"h", "GELU(h)", "out"};
    float *ref[3] = {h_cpu, hg, out};
    double t = bf16 ? 1e-5 : 1e-4, tol[3] = {bf16 ? 8e-3 : t, bf16 ? 8e-3 : t, t};   // bf16: a step of 2^-8
    // bf16 on a GPU: c_fc's GEMM with GELU's epilogue against cublasGemmEx and GELU's pass, a bf16 step
    check_fused("mlp_forward", 3, what, g, ref, u, len, tol, bf16 && !emulated() ? 8e-3 : 0);
    cu_free(dx); cu_free(dx16); cu_free(dw1); cu_free(db1); cu_free(dw2); cu_free(db2);
    free(x); free(w1); free(b1); free(w2); free(b2); free(xr); free(hg); free(hgg); free(hgr); free(out);
}

// The MLP's first half backward from the CPU's h: dh = dhg ⊙ GELU'(h) in place with the bias
// gradient (and dh's bf16 copy for the GEMMs) in one pass, then dinp and dw (on bf16 against the
// CPU's GEMMs on the GPU's dh rounded, as in the forward).
static void test_mlp_backward(long N, int C, int F, const float *h) {
    int bf16 = cu_bf16();
    float *x = rnd(N * C, 1, 0), *w = rnd((long)C * F, 1, 0), *dhg = rnd(N * F, 1, 0), *gb = rnd(F, 1, 0);
    float *gw = rnd((long)C * F, 1, 0), *gin = malloc(sizeof(float) * N * C), *dh = malloc(sizeof(float) * N * F);
    float *dx = up(x, sizeof(float) * N * C), *dw = dev_weights(w, (long)C * F), *dhd = up(h, sizeof(float) * N * F);
    float *xr = bf16 ? rounded(x, N * C) : copyf(x, N * C), *g[4], *u[4], *init[4] = {dhg, NULL, gw, gb};
    long len[4] = {N * F, N * C, (long)C * F, F};
    for (int k = 0; k < 4; k++) {
        g[k] = init[k] ? up(init[k], sizeof(float) * len[k]) : dev_zeros(len[k]);
        u[k] = init[k] ? up(init[k], sizeof(float) * len[k]) : dev_zeros(len[k]);
    }
    cu_matmul_bias_gelu_backward(g[1], g[2], g[3], g[0], g[0], dhd, dx, dw, N, C, F);
    gelu_backward(dh, h, dhg, N * F);                               // the CPU in steps: dh, its bias
    matmul_backward(NULL, NULL, gb, dh, xr, w, N, C, F, 0);         // gradient, then the GEMMs on
    float *dhg_ = down(g[0], N * F), *dhr = bf16 ? rounded(dhg_, N * F) : copyf(dh, N * F);   // what they see
    matmul_backward(gin, gw, NULL, dhr, xr, w, N, C, F, 0);
    cu_gelu_backward(u[0], dhd, u[0], N * F);
    cu_matmul_backward(u[1], u[2], u[3], u[0], dx, dw, N, C, F, 0);
    const char *what[4] = {"dh", "dinp", "dw", "dbias"};
    float *ref[4] = {dh, gin, gw, gb};
    double t = bf16 ? 1e-5 : 1e-4, tol[4] = {t, t, t, t};
    check_fused("mlp_backward", 4, what, g, ref, u, len, tol, 0);
    cu_free(dx); cu_free(dw); cu_free(dhd);
    free(x); free(w); free(dhg); free(gb); free(gw); free(gin); free(dh); free(xr); free(dhg_); free(dhr);
}

// The whole dense MLP's backward (mlp_backward: the second GEMM's, then the first half's), from
// the h and hg cu_mlp_forward keeps (bf16 copies on a bf16 run), against the GPU ops it replaces
// on an fp32 h and hg bit for bit (the GEMMs see the same operands; on bf16, h rounded as the
// fused op keeps it, and the first bias's gradient, which the fused op sums from dh's bf16 copy,
// within 4e-3 of the unfused op's sum of the fp32 dh), and on an fp32 run against the CPU's
static void test_mlp_whole_backward(long N, int C, int F, int OC) {
    int bf16 = cu_bf16();
    float *x = rnd(N * C, 1, 0), *w1 = rnd((long)C * F, 1, 0), *b1 = rnd(F, 1, 0), *w2 = rnd((long)F * OC, 1, 0);
    float *dout = rnd(N * OC, 1, 0), *dx = up(x, sizeof(float) * N * C), *dw1 = dev_weights(w1, (long)C * F);
    float *db1 = dev_weights(b1, F), *dw2 = dev_weights(w2, (long)F * OC), *ddout = up(dout, sizeof(float) * N * OC);
    float *h = dev_zeros(N * F), *hg = dev_zeros(N * F), *hu = dev_zeros(N * F), *hgu = dev_zeros(N * F);
    float *dx16 = mlp_input(x, N * C);
    cu_mlp_forward(NULL, h, hg, dx16, dw1, db1, dw2, NULL, N, C, F, OC);   // the hidden state alone
    cu_matmul_bias_gelu_forward(hu, hgu, dx, dw1, db1, N, C, F);          // fp32 hg
    if (bf16) round_dev(hu, N * F);                                       // h as the fused op keeps it
    float *init[4] = {rnd((long)C * F, 1, 0), rnd(F, 1, 0), rnd((long)F * OC, 1, 0), rnd(OC, 1, 0)}, *g[6], *u[6];
    long len[6] = {(long)C * F, F, (long)F * OC, OC, N * C, N * F};
    for (int k = 0; k < 6; k++) {
        g[k] = k < 4 ? up(init[k], sizeof(float) * len[k]) : dev_zeros(len[k]);
        u[k] = k < 4 ? up(init[k], sizeof(float) * len[k]) : dev_zeros(len[k]);
    }
    cu_mlp_backward(g[4], g[0], g[1], g[2], g[3], g[5], ddout, h, hg, dx16, dw1, dw2, N, C, F, OC);
    cu_matmul_backward(u[5], u[2], u[3], ddout, hgu, dw2, N, F, OC, 0);
    cu_matmul_bias_gelu_backward(u[4], u[0], u[1], u[5], u[5], hu, dx, dw1, N, C, F);
    if (bf16) {   // dinp in bf16 alone (layernorm_backward's dout16): the unfused fp32 dinp rounded
        hg_room_to_f32(g[4], N * C);
        round_dev(u[4], N * C);
    }
    float *ref[6];
    if (!bf16) {   // the CPU from the same inputs: forward for h and hg, then mlp_backward
        float *hc = malloc(sizeof(float) * N * F), *hgc = malloc(sizeof(float) * N * F);
        for (int k = 0; k < 6; k++) ref[k] = k < 4 ? copyf(init[k], len[k]) : malloc(sizeof(float) * len[k]);
        matmul_bias_gelu_forward(hc, hgc, x, w1, b1, N, C, F);
        mlp_backward(ref[4], ref[0], ref[1], ref[2], ref[3], ref[5], dout, hc, hgc, x, w1, w2, N, C, F, OC);
        free(hc); free(hgc);
    }
    const char *what[6] = {"gwfc", "gbfc", "gwproj", "gbproj", "dinp", "dh"};
    char name[96];
    for (int k = 0; k < 6; k++) {
        snprintf(name, sizeof name, "%smlp whole backward %s = unfused gpu", run_name(), what[k]);
        // bf16: gbfc from dh's bf16 copy; on a GPU the GEMMs with GELU's epilogues may differ in the
        // last bits (check_fused); dh is scratch (ops.h)
        double close = !bf16 ? 0 : k == 1 ? (emulated() ? 4e-3 : 8e-3) : emulated() ? 0 : 8e-3;
        if (k < 5 || !bf16) same_or_close(name, g[k], u[k], len[k], close);
        if (!bf16) {
            snprintf(name, sizeof name, "%smlp whole backward %s", run_name(), what[k]);
            cmp(name, g[k], ref[k], len[k], 1e-4);
            free(ref[k]);
        }
        cu_free(g[k]); cu_free(u[k]);
    }
    for (int k = 0; k < 4; k++) free(init[k]);
    cu_free(dx); cu_free(dx16); cu_free(dw1); cu_free(db1); cu_free(dw2); cu_free(ddout); cu_free(h); cu_free(hg);
    cu_free(hu); cu_free(hgu);
    free(x); free(w1); free(b1); free(w2); free(dout);
}

static void test_fused(void) {
    test_residual_layernorm(37, 48, 0);
    test_residual_layernorm(300, 70, 0);
    test_residual_layernorm(300, 72, 1);
    test_layernorm_gemm_input(300, 72);
    test_matmul_x16(37, 24, 8);
    if (cu_bf16()) {
        test_layernorm_dout16(37, 48);
        test_layernorm_dout16(1100, 40);
        test_layernorm_dout16(5, 50);
        test_layernorm_dout16(70, 2056);
    }
    // N, C, F, OC: F 72 takes bias + GELU four a thread, 45 one; N 300 past a chunk of rows
    long shapes[2][4] = {{37, 48, 72, 30}, {300, 24, 45, 20}};
    for (int i = 0; i < 2; i++) {
        long N = shapes[i][0];
        int C = (int)shapes[i][1], F = (int)shapes[i][2], OC = (int)shapes[i][3];
        float *h = malloc(sizeof(float) * N * F);
        test_mlp_forward(N, C, F, OC, h);
        test_mlp_backward(N, C, F, h);
        test_mlp_whole_backward(N, C, F, OC);
        free(h);
    }
}

// The optimizer's one-launch step (zero.c on a GPU with fp32 gradients) over a table of segments:
// per-segment and counted sums of squares against the host's, AdamW with the device-side clipping
// against adamw_mixed_host / adamw_f32_host with the host's coefficient, the gradients consumed,
// and a non-finite norm leaving everything but the gradients as it was.
// More segments than the norm's warps (8), sizes around the kernels' 4096-element chunks; the
// first two are aligned for the float4 passes (chunks of 4096, 4 and 8 elements at 16-byte
// offsets), the others not (odd lengths, then odd bases): both paths run.
enum { NSEG = 13 };
static const long seg_len[NSEG] = {8196, 8, 1037, 0, 70001, 5, 4096, 4097, 1, 300, 8191, 12, 4095};
static const int seg_decay[NSEG] = {1, 0, 1, 0, 1, 0, 1, 1, 0, 1, 0, 1, 1};
static const int seg_counted[NSEG] = {1, 1, 1, 1, 1, 0, 1, 0, 1, 1, 1, 1, 0};

// segment i after the step: its gradient zero, its weights the host's (bf16: within a bf16 step
// of the host's rounding of a master 1e-6 apart)
// the gradient after the step: zero (zero_grads), else as it was (zero.c marks it fresh)
static void check_segment(int i, int wbf16, int poison, const char *what, const float *dg, const float *g,
                          int zero_grads, const void *dwout, const float *wout) {
    char name[96];
    float *zeros = calloc(seg_len[i] + 1, sizeof(float));
    snprintf(name, sizeof name, "opt_adamw gradient %d %s (%s)", i, zero_grads ? "zeroed" : "left as it was", what);
    cmp_bits(name, dg, zero_grads ? zeros : g, seg_len[i]);
    free(zeros);
    if (poison) return;
    if (!wbf16) {
        snprintf(name, sizeof name, "opt_adamw fp32 weights %d = master", i);
        cmp(name, dwout, wout, seg_len[i], 1e-6);
        return;
    }
    uint16_t *h16 = malloc(2 * (seg_len[i] + 1));
    cu_memcpy(h16, dwout, 2 * seg_len[i]);
    long off = 0;
    for (long j = 0; j < seg_len[i]; j++) off += fabsf(bf16_to_f32(h16[j]) - wout[j]) > fabsf(wout[j]) / 128;
    snprintf(name, sizeof name, "opt_adamw bf16 weights %d (within a bf16 step)", i);
    report(name, (double)off, 0);
    free(h16);
}

static void test_opt_step(int wbf16, int poison, int zero_grads) {
    char name[96];
    long total = 0, base[NSEG];
    for (int i = 0; i < NSEG; i++) { base[i] = total; total += seg_len[i]; }
    float *w = rnd(total, 1, 0), *m = rnd(total, 0.01f, 0), *v = rnd(total, 0.0001f, 0.0001f);
    float *dw = up(w, sizeof(float) * total), *dm = up(m, sizeof(float) * total), *dv = up(v, sizeof(float) * total);
    float *g[NSEG], *g0[NSEG], *dg[NSEG], *wout[NSEG], *dwout[NSEG];   // g0: g before the host step
    OptSeg seg[NSEG];
    double sq[NSEG + 1], ref_sq[NSEG + 1] = {0};
    for (int i = 0; i < NSEG; i++) {
        g[i] = rnd(seg_len[i], 0.3f, 0);
        if (poison && i == 2) g[i][7] = NAN;
        g0[i] = copyf(g[i], seg_len[i]);
        dg[i] = up(g[i], sizeof(float) * seg_len[i]);
        wout[i] = malloc(sizeof(float) * (seg_len[i] + 1));
        dwout[i] = cu_malloc((wbf16 ? 2 : 4) * (seg_len[i] + 1));
        seg[i] = (OptSeg){dg[i], dwout[i], base[i], seg_len[i], seg_decay[i], seg_counted[i]};
        for (long j = 0; j < seg_len[i]; j++) ref_sq[i] += (double)g[i][j] * g[i][j];
        if (seg_counted[i]) ref_sq[NSEG] += ref_sq[i];
    }
    void *plan = cu_opt_plan(seg, NSEG, wbf16);
    double *dsq = cu_malloc(sizeof(double) * (NSEG + 1));
    cu_opt_norm(plan, dsq);
    cu_memcpy(sq, dsq, sizeof sq);
    for (int i = 0; i <= NSEG && !poison; i++) {
        snprintf(name, sizeof name, "opt_norm %s", i < NSEG ? "segment" : "counted sum");
        cmp_double(name, sq[i], ref_sq[i], 1e-12);
    }
    double norm = sqrt(ref_sq[NSEG]);
    float lr = 3e-4f, clip = (float)(0.5 * norm), bc1 = 1.0f - powf(0.9f, 7), bc2 = 1.0f - powf(0.95f, 7);
    float coef = (float)(clip / (norm + 1e-6));   // zero.c's: the norm is above clip
    OptStep h = {lr / bc1, sqrtf(bc2), 1.0f - lr * 0.1f, 0.9f, 0.95f, 1e-8f, clip, zero_grads};
    cu_opt_adamw(plan, dw, dm, dv, dsq + NSEG, &h);
    float *w0 = copyf(w, total), *m0 = copyf(m, total), *v0 = copyf(v, total);
    for (int i = 0; i < NSEG && !poison; i++) {
        AdamHyper a = {lr, seg_decay[i] ? h.decay : 1.0f, 0.9f, 0.95f, 1e-8f, bc1, bc2};
        uint16_t *w16 = malloc(2 * (seg_len[i] + 1));
        if (wbf16) {
            adamw_mixed_host(w + base[i], m + base[i], v + base[i], g[i], seg_len[i], coef, &a, w16);
            for (long j = 0; j < seg_len[i]; j++) wout[i][j] = bf16_to_f32(w16[j]);
        } else adamw_f32_host(w + base[i], m + base[i], v + base[i], g[i], seg_len[i], coef, &a, wout[i]);
        free(w16);
    }
    const char *what = poison ? "non-finite norm" : wbf16 ? "bf16 weights" : "fp32 weights";
    snprintf(name, sizeof name, "opt_adamw master (%s)", what);
    poison ? cmp_bits(name, dw, w0, total) : cmp(name, dw, w, total, 1e-6);
    snprintf(name, sizeof name, "opt_adamw m (%s)", what);
    poison ? cmp_bits(name, dm, m0, total) : cmp(name, dm, m, total, 1e-6);
    snprintf(name, sizeof name, "opt_adamw v (%s)", what);
    poison ? cmp_bits(name, dv, v0, total) : cmp(name, dv, v, total, 1e-6);
    for (int i = 0; i < NSEG; i++) {
        check_segment(i, wbf16, poison, what, dg[i], g0[i], zero_grads, dwout[i], wout[i]);
        cu_free(dg[i]); cu_free(dwout[i]); free(g[i]); free(g0[i]); free(wout[i]);
    }
    cu_opt_free(plan);
    cu_free(dw); cu_free(dm); cu_free(dv); cu_free(dsq);
    free(w); free(m); free(v); free(w0); free(m0); free(v0);
}

int main(void) {
    if (cu_device_count() == 0) {
        printf("test_cuda_kernels: no CUDA device, skipped\n");
        return 77;
    }
    setenv("TED_LT_TUNE", "1", 1);   // the experts' GEMM classes timed (test_bf16_gemm_classes)
    cu_init(0, 0);             // fp32 GEMMs (no TF32), as the CPU
    ted_device = DEV_CPU;      // the ops of ops.h run on the host: they are the reference
    printf("test_cuda_kernels on %s\n", cu_device_name());
    test_encoder(2, 5, 48, 3, 20, 26);
    test_encoder(4, 37, 50, 10, 30, 45);   // N = 148: the token scan crosses chunks of 32
    test_layernorm(37, 48);
    test_layernorm(1100, 40);
    test_layernorm(5, 50);                 // d not a multiple of 4: a float at a time
    test_layernorm(70, 2056);              // the one-pass backward with 3 column groups, the last short
    test_matmul(37, 48, 70);
    test_matmul(777, 24, 70);
    test_gelu();
    test_fused();
    test_crossentropy(0, 128, 100);   // one shard with 28 padding columns
    test_crossentropy(64, 64, 100);   // a last shard: 36 real columns, targets below it
    test_crossentropy(0, 64, 100);    // a first shard without padding, targets past it
    test_residual();
    test_conversions();
    test_reductions();
    test_adamw();
    test_opt_step(0, 0, 1);
    cu_set_bf16(1);            // as a --bf16 run: bf16 weights and GEMM operands
    test_bf16_gemm_classes();   // test_bf16_matmul too
    test_bf16_gelu_classes();
    test_bf16_norm_embed();
    test_fused();
    test_opt_step(1, 0, 1);
    test_opt_step(1, 0, 0);
    test_opt_step(1, 1, 0);
    cu_set_bf16(0);
    printf("test_cuda_kernels: %s (%d failures)\n", fails ? "FAIL" : "ok", fails);
    return fails ? 1 : 0;
}
