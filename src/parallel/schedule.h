// schedule.h — a pipeline schedule (design §6) as a list of instructions a reader can print:
// for one stage, in order, what it does in one training step — receive a chunk's input,
// run its forward, send its output; receive the gradient of its output, run its backward, send
// the gradient of its input. With one stage the list is forward, backward, forward, backward, …
// (nothing is sent), which is the training step of one process.
#pragma once
#include <stdio.h>

typedef enum { PIPE_RECV_ACT, PIPE_FORWARD, PIPE_SEND_ACT, PIPE_RECV_GRAD, PIPE_BACKWARD, PIPE_SEND_GRAD } PipeOp;

typedef struct {
    PipeOp op;
    int mb;       // micro-batch 0..m-1
    int chunk;    // global chunk index 0..pp·v-1 (chunk c runs on stage c mod pp)
} PipeInstr;

typedef struct {
    int kind, pp, v, m, stage;   // kind: PP_GPIPE, PP_1F1B, PP_INTERLEAVED (config.h)
    PipeInstr *ins;
    int n;
} Schedule;

// The L blocks cut into nch contiguous chunks: chunk c is blocks [l0[c], l0[c+1]). As listed in
// `layers` (n entries = nch), or as equal as possible with earlier chunks taking the extra block.
void sched_chunks(int L, int nch, const int *layers, int *l0);
// The list of `stage` for m micro-batches over pp stages of v chunks each.
void sched_build(Schedule *s, int kind, int pp, int v, int m, int stage);
void sched_free(Schedule *s);
const char *sched_name(int kind);
// One line per instruction ("F mb 3 chunk 1", …).
void sched_print(const Schedule *s, FILE *f);
// The most micro-batches of chunk `chunk` whose forward has run and backward has not, at any
// point of the list: how many copies of that chunk's activations the stage holds.
int sched_in_flight(const Schedule *s, int chunk);
// Costs for sched_simulate, per global chunk c (pp·v of them): one micro-batch's forward and
// backward, and one message from chunk c to c+1 (its gradient back takes as long; NULL: free).
typedef struct { const double *fwd, *bwd, *msg; } SchedCost;
// Runs every stage's list against the others with these costs; messages of one stage and direction
// travel one at a time. Returns the step's length, or -1 when the lists deadlock.
double sched_simulate(int kind, int pp, int v, int m, const SchedCost *cost);
// The ideal bubble fraction, (idle time)/(step time) of a stage, from running every stage's list
// against each other with a forward costing 1/v and a backward 2/v (transfers free).
double sched_simulated_bubble(int kind, int pp, int v, int m);
// The formula: (pp-1)/(m+pp-1) for gpipe and 1f1b, (pp-1)/(v·m+pp-1) for interleaved.
double sched_ideal_bubble(int kind, int pp, int v, int m);
