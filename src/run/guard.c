// guard.c — the non-finite stop after each step (see guard.h).
#include "run/guard.h"
#include "core/util.h"
#include <math.h>

// The first non-finite value of the step, by name, or NULL.
static const char *first_bad(const StepMetrics *m, double *v) {
    const char *names[] = {"lm_loss", "aux_loss", "loss", "grad_norm"};
    const double vals[] = {m->lm_loss, m->aux_loss, m->loss, m->grad_norm};
    for (int i = 0; i < 4; i++)
        if (!isfinite(vals[i])) { *v = vals[i]; return names[i]; }
    return NULL;
}

// Which checkpoints a run of skipped steps (a..b) left: skipped steps change no weight, so each
// holds step a-1's.
static void saved_during(const Config *c, long a, long b, char *out, size_t n) {
    long e = c->save_every, first = e > 0 ? (a + e - 1) / e * e : 1, last = e > 0 ? (b - 1) / e * e : 0;
    if (!c->save[0] || first > last) snprintf(out, n, "no checkpoint was saved during them");
    else snprintf(out, n, "step_%08ld to step_%08ld (every %ld) were saved during them, each with the unchanged "
                  "weights of step %ld", first, last, e, a - 1);
}

int guard_step(Guard *g, const Config *c, const StepMetrics *m) {
    double v = 0;
    const char *bad = first_bad(m, &v);
    if (cfg_precision(c) == PREC_FP16) {   // loss scaling owns overflow: count the skips in a row
        g->skipped_run = m->skipped || bad ? g->skipped_run + 1 : 0;
        if (g->skipped_run < GUARD_MAX_SKIPPED) return 0;
        char saved[200];
        saved_during(c, m->step - g->skipped_run + 1, m->step, saved, sizeof saved);
        ted_error("step %ld: %d fp16 steps in a row overflowed (%s %g, loss scale %g): stopping; steps %ld to %ld were "
                  "skipped and this one is not saved; %s", m->step, g->skipped_run, bad ? bad : "grad_norm",
                  bad ? v : m->grad_norm, m->loss_scale, m->step - g->skipped_run + 1, m->step, saved);
        return 1;
    }
    if (!bad) return 0;
    ted_error("step %ld: %s is %g: stopping; this state is not saved (lower --lr, or resume from the last checkpoint)",
              m->step, bad, v);
    return 1;
}
