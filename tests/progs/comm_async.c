// comm_async.c — run under mpirun by tests/test_mpi_comm_async.sh: each non-blocking collective
// (comm_i*) gives the same bytes as its blocking twin, on fp32 and bf16, with compute between
// start and wait; the counts agree (calls and bytes as blocking) and exposed time <= time in flight.
#include "parallel/comm.h"
#include "core/half.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fails;
#define EXPECT(c, ...) do { if (!(c)) { fprintf(stderr, "rank %d: FAIL ", comm_world_rank()); \
    fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); fails++; } } while (0)

static float val(int rank, long i) { return (float)((rank * 131 + i * 7) % 97) / 8.0f - 5.0f; }

static double busy(void) {   // compute between start and wait, driving progress now and then
    double s = 0;
    for (int k = 0; k < 20; k++) { for (int i = 0; i < 20000; i++) s += sin(i * 1e-3); comm_progress(); }
    return s;
}

static void check_same(const char *what, const void *a, const void *b, size_t bytes) {
    EXPECT(!memcmp(a, b, bytes), "%s: the non-blocking result differs from the blocking one", what);
}

static void allreduce_and_gathers(Group *g, long n) {
    int P = g->size, r = g->rank;
    float *a = malloc(n * P * 4), *b = malloc(n * P * 4), *ra = malloc(n * P * 4), *rb = malloc(n * P * 4);
    for (long i = 0; i < n * P; i++) a[i] = b[i] = val(r, i);
    CommReq q;
    comm_allreduce(g, a, n * P, DT_F32);
    comm_iallreduce(g, b, n * P, DT_F32, &q); busy(); comm_req_wait(&q);
    check_same("allreduce f32", a, b, n * P * 4);
    comm_reduce_scatter(g, a, ra, n, DT_F32);
    comm_ireduce_scatter(g, b, rb, n, DT_F32, &q); busy(); comm_req_wait(&q);
    check_same("reduce_scatter f32", ra, rb, n * 4);
    comm_allgather(g, ra, a, n, DT_F32);
    comm_iallgather(g, rb, b, n, DT_F32, &q); while (!comm_req_test(&q)) busy();
    check_same("allgather f32", a, b, n * P * 4);
    uint16_t *h1 = malloc(n * P * 2), *h2 = malloc(n * P * 2);
    for (long i = 0; i < n * P; i++) h1[i] = h2[i] = bf16_from_f32(val(r, i));
    comm_allreduce(g, h1, n * P, DT_BF16);
    comm_iallreduce(g, h2, n * P, DT_BF16, &q); busy(); comm_req_wait(&q);
    check_same("allreduce bf16", h1, h2, n * P * 2);
    free(a); free(b); free(ra); free(rb); free(h1); free(h2);
}

static void alltoallv(Group *g) {   // rank r sends r + p + 1 elements to rank p
    int P = g->size, r = g->rank;
    long sc[64], sd[64], rc[64], rd[64], ns = 0, nr = 0;
    for (int p = 0; p < P; p++) { sc[p] = r + p + 1; sd[p] = ns; ns += sc[p]; rc[p] = p + r + 1; rd[p] = nr; nr += rc[p]; }
    float *s = malloc(ns * 4), *a = malloc(nr * 4), *b = malloc(nr * 4);
    for (long i = 0; i < ns; i++) s[i] = val(r, i);
    comm_alltoallv(g, s, sc, sd, a, rc, rd, DT_F32);
    CommReq q[2];
    comm_ialltoallv(g, s, sc, sd, b, rc, rd, DT_F32, &q[0]);
    float *b2 = malloc(nr * 4);
    comm_ialltoallv(g, s, sc, sd, b2, rc, rd, DT_F32, &q[1]);   // two in flight at once
    EXPECT(comm_in_flight() <= 2, "in flight %d", comm_in_flight());
    busy(); comm_req_waitall(q, 2);
    check_same("alltoallv", a, b, nr * 4);
    check_same("alltoallv (second)", a, b2, nr * 4);
    EXPECT(comm_in_flight() == 0, "%d requests still in flight after the waits", comm_in_flight());
    free(s); free(a); free(b); free(b2);
}

int main(int argc, char **argv) {
    comm_init(&argc, &argv);
    Group w = comm_group(GROUP_WORLD, 0, comm_world_rank());
    comm_stats_reset();
    allreduce_and_gathers(&w, 1000);
    alltoallv(&w);
    const CommStats *s = comm_stats();
    for (int c = 0; c < COLL_N; c++) {
        const CommCount *k = &s->c[c][GROUP_WORLD];
        if (!k->calls) continue;
        EXPECT(k->exposed_ms <= k->ms + 1e-6, "%s: exposed %.3f ms > in flight %.3f ms", comm_coll_name(c), k->exposed_ms, k->ms);
    }
    int P1 = w.size > 1;   // a group of one sends nothing and counts nothing
    EXPECT(s->c[COLL_ALLREDUCE][GROUP_WORLD].calls == 4 * P1, "allreduce calls %lld, want 4", s->c[COLL_ALLREDUCE][GROUP_WORLD].calls);
    EXPECT(s->c[COLL_ALLTOALL][GROUP_WORLD].calls == 3 * P1, "alltoall calls %lld, want 3", s->c[COLL_ALLTOALL][GROUP_WORLD].calls);
    EXPECT(s->c[COLL_ALLGATHER][GROUP_WORLD].bytes == 2 * 1000 * 4 * P1, "allgather bytes %lld", s->c[COLL_ALLGATHER][GROUP_WORLD].bytes);
    int bad = comm_max_int(&w, fails);
    if (comm_world_rank() == 0) printf(bad ? "comm_async: FAIL\n" : "comm_async: %d ranks, every non-blocking collective equals its blocking twin\n", w.size);
    comm_finalize();
    return bad ? 1 : 0;
}
