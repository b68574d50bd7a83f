// gemm_engines.c — OpenBLAS's sgemm against oneDNN's fp32 matmul (as ted calls it: nn/onednn.h,
// the primitive cache included) on the products of one training step of a model, with ted's
// transposes and strides; where the CPU has bf16 instructions, a third column: the same products in
// bf16 compute as ted runs them (gemm_cpu: rounding and packing the fp32 operands, oneDNN's bf16
// matmul). For each product: GFLOP/s by CPU time on each engine, medians of --runs runs alternated
// (the engines' order turns each run), each run of enough calls for about 2 GFLOP. Attention's products are timed together, per head, forward and
// backward (ops.c's causal blocks of 64, one superblock: T ≤ 512). The step total weighs each
// product by its calls per step. Run it on one thread:
//   OMP_NUM_THREADS=1 build/gemm_engines [--B 8 --T 256 --d 256 --f 1024 --E 8 --k 2 --V 256 --H 4
//                                         --L 4 --moe-every 1 --cf 1.0 --runs 3]
// (the defaults: ted bench's model; configs/moby.json: --B 16 --T 128 --E 4 --moe-every 2 --cf 1.25)
#include "core/alloc.h"
#include "core/clock.h"
#include "nn/gemm.h"
#include "nn/onednn.h"
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct { int B, T, d, f, E, k, V, H, L, moe_every, runs; double cf; } Opts;
typedef struct { int ta, tb, M, N, K, lda, ldb, ldc; float alpha, beta; } Mm;
typedef struct { char name[48]; Mm mm[64]; int n; double calls; } Prod;   // n products timed together

static float *X, *Y, *Z;   // operands big enough for every product

static void run_mm(int engine, const Mm *m) {   // 0 OpenBLAS, 1 oneDNN fp32, 2 bf16 compute
    if (engine == 2) gemm_cpu(m->ta, m->tb, m->M, m->N, m->K, m->alpha, X, m->lda, Y, m->ldb, m->beta, Z, m->ldc);
    else if (engine == 1) onednn_matmul(ONEDNN_F32, m->ta, m->tb, m->M, m->N, m->K, m->alpha, X, m->lda, Y, m->ldb, m->beta, Z, m->ldc);
    else cblas_sgemm(CblasRowMajor, m->ta ? CblasTrans : CblasNoTrans, m->tb ? CblasTrans : CblasNoTrans, m->M, m->N,
                     m->K, m->alpha, X, m->lda, Y, m->ldb, m->beta, Z, m->ldc);
}

static double flops_of(const Prod *p) {
    double s = 0;
    for (int i = 0; i < p->n; i++) s += 2.0 * p->mm[i].M * p->mm[i].N * p->mm[i].K;
    return s;
}

// CPU ms of one pass over p's products (the mean over enough calls for ~2 GFLOP)
static double time_prod(int engine, const Prod *p) {
    int reps = (int)ceil(2e9 / flops_of(p));
    for (int i = 0; i < p->n; i++) run_mm(engine, &p->mm[i]);   // warm: the primitives made
    double t0 = cpu_ms();
    for (int r = 0; r < reps; r++)
        for (int i = 0; i < p->n; i++) run_mm(engine, &p->mm[i]);
    return (cpu_ms() - t0) / reps;
}

static Prod *add(Prod *P, int *np, const char *name, double calls) {
    Prod *p = &P[(*np)++];
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", name);
    p->calls = calls;
    return p;
}
static void put(Prod *p, int ta, int tb, int M, int N, int K, int lda, int ldb, int ldc, float alpha, float beta) {
    p->mm[p->n++] = (Mm){ta, tb, M, N, K, lda, ldb, ldc, alpha, beta};
}
// forward, input gradient, weight gradient of out[n,oc] = in[n,c]·w[c,oc]
static void linear3(Prod *P, int *np, const char *name, int n, int c, int oc, double calls) {
    char s[48];
    snprintf(s, sizeof s, "%s fwd", name);
    put(add(P, np, s, calls), 0, 0, n, oc, c, c, oc, oc, 1, 0);
    snprintf(s, sizeof s, "%s dinp", name);
    put(add(P, np, s, calls), 0, 1, n, c, oc, oc, oc, c, 1, 0);
    snprintf(s, sizeof s, "%s dw", name);
    put(add(P, np, s, calls), 1, 0, c, oc, n, c, oc, oc, 1, 1);
}

// attention's products of one head, as ops.c runs them (T ≤ 512: one superblock)
static void attention(Prod *P, int *np, const Opts *o, double calls) {
    int T = o->T, hd = o->d / o->H, D = o->d, ld = 3 * D;
    Prod *f = add(P, np, "attention fwd (per head)", calls), *b = add(P, np, "attention bwd (per head)", calls);
    for (int r0 = 0; r0 < T; r0 += 64) {
        int m = T - r0 < 64 ? T - r0 : 64, n = r0 + m;
        put(f, 0, 1, m, n, hd, ld, ld, T, 1.0f / sqrtf((float)hd), 1);
        put(f, 0, 0, m, hd, n, T, ld, D, 1, 0);
    }
    for (int c0 = 0; c0 < T; c0 += 64) {
        int m = T - c0 < 64 ? T - c0 : 64, rows = T - c0;
        put(b, 0, 1, rows, m, hd, D, ld, m, 1, 1);
        put(b, 1, 0, m, hd, rows, T, D, ld, 1, 0);
        put(b, 1, 0, m, hd, rows, m, ld, ld, 1, 0);
        put(b, 0, 0, rows, hd, m, m, ld, ld, 1, c0 ? 1 : 0);
    }
}

static int products(Prod *P, const Opts *o) {
    int np = 0, n = o->B * o->T, nmoe = 0;
    for (int l = 0; l < o->L; l++) nmoe += o->E > 1 && (l + 1) % o->moe_every == 0;
    int rows = (int)ceil(o->cf * o->k * (double)o->T / o->E) * o->B;   // per expert, groups of one sequence
    linear3(P, &np, "c_attn", n, o->d, 3 * o->d, o->L);
    linear3(P, &np, "attn c_proj", n, o->d, o->d, o->L);
    if (o->L > nmoe) {
        linear3(P, &np, "c_fc", n, o->d, o->f, o->L - nmoe);
        linear3(P, &np, "mlp c_proj", n, o->f, o->d, o->L - nmoe);
    }
    if (nmoe) {
        char s[32];
        snprintf(s, sizeof s, "expert c_fc [%d rows]", rows);
        linear3(P, &np, s, rows, o->d, o->f, (double)nmoe * o->E);
        snprintf(s, sizeof s, "expert c_proj [%d rows]", rows);
        linear3(P, &np, s, rows, o->f, o->d, (double)nmoe * o->E);
    }
    put(add(P, &np, "lm head fwd", 1), 0, 1, n, o->V, o->d, o->d, o->d, o->V, 1, 0);
    put(add(P, &np, "lm head dinp", 1), 0, 0, n, o->d, o->V, o->V, o->d, o->d, 1, 0);
    put(add(P, &np, "lm head dw", 1), 1, 0, o->V, o->d, n, o->V, o->d, o->d, 1, 1);
    attention(P, &np, o, (double)o->L * o->B * o->H);
    return np;
}

static int cmp(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return x < y ? -1 : x > y; }

static int opt(int argc, char **argv, const char *name, int def) {
    for (int i = 1; i + 1 < argc; i++) if (!strcmp(argv[i], name)) return atoi(argv[i + 1]);
    return def;
}

int main(int argc, char **argv) {
    Opts o = {opt(argc, argv, "--B", 8), opt(argc, argv, "--T", 256), opt(argc, argv, "--d", 256),
              opt(argc, argv, "--f", 1024), opt(argc, argv, "--E", 8), opt(argc, argv, "--k", 2),
              opt(argc, argv, "--V", 256), opt(argc, argv, "--H", 4), opt(argc, argv, "--L", 4),
              opt(argc, argv, "--moe-every", 1), opt(argc, argv, "--runs", 3), 1.0};
    for (int i = 1; i + 1 < argc; i++) if (!strcmp(argv[i], "--cf")) o.cf = atof(argv[i + 1]);
    if (o.T > 512 || o.runs < 1 || o.runs > 15) { fprintf(stderr, "gemm_engines: T ≤ 512, 1 ≤ runs ≤ 15\n"); return 2; }
    static Prod P[64];
    int np = products(P, &o);
    long big = 3L * o.d * o.B * o.T + (long)o.f * o.B * o.T + (long)o.V * o.B * o.T;
    X = ted_alloc(sizeof(float) * big, MEM_TEMP); Y = ted_alloc(sizeof(float) * big, MEM_TEMP);
    Z = ted_alloc(sizeof(float) * big, MEM_TEMP);
    for (long i = 0; i < big; i++) { X[i] = (float)(i % 13) * 0.01f - 0.06f; Y[i] = (float)(i % 7) * 0.01f - 0.03f; }
    char version[32];
    onednn_version(version, sizeof version);
    printf("OpenBLAS %s | %s, %s | %d thread(s) | CPU time, medians of %d alternated runs\n", openblas_get_corename(),
           version, onednn_isa(), omp_get_max_threads(), o.runs);
    gemm_setup(1);   // bf16 compute where the CPU has it
    int ne = gemm_bf16_compute() ? 3 : 2;
    printf("%-30s %6s %9s %9s %7s %-16s%s\n", "product", "calls", "OpenBLAS", "oneDNN", "ratio", "oneDNN kernel",
           ne == 3 ? "      bf16  bf16/OpenBLAS" : "");
    double tot[3] = {0, 0, 0}, best = 0;
    for (int i = 0; i < np; i++) {
        double t[3][15], med[3];
        for (int r = 0; r < o.runs; r++)
            for (int j = 0; j < ne; j++) { int e = (j + r) % ne; t[e][r] = time_prod(e, &P[i]); }
        for (int e = 0; e < ne; e++) { qsort(t[e], o.runs, sizeof(double), cmp); med[e] = t[e][o.runs / 2]; tot[e] += P[i].calls * med[e]; }
        double fl = flops_of(&P[i]);
        const Mm *m = &P[i].mm[0];
        char kernel[64];
        onednn_kernel(ONEDNN_F32, m->ta, m->tb, m->M, m->N, m->K, m->lda, m->ldb, m->ldc, kernel, sizeof kernel);
        printf("%-30s %6.0f %9.1f %9.1f %7.2f %-16s", P[i].name, P[i].calls, fl / med[0] / 1e6, fl / med[1] / 1e6,
               med[0] / med[1], kernel);
        if (ne == 3) printf(" %9.1f %7.2f", fl / med[2] / 1e6, med[0] / med[2]);
        printf("\n");
        best += P[i].calls * (med[0] < med[1] ? med[0] : med[1]);
    }
    printf("step's products (experts at capacity): OpenBLAS %.1f ms, oneDNN fp32 %.1f ms, the faster per product %.1f ms",
           tot[0], tot[1], best);
    if (ne == 3) printf(", bf16 compute %.1f ms", tot[2]);
    char line[512];
    gemm_describe(line, sizeof line);
    printf("\n(GFLOP/s columns; ratios = OpenBLAS time / the other's)\n%s\n", line);
    return 0;
}
