// train.c — the training loop and the commands built on the model: evaluation, sampling,
// the benchmark. One process is the world of size one: the same code runs under mpirun.
#include "cli/train.h"
#include "perf/balance.h"
#include "model/routing.h"
#include "core/alloc.h"
#include "core/backend.h"
#include "io/checkpoint.h"
#include "io/hfconfig.h"
#include "parallel/comm.h"
#include "io/agree.h"
#include "io/data.h"
#include "cli/guard.h"
#include "io/metrics.h"
#include "model/mfu.h"
#include "model/model.h"
#include "model/pipeline.h"
#include "io/progress.h"
#include "model/memplan.h"
#include "core/rng.h"
#include "io/runinfo.h"
#include "cli/sample.h"
#include "io/savedir.h"
#include "cli/stop.h"
#include "cli/threads.h"
#include "io/tensorlog.h"
#include "io/wallclock.h"
#include "io/monitor.h"
#include "io/tokenizer.h"
#include "core/watchdog.h"
#include "core/util.h"
#include "parallel/zero.h"
#include "parallel/adam.h"
#include "parallel/lr_schedule.h"
#include "nn/gemm.h"
#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <string.h>
#include <sys/stat.h>

// --device: before the topology, whose groups open NCCL communicators on a GPU run
static int start_device(const Config *c) {
    const char *lr = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    gemm_setup(c->bf16 && !c->device);   // the CPU GEMMs' compute mode; a bad TED_GEMM stops here
    return device_select(c->device ? "cuda" : "cpu", lr ? atoi(lr) : 0, c->bf16);
}

// Checkpoints read and write the host copies of the weights and the optimizer state.
static void host_view(Model *M, Zero *z, int copy) {
    zero_params_wait(z, 0, M->reg.n);   // overlap_comm: the weights whole before anything reads them
    reg_host_view(&M->reg, copy);
    zero_host_view(z, copy);
}
static void device_view(Model *M, Zero *z, int copy) { reg_device_view(&M->reg, copy); zero_device_view(z, copy); }

// MFU against the run's peak (mfu.c); 0 when the peak is not known (an unknown GPU).
static double mfu_of(double flops_per_s, double peak) { return peak > 0 ? flops_per_s / peak : 0; }

static int n_moe_layers(const ModelConfig *m) {
    int n = 0;
    for (int l = 0; l < m->n_layer; l++) n += cfg_is_moe(m, l);
    return n;
}

static int seq_len_of(const Config *c) { return c->seq_len > 0 ? c->seq_len : c->model.n_positions; }

// ---------------------------------------------------------------------------------------
// evaluation: the first nwin windows of a split, in the sequential numbering

typedef struct { double loss, lm, aux; long windows; } EvalResult;

static EvalResult evaluate(Pipeline *P, const Split *s, long nwin, int T, Ticker *tk) {
    Model *M = P->M;
    const Topology *tp = M->topo;
    int mb = M->Bmax, dp = tp->dp;
    long per = (long)mb * dp, nb = (nwin + per - 1) / per;
    int *inp = ted_alloc(sizeof(int) * mb * T, MEM_TEMP), *tgt = ted_alloc(sizeof(int) * mb * T, MEM_TEMP);
    double sums[5] = {0, 0, 0, 0, 0};   // lm, aux (Σ l_aux), z (Σ lse²), groups (per MoE layer), noisy_topk CV² terms
    M->uneven = 1;                   // the last batch may differ between ranks: expert counts travel
    int nmoe = n_moe_layers(&M->m);
    for (long b = 0; b < nb; b++) {
        long first = b * per + (long)tp->dp_idx * mb;
        int B = (int)(nwin - first < mb ? nwin - first : mb);
        int counted = B > 0;
        if (!counted) B = 1;    // every rank runs the same number of forwards (collectives)
        for (int j = 0; j < B; j++) data_window(s, counted ? first + j : 0, T, inp + j * T, tgt + j * T);
        RouterStats before = M->rstats;
        double lm = pipe_forward(P, inp, tgt, B, T);
        if (!counted) continue;
        sums[0] += lm;
        sums[1] += M->rstats.aux_sum - before.aux_sum;
        sums[2] += M->rstats.z_sum - before.z_sum;
        sums[3] += nmoe ? (double)(M->rstats.groups - before.groups) / nmoe : 0;
        sums[4] += M->rstats.cv_sum - before.cv_sum;
        if (tk) ticker_update(tk, (double)(first + B));
    }
    M->uneven = 0;
    comm_allreduce((Group *)&tp->g[GROUP_DP], sums, 5, DT_F64);
    // the router statistics are on the stages with MoE blocks; the loss, on every stage, is counted once
    if (tp->stage) sums[0] = 0;
    comm_allreduce((Group *)&tp->g[GROUP_PP], sums, 5, DT_F64);
    ted_free(inp); ted_free(tgt);
    double ntok = (double)nwin * T;
    EvalResult r = {0, sums[0] / ntok, 0, nwin};
    if (nmoe) r.aux = M->m.aux_coef * sums[1] / sums[3] + M->m.z_coef * sums[2] / ntok + sums[4] / sums[3];
    r.loss = r.lm + r.aux;
    return r;
}

static int *encode_prompt(const Tokenizer *tok, const char *text, int *n) {
    size_t len = strlen(text);
    if (!tok) {
        int *ids = ted_alloc(sizeof(int) * (len + 1), MEM_TEMP);
        for (size_t i = 0; i < len; i++) ids[i] = (unsigned char)text[i];
        if (!len) ids[len++] = '\n';
        *n = (int)len;
        return ids;
    }
    int *raw = NULL;
    long k = tok_encode((Tokenizer *)tok, text, len, &raw);
    int *ids = ted_alloc(sizeof(int) * (k + 1), MEM_TEMP);
    if (k > 0) memcpy(ids, raw, sizeof(int) * k);
    if (raw) ted_free(raw);
    if (k <= 0) { ids[0] = 50256; k = 1; }   // <|endoftext|> starts an empty prompt
    *n = (int)k;
    return ids;
}

// ---------------------------------------------------------------------------------------
// ted train

static int find_flag(int argc, char **argv, const char *name, const char **val) {
    size_t n = strlen(name);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], name)) { *val = i + 1 < argc ? argv[i + 1] : NULL; return 1; }
        if (!strncmp(argv[i], name, n) && argv[i][n] == '=') { *val = argv[i] + n + 1; return 1; }
    }
    return 0;
}

// Config from --config and flags; 0 or -1 (one line printed).
// With --resume, the model comes from the checkpoint (resolved into ckdir).
// pipeline.layers "auto": the split that balances the chunks' model FLOPs, said once (rank 0).
static void auto_layers(Config *c) {
    int nch = c->pp * (c->pp_virtual > 0 ? c->pp_virtual : 1);
    double cost[256], lo = INFINITY, hi = 0;
    perf_balance_layers(&c->model, seq_len_of(c), nch, c->pp_layers, cost);
    c->pp_nlayers = nch;
    if (comm_world_rank()) return;
    printf("pipeline.layers auto: [");
    for (int i = 0; i < nch; i++) {
        printf("%s%d", i ? ", " : "", c->pp_layers[i]);
        lo = fmin(lo, cost[i]); hi = fmax(hi, cost[i]);
    }
    printf("] blocks per chunk; chunk costs %.4g to %.4g GFLOP per token (the largest %.1f %% above the smallest)\n",
           lo / 1e9, hi / 1e9, 100 * (hi / lo - 1));
}

static int load_config(Config *c, int argc, char **argv, char *ckdir, size_t cklen) {
    config_defaults(c);
    const char *path;
    if (find_flag(argc, argv, "--config", &path)) {
        if (!path) { ted_error("--config: needs a file"); return -1; }
        if (config_load_json(c, path)) return -1;
    }
    if (config_apply_flags(c, argc, argv, 1)) return -1;
    if (runinfo_resolve(c, argc, argv, ckdir, cklen)) return -1;
    if (config_validate(c)) return -1;
    config_warn_unused(c, comm_world_rank() == 0 ? stdout : NULL);
    if (c->pp_auto) auto_layers(c);
    return 0;
}

// Everything that can be wrong with a run's inputs, checked before any allocation of the
// model: identical on every rank except file access, whose result the ranks then agree on.
static int prepare(Config *c, int argc, char **argv, Dataset *ds, char *ckdir, size_t cklen, FILE **log) {
    if (load_config(c, argc, argv, ckdir, cklen)) return TED_EXIT_USAGE;
    watchdog_start(c->watchdog, comm_launcher_keepalive_s());   // from here every collective is watched
    char err[256];
    if (topo_check(comm_world_size(), c->tp, c->ep, c->pp, err, sizeof err)) { ted_error("layout: %s", err); return TED_EXIT_USAGE; }
    int T = seq_len_of(c), dp = comm_world_size() / (c->tp * c->pp);
    if (c->eval_every && c->micro_batch * dp < 1) { ted_error("layout: no data-parallel rank"); return TED_EXIT_USAGE; }
    if (runinfo_check_batch(c, dp)) return TED_EXIT_USAGE;
    if (model_overlap_check(c, T)) return TED_EXIT_USAGE;
    if (c->resume[0]) {   // the checkpoint must be of this model
        if (ckpt_resolve(c->resume, ckdir, cklen)) return TED_EXIT_USAGE;
        Config k = *c;
        if (ckpt_read_config(ckdir, &k) || ckpt_check_model(ckdir, &k, &c->model)) return TED_EXIT_USAGE;
        if (!sparse_config_same(&k.sparse, k.seed, &c->sparse, c->seed)) {
            ted_error("%s: the checkpoint's sparse_attention layouts differ from this run's (mode, keys or seed)", ckdir);
            return TED_EXIT_USAGE;
        }
    }
    if (data_load(ds, c->data)) return TED_EXIT_USAGE;
    if (ds->max_token >= c->model.vocab_size) {
        ted_error("%s: token id %d does not fit vocab_size %d", c->data, ds->max_token, c->model.vocab_size);
        return TED_EXIT_USAGE;
    }
    if (ds->train.n < T + 1) {
        ted_error("%s: the training split has %ld tokens, fewer than one window of %d", c->data, ds->train.n, T + 1);
        return TED_EXIT_USAGE;
    }
    if (c->save[0] && comm_world_rank() == 0 && ckpt_check_root(c->save)) return TED_EXIT_USAGE;
    if (start_device(c)) return TED_EXIT_USAGE;   // last but one: the log is only opened once all is well
    if (comm_world_rank() == 0 && savedir_check_log(c)) return TED_EXIT_USAGE;
    if (c->save[0] && comm_world_rank() == 0 && savedir_open(c)) return TED_EXIT_USAGE;   // locked for the run
    if (c->log[0] && comm_world_rank() == 0) {
        *log = fopen(c->log, c->resume[0] ? "a" : "w");
        if (!*log) { ted_error("%s: cannot open the log: %s", c->log, strerror(errno)); return TED_EXIT_USAGE; }
    }
    return 0;
}

// A training run: what cmd_train sets up and the step loop works on.
typedef struct {
    Config c;
    Dataset ds;
    Topology topo;
    Model M;
    Zero z;
    MemPlan plan;               // predicted before allocating
    Pipeline P;
    TrainerState st;
    FILE *log;
    char ckdir[1200];
    int T, nmoe;
    long gbatch, nval, saved, step;   // step: the one running (its data)
    double ntok_step, ngroups_step, flops_tok, peak;
    CommStats comm_total;
    double train_ms, wait_ms;
    const char *peak_kind;
    Progress prog;
    Guard guard;       // non-finite losses stop the run
    char moe_log[4096];   // the step's per-block routing record
    TensorLog tlog;    // --log-tensors
    WallClock wall;    // wall_clock_breakdown
    Monitor mon;       // tensorboard, csv_monitor
} Run;

// A resumed run on another global batch: a warning (the tokens per step and the data each step
// reads change from here). The tokens seen carry on; a checkpoint from before they were kept
// counts its steps at this run's batch.
static void resume_batch(Run *R) {
    TrainerState *st = &R->st;
    if (st->gbatch > 0 && st->gbatch != R->gbatch && R->topo.rank == 0)
        printf("warning: the checkpoint's run had a global batch of %ld sequences, this run has %ld (micro_batch %d x "
               "gradient_accumulation_steps %d x dp %d): the tokens per step and the data order change from step %ld\n",
               st->gbatch, R->gbatch, R->c.micro_batch, R->c.grad_accum, R->topo.dp, st->step);
    if (st->tokens < 0) st->tokens = (double)st->step * R->ntok_step;
    st->gbatch = R->gbatch;
}

// The checkpoint's weights and optimizer state, and its trainer state checked against this run.
static int resume_from(Run *R) {
    Model *M = &R->M;
    Zero *z = &R->z;
    TrainerState *st = &R->st;
    const Config *c = &R->c;
    host_view(M, z, 0);
    int bad = ckpt_load_weights(R->ckdir, M) || ckpt_load_state(R->ckdir, M, z, st);
    if (ted_agree(bad)) return -1;
    device_view(M, z, 1);
    if (!M->reg.half) zero_sync_master(z);
    if (st->step > c->steps) {
        ted_error("%s: checkpoint is at step %ld, past --steps %d", R->ckdir, st->step, c->steps);
        return -1;
    }
    if (st->step > 0 && (st->seed != c->seed || st->sequential != c->data_sequential)) {
        ted_error("%s: resuming needs the run's --seed %llu and --data-order %s (given %llu, %s)", R->ckdir,
                  (unsigned long long)st->seed, st->sequential ? "sequential" : "shuffled",
                  (unsigned long long)c->seed, c->data_sequential ? "sequential" : "shuffled");
        return -1;
    }
    if (st->step > 0 && st->steps != c->steps && c->sched.type == SCHED_WARMUP_COSINE && R->topo.rank == 0)   // DeepSpeed's: total_num_steps
        printf("note: the checkpoint's run had --steps %ld; with --steps %d the LR schedule changes from here\n",
               st->steps, c->steps);
    resume_batch(R);
    st->steps = c->steps; st->seed = c->seed; st->sequential = c->data_sequential;
    if (R->topo.rank == 0) printf("resumed from %s at step %ld (%.0f tokens trained on)\n", R->ckdir, st->step, st->tokens);
    return 0;
}

// --init-from: the folder's weights (each rank its slices), the masters from them; the optimizer
// state stays fresh and the run starts at step 0.
static int init_from(Run *R) {
    Model *M = &R->M;
    Zero *z = &R->z;
    host_view(M, z, 0);
    int bad = ckpt_load_weights(R->c.init_from, M) || ckpt_load_masters(R->c.init_from, M, z);
    if (ted_agree(bad)) return -1;
    device_view(M, z, 1);
    if (!M->reg.half) zero_sync_master(z);
    if (R->topo.rank == 0) printf("initialised from %s: its weights, a fresh optimizer, step 0\n", R->c.init_from);
    return 0;
}

// The memory plan (model/memplan.h) next to what was allocated.
static void print_model_state(const Run *R) {
    const MemStats *ms = mem_stats();
    const MemPlan *p = &R->plan;
    double meas = (double)(ms->current[MEM_PARAMS] + ms->current[MEM_GRADS] + ms->current[MEM_OPTIMIZER]);
    if (R->topo.rank == 0)
        printf("memory per rank: model state predicted %.0f bytes (params %.0f + grads %.0f + optimizer %.0f, ZeRO-%d), "
               "allocated %.0f (params %zu + grads %zu + optimizer %zu); activations predicted %.0f, allocated %zu\n",
               p->state, p->params, p->grads, p->optimizer, R->c.zero_stage, meas, ms->current[MEM_PARAMS],
               ms->current[MEM_GRADS], ms->current[MEM_OPTIMIZER], p->act, ms->current[MEM_ACTIVATIONS]);
}

// --log-tensors: tokens per expert after each forward (pipeline callback).
static void count_tokens(void *ctx) {
    Run *R = ctx;
    tensorlog_count(&R->tlog, &R->M);
}

// The start-up line of the model: its size, dense or MoE (experts, top-k, router), the attention
// (dense, or the sparse mode with the share of the causal blocks its layouts keep).
static void print_model_line(const Run *R) {
    const Config *c = &R->c;
    const ModelConfig *m = &c->model;
    char ffn[160], att[160];
    if (R->nmoe == 0) snprintf(ffn, sizeof ffn, "dense, %d blocks", m->n_layer);
    else snprintf(ffn, sizeof ffn, "MoE, %d blocks of which %d MoE with %d experts, top-%d, router %s%s", m->n_layer, R->nmoe,
                  m->num_experts, m->top_k, router_names[m->router], m->shared_experts ? " + shared experts" : "");
    if (!R->M.sl) snprintf(att, sizeof att, "dense attention");
    else {
        double nnz = 0, all = 0;
        for (int l = 0; l < R->M.L; l++) {
            const SparseLayout *L = &R->M.sl[l];
            nnz += (double)L->nnz;
            all += (double)L->H * L->nb * (L->nb + 1) / 2;
        }
        snprintf(att, sizeof att, "sparse attention %s (block %d, %.1f%% of the causal blocks)",
                 sparse_mode_name(c->sparse.mode), c->sparse.block, all > 0 ? 100 * nnz / all : 100.0);
    }
    printf("model: %ld parameters, %s%s; %s; T %d, global batch %ld sequences; MFU against %s peak %.1f GFLOP/s\n",
           model_num_params(m), cfg_is_llama(m) ? "llama, " : "", ffn, att, R->T, R->gbatch, R->peak_kind, R->peak * 1e-9);
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

// Everything before the first step: inputs checked, layout, model, optimizer, resume.
static int run_setup(Run *R, int argc, char **argv) {
    Config *c = &R->c;
    if (ted_agree(prepare(c, argc, argv, &R->ds, R->ckdir, sizeof R->ckdir, &R->log) != 0)) return -1;
    if (agree_run(c, R->ckdir)) return -1;   // every rank resolved the same run
    stop_install();
    threads_set(c->threads);
    R->T = seq_len_of(c);
    topo_init(&R->topo, c->tp, c->ep, c->pp);
    topo_print(&R->topo, c->model.num_experts);
    topo_print_placement(&R->topo);
    memplan_of(&R->plan, c, &R->topo, ted_device == DEV_CUDA);   // before allocating: does it fit?
    if (ted_agree(memplan_check(&R->plan, c, R->topo.rank))) return -1;
    model_build(&R->M, c, &R->topo, c->micro_batch, R->T);
    pipe_init(&R->P, &R->M, c);
    pipe_print(&R->P, c);
    zero_init(&R->z, &R->M.reg, &R->topo, c);
    R->gbatch = (long)c->micro_batch * c->grad_accum * R->topo.dp;
    R->ntok_step = (double)R->gbatch * R->T;
    R->st = (TrainerState){.steps = c->steps, .seed = c->seed, .sequential = c->data_sequential, .gbatch = R->gbatch};
    if (R->ckdir[0] && resume_from(R)) return -1;
    if (c->init_from[0] && init_from(R)) return -1;
    if (ted_agree(tensorlog_init(&R->tlog, &R->M, c) != 0)) return -1;
    if (ted_agree(monitor_open(&R->mon, c, R->topo.rank == 0) != 0)) return -1;
    R->P.after_forward = count_tokens;
    R->P.hook_ctx = R;
    R->peak = mfu_peak_flops(c, &R->topo, &R->peak_kind);
    R->flops_tok = model_flops_per_token(&c->model, R->T);
    R->ngroups_step = (double)R->gbatch / c->model.group_size;
    R->nmoe = n_moe_layers(&c->model);
    if (R->topo.rank == 0) print_model_line(R);
    runinfo_start(c, argc, argv, &R->ds, R->T, R->topo.world, R->topo.dp, R->topo.rank == 0);
    runinfo_log(R->log);
    print_model_state(R);
    R->nval = data_nwindows(&R->ds.val, R->T);
    if (c->eval_windows > 0 && c->eval_windows < R->nval) R->nval = c->eval_windows;
    if (R->nval == 0 && R->topo.rank == 0)
        printf("note: %s has no validation split (no *_val_* shard, or one shorter than a window of %d+1 tokens): "
               "no evaluation runs; ted tokenize writes PREFIX_val_*.bin beside the training shards\n", c->data, R->T);
    R->saved = resumed_in_save(R) ? R->st.step : -1;   // resumed from --save's own step: not saved again
    return 0;
}

// Micro-batch mb of the running step: this data-parallel rank's share of it (pipeline callback).
static void step_batch(void *ctx, int mb, int *inp, int *tgt) {
    Run *R = ctx;
    const Config *c = &R->c;
    long first = (long)mb * c->micro_batch * R->topo.dp + (long)R->topo.dp_idx * c->micro_batch;
    for (int j = 0; j < c->micro_batch; j++)
        data_sequence(&R->ds.train, R->T, R->st.seed, c->data_sequential, R->step, first + j, R->gbatch,
                      inp + j * R->T, tgt + j * R->T);
}

// One optimizer step: the schedule's forwards and backwards, the tied gradients, ZeRO; the
// loss and router statistics summed over data-parallel ranks and pipeline stages.
static StepMetrics train_step(Run *R, long s) {
    const Config *c = &R->c;
    Model *M = &R->M;
    comm_stats_reset();
    mem_reset_peaks();
    double t0 = now_ms();   // the gradients are zero: the last zero_step left them so
    memset(&M->rstats, 0, sizeof M->rstats);
    R->step = s;
    M->rng_step = s;   // router randomness: global coordinates (the pipeline sets each micro-batch's)
    float S = R->z.loss_scale;   // fp16: the loss gradient scaled up, unscaled in the optimizer
    R->P.step = s + 1;
    double lm = pipe_train_step(&R->P, step_batch, R, (float)(S / R->ntok_step),
                                (float)(S * c->model.aux_coef / R->ngroups_step), (float)(S * c->model.z_coef / R->ntok_step));
    pipe_sum_tied(&R->P);
    double t_fb = now_ms();
    // the step's metrics are summed before the optimizer starts its gathers (overlap_comm), not
    // queued behind them on the link
    double sums[6] = {lm, M->rstats.aux_sum, M->rstats.z_sum, (double)M->rstats.dropped, (double)M->rstats.choices,
                      M->rstats.cv_sum};
    comm_allreduce(&R->topo.g[GROUP_DP], sums, 6, DT_F64);
    comm_allreduce(&R->topo.g[GROUP_PP], sums, 6, DT_F64);
    routing_step_loads(M);
    mem_set_phase(PHASE_OPTIMIZER);
    watchdog_step(s + 1, -1);
    float lr = lr_at(c, s);
    tensorlog_debug_scale(M, c);
    double norm = zero_step(&R->z, c, lr);
    double t_opt = now_ms();
    routing_step_end(M, &R->z);   // the balancing bias, the per-block log
    tensorlog_write(&R->tlog, M, &R->z, R->log, s + 1);
    buf_sync();
    mem_set_phase(PHASE_NONE);
    routing_log_json(M, R->moe_log, sizeof R->moe_log);
    double ms = now_ms() - t0;
    if (c->wall_clock_breakdown) wallclock_add(&R->wall, t_fb - t0, t_opt - t_fb, ms, comm_stats());
    R->train_ms += ms;
    R->wait_ms += R->P.wait_ms;
    comm_accumulate(&R->comm_total);
    StepMetrics m = {.step = s + 1, .lm_loss = sums[0] / R->ntok_step, .lr = lr, .grad_norm = norm, .step_ms = ms,
                     .tokens_per_s = R->ntok_step / (ms * 1e-3), .dropped_frac = sums[4] > 0 ? sums[3] / sums[4] : 0};
    if (R->nmoe) m.aux_loss = c->model.aux_coef * sums[1] / R->ngroups_step + c->model.z_coef * sums[2] / R->ntok_step +
                              sums[5] / R->ngroups_step;
    m.max_mean = routing_worst_max_mean(M);
    m.moe = R->nmoe ? R->moe_log : NULL;
    m.loss = m.lm_loss + m.aux_loss;
    m.mfu = mfu_of(mfu_flops_per_token(&c->model, R->T, m.dropped_frac) * m.tokens_per_s, R->peak);
    m.loss_scale = R->z.loss_scale;
    m.skipped = R->z.skipped;
    return m;
}

static int save_now(Run *R) {
    R->st.adam_t = R->z.t;
    host_view(&R->M, &R->z, 1);
    if (ckpt_save(R->c.save, &R->M, &R->z, &R->st)) return -1;
    device_view(&R->M, &R->z, 0);
    R->saved = R->st.step;
    if (R->topo.rank == 0) printf("saved %s/step_%08ld\n", R->c.save, R->st.step);
    return 0;
}

// The step's metrics for TensorBoard and csv_monitor (rank 0): losses, lr, gradient norm,
// throughput, MFU, drops, the loss scale, each MoE block's load (max/mean tokens per expert) and
// each collective's ms.
static void monitor_step(Run *R, const StepMetrics *m) {
    Monitor *mon = &R->mon;
    if (!mon->tb && !mon->csv_dir[0]) return;
    long s = m->step;
    const char *tags[] = {"Train/loss", "Train/lm_loss", "Train/aux_loss", "Train/lr", "Train/grad_norm",
                          "Train/tokens_per_s", "Train/mfu", "Train/dropped_frac", "Train/loss_scale"};
    double vals[] = {m->loss, m->lm_loss, m->aux_loss, m->lr, m->grad_norm, m->tokens_per_s, m->mfu, m->dropped_frac,
                     m->loss_scale};
    for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++) monitor_scalar(mon, tags[i], vals[i], s);
    char tag[96];
    const RouteLog *r = R->M.rlog;
    for (int i = 0; r && i < r->nall; i++) {
        snprintf(tag, sizeof tag, "MoE/block_%d_load", r->all_layer[i]);
        monitor_scalar(mon, tag, r->out[i].max_mean, s);
    }
    const CommStats *cs = comm_stats();
    for (int k = 0; k < COLL_N; k++)
        for (int g = 0; g < GROUP_N; g++)
            if (cs->c[k][g].calls) {
                snprintf(tag, sizeof tag, "Comm/%s.%s_ms", comm_coll_name(k), comm_group_name(g));
                monitor_scalar(mon, tag, cs->c[k][g].ms, s);
            }
    monitor_flush(mon);
}

// After step s: the log, the progress line, evaluation, a sample, a checkpoint.
static int after_step(Run *R, long s, long first_step, const StepMetrics *m) {
    const Config *c = &R->c;
    int rank0 = R->topo.rank == 0, last = s + 1 == c->steps;
    metrics_step(R->log, m);
    monitor_step(R, m);
    if (guard_step(&R->guard, c, m)) return -1;   // non-finite: stop, never save this state
    int print = c->log_every > 0 && ((s + 1) % c->log_every == 0 || last || s == first_step);
    progress_step(&R->prog, m, R->peak, print);
    if (c->wall_clock_breakdown && print) wallclock_print(&R->wall, s + 1, rank0 ? stdout : NULL);
    if (R->nval > 0 && ((c->eval_every > 0 && (s + 1) % c->eval_every == 0) || last)) {
        EvalResult e = evaluate(&R->P, &R->ds.val, R->nval, R->T, NULL);
        metrics_eval(R->log, s + 1, e.loss, e.lm, e.aux, e.windows);
        progress_eval(&R->prog, s + 1, e.loss, e.lm, e.windows);
        monitor_scalar(&R->mon, "Eval/val_loss", e.loss, s + 1);
        monitor_flush(&R->mon);
    }
    if (c->sample_every > 0 && ((s + 1) % c->sample_every == 0 || last) && c->model.vocab_size == 256) {
        int np;
        int *pr = encode_prompt(NULL, "\n", &np);
        if (rank0) printf("sample: ");
        SampleOpts so = {200, 0.8f, 0, 1.0f, NULL, c->seed + (uint64_t)s};
        sample_text(&R->P, NULL, pr, np, &so, rank0 ? stdout : NULL);
        ted_free(pr);
    }
    R->st.step = s + 1;
    R->st.tokens += R->ntok_step;
    int stop = stop_requested();   // SIGINT/SIGTERM on any rank: save this step and end
    if (c->save[0] && ((c->save_every > 0 && (s + 1) % c->save_every == 0) || last || stop) && save_now(R)) return -1;
    if (stop) {
        if (rank0) fprintf(stderr, "ted: stopped by signal %d after step %ld%s\n", stop, R->st.step, c->save[0] ? " (saved)" : "");
        return 128 + stop;
    }
    return 0;
}

static void run_free(Run *R) {
    if (R->log) fclose(R->log);
    tensorlog_free(&R->tlog);
    monitor_close(&R->mon);
    pipe_free(&R->P);
    zero_free(&R->z);
    model_free(&R->M);
    data_free(&R->ds);
}

int cmd_train(int argc, char **argv) {
    const char *v;
    if (find_flag(argc, argv, "--help", &v) || find_flag(argc, argv, "-h", &v)) { config_print_train_help(); return 0; }
    static Run R;   // large (the config's paths); one per process
    memset(&R, 0, sizeof R);
    if (run_setup(&R, argc, argv)) return TED_EXIT_USAGE;
    long first_step = R.st.step;
    progress_start(&R.prog, first_step, R.c.steps, R.ntok_step, R.st.tokens, R.topo.rank == 0);
    R.prog.peak_kind = R.peak_kind;
    for (long s = R.st.step; s < R.c.steps; s++) {
        StepMetrics m = train_step(&R, s);
        int rc = after_step(&R, s, first_step, &m);
        if (rc) return rc < 0 ? 1 : rc;
    }
    if (R.c.wall_clock_breakdown) wallclock_summary(&R.wall, R.topo.rank == 0 ? stdout : NULL);
    if (R.topo.rank == 0 && (R.topo.world > 1 || R.c.wall_clock_breakdown)) {
        comm_summary(stdout, &R.comm_total, R.train_ms, R.c.steps - first_step);
        if (R.topo.pp > 1 && R.c.steps > first_step)
            printf("  pipeline wait (receives: other stages, the bubble) %.1f ms/step (%.1f%%)\n",
                   R.wait_ms / (R.c.steps - first_step), 100 * R.wait_ms / (R.train_ms > 0 ? R.train_ms : 1));
    }
    // with --save a run always ends saved, also when it ran no step (--steps 0: the initial weights)
    if (R.c.save[0] && R.saved != R.st.step && save_now(&R)) return 1;
    progress_summary(&R.prog, R.st.step, R.c.save, R.c.save[0] ? R.saved : -1, R.c.log);
    run_free(&R);
    return 0;
}

// ---------------------------------------------------------------------------------------
// ted eval / ted generate: a model from a checkpoint

typedef struct { const char *name; const char **val; } Opt;

// Parses "--name value" / "--name=value" pairs into opts; 0 or -1 after one line.
static int parse_opts(int argc, char **argv, Opt *opts, int n, const char *cmd) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *eq = strchr(a, '=');
        size_t len = eq ? (size_t)(eq - a) : strlen(a);
        int found = 0;
        for (int k = 0; k < n && !found; k++) {
            if (strlen(opts[k].name) != len || strncmp(a, opts[k].name, len)) continue;
            found = 1;
            if (eq) *opts[k].val = eq + 1;
            else if (i + 1 < argc) *opts[k].val = argv[++i];
            else { ted_error("%s: %s needs a value", cmd, a); return -1; }
        }
        if (!found) { ted_error("%s: unknown option %s (see ted %s --help)", cmd, a, cmd); return -1; }
    }
    return 0;
}

static int to_long(const char *cmd, const char *name, const char *s, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || end == s || v < lo || v > hi) {
        ted_error("%s: %s must be an integer in [%ld, %ld], got \"%s\"", cmd, name, lo, hi, s);
        return -1;
    }
    *out = v;
    return 0;
}

static int to_float(const char *cmd, const char *name, const char *s, double lo, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || end == s || !(v >= lo)) { ted_error("%s: %s must be a number >= %g, got \"%s\"", cmd, name, lo, s); return -1; }
    *out = v;
    return 0;
}

static int has_help(int argc, char **argv) {
    for (int i = 1; i < argc; i++) if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return 1;
    return 0;
}

// Whether a model of c with micro-batch B of T tokens fits this node (model/memplan.h; without
// an optimizer: its state is not counted); 0, or -1 after one line with the numbers.
static int fits_node(const Config *c, const Topology *t, int B, int T, int optimizer) {
    Config k = *c;
    k.micro_batch = B; k.seq_len = T;
    MemPlan p;
    memplan_of(&p, &k, t, ted_device == DEV_CUDA);
    if (!optimizer) { p.total -= p.optimizer; p.state -= p.optimizer; p.optimizer = p.host_optimizer = 0; }
    return memplan_check(&p, &k, t->rank);
}

// A one-process model with the checkpoint's weights.
static int load_model(Model *M, Topology *topo, Config *c, const char *load, int B, int T_override, char *dir) {
    if (!load || !load[0]) { ted_error("--load: a checkpoint directory is required"); return -1; }
    if (ckpt_resolve(load, dir, 1200)) return -1;
    config_defaults(c);
    if (ckpt_read_config(dir, c)) return -1;
    int T = T_override > 0 ? T_override : seq_len_of(c);
    if (T > c->model.n_positions) { ted_error("--seq-len %d exceeds the model's n_positions %d", T, c->model.n_positions); return -1; }
    topo_init(topo, 1, 1, 1);
    if (fits_node(c, topo, B, T, 0)) return -1;
    model_build(M, c, topo, B, T);
    return ckpt_load_weights(dir, M);
}

// Once all is well: which checkpoint, at which step (stderr).
static void say_loaded(const char *dir, const Config *c) {
    fprintf(stderr, "loaded %s (step %ld): %ld parameters\n", dir, runinfo_ckpt_step(dir), model_num_params(&c->model));
}

// The split that `ted eval` scores: the validation split of --data as training makes it (the
// last 10 % of a text file, or the *_val_* shards), its training split, or a whole file.
static int eval_split(const char *data, const char *which, Dataset *ds, Split **s) {
    memset(ds, 0, sizeof *ds);
    if (!strcmp(which, "all")) {
        *s = &ds->train;
        if (data_load_whole(*s, data)) return -1;
        for (long i = 0; i < (*s)->n; i++) if ((*s)->tok[i] > ds->max_token) ds->max_token = (*s)->tok[i];
        return 0;
    }
    if (strcmp(which, "val") && strcmp(which, "train")) { ted_error("eval: --split must be val, train or all, got \"%s\"", which); return -1; }
    *s = !strcmp(which, "val") ? &ds->val : &ds->train;
    return data_load(ds, data);
}

int cmd_eval(int argc, char **argv) {
    if (has_help(argc, argv)) {
        printf("usage: ted eval --load CKPT --data FILE|PATTERN [--split val|train|all] [--windows N|all]\n"
               "                [--micro-batch B] [--seq-len T] [--threads N]\n"
               "  Mean loss of a checkpoint over the first N windows (default all) of a split of the data, split\n"
               "  as training splits it (default val: the last 10 %% of a text file, or the *_val_* shards of a\n"
               "  pattern; all: the whole of one file). Window i = tokens [iT, iT+T+1); T defaults to the\n"
               "  checkpoint's seq_len. Prints {\"loss\", \"lm_loss\", \"aux_loss\", \"windows\", \"split\"}; progress\n"
               "  goes to stderr. With the whole val split this is the val_loss the training log reports.\n"
               "  --threads N: OpenMP threads (default 0: all cores, shared out among the ranks of a node).\n");
        return 0;
    }
    const char *load = NULL, *data = NULL, *win = "all", *mbs = "8", *tls = "0", *which = "val", *thr = "0";
    Opt o[] = {{"--load", &load}, {"--data", &data}, {"--windows", &win}, {"--micro-batch", &mbs}, {"--seq-len", &tls},
               {"--split", &which}, {"--threads", &thr}};
    long nwin = 0, mb, Tl, nt;
    if (parse_opts(argc, argv, o, 7, "eval")) return TED_EXIT_USAGE;
    if (!data) { ted_error("eval: --data FILE is required"); return TED_EXIT_USAGE; }
    if ((strcmp(win, "all") && to_long("eval", "--windows", win, 1, 1L << 40, &nwin)) ||
        to_long("eval", "--micro-batch", mbs, 1, 4096, &mb) || to_long("eval", "--seq-len", tls, 0, 1 << 20, &Tl) ||
        to_long("eval", "--threads", thr, 0, 4096, &nt))
        return TED_EXIT_USAGE;
    threads_set((int)nt);
    Dataset ds;
    Split *s;
    if (eval_split(data, which, &ds, &s)) return TED_EXIT_USAGE;   // the loader printed its line
    Model M; Topology topo; Config c;
    char dir[1200];
    if (load_model(&M, &topo, &c, load, (int)mb, (int)Tl, dir)) return TED_EXIT_USAGE;
    int T = M.T;
    if (ds.max_token >= c.model.vocab_size) { ted_error("%s: token id %d does not fit vocab_size %d", data, ds.max_token, c.model.vocab_size); return TED_EXIT_USAGE; }
    long have = data_nwindows(s, T);
    if (!have) { ted_error("%s: the %s split holds no window of %d+1 tokens", data, which, T); return TED_EXIT_USAGE; }
    if (!nwin) nwin = have;
    if (nwin > have) { ted_error("%s: --windows %ld but the %s split holds %ld windows of %d+1 tokens", data, nwin, which, have, T); return TED_EXIT_USAGE; }
    say_loaded(dir, &c);
    Ticker tk;
    ticker_start(&tk, "eval", "windows", (double)nwin, stderr);
    Pipeline P;
    pipe_init(&P, &M, &c);
    EvalResult e = evaluate(&P, s, nwin, T, &tk);
    pipe_free(&P);
    printf("{\"loss\": %.9g, \"lm_loss\": %.9g, \"aux_loss\": %.9g, \"windows\": %ld, \"split\": \"%s\"}\n", e.loss, e.lm,
           e.aux, e.windows, which);
    model_free(&M);
    data_free(&ds);
    return 0;
}

int cmd_generate(int argc, char **argv) {
    if (has_help(argc, argv)) {
        printf("usage: ted generate --load CKPT [--prompt TEXT] [--tokens N] [--temperature X] [--top-k K] [--top-p P]\n"
               "                    [--stop TEXT] [--num-samples S] [--seed N] [--encoder DIR] [--threads N]\n"
               "  Samples up to N tokens (default 200) after the prompt; temperature 1.0, top-k 0 (all), top-p 1.0\n"
               "  (all; else the smallest set of tokens holding that probability), seed 1337. --stop ends a sample\n"
               "  once its text contains TEXT. --num-samples S prints S samples (seeds N, N+1, ...), each under a\n"
               "  \"--- sample i/S\" line. Byte models print bytes; GPT-2 vocabulary models decode with\n"
               "  DIR/encoder.json (default data/gpt2). The text streams to stdout; progress goes to stderr.\n"
               "  --threads N: OpenMP threads (default 1: one sequence is too little work to share; two threads\n"
               "  ran slower here alone, and 10x slower beside other jobs).\n");
        return 0;
    }
    const char *load = NULL, *prompt = "\n", *ntok = "200", *temp = "1.0", *topk = "0", *seed = "1337", *enc = "data/gpt2";
    const char *topp = "1.0", *stop = NULL, *nsamp = "1", *thr = "1";
    Opt o[] = {{"--load", &load}, {"--prompt", &prompt}, {"--tokens", &ntok}, {"--temperature", &temp},
               {"--top-k", &topk}, {"--seed", &seed}, {"--encoder", &enc}, {"--top-p", &topp}, {"--stop", &stop},
               {"--num-samples", &nsamp}, {"--threads", &thr}};
    long n, k, sd, ns, nt;
    double t, tp;
    if (parse_opts(argc, argv, o, 11, "generate")) return TED_EXIT_USAGE;
    if (to_long("generate", "--tokens", ntok, 0, 1 << 20, &n) || to_long("generate", "--top-k", topk, 0, 1 << 20, &k) ||
        to_long("generate", "--seed", seed, 0, (1L << 62), &sd) || to_float("generate", "--temperature", temp, 0, &t) ||
        to_float("generate", "--top-p", topp, 0, &tp) || to_long("generate", "--num-samples", nsamp, 1, 1 << 20, &ns) ||
        to_long("generate", "--threads", thr, 1, 4096, &nt))
        return TED_EXIT_USAGE;
    threads_set((int)nt);
    if (!(tp > 0 && tp <= 1)) { ted_error("generate: --top-p must be in (0, 1], got \"%s\"", topp); return TED_EXIT_USAGE; }
    if (stop && !stop[0]) { ted_error("generate: --stop needs a non-empty text"); return TED_EXIT_USAGE; }
    Model M; Topology topo; Config c;
    char dir[1200];
    if (load_model(&M, &topo, &c, load, 1, 0, dir)) return TED_EXIT_USAGE;
    Tokenizer *tok = NULL;
    if (c.model.vocab_size != 256 && !(tok = tok_load(enc))) return TED_EXIT_USAGE;
    say_loaded(dir, &c);
    int np;
    int *ids = encode_prompt(tok, prompt, &np);
    double t0 = now_ms();
    long made = 0;
    Pipeline P;
    pipe_init(&P, &M, &c);
    for (long i = 0; i < ns; i++) {
        if (ns > 1) printf("--- sample %ld/%ld\n", i + 1, ns);
        fputs(prompt, stdout);
        SampleOpts so = {(int)n, (float)t, (int)k, (float)tp, stop, (uint64_t)sd + (uint64_t)i};
        made += sample_text(&P, tok, ids, np, &so, stdout);
    }
    pipe_free(&P);
    double ms = now_ms() - t0;
    fprintf(stderr, "generated %ld tokens in %.1f s (%.1f tokens/s)\n", made, ms * 1e-3, made / (ms * 1e-3 + 1e-9));
    ted_free(ids);
    if (tok) tok_free(tok);
    model_free(&M);
    return 0;
}

// ---------------------------------------------------------------------------------------
// ted bench: full training steps of the benchmark model on random tokens

// Random tokens for the benchmark: from (seed, step, micro-batch) only.
typedef struct { const Config *c; int step; } BenchBatch;
static void bench_batch(void *ctx, int mb, int *inp, int *tgt) {
    const BenchBatch *b = ctx;
    long n = (long)b->c->micro_batch * (b->c->seq_len > 0 ? b->c->seq_len : b->c->model.n_positions);
    uint64_t at = (uint64_t)b->step * 4096 + (uint64_t)mb;
    for (long i = 0; i < n; i++) {
        inp[i] = (int)(rng_at(b->c->seed, at, (uint64_t)i) % b->c->model.vocab_size);
        tgt[i] = (int)(rng_at(b->c->seed + 1, at, (uint64_t)i) % b->c->model.vocab_size);
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

// The bench model (the help's), a --config file on top and flags on top of both. Returns -1 to go on,
// else the exit code (help printed, or bad input).
static int bench_config(Config *c, int argc, char **argv) {
    if (has_help(argc, argv)) {
        printf("usage: ted bench [--steps N] [--config FILE] [any ted train flag that shapes the model or batch]\n"
               "       ted bench --optimizer N: one AdamW step over N parameters (fp32, bf16, fp16) against a memcpy of\n"
               "       the same bytes\n"
               "  Times N (default 5) training steps (forward, backward, AdamW) after 2 warm-up steps of the\n"
               "  bench model: B 8, T 256, d 256, L 4, 4 heads, f 1024, 8 experts top-2, moe_every 1, V 256.\n"
               "  Prints ms/step (wall; and the process's CPU time per step, which a shared machine\n"
               "  inflates less), tokens/s and MFU against the GEMM peak measured here (sgemm; the bf16 GEMM's\n"
               "  under bf16 compute); mfu_cpu is the same by CPU time: rank 0's FLOPs per core-second against\n"
               "  one core's GEMM rate timed the same way; gemm_engine and gemm_kernel name the CPU GEMM's;\n"
               "  omp_wait_policy the threads' wait policy (PASSIVE unless the environment names one).\n");
        return 0;
    }
    config_defaults(c);
    ModelConfig *m = &c->model;
    m->vocab_size = 256; m->n_positions = 256; m->n_embd = 256; m->n_layer = 4; m->n_head = 4; m->n_inner = 1024;
    m->num_experts = 8; m->top_k = 2; m->moe_every = 1;
    c->micro_batch = 8; c->steps = 5; c->warmup = 1;
    const char *path;
    if (find_flag(argc, argv, "--config", &path) && (!path || config_load_json(c, path))) {
        if (!path) ted_error("--config: needs a file");
        return TED_EXIT_USAGE;
    }
    if (config_apply_flags(c, argc, argv, 1) || config_validate(c)) return TED_EXIT_USAGE;
    if (c->pp_auto) auto_layers(c);
    threads_set(c->threads);
    if (ted_agree(start_device(c) != 0)) return TED_EXIT_USAGE;
    char err[256];
    if (ted_agree(topo_check(comm_world_size(), c->tp, c->ep, c->pp, err, sizeof err) != 0)) {
        ted_error("layout: %s", err);
        return TED_EXIT_USAGE;
    }
    return -1;
}

// What the timed steps add up to (after the warm-up steps).
typedef struct { double wall, cpu, wait; CommStats comm; } BenchTimes;

// warm + c->steps training steps on random tokens; the router statistics count the timed ones only.
static BenchTimes bench_steps(Pipeline *P, Zero *z, Model *M, const Config *c, const Topology *topo, int warm) {
    BenchBatch bb = {c, 0};
    BenchTimes bt;
    memset(&bt, 0, sizeof bt);
    double ntok = (double)c->micro_batch * seq_len_of(c) * c->grad_accum;
    for (int s = 0; s < warm + c->steps; s++) {
        if (s == warm) memset(&M->rstats, 0, sizeof M->rstats);
        comm_stats_reset();
        double t0 = now_ms(), c0 = cpu_ms();
        bb.step = s;
        pipe_train_step(P, bench_batch, &bb, (float)(1.0 / (ntok * topo->dp)), c->model.aux_coef, c->model.z_coef);
        pipe_sum_tied(P);
        zero_step(z, c, c->lr);
        buf_sync();
        if (s < warm) continue;
        bt.wall += now_ms() - t0; bt.cpu += cpu_ms() - c0; bt.wait += P->wait_ms;
        comm_accumulate(&bt.comm);
    }
    return bt;
}

// The per-collective summary (stderr) and the JSON line (stdout) of rank 0; every rank takes part in
// the stage CPU times' gather.
static void bench_report(const BenchTimes *bt, const Model *M, const Config *c, Topology *topo, double peak) {
    const ModelConfig *m = &c->model;
    int T = seq_len_of(c);
    double ntok = (double)c->micro_batch * T * c->grad_accum, ms = bt->wall / c->steps, tps = ntok * topo->dp / (ms * 1e-3);
    double dropped = M->rstats.choices ? (double)M->rstats.dropped / M->rstats.choices : 0;
    double mfu = mfu_of(mfu_flops_per_token(m, T, dropped) * tps, peak);
    // by CPU time: this rank's share of the step's FLOPs per core-second it burned, against one
    // core's sgemm rate timed the same way
    double core_peak = ted_device == DEV_CPU ? mfu_core_peak_flops(topo) : 0;
    double rank_flops = mfu_flops_per_token(m, T, dropped) * ntok * topo->dp / topo->world;
    double mfu_cpu = mfu_of(rank_flops / (bt->cpu / c->steps * 1e-3), core_peak);
    if (topo->rank == 0 && topo->world > 1) comm_summary(stderr, &bt->comm, bt->wall, c->steps);
    char stages[1024];
    stage_cpu_json(topo, bt->cpu / c->steps, stages, sizeof stages);
    if (topo->rank == 0 && topo->pp > 1)
        fprintf(stderr, "  pipeline wait (receives: other stages, the bubble) %.1f ms/step (%.1f%%)\n", bt->wait / c->steps,
                100 * bt->wait / bt->wall);
    char engine[32], kernel[64];   // the CPU GEMMs' (nn/gemm.h)
    gemm_engine_name(engine, sizeof engine, kernel, sizeof kernel);
    const char *core = gemm_bf16_compute() ? "bf16_gemm" : "sgemm";
    if (topo->rank == 0) printf("{\"ms_per_step\": %.1f, \"cpu_ms_per_step\": %.1f, \"pp_wait_ms\": %.1f, \"tokens_per_s\": %.0f, \"mfu\": %.4f, \"%s_peak_gflops\": %.1f, "
           "\"mfu_cpu\": %.4f, \"%s_core_peak_gflops_cpu\": %.1f, \"gemm_engine\": \"%s\", \"gemm_kernel\": \"%s\", \"omp_wait_policy\": \"%s\", "
           "\"model_gflop_per_step\": %.2f, \"dropped_frac\": %.4f, \"threads\": %d, \"params\": %ld, "
           "\"device_bytes_peak\": %zu, \"mem_peak_bytes\": %zu, \"activation_bytes\": %zu%s}\n", ms, bt->cpu / c->steps,
           bt->wait / c->steps, tps, mfu, ted_device == DEV_CUDA ? "datasheet_bf16" : c->peak_tflops > 0 ? "given" : core,
           peak * 1e-9, mfu_cpu, core, core_peak * 1e-9, ted_device == DEV_CPU ? engine : "cublas",
           ted_device == DEV_CPU ? kernel : "", getenv("OMP_WAIT_POLICY") ? getenv("OMP_WAIT_POLICY") : "default",
           model_flops_per_token(m, T) * ntok * 1e-9, dropped, omp_get_max_threads(),
           model_num_params(m), mem_stats()->device_peak, mem_stats()->peak, mem_stats()->current[MEM_ACTIVATIONS], stages);
}

int cmd_bench(int argc, char **argv) {
    const char *nopt;
    if (find_flag(argc, argv, "--optimizer", &nopt)) return adam_bench_cmd(nopt);
    Config c;
    int rc = bench_config(&c, argc, argv);
    if (rc >= 0) return rc;
    Topology topo;
    topo_init(&topo, c.tp, c.ep, c.pp);
    const char *peak_kind;
    double peak = mfu_peak_flops(&c, &topo, &peak_kind);
    Model M;
    model_build(&M, &c, &topo, c.micro_batch, seq_len_of(&c));
    Pipeline P;
    pipe_init(&P, &M, &c);
    pipe_print(&P, &c);
    Zero z;
    zero_init(&z, &M.reg, &topo, &c);
    BenchTimes bt = bench_steps(&P, &z, &M, &c, &topo, 2);
    bench_report(&bt, &M, &c, &topo, peak);
    pipe_free(&P);
    zero_free(&z);
    model_free(&M);
    return 0;
}
