// bench.c — `ted bench`: the trainer's steps (run/trainer.h) of the benchmark model on random
// tokens, timed after warm-up steps; `ted bench --optimizer N`: one AdamW step against a memcpy.
#include "cli/commands.h"
#include "cli/opts.h"
#include "core/alloc.h"
#include "core/backend.h"
#include "core/rng.h"
#include "core/util.h"
#include "io/agree.h"
#include "model/mfu.h"
#include "nn/gemm.h"
#include "parallel/adam.h"
#include "run/run.h"
#include "run/threads.h"
#include "run/trainer.h"
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

static void help(void) {
    printf("usage: ted bench [--steps N] [--bench-warmup N] [--config FILE] [any ted train flag that shapes the model\n"
           "       or batch]\n"
           "       ted bench --optimizer N: one AdamW step over N parameters (fp32, bf16, fp16) against a memcpy of\n"
           "       the same bytes\n"
           "  Times N (default 5) training steps (forward, backward, AdamW) after 2 warm-up steps (--bench-warmup) of the\n"
           "  bench model: B 8, T 256, d 256, L 4, 4 heads, f 1024, 8 experts top-2, moe_every 1, V 256.\n"
           "  Prints ms/step (wall; and the process's CPU time per step, which a shared machine\n"
           "  inflates less), tokens/s and MFU against the GEMM peak measured here (sgemm; the bf16 GEMM's\n"
           "  under bf16 compute); mfu_cpu is the same by CPU time: rank 0's FLOPs per core-second against\n"
           "  one core's GEMM rate timed the same way; gemm_engine and gemm_kernel name the CPU GEMM's;\n"
           "  omp_wait_policy the threads' wait policy (PASSIVE unless the environment names one).\n");
}

// The bench model (the help's): ted's defaults with its shape and batch.
static void bench_defaults(Config *c) {
    config_defaults(c);
    ModelConfig *m = &c->model;
    m->vocab_size = 256;
    m->n_positions = 256;
    m->n_embd = 256;
    m->n_layer = 4;
    m->n_head = 4;
    m->n_inner = 1024;
    m->num_experts = 8;
    m->top_k = 2;
    m->moe_every = 1;
    c->micro_batch = 8;
    c->steps = 5;
    c->warmup = 1;
}

// The bench model, a --config file on top and flags on top of both; the device and the layout.
// 0, or -1 after one line.
static int bench_config(Config *c, int argc, char **argv) {
    if (run_config(c, argc, argv, bench_defaults, NULL)) return -1;
    threads_set(c->threads);
    if (ted_agree(trainer_device(c) != 0)) return -1;
    char err[256];
    if (ted_agree(topo_check(comm_world_size(), c->tp, c->ep, c->pp, err, sizeof err) != 0)) {
        ted_error("layout: %s", err);
        return -1;
    }
    return 0;
}

// Random tokens for the benchmark: from (seed, step, micro-batch) only (trainer callback).
static void bench_batch(void *ctx, int mb, int *inp, int *tgt) {
    const Trainer *t = ctx;
    const Config *c = t->c;
    long n = (long)c->micro_batch * t->T;
    uint64_t at = (uint64_t)t->step * 4096 + (uint64_t)mb;
    for (long i = 0; i < n; i++) {
        inp[i] = (int)(rng_at(c->seed, at, (uint64_t)i) % c->model.vocab_size);
        tgt[i] = (int)(rng_at(c->seed + 1, at, (uint64_t)i) % c->model.vocab_size);
    }
}

// With pp > 1: `, "stage_cpu_ms": [...]`, each stage's CPU time per step (its busiest rank), which
// shows how even the split is where the ranks share cores and wall times cannot; else "".
static void stage_cpu_json(Topology *t, double cpu, char *out, size_t n) {
    out[0] = 0;
    if (t->pp == 1) return;
    double *all = ted_alloc(sizeof(double) * t->world, MEM_TEMP), per[256] = {0};
    comm_allgather(&t->g[GROUP_WORLD], &cpu, all, 1, DT_F64);
    for (int r = 0; r < t->world; r++) {
        int s = r / (t->world / t->pp);   // stage-major rank order (parallel/topology.h)
        per[s] = fmax(per[s], all[r]);
    }
    size_t k = snprintf(out, n, ", \"stage_cpu_ms\": [");
    for (int s = 0; s < t->pp && k < n; s++) k += snprintf(out + k, n - k, "%s%.1f", s ? ", " : "", per[s]);
    if (k < n) snprintf(out + k, n - k, "]");
    ted_free(all);
}

// What the timed steps add up to (after the warm-up steps).
typedef struct {
    double wall, cpu, wait, dropped;
    CommStats comm;
} BenchTimes;

// warm + c->steps trainer steps; the timed ones counted.
static BenchTimes bench_steps(Trainer *t, int warm) {
    BenchTimes bt;
    memset(&bt, 0, sizeof bt);
    for (int s = 0; s < warm + t->c->steps; s++) {
        double t0 = now_ms(), c0 = cpu_ms();
        StepMetrics m = trainer_step(t, s);
        if (s < warm) continue;
        bt.wall += now_ms() - t0;
        bt.cpu += cpu_ms() - c0;
        bt.wait += t->P.wait_ms;
        bt.dropped += m.dropped_frac / t->c->steps;
        comm_accumulate(&bt.comm);
    }
    return bt;
}

// The per-collective summary (stderr) and the JSON line (stdout) of rank 0; every rank takes part in
// the stage CPU times' gather.
static void bench_report(const BenchTimes *bt, const Trainer *t) {
    const Config *c = t->c;
    const ModelConfig *m = &c->model;
    Topology *topo = t->topo;
    int T = t->T;
    double ms = bt->wall / c->steps, tps = t->ntok / (ms * 1e-3), dropped = bt->dropped, peak = t->peak;
    double mfu = peak > 0 ? mfu_flops_per_token(m, T, dropped) * tps / peak : 0;
    // by CPU time: this rank's share of the step's FLOPs per core-second it burned, against one
    // core's sgemm rate timed the same way
    double core_peak = ted_device == DEV_CPU ? mfu_core_peak_flops(topo) : 0;
    double rank_flops = mfu_flops_per_token(m, T, dropped) * t->ntok / topo->world;
    double mfu_cpu = core_peak > 0 ? rank_flops / (bt->cpu / c->steps * 1e-3) / core_peak : 0;
    if (topo->rank == 0 && topo->world > 1) comm_summary(stderr, &bt->comm, bt->wall, c->steps);
    char stages[1024];
    stage_cpu_json(topo, bt->cpu / c->steps, stages, sizeof stages);
    if (topo->rank == 0 && topo->pp > 1)
        fprintf(stderr, "  pipeline wait (receives: other stages, the bubble) %.1f ms/step (%.1f%%)\n",
                bt->wait / c->steps, 100 * bt->wait / bt->wall);
    char engine[32], kernel[64];   // the CPU GEMMs' (nn/gemm.h)
    gemm_engine_name(engine, sizeof engine, kernel, sizeof kernel);
    const char *core = gemm_bf16_compute() ? "bf16_gemm" : "sgemm";
    if (topo->rank == 0)
        printf("{\"ms_per_step\": %.1f, \"cpu_ms_per_step\": %.1f, \"pp_wait_ms\": %.1f, \"tokens_per_s\": %.0f, "
               "\"mfu\": %.4f, \"%s_peak_gflops\": %.1f, "
               "\"mfu_cpu\": %.4f, \"%s_core_peak_gflops_cpu\": %.1f, \"gemm_engine\": \"%s\", \"gemm_kernel\": \"%s\", "
               "\"omp_wait_policy\": \"%s\", "
               "\"model_gflop_per_step\": %.2f, \"dropped_frac\": %.4f, \"threads\": %d, \"params\": %ld, "
               "\"device_bytes_peak\": %zu, \"mem_peak_bytes\": %zu, \"activation_bytes\": %zu%s}\n",
               ms, bt->cpu / c->steps, bt->wait / c->steps, tps, mfu,
               ted_device == DEV_CUDA ? "datasheet_bf16"
               : c->peak_tflops > 0   ? "given"
                                      : core,
               peak * 1e-9, mfu_cpu, core, core_peak * 1e-9, ted_device == DEV_CPU ? engine : "cublas",
               ted_device == DEV_CPU ? kernel : "",
               getenv("OMP_WAIT_POLICY") ? getenv("OMP_WAIT_POLICY") : "default",
               model_flops_per_token(m, T) * t->ntok / topo->dp * 1e-9, dropped, omp_get_max_threads(),
               model_num_params(m), mem_stats()->device_peak, mem_stats()->peak, mem_stats()->current[MEM_ACTIVATIONS],
               stages);
}

int cmd_bench(int argc, char **argv) {
    const char *nopt;
    if (opts_find(argc, argv, "--optimizer", &nopt)) return adam_bench_cmd(nopt);
    if (opts_help(argc, argv)) {
        help();
        return 0;
    }
    // --bench-warmup N: the untimed steps first (argv without it goes to the config)
    long warm = 2;
    const char *wopt;
    if (opts_find(argc, argv, "--bench-warmup", &wopt)) {
        if (opts_long("bench", "--bench-warmup", wopt, 0, 100000, &warm)) return TED_EXIT_USAGE;
        int k = 0;
        for (int i = 0; i < argc; i++) {
            if (!strcmp(argv[i], "--bench-warmup") && i + 1 < argc) { i++; continue; }
            if (!strncmp(argv[i], "--bench-warmup=", 15)) continue;
            argv[k++] = argv[i];
        }
        argc = k;
    }
    static Config c;
    if (bench_config(&c, argc, argv)) return TED_EXIT_USAGE;
    Topology topo;
    topo_init(&topo, c.tp, c.ep, c.pp);
    static Trainer t;
    t.peak = mfu_peak_flops(&c, &topo, &t.peak_kind);
    trainer_init(&t, &c, &topo, bench_batch, &t);
    BenchTimes bt = bench_steps(&t, (int)warm);
    bench_report(&bt, &t);
    trainer_free(&t);
    return 0;
}
