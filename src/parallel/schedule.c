// schedule.c — the pipeline schedules (see schedule.h).
//  gpipe:       all forwards in micro-batch order, then all backwards.
//  1f1b:        (PipeDream-Flush) stage s runs pp-s-1 forwards to fill the pipe, then one
//               forward and one backward in turn, then the remaining backwards.
//  interleaved: (Megatron) 1f1b over the v chunks of a stage: the k-th forward is of chunk
//               (k/pp) mod v for micro-batch (k/(pp·v))·pp + k mod pp, the k-th backward of chunk
//               v-1-(k/pp) mod v for the same micro-batch; the warm-up is (pp-s-1)·2 + (v-1)·pp
//               forwards (all of them when m = pp).
// Every schedule runs each chunk's backwards in micro-batch order, so gradients accumulate in the
// order of one process.
#include "parallel/schedule.h"
#include "core/alloc.h"
#include "config/config.h"
#include "core/util.h"
#include <string.h>

void sched_chunks(int L, int nch, const int *layers, int *l0) {
    l0[0] = 0;
    for (int c = 0; c < nch; c++)
        l0[c + 1] = l0[c] + (layers ? layers[c] : L / nch + (c < L % nch));
}

static void emit(Schedule *s, PipeOp op, int mb, int chunk) {
    s->ins = ted_realloc(s->ins, sizeof(PipeInstr) * (s->n + 1), MEM_TEMP);
    s->ins[s->n++] = (PipeInstr){op, mb, chunk};
}

// A forward with its input received first and its output sent after; a backward likewise.
static void forward(Schedule *s, int mb, int chunk) {
    int last = s->pp * s->v - 1;
    if (chunk > 0) emit(s, PIPE_RECV_ACT, mb, chunk);
    emit(s, PIPE_FORWARD, mb, chunk);
    if (chunk < last) emit(s, PIPE_SEND_ACT, mb, chunk);
}
static void backward(Schedule *s, int mb, int chunk) {
    int last = s->pp * s->v - 1;
    if (chunk < last) emit(s, PIPE_RECV_GRAD, mb, chunk);
    emit(s, PIPE_BACKWARD, mb, chunk);
    if (chunk > 0) emit(s, PIPE_SEND_GRAD, mb, chunk);
}

// The k-th forward (or backward) of the stage: its micro-batch and global chunk.
static void kth(const Schedule *s, int k, int is_backward, int *mb, int *chunk) {
    int pp = s->pp, v = s->v, local = (k / pp) % v;
    if (is_backward) local = v - 1 - local;
    *mb = (k / (pp * v)) * pp + k % pp;
    *chunk = local * pp + s->stage;
}

void sched_build(Schedule *s, int kind, int pp, int v, int m, int stage) {
    memset(s, 0, sizeof *s);
    s->kind = kind; s->pp = pp; s->v = kind == PP_INTERLEAVED ? v : 1; s->m = m; s->stage = stage;
    int total = m * s->v, warm;
    if (kind == PP_GPIPE) warm = total;
    else if (kind == PP_1F1B) warm = pp - stage - 1;
    else warm = m == pp ? total : (pp - stage - 1) * 2 + (s->v - 1) * pp;
    if (warm > total) warm = total;
    int mb, c;
    for (int k = 0; k < warm; k++) { kth(s, k, 0, &mb, &c); forward(s, mb, c); }
    for (int k = 0; k < total - warm; k++) {
        kth(s, k + warm, 0, &mb, &c); forward(s, mb, c);
        kth(s, k, 1, &mb, &c); backward(s, mb, c);
    }
    for (int k = total - warm; k < total; k++) { kth(s, k, 1, &mb, &c); backward(s, mb, c); }
}

void sched_free(Schedule *s) { ted_free(s->ins); memset(s, 0, sizeof *s); }

const char *sched_name(int kind) {
    return kind == PP_GPIPE ? "gpipe" : kind == PP_1F1B ? "1f1b" : "interleaved";
}

static const char *op_name(PipeOp op) {
    static const char *n[] = {"recv-act", "F", "send-act", "recv-grad", "B", "send-grad"};
    return n[op];
}

void sched_print(const Schedule *s, FILE *f) {
    for (int i = 0; i < s->n; i++)
        fprintf(f, "%s mb %d chunk %d\n", op_name(s->ins[i].op), s->ins[i].mb, s->ins[i].chunk);
}

int sched_in_flight(const Schedule *s, int chunk) {
    int now = 0, most = 0;
    for (int i = 0; i < s->n; i++) {
        if (s->ins[i].chunk != chunk) continue;
        if (s->ins[i].op == PIPE_FORWARD && ++now > most) most = now;
        if (s->ins[i].op == PIPE_BACKWARD) now--;
    }
    return most;
}

// Runs every stage's list against the others: a receive waits for its message, which leaves when
// the sender reaches the send and its link (one per stage and direction) is free, and takes msg[c]
// (c: the chunk the activation leaves, or whose input gradient travels back). Returns the step's
// length, or -1 when the lists cannot all finish (a deadlock).
static double simulate(Schedule *st, int pp, int m, int nch, const SchedCost *c) {
    double *fsent = ted_alloc(sizeof(double) * m * nch, MEM_TEMP), *bsent = ted_alloc(sizeof(double) * m * nch, MEM_TEMP);
    double *clock = ted_alloc(sizeof(double) * pp, MEM_TEMP), *link = ted_alloc(sizeof(double) * 2 * pp, MEM_TEMP);
    int *pc = ted_alloc(sizeof(int) * pp, MEM_TEMP), progress = 1, left = 0;
    double span = 0;
    for (int i = 0; i < m * nch; i++) fsent[i] = bsent[i] = -1;
    for (int p = 0; p < pp; p++) left += st[p].n;
    while (left && progress) {
        progress = 0;
        for (int p = 0; p < pp; p++)
            while (pc[p] < st[p].n) {
                PipeInstr in = st[p].ins[pc[p]];
                int at = in.mb * nch + in.chunk;
                double ready = 0, *l = &link[2 * p + (in.op == PIPE_SEND_GRAD)];
                if (in.op == PIPE_RECV_ACT) ready = fsent[at - 1];
                if (in.op == PIPE_RECV_GRAD) ready = bsent[at + 1];
                if (ready < 0) break;   // the message has not been sent yet
                if (ready > clock[p]) clock[p] = ready;
                if (in.op == PIPE_FORWARD) clock[p] += c->fwd[in.chunk];
                if (in.op == PIPE_BACKWARD) clock[p] += c->bwd[in.chunk];
                if (in.op == PIPE_SEND_ACT || in.op == PIPE_SEND_GRAD) {
                    double took = c->msg ? c->msg[in.chunk - (in.op == PIPE_SEND_GRAD)] : 0;
                    *l = (*l > clock[p] ? *l : clock[p]) + took;
                    (in.op == PIPE_SEND_ACT ? fsent : bsent)[at] = *l;
                    if (*l > span) span = *l;
                }
                if (clock[p] > span) span = clock[p];
                pc[p]++; left--; progress = 1;
            }
    }
    ted_free(fsent); ted_free(bsent); ted_free(clock); ted_free(link); ted_free(pc);
    return left ? -1 : span;
}

double sched_simulate(int kind, int pp, int v, int m, const SchedCost *cost) {
    Schedule *st = ted_alloc(sizeof(Schedule) * pp, MEM_TEMP);
    for (int p = 0; p < pp; p++) sched_build(&st[p], kind, pp, v, m, p);
    double span = simulate(st, pp, m, pp * st[0].v, cost);
    for (int p = 0; p < pp; p++) sched_free(&st[p]);
    ted_free(st);
    return span;
}

double sched_simulated_bubble(int kind, int pp, int v, int m) {
    int vv = kind == PP_INTERLEAVED ? v : 1, nch = pp * vv;
    double *f = ted_alloc(sizeof(double) * 2 * nch, MEM_TEMP), *b = f + nch;
    for (int c = 0; c < nch; c++) { f[c] = 1.0 / vv; b[c] = 2.0 / vv; }
    double span = sched_simulate(kind, pp, v, m, &(SchedCost){f, b, NULL});
    ted_free(f);
    return span < 0 ? -1 : (span - 3.0 * m) / span;
}

double sched_ideal_bubble(int kind, int pp, int v, int m) {
    double vm = kind == PP_INTERLEAVED ? (double)v * m : m;
    return (pp - 1) / (vm + pp - 1);
}
