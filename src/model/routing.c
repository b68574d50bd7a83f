// routing.c — the router in an MoE block: logits, jitter and noise, backward, loads, bias
// balancing and the per-block log (see routing.h).
#include "model/routing.h"
#include "core/alloc.h"
#include "parallel/comm.h"
#include "nn/ops.h"
#include "nn/linear.h"
#include "nn/gemm.h"
#include "core/rng.h"
#include <math.h>
#include <stdio.h>
#include <string.h>

#define PW(i) (M->reg.p[i].w)
#define PG(i) (M->reg.p[i].g)

void routing_init(Model *M) {
    RouteLog *r = ted_alloc(sizeof(RouteLog), MEM_TEMP);
    memset(r, 0, sizeof *r);
    M->rlog = r;
    for (int l = 0; l < M->L; l++) r->nmoe += M->bp[l].moe;
    int n = r->nmoe > 0 ? r->nmoe : 1, E = M->E, d = M->d;
    long N = (long)M->Bmax * M->T;
    r->layer = ted_alloc(sizeof(int) * n, MEM_TEMP);
    for (int l = 0, i = 0; l < M->L; l++) if (M->bp[l].moe) r->layer[i++] = l;
    r->kept = ted_alloc(sizeof(double) * n * (2 * E + 2), MEM_TEMP);   // kept | load | drops: one reduction
    r->load = r->kept + n * E;
    r->drops = r->load + n * E;
    for (int l = 0; M->E > 1 && l < M->L; l++) r->nall += cfg_is_moe(&M->m, l);
    int na = r->nall > 0 ? r->nall : 1;
    r->all_layer = ted_alloc(sizeof(int) * na, MEM_TEMP);
    r->at = ted_alloc(sizeof(int) * n, MEM_TEMP);
    for (int l = 0, j = 0; M->E > 1 && l < M->L; l++) {
        if (!cfg_is_moe(&M->m, l)) continue;
        for (int i = 0; i < r->nmoe; i++) if (r->layer[i] == l) r->at[i] = j;
        r->all_layer[j++] = l;
    }
    r->out = ted_alloc(sizeof(RouteBlockLog) * na, MEM_TEMP);
    r->acc_step = -1;
    if (!r->nmoe) return;
    if (M->m.router == ROUTER_SWITCH && M->m.jitter_eps > 0) {
        r->xr = ted_alloc_buf(sizeof(float) * N * d, MEM_ACTIVATIONS);
        r->dxr = ted_alloc_buf(sizeof(float) * N * d, MEM_ACTIVATIONS);
    }
    if (M->m.router == ROUTER_NOISY_TOPK) {
        r->noise = ted_alloc(sizeof(float *) * r->nmoe, MEM_TEMP);
        r->hval = ted_alloc(sizeof(float *) * r->nmoe, MEM_TEMP);
        for (int i = 0; i < r->nmoe; i++) {
            r->noise[i] = ted_alloc_buf(sizeof(float) * N * E, MEM_ACTIVATIONS);
            r->hval[i] = ted_alloc_buf(sizeof(float) * N * E, MEM_ACTIVATIONS);
        }
        r->dnoise = ted_alloc_buf(sizeof(float) * N * E, MEM_ACTIVATIONS);
    }
}

double routing_act_bytes(const Model *M) {
    int nmoe = 0;
    for (int l = 0; l < M->L; l++) nmoe += M->bp[l].moe;
    if (!nmoe) return 0;
    double N = (double)M->Bmax * M->T, f = sizeof(float), b = 0;
    if (M->m.router == ROUTER_SWITCH && M->m.jitter_eps > 0) b += 2 * f * N * M->d;
    if (M->m.router == ROUTER_NOISY_TOPK) b += (2.0 * nmoe + 1) * f * N * M->E;
    return b;
}

void routing_free(Model *M) {
    RouteLog *r = M->rlog;
    if (!r) return;
    if (r->noise)
        for (int i = 0; i < r->nmoe; i++) { ted_free_buf(r->noise[i]); ted_free_buf(r->hval[i]); }
    ted_free(r->noise); ted_free(r->hval); ted_free_buf(r->dnoise);
    ted_free_buf(r->xr); ted_free_buf(r->dxr);
    ted_free(r->layer); ted_free(r->kept); ted_free(r->out); ted_free(r->all_layer); ted_free(r->at);
    ted_free(r);
    M->rlog = NULL;
}

static int moe_index(const Model *M, int l) {
    for (int i = 0; i < M->rlog->nmoe; i++) if (M->rlog->layer[i] == l) return i;
    return -1;
}

// Switch's jitter: out = x ⊙ u (mul_into: out ⊙= u), u ~ U(1−ε, 1+ε) per (token, channel) of the router input
static void jitter(const Model *M, float *out, const float *x, long N, int mul_into) {
    int d = M->d;
    #pragma omp parallel for schedule(static)
    for (long t = 0; t < N; t++)
        for (int i = 0; i < d; i++) {
            float u = router_jitter(&M->rcfg, M->m.jitter_eps, t, i);
            out[t * d + i] = (mul_into ? out[t * d + i] : x[t * d + i]) * u;
        }
}

static int jitter_on(const Model *M) { return M->m.router == ROUTER_SWITCH && M->m.jitter_eps > 0 && M->rng_step >= 0; }

// The router configuration of block l for this forward
static void set_cfg(Model *M, int l, int generate) {
    RouterCfg *c = &M->rcfg;
    const BlockParams *b = &M->bp[l];
    int i = moe_index(M, l);
    c->train = M->rng_step >= 0;
    c->generate = generate;
    c->step = M->rng_step; c->seq0 = M->seq0; c->layer = l; c->T = M->Tc; c->seed = M->cfg.seed;
    c->bias = b->bias >= 0 ? PW(b->bias) : NULL;
    c->noise = M->rlog->noise ? M->rlog->noise[i] : NULL;
    c->hval = M->rlog->hval ? M->rlog->hval[i] : NULL;
    c->dnoise = M->rlog->dnoise;
}

// This forward's loads into the step's sums (a new step starts them again)
static void accumulate(Model *M, int l, long N, const RouterStats *st0, const RouterStats *st1) {
    RouteLog *r = M->rlog;
    if (r->acc_step != M->rng_step) {
        memset(r->kept, 0, sizeof(double) * r->nmoe * (2 * M->E + 2));
        r->acc_step = M->rng_step;
    }
    int i = moe_index(M, l), E = M->E, k = M->rcfg.k, G = router_ngroups(N, M->rcfg.group_tokens);
    const BlockActs *x = &M->ba[l];
    // on a GPU run the router's counts are device buffers: read through host copies
    int *hk = ted_alloc(sizeof(int) * G * E, MEM_TEMP);
    float *hf = ted_alloc(sizeof(float) * G * E, MEM_TEMP);
    const int *kept = buf_to_host(hk, x->kept, sizeof(int) * G * E);
    const float *fcount = buf_to_host(hf, x->fcount, sizeof(float) * G * E);
    for (long g = 0; g < G; g++) {
        long t0 = g * M->rcfg.group_tokens, S = N - t0 < M->rcfg.group_tokens ? N - t0 : M->rcfg.group_tokens;
        for (int e = 0; e < E; e++) {
            r->kept[i * E + e] += kept[g * E + e];
            r->load[i * E + e] += (double)fcount[g * E + e] * k * S;
        }
    }
    ted_free(hk); ted_free(hf);
    r->drops[2 * i] += (double)(st1->dropped - st0->dropped);
    r->drops[2 * i + 1] += (double)(st1->choices - st0->choices);
}

// out[N,E] = in·router: gpt2's router is [d, E], llama's (Mixtral's gate) [E, d] as nn.Linear.
// In fp32 under bf16 compute too (the router's logits stay fp32).
static void gate_forward(Model *M, float *out, const float *in, int w, long N) {
    int was = gemm_fp32_only(1);
    if (M->llama) linear_forward(out, M->E, in, M->d, PW(w), N, M->d, M->E, 0);
    else matmul_forward(out, in, PW(w), NULL, N, M->d, M->E, 0);
    gemm_fp32_only(was);
}

// dinp[N,d] (= or += by acc) and the router's gradient from dout[N,E], in fp32
static void gate_backward(Model *M, float *dinp, int w, const float *dout, const float *in, long N, int acc) {
    int was = gemm_fp32_only(1);
    if (M->llama) linear_backward(dinp, M->d, PG(w), dout, M->E, in, M->d, PW(w), N, M->d, M->E, acc);
    else matmul_backward(dinp, PG(w), NULL, dout, in, PW(w), N, M->d, M->E, acc);
    gemm_fp32_only(was);
}

void routing_forward(Model *M, int l, long N, int recompute, int generate) {
    BlockParams *b = &M->bp[l];
    BlockActs *x = &M->ba[l];
    RouterStats scratch = {0}, *st = recompute ? &scratch : &M->rstats, before = *st;
    set_cfg(M, l, generate);
    const float *in = x->ln2;
    if (jitter_on(M)) { jitter(M, M->rlog->xr, x->ln2, N, 0); in = M->rlog->xr; }
    gate_forward(M, x->probs, in, b->router, N);      // router logits, fp32
    if (b->noise >= 0) gate_forward(M, M->rcfg.noise, x->ln2, b->noise, N);
    router_forward(x->probs, x->lse, x->choice, x->gate, x->slot, x->fcount, x->kept, N, &M->rcfg, st);
    if (!recompute && M->rng_step >= 0) accumulate(M, l, N, &before, st);
}

void routing_backward(Model *M, int l, long N, float lm_scale, float aux_scale, float z_scale) {
    BlockParams *b = &M->bp[l];
    BlockActs *x = &M->ba[l];
    int d = M->d;
    set_cfg(M, l, 0);
    M->rcfg.cv_scale = lm_scale * M->rcfg.group_tokens;   // 1/(groups of the step), times the loss scale
    router_backward(M->dlogits_r, M->dgate, x->probs, x->lse, x->choice, x->fcount, N, &M->rcfg,
                    M->rcfg.kind == ROUTER_EXPERT_CHOICE ? 0 : aux_scale, z_scale);
    if (jitter_on(M)) {   // logits = (x ⊙ u)·W: dW += (x ⊙ u)ᵀ·dlogits, dx += (dlogits·Wᵀ) ⊙ u
        RouteLog *r = M->rlog;
        jitter(M, r->xr, x->ln2, N, 0);
        gate_backward(M, r->dxr, b->router, M->dlogits_r, r->xr, N, 0);
        jitter(M, r->dxr, NULL, N, 1);
        residual_forward(M->dln, M->dln, r->dxr, N * d);
    } else
        gate_backward(M, M->dln, b->router, M->dlogits_r, x->ln2, N, 1);
    if (b->noise >= 0) gate_backward(M, M->dln, b->noise, M->rcfg.dnoise, x->ln2, N, 1);
}

// Writes b[E] into the bias tensor: the weights (16-bit storage: rounded) and this rank's
// shard of the fp32 master, so the optimizer's gather keeps it.
static void set_bias(Model *M, Zero *z, int idx, const float *b) {
    Param *p = &M->reg.p[idx];
    if (M->reg.half) convert_from_f32(p->w16, b, p->numel, M->reg.half);
    else memcpy(p->w, b, sizeof(float) * p->numel);
    const Shard *s = &z->sh[idx];
    for (long j = 0; j < s->len; j++) z->master[s->base + j] = b[s->off + j];
}

static double bias_step(Model *M, Zero *z, int i, const double *load) {
    int E = M->E, idx = M->bp[M->rlog->layer[i]].bias;
    float b[E];
    const Param *p = &M->reg.p[idx];
    zero_params_wait(z, idx, idx + 1);   // overlap_comm: its gather may still be in flight
    if (M->reg.half) convert_to_f32(b, p->w16, E, M->reg.half);
    else memcpy(b, p->w, sizeof b);
    double mean = 0, norm = 0;
    for (int e = 0; e < E; e++) mean += load[e] / E;
    for (int e = 0; e < E; e++) {
        b[e] += M->m.bias_update_rate * (float)((mean > load[e]) - (mean < load[e]));
        norm += (double)b[e] * b[e];
    }
    set_bias(M, z, idx, b);
    return sqrt(norm);
}

_Static_assert(sizeof(RouteBlockLog) == 3 * sizeof(double), "RouteBlockLog travels as 3 doubles");

void routing_step_loads(Model *M) {
    RouteLog *r = M->rlog;
    int E = M->E, n = r->nmoe;
    if (!r->nall) return;
    if (r->acc_step < 0) memset(r->kept, 0, sizeof(double) * (n ? n : 1) * (2 * E + 2));   // no training forward since the last step
    if (n) comm_allreduce((Group *)&M->topo->g[GROUP_DP], r->kept, (long)n * (2 * E + 2), DT_F64);
}

void routing_step_end(Model *M, Zero *z) {
    RouteLog *r = M->rlog;
    int E = M->E, n = r->nmoe;
    M->rng_step = -1;
    if (!r->nall) return;
    memset(r->out, 0, sizeof(RouteBlockLog) * r->nall);
    for (int i = 0; i < n; i++) {
        RouteBlockLog *o = &r->out[r->at[i]];
        double mx = 0, mean = 0;
        for (int e = 0; e < E; e++) { mean += r->kept[i * E + e] / E; if (r->kept[i * E + e] > mx) mx = r->kept[i * E + e]; }
        o->max_mean = mean > 0 ? mx / mean : 0;
        o->dropped = r->drops[2 * i + 1] > 0 ? r->drops[2 * i] / r->drops[2 * i + 1] : 0;
        if (M->bp[r->layer[i]].bias >= 0) o->bias_norm = bias_step(M, z, i, r->load + (long)i * E);
    }
    // the other stages' blocks (zero here, each held by one stage): the sum is every block's log
    comm_allreduce((Group *)&M->topo->g[GROUP_PP], r->out, 3L * r->nall, DT_F64);
    r->acc_step = -1;
}

double routing_worst_max_mean(const Model *M) {
    double w = 0;
    for (int i = 0; M->rlog && i < M->rlog->nall; i++) if (M->rlog->out[i].max_mean > w) w = M->rlog->out[i].max_mean;
    return w;
}

void routing_log_json(const Model *M, char *buf, size_t len) {
    size_t u = (size_t)snprintf(buf, len, "[");
    for (int i = 0; M->rlog && i < M->rlog->nall && u < len; i++) {
        const RouteBlockLog *o = &M->rlog->out[i];
        u += (size_t)snprintf(buf + u, len - u, "%s{\"layer\": %d, \"max_mean\": %.4f, \"dropped\": %.4f, \"bias_norm\": %.6g}",
                              i ? ", " : "", M->rlog->all_layer[i], o->max_mean, o->dropped, o->bias_norm);
    }
    if (u < len) snprintf(buf + u, len - u, "]");
}
