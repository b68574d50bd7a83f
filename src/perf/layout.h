// layout.h — one way to run a model on a cluster, as `ted tune` enumerates them: the parallel
// degrees, the ZeRO stage, TED's optimizations and the batch split (design §4–§6).
#pragma once

typedef struct {
    int pp, tp, ep, dp;        // G = pp·tp·dp, dp = ep·edp
    int zero;                  // ZeRO stage 0, 1, 2
    int dtd, cac, ckpt;        // duplicate token dropping, comm-aware checkpointing, activation checkpointing
    int micro_batch, accum;    // sequences per rank and micro-step; micro-steps per step
    int wbytes;                // 2: bf16/fp16 weights and gradients; 4: fp32
    int overlap_degree;        // moe.overlap_degree: chunks of a MoE block's all-to-all pipeline (1: none)
    int overlap_comm;          // zero_optimization.overlap_comm: gradient reductions and all-gathers behind compute
} Layout;

// The rank of (stage, dp_idx, tp_idx) in design §4's layout: TP innermost.
static inline int layout_rank(const Layout *y, int stage, int dp_idx, int tp_idx) {
    return (stage * y->dp + dp_idx) * y->tp + tp_idx;
}
