// test_router.c — routing cases worked out by hand: choice-major drops, ties to the lower
// expert, empty experts, gates (k = 1 raw, k = 2 renormalised), capacity per group, aux and
// z losses, and the dispatcher's row plan.
#include "core/alloc.h"
#include "moe/dispatcher.h"
#include "moe/router.h"
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "harness.h"


typedef struct {
    float probs[64], lse[16], gate[32], fcount[32];
    int choice[32], slot[32], kept[32], row[32];
    long rows[8], start[32];
    RouterStats st;
} Out;

static void route(Out *o, const float *logits, long N, RouterCfg c) {
    memset(o, 0, sizeof *o);
    memcpy(o->probs, logits, sizeof(float) * N * c.E);
    router_forward(o->probs, o->lse, o->choice, o->gate, o->slot, o->fcount, o->kept, N, &c, &o->st);
    dispatch_plan(o->row, o->rows, o->start, o->choice, o->slot, o->kept, N, c.k, &c, 1, 1);
}

static void case_choice_major_drops(void) {
    // 4 tokens, 2 experts, top-2, C = ceil(0.5·2·4/2) = 2. Preferences: t0,t1,t2 → e0 first; t3 → e1 first.
    // first choices in token order: t0→e0#0, t1→e0#1, t2→e0 full (drop), t3→e1#0
    // second choices:               t0→e1#1, t1→e1 full (drop), t2→e1 full (drop), t3→e0 full (drop)
    float lg[] = {2, 0, 1, 0, 3, 1, 0, 1};
    Out o;
    route(&o, lg, 4, RCFG(2, 2, 0.5f, 0, 4));
    int want_choice[] = {0, 1, 0, 1, 0, 1, 1, 0}, want_slot[] = {0, 1, 1, -1, -1, -1, 0, -1};
    EXPECT(!memcmp(o.choice, want_choice, sizeof want_choice), "choices differ");
    EXPECT(!memcmp(o.slot, want_slot, sizeof want_slot), "slots: got %d %d | %d %d | %d %d | %d %d", o.slot[0], o.slot[1],
           o.slot[2], o.slot[3], o.slot[4], o.slot[5], o.slot[6], o.slot[7]);
    EXPECT(o.st.dropped == 4 && o.st.choices == 8, "dropped %ld of %ld, want 4 of 8", o.st.dropped, o.st.choices);
    EXPECT(o.kept[0] == 2 && o.kept[1] == 2, "kept %d %d", o.kept[0], o.kept[1]);
    // f_e before dropping: e0 chosen 4 times, e1 4 times, of k·S = 8
    EXPECT(fabsf(o.fcount[0] - 0.5f) < 1e-7f && fabsf(o.fcount[1] - 0.5f) < 1e-7f, "f %g %g", o.fcount[0], o.fcount[1]);
    // rows: expert 0 holds t0, t1 (slots 0, 1); expert 1 holds t3, t0 (slots 0, 1)
    int want_row[] = {0, 3, 1, -1, -1, -1, 2, -1};
    EXPECT(!memcmp(o.row, want_row, sizeof want_row), "rows differ: %d %d %d %d %d %d %d %d", o.row[0], o.row[1], o.row[2],
           o.row[3], o.row[4], o.row[5], o.row[6], o.row[7]);
    // gates renormalised over the two chosen (before dropping): t0: p0/(p0+p1) = softmax
    double p0 = exp(2.0) / (exp(2.0) + 1.0);
    EXPECT(fabs(o.gate[0] - p0) < 1e-6 && fabs(o.gate[1] - (1 - p0)) < 1e-6, "t0 gates %g %g", o.gate[0], o.gate[1]);
}

static void case_ties(void) {
    // E = 3, top-2. t0: all equal → e0 then e1. t1: e1 = e2 > e0 → e1 then e2. t2: e0 < e2 = e1 … same.
    // t3: e2 top, e0 = e1 → e2 then e0.
    float lg[] = {1, 1, 1, 0, 2, 2, -1, 5, 5, 0, 0, 3};
    Out o;
    route(&o, lg, 4, RCFG(3, 2, 0.0f, 0, 4));
    int want[] = {0, 1, 1, 2, 1, 2, 2, 0};
    EXPECT(!memcmp(o.choice, want, sizeof want), "tie choices: %d %d | %d %d | %d %d | %d %d", o.choice[0], o.choice[1],
           o.choice[2], o.choice[3], o.choice[4], o.choice[5], o.choice[6], o.choice[7]);
    EXPECT(o.st.dropped == 0, "dropless dropped %ld", o.st.dropped);
    // top-1 tie goes to the lower index too, and its gate is the raw probability 1/3
    Out q;
    route(&q, lg, 1, RCFG(3, 1, 1.0f, 4, 1));
    EXPECT(q.choice[0] == 0 && fabsf(q.gate[0] - 1.0f / 3) < 1e-6f, "top-1 tie: expert %d gate %g", q.choice[0], q.gate[0]);
}

static void case_empty_experts(void) {
    // E = 4, top-1, everyone prefers e1: experts 0, 2, 3 receive nothing; C = max(4, ceil(1·1·6/4)) = 4
    float lg[24];
    for (int t = 0; t < 6; t++) { lg[t * 4] = 0; lg[t * 4 + 1] = 1; lg[t * 4 + 2] = -1; lg[t * 4 + 3] = 0.5f; }
    Out o;
    route(&o, lg, 6, RCFG(4, 1, 1.0f, 4, 6));
    EXPECT(o.kept[0] == 0 && o.kept[1] == 4 && o.kept[2] == 0 && o.kept[3] == 0, "kept %d %d %d %d", o.kept[0], o.kept[1],
           o.kept[2], o.kept[3]);
    EXPECT(o.st.dropped == 2 && o.slot[4] == -1 && o.slot[5] == -1, "t4, t5 dropped (got %d %d)", o.slot[4], o.slot[5]);
    // capacity mode: every expert has its C = 4 slots in the buffer, used or not; t0 sits in e1's first
    EXPECT(o.rows[0] == 4 && o.rows[1] == 4 && o.rows[2] == 4 && o.rows[3] == 4 && o.row[0] == 4,
           "capacity rows %ld %ld %ld %ld, t0 at %d", o.rows[0], o.rows[1], o.rows[2], o.rows[3], o.row[0]);
    // dropless: only kept rows, so the empty experts have none and e1 holds all six
    Out q;
    route(&q, lg, 6, RCFG(4, 1, 0.0f, 4, 6));
    EXPECT(q.rows[0] == 0 && q.rows[1] == 6 && q.rows[2] == 0 && q.rows[3] == 0 && q.row[5] == 5 && q.st.dropped == 0,
           "dropless rows %ld %ld %ld %ld", q.rows[0], q.rows[1], q.rows[2], q.rows[3]);
    // aux: f = (0, 1, 0, 0), P_1 = softmax(0,1,-1,.5)[1] → l_aux = 4·P_1
    double Z = exp(0) + exp(1) + exp(-1) + exp(0.5), P1 = exp(1) / Z;
    EXPECT(fabs(o.st.aux_sum - 4 * P1) < 1e-5, "aux %g, want %g", o.st.aux_sum, 4 * P1);
    // z-loss: Σ_t logsumexp² = 6·log(Z)²
    EXPECT(fabs(o.st.z_sum - 6 * log(Z) * log(Z)) < 1e-4, "z %g, want %g", o.st.z_sum, 6 * log(Z) * log(Z));
    // top-1 gate is p, not renormalised
    EXPECT(fabsf(o.gate[0] - (float)P1) < 1e-6f, "gate %g want %g", o.gate[0], P1);
}

static void case_groups(void) {
    // 2 groups of 3 tokens, E = 2, top-1, C = max(1, ceil(1·1·3/2)) = 2; all prefer e0:
    // per group t0, t1 kept, t2 dropped — the count restarts in the second group
    float lg[] = {1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0};
    Out o;
    route(&o, lg, 6, RCFG(2, 1, 1.0f, 1, 3));
    int want[] = {0, 1, -1, 0, 1, -1};
    EXPECT(!memcmp(o.slot, want, sizeof want), "group slots %d %d %d %d %d %d", o.slot[0], o.slot[1], o.slot[2], o.slot[3],
           o.slot[4], o.slot[5]);
    EXPECT(o.st.groups == 2, "groups %ld", o.st.groups);
    // rows: expert 0 = group 0 slots 0,1 then group 1 slots 0,1
    EXPECT(o.row[0] == 0 && o.row[1] == 1 && o.row[3] == 2 && o.row[4] == 3, "rows %d %d %d %d", o.row[0], o.row[1], o.row[3], o.row[4]);
    // a shorter last group (N = 5 with groups of 3): its capacity comes from S = 2
    Out q;
    route(&q, lg, 5, RCFG(2, 1, 1.0f, 1, 3));
    EXPECT(q.st.groups == 2 && q.slot[3] == 0 && q.slot[4] == -1, "short group: slots %d %d", q.slot[3], q.slot[4]);
}

static void case_capacity(void) {
    RouterCfg c = RCFG(8, 2, 1.0f, 4, 256);
    EXPECT(router_capacity(&c, 256) == 64, "C(256) = %d, want 64", router_capacity(&c, 256));
    c.capacity_factor = 1.25f;
    EXPECT(router_capacity(&c, 256) == 80, "cf 1.25: %d, want 80", router_capacity(&c, 256));
    c.capacity_factor = 1.0f; c.k = 1;
    EXPECT(router_capacity(&c, 8) == 4, "min_capacity: %d, want 4", router_capacity(&c, 8));
    EXPECT(router_capacity(&c, 2) == 2, "C <= S: %d, want 2", router_capacity(&c, 2));
    c.capacity_factor = 0;
    EXPECT(router_capacity(&c, 100) == 100, "dropless: %d", router_capacity(&c, 100));
    c = RCFG(4, 2, 1.1f, 0, 20);
    EXPECT(router_capacity(&c, 20) == 11, "1.1·2·20/4 = 11 exactly, got %d", router_capacity(&c, 20));
    c = RCFG(3, 2, 1.0f, 0, 10);
    EXPECT(router_capacity(&c, 10) == 7, "ceil(20/3) = %d, want 7", router_capacity(&c, 10));
}

int main(void) {
    case_choice_major_drops();
    case_ties();
    case_empty_experts();
    case_groups();
    case_capacity();
    return test_exit("test_router");
}
