// zero.h — ZeRO AdamW over the parameter registry (design §3, §4), stages 0, 1, 2.
// Stage 1: fp32 master weights and Adam m, v are partitioned over each parameter's DP group
// (its sync tag names it): gradients are reduce-scattered to the shard owner, the owner clips
// and steps, and the parameters are all-gathered. Stage 0: every rank keeps the whole state,
// gradients are all-reduced, nothing is gathered. Stage 2: as stage 1, but the gradients are
// reduce-scattered bucket by bucket while the backward runs (zero_bucket.c), so that only the
// rank's shard of the gradient and one bucket exist. On one process every group has size 1
// and the shard is the whole tensor.
#pragma once
#include "config.h"
#include "params.h"
#include "topology.h"

typedef struct {
    long off, len;      // this rank's shard of the parameter's local elements
    long base;          // offset of the shard in master/m/v
    long chunk;         // shard size before trimming (numel rounded up to the group size)
    int own;            // this rank counts the shard (norm, checkpoints): stage 0 → group rank 0 only
} Shard;

typedef struct Zero {
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
    int stage;               // zero_optimization.stage
    // stage 2 (zero_bucket.c): the shard's gradients, in the storage format (MEM_GRADS), and the
    // buckets the backward writes into: a deferred region for the tensors outside the blocks
    // (wte is written at both ends of the backward), then one streaming bucket of whole blocks
    void *gshard, *bucket;
    long bucket_elems, deferred_elems;   // elements of the bucket buffer; of them, the deferred region
    int nbk, *bk_of, *bk_need, *bk_ready;   // buckets; each param's bucket; params per bucket; done so far
    void *recv;              // MEM_COMM: this rank's reduced part of one tensor
    float *acc;              // 16-bit storage: that part up-cast before it is added to the shard
    struct OneBit *onebit;   // optimizer.type OneBitAdam (onebit.h), or NULL
    int offload;             // ZeRO-Offload (offload.h): master, m, v and the step on the host
    void *gstage, *wstage;   // its host staging tiles (gradients down, weights up) of stage_n elements
    long stage_n;
} Zero;

// c: zero_optimization.stage and reduce_bucket_size. Stage 2 needs a registry built with
// grads_external (model_build does so for stage 2) and installs the backward's hook.
void zero_init(Zero *z, Registry *reg, const Topology *topo, const Config *c);
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
// The group that averages p's gradient: DP, or expert-DP for expert tensors (its sync tag).
Group *zero_group(const Zero *z, const Param *p);
// LR at step s (0-based) of c->steps: linear warm-up then cosine to min_lr.
float lr_at(const Config *c, long s);
