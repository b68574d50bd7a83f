// perfmodel.h — predicted step time and memory of a layout on a cluster (docs/tune.md):
//   compute: the model FLOPs ted counts for MFU (mfu_flops_per_token), a rank's share of its
//            stage, at the device's peak × GEMM efficiency (activation checkpointing adds a forward);
//   communication: traffic.h's calls and bytes per collective and group, each call costed over an
//            alpha–beta model of the level it crosses (inside a node or between nodes) with its
//            algorithm's steps: ring all-reduce 2(n−1), reduce-scatter and all-gather n−1, pairwise
//            all-to-all one message per peer at that peer's level, pipeline messages one each;
//   bubble:  the slowest stage's time × (m + pp − 1)/m for m micro-batches (PipeDream-Flush);
//   memory:  model/memplan.h's plan of the fullest stage: the model state under ZeRO's stage and
//            every activation buffer the layout's run allocates (the schedule's views).
// Nothing overlaps (ted's collectives are blocking).
#pragma once
#include "config/config.h"
#include "perf/cluster.h"
#include "perf/layout.h"
#include "perf/traffic.h"

typedef struct {
    double step_ms, compute_ms, comm_ms, bubble_ms;   // of the slowest stage; bubble on top
    double coll_ms[COLL_N][GROUP_N];                  // that stage's collectives
    double state_bytes, act_bytes, mem_bytes;         // per device, the fullest stage
    int fits;                                         // mem_bytes ≤ the device's memory
    int slowest;                                      // the stage that sets the pace
} Prediction;

// The time of one collective call of `bytes` (send buffer) on a group of n ranks.
double perf_call_ms(int coll, int n, double bytes, const Link *near, const Link *far, int n_far);
void perf_predict(Prediction *p, const Config *c, const Layout *y, const Cluster *cl);
