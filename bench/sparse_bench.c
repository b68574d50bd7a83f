// sparse_bench.c — block-sparse against dense attention (design), the op alone:
// forward + backward of B sequences, 4 heads of 64 (d 256), at each T given, for the dense
// causal attention (ops.c) and for a sparse mode (default: fixed, block 64, 4 local blocks,
// 1 global). Prints per T one JSON line: ms (best of the repetitions), the saved probabilities'
// bytes (att) and the scratch bytes, the best CPU time of the process (steadier on a loaded machine), the present-block fraction, and the sparse time
// over dense time × fraction. Dense is skipped (--dense-max) above a length; its bytes are
// still computed (B·H·T² floats; scratch attention_scratch_floats(T) per thread).
//   usage: sparse_bench [--T 1024,2048,...] [--B 1] [--reps 3 (0: sizes only)] [--dense-max 8192] [--mode fixed]
//                       [--block 64] [--local 4] [--global 1] [--recompute 0|1]
#include "core/alloc.h"
#include "nn/ops.h"
#include "core/rng.h"
#include "nn/sparse_attention.h"
#include "core/util.h"
#include <omp.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

typedef struct { int B, reps, dense_max, H, hd; SparseConfig s; } Opts;

// best wall-clock ms of reps runs; *cpu: the best CPU ms
static double best_ms(int reps, void (*run)(void *), void *ctx, double *cpu) {
    double best = 1e30;
    *cpu = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0 = now_ms(), c0 = cpu_ms();
        run(ctx);
        double t = now_ms() - t0, c = cpu_ms() - c0;
        best = t < best ? t : best;
        *cpu = c < *cpu ? c : *cpu;
    }
    return best;
}

typedef struct { const Opts *o; int T; float *qkv, *dout, *out, *dqkv, *att, *scratch; const SparseLayout *L; } Run;
static void run_dense(void *p) {
    Run *r = p;
    attention_forward(r->out, r->att, r->qkv, r->o->B, r->T, r->o->H, r->o->hd);
    attention_backward(r->dqkv, r->dout, r->att, r->qkv, r->out, r->o->B, r->T, r->o->H, r->o->hd, r->scratch);
}
static void run_sparse(void *p) {
    Run *r = p;
    sparse_attention_forward(r->out, r->att, r->qkv, r->L, r->o->B, r->T, r->o->H, r->o->hd, r->scratch);
    sparse_attention_backward(r->dqkv, r->dout, r->att, r->qkv, r->L, r->o->B, r->T, r->o->H, r->o->hd, r->scratch);
}

static void bench_T(const Opts *o, int T) {
    long N = (long)o->B * T, D = (long)o->H * o->hd, threads = omp_get_max_threads();
    SparseLayout L;
    sparse_layout_build(&L, &o->s, 1337, 0, 0, o->H, T);
    long nio = o->reps > 0 ? N : 0;   // --reps 0: the sizes only
    Run r = {o, T, ted_alloc(sizeof(float) * nio * 3 * D, MEM_TEMP), ted_alloc(sizeof(float) * nio * D, MEM_TEMP),
             ted_alloc(sizeof(float) * nio * D, MEM_TEMP), ted_alloc(sizeof(float) * nio * 3 * D, MEM_TEMP), NULL, NULL, &L};
    for (long i = 0; i < nio * 3 * D; i++) r.qkv[i] = rng_normal(1, 2, (uint64_t)i);
    for (long i = 0; i < nio * D; i++) r.dout[i] = rng_normal(1, 3, (uint64_t)i);
    double frac = (double)L.nnz / ((double)o->H * L.nb * L.nb);
    long s_att = 4 * sparse_attention_att_floats(&L, o->B), s_scr = 4 * (threads * sparse_attention_scratch_floats(&L, o->hd) +
                                                                   sparse_attention_recompute_floats(&L, o->B));
    long d_att = 4L * o->B * o->H * T * T, d_scr = 4L * threads * attention_scratch_floats(T);
    double s_cpu = -1, d_cpu = -1, s_ms = -1, d_ms = -1;
    if (o->reps > 0) {
        r.att = ted_alloc(s_att, MEM_TEMP); r.scratch = ted_alloc(s_scr, MEM_TEMP);
        s_ms = best_ms(o->reps, run_sparse, &r, &s_cpu);
        ted_free(r.att); ted_free(r.scratch);
    }
    if (o->reps > 0 && T <= o->dense_max) {
        r.att = ted_alloc(d_att, MEM_TEMP); r.scratch = ted_alloc(d_scr, MEM_TEMP);
        d_ms = best_ms(o->reps, run_dense, &r, &d_cpu);
        ted_free(r.att); ted_free(r.scratch);
    }
    printf("{\"T\": %d, \"B\": %d, \"mode\": \"%s\", \"recompute\": %d, \"present_frac\": %.4f, \"sparse_ms\": %.1f, \"dense_ms\": %.1f, "
           "\"sparse_over_dense_x_frac\": %.2f, \"speedup\": %.2f, \"sparse_cpu_ms\": %.1f, \"dense_cpu_ms\": %.1f, "
           "\"cpu_sparse_over_dense_x_frac\": %.2f, \"cpu_speedup\": %.2f, \"sparse_att_bytes\": %ld, "
           "\"dense_att_bytes\": %ld, \"sparse_scratch_bytes\": %ld, \"dense_scratch_bytes\": %ld, \"threads\": %ld}\n",
           T, o->B, sparse_mode_name(o->s.mode), o->s.recompute, frac, s_ms, d_ms, d_ms > 0 ? s_ms / (d_ms * frac) : -1,
           d_ms > 0 ? d_ms / s_ms : -1, s_cpu, d_cpu, d_ms > 0 ? s_cpu / (d_cpu * frac) : -1,
           d_ms > 0 ? d_cpu / s_cpu : -1, s_att, d_att, s_scr, d_scr, threads);
    fflush(stdout);
    ted_free(r.qkv); ted_free(r.dout); ted_free(r.out); ted_free(r.dqkv);
    sparse_layout_free(&L);
}

int main(int argc, char **argv) {
    Opts o = {1, 3, 8192, 4, 64, {0}};
    sparse_config_defaults(&o.s);
    o.s.mode = SPARSE_FIXED; o.s.block = 64; o.s.num_local_blocks = 4; o.s.num_global_blocks = 1;
    char Ts[8192] = "1024,2048,4096,8192";
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *a = argv[i], *v = argv[i + 1];
        if (!strcmp(a, "--T")) snprintf(Ts, sizeof Ts, "%s", v);
        else if (!strcmp(a, "--B")) o.B = atoi(v);
        else if (!strcmp(a, "--reps")) o.reps = atoi(v);
        else if (!strcmp(a, "--dense-max")) o.dense_max = atoi(v);
        else if (!strcmp(a, "--block")) o.s.block = atoi(v);
        else if (!strcmp(a, "--local")) o.s.num_local_blocks = atoi(v);
        else if (!strcmp(a, "--global")) o.s.num_global_blocks = atoi(v);
        else if (!strcmp(a, "--recompute")) o.s.recompute = atoi(v);
        else if (!strcmp(a, "--mode")) {
            int m = -1;
            for (int k = 0; k < 5; k++) if (!strcmp(v, sparse_mode_name(k))) m = k;
            if (m < 0) { fprintf(stderr, "sparse_bench: unknown --mode %s\n", v); return 2; }
            o.s.mode = m;
        } else { fprintf(stderr, "sparse_bench: unknown option %s\n", a); return 2; }
    }
    for (char *t = strtok(Ts, ","); t; t = strtok(NULL, ",")) bench_T(&o, atoi(t));
    return 0;
}
