// router.c — token-choice routing (top-k and the routing family of docs/config.md), expert choice, capacity and
// drops, aux, z and noisy_topk losses (see router.h). The choosing, the capacity pass and the
// losses are separate steps, so every router shares the capacity and the dispatcher.
#include "core/backend.h"
#include "moe/router.h"
#include "moe/router_token.h"
#include "core/alloc.h"
#include "core/rng.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

int router_capacity(const RouterCfg *c, long S) {
    if (c->capacity_factor <= 0) return (int)S;     // dropless: an expert can take every token
    // cf is a float (1.1 is 1.10000002): forgive that much relative error before rounding up
    int k = c->kind == ROUTER_EXPERT_CHOICE ? 1 : c->k;   // expert choice: C = cf·S/E per expert
    double x = (double)c->capacity_factor * k * S / c->E;
    long C = (long)ceil(x * (1.0 - 1e-6));
    if (C < c->min_capacity) C = c->min_capacity;
    if (C > S) C = S;
    return (int)C;
}

// ---------------------------------------------------------------------------------------
// randomness from global coordinates only: (seed, step, layer, purpose) name a stream; the
// global sequence index and the position name the token; e the expert

static uint64_t route_bits(const RouterCfg *c, int purpose, long t, uint64_t e) {
    uint64_t stream = splitmix64(((uint64_t)c->step << 24) ^ ((uint64_t)c->layer << 8) ^ (uint64_t)purpose);
    uint64_t seq = (uint64_t)(c->seq0 + t / c->T), pos = (uint64_t)(t % c->T);
    return rng_at(rng_at(c->seed, stream, seq), pos, e);
}

double router_uniform(const RouterCfg *c, int purpose, long t) { return rng_uniform(route_bits(c, purpose, t, 0)); }

float router_normal(const RouterCfg *c, long t, int e) {
    double u1 = rng_uniform(route_bits(c, 0, t, 2 * (uint64_t)e)), u2 = rng_uniform(route_bits(c, 0, t, 2 * (uint64_t)e + 1));
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

float router_jitter(const RouterCfg *c, float eps, long t, int i) {
    return 1.0f - eps + 2.0f * eps * (float)rng_uniform(route_bits(c, 0x6a, t, (uint64_t)i));
}

// ---------------------------------------------------------------------------------------
// choosing

// p[E] = softmax of the logits in place; returns their logsumexp
static float softmax_token(float *p, int E) {
    float mx = -INFINITY;
    double s = 0;
    for (int e = 0; e < E; e++) mx = p[e] > mx ? p[e] : mx;
    for (int e = 0; e < E; e++) s += exp((double)(p[e] - mx));
    for (int e = 0; e < E; e++) p[e] = (float)exp((double)(p[e] - mx)) / (float)s;
    return (float)(log(s) + mx);
}

// Group-limited routing: allowed[e] = 1 for the experts of the topk_groups groups whose two
// largest scores sum highest (ties to the lower group); all experts without groups.
// *margin: the smallest gap between a chosen group's sum and a group left out (INFINITY: none).
static void allowed_experts(unsigned char *allowed, const float *sc, int E, int ng, int kg, float *margin) {
    *margin = INFINITY;
    if (ng <= 1) { for (int e = 0; e < E; e++) allowed[e] = 1; return; }
    int gs = E / ng;
    float gsc[ng];
    for (int g = 0; g < ng; g++) {
        float a = -INFINITY, b = -INFINITY;   // the two largest of the group
        for (int e = g * gs; e < (g + 1) * gs; e++) {
            if (sc[e] > a) { b = a; a = sc[e]; }
            else if (sc[e] > b) b = sc[e];
        }
        gsc[g] = gs > 1 ? a + b : a;
    }
    memset(allowed, 0, (size_t)E);
    for (int j = 0; j < kg; j++) {
        int best = -1;
        for (int g = 0; g < ng; g++)
            if (!allowed[g * gs] && (best < 0 || gsc[g] > gsc[best])) best = g;
        memset(allowed + best * gs, 1, (size_t)gs);
    }
    float lo = INFINITY, hi = -INFINITY;   // the weakest chosen group, the strongest left out
    for (int g = 0; g < ng; g++) {
        if (allowed[g * gs] && gsc[g] < lo) lo = gsc[g];
        if (!allowed[g * gs] && gsc[g] > hi) hi = gsc[g];
    }
    if (hi > -INFINITY) *margin = lo - hi;
}

// ch[k]: the k largest scores among the allowed experts (strictly greater wins: ties to the lower
// index). Returns the choice's margin: the smallest gap between consecutive scores of the k chosen
// and the best allowed expert left out (INFINITY: none); a gap near 0 is a near tie, which the
// rounding of a different GEMM shape may decide the other way.
static float choose_topk(int *ch, const float *sc, const unsigned char *allowed, int E, int k) {
    float margin = INFINITY;
    for (int j = 0; j <= k && j < E; j++) {
        int best = -1;
        for (int e = 0; e < E; e++) {
            int taken = !allowed[e];
            for (int i = 0; i < j; i++) taken |= ch[i] == e;
            if (!taken && (best < 0 || sc[e] > sc[best])) best = e;
        }
        if (best >= 0 && j > 0 && ch[j - 1] >= 0 && sc[ch[j - 1]] - sc[best] < margin) margin = sc[ch[j - 1]] - sc[best];
        if (j < k) ch[j] = best;
    }
    return margin;
}

static float softplus(float x) { return x > 20 ? x : log1pf(expf(x)); }

// One token of a token-choice router: p[E] probabilities (logits on entry), its choices ch[k]
// and gates g[k]; skip[k] marks a choice GShard's random routing leaves out; *margin the
// smallest gap of the choice (choose_topk, allowed_experts).
static float route_token(const RouterCfg *c, long t, float *p, int *ch, float *g, int *skip, float *margin) {
    int E = c->E, k = c->k;
    float sc[E];
    unsigned char allowed[E];
    if (c->kind == ROUTER_NOISY_TOPK) {   // H = logits + ε·softplus(x·W_noise), noise only in training
        float *h = c->hval + t * E;
        for (int e = 0; e < E; e++)
            h[e] = p[e] + (c->train ? router_normal(c, t, e) * softplus(c->noise[t * E + e]) : 0.0f);
    }
    float lse = softmax_token(p, E);
    const float *base = c->kind == ROUTER_NOISY_TOPK ? c->hval + t * E : p;
    for (int e = 0; e < E; e++) sc[e] = base[e] + (c->bias ? c->bias[e] : 0.0f);
    float gmargin;
    allowed_experts(allowed, sc, E, c->num_groups, c->topk_groups, &gmargin);
    float cmargin = choose_topk(ch, sc, allowed, E, k);
    *margin = gmargin < cmargin ? gmargin : cmargin;
    float sum = 0, mx = base[ch[0]];
    for (int j = 0; j < k; j++) {
        if (c->kind == ROUTER_NOISY_TOPK) sum += g[j] = expf(base[ch[j]] - mx);   // softmax over the k chosen H
        else sum += p[ch[j]];
        skip[j] = 0;
    }
    int plain = c->no_renorm || (k == 1 && c->kind != ROUTER_MIXTRAL);   // gates = p: no renormalisation
    for (int j = 0; j < k; j++) g[j] = c->kind == ROUTER_NOISY_TOPK ? g[j] / sum : plain ? p[ch[j]] : p[ch[j]] / sum;
    if (c->kind == ROUTER_GSHARD && c->train)   // the second expert only when 2·g₂ > u
        skip[1] = !(2 * g[1] > router_uniform(c, 1, t));
    return lse;
}

// ---------------------------------------------------------------------------------------
// capacity

typedef struct { double key; long t; } Prio;
static int prio_cmp(const void *a, const void *b) {
    const Prio *x = a, *y = b;
    return x->key < y->key ? -1 : x->key > y->key ? 1 : (x->t > y->t) - (x->t < y->t);
}

// Slots of one group [t0, t0+S), choice-major; within a choice rank in token order, or in the
// order of a random priority (RTS, training). Skipped choices (slot −2 on entry) get −1 and
// are not counted as choices of their expert.
static void take_slots(const RouterCfg *c, const int *choice, int *slot, int *used, float *f, long t0, long S,
                       Prio *order, RouterStats *st) {
    int k = c->k, C = router_capacity(c, S);
    for (int j = 0; j < k; j++) {
        for (long i = 0; i < S; i++) {
            order[i].t = t0 + i;
            order[i].key = c->use_rts && c->train ? router_uniform(c, 2 + j, t0 + i) : (double)i;
        }
        if (c->use_rts && c->train) qsort(order, (size_t)S, sizeof *order, prio_cmp);
        for (long i = 0; i < S; i++) {
            long t = order[i].t;
            int e = choice[t * k + j];
            if (slot[t * k + j] == -2) { slot[t * k + j] = -1; continue; }
            f[e] += 1.0f;
            if (used[e] < C) slot[t * k + j] = used[e]++;
            else { slot[t * k + j] = -1; st->dropped++; }
        }
    }
}

// The k-th largest score of h[E] other than e (the threshold e must beat); *at its expert
static float noisy_threshold(const float *h, int E, int k, int e, int *at) {
    int taken[E];
    memset(taken, 0, sizeof taken);
    taken[e] = 1;
    int best = -1;
    for (int r = 0; r < k; r++) {
        best = -1;
        for (int i = 0; i < E; i++)
            if (!taken[i] && (best < 0 || h[i] > h[best])) best = i;
        taken[best] = 1;
    }
    *at = best;
    return h[best];
}

static double normal_pdf(double z) { return exp(-0.5 * z * z) * 0.3989422804014327; }

double router_noisy_keep_prob(const float *h, const float *clean, const float *std, int E, int k, int e) {
    int at;
    double z = ((double)clean[e] - noisy_threshold(h, E, k, e, &at)) / std[e];
    return 0.5 * erfc(-z / sqrt(2.0));
}

// noisy_topk: the clean logits and noise scales of token t, from its scores H and x·W_noise
static void noisy_clean_std(const RouterCfg *c, long t, float *clean, float *std) {
    for (int e = 0; e < c->E; e++) {
        std[e] = softplus(c->noise[t * c->E + e]);
        clean[e] = c->hval[t * c->E + e] - (c->train ? router_normal(c, t, e) * std[e] : 0.0f);
    }
}

// CV² = var/mean² of x[E] (population variance); grad[E] (if not NULL) its gradient
static double cv2(const double *x, int E, double *grad) {
    double m = 0, v = 0;
    for (int e = 0; e < E; e++) m += x[e];
    m /= E;
    for (int e = 0; e < E; e++) v += (x[e] - m) * (x[e] - m);
    v /= E;
    if (m <= 0) { if (grad) memset(grad, 0, sizeof(double) * E); return 0; }
    if (grad) for (int e = 0; e < E; e++) grad[e] = 2 * (x[e] - m) / (E * m * m) - 2 * v / (E * m * m * m);
    return v / (m * m);
}

// importance_e = Σ gates, load_e = Σ P(e stays in the top k) over the group's tokens
static void noisy_totals(const RouterCfg *c, const float *gate, const int *choice, long t0, long S, double *imp,
                         double *load) {
    int E = c->E, k = c->k;
    memset(imp, 0, sizeof(double) * E); memset(load, 0, sizeof(double) * E);
    float clean[E], std[E];
    for (long t = t0; t < t0 + S; t++) {
        for (int j = 0; j < k; j++) imp[choice[t * k + j]] += gate[t * k + j];
        noisy_clean_std(c, t, clean, std);
        for (int e = 0; e < E; e++) load[e] += router_noisy_keep_prob(c->hval + t * E, clean, std, E, k, e);
    }
}

// noisy_topk losses of one group: adds the weighted CV² terms to st
static void noisy_group_loss(const RouterCfg *c, const float *gate, const int *choice, long t0, long S,
                             RouterStats *st) {
    int E = c->E;
    double imp[E], load[E];
    noisy_totals(c, gate, choice, t0, S, imp, load);
    st->cv_sum += c->importance_coef * cv2(imp, E, NULL) + c->load_coef * cv2(load, E, NULL);
}

// Expert choice (Zhou 2022): per group each expert takes the C tokens of highest p (ties to
// the earlier token), gate p; slots in token order. Generation routes top-k' instead,
// k' = max(1, round(capacity_factor)), with the gates of §2 and the same capacity.
static void expert_choice_group(const RouterCfg *c, const float *probs, int *slot, float *gate, int *kept,
                                long t0, long S, Prio *order, RouterStats *st) {
    int E = c->E, C = router_capacity(c, S);
    for (long t = t0; t < t0 + S; t++)
        for (int e = 0; e < E; e++) { slot[t * E + e] = -1; gate[t * E + e] = 0; }
    if (c->generate) {
        int kk = (int)lroundf(c->capacity_factor);
        kk = kk < 1 ? 1 : kk > E ? E : kk;
        unsigned char all[E];
        for (int e = 0; e < E; e++) all[e] = 1;
        for (long t = t0; t < t0 + S; t++) {
            int ch[E];
            float sum = 0;
            choose_topk(ch, probs + t * E, all, E, kk);
            for (int j = 0; j < kk; j++) sum += probs[t * E + ch[j]];
            for (int j = 0; j < kk; j++)
                if (kept[ch[j]] < C) {
                    slot[t * E + ch[j]] = kept[ch[j]]++;
                    gate[t * E + ch[j]] = kk == 1 ? probs[t * E + ch[j]] : probs[t * E + ch[j]] / sum;
                }
        }
        return;
    }
    for (int e = 0; e < E; e++) {
        for (long i = 0; i < S; i++) { order[i].t = t0 + i; order[i].key = -(double)probs[(t0 + i) * E + e]; }
        qsort(order, (size_t)S, sizeof *order, prio_cmp);   // highest p first, ties to the earlier token
        for (long i = 0; i < C; i++) slot[order[i].t * E + e] = 0;
        kept[e] = 0;
        for (long t = t0; t < t0 + S; t++)   // slots in token order
            if (slot[t * E + e] >= 0) { slot[t * E + e] = kept[e]++; gate[t * E + e] = probs[t * E + e]; }
    }
    for (long t = t0; t < t0 + S; t++) {
        int any = 0;
        for (int e = 0; e < E; e++) any |= slot[t * E + e] >= 0;
        st->dropped += !any;
    }
}

static void expert_choice_forward(float *probs, float *lse, int *choice, float *gate, int *slot, float *fcount,
                                  int *kept, long N, const RouterCfg *c, RouterStats *st) {
    int E = c->E, G = router_ngroups(N, c->group_tokens);
    #pragma omp parallel for schedule(static)
    for (long t = 0; t < N; t++) {
        lse[t] = softmax_token(probs + t * E, E);
        for (int e = 0; e < E; e++) choice[t * E + e] = e;
    }
    Prio *order = ted_alloc(sizeof(Prio) * (size_t)c->group_tokens, MEM_TEMP);
    for (int g = 0; g < G; g++) {
        long t0 = (long)g * c->group_tokens, S = N - t0 < c->group_tokens ? N - t0 : c->group_tokens;
        memset(kept + (long)g * E, 0, sizeof(int) * E);
        memset(fcount + (long)g * E, 0, sizeof(float) * E);   // no aux loss
        expert_choice_group(c, probs, slot, gate, kept + (long)g * E, t0, S, order, st);
    }
    ted_free(order);
    router_stats_batch(st, lse, N, G, 1);   // choices: tokens; dropped: tokens no expert took
}

void router_forward(float *probs, float *lse, int *choice, float *gate, int *slot, float *fcount,
                    int *kept, long N, const RouterCfg *c, RouterStats *st) {
    ON_GPU(cu_router_forward(probs, lse, choice, gate, slot, fcount, kept, N, c, st));
    if (c->kind == ROUTER_EXPERT_CHOICE) { expert_choice_forward(probs, lse, choice, gate, slot, fcount, kept, N, c, st); return; }
    int E = c->E, k = c->k;
    float margin = INFINITY;
    #pragma omp parallel for schedule(static) reduction(min : margin)
    for (long t = 0; t < N; t++) {
        int skip[k];
        float m;
        lse[t] = route_token(c, t, probs + t * E, choice + t * k, gate + t * k, skip, &m);
        if (m < margin) margin = m;
        for (int j = 0; j < k; j++) slot[t * k + j] = skip[j] ? -2 : 0;
    }
    if (N > 0 && (!st->margins || margin < st->min_margin)) st->min_margin = margin;
    st->margins += N;
    // capacity per group, choice-major then token order (or RTS order)
    int G = router_ngroups(N, c->group_tokens);
    Prio *order = ted_alloc(sizeof(Prio) * (size_t)c->group_tokens, MEM_TEMP);
    for (int g = 0; g < G; g++) {
        long t0 = (long)g * c->group_tokens, S = N - t0 < c->group_tokens ? N - t0 : c->group_tokens;
        int *used = kept + (long)g * E;
        float *f = fcount + (long)g * E;
        memset(used, 0, sizeof(int) * E);
        memset(f, 0, sizeof(float) * E);
        take_slots(c, choice, slot, used, f, t0, S, order, st);
        // l_aux = E · Σ_e f_e · P_e
        double aux = 0;
        for (int e = 0; e < E; e++) {
            f[e] /= (float)(k * S);
            double P = 0;
            for (long t = t0; t < t0 + S; t++) P += probs[t * E + e];
            aux += f[e] * (P / S);
        }
        st->aux_sum += E * aux;
        if (c->kind == ROUTER_NOISY_TOPK) noisy_group_loss(c, gate, choice, t0, S, st);
    }
    ted_free(order);
    router_stats_batch(st, lse, N, G, k);
}

void router_stats_batch(RouterStats *st, const float *lse, long N, int G, int k) {
    double z = 0;
    for (long t = 0; t < N; t++) z += (double)lse[t] * lse[t];
    st->z_sum += z;
    st->groups += G;
    st->tokens += N;
    st->choices += N * k;
}

// noisy_topk: the gates of token t again (softmax over its chosen H)
static void noisy_gates(const RouterCfg *c, long t, const int *ch, float *g) {
    const float *h = c->hval + t * c->E;
    float sum = 0;
    for (int j = 0; j < c->k; j++) sum += g[j] = expf(h[ch[j]] - h[ch[0]]);
    for (int j = 0; j < c->k; j++) g[j] /= sum;
}

// noisy_topk backward of one group: dlogits gets the H terms (gates, importance, load), dnoise
// (= c->dnoise) the noise-scale terms. dlogits already holds the aux and z terms.
static void noisy_group_backward(float *dlogits, const float *dgate, const int *choice, long t0, long S,
                                 const RouterCfg *c) {
    int E = c->E, k = c->k;
    double imp[E], load[E], gi[E], gl[E];
    float *gates = ted_alloc(sizeof(float) * S * k, MEM_TEMP);
    for (long t = t0; t < t0 + S; t++) noisy_gates(c, t, choice + t * k, gates + (t - t0) * k);
    noisy_totals(c, gates - t0 * k, choice, t0, S, imp, load);
    cv2(imp, E, gi); cv2(load, E, gl);
    for (long t = t0; t < t0 + S; t++) {
        const int *ch = choice + t * k;
        const float *g = gates + (t - t0) * k, *h = c->hval + t * E, *np = c->noise + t * E;
        float *dl = dlogits + t * E, *dn = c->dnoise + t * E, clean[E], std[E], dh[E], dstd[E];
        noisy_clean_std(c, t, clean, std);
        memset(dh, 0, sizeof dh); memset(dstd, 0, sizeof dstd);
        float dg[k], dot = 0;   // gate gradients: the loss, plus the importance term
        for (int j = 0; j < k; j++) { dg[j] = dgate[t * k + j] + c->cv_scale * c->importance_coef * (float)gi[ch[j]]; dot += g[j] * dg[j]; }
        for (int j = 0; j < k; j++) dh[ch[j]] += g[j] * (dg[j] - dot);   // through the softmax over the chosen
        for (int e = 0; e < E; e++) {   // load: Φ((clean_e − H_at)/std_e)
            int at;
            double thr = noisy_threshold(h, E, k, e, &at), z = (clean[e] - thr) / std[e];
            float w = (float)(c->cv_scale * c->load_coef * gl[e] * normal_pdf(z) / std[e]);
            dl[e] += w;                     // d clean_e
            dstd[e] -= w * (float)z;
            dh[at] -= w;                    // the threshold is the score H of expert `at`
        }
        for (int e = 0; e < E; e++) {   // H = clean + ε·std, std = softplus(x·W_noise)
            dl[e] += dh[e];
            if (c->train) dstd[e] += dh[e] * router_normal(c, t, e);
            dn[e] = dstd[e] / (1.0f + expf(-np[e]));
        }
    }
    ted_free(gates);
}

// expert choice: the gate is p itself for every (token, expert) taken; no aux loss
static void expert_choice_backward_token(float *dl, const float *p, const float *dg, float lse, int E, float z_scale) {
    float s = 0, zg = z_scale * 2.0f * lse;
    for (int e = 0; e < E; e++) s += p[e] * dg[e];
    for (int e = 0; e < E; e++) dl[e] = p[e] * (dg[e] - s) + zg * p[e];
}

void router_backward(float *dlogits, const float *dgate, const float *probs, const float *lse,
                     const int *choice, const float *fcount, long N, const RouterCfg *c,
                     float aux_scale, float z_scale) {
    ON_GPU(cu_router_backward(dlogits, dgate, probs, lse, choice, fcount, N, c, aux_scale, z_scale));
    int E = c->E, k = c->k, noisy = c->kind == ROUTER_NOISY_TOPK;
    #pragma omp parallel for schedule(static)
    for (long t = 0; t < N; t++) {
        int g = (int)(t / c->group_tokens);
        long t0 = (long)g * c->group_tokens, S = N - t0 < c->group_tokens ? N - t0 : c->group_tokens;
        if (c->kind == ROUTER_EXPERT_CHOICE)
            expert_choice_backward_token(dlogits + t * E, probs + t * E, dgate + t * E, lse[t], E, z_scale);
        else   // noisy_topk: the gates do not go through p (k = 0 here: only the aux and z terms)
            router_backward_token(dlogits + t * E, probs + t * E, fcount + (long)g * E, choice + t * k, dgate + t * k,
                                  lse[t], E, noisy ? 0 : k, S, aux_scale, z_scale,
                                  c->no_renorm ? ROUTER_RENORM_NONE : c->kind == ROUTER_MIXTRAL);
    }
    if (!noisy) return;
    for (long t0 = 0; t0 < N; t0 += c->group_tokens)
        noisy_group_backward(dlogits, dgate, choice, t0, N - t0 < c->group_tokens ? N - t0 : c->group_tokens, c);
}
