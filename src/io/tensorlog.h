// tensorlog.h — --log-tensors: per step, each parameter's gradient norm before clipping, under
// its full-tensor name (an expert by its global index), and each MoE block's tokens per expert
// (choices kept, over the global batch), as one JSON line of the --log:
//   {"tensors_step": S, "grad_norm": {"NAME": x, ...}, "tokens_per_expert": {"BLOCK": [n, ...], ...},
//    "route_margin": m}
// where m is the step's smallest routing margin over every token and rank (the gap between a
// chosen expert's score and the next, or a chosen group's and the next; absent when no
// token-choice router ran on the CPU): below ~1e-6 a choice is a near tie that rounding may break.
// The values do not depend on the layout: a one-process run and a tp × ep run of the same
// model and data give the same line (up to rounding); `ted compare` finds where they part.
#pragma once
#include <stdio.h>
#include "config/config.h"
#include "model/model.h"
#include "parallel/zero.h"

typedef struct {
    int nslots;       // full tensors: one per parameter, one per expert version of an expert's
    int *slot;        // [reg.n] the first slot of each parameter
    double *sum;      // [nslots + L·E]: squared norms, then tokens per (block, expert)
} TensorLog;

// Checks the options (one line, 0/-1) and prepares the buffers.
int tensorlog_init(TensorLog *t, const Model *M, const Config *c);
// After each forward of a step's micro-batches: adds the tokens kept per expert.
void tensorlog_count(TensorLog *t, const Model *M);
// --debug-expert-grad-scale with ep > 1: multiplies this rank's expert gradients (a deliberate
// bug of the kind per-tensor diagnostics exist to find). Before the optimizer.
void tensorlog_debug_scale(const Model *M, const Config *c);
// After the optimizer (collective over the world): writes the step's line on rank 0 (log may
// be NULL), then clears the counts.
void tensorlog_write(TensorLog *t, const Model *M, const Zero *z, FILE *log, long step);
void tensorlog_free(TensorLog *t);
