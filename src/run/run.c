// run.c — a training run around the trainer's steps (see run.h).
#include "run/run.h"
#include "core/alloc.h"
#include "core/util.h"
#include "io/agree.h"
#include "io/hfconfig.h"
#include "io/runinfo.h"
#include "model/mfu.h"
#include "model/model.h"
#include "nn/gemm.h"
#include "run/evaluate.h"
#include "run/sample.h"
#include "run/stop.h"
#include "run/threads.h"
#include <string.h>
#include <sys/stat.h>

// The memory plan (model/memplan.h) next to what was allocated.
static void print_model_state(const Run *R) {
    const MemStats *ms = mem_stats();
    const MemPlan *p = &R->plan;
    double meas = (double)(ms->current[MEM_PARAMS] + ms->current[MEM_GRADS] + ms->current[MEM_OPTIMIZER]);
    if (R->topo.rank == 0)
        printf(
            "memory per rank: model state predicted %.0f bytes (params %.0f + grads %.0f + optimizer %.0f, ZeRO-%d), "
            "allocated %.0f (params %zu + grads %zu + optimizer %zu); activations predicted %.0f, allocated %zu\n",
            p->state, p->params, p->grads, p->optimizer, R->c.zero_stage, meas, ms->current[MEM_PARAMS],
            ms->current[MEM_GRADS], ms->current[MEM_OPTIMIZER], p->act, ms->current[MEM_ACTIVATIONS]);
}

// The attention part of the model line: dense, or the sparse mode with the share of the causal
// blocks its layouts keep.
static void attention_words(const Run *R, char *att, size_t n) {
    const Model *M = &R->tr.M;
    if (!M->sl) {
        snprintf(att, n, "dense attention");
        return;
    }
    double nnz = 0, all = 0;
    for (int l = 0; l < M->L; l++) {
        const SparseLayout *L = &M->sl[l];
        nnz += (double)L->nnz;
        all += (double)L->H * L->nb * (L->nb + 1) / 2;
    }
    snprintf(att, n, "sparse attention %s (block %d, %.1f%% of the causal blocks)", sparse_mode_name(R->c.sparse.mode),
             R->c.sparse.block, all > 0 ? 100 * nnz / all : 100.0);
}

// The start-up line of the model: its size, dense or MoE (experts, top-k, router), the attention.
static void print_model_line(const Run *R) {
    const Config *c = &R->c;
    const ModelConfig *m = &c->model;
    const Trainer *t = &R->tr;
    char ffn[160], att[160];
    if (t->nmoe == 0) snprintf(ffn, sizeof ffn, "dense, %d blocks", m->n_layer);
    else
        snprintf(ffn, sizeof ffn, "MoE, %d blocks of which %d MoE with %d experts, top-%d, router %s%s", m->n_layer,
                 t->nmoe, m->num_experts, m->top_k, router_names[m->router],
                 m->shared_experts ? " + shared experts" : "");
    attention_words(R, att, sizeof att);
    printf("model: %ld parameters, %s%s; %s; T %d, global batch %ld sequences; MFU against %s peak %.1f GFLOP/s\n",
           model_num_params(m), cfg_is_llama(m) ? "llama, " : "", ffn, att, t->T, t->gbatch, t->peak_kind,
           t->peak * 1e-9);
    char gemm[512];   // the CPU GEMMs' engine and kernel (nn/gemm.h)
    gemm_describe(gemm, sizeof gemm);
    if (ted_device == DEV_CPU) printf("%s\n", gemm);
    const char *why = cfg_is_llama(m) ? hf_llama_layout(m) : NULL;
    if (why && c->save[0])   // docs/llama.md: no Hugging Face export for these
        printf("checkpoints: ted's own layout (model_type ted_moe), no Hugging Face export: %s\n", why);
}

// The checkpoint resumed from is --save's step_N of its step (one folder, however named).
static int resumed_in_save(const Run *R) {
    if (!R->ckdir[0] || !R->c.save[0]) return 0;
    char p[1300];
    snprintf(p, sizeof p, "%s/step_%08ld", R->c.save, R->st.step);
    struct stat a, b;
    return stat(p, &a) == 0 && stat(R->ckdir, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

// Micro-batch mb of the running step: this data-parallel rank's share of it (trainer callback).
static void step_batch(void *ctx, int mb, int *inp, int *tgt) {
    Run *R = ctx;
    const Config *c = &R->c;
    int T = R->tr.T;
    long first = (long)mb * c->micro_batch * R->topo.dp + (long)R->topo.dp_idx * c->micro_batch;
    for (int j = 0; j < c->micro_batch; j++)
        data_sequence(&R->ds.train, T, R->st.seed, c->data_sequential, R->tr.step, first + j, R->tr.gbatch, inp + j * T,
                      tgt + j * T);
}

// The layout, the memory plan checked, the trainer built; 0 or -1 (agreed).
static int build(Run *R) {
    Config *c = &R->c;
    topo_init(&R->topo, c->tp, c->ep, c->pp);
    topo_print(&R->topo, c->model.num_experts);
    topo_print_placement(&R->topo);
    memplan_of(&R->plan, c, &R->topo, ted_device == DEV_CUDA);   // before allocating: does it fit?
    if (ted_agree(memplan_check(&R->plan, c, R->topo.rank))) return -1;
    trainer_init(&R->tr, c, &R->topo, step_batch, R);
    R->tr.log = R->log;
    R->st = (TrainerState){
        .steps = c->steps, .seed = c->seed, .sequential = c->data_sequential, .gbatch = R->tr.gbatch};
    return 0;
}

// The validation windows of each evaluation (a note when there are none).
static void count_validation(Run *R) {
    const Config *c = &R->c;
    R->nval = data_nwindows(&R->ds.val, R->tr.T);
    if (c->eval_windows > 0 && c->eval_windows < R->nval) R->nval = c->eval_windows;
    if (R->nval == 0 && R->topo.rank == 0)
        printf("note: %s has no validation split (no *_val_* shard, or one shorter than a window of %d+1 tokens): "
               "no evaluation runs; ted tokenize writes PREFIX_val_*.bin beside the training shards\n",
               c->data, R->tr.T);
}

// --dry-run: the resolved settings, the layout and each rank's memory by the plan ted train checks
// before allocating; nothing is allocated, selected or written (R->done).
static void dry_run(Run *R, int argc, char **argv) {
    const Config *c = &R->c;
    int dp = R->world / (c->tp * c->pp), T = cfg_seq_len(c), rank0 = comm_world_rank() == 0;
    MemPlan p;
    memplan_worst(&p, c, c->tp, c->ep, c->pp, dp, c->device == DEV_CUDA);
    runinfo_start(c, argc, argv, &R->ds, T, R->world, dp, rank0);
    char b[5][32];
    const double bytes[5] = {p.state, p.params, p.grads, p.optimizer, p.act};
    for (int i = 0; i < 5; i++) progress_count(bytes[i], b[i], sizeof b[i]);
    if (rank0)
        printf("dry run: %d process%s, pp %d x tp %d x dp %d (ep %d, edp %d) on the %s; model %ld parameters; "
               "global batch %ld sequences of %d tokens\n"
               "memory per rank (the fullest stage): model state %sB (params %sB, grads %sB, optimizer %sB, ZeRO-%d)%s, "
               "activations %sB\n"
               "dry run: ted train accepts this run; nothing was trained or written\n",
               R->world, R->world > 1 ? "es" : "", c->pp, c->tp, dp, c->ep, dp / c->ep,
               c->device == DEV_CUDA ? "GPU (--device cuda)" : "CPU", model_num_params(&c->model),
               cfg_global_batch(c, dp), T, b[0], b[1], b[2], b[3], c->zero_stage,
               p.host_optimizer > 0 ? " + the offloaded optimizer on the host" : "", b[4]);
    data_free(&R->ds);
    R->done = 1;
}

int run_open(Run *R, int argc, char **argv) {
    Config *c = &R->c;
    if (ted_agree(run_prepare(R, argc, argv) != 0)) return -1;
    if (R->done) return 0;
    if (c->dry_run) {
        dry_run(R, argc, argv);
        return 0;
    }
    if (agree_run(c, R->ckdir)) return -1;   // every rank resolved the same run
    stop_install();
    threads_set(c->threads);
    if (build(R)) return -1;
    if (R->ckdir[0] && run_resume(R)) return -1;
    if (c->init_from[0] && run_init_from(R)) return -1;
    if (ted_agree(tensorlog_init(&R->tr.tlog, &R->tr.M, c) != 0)) return -1;
    if (ted_agree(monitor_open(&R->mon, c, R->topo.rank == 0) != 0)) return -1;
    R->tr.peak = mfu_peak_flops(c, &R->topo, &R->tr.peak_kind);
    if (R->topo.rank == 0) print_model_line(R);
    runinfo_start(c, argc, argv, &R->ds, R->tr.T, R->topo.world, R->topo.dp, R->topo.rank == 0);
    runinfo_peak(R->tr.peak_kind, R->tr.peak);
    runinfo_log(R->log);
    print_model_state(R);
    count_validation(R);
    R->saved = resumed_in_save(R) ? R->st.step : -1;   // resumed from --save's own step: not saved again
    R->first_step = R->st.step;
    progress_start(&R->prog, R->first_step, c->steps, R->tr.ntok, R->st.tokens, R->topo.rank == 0);
    R->prog.peak_kind = R->tr.peak_kind;
    return 0;
}

static void run_free(Run *R) {
    if (R->log) fclose(R->log);
    monitor_close(&R->mon);
    trainer_free(&R->tr);
    data_free(&R->ds);
}

int run_close(Run *R) {
    const Config *c = &R->c;
    const Trainer *t = &R->tr;
    long ran = c->steps - R->first_step;
    if (c->wall_clock_breakdown) wallclock_summary(&t->wall, R->topo.rank == 0 ? stdout : NULL);
    if (R->topo.rank == 0 && (R->topo.world > 1 || c->wall_clock_breakdown)) {
        comm_summary(stdout, &t->comm_total, t->train_ms, ran);
        if (R->topo.pp > 1 && ran > 0)
            printf("  pipeline wait (receives: other stages, the bubble) %.1f ms/step (%.1f%%)\n", t->wait_ms / ran,
                   100 * t->wait_ms / (t->train_ms > 0 ? t->train_ms : 1));
    }
    // with --save a run always ends saved, also when it ran no step (--steps 0: the initial weights)
    if (c->save[0] && R->saved != R->st.step && run_save(R)) return 1;
    progress_summary(&R->prog, R->st.step, c->save, c->save[0] ? R->saved : -1, c->log);
    run_free(R);
    return 0;
}
