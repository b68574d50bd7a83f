// flash_bench.c — the flash-attention kernels (src/cuda/flash_attention.cu) alone on a GPU, beside
// the T×T attention they replace (attention.cu: cuBLAS GEMMs over the whole T×T matrix, fp32
// storage, bf16 compute as a --bf16 run has it today). For each op: the median wall ms of --reps
// synchronised runs (after 2 warm-up runs), and TFLOP/s on the causal FLOPs
//   forward   4·B·H·T²·hd / 2      (S = Q·Kᵀ and O = P·V; the masked half not counted)
//   backward  2.5 × the forward    (dV, dP, dQ, dK and S again, FlashAttention's count; the kernels
//                                   run 7 products, S and dP twice, so that dQ needs no atomics)
// and that rate over the GPU's dense bf16 peak (cu_peak_flops; 0 when not known). Then the fused
// classifier (classifier.cu) over B·T rows of V bf16 logits: ms and GB/s of its 3 passes over the
// logits (2 reads, 1 write). One JSON line per op. First, at the same shape, the bf16 kernels
// against the fp32 ones on the same (bf16-valued) inputs: the largest difference of O and of dqkv
// over the largest fp32 value, "ok" within 2e-2 (bf16 rounding of P and dS), else "FAIL" and
// the exit status 1 once the timings are printed.
//   usage: flash_bench [--B 2] [--T 2048] [--H 16] [--hd 128] [--V 50304] [--reps 20] [--baseline 0|1]
//   (--V 0: no classifier)
// Built with the CUDA backend (flash_bench) and under the CPU emulation (flash_bench_emu: small
// shapes only, to run the program itself). Exits 77 without a GPU.
#include "core/alloc.h"
#include "core/clock.h"
#include "core/device.h"
#include "core/half.h"
#include "cuda/cuda_ops.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct { int B, T, H, hd, V, reps, baseline; } Opts;
typedef struct {
    const Opts *o;
    void *qkv, *dout, *out, *dqkv;   // bf16 or fp32 as the op takes them
    float *lse, *delta, *att, *scratch;
} Bufs;
typedef void (*Op)(Bufs *);

static void flash_fwd_bf16(Bufs *b) {
    cu_flash_attention_forward_bf16(b->out, b->lse, b->qkv, b->o->B, b->o->T, b->o->H, b->o->hd);
}
static void flash_bwd_bf16(Bufs *b) {
    cu_flash_attention_backward_bf16(b->dqkv, b->delta, b->dout, b->out, b->qkv, b->lse, b->o->B, b->o->T, b->o->H,
                                     b->o->hd);
}
static void flash_fwd_fp32(Bufs *b) {
    cu_flash_attention_forward(b->out, b->lse, b->qkv, b->o->B, b->o->T, b->o->H, b->o->hd);
}
static void flash_bwd_fp32(Bufs *b) {
    cu_flash_attention_backward(b->dqkv, b->delta, b->dout, b->out, b->qkv, b->lse, b->o->B, b->o->T, b->o->H, b->o->hd);
}
static void tt_fwd(Bufs *b) { cu_attention_tt_forward(b->out, b->att, b->qkv, b->o->B, b->o->T, b->o->H, b->o->hd); }
static void tt_bwd(Bufs *b) {
    cu_attention_tt_backward(b->dqkv, b->dout, b->att, b->qkv, b->o->B, b->o->T, b->o->H, b->o->hd, b->scratch);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

// median wall ms of reps synchronised runs of op, after 2 warm-up runs
static double median_ms(Op op, Bufs *b) {
    double *t = ted_alloc(sizeof(double) * b->o->reps, MEM_TEMP);
    for (int i = 0; i < 2; i++) op(b);
    cu_sync();
    for (int i = 0; i < b->o->reps; i++) {
        double t0 = now_ms();
        op(b);
        cu_sync();
        t[i] = now_ms() - t0;
    }
    qsort(t, (size_t)b->o->reps, sizeof(double), cmp_double);
    double m = t[b->o->reps / 2];
    ted_free(t);
    return m;
}

static void *dev_random(long n, int bf16, float scale, uint64_t seed) {
    size_t es = bf16 ? 2 : 4;
    unsigned char *h = ted_alloc(es * (size_t)n, MEM_TEMP);
    for (long i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        float x = ((float)(seed >> 40) / 16777216.0f * 2.0f - 1.0f) * scale;
        if (bf16) ((uint16_t *)h)[i] = bf16_from_f32(x);
        else ((float *)h)[i] = x;
    }
    void *d = cu_malloc(es * (size_t)n);
    if (!d) { fprintf(stderr, "flash_bench: out of device memory\n"); exit(1); }
    cu_memcpy(d, h, es * (size_t)n);
    ted_free(h);
    return d;
}

static void report(const char *op, const char *dtype, const Opts *o, double ms, double flop) {
    double rate = flop / (ms * 1e-3), peak = cu_peak_flops();
    printf("{\"op\": \"%s\", \"dtype\": \"%s\", \"B\": %d, \"T\": %d, \"H\": %d, \"hd\": %d, \"ms\": %.3f, "
           "\"tflops\": %.1f, \"of_bf16_peak\": %.3f, \"device\": \"%s\"}\n",
           op, dtype, o->B, o->T, o->H, o->hd, ms, rate * 1e-12, peak > 0 ? rate / peak : 0.0, cu_device_name());
    fflush(stdout);
}

// forward then backward of one kind: flash bf16 (kind 0), flash fp32 (1), the T×T path (2)
static void bench(const Opts *o, int kind) {
    long N = (long)o->B * o->T, D = (long)o->H * o->hd, BHT = (long)o->B * o->H * o->T;
    int bf16 = kind == 0;
    Bufs b = {o, dev_random(N * 3 * D, bf16, 2.0f, 1), dev_random(N * D, bf16, 1.0f, 2), cu_malloc((bf16 ? 2 : 4) * N * D),
              cu_malloc((bf16 ? 2 : 4) * N * 3 * D), cu_malloc(4 * BHT), cu_malloc(4 * BHT), NULL, NULL};
    if (kind == 2) {
        b.att = cu_malloc(4 * (size_t)BHT * o->T);
        b.scratch = cu_malloc(4 * (size_t)BHT * o->T);
    }
    if (!b.out || !b.dqkv || !b.lse || !b.delta || (kind == 2 && (!b.att || !b.scratch))) {
        fprintf(stderr, "flash_bench: out of device memory\n");
        exit(1);
    }
    static const Op fwd[] = {flash_fwd_bf16, flash_fwd_fp32, tt_fwd}, bwd[] = {flash_bwd_bf16, flash_bwd_fp32, tt_bwd};
    static const char *name[] = {"flash", "flash", "txt_cublas"}, *dtype[] = {"bf16", "fp32", "fp32_bf16_gemm"};
    double flop = 4.0 * o->B * o->H * (double)o->T * o->T * o->hd / 2, fms = median_ms(fwd[kind], &b);
    char op[64];
    snprintf(op, sizeof op, "%s_forward", name[kind]);
    report(op, dtype[kind], o, fms, flop);
    snprintf(op, sizeof op, "%s_backward", name[kind]);
    report(op, dtype[kind], o, median_ms(bwd[kind], &b), 2.5 * flop);
    cu_free(b.qkv); cu_free(b.dout); cu_free(b.out); cu_free(b.dqkv); cu_free(b.lse); cu_free(b.delta);
    cu_free(b.att); cu_free(b.scratch);
}

// host values rounded to bf16 (the same numbers in both precisions)
static float *host_bf16_values(long n, float scale, uint64_t seed) {
    float *h = ted_alloc(sizeof(float) * (size_t)n, MEM_TEMP);
    for (long i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        h[i] = bf16_to_f32(bf16_from_f32(((float)(seed >> 40) / 16777216.0f * 2.0f - 1.0f) * scale));
    }
    return h;
}

// run one precision's forward and backward on x (qkv) and g (dout); out and dqkv back as fp32
static void run_precision(const Opts *o, int bf16, const float *x, const float *g, float *out, float *dqkv) {
    long N = (long)o->B * o->T, D = (long)o->H * o->hd, BHT = (long)o->B * o->H * o->T, nx = 3 * N * D;
    size_t es = bf16 ? 2 : 4;
    unsigned char *hx = ted_alloc(es * (size_t)nx, MEM_TEMP);
    Bufs b = {o, cu_malloc(es * nx), cu_malloc(es * N * D), cu_malloc(es * N * D), cu_malloc(es * nx),
              cu_malloc(4 * BHT), cu_malloc(4 * BHT), NULL, NULL};
    if (!b.qkv || !b.dout || !b.out || !b.dqkv || !b.lse || !b.delta) {
        fprintf(stderr, "flash_bench: out of device memory\n");
        exit(1);
    }
    const float *src[2] = {x, g};
    void *dst[2] = {b.qkv, b.dout};
    long cnt[2] = {nx, N * D};
    for (int k = 0; k < 2; k++) {
        for (long i = 0; i < cnt[k]; i++)
            if (bf16) ((uint16_t *)hx)[i] = bf16_from_f32(src[k][i]);
            else ((float *)hx)[i] = src[k][i];
        cu_memcpy(dst[k], hx, es * cnt[k]);
    }
    (bf16 ? flash_fwd_bf16 : flash_fwd_fp32)(&b);
    (bf16 ? flash_bwd_bf16 : flash_bwd_fp32)(&b);
    void *res[2] = {b.out, b.dqkv};
    float *to[2] = {out, dqkv};
    cnt[0] = N * D;
    for (int k = 0; k < 2; k++) {
        cu_memcpy(hx, res[k], es * cnt[k]);
        for (long i = 0; i < cnt[k]; i++) to[k][i] = bf16 ? bf16_to_f32(((uint16_t *)hx)[i]) : ((float *)hx)[i];
    }
    cu_free(b.qkv); cu_free(b.dout); cu_free(b.out); cu_free(b.dqkv); cu_free(b.lse); cu_free(b.delta);
    ted_free(hx);
}

// max |a − b| over max |b|
static double rel_diff(const float *a, const float *b, long n) {
    double d = 0, m = 0;
    for (long i = 0; i < n; i++) {
        double e = fabs((double)a[i] - b[i]), v = fabs((double)b[i]);
        d = e > d ? e : d;
        m = v > m ? v : m;
    }
    return m > 0 ? d / m : d;
}

// the bf16 kernels against the fp32 ones at the bench's shape; 0 when they agree
static int agreement(const Opts *o) {
    long N = (long)o->B * o->T, D = (long)o->H * o->hd;
    float *x = host_bf16_values(3 * N * D, 2.0f, 1), *g = host_bf16_values(N * D, 1.0f, 2);
    float *o16 = ted_alloc(sizeof(float) * N * D, MEM_TEMP), *o32 = ted_alloc(sizeof(float) * N * D, MEM_TEMP);
    float *d16 = ted_alloc(sizeof(float) * 3 * N * D, MEM_TEMP), *d32 = ted_alloc(sizeof(float) * 3 * N * D, MEM_TEMP);
    run_precision(o, 1, x, g, o16, d16);
    run_precision(o, 0, x, g, o32, d32);
    double eo = rel_diff(o16, o32, N * D), ed = rel_diff(d16, d32, 3 * N * D);
    printf("{\"op\": \"flash_bf16_vs_fp32\", \"B\": %d, \"T\": %d, \"H\": %d, \"hd\": %d, \"out_rel\": %.2e, "
           "\"dqkv_rel\": %.2e, \"status\": \"%s\"}\n", o->B, o->T, o->H, o->hd, eo, ed,
           eo <= 2e-2 && ed <= 2e-2 ? "ok" : "FAIL");
    fflush(stdout);
    ted_free(x); ted_free(g); ted_free(o16); ted_free(o32); ted_free(d16); ted_free(d32);
    return !(eo <= 2e-2 && ed <= 2e-2);
}

// the fused classifier over B·T rows of V bf16 logits (in place: later runs see gradients)
static void bench_classifier(const Opts *o) {
    long N = (long)o->B * o->T;
    uint16_t *x = dev_random(N * o->V, 1, 4.0f, 3);
    int *tg = ted_alloc(sizeof(int) * N, MEM_TEMP), *dtg = cu_malloc(sizeof(int) * N);
    float *loss = cu_malloc(sizeof(float) * N);
    if (!dtg || !loss) { fprintf(stderr, "flash_bench: out of device memory\n"); exit(1); }
    for (long i = 0; i < N; i++) tg[i] = (int)(i * 7919 % o->V);
    cu_memcpy(dtg, tg, sizeof(int) * N);
    double t[32];
    int reps = o->reps < 32 ? o->reps : 32;
    for (int i = 0; i < reps + 2; i++) {
        double t0 = now_ms();
        cu_fused_classifier_bf16(loss, x, dtg, N, o->V, o->V, 1.0f / (float)N);
        cu_sync();
        if (i >= 2) t[i - 2] = now_ms() - t0;
    }
    qsort(t, (size_t)reps, sizeof(double), cmp_double);
    double ms = t[reps / 2];
    printf("{\"op\": \"fused_classifier\", \"dtype\": \"bf16\", \"N\": %ld, \"V\": %d, \"ms\": %.3f, "
           "\"gbps\": %.0f, \"device\": \"%s\"}\n", N, o->V, ms, 3.0 * 2 * N * o->V / (ms * 1e-3) * 1e-9,
           cu_device_name());
    cu_free(x); cu_free(dtg); cu_free(loss);
    ted_free(tg);
}

int main(int argc, char **argv) {
    Opts o = {2, 2048, 16, 128, 50304, 20, 1};
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *a = argv[i], *v = argv[i + 1];
        if (!strcmp(a, "--B")) o.B = atoi(v);
        else if (!strcmp(a, "--T")) o.T = atoi(v);
        else if (!strcmp(a, "--H")) o.H = atoi(v);
        else if (!strcmp(a, "--hd")) o.hd = atoi(v);
        else if (!strcmp(a, "--reps")) o.reps = atoi(v);
        else if (!strcmp(a, "--V")) o.V = atoi(v);
        else if (!strcmp(a, "--baseline")) o.baseline = atoi(v);
        else { fprintf(stderr, "flash_bench: unknown option %s\n", a); return 2; }
    }
    if (o.B < 1 || o.T < 1 || o.H < 1 || o.hd < 1 || o.hd > 128 || o.reps < 1 || o.V < 0) {
        fprintf(stderr, "flash_bench: --B, --T, --H, --reps must be positive, --hd 1 to 128, --V 0 or more\n");
        return 2;
    }
    if (cu_device_count() == 0) {
        printf("flash_bench: no CUDA device\n");
        return 77;
    }
    cu_init(0, 1);   // the baseline's GEMMs as a --bf16 run has them
    int bad = agreement(&o);
    bench(&o, 0);
    bench(&o, 1);
    if (o.baseline) bench(&o, 2);
    if (o.V) bench_classifier(&o);
    return bad;   // 1: the bf16 and fp32 kernels disagree (the line above says by how much)
}
