// calibrate.c — measuring a cluster (see calibrate.h).
#include "perf/calibrate.h"
#include "core/alloc.h"
#include "core/util.h"
#include "model/mfu.h"
#include "parallel/comm.h"
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define HOSTLEN 64

// Ranks per node and nodes, from every rank's host name; the first rank of rank 0's node that is
// not rank 0 (near) and the first rank elsewhere (far), -1 when there is none.
static int layout_of(Group *w, int *per, int *nodes, int *near, int *far) {
    char mine[HOSTLEN] = {0}, *all = ted_alloc((size_t)HOSTLEN * w->size, MEM_TEMP);
    gethostname(mine, HOSTLEN - 1);
    comm_allgather(w, mine, all, HOSTLEN, DT_BYTE);
    *near = *far = -1;
    int on0 = 0, distinct = 0;
    for (int r = 0; r < w->size; r++) {
        int same = !strcmp(all + r * HOSTLEN, all), first = 1;
        on0 += same;
        for (int q = 0; q < r; q++) first &= strcmp(all + q * HOSTLEN, all + r * HOSTLEN) != 0;
        distinct += first;
        if (r && same && *near < 0) *near = r;
        if (!same && *far < 0) *far = r;
    }
    ted_free(all);
    *per = on0;
    *nodes = distinct;
    if (on0 * distinct != w->size) { ted_error("tune --calibrate: the nodes hold different numbers of ranks"); return -1; }
    return 0;
}

// Devices per compute unit: the ranks on this machine (the same kernel boot id, which network
// namespaces share) times their threads, over its cores; 1 when every rank has cores of its own.
static double shared_by(Group *w) {
    char mine[HOSTLEN] = {0}, *all = ted_alloc((size_t)HOSTLEN * w->size, MEM_TEMP);
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (!f || !fgets(mine, HOSTLEN - 1, f)) gethostname(mine, HOSTLEN - 1);
    if (f) fclose(f);
    comm_allgather(w, mine, all, HOSTLEN, DT_BYTE);
    int here = 0;
    for (int r = 0; r < w->size; r++) here += !strcmp(all + r * HOSTLEN, mine);
    ted_free(all);
    float s = (float)here * omp_get_max_threads() / (float)sysconf(_SC_NPROCESSORS_ONLN);
    comm_allreduce_max(w, &s, 1);
    return s > 1 ? s : 1;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

// The median of n tries (sorts t).
static double median(double *t, int n) {
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    return t[n / 2];
}

// The sgemm rate of the slowest rank with every rank multiplying at once (shared cores show), the
// median of PEAK_TRIES tries: one try is off by up to 20 % when the ranks start it at different times.
#define PEAK_TRIES 5
static double peak_all(Group *w) {
    double t[PEAK_TRIES];
    for (int i = 0; i < PEAK_TRIES; i++) {
        comm_barrier(w);
        float neg = -(float)sgemm_peak_flops(1024, 5);
        comm_allreduce_max(w, &neg, 1);
        t[i] = -neg;
    }
    return median(t, PEAK_TRIES);
}

// Rank 0's sgemm rate while every other rank waits and yields its core (the napping wait of
// comm_req_wait, as a pipeline stage waits in its bubble): on shared cores a device alone runs this
// much faster than peak_all, which is what the pipeline's bubble gives the busy stage.
#define ALONE_TRIES 5
static double alone(Group *w) {
    float v = 0;
    double t[ALONE_TRIES];
    for (int i = 0; i < ALONE_TRIES; i++) {
        CommReq r;
        comm_barrier(w);
        t[i] = w->rank == 0 ? sgemm_peak_flops(1024, 5) : 0;
        comm_iallreduce(w, &v, 1, DT_F32, &r);   // the others nap here until rank 0 is done
        comm_req_wait(&r);
    }
    double rate = median(t, ALONE_TRIES);
    comm_broadcast(w, &rate, 1, DT_F64, 0);
    return rate;
}

// One-way time of an n-byte message between rank r and r + shift for every r < pairs at once, the
// median of reps tries as rank 0 sees it (the best one would credit a shaped link's burst allowance
// as bandwidth). With pairs > 1 the ranks of a node share its uplink as they do when a collective
// crosses nodes. Ping-pong (duplex 0): a message there, then one back, half the round trip. Duplex:
// both ends send at once and the time is until both messages are in, so every pair loads both
// directions all along, as a collective does (in a ping-pong, pairs that drift apart find the
// link free and read up to 20 % fast at 1 Gbit/s). Each try starts nap_s seconds after a barrier.
static double one_way(Group *w, int shift, int pairs, long n, int reps, int duplex, double nap_s) {
    char *buf = ted_alloc((size_t)n * 2, MEM_COMM), *in = buf + n;
    int me = w->rank, lo = me < pairs, hi = me >= shift && me - shift < pairs, peer = lo ? me + shift : me - shift;
    double *t = ted_alloc(sizeof(double) * reps, MEM_TEMP), mid;
    for (int i = 0; i < reps; i++) {
        t[i] = 0;
        comm_barrier(w);
        if (nap_s > 0) usleep((useconds_t)(nap_s * 1e6));
        if (!lo && !hi) continue;
        MPI_Request req;
        double t0 = now_ms();
        if (duplex) { comm_isend(w, buf, n, DT_BYTE, peer, 7, &req); comm_recv(w, in, n, DT_BYTE, peer, 7); comm_wait(&req); }
        else if (lo) { comm_isend(w, buf, n, DT_BYTE, peer, 7, &req); comm_wait(&req); comm_recv(w, in, n, DT_BYTE, peer, 8); }
        else { comm_recv(w, in, n, DT_BYTE, peer, 7); comm_isend(w, buf, n, DT_BYTE, peer, 8, &req); comm_wait(&req); }
        t[i] = (now_ms() - t0) / (duplex ? 1e3 : 2e3);
    }
    mid = median(t, reps);
    ted_free(t);
    ted_free(buf);
    return mid;
}

// On shared cores, what a TP or EP collective waits for its peers beyond its bytes when the ranks
// compute between calls, as a block's do: pairs of neighbouring ranks (on one node: ranks fill nodes
// in order) alternate a small GEMM and an 8-byte all-reduce, MEET_ROUNDS times a batch. A rank's waits
// average E[max(a, b)] − E[a] over its pair's arrival times, which is what each meeting adds to its
// step; a batch's mean over every rank and round, less an all-reduce's two latencies, in seconds, and
// the median of MEET_BATCHES batches (one batch's mean moved by 30 % between calibrations).
#define MEET_ROUNDS 40
#define MEET_BATCHES 5
static double meet_of(Group *w, const Link *intra) {
    Group pair = comm_group(GROUP_TP, w->rank / 2, w->rank);
    double batch[MEET_BATCHES];
    float v = 0;
    for (int b = 0; b < MEET_BATCHES; b++) {
        double sum = 0;
        for (int i = 0; i < MEET_ROUNDS; i++) {
            sgemm_peak_flops(256, 1);
            double t0 = now_ms();
            comm_allreduce(&pair, &v, 1, DT_F32);
            sum += now_ms() - t0;
        }
        comm_allreduce(w, &sum, 1, DT_F64);
        batch[b] = sum / MEET_ROUNDS / w->size * 1e-3 - 2 * intra->lat;
    }
    double m = median(batch, MEET_BATCHES);
    return m > 0 ? m : 0;
}

// A token bucket's share per device (Link.burst): after a nap long enough to refill a bucket of up to
// BURST_PROBE bytes a device, every pair sends BURST_PROBE bytes both ways at once; what arrived
// beyond the link's rate in that time came from the bucket. The median of 5 tries; 0 on a link that
// keeps its rate from the first byte.
#define BURST_PROBE (512 << 10)
static double burst_of(Group *w, int shift, int pairs, const Link *l) {
    double t = one_way(w, shift, pairs, BURST_PROBE, 5, 1, fmin(1.0, 2.0 * BURST_PROBE / l->bw));
    double b = BURST_PROBE - (t - l->lat) * l->bw;
    return b > 0 ? b : 0;
}

// The link between rank 0 and rank shift, `pairs` pairs at once (everyone calls; rank 0's figures
// are broadcast): latency from one pair alone (ping-pong), bandwidth with every pair sending both
// ways, and with bucket set the bucket's share.
static Link measure_link(Group *w, int shift, int pairs, int bucket) {
    double v[3] = {0, 0, 0};
    double lat = one_way(w, shift, 1, 8, 200, 0, 0), big = one_way(w, shift, pairs, 8 << 20, 9, 1, 0);
    if (w->rank == 0) { v[0] = lat; v[1] = (8 << 20) / (big - lat > 0 ? big - lat : big); }
    comm_broadcast(w, v, 2, DT_F64, 0);
    if (bucket) {
        v[2] = burst_of(w, shift, pairs, &(Link){v[1], v[0], 0});
        comm_broadcast(w, v + 2, 1, DT_F64, 0);
    }
    return (Link){v[1], v[0], v[2]};
}

int perf_calibrate(Cluster *c, char *note, int notelen) {
    Group w = comm_group(GROUP_WORLD, 0, comm_world_rank());
    memset(c, 0, sizeof *c);
    snprintf(c->name, sizeof c->name, "calibrated");
    int near = -1, far = -1;
    c->nodes = c->per_node = 1;
    if (w.size > 1 && layout_of(&w, &c->per_node, &c->nodes, &near, &far)) return -1;
    c->peak = peak_all(&w);
    c->gemm_eff = 0.55;
    // measured, then held within [1, ranks x threads / cores]: one rank alone cannot multiply faster
    // than the cores the ranks share allow (a higher reading is clock boost or another job's load)
    double bound = w.size > 1 ? shared_by(&w) : 1;
    c->shared_by = bound > 1 ? fmin(bound, fmax(1, alone(&w) / c->peak)) : 1;
    c->mem = (double)sysconf(_SC_PHYS_PAGES) * sysconf(_SC_PAGESIZE) / c->per_node;
    c->intra = c->inter = (Link){5e9, 2e-6, 0};
    if (near >= 0) c->intra = c->inter = measure_link(&w, near, 1, 0);
    // between nodes every rank of a node sends at once, to its twin on the next node (ranks are
    // filled node by node), so the figure is what one device gets of the node's uplink
    if (far >= 0) c->inter = measure_link(&w, far, far == c->per_node ? c->per_node : 1, 1);
    if (near < 0 && far >= 0) c->intra = c->inter;
    c->meet = c->shared_by > 1 && near >= 0 && c->per_node % 2 == 0 ? meet_of(&w, &c->intra) : 0;
    snprintf(note, (size_t)notelen, "measured by ted tune --calibrate on %d node(s) of %d rank(s): peak = the slowest rank's "
             "fp32 sgemm rate with every rank multiplying at once (median of 5); shared_by = how much faster one rank multiplies while the others wait, when ranks share the machine's cores; meet_us = a TP-like collective's wait for its peer between small GEMMs, on shared cores; links: %s; gemm_efficiency 0.55 is ted's bench "
             "model MFU on CPUs, not measured", c->nodes, c->per_node,
             near < 0 && far < 0 ? "not measured (one process: nominal shared-memory figures)"
                                 : far < 0 ? "8-byte ping-pong and 8 MB both ways at once inside the node (inter = intra: one node)"
                                           : "8-byte ping-pong and 8 MB both ways at once inside a node and between nodes, the latter "
                                             "with every rank of the node sending at once (a device's share of the uplink); burst_kb = "
                                             "what a device sends beyond the rate after the link was idle (its token bucket)");
    return 0;
}

char *cluster_json(const Cluster *c, const char *note) {
    size_t cap = 2048 + strlen(note);
    char *out = ted_alloc(cap, MEM_TEMP);
    snprintf(out, cap,
             "{\n  \"name\": \"%s\",\n  \"note\": \"%s\",\n  \"nodes\": %d, \"devices_per_node\": %d,\n"
             "  \"device\": {\"peak_tflops\": %.6g, \"gemm_efficiency\": %.3g, \"memory_gb\": %.4g, \"shared_by\": %.3g, \"meet_us\": %.4g},\n"
             "  \"intra\": {\"bandwidth_gbs\": %.4g, \"latency_us\": %.4g},\n"
             "  \"inter\": {\"bandwidth_gbs\": %.4g, \"latency_us\": %.4g, \"burst_kb\": %.4g}\n}\n",
             c->name, note, c->nodes, c->per_node, c->peak / 1e12, c->gemm_eff, c->mem / 1e9, c->shared_by, c->meet * 1e6, c->intra.bw / 1e9,
             c->intra.lat * 1e6, c->inter.bw / 1e9, c->inter.lat * 1e6, c->inter.burst / 1e3);
    return out;
}
