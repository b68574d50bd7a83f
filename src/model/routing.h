// routing.h — the router's place in an MoE block (design): the router logits (Switch's
// jitter on the router input, noisy_topk's noise scale x·W_noise), the call into the router,
// its backward into the router weights and the block input, and per MoE block the step's
// expert loads: the aux-loss-free bias step and the log (max/mean tokens per expert, dropped
// fraction, bias norm). Randomness comes from (seed, step, layer, global sequence, position),
// set by the trainer through Model.rng_step and Model.seq0; rng_step −1 (evaluation,
// generation) turns noise, jitter, random routing and RTS off.
#pragma once
#include "model/model_state.h"
#include "parallel/zero.h"

typedef struct {
    double max_mean;     // max over experts / mean of the tokens each expert processed
    double dropped;      // dropped fraction (expert choice: tokens no expert took)
    double bias_norm;    // ‖expert_bias‖₂ after the step (0 without balancing)
} RouteBlockLog;

typedef struct RouteLog {
    int nmoe;
    int *layer;          // [nmoe] the MoE blocks
    double *kept, *load; // [nmoe][E] tokens processed per expert; choices before dropping
    double *drops;       // [nmoe][2] dropped, choices
    long acc_step;       // the step the sums belong to
    int nall;            // the MoE blocks of the whole model (every pipeline stage's)
    int *all_layer;      // [nall] their layers
    int *at;             // [nmoe] each held block's place among them
    RouteBlockLog *out;  // [nall] after routing_step_end, every stage's blocks
    float *xr, *dxr;     // Switch jitter: the jittered router input and a gradient scratch [N,d]
    float **noise, **hval, *dnoise;   // noisy_topk: per block x·W_noise and H [N,E]; d(x·W_noise) [N,E]
} RouteLog;

// Allocates M->rlog (called by model_build after the parameters).
void routing_init(Model *M);
void routing_free(Model *M);
// The activation bytes routing_init allocates (jitter, noise buffers) for M's blocks.
double routing_act_bytes(const Model *M);
// Router logits and routing of block l on ln2 (N tokens). recompute: activation checkpointing's
// second pass (no statistics); generate: a forward without targets (expert choice routes top-k).
void routing_forward(Model *M, int l, long N, int recompute, int generate);
// dlogits, then the router weights' gradients and dln += the router's input gradient.
void routing_backward(Model *M, int l, long N, float lm_scale, float aux_scale, float z_scale);
// Before the optimizer step: sums the step's loads over the data-parallel group. (After it, with
// overlap_comm, this small all-reduce would queue behind the parameters' gathers on the link.)
void routing_step_loads(Model *M);
// After the optimizer step (and routing_step_loads): steps the balancing bias (b_e += γ·sign(mean
// load − load_e), also in z's fp32 master) and fills rlog->out: this stage's blocks, then every
// stage's over the pipeline group (each block is held by one stage), so that any rank logs the
// whole model. Ends the step's training mode.
void routing_step_end(Model *M, Zero *z);
// The worst block's max/mean load of the last step, over the whole model (0 without MoE blocks).
double routing_worst_max_mean(const Model *M);
// Appends the per-block log of the last step as a JSON array to buf (len bytes).
void routing_log_json(const Model *M, char *buf, size_t len);
