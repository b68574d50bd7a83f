// metrics.h — one JSON object per line (--log FILE.jsonl), design §7: training steps carry
// the scalars plus `comm` (per collective and per collective.group: calls, bytes, ms on
// this rank) and `mem` (bytes: peaks overall and per phase, current per category).
#pragma once
#include <stdio.h>
#include "parallel/comm.h"

typedef struct {
    long step;
    double loss, lm_loss, aux_loss, lr, grad_norm, step_ms, tokens_per_s, mfu, dropped_frac;
    double loss_scale;   // fp16 dynamic loss scale (1 otherwise)
    int skipped;         // fp16: the step overflowed and was skipped
    double max_mean;     // the worst MoE block's max/mean tokens per expert
    const char *moe;     // per MoE block (a JSON array: layer, max_mean, dropped, bias_norm), or NULL
} StepMetrics;

// Appends a step line (and flushes). f may be NULL (nothing written).
void metrics_step(FILE *f, const StepMetrics *m);
void metrics_eval(FILE *f, long step, double val_loss, double lm, double aux, long windows);
// Adds this step's collective counts into acc.
void comm_accumulate(CommStats *acc);
// Where the time of `steps` steps went: compute (total − collectives) and
// each collective.group, per step and as a share; one line each on out.
void comm_summary(FILE *out, const CommStats *acc, double total_ms, long steps);
