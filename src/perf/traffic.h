// traffic.h — what one step sends, per collective and group, as the log's `comm` counts it on a
// rank of the given pipeline stage (calls, and bytes of the send buffer; groups of one rank send
// nothing). The formulas are the README's, checked against the log by tests/test_mpi_counts.sh,
// extended to the pipeline, ZeRO stages 0 and 2, activation checkpointing, CAC and DTD
// (tests/test_tune.sh checks them against ted's own log for several layouts).
#pragma once
#include "config/config.h"
#include "parallel/comm.h"
#include "perf/layout.h"

typedef struct { double calls, bytes; } Flow;
typedef struct { Flow f[COLL_N][GROUP_N]; } Traffic;

// Blocks [l0, l1) of stage s when L blocks are split as evenly as possible over pp stages
// (earlier stages take the extra block, as the pipeline does by default).
void traffic_stage_blocks(int L, int pp, int s, int *l0, int *l1);
// Expert-buffer rows of one MoE block and micro-step on a rank: token side Rs, expert side Rr
// (capacity mode: the fixed E·C slots of its groups; dropless: its N·k choices on average).
void traffic_expert_rows(const ModelConfig *m, const Layout *y, int T, double *Rs, double *Rr);
void traffic_of(Traffic *t, const ModelConfig *m, int T, const Layout *y, int stage);
