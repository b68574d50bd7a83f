// memplan.h — the memory of one rank before anything is allocated, for `ted train`'s check,
// `ted plan` and `ted tune` alike: the model state under the ZeRO stage (zero_size over the
// tensors model_size registers) and the activations (model_size's count of every buffer:
// per micro-batch, the views the pipeline schedule keeps, checkpointing's shared buffers,
// a sparse layout's present blocks).
#pragma once
#include "config/config.h"
#include "parallel/topology.h"

typedef struct {
    double params, grads, optimizer;   // bytes on the rank's device
    double host_optimizer;             // offloaded optimizer state (GPU runs), on the host
    double state;                      // params + grads + optimizer
    double act;                        // every activation buffer
    double act_per_mb, act_shared;     // one micro-batch's; those shared by all micro-batches
    int views;                         // micro-batch × chunk views the schedule keeps
    double total;                      // state + act: what the rank's device holds
    double np_nonexp, np_exp;          // the rank's parameters (non-expert, routed experts')
} MemPlan;

// A topology of degrees tp, ep, pp and dp for rank (stage, dp 0, tp 0) (no groups: for sizing).
void memplan_topology(Topology *t, int tp, int ep, int pp, int dp, int stage);
// The plan of rank t of a run of c (its micro_batch, sequence length, precision, zero_stage,
// offload, checkpointing, schedule and sparse layout); gpu: the device holds it (offload moves
// the optimizer state to the host).
void memplan_of(MemPlan *p, const Config *c, const Topology *t, int gpu);
// The fullest stage's plan of c on degrees tp, ep, pp, dp.
void memplan_worst(MemPlan *p, const Config *c, int tp, int ep, int pp, int dp, int gpu);
// Rank `rank`'s plan times this node's ranks against the node's memory: 0, or -1 after one line
// with the numbers (not collective: the caller agrees).
int memplan_check(const MemPlan *p, const Config *c, int rank);
// design §5's M1 for parameter counts alone (no shapes: `ted plan --base-params`): per parameter
// wbytes of weights, wbytes of gradients (ZeRO-2: 1/n of them) and 12 bytes of fp32 master, m
// and v (ZeRO 1 and 2: 1/n), n the parameter's DP group (dp or edp); offload: the 12 bytes are
// on the host and not counted.
double memplan_state_formula(double np_nonexp, double np_exp, int dp, int edp, int wbytes, int zero, int offload);
