// plan.c — `ted plan`: the TED memory model (design §5).
//   NP_exp = E/3·NP_base, NP_nonexp = 2/3·NP_base (a MoE FFN in every other block);
//   M_gpu ≥ (4 + 12/dp)·NP_nonexp/tp + (4 + 12/edp)·NP_exp/(tp·ep)       (M1)
//   as G grows: NP_base ≤ tp/4 · M_gpu                                    (M2)
#include "cli/plan.h"
#include "config/config.h"
#include "parallel/schedule.h"
#include "nn/sparse_attention.h"
#include "model/model.h"
#include "core/util.h"
#include "perf/perfmodel.h"
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

double plan_state_bytes(double np_nonexp_gpu, double np_exp_gpu, int dp, int edp, int wbytes) {
    return perf_state_bytes(np_nonexp_gpu, np_exp_gpu, dp, edp, wbytes, 1);   // ZeRO-1
}

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
    if (!ok || !(v >= lo)) { ted_error("plan: %s must be a number >= %g (suffixes K M B T, e.g. 6.7B), got \"%s\"", flag, lo, s); return -1; }
    *out = v;
    return 0;
}

static void human(double b, char *out, size_t n) {
    const char *u[] = {"B", "KB", "MB", "GB", "TB", "PB"};
    int i = 0;
    while (b >= 1000 && i < 5) { b /= 1000; i++; }
    snprintf(out, n, "%.2f %s", b, u[i]);
}

// one layout: its state bytes for N base parameters (a pipeline stage holds 1/pp of them), and
// the largest N that fits in mem
static void row(double N, int E, int G, int tp, int ep, int pp, double mem, int wbytes) {
    int dp = G / (tp * pp), edp = dp / ep;
    double nonexp = 2.0 / 3 * N / (tp * pp), exp_ = (double)E / 3 * N / (tp * ep * pp);
    double bytes = plan_state_bytes(nonexp, exp_, dp, edp, wbytes);
    double per_base = bytes / N, largest = mem / per_base;
    char b[32];
    human(bytes, b, sizeof b);
    if (pp > 1) printf("  pp %-3d", pp);
    printf("  tp %-3d ep %-4d dp %-5d edp %-5d %14.0f bytes (%s)  %-4s  largest base model %.3g params "
           "(M2 bound %.3g)\n", tp, ep, dp, edp, bytes, b, bytes <= mem ? "fits" : "NO", largest,
           (double)tp * pp / (2 * wbytes) * mem);
}

// The pipeline: each schedule's ideal bubble for m micro-batches and, given the model's shape,
// the activations stage 0 holds (per block and micro-batch, in 16 bits, T·B·d·(34 + 5·a·T/d) bytes:
// the usual count for a GPT block without recomputation; fp32 doubles it).
static void pipeline_rows(int pp, int m, int v, const double *shape, int wbytes) {
    printf("pipeline pp %d, m %d micro-batches: ideal bubble gpipe %.3f, 1f1b %.3f, interleaved (v %d) %.3f\n", pp, m,
           sched_ideal_bubble(PP_GPIPE, pp, 1, m), sched_ideal_bubble(PP_1F1B, pp, 1, m), v,
           sched_ideal_bubble(PP_INTERLEAVED, pp, v, m));
    double d = shape[0], L = shape[1], T = shape[2], B = shape[3], a = shape[4];
    if (!(d > 0 && L > 0 && T > 0 && B > 0 && a > 0)) return;
    double block = T * B * d * (34 + 5 * a * T / d) * wbytes / 2, per_stage = L / pp;
    double held[3] = {m * per_stage, (m < pp ? m : pp) * per_stage,
                      ((pp - 1) * 2.0 + (v - 1) * pp + 1 < (double)m * v ? (pp - 1) * 2.0 + (v - 1) * pp + 1 : (double)m * v) *
                          per_stage / v};
    const char *name[3] = {"gpipe", "1f1b", "interleaved"};
    for (int k = 0; k < 3; k++) {
        char b[32];
        human(held[k] * block, b, sizeof b);
        printf("  activations on stage 0, %-11s %.1f blocks x micro-batches: %s\n", name[k], held[k], b);
    }
}

// A ted train config's own model: its exact non-expert and expert parameter counts.
static void config_rows(const Config *c, int g, int T, int P, int pp, double mem, int wbytes) {
    const ModelConfig *m = &c->model;
    double d = m->n_embd, f = cfg_ffn(m), exp_all = 0;
    for (int l = 0; l < m->n_layer; l++) if (cfg_is_moe(m, l)) exp_all += (double)m->num_experts * (2 * d * f + f + d);
    double nonexp = (double)model_num_params(m) - exp_all;
    printf("config model: %.4g params (%.4g non-expert, %.4g in experts), %d experts; %d GPUs of %.3g bytes\n",
           nonexp + exp_all, nonexp, exp_all, m->num_experts, g, mem);
    for (int tp = 1; tp <= g; tp++) {   // a pipeline stage holds 1/pp of the model
        if (g % (tp * pp) || (T && tp != T) || m->n_head % tp || (int)f % tp) continue;
        for (int ep = 1; ep <= m->num_experts; ep++) {
            if (m->num_experts % ep || (g / (tp * pp)) % ep || (P && ep != P)) continue;
            int dp = g / (tp * pp), edp = dp / ep;
            double bytes = plan_state_bytes(nonexp / (tp * pp), exp_all / ((double)tp * ep * pp), dp, edp, wbytes);
            if (pp > 1) printf("  pp %-3d", pp);
            printf("  tp %-3d ep %-4d dp %-5d edp %-5d %14.0f bytes  %-4s\n", tp, ep, dp, edp, bytes, bytes <= mem ? "fits" : "NO");
        }
    }
}

// The attention probabilities a config's run stores per micro-batch (fp32, every layer, no activation
// checkpointing) on a rank with n_head/tp heads: dense B·H·T² floats per layer, a sparse layout its
// present blocks (B·nnz·block² floats), counted from the layouts themselves.
static void attention_rows(const Config *c, int tp) {
    const ModelConfig *m = &c->model;
    int T = c->seq_len ? c->seq_len : m->n_positions, B = c->micro_batch, H = m->n_head / tp;
    double dense = 4.0 * B * H * T * (double)T * m->n_layer, sparse = 0;
    char b[32], s[32];
    human(dense, b, sizeof b);
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

int plan_main(int argc, char **argv) {
    enum { NOPT = 16 };
    const char *vals[NOPT] = {NULL, NULL, NULL, NULL, NULL, "80e9", "bf16", NULL, "1", "8", "2", "0", "0", "0", "0", "0"};
    const char *names[NOPT] = {"--base-params", "--experts", "--gpus", "--tp", "--ep", "--gpu-mem", "--precision",
                               "--config", "--pp", "--micro-batches", "--virtual", "--hidden", "--layers", "--seq-len",
                               "--micro-batch", "--heads"};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: ted plan --base-params N --experts E --gpus G [--tp T] [--ep P] [--gpu-mem BYTES]\n"
                   "                [--precision bf16|fp32] [--pp P [--micro-batches M] [--virtual V]\n"
                   "                [--hidden D --layers L --seq-len T --micro-batch B --heads A]]\n"
                   "       ted plan --config FILE --gpus G [...]   (the exact parameter counts of a ted train config)\n"
                   "  Numbers take suffixes K, M, B (or G), T: --base-params 6.7B --gpu-mem 80GB.\n"
                   "  Model-state bytes per GPU of a MoE model (a MoE FFN of E experts in every other block of\n"
                   "  an N-parameter base model) under TED with ZeRO-1 (docs/design.md §5, M1), and the largest base\n"
                   "  model that fits in BYTES (default 80e9). Without --tp/--ep, every layout that divides.\n"
                   "  With --pp each stage holds 1/P of the model; the ideal bubble of each schedule for M\n"
                   "  micro-batches (default 8; interleaved with V chunks per stage, default 2) and, given the\n"
                   "  model's shape, the activations stage 0 holds under each schedule. With --config, also the\n"
                   "  attention probabilities one micro-batch stores: dense, or a sparse layout's present blocks.\n");
            return 0;
        }
        int k = -1;
        for (int j = 0; j < NOPT; j++) if (!strcmp(argv[i], names[j])) k = j;
        if (k < 0) { ted_error("plan: unknown option %s (see ted plan --help)", argv[i]); return TED_EXIT_USAGE; }
        if (i + 1 >= argc) { ted_error("plan: %s needs a value", argv[i]); return TED_EXIT_USAGE; }
        vals[k] = argv[++i];
    }
    for (int j = vals[7] ? 2 : 0; j < 3; j++)
        if (!vals[j]) { ted_error("plan: %s is required", names[j]); return TED_EXIT_USAGE; }
    double N = 0, E = 0, G, T = 0, P = 0, mem;
    if ((vals[0] && num("--base-params", vals[0], 1, &N)) || (vals[1] && num("--experts", vals[1], 1, &E)) || num("--gpus", vals[2], 1, &G) ||
        (vals[3] && num("--tp", vals[3], 1, &T)) || (vals[4] && num("--ep", vals[4], 1, &P)) ||
        num("--gpu-mem", vals[5], 1, &mem))
        return TED_EXIT_USAGE;
    double pipe[3], shape[5];
    for (int j = 0; j < 3; j++) if (num(names[8 + j], vals[8 + j], 1, &pipe[j])) return TED_EXIT_USAGE;
    for (int j = 0; j < 5; j++) if (num(names[11 + j], vals[11 + j], 0, &shape[j])) return TED_EXIT_USAGE;
    int pp = (int)pipe[0];
    int wbytes = !strcmp(vals[6], "fp32") ? 4 : !strcmp(vals[6], "bf16") || !strcmp(vals[6], "fp16") ? 2 : 0;
    if (!wbytes) { ted_error("plan: --precision must be bf16, fp16 or fp32, got \"%s\"", vals[6]); return TED_EXIT_USAGE; }
    if (vals[7]) {
        Config c;
        config_defaults(&c);
        if (config_load_json(&c, vals[7]) || config_validate(&c)) return TED_EXIT_USAGE;
        int precision_given = 0;
        for (int i = 1; i < argc; i++) precision_given |= !strcmp(argv[i], "--precision");
        if (!precision_given) wbytes = c.bf16 || c.fp16 ? 2 : 4;
        int pp_given = 0;
        for (int i = 1; i < argc; i++) pp_given |= !strcmp(argv[i], "--pp");
        if (!pp_given) pp = c.pp;   // the config's own pipeline unless --pp says otherwise
        if ((int)G % pp) { ted_error("plan: --pp %d does not divide --gpus %d", pp, (int)G); return TED_EXIT_USAGE; }
        config_rows(&c, (int)G, (int)T, (int)P, pp, mem, wbytes);
        if (c.model.n_head % (T ? (int)T : 1) == 0) attention_rows(&c, T ? (int)T : 1);
        double own[5] = {c.model.n_embd, c.model.n_layer, c.seq_len > 0 ? c.seq_len : c.model.n_positions, c.micro_batch,
                         c.model.n_head};
        if (pp > 1) pipeline_rows(pp, (int)pipe[1], (int)pipe[2], own, wbytes);
        return 0;
    }
    int e = (int)E, g = (int)G;
    printf("base model %.3g params, %d experts (every other block): NP_nonexp %.3g, NP_exp %.3g; %d GPUs of %.3g bytes\n",
           N, e, 2.0 / 3 * N, E / 3 * N, g, mem);
    int shown = 0;
    for (int tp = 1; tp <= g; tp++) {
        if (g % ((long)tp * pp) || (T && tp != (int)T)) continue;
        for (int ep = 1; ep <= e; ep++) {
            if (e % ep || (g / (tp * pp)) % ep || (P && ep != (int)P)) continue;
            row(N, e, g, tp, ep, pp, mem, wbytes);
            shown++;
        }
    }
    if (!shown) {
        ted_error("plan: no layout: pp x tp must divide --gpus, and --ep divide both --experts and gpus/(pp x tp)");
        return TED_EXIT_USAGE;
    }
    if (pp > 1) pipeline_rows(pp, (int)pipe[1], (int)pipe[2], shape, wbytes);
    return 0;
}
