// attn_bench.c — causal attention (ops.c) forward + backward alone, against its causal FLOPs at
// the sgemm rate of this core. For each T: the best CPU ms of the op over the repetitions, and
//   causal GFLOP = 4·B·H·T²·hd/2 · 3     (QKᵀ and P·V forward, four products backward; the
//                                         masked half of T² not counted)
//   ideal ms     = causal GFLOP / rate, for two rates timed by CPU time on one thread:
//     peak:  a 1024³ sgemm (what `ted bench` calls the 1-core peak, mfu_cpu's denominator);
//     shape: the same six products as ops.c runs them over the causal blocks of 64, nothing
//            between them (how fast OpenBLAS runs these thin shapes; --block sets the size).
//   over_peak = op ms / ideal ms at the peak — the "within 1.3×" reads off it.
// Run it with OMP_NUM_THREADS=1 for the per-core figure.
//   usage: attn_bench [--T 1024,2048] [--B 1] [--H 4] [--hd 64] [--reps 5] [--block 64]
#include "core/alloc.h"
#include "core/rng.h"
#include "core/util.h"
#include "nn/ops.h"
#include <cblas.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct { int B, H, hd, reps, block; } Opts;
typedef struct { const Opts *o; int T; float *qkv, *dout, *out, *dqkv, *att, *scratch, *A, *G; } Run;

// best CPU ms of reps runs
static double best_cpu(int reps, void (*run)(void *), void *ctx) {
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double c0 = cpu_ms();
        run(ctx);
        double c = cpu_ms() - c0;
        best = c < best ? c : best;
    }
    return best;
}

static void run_op(void *p) {
    Run *r = p;
    attention_forward(r->out, r->att, r->qkv, r->o->B, r->T, r->o->H, r->o->hd);
    attention_backward(r->dqkv, r->dout, r->att, r->qkv, r->out, r->o->B, r->T, r->o->H, r->o->hd, r->scratch);
}

// The forward's products as ops.c runs them: 512 rows at a time against the keys before them (one
// S = QKᵀ and one O = P·V), then their own keys by row blocks, each to its block's end.
static void forward_products(const Run *r, const float *q, float *o) {
    int T = r->T, hd = r->o->hd, D = r->o->H * hd, ld = 3 * D, bk = r->o->block;
    const float *k = q + D, *v = q + 2 * D;
    for (int s0 = 0; s0 < T; s0 += 512) {
        int ms = T - s0 < 512 ? T - s0 : 512;
        float *as = r->A + (long)s0 * T;
        if (s0) cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, ms, s0, hd, 1, q + (long)s0 * ld, ld, k, ld, 0, as, T);
        if (s0) cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, ms, hd, s0, 1, as, T, v, ld, 0, o + (long)s0 * D, D);
        for (int r0 = s0; r0 < s0 + ms; r0 += bk) {
            int m = s0 + ms - r0 < bk ? s0 + ms - r0 : bk, n = r0 + m;
            float *a = r->A + (long)r0 * T + s0;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n - s0, hd, 1, q + (long)r0 * ld, ld, k + (long)s0 * ld,
                        ld, 0, a, T);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, hd, n - s0, 1, a, T, v + (long)s0 * ld, ld, 1,
                        o + (long)r0 * D, D);
        }
    }
}

// The six causal products of one (b, h) as ops.c runs them: the forward's, then the backward's by
// key strips (dP = dO·V_jᵀ into a strip buffer G, dV_j = P_jᵀ·dO, dK_j = dS_jᵀ·Q, dQ += dS_j·K_j);
// no softmax.
static void products_one(const Run *r, const float *q, const float *dO, float *o, float *dq) {
    int T = r->T, hd = r->o->hd, D = r->o->H * hd, ld = 3 * D, bk = r->o->block;
    const float *k = q + D, *v = q + 2 * D;
    forward_products(r, q, o);
    for (int c0 = 0; c0 < T; c0 += bk) {
        int m = T - c0 < bk ? T - c0 : bk, rows = T - c0;
        const float *ac = r->A + (long)c0 * T + c0, *dOc = dO + (long)c0 * D;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, m, hd, 1, dOc, D, v + (long)c0 * ld, ld, 0, r->G, m);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, m, hd, rows, 1, ac, T, dOc, D, 0, dq + 2 * D + (long)c0 * ld,
                    ld);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, m, hd, rows, 1, r->G, m, q + (long)c0 * ld, ld, 0,
                    dq + D + (long)c0 * ld, ld);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hd, m, 1, r->G, m, k + (long)c0 * ld, ld,
                    c0 ? 1.0f : 0.0f, dq + (long)c0 * ld, ld);
    }
}

static void run_products(void *p) {
    Run *r = p;
    int T = r->T, D = r->o->H * r->o->hd, ld = 3 * D;
    for (int b = 0; b < r->o->B; b++)
        for (int h = 0; h < r->o->H; h++)
            products_one(r, r->qkv + (long)b * T * ld + h * r->o->hd, r->dout + (long)b * T * D + h * r->o->hd,
                         r->out + (long)b * T * D + h * r->o->hd, r->dqkv + (long)b * T * ld + h * r->o->hd);
}

// the products' FLOPs as run: whole blocks on the diagonal
static double products_flops(const Opts *o, int T) {
    double f = 0;
    for (int r0 = 0; r0 < T; r0 += o->block) {
        int m = T - r0 < o->block ? T - r0 : o->block;
        f += 6.0 * 2 * m * (r0 + m) * o->hd;
    }
    return f * o->B * o->H;
}

typedef struct { int n; float *a, *b, *c; } Peak;
static void run_peak(void *p) {
    Peak *k = p;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, k->n, k->n, k->n, 1, k->a, k->n, k->b, k->n, 0, k->c, k->n);
}

static double peak_rate(void) {
    Peak k = {1024, NULL, NULL, NULL};
    long n2 = (long)k.n * k.n;
    k.a = ted_alloc(sizeof(float) * n2, MEM_TEMP); k.b = ted_alloc(sizeof(float) * n2, MEM_TEMP);
    k.c = ted_alloc(sizeof(float) * n2, MEM_TEMP);
    for (long i = 0; i < n2; i++) { k.a[i] = rng_normal(1, 5, (uint64_t)i); k.b[i] = rng_normal(1, 6, (uint64_t)i); }
    double ms = best_cpu(6, run_peak, &k);
    ted_free(k.a); ted_free(k.b); ted_free(k.c);
    return 2.0 * k.n * k.n * k.n / (ms * 1e-3);
}

static void bench_T(const Opts *o, int T, double peak) {
    long N = (long)o->B * T, D = (long)o->H * o->hd, TT = (long)T * T;
    Run r = {o, T, ted_alloc(sizeof(float) * N * 3 * D, MEM_TEMP), ted_alloc(sizeof(float) * N * D, MEM_TEMP),
             ted_alloc(sizeof(float) * N * D, MEM_TEMP), ted_alloc(sizeof(float) * N * 3 * D, MEM_TEMP),
             ted_alloc(sizeof(float) * o->B * o->H * TT, MEM_TEMP),
             ted_alloc(sizeof(float) * omp_get_max_threads() * attention_scratch_floats(T), MEM_TEMP), NULL, NULL};
    for (long i = 0; i < N * 3 * D; i++) r.qkv[i] = rng_normal(1, 2, (uint64_t)i);
    for (long i = 0; i < N * D; i++) r.dout[i] = rng_normal(1, 3, (uint64_t)i);
    double op = best_cpu(o->reps, run_op, &r);
    long GT = (long)o->block * T;
    r.A = ted_alloc(sizeof(float) * TT, MEM_TEMP); r.G = ted_alloc(sizeof(float) * GT, MEM_TEMP);
    memset(r.A, 0, sizeof(float) * TT); memset(r.G, 0, sizeof(float) * GT);
    double prod = best_cpu(o->reps, run_products, &r), pf = products_flops(o, T);
    double causal = 4.0 * o->B * o->H * (double)T * T * o->hd / 2 * 3, shape = pf / (prod * 1e-3);
    double ideal_peak = causal / peak * 1e3, ideal_shape = causal / shape * 1e3;
    printf("{\"T\": %d, \"B\": %d, \"H\": %d, \"hd\": %d, \"op_cpu_ms\": %.1f, \"causal_gflop\": %.3f, "
           "\"peak_gflops\": %.1f, \"ideal_ms_at_peak\": %.1f, \"over_peak\": %.2f, \"products_cpu_ms\": %.1f, "
           "\"shape_gflops\": %.1f, \"ideal_ms_at_shape\": %.1f, \"over_shape\": %.2f, \"threads\": %d}\n",
           T, o->B, o->H, o->hd, op, causal * 1e-9, peak * 1e-9, ideal_peak, op / ideal_peak, prod, shape * 1e-9,
           ideal_shape, op / ideal_shape, omp_get_max_threads());
    fflush(stdout);
    ted_free(r.qkv); ted_free(r.dout); ted_free(r.out); ted_free(r.dqkv); ted_free(r.att); ted_free(r.scratch);
    ted_free(r.A); ted_free(r.G);
}

int main(int argc, char **argv) {
    Opts o = {1, 4, 64, 5, 64};
    char Ts[1024] = "2048";
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *a = argv[i], *v = argv[i + 1];
        if (!strcmp(a, "--T")) snprintf(Ts, sizeof Ts, "%s", v);
        else if (!strcmp(a, "--B")) o.B = atoi(v);
        else if (!strcmp(a, "--H")) o.H = atoi(v);
        else if (!strcmp(a, "--hd")) o.hd = atoi(v);
        else if (!strcmp(a, "--reps")) o.reps = atoi(v);
        else if (!strcmp(a, "--block")) o.block = atoi(v);
        else { fprintf(stderr, "attn_bench: unknown option %s\n", a); return 2; }
    }
    if (o.B < 1 || o.H < 1 || o.hd < 1 || o.reps < 1 || o.block < 1) {
        fprintf(stderr, "attn_bench: --B, --H, --hd, --reps and --block must be positive\n");
        return 2;
    }
    double peak = peak_rate();
    for (char *t = strtok(Ts, ","); t; t = strtok(NULL, ",")) {
        if (atoi(t) < 1) { fprintf(stderr, "attn_bench: bad --T %s\n", t); return 2; }
        bench_T(&o, atoi(t), peak);
    }
    return 0;
}
