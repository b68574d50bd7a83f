// routing.h — the step's routing, as the trainer sees it: the MoE layer's loads, bias
// balancing and per-block log (moe/gating.h) for the model's MoE blocks. The router's
// randomness and training mode come from Model.rng_step (set by the trainer; −1: evaluation,
// generation) and Model.seq0 (set per micro-batch by the pipeline).
#pragma once
#include "model/model_state.h"
#include "moe/gating.h"
#include "parallel/zero.h"

// Before the optimizer step: sums the step's loads over the data-parallel group. (After it, with
// overlap_comm, this small all-reduce would queue behind the parameters' gathers on the link.)
void routing_step_loads(Model *M);
// After the optimizer step (and routing_step_loads): the balancing bias's step and the per-block
// log of every stage's blocks (gating_step_end). Ends the step's training mode.
void routing_step_end(Model *M, Zero *z);
// The worst block's max/mean load of the last step, over the whole model (0 without MoE blocks).
double routing_worst_max_mean(const Model *M);
// Appends the per-block log of the last step as a JSON array to buf (len bytes).
void routing_log_json(const Model *M, char *buf, size_t len);
