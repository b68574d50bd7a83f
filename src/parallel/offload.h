// offload.h — ZeRO-Offload (design): on a GPU run with zero_optimization.offload_optimizer.device
// "cpu", the fp32 masters, Adam m and v of the rank's shard live in host memory and the optimizer
// step runs on the host (adam.h's vectorised loops): the reduced gradient shard goes down to the
// host one tile at a time, the host steps it, and the updated weights (in their storage format)
// go back up. The device keeps weights, gradients (or ZeRO-2's shard and bucket) and activations.
// On a CPU run everything is on the host already and the key changes nothing.
#pragma once
#include "config/config.h"
#include "parallel/adam.h"
#include "parallel/zero_state.h"

// Makes the host state and the two host staging tiles; 1 when offloading (a GPU run), else 0.
int offload_init(Zero *z, const Config *c);
void offload_free(Zero *z);
// master := the registry's weights, through the staging tile.
void offload_sync_master(Zero *z);
// Steps tensor i on the host: gdev is its gradient shard on the device (storage format), left
// zero once it has gone down.
void offload_step(Zero *z, int i, void *gdev, const AdamHyper *a, float gscale);
