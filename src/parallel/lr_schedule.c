// lr_schedule.c — learning-rate schedules (see lr_schedule.h).
//
// DeepSpeed's schedulers (deepspeed/runtime/lr_schedules.py) are functions of
// last_batch_iteration, which starts at -1 and is stepped after each optimizer step: step s of
// ted runs at the value for iteration s - 1, the first step at the scheduler's initial value
// (warmup_min_lr, or 0 for WarmupCosineLR). Their warm-up spans max(2, warmup_num_steps)
// iterations; "log" rises as log(i + 1) / log(W), "linear" as i / W.
#include "parallel/lr_schedule.h"
#include <math.h>

// ted's own: linear warm-up to lr over `warmup` steps, then a cosine to min_lr at `steps`.
static float warmup_cosine(const Config *c, long s) {
    if (s < c->warmup) return c->lr * (float)(s + 1) / (float)c->warmup;
    long span = c->steps - c->warmup;
    double frac = span > 0 ? (double)(s - c->warmup) / (double)span : 1.0;
    if (frac > 1) frac = 1;
    return (float)(c->min_lr + 0.5 * (c->lr - c->min_lr) * (1.0 + cos(M_PI * frac)));
}

// DeepSpeed's warm-up fraction at iteration i (< W).
static double warmup_gamma(const SchedConfig *s, long i, long W) {
    return s->warmup_linear ? (double)i / (double)W : log((double)i + 1) / log((double)W);
}

static double deepspeed_lr(const Config *c, long i) {
    const SchedConfig *s = &c->sched;
    long W = c->warmup > 2 ? c->warmup : 2, total = s->total_num_steps;
    if (s->type == SCHED_WARMUP_COSINE_LR) {
        if (i < 0) return 0.0;
        double ratio;
        if (i < W) ratio = s->warmup_min_ratio + warmup_gamma(s, i, W) * (1.0 - s->warmup_min_ratio);
        else {
            double progress = (double)(i - W + 1) / (double)(total - W > 1 ? total - W : 1);
            if (progress > 1) progress = 1;
            ratio = s->cos_min_ratio + (1.0 - s->cos_min_ratio) * (1 + cos(M_PI * progress)) / 2;
            if (ratio < 0) ratio = 0;
        }
        return c->lr * ratio;
    }
    double lo = s->warmup_min_lr;
    double hi = s->warmup_max_lr >= 0 ? s->warmup_max_lr : s->type == SCHED_WARMUP_LR ? c->lr : 0.001;
    if (i < 0) return lo;
    double gamma = 1.0;
    if (i < W) gamma = warmup_gamma(s, i, W);
    else if (s->type == SCHED_WARMUP_DECAY_LR) {
        gamma = (double)(total - i) / (double)(total - W > 1 ? total - W : 1);
        if (gamma < 0) gamma = 0;
    }
    return lo + (hi - lo) * gamma;
}

float lr_at(const Config *c, long s) {
    if (c->sched.type == SCHED_WARMUP_COSINE) return warmup_cosine(c, s);
    return (float)deepspeed_lr(c, s - 1);
}
