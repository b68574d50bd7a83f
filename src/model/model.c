// model.c — GPT/MoE forward and backward on one rank (see model.h). Tensor-parallel
// all-reduces sit where design §4 puts them; on one process they act on groups of size 1.
#include "model/model.h"
#include "core/alloc.h"
#include "parallel/comm.h"
#include "moe/chunked.h"
#include "moe/experts.h"
#include "core/half.h"
#include "nn/ops.h"
#include "nn/linear.h"
#include "moe/layer.h"
#include "moe/gating.h"
#include "nn/gemm.h"
#include "model/llama.h"
#include "nn/rmsnorm.h"
#include "parallel/schedule.h"
#include "nn/sparse_attention.h"
#include "core/util.h"
#include "core/watchdog.h"
#include <math.h>
#include <omp.h>
#include <string.h>

// ---------------------------------------------------------------------------------------
// parameters

// The tensors of block l (the pipeline stage runs it): registry range [p0, p1).
static void add_block(Model *M, int l) {
    const ModelConfig *m = &M->m;
    int d = M->d, f = M->f, E = M->E, L = M->L;
    float std = 0.02f, pstd = 0.02f / sqrtf(2.0f * L);
    Registry *r = &M->reg;
    BlockParams *b = &M->bp[l];
    char n[96];
    b->held = 1;
    b->p0 = r->n;
    b->kb = b->vb = b->shg = -1;
#define NAME(fmt, ...) (snprintf(n, sizeof n, "transformer.h.%d." fmt, l, ##__VA_ARGS__), n)
    b->ln1w = reg_add(r, NAME("ln_1.weight"), 1, d, 1, -1, 1, TAG_DP, 0, 1);
    b->ln1b = reg_add(r, NAME("ln_1.bias"), 1, d, 1, -1, 1, TAG_DP, 0, 0);
    b->qkvw = reg_add(r, NAME("attn.c_attn.weight"), 2, d, 3 * d, 1, 3, TAG_DP, std, 0);
    b->qkvb = reg_add(r, NAME("attn.c_attn.bias"), 1, 3 * d, 1, 0, 3, TAG_DP, 0, 0);
    b->projw = reg_add(r, NAME("attn.c_proj.weight"), 2, d, d, 0, 1, TAG_DP, pstd, 0);
    b->projb = reg_add(r, NAME("attn.c_proj.bias"), 1, d, 1, -1, 1, TAG_DP, 0, 0);
    b->ln2w = reg_add(r, NAME("ln_2.weight"), 1, d, 1, -1, 1, TAG_DP, 0, 1);
    b->ln2b = reg_add(r, NAME("ln_2.bias"), 1, d, 1, -1, 1, TAG_DP, 0, 0);
    b->moe = cfg_is_moe(m, l);
    if (!b->moe) {
        b->fcw = reg_add(r, NAME("mlp.c_fc.weight"), 2, d, f, 1, 1, TAG_DP, std, 0);
        b->fcb = reg_add(r, NAME("mlp.c_fc.bias"), 1, f, 1, 0, 1, TAG_DP, 0, 0);
        b->fcprojw = reg_add(r, NAME("mlp.c_proj.weight"), 2, f, d, 0, 1, TAG_DP, pstd, 0);
        b->fcprojb = reg_add(r, NAME("mlp.c_proj.bias"), 1, d, 1, -1, 1, TAG_DP, 0, 0);
        b->p1 = r->n;
        return;
    }
    b->router = reg_add(r, NAME("mlp.router.weight"), 2, d, E, -1, 1, TAG_DP, std, 0);
    b->noise = m->router == ROUTER_NOISY_TOPK ? reg_add(r, NAME("mlp.router.noise_weight"), 2, d, E, -1, 1, TAG_DP, 0, 0) : -1;
    // not trained (zero gradient, no decay): moe/gating.c steps it after each optimizer step
    b->bias = m->bias_update_rate > 0 ? reg_add(r, NAME("mlp.router.expert_bias"), 1, E, 1, -1, 1, TAG_DP, 0, 0) : -1;
    // the local experts' tensors, each contiguous over the experts (one batched pass)
    char blk[64];
    snprintf(blk, sizeof blk, "transformer.h.%d.mlp", l);
    experts_register(r, M->kind, blk, M->topo->ep_idx * M->El, M->El, 0, d, M->fe, std, pstd, b->et);
    if (M->fs) experts_register(r, M->kind, blk, 0, 1, 1, d, M->fs, std, pstd, b->sh);
    else for (int s = 0; s < 4; s++) b->sh[s] = -1;
    if (M->fs && m->shared_expert_gate) b->shg = reg_add(r, NAME("mlp.shared_expert_gate.weight"), 2, 1, d, -1, 1, TAG_DP, std, 0);
#undef NAME
    b->p1 = r->n;
}

// The head of the last chunk: the final norm, and llama's untied lm_head [Vp, d] (vocab-parallel like wte).
static void add_head(Model *M) {
    Registry *r = &M->reg;
    int d = M->d;
    if (M->llama) M->lnfw = reg_add(r, "model.norm.weight", 1, d, 1, -1, 1, TAG_DP, 0, 1);
    else {
        M->lnfw = reg_add(r, "transformer.ln_f.weight", 1, d, 1, -1, 1, TAG_DP, 0, 1);
        M->lnfb = reg_add(r, "transformer.ln_f.bias", 1, d, 1, -1, 1, TAG_DP, 0, 0);
    }
    M->lmh = M->wte;
    if (M->m.tie_word_embeddings) return;
    M->lmh = reg_add(r, "lm_head.weight", 2, M->Vp, d, 0, 1, TAG_DP, 0.02f, 0);
    r->p[M->lmh].save_rows = M->V;
}

// The tensors this rank holds: its chunks' blocks, the embedding with chunk 0, ln_f with the last
// chunk, and the tied wte with either (both stages hold it when they differ). Registered only:
// alloc_params allocates them.
static void add_params(Model *M) {
    int d = M->d, E = M->E, L = M->L;
    float std = 0.02f;
    int cap = 4 + L * (10 + 3 + 4 * (E > 1 ? E : 1) + 4);
    Registry *r = &M->reg;
    reg_init(r, cap, M->topo->tp, M->topo->tp_idx);
    M->wte = M->wpe = M->lnfw = M->lnfb = M->lmh = -1;
    int tied = M->m.tie_word_embeddings;
    // vocab-parallel: padded to Vp rows, split over TP; the padding rows stay zero
    if (M->has_embed || (M->has_head && tied)) {
        M->wte = reg_add(r, M->llama ? "model.embed_tokens.weight" : "transformer.wte.weight", 2, M->Vp, d, 0, 1, TAG_DP, std, 0);
        r->p[M->wte].save_rows = M->V;
        r->p[M->wte].tied_copy = !M->has_embed;   // the last stage's copy: counted once, saved once
    }
    if (M->has_embed && !M->llama) M->wpe = reg_add(r, "transformer.wpe.weight", 2, M->m.n_positions, d, -1, 1, TAG_DP, std, 0);
    for (int i = 0; i < M->nch; i++)
        for (int l = M->ch_l0[i]; l < M->ch_l1[i]; l++) (M->llama ? llama_add_block : add_block)(M, l);
    if (M->has_head) add_head(M);
    r->grads_external = M->cfg.zero_stage == 2;   // the optimizer's buckets hold the gradients
}

// Allocates the registered tensors and initialises them.
static void alloc_params(Model *M) {
    Registry *r = &M->reg;
    int d = M->d;
    reg_alloc(r, r->half, r->ghalf);
    reg_host_view(r, 0);   // initialised on the host, then uploaded (a GPU run)
    reg_init_weights(r, M->cfg.seed);
    int vocab[2] = {M->wte, M->lmh};
    for (int k = 0; k < 2; k++) {   // zero the padding rows (never indexed, never a gradient)
        if (vocab[k] < 0 || (k == 1 && M->lmh == M->wte)) continue;
        Param *wte = &r->p[vocab[k]];
        for (long i = 0; i < wte->numel; i++)
            if (param_full_index(r, wte, i) / d >= M->V) {
                if (r->half) wte->w16[i] = 0;
                else wte->w[i] = 0;
            }
    }
    reg_device_view(r, 1);
}

// ---------------------------------------------------------------------------------------
// 16-bit storage on the CPU (--bf16 / --fp16; fp16 on a GPU too): weights and gradients live
// in 16 bits; the ops compute in fp32. A stage's weights are up-cast into an fp32 buffer while
// it runs and its fp32 gradients are folded back into the 16-bit store after its backward.
// Stage 0 is the head (wte, wpe, ln_f: used at both ends), stage l+1 is block l, whose tensors
// are contiguous in the registry. With fp32 gradients (fp32 storage, or a GPU --bf16 run whose
// ops read the bf16 weights themselves) there is nothing to stage and this does nothing.

// The registry indices of stage s: idx[0..n) — the head's (up to five), or a block's contiguous range
// (returned as first index with n; idx unused).
static int stage_params(const Model *M, int s, int idx[5], int *first) {
    if (s == 0) {   // those of the head this pipeline stage holds
        int all[5] = {M->wte, M->wpe, M->lnfw, M->lnfb, M->lmh != M->wte ? M->lmh : -1}, n = 0;
        for (int k = 0; k < 5; k++) if (all[k] >= 0) idx[n++] = all[k];
        *first = -1;
        return n;
    }
    *first = M->bp[s - 1].p0;
    return M->bp[s - 1].p1 - *first;
}
#define STAGE_PARAM(k) (first < 0 ? idx[k] : first + (k))

// Points the stage's params at fp32 copies of their 16-bit weights; zeroes the fp32 gradients
// when `grads` (a backward follows).
static void stage_in(Model *M, int s, int grads) {
    Registry *r = &M->reg;
    if (!r->ghalf) return;
    int idx[5] = {0}, first, n = stage_params(M, s, idx, &first);
    float *w = s ? M->stage_w : M->head_w, *g = s ? M->stage_g : M->head_g;
    for (int k = 0; k < n; k++) {
        Param *p = &r->p[STAGE_PARAM(k)];
        p->w = w; p->g = g;
        convert_to_f32(p->w, p->w16, p->numel, r->half);
        if (grads) buf_zero(p->g, sizeof(float) * p->numel);
        w += p->numel; g += p->numel;
    }
}

// Adds the stage's fp32 gradients into the 16-bit gradient store.
static void stage_out(Model *M, int s) {
    Registry *r = &M->reg;
    if (!r->ghalf) return;
    int idx[5] = {0}, first, n = stage_params(M, s, idx, &first);
    for (int k = 0; k < n; k++) {
        Param *p = &r->p[STAGE_PARAM(k)];
        accumulate_half(p->g16, p->g, p->numel, r->half);
    }
}

static long stage_numel(const Model *M, int s) {
    int idx[5] = {0}, first, n = stage_params(M, s, idx, &first);
    long t = 0;
    for (int k = 0; k < n; k++) t += M->reg.p[STAGE_PARAM(k)].numel;
    return t;
}

#define W(i) reg_op_weights(&M->reg, i)   // the weights the ops read (params.h)
#define G(i) (M->reg.p[i].g)

// The experts of a block (first[] = b->et, El local ones of hidden share fel) or its shared
// expert (first[] = b->sh, one of hidden share fsl); rows16: their input rows and output
// gradients are bf16; out16: their outputs and input gradients are written so.
static Experts experts_of(Model *M, const int first[4], int El, int f, int rows16, int out16) {
#define WS(s) (first[s] >= 0 ? W(first[s]) : NULL)
#define GS(s) (first[s] >= 0 ? G(first[s]) : NULL)
    return (Experts){El, M->d, f, WS(0), WS(1), WS(2), WS(3), GS(0), GS(1), GS(2), GS(3), M->kind, rows16, out16};
#undef WS
#undef GS
}

// Block l's MoE tensors, as the MoE layer takes them.
static MoeWeights moe_weights(Model *M, int l) {
    const BlockParams *b = &M->bp[l];
    MoeWeights w = {l, b->bias, W(b->router), b->noise >= 0 ? W(b->noise) : NULL, G(b->router),
                    b->noise >= 0 ? G(b->noise) : NULL, b->shg >= 0 ? W(b->shg) : NULL, b->shg >= 0 ? G(b->shg) : NULL,
                    experts_of(M, b->et, M->El, M->fel, M->moe.rows16, M->moe.out16), {0}};
    if (b->sh[0] >= 0) w.shared = experts_of(M, b->sh, 1, M->fsl, 0, 0);   // reads ln2
    return w;
}

// The MoE layer of the held MoE blocks: the router's log, the model's statistics and registry.
static void moe_setup(Model *M) {
    int n = 0, layer[M->L > 0 ? M->L : 1], bias[M->L > 0 ? M->L : 1];
    for (int l = 0; l < M->L; l++)
        if (M->bp[l].moe) { layer[n] = l; bias[n++] = M->bp[l].bias; }
    gating_init(&M->moe, n, layer, bias, (long)M->Bmax * M->T, (Group *)&M->topo->g[GROUP_DP],
                (Group *)&M->topo->g[GROUP_PP]);
    M->rlog = M->moe.log;
    M->moe.stats = &M->rstats;
    M->moe.reg = &M->reg;
}

// The coming passes' training mode and randomness (the trainer's and the pipeline's), for the MoE layer.
static void moe_pass(Model *M, int T) {
    MoeLayer *e = &M->moe;
    e->rng_step = M->rng_step; e->seq0 = M->seq0; e->T = T; e->uneven = M->uneven;
    e->rcfg.group_tokens = M->m.group_size * T;
}

// ---------------------------------------------------------------------------------------
// activations: one buffer, laid out twice (a sizing pass with base NULL, then for real)

typedef struct { char *base; size_t off; } Bump;
static void *take(Bump *b, size_t bytes) {
    void *p = b->base ? b->base + b->off : NULL;
    b->off += (bytes + 63) & ~(size_t)63;
    return p;
}
#define TAKE(b, type, n) ((type *)take(b, sizeof(type) * (size_t)(n)))

// A GPU run's dense attention is flash attention: what its backward reads is each query's
// log-sum-exp [B,H/tp,T], a small exact activation (per block, like the norms' statistics), not
// the probabilities.
static int flash(const Model *M) { return M->cfg.device == DEV_CUDA && !M->sl; }

// The GPT block with dense attention runs its attention half as op pairs: qkv_forward /
// qkv_backward and attn_proj_forward / attn_proj_backward (q, k, v and atty for them alone)
static int gpt_pairs(const Model *M) { return !M->sl && !M->llama; }

// Attention probabilities of layer l (-1: the most of any layer) for B sequences: T·T per head,
// or the present blocks of the layer's sparse layout (not on a flash run).
static long att_floats(const Model *M, int l, int B) {
    if (!M->sl) return (long)B * M->Hl * M->T * M->T;
    long n = 0;
    for (int i = 0; i < M->L; i++) {
        long k = sparse_attention_att_floats(&M->sl[i], B);
        if ((i == l || l < 0) && k > n) n = k;
    }
    return n;
}
static long sparse_scratch_floats(const Model *M) {   // per thread, the most of any layer
    long n = 0;
    for (int i = 0; i < M->L; i++) {
        long k = sparse_attention_scratch_floats(&M->sl[i], M->hd);
        if (k > n) n = k;
    }
    return n;
}

// Per block: the activations its backward reads. The big ones (LN outputs, qkv, attention
// probabilities, FFN and expert hidden states, the exchanged rows) are compute buffers shared by
// all blocks when
//  - activation checkpointing is on: the backward recomputes them from the block input resid[l];
//  - the model stores 16 bits: after its forward a block's big activations are packed into a
//    16-bit store of its own and unpacked before its backward.
// The small exact ones (LN statistics, router state, indices) are per block unless
// checkpointing; so are the exchange plan and, with CAC, the outputs of the block's collectives.
// The rooms a --bf16 GPU run's ops keep in bf16 alone, in their first half (cuda_ops.h: cu_hg_half),
// take half the floats: the first LayerNorm's output, q, k, v and the attention's output on the
// GPT path with dense attention (qkv_forward, attn_proj_forward), the second LayerNorm's output
// (residual_layernorm_forward's gemm_input: a dense block's, which only the GELU MLP reads; an MoE
// block's with MoeLayer.rows16, which only its router and dispatch read), the GELU MLP's and the
// GELU experts' h and hg (mlp_forward, the experts: GELU's input and output, cu_gemm_gelu16; not
// when the MoE chunks overlap: their pieces sit at fp32 offsets), with rows16 the GELU experts'
// input rows xexp, and with out16 their outputs on the token side, ysend.
static int gpu16(const Model *M) { return M->cfg.device == DEV_CUDA && M->reg.half == PREC_BF16 && !M->llama; }
enum { ROOM_ATTN, ROOM_MLP, ROOM_EXPERTS, ROOM_MOE16, ROOM_OUT16 };
static long room(const Model *M, long n, int which) {
    int half = which == ROOM_MOE16 ? M->moe.rows16 : which == ROOM_OUT16 ? M->moe.out16
             : gpu16(M) && (which == ROOM_ATTN ? gpt_pairs(M)
                         : which == ROOM_MLP ? 1 : M->kind->hidden_mult == 1 && M->cfg.overlap_degree <= 1);
    return half ? (n + 1) / 2 : n;
}

static void take_big(Model *M, BlockActs *x, Bump *a, int dense, int moe, int cac) {
    long N = (long)M->Bmax * M->T;
    int d = M->d;
    x->ln1 = TAKE(a, float, room(M, N * d, ROOM_ATTN));
    x->qkv = TAKE(a, float, room(M, N * 3 * M->Hl * M->hd, ROOM_ATTN));
    if (!flash(M)) x->att = TAKE(a, float, att_floats(M, -1, M->Bmax));
    x->atty = TAKE(a, float, room(M, N * M->Hl * M->hd, ROOM_ATTN));
    x->mid = TAKE(a, float, N * d);
    long ln2_dense = dense ? room(M, N * d, ROOM_MLP) : 0, ln2_moe = moe ? room(M, N * d, ROOM_MOE16) : 0;
    x->ln2 = TAKE(a, float, ln2_dense > ln2_moe ? ln2_dense : ln2_moe);   // what the blocks using it need
    if (dense) {
        x->fch = TAKE(a, float, room(M, N * M->fl * M->ffn_mult, ROOM_MLP));
        x->fchg = TAKE(a, float, room(M, N * M->fl, ROOM_MLP));
    }
    if (moe) {
        int mult = M->kind->hidden_mult;
        MoeActs *e = &x->moe;
        long Rs = M->moe.Rs, Rr = M->moe.Rr;
        e->h = TAKE(a, float, room(M, Rr * M->fel * mult, ROOM_EXPERTS));
        e->hg = TAKE(a, float, room(M, Rr * M->fel, ROOM_EXPERTS));
        if (M->fs) {
            e->sh_h = TAKE(a, float, room(M, N * M->fsl * mult, ROOM_EXPERTS));
            e->sh_hg = TAKE(a, float, room(M, N * M->fsl, ROOM_EXPERTS));
        }
        if (M->fs && M->m.shared_expert_gate) e->sh_y = TAKE(a, float, N * d);
        if (!cac) {
            e->xexp = TAKE(a, float, room(M, Rr * d, ROOM_MOE16));
            e->ysend = TAKE(a, float, room(M, Rs * d, ROOM_OUT16));
        }
    }
}

static void take_small(Model *M, BlockActs *x, Bump *a, Bump *h, int moe) {
    long N = (long)M->Bmax * M->T;
    int G = router_ngroups(N, M->m.group_size * M->T), E = M->E;
    x->ln1_mean = TAKE(a, float, N); x->ln1_rstd = TAKE(a, float, N);
    x->ln2_mean = TAKE(a, float, N); x->ln2_rstd = TAKE(a, float, N);
    if (flash(M)) x->att = TAKE(a, float, (long)M->Bmax * M->Hl * M->T);   // the log-sum-exp
    if (!moe) return;
    MoeActs *e = &x->moe;
    e->probs = TAKE(a, float, N * E); e->lse = TAKE(a, float, N);
    e->gate = TAKE(a, float, N * M->k); e->fcount = TAKE(a, float, (long)G * E);
    e->choice = TAKE(a, int, N * M->k); e->slot = TAKE(a, int, N * M->k);
    e->row = TAKE(a, int, N * M->k); e->kept = TAKE(a, int, (long)G * E);
    e->start = TAKE(h, long, (long)G * E); e->exp_rows = TAKE(h, long, E);
}

// The big activations of block l at the largest batch: what its 16-bit store must hold.
static long packed_floats(const Model *M, int l) {
    long N = (long)M->Bmax * M->T, d = M->d, Dl = (long)M->Hl * M->hd;
    long n = 4 * N * d + N * 4 * Dl + (flash(M) ? 0 : att_floats(M, l, M->Bmax));
    if (!M->bp[l].moe) return n + (M->ffn_mult + 1) * N * M->fl;
    int mult = M->kind->hidden_mult;
    n += (mult + 1) * (M->moe.Rr * M->fel + N * M->fsl) + (M->bp[l].shg >= 0 ? N * d : 0);
    return n + (M->cfg.cac ? 0 : M->moe.Rr * d + M->moe.Rs * d);
}

// The per-block activations of one view's block l: the compute buffers unless shared (`common`),
// the small exact ones unless checkpointing shares them, the 16-bit store, CAC's stashes and
// the exchange plan.
static void take_block(Model *M, BlockActs *x, const BlockActs *common, Bump *a, Bump *h, int l) {
    int d = M->d, ckpt = M->cfg.activation_checkpointing, cac = ckpt && M->cfg.cac, moe = M->bp[l].moe;
    long N = (long)M->Bmax * M->T;
    int pack = M->reg.ghalf && !ckpt, shared = ckpt || pack;
    if (shared) *x = *common;
    else {
        memset(x, 0, sizeof *x);
        take_big(M, x, a, !moe, moe, cac);
    }
    if (!ckpt) take_small(M, x, a, h, moe);
    x->ar_attn = x->ar_ffn = NULL;
    x->store = pack ? TAKE(a, uint16_t, packed_floats(M, l)) : NULL;
    if (cac) {   // stash: attention all-reduce; FFN all-reduce or the expert input and output exchanges
        x->ar_attn = TAKE(a, float, N * d);
        if (moe) {
            x->moe.xexp = TAKE(a, float, room(M, M->moe.Rr * d, ROOM_MOE16));
            x->moe.ysend = TAKE(a, float, room(M, M->moe.Rs * d, ROOM_OUT16));
        }
        else x->ar_ffn = TAKE(a, float, N * d);
    }
    if (moe) { x->moe.scnt = TAKE(h, long, M->E); x->moe.rcnt = TAKE(h, long, M->E); x->moe.exp_off = TAKE(h, long, M->El + 1); }
}

// One view of local chunk i: its blocks' inputs and activations, its output, the tokens, and
// the head's buffers when it is the last chunk.
static void take_view(Model *M, ActView *v, const BlockActs *common, Bump *a, Bump *h, int i) {
    long N = (long)M->Bmax * M->T;
    int d = M->d, l0 = M->ch_l0[i], l1 = M->ch_l1[i];
    for (int l = l0; l <= l1; l++) v->resid[l] = TAKE(a, float, N * d);
    for (int l = l0; l < l1; l++) take_block(M, &v->ba[l], common, a, h, l);
    v->tok = TAKE(a, int, N); v->tgt = TAKE(a, int, N);
    if (M->ch_id[i] != M->chunks - 1) return;
    v->lnf = TAKE(a, float, N * d); v->lnf_mean = TAKE(a, float, N); v->lnf_rstd = TAKE(a, float, N);
    v->logits = TAKE(a, float, N * M->Vl); v->losses = TAKE(a, float, N);
    v->ce_max = TAKE(a, float, 3 * N);   // mx | sum | tl: crossentropy_fused's stats
    if (v->ce_max) { v->ce_sum = v->ce_max + N; v->ce_tl = v->ce_max + 2 * N; }
}

// a: the run's device; h: host (the exchange plan, whole logits, the router's host copies).
// Compute buffers shared by every block and view (checkpointing or 16-bit storage) come first.
static void layout_acts(Model *M, Bump *a, Bump *h) {
    long N = (long)M->Bmax * M->T;
    int ckpt = M->cfg.activation_checkpointing, cac = ckpt && M->cfg.cac;
    int pack = M->reg.ghalf && !ckpt, shared = ckpt || pack, any_moe = 0, any_dense = 0;
    for (int l = 0; l < M->L; l++)
        if (M->bp[l].held) { any_moe |= M->bp[l].moe; any_dense |= !M->bp[l].moe; }
    BlockActs common;
    memset(&common, 0, sizeof common);
    size_t start = a->off;
    if (shared) take_big(M, &common, a, any_dense, any_moe, cac);
    if (ckpt) take_small(M, &common, a, h, any_moe);
    M->shared_act_bytes = a->off - start;
    for (int i = 0; i < M->nch; i++)
        for (int k = 0; k < M->ch_slots[i]; k++) {
            size_t before = a->off;
            take_view(M, &M->views[M->ch_view[i] + k], &common, a, h, i);
            M->ch_bytes[i] = a->off - before;
        }
    M->full_logits = TAKE(h, float, N * M->V);
}

// Makes view `slot` of local chunk i the one the model works on.
static void use_view(Model *M, int i, int slot) {
    ActView *v = &M->views[M->ch_view[i] + slot];
    M->resid = v->resid; M->ba = v->ba;
    M->lnf = v->lnf; M->lnf_mean = v->lnf_mean; M->lnf_rstd = v->lnf_rstd;
    M->logits = v->logits; M->losses = v->losses;
    M->ce_max = v->ce_max; M->ce_sum = v->ce_sum; M->ce_tl = v->ce_tl;
    M->tok = v->tok; M->tgt = v->tgt;
    M->B = v->B; M->Tc = v->Tc;
}

// 16-bit activation storage: block l's big activations of the current batch to or from its store.
static void pack_block(Model *M, int l, int B, int T, int unpack) {
    BlockActs *x = &M->ba[l];
    if (!x->store) return;
    long N = (long)B * T, d = M->d, Dl = (long)M->Hl * M->hd;
    struct { float *p; long n; } t[14];
    int k = 0;
    t[k].p = x->ln1; t[k++].n = N * d;
    t[k].p = x->qkv; t[k++].n = N * 3 * Dl;
    if (!flash(M)) { t[k].p = x->att; t[k++].n = M->sl ? att_floats(M, l, B) : (long)B * M->Hl * T * T; }
    t[k].p = x->atty; t[k++].n = N * Dl;
    t[k].p = x->mid; t[k++].n = N * d;
    t[k].p = x->ln2; t[k++].n = N * d;
    if (!M->bp[l].moe) { t[k].p = x->fch; t[k++].n = N * M->fl * M->ffn_mult; t[k].p = x->fchg; t[k++].n = N * M->fl; }
    else {
        MoeActs *e = &x->moe;
        Exchange ex = moe_exchange_done(&M->moe, e);
        int mult = M->kind->hidden_mult;
        t[k].p = e->h; t[k++].n = ex.Rr * M->fel * mult; t[k].p = e->hg; t[k++].n = ex.Rr * M->fel;
        if (M->fs) { t[k].p = e->sh_h; t[k++].n = N * M->fsl * mult; t[k].p = e->sh_hg; t[k++].n = N * M->fsl; }
        if (M->bp[l].shg >= 0) { t[k].p = e->sh_y; t[k++].n = N * d; }
        if (!M->cfg.cac) { t[k].p = e->xexp; t[k++].n = ex.Rr * d; t[k].p = e->ysend; t[k++].n = ex.Rs * d; }
    }
    uint16_t *s = x->store;
    for (int i = 0; i < k; i++) {
        if (unpack) convert_to_f32(t[i].p, s, t[i].n, M->reg.half);
        else convert_from_f32(s, t[i].p, t[i].n, M->reg.half);
        s += t[i].n;
    }
}

static void layout_grads(Model *M, Bump *a) {
    long N = (long)M->Bmax * M->T, Rs = M->moe.Rs, Rr = M->moe.Rr, R = Rs > Rr ? Rs : Rr;
    long big = N * 3 * M->Hl * M->hd;
    if (N * M->fl * M->ffn_mult > big) big = N * M->fl * M->ffn_mult;
    long mult = M->kind->hidden_mult;
    if (M->E > 1 && Rr * M->fel * mult > big) big = Rr * M->fel * mult;
    if (M->E > 1 && N * M->fsl * mult > big) big = N * M->fsl * mult;
    M->dres = TAKE(a, float, N * M->d); M->dln = TAKE(a, float, N * M->d); M->tmp = TAKE(a, float, N * M->d);
    M->datty = TAKE(a, float, N * M->Hl * M->hd);
    M->dqkv = TAKE(a, float, N * 3 * M->Hl * M->hd);
    M->dbig = TAKE(a, float, big);
    // attention backward: a strip per OpenMP thread on the CPU, Δ (T) for every (b, h) on the GPU
    int gpu = M->cfg.device == DEV_CUDA;
    long att_rows = gpu ? (long)M->Bmax * M->Hl : omp_get_max_threads();
    long per_row = !M->sl ? (gpu ? (long)M->T : attention_scratch_floats(M->T)) : gpu ? 0 : sparse_scratch_floats(M);
    long chunk = 0;   // sparse recompute: the backward's chunk of recomputed strips
    for (int l = 0; M->sl && !gpu && l < M->L; l++) {
        long c = sparse_attention_recompute_floats(&M->sl[l], M->Bmax);
        chunk = c > chunk ? c : chunk;
    }
    M->att_scratch = TAKE(a, float, att_rows * per_row + chunk);
    if (M->E > 1) {   // token side [Rs,d], expert side [Rr,d], the all-to-all scratch
        MoeLayer *e = &M->moe;
        e->tok_buf = TAKE(a, float, Rs * M->d); e->exp_buf = TAKE(a, float, Rr * M->d);
        long scratch = moe_overlap_on(e) ? chunked_scratch_rows(Rs, Rr) : 2 * R;
        e->a2a_buf = TAKE(a, float, scratch * M->d);
        e->dgate = TAKE(a, float, N * M->k); e->dlogits_r = TAKE(a, float, N * M->E);
    }
}

// The chunks of this rank's pipeline stage (chunk c runs on stage c mod pp) and how many
// activation views each needs: the micro-batches its schedule keeps in flight there.
static void plan_chunks(Model *M) {
    const Config *c = &M->cfg;
    int pp = M->topo->pp, v = c->pp_schedule == PP_INTERLEAVED ? c->pp_virtual : 1, stage = M->topo->stage;
    int l0[MAX_CHUNKS * 8 + 1];
    M->chunks = pp * v;
    CHECK(v <= MAX_CHUNKS && M->chunks <= MAX_CHUNKS * 8, "too many pipeline chunks (%d)", M->chunks);
    sched_chunks(M->L, M->chunks, c->pp_nlayers ? c->pp_layers : NULL, l0);
    Schedule s;
    sched_build(&s, c->pp_schedule, pp, v, c->grad_accum, stage);
    M->nch = v;
    for (int i = 0; i < v; i++) {
        int id = i * pp + stage;
        M->ch_id[i] = id; M->ch_l0[i] = l0[id]; M->ch_l1[i] = l0[id + 1];
        M->ch_slots[i] = sched_in_flight(&s, id);
        if (M->ch_slots[i] < 1) M->ch_slots[i] = 1;   // forward-only use (evaluation) needs one
        M->ch_view[i] = M->nviews;
        M->nviews += M->ch_slots[i];
    }
    sched_free(&s);
    M->has_embed = stage == 0;
    M->has_head = M->ch_id[v - 1] == M->chunks - 1;
    M->views = ted_alloc(sizeof(ActView) * M->nviews, MEM_TEMP);
    for (int k = 0; k < M->nviews; k++) {
        M->views[k].resid = ted_alloc(sizeof(float *) * (M->L + 1), MEM_TEMP);
        M->views[k].ba = ted_alloc(sizeof(BlockActs) * M->L, MEM_TEMP);
    }
}

int model_overlap_max(const Config *cfg, int T) {
    const ModelConfig *m = &cfg->model;
    if (m->num_experts <= 1 || m->capacity_factor <= 0) return 64;   // dropless: no capacity
    int k = m->router == ROUTER_EXPERT_CHOICE ? m->num_experts : m->top_k;
    RouterCfg rc = RCFG(m->num_experts, k, m->capacity_factor, m->min_capacity, m->group_size * T);
    rc.kind = m->router;
    int C = router_capacity(&rc, rc.group_tokens);
    return C < 64 ? C : 64;
}

int model_overlap_check(const Config *cfg, int T) {
    int C = model_overlap_max(cfg, T);
    if (cfg->overlap_degree <= 1 || cfg->overlap_degree <= C) return 0;
    ted_error("moe.overlap_degree (%d) is larger than an expert's capacity rows (%d)", cfg->overlap_degree, C);
    return 1;
}

// What a model is before anything big is allocated: its shape, chunks, expert-buffer rows,
// sparse layouts and registered tensors (model_build allocates them; model_size only counts).
static void build_meta(Model *M, const Config *cfg, const Topology *topo, int Bmax, int T) {
    memset(M, 0, sizeof *M);
    M->cfg = *cfg; M->m = cfg->model; M->topo = topo;
    const ModelConfig *m = &M->m;
    M->T = T; M->Bmax = Bmax;
    M->d = m->n_embd; M->H = m->n_head; M->hd = M->d / M->H; M->Hl = M->H / topo->tp;
    M->f = cfg_ffn(m); M->fl = M->f / topo->tp;
    M->fe = cfg_expert_inner(m); M->fel = M->fe / topo->tp;
    M->fs = m->num_experts > 1 ? m->shared_experts * M->fe : 0; M->fsl = M->fs / topo->tp;
    M->kind = expert_kind_of(m);
    M->llama = cfg_is_llama(m); M->KV = cfg_kv_heads(m); M->KVl = M->KV / topo->tp; M->ffn_mult = M->llama ? 2 : 1;
    M->rng_step = -1;
    M->V = m->vocab_size; M->L = m->n_layer;
    int pad = 128 * topo->tp;
    M->Vp = (M->V + pad - 1) / pad * pad; M->Vl = M->Vp / topo->tp; M->v0 = topo->tp_idx * M->Vl;
    M->E = m->num_experts > 1 ? m->num_experts : 1;
    M->El = M->E / topo->ep;
    M->k = m->num_experts > 1 ? (m->router == ROUTER_EXPERT_CHOICE ? M->E : m->top_k) : 1;   // choice columns
    CHECK(!model_overlap_check(cfg, T), "moe.overlap_degree: refused");
    moe_layer_init(&M->moe, &M->cfg, topo, (long)Bmax * T, T);   // the router and the expert-buffer rows
    M->bp = ted_alloc(sizeof(BlockParams) * M->L, MEM_TEMP);
    plan_chunks(M);
    if (cfg->sparse.mode != SPARSE_DENSE) {   // T rounded up to whole blocks (evaluation at any length)
        int blk = cfg->sparse.block, Tb = (T + blk - 1) / blk * blk;
        M->sl = ted_alloc(sizeof(SparseLayout) * M->L, MEM_TEMP);
        for (int l = 0; l < M->L; l++)
            sparse_layout_build(&M->sl[l], &cfg->sparse, cfg->seed, l, topo->tp_idx * M->Hl, M->Hl, Tb);
    }
    add_params(M);
    M->reg.half = cfg_precision(cfg);
    // the GPU's bf16: the ops read the bf16 weights and accumulate fp32 gradients (no staging)
    M->reg.ghalf = M->reg.half == PREC_BF16 && cfg->device == DEV_CUDA ? PREC_FP32 : M->reg.half;
}

// 16-bit storage: the fp32 working copies' elements, of the head and of the largest block.
static void working_copies(const Model *M, long *head, long *big) {
    *big = 0; *head = stage_numel(M, 0);
    for (int s = 1; s <= M->L; s++) if (M->bp[s - 1].held && stage_numel(M, s) > *big) *big = stage_numel(M, s);
}

void model_build(Model *M, const Config *cfg, const Topology *topo, int Bmax, int T) {
    gemm_setup(cfg->bf16 && ted_device == DEV_CPU);   // the GEMMs' compute mode (nn/gemm.h)
    build_meta(M, cfg, topo, Bmax, T);
    alloc_params(M);
    if (M->llama) llama_build(M);
    moe_setup(M);
    if (M->reg.ghalf) {   // fp32 working copies: the head, and the largest block
        long big, head;
        working_copies(M, &head, &big);
        M->head_w = ted_alloc_buf(sizeof(float) * head, MEM_ACTIVATIONS); M->head_g = ted_alloc_buf(sizeof(float) * head, MEM_ACTIVATIONS);
        M->stage_w = ted_alloc_buf(sizeof(float) * big, MEM_ACTIVATIONS); M->stage_g = ted_alloc_buf(sizeof(float) * big, MEM_ACTIVATIONS);
    }
    Bump a = {NULL, 0}, h = {NULL, 0};
    layout_acts(M, &a, &h);
    M->act_floats = a.off / sizeof(float);
    M->act = ted_alloc_buf(a.off, MEM_ACTIVATIONS);
    M->host_act = ted_alloc(h.off, MEM_ACTIVATIONS);
    a.base = (char *)M->act; a.off = 0;
    h.base = (char *)M->host_act; h.off = 0;
    layout_acts(M, &a, &h);
    Bump g = {NULL, 0};
    layout_grads(M, &g);
    M->grad_floats = g.off / sizeof(float);
    g.base = (char *)(M->grad = ted_alloc_buf(g.off, MEM_ACTIVATIONS)); g.off = 0;
    layout_grads(M, &g);
    M->moe.tmp = M->tmp; M->moe.dbig = M->dbig;   // the layer's scratch (layout_grads set the rest)
    use_view(M, 0, 0);
}

void model_size(ModelSize *z, const Config *cfg, const Topology *topo, int Bmax, int T) {
    Model *M = ted_alloc(sizeof *M, MEM_TEMP);
    build_meta(M, cfg, topo, Bmax, T);
    memset(z, 0, sizeof *z);
    for (int i = 0; i < M->reg.n; i++) {
        const Param *p = &M->reg.p[i];
        z->params[p->tag == TAG_EDP] += p->numel;
    }
    int nmoe = 0;
    for (int l = 0; l < M->L; l++) nmoe += M->bp[l].moe;
    double act = gating_act_bytes(&M->m, nmoe, (long)Bmax * T) + llama_act_bytes(M);
    for (int l = 0; M->sl && l < M->L; l++) act += sparse_layout_bytes(&M->sl[l], ted_device == DEV_CUDA);
    if (M->reg.ghalf) {
        long big, head;
        working_copies(M, &head, &big);
        act += 2.0 * sizeof(float) * (head + big);
    }
    z->reg = M->reg;   // the tensor list (moved: freed by model_size_free)
    M->reg.p = NULL; M->reg.n = 0;
    Bump a = {NULL, 0}, h = {NULL, 0}, g = {NULL, 0};
    layout_acts(M, &a, &h);
    layout_grads(M, &g);
    z->act = act + a.off + h.off + g.off;
    z->shared = act + M->shared_act_bytes + g.off + h.off;
    for (int i = 0; i < M->nch; i++) { z->per_mb += M->ch_bytes[i]; z->views += M->ch_slots[i]; }
    z->held = a.off - M->shared_act_bytes;
    model_free(M);
    ted_free(M);
}

void model_size_free(ModelSize *z) { reg_free(&z->reg); }

void model_free(Model *M) {
    gating_free(&M->moe);
    reg_free(&M->reg);
    ted_free_buf(M->head_w); ted_free_buf(M->head_g); ted_free_buf(M->stage_w); ted_free_buf(M->stage_g);
    ted_free_buf(M->act); ted_free_buf(M->grad); ted_free(M->host_act);
    for (int i = 0; i < M->nviews; i++) { ted_free(M->views[i].resid); ted_free(M->views[i].ba); }
    ted_free(M->bp); ted_free(M->views);
    for (int l = 0; M->sl && l < M->L; l++) sparse_layout_free(&M->sl[l]);
    ted_free(M->sl);
    ted_free(M->rope);
    memset(M, 0, sizeof *M);
}

void model_zero_grad(Model *M) {
    if (M->reg.g16) buf_zero(M->reg.g16, sizeof(uint16_t) * M->reg.total);
    if (M->reg.g) buf_zero(M->reg.g, sizeof(float) * M->reg.total);
    // external gradients (ZeRO-2): the optimizer leaves its buckets zero after each reduction
}

// ---------------------------------------------------------------------------------------
// forward

static Group *tp_group(Model *M) { return (Group *)&M->topo->g[GROUP_TP]; }

// The TP sum of a row-parallel layer's part, returned. With CAC the summed part is stashed in the
// first pass and read back in the recompute (no collective).
static const float *row_parallel_sum(Model *M, float *part, float *stash, long n, int recompute) {
    if (recompute && stash) return stash;
    comm_allreduce(tp_group(M), part, n, DT_F32);
    if (stash) buf_copy(stash, part, sizeof(float) * n);
    return part;
}

// The end of a row-parallel layer: out = base + the TP sum of part.
static void row_parallel_end(Model *M, float *out, const float *base, float *part, float *stash, long n,
                             int recompute) {
    residual_forward(out, base, row_parallel_sum(M, part, stash, n, recompute), n);
}

// The attention half of block l: norm, q k v, attention, and the row-parallel part of its output
// projection in M->tmp (not in a recompute that has CAC's stash of the sum).
static void attn_forward(Model *M, int l, int B, int T, int recompute) {
    BlockParams *b = &M->bp[l];
    BlockActs *x = &M->ba[l];
    int d = M->d, Dl = M->Hl * M->hd, tp0 = M->topo->tp_idx == 0;
    long N = (long)B * T;
    if (M->llama) {
        llama_norm_forward(M, x->ln1, x->ln1_rstd, M->resid[l], b->ln1w, N);
        llama_qkv_forward(M, l, B, T);
    } else {
        if (gpt_pairs(M))
            qkv_forward(x->qkv, x->ln1, x->ln1_mean, x->ln1_rstd, M->resid[l], W(b->ln1w), W(b->ln1b), W(b->qkvw),
                        W(b->qkvb), N, d, 3 * Dl);
        else {
            layernorm_forward(x->ln1, x->ln1_mean, x->ln1_rstd, M->resid[l], W(b->ln1w), W(b->ln1b), N, d, 0);
            matmul_forward(x->qkv, x->ln1, W(b->qkvw), W(b->qkvb), N, d, 3 * Dl, 0);
        }
    }
    int keep = !(recompute && x->ar_attn);   // a CAC recompute needs atty alone
    if (gpt_pairs(M)) {
        attn_proj_forward(keep ? M->tmp : NULL, x->atty, x->att, x->qkv, W(b->projw), tp0 ? W(b->projb) : NULL, B, T,
                          M->Hl, M->hd, d);
        return;
    }
    if (M->sl) sparse_attention_forward(x->atty, x->att, x->qkv, &M->sl[l], B, T, M->Hl, M->hd, M->att_scratch);
    else attention_forward(x->atty, x->att, x->qkv, B, T, M->Hl, M->hd);
    if (!keep) return;
    if (M->llama) llama_out_forward(M, l, M->tmp, N);
    else matmul_forward(M->tmp, x->atty, W(b->projw), tp0 ? W(b->projb) : NULL, N, Dl, d, 0);
}

// The dense FFN's hidden state, and (unless a CAC recompute, whose backward needs nothing further)
// the row-parallel part of its output in M->tmp. Returns whether that part was computed.
static int ffn_forward(Model *M, int l, long N, int recompute) {
    BlockParams *b = &M->bp[l];
    BlockActs *x = &M->ba[l];
    int skip = recompute && x->ar_ffn;
    if (M->llama) { llama_ffn_forward(M, l, M->tmp, N, skip); return !skip; }
    if (skip) {   // the hidden state alone, kept as mlp_forward keeps it (mlp_backward reads it)
        mlp_forward(NULL, x->fch, x->fchg, x->ln2, W(b->fcw), W(b->fcb), NULL, NULL, N, M->d, M->fl, M->d);
        return 0;
    }
    mlp_forward(M->tmp, x->fch, x->fchg, x->ln2, W(b->fcw), W(b->fcb), W(b->fcprojw),
                M->topo->tp_idx == 0 ? W(b->fcprojb) : NULL, N, M->d, M->fl, M->d);
    return 1;
}

// One block forward: the first pass, or the recompute of activation checkpointing.
static void block_forward(Model *M, int l, int B, int T, int recompute) {
    BlockParams *b = &M->bp[l];
    BlockActs *x = &M->ba[l];
    int d = M->d;
    long N = (long)B * T;
    float *in = M->resid[l];
    watchdog_block(l, b->moe, recompute ? "recompute" : "forward");
    attn_forward(M, l, B, T, recompute);
    const float *att = row_parallel_sum(M, M->tmp, x->ar_attn, N * d, recompute);
    if (M->llama) {
        residual_forward(x->mid, in, att, N * d);
        llama_norm_forward(M, x->ln2, x->ln2_rstd, x->mid, b->ln2w, N);
    } else residual_layernorm_forward(x->mid, x->ln2, x->ln2_mean, x->ln2_rstd, in, att, W(b->ln2w), W(b->ln2b), N, d,
                                      !b->moe || M->moe.rows16);
    if (b->moe) {
        MoeWeights w = moe_weights(M, l);
        moe_layer_forward(&M->moe, &w, &x->moe, x->ln2, x->mid, M->resid[l + 1], N, recompute);
        return;
    }
    if (!ffn_forward(M, l, N, recompute)) return;
    row_parallel_end(M, recompute ? M->tmp : M->resid[l + 1], x->mid, M->tmp, x->ar_ffn, N * d, recompute);
}

// Sampling needs whole rows of logits: with a vocabulary split over TP, rank 0 gathers them
// into M->full_logits [N,V] (one process: a copy of the first V columns).
static void gather_logits(Model *M, long N) {
    Group *g = tp_group(M);
    float *all = g->size > 1 ? ted_alloc(sizeof(float) * N * M->Vp, MEM_TEMP) : NULL;
    float *mine = ted_alloc(sizeof(float) * N * M->Vl, MEM_TEMP);   // on the host
    buf_copy(mine, M->logits, sizeof(float) * N * M->Vl);
    if (all) comm_allgather(g, mine, all, N * M->Vl, DT_F32);   // [tp][N][Vl]
    for (long i = 0; i < N; i++)
        for (int v = 0; v < M->V; v++)
            M->full_logits[i * M->V + v] = all ? all[((long)(v / M->Vl) * N + i) * M->Vl + v % M->Vl]
                                               : mine[i * M->Vl + v];
    ted_free(all); ted_free(mine);
}

// A training forward of an unsharded head writes the logits' gradient with the loss (the step's
// scale, pipe_train_step): one pass over the logits (crossentropy_fused).
static int fused_loss(const Model *M) { return M->ce_scale != 0 && M->topo->tp == 1; }
// There, on a --bf16 GPU run of the GPT family, ln_f's output is kept in bf16 alone: the head's two
// GEMMs are all that read it (layernorm_forward's gemm_input; the room stays fp32 for evaluation)
static int lnf16(const Model *M) { return fused_loss(M) && gpu16(M); }

// The LM head on this rank's vocabulary shard, then the parallel cross-entropy: the sum of the
// token losses (without targets: whole rows of logits into full_logits, and 0).
static double head_forward(Model *M, long N, int has_targets) {
    int d = M->d, h16 = has_targets && lnf16(M);
    if (M->llama) llama_norm_forward(M, M->lnf, M->lnf_rstd, M->resid[M->L], M->lnfw, N);
    else layernorm_forward(M->lnf, M->lnf_mean, M->lnf_rstd, M->resid[M->L], W(M->lnfw), W(M->lnfb), N, d, h16);
    if (has_targets && fused_loss(M)) {   // logits = lnf·wteᵀ, the loss and, in place, its gradient
        head_loss_forward(M->losses, M->logits, M->ce_max, M->lnf, h16, W(M->lmh), M->tgt, N, d, M->V, M->Vl,
                          M->ce_scale);
        return sum_forward(M->losses, N);
    }
    linear_forward(M->logits, M->Vl, M->lnf, d, W(M->lmh), N, d, M->Vl, 0);   // logits = lnf·wteᵀ
    if (!has_targets) { gather_logits(M, N); return 0; }
    crossentropy_max(M->ce_max, M->ce_tl, M->logits, M->tgt, N, M->v0, M->Vl, M->V);
    comm_allreduce_max(tp_group(M), M->ce_max, N);
    comm_allreduce(tp_group(M), M->ce_tl, N, DT_F32);
    crossentropy_exp(M->ce_sum, M->logits, M->ce_max, N, M->v0, M->Vl, M->V);
    comm_allreduce(tp_group(M), M->ce_sum, N, DT_F32);
    crossentropy_finish(M->losses, M->logits, M->ce_max, M->ce_sum, M->ce_tl, N, M->Vl);
    return sum_forward(M->losses, N);
}

static int first_chunk(const Model *M, int i) { return M->ch_id[i] == 0; }
static int last_chunk(const Model *M, int i) { return M->ch_id[i] == M->chunks - 1; }

float *model_chunk_input(Model *M, int i, int slot) { return M->views[M->ch_view[i] + slot].resid[M->ch_l0[i]]; }
float *model_chunk_output(Model *M, int i, int slot) { return M->views[M->ch_view[i] + slot].resid[M->ch_l1[i]]; }

// The optimizer may still be gathering the weights of params [i0, i1) (overlap_comm): wait for them.
static void weights_needed(Model *M, int i0, int i1) {
    if (M->reg.weights_needed && i0 >= 0) M->reg.weights_needed(M->reg.weights_ctx, i0, i1);
}
// the embedding's tensors (first chunk), then the head's: ln_f and the LM head (wte where tied)
static void embed_weights_needed(Model *M) {
    weights_needed(M, M->wte, M->wte + 1);
    weights_needed(M, M->wpe, M->wpe + 1);
}
static void head_weights_needed(Model *M) {
    weights_needed(M, M->lnfw, M->lnfw + 1);
    weights_needed(M, M->lnfb, M->lnfb + 1);
    weights_needed(M, M->lmh, M->lmh + 1);
}

double model_forward_chunk(Model *M, int i, int slot, const int *tokens, const int *targets, int B, int T) {
    int d = M->d;
    long N = (long)B * T;
    CHECK(B <= M->Bmax && T <= M->T, "batch %dx%d larger than the buffers (%dx%d)", B, T, M->Bmax, M->T);
    CHECK(slot < M->ch_slots[i], "activation view %d of chunk %d past its %d", slot, M->ch_id[i], M->ch_slots[i]);
    ActView *v = &M->views[M->ch_view[i] + slot];
    v->B = B; v->Tc = T;
    use_view(M, i, slot);
    moe_pass(M, T);
    M->moe.rcfg.generate = targets == NULL;
    if (first_chunk(M, i)) {
        buf_copy(M->tok, tokens, sizeof(int) * N);
        embed_weights_needed(M);
        stage_in(M, 0, 0);
        encoder_forward(M->resid[0], M->tok, W(M->wte), M->v0, M->Vl, M->wpe >= 0 && M->topo->tp_idx == 0 ? W(M->wpe) : NULL,
                        B, T, d);
        comm_allreduce(tp_group(M), M->resid[0], N * d, DT_F32);      // vocab-parallel embedding
    }
    for (int l = M->ch_l0[i]; l < M->ch_l1[i]; l++) {
        weights_needed(M, M->bp[l].p0, M->bp[l].p1);
        stage_in(M, l + 1, 0);
        block_forward(M, l, B, T, 0);
        pack_block(M, l, B, T, 0);
    }
    watchdog_block(-1, 0, NULL);
    if (!last_chunk(M, i)) return 0;
    if (targets) buf_copy(M->tgt, targets, sizeof(int) * N);
    head_weights_needed(M);
    if (!first_chunk(M, i)) stage_in(M, 0, 0);
    return head_forward(M, N, targets != NULL);
}

double model_forward(Model *M, const int *tokens, const int *targets, int B, int T) {
    CHECK(M->nch == 1 && M->has_embed && M->has_head, "model_forward needs the whole model on this rank");
    return model_forward_chunk(M, 0, 0, tokens, targets, B, T);
}

// ---------------------------------------------------------------------------------------
// backward

// Tells the optimizer that the gradients of registry params [i0, i1) are complete for this
// micro-batch (ZeRO-2 reduces them while the backward goes on; nothing otherwise).
static void grads_ready(Model *M, int i0, int i1) {
    if (M->reg.grads_ready && i0 >= 0) M->reg.grads_ready(M->reg.grads_ctx, i0, i1);
}

// The head's backward (last chunk): the loss gradient through the cross-entropy, the tied LM head
// (vocab shard: dlnf = dlogits·wte summed over TP, dwte += dlogitsᵀ·lnf) and ln_f, into dres.
static void head_backward(Model *M, long N, float lm_scale) {
    int d = M->d;
    float *dlogits = M->logits;
    watchdog_block(-1, 0, NULL);
    if (fused_loss(M)) {   // the forward wrote the gradient; one shard: both products at once
        CHECK(lm_scale == M->ce_scale, "loss scale %g in the backward, %g in the forward", lm_scale, M->ce_scale);
        head_loss_backward(M->dln, G(M->lmh), dlogits, M->lnf, lnf16(M), W(M->lmh), N, d, M->Vl);
    } else {
        crossentropy_backward(dlogits, M->tgt, N, M->v0, M->Vl, lm_scale);
        linear_backward(M->dln, d, NULL, dlogits, M->Vl, M->lnf, d, W(M->lmh), N, d, M->Vl, 0);   // dlnf = dlogits·wte
        comm_allreduce(tp_group(M), M->dln, N * d, DT_F32);
        linear_backward(NULL, d, G(M->lmh), dlogits, M->Vl, M->lnf, d, W(M->lmh), N, d, M->Vl, 0);   // dwte += dlogitsᵀ·lnf
    }
    buf_zero(M->dres, sizeof(float) * N * d);
    if (M->llama) llama_norm_backward(M, M->dres, M->dln, M->resid[M->L], M->lnfw, M->lnf_rstd, N);
    else layernorm_backward(M->dres, G(M->lnfw), G(M->lnfb), M->dln, M->resid[M->L], W(M->lnfw), M->lnf_mean,
                            M->lnf_rstd, N, d, lnf16(M));   // lnf16: dln in bf16 (head_loss_backward)
}

// The dense FFN's backward from M->dres into M->dln (this rank's part, before the TP sum).
static void ffn_backward(Model *M, int l, long N) {
    BlockParams *b = &M->bp[l];
    BlockActs *x = &M->ba[l];
    int d = M->d;
    if (M->llama) { llama_ffn_backward(M, l, N); return; }
    mlp_backward(M->dln, G(b->fcw), G(b->fcb), G(b->fcprojw), G(b->fcprojb), M->dbig, M->dres, x->fch, x->fchg, x->ln2,
                 W(b->fcw), W(b->fcprojw), N, d, M->fl, d);
}

// The attention's backward from M->dres (gradient of its output) into M->dln (d of its normed
// input, this rank's part, before the TP sum).
static void attn_backward(Model *M, int l, int B, int T) {
    BlockParams *b = &M->bp[l];
    BlockActs *x = &M->ba[l];
    int d = M->d, Dl = M->Hl * M->hd;
    long N = (long)B * T;
    if (gpt_pairs(M)) {
        attn_proj_backward(M->dqkv, G(b->projw), G(b->projb), M->datty, M->dres, x->att, x->qkv, x->atty, W(b->projw),
                           B, T, M->Hl, M->hd, d, M->att_scratch);
        qkv_backward(M->dln, G(b->qkvw), G(b->qkvb), M->dqkv, x->ln1, W(b->qkvw), N, d, 3 * Dl);
        return;
    }
    if (M->llama) llama_out_backward(M, l, N);
    else matmul_backward(M->datty, G(b->projw), G(b->projb), M->dres, x->atty, W(b->projw), N, Dl, d, 0);
    if (M->sl)
        sparse_attention_backward(M->dqkv, M->datty, x->att, x->qkv, &M->sl[l], B, T, M->Hl, M->hd, M->att_scratch);
    else attention_backward(M->dqkv, M->datty, x->att, x->qkv, x->atty, B, T, M->Hl, M->hd, M->att_scratch);
    if (M->llama) llama_qkv_backward(M, l, B, T);
    else matmul_backward(M->dln, G(b->qkvw), G(b->qkvb), M->dqkv, x->ln1, W(b->qkvw), N, d, 3 * Dl, 0);
}

// Block l's backward: dres holds the gradient of its output and then of its input.
static void block_backward(Model *M, int l, float lm_scale, float aux_scale, float z_scale) {
    int B = M->B, T = M->Tc, d = M->d;
    long N = (long)B * T;
    BlockParams *b = &M->bp[l];
    BlockActs *x = &M->ba[l];
    stage_in(M, l + 1, 1);
    if (M->cfg.activation_checkpointing) block_forward(M, l, B, T, 1);
    watchdog_block(l, b->moe, "backward");
    pack_block(M, l, B, T, 1);
    // FFN: dres holds d(out); the residual passes it to d(mid) unchanged. dln, the gradient at a
    // LayerNorm's output, is bf16 alone where one GEMM writes it on a --bf16 GPU run (the dense
    // MLP's, c_attn's: ops.h), summed over TP so (an MoE layer adds several into fp32)
    int ffn16 = !b->moe && gpu16(M), attn16 = gpt_pairs(M) && gpu16(M);
    if (b->moe) {
        MoeWeights w = moe_weights(M, l);
        moe_layer_backward(&M->moe, &w, &x->moe, x->ln2, M->dres, M->dln, N, lm_scale, aux_scale, z_scale);
    } else {
        ffn_backward(M, l, N);
        comm_allreduce(tp_group(M), M->dln, N * d, ffn16 ? DT_BF16 : DT_F32);
    }
    if (M->llama) llama_norm_backward(M, M->dres, M->dln, x->mid, b->ln2w, x->ln2_rstd, N);
    else layernorm_backward(M->dres, G(b->ln2w), G(b->ln2b), M->dln, x->mid, W(b->ln2w), x->ln2_mean, x->ln2_rstd,
                            N, d, ffn16);
    attn_backward(M, l, B, T);
    comm_allreduce(tp_group(M), M->dln, N * d, attn16 ? DT_BF16 : DT_F32);
    if (M->llama) llama_norm_backward(M, M->dres, M->dln, M->resid[l], b->ln1w, x->ln1_rstd, N);
    else layernorm_backward(M->dres, G(b->ln1w), G(b->ln1b), M->dln, M->resid[l], W(b->ln1w), x->ln1_mean,
                            x->ln1_rstd, N, d, attn16);
    stage_out(M, l + 1);
    grads_ready(M, b->p0, b->p1);
}

void model_backward_chunk(Model *M, int i, int slot, float lm_scale, float aux_scale, float z_scale) {
    use_view(M, i, slot);
    watchdog_block(-1, 0, NULL);
    long N = (long)M->B * M->Tc;
    int head = first_chunk(M, i) || last_chunk(M, i);
    moe_pass(M, M->Tc);
    if (head) stage_in(M, 0, 1);   // 16-bit storage: the head's fp32 gradients start from zero
    if (last_chunk(M, i)) head_backward(M, N, lm_scale);
    for (int l = M->ch_l1[i] - 1; l >= M->ch_l0[i]; l--) block_backward(M, l, lm_scale, aux_scale, z_scale);
    if (first_chunk(M, i))
        encoder_backward(G(M->wte), M->wpe >= 0 ? G(M->wpe) : NULL, M->dres, M->tok, M->v0, M->Vl, M->B, M->Tc, M->d);
    if (head) stage_out(M, 0);
    if (!head) return;   // the head's tensors (wte, wpe, ln_f) are complete only now
    grads_ready(M, M->wte, M->wte + 1);
    grads_ready(M, M->wpe, M->wpe + 1);
    grads_ready(M, M->lnfw, (M->lnfb >= 0 ? M->lnfb : M->lnfw) + 1);
    if (M->lmh != M->wte) grads_ready(M, M->lmh, M->lmh + 1);   // llama's untied head
}

void model_backward(Model *M, float lm_scale, float aux_scale, float z_scale) {
    model_backward_chunk(M, 0, 0, lm_scale, aux_scale, z_scale);
}

// ---------------------------------------------------------------------------------------
// The matmul parameters a token meets in one MoE block: router (and noise), the experts it is
// routed to (expert choice: capacity_factor of them on average), the shared expert.
static double moe_active(const ModelConfig *m) {
    const ExpertKind *k = expert_kind(m->expert_type);
    double d = m->n_embd, fe = cfg_expert_inner(m);
    double routed = m->router == ROUTER_EXPERT_CHOICE ? m->capacity_factor : m->top_k;
    return d * m->num_experts * (m->router == ROUTER_NOISY_TOPK ? 2 : 1) + routed * k->macs(d, fe) +
           (m->shared_experts > 0 ? k->macs(d, m->shared_experts * fe) : 0);
}

double model_block_flops_per_token(const ModelConfig *m, int T, int l) {
    double d = m->n_embd, f = cfg_ffn(m), attn = cfg_is_llama(m) ? llama_attn_macs(m) : 4 * d * d;
    return 6 * (attn + (cfg_is_moe(m, l) ? moe_active(m) : (cfg_is_llama(m) ? 3 : 2) * d * f)) + 12.0 * T * d;
}

double model_flops_per_token(const ModelConfig *m, int T) {
    double flops = 6.0 * m->vocab_size * m->n_embd;   // LM head
    for (int l = 0; l < m->n_layer; l++) flops += model_block_flops_per_token(m, T, l);
    return flops;
}

// Elements of one expert of kind k and hidden size f
static long expert_numel(const ExpertKind *k, long d, long f) {
    long n = 0;
    for (int t = 0; t < k->ntensors; t++) n += expert_tensor_rows(&k->tensors[t], d, f) * expert_tensor_cols(&k->tensors[t], d, f);
    return n;
}

long model_expert_params(const ModelConfig *m) {
    long n = 0, e = (long)m->num_experts * expert_numel(expert_kind(m->expert_type), m->n_embd, cfg_expert_inner(m));
    for (int l = 0; l < m->n_layer; l++) n += cfg_is_moe(m, l) ? e : 0;
    return n;
}

long model_num_params(const ModelConfig *m) {
    if (cfg_is_llama(m)) return llama_num_params(m);
    long d = m->n_embd, f = cfg_ffn(m), n = (long)m->vocab_size * d + (long)m->n_positions * d + 2 * d;
    const ExpertKind *k = expert_kind(m->expert_type);
    long fe = cfg_expert_inner(m), E = m->num_experts;
    long moe = d * E * (m->router == ROUTER_NOISY_TOPK ? 2 : 1) + (m->bias_update_rate > 0 ? E : 0) +
               E * expert_numel(k, d, fe) +
               (m->shared_experts > 0 ? expert_numel(k, d, m->shared_experts * fe) + (m->shared_expert_gate ? d : 0) : 0);
    for (int l = 0; l < m->n_layer; l++) {
        n += 4 * d + 3 * d * d + 3 * d + d * d + d;
        long ffn = d * f + f + f * d + d;
        n += cfg_is_moe(m, l) ? moe : ffn;
    }
    return n;
}
