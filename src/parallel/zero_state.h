// zero_state.h — what the ZeRO optimizer holds (the Zero struct): each tensor's shard, the
// fp32 master, Adam m and v, the stage-2 buckets and the loss scale. Its helpers — the stage-2
// buckets (zero_bucket.c), 1-bit Adam (onebit.c) and ZeRO-Offload (offload.c) — work on it, and
// zero.c drives them; they include this, not zero.h.
#pragma once
#include "nn/params.h"
#include "parallel/topology.h"
#include "parallel/loss_scale.h"

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
    int in_place;            // master is the registry's fp32 weights (whole shards on the CPU): 8 bytes
    float *dev[3], *host[3]; // master, m, v on the run's device and their host copies (the same on the CPU)
    int planned;             // the buffers below are made (at the first step)
    void *comm[2];           // reduce-scatter / all-gather buffers, made at the first step
    float *tile;             // 16-bit storage: the fp32 up-cast tile, made at the first step
    double *sq, *sq_host;    // per tensor: the squared norm of its shard, then [n] their counted sum (run's device, host copy)
    void *dplan;             // a GPU run's fp32 gradients: the one-launch step's segment table (adam_cuda.h)
    int *dpart, ndpart;      // its step beside the next forward (TED_OPT_OVERLAP=1): part k is tensors
                             // [dpart[k], dpart[k+1]); NULL when the step runs in one launch
    long total;              // shard elements on this rank
    long t;                  // steps taken (bias correction)
    // fp16: loss scaling (loss_scale.h) — the loss gradient is multiplied by loss_scale; a step
    // whose gradients overflow is skipped and the scaler updates the scale
    float loss_scale;
    LossScaler scaler;
    int skipped;
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
    struct ZeroOverlap *ov;  // zero_optimization.overlap_comm (zero_overlap.h), or NULL
    int offload;             // ZeRO-Offload (offload.h): master, m, v and the step on the host
    void *gstage, *wstage;   // its host staging tiles (gradients down, weights up) of stage_n elements
    long stage_n;
} Zero;

// The group that averages p's gradient: DP, or expert-DP for expert tensors (its sync tag).
static inline Group *zero_group(const Zero *z, const Param *p) {
    return (Group *)&z->topo->g[p->tag == TAG_EDP ? GROUP_EDP : GROUP_DP];
}
