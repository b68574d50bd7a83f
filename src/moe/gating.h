// gating.h — the router's place in the MoE layer (design): the router logits (Switch's jitter
// on the router input, noisy_topk's noise scale x·W_noise), the call into the router, its
// backward into the router weights and the block input, and per MoE block the step's expert
// loads: the aux-loss-free bias step and the log (max/mean tokens per expert, dropped
// fraction, bias norm). Randomness comes from (seed, step, layer, global sequence, position),
// set through MoeLayer.rng_step and seq0; rng_step −1 (evaluation, generation) turns noise,
// jitter, random routing and RTS off.
#pragma once
#include "moe/moe_state.h"
#include "parallel/zero.h"

typedef struct {
    double max_mean;     // max over experts / mean of the tokens each expert processed
    double dropped;      // dropped fraction (expert choice: tokens no expert took)
    double bias_norm;    // ‖expert_bias‖₂ after the step (0 without balancing)
} RouteBlockLog;

typedef struct RouteLog {
    int nmoe;
    int *layer;          // [nmoe] the MoE blocks this rank holds
    int *bias;           // [nmoe] their balancing bias's registry index (-1: none)
    double *kept, *load; // [nmoe][E] tokens processed per expert; choices before dropping
    double *drops;       // [nmoe][2] dropped, choices
    long acc_step;       // the step the sums belong to
    int nall;            // the MoE blocks of the whole model (every pipeline stage's)
    int *all_layer;      // [nall] their layers
    int *at;             // [nmoe] each held block's place among them
    RouteBlockLog *out;  // [nall] after gating_step_end, every stage's blocks
    float *xr, *dxr;     // Switch jitter: the jittered router input and a gradient scratch [N,d]
    float **noise, **hval, *dnoise;   // noisy_topk: per block x·W_noise and H [N,E]; d(x·W_noise) [N,E]
    Group *dp, *pp;      // the groups the step's loads and the log are summed over
} RouteLog;

// L->log for the held MoE blocks layer[0..nmoe) (bias: each one's balancing bias index or -1) of a
// model of n_layer blocks, for batches of up to N tokens.
void gating_init(MoeLayer *L, int nmoe, const int *layer, const int *bias, long N, Group *dp, Group *pp);
void gating_free(MoeLayer *L);
// The activation bytes gating_init allocates (jitter, noise buffers) for nmoe held MoE blocks.
double gating_act_bytes(const ModelConfig *m, int nmoe, long N);
// Router logits and routing of a block on ln2 (N tokens) into x. recompute: activation
// checkpointing's second pass (no statistics).
void gating_forward(MoeLayer *L, const MoeWeights *w, MoeActs *x, const float *ln2, long N, int recompute);
// A GPU run, after the block's dispatch plan: the router's statistics (into L->stats) and the
// step's loads, which came back from the device with the plan's expert counts (router.h).
void gating_summary(MoeLayer *L, const MoeWeights *w, long N, int recompute);
// dlogits, then the router weights' gradients and dln += the router's input gradient.
void gating_backward(MoeLayer *L, const MoeWeights *w, const MoeActs *x, const float *ln2, float *dln, long N,
                     float lm_scale, float aux_scale, float z_scale);
// Before the optimizer step: sums the step's loads over the data-parallel group.
void gating_step_loads(MoeLayer *L);
// After the optimizer step (and gating_step_loads): steps the balancing bias (b_e += γ·sign(mean
// load − load_e), also in z's fp32 master) and fills log->out: this stage's blocks, then every
// stage's over the pipeline group (each block is held by one stage). Ends the step's training mode.
void gating_step_end(MoeLayer *L, Zero *z);
// The worst block's max/mean load of the last step, over the whole model (0 without MoE blocks).
double gating_worst_max_mean(const MoeLayer *L);
// Appends the per-block log of the last step as a JSON array to buf (len bytes).
void gating_log_json(const MoeLayer *L, char *buf, size_t len);
