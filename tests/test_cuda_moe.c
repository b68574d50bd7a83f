// test_cuda_moe.c — the CUDA attention (the T×T path of src/cuda/attention.cu, and the ops'
// flash twins), router, dispatcher and experts (src/cuda/moe.cu) against the CPU ops on the
// same random inputs: outputs within 1e-4 (GEMMs)
// or 1e-5 (the rest) of the CPU's, relative to the largest CPU value; router choices, slots,
// kept and the statistics' counts exactly. Then attention and the experts as a --bf16 run has
// them (bf16 weights, bf16 GEMM operands, fp32 accumulation) against the CPU on bf16-rounded
// inputs: what is computed from rounded operands alone (h, GELU(h)) within 1e-5, what a
// rounded hidden state or gradient feeds (the probabilities, y, the backward) within 1e-2.
// Exits 77 (skipped) without a GPU.
#include "core/half.h"
#include "cuda/cuda_ops.h"
#include "moe/dispatcher.h"
#include "moe/moe_cuda.h"
#include "moe/experts.h"
#include "nn/ops.h"
#include "moe/router.h"
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures = 0;
static uint64_t rng = 0x9E3779B97F4A7C15ull;

static float frand(void) {   // uniform in [-1, 1)
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (float)((rng >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}
static int irand(int n) {
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (int)((rng >> 33) % (uint64_t)n);
}

static void *xmalloc(size_t bytes) {
    void *p = calloc(1, bytes ? bytes : 1);
    if (!p) { fprintf(stderr, "out of memory\n"); exit(1); }
    return p;
}
static float *frandom(long n, float s) {
    float *p = xmalloc(sizeof(float) * n);
    for (long i = 0; i < n; i++) p[i] = s * frand();
    return p;
}
static void *dev_copy(const void *h, size_t bytes) {
    void *d = cu_malloc(bytes ? bytes : 1);
    if (!d) { fprintf(stderr, "cu_malloc failed\n"); exit(1); }
    if (bytes) cu_memcpy(d, h, bytes);
    return d;
}
static void *host_copy(const void *d, size_t bytes) {
    void *h = xmalloc(bytes);
    if (bytes) cu_memcpy(h, d, bytes);
    return h;
}

// A bf16 room's n values as floats again, in place; a device array rounded to bf16, in place
static void room_to_f32(float *d, long n) {
    float *raw = host_copy(d, sizeof(float) * n);
    float *f = xmalloc(sizeof(float) * (n ? n : 1));
    for (long i = 0; i < n; i++) f[i] = bf16_to_f32(((const uint16_t *)raw)[i]);
    cu_memcpy(d, f, sizeof(float) * n);
    free(raw); free(f);
}
static void round_dev(float *d, long n) {
    float *x = host_copy(d, sizeof(float) * n);
    for (long i = 0; i < n; i++) x[i] = bf16_to_f32(bf16_from_f32(x[i]));
    cu_memcpy(d, x, sizeof(float) * n);
    free(x);
}

// x[n]'s bf16 copy into the first half of the device room d_hg (as the ops keep bf16-only rooms)
static void upload_hg_half(float *d_hg, const float *hg, long n) {
    uint16_t *h16 = xmalloc(sizeof(uint16_t) * (n ? n : 1));
    for (long i = 0; i < n; i++) h16[i] = bf16_from_f32(hg[i]);
    cu_memcpy(d_hg, h16, sizeof(uint16_t) * n);
    free(h16);
}

// max |a − b| / (max |b| + 1e-6) of the GPU's a against the CPU's b; prints one line
static void check(const char *what, const float *gpu_dev, const float *cpu, long n, double tol) {
    float *a = host_copy(gpu_dev, sizeof(float) * n);
    double md = 0, mb = 0;
    int bad = 0;
    for (long i = 0; i < n; i++) {
        double d = fabs((double)a[i] - cpu[i]);
        if (!(d <= md)) md = d;   // NaN sticks
        if (fabs(cpu[i]) > mb) mb = fabs(cpu[i]);
        if (isnan(a[i]) != isnan(cpu[i])) bad = 1;
    }
    double err = md / (mb + 1e-6);
    int ok = !bad && err <= tol;
    printf("%-44s rel err %.3e (max |cpu| %.3g)  %s\n", what, err, mb, ok ? "ok" : "FAIL");
    if (!ok) failures++;
    free(a);
}

static void check_int(const char *what, const int *gpu_dev, const int *cpu, long n) {
    int *a = host_copy(gpu_dev, sizeof(int) * n);
    long diff = 0, first = -1;
    for (long i = 0; i < n; i++)
        if (a[i] != cpu[i]) { if (first < 0) first = i; diff++; }
    printf("%-44s %ld of %ld differ", what, diff, n);
    if (diff) printf(" (first at %ld: gpu %d cpu %d)  FAIL\n", first, a[first], cpu[first]);
    else printf("  ok\n");
    if (diff) failures++;
    free(a);
}

static void checkn(const char *op, const char *name, const char *field, const float *gpu_dev, const float *cpu,
                   long n, double tol) {
    char what[224];
    snprintf(what, sizeof what, "%s %s %s", op, name, field);
    check(what, gpu_dev, cpu, n, tol);
}
static void checkn_int(const char *op, const char *name, const char *field, const int *gpu_dev, const int *cpu,
                       long n) {
    char what[224];
    snprintf(what, sizeof what, "%s %s %s", op, name, field);
    check_int(what, gpu_dev, cpu, n);
}

static void expect(int cond, const char *what) {
    printf("%-44s %s\n", what, cond ? "ok" : "FAIL");
    if (!cond) failures++;
}

// x[n] rounded to bf16 in place (bf16: else left as it is); a device copy in the run's weight type
static void *weights_up(float *x, long n, int bf16) {
    if (!bf16) return dev_copy(x, sizeof(float) * n);
    uint16_t *h = xmalloc(2 * (size_t)n);
    for (long i = 0; i < n; i++) { h[i] = bf16_from_f32(x[i]); x[i] = bf16_to_f32(h[i]); }
    void *d = dev_copy(h, 2 * (size_t)n);
    free(h);
    return d;
}
static float *rounded_if(const float *x, long n, int bf16) {
    float *r = xmalloc(sizeof(float) * n);
    for (long i = 0; i < n; i++) r[i] = bf16 ? bf16_to_f32(bf16_from_f32(x[i])) : x[i];
    return r;
}

// ---------------------------------------------------------------------------------------

static void test_attention(int B, int T, int H, int hd) {
    int D = H * hd;
    char what[96];
    long N = (long)B * T, nq = N * 3 * D, na = (long)B * H * T * T, no = N * D;
    int bf16 = cu_bf16();
    double tol = bf16 ? 1e-2 : 1e-4;   // bf16: q, k, v, the probabilities and dout meet the GEMMs rounded
    float *qkv = frandom(nq, 1.5f), *dout = frandom(no, 1.0f);
    float *out = xmalloc(sizeof(float) * no), *att = xmalloc(sizeof(float) * na);
    float *dqkv = xmalloc(sizeof(float) * nq), *qr = rounded_if(qkv, nq, bf16);
    float *scratch = xmalloc(sizeof(float) * attention_scratch_floats(T) * omp_get_max_threads());
    attention_forward(out, att, qr, B, T, H, hd);
    attention_backward(dqkv, dout, att, qr, out, B, T, H, hd, scratch);

    float *d_qkv = dev_copy(qkv, sizeof(float) * nq), *d_dout = dev_copy(dout, sizeof(float) * no);
    float *junk = frandom(nq > na ? nq : na, 100.0f);   // outputs start as garbage: all must be written
    float *d_out = dev_copy(junk, sizeof(float) * no), *d_att = dev_copy(junk, sizeof(float) * na);
    float *d_dqkv = dev_copy(junk, sizeof(float) * nq), *d_scratch = dev_copy(junk, sizeof(float) * na);
    cu_attention_tt_forward(d_out, d_att, d_qkv, B, T, H, hd);
    snprintf(what, sizeof what, "attention_tt_forward T=%d att", T);  check(what, d_att, att, na, bf16 ? 1e-5 : 1e-4);
    snprintf(what, sizeof what, "attention_tt_forward T=%d out", T);  check(what, d_out, out, no, tol);
    // backward from the CPU's att, so that it is tested on its own
    cu_memcpy(d_att, att, sizeof(float) * na);
    cu_attention_tt_backward(d_dqkv, d_dout, d_att, d_qkv, B, T, H, hd, d_scratch);
    snprintf(what, sizeof what, "attention_tt_backward T=%d dqkv", T);  check(what, d_dqkv, dqkv, nq, tol);
    // the ops' twins: flash attention (its log-sum-exp: test_cuda_fused); bf16: over bf16 copies
    // of q, k, v, dout and out, the outputs rounded to bf16
    cu_memcpy(d_out, junk, sizeof(float) * no);
    cu_memcpy(d_dqkv, junk, sizeof(float) * nq);
    cu_attention_forward(d_out, d_att, d_qkv, B, T, H, hd);
    cu_attention_backward(d_dqkv, d_dout, d_att, d_qkv, d_out, B, T, H, hd, d_scratch);
    snprintf(what, sizeof what, "attention_forward (flash) T=%d out", T);  check(what, d_out, out, no, tol);
    snprintf(what, sizeof what, "attention_backward (flash) T=%d dqkv", T);  check(what, d_dqkv, dqkv, nq, tol);
    cu_free(d_qkv); cu_free(d_dout); cu_free(d_out); cu_free(d_att); cu_free(d_dqkv); cu_free(d_scratch);
    free(qkv); free(dout); free(out); free(att); free(dqkv); free(scratch); free(junk); free(qr);
}

// attn_proj_forward / _backward (attention and its output projection; on a bf16 run atty and datty
// kept as their bf16 copies only, and qkv taken as qkv_forward keeps it) against the GPU ops they
// replace, bit for bit (on a GPU, datty and dqkv within a bf16 step: its cuBLAS may take another
// kernel for a bf16 C), and on fp32 against the CPU
static void same_bits(const char *what, const float *a_dev, const float *b_dev, long n) {
    float *a = host_copy(a_dev, sizeof(float) * n), *b = host_copy(b_dev, sizeof(float) * n);
    int ok = !memcmp(a, b, sizeof(float) * n);
    printf("%-44s %s\n", what, ok ? "same bits  ok" : "differ  FAIL");
    failures += !ok;
    free(a); free(b);
}
// x[n] on the device: its bf16 first half widened in place; round: also round this fp32 buffer to bf16
static void widen_room(float *x, long n, float *round) {
    float *raw = host_copy(x, sizeof(float) * n), *wide = xmalloc(sizeof(float) * n);
    for (long i = 0; i < n; i++) wide[i] = bf16_to_f32(((const uint16_t *)raw)[i]);
    cu_memcpy(x, wide, sizeof(float) * n);
    if (round) {
        float *r = host_copy(round, sizeof(float) * n);
        for (long i = 0; i < n; i++) r[i] = bf16_to_f32(bf16_from_f32(r[i]));
        cu_memcpy(round, r, sizeof(float) * n);
        free(r);
    }
    free(raw); free(wide);
}

static void test_attn_proj(int B, int T, int H, int hd, int OC) {
    int D = H * hd, bf16 = cu_bf16();
    long N = (long)B * T, nq = N * 3 * D, no = N * D, nl = (long)B * H * T;
    float *qkv = frandom(nq, 1.5f), *w = frandom((long)D * OC, 0.3f), *bias = frandom(OC, 0.3f);
    float *dout = frandom(N * OC, 1.0f), *gw0 = frandom((long)D * OC, 0.1f), *gb0 = frandom(OC, 0.1f);
    float *d_qkv = dev_copy(qkv, sizeof(float) * nq), *d_dout = dev_copy(dout, sizeof(float) * N * OC);
    float *d_w = weights_up(w, (long)D * OC, bf16), *d_b = weights_up(bias, OC, bf16);
    float *f[8], *u[8];   // out, atty, att (lse), dqkv, gw, gb, datty, scratch: fused, unfused
    long len[8] = {N * OC, no, nl, nq, (long)D * OC, OC, no, nl};
    for (int k = 0; k < 8; k++) {
        const float *init = k == 4 ? gw0 : k == 5 ? gb0 : NULL;
        f[k] = init ? dev_copy(init, sizeof(float) * len[k]) : cu_malloc(sizeof(float) * len[k]);
        u[k] = init ? dev_copy(init, sizeof(float) * len[k]) : cu_malloc(sizeof(float) * len[k]);
    }
    float *d_room = d_qkv;   // bf16: qkv's room as qkv_forward leaves it, its bf16 copy first
    if (bf16) {
        uint16_t *h16 = xmalloc(sizeof(uint16_t) * nq);
        for (long i = 0; i < nq; i++) h16[i] = bf16_from_f32(qkv[i]);
        d_room = cu_malloc(sizeof(float) * nq);
        cu_memcpy(d_room, h16, sizeof(uint16_t) * nq);
        free(h16);
    }
    cu_attn_proj_forward(f[0], f[1], f[2], d_room, d_w, d_b, B, T, H, hd, OC);
    cu_attn_proj_backward(f[3], f[4], f[5], f[6], d_dout, f[2], d_room, f[1], d_w, B, T, H, hd, OC, f[7]);
    if (bf16) cu_free(d_room);
    cu_attention_forward(u[1], u[2], d_qkv, B, T, H, hd);
    cu_matmul_forward(u[0], u[1], d_w, d_b, N, D, OC, 0);
    cu_matmul_backward(u[6], u[4], u[5], d_dout, u[1], d_w, N, D, OC, 0);
    cu_attention_backward(u[3], u[6], u[2], d_qkv, u[1], B, T, H, hd, u[7]);
    const char *name[7] = {"out", "atty", "lse", "dqkv", "gwproj", "gbproj", "datty"};
    char what[96];
    if (bf16) {   // atty: its bf16 copy in the fused op's room, widened, is the unfused fp32 atty;
        // dqkv and datty: the fused op's bf16 copies (for qkv_backward, and the flash backward's dO),
        // widened, are the unfused fp32 ones rounded
        widen_room(f[1], no, NULL);
        widen_room(f[3], nq, u[3]);
        widen_room(f[6], no, u[6]);
    }
    for (int k = 0; k < 7; k++) {
        snprintf(what, sizeof what, "%sattn_proj T=%d %s = unfused", bf16 ? "bf16 " : "", T, name[k]);
        if (bf16 && (k == 3 || k == 6) && !strstr(cu_device_name(), "emulation")) {
            // a GPU's cuBLAS may take another kernel for datty's bf16 GEMM than for the fp32 one
            float *uh = host_copy(u[k], sizeof(float) * len[k]);
            check(what, f[k], uh, len[k], 8e-3);
            free(uh);
        } else same_bits(what, f[k], u[k], len[k]);
    }
    if (!bf16) {   // the CPU: the probabilities in att (B·H·T·T), its scratch per thread
        float *out = xmalloc(sizeof(float) * N * OC), *atty = xmalloc(sizeof(float) * no);
        float *att = xmalloc(sizeof(float) * nl * T), *dqkv = xmalloc(sizeof(float) * nq);
        float *datty = xmalloc(sizeof(float) * no);
        float *scratch = xmalloc(sizeof(float) * attention_scratch_floats(T) * omp_get_max_threads());
        attn_proj_forward(out, atty, att, qkv, w, bias, B, T, H, hd, OC);
        attn_proj_backward(dqkv, gw0, gb0, datty, dout, att, qkv, atty, w, B, T, H, hd, OC, scratch);
        float *ref[7] = {out, atty, NULL, dqkv, gw0, gb0, datty};
        for (int k = 0; k < 7; k++) {
            if (!ref[k]) continue;
            snprintf(what, sizeof what, "attn_proj T=%d %s", T, name[k]);
            check(what, f[k], ref[k], len[k], 1e-4);
        }
        free(out); free(atty); free(att); free(dqkv); free(datty); free(scratch);
    }
    for (int k = 0; k < 8; k++) { cu_free(f[k]); cu_free(u[k]); }
    cu_free(d_qkv); cu_free(d_dout); cu_free(d_w); cu_free(d_b);
    free(qkv); free(w); free(bias); free(dout); free(gw0); free(gb0);
}

// qkv_forward: on fp32 the layernorm_forward and matmul_forward it is, bit for bit (ln, mean, rstd,
// qkv); on bf16 the same mean and rstd, ln's bf16 copy (its room's first half) the fp32 output
// rounded (within one bf16 step: the compiler may contract the two forms' arithmetic apart),
// qkv's bf16 copy within one bf16 step of the fp32 GEMM's result rounded (the library may sum in
// another order for a bf16 C), and the rest of both rooms untouched
static long bf16_half_off(const float *room_dev, const float *ref_dev, const float *junk, long n, float tol) {
    float *got = host_copy(room_dev, sizeof(float) * n), *want = host_copy(ref_dev, sizeof(float) * n);
    const uint16_t *q = (const uint16_t *)got;
    long off = 0;
    for (long i = 0; i < n; i++) {
        float r = bf16_to_f32(bf16_from_f32(want[i])), g = bf16_to_f32(q[i]);
        off += tol > 0 ? fabsf(g - r) > fabsf(r) * tol + 1e-30f : memcmp(&g, &r, sizeof g) != 0;
    }
    for (long i = (n + 1) / 2; i < n; i++) off += memcmp(&got[i], &junk[i], sizeof(float)) != 0;
    free(got); free(want);
    return off;
}
static void test_qkv_forward(long N, int C, int OC, int with_bias) {
    int bf16 = cu_bf16();
    float *x = frandom(N * C, 1.0f), *w = frandom((long)C * OC, 0.3f), *b = frandom(OC, 0.3f);
    float *lw = frandom(C, 1.0f), *lb = frandom(C, 0.2f);
    float *d_x = dev_copy(x, sizeof(float) * N * C), *d_w = weights_up(w, (long)C * OC, bf16);
    float *d_b = weights_up(b, OC, bf16), *bias = with_bias ? d_b : NULL;
    float *d_lw = weights_up(lw, C, bf16), *d_lb = weights_up(lb, C, bf16);
    float *junk = frandom(N * OC, 9.0f), *room = dev_copy(junk, sizeof(float) * N * OC);
    float *ljunk = frandom(N * C, 9.0f), *ln = dev_copy(ljunk, sizeof(float) * N * C);
    float *ref = cu_malloc(sizeof(float) * N * OC);
    float *ln_ref = cu_malloc(sizeof(float) * N * C), *st = cu_malloc(sizeof(float) * 4 * N);
    cu_qkv_forward(room, ln, st, st + N, d_x, d_lw, d_lb, d_w, bias, N, C, OC);
    cu_layernorm_forward(ln_ref, st + 2 * N, st + 3 * N, d_x, d_lw, d_lb, N, C, 0);
    cu_matmul_forward(ref, ln_ref, d_w, bias, N, C, OC, 0);
    char what[96];
    snprintf(what, sizeof what, "%sqkv_forward N=%ld OC=%d%s", bf16 ? "bf16 " : "", N, OC, with_bias ? "" : " no bias");
    same_bits("qkv_forward: mean, rstd = layernorm_forward's", st, st + 2 * N, 2 * N);
    if (!bf16) {
        same_bits(what, room, ref, N * OC);
        same_bits("qkv_forward: ln = layernorm_forward's", ln, ln_ref, N * C);
    } else {
        long off = bf16_half_off(room, ref, junk, N * OC, 1.0f / 128);
        printf("%-44s %s (%ld off)\n", what, off ? "FAIL" : "ok", off);
        failures += off != 0;
        off = bf16_half_off(ln, ln_ref, ljunk, N * C, 1.0f / 128);   // one bf16 step at most
        printf("%-44s %s (%ld off)\n", "bf16 qkv_forward: ln = layernorm's, rounded", off ? "FAIL" : "ok", off);
        failures += off != 0;
    }
    cu_free(d_x); cu_free(d_w); cu_free(d_b); cu_free(d_lw); cu_free(d_lb); cu_free(room); cu_free(ref);
    cu_free(ln); cu_free(ln_ref); cu_free(st);
    free(x); free(w); free(b); free(lw); free(lb); free(junk); free(ljunk);
}

// qkv_backward against matmul_backward, bit for bit: on fp32 from the same dqkv and ln; on bf16 from
// dqkv's and ln's bf16 copies in their buffers' first halves (as attn_proj_backward and qkv_forward
// leave them) against the same values in fp32
static void test_qkv_backward(long N, int C, int OC) {
    int bf16 = cu_bf16();
    float *x = frandom(N * C, 1.0f), *w = frandom((long)C * OC, 0.3f), *g = frandom(N * OC, 1.0f);
    float *gw = frandom((long)C * OC, 0.1f), *gb = frandom(OC, 0.1f);
    if (bf16) {
        for (long i = 0; i < N * OC; i++) g[i] = bf16_to_f32(bf16_from_f32(g[i]));
        for (long i = 0; i < N * C; i++) x[i] = bf16_to_f32(bf16_from_f32(x[i]));
    }
    float *d_x = dev_copy(x, sizeof(float) * N * C), *d_w = weights_up(w, (long)C * OC, bf16);
    float *d_g = dev_copy(g, sizeof(float) * N * OC), *room = d_g, *lroom = d_x;
    if (bf16) {   // the bf16 copies in the rooms' first halves
        room = dev_copy(g, sizeof(float) * N * OC);
        lroom = dev_copy(x, sizeof(float) * N * C);
        uint16_t *h16 = xmalloc(sizeof(uint16_t) * (N * OC > N * C ? N * OC : N * C));
        for (long i = 0; i < N * OC; i++) h16[i] = bf16_from_f32(g[i]);
        cu_memcpy(room, h16, sizeof(uint16_t) * N * OC);
        for (long i = 0; i < N * C; i++) h16[i] = bf16_from_f32(x[i]);
        cu_memcpy(lroom, h16, sizeof(uint16_t) * N * C);
        free(h16);
    }
    float *f[3] = {cu_malloc(sizeof(float) * N * C), dev_copy(gw, sizeof(float) * C * OC), dev_copy(gb, 4 * OC)};
    float *u[3] = {cu_malloc(sizeof(float) * N * C), dev_copy(gw, sizeof(float) * C * OC), dev_copy(gb, 4 * OC)};
    cu_qkv_backward(f[0], f[1], f[2], room, lroom, d_w, N, C, OC);
    cu_matmul_backward(u[0], u[1], u[2], d_g, d_x, d_w, N, C, OC, 0);
    if (bf16) {   // dinp in bf16 alone (layernorm_backward's dout16): matmul_backward's rounded
        room_to_f32(f[0], N * C);
        round_dev(u[0], N * C);
    }
    const char *name[3] = {"dinp", "dw", "dbias"};
    long len[3] = {N * C, (long)C * OC, OC};
    char what[96];
    for (int k = 0; k < 3; k++) {
        snprintf(what, sizeof what, "%sqkv_backward %s = matmul_backward", bf16 ? "bf16 " : "", name[k]);
        same_bits(what, f[k], u[k], len[k]);
        cu_free(f[k]); cu_free(u[k]);
    }
    if (bf16) { cu_free(room); cu_free(lroom); }
    cu_free(d_x); cu_free(d_w); cu_free(d_g);
    free(x); free(w); free(g); free(gw); free(gb);
}

// The head's pair from x's bf16 copy alone, as layernorm_forward's gemm_input leaves ln_f (inp16),
// against the same from fp32 x: the losses, the logits' room and the backward's f, bit for bit
static void head_loss_inp16(const float *x, const float *gw, const float *d_w, const int *d_t, const float *loss,
                            const float *room, const float *junk, float *const f[2], long N, int C, int V, int Vl,
                            float scale) {
    long n = N * Vl, len[2] = {N * C, (long)Vl * C};
    float *d_x16 = dev_copy(x, sizeof(float) * N * C), *room16 = dev_copy(junk, sizeof(float) * n);
    float *loss16 = cu_malloc(sizeof(float) * N);
    float *f16[2] = {cu_malloc(sizeof(float) * len[0]), dev_copy(gw, sizeof(float) * len[1])};
    upload_hg_half(d_x16, x, N * C);
    cu_head_loss_forward(loss16, room16, d_x16, 1, d_w, d_t, N, C, V, Vl, scale);
    same_bits("bf16 head_loss_forward, bf16 input (inp16): losses", loss16, loss, N);
    same_bits("bf16 head_loss_forward, bf16 input (inp16): room", room16, room, n);
    cu_head_loss_backward(f16[0], f16[1], room16, d_x16, 1, d_w, N, C, Vl);
    room_to_f32(f16[0], len[0]);   // dinp in bf16 alone (inp16): the fp32 path's rounded
    float *h0 = host_copy(f[0], sizeof(float) * len[0]), *r0 = dev_copy(h0, sizeof(float) * len[0]);
    round_dev(r0, len[0]);
    free(h0);
    same_bits("bf16 head_loss_backward, bf16 input (inp16): dinp", f16[0], r0, len[0]);
    cu_free(r0);
    same_bits("bf16 head_loss_backward, bf16 input (inp16): dw", f16[1], f[1], len[1]);
    cu_free(d_x16); cu_free(room16); cu_free(loss16); cu_free(f16[0]); cu_free(f16[1]);
}

// head_loss_forward (logits room, targets t in [0, V), Vl - V padded columns) against the ops it
// joins: on fp32 linear_forward + the fused classifier, bit for bit; on bf16 the classifier's bf16
// form on the fp32 GEMM's logits rounded (losses within 2e-3, each gradient within 1/32; the
// room's second half untouched). Then head_loss_backward from that room against
// linear_backward from the same bf16 values in fp32, bit for bit.
static void test_head_loss(long N, int C, int V, int Vl) {
    int bf16 = cu_bf16();
    long n = N * Vl;
    float *x = frandom(N * C, 1.0f), *w = frandom((long)Vl * C, 0.5f), *gw = frandom((long)Vl * C, 0.1f);
    float *junk = frandom(n, 9.0f), scale = 0.25f;
    int *tg = xmalloc(sizeof(int) * N);
    for (long i = 0; i < N; i++) tg[i] = (int)((i * 7 + 3) % V);
    float *d_x = dev_copy(x, sizeof(float) * N * C), *d_w = weights_up(w, (long)Vl * C, bf16);
    int *d_t = dev_copy(tg, sizeof(int) * N);
    float *room = dev_copy(junk, sizeof(float) * n), *ref = cu_malloc(sizeof(float) * n);
    float *loss = cu_malloc(sizeof(float) * N), *rloss = cu_malloc(sizeof(float) * N);
    cu_head_loss_forward(loss, room, d_x, 0, d_w, d_t, N, C, V, Vl, scale);
    cu_linear_forward(ref, Vl, d_x, C, d_w, N, C, Vl, 0);
    char what[96];
    long off = 0;
    float *g16f = xmalloc(sizeof(float) * n);   // the gradient the backward reads, as floats
    if (!bf16) {
        cu_fused_classifier(rloss, ref, d_t, N, V, Vl, scale);
        snprintf(what, sizeof what, "head_loss_forward N=%ld V=%d Vl=%d: losses", N, V, Vl);
        same_bits(what, loss, rloss, N);
        snprintf(what, sizeof what, "head_loss_forward N=%ld V=%d Vl=%d: dlogits", N, V, Vl);
        same_bits(what, room, ref, n);
        float *h = host_copy(room, sizeof(float) * n);
        memcpy(g16f, h, sizeof(float) * n);
        free(h);
    } else {
        float *lg = host_copy(ref, sizeof(float) * n);
        uint16_t *r16 = xmalloc(sizeof(uint16_t) * n);
        for (long i = 0; i < n; i++) r16[i] = bf16_from_f32(lg[i]);
        uint16_t *d_r16 = dev_copy(r16, sizeof(uint16_t) * n);
        cu_fused_classifier_bf16(rloss, d_r16, d_t, N, V, Vl, scale);
        float *got = host_copy(room, sizeof(float) * n), *l1 = host_copy(loss, 4 * N), *l2 = host_copy(rloss, 4 * N);
        uint16_t *want = host_copy(d_r16, sizeof(uint16_t) * n);
        const uint16_t *q = (const uint16_t *)got;
        // a GPU's bf16-output GEMM may sum in another order than its fp32 one, and a logit a bf16
        // step off moves its row's softmax by as much (|z| < 3 here: under 1/32)
        for (long i = 0; i < N; i++) off += fabsf(l1[i] - l2[i]) > 2e-3f * fabsf(l2[i]);
        for (long i = 0; i < n; i++) {
            float r = bf16_to_f32(want[i]), g = bf16_to_f32(q[i]);
            off += fabsf(g - r) > fabsf(r) / 32 + 1e-6f;
            g16f[i] = g;
        }
        for (long i = (n + 1) / 2; i < n; i++) off += memcmp(&got[i], &junk[i], sizeof(float)) != 0;
        snprintf(what, sizeof what, "bf16 head_loss_forward N=%ld V=%d Vl=%d", N, V, Vl);
        printf("%-44s %s (%ld off)\n", what, off ? "FAIL" : "ok", off);
        failures += off != 0;
        cu_free(d_r16);
        free(lg); free(r16); free(got); free(l1); free(l2); free(want);
    }
    float *d_g = dev_copy(g16f, sizeof(float) * n);
    float *f[2] = {cu_malloc(sizeof(float) * N * C), dev_copy(gw, sizeof(float) * Vl * C)};
    float *u[2] = {cu_malloc(sizeof(float) * N * C), dev_copy(gw, sizeof(float) * Vl * C)};
    cu_head_loss_backward(f[0], f[1], room, d_x, 0, d_w, N, C, Vl);
    cu_linear_backward(u[0], C, u[1], d_g, Vl, d_x, C, d_w, N, C, Vl, 0);
    const char *name[2] = {"dinp", "dw"};
    long len[2] = {N * C, (long)Vl * C};
    for (int k = 0; k < 2; k++) {
        snprintf(what, sizeof what, "%shead_loss_backward %s = linear_backward", bf16 ? "bf16 " : "", name[k]);
        same_bits(what, f[k], u[k], len[k]);
        cu_free(u[k]);
    }
    if (bf16) head_loss_inp16(x, gw, d_w, d_t, loss, room, junk, f, N, C, V, Vl, scale);
    cu_free(f[0]); cu_free(f[1]);
    cu_free(d_x); cu_free(d_w); cu_free(d_t); cu_free(room); cu_free(ref); cu_free(loss); cu_free(rloss); cu_free(d_g);
    free(x); free(w); free(gw); free(junk); free(tg); free(g16f);
}

// ---------------------------------------------------------------------------------------

static void test_router(const char *name, long N, RouterCfg c, float bias0, int want_drops) {
    int E = c.E, k = c.k, G = router_ngroups(N, c.group_tokens);
    long NE = N * E, Nk = N * k, GE = (long)G * E;
    char what[96];
    float *logits = frandom(NE, 2.0f);
    for (long t = 0; t < N; t++) logits[t * E] += bias0;   // crowd expert 0 so that it overflows
    float *probs = xmalloc(sizeof(float) * NE), *lse = xmalloc(sizeof(float) * N);
    float *gate = xmalloc(sizeof(float) * Nk), *fcount = xmalloc(sizeof(float) * GE);
    int *choice = xmalloc(sizeof(int) * Nk), *slot = xmalloc(sizeof(int) * Nk), *kept = xmalloc(sizeof(int) * GE);
    RouterStats st = {1.25, 3.5, 2, 40, 80, 7, 0, 0, 0}, gst = st;   // the statistics are added to
    memcpy(probs, logits, sizeof(float) * NE);
    router_forward(probs, lse, choice, gate, slot, fcount, kept, N, &c, &st);

    float *d_probs = dev_copy(logits, sizeof(float) * NE), *d_lse = cu_malloc(sizeof(float) * N);
    float *d_gate = cu_malloc(sizeof(float) * Nk), *d_fcount = cu_malloc(sizeof(float) * GE);
    int *d_choice = cu_malloc(sizeof(int) * Nk), *d_slot = cu_malloc(sizeof(int) * Nk);
    int *d_kept = cu_malloc(sizeof(int) * GE);
    cu_router_forward(d_probs, d_lse, d_choice, d_gate, d_slot, d_fcount, d_kept, N, &c, &gst);
    checkn("router_forward", name, "probs", d_probs, probs, NE, 1e-5);
    checkn("router_forward", name, "lse", d_lse, lse, N, 1e-5);
    checkn("router_forward", name, "gate", d_gate, gate, Nk, 1e-5);
    checkn("router_forward", name, "fcount", d_fcount, fcount, GE, 1e-5);
    checkn_int("router_forward", name, "choice", d_choice, choice, Nk);
    checkn_int("router_forward", name, "slot", d_slot, slot, Nk);
    checkn_int("router_forward", name, "kept", d_kept, kept, GE);
    printf("%-44s aux %.17g / %.17g, z %.17g / %.17g, dropped %ld / %ld\n", "  stats gpu / cpu", gst.aux_sum,
           st.aux_sum, gst.z_sum, st.z_sum, gst.dropped, st.dropped);
    snprintf(what, sizeof what, "router_forward %s stats", name);
    expect(fabs(gst.aux_sum - st.aux_sum) <= 1e-9 * fabs(st.aux_sum) &&
               fabs(gst.z_sum - st.z_sum) <= 1e-9 * fabs(st.z_sum) && gst.groups == st.groups &&
               gst.tokens == st.tokens && gst.choices == st.choices && gst.dropped == st.dropped,
           what);
    snprintf(what, sizeof what, "router_forward %s %s", name, want_drops ? "drops some" : "drops none");
    expect(want_drops ? st.dropped > 7 : st.dropped == 7, what);

    // backward from the CPU's forward results; dgate 0 for dropped choices, as the model's
    float *dgate = frandom(Nk, 1.0f), *dlogits = xmalloc(sizeof(float) * NE);
    for (long i = 0; i < Nk; i++) if (slot[i] < 0) dgate[i] = 0;
    router_backward(dlogits, dgate, probs, lse, choice, fcount, N, &c, 0.01f, 0.001f);
    float *d_dgate = dev_copy(dgate, sizeof(float) * Nk), *d_dlogits = cu_malloc(sizeof(float) * NE);
    cu_memcpy(d_probs, probs, sizeof(float) * NE);
    cu_memcpy(d_lse, lse, sizeof(float) * N);
    cu_memcpy(d_choice, choice, sizeof(int) * Nk);
    cu_memcpy(d_fcount, fcount, sizeof(float) * GE);
    cu_router_backward(d_dlogits, d_dgate, d_probs, d_lse, d_choice, d_fcount, N, &c, 0.01f, 0.001f);
    checkn("router_backward", name, "dlogits", d_dlogits, dlogits, NE, 1e-5);

    cu_free(d_probs); cu_free(d_lse); cu_free(d_gate); cu_free(d_fcount); cu_free(d_choice); cu_free(d_slot);
    cu_free(d_kept); cu_free(d_dgate); cu_free(d_dlogits);
    free(logits); free(probs); free(lse); free(gate); free(fcount); free(choice); free(slot); free(kept);
    free(dgate); free(dlogits);
}

// The MoE plan on the device (router capacity, kept, f_e, the plan's rows and expert counts, the
// statistics that come back with them) against router_forward + dispatch_plan on the host, on
// logits given by `kind`: random; ties everywhere; every token's first choice one expert;
// experts no token chooses. Bit for bit, but the summed statistics (1e-9).
static float *plan_logits(const char *kind, long N, int E) {
    float *x = frandom(N * E, 2.0f);
    for (long t = 0; t < N; t++)
        for (int e = 0; e < E; e++) {
            if (!strcmp(kind, "ties")) x[t * E + e] = e < 3 ? 0.5f : -1.0f;   // three equal best: the lower indices win
            if (!strcmp(kind, "one expert") && e == E - 1) x[t * E + e] = 20.0f;
            if (!strcmp(kind, "empty experts") && e >= E / 2) x[t * E + e] = -30.0f;
        }
    return x;
}

static void test_plan(const char *kind, long N, RouterCfg c, int padded, int multiple) {
    int E = c.E, k = c.k, G = router_ngroups(N, c.group_tokens);
    long NE = N * E, Nk = N * k, GE = (long)G * E;
    char name[64];
    snprintf(name, sizeof name, "%s%s, cf %g, x%d", kind, padded ? " padded" : "", c.capacity_factor, multiple);
    float *logits = plan_logits(kind, N, E), *probs = xmalloc(sizeof(float) * NE), *lse = xmalloc(sizeof(float) * N);
    float *gate = xmalloc(sizeof(float) * Nk), *fcount = xmalloc(sizeof(float) * GE);
    int *choice = xmalloc(sizeof(int) * Nk), *slot = xmalloc(sizeof(int) * Nk), *kept = xmalloc(sizeof(int) * GE);
    int *row = xmalloc(sizeof(int) * Nk);
    long *rows = xmalloc(sizeof(long) * E), *grows = xmalloc(sizeof(long) * E), *start = xmalloc(sizeof(long) * GE);
    RouterStats st = {0}, gst = {0};
    memcpy(probs, logits, sizeof(float) * NE);
    router_forward(probs, lse, choice, gate, slot, fcount, kept, N, &c, &st);
    dispatch_plan(row, rows, start, choice, slot, kept, N, k, &c, padded, multiple);
    float *d_probs = dev_copy(logits, sizeof(float) * NE), *d_lse = cu_malloc(sizeof(float) * N);
    float *d_gate = cu_malloc(sizeof(float) * Nk), *d_fcount = cu_malloc(sizeof(float) * GE);
    int *d_choice = cu_malloc(sizeof(int) * Nk), *d_slot = cu_malloc(sizeof(int) * Nk), *d_kept = cu_malloc(sizeof(int) * GE);
    int *d_row = cu_malloc(sizeof(int) * Nk);
    RouterCfg g = c;   // the layer's way: the statistics wait on the device for the plan's one readback
    g.summary = cu_malloc(sizeof(double) * ROUTER_SUMMARY(E));
    g.summary_host = xmalloc(sizeof(double) * ROUTER_SUMMARY(E));
    cu_router_forward(d_probs, d_lse, d_choice, d_gate, d_slot, d_fcount, d_kept, N, &g, &gst);
    cu_dispatch_plan(d_row, grows, NULL, d_choice, d_slot, d_kept, N, k, &g, padded, multiple);
    checkn_int("plan", name, "choice", d_choice, choice, Nk);
    checkn_int("plan", name, "slot", d_slot, slot, Nk);
    checkn_int("plan", name, "kept", d_kept, kept, GE);
    checkn("plan", name, "fcount", d_fcount, fcount, GE, 0);
    checkn_int("plan", name, "row", d_row, row, Nk);
    long bad = 0, kept_sum[64] = {0};
    char what[128];
    for (int e = 0; e < E; e++) bad += grows[e] != rows[e];
    snprintf(what, sizeof what, "plan %s exp_rows", name);
    expect(bad == 0, what);
    const double *h = g.summary_host;   // back with the plan: statistics and the step's loads
    for (long q = 0; q < GE; q++) kept_sum[q % E] += kept[q];
    for (int e = 0; e < E; e++) bad += h[RS_KEPT + e] != kept_sum[e];
    gst.aux_sum += h[RS_AUX]; gst.z_sum += h[RS_Z]; gst.dropped += (long)h[RS_DROPPED];
    snprintf(what, sizeof what, "plan %s summary", name);
    expect(bad == 0 && fabs(gst.aux_sum - st.aux_sum) <= 1e-9 * fabs(st.aux_sum) &&
               fabs(gst.z_sum - st.z_sum) <= 1e-9 * fabs(st.z_sum) && gst.dropped == st.dropped &&
               gst.choices == st.choices && gst.groups == st.groups,
           what);
    cu_free(d_probs); cu_free(d_lse); cu_free(d_gate); cu_free(d_fcount); cu_free(d_choice); cu_free(d_slot);
    cu_free(d_kept); cu_free(d_row); cu_free(g.summary);
    free(g.summary_host); free(logits); free(probs); free(lse); free(gate); free(fcount); free(choice); free(slot);
    free(kept); free(row); free(rows); free(grows); free(start);
}

// ---------------------------------------------------------------------------------------

// d 45: not a multiple of 32 (the warp loops have a ragged tail) nor of 4 (the row passes take a
// float at a time); d 1040: float4 rows wider than a block's 256 × 4 columns
static void test_dispatcher(int d) {
    long N = 37;
    int k = 2;
    long Nk = N * k, R = Nk + 5;   // 5 rows no choice maps to
    // each kept (t, j) gets its own row (a random permutation); about 1 in 5 dropped
    int *perm = xmalloc(sizeof(int) * R), *row = xmalloc(sizeof(int) * Nk);
    for (long i = 0; i < R; i++) perm[i] = (int)i;
    for (long i = R - 1; i > 0; i--) { int j = irand((int)i + 1), x = perm[i]; perm[i] = perm[j]; perm[j] = x; }
    for (long i = 0; i < Nk; i++) row[i] = irand(5) == 0 ? -1 : perm[i];
    int *d_row = dev_copy(row, sizeof(int) * Nk);

    // dispatch_forward: untouched rows keep their values
    float *x = frandom(N * d, 1.0f), *xin = frandom(R * d, 1.0f);
    float *d_x = dev_copy(x, sizeof(float) * N * d), *d_xin = dev_copy(xin, sizeof(float) * R * d);
    dispatch_forward(xin, x, row, N, k, d, 0);
    cu_dispatch_forward(d_xin, d_x, d_row, N, k, d, 0);
    check("dispatch_forward xin", d_xin, xin, R * d, 1e-5);
    // bf16 rows (a --bf16 run's ln2 into the experts' input, d even): every bit of the CPU's, other
    // rows untouched; any 16 bits at all (NaN patterns too, in either half of a 32-bit word)
    if (d % 2 == 0) {
        uint16_t *a16 = xmalloc(sizeof(uint16_t) * N * d), *x16 = xmalloc(sizeof(uint16_t) * R * d);
        uint16_t *g16 = xmalloc(sizeof(uint16_t) * R * d);
        for (long i = 0; i < N * d; i++) a16[i] = (uint16_t)irand(65536);
        for (long i = 0; i < R * d; i++) x16[i] = (uint16_t)irand(65536);
        cu_memcpy(d_x, a16, sizeof(uint16_t) * N * d);
        cu_memcpy(d_xin, x16, sizeof(uint16_t) * R * d);
        dispatch_forward((float *)x16, (const float *)a16, row, N, k, d, 1);
        cu_dispatch_forward(d_xin, d_x, d_row, N, k, d, 1);
        cu_memcpy(g16, d_xin, sizeof(uint16_t) * R * d);
        long differ = 0;
        for (long i = 0; i < R * d; i++) differ += x16[i] != g16[i];
        printf("dispatch_forward bf16 rows (d %d): %ld of %ld elements differ %s\n", d, differ, R * d,
               differ ? "FAIL" : "ok");
        failures += differ != 0;
        free(a16); free(x16); free(g16);
    }

    // dispatch_backward: dx += Σ_j dxin[row_j]
    float *dx = frandom(N * d, 1.0f), *dxin = frandom(R * d, 1.0f);
    float *d_dx = dev_copy(dx, sizeof(float) * N * d), *d_dxin = dev_copy(dxin, sizeof(float) * R * d);
    dispatch_backward(dx, dxin, row, N, k, d, 0);
    cu_dispatch_backward(d_dx, d_dxin, d_row, N, k, d, 0);
    check("dispatch_backward dx", d_dx, dx, N * d, 1e-5);
    // from bf16 rows (the experts' dx16 input gradient), summed into fp32 dx as the CPU does
    uint16_t *dxin16 = xmalloc(sizeof(uint16_t) * R * d);
    for (long i = 0; i < R * d; i++) dxin16[i] = bf16_from_f32(dxin[i]);
    cu_memcpy(d_dxin, dxin16, sizeof(uint16_t) * R * d);
    dispatch_backward(dx, (const float *)dxin16, row, N, k, d, 1);
    cu_dispatch_backward(d_dx, d_dxin, d_row, N, k, d, 1);
    check("dispatch_backward dx from bf16 rows", d_dx, dx, N * d, 1e-5);
    free(dxin16);

    // combine_forward: out += Σ_j gate_j·y[row_j]
    float *y = frandom(R * d, 1.0f), *gate = frandom(Nk, 1.0f), *out = frandom(N * d, 1.0f);
    float *d_y = dev_copy(y, sizeof(float) * R * d), *d_gate = dev_copy(gate, sizeof(float) * Nk);
    float *d_out = dev_copy(out, sizeof(float) * N * d);
    combine_forward(out, y, gate, row, N, k, d, 0);
    cu_combine_forward(d_out, d_y, d_gate, d_row, N, k, d, 0);
    check("combine_forward out", d_out, out, N * d, 1e-5);
    // from y's rows in bf16 (the experts' outputs, MoeLayer.out16), into fp32 out as the CPU does
    uint16_t *y16 = xmalloc(sizeof(uint16_t) * R * d);
    for (long i = 0; i < R * d; i++) y16[i] = bf16_from_f32(y[i]);
    float *d_y16 = dev_copy(y16, sizeof(uint16_t) * R * d);
    combine_forward(out, (const float *)y16, gate, row, N, k, d, 1);
    cu_combine_forward(d_out, d_y16, d_gate, d_row, N, k, d, 1);
    check("combine_forward out from bf16 y", d_out, out, N * d, 1e-5);

    // combine_backward: dy[row_j] = gate_j·dout (other rows untouched), dgate_j = y[row_j]·dout
    float *dout = frandom(N * d, 1.0f), *dy = frandom(R * d, 1.0f), *dgate = frandom(Nk, 1.0f);
    float *d_dout = dev_copy(dout, sizeof(float) * N * d), *d_dy = dev_copy(dy, sizeof(float) * R * d);
    float *d_dgate = dev_copy(dgate, sizeof(float) * Nk);
    combine_backward(dy, dgate, dout, y, gate, row, N, k, d, 0, 0);
    cu_combine_backward(d_dy, d_dgate, d_dout, d_y, d_gate, d_row, N, k, d, 0, 0);
    check("combine_backward dy", d_dy, dy, R * d, 1e-5);
    check("combine_backward dgate", d_dgate, dgate, Nk, 1e-5);
    // dy's rows in bf16 (MoeLayer.rows16): the CPU's rounding to the bit, other rows untouched
    uint16_t *dy16 = xmalloc(sizeof(uint16_t) * R * d), *g16 = xmalloc(sizeof(uint16_t) * R * d);
    for (long i = 0; i < R * d; i++) dy16[i] = (uint16_t)irand(65536);
    cu_memcpy(d_dy, dy16, sizeof(uint16_t) * R * d);
    combine_backward((float *)dy16, dgate, dout, (const float *)y16, gate, row, N, k, d, 1, 1);   // y in bf16 too
    cu_combine_backward(d_dy, d_dgate, d_dout, d_y16, d_gate, d_row, N, k, d, 1, 1);
    cu_memcpy(g16, d_dy, sizeof(uint16_t) * R * d);
    long differ = 0;
    for (long i = 0; i < R * d; i++) differ += dy16[i] != g16[i];
    printf("combine_backward dy in bf16 (d %d): %ld of %ld elements differ %s\n", d, differ, R * d, differ ? "FAIL" : "ok");
    failures += differ != 0;
    check("combine_backward dgate (dy and y in bf16)", d_dgate, dgate, Nk, 1e-5);
    free(dy16); free(g16); free(y16); cu_free(d_y16);

    cu_free(d_row); cu_free(d_x); cu_free(d_xin); cu_free(d_dx); cu_free(d_dxin); cu_free(d_y); cu_free(d_gate);
    cu_free(d_out); cu_free(d_dout); cu_free(d_dy); cu_free(d_dgate);
    free(perm); free(row); free(x); free(xin); free(dx); free(dxin); free(y); free(gate); free(out); free(dout);
    free(dy); free(dgate);
}

// ---------------------------------------------------------------------------------------

// A bf16 run keeps the experts' h and hg (GELU's input and output) in bf16 only, element i at
// ((uint16_t *)hg)[i] (moe.cu): its values against the CPU's, rounded to bf16 (within one bf16
// step); and the second half of the room untouched (the junk it started with)
static void check_hg_half(const char *name, const char *what, const float *d_hg, const float *hg, const float *junk,
                          long n) {
    float *raw = xmalloc(sizeof(float) * (n ? n : 1));
    cu_memcpy(raw, d_hg, sizeof(float) * n);
    const uint16_t *h16 = (const uint16_t *)raw;
    int kept = !memcmp((const char *)raw + 2 * n, (const char *)junk + 2 * n, 2 * n);
    double err = 0, mx = 0;
    for (long i = 0; i < n; i++) {
        double e = fabs(bf16_to_f32(h16[i]) - hg[i]);
        err = e > err || isnan(e) ? e : err;
        mx = fabs(hg[i]) > mx ? fabs(hg[i]) : mx;
    }
    double rel = err / (mx + 1e-6);
    int ok = rel <= 8e-3 && kept;   // a bf16 step is 2^-8 of the value at most
    printf("experts %s %s (bf16, in its room) rel err %.3e, rest %s %s\n", name, what, rel,
           kept ? "untouched" : "WRITTEN", ok ? "ok" : "FAIL");
    failures += !ok;
    free(raw);
}

// rows16: the input rows and output gradients in bf16 (MoeLayer.rows16: as a --bf16 run's dispatch
// and combine write them), and the outputs and input gradient written so (MoeLayer.out16)
static void test_experts(const char *name, const long *off, int proj_bias, int rows16) {
    int El = 3, d = 16, f = 40, bf16 = cu_bf16();
    long R = off[El];
    double tol = bf16 ? 1e-2 : 1e-4, tol_h = bf16 ? 1e-5 : 1e-4;
    Experts x = {El, d, f, frandom((long)El * d * f, 0.3f), frandom((long)El * f, 0.3f),
                 frandom((long)El * f * d, 0.3f), frandom((long)El * d, 0.3f), frandom((long)El * d * f, 0.1f),
                 frandom((long)El * f, 0.1f), frandom((long)El * f * d, 0.1f), frandom((long)El * d, 0.1f), NULL, 0, 0};
    Experts g = x;   // device copies
    g.wfc = weights_up(x.wfc, (long)El * d * f, bf16);     g.bfc = weights_up(x.bfc, (long)El * f, bf16);
    g.wproj = weights_up(x.wproj, (long)El * f * d, bf16); g.bproj = weights_up(x.bproj, (long)El * d, bf16);
    g.gwfc = dev_copy(x.gwfc, sizeof(float) * El * d * f);   g.gbfc = dev_copy(x.gbfc, sizeof(float) * El * f);
    g.gwproj = dev_copy(x.gwproj, sizeof(float) * El * f * d); g.gbproj = dev_copy(x.gbproj, sizeof(float) * El * d);
    float *xin = frandom(R * d, 1.0f), *dy = frandom(R * d, 1.0f);
    float *h = xmalloc(sizeof(float) * R * f), *hg = xmalloc(sizeof(float) * R * f);
    float *y = xmalloc(sizeof(float) * R * d), *xr = rounded_if(xin, R * d, bf16);
    float *dxin = xmalloc(sizeof(float) * R * d), *dhg = xmalloc(sizeof(float) * R * f);
    experts_forward(&x, h, hg, y, xr, off, proj_bias);   // a bf16 GEMM sees xin rounded
    experts_backward(&x, dxin, dhg, dy, xr, h, hg, off, proj_bias);

    float *junk = frandom(R * f, 50.0f);   // outputs start as garbage: everything must be written
    float *d_xin = dev_copy(xin, sizeof(float) * R * d), *d_dy = dev_copy(dy, sizeof(float) * R * d);
    if (rows16) {
        upload_hg_half(d_xin, xin, R * d);
        upload_hg_half(d_dy, dy, R * d);
    }
    float *d_h = dev_copy(junk, sizeof(float) * R * f), *d_hg = dev_copy(junk, sizeof(float) * R * f);
    float *d_y = dev_copy(junk, sizeof(float) * R * d), *d_dxin = dev_copy(junk, sizeof(float) * R * d);
    float *d_dhg = dev_copy(junk, sizeof(float) * R * f);
    cu_experts_forward(El, d, f, g.wfc, g.bfc, g.wproj, g.bproj, d_h, d_hg, d_y, d_xin, rows16, rows16, off,
                       proj_bias);   // rows16: y in bf16 too (out16)
    if (bf16) {   // kept in bf16 only, in their rooms
        check_hg_half(name, "h", d_h, h, junk, R * f);
        check_hg_half(name, "hg", d_hg, hg, junk, R * f);
    } else {
        checkn("experts_forward", name, "h", d_h, h, R * f, tol_h);
        checkn("experts_forward", name, "hg", d_hg, hg, R * f, tol_h);
    }
    if (rows16) check_hg_half(name, "forward y", d_y, y, junk, R * d);
    else checkn("experts_forward", name, "y", d_y, y, R * d, tol);
    // backward from the CPU's h and hg (on a bf16 run as the forward keeps them: their bf16 copies)
    if (bf16) {
        upload_hg_half(d_h, h, R * f);
        upload_hg_half(d_hg, hg, R * f);
    } else {
        cu_memcpy(d_h, h, sizeof(float) * R * f);
        cu_memcpy(d_hg, hg, sizeof(float) * R * f);
    }
    cu_experts_backward(El, d, f, g.wfc, g.wproj, g.gwfc, g.gbfc, g.gwproj, g.gbproj, d_dxin, d_dhg, d_dy, d_xin, rows16,
                        rows16, d_h, d_hg, off, proj_bias);   // rows16: dxin in bf16 too (dx16)
    if (rows16) check_hg_half(name, "backward dxin", d_dxin, dxin, junk, R * d);
    else checkn("experts_backward", name, "dxin", d_dxin, dxin, R * d, tol);
    checkn("experts_backward", name, "gwfc", g.gwfc, x.gwfc, (long)El * d * f, tol);
    checkn("experts_backward", name, "gbfc", g.gbfc, x.gbfc, (long)El * f, tol);
    checkn("experts_backward", name, "gwproj", g.gwproj, x.gwproj, (long)El * f * d, tol);
    checkn("experts_backward", name, "gbproj", g.gbproj, x.gbproj, (long)El * d, tol);

    cu_free(g.wfc); cu_free(g.bfc); cu_free(g.wproj); cu_free(g.bproj);
    cu_free(g.gwfc); cu_free(g.gbfc); cu_free(g.gwproj); cu_free(g.gbproj);
    cu_free(d_xin); cu_free(d_dy); cu_free(d_h); cu_free(d_hg); cu_free(d_y); cu_free(d_dxin); cu_free(d_dhg);
    free(x.wfc); free(x.bfc); free(x.wproj); free(x.bproj); free(x.gwfc); free(x.gbfc); free(x.gwproj); free(x.gbproj);
    free(xin); free(dy); free(h); free(hg); free(y); free(dxin); free(dhg); free(junk); free(xr);
}

int main(void) {
    if (cu_device_count() == 0) {
        printf("test_cuda_moe: no CUDA device, skipped\n");
        return 77;
    }
    cu_init(0, 0);
    printf("test_cuda_moe on %s\n", cu_device_name());
    test_attention(2, 7, 3, 8);
    test_attention(1, 45, 2, 16);   // rows longer than a warp
    // E = 4, k = 2, groups of 8 tokens, the last one short (30 = 3·8 + 6): C = 4, last C = 3
    test_router("capacity", 30, RCFG(4, 2, 1.0f, 0, 8), 1.0f, 1);
    test_router("dropless", 30, RCFG(4, 2, 0.0f, 0, 8), 1.0f, 0);
    test_router("top-1", 30, RCFG(5, 1, 1.25f, 2, 10), 0.5f, 1);
    const char *kinds[] = {"random", "ties", "one expert", "empty experts"};
    for (int i = 0; i < 4; i++) {   // 300 tokens: groups of 64, the last one of 44; blocks of more than one tile
        test_plan(kinds[i], 300, RCFG(8, 2, 1.0f, 0, 64), 1, 1);    // capacity: padded (an all-to-all), DTD's x2
        test_plan(kinds[i], 300, RCFG(8, 2, 1.0f, 0, 64), 0, 2);
        test_plan(kinds[i], 300, RCFG(8, 2, 0.0f, 0, 64), 0, 1);    // dropless
    }
    test_plan("random", 37, RCFG(5, 1, 1.25f, 2, 10), 1, 1);        // top-1, min_capacity
    test_dispatcher(45);
    test_dispatcher(46);   // bf16 rows of 23 words: one at a time
    test_dispatcher(1040);
    long uneven[] = {0, 5, 5, 12};   // expert 1 empty: grouped GEMMs
    long even[] = {0, 4, 8, 12};     // equal experts: the strided batched path
    test_experts("uneven", uneven, 1, 0);
    test_experts("uneven, no proj bias", uneven, 0, 0);
    test_experts("even", even, 1, 0);
    long big[] = {0, 600, 610, 900};   // the bias gradients' column sums in several row chunks of one expert
    test_experts("600 rows", big, 1, 0);
    long none[] = {0, 0, 0, 0};      // no rows at all: nothing to do, gradients unchanged
    test_experts("empty", none, 1, 0);
    test_attn_proj(2, 37, 3, 16, 20);   // last: the random numbers of the tests above stay theirs
    test_qkv_forward(74, 20, 3 * 48, 1);
    test_qkv_backward(74, 20, 3 * 48);
    test_head_loss(37, 24, 100, 104);
    cu_set_bf16(1);   // as a --bf16 run
    printf("-- bf16 weights and GEMM operands\n");
    test_attention(2, 7, 3, 8);
    test_experts("bf16 uneven", uneven, 1, 0);
    test_experts("bf16 even", even, 1, 0);
    test_experts("bf16 600 rows", big, 1, 0);
    test_experts("bf16 uneven, bf16 rows", uneven, 1, 1);
    test_experts("bf16 600 rows, bf16 rows", big, 1, 1);
    test_experts("bf16 even, bf16 rows", even, 1, 1);   // one strided batched GEMM writing bf16
    test_attn_proj(2, 37, 3, 16, 20);
    test_qkv_forward(74, 20, 3 * 48, 1);
    test_qkv_forward(33, 64, 3 * 16, 0);
    test_qkv_backward(74, 20, 3 * 48);
    test_head_loss(37, 24, 100, 104);
    test_head_loss(5, 64, 333, 333);
    setenv("TED_LT_GELU", "0", 1);   // the experts' GELU by their own passes, not cuBLASLt's epilogue
    test_experts("bf16 uneven, GELU passes", uneven, 1, 0);
    test_experts("bf16 600 rows, GELU passes", big, 1, 0);
    unsetenv("TED_LT_GELU");
    cu_set_bf16(0);
    if (failures) { printf("test_cuda_moe: %d FAILED\n", failures); return 1; }
    printf("test_cuda_moe: all passed\n");
    return 0;
}
