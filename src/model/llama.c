// llama.c — a llama block's own pieces (see llama.h).
#include "model/llama.h"
#include "core/alloc.h"
#include "moe/experts.h"
#include "nn/gqa.h"
#include "nn/linear.h"
#include "nn/rmsnorm.h"
#include "nn/rope.h"
#include "nn/swiglu.h"
#include <math.h>
#include <stdio.h>

#define W(i) (M->reg.p[i].w)
#define G(i) (M->reg.p[i].g)

// The MoE part: router [E, d] (nn.Linear), its optional noise and bias, the experts, in Mixtral's
// layout (block_sparse_moe.gate, experts.E.w1/w3/w2), or with shared experts in Qwen2-MoE's (mlp.gate,
// experts.E.gate_proj/up_proj/down_proj, shared_expert.*, shared_expert_gate [1, d]).
static void add_moe(Model *M, int l, float std, float pstd) {
    BlockParams *b = &M->bp[l];
    Registry *r = &M->reg;
    int d = M->d, E = M->E;
    char n[96], blk[64];
    snprintf(blk, sizeof blk, cfg_qwen_layout(&M->m) ? "model.layers.%d.mlp" : "model.layers.%d.block_sparse_moe", l);
#define NAME(s) (snprintf(n, sizeof n, "%s.%s", blk, s), n)
    b->router = reg_add(r, NAME("gate.weight"), 2, E, d, -1, 1, TAG_DP, std, 0);
    b->noise = M->m.router == ROUTER_NOISY_TOPK ? reg_add(r, NAME("gate.noise_weight"), 2, E, d, -1, 1, TAG_DP, 0, 0) : -1;
    b->bias = M->m.bias_update_rate > 0 ? reg_add(r, NAME("gate.expert_bias"), 1, E, 1, -1, 1, TAG_DP, 0, 0) : -1;
    experts_register(r, M->kind, blk, M->topo->ep_idx * M->El, M->El, 0, d, M->fe, std, pstd, b->et);
    if (M->fs) experts_register(r, M->kind, blk, 0, 1, 1, d, M->fs, std, pstd, b->sh);
    else for (int s = 0; s < 4; s++) b->sh[s] = -1;
    b->shg = M->fs && M->m.shared_expert_gate ? reg_add(r, NAME("shared_expert_gate.weight"), 2, 1, d, -1, 1, TAG_DP, std, 0)
                                              : -1;
#undef NAME
}

void llama_add_block(Model *M, int l) {
    int d = M->d, f = M->f, Dq = M->H * M->hd, Dkv = M->KV * M->hd;
    float std = 0.02f, pstd = 0.02f / sqrtf(2.0f * M->L);
    Registry *r = &M->reg;
    BlockParams *b = &M->bp[l];
    char n[96];
    b->held = 1;
    b->p0 = r->n;
    b->ln1b = b->qkvb = b->projb = b->ln2b = b->fcb = b->fcprojb = b->kb = b->vb = b->shg = -1;
#define NAME(s) (snprintf(n, sizeof n, "model.layers.%d.%s", l, s), n)
    b->ln1w = reg_add(r, NAME("input_layernorm.weight"), 1, d, 1, -1, 1, TAG_DP, 0, 1);
    b->qkvw = reg_add(r, NAME("self_attn.q_proj.weight"), 2, Dq, d, 0, 1, TAG_DP, std, 0);   // by heads
    b->kw = reg_add(r, NAME("self_attn.k_proj.weight"), 2, Dkv, d, 0, 1, TAG_DP, std, 0);    // by kv heads
    b->vw = reg_add(r, NAME("self_attn.v_proj.weight"), 2, Dkv, d, 0, 1, TAG_DP, std, 0);
    if (M->m.qkv_bias) {   // Qwen2's attention: q, k, v with biases (zero at init, as gpt2's)
        b->qkvb = reg_add(r, NAME("self_attn.q_proj.bias"), 1, Dq, 1, 0, 1, TAG_DP, 0, 0);
        b->kb = reg_add(r, NAME("self_attn.k_proj.bias"), 1, Dkv, 1, 0, 1, TAG_DP, 0, 0);
        b->vb = reg_add(r, NAME("self_attn.v_proj.bias"), 1, Dkv, 1, 0, 1, TAG_DP, 0, 0);
    }
    b->projw = reg_add(r, NAME("self_attn.o_proj.weight"), 2, d, Dq, 1, 1, TAG_DP, pstd, 0);
    b->ln2w = reg_add(r, NAME("post_attention_layernorm.weight"), 1, d, 1, -1, 1, TAG_DP, 0, 1);
    b->moe = cfg_is_moe(&M->m, l);
    if (b->moe) add_moe(M, l, std, pstd);
    else {
        b->fcw = reg_add(r, NAME("mlp.gate_proj.weight"), 2, f, d, 0, 1, TAG_DP, std, 0);
        b->upw = reg_add(r, NAME("mlp.up_proj.weight"), 2, f, d, 0, 1, TAG_DP, std, 0);
        b->fcprojw = reg_add(r, NAME("mlp.down_proj.weight"), 2, d, f, 1, 1, TAG_DP, pstd, 0);
    }
#undef NAME
    b->p1 = r->n;
}

size_t llama_act_bytes(const Model *M) { return M->llama ? sizeof(float) * M->T * M->hd : 0; }

void llama_build(Model *M) {
    M->rope = ted_alloc(llama_act_bytes(M), MEM_ACTIVATIONS);
    rope_table(M->rope, M->T, M->hd, M->m.rope_theta);
}

void llama_norm_forward(Model *M, float *out, float *rstd, const float *in, int w, long N) {
    rmsnorm_forward(out, rstd, in, W(w), N, M->d, M->m.rms_norm_eps);
}

void llama_norm_backward(Model *M, float *dinp, const float *dout, const float *in, int w, const float *rstd, long N) {
    rmsnorm_backward(dinp, G(w), dout, in, W(w), rstd, N, M->d);
}

void llama_qkv_forward(Model *M, int l, int B, int T) {
    BlockParams *b = &M->bp[l];
    BlockActs *x = &M->ba[l];
    int d = M->d, hd = M->hd, Hl = M->Hl, KVl = M->KVl, Dl = Hl * hd, ld = 3 * Dl;
    long N = (long)B * T;
    float *q = x->qkv, *k = q + Dl, *v = k + Dl;
    linear_forward(q, ld, x->ln1, d, W(b->qkvw), N, d, Dl, 0);
    linear_forward(k, ld, x->ln1, d, W(b->kw), N, d, KVl * hd, 0);
    linear_forward(v, ld, x->ln1, d, W(b->vw), N, d, KVl * hd, 0);
    if (b->qkvb >= 0) {
        linear_bias_forward(q, ld, W(b->qkvb), N, Dl);
        linear_bias_forward(k, ld, W(b->kb), N, KVl * hd);
        linear_bias_forward(v, ld, W(b->vb), N, KVl * hd);
    }
    rope_forward(q, ld, N, T, Hl, hd, M->rope);
    rope_forward(k, ld, N, T, KVl, hd, M->rope);
    gqa_expand(k, ld, N, Hl, KVl, hd);
    gqa_expand(v, ld, N, Hl, KVl, hd);
}

void llama_qkv_backward(Model *M, int l, int B, int T) {
    BlockParams *b = &M->bp[l];
    BlockActs *x = &M->ba[l];
    int d = M->d, hd = M->hd, Hl = M->Hl, KVl = M->KVl, Dl = Hl * hd, ld = 3 * Dl;
    long N = (long)B * T;
    float *dq = M->dqkv, *dk = dq + Dl, *dv = dk + Dl;
    gqa_reduce(dk, ld, N, Hl, KVl, hd);
    gqa_reduce(dv, ld, N, Hl, KVl, hd);
    rope_backward(dq, ld, N, T, Hl, hd, M->rope);
    rope_backward(dk, ld, N, T, KVl, hd, M->rope);
    if (b->qkvb >= 0) {
        linear_bias_backward(G(b->qkvb), dq, ld, N, Dl);
        linear_bias_backward(G(b->kb), dk, ld, N, KVl * hd);
        linear_bias_backward(G(b->vb), dv, ld, N, KVl * hd);
    }
    linear_backward(M->dln, d, G(b->qkvw), dq, ld, x->ln1, d, W(b->qkvw), N, d, Dl, 0);
    linear_backward(M->dln, d, G(b->kw), dk, ld, x->ln1, d, W(b->kw), N, d, KVl * hd, 1);
    linear_backward(M->dln, d, G(b->vw), dv, ld, x->ln1, d, W(b->vw), N, d, KVl * hd, 1);
}

void llama_out_forward(Model *M, int l, float *out, long N) {
    int Dl = M->Hl * M->hd;
    linear_forward(out, M->d, M->ba[l].atty, Dl, W(M->bp[l].projw), N, Dl, M->d, 0);
}

void llama_out_backward(Model *M, int l, long N) {
    int Dl = M->Hl * M->hd, w = M->bp[l].projw;
    linear_backward(M->datty, Dl, G(w), M->dres, M->d, M->ba[l].atty, Dl, W(w), N, Dl, M->d, 0);
}

void llama_ffn_forward(Model *M, int l, float *out, long N, int hidden_only) {
    BlockParams *b = &M->bp[l];
    BlockActs *x = &M->ba[l];
    int d = M->d, fl = M->fl;
    linear_forward(x->fch, 2 * fl, x->ln2, d, W(b->fcw), N, d, fl, 0);        // gate
    linear_forward(x->fch + fl, 2 * fl, x->ln2, d, W(b->upw), N, d, fl, 0);   // up
    swiglu_forward(x->fchg, x->fch, N, fl);
    if (!hidden_only) linear_forward(out, d, x->fchg, fl, W(b->fcprojw), N, fl, d, 0);   // down
}

void llama_ffn_backward(Model *M, int l, long N) {
    BlockParams *b = &M->bp[l];
    BlockActs *x = &M->ba[l];
    int d = M->d, fl = M->fl;
    linear_backward(M->dbig, fl, G(b->fcprojw), M->dres, d, x->fchg, fl, W(b->fcprojw), N, fl, d, 0);
    swiglu_backward(M->dbig, x->fch, N, fl);
    linear_backward(M->dln, d, G(b->fcw), M->dbig, 2 * fl, x->ln2, d, W(b->fcw), N, d, fl, 0);
    linear_backward(M->dln, d, G(b->upw), M->dbig + fl, 2 * fl, x->ln2, d, W(b->upw), N, d, fl, 1);
}

// The attention's biases: q, k and v with qkv_bias.
static long llama_attn_biases(const ModelConfig *m) {
    long hd = m->n_embd / m->n_head;
    return m->qkv_bias ? m->n_embd + 2 * cfg_kv_heads(m) * hd : 0;
}

double llama_attn_macs(const ModelConfig *m) {
    double d = m->n_embd, hd = d / m->n_head;
    return 2 * d * d + 2 * d * cfg_kv_heads(m) * hd;
}

long llama_num_params(const ModelConfig *m) {
    long d = m->n_embd, f = cfg_ffn(m), fe = cfg_expert_inner(m), E = m->num_experts;
    long n = (long)m->vocab_size * d * (m->tie_word_embeddings ? 1 : 2) + d;
    long moe = d * E * (m->router == ROUTER_NOISY_TOPK ? 2 : 1) + (m->bias_update_rate > 0 ? E : 0) + E * 3 * d * fe +
               (m->shared_experts > 0 ? 3 * d * m->shared_experts * fe + (m->shared_expert_gate ? d : 0) : 0);
    for (int l = 0; l < m->n_layer; l++)
        n += 2 * d + (long)llama_attn_macs(m) + llama_attn_biases(m) + (cfg_is_moe(m, l) ? moe : 3 * d * f);
    return n;
}
