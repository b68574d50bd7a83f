// onebit.h — 1-bit Adam (design). The first freeze_step steps are AdamW with exact gradient
// all-reduce (ZeRO stage 0). From then on v is frozen, each rank folds its own gradient into its
// momentum, and the momenta of a DP group (expert tensors: expert-DP group) are averaged by an
// error-compensated compressed all-reduce in two phases:
//   1. each rank adds its worker error to m, compresses it chunk by chunk (chunk q for rank q)
//      to signs and one scale per chunk (‖x‖₂/√n: the compressed chunk keeps x's norm), keeps
//      what the compression lost as its new worker error, and sends chunk q to rank q (all-to-all);
//   2. each rank averages the S versions of its own chunk, adds its server error, compresses
//      again (keeping the new server error), and every rank gathers every chunk (all-gather).
// The averaged m updates the weights with the v (and v's bias correction) of freeze_step and m's
// bias correction of the current step.
// compression "none" (a check) sends the fp32 chunks through the same two phases: an exact average.
// The worker and server errors are optimizer state: they are saved per rank with checkpoints.
#pragma once
#include "config/config.h"
#include "parallel/zero_state.h"
#include <stdint.h>


typedef struct {
    long n;             // elements of this rank's tensors synced by the group (registry order, flat)
    long c;             // chunk per rank: n/S rounded up to a multiple of 8
    long rec;           // bytes of one packed chunk: scale and sign bits (or fp32 values)
    float *x, *y;       // MEM_COMM: the flat momenta [S·c]; the owner's average of its chunk [c]
    float *ew, *es;     // MEM_OPTIMIZER: worker error [S·c], server error [c]
    uint8_t *send, *recv;   // MEM_COMM: packed chunks [S·rec]
} OneBitGroup;

typedef struct OneBit {
    OneBitGroup g[4];   // DP group (non-expert tensors), expert-DP group; × replicated, split over TP
    int sign;           // 1: signs and scales; 0: fp32 (compression "none")
    int freeze_step;
} OneBit;

// The optimizer-category bytes onebit_init adds (the error feedback) for registry r on DP and
// expert-DP groups of dp and edp ranks.
double onebit_optimizer_bytes(const Registry *r, int dp, int edp);
void onebit_init(OneBit *o, Zero *z, const Config *c);
void onebit_free(OneBit *o);
// Steps at or after freeze_step use the compressed update.
int onebit_active(const Zero *z);
// Before a compressed step, the root mean square over the DP ranks of each rank's gradient
// estimate's norm (its own gradient times the group size): not finite, an fp16 step is skipped.
double onebit_norm(Zero *z, float unscale);
// One compressed step: local momenta from the local gradients (times unscale), averaged; the
// averaged step's gradient part ḡ = (m̄ − β1·m)/(1−β1) clipped by its norm as every step is
// (design §3): with compression "none" ḡ is the global gradient, so every layout clips as one
// process; then the weights. Returns ‖ḡ‖ (the step's grad_norm).
double onebit_update(Zero *z, const Config *c, float lr, float unscale);
// The errors of this rank in a checkpoint directory (one file per rank, checksummed and fsynced;
// collective-free). 0 or -1 after one line.
int onebit_save(const Zero *z, const char *dir);
// Load: when the checkpoint was saved by this layout (same_layout), the file must be present, of
// the right size and checksum, else -1 after one line naming it; saved by another layout (or
// unknown), the errors start at zero (with a note past freeze_step). 0 or -1.
int onebit_load(Zero *z, const char *dir, int same_layout);
