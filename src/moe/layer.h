// layer.h — the MoE layer of a block (design §4), in one place: the router's logits and the
// router (gating), the dispatch plan, the dispatch and the expert-parallel exchange, the
// experts (optionally with the exchange in chunks behind them), the exchange back and the
// combine, with the shared expert beside them. One MoeLayer per rank serves all its MoE
// blocks; each block brings its tensors (MoeWeights) and its activations (MoeActs); the
// structs are in moe_state.h. The same code runs a CPU and a GPU run: the ops it calls go to
// their CUDA twins on a GPU.
#pragma once
#include "moe/dispatcher.h"
#include "moe/moe_state.h"
#include "parallel/topology.h"

// The experts' shares in tp, the buffer rows a batch of N tokens needs (Rs, Rr) and the router.
void moe_layer_init(MoeLayer *L, const Config *cfg, const Topology *topo, long N, int T);
// The whole exchange of a block after its forward (its counts stay in its MoeActs).
Exchange moe_exchange_done(MoeLayer *L, MoeActs *x);
// moe.overlap_degree: the exchange in chunks behind the experts, when anything travels.
int moe_overlap_on(const MoeLayer *L);
// out[N,d] = mid + the layer's output on ln2 (router → plan → dispatch → experts → combine, and
// the shared expert). A recompute (activation checkpointing) leaves the router statistics alone,
// with CAC takes the exchanged rows from the first pass instead of communicating again, and
// writes nothing to out: its backward needs only the activations.
void moe_layer_forward(MoeLayer *L, const MoeWeights *w, MoeActs *x, const float *ln2, const float *mid, float *out,
                       long N, int recompute);
// From dres (the gradient of the block's output) into dln (of ln2; written, this rank's part
// before the TP sum of the dense path's convention) and the tensors' gradients (accumulated).
void moe_layer_backward(MoeLayer *L, const MoeWeights *w, MoeActs *x, const float *ln2, const float *dres,
                        float *dln, long N, float lm_scale, float aux_scale, float z_scale);
