// balance.h — pipeline.layers "auto": the split of the L blocks into nch contiguous chunks that
// makes the costliest chunk as cheap as it can be (PipeDream's partitioning by dynamic
// programming, as PipeDream partitions), a block costing its model FLOPs per token and the last chunk also the
// LM head's (6·V·d); the embedding's lookup costs nothing.
#pragma once
#include "config/config.h"

// layers[nch]: blocks per chunk; cost[nch] (may be NULL): each chunk's FLOPs per token.
void perf_balance_layers(const ModelConfig *m, int T, int nch, int *layers, double *cost);
