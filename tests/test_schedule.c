// test_schedule.c — the pipeline schedules run against each other (sched_simulate), against
// timelines worked by hand and the bubble formula.
//   pp 2, m 2, 1f1b, forward 8 ms, backward 16 ms, messages 19 ms (a link per stage and direction):
//     stage 0: F0 0–8, its output arrives at 27; F1 8–16, queued behind it, arrives at 46;
//     stage 1: F0 27–35, B0 35–51 (its gradient arrives at 70), F1 51–59, B1 59–75 (arrives at 94);
//     stage 0: B0 70–86, B1 94–110.                                                   span 110
//   the same with free messages: (m + pp − 1)·(8 + 16) = 72.
//   messages of 100 ms with forward 1, backward 2: F0 0–1, sent 1–101, F1 1–2, sent 101–201;
//     stage 1 F0 101–102, B0 102–104 (back 104–204), F1 201–202, B1 202–204 (back 204–304);
//     stage 0 B0 204–206, B1 304–306.                                                span 306
#include "parallel/schedule.h"
#include "config/config.h"
#include <math.h>
#include <stdio.h>
#include "harness.h"

static void expect(const char *what, double got, double want) { expect_near(what, got, want, 1e-9); }

static double run(int kind, int pp, int m, double f, double b, double msg) {
    double fw[8], bw[8], ms[8];
    for (int c = 0; c < pp; c++) { fw[c] = f; bw[c] = b; ms[c] = msg; }
    return sched_simulate(kind, pp, 1, m, &(SchedCost){fw, bw, msg >= 0 ? ms : NULL});
}

int main(void) {
    expect("1f1b pp 2 m 2, 19 ms messages", run(PP_1F1B, 2, 2, 8, 16, 19), 110);
    expect("1f1b pp 2 m 2, free messages", run(PP_1F1B, 2, 2, 8, 16, -1), 72);
    expect("1f1b pp 2 m 2, 100 ms messages queue on the link", run(PP_1F1B, 2, 2, 1, 2, 100), 306);
    expect("one stage: m forwards and backwards", run(PP_1F1B, 1, 5, 1, 2, 7), 15);
    expect("gpipe pp 4 m 8, free: (m + pp - 1)·3", run(PP_GPIPE, 4, 8, 1, 2, -1), 33);
    for (int pp = 2; pp <= 8; pp *= 2)
        for (int m = pp; m <= 4 * pp; m *= 2) {
            char what[64];
            snprintf(what, sizeof what, "1f1b bubble pp %d m %d = (pp-1)/(m+pp-1)", pp, m);
            expect(what, sched_simulated_bubble(PP_1F1B, pp, 1, m), sched_ideal_bubble(PP_1F1B, pp, 1, m));
        }
    return test_exit("test_schedule");
}
