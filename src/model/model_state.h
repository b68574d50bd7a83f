// model_state.h — what a built model holds on one rank (the Model struct): its tensors in the
// registry, the views of each block's activations, the pipeline chunks it runs, its scratch.
// model.c builds and runs it; routing.c (the step's routing for the trainer) reads it too, so
// the struct stands in a header of its own below both.
#pragma once
#include "config/config.h"
#include "nn/params.h"
#include "moe/moe_state.h"
#include "nn/sparse_layout.h"
#include "parallel/topology.h"

typedef struct {
    int held;                                                // this rank runs the block (its pipeline stage)
    int p0, p1;                                              // its tensors: registry indices [p0, p1)
    int ln1w, ln1b, qkvw, qkvb, projw, projb, ln2w, ln2b;   // registry indices
    int moe;
    int fcw, fcb, fcprojw, fcprojb;                          // dense FFN
    int kw, vw, upw;                                         // llama: k_proj, v_proj (qkvw is q_proj), up_proj (fcw is gate_proj)
    int kb, vb;                                              // llama with qkv_bias: k_proj, v_proj biases (qkvb is q_proj's; -1: none)
    int shg;                                                 // MoE with shared_expert_gate: its weight [1, d] (-1: none)
    int router, noise, bias;                                 // MoE: router, noise_weight, expert_bias (-1: none)
    int et[4], sh[4];                                        // first local expert's / shared expert's tensors by slot (experts.h)
} BlockParams;

// Views into the activation buffer; [N,·] rows are tokens. All fp32, also on a GPU --bf16 run,
// whose GEMMs read them through bf16 copies (cuda_ops.h: cu_operand). The second half of the GPU
// bf16 contract (docs/gpus.md) makes ln1, qkv, atty, mid, ln2, fch, fchg and the MoE layer's
// xexp, h, hg, ysend bf16, and turns
// the backward scratch (dres, dln, datty, dqkv, dbig) and the logits bf16; LayerNorm's mean and
// rstd, the router's probs, lse and gate stay fp32.
typedef struct {
    float *ln1, *ln1_mean, *ln1_rstd;   // [N,d] [N] [N]
    float *qkv;                         // [N,3d/tp]
    float *att;                         // [B,H/tp,T,T]; sparse: [B][present blocks][blk][blk]; a GPU's
                                        // dense attention (flash): the log-sum-exp [B,H/tp,T]
    float *atty;                        // [N,d/tp]
    float *mid;                         // [N,d] residual after attention
    float *ln2, *ln2_mean, *ln2_rstd;
    float *fch, *fchg;                  // dense [N,f/tp] (llama: fch [N,2f/tp] = gate | up)
    MoeActs moe;                        // an MoE block's (moe/layer.h)
    float *ar_attn, *ar_ffn;            // CAC: outputs of the attention / dense-FFN all-reduces [N,d]
    uint16_t *store;                    // 16-bit storage: this block's big activations between forward and backward
} BlockActs;

// One micro-batch's activations of one pipeline chunk: the model works on the view in use
// (M->resid, M->ba, M->lnf, …); a stage holds as many views of a chunk as its schedule keeps
// micro-batches in flight there.
typedef struct {
    float **resid;              // [L+1]: the inputs of the chunk's blocks, then its output
    BlockActs *ba;              // [L]: the chunk's blocks
    float *lnf, *lnf_mean, *lnf_rstd, *logits, *losses, *ce_max, *ce_sum, *ce_tl;   // the head (last chunk)
    int *tok, *tgt;
    int B, Tc;
} ActView;

#define MAX_CHUNKS 64   // chunks per rank (virtual stages)

typedef struct {
    Config cfg;
    ModelConfig m;
    const Topology *topo;
    int T, Bmax;                // sequence length and micro-batch the buffers are sized for
    int d, H, Hl, hd, f, fl, V, L, E, El, k;
    int llama, KV, KVl;         // model.arch llama (llama.h); key/value heads, this rank's
    int ffn_mult;               // dense FFN pre-activation columns per hidden unit (llama's gate | up: 2)
    float *rope;                // llama: the rotary table [T, hd]
    int fe, fel, fs, fsl;       // expert hidden size and this rank's share; the shared expert's (0: none)
    const struct ExpertKind *kind;
    long rng_step, seq0;        // training step of the coming forwards (-1: not training) and the global
                                // index (in the step's batch) of their first sequence: router randomness
    MoeLayer moe;               // the MoE layer of this rank's MoE blocks (moe/layer.h)
    struct RouteLog *rlog;      // per MoE block: this step's expert loads, drops (moe/gating.h; moe.log)
    int Vp, Vl, v0;             // vocabulary padded to a multiple of 128·tp; this rank's rows [v0, v0+Vl)
    Registry reg;
    int wte, wpe, lnfw, lnfb;   // -1 when not on this pipeline stage (llama: no wpe, no lnfb)
    int lmh;                    // the LM head's weight: wte when tied, llama's lm_head otherwise
    // pipeline (design §6): the chunks this rank runs, in order — global index and blocks [l0, l1)
    int nch, chunks;            // local chunks; chunks of the whole model (pp·v)
    int ch_id[MAX_CHUNKS], ch_l0[MAX_CHUNKS], ch_l1[MAX_CHUNKS];
    int ch_view[MAX_CHUNKS], ch_slots[MAX_CHUNKS];   // first view of the chunk, views it has
    size_t ch_bytes[MAX_CHUNKS];                     // bytes of one view of the chunk
    size_t shared_act_bytes;    // activation bytes shared by all views (compute buffers, scratch)
    int has_embed, has_head;    // runs chunk 0 (wte, wpe) / the last chunk (ln_f, wte)
    ActView *views; int nviews;
    BlockParams *bp;
    // activations
    float *act;  size_t act_floats;
    float **resid;              // [L+1][N,d]   (the view in use)
    BlockActs *ba;              // [L]          (the view in use)
    float *lnf, *lnf_mean, *lnf_rstd, *logits, *losses;   // logits [N,Vl]: this rank's vocabulary shard
    float *ce_max, *ce_sum, *ce_tl;                        // [N] cross-entropy statistics (one [3N] buffer)
    float ce_scale;             // the loss gradient's scale in a training step (pipe_train_step), else 0
    float *full_logits;                                    // [N,V] after a forward without targets (host)
    void *host_act;                                        // the host side of the activations: the above, the exchange plans
    // backward scratch
    float *grad; size_t grad_floats;
    float *dres, *dln, *datty, *dqkv, *dbig, *tmp, *att_scratch;   // (the MoE layer's scratch is in moe)
    int uneven;                 // EP ranks may run different batch sizes (evaluation): counts travel
    float *head_w, *head_g, *stage_w, *stage_g;   // 16-bit storage: fp32 working copies (see model.c)
    SparseLayout *sl;           // [L] block-sparse attention layouts of this rank's heads (NULL: dense)
    RouterStats rstats;         // accumulated over forwards since the last reset
    int *tok, *tgt;             // the current micro-batch (copied)
    int B, Tc;                  // its size
} Model;
