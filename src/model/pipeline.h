// pipeline.h — runs this stage's schedule (schedule.h) on its model (design §6): activations go
// to the next stage and their gradients to the previous one by point-to-point messages over the
// PP group ([micro_batch, T, d], fp32 or the run's 16-bit type), counted as `sendrecv.pp`.
// Sends start and return (their buffers are kept until done), receives wait: with every stage
// following a schedule whose receives come after what they need, no stage waits on itself.
// With pp = 1 nothing is sent and a step is forward, backward per micro-batch: the training
// step of one process.
#pragma once
#include "config/config.h"
#include "model/model.h"
#include "parallel/schedule.h"
#include <mpi.h>

typedef struct { void *buf; size_t cap; MPI_Request req; } PipeSend;

typedef struct {
    Model *M;
    Group *pp;
    Schedule sched;      // this stage's list for one training step
    Precision half;      // messages in 16 bits (PREC_BF16, PREC_FP16) or fp32
    PipeSend *sends; int nsends;
    void *recv_buf; float *host_f32;   // landing buffers (16-bit messages; device runs)
    int *inp, *tgt;      // a micro-batch's tokens and targets
    double wait_ms;      // time spent blocked in receives this step: waiting for other stages
    long steps_run;
    long step;           // the training step running (the watchdog's report)
    void (*after_forward)(void *ctx);   // called after each forward of a training step (or NULL)
    void *hook_ctx;
} Pipeline;

// A micro-batch's tokens and targets ([micro_batch, T] each) for micro-batch mb of the step.
typedef void (*PipeBatchFn)(void *ctx, int mb, int *inp, int *tgt);

void pipe_init(Pipeline *P, Model *M, const Config *c);
void pipe_free(Pipeline *P);
// Rank 0 prints the stages, which blocks each runs, the schedule's ideal bubble and the
// activation views stage 0 holds.
void pipe_print(const Pipeline *P, const Config *c);
// One training step in the schedule's order. Gradients accumulate in the registry; the loss
// gradients are scaled as model_backward says. Returns the sum of the token losses computed on
// this rank (its last chunk's; 0 on stages without the head).
double pipe_train_step(Pipeline *P, PipeBatchFn batch, void *ctx, float lm_scale, float aux_scale, float z_scale);
// A forward of B sequences through every stage (evaluation, sampling). Returns the sum of the
// token losses on every stage; without targets full_logits is filled on every stage.
double pipe_forward(Pipeline *P, const int *tokens, const int *targets, int B, int T);
// The tied wte: the first and the last stage each add the other's gradient (before the optimizer).
void pipe_sum_tied(Pipeline *P);
