// profile.cu — TED_GPU_PROF=1: where a GPU step's time goes, without a profiler (core/device.h).
// Every op names its kind of work (cuda_ops.h: PROF); a change of kind records a CUDA event on
// the stream, so consecutive events cut the stream's timeline into pieces of one kind each (the
// GEMMs inside an op are GEMM time). Between ops, and after a host synchronisation until the
// next op, the piece is "idle": the stream waits for the host. After each synchronisation the
// completed pieces are timed (cudaEventElapsedTime). Kernel launches, cuBLAS calls, copies and
// host synchronisations are counted by the kind of op that makes them. A step ends at each optimizer step (zero.c); at exit one JSON line per rank
// goes to stderr with the averages per step, the first step (allocations, plans) left out.
// TED_GPU_PROF=2 also cuts pieces where the site changes (the op's function, "f in g" where op g
// calls op f, or a GEMM's shape and its op) and adds one "gpu_prof_site" line per site, the
// slowest first: ms and calls per step, and a GEMM's TFLOP/s.
#include "cuda_ops.h"
#include <algorithm>
#include <chrono>
#include <string>
#include <unordered_map>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

static const char *const kind_names[PROF_N] = {"other", "gemm", "attention", "norm_elementwise", "cast", "moe",
                                               "optimizer", "loss", "copy", "comm", "idle"};

namespace {

struct Mark { cudaEvent_t ev; int kind, site; };

// what has been counted: time and launches per kind, host synchronisations and their time
struct Totals { double ms[PROF_N], launches[PROF_N], syncs, sync_ms; };

// one site of TED_GPU_PROF=2: its totals so far, and at the end of the first step and the last
struct Site { std::string name, op; int kind; double ms[3], calls[3], flop[3]; };   // op: the function

struct Prof {
    int on, kind, piece, rank, steps;     // the op's kind, the current piece's, ...
    int sites_on, site, piece_site;       // TED_GPU_PROF=2: the op's site, the current piece's,
    int caller;                           // and the site the last op was entered from (0: none)
    std::vector<Site> sites;
    std::unordered_map<std::string, int> site_of;
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
void mark(int k, int site) {
    CU_CHECK(cudaEventRecord(P.marks.emplace_back(Mark{take_event(), k, site}).ev, cu_stream()));
}

// the index of the site of this name (kind: the kind of its first op)
int site_index(const std::string &name, int kind, const std::string &op) {
    auto it = P.site_of.find(name);
    if (it != P.site_of.end()) return it->second;
    P.sites.push_back(Site{name, op, kind, {}, {}, {}});
    return P.site_of[name] = (int)P.sites.size() - 1;
}

// the pieces between recorded events, all reached (the stream was synchronised after the last
// one was recorded), timed; the last event stays as the start of the piece that follows
void settle(void) {
    for (size_t i = 0; i + 1 < P.marks.size(); i++) {
        float t = 0;
        CU_CHECK(cudaEventElapsedTime(&t, P.marks[i].ev, P.marks[i + 1].ev));
        P.now.ms[P.marks[i].kind] += t;
        if (P.sites_on) P.sites[P.marks[i].site].ms[0] += t;
        P.pool.push_back(P.marks[i].ev);
    }
    if (P.marks.size() > 1) P.marks.erase(P.marks.begin(), P.marks.end() - 1);
}

// TED_GPU_PROF=2: a line per site with time, the slowest first: snapshot d less snapshot b (-1: none)
// over n steps
void report_sites(double n, int d, int b) {
    std::vector<int> order;
    auto per = [&](const double *x) { return (x[d] - (b < 0 ? 0 : x[b])) / n; };
    for (int i = 0; i < (int)P.sites.size(); i++)
        if (per(P.sites[i].ms) > 0 || per(P.sites[i].calls) > 0) order.push_back(i);
    std::stable_sort(order.begin(), order.end(),
                     [&](int a, int c) { return per(P.sites[a].ms) > per(P.sites[c].ms); });
    for (int i : order) {
        const Site &t = P.sites[i];
        double ms = per(t.ms), flop = per(t.flop);
        fprintf(stderr, "{\"gpu_prof_site\": {\"rank\": %d, \"site\": \"%s\", \"kind\": \"%s\", \"ms_per_step\": %.3f, "
                "\"calls_per_step\": %.1f", P.rank, t.name.c_str(), kind_names[t.kind], ms, per(t.calls));
        if (flop > 0) fprintf(stderr, ", \"tflops\": %.1f", ms > 0 ? flop / ms * 1e-9 : 0.0);
        fputs("}}\n", stderr);
    }
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
    long asked, calls, tuned, moved;   // the experts' cuBLASLt GEMMs, the whole run (gemm_lt.cu)
    cu_lt_counts(&asked, &calls);
    cu_lt_tuned(&tuned, &moved);
    snprintf(buf + u, sizeof buf - u, ", \"total\": %.1f}, \"host_syncs_per_step\": %.1f, \"host_sync_ms_per_step\": %.3f, "
             "\"lt\": {\"asked\": %ld, \"gemms\": %ld, \"classes_timed\": %ld, \"another_won\": %ld}}}\n",
             launches / n, (d.syncs - b.syncs) / n, (d.sync_ms - b.sync_ms) / n, asked, calls, tuned, moved);
    fputs(buf, stderr);
    if (P.sites_on) report_sites(n, P.last_step ? 2 : 1, P.last_step ? 1 : -1);
}

}   // namespace

void cu_prof_init(int rank) {
    const char *v = getenv("TED_GPU_PROF");
    if (!v || !*v || !strcmp(v, "0")) return;
    P.on = 1;
    P.sites_on = !strcmp(v, "2");
    P.rank = rank;
    P.kind = P.piece = PROF_IDLE;
    if (P.sites_on) P.site = P.piece_site = site_index("(the stream waits for the host)", PROF_IDLE, "");
    mark(PROF_IDLE, P.site);
    atexit(report);
}

// the current piece of the timeline becomes of kind k at site s
static void piece(int k, int s) {
    if (P.piece == k && P.piece_site == s) return;
    P.piece = k;
    P.piece_site = s;
    mark(k, s);
}

// what enter returns: the kind and the site to go back to, in one int
enum { kKindBits = 5 };
static_assert(PROF_N <= 1 << kKindBits, "the kinds fit below the site");

int cu_prof_enter(int kind, const char *site) {
    int prev = P.kind | P.site << kKindBits;
    if (!P.on) return prev;
    P.kind = kind;
    if (P.sites_on) {   // an op called by another is a site of its own: "f in g"
        P.caller = P.site;
        std::string name = P.caller ? std::string(site) + " in " + P.sites[P.caller].op : std::string(site);
        P.site = site_index(name, kind, site);
        P.sites[P.site].calls[0]++;
    }
    piece(kind, P.site);
    return prev;
}

void cu_prof_leave(int prev) {
    if (!P.on) return;
    P.kind = prev & ((1 << kKindBits) - 1);
    P.site = prev >> kKindBits;
    piece(P.kind, P.site);
}

void cu_prof_gemm(int transA, int transB, long M, long N, long K, long batch, float beta) {
    if (!P.sites_on) return;
    // the GEMM's shape and the op it is part of; the rows of an op's GEMMs (M, or K where A is
    // transposed: a weight's gradient) vary with the routing in the experts, so an op's are "r"
    auto dim = [](long x, int rows) { return rows ? std::string("r") : std::to_string(x); };
    int op = P.caller != 0;
    std::string name = std::string("gemm ") + (transA ? "T" : "N") + (transB ? "T" : "N") + " " +
                       dim(M, op && !transA) + "x" + std::to_string(N) + "x" + dim(K, op && transA) +
                       (batch > 1 ? " x" + std::to_string(batch) : "") + (beta != 0 ? " +C" : "") +
                       (op ? " in " + P.sites[P.caller].op : "");
    int was = P.site;
    P.sites[was].calls[0]--;   // the call enter counted for the GEMM's function is this shape's
    P.site = site_index(name, PROF_GEMM, "gemm");
    P.sites[P.site].calls[0]++;
    P.sites[P.site].flop[0] += 2.0 * M * N * K * batch;
    if (!P.marks.empty() && P.marks.back().site == was) P.marks.back().site = P.piece_site = P.site;   // nothing ran since
    else piece(P.kind, P.site);
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
    int at = ++P.steps == 1 ? 1 : 2;   // the snapshot this step's end fills
    if (at == 1) P.first = P.now;
    else { P.last = P.now; P.last_step = P.steps; }
    for (Site &t : P.sites) t.ms[at] = t.ms[0], t.calls[at] = t.calls[0], t.flop[at] = t.flop[0];
}

void cu_stream_sync(void) {
    if (!P.on) { CU_CHECK(cudaStreamSynchronize(cu_stream())); return; }
    auto t0 = std::chrono::steady_clock::now();
    CU_CHECK(cudaStreamSynchronize(cu_stream()));
    P.now.sync_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    P.now.syncs++;
    settle();                             // every recorded event is reached
    piece(PROF_IDLE, 0);                  // the stream is empty: it waits for the host's next op
}
