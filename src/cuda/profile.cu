// profile.cu — TED_GPU_PROF=1: where a GPU step's time goes, without a profiler (core/device.h).
// Every op names its kind of work (cuda_ops.h: PROF); a change of kind records a CUDA event on
// the stream, so consecutive events cut the stream's timeline into pieces of one kind each (the
// GEMMs inside an op are GEMM time). Between ops, and after a host synchronisation until the
// next op, the piece is "idle": the stream waits for the host. After each synchronisation the
// completed pieces are timed (cudaEventElapsedTime). Kernel launches, cuBLAS calls, copies and
// host synchronisations are counted by the kind of op that makes them. A step ends at each optimizer step (zero.c); at exit one JSON line per rank
// goes to stderr with the averages per step, the first step (allocations, plans) left out.
#include "cuda_ops.h"
#include <chrono>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

static const char *const kind_names[PROF_N] = {"other", "gemm", "attention", "norm_elementwise", "cast", "moe",
                                               "optimizer", "loss", "copy", "comm", "idle"};

namespace {

struct Mark { cudaEvent_t ev; int kind; };

// what has been counted: time and launches per kind, host synchronisations and their time
struct Totals { double ms[PROF_N], launches[PROF_N], syncs, sync_ms; };

struct Prof {
    int on, kind, piece, rank, steps;     // the op's kind, the current piece's, ...
    std::vector<Mark> marks;              // recorded, not yet timed; marks[0] opens the current piece
    std::vector<cudaEvent_t> pool;        // events to reuse
    Totals now;                           // so far
    Totals first, last;                   // at the end of the first step and of the last one timed so far
    int last_step;                        // which step `last` is
} P;

cudaEvent_t take_event(void) {
    if (P.pool.empty()) {
        cudaEvent_t e;
        CU_CHECK(cudaEventCreate(&e));
        return e;
    }
    cudaEvent_t e = P.pool.back();
    P.pool.pop_back();
    return e;
}

// a new piece of kind k starts at the stream's current position
void mark(int k) {
    CU_CHECK(cudaEventRecord(P.marks.emplace_back(Mark{take_event(), k}).ev, cu_stream()));
}

// the pieces between recorded events, all reached (the stream was synchronised after the last
// one was recorded), timed; the last event stays as the start of the piece that follows
void settle(void) {
    for (size_t i = 0; i + 1 < P.marks.size(); i++) {
        float t = 0;
        CU_CHECK(cudaEventElapsedTime(&t, P.marks[i].ev, P.marks[i + 1].ev));
        P.now.ms[P.marks[i].kind] += t;
        P.pool.push_back(P.marks[i].ev);
    }
    if (P.marks.size() > 1) P.marks.erase(P.marks.begin(), P.marks.end() - 1);
}

// the per-step averages of the steps after the first (or of the first, when it is the only one)
void report(void) {
    if (!P.on || !P.steps) return;
    CU_CHECK(cudaStreamSynchronize(cu_stream()));
    settle();
    Totals z = {}, d = P.last_step ? P.last : P.first, b = P.last_step ? P.first : z;
    double n = P.last_step ? P.last_step - 1 : 1, total = 0, launches = 0;
    char buf[2048];
    int u = snprintf(buf, sizeof buf, "{\"gpu_prof\": {\"rank\": %d, \"device\": \"%s\", \"steps\": %d, "
                     "\"first_step_left_out\": %s, \"ms_per_step\": {", P.rank, cu_device_name(), (int)n,
                     P.last_step ? "true" : "false");
    for (int k = 0; k < PROF_N; k++) {
        u += snprintf(buf + u, sizeof buf - u, "%s\"%s\": %.3f", k ? ", " : "", kind_names[k], (d.ms[k] - b.ms[k]) / n);
        total += d.ms[k] - b.ms[k];
    }
    u += snprintf(buf + u, sizeof buf - u, ", \"total\": %.3f}, \"launches_per_step\": {", total / n);
    for (int k = 0; k < PROF_N; k++) {
        if (k == PROF_IDLE) continue;
        double l = d.launches[k] - b.launches[k];
        u += snprintf(buf + u, sizeof buf - u, "%s\"%s\": %.1f", k ? ", " : "", kind_names[k], l / n);
        launches += l;
    }
    snprintf(buf + u, sizeof buf - u, ", \"total\": %.1f}, \"host_syncs_per_step\": %.1f, \"host_sync_ms_per_step\": %.3f}}\n",
             launches / n, (d.syncs - b.syncs) / n, (d.sync_ms - b.sync_ms) / n);
    fputs(buf, stderr);
}

}   // namespace

void cu_prof_init(int rank) {
    const char *v = getenv("TED_GPU_PROF");
    if (!v || !*v || !strcmp(v, "0")) return;
    P.on = 1;
    P.rank = rank;
    P.kind = P.piece = PROF_IDLE;
    mark(PROF_IDLE);
    atexit(report);
}

// the current piece of the timeline becomes of kind k
static void piece(int k) {
    if (P.piece == k) return;
    P.piece = k;
    mark(k);
}

int cu_prof_enter(int kind) {
    int prev = P.kind;
    if (!P.on) return prev;
    P.kind = kind;
    piece(kind);
    return prev;
}

void cu_prof_leave(int prev) {
    if (!P.on) return;
    P.kind = prev;
    piece(prev);
}

void cu_prof_launch(int n) { if (P.on) P.now.launches[P.kind] += n; }

void cu_prof_count(int kind, int n) { if (P.on) P.now.launches[kind] += n; }

// The totals at the step's end: the stream is waited for (the profiler's own wait, not counted:
// the optimizer has just read its norm back, so the stream is about empty). Work after the last
// step (evaluation, samples at the end of a run) is left out.
void cu_prof_step(void) {
    if (!P.on) return;
    CU_CHECK(cudaStreamSynchronize(cu_stream()));
    settle();
    if (++P.steps == 1) P.first = P.now;
    else { P.last = P.now; P.last_step = P.steps; }
}

void cu_stream_sync(void) {
    if (!P.on) { CU_CHECK(cudaStreamSynchronize(cu_stream())); return; }
    auto t0 = std::chrono::steady_clock::now();
    CU_CHECK(cudaStreamSynchronize(cu_stream()));
    P.now.sync_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    P.now.syncs++;
    settle();           // every recorded event is reached
    piece(PROF_IDLE);   // the stream is empty: it waits for the host's next op
}
