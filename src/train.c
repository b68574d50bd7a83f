// train.c — the training loop and the commands built on the model: evaluation, sampling,
// the benchmark. One process is the world of size one: the same code runs under mpirun.
#include "train.h"
#include "routing.h"
#include "alloc.h"
#include "backend.h"
#include "checkpoint.h"
#include "comm.h"
#include "data.h"
#include "metrics.h"
#include "model.h"
#include "plan.h"
#include "rng.h"
#include "tokenizer.h"
#include "util.h"
#include "zero.h"
#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <string.h>

void openblas_set_num_threads(int);

// Threads per process: as asked, else the cores shared out among the ranks on this node.
static void set_threads(int n) {
    const char *local = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    if (n <= 0 && local && atoi(local) > 1) {
        n = omp_get_num_procs() / atoi(local);
        if (n < 1) n = 1;
    }
    if (n <= 0) return;
    omp_set_num_threads(n);
    openblas_set_num_threads(n);
}

// --device: before the topology, whose groups open NCCL communicators on a GPU run
static int start_device(const Config *c) {
    const char *lr = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    return device_select(c->device ? "cuda" : "cpu", lr ? atoi(lr) : 0, c->bf16);
}

// Checkpoints read and write the host copies of the weights and the optimizer state.
static void host_view(Model *M, Zero *z, int copy) { reg_host_view(&M->reg, copy); zero_host_view(z, copy); }
static void device_view(Model *M, Zero *z, int copy) { reg_device_view(&M->reg, copy); zero_device_view(z, copy); }

// The peak that MFU is against: the sgemm rate measured here on the CPU; on a GPU its datasheet
// dense bf16 rate (0 when the GPU is not known: MFU is then reported as 0).
static double peak_flops(int n, int reps, const char **what) {
#ifdef TED_CUDA
    if (ted_device == DEV_CUDA) { *what = "datasheet bf16"; return cu_peak_flops(); }
#endif
    *what = "sgemm";
    return sgemm_peak_flops(n, reps);
}
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

static EvalResult evaluate(Model *M, const Split *s, long nwin, int T) {
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
        double lm = model_forward(M, inp, tgt, B, T);
        if (!counted) continue;
        sums[0] += lm;
        sums[1] += M->rstats.aux_sum - before.aux_sum;
        sums[2] += M->rstats.z_sum - before.z_sum;
        sums[3] += nmoe ? (double)(M->rstats.groups - before.groups) / nmoe : 0;
        sums[4] += M->rstats.cv_sum - before.cv_sum;
    }
    M->uneven = 0;
    comm_allreduce((Group *)&tp->g[GROUP_DP], sums, 5, DT_F64);
    ted_free(inp); ted_free(tgt);
    double ntok = (double)nwin * T;
    EvalResult r = {0, sums[0] / ntok, 0, nwin};
    if (nmoe) r.aux = M->m.aux_coef * sums[1] / sums[3] + M->m.z_coef * sums[2] / ntok + sums[4] / sums[3];
    r.loss = r.lm + r.aux;
    return r;
}

// ---------------------------------------------------------------------------------------
// sampling: the full context through the model for each new token (no KV cache)

static void sample(Model *M, const Tokenizer *tok, const int *prompt, int np, int ntok, float temperature,
                   int top_k, uint64_t seed, FILE *out) {
    int T = M->T, V = M->V, n = np;
    int *ctx = ted_alloc(sizeof(int) * (np + ntok + 1), MEM_TEMP);
    memcpy(ctx, prompt, sizeof(int) * np);
    float *p = ted_alloc(sizeof(float) * V, MEM_TEMP);
    char piece[512];
    for (int i = 0; i < ntok; i++) {
        int start = n > T ? n - T : 0, len = n - start;
        model_forward(M, ctx + start, NULL, 1, len);
        const float *lg = M->full_logits + (long)(len - 1) * V;
        float mx = -INFINITY;
        for (int v = 0; v < V; v++) { p[v] = lg[v] / (temperature > 0 ? temperature : 1e-6f); if (p[v] > mx) mx = p[v]; }
        if (top_k > 0 && top_k < V) {   // keep the top_k largest
            float *sorted = ted_alloc(sizeof(float) * V, MEM_TEMP);
            memcpy(sorted, p, sizeof(float) * V);
            for (int a = 0; a < top_k; a++)   // partial selection
                for (int b = a + 1; b < V; b++) if (sorted[b] > sorted[a]) { float t = sorted[a]; sorted[a] = sorted[b]; sorted[b] = t; }
            float cut = sorted[top_k - 1];
            for (int v = 0; v < V; v++) if (p[v] < cut) p[v] = -INFINITY;
            ted_free(sorted);
        }
        double s = 0;
        for (int v = 0; v < V; v++) { p[v] = expf(p[v] - mx); s += p[v]; }
        double u = rng_uniform(rng_at(seed, 0x73616d70ull, (uint64_t)i)) * s, acc = 0;
        int next = V - 1;
        for (int v = 0; v < V; v++) { acc += p[v]; if (acc >= u) { next = v; break; } }
        ctx[n++] = next;
        if (tok) { int k = tok_decode(tok, next, piece); fwrite(piece, 1, k, out); }
        else fputc(next, out);
        fflush(out);
    }
    fputc('\n', out);
    ted_free(ctx); ted_free(p);
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
static int load_config(Config *c, int argc, char **argv) {
    config_defaults(c);
    const char *path;
    if (find_flag(argc, argv, "--config", &path)) {
        if (!path) { ted_error("--config: needs a file"); return -1; }
        if (config_load_json(c, path)) return -1;
    }
    if (config_apply_flags(c, argc, argv, 1)) return -1;
    return config_validate(c);
}

// Everything that can be wrong with a run's inputs, checked before any allocation of the
// model: identical on every rank except file access, whose result the ranks then agree on.
static int prepare(Config *c, int argc, char **argv, Dataset *ds, char *ckdir, size_t cklen, FILE **log) {
    if (load_config(c, argc, argv)) return TED_EXIT_USAGE;
    char err[256];
    if (topo_check(comm_world_size(), c->tp, c->ep, err, sizeof err)) { ted_error("layout: %s", err); return TED_EXIT_USAGE; }
    int T = seq_len_of(c), dp = comm_world_size() / c->tp;
    if (c->eval_every && c->micro_batch * dp < 1) { ted_error("layout: no data-parallel rank"); return TED_EXIT_USAGE; }
    if (c->resume[0]) {   // the checkpoint must be of this model
        if (ckpt_resolve(c->resume, ckdir, cklen)) return TED_EXIT_USAGE;
        Config k = *c;
        if (ckpt_read_config(ckdir, &k)) return TED_EXIT_USAGE;
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
    if (c->log[0] && comm_world_rank() == 0) {
        *log = fopen(c->log, c->resume[0] ? "a" : "w");
        if (!*log) { ted_error("%s: cannot open the log: %s", c->log, strerror(errno)); return TED_EXIT_USAGE; }
    }
    return 0;
}

int cmd_train(int argc, char **argv) {
    const char *v;
    if (find_flag(argc, argv, "--help", &v) || find_flag(argc, argv, "-h", &v)) { config_print_train_help(); return 0; }
    Config c;
    Dataset ds = {0};
    char ckdir[1200] = "";
    FILE *log = NULL;
    if (ted_agree(prepare(&c, argc, argv, &ds, ckdir, sizeof ckdir, &log) != 0)) return TED_EXIT_USAGE;
    set_threads(c.threads);
    int T = seq_len_of(&c);
    Topology topo;
    topo_init(&topo, c.tp, c.ep);
    topo_print(&topo, c.model.num_experts);
    Model M;
    model_build(&M, &c, &topo, c.micro_batch, T);
    Zero z;
    TrainerState st = {0, 0, c.steps, c.seed, c.data_sequential};
    if (ckdir[0]) {
        zero_init(&z, &M.reg, &topo);
        host_view(&M, &z, 0);
        int bad = ckpt_load_weights(ckdir, &M) || ckpt_load_state(ckdir, &M, &z, &st);
        if (ted_agree(bad)) return TED_EXIT_USAGE;
        device_view(&M, &z, 1);
        if (!M.reg.half) zero_sync_master(&z);
        if (st.step > c.steps) {
            ted_error("%s: checkpoint is at step %ld, past --steps %d", ckdir, st.step, c.steps);
            return TED_EXIT_USAGE;
        }
        if (st.step > 0 && (st.seed != c.seed || st.sequential != c.data_sequential)) {
            ted_error("%s: resuming needs the run's --seed %llu and --data-order %s (given %llu, %s)", ckdir,
                      (unsigned long long)st.seed, st.sequential ? "sequential" : "shuffled",
                      (unsigned long long)c.seed, c.data_sequential ? "sequential" : "shuffled");
            return TED_EXIT_USAGE;
        }
        if (st.step > 0 && st.steps != c.steps && topo.rank == 0)
            printf("note: the checkpoint's run had --steps %ld; with --steps %d the LR schedule changes from here\n",
                   st.steps, c.steps);
        st.steps = c.steps; st.seed = c.seed; st.sequential = c.data_sequential;
        if (topo.rank == 0) printf("resumed from %s at step %ld\n", ckdir, st.step);
    } else zero_init(&z, &M.reg, &topo);
    const char *peak_kind;
    double peak = peak_flops(1024, 5, &peak_kind);
    double flops_tok = model_flops_per_token(&c.model, T);
    long gbatch = (long)c.micro_batch * c.grad_accum * topo.dp;
    double ntok_step = (double)gbatch * T;
    double ngroups_step = (double)gbatch / c.model.group_size;
    int nmoe = n_moe_layers(&c.model);
    if (topo.rank == 0)
        printf("model: %ld parameters (%d MoE blocks of %d experts, top-%d), T %d, global batch %ld sequences; "
               "%s peak %.1f GFLOP/s\n", model_num_params(&c.model), nmoe, c.model.num_experts, c.model.top_k, T,
               gbatch, peak_kind, peak * 1e-9);
    {   // the memory model (seed 000 Eq. 4) with this run's parameter counts, next to what was allocated
        double np_exp = 0, np_all = 0;
        for (int i = 0; i < M.reg.n; i++) {
            np_all += M.reg.p[i].numel;
            if (M.reg.p[i].tag == TAG_EDP) np_exp += M.reg.p[i].numel;
        }
        const MemStats *ms = mem_stats();
        int wbytes = M.reg.half ? 2 : 4;
        double pred = plan_state_bytes(np_all - np_exp, np_exp, topo.dp, topo.edp, wbytes);
        double meas = (double)(ms->current[MEM_PARAMS] + ms->current[MEM_GRADS] + ms->current[MEM_OPTIMIZER]);
        if (topo.rank == 0)
            printf("model state per rank: Eq. 4 predicts %.0f bytes (%s weights and gradients), allocated %.0f "
                   "(params %zu + grads %zu + optimizer %zu)\n", pred, wbytes == 2 ? "16-bit" : "fp32", meas, ms->current[MEM_PARAMS],
                   ms->current[MEM_GRADS], ms->current[MEM_OPTIMIZER]);
    }
    int *inp = ted_alloc(sizeof(int) * c.micro_batch * T, MEM_TEMP);
    int *tgt = ted_alloc(sizeof(int) * c.micro_batch * T, MEM_TEMP);
    long nval = data_nwindows(&ds.val, T), saved = -1;
    if (c.eval_windows > 0 && c.eval_windows < nval) nval = c.eval_windows;
    long first_step = st.step;
    CommStats comm_total;
    memset(&comm_total, 0, sizeof comm_total);
    double train_ms = 0;
    for (long s = st.step; s < c.steps; s++) {
        comm_stats_reset();
        mem_reset_peaks();
        double t0 = now_ms();
        model_zero_grad(&M);
        memset(&M.rstats, 0, sizeof M.rstats);
        double lm = 0;
        for (int a = 0; a < c.grad_accum; a++) {
            long first = (long)a * c.micro_batch * topo.dp + (long)topo.dp_idx * c.micro_batch;
            for (int j = 0; j < c.micro_batch; j++)
                data_sequence(&ds.train, T, st.seed, c.data_sequential, s, first + j, gbatch, inp + j * T, tgt + j * T);
            mem_set_phase(PHASE_FORWARD);
            M.rng_step = s; M.seq0 = first;   // router randomness: global coordinates
            lm += model_forward(&M, inp, tgt, c.micro_batch, T);
            mem_set_phase(PHASE_BACKWARD);
            float S = z.loss_scale;   // fp16: the loss gradient scaled up, unscaled in the optimizer
            model_backward(&M, (float)(S / ntok_step), (float)(S * c.model.aux_coef / ngroups_step),
                           (float)(S * c.model.z_coef / ntok_step));
        }
        mem_set_phase(PHASE_OPTIMIZER);
        float lr = lr_at(&c, s);
        double norm = zero_step(&z, &c, lr);
        routing_step_end(&M, &z);   // per-block loads, the balancing bias
        buf_sync();
        mem_set_phase(PHASE_NONE);
        double sums[6] = {lm, M.rstats.aux_sum, M.rstats.z_sum, (double)M.rstats.dropped, (double)M.rstats.choices,
                          M.rstats.cv_sum};
        comm_allreduce(&topo.g[GROUP_DP], sums, 6, DT_F64);
        char moe_log[4096];
        routing_log_json(&M, moe_log, sizeof moe_log);
        double ms = now_ms() - t0;
        train_ms += ms;
        comm_accumulate(&comm_total);
        StepMetrics m = {.step = s + 1, .lm_loss = sums[0] / ntok_step, .lr = lr, .grad_norm = norm, .step_ms = ms,
                         .tokens_per_s = ntok_step / (ms * 1e-3), .dropped_frac = sums[4] > 0 ? sums[3] / sums[4] : 0};
        if (nmoe) m.aux_loss = c.model.aux_coef * sums[1] / ngroups_step + c.model.z_coef * sums[2] / ntok_step +
                               sums[5] / ngroups_step;
        m.max_mean = routing_worst_max_mean(&M);
        m.moe = nmoe ? moe_log : NULL;
        m.loss = m.lm_loss + m.aux_loss;
        m.mfu = mfu_of(flops_tok * m.tokens_per_s, peak * topo.world);
        m.loss_scale = z.loss_scale;
        m.skipped = z.skipped;
        metrics_step(log, &m);
        if (topo.rank == 0 && (c.log_every > 0 && ((s + 1) % c.log_every == 0 || s + 1 == c.steps || s == first_step)))
            printf("step %5ld/%d | loss %.4f (lm %.4f aux %.4f) | lr %.2e | norm %.3f | drop %.3f | load %.2f | %.0f ms | "
                   "%.0f tok/s | MFU %.1f%%\n", s + 1, c.steps, m.loss, m.lm_loss, m.aux_loss, lr, norm,
                   m.dropped_frac, m.max_mean, ms, m.tokens_per_s, 100 * m.mfu);
        int last = s + 1 == c.steps;
        if (nval > 0 && ((c.eval_every > 0 && (s + 1) % c.eval_every == 0) || last)) {
            EvalResult e = evaluate(&M, &ds.val, nval, T);
            metrics_eval(log, s + 1, e.loss, e.lm, e.aux, e.windows);
            if (topo.rank == 0) printf("eval step %ld: val_loss %.4f (lm %.4f) over %ld windows\n", s + 1, e.loss, e.lm, e.windows);
        }
        if (topo.rank == 0 && c.sample_every > 0 && ((s + 1) % c.sample_every == 0 || last) && c.model.vocab_size == 256) {
            int np;
            int *pr = encode_prompt(NULL, "\n", &np);
            printf("sample: ");
            sample(&M, NULL, pr, np, 200, 0.8f, 0, c.seed + (uint64_t)s, stdout);
            ted_free(pr);
        }
        st.step = s + 1;
        if (c.save[0] && ((c.save_every > 0 && (s + 1) % c.save_every == 0) || last)) {
            st.adam_t = z.t;
            host_view(&M, &z, 1);
            if (ckpt_save(c.save, &M, &z, &st)) return 1;
            device_view(&M, &z, 0);
            saved = st.step;
            if (topo.rank == 0) printf("saved %s/step_%08ld\n", c.save, s + 1);
        }
    }
    if (topo.rank == 0 && topo.world > 1) comm_summary(stdout, &comm_total, train_ms, c.steps - first_step);
    // with --save a run always ends saved, also when it ran no step (--steps 0: the initial weights)
    if (c.save[0] && saved != st.step) {
        st.adam_t = z.t;
        host_view(&M, &z, 1);
        if (ckpt_save(c.save, &M, &z, &st)) return 1;
        if (topo.rank == 0) printf("saved %s/step_%08ld\n", c.save, st.step);
    }
    if (log) fclose(log);
    ted_free(inp); ted_free(tgt);
    zero_free(&z);
    model_free(&M);
    data_free(&ds);
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

// A one-process model with the checkpoint's weights.
static int load_model(Model *M, Topology *topo, Config *c, const char *load, int B, int T_override) {
    char dir[1200];
    if (!load || !load[0]) { ted_error("--load: a checkpoint directory is required"); return -1; }
    if (ckpt_resolve(load, dir, sizeof dir)) return -1;
    config_defaults(c);
    if (ckpt_read_config(dir, c)) return -1;
    int T = T_override > 0 ? T_override : seq_len_of(c);
    if (T > c->model.n_positions) { ted_error("--seq-len %d exceeds the model's n_positions %d", T, c->model.n_positions); return -1; }
    topo_init(topo, 1, 1);
    model_build(M, c, topo, B, T);
    return ckpt_load_weights(dir, M);
}

int cmd_eval(int argc, char **argv) {
    if (has_help(argc, argv)) {
        printf("usage: ted eval --load CKPT --data FILE --windows N [--micro-batch B] [--seq-len T]\n"
               "  Mean loss over the first N windows of the whole FILE (window i = tokens [iT, iT+T+1)),\n"
               "  printed as {\"loss\", \"lm_loss\", \"aux_loss\", \"windows\"}. T defaults to the checkpoint's seq_len.\n");
        return 0;
    }
    const char *load = NULL, *data = NULL, *win = NULL, *mbs = "8", *tls = "0";
    Opt o[] = {{"--load", &load}, {"--data", &data}, {"--windows", &win}, {"--micro-batch", &mbs}, {"--seq-len", &tls}};
    long nwin, mb, Tl;
    if (parse_opts(argc, argv, o, 5, "eval")) return TED_EXIT_USAGE;
    if (!data) { ted_error("eval: --data FILE is required"); return TED_EXIT_USAGE; }
    if (!win) { ted_error("eval: --windows N is required"); return TED_EXIT_USAGE; }
    if (to_long("eval", "--windows", win, 1, 1L << 40, &nwin) || to_long("eval", "--micro-batch", mbs, 1, 4096, &mb) ||
        to_long("eval", "--seq-len", tls, 0, 1 << 20, &Tl))
        return TED_EXIT_USAGE;
    Split s;
    if (data_load_whole(&s, data)) return TED_EXIT_USAGE;   // the loader printed its line
    Model M; Topology topo; Config c;
    if (load_model(&M, &topo, &c, load, (int)mb, (int)Tl)) return TED_EXIT_USAGE;
    int T = M.T;
    for (long i = 0; i < s.n; i++)
        if (s.tok[i] >= c.model.vocab_size) { ted_error("%s: token id %d does not fit vocab_size %d", data, s.tok[i], c.model.vocab_size); return TED_EXIT_USAGE; }
    long have = data_nwindows(&s, T);
    if (nwin > have) { ted_error("%s: --windows %ld but the file holds %ld windows of %d+1 tokens", data, nwin, have, T); return TED_EXIT_USAGE; }
    EvalResult e = evaluate(&M, &s, nwin, T);
    printf("{\"loss\": %.9g, \"lm_loss\": %.9g, \"aux_loss\": %.9g, \"windows\": %ld}\n", e.loss, e.lm, e.aux, e.windows);
    model_free(&M);
    ted_free(s.tok);
    return 0;
}

int cmd_generate(int argc, char **argv) {
    if (has_help(argc, argv)) {
        printf("usage: ted generate --load CKPT [--prompt TEXT] [--tokens N] [--temperature X] [--top-k K] [--seed S]\n"
               "                    [--encoder DIR]\n"
               "  Samples N tokens (default 200) after the prompt; temperature 1.0, top-k 0 (all), seed 1337.\n"
               "  Byte models print bytes; GPT-2 vocabulary models decode with DIR/encoder.json (default data/gpt2).\n");
        return 0;
    }
    const char *load = NULL, *prompt = "\n", *ntok = "200", *temp = "1.0", *topk = "0", *seed = "1337", *enc = "data/gpt2";
    Opt o[] = {{"--load", &load}, {"--prompt", &prompt}, {"--tokens", &ntok}, {"--temperature", &temp},
               {"--top-k", &topk}, {"--seed", &seed}, {"--encoder", &enc}};
    long n, k, sd;
    double t;
    if (parse_opts(argc, argv, o, 7, "generate")) return TED_EXIT_USAGE;
    if (to_long("generate", "--tokens", ntok, 0, 1 << 20, &n) || to_long("generate", "--top-k", topk, 0, 1 << 20, &k) ||
        to_long("generate", "--seed", seed, 0, (1L << 62), &sd) || to_float("generate", "--temperature", temp, 0, &t))
        return TED_EXIT_USAGE;
    Model M; Topology topo; Config c;
    if (load_model(&M, &topo, &c, load, 1, 0)) return TED_EXIT_USAGE;
    Tokenizer *tok = NULL;
    if (c.model.vocab_size != 256 && !(tok = tok_load(enc))) return TED_EXIT_USAGE;
    int np;
    int *ids = encode_prompt(tok, prompt, &np);
    fputs(prompt, stdout);
    sample(&M, tok, ids, np, (int)n, (float)t, (int)k, (uint64_t)sd, stdout);
    ted_free(ids);
    if (tok) tok_free(tok);
    model_free(&M);
    return 0;
}

// ---------------------------------------------------------------------------------------
// ted bench: full training steps of the SPEC bench model on random tokens

int cmd_bench(int argc, char **argv) {
    if (has_help(argc, argv)) {
        printf("usage: ted bench [--steps N] [any ted train flag that shapes the model or batch]\n"
               "  Times N (default 5) training steps (forward, backward, AdamW) after 2 warm-up steps of the\n"
               "  bench model: B 8, T 256, d 256, L 4, 4 heads, f 1024, 8 experts top-2, moe_every 1, V 256.\n"
               "  Prints ms/step, tokens/s and MFU against the sgemm peak measured here.\n");
        return 0;
    }
    Config c;
    config_defaults(&c);
    ModelConfig *m = &c.model;
    m->vocab_size = 256; m->n_positions = 256; m->n_embd = 256; m->n_layer = 4; m->n_head = 4; m->n_inner = 1024;
    m->num_experts = 8; m->top_k = 2; m->moe_every = 1;
    c.micro_batch = 8; c.steps = 5; c.warmup = 1;
    if (config_apply_flags(&c, argc, argv, 1) || config_validate(&c)) return TED_EXIT_USAGE;
    set_threads(c.threads);
    if (ted_agree(start_device(&c) != 0)) return TED_EXIT_USAGE;
    int T = seq_len_of(&c), B = c.micro_batch, warm = 2;
    Topology topo;
    topo_init(&topo, c.tp, c.ep);
    const char *peak_kind;
    double peak = peak_flops(2048, 4, &peak_kind);
    Model M;
    model_build(&M, &c, &topo, B, T);
    Zero z;
    zero_init(&z, &M.reg, &topo);
    int *inp = ted_alloc(sizeof(int) * B * (T + 1), MEM_TEMP), *tgt = ted_alloc(sizeof(int) * B * T, MEM_TEMP);
    double total = 0, ntok = (double)B * T * c.grad_accum;
    CommStats comm_total;
    memset(&comm_total, 0, sizeof comm_total);
    for (int s = 0; s < warm + c.steps; s++) {
        if (s == warm) memset(&M.rstats, 0, sizeof M.rstats);
        comm_stats_reset();
        double t0 = now_ms();
        model_zero_grad(&M);
        for (int a = 0; a < c.grad_accum; a++) {
            for (long i = 0; i < (long)B * T; i++) {
                inp[i] = (int)(rng_at(c.seed, (uint64_t)s, (uint64_t)i) % m->vocab_size);
                tgt[i] = (int)(rng_at(c.seed + 1, (uint64_t)s, (uint64_t)i) % m->vocab_size);
            }
            model_forward(&M, inp, tgt, B, T);
            model_backward(&M, (float)(1.0 / ntok), m->aux_coef, m->z_coef);
        }
        zero_step(&z, &c, c.lr);
        buf_sync();
        if (s >= warm) { total += now_ms() - t0; comm_accumulate(&comm_total); }
    }
    double ms = total / c.steps, tps = ntok * topo.dp / (ms * 1e-3);
    double mfu = mfu_of(model_flops_per_token(m, T) * tps, peak * topo.world);
    double dropped = M.rstats.choices ? (double)M.rstats.dropped / M.rstats.choices : 0;
    if (topo.rank == 0 && topo.world > 1) comm_summary(stderr, &comm_total, total, c.steps);
    if (topo.rank == 0) printf("{\"ms_per_step\": %.1f, \"tokens_per_s\": %.0f, \"mfu\": %.4f, \"%s_peak_gflops\": %.1f, "
           "\"model_gflop_per_step\": %.2f, \"dropped_frac\": %.4f, \"threads\": %d, \"params\": %ld, "
           "\"device_bytes_peak\": %zu}\n", ms, tps, mfu, ted_device == DEV_CUDA ? "datasheet_bf16" : "sgemm",
           peak * 1e-9, model_flops_per_token(m, T) * ntok * 1e-9, dropped, omp_get_max_threads(),
           model_num_params(m), mem_stats()->device_peak);
    ted_free(inp); ted_free(tgt);
    zero_free(&z);
    model_free(&M);
    return 0;
}
