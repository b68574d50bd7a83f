// experts.h — the expert interface (FastMoE's flexible expert, design) and the experts a
// rank owns, run as one batched pass over the expert buffer: for each local expert e, rows
// [off[e], off[e+1]) go through that expert. An expert kind is one file (expert_gelu.c,
// expert_swiglu.c) declaring its tensors (names, shapes, TP split, init), its forward and
// backward over the batch of local experts, and its FLOPs; the registry, TP, EP, ZeRO and
// checkpoints walk the declared tensors and need nothing else. Shared experts reuse a kind.
#pragma once
#include "config/config.h"
#include "nn/params.h"

struct ExpertKind;

// The local experts of one block (or a block's shared expert, El = 1). Each tensor is
// contiguous over the experts: w[t] holds El copies of tensor t of the kind. f is this rank's
// share of the hidden size under TP. The named views are gelu's four tensors and the first
// ones of any kind (slots a kind does not declare are NULL); kind NULL means gelu.
typedef struct {
    int El, d, f;
    float *wfc, *bfc, *wproj, *bproj;       // weights
    float *gwfc, *gbfc, *gwproj, *gbproj;   // their gradients
    const struct ExpertKind *kind;
    int rows16;                             // xin's and dy's rows are bf16, d to a row (MoeLayer.rows16)
    int out16;                              // y and dxin are written so (MoeLayer.out16)
} Experts;

// A tensor of an expert kind: its shape is (rd·d + rf·f) × (cd·d + cf·f) (cols 1 when 1-D) for
// hidden size f; split over TP along split_dim (-1: replicated) in `parts` equal blocks.
typedef enum { INIT_NORMAL, INIT_RESIDUAL, INIT_ZERO } ExpertInit;
typedef struct {
    const char *suffix;      // the name after "experts.{e}." or "shared_expert."
    int slot;                // which Experts view it fills: 0 wfc, 1 bfc, 2 wproj, 3 bproj
    int ndim, rd, rf, cd, cf;
    int split_dim, parts;
    ExpertInit init;
} ExpertTensor;

typedef struct ExpertKind {
    const char *name;
    int ntensors;
    const ExpertTensor *tensors;
    int hidden_mult;         // h holds hidden_mult·f pre-activation columns per row; hg holds f
    // h[R,mult·f] pre-activations, hg[R,f] activations, y[R,d]. proj_bias 0 leaves out the output
    // bias (a row-parallel layer adds it once, after the TP reduction).
    void (*forward)(const Experts *x, float *h, float *hg, float *y, const float *xin, const long *off, int proj_bias);
    // dxin[R,d] written (may alias dy); dh[R,mult·f] scratch; parameter gradients accumulate.
    void (*backward)(const Experts *x, float *dxin, float *dh, const float *dy, const float *xin, const float *h,
                     const float *hg, const long *off, int proj_bias);
    // multiply-adds per token of one expert of hidden size f (model FLOPs = 2× this, forward)
    double (*macs)(double d, double f);
} ExpertKind;

extern const ExpertKind expert_gelu, expert_swiglu, expert_mixtral, expert_qwen2_moe;
const ExpertKind *expert_kind(int type);   // EXPERT_GELU / EXPERT_SWIGLU
// The kind a model's experts are: its expert_type, in Mixtral's layout for model.arch llama (Qwen2-MoE's
// with shared experts).
const ExpertKind *expert_kind_of(const ModelConfig *m);

// Rows and columns of tensor t for width d and hidden size f (the full, unsplit shape).
long expert_tensor_rows(const ExpertTensor *t, long d, long f);
long expert_tensor_cols(const ExpertTensor *t, long d, long f);

void experts_forward(const Experts *x, float *h, float *hg, float *y, const float *xin, const long *off,
                     int proj_bias);
// dxin[R,d] written; dh[R,mult·f] scratch; parameter gradients accumulate.
void experts_backward(const Experts *x, float *dxin, float *dh, const float *dy, const float *xin,
                      const float *h, const float *hg, const long *off, int proj_bias);

// Registers kind k's tensors of hidden size f for the experts e0 … e0+El−1 of a block whose MoE
// tensors are named under `block` ("transformer.h.{layer}.mlp" for gpt2,
// "model.layers.{layer}.block_sparse_moe" for llama): "{block}.experts.{e}.{suffix}", expert-DP;
// or with shared set the block's shared expert ("{block}.shared_expert.{suffix}", data-parallel, El 1). Each tensor is
// contiguous over the experts; first[slot] gets its first index (-1: the kind has no such slot).
void experts_register(Registry *r, const ExpertKind *k, const char *block, int e0, int El, int shared, long d, long f,
                      float std, float pstd, int first[4]);
