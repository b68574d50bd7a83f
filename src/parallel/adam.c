// adam.c — the AdamW element update and its benchmark (see adam.h).
#include "parallel/adam.h"
#include "parallel/adam_cuda.h"
#include "nn/ops_cuda.h"
#include "core/alloc.h"
#include "core/backend.h"
#include "core/half.h"
#include "core/simd.h"
#include "core/util.h"
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// One element: m, v and the weight from its fp32 gradient. Inlined into each loop below.
// step = lr/bc1, sb2 = √bc2: w·decay − lr·m̂/(√v̂ + eps) with m̂ = m/bc1, v̂ = v/bc2.
static inline float adam_elem(float w, float *m, float *v, float g, float step, float sb2, const AdamHyper *a) {
    *m = a->b1 * *m + (1 - a->b1) * g;
    *v = a->b2 * *v + (1 - a->b2) * g * g;
    return w * a->decay - step * *m / (sqrtf(*v) / sb2 + a->eps);
}

#ifdef TED_CUDA
// 16-bit gradients on a GPU (fp16): up-cast and scaled through the tile, zeroed by a device memset
// once the kernel has read them. (fp32 gradients on a GPU take zero.c's one-launch step.)
static void gpu_half(float *w, float *m, float *v, uint16_t *g16, long n, float gscale, const AdamHyper *a,
                     uint16_t *w16, int half, float *tile) {
    cu_upcast_scale(tile, g16, n, half, gscale);
    buf_zero(g16, sizeof(uint16_t) * n);
    cu_adamw(w, m, v, tile, n, a->lr, a->decay, a->b1, a->b2, a->eps, a->bc1, a->bc2);
    cu_f32_to_half(w16, w, n, half);
}
#endif

void adamw_half(float *w, float *m, float *v, uint16_t *g16, long n, float gscale, const AdamHyper *a,
                uint16_t *w16, int half, float *tile) {
    ON_GPU(gpu_half(w, m, v, g16, n, gscale, a, w16, half, tile));
    adamw_half_host(w, m, v, g16, n, gscale, a, w16, half);
}

void adamw_mixed_host(float *restrict w, float *restrict m, float *restrict v, float *restrict g, long n, float gscale,
                      const AdamHyper *a, uint16_t *restrict w16) {
    float step = a->lr / a->bc1, sb2 = sqrtf(a->bc2);
    #pragma omp parallel for simd schedule(static)
    for (long j = 0; j < n; j++) {
        w[j] = adam_elem(w[j], &m[j], &v[j], g[j] * gscale, step, sb2, a);
        w16[j] = bf16_from_f32(w[j]);
        g[j] = 0;
    }
}

// Each loop reads the gradient and writes zero over it while its cache line is still in the
// cache: no pass of its own for zeroing the gradients before the next step.
TED_CLONES void adamw_f32_host(float *restrict w, float *restrict m, float *restrict v, float *restrict g, long n,
                    float gscale, const AdamHyper *a, float *wout) {
    float step = a->lr / a->bc1, sb2 = sqrtf(a->bc2);
    if (!wout) {
        #pragma omp parallel for simd schedule(static)
        for (long j = 0; j < n; j++) { w[j] = adam_elem(w[j], &m[j], &v[j], g[j] * gscale, step, sb2, a); g[j] = 0; }
        return;
    }
    float *restrict out = wout;
    #pragma omp parallel for simd schedule(static)
    for (long j = 0; j < n; j++) { out[j] = w[j] = adam_elem(w[j], &m[j], &v[j], g[j] * gscale, step, sb2, a); g[j] = 0; }
}

// fp16: the gradient up-cast and the weights rounded by core/half.h's F16C conversions, a block
// at a time around the vectorised update (4.5 times faster than the scalar _Float16 casts).
enum { FP16_BLOCK = 512 };
TED_CLONES static void adamw_fp16_host(float *restrict w, float *restrict m, float *restrict v, uint16_t *restrict g16, long n,
                            float gscale, const AdamHyper *a, uint16_t *restrict w16) {
    float step = a->lr / a->bc1, sb2 = sqrtf(a->bc2);
    #pragma omp parallel for schedule(static)
    for (long b = 0; b < n; b += FP16_BLOCK) {
        long k = n - b < FP16_BLOCK ? n - b : FP16_BLOCK;
        float g[FP16_BLOCK];
        fp16_to_f32_n(g, g16 + b, k);
        #pragma omp simd
        for (long j = 0; j < k; j++) g[j] = w[b + j] = adam_elem(w[b + j], &m[b + j], &v[b + j], g[j] * gscale, step, sb2, a);
        fp16_from_f32_n(w16 + b, g, k);
        memset(g16 + b, 0, sizeof(uint16_t) * k);
    }
}

// bf16 as one loop that vectorises (its conversions are integer operations).
TED_CLONES void adamw_half_host(float *restrict w, float *restrict m, float *restrict v, uint16_t *restrict g16, long n,
                     float gscale, const AdamHyper *a, uint16_t *restrict w16, int half) {
    if (half == PREC_FP16) { adamw_fp16_host(w, m, v, g16, n, gscale, a, w16); return; }
    float step = a->lr / a->bc1, sb2 = sqrtf(a->bc2);
    #pragma omp parallel for simd schedule(static)
    for (long j = 0; j < n; j++) {
        w[j] = adam_elem(w[j], &m[j], &v[j], bf16_to_f32(g16[j]) * gscale, step, sb2, a);
        w16[j] = bf16_from_f32(w[j]);
        g16[j] = 0;
    }
}

// ---------------------------------------------------------------------------------------
// benchmark

static void fill(float *x, long n, float s) {
    #pragma omp parallel for schedule(static)
    for (long j = 0; j < n; j++) x[j] = s * (float)((j * 2654435761u) % 1000 + 1) / 1000.0f;
}

// memcpy of `bytes`, the threads each copying one contiguous part.
static void par_memcpy(char *dst, const char *src, size_t bytes) {
    #pragma omp parallel
    {
        size_t nt = (size_t)omp_get_num_threads(), id = (size_t)omp_get_thread_num();
        size_t part = (bytes + nt - 1) / nt, lo = id * part < bytes ? id * part : bytes;
        size_t hi = lo + part < bytes ? lo + part : bytes;
        memcpy(dst + lo, src + lo, hi - lo);
    }
}

// Best of reps: the least disturbed run on a shared machine.
#define BEST(ms, reps, stmt) do { (ms) = 1e30; for (int r_ = 0; r_ < (reps); r_++) { double t_ = now_ms(); stmt; \
    double d_ = now_ms() - t_; if (d_ < (ms)) (ms) = d_; } } while (0)

// rate: bytes moved per ms; copy_rate: memcpy's (a reference, not a ceiling: the pass reads four
// streams and writes three at once, which a CPU may serve faster than one copy's two)
static void say(const char *what, double ms, double bytes, double copy_rate) {
    printf("  %-5s AdamW: %8.2f ms, %6.1f GB/s: %.2fx memcpy's rate\n", what, ms, bytes / ms * 1e-6,
           bytes / ms / copy_rate);
}

int adam_bench(long n, int reps) {
    float *w = ted_alloc(sizeof(float) * n, MEM_TEMP), *m = ted_alloc(sizeof(float) * n, MEM_TEMP);
    float *v = ted_alloc(sizeof(float) * n, MEM_TEMP), *g = ted_alloc(sizeof(float) * n, MEM_TEMP);
    uint16_t *g16 = ted_alloc(2 * n, MEM_TEMP), *w16 = ted_alloc(2 * n, MEM_TEMP);
    // fp32 AdamW moves 32 bytes per parameter (g, w, m, v read; w, m, v written, g zeroed), bf16
    // and fp16 30 (g16, w, m, v read; w, m, v, w16 written, g16 zeroed): a memcpy of 16n bytes moves 32n
    size_t copy_bytes = 16 * (size_t)n;
    char *src = ted_alloc(copy_bytes, MEM_TEMP), *dst = ted_alloc(copy_bytes, MEM_TEMP);
    memset(src, 1, copy_bytes); memset(dst, 0, copy_bytes);
    fill(w, n, 0.02f); fill(m, n, 0.0f); fill(v, n, 0.0f); fill(g, n, 1e-3f);
    #pragma omp parallel for schedule(static)
    for (long j = 0; j < n; j++) g16[j] = bf16_from_f32(g[j]);
    AdamHyper a = {1e-4f, 1 - 1e-4f * 0.1f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.05f};
    double copy_ms, f32_ms, bf16_ms, fp16_ms, zero_ms;
    BEST(copy_ms, reps, par_memcpy(dst, src, copy_bytes));
    BEST(f32_ms, reps, adamw_f32_host(w, m, v, g, n, 1.0f, &a, NULL));
    BEST(bf16_ms, reps, adamw_half_host(w, m, v, g16, n, 1.0f, &a, w16, 1));
    BEST(fp16_ms, reps, adamw_half_host(w, m, v, g16, n, 1.0f, &a, w16, 2));
    BEST(zero_ms, reps, memset(g, 0, sizeof(float) * n));
    double copy_rate = 2.0 * copy_bytes / copy_ms;
    printf("optimizer step over %ld parameters, %d threads, best of %d. AdamW reads and writes 32 bytes a\n"
           "parameter in fp32, 30 in bf16 and fp16 (the gradient is zeroed in the same pass); memcpy of 32 bytes a\n"
           "parameter (%.0f MB copied) takes %.2f ms, %.1f GB/s: a reference rate, not a ceiling (the pass's seven\n"
           "streams at once, and the caches, can beat one copy's two):\n",
           n, omp_get_max_threads(), reps, copy_bytes * 1e-6, copy_ms, copy_rate * 1e-6);
    say("fp32", f32_ms, 32.0 * n, copy_rate);
    say("bf16", bf16_ms, 30.0 * n, copy_rate);
    say("fp16", fp16_ms, 30.0 * n, copy_rate);
    printf("  zeroing the fp32 gradient in a pass of its own (memset, one thread) would add %.2f ms\n", zero_ms);
    ted_free(w); ted_free(m); ted_free(v); ted_free(g); ted_free(g16); ted_free(w16); ted_free(src); ted_free(dst);
    return 0;
}

int adam_bench_cmd(const char *arg) {
    char *end = NULL;
    long n = arg ? strtol(arg, &end, 10) : 0;
    if (!arg || !*arg || *end || n < 1 || n > (1L << 34)) {
        ted_error("--optimizer: needs a number of parameters N in [1, 2^34] (got %s)", arg ? arg : "nothing");
        return TED_EXIT_USAGE;
    }
    return adam_bench(n, 10);
}
