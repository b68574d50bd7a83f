// wallclock.c — the wall-time split of the steps (see wallclock.h).
#include "io/wallclock.h"

void wallclock_add(WallClock *w, double fwdbwd_ms, double optimizer_ms, double step_ms, const CommStats *cs) {
    double comm = 0;
    for (int k = 0; k < COLL_N; k++)
        for (int g = 0; g < GROUP_N; g++) comm += cs->c[k][g].ms;
    double v[4] = {fwdbwd_ms, optimizer_ms, step_ms, comm};
    w->fwdbwd += v[0];
    w->optimizer += v[1];
    w->total += v[2];
    w->comm += v[3];
    w->steps++;
    for (int i = 0; i < 4; i++) w->all[i] += v[i];
    w->all_steps++;
}

static void print_split(const char *what, double fb, double opt, double total, double comm, long n, FILE *out) {
    if (n <= 0 || !out) return;
    fb /= n, opt /= n, total /= n, comm /= n;
    double other = total - fb - opt;
    fprintf(out, "wall clock %s: step %.1f ms = forward+backward %.1f + optimizer (gradient reduction, update) %.1f + "
                 "other %.1f; collectives %.1f ms of it (%.0f%%)\n",
            what, total, fb, opt, other > 0 ? other : 0, comm, total > 0 ? 100 * comm / total : 0);
}

void wallclock_print(WallClock *w, long step, FILE *out) {
    char what[64];
    snprintf(what, sizeof what, "(mean of %ld steps to step %ld)", w->steps, step);
    print_split(what, w->fwdbwd, w->optimizer, w->total, w->comm, w->steps, out);
    w->fwdbwd = w->optimizer = w->total = w->comm = 0;
    w->steps = 0;
}

void wallclock_summary(const WallClock *w, FILE *out) {
    char what[64];
    snprintf(what, sizeof what, "(mean of the run's %ld steps)", w->all_steps);
    print_split(what, w->all[0], w->all[1], w->all[2], w->all[3], w->all_steps, out);
}
