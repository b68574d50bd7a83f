// progress.c — the console of a run (see progress.h). Only rank 0 prints.
#include "io/progress.h"
#include "core/util.h"
#include <math.h>
#include <string.h>

void progress_line_buffered(void) { setvbuf(stdout, NULL, _IOLBF, 0); }

void progress_count(double n, char *buf, size_t len) {
    const char *unit[] = {"", "k", "M", "G", "T"};
    int i = 0;
    while (fabs(n) >= 1000 && i < 4) { n /= 1000; i++; }
    if (i == 0) snprintf(buf, len, "%.0f", n);
    else snprintf(buf, len, "%.*f%s", fabs(n) < 10 ? 2 : fabs(n) < 100 ? 1 : 0, n, unit[i]);
}

void progress_duration(double ms, char *buf, size_t len) {
    long s = (long)(ms / 1000 + 0.5);
    if (ms < 0 || !isfinite(ms)) snprintf(buf, len, "?");
    else if (s < 60) snprintf(buf, len, "%lds", s);
    else if (s < 3600) snprintf(buf, len, "%ldm%02lds", s / 60, s % 60);
    else snprintf(buf, len, "%ldh%02ldm", s / 3600, (s % 3600) / 60);
}

void progress_start(Progress *p, long first_step, long steps, double tokens_per_step, double tokens0, int rank0) {
    memset(p, 0, sizeof *p);
    p->t0 = now_ms();
    p->first_step = first_step;
    p->steps = steps;
    p->tokens_per_step = tokens_per_step;
    p->tokens0 = tokens0;
    p->best_val = INFINITY;
    p->best_val_step = -1;
    p->rank0 = rank0;
}

// ETA from the wall time per step of this session so far (evaluations and saves included).
static double eta_ms(const Progress *p, long step) {
    long done = step - p->first_step, left = p->steps - step;
    return done > 0 ? (now_ms() - p->t0) / done * left : -1;
}

void progress_step(Progress *p, const StepMetrics *m, double peak_flops, int print) {
    p->train_ms += m->step_ms;
    if (!p->rank0) return;
    if (m->mfu > 1 && !p->mfu_warned) {   // a given peak (a measured one is raised instead: run/after_step.c)
        p->mfu_warned = 1;
        printf("warning: MFU %.0f%% is above 100%%: the %s peak it is against (%.1f GFLOP/s) is too low\n",
               100 * m->mfu, p->peak_kind ? p->peak_kind : "", peak_flops * 1e-9);
    }
    if (!print) return;
    char tok[32], el[32], eta[32], tps[32];
    progress_count(p->tokens0 + p->tokens_per_step * (double)(m->step - p->first_step), tok, sizeof tok);
    progress_count(m->tokens_per_s, tps, sizeof tps);
    progress_duration(now_ms() - p->t0, el, sizeof el);
    progress_duration(eta_ms(p, m->step), eta, sizeof eta);
    char load[32] = "";   // MoE: the worst block's max/mean tokens per expert
    if (m->max_mean > 0) snprintf(load, sizeof load, " | load %.2f", m->max_mean);
    char loss[96];   // an fp16 step skipped by loss scaling trained nothing: its loss is no number to show
    if (m->skipped) snprintf(loss, sizeof loss, "skipped (fp16 overflow, loss scale %g)", m->loss_scale);
    else snprintf(loss, sizeof loss, "%.4f (lm %.4f aux %.4f)", m->loss, m->lm_loss, m->aux_loss);
    char norm[32] = "overflow";
    if (!m->skipped) snprintf(norm, sizeof norm, "%.3f", m->grad_norm);
    printf("step %5ld/%ld | loss %s | lr %.2e | norm %s | drop %.3f%s | %.0f ms | %s tok/s | "
           "MFU %.1f%% | %s tokens | %s elapsed, ETA %s\n", m->step, p->steps, loss,
           m->lr, norm, m->dropped_frac, load, m->step_ms, tps, 100 * m->mfu, tok, el, eta);
}

void progress_eval(Progress *p, long step, double loss, double lm, long windows) {
    int best = loss < p->best_val;
    if (best) { p->best_val = loss; p->best_val_step = step; }
    if (p->rank0)
        printf("eval step %ld: val_loss %.4f (lm %.4f) over %ld windows%s\n", step, loss, lm, windows,
               best ? " (best so far)" : "");
}

void progress_summary(const Progress *p, long last_step, const char *save, long saved_step, const char *log) {
    if (!p->rank0) return;
    char el[32], tr[32], tok[32], all[32];
    long ran = last_step - p->first_step;
    progress_duration(now_ms() - p->t0, el, sizeof el);
    progress_duration(p->train_ms, tr, sizeof tr);
    progress_count(p->tokens_per_step * (double)ran, tok, sizeof tok);
    progress_count(p->tokens0 + p->tokens_per_step * (double)ran, all, sizeof all);
    printf("done: %ld steps in %s (%s in steps), %s tokens this session, %s since step 0", ran, el, tr, tok, all);
    if (p->best_val_step >= 0) printf("; best val_loss %.4f at step %ld", p->best_val, p->best_val_step);
    printf("\n");
    if (save && save[0] && saved_step >= 0) printf("  checkpoint: %s/step_%08ld\n", save, saved_step);
    if (log && log[0]) printf("  log:        %s\n", log);
}

void ticker_start(Ticker *t, const char *what, const char *unit, double total, FILE *out) {
    t->what = what;
    t->unit = unit;
    t->total = total;
    t->out = out;
    t->t0 = t->last = now_ms();
}

void ticker_update(Ticker *t, double done) {
    double now = now_ms();
    int end = done >= t->total;
    if (!t->out || (!end && now - t->last < 2000)) return;
    t->last = now;
    char d[32], n[32], el[32], eta[32];
    progress_count(done, d, sizeof d);
    progress_count(t->total, n, sizeof n);
    progress_duration(now - t->t0, el, sizeof el);
    progress_duration(done > 0 ? (now - t->t0) / done * (t->total - done) : -1, eta, sizeof eta);
    fprintf(t->out, "%s: %s/%s %s (%.0f%%), %s elapsed%s%s\n", t->what, d, n, t->unit,
            t->total > 0 ? 100 * done / t->total : 100.0, el, end ? "" : ", ETA ", end ? "" : eta);
    fflush(t->out);
}
