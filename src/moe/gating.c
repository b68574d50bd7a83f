// gating.c — the router in an MoE layer: logits, jitter and noise, backward, loads, bias
// balancing and the per-block log (see gating.h).
#include "moe/gating.h"
#include "core/alloc.h"
#include "core/rng.h"
#include "nn/gemm.h"
#include "nn/linear.h"
#include "nn/ops.h"
#include <math.h>
#include <stdio.h>
#include <string.h>

void gating_init(MoeLayer *L, int nmoe, const int *layer, const int *bias, long N, Group *dp, Group *pp) {
    RouteLog *r = ted_alloc(sizeof(RouteLog), MEM_TEMP);
    memset(r, 0, sizeof *r);
    L->log = r;
    r->dp = dp; r->pp = pp;
    r->nmoe = nmoe;
    int n = nmoe > 0 ? nmoe : 1, E = L->E, d = L->d;
    r->layer = ted_alloc(sizeof(int) * n, MEM_TEMP);
    r->bias = ted_alloc(sizeof(int) * n, MEM_TEMP);
    for (int i = 0; i < nmoe; i++) { r->layer[i] = layer[i]; r->bias[i] = bias[i]; }
    r->kept = ted_alloc(sizeof(double) * n * (2 * E + 2), MEM_TEMP);   // kept | load | drops: one reduction
    r->load = r->kept + n * E;
    r->drops = r->load + n * E;
    for (int l = 0; E > 1 && l < L->m->n_layer; l++) r->nall += cfg_is_moe(L->m, l);
    int na = r->nall > 0 ? r->nall : 1;
    r->all_layer = ted_alloc(sizeof(int) * na, MEM_TEMP);
    r->at = ted_alloc(sizeof(int) * n, MEM_TEMP);
    for (int l = 0, j = 0; E > 1 && l < L->m->n_layer; l++) {
        if (!cfg_is_moe(L->m, l)) continue;
        for (int i = 0; i < nmoe; i++) if (r->layer[i] == l) r->at[i] = j;
        r->all_layer[j++] = l;
    }
    r->out = ted_alloc(sizeof(RouteBlockLog) * na, MEM_TEMP);
    r->acc_step = -1;
    if (!nmoe) return;
    if (ted_device == DEV_CUDA) {   // a forward's statistics wait on the device for the plan's readback
        L->summary = ted_alloc_buf(sizeof(double) * ROUTER_SUMMARY(E), MEM_ACTIVATIONS);
        L->summary_host = ted_alloc(sizeof(double) * ROUTER_SUMMARY(E), MEM_ACTIVATIONS);
    }
    if (L->m->router == ROUTER_SWITCH && L->m->jitter_eps > 0) {
        r->xr = ted_alloc_buf(sizeof(float) * N * d, MEM_ACTIVATIONS);
        r->dxr = ted_alloc_buf(sizeof(float) * N * d, MEM_ACTIVATIONS);
    }
    if (L->m->router == ROUTER_NOISY_TOPK) {
        r->noise = ted_alloc(sizeof(float *) * nmoe, MEM_TEMP);
        r->hval = ted_alloc(sizeof(float *) * nmoe, MEM_TEMP);
        for (int i = 0; i < nmoe; i++) {
            r->noise[i] = ted_alloc_buf(sizeof(float) * N * E, MEM_ACTIVATIONS);
            r->hval[i] = ted_alloc_buf(sizeof(float) * N * E, MEM_ACTIVATIONS);
        }
        r->dnoise = ted_alloc_buf(sizeof(float) * N * E, MEM_ACTIVATIONS);
    }
}

double gating_act_bytes(const ModelConfig *m, int nmoe, long N) {
    if (!nmoe) return 0;
    double f = sizeof(float), b = 0;
    if (m->router == ROUTER_SWITCH && m->jitter_eps > 0) b += 2 * f * N * m->n_embd;
    if (m->router == ROUTER_NOISY_TOPK) b += (2.0 * nmoe + 1) * f * N * (m->num_experts > 1 ? m->num_experts : 1);
    if (ted_device == DEV_CUDA) b += 2.0 * sizeof(double) * ROUTER_SUMMARY(m->num_experts > 1 ? m->num_experts : 1);
    return b;
}

void gating_free(MoeLayer *L) {
    RouteLog *r = L->log;
    if (!r) return;
    if (r->noise)
        for (int i = 0; i < r->nmoe; i++) { ted_free_buf(r->noise[i]); ted_free_buf(r->hval[i]); }
    ted_free(r->noise); ted_free(r->hval); ted_free_buf(r->dnoise);
    ted_free_buf(r->xr); ted_free_buf(r->dxr);
    ted_free_buf(L->summary); ted_free(L->summary_host);
    L->summary = L->summary_host = NULL;
    ted_free(r->layer); ted_free(r->bias); ted_free(r->kept); ted_free(r->out); ted_free(r->all_layer); ted_free(r->at);
    ted_free(r);
    L->log = NULL;
}

static int moe_index(const MoeLayer *L, int l) {
    for (int i = 0; i < L->log->nmoe; i++) if (L->log->layer[i] == l) return i;
    return -1;
}

// Switch's jitter: out = x ⊙ u (mul_into: out ⊙= u), u ~ U(1−ε, 1+ε) per (token, channel) of the router input
static void jitter(const MoeLayer *L, float *out, const float *x, long N, int mul_into) {
    int d = L->d;
    #pragma omp parallel for schedule(static)
    for (long t = 0; t < N; t++)
        for (int i = 0; i < d; i++) {
            float u = router_jitter(&L->rcfg, L->m->jitter_eps, t, i);
            out[t * d + i] = (mul_into ? out[t * d + i] : x[t * d + i]) * u;
        }
}

static int jitter_on(const MoeLayer *L) { return L->m->router == ROUTER_SWITCH && L->m->jitter_eps > 0 && L->rng_step >= 0; }

// The router configuration of block w->layer for this pass
static void set_cfg(MoeLayer *L, const MoeWeights *w) {
    RouterCfg *c = &L->rcfg;
    int i = moe_index(L, w->layer);
    c->train = L->rng_step >= 0;
    c->step = L->rng_step; c->seq0 = L->seq0; c->layer = w->layer; c->T = L->T; c->seed = L->seed;
    c->bias = w->bias >= 0 ? L->reg->p[w->bias].w : NULL;
    c->noise = L->log->noise ? L->log->noise[i] : NULL;
    c->hval = L->log->hval ? L->log->hval[i] : NULL;
    c->dnoise = L->log->dnoise;
    c->summary = L->summary; c->summary_host = L->summary_host;
}

// The step's sums of block `layer`'s loads (a new step starts them again): its index among them
static int loads_of(MoeLayer *L, int layer) {
    RouteLog *r = L->log;
    if (r->acc_step != L->rng_step) {
        memset(r->kept, 0, sizeof(double) * r->nmoe * (2 * L->E + 2));
        r->acc_step = L->rng_step;
    }
    return moe_index(L, layer);
}

// This forward's loads into the step's sums: per expert the kept rows and the choices before
// dropping (from the router's counts kept, fcount [G,E], the groups in order), the drops, the choices.
static void accumulate(MoeLayer *L, const MoeWeights *w, const MoeActs *x, long N, const RouterStats *st0,
                       const RouterStats *st1) {
    RouteLog *r = L->log;
    int i = loads_of(L, w->layer), E = L->E, k = L->rcfg.k, G = router_ngroups(N, L->rcfg.group_tokens);
    for (long g = 0; g < G; g++) {
        long t0 = g * L->rcfg.group_tokens, S = N - t0 < L->rcfg.group_tokens ? N - t0 : L->rcfg.group_tokens;
        for (int e = 0; e < E; e++) {
            r->kept[i * E + e] += x->kept[g * E + e];
            r->load[i * E + e] += (double)x->fcount[g * E + e] * k * S;
        }
    }
    r->drops[2 * i] += (double)(st1->dropped - st0->dropped);
    r->drops[2 * i + 1] += (double)(st1->choices - st0->choices);
}

// out[N,E] = in·router: gpt2's router is [d, E], llama's (Mixtral's gate) [E, d] as nn.Linear.
// In fp32 under the CPU's bf16 compute too (the router's logits stay fp32, nn/gemm.h); from ln2's
// bf16 copy alone with rows16 (a --bf16 GPU run: the same bf16 operand its GEMM read before).
static void gate_forward(const MoeLayer *L, float *out, const float *in, const float *w, long N) {
    int was = gemm_fp32_only(1);
    if (L->llama) linear_forward(out, L->E, in, L->d, w, N, L->d, L->E, 0);
    else if (L->rows16) matmul_forward_x16(out, in, w, N, L->d, L->E);
    else matmul_forward(out, in, w, NULL, N, L->d, L->E, 0);
    gemm_fp32_only(was);
}

// dinp[N,d] (= or += by acc) and the router's gradient gw from dout[N,E]
static void gate_backward(const MoeLayer *L, float *dinp, const float *w, float *gw, const float *dout,
                          const float *in, long N, int acc) {
    int was = gemm_fp32_only(1);
    if (L->llama) linear_backward(dinp, L->d, gw, dout, L->E, in, L->d, w, N, L->d, L->E, acc);
    else if (L->rows16) matmul_backward_x16(dinp, gw, dout, in, w, N, L->d, L->E, acc);
    else matmul_backward(dinp, gw, NULL, dout, in, w, N, L->d, L->E, acc);
    gemm_fp32_only(was);
}

void gating_forward(MoeLayer *L, const MoeWeights *w, MoeActs *x, const float *ln2, long N, int recompute) {
    RouterStats scratch = {0}, *st = recompute ? &scratch : L->stats, before = *st;
    set_cfg(L, w);
    const float *in = ln2;
    if (jitter_on(L)) { jitter(L, L->log->xr, ln2, N, 0); in = L->log->xr; }
    gate_forward(L, x->probs, in, w->router, N);      // router logits, fp32
    if (w->noise) gate_forward(L, L->rcfg.noise, ln2, w->noise, N);
    router_forward(x->probs, x->lse, x->choice, x->gate, x->slot, x->fcount, x->kept, N, &L->rcfg, st);
    if (!recompute && L->rng_step >= 0 && ted_device == DEV_CPU) accumulate(L, w, x, N, &before, st);
}

void gating_summary(MoeLayer *L, const MoeWeights *w, long N, int recompute) {
    if (ted_device != DEV_CUDA || recompute) return;
    const double *h = L->summary_host;
    int E = L->E;
    L->stats->aux_sum += h[RS_AUX]; L->stats->z_sum += h[RS_Z]; L->stats->dropped += (long)h[RS_DROPPED];
    if (L->rng_step < 0) return;
    RouteLog *r = L->log;
    int i = loads_of(L, w->layer);
    for (int e = 0; e < E; e++) { r->kept[i * E + e] += h[RS_KEPT + e]; r->load[i * E + e] += h[RS_LOAD(E) + e]; }
    r->drops[2 * i] += h[RS_DROPPED];
    r->drops[2 * i + 1] += (double)N * L->rcfg.k;
}

void gating_backward(MoeLayer *L, const MoeWeights *w, const MoeActs *x, const float *ln2, float *dln, long N,
                     float lm_scale, float aux_scale, float z_scale) {
    int d = L->d;
    set_cfg(L, w);
    L->rcfg.generate = 0;
    L->rcfg.cv_scale = lm_scale * L->rcfg.group_tokens;   // 1/(groups of the step), times the loss scale
    router_backward(L->dlogits_r, L->dgate, x->probs, x->lse, x->choice, x->fcount, N, &L->rcfg,
                    L->rcfg.kind == ROUTER_EXPERT_CHOICE ? 0 : aux_scale, z_scale);
    if (jitter_on(L)) {   // logits = (x ⊙ u)·W: dW += (x ⊙ u)ᵀ·dlogits, dx += (dlogits·Wᵀ) ⊙ u
        RouteLog *r = L->log;
        jitter(L, r->xr, ln2, N, 0);
        gate_backward(L, r->dxr, w->router, w->grouter, L->dlogits_r, r->xr, N, 0);
        jitter(L, r->dxr, NULL, N, 1);
        residual_forward(dln, dln, r->dxr, N * d);
    } else
        gate_backward(L, dln, w->router, w->grouter, L->dlogits_r, ln2, N, 1);
    if (w->noise) gate_backward(L, dln, w->noise, w->gnoise, L->rcfg.dnoise, ln2, N, 1);
}

// Writes b[E] into the bias tensor: the weights (16-bit storage: rounded) and this rank's
// shard of the fp32 master, so the optimizer's gather keeps it.
static void set_bias(MoeLayer *L, Zero *z, int idx, const float *b) {
    Param *p = &L->reg->p[idx];
    if (L->reg->half) convert_from_f32(p->w16, b, p->numel, L->reg->half);
    else memcpy(p->w, b, sizeof(float) * p->numel);
    const Shard *s = &z->sh[idx];
    for (long j = 0; j < s->len; j++) z->master[s->base + j] = b[s->off + j];
}

static double bias_step(MoeLayer *L, Zero *z, int i, const double *load) {
    int E = L->E, idx = L->log->bias[i];
    float b[E];
    const Param *p = &L->reg->p[idx];
    zero_params_wait(z, idx, idx + 1);   // overlap_comm: its gather may still be in flight
    if (L->reg->half) convert_to_f32(b, p->w16, E, L->reg->half);
    else memcpy(b, p->w, sizeof b);
    double mean = 0, norm = 0;
    for (int e = 0; e < E; e++) mean += load[e] / E;
    for (int e = 0; e < E; e++) {
        b[e] += L->m->bias_update_rate * (float)((mean > load[e]) - (mean < load[e]));
        norm += (double)b[e] * b[e];
    }
    set_bias(L, z, idx, b);
    return sqrt(norm);
}

_Static_assert(sizeof(RouteBlockLog) == 3 * sizeof(double), "RouteBlockLog travels as 3 doubles");

void gating_step_loads(MoeLayer *L) {
    RouteLog *r = L->log;
    int E = L->E, n = r->nmoe;
    if (!r->nall) return;
    if (r->acc_step < 0) memset(r->kept, 0, sizeof(double) * (n ? n : 1) * (2 * E + 2));   // no training forward since the last step
    if (n) comm_allreduce(r->dp, r->kept, (long)n * (2 * E + 2), DT_F64);
}

void gating_step_end(MoeLayer *L, Zero *z) {
    RouteLog *r = L->log;
    int E = L->E, n = r->nmoe;
    L->rng_step = -1;
    if (!r->nall) return;
    memset(r->out, 0, sizeof(RouteBlockLog) * r->nall);
    for (int i = 0; i < n; i++) {
        RouteBlockLog *o = &r->out[r->at[i]];
        double mx = 0, mean = 0;
        for (int e = 0; e < E; e++) { mean += r->kept[i * E + e] / E; if (r->kept[i * E + e] > mx) mx = r->kept[i * E + e]; }
        o->max_mean = mean > 0 ? mx / mean : 0;
        o->dropped = r->drops[2 * i + 1] > 0 ? r->drops[2 * i] / r->drops[2 * i + 1] : 0;
        if (r->bias[i] >= 0) o->bias_norm = bias_step(L, z, i, r->load + (long)i * E);
    }
    // the other stages' blocks (zero here, each held by one stage): the sum is every block's log
    comm_allreduce(r->pp, r->out, 3L * r->nall, DT_F64);
    r->acc_step = -1;
}

double gating_worst_max_mean(const MoeLayer *L) {
    double w = 0;
    for (int i = 0; L->log && i < L->log->nall; i++) if (L->log->out[i].max_mean > w) w = L->log->out[i].max_mean;
    return w;
}

void gating_log_json(const MoeLayer *L, char *buf, size_t len) {
    size_t u = (size_t)snprintf(buf, len, "[");
    for (int i = 0; L->log && i < L->log->nall && u < len; i++) {
        const RouteBlockLog *o = &L->log->out[i];
        u += (size_t)snprintf(buf + u, len - u, "%s{\"layer\": %d, \"max_mean\": %.4f, \"dropped\": %.4f, \"bias_norm\": %.6g}",
                              i ? ", " : "", L->log->all_layer[i], o->max_mean, o->dropped, o->bias_norm);
    }
    if (u < len) snprintf(buf + u, len - u, "]");
}
