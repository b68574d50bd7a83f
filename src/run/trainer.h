// trainer.h — the training step (design §3): one optimizer step of the whole model, the same
// for `ted train` and `ted bench`. The schedule's forwards and backwards over the step's
// micro-batches (pipeline.h) with the loss stated by trainer_loss, the tied wte's two gradients
// summed, the step's sums over the data-parallel ranks and the stages, the clipped optimizer
// step (ZeRO), the router-bias update. One process is the world of size one.
#pragma once
#include <stdio.h>
#include "config/config.h"
#include "io/metrics.h"
#include "io/tensorlog.h"
#include "io/wallclock.h"
#include "model/model.h"
#include "model/pipeline.h"
#include "parallel/topology.h"
#include "parallel/zero.h"

// The step's sums over every data-parallel rank and stage (each a sum over the global batch).
typedef struct {
    double lm;        // Σ token cross-entropy over the step's targets
    double aux;       // Σ l_aux over (MoE block, routing group)
    double z;         // Σ logsumexp(logits)² over (MoE block, token)
    double dropped;   // routing choices dropped at capacity
    double choices;   // routing choices made
    double cv;        // noisy_topk: Σ of its CV² loss terms over (MoE block, routing group)
} StepSums;

// The loss gradients' scales: loss = Σ lm / tokens + aux_coef·Σ aux / groups + z_coef·Σ z / tokens
// (+ noisy_topk's CV² terms / groups), times the fp16 loss scale.
typedef struct {
    float lm, aux, z;
} LossScales;

typedef struct {
    const Config *c;
    Topology *topo;
    Model M;
    Pipeline P;
    Zero z;
    int T;            // tokens per sequence
    int nmoe;         // MoE blocks
    long gbatch;      // sequences per step over the data-parallel ranks
    double ntok;      // tokens per step (global)
    double ngroups;   // routing groups per step (global)
    double peak;      // the MFU peak (FLOP/s), 0 when unknown
    const char *peak_kind;
    PipeBatchFn batch;   // the step's micro-batches
    void *batch_ctx;
    long step;                  // the step running (0-based)
    StepSums sums;              // the last step's
    TensorLog tlog;             // --log-tensors (nothing when off)
    FILE *log;                  // where tlog writes (NULL: nowhere)
    WallClock wall;             // wall_clock_breakdown
    double train_ms, wait_ms;   // over the steps run
    CommStats comm_total;
    char moe_log[4096];   // the last step's per-block routing record
} Trainer;

// Selects the run's device (--device) before the topology, whose groups open NCCL
// communicators on a GPU run. 0, or -1 after one line.
int trainer_device(const Config *c);
// Builds the model, its pipeline and the optimizer on topo for micro-batches of c->micro_batch
// sequences of T tokens; the batch callback gives each micro-batch's tokens.
void trainer_init(Trainer *t, const Config *c, Topology *topo, PipeBatchFn batch, void *batch_ctx);
void trainer_free(Trainer *t);
// The loss gradients' scales of a step (see LossScales).
LossScales trainer_loss(const Trainer *t);
// Step s (0-based): its metrics, identical on every rank.
StepMetrics trainer_step(Trainer *t, long s);
// The number of MoE blocks of m.
int trainer_moe_blocks(const ModelConfig *m);
