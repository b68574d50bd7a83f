// plan.c — `ted plan`: the TED memory model (design §5) over model/memplan.h.
//   NP_exp = E/3·NP_base, NP_nonexp = 2/3·NP_base (a MoE FFN in every other block);
//   M_gpu ≥ (4 + 12/dp)·NP_nonexp/tp + (4 + 12/edp)·NP_exp/(tp·ep)       (M1, ZeRO-1)
//   as G grows: NP_base ≤ tp/4 · M_gpu                                    (M2)
// With a config (or the shape flags) the exact tensors and activations of a rank, as ted train
// allocates them.
#include "cli/commands.h"
#include "config/config.h"
#include "parallel/schedule.h"
#include "nn/sparse_attention.h"
#include "model/model.h"
#include "core/util.h"
#include "model/memplan.h"
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// What the flags set besides the sizes: ZeRO stage, offload, precision.
typedef struct { int zero, offload, wbytes, gpu; } PlanOpts;

// A number with an optional size suffix: K, M, B or G (1e9), T; "6.7B", "80GB", "1.3e9".
static int num(const char *flag, const char *s, double lo, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    int ok = !errno && end != s;
    if (ok && *end) {
        const char *u = "KMBGT";
        const double scale[] = {1e3, 1e6, 1e9, 1e9, 1e12};
        const char *at = strchr(u, toupper((unsigned char)*end));
        ok = at != NULL && (!end[1] || (toupper((unsigned char)end[1]) == 'B' && !end[2] && *end != 'B' && *end != 'b'));
        if (ok) v *= scale[at - u];
    }
    if (!ok || !(v >= lo) || !isfinite(v)) {
        ted_error("plan: %s must be a finite number >= %g (suffixes K M B T, e.g. 6.7B), got \"%s\"", flag, lo, s);
        return -1;
    }
    *out = v;
    return 0;
}

// A count: a whole number in [lo, hi] (hi bounds the layouts plan loops over, and fits an int).
static int count(const char *flag, const char *s, double lo, double hi, double *out) {
    if (num(flag, s, lo, out)) return -1;
    if (*out == floor(*out) && *out <= hi) return 0;
    ted_error("plan: %s must be a whole number in [%.0f, %.0f], got \"%s\"", flag, lo, hi, s);
    return -1;
}

static void human(double b, char *out, size_t n) {
    const char *u[] = {"B", "KB", "MB", "GB", "TB", "PB"};
    int i = 0;
    while (b >= 1000 && i < 5) { b /= 1000; i++; }
    snprintf(out, n, "%.2f %s", b, u[i]);
}

static const char *zero_name(const PlanOpts *o) {
    static char b[48];
    snprintf(b, sizeof b, "ZeRO-%d%s", o->zero, o->offload ? " + offload" : "");
    return b;
}

// one layout: its state bytes for N base parameters (a pipeline stage holds 1/pp of them), and
// the largest N that fits in mem; with a shape (cfg), that shape's activations on the rank too
static void row(double N, int E, int G, int tp, int ep, int pp, double mem, const PlanOpts *o, const Config *shape) {
    int dp = G / (tp * pp), edp = dp / ep;
    double nonexp = 2.0 / 3 * N / (tp * pp), exp_ = (double)E / 3 * N / (tp * ep * pp);
    double bytes = memplan_state_formula(nonexp, exp_, dp, edp, o->wbytes, o->zero, o->offload), act = 0;
    if (shape && shape->model.n_head % tp == 0 && (shape->model.num_experts % ep == 0)) {
        MemPlan m;
        memplan_worst(&m, shape, tp, ep, pp, dp, o->gpu);
        act = m.act;
    }
    double per_base = bytes / N, largest = (mem - act) / per_base;
    char b[32], a[32];
    human(bytes, b, sizeof b);
    human(act, a, sizeof a);
    if (pp > 1) printf("  pp %-3d", pp);
    printf("  tp %-3d ep %-4d dp %-5d edp %-5d %14.0f bytes (%s)  %-4s  largest base model %.3g params "
           "(M2 bound %.3g)", tp, ep, dp, edp, bytes, b, bytes + act <= mem ? "fits" : "NO", largest,
           (double)tp * pp / (2 * o->wbytes) * mem);
    if (shape) printf("  + activations %.0f bytes (%s)", act, a);
    printf("\n");
}

// A config of the shape flags (d, L, T, B, heads): a MoE FFN of E experts (top-2) in every other
// block, GPT-2's vocabulary of 50257.
static int shape_config(Config *c, const double *shape, int E, int m, int v, const PlanOpts *o) {
    if (!(shape[0] > 0 && shape[1] > 0 && shape[2] > 0 && shape[3] > 0 && shape[4] > 0)) return 0;
    config_defaults(c);
    c->model.n_embd = (int)shape[0]; c->model.n_layer = (int)shape[1]; c->model.n_positions = c->seq_len = (int)shape[2];
    c->micro_batch = (int)shape[3]; c->model.n_head = (int)shape[4];
    c->model.num_experts = E > 1 ? E : 1;
    c->model.vocab_size = 50257;
    c->grad_accum = m; c->pp_virtual = v;
    c->zero_stage = o->zero; c->offload = o->offload; c->bf16 = o->wbytes == 2; c->device = o->gpu ? DEV_CUDA : DEV_CPU;
    return 1;
}

// One schedule's activations on stage 0 (the fullest) of c run over pp stages.
static void schedule_row(const Config *c, int kind, int pp, int tp, int ep, int dp) {
    Config k = *c;
    k.pp = pp; k.pp_schedule = kind;
    if (kind != PP_INTERLEAVED) k.pp_virtual = 1;
    else if (k.grad_accum % pp || k.model.n_layer % (pp * k.pp_virtual)) {
        printf("  activations on stage 0, interleaved: needs micro-batches a multiple of pp and blocks of pp x v\n");
        return;
    }
    Topology t;
    MemPlan m;
    memplan_topology(&t, tp, ep, pp, dp, 0);
    memplan_of(&m, &k, &t, k.device == DEV_CUDA);
    const char *name[3] = {"gpipe", "1f1b", "interleaved"};
    char b[32];
    human(m.act, b, sizeof b);
    printf("  activations on stage 0, %-11s %3d micro-batch x chunk views of %.0f bytes: %.0f bytes (%s)\n", name[kind],
           m.views, m.act_per_mb / (kind == PP_INTERLEAVED ? k.pp_virtual : 1), m.act, b);
}

// The pipeline: each schedule's ideal bubble for m micro-batches and, given a shape, the
// activations stage 0 holds under each (model/memplan.h: every buffer ted train allocates).
static void pipeline_rows(int pp, int m, int v, const Config *shape, int tp, int ep, int dp) {
    printf("pipeline pp %d, m %d micro-batches: ideal bubble gpipe %.3f, 1f1b %.3f, interleaved (v %d) %.3f\n", pp, m,
           sched_ideal_bubble(PP_GPIPE, pp, 1, m), sched_ideal_bubble(PP_1F1B, pp, 1, m), v,
           sched_ideal_bubble(PP_INTERLEAVED, pp, v, m));
    if (!shape) return;
    for (int k = PP_GPIPE; k <= PP_INTERLEAVED; k++) schedule_row(shape, k, pp, tp, ep, dp);
}

// A layout of a config: its model state (exact tensors, ZeRO stage) and activations, with
// activation checkpointing as the config has it and the other way.
static void config_row(const Config *c, int tp, int ep, int pp, int dp, double mem) {
    int gpu = c->device == DEV_CUDA;
    MemPlan m, o;
    Config k = *c;
    k.activation_checkpointing = !c->activation_checkpointing;
    k.cac = 0;
    memplan_worst(&m, c, tp, ep, pp, dp, gpu);
    memplan_worst(&o, &k, tp, ep, pp, dp, gpu);
    if (pp > 1) printf("  pp %-3d", pp);
    printf("  tp %-3d ep %-4d dp %-5d edp %-5d %14.0f bytes  %-4s  (params %.0f, grads %.0f, optimizer %.0f", tp, ep, dp,
           dp / ep, m.state, m.total <= mem ? "fits" : "NO", m.params, m.grads, m.optimizer);
    if (m.host_optimizer > 0) printf(", on the host %.0f", m.host_optimizer);
    printf("); activations %.0f bytes (per micro-batch %.0f, %d views, shared %.0f; checkpointing %s: %.0f)\n", m.act,
           m.act_per_mb, m.views, m.act_shared, k.activation_checkpointing ? "on" : "off", o.act);
}

// A ted train config's own model: its exact non-expert and expert parameter counts.
static void config_rows(const Config *c, int g, int T, int P, int pp, double mem) {
    const ModelConfig *m = &c->model;
    double f = cfg_ffn(m), exp_all = (double)model_expert_params(m);
    double nonexp = (double)model_num_params(m) - exp_all;
    printf("config model: %.4g params (%.4g non-expert, %.4g in experts), %d experts; %d GPUs of %.3g bytes; %s, "
           "activation checkpointing %s, micro-batch %d\n", nonexp + exp_all, nonexp, exp_all, m->num_experts, g, mem,
           zero_name(&(PlanOpts){c->zero_stage, c->offload, 0, c->device == DEV_CUDA}), c->activation_checkpointing ? "on" : "off", c->micro_batch);
    for (int tp = 1; tp <= g; tp++) {   // a pipeline stage holds 1/pp of the model
        if (g % (tp * pp) || (T && tp != T) || m->n_head % tp || (int)f % tp) continue;
        for (int ep = 1; ep <= m->num_experts; ep++) {
            if (m->num_experts % ep || (g / (tp * pp)) % ep || (P && ep != P)) continue;
            config_row(c, tp, ep, pp, g / (tp * pp), mem);
        }
    }
}

// The attention probabilities a config's run stores per micro-batch (fp32, every layer, no activation
// checkpointing) on a rank with n_head/tp heads: dense B·H·T² floats per layer (on a GPU none: flash
// attention keeps B·H·T), a sparse layout its present blocks (B·nnz·block² floats), counted from the
// layouts themselves.
static void attention_rows(const Config *c, int tp) {
    const ModelConfig *m = &c->model;
    int T = cfg_seq_len(c), B = c->micro_batch, H = m->n_head / tp;
    double dense = 4.0 * B * H * T * (double)T * m->n_layer, sparse = 0;
    char b[32], s[32];
    human(dense, b, sizeof b);
    if (c->sparse.mode == SPARSE_DENSE && c->device == DEV_CUDA) {   // flash attention: B·H·T floats per layer
        double lse = 4.0 * B * H * T * m->n_layer;
        char l[32];
        human(lse, l, sizeof l);
        printf("attention (tp %d, micro-batch %d, T %d): dense, flash on the GPU: no probabilities kept (%.0f bytes "
               "(%s) on the CPU), the log-sum-exp, %.0f bytes (%s) over %d layers\n", tp, B, T, dense, b, lse, l, m->n_layer);
        return;
    }
    if (c->sparse.mode == SPARSE_DENSE) {
        printf("attention (tp %d, micro-batch %d, T %d): dense, %.0f bytes (%s) of probabilities over %d layers\n", tp, B,
               T, dense, b, m->n_layer);
        return;
    }
    double chunk = 0;   // recompute: none kept, but the backward's chunk of recomputed strips
    for (int l = 0; l < m->n_layer; l++) {
        SparseLayout L;
        sparse_layout_build(&L, &c->sparse, c->seed, l, 0, H, T);
        sparse += 4.0 * B * L.nnz * L.block * L.block;
        double k = 4.0 * sparse_attention_recompute_floats(&L, B);
        chunk = k > chunk ? k : chunk;
        sparse_layout_free(&L);
    }
    human(sparse, s, sizeof s);
    if (c->sparse.recompute) {
        char k[32];
        human(chunk, k, sizeof k);
        printf("attention (tp %d, micro-batch %d, T %d): %s with recompute: no probabilities kept (%.0f bytes (%s) "
               "if stored, dense %s); the backward recomputes them in chunks of %.0f bytes (%s)\n", tp, B, T,
               sparse_mode_name(c->sparse.mode), sparse, s, b, chunk, k);
        return;
    }
    printf("attention (tp %d, micro-batch %d, T %d): %s, %.0f bytes (%s) of probabilities over %d layers, "
           "%.1f %% of dense's %.0f (%s)\n", tp, B, T, sparse_mode_name(c->sparse.mode), sparse, s, m->n_layer,
           100 * sparse / dense, dense, b);
}

static void usage(void) {
    printf("usage: ted plan --base-params N --experts E --gpus G [--tp T] [--ep P] [--gpu-mem BYTES]\n"
           "                [--precision bf16|fp32] [--zero-stage 0|1|2] [--offload] [--device cpu|cuda]\n"
           "                [--hidden D --layers L --seq-len T --micro-batch B --heads A]\n"
           "                [--pp P [--micro-batches M] [--virtual V]]\n"
           "       ted plan --config FILE --gpus G [...]   (the exact tensors and activations of a ted train config)\n"
           "  Numbers take suffixes K, M, B (or G), T: --base-params 6.7B --gpu-mem 80GB.\n"
           "  Model-state bytes per GPU of a MoE model (a MoE FFN of E experts in every other block of\n"
           "  an N-parameter base model) under TED with ZeRO stage 0, 1 (default) or 2, the optimizer state\n"
           "  on the host with --offload (docs/design.md §5, M1), and the largest base model that fits in\n"
           "  BYTES (default 80e9), and that N's limit as G grows (the M2 bound: weights and gradients alone).\n"
           "  Without --tp/--ep, every layout that divides. Given the shape (--hidden\n"
           "  ... --heads; top-2 routing, GPT-2's vocabulary), each layout's activations too: every buffer\n"
           "  ted train would allocate on the rank.\n"
           "  With --pp each stage holds 1/P of the model; the ideal bubble of each schedule for M\n"
           "  micro-batches (default 8; interleaved with V chunks per stage, default 2) and, given the\n"
           "  shape, the activations stage 0 holds under each schedule. With --config: the config's own\n"
           "  tensors, ZeRO stage, offload, micro-batch, checkpointing (and the other setting's activations)\n"
           "  and sparse layout; --zero-stage, --offload, --precision, --device, --pp and --micro-batches\n"
           "  (its gradient_accumulation_steps) override it.\n"
           "  --device cpu counts a CPU run (offload changes nothing; fp32 masters in place where whole).\n");
}

enum { NOPT = 18 };
static const char *const names[NOPT] = {"--base-params", "--experts", "--gpus", "--tp", "--ep", "--gpu-mem", "--precision",
                                        "--config", "--pp", "--micro-batches", "--virtual", "--hidden", "--layers",
                                        "--seq-len", "--micro-batch", "--heads", "--zero-stage", "--device"};

// The flags into vals (and --offload into *offload, given[] which were given); 0, 1 after --help, or an exit code.
static int parse(int argc, char **argv, const char **vals, int *given, int *offload) {
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) { usage(); return 1; }
        if (!strcmp(argv[i], "--offload")) { *offload = 1; continue; }
        int k = -1;
        for (int j = 0; j < NOPT; j++) if (!strcmp(argv[i], names[j])) k = j;
        if (k < 0) { ted_error("plan: unknown option %s (see ted plan --help)", argv[i]); return TED_EXIT_USAGE; }
        if (i + 1 >= argc) { ted_error("plan: %s needs a value", argv[i]); return TED_EXIT_USAGE; }
        vals[k] = argv[++i];
        given[k] = 1;
    }
    for (int j = vals[7] ? 2 : 0; j < 3; j++)
        if (!vals[j]) { ted_error("plan: %s is required", names[j]); return TED_EXIT_USAGE; }
    return 0;
}

// --config FILE: the config's own model, its settings unless the flags override them.
static int plan_config(const char *path, const int *given, int offload, int G, int T, int P, int pp, const double *pipe,
                       double mem, const PlanOpts *o) {
    Config c;
    config_defaults(&c);
    if (config_load_json(&c, path)) return TED_EXIT_USAGE;
    if (given[6]) c.bf16 = o->wbytes == 2, c.fp16 = 0;
    if (given[16]) c.zero_stage = o->zero;
    if (offload) c.offload = 1;
    if (given[17]) c.device = o->gpu ? DEV_CUDA : DEV_CPU;
    if (!given[8]) pp = c.pp;   // the config's own pipeline unless --pp says otherwise
    c.pp = pp;
    if (given[9]) c.grad_accum = (int)pipe[1];   // the micro-batches of a step
    if (config_validate(&c)) return TED_EXIT_USAGE;
    if (G % pp) { ted_error("plan: --pp %d does not divide --gpus %d", pp, G); return TED_EXIT_USAGE; }
    config_rows(&c, G, T, P, pp, mem);
    if (c.model.n_head % (T ? T : 1) == 0) attention_rows(&c, T ? T : 1);
    if (pp > 1) {
        c.pp_virtual = (int)pipe[2]; c.pp_nlayers = 0;
        pipeline_rows(pp, c.grad_accum, c.pp_virtual, &c, T ? T : 1, P ? P : 1, G / (pp * (T ? T : 1)));
    }
    return 0;
}

// The paper's form: N base parameters, E experts, every layout of G GPUs.
static int plan_base(double N, int e, int g, int T, int P, int pp, const double *pipe, const Config *shape, double mem,
                     const PlanOpts *o) {
    printf("base model %.3g params, %d experts (every other block): NP_nonexp %.3g, NP_exp %.3g; %d GPUs of %.3g bytes; %s\n",
           N, e, 2.0 / 3 * N, e / 3.0 * N, g, mem, zero_name(o));
    printf("  largest base model: the N whose model state fits a GPU in this layout (M1); M2 bound: its limit as the\n"
           "  GPUs grow, the optimizer state spread over them and the experts over E ranks: the weights and\n"
           "  gradients alone: tp x pp x memory / (2 x bytes per weight) (docs/design.md section 5)\n");
    int shown = 0;
    for (int tp = 1; tp <= g; tp++) {
        if (g % ((long)tp * pp) || (T && tp != T)) continue;
        for (int ep = 1; ep <= e; ep++) {
            if (e % ep || (g / (tp * pp)) % ep || (P && ep != P)) continue;
            row(N, e, g, tp, ep, pp, mem, o, shape);
            shown++;
        }
    }
    if (!shown) {
        ted_error("plan: no layout: pp x tp must divide --gpus, and --ep divide both --experts and gpus/(pp x tp)");
        return TED_EXIT_USAGE;
    }
    int tp = T ? T : 1, ep = P ? P : 1;
    if (pp > 1) pipeline_rows(pp, (int)pipe[1], (int)pipe[2], shape, tp, ep, g / (pp * tp));
    return 0;
}

int cmd_plan(int argc, char **argv) {
    const char *vals[NOPT] = {NULL, NULL, NULL, NULL, NULL, "80e9", "bf16", NULL, "1", "8", "2", "0", "0", "0", "0", "0", "1",
                              "cuda"};
    int given[NOPT] = {0}, offload = 0, rc = parse(argc, argv, vals, given, &offload);
    if (rc) return rc == 1 ? 0 : rc;
    double N = 0, E = 0, G, T = 0, P = 0, mem, zero;
    if ((vals[0] && num("--base-params", vals[0], 1, &N)) || (vals[1] && count("--experts", vals[1], 1, 65536, &E)) ||
        count("--gpus", vals[2], 1, 1e6, &G) || (vals[3] && count("--tp", vals[3], 1, 1e6, &T)) ||
        (vals[4] && count("--ep", vals[4], 1, 1e6, &P)) || num("--gpu-mem", vals[5], 1, &mem) ||
        num("--zero-stage", vals[16], 0, &zero))
        return TED_EXIT_USAGE;
    if (strcmp(vals[16], "0") && strcmp(vals[16], "1") && strcmp(vals[16], "2")) {
        ted_error("plan: --zero-stage must be 0, 1 or 2, got \"%s\"", vals[16]);
        return TED_EXIT_USAGE;
    }
    double pipe[3], shape[5];
    const double pipe_max[3] = {1e6, 1e6, 1024};   // pp, micro-batches, virtual stages
    for (int j = 0; j < 3; j++) if (count(names[8 + j], vals[8 + j], 1, pipe_max[j], &pipe[j])) return TED_EXIT_USAGE;
    for (int j = 0; j < 5; j++) if (count(names[11 + j], vals[11 + j], 0, INT_MAX, &shape[j])) return TED_EXIT_USAGE;
    int wbytes = !strcmp(vals[6], "fp32") ? 4 : !strcmp(vals[6], "bf16") || !strcmp(vals[6], "fp16") ? 2 : 0;
    if (!wbytes) { ted_error("plan: --precision must be bf16, fp16 or fp32, got \"%s\"", vals[6]); return TED_EXIT_USAGE; }
    if (strcmp(vals[17], "cpu") && strcmp(vals[17], "cuda")) {
        ted_error("plan: --device must be cpu or cuda, got \"%s\"", vals[17]);
        return TED_EXIT_USAGE;
    }
    PlanOpts o = {(int)zero, offload, wbytes, !strcmp(vals[17], "cuda")};
    if (vals[7]) return plan_config(vals[7], given, offload, (int)G, (int)T, (int)P, (int)pipe[0], pipe, mem, &o);
    Config sc;
    int has_shape = shape_config(&sc, shape, (int)E, (int)pipe[1], (int)pipe[2], &o);
    Config chk = sc;   // the shape flags: ted train's bounds (the virtual stages are the interleaved rows')
    chk.pp_virtual = 1;
    if (has_shape && config_validate(&chk)) return TED_EXIT_USAGE;
    return plan_base(N, (int)E, (int)G, (int)T, (int)P, (int)pipe[0], pipe, has_shape ? &sc : NULL, mem, &o);
}
