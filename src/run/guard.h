// guard.h — a run never trains on silently after its numbers stop being numbers: after each
// step the loss and the gradient norm are checked. fp32/bf16: a non-finite value stops the
// run (before any save of that state). fp16: an overflowing step is skipped by loss scaling;
// a run of GUARD_MAX_SKIPPED consecutive skips stops it.
#pragma once
#include "config/config.h"
#include "io/metrics.h"

#define GUARD_MAX_SKIPPED 40   // 2^16 halves to 1 in 16 skips: 40 in a row is no longer overflow

typedef struct { int skipped_run; } Guard;

// Checks one finished step (identical values on every rank: the losses are reduced and the
// norm is global). Returns 0 to go on, or 1 after one line naming the step and the value.
int guard_step(Guard *g, const Config *c, const StepMetrics *m);
