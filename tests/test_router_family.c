// test_router_family.c — the routers of design at the router: hand-computed expert choice
// (ties, a token taken by none and one taken by all, generation's top-k), group-limited routing
// and bias-balanced choosing; the reductions (noisy_topk without noise, gshard keeping every
// second choice, RTS without drops all equal top-k); and the statistics of the random draws
// (GShard's kept-second fraction, Switch's jitter range, noisy_topk's load term by Monte Carlo);
// Mixtral's router against top-k.
#include "core/alloc.h"
#include "moe/dispatcher.h"
#include "core/rng.h"
#include "moe/router.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "harness.h"


typedef struct {   // one routing of N tokens (heap buffers, sized for N·E)
    float *probs, *lse, *gate, *fcount, *noise, *hval;
    int *choice, *slot, *kept;
    RouterStats st;
} Run;

static Run route(const float *logits, long N, RouterCfg c) {
    Run r;
    memset(&r, 0, sizeof r);
    long NE = N * c.E, G = router_ngroups(N, c.group_tokens);
    r.probs = calloc(NE, sizeof(float)); r.lse = calloc(N, sizeof(float)); r.gate = calloc(NE, sizeof(float));
    r.fcount = calloc(G * c.E, sizeof(float)); r.choice = calloc(NE, sizeof(int)); r.slot = calloc(NE, sizeof(int));
    r.kept = calloc(G * c.E, sizeof(int));
    r.noise = calloc(NE, sizeof(float)); r.hval = calloc(NE, sizeof(float));
    for (long i = 0; i < NE; i++) r.noise[i] = 0.5f * rng_normal(3, 4, (uint64_t)i);   // x·W_noise
    if (c.kind == ROUTER_NOISY_TOPK) { c.noise = r.noise; c.hval = r.hval; }
    memcpy(r.probs, logits, sizeof(float) * NE);
    router_forward(r.probs, r.lse, r.choice, r.gate, r.slot, r.fcount, r.kept, N, &c, &r.st);
    return r;
}

static void done(Run *r) {
    free(r->probs); free(r->lse); free(r->gate); free(r->fcount); free(r->choice); free(r->slot); free(r->kept);
    free(r->noise); free(r->hval);
}

static RouterCfg cfg(int E, int k, float cf, int minc, int gt, int kind) {
    RouterCfg c = RCFG(E, k, cf, minc, gt);
    c.kind = kind; c.T = gt; c.seed = 1234; c.step = 7; c.layer = 1;
    return c;
}

static void case_expert_choice(void) {
    // E = 2, one group of 4 tokens, cf 1: C = ceil(1·4/2) = 2 tokens per expert.
    // p(t0) = p(t3) = (.5, .5); t1 prefers e0 strongly, t2 e1.
    // e0 ranks t1 (.98), then t0 and t3 tie at .5 → the earlier t0; e1 takes t2 and again t0.
    // So t0 is taken by all experts, t3 by none; slots follow token order within an expert.
    float lg[] = {0, 0, 2, -2, -2, 2, 0, 0};
    Run r = route(lg, 4, cfg(2, 1, 1.0f, 0, 4, ROUTER_EXPERT_CHOICE));
    int want_slot[] = {0, 0, 1, -1, -1, 1, -1, -1}, want_choice[] = {0, 1, 0, 1, 0, 1, 0, 1};
    EXPECT(!memcmp(r.slot, want_slot, sizeof want_slot), "ec slots %d %d | %d %d | %d %d | %d %d", r.slot[0], r.slot[1],
           r.slot[2], r.slot[3], r.slot[4], r.slot[5], r.slot[6], r.slot[7]);
    EXPECT(!memcmp(r.choice, want_choice, sizeof want_choice), "ec choice columns are the experts");
    double p1 = 1 / (1 + exp(-4.0));
    EXPECT(fabs(r.gate[0] - 0.5) < 1e-6 && fabs(r.gate[1] - 0.5) < 1e-6 && fabs(r.gate[2] - p1) < 1e-6 &&
           r.gate[3] == 0 && r.gate[6] == 0 && r.gate[7] == 0, "ec gates = p where taken: %g %g %g", r.gate[0], r.gate[1], r.gate[2]);
    EXPECT(r.kept[0] == 2 && r.kept[1] == 2, "ec kept %d %d", r.kept[0], r.kept[1]);
    EXPECT(r.st.dropped == 1 && r.st.choices == 4, "ec: %ld of %ld tokens taken by no expert, want 1 of 4", r.st.dropped, r.st.choices);
    EXPECT(r.st.aux_sum == 0 && r.fcount[0] == 0, "ec has no aux loss");
    // the dispatcher takes the E choice columns as they are: e0 rows t0, t1; e1 rows t0, t2
    int row[8]; long rows[2], start[2];
    dispatch_plan(row, rows, start, r.choice, r.slot, r.kept, 4, 2, &(RouterCfg){.E = 2, .k = 2, .capacity_factor = 1.0f,
                  .group_tokens = 4, .kind = ROUTER_EXPERT_CHOICE}, 1, 1);
    EXPECT(rows[0] == 2 && rows[1] == 2 && row[0] == 0 && row[1] == 2 && row[2] == 1 && row[5] == 3 && row[6] == -1,
           "ec rows: %d %d %d %d %d", row[0], row[1], row[2], row[5], row[6]);
    done(&r);
    // generation: each token top-k' (k' = round(cf) = 1), same capacity: t0 (tie → e0), t1 → e0,
    // t2 → e1, t3 → e0 which is full (C = 2): no expert
    RouterCfg g = cfg(2, 1, 1.0f, 0, 4, ROUTER_EXPERT_CHOICE);
    g.generate = 1;
    r = route(lg, 4, g);
    int want_gen[] = {0, -1, 1, -1, -1, 0, -1, -1};
    EXPECT(!memcmp(r.slot, want_gen, sizeof want_gen), "ec generate slots %d %d | %d %d | %d %d | %d %d", r.slot[0],
           r.slot[1], r.slot[2], r.slot[3], r.slot[4], r.slot[5], r.slot[6], r.slot[7]);
    EXPECT(fabs(r.gate[0] - 0.5) < 1e-6, "generate top-1 gate is p (%g)", r.gate[0]);
    done(&r);
}

static void case_group_limited(void) {
    // E = 4 in 2 groups {0,1} {2,3}, one group per token, top-2 (dropless).
    // t0 (3, -5, 2, 2): group sums of the top two p: g0 = e^3 + e^-5 > g1 = 2e^2 → e0, e1 (e2, e3 beat e1 but are out)
    // t1 (2, 2, 2.5, -9): g0 = 2e^2 > g1 = e^2.5 + e^-9 → e0, e1 although e2 is the single best
    // t2 (-1, 0, 1, 0.5): g1 wins → e2, e3
    float lg[] = {3, -5, 2, 2, 2, 2, 2.5f, -9, -1, 0, 1, 0.5f};
    RouterCfg c = cfg(4, 2, 0.0f, 0, 3, ROUTER_TOPK);
    c.num_groups = 2; c.topk_groups = 1;
    Run r = route(lg, 3, c);
    int want[] = {0, 1, 0, 1, 2, 3};
    EXPECT(!memcmp(r.choice, want, sizeof want), "groups: %d %d | %d %d | %d %d", r.choice[0], r.choice[1], r.choice[2],
           r.choice[3], r.choice[4], r.choice[5]);
    double g0 = exp(3.0) / (exp(3.0) + exp(-5.0));
    EXPECT(fabs(r.gate[0] - g0) < 1e-6, "gates renormalised over the chosen: %g want %g", r.gate[0], g0);
    done(&r);
    // two groups of two allowed = no limit: t0 → e0, e2 (tie e2 = e3 → lower)
    c.topk_groups = 2;
    r = route(lg, 3, c);
    EXPECT(r.choice[0] == 0 && r.choice[1] == 2 && r.choice[2] == 2 && r.choice[3] == 0, "all groups: %d %d %d %d",
           r.choice[0], r.choice[1], r.choice[2], r.choice[3]);
    done(&r);
}

static void case_bias(void) {
    // E = 3, top-1, logits (1, 0, 0): p = (.576, .212, .212); bias (0, .5, 0) → scores (.576, .712, .212):
    // e1 is chosen, its gate stays p1 (the bias only chooses)
    float lg[] = {1, 0, 0}, b[] = {0, 0.5f, 0};
    RouterCfg c = cfg(3, 1, 0.0f, 0, 1, ROUTER_TOPK);
    c.bias = b;
    Run r = route(lg, 1, c);
    double p1 = 1 / (exp(1.0) + 2);
    EXPECT(r.choice[0] == 1 && fabs(r.gate[0] - p1) < 1e-6, "bias: expert %d gate %g want 1, %g", r.choice[0], r.gate[0], p1);
    done(&r);
}

static float *random_logits(long N, int E, float s, uint64_t seed) {
    float *lg = malloc(sizeof(float) * N * E);
    for (long i = 0; i < N * E; i++) lg[i] = s * rng_normal(seed, 1, (uint64_t)i);
    return lg;
}

static int same_routing(const Run *a, const Run *b, long N, int k, int slots) {
    for (long i = 0; i < N * k; i++)
        if (a->choice[i] != b->choice[i] || fabsf(a->gate[i] - b->gate[i]) > 1e-6f || (slots && a->slot[i] != b->slot[i]))
            return 0;
    return 1;
}

static void case_reductions(void) {
    long N = 64;
    int E = 8;
    float *lg = random_logits(N, E, 1.0f, 11);
    Run top2 = route(lg, N, cfg(E, 2, 1.0f, 1, 16, ROUTER_TOPK));
    // noisy_topk with the noise off (not training): H = logits, gates = softmax over the chosen = renormalised p
    Run noisy = route(lg, N, cfg(E, 2, 1.0f, 1, 16, ROUTER_NOISY_TOPK));
    EXPECT(same_routing(&top2, &noisy, N, 2, 1) && top2.st.dropped == noisy.st.dropped && top2.st.dropped > 0,
           "noisy_topk without noise = top-2 (drops %ld / %ld)", noisy.st.dropped, top2.st.dropped);
    // and with noise it routes differently (the noise is there in training)
    RouterCfg nc = cfg(E, 2, 1.0f, 1, 16, ROUTER_NOISY_TOPK);
    nc.train = 1;
    Run noisy_t = route(lg, N, nc);
    EXPECT(!same_routing(&top2, &noisy_t, N, 2, 0), "noisy_topk in training differs from top-2");
    // gshard keeping every second choice (no random routing outside training) = top-2
    Run gs = route(lg, N, cfg(E, 2, 1.0f, 1, 16, ROUTER_GSHARD));
    EXPECT(same_routing(&top2, &gs, N, 2, 1) && gs.st.dropped == top2.st.dropped, "gshard keeping all = top-2");
    // RTS with capacity for everything: same choices, gates, loads, no drops; only the slot order differs
    Run big = route(lg, N, cfg(E, 2, 8.0f, 1, 16, ROUTER_TOPK));
    RouterCfg rc = cfg(E, 2, 8.0f, 1, 16, ROUTER_TOPK);
    rc.use_rts = 1; rc.train = 1;
    Run rts = route(lg, N, rc);
    int same_kept = !memcmp(big.kept, rts.kept, sizeof(int) * 4 * E), perm = 0;
    for (long i = 0; i < N * 2; i++) perm |= big.slot[i] != rts.slot[i];
    EXPECT(same_routing(&big, &rts, N, 2, 0) && same_kept && rts.st.dropped == 0 && perm,
           "RTS without drops = top-k (slots permuted: %d)", perm);
    // with a tight capacity RTS drops different tokens than token order does, the same number per expert
    RouterCfg rt = cfg(E, 2, 0.5f, 1, 16, ROUTER_TOPK);
    rt.use_rts = 1; rt.train = 1;
    Run tight = route(lg, N, rt), order = route(lg, N, cfg(E, 2, 0.5f, 1, 16, ROUTER_TOPK));
    int differ = 0;
    for (long i = 0; i < N * 2; i++) differ |= (tight.slot[i] < 0) != (order.slot[i] < 0);
    EXPECT(differ && tight.st.dropped == order.st.dropped, "RTS picks other survivors (%ld drops each)", tight.st.dropped);
    done(&top2); done(&noisy); done(&noisy_t); done(&gs); done(&big); done(&rts); done(&tight); done(&order);
    free(lg);
}

static void case_statistics(void) {
    // GShard: the second choice is kept with probability min(1, 2·g2)
    long N = 200000;
    int E = 8;
    float *lg = random_logits(N, E, 1.5f, 5);
    RouterCfg c = cfg(E, 2, 0.0f, 0, 16, ROUTER_GSHARD);
    c.train = 1;
    Run r = route(lg, N, c);
    double kept = 0, expect = 0;
    for (long t = 0; t < N; t++) { kept += r.slot[t * 2 + 1] >= 0; expect += fmin(1.0, 2.0 * r.gate[t * 2 + 1]); }
    double rel = fabs(kept - expect) / expect;
    printf("gshard: kept second %.4f, E[min(1, 2 g2)] %.4f (rel %.2e)\n", kept / N, expect / N, rel);
    EXPECT(rel < 0.01 && kept < N * 0.99, "gshard kept-second fraction %.4f vs %.4f", kept / N, expect / N);
    done(&r);
    free(lg);
    // Switch jitter: every draw in [1-eps, 1+eps], reaching both ends, mean 1
    float eps = 0.1f, lo = 2, hi = 0;
    double mean = 0;
    RouterCfg j = cfg(E, 1, 1.0f, 0, 32, ROUTER_SWITCH);
    for (long t = 0; t < 4000; t++)
        for (int i = 0; i < 32; i++) {
            float u = router_jitter(&j, eps, t, i);
            lo = fminf(lo, u); hi = fmaxf(hi, u); mean += u / (4000.0 * 32);
        }
    EXPECT(lo >= 1 - eps && hi <= 1 + eps && lo < 1 - 0.99f * eps && hi > 1 + 0.99f * eps && fabs(mean - 1) < 1e-3,
           "jitter range [%g, %g] mean %g", lo, hi, mean);
}

static void case_noisy_load(void) {
    // noisy_topk's load term P(e stays in the top k | the other scores) = Φ((clean_e − thr)/std_e),
    // against redrawing e's noise and really taking the top k, for every expert of a token
    int E = 6, k = 2;
    float clean[] = {0.3f, -0.2f, 0.8f, 0.1f, -0.5f, 0.4f}, std[] = {0.7f, 0.4f, 0.5f, 1.2f, 0.9f, 0.3f};
    float h[6];
    for (int e = 0; e < E; e++) h[e] = clean[e] + std[e] * rng_normal(77, 1, (uint64_t)e);
    double worst = 0;
    for (int e = 0; e < E; e++) {
        double p = router_noisy_keep_prob(h, clean, std, E, k, e), mc = 0;
        long M = 200000;
        for (long i = 0; i < M; i++) {
            float x[6];
            memcpy(x, h, sizeof x);
            x[e] = clean[e] + std[e] * rng_normal(99, (uint64_t)e, (uint64_t)i);
            int above = 0;   // experts with a larger score: e is in the top k when fewer than k
            for (int q = 0; q < E; q++) above += q != e && x[q] > x[e];
            mc += above < k;
        }
        mc /= M;
        worst = fmax(worst, fabs(p - mc));
        printf("noisy load e%d: Phi %.4f, Monte Carlo %.4f\n", e, p, mc);
    }
    EXPECT(worst < 0.004, "noisy load vs Monte Carlo: worst |diff| %.4f", worst);
}

// Mixtral's router: the same choices, slots and gates as top-k for k = 2; for k = 1 the same
// choices with gate 1 (the single chosen p renormalised), where top-k keeps p.
static void case_mixtral(void) {
    long N = 64;
    int E = 8;
    float *lg = random_logits(N, E, 1.0f, 12);
    Run t2 = route(lg, N, cfg(E, 2, 1.0f, 1, 16, ROUTER_TOPK)), m2 = route(lg, N, cfg(E, 2, 1.0f, 1, 16, ROUTER_MIXTRAL));
    EXPECT(same_routing(&t2, &m2, N, 2, 1) && t2.st.dropped == m2.st.dropped, "mixtral top-2 = topk top-2");
    Run t1 = route(lg, N, cfg(E, 1, 1.0f, 1, 16, ROUTER_TOPK)), m1 = route(lg, N, cfg(E, 1, 1.0f, 1, 16, ROUTER_MIXTRAL));
    int gates_one = 1, p_gates = 1, same = t1.st.dropped == m1.st.dropped;
    for (long t = 0; t < N; t++) {
        same &= t1.choice[t] == m1.choice[t] && t1.slot[t] == m1.slot[t];
        gates_one &= m1.gate[t] == 1.0f;
        p_gates &= t1.gate[t] == t1.probs[t * E + t1.choice[t]] && t1.gate[t] < 1.0f;
    }
    EXPECT(same && gates_one && p_gates, "mixtral top-1: topk's choices with gate 1");
    done(&t2); done(&m2); done(&t1); done(&m1);
    free(lg);
}

int main(void) {
    case_mixtral();
    case_expert_choice();
    case_group_limited();
    case_bias();
    case_reductions();
    case_statistics();
    case_noisy_load();
    return test_exit("test_router_family");
}
