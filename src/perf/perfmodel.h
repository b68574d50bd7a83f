// perfmodel.h — predicted step time and memory of a layout on a cluster (docs/tune.md):
//   compute: the model FLOPs ted counts for MFU (mfu_flops_per_token), a rank's share of its
//            stage, at the device's peak × GEMM efficiency (activation checkpointing adds a forward);
//   communication: traffic.h's calls and bytes per collective and group, each call costed over an
//            alpha–beta model: every member's share reaches every other once, over the link between
//            them (near inside the node, this device's share of the uplink across nodes), latency per
//            algorithm step (n − 1; all-reduce twice); all-to-all one message per peer at its level;
//            on shared cores each TP/EP call waits meet × 3(n − 1)/(n + 1) for its n peers; a link
//            with a token bucket lets each cross-node TP/EP call send what refilled since the last;
//   pipeline: the stages' instruction lists (parallel/schedule) run against each other with each
//            micro-batch's forward and backward at its stage's cost (compute and TP/EP collectives)
//            and each activation or gradient message at its link's time, one message at a time per
//            link and direction; the once-per-step collectives (ZeRO's, data parallel) come after;
//   shared:  devices that share compute units (cluster shared_by > 1, the CPU test bed) lend theirs
//            while they wait (bubble, collectives): compute on the path runs shared_by× faster, and
//            the step is at least the mean device's compute at the shared rate (perfmodel.c step_of);
//   memory:  model/memplan.h's plan of the fullest stage: the model state under ZeRO's stage and
//            the larger of every activation buffer the layout's run allocates (the schedule's views)
//            and, in the optimizer step, the fp32 buffer 16-bit gradients are up-cast into: one tile
//            (optimizer.tile_size), or with tiling off every element of the rank's shards;
//   overlap: moe.overlap_degree N hides min(all-to-all, experts' compute) × (1 − 1/N) of a stage;
//            overlap_comm hides its gradient reductions behind the backward and the parameter
//            all-gathers behind the next forward, all but one block's worth (perfmodel.c hidden_ms).
#pragma once
#include "config/config.h"
#include "perf/cluster.h"
#include "perf/layout.h"
#include "perf/traffic.h"

typedef struct {
    double step_ms, compute_ms, comm_ms, bubble_ms;   // of the slowest stage (comm: exposed); bubble on top
    double hidden_ms;                                 // that stage's communication hidden by overlap
    double coll_ms[COLL_N][GROUP_N];                  // that stage's collectives
    double state_bytes, act_bytes, mem_bytes;         // per device, the fullest stage
    double opt_temp_bytes;                            // the optimizer's fp32 up-cast buffer (16-bit runs)
    int fits;                                         // mem_bytes ≤ the device's memory
    int slowest;                                      // the stage that sets the pace
} Prediction;

// The time of one collective call of `bytes` (send buffer) on a group of n ranks.
double perf_call_ms(int coll, int n, double bytes, const Link *near, const Link *far, int n_far);
void perf_predict(Prediction *p, const Config *c, const Layout *y, const Cluster *cl);
// c run as layout y: its degrees, ZeRO stage, optimizations, batch split and precision; a
// pipeline of another depth than c's, or an interleaving y's micro-batches do not allow, runs 1F1B
// (one virtual stage, pipeline.layers dropped).
void perf_layout_config(Config *k, const Config *c, const Layout *y);
