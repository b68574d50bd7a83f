// test_cuda_fused.c — the fused kernels against the CPU ops they replace, on the same random
// inputs; error: max|gpu − cpu| / max(max|cpu|, 0.1) per output, the inputs being of order 1, so
// that 0.1 is the scale below which an output is rounding noise (T 1: dQ = dK = 0 up to it, on
// the CPU as well).
//
// Flash attention (src/cuda/flash_attention.cu) against the CPU attention of ops.c
// (attention_forward / attention_backward) and a log-sum-exp in double (q, k in [−2, 2], dO in
// [−1, 1]), outputs O, lse, dQ, dK, dV:
//  - fp32 inputs: within 1e-5. The products are TF32 splits (hi·hi + hi·lo + lo·hi; the dropped
//    lo·lo is 2^-22 of a product) summed in fp32 in another order than OpenBLAS: a few 1e-7.
//  - bf16 inputs (the CPU runs on the same bf16 values, in fp32): within 1e-2. Each output is
//    rounded once to bf16 (2^-9 = 2e-3 relative), and so are the probabilities P and the
//    softmax gradients dS before their products (each 2^-9 relative, errors of random sign
//    that partly cancel over the sums): measured up to 4.5e-3 (fp32 up to 1.2e-6).
// Shapes: T 1; T not a multiple of the 64-row tile (77, 130: 2 and 3 tiles); hd 64 and 128
// (their own kernels), hd 12 and 48 (zero-padded to 64; hd 12 also copies element by element:
// 24-byte bf16 rows are not 16-byte aligned); B·H > 1. The outputs start as NaN, so an element
// left unwritten fails. A second run of each op gives the same bits.
//
// The fused classifier (src/cuda/classifier.cu) against crossentropy_max, _exp, _finish and
// _backward (logits in [−4, 4], padded columns NaN, one target outside the vocabulary): losses
// within 1e-6 (fp32 in both, sums in another order); the gradient within 1e-6 in fp32 and 4e-3
// in bf16 (the CPU on the same bf16 logits; the gradient rounded once to bf16: at most 2^-9 =
// 2e-3 of the largest); a second run gives the same bits.
// Exits 77 without a GPU.
#include "core/alloc.h"
#include "core/half.h"
#include "cuda/cuda_ops.h"
#include "nn/ops.h"
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fails;
static uint64_t rs = 0x2545F4914F6CDD1Dull;

static uint64_t next(void) {   // xorshift64*
    rs ^= rs >> 12; rs ^= rs << 25; rs ^= rs >> 27;
    return rs * 2685821657736338717ull;
}
static float frand(void) { return (float)((next() >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f; }   // [-1, 1)

static void report(const char *name, double err, double tol) {
    int ok = err <= tol;   // false for NaN
    printf("%-52s max rel err %.3e (tol %.0e) %s\n", name, err, tol, ok ? "ok" : "FAIL");
    if (!ok) fails++;
}

// max|a − b| / max(max|b|, 0.1); a NaN in a is an infinite error
static double rel_err(const float *a, const float *b, long n) {
    double md = 0, mb = 0;
    for (long i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (isnan(d)) return INFINITY;   // (a NaN must not be overwritten by the next element's error)
        if (d > md) md = d;
        if (fabs(b[i]) > mb) mb = fabs(b[i]);
    }
    return md / (mb > 0.1 ? mb : 0.1);
}

typedef struct { int B, T, H, hd; long nqkv, nout, nlse; } Shape;

// the device buffers of one run, inputs as given (fp32 or bf16 bit patterns)
typedef struct { void *qkv, *dout, *out, *dqkv; float *lse, *delta; } Dev;

static void *up(const void *h, size_t bytes) {
    void *d = cu_malloc(bytes);
    if (!d) { fprintf(stderr, "test_cuda_fused: cu_malloc failed\n"); exit(1); }
    if (h) cu_memcpy(d, h, bytes);
    return d;
}
static void *nan_buf(size_t bytes) {   // every fp32 and bf16 NaN
    unsigned char *h = malloc(bytes);
    memset(h, 0xFF, bytes);
    void *d = up(h, bytes);
    free(h);
    return d;
}

// forward and backward on the device; the results back into out, lse, dqkv (as floats)
static void run_flash(const Shape *s, int bf16, const float *qkv, const float *dout, float *out, float *lse,
                      float *dqkv, Dev *keep) {
    size_t es = bf16 ? 2 : 4;
    Dev d;
    d.out = nan_buf(es * s->nout);
    d.dqkv = nan_buf(es * s->nqkv);
    d.lse = nan_buf(4 * s->nlse);
    d.delta = nan_buf(4 * s->nlse);
    if (bf16) {
        uint16_t *h = malloc(2 * s->nqkv);
        for (long i = 0; i < s->nqkv; i++) h[i] = bf16_from_f32(qkv[i]);
        d.qkv = up(h, 2 * s->nqkv);
        for (long i = 0; i < s->nout; i++) h[i] = bf16_from_f32(dout[i]);
        d.dout = up(h, 2 * s->nout);
        cu_flash_attention_forward_bf16(d.out, d.lse, d.qkv, s->B, s->T, s->H, s->hd);
        cu_flash_attention_backward_bf16(d.dqkv, d.delta, d.dout, d.out, d.qkv, d.lse, s->B, s->T, s->H, s->hd);
        cu_memcpy(h, d.out, 2 * s->nout);
        for (long i = 0; i < s->nout; i++) out[i] = bf16_to_f32(h[i]);
        cu_memcpy(h, d.dqkv, 2 * s->nqkv);
        for (long i = 0; i < s->nqkv; i++) dqkv[i] = bf16_to_f32(h[i]);
        // the wide form: its fp32 sums, rounded, are the bf16 form's bits
        float *wide = nan_buf(4 * s->nqkv), *hw = malloc(4 * s->nqkv);
        cu_flash_attention_backward_bf16_wide(wide, d.delta, d.dout, d.out, d.qkv, d.lse, s->B, s->T, s->H, s->hd);
        cu_memcpy(hw, wide, 4 * s->nqkv);
        long off = 0;
        for (long i = 0; i < s->nqkv; i++) off += bf16_from_f32(hw[i]) != h[i];
        char name[96];
        snprintf(name, sizeof name, "flash bwd wide, rounded = bf16 (B%d T%d H%d hd%d)", s->B, s->T, s->H, s->hd);
        report(name, (double)off, 0);
        cu_free(wide);
        free(hw);
        free(h);
    } else {
        d.qkv = up(qkv, 4 * s->nqkv);
        d.dout = up(dout, 4 * s->nout);
        cu_flash_attention_forward(d.out, d.lse, d.qkv, s->B, s->T, s->H, s->hd);
        cu_flash_attention_backward(d.dqkv, d.delta, d.dout, d.out, d.qkv, d.lse, s->B, s->T, s->H, s->hd);
        cu_memcpy(out, d.out, 4 * s->nout);
        cu_memcpy(dqkv, d.dqkv, 4 * s->nqkv);
    }
    cu_memcpy(lse, d.lse, 4 * s->nlse);
    *keep = d;
}

static void free_dev(Dev *d) {
    cu_free(d->qkv); cu_free(d->dout); cu_free(d->out); cu_free(d->dqkv); cu_free(d->lse); cu_free(d->delta);
}

// lse[b, h, t] = log Σ_{u ≤ t} exp(q_t·k_u / √hd), in double
static void lse_ref(float *lse, const float *qkv, const Shape *s) {
    int D = s->H * s->hd, ld = 3 * D;
    double *e = malloc(sizeof(double) * s->T);
    for (int b = 0; b < s->B; b++)
        for (int h = 0; h < s->H; h++)
            for (int t = 0; t < s->T; t++) {
                const float *q = qkv + ((long)b * s->T + t) * ld + h * s->hd;
                double mx = -INFINITY, sum = 0;
                for (int u = 0; u <= t; u++) {
                    const float *k = qkv + ((long)b * s->T + u) * ld + D + h * s->hd;
                    double d = 0;
                    for (int c = 0; c < s->hd; c++) d += (double)q[c] * k[c];
                    e[u] = d / sqrt((double)s->hd);
                    if (e[u] > mx) mx = e[u];
                }
                for (int u = 0; u <= t; u++) sum += exp(e[u] - mx);
                lse[((long)b * s->H + h) * s->T + t] = (float)(mx + log(sum));
            }
    free(e);
}

// the CPU op on the inputs (bf16: rounded to bf16 first): out, lse, dqkv
static void run_cpu(const Shape *s, const float *qkv, const float *dout, float *out, float *lse, float *dqkv) {
    float *att = malloc(sizeof(float) * s->B * s->H * s->T * s->T);
    float *scr = malloc(sizeof(float) * attention_scratch_floats(s->T) * omp_get_max_threads());
    attention_forward(out, att, qkv, s->B, s->T, s->H, s->hd);
    attention_backward(dqkv, dout, att, qkv, out, s->B, s->T, s->H, s->hd, scr);
    lse_ref(lse, qkv, s);
    free(att);
    free(scr);
}

// the q, k or v third (part 0, 1, 2) of dqkv, as a compact array
static void third(float *dst, const float *dqkv, const Shape *s, int part) {
    int D = s->H * s->hd;
    for (long r = 0; r < (long)s->B * s->T; r++) memcpy(dst + r * D, dqkv + r * 3 * D + part * D, sizeof(float) * D);
}

static int same_bits(const void *a, const void *b, size_t bytes) {
    unsigned char *x = malloc(bytes), *y = malloc(bytes);
    cu_memcpy(x, a, bytes);
    cu_memcpy(y, b, bytes);
    int same = memcmp(x, y, bytes) == 0;
    free(x);
    free(y);
    return same;
}

static void test_case(int bf16, int B, int T, int H, int hd, double tol) {
    Shape s = {B, T, H, hd, (long)B * T * 3 * H * hd, (long)B * T * H * hd, (long)B * H * T};
    float *qkv = malloc(4 * s.nqkv), *dout = malloc(4 * s.nout);
    for (long i = 0; i < s.nqkv; i++) qkv[i] = 2.0f * frand();
    for (long i = 0; i < s.nout; i++) dout[i] = frand();
    if (bf16) {   // the CPU reference sees the values the kernels see
        for (long i = 0; i < s.nqkv; i++) qkv[i] = bf16_to_f32(bf16_from_f32(qkv[i]));
        for (long i = 0; i < s.nout; i++) dout[i] = bf16_to_f32(bf16_from_f32(dout[i]));
    }
    float *out = malloc(4 * s.nout), *lse = malloc(4 * s.nlse), *dqkv = malloc(4 * s.nqkv);
    float *r_out = malloc(4 * s.nout), *r_lse = malloc(4 * s.nlse), *r_dqkv = malloc(4 * s.nqkv);
    float *g = malloc(4 * s.nout), *r = malloc(4 * s.nout);
    Dev d1, d2;
    run_flash(&s, bf16, qkv, dout, out, lse, dqkv, &d1);
    run_cpu(&s, qkv, dout, r_out, r_lse, r_dqkv);
    char name[128];
    const char *what[] = {"dQ", "dK", "dV"};
    snprintf(name, sizeof name, "%s B %d T %d H %d hd %d: O", bf16 ? "bf16" : "fp32", B, T, H, hd);
    report(name, rel_err(out, r_out, s.nout), tol);
    snprintf(name, sizeof name, "%s B %d T %d H %d hd %d: lse", bf16 ? "bf16" : "fp32", B, T, H, hd);
    report(name, rel_err(lse, r_lse, s.nlse), 1e-6);   // fp32 sums of exact products
    for (int part = 0; part < 3; part++) {
        third(g, dqkv, &s, part);
        third(r, r_dqkv, &s, part);
        snprintf(name, sizeof name, "%s B %d T %d H %d hd %d: %s", bf16 ? "bf16" : "fp32", B, T, H, hd, what[part]);
        report(name, rel_err(g, r, s.nout), tol);
    }
    run_flash(&s, bf16, qkv, dout, out, lse, dqkv, &d2);   // again: the same bits
    size_t es = bf16 ? 2 : 4;
    int same = same_bits(d1.out, d2.out, es * s.nout) && same_bits(d1.lse, d2.lse, 4 * s.nlse) &&
               same_bits(d1.dqkv, d2.dqkv, es * s.nqkv) && same_bits(d1.delta, d2.delta, 4 * s.nlse);
    snprintf(name, sizeof name, "%s B %d T %d H %d hd %d: second run bit-identical", bf16 ? "bf16" : "fp32", B, T, H, hd);
    report(name, same ? 0.0 : 1.0, 0);
    free_dev(&d1);
    free_dev(&d2);
    free(qkv); free(dout); free(out); free(lse); free(dqkv); free(r_out); free(r_lse); free(r_dqkv); free(g); free(r);
}

// ---- the fused classifier -----------------------------------------------------------------
static void test_classifier(int bf16, long N, int V, int Vl) {
    float *x = malloc(4 * N * Vl), *ref = malloc(4 * N * Vl), *got = malloc(4 * N * Vl);
    float *loss = malloc(4 * N), *r_loss = malloc(4 * N), *mx = malloc(4 * N), *tl = malloc(4 * N);
    float *sum = malloc(4 * N), scale = 0.5f;
    int *tg = malloc(sizeof(int) * N);
    for (long i = 0; i < N; i++) {
        tg[i] = i == 1 ? -1 : (int)(next() % (uint64_t)V);   // row 1: a target outside the vocabulary
        for (int c = 0; c < Vl; c++) {
            float v = 4.0f * frand();
            x[i * Vl + c] = c >= V ? NAN : bf16 ? bf16_to_f32(bf16_from_f32(v)) : v;
        }
    }
    memcpy(ref, x, 4 * N * Vl);
    crossentropy_max(mx, tl, ref, tg, N, 0, Vl, V);
    crossentropy_exp(sum, ref, mx, N, 0, Vl, V);
    crossentropy_finish(r_loss, ref, mx, sum, tl, N, Vl);
    crossentropy_backward(ref, tg, N, 0, Vl, scale);
    int *dtg = up(tg, sizeof(int) * N);
    float *dloss[2];
    void *dx[2];
    size_t es = bf16 ? 2 : 4;
    for (int run = 0; run < 2; run++) {
        dloss[run] = nan_buf(4 * N);
        dx[run] = cu_malloc(es * N * Vl);
        if (bf16) {
            uint16_t *h = malloc(2 * N * Vl);
            for (long i = 0; i < N * Vl; i++) h[i] = bf16_from_f32(x[i]);
            cu_memcpy(dx[run], h, 2 * N * Vl);
            cu_fused_classifier_bf16(dloss[run], dx[run], dtg, N, V, Vl, scale);
            cu_memcpy(h, dx[run], 2 * N * Vl);
            for (long i = 0; i < N * Vl; i++) got[i] = bf16_to_f32(h[i]);
            free(h);
        } else {
            cu_memcpy(dx[run], x, 4 * N * Vl);
            cu_fused_classifier(dloss[run], dx[run], dtg, N, V, Vl, scale);
            cu_memcpy(got, dx[run], 4 * N * Vl);
        }
    }
    cu_memcpy(loss, dloss[0], 4 * N);
    char name[128];
    snprintf(name, sizeof name, "classifier %s N %ld V %d Vl %d: losses", bf16 ? "bf16" : "fp32", N, V, Vl);
    report(name, rel_err(loss, r_loss, N), 1e-6);
    snprintf(name, sizeof name, "classifier %s N %ld V %d Vl %d: dlogits", bf16 ? "bf16" : "fp32", N, V, Vl);
    report(name, rel_err(got, ref, N * Vl), bf16 ? 4e-3 : 1e-6);
    snprintf(name, sizeof name, "classifier %s N %ld V %d Vl %d: second run bit-identical", bf16 ? "bf16" : "fp32",
             N, V, Vl);
    report(name, same_bits(dloss[0], dloss[1], 4 * N) && same_bits(dx[0], dx[1], es * N * Vl) ? 0.0 : 1.0, 0);
    for (int run = 0; run < 2; run++) { cu_free(dloss[run]); cu_free(dx[run]); }
    cu_free(dtg);
    free(x); free(ref); free(got); free(loss); free(r_loss); free(mx); free(tl); free(sum); free(tg);
}

int main(void) {
    if (cu_device_count() == 0) {
        printf("test_cuda_fused: no CUDA device, skipped\n");
        return 77;
    }
    cu_init(0, 0);
    ted_device = DEV_CPU;   // the ops of ops.h run on the host: they are the reference
    printf("test_cuda_fused on %s\n", cu_device_name());
    for (int bf16 = 0; bf16 <= 1; bf16++) {
        double tol = bf16 ? 1e-2 : 1e-5;
        test_case(bf16, 1, 1, 2, 64, tol);     // one query
        test_case(bf16, 2, 77, 2, 64, tol);    // two query tiles, the second partial
        test_case(bf16, 1, 130, 1, 128, tol);  // three tiles, the 128-wide kernels
        test_case(bf16, 2, 40, 3, 12, tol);    // padded head dim, element-wise copies (bf16)
        test_case(bf16, 1, 70, 2, 48, tol);    // padded head dim, 16-byte copies
        test_case(bf16, 1, 250, 1, 64, tol);   // four tiles: whole ones off the diagonal, a partial diagonal one
        // the bf16 forward's 128-row query tiles, two whole and one partial (fp32: sums over 300 keys,
        // 1.05e-5 on an H200)
        test_case(bf16, 1, 300, 1, 128, bf16 ? tol : 2e-5);
        test_classifier(bf16, 37, 1000, 1024);   // 24 padded columns
        test_classifier(bf16, 5, 333, 333);      // no padding, not a multiple of the block
    }
    printf("test_cuda_fused: %s (%d failures)\n", fails ? "FAIL" : "ok", fails);
    return fails ? 1 : 0;
}
