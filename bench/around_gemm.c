// around_gemm.c — the element-wise work around the GEMMs of a training step, the op alone: ted's
// own functions ("now") against the loops they replaced (copied here verbatim as `was_*`: the GELU
// through the vector tanhf with the bias gradient in a pass of its own, scalar sums), on the bench
// model's shapes (B·T 2048 tokens, d 256, f 1024, top-2: one MoE block's 4096 expert rows).
// CPU time (getrusage), medians of the repetitions, alternated; prints one line per op.
//   OMP_NUM_THREADS=1 build/around_gemm [reps (21)]
#include "core/alloc.h"
#include "core/util.h"
#include "moe/dispatcher.h"
#include "nn/ops.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GLIBC__)   // as ops.c: libmvec's vector tanhf and expf
extern float tanhf(float) __attribute__((__simd__("notinbranch")));
extern float expf(float) __attribute__((__simd__("notinbranch")));
#endif
#define GELU_K 0.7978845608028654f

// ---- the loops as they were -------------------------------------------------------------
static void was_gelu_forward(float *out, const float *inp, long n) {
    #pragma omp parallel for simd schedule(static)
    for (long i = 0; i < n; i++) {
        float x = inp[i];
        out[i] = 0.5f * x * (1.0f + tanhf(GELU_K * (x + 0.044715f * x * x * x)));
    }
}
// gelu_backward, then matmul_backward's bias-gradient pass over the same rows
static void was_gelu_bias_backward(float *dh, float *db, const float *dhg, const float *h, long N, int OC) {
    #pragma omp parallel for simd schedule(static)
    for (long i = 0; i < N * OC; i++) {
        float x = h[i], u = GELU_K * (x + 0.044715f * x * x * x);
        float th = tanhf(u), sech2 = 1.0f - th * th;
        float dudx = GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
        dh[i] = dhg[i] * (0.5f * (1.0f + th) + 0.5f * x * sech2 * dudx);
    }
    for (long i = 0; i < N; i++) for (int o = 0; o < OC; o++) db[o] += dh[i * OC + o];
}
static void was_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w,
                                  const float *b, long N, int d) {
    #pragma omp parallel for schedule(static)
    for (long i = 0; i < N; i++) {
        const float *x = inp + i * d;
        float m = 0, v = 0;
        for (int c = 0; c < d; c++) m += x[c];
        m /= d;
        for (int c = 0; c < d; c++) { float z = x[c] - m; v += z * z; }
        float s = 1.0f / sqrtf(v / d + 1e-5f), *o = out + i * d;
        for (int c = 0; c < d; c++) o[c] = (x[c] - m) * s * w[c] + b[c];
        mean[i] = m; rstd[i] = s;
    }
}
static void was_layernorm_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                                   const float *w, const float *mean, const float *rstd, long N, int d) {
    #pragma omp parallel for schedule(static)
    for (long i = 0; i < N; i++) {
        const float *g = dout + i * d, *x = inp + i * d;
        float m = mean[i], s = rstd[i], a = 0, bsum = 0;
        for (int c = 0; c < d; c++) { float gw = g[c] * w[c]; a += gw; bsum += gw * (x[c] - m) * s; }
        a /= d; bsum /= d;
        float *dx = dinp + i * d;
        for (int c = 0; c < d; c++) { float xh = (x[c] - m) * s; dx[c] += (g[c] * w[c] - a - xh * bsum) * s; }
    }
    for (long i = 0; i < N; i++) {
        const float *g = dout + i * d, *x = inp + i * d;
        for (int c = 0; c < d; c++) { dw[c] += g[c] * (x[c] - mean[i]) * rstd[i]; db[c] += g[c]; }
    }
}
static void was_combine_backward(float *dy, float *dgate, const float *dout, const float *y, const float *gate,
                                 const int *row, long N, int k, int d) {
    #pragma omp parallel for schedule(static)
    for (long t = 0; t < N; t++)
        for (int j = 0; j < k; j++) {
            int r = row[t * k + j];
            dgate[t * k + j] = 0;
            if (r < 0) continue;
            const float *go = dout + t * d, *yr = y + (long)r * d;
            float g = gate[t * k + j], dot = 0, *dr = dy + (long)r * d;
            for (int c = 0; c < d; c++) { dr[c] = g * go[c]; dot += yr[c] * go[c]; }
            dgate[t * k + j] = dot;
        }
}
static void was_crossentropy_exp(float *sum, float *logits, const float *mx, long N, int V) {
    #pragma omp parallel for schedule(static)
    for (long i = 0; i < N; i++) {
        float *r = logits + i * V;
        double s = 0;
        for (int c = 0; c < V; c++) { r[c] = expf(r[c] - mx[i]); s += r[c]; }
        sum[i] = (float)s;
    }
}

// ---- timing ------------------------------------------------------------------------------
enum { NT = 2048, D = 256, F = 1024, K = 2, NR = NT * K, MAXREP = 64 };
typedef struct { float *h, *hg, *g, *dh, *db, *x, *o, *w, *b, *mean, *rstd, *dx, *dw, *y, *gate, *dg, *lg, *lg0, *mx, *s; int *row; int V; } Bufs;
typedef void (*Run)(Bufs *, int now);

static void r_gelu_f(Bufs *B, int now) { (now ? gelu_forward : was_gelu_forward)(B->hg, B->h, (long)NR * F); }
static void r_gelu_b(Bufs *B, int now) {
    if (now) matmul_bias_gelu_backward(NULL, NULL, B->db, B->dh, B->g, B->h, NULL, NULL, NR, 0, F);
    else was_gelu_bias_backward(B->dh, B->db, B->g, B->h, NR, F);
}
static void r_ln_f(Bufs *B, int now) {
    if (now) layernorm_forward(B->o, B->mean, B->rstd, B->x, B->w, B->b, NT, D, 0);
    else was_layernorm_forward(B->o, B->mean, B->rstd, B->x, B->w, B->b, NT, D);
}
static void r_ln_b(Bufs *B, int now) {
    if (now) layernorm_backward(B->dx, B->dw, B->db, B->o, B->x, B->w, B->mean, B->rstd, NT, D, 0);
    else was_layernorm_backward(B->dx, B->dw, B->db, B->o, B->x, B->w, B->mean, B->rstd, NT, D);
}
static void r_comb(Bufs *B, int now) {
    if (now) combine_backward(B->dx, B->dg, B->o, B->y, B->gate, B->row, NT, K, D, 0, 0);
    else was_combine_backward(B->dx, B->dg, B->o, B->y, B->gate, B->row, NT, K, D);
}
static void r_ce(Bufs *B, int now) {
    memcpy(B->lg, B->lg0, sizeof(float) * NT * B->V);   // both pay the copy
    if (now) crossentropy_exp(B->s, B->lg, B->mx, NT, 0, B->V, B->V);
    else was_crossentropy_exp(B->s, B->lg, B->mx, NT, B->V);
}

static int cmp(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return x < y ? -1 : x > y; }

static void measure(const char *name, Run run, Bufs *B, int reps) {
    double t[2][MAXREP];
    for (int r = 0; r < reps; r++)
        for (int now = 0; now < 2; now++) { double c0 = cpu_ms(); run(B, now); t[now][r] = cpu_ms() - c0; }
    qsort(t[0], reps, sizeof(double), cmp); qsort(t[1], reps, sizeof(double), cmp);
    printf("%-46s was %7.3f ms  now %7.3f ms  (%.2fx)\n", name, t[0][reps / 2], t[1][reps / 2], t[0][reps / 2] / t[1][reps / 2]);
}

static float *fbuf(long n, float lo, float hi) {
    float *p = ted_alloc(sizeof(float) * n, MEM_TEMP);
    for (long i = 0; i < n; i++) p[i] = lo + (hi - lo) * (float)rand() / RAND_MAX;
    return p;
}

int main(int argc, char **argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 21;
    reps = reps < 1 ? 1 : reps > MAXREP ? MAXREP : reps;
    Bufs B = {fbuf((long)NR * F, -3, 3), fbuf((long)NR * F, 0, 0), fbuf((long)NR * F, -1, 1), fbuf((long)NR * F, 0, 0),
              fbuf(F, 0, 0), fbuf((long)NT * D, 0, 1), fbuf((long)NT * D, -1, 1), fbuf(D, 0.5f, 1.5f), fbuf(D, 0, 0.1f),
              fbuf(NT, 0, 0), fbuf(NT, 0, 0), fbuf((long)NR * D, 0, 0), fbuf(D, 0, 0), fbuf((long)NR * D, -1, 1),
              fbuf(NR, 0, 1), fbuf(NR, 0, 0), NULL, NULL, fbuf(NT, 0, 0), fbuf(NT, 0, 0), NULL, 0};
    B.row = ted_alloc(sizeof(int) * NR, MEM_TEMP);
    for (long i = 0; i < NR; i++) B.row[i] = (int)((i * 7919) % NR);   // a scattered permutation of the slots
    printf("1 thread = OMP_NUM_THREADS=1; CPU ms, medians of %d alternated\n", reps);
    measure("GELU forward [4096,1024]", r_gelu_f, &B, reps);
    measure("GELU backward + bias gradient [4096,1024]", r_gelu_b, &B, reps);
    measure("layernorm forward [2048,256]", r_ln_f, &B, reps);
    measure("layernorm backward [2048,256]", r_ln_b, &B, reps);
    measure("combine backward [2048 tokens, top-2, d 256]", r_comb, &B, reps);
    for (int V = 256; V <= 8192; V *= 32) {
        B.V = V; B.lg = fbuf((long)NT * V, 0, 0); B.lg0 = fbuf((long)NT * V, -5, 0);
        char name[64];
        snprintf(name, sizeof name, "cross-entropy exp [2048,%d] (+ a copy)", V);
        measure(name, r_ce, &B, reps);
    }
    return 0;
}
