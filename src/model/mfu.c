// mfu.c — the MFU denominator and numerator (see mfu.h).
#include "model/mfu.h"
#include "core/backend.h"
#include "parallel/comm.h"
#include "core/alloc.h"
#include "core/util.h"
#include "core/clock.h"
#include "model/model.h"
#include "nn/gemm.h"
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

double sgemm_peak_flops(int n, int reps) { return gemm_peak_rate(n, reps, now_ms); }

// The same timed by the process's CPU time: FLOPs per core-second, which a core lent to other
// jobs in the meantime does not lower.
double mfu_core_peak_flops(const Topology *tp) {
    double r = tp->rank == 0 ? gemm_peak_rate(1024, 6, cpu_ms) : 0;
    comm_broadcast((Group *)&tp->g[GROUP_WORLD], &r, 1, DT_F64, 0);
    return r;
}

// Best GEMM rate over `tries` tries of a few calls each, 20 ms apart: a passing burst of
// other work then lowers only some tries.
static double best_sgemm(int tries) {
    double best = 0;
    for (int i = 0; i < tries; i++) {
        double r = sgemm_peak_flops(1024, 3);
        if (r > best) best = r;
        nanosleep(&(struct timespec){0, 20 * 1000 * 1000}, NULL);
    }
    return best;
}

// One core's rate of the run's GEMM: one thread, timed by the process's CPU time (a core another
// job takes meanwhile does not lower it), best of `tries`.
static double one_core_rate(int tries) {
    int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    double best = 0;
    for (int i = 0; i < tries; i++) {
        double r = gemm_peak_rate(1024, 2, cpu_ms);
        if (r > best) best = r;
    }
    omp_set_num_threads(threads);
    return best;
}

// TED_DEBUG_PEAK_SCALE=a[,c]: the all-thread measurement times a (as a start-up on a busy machine
// lowers it), the one-core rate times c (default 1): the tests of the floor and of the raise
// (run/after_step.c) lower the peak this way.
static void debug_scale(double r[2]) {
    const char *s = getenv("TED_DEBUG_PEAK_SCALE");
    double a = 1, c = 1;
    if (!s || sscanf(s, "%lf,%lf", &a, &c) < 1) return;
    if (a > 0) r[0] *= a;
    if (c > 0) r[1] *= c;
}

double mfu_peak_flops(const Config *c, const Topology *tp, const char **what) {
    int world = tp->world;
    if (c->peak_tflops > 0) { *what = "given"; return c->peak_tflops * 1e12 * world; }
#ifdef TED_CUDA
    if (ted_device == DEV_CUDA) { *what = "datasheet bf16"; return cu_peak_flops() * world; }
#endif
    const char *gemm = gemm_bf16_compute() ? "bf16 gemm" : "sgemm";   // the mode gemm_setup set for this run
    double r[2] = {0, 0};   // rank 0's: every thread at once (wall time), one core (CPU time)
    if (tp->rank == 0) {
        r[0] = best_sgemm(6);
        r[1] = one_core_rate(4);
        debug_scale(r);
    }
    comm_broadcast((Group *)&tp->g[GROUP_WORLD], r, 2, DT_F64, 0);
    // the ranks of a node share its cores; a rank's cores are never worth less than one core's rate each
    const char *ls = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    int local = ls && atoi(ls) > 0 ? atoi(ls) : 1, cores = omp_get_num_procs();
    double used = (double)local * omp_get_max_threads(), share = used > cores ? cores / used : 1;
    double mine = omp_get_max_threads() * share, floor = mine * r[1];
    static char kind[64];
    if (floor > r[0] * share) snprintf(kind, sizeof kind, "%.3g cores x one core's %s", mine, gemm);
    else snprintf(kind, sizeof kind, "%s", gemm);
    *what = kind;
    return (floor > r[0] * share ? floor : r[0] * share) * world;
}

double mfu_flops_per_token(const ModelConfig *m, int T, double dropped_frac) {
    double d = m->n_embd, f = cfg_ffn(m), expert = 0;
    for (int l = 0; l < m->n_layer; l++)
        if (cfg_is_moe(m, l)) expert += 6.0 * m->top_k * 2 * d * f;
    return model_flops_per_token(m, T) - expert * dropped_frac;
}
