// loss_scale.h — fp16 loss scaling as DeepSpeed does it (deepspeed/runtime/fp16/loss_scaler.py),
// from the fp16 keys (config/config.h LossScaleConfig). The loss gradient is multiplied by the
// scale; a step whose gradients overflow is skipped. Static (fp16.loss_scale > 0): the scale
// never changes. Dynamic: it starts at 2^initial_scale_power; an overflow first uses up the
// hysteresis (one per overflow), then halves the scale, never below min_loss_scale; after
// loss_scale_window clean steps since the last overflow the scale doubles (and the hysteresis
// is refilled; with consecutive_hysteresis every clean step refills it).
#pragma once
#include "config/config.h"

typedef struct {
    LossScaleConfig cfg;
    int dynamic;
    long iter, last_overflow;   // DeepSpeed's cur_iter and last_overflow_iter
    int hysteresis;             // overflows left before the scale halves
} LossScaler;

// The initial scale (1 when fp16 is off: no scaling).
float scaler_init(LossScaler *s, const LossScaleConfig *cfg, int fp16);
// The scale of the next step after a step that did (overflow 1) or did not overflow.
float scaler_update(LossScaler *s, float scale, int overflow);
