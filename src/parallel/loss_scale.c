// loss_scale.c — fp16 loss scaling (see loss_scale.h).
#include "parallel/loss_scale.h"
#include <math.h>

float scaler_init(LossScaler *s, const LossScaleConfig *cfg, int fp16) {
    s->cfg = *cfg;
    s->dynamic = fp16 && cfg->loss_scale <= 0;
    s->iter = 0;
    s->last_overflow = -1;
    s->hysteresis = cfg->hysteresis;
    if (!fp16) return 1.0f;
    return s->dynamic ? (float)ldexp(1.0, cfg->initial_scale_power) : cfg->loss_scale;
}

float scaler_update(LossScaler *s, float scale, int overflow) {
    if (!s->dynamic) return scale;
    if (overflow) {
        if (s->cfg.hysteresis == 1 || s->hysteresis == 1) {
            scale = scale / 2 > s->cfg.min_scale ? scale / 2 : s->cfg.min_scale;
        } else {
            s->hysteresis--;
        }
        s->last_overflow = s->iter;
    } else {
        if (s->cfg.consecutive_hysteresis) s->hysteresis = s->cfg.hysteresis;
        long stable = s->iter - s->last_overflow - 1;
        if (stable > 0 && stable % s->cfg.window == 0) {
            if (!s->cfg.consecutive_hysteresis) s->hysteresis = s->cfg.hysteresis;
            scale *= 2;
        }
    }
    s->iter++;
    return scale;
}
