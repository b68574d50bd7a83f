// zero.h — ZeRO-1 AdamW over the parameter registry (SPEC §3, §4). fp32 master weights
// and Adam m, v are partitioned over each parameter's DP group (its sync tag names it):
// gradients are reduce-scattered to the shard owner, the owner clips and steps, and the
// parameters are all-gathered. On one process every group has size 1 and the shard is
// the whole tensor.
#pragma once
#include "config.h"
#include "params.h"
#include "topology.h"

typedef struct {
    long off, len;      // this rank's shard of the parameter's local elements
    long base;          // offset of the shard in master/m/v
    long chunk;         // shard size before trimming (numel rounded up to the group size)
} Shard;

typedef struct {
    Registry *reg;
    const Topology *topo;
    Shard *sh;
    float *master, *m, *v;   // MEM_OPTIMIZER: 12 bytes per shard element
    long total;              // shard elements on this rank
    long t;                  // steps taken (bias correction)
} Zero;

void zero_init(Zero *z, Registry *reg, const Topology *topo);
void zero_free(Zero *z);
// Sums gradients over their DP groups (each rank's loss is normalised by the tokens of the
// whole step), computes the global norm (each parameter counted once), clips, steps AdamW
// on the shard, gathers the parameters. Returns the gradient norm before clipping.
double zero_step(Zero *z, const Config *c, float lr);
// LR at step s (0-based) of c->steps: linear warm-up then cosine to min_lr.
float lr_at(const Config *c, long s);
