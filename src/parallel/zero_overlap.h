// zero_overlap.h — zero_optimization.overlap_comm (docs/overlap_comm.md), used by zero.c and
// zero_bucket.c. The gradient reductions start non-blocking as the backward finishes each block
// (stage 0: each tensor's all-reduce, stage 1: its reduce-scatter, once the step's last
// micro-batch is through; stage 2: each bucket, every micro-batch as without overlap) and are
// waited for before the norm. After the optimizer each updated tensor's all-gather starts at once
// and the forward waits for a block's tensors just before it reads them. Every hook drives
// comm_progress(), so Open MPI moves the bytes between blocks. The collectives are the blocking
// path's, on the same buffers in the same order: the results are the same bits.
// The tensors outside the blocks (wte, wpe, ln_f) are reduced after the backward as without
// overlap: wte is complete only at its very end (and the pipeline sums the tied copy after it).
#pragma once
#include "parallel/zero_state.h"
#include "parallel/comm.h"

typedef struct ZeroOverlap {
    CommReq *red, *gat;   // per tensor: its reduction and its all-gather (MPI_REQUEST_NULL: none in flight)
    int *seen;            // stages 0, 1: the backward's calls for each tensor in this step
    int accum;            // micro-batches per step: the last one's call starts the reduction
    int mb;               // stage 2: micro-batches whose backward is through in this step
    int *bk_fly;          // stage 2: bucket b's reductions are in flight
    char *rbuf;           // stage 1: per tensor its padded send copy and its chunk; stage 2: its chunk
    long *roff;           // byte offset of tensor i's region in rbuf (-1: none)
    char *gbuf;           // gathers of tensors not a multiple of the group size: send chunk and padded receive
    long *goff;           // byte offset of tensor i's region in gbuf (-1: gathered in place)
} ZeroOverlap;

// Makes the buffers and installs the registry's hooks (stage 2: zero_bucket.c keeps its own hook and
// starts and waits for its buckets with the requests and regions made here).
void overlap_init(Zero *z, int grad_accum);
void overlap_free(Zero *z);
// Stages 0 and 1, before the norm: every reduction done (blocking for those not started).
void overlap_reduce_wait(Zero *z);
// Starts tensor i's all-gather (after its update); overlap_params_wait waits for [i0, i1)'s.
void overlap_gather(Zero *z, int i);
void overlap_params_wait(Zero *z, int i0, int i1);
// Every gather in flight done (before checkpoints, the end of the run).
void overlap_params_wait_all(Zero *z);
