// metrics.h — one JSON object per line (--log FILE.jsonl), SPEC §7: training steps carry
// the scalars plus `comm` (per collective and per collective.group: calls, bytes, ms on
// this rank) and `mem` (bytes: peaks overall and per phase, current per category).
#pragma once
#include <stdio.h>

typedef struct {
    long step;
    double loss, lm_loss, aux_loss, lr, grad_norm, step_ms, tokens_per_s, mfu, dropped_frac;
} StepMetrics;

// Appends a step line (and flushes). f may be NULL (nothing written).
void metrics_step(FILE *f, const StepMetrics *m);
void metrics_eval(FILE *f, long step, double val_loss, double lm, double aux, long windows);
// Measured single-precision GEMM peak of this machine (FLOP/s), best of a few sgemm calls.
double sgemm_peak_flops(int n, int reps);
