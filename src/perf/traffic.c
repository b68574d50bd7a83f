// traffic.c — one step's collectives by formula (see traffic.h).
#include "perf/traffic.h"
#include "model/model.h"
#include "moe/experts.h"
#include "moe/router.h"
#include <math.h>
#include <string.h>

void traffic_stage_blocks(int L, int pp, int s, int *l0, int *l1) {
    int base = L / pp, extra = L % pp;
    *l0 = s * base + (s < extra ? s : extra);
    *l1 = *l0 + base + (s < extra);
}

void traffic_expert_rows(const ModelConfig *m, const Layout *y, int T, double *Rs, double *Rr) {
    double N = (double)y->micro_batch * T, S = (double)m->group_size * T, groups = ceil(N / S);
    double k = m->router == ROUTER_EXPERT_CHOICE ? m->capacity_factor : m->top_k, E = m->num_experts;
    if (m->capacity_factor > 0 && m->router != ROUTER_EXPERT_CHOICE) {
        double C = fmax(m->min_capacity, ceil(m->capacity_factor * m->top_k * S / E));
        *Rs = E * fmin(C, S) * groups;
    } else if (m->router == ROUTER_EXPERT_CHOICE) {
        double C = fmin(S, fmax(m->min_capacity, ceil(m->capacity_factor * S / E)));
        *Rs = E * C * groups;
    } else *Rs = N * k;
    *Rr = *Rs;
}

static void add(Traffic *t, int c, int g, double calls, double bytes) {
    t->f[c][g].calls += calls;
    t->f[c][g].bytes += bytes;
}

// The tensor-parallel and expert-parallel traffic of one micro-step on stage s.
static void micro_step(Traffic *t, const ModelConfig *m, int T, const Layout *y, int s, double A) {
    int l0, l1, last = s == y->pp - 1, d = m->n_embd, recomm = y->ckpt && !y->cac;
    traffic_stage_blocks(m->n_layer, y->pp, s, &l0, &l1);
    double N = (double)y->micro_batch * T, Rs, Rr, tpc = y->tp > 1, epc = y->ep > 1, dtd = y->dtd && y->tp > 1;
    traffic_expert_rows(m, y, T, &Rs, &Rr);
    double ar = 0, arb = 0;   // TP all-reduces: calls, floats
    if (s == 0) { ar += 1; arb += N * d; }                          // vocab-parallel embedding
    if (last) { ar += 4; arb += 3 * N + N * d; }                     // cross-entropy 3, LM head backward 1
    for (int l = l0; l < l1; l++) {
        int moe = cfg_is_moe(m, l), passes = 2 + recomm;             // forward, backward, recompute
        ar += passes; arb += passes * N * d;                         // attention output / input
        if (!moe) { ar += passes; arb += passes * N * d; continue; }
        if (m->shared_experts > 0) { ar += 2; arb += 2 * N * d; }    // shared expert (not recomputed)
        double a2a = dtd ? Rs / y->tp : Rs;
        double N_ = y->overlap_degree > 1 && (y->ep > 1 || dtd) ? y->overlap_degree : 1;   // moe.overlap_degree's chunks
        add(t, COLL_ALLTOALL, GROUP_EP, A * epc * 2 * passes * N_, A * epc * 2 * passes * 4 * a2a * d);
        if (dtd) {   // the expert rows gathered inside TP, their output reduce-scattered (forward and backward)
            add(t, COLL_ALLGATHER, GROUP_TP, A * tpc * 2 * passes * N_, A * tpc * 2 * passes * 4 * Rr / y->tp * d);
            add(t, COLL_REDUCE_SCATTER, GROUP_TP, A * tpc * passes * N_, A * tpc * passes * 4 * Rr * d);
        } else if (N_ > 1) {   // chunked: summed once per pass on the token side (rows; the backward per token)
            ar += passes; arb += (passes - 1) * Rs * d + N * d;
        } else { ar += passes; arb += passes * Rr * d; }   // the experts' output, summed on the expert side
    }
    add(t, COLL_ALLREDUCE, GROUP_TP, A * tpc * ar, A * tpc * 4 * arb);
    if (y->pp > 1) {   // activations forward and gradients back, one message each per boundary
        double msgs = (s > 0) + (s < y->pp - 1), wb = y->wbytes == 2 ? 2 : 4;
        add(t, COLL_SENDRECV, GROUP_PP, A * msgs, A * msgs * wb * N * d);
    }
}

// Elements of this stage's tensors on a rank: non-expert (synchronised over DP) and expert
// (over expert-DP), and how many tensors each.
static void stage_params(const ModelConfig *m, const Layout *y, int s, double *ne, double *ex, double *nt, double *et) {
    int l0, l1, last = s == y->pp - 1;
    traffic_stage_blocks(m->n_layer, y->pp, s, &l0, &l1);
    double d = m->n_embd, f = cfg_ffn(m), tp = y->tp, E = m->num_experts;
    double Vp = ceil(m->vocab_size / (128.0 * tp)) * 128 * tp;
    const ExpertKind *k = expert_kind(m->expert_type);
    double fe = cfg_expert_inner(m), one = 0;
    for (int i = 0; i < k->ntensors; i++) {
        const ExpertTensor *x = &k->tensors[i];
        double n = (double)expert_tensor_rows(x, d, fe) * expert_tensor_cols(x, d, fe);
        one += x->split_dim >= 0 ? n / tp : n;
    }
    *ne = *ex = *nt = *et = 0;
    if (s == 0) { *ne += Vp * d / tp + (double)m->n_positions * d; *nt += 2; }
    if (last) { *ne += 2 * d + (y->pp > 1 ? Vp * d / tp : 0); *nt += 2 + (y->pp > 1); }
    for (int l = l0; l < l1; l++) {
        *ne += 4 * d + (3 * d * d + 3 * d) / tp + d * d / tp + d;
        *nt += 8;
        if (!cfg_is_moe(m, l)) { *ne += (2 * d * f + f) / tp + d; *nt += 4; continue; }
        *ne += d * E * (m->router == ROUTER_NOISY_TOPK ? 2 : 1) + (m->bias_update_rate > 0 ? E : 0);
        *nt += 1 + (m->router == ROUTER_NOISY_TOPK) + (m->bias_update_rate > 0);
        *ex += E / y->ep * one;
        *et += E / y->ep * k->ntensors;
        if (m->shared_experts > 0) { *ne += one * m->shared_experts; *nt += k->ntensors; }
    }
}

// ZeRO's traffic of one step on group g of size n: elements el in nt tensors.
static void zero_traffic(Traffic *t, const Layout *y, int g, double n, double el, double nt) {
    if (n <= 1 || el <= 0) return;
    double wb = y->wbytes, chunk = el / n;
    if (y->zero == 0) { add(t, COLL_ALLREDUCE, g, nt, wb * el); return; }
    double rs = y->zero == 2 ? y->accum : 1;   // stage 2 reduces every micro-step's bucket
    add(t, COLL_REDUCE_SCATTER, g, rs * nt, rs * wb * chunk * n);
    add(t, COLL_ALLGATHER, g, nt, wb * chunk);
}

// Once a step: the loss sums (6 doubles) over DP and the stages, each MoE block's expert loads
// (2E + 2 doubles) over DP and every MoE block's log (3 doubles) over the stages, the tied wte's gradient between the first and the last stage, and
// the gradient norm over the world.
static void step_sums(Traffic *t, const ModelConfig *m, const Layout *y, int s) {
    int l0, l1, nmoe = 0;
    traffic_stage_blocks(m->n_layer, y->pp, s, &l0, &l1);
    for (int l = l0; l < l1; l++) nmoe += cfg_is_moe(m, l);
    if (y->dp > 1) add(t, COLL_ALLREDUCE, GROUP_DP, 1 + (nmoe > 0), 48 + 8.0 * nmoe * (2 * m->num_experts + 2));
    if (y->pp > 1) add(t, COLL_ALLREDUCE, GROUP_PP, 1, 48);
    int nall = 0;   // every block's load log (3 doubles) gathered over the stages
    for (int l = 0; m->num_experts > 1 && l < m->n_layer; l++) nall += cfg_is_moe(m, l);
    if (y->pp > 1 && nall) add(t, COLL_ALLREDUCE, GROUP_PP, 1, 24.0 * nall);
    if (y->pp > 1 && (s == 0 || s == y->pp - 1)) {
        double Vp = ceil(m->vocab_size / (128.0 * y->tp)) * 128 * y->tp;
        add(t, COLL_SENDRECV, GROUP_PP, 1, y->wbytes * Vp * m->n_embd / y->tp);
    }
    if (y->pp * y->tp * y->dp > 1) add(t, COLL_ALLREDUCE, GROUP_WORLD, 1, 8);
}

void traffic_of(Traffic *t, const ModelConfig *m, int T, const Layout *y, int stage) {
    memset(t, 0, sizeof *t);
    micro_step(t, m, T, y, stage, y->accum);
    double ne, ex, nt, et, edp = y->dp / y->ep;
    stage_params(m, y, stage, &ne, &ex, &nt, &et);
    zero_traffic(t, y, GROUP_DP, y->dp, ne, nt);
    zero_traffic(t, y, GROUP_EDP, edp, ex, et);
    step_sums(t, m, y, stage);
}
