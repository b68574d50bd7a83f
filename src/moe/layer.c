// layer.c — the MoE layer of a block: router → plan → dispatch → experts → combine (see layer.h).
// Tensor- and expert-parallel collectives sit where design §4 puts them; on one process they act
// on groups of size 1.
#include "moe/layer.h"
#include "core/alloc.h"
#include "moe/chunked.h"
#include "moe/gating.h"
#include "nn/ops.h"
#include "nn/sigmoid_gate.h"
#include <stdlib.h>
#include <string.h>

// A --bf16 GPU run's GELU experts (d even, no chunked exchange: its pieces sit at fp32 offsets)
// keep what they exchange in bf16 (rows of d/2 floats to the exchange, half the bytes):
// - rows16: ln2, their input rows and their output gradients, read only as bf16 GEMM operands: ln2
//   arrives in bf16 alone (the router's GEMMs read it so), the dispatch copies its rows, the
//   combine's backward writes dy in bf16, xexp keeps half. The same bits as fp32 and the casts at
//   the GEMMs, which TED_MOE_ROWS16=0 keeps (test_cuda_emu compares). Not where other readers take
//   ln2 in fp32 (shared experts, the switch router's jitter, noisy top-k: all CPU-only for now);
// - out16: what they send back, written in bf16 by their GEMMs, summed over TP (fp32 sums of bf16
//   parts) and carried back so: their outputs y (the combine adds each token's k rows in fp32) and
//   their input gradient (the dispatch's backward likewise): a rounding of each where the fp32 path
//   has none.
static void bf16_exchange(MoeLayer *L, const Config *cfg) {
    const char *e = getenv("TED_MOE_ROWS16");
    int gpu16 = cfg->device == DEV_CUDA && cfg->bf16 && L->kind == &expert_gelu && L->d % 2 == 0 && !moe_overlap_on(L);
    L->rows16 = gpu16 && L->m->router == ROUTER_TOPK && L->fsl == 0 && !(e && !strcmp(e, "0"));
    L->out16 = gpu16;
}

void moe_layer_init(MoeLayer *L, const Config *cfg, const Topology *topo, long N, int T) {
    const ModelConfig *m = &cfg->model;
    L->m = m;
    L->d = m->n_embd;
    L->E = m->num_experts > 1 ? m->num_experts : 1;
    L->El = L->E / topo->ep;
    L->k = m->num_experts > 1 ? (m->router == ROUTER_EXPERT_CHOICE ? L->E : m->top_k) : 1;   // choice columns
    L->kind = expert_kind_of(m);
    L->fel = cfg_expert_inner(m) / topo->tp;
    L->fsl = m->num_experts > 1 ? m->shared_experts * cfg_expert_inner(m) / topo->tp : 0;
    L->llama = cfg_is_llama(m);
    L->tp = (Group *)&topo->g[GROUP_TP];
    L->ep = (Group *)&topo->g[GROUP_EP];
    L->dtd = cfg->dtd && topo->tp > 1;   // tp 1: nothing to drop
    L->cac = cfg->activation_checkpointing && cfg->cac;
    L->overlap = cfg->overlap_degree;
    L->progress_thread = cfg->progress_thread;
    L->seed = cfg->seed;
    L->rng_step = -1;
    RouterCfg *rc = &L->rcfg;
    *rc = RCFG(L->E, L->k, m->capacity_factor, m->min_capacity, m->group_size * T);
    rc->kind = m->router; rc->use_rts = m->use_rts; rc->no_renorm = !m->topk_renorm;
    rc->num_groups = m->num_groups; rc->topk_groups = m->topk_groups;
    rc->importance_coef = m->importance_coef; rc->load_coef = m->load_coef;
    // expert buffer rows: token side (this rank's choices), expert side (what its experts receive)
    if (m->capacity_factor > 0) {
        long per_expert = 0;
        for (long t0 = 0; t0 < N; t0 += rc->group_tokens)
            per_expert += router_capacity(rc, N - t0 < rc->group_tokens ? N - t0 : rc->group_tokens);
        per_expert = (per_expert + topo->tp - 1) / topo->tp * topo->tp;   // DTD splits it over TP
        L->Rs = L->Rr = per_expert * L->E;      // E·C slots per group, every rank the same
    } else {
        L->Rs = N * L->k + (long)L->E * topo->tp;
        L->Rr = L->Rs * topo->ep;               // at worst every rank's choices land here
    }
    bf16_exchange(L, cfg);
}

static Exchange exchange_of(MoeLayer *L, MoeActs *x) {
    return (Exchange){L->ep, L->tp, L->dtd, L->E, L->El, x->scnt, x->rcnt, x->exp_off, 0, 0};
}

Exchange moe_exchange_done(MoeLayer *L, MoeActs *x) {
    Exchange ex = exchange_of(L, x);
    ex.Rs = 0; ex.Rr = x->exp_off[L->El];
    for (int e = 0; e < L->E; e++) ex.Rs += x->exp_rows[e];
    return ex;
}

// anything travels: one EP rank without DTD keeps the token and expert sides as one buffer
int moe_overlap_on(const MoeLayer *L) { return L->overlap > 1 && !(L->ep->size == 1 && !L->dtd); }

static int tp0(const MoeLayer *L) { return L->tp->rank == 0; }

// ---------------------------------------------------------------------------------------
// the shared expert (docs/config.md, Routers and experts)

// An always-on FFN of the experts' kind, TP-split like a dense FFN, optionally scaled by
// sigmoid(ln2·w) (shared_expert_gate); its TP-summed output is left in L->tmp (the first pass
// only: a recompute needs h, hg, and with the gate the ungated output x->sh_y, which the
// gate's backward reads).
static void shared_forward(MoeLayer *L, const MoeWeights *w, MoeActs *x, const float *ln2, long N, int recompute) {
    long off[2] = {0, N};
    experts_forward(&w->shared, x->sh_h, x->sh_hg, L->tmp, ln2, off, tp0(L));
    if (recompute && !w->shg) return;
    comm_allreduce(L->tp, L->tmp, N * L->d, DT_F32);
    if (!w->shg) return;
    buf_copy(x->sh_y, L->tmp, sizeof(float) * N * L->d);
    if (!recompute) sigmoid_gate_forward(L->tmp, ln2, w->shg, N, L->d);
}

// With the gate: L->dgate = the gate logit's gradient, L->tmp = sigmoid·dres (the shared expert's
// output gradient), the backward through the expert, then the gate's share of d(ln2) and its weight's gradient.
static void shared_backward(MoeLayer *L, const MoeWeights *w, MoeActs *x, const float *ln2, const float *dres,
                            float *dln, long N) {
    long off[2] = {0, N};
    if (w->shg) {
        rows_dot(L->dgate, dres, x->sh_y, N, L->d);
        sigmoid_gate_backward_y(L->tmp, L->dgate, dres, ln2, w->shg, N, L->d);
    }
    experts_backward(&w->shared, L->tmp, L->dbig, w->shg ? L->tmp : dres, ln2, x->sh_h, x->sh_hg, off, 1);
    comm_allreduce(L->tp, L->tmp, N * L->d, DT_F32);   // sum of the hidden shards
    if (w->shg) sigmoid_gate_backward_x(L->tmp, w->gshg, L->dgate, ln2, w->shg, N, L->d);
    residual_forward(dln, dln, L->tmp, N * L->d);
}

// ---------------------------------------------------------------------------------------
// the exchange in chunks (moe.overlap_degree, docs/overlap.md)

// The work on one chunk of the expert side: rows [r0, r0 + off[El]), expert offsets off.
typedef void (*ChunkWork)(MoeLayer *L, MoeActs *x, const Experts *e, long r0, const long *off, float *out);

static void chunk_forward(MoeLayer *L, MoeActs *x, const Experts *e, long r0, const long *off, float *y) {
    long f = L->fel, mult = L->kind->hidden_mult, d = L->d;
    experts_forward(e, x->h + r0 * f * mult, x->hg + r0 * f, y + r0 * d, x->xexp + r0 * d, off, tp0(L));
}

static void chunk_backward(MoeLayer *L, MoeActs *x, const Experts *e, long r0, const long *off, float *dexp) {
    long f = L->fel, mult = L->kind->hidden_mult, d = L->d;
    float *g = dexp + r0 * d;   // d y in, d xexp out
    experts_backward(e, g, L->dbig, g, x->xexp + r0 * d, x->h + r0 * f * mult, x->hg + r0 * f, off, 1);
}

typedef struct { MoeLayer *L; MoeActs *x; const Experts *e; float *out; ChunkWork work; } ChunkCtx;
static void chunk_work(void *ctx, long r0, const long *off) {
    ChunkCtx *k = ctx;
    k->work(k->L, k->x, k->e, r0, off, k->out);
}

// tok_in → experts (exp_in) → work → exp_out → tok_out in chunks, the exchange (with DTD the TP sum
// of the expert outputs inside it) travelling behind other chunks' experts (moe/chunked.c). Without
// DTD tok_out holds this TP rank's f shard: the caller sums it over TP once, on the token side.
static void moe_chunked(MoeLayer *L, MoeActs *x, Exchange *ex, const Experts *e, const float *tok_in, float *exp_in,
                        float *exp_out, float *tok_out, ChunkWork work) {
    Chunked c = chunked_make(ex, L->overlap, L->d, L->a2a_buf);
    c.thread = L->progress_thread;
    ChunkCtx k = {L, x, e, exp_out, work};
    chunked_run(&c, tok_in, exp_in, exp_out, tok_out, chunk_work, &k);
}

// CAC's recompute over the chunk-major expert side: the experts again, nothing travels.
static void moe_chunked_recompute(MoeLayer *L, MoeActs *x, Exchange *ex, const Experts *e) {
    Chunked c = chunked_make(ex, L->overlap, L->d, L->a2a_buf);
    long off[L->El + 1];
    for (int i = 0; i < c.n; i++) {
        long r0 = chunked_rows(&c, i, off);
        chunk_forward(L, x, e, r0, off, L->exp_buf);
    }
}

// ---------------------------------------------------------------------------------------
// forward and backward

// The dispatch plan: fixed E·C-slot buffers only when an all-to-all carries them; one EP rank
// keeps just the kept rows. On a GPU it is made on the device, and the host reads back the
// expert counts (with the router's statistics) once: the block's one synchronisation.
static void plan(MoeLayer *L, MoeActs *x, long N) {
    dispatch_plan(x->row, x->exp_rows, x->start, x->choice, x->slot, x->kept, N, L->k, &L->rcfg, L->ep->size > 1,
                  L->dtd ? L->tp->size : 1);
}

// MoE FFN (design §4): router → dispatch → all-to-all (EP) → expert shards → all-reduce (TP)
// → all-to-all back → combine. With one EP rank the token and expert sides are the same buffer.
void moe_layer_forward(MoeLayer *L, const MoeWeights *w, MoeActs *x, const float *ln2, const float *mid, float *out,
                       long N, int recompute) {
    int d = L->d, k = L->k, reuse = recompute && L->cac, dtd = L->dtd;
    int alias = L->ep->size == 1 && !dtd;   // token side = expert side: nothing moves
    if (w->shared.El) shared_forward(L, w, x, ln2, N, recompute);   // into L->tmp, summed over TP
    gating_forward(L, w, x, ln2, N, recompute);  // router logits (fp32) and choices
    plan(L, x, N);
    gating_summary(L, w, N, recompute);          // a GPU's statistics, back with the plan
    if (reuse) {   // the stashed expert input and output; h and hg are recomputed for the backward
        Exchange ex = moe_exchange_done(L, x);
        if (moe_overlap_on(L)) moe_chunked_recompute(L, x, &ex, &w->experts);
        else experts_forward(&w->experts, x->h, x->hg, L->exp_buf, x->xexp, x->exp_off, 0);
        return;
    }
    Exchange ex = exchange_of(L, x);
    exchange_plan(&ex, x->exp_rows, L->rcfg.capacity_factor > 0 && !L->uneven);
    float *tok = alias ? x->xexp : L->tok_buf;
    if (!alias) buf_zero(tok, sizeof(float) * ex.Rs * d);      // unused capacity slots are zero
    dispatch_forward(tok, ln2, x->row, N, k, d, L->rows16);
    float *y = alias ? x->ysend : L->exp_buf;
    if (moe_overlap_on(L)) {
        moe_chunked(L, x, &ex, &w->experts, tok, x->xexp, y, x->ysend, chunk_forward);
        if (!dtd) comm_allreduce(L->tp, x->ysend, ex.Rs * d, DT_F32);   // sum of the f shards, once
    } else {
        exchange_to_experts(&ex, tok, L->a2a_buf, x->xexp, L->rows16 ? d / 2 : d);   // bf16 rows: d/2 floats
        experts_forward(&w->experts, x->h, x->hg, y, x->xexp, x->exp_off, tp0(L));
        DType t = L->out16 ? DT_BF16 : DT_F32;   // out16: y in bf16, summed and carried so
        if (!dtd) comm_allreduce(L->tp, y, ex.Rr * d, t);   // sum of the f shards (DTD: reduce-scatter)
        exchange_to_tokens(&ex, y, L->a2a_buf, x->ysend, L->out16 ? d / 2 : d, t);
    }
    if (recompute) return;
    buf_copy(out, mid, sizeof(float) * N * d);
    combine_forward(out, x->ysend, x->gate, x->row, N, k, d, L->out16);
    if (w->shared.El) residual_forward(out, out, L->tmp, N * d);
}

void moe_layer_backward(MoeLayer *L, const MoeWeights *w, MoeActs *x, const float *ln2, const float *dres,
                        float *dln, long N, float lm_scale, float aux_scale, float z_scale) {
    int d = L->d, k = L->k, dtd = L->dtd, alias = L->ep->size == 1 && !dtd;
    Exchange ex = moe_exchange_done(L, x);
    float *dtok = L->tok_buf, *dexp = alias ? L->tok_buf : L->exp_buf;
    buf_zero(dtok, sizeof(float) * ex.Rs * d);                 // unused slots get no gradient
    combine_backward(dtok, L->dgate, dres, x->ysend, x->gate, x->row, N, k, d, L->rows16, L->out16);
    if (moe_overlap_on(L)) moe_chunked(L, x, &ex, &w->experts, dtok, dexp, dexp, dtok, chunk_backward);
    else {
        exchange_to_experts(&ex, dtok, L->a2a_buf, dexp, L->rows16 ? d / 2 : d);
        // dexp (d y) in, d xexp out: the expert-side gradient reuses the same buffer
        experts_backward(&w->experts, dexp, L->dbig, dexp, x->xexp, x->h, x->hg, x->exp_off, 1);
        DType t = L->out16 ? DT_BF16 : DT_F32;   // out16: d xexp in bf16, summed and carried so
        if (!dtd) comm_allreduce(L->tp, dexp, ex.Rr * d, t);   // mirrors the forward: sum of the f shards
        exchange_to_tokens(&ex, dexp, L->a2a_buf, dtok, L->out16 ? d / 2 : d, t);
    }
    buf_zero(dln, sizeof(float) * N * d);
    dispatch_backward(dln, dtok, x->row, N, k, d, L->out16);
    if (moe_overlap_on(L) && !dtd) comm_allreduce(L->tp, dln, N * d, DT_F32);   // the chunks' f shards, summed once
    gating_backward(L, w, x, ln2, dln, N, lm_scale, aux_scale, z_scale);
    if (w->shared.El) shared_backward(L, w, x, ln2, dres, dln, N);
}
