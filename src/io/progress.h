// progress.h — what a person watching a run sees: a line per logged training step (loss,
// speed, MFU, tokens seen, elapsed time and ETA), evaluation lines, the end-of-run summary,
// and a throttled progress line for long loops (ted eval, tokenize) on stderr.
#pragma once
#include <stdio.h>
#include "io/metrics.h"

typedef struct {
    double t0;               // ms at the start of this session's first step
    long first_step, steps;  // this session runs steps first_step+1 .. steps
    int steps_total_cfg;     // the run's --steps (printed as the denominator)
    double tokens_per_step;  // global tokens per optimizer step
    double tokens0;          // tokens trained on before first_step
    double best_val;         // lowest val_loss so far (INFINITY: none yet)
    long best_val_step;
    double train_ms;         // time inside steps (no evaluation, no saving)
    int mfu_warned;
    const char *peak_kind;   // what the MFU peak is ("sgemm", "bf16 gemm": measured here at start)
    int rank0;
} Progress;

// Line-buffers stdout (so that a redirected console shows each line when it is written).
void progress_line_buffered(void);
// tokens0: the tokens trained on before first_step (the resumed trainer state's count).
void progress_start(Progress *p, long first_step, long steps, double tokens_per_step, double tokens0, int rank0);
// The step line (when print), and a one-time warning when MFU is above 100 %.
void progress_step(Progress *p, const StepMetrics *m, double peak_flops, int print);
void progress_eval(Progress *p, long step, double loss, double lm, long windows);
// The summary at the end: time, tokens, best val loss, where the checkpoint and the log are.
void progress_summary(const Progress *p, long last_step, const char *save, long saved_step, const char *log);

// "12.3k", "4.56M": a count in three significant figures.
void progress_count(double n, char *buf, size_t len);
// "45s", "3m07s", "2h05m": a duration in ms.
void progress_duration(double ms, char *buf, size_t len);

// A progress line for loops over a known amount of work (at most one line every 2 s, and one
// at the end): "what: done/total unit (pct), elapsed, ETA".
typedef struct { const char *what, *unit; double total, t0, last; FILE *out; } Ticker;
void ticker_start(Ticker *t, const char *what, const char *unit, double total, FILE *out);
void ticker_update(Ticker *t, double done);
