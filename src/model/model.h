// model.h — the GPT/MoE model of design §2 on one rank: parameters (registry), activations
// (one flat buffer with per-layer views, on the run's device, plus a small host buffer for
// what the host plans with), forward and backward of a micro-batch.
#pragma once
#include "config/config.h"
#include "model/model_state.h"
#include "nn/params.h"

// moe.overlap_degree against an expert's capacity rows (sequences of T tokens): 0, or 1 after one
// line saying why (each chunk of the exchange takes rows of every expert).
// moe.overlap_degree: the largest degree c allows (an expert's capacity rows, at most 64), and the
// check of c's (0, or 1 after one line).
int model_overlap_max(const Config *cfg, int T);
int model_overlap_check(const Config *cfg, int T);
// Registers and allocates everything this rank runs (its pipeline stage's chunks, with as many
// activation views per chunk as cfg's schedule keeps in flight); weights initialised from cfg->seed.
void model_build(Model *M, const Config *cfg, const Topology *topo, int Bmax, int T);
void model_free(Model *M);
// What model_build would allocate on the rank of `topo` (its degrees and indices; no group is
// used), counted without allocating it: the tensors, and the activation bytes of every buffer.
typedef struct {
    Registry reg;          // this rank's tensors (sizes, tags, layers; no data)
    double params[2];      // elements: non-expert (DP-synchronised), routed experts' (expert-DP)
    double act;            // bytes of every activation buffer (the `activations` category)
    double shared;         // of those, the ones shared by all micro-batches: compute buffers of
                           // checkpointing or 16-bit storage, backward scratch, router and host buffers
    double per_mb;         // one micro-batch's activations through this rank's chunks
    double held;           // the views the schedule keeps in flight: act − shared
    int views;             // how many views (micro-batch × chunk) those are
} ModelSize;
void model_size(ModelSize *z, const Config *cfg, const Topology *topo, int Bmax, int T);
void model_size_free(ModelSize *z);
// Forward of B sequences of T tokens (B ≤ Bmax, T ≤ the built T). Without targets the whole
// rows of logits are left in M->full_logits [N,V].
// Returns the sum of the token losses (0 without targets); router stats add into M->rstats.
double model_forward(Model *M, const int *tokens, const int *targets, int B, int T);
// Backward of the last forward. lm_scale multiplies each token's loss gradient (1/tokens of
// the step), aux_scale each group's l_aux (aux_coef/groups of the step), z_scale each
// token's z term (z_coef/tokens of the step). Gradients accumulate into the registry.
void model_backward(Model *M, float lm_scale, float aux_scale, float z_scale);
// Zeroes the registry's gradients. A training step does not call it: zero_step leaves them
// zero (zero.h). For backwards not followed by zero_step (gradient checks).
void model_zero_grad(Model *M);
// Pipeline pieces (one process: a single chunk that is first and last; model_forward/backward
// are that chunk on view 0). Local chunk i, activation view `slot` of it:
// forward — chunk 0 embeds `tokens`; another chunk reads its input from model_chunk_input; the
// last chunk returns the sum of token losses (targets given) or fills full_logits (no targets);
// backward — the last chunk starts from the loss; another from the output gradient in M->dres;
// afterwards M->dres holds the gradient of the chunk's input (unless it is chunk 0).
double model_forward_chunk(Model *M, int i, int slot, const int *tokens, const int *targets, int B, int T);
void model_backward_chunk(Model *M, int i, int slot, float lm_scale, float aux_scale, float z_scale);
float *model_chunk_input(Model *M, int i, int slot);    // [B,T,d] the chunk's input
float *model_chunk_output(Model *M, int i, int slot);   // [B,T,d] its output (not the last chunk)
// Model FLOPs per token (design §7): 6·(active matmul params incl. LM head) + 12·L·T·d.
double model_flops_per_token(const ModelConfig *m, int T);
// Of those, block l's (its matmuls and its attention); the rest is the LM head, 6·V·d.
double model_block_flops_per_token(const ModelConfig *m, int T, int l);
long model_num_params(const ModelConfig *m);
// Of those, the routed experts' (synchronised over the expert-DP group; shared experts are not).
long model_expert_params(const ModelConfig *m);
