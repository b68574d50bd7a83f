// after_step.c — what follows a training step: the log and the monitors, the non-finite stop,
// the progress line, evaluation, a sample, a checkpoint, a signal's stop (see run.h).
#include "run/run.h"
#include "core/alloc.h"
#include "core/util.h"
#include "io/metrics.h"
#include "model/routing.h"
#include "run/evaluate.h"
#include "run/sample.h"
#include "run/stop.h"

// The step's metrics for TensorBoard and csv_monitor (rank 0): losses, lr, gradient norm,
// throughput, MFU, drops, the loss scale, each MoE block's load (max/mean tokens per expert) and
// each collective's ms.
static void monitor_step(Run *R, const StepMetrics *m) {
    Monitor *mon = &R->mon;
    if (!mon->tb && !mon->csv_dir[0]) return;
    long s = m->step;
    const char *tags[] = {"Train/loss", "Train/lm_loss",      "Train/aux_loss",
                          "Train/lr",   "Train/grad_norm",    "Train/tokens_per_s",
                          "Train/mfu",  "Train/dropped_frac", "Train/loss_scale"};
    double vals[] = {m->loss,         m->lm_loss, m->aux_loss,     m->lr,        m->grad_norm,
                     m->tokens_per_s, m->mfu,     m->dropped_frac, m->loss_scale};
    for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++) monitor_scalar(mon, tags[i], vals[i], s);
    char tag[96];
    const RouteLog *r = R->tr.M.rlog;
    for (int i = 0; r && i < r->nall; i++) {
        snprintf(tag, sizeof tag, "MoE/block_%d_load", r->all_layer[i]);
        monitor_scalar(mon, tag, r->out[i].max_mean, s);
    }
    const CommStats *cs = comm_stats();
    for (int k = 0; k < COLL_N; k++)
        for (int g = 0; g < GROUP_N; g++)
            if (cs->c[k][g].calls) {
                snprintf(tag, sizeof tag, "Comm/%s.%s_ms", comm_coll_name(k), comm_group_name(g));
                monitor_scalar(mon, tag, cs->c[k][g].ms, s);
            }
    monitor_flush(mon);
}

// The validation loss after step s (logged, printed, monitored).
static void eval_now(Run *R, long s) {
    EvalResult e = evaluate(&R->tr.P, &R->ds.val, R->nval, R->tr.T, NULL);
    metrics_eval(R->log, s + 1, e.loss, e.lm, e.aux, e.windows);
    progress_eval(&R->prog, s + 1, e.loss, e.lm, e.windows);
    monitor_scalar(&R->mon, "Eval/val_loss", e.loss, s + 1);
    monitor_flush(&R->mon);
}

// A sample of a byte model after step s (rank 0 prints it).
static void sample_now(Run *R, long s) {
    int rank0 = R->topo.rank == 0, np;
    int *pr = sample_encode_prompt(NULL, "\n", &np);
    if (rank0) printf("sample: ");
    SampleOpts so = {200, 0.8f, 0, 1.0f, NULL, R->c.seed + (uint64_t)s};
    sample_text(&R->tr.P, NULL, pr, np, &so, rank0 ? stdout : NULL);
    ted_free(pr);
}

// The one line of a signal's stop (rank 0): what asked, the step, where it was saved.
static void stop_say(const Run *R, int stop) {
    if (R->topo.rank != 0) return;
    if (R->c.save[0])
        fprintf(stderr, "ted: stopped by %s after step %ld; saved %s/step_%08ld (continue with --resume %s/step_%08ld)\n",
                stop_cause(stop), R->st.step, R->c.save, R->st.step, R->c.save, R->st.step);
    else fprintf(stderr, "ted: stopped by %s after step %ld; nothing saved (no --save)\n", stop_cause(stop), R->st.step);
}

// MFU a person can believe: a step that computed faster than the peak measured at start-up shows
// that peak was low; the peak becomes the step's rate (a note the first time, and a record in the log each time), so MFU
// stays at most 1. A peak given with --peak-tflops stands (above 100 % the console warns once).
static void believable_mfu(Run *R, StepMetrics *m) {
    if (m->mfu <= 1 || R->c.peak_tflops > 0 || ted_device != DEV_CPU) return;
    double rate = m->mfu * R->tr.peak;
    if (R->topo.rank == 0 && !R->peak_raised++)
        printf("note: step %ld computed at %.1f GFLOP/s, above the %s peak measured at start (%.1f GFLOP/s): MFU is "
               "against the fastest step's rate from here\n", m->step, rate * 1e-9, R->tr.peak_kind, R->tr.peak * 1e-9);
    if (R->log) {
        fprintf(R->log, "{\"mfu_peak\": {\"kind\": \"step %ld's rate\", \"gflops\": %.1f, \"step\": %ld}}\n", m->step,
                rate * 1e-9, m->step);
        write_check(R->log, R->c.log);   // a failed write stops the run, naming the log
    }
    R->tr.peak = rate;
    m->mfu = 1;
}

static int every(int n, long s, int last) { return n > 0 && ((s + 1) % n == 0 || last); }

int run_after_step(Run *R, long s, const StepMetrics *step) {
    const Config *c = &R->c;
    StepMetrics mine = *step, *m = &mine;
    believable_mfu(R, m);
    int rank0 = R->topo.rank == 0, last = s + 1 == c->steps;
    metrics_step(R->log, m);
    monitor_step(R, m);
    if (guard_step(&R->guard, c, m)) return -1;   // non-finite: stop, never save this state
    int print = c->log_every > 0 && ((s + 1) % c->log_every == 0 || last || s == R->first_step);
    progress_step(&R->prog, m, R->tr.peak, print);
    if (c->wall_clock_breakdown && print) wallclock_print(&R->tr.wall, s + 1, rank0 ? stdout : NULL);
    if (R->nval > 0 && (every(c->eval_every, s, 0) || last)) eval_now(R, s);
    if (every(c->sample_every, s, last) && c->model.vocab_size == 256) sample_now(R, s);
    R->st.step = s + 1;
    R->st.tokens += R->tr.ntok;
    int stop = stop_requested();   // a signal on any rank (stop.h): save this step and end
    int save = c->save[0] && (every(c->save_every, s, 0) || last || stop);
    if (save && run_save(R)) return -1;
    if (save && !stop && !last) stop = stop_requested();   // asked during the save: this step is saved, end now
    if (stop && !last) {   // (on the last step the run is complete anyway)
        stop_say(R, stop);
        return stop_exit_code(stop);
    }
    return 0;
}
