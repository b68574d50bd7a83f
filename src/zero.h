// zero.h — ZeRO-1 AdamW over the parameter registry (design §3, §4). fp32 master weights
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
    float *master, *m, *v;   // MEM_OPTIMIZER: 12 bytes per shard element (the current view)
    float *dev[3], *host[3]; // master, m, v on the run's device and their host copies (the same on the CPU)
    int planned;             // the buffers below are made (at the first step)
    void *comm[2];           // reduce-scatter / all-gather buffers, made at the first step
    float *tile;             // 16-bit storage: the fp32 up-cast tile, made at the first step
    double *sq, *sq_host;    // per tensor: the squared norm of its shard (run's device, host copy)
    long total;              // shard elements on this rank
    long t;                  // steps taken (bias correction)
    // fp16: dynamic loss scaling — the loss gradient is multiplied by loss_scale; a step whose
    // gradients overflow is skipped and the scale halved; after `window` clean steps it doubles
    float loss_scale;
    int window, clean, skipped;
} Zero;

void zero_init(Zero *z, Registry *reg, const Topology *topo);
void zero_free(Zero *z);
// master = the registry's weights (after loading them; both in their device views)
void zero_sync_master(Zero *z);
// master, m, v point at the host copies (copy: downloaded first) or back at the device
// (copy: uploaded first): checkpoints read and write the host view. No-ops on the CPU.
void zero_host_view(Zero *z, int copy);
void zero_device_view(Zero *z, int copy);
// With 16-bit storage (reg->half) the shard's 16-bit gradients are up-cast to fp32 one tile of
// c->tile_size elements at a time through one reused buffer (0: the whole shard at once).
// Sums gradients over their DP groups (each rank's loss is normalised by the tokens of the
// whole step), computes the global norm (each parameter counted once), clips, steps AdamW
// on the shard, gathers the parameters. Returns the gradient norm before clipping.
double zero_step(Zero *z, const Config *c, float lr);
// LR at step s (0-based) of c->steps: linear warm-up then cosine to min_lr.
float lr_at(const Config *c, long s);
