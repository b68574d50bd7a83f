// trainer.c — the training step (see trainer.h).
#include "run/trainer.h"
#include "core/backend.h"
#include "core/util.h"
#include "core/watchdog.h"
#include "model/mfu.h"
#include "model/routing.h"
#include "nn/fresh.h"
#include "nn/gemm.h"
#include "parallel/lr_schedule.h"
#include <stdlib.h>
#include <string.h>

int trainer_device(const Config *c) {
    const char *lr = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    gemm_setup(cfg_precision(c) == PREC_BF16 && c->device == DEV_CPU);   // the CPU GEMMs' compute mode; a bad TED_GEMM stops here
    return device_select(c->device == DEV_CUDA ? "cuda" : "cpu", lr ? atoi(lr) : 0, cfg_precision(c) == PREC_BF16);
}

int trainer_moe_blocks(const ModelConfig *m) {
    int n = 0;
    for (int l = 0; l < m->n_layer; l++) n += cfg_is_moe(m, l);
    return n;
}

// --log-tensors: tokens per expert after each forward (pipeline callback).
static void count_tokens(void *ctx) {
    Trainer *t = ctx;
    tensorlog_count(&t->tlog, &t->M);
}

void trainer_init(Trainer *t, const Config *c, Topology *topo, PipeBatchFn batch, void *batch_ctx) {
    t->c = c;
    t->topo = topo;
    t->batch = batch;
    t->batch_ctx = batch_ctx;
    t->T = cfg_seq_len(c);
    model_build(&t->M, c, topo, c->micro_batch, t->T);
    pipe_init(&t->P, &t->M, c);
    pipe_print(&t->P, c);
    zero_init(&t->z, &t->M.reg, topo, c);
    t->P.after_forward = count_tokens;
    t->P.hook_ctx = t;
    t->gbatch = cfg_global_batch(c, topo->dp);
    t->ntok = (double)t->gbatch * t->T;
    t->ngroups = (double)t->gbatch / c->model.group_size;
    t->nmoe = trainer_moe_blocks(&c->model);
}

void trainer_free(Trainer *t) {
    tensorlog_free(&t->tlog);
    pipe_free(&t->P);
    zero_free(&t->z);
    model_free(&t->M);
}

LossScales trainer_loss(const Trainer *t) {
    const ModelConfig *m = &t->c->model;
    float S = t->z.loss_scale;   // fp16: the loss gradient scaled up, unscaled in the optimizer
    return (LossScales){(float)(S / t->ntok), (float)(S * m->aux_coef / t->ngroups), (float)(S * m->z_coef / t->ntok)};
}

// The micro-batches' forwards and backwards, the tied gradients; this rank's sums.
static void forward_backward(Trainer *t, long s) {
    Model *M = &t->M;
    memset(&M->rstats, 0, sizeof M->rstats);
    t->step = s;
    M->rng_step = s;   // router randomness: global coordinates (the pipeline sets each micro-batch's)
    t->P.step = s + 1;
    LossScales ls = trainer_loss(t);
    double lm = pipe_train_step(&t->P, t->batch, t->batch_ctx, ls.lm, ls.aux, ls.z);
    fresh_settle();   // gradients no op wrote are zero from here on (nn/fresh.h; a GPU step's)
    pipe_sum_tied(&t->P);
    const RouterStats *r = &M->rstats;
    t->sums = (StepSums){lm, r->aux_sum, r->z_sum, (double)r->dropped, (double)r->choices, r->cv_sum};
}

// The step's sums over the data-parallel ranks and the stages, before the optimizer starts its
// gathers (overlap_comm), not queued behind them on the link; the routing loads likewise.
static void reduce_sums(Trainer *t) {
    enum { N = sizeof(StepSums) / sizeof(double) };
    comm_allreduce(&t->topo->g[GROUP_DP], (double *)&t->sums, N, DT_F64);
    comm_allreduce(&t->topo->g[GROUP_PP], (double *)&t->sums, N, DT_F64);
    routing_step_loads(&t->M);
}

// The clipped optimizer step at step s's learning rate; returns the gradient norm.
static double optimizer_step(Trainer *t, long s, float lr) {
    mem_set_phase(PHASE_OPTIMIZER);
    watchdog_step(s + 1, -1);
    tensorlog_debug_scale(&t->M, t->c);
    return zero_step(&t->z, t->c, lr);
}

// The step's metrics from its sums (the same on every rank).
static StepMetrics step_metrics(Trainer *t, long s, float lr, double norm, double ms) {
    const ModelConfig *m = &t->c->model;
    const StepSums *u = &t->sums;
    StepMetrics r = {.step = s + 1,
                     .lm_loss = u->lm / t->ntok,
                     .lr = lr,
                     .grad_norm = norm,
                     .step_ms = ms,
                     .tokens_per_s = t->ntok / (ms * 1e-3),
                     .dropped_frac = u->choices > 0 ? u->dropped / u->choices : 0};
    if (t->nmoe) r.aux_loss = m->aux_coef * u->aux / t->ngroups + m->z_coef * u->z / t->ntok + u->cv / t->ngroups;
    r.max_mean = routing_worst_max_mean(&t->M);
    r.moe = t->nmoe ? t->moe_log : NULL;
    r.loss = r.lm_loss + r.aux_loss;
    double flops = mfu_flops_per_token(m, t->T, r.dropped_frac) * r.tokens_per_s;
    r.mfu = t->peak > 0 ? flops / t->peak : 0;   // 0 when the peak is not known (an unknown GPU)
    r.loss_scale = t->z.loss_scale;
    r.skipped = t->z.skipped;
    return r;
}

StepMetrics trainer_step(Trainer *t, long s) {
    comm_stats_reset();
    mem_reset_peaks();
    double t0 = now_ms();   // the gradients are zero (on a GPU fresh, nn/fresh.h): the last zero_step left them so
    forward_backward(t, s);
    double t_fb = now_ms();
    reduce_sums(t);
    float lr = lr_at(t->c, s);
    double norm = optimizer_step(t, s, lr);
    double t_opt = now_ms();
    routing_step_end(&t->M, &t->z);   // the balancing bias, the per-block log
    tensorlog_write(&t->tlog, &t->M, &t->z, t->log, s + 1);
    buf_sync();
    mem_set_phase(PHASE_NONE);
    routing_log_json(&t->M, t->moe_log, sizeof t->moe_log);
    double ms = now_ms() - t0;
    if (t->c->wall_clock_breakdown) wallclock_add(&t->wall, t_fb - t0, t_opt - t_fb, ms, comm_stats());
    t->train_ms += ms;
    t->wait_ms += t->P.wait_ms;
    comm_accumulate(&t->comm_total);
    return step_metrics(t, s, lr, norm, ms);
}
