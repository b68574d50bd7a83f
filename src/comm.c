// comm.c — collectives over MPI on host buffers (see comm.h). Size-1 groups never call MPI.
#include "comm.h"
#include "half.h"
#include "util.h"
#include <stdlib.h>
#include <string.h>

static int mpi_on = 0, world_size = 1, world_rank = 0;
static CommStats stats;

static size_t dsize(DType t) {
    switch (t) {
        case DT_F32: case DT_I32: return 4; case DT_F64: case DT_I64: return 8;
        case DT_BF16: case DT_F16: return 2; default: return 1;
    }
}
static MPI_Datatype mtype(DType t) {
    switch (t) {
        case DT_F32: return MPI_FLOAT; case DT_F64: return MPI_DOUBLE; case DT_I32: return MPI_INT;
        case DT_I64: return MPI_LONG_LONG; case DT_BF16: case DT_F16: return MPI_UINT16_T; default: return MPI_BYTE;
    }
}

// MPI has no 16-bit float sum: these add element by element in fp32 and round back.
static void sum_bf16(void *in, void *inout, int *n, MPI_Datatype *t) {
    const uint16_t *a = in; uint16_t *b = inout;
    for (int i = 0; i < *n; i++) b[i] = bf16_from_f32(bf16_to_f32(a[i]) + bf16_to_f32(b[i]));
}
static void sum_f16(void *in, void *inout, int *n, MPI_Datatype *t) {
    const uint16_t *a = in; uint16_t *b = inout;
    for (int i = 0; i < *n; i++) b[i] = fp16_from_f32(fp16_to_f32(a[i]) + fp16_to_f32(b[i]));
}
static MPI_Op sum_op(DType t) {
    static MPI_Op bf16 = MPI_OP_NULL, f16 = MPI_OP_NULL;
    if (t == DT_BF16) { if (bf16 == MPI_OP_NULL) MPI_Op_create(sum_bf16, 1, &bf16); return bf16; }
    if (t == DT_F16) { if (f16 == MPI_OP_NULL) MPI_Op_create(sum_f16, 1, &f16); return f16; }
    return MPI_SUM;
}

static int launched_by_mpi(void) {
    const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "SLURM_STEP_NUM_TASKS"};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) if (getenv(vars[i])) return 1;
    return 0;
}

void comm_init(int *argc, char ***argv) {
    if (!launched_by_mpi()) return;
    int provided;
    MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    mpi_on = 1;
    ted_defer_errors(world_size > 1);
}
void comm_finalize(void) { if (mpi_on) { MPI_Finalize(); mpi_on = 0; } }
int comm_world_size(void) { return world_size; }
int comm_world_rank(void) { return world_rank; }
int comm_mpi_active(void) { return mpi_on; }

Group comm_group(GroupKind kind, int color, int key) {
    Group g = {kind, 1, 0, MPI_COMM_NULL};
    if (!mpi_on) return g;
    MPI_Comm_split(MPI_COMM_WORLD, color, key, &g.comm);
    MPI_Comm_size(g.comm, &g.size);
    MPI_Comm_rank(g.comm, &g.rank);
    return g;
}

// Counting wrapper: time and bytes of one collective on group g.
typedef struct { double t0; } Tick;
static Tick tick(void) { return (Tick){now_ms()}; }
static void count(Tick t, CollKind c, Group *g, long long bytes) {
    CommCount *k = &stats.c[c][g->kind];
    k->calls++; k->bytes += bytes; k->ms += now_ms() - t.t0;
}

void comm_allreduce(Group *g, void *buf, long n, DType t) {
    if (g->size == 1) return;
    Tick k = tick();
    MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, mtype(t), sum_op(t), g->comm);
    count(k, COLL_ALLREDUCE, g, (long long)n * dsize(t));
}

void comm_allreduce_max(Group *g, float *buf, long n) {
    if (g->size == 1) return;
    Tick k = tick();
    MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_MAX, g->comm);
    count(k, COLL_ALLREDUCE, g, (long long)n * 4);
}

void comm_allgather(Group *g, const void *send, void *recv, long n, DType t) {
    if (g->size == 1) { if (send != recv) memmove(recv, send, n * dsize(t)); return; }
    Tick k = tick();
    const void *s = send;
    if ((const char *)send == (char *)recv + (size_t)g->rank * n * dsize(t)) s = MPI_IN_PLACE;
    MPI_Allgather(s, (int)n, mtype(t), recv, (int)n, mtype(t), g->comm);
    count(k, COLL_ALLGATHER, g, (long long)n * dsize(t));
}

void comm_reduce_scatter(Group *g, const void *send, void *recv, long n, DType t) {
    if (g->size == 1) { if (send != recv) memmove(recv, send, n * dsize(t)); return; }
    Tick k = tick();
    MPI_Reduce_scatter_block(send, recv, (int)n, mtype(t), sum_op(t), g->comm);
    count(k, COLL_REDUCE_SCATTER, g, (long long)n * g->size * dsize(t));
}

void comm_alltoall(Group *g, const void *send, void *recv, long n, DType t) {
    if (g->size == 1) { if (send != recv) memmove(recv, send, n * dsize(t)); return; }
    Tick k = tick();
    MPI_Alltoall(send, (int)n, mtype(t), recv, (int)n, mtype(t), g->comm);
    count(k, COLL_ALLTOALL, g, (long long)n * g->size * dsize(t));
}

void comm_alltoallv(Group *g, const void *send, const long *sc, const long *sd,
                    void *recv, const long *rc, const long *rd, DType t) {
    if (g->size == 1) { if (send != recv) memmove((char *)recv + rd[0] * dsize(t), (const char *)send + sd[0] * dsize(t), sc[0] * dsize(t)); return; }
    Tick k = tick();
    int P = g->size, *b = malloc(sizeof(int) * 4 * P);
    CHECK(b, "out of memory in alltoallv");
    long long bytes = 0;
    for (int i = 0; i < P; i++) {
        b[i] = (int)sc[i]; b[P + i] = (int)sd[i]; b[2 * P + i] = (int)rc[i]; b[3 * P + i] = (int)rd[i];
        bytes += sc[i];
    }
    MPI_Alltoallv(send, b, b + P, mtype(t), recv, b + 2 * P, b + 3 * P, mtype(t), g->comm);
    free(b);
    count(k, COLL_ALLTOALL, g, bytes * dsize(t));
}

void comm_broadcast(Group *g, void *buf, long n, DType t, int root) {
    if (g->size == 1) return;
    Tick k = tick();
    MPI_Bcast(buf, (int)n, mtype(t), root, g->comm);
    count(k, COLL_BROADCAST, g, (long long)n * dsize(t));
}

void comm_barrier(Group *g) { if (g->size > 1) MPI_Barrier(g->comm); }

int comm_max_int(Group *g, int v) {
    if (g->size == 1) return v;
    int r;
    MPI_Allreduce(&v, &r, 1, MPI_INT, MPI_MAX, g->comm);
    return r;
}

const CommStats *comm_stats(void) { return &stats; }
void comm_stats_reset(void) { memset(&stats, 0, sizeof stats); }
const char *comm_coll_name(CollKind c) {
    static const char *n[] = {"allreduce", "alltoall", "allgather", "reduce_scatter", "broadcast"};
    return n[c];
}
const char *comm_group_name(GroupKind g) {
    static const char *n[] = {"tp", "dp", "ep", "edp", "pp", "world"};
    return n[g];
}
