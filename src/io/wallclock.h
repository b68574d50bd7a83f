// wallclock.h — DeepSpeed's "wall_clock_breakdown": where a step's wall time goes (forward and
// backward, the optimizer with its gradient reduction, the rest), with the collectives' share,
// averaged over the steps since the last print; printed every log_every steps and at the end.
#pragma once
#include <stdio.h>
#include "parallel/comm.h"

typedef struct {
    double fwdbwd, optimizer, total, comm;   // ms summed over the steps counted
    long steps;
    double all[4];                           // the same over the whole run
    long all_steps;
} WallClock;

// Adds one step: its forward+backward ms, optimizer ms, whole step ms, and the collectives'
// ms of this step (from comm_stats()).
void wallclock_add(WallClock *w, double fwdbwd_ms, double optimizer_ms, double step_ms, const CommStats *cs);
// Prints the averages since the last print ("step N") and starts counting again.
void wallclock_print(WallClock *w, long step, FILE *out);
// Prints the averages over the whole run.
void wallclock_summary(const WallClock *w, FILE *out);
