// zero.h — ZeRO AdamW over the parameter registry (design §3, §4), stages 0, 1, 2.
// Stage 1: fp32 master weights and Adam m, v are partitioned over each parameter's DP group
// (its sync tag names it): gradients are reduce-scattered to the shard owner, the owner clips
// and steps, and the parameters are all-gathered. Stage 0: every rank keeps the whole state,
// gradients are all-reduced, nothing is gathered. Stage 2: as stage 1, but the gradients are
// reduce-scattered bucket by bucket while the backward runs (zero_bucket.c), so that only the
// rank's shard of the gradient and one bucket exist. On one process every group has size 1
// and the shard is the whole tensor.
#pragma once
#include "config/config.h"
#include "parallel/zero_state.h"
#include "config/config.h"
#include "nn/params.h"
#include "parallel/topology.h"


// c: zero_optimization.stage and reduce_bucket_size. Stage 2 needs a registry built with
// grads_external (model_build does so for stage 2) and installs the backward's hook.
void zero_init(Zero *z, Registry *reg, const Topology *topo, const Config *c);
// The model-state bytes zero_init and reg_alloc make for registry r (its sizes only) on rank 0
// of DP and expert-DP groups of dp and edp ranks, under c's stage, precision, offload and
// optimizer: the weights and gradients (ZeRO-2: the gradient shard and the bucket buffer), the
// fp32 master, m and v of the shard (the master is the weights themselves for fp32 on the CPU
// when every shard is whole), 1-bit Adam's error feedback; offloaded (gpu): on the host.
typedef struct { double params, grads, optimizer, host_optimizer; } ZeroSize;
void zero_size(ZeroSize *s, const Registry *r, int dp, int edp, const Config *c, int gpu);
void zero_free(Zero *z);
// master = the registry's weights (after loading them; both in their device views)
void zero_sync_master(Zero *z);
// master, m, v point at the host copies (copy: downloaded first) or back at the device
// (copy: uploaded first): checkpoints read and write the host view. No-ops on the CPU.
void zero_host_view(Zero *z, int copy);
void zero_device_view(Zero *z, int copy);
// With 16-bit gradients (reg->ghalf) the shard's gradients are up-cast to fp32 one tile of
// c->tile_size elements at a time through one reused buffer (0: the whole shard at once).
// Sums gradients over their DP groups (each rank's loss is normalised by the tokens of the
// whole step), computes the global norm (each parameter counted once), clips, steps AdamW
// on the shard, gathers the parameters. Every gradient is left zero (AdamW consumes the shard's
// in its pass; a skipped fp16 step zeroes them all), so a training step needs no zeroing of
// its own and its micro-batches accumulate. Returns the gradient norm before clipping.
double zero_step(Zero *z, const Config *c, float lr);
// zero_optimization.overlap_comm: the gathers of params [i0, i1) that zero_step started are done
// (the forward waits through the registry's hook; checkpoints and the routing bias call this).
// Without overlap a no-op.
void zero_params_wait(Zero *z, int i0, int i1);
