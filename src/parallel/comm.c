// comm.c — collectives over MPI on host buffers (see comm.h). Size-1 groups never call MPI.
#include "parallel/comm.h"
#include "core/device.h"
#include "core/alloc.h"
#include "core/half.h"
#include "core/util.h"
#include "core/watchdog.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
#ifdef TED_CUDA
#include <nccl.h>
#endif

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
    MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided);   // serialized: comm_progress_thread
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    mpi_on = 1;
    ted_defer_errors(world_size > 1);
}
// One OOB keepalive setting: the environment (mpirun --mca / -x), else the --tune files mpirun names
// in OMPI_MCA_mca_base_envar_file_prefix ("-mca NAME VALUE" tokens); -1 when neither sets it.
static int keepalive_param(const char *name) {
    char var[96];
    snprintf(var, sizeof var, "OMPI_MCA_oob_tcp_keepalive_%s", name);
    if (getenv(var)) return atoi(getenv(var));
    const char *files = getenv("OMPI_MCA_mca_base_envar_file_prefix");
    char list[1024], tok[256], want[96];
    snprintf(want, sizeof want, "oob_tcp_keepalive_%s", name);
    snprintf(list, sizeof list, "%s", files ? files : "");
    int v = -1;
    for (char *f = strtok(list, ","); f; f = strtok(NULL, ",")) {
        FILE *in = fopen(f, "r");
        if (!in) continue;
        int at = 0;   // 1: the previous token was -mca, 2: it was the wanted name
        while (fscanf(in, "%255s", tok) == 1) {
            if (at == 2) v = atoi(tok[0] == '"' ? tok + 1 : tok);
            at = at == 1 && !strcmp(tok, want) ? 2 : (!strcmp(tok, "-mca") || !strcmp(tok, "--mca"));
        }
        fclose(in);
    }
    return v;
}

int comm_launcher_keepalive_s(void) {
    if (!mpi_on || world_size == 1) return 0;
    int t = keepalive_param("time"), i = keepalive_param("intvl"), p = keepalive_param("probes");
    if (t <= 0) return 0;   // Open MPI's defaults (300 s, 20 s x 9): minutes, not worth waiting for
    return t + (i > 0 ? i : 20) * ((p > 0 ? p : 9) + 1);
}

void comm_finalize(void) { if (mpi_on) { MPI_Finalize(); mpi_on = 0; } }
int comm_world_size(void) { return world_size; }
int comm_world_rank(void) { return world_rank; }
int comm_mpi_active(void) { return mpi_on; }

// ---------------------------------------------------------------------------------------
// GPU runs: NCCL, or device buffers staged through the host

#ifdef TED_CUDA
#define NCCL_CHECK(x) do { ncclResult_t r_ = (x); \
    if (r_ != ncclSuccess) ted_fatal(1, "NCCL error in %s: %s", #x, ncclGetErrorString(r_)); } while (0)

// NCCL needs a GPU per rank: every rank must see at least as many GPUs as ranks on its node
// (agreed over the world, so that all groups take the same path). TED_NCCL=0 turns it off.
static int nccl_wanted(void) {
    static int decided = -1;
    if (decided >= 0) return decided;
    const char *env = getenv("TED_NCCL"), *local = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    int ok = !(env && !strcmp(env, "0")) && (local ? atoi(local) : 1) <= cu_device_count();
    if (mpi_on) MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    return decided = ok;
}

static void nccl_open(Group *g) {
    ncclUniqueId id;
    if (g->rank == 0) NCCL_CHECK(ncclGetUniqueId(&id));
    MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, g->comm);   // bootstrapped over MPI
    ncclComm_t c;
    NCCL_CHECK(ncclCommInitRank(&c, g->size, id, g->rank));
    g->nccl = c;
}

static int on_gpu(const void *p) { return ted_device == DEV_CUDA && cu_is_device_ptr(p); }
static cudaStream_t nstream(void) { return (cudaStream_t)cu_stream_ptr(); }
static ncclDataType_t ntype(DType t) {
    switch (t) {
        case DT_F32: return ncclFloat32; case DT_F64: return ncclFloat64; case DT_I32: return ncclInt32;
        case DT_I64: return ncclInt64; case DT_BF16: return ncclBfloat16; case DT_F16: return ncclFloat16;
        default: return ncclUint8;
    }
}

// Host staging buffers for device data when NCCL is not used: grown to the largest message
// at the first steps, then reused.
static void *stage_buf[2];
static size_t stage_cap[2];
static void *stage(int i, size_t bytes) {
    if (bytes > stage_cap[i]) {
        ted_free(stage_buf[i]);
        stage_buf[i] = ted_alloc(bytes, MEM_COMM);
        stage_cap[i] = bytes;
    }
    return stage_buf[i];
}
#endif

Group comm_group(GroupKind kind, int color, int key) {
    Group g = {kind, 1, 0, MPI_COMM_NULL, NULL};
    if (!mpi_on) return g;
    watchdog_enter("comm_split", comm_group_name(kind), world_size, 0);
    MPI_Comm_split(MPI_COMM_WORLD, color, key, &g.comm);
    watchdog_leave();
    MPI_Comm_size(g.comm, &g.size);
    MPI_Comm_rank(g.comm, &g.rank);
#ifdef TED_CUDA
    if (ted_device == DEV_CUDA && g.size > 1 && nccl_wanted()) nccl_open(&g);
#endif
    return g;
}

// Counting wrapper: time and bytes of one collective on group g.
typedef struct { double t0; } Tick;
static Tick tick(CollKind c, Group *g, long long bytes) {
    watchdog_enter(comm_coll_name(c), comm_group_name(g->kind), g->size, bytes);
    return (Tick){now_ms()};
}
static void count(Tick t, CollKind c, Group *g, long long bytes) {
    watchdog_leave();
    CommCount *k = &stats.c[c][g->kind];
    double ms = now_ms() - t.t0;
    k->calls++; k->bytes += bytes; k->ms += ms; k->exposed_ms += ms;
}

// GPU_PATH(buffer, nccl call, stat, bytes, staged fallback): on a GPU run with a device buffer,
// either the NCCL call (waited for, so that the counted time is the collective's) or the
// fallback, which stages through the host and calls the MPI path.
#ifdef TED_CUDA
#define GPU_PATH(p, nccl_call, coll, bytes, ...) \
    if (on_gpu(p)) { \
        if (g->nccl) { \
            Tick k_ = tick(coll, g, bytes); \
            int prev_ = cu_prof_enter(PROF_COMM, #coll); \
            NCCL_CHECK(nccl_call); \
            cu_prof_launch(1); \
            cu_sync(); \
            cu_prof_leave(prev_); \
            count(k_, coll, g, bytes); \
        } \
        else __VA_ARGS__ \
        return; \
    }
#else
#define GPU_PATH(p, nccl_call, coll, bytes, ...)
#endif

void comm_allreduce(Group *g, void *buf, long n, DType t) {
    if (g->size == 1) return;
    GPU_PATH(buf, ncclAllReduce(buf, buf, n, ntype(t), ncclSum, g->nccl, nstream()), COLL_ALLREDUCE,
             (long long)n * dsize(t), {
                 void *h = stage(0, n * dsize(t));
                 cu_memcpy(h, buf, n * dsize(t)); comm_allreduce(g, h, n, t); cu_memcpy(buf, h, n * dsize(t));
             })
    Tick k = tick(COLL_ALLREDUCE, g, (long long)n * dsize(t));
    MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, mtype(t), sum_op(t), g->comm);
    count(k, COLL_ALLREDUCE, g, (long long)n * dsize(t));
}

void comm_allreduce_max(Group *g, float *buf, long n) {
    if (g->size == 1) return;
    GPU_PATH(buf, ncclAllReduce(buf, buf, n, ncclFloat32, ncclMax, g->nccl, nstream()), COLL_ALLREDUCE,
             (long long)n * 4, {
                 float *h = stage(0, n * 4);
                 cu_memcpy(h, buf, n * 4); comm_allreduce_max(g, h, n); cu_memcpy(buf, h, n * 4);
             })
    Tick k = tick(COLL_ALLREDUCE, g, (long long)n * 4);
    MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_MAX, g->comm);
    count(k, COLL_ALLREDUCE, g, (long long)n * 4);
}

void comm_allgather(Group *g, const void *send, void *recv, long n, DType t) {
    if (g->size == 1) { if (send != recv) buf_copy(recv, send, n * dsize(t)); return; }
    GPU_PATH(recv, ncclAllGather(send, recv, n, ntype(t), g->nccl, nstream()), COLL_ALLGATHER,
             (long long)n * dsize(t), {
                 size_t b = n * dsize(t);
                 char *hs = stage(0, b), *hr = stage(1, b * g->size);
                 cu_memcpy(hs, send, b); comm_allgather(g, hs, hr, n, t); cu_memcpy(recv, hr, b * g->size);
             })
    Tick k = tick(COLL_ALLGATHER, g, (long long)n * dsize(t));
    const void *s = send;
    if ((const char *)send == (char *)recv + (size_t)g->rank * n * dsize(t)) s = MPI_IN_PLACE;
    MPI_Allgather(s, (int)n, mtype(t), recv, (int)n, mtype(t), g->comm);
    count(k, COLL_ALLGATHER, g, (long long)n * dsize(t));
}

void comm_reduce_scatter(Group *g, const void *send, void *recv, long n, DType t) {
    if (g->size == 1) { if (send != recv) buf_copy(recv, send, n * dsize(t)); return; }
    GPU_PATH(recv, ncclReduceScatter(send, recv, n, ntype(t), ncclSum, g->nccl, nstream()), COLL_REDUCE_SCATTER,
             (long long)n * g->size * dsize(t), {
                 size_t b = n * dsize(t);
                 char *hs = stage(0, b * g->size), *hr = stage(1, b);
                 cu_memcpy(hs, send, b * g->size); comm_reduce_scatter(g, hs, hr, n, t); cu_memcpy(recv, hr, b);
             })
    Tick k = tick(COLL_REDUCE_SCATTER, g, (long long)n * g->size * dsize(t));
    MPI_Reduce_scatter_block(send, recv, (int)n, mtype(t), sum_op(t), g->comm);
    count(k, COLL_REDUCE_SCATTER, g, (long long)n * g->size * dsize(t));
}

#ifdef TED_CUDA
// all-to-all as grouped point-to-point sends and receives (counts and displacements in elements)
static ncclResult_t nccl_alltoallv(Group *g, const void *send, const long *sc, const long *sd, void *recv,
                                   const long *rc, const long *rd, DType t) {
    size_t es = dsize(t);
    ncclResult_t r = ncclGroupStart();
    for (int p = 0; p < g->size && r == ncclSuccess; p++) {
        if (sc[p]) r = ncclSend((const char *)send + sd[p] * es, sc[p], ntype(t), p, g->nccl, nstream());
        if (rc[p] && r == ncclSuccess) r = ncclRecv((char *)recv + rd[p] * es, rc[p], ntype(t), p, g->nccl, nstream());
    }
    ncclResult_t e = ncclGroupEnd();
    return r != ncclSuccess ? r : e;
}
static ncclResult_t nccl_alltoall(Group *g, const void *send, void *recv, long n, DType t) {
    long c[4 * 256];
    CHECK(g->size <= 256, "all-to-all over more than 256 ranks");
    for (int p = 0; p < g->size; p++) { c[p] = c[2 * 256 + p] = n; c[256 + p] = c[3 * 256 + p] = p * n; }
    return nccl_alltoallv(g, send, c, c + 256, recv, c + 2 * 256, c + 3 * 256, t);
}
#endif

void comm_alltoall(Group *g, const void *send, void *recv, long n, DType t) {
    if (g->size == 1) { if (send != recv) buf_copy(recv, send, n * dsize(t)); return; }
    GPU_PATH(recv, nccl_alltoall(g, send, recv, n, t), COLL_ALLTOALL, (long long)n * g->size * dsize(t), {
        size_t b = n * dsize(t) * g->size;
        char *hs = stage(0, b), *hr = stage(1, b);
        cu_memcpy(hs, send, b); comm_alltoall(g, hs, hr, n, t); cu_memcpy(recv, hr, b);
    })
    Tick k = tick(COLL_ALLTOALL, g, (long long)n * g->size * dsize(t));
    MPI_Alltoall(send, (int)n, mtype(t), recv, (int)n, mtype(t), g->comm);
    count(k, COLL_ALLTOALL, g, (long long)n * g->size * dsize(t));
}

void comm_alltoallv(Group *g, const void *send, const long *sc, const long *sd,
                    void *recv, const long *rc, const long *rd, DType t) {
    if (g->size == 1) { if (send != recv) buf_copy((char *)recv + rd[0] * dsize(t), (const char *)send + sd[0] * dsize(t), sc[0] * dsize(t)); return; }
#ifdef TED_CUDA
    long long sbytes = 0, send_end = 0, recv_end = 0;
    for (int p = 0; p < g->size; p++) {
        sbytes += sc[p] * (long long)dsize(t);
        if (sd[p] + sc[p] > send_end) send_end = sd[p] + sc[p];
        if (rd[p] + rc[p] > recv_end) recv_end = rd[p] + rc[p];
    }
#endif
    GPU_PATH(recv, nccl_alltoallv(g, send, sc, sd, recv, rc, rd, t), COLL_ALLTOALL, sbytes, {
        size_t bs = send_end * dsize(t), br = recv_end * dsize(t);
        char *hs = stage(0, bs), *hr = stage(1, br);
        cu_memcpy(hs, send, bs); comm_alltoallv(g, hs, sc, sd, hr, rc, rd, t); cu_memcpy(recv, hr, br);
    })
    long long sent = 0;
    for (int i = 0; i < g->size; i++) sent += sc[i];
    Tick k = tick(COLL_ALLTOALL, g, sent * (long long)dsize(t));
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
    GPU_PATH(buf, ncclBroadcast(buf, buf, n, ntype(t), root, g->nccl, nstream()), COLL_BROADCAST,
             (long long)n * dsize(t), {
                 void *h = stage(0, n * dsize(t));
                 cu_memcpy(h, buf, n * dsize(t)); comm_broadcast(g, h, n, t, root); cu_memcpy(buf, h, n * dsize(t));
             })
    Tick k = tick(COLL_BROADCAST, g, (long long)n * dsize(t));
    MPI_Bcast(buf, (int)n, mtype(t), root, g->comm);
    count(k, COLL_BROADCAST, g, (long long)n * dsize(t));
}

void comm_barrier(Group *g) {
    if (g->size == 1) return;
    watchdog_enter("barrier", comm_group_name(g->kind), g->size, 0);
    MPI_Barrier(g->comm);
    watchdog_leave();
}

void comm_isend(Group *g, const void *buf, long n, DType t, int peer, int tag, MPI_Request *req) {
    CHECK(g->size > 1 && peer != g->rank, "point-to-point send to itself (group %s)", comm_group_name(g->kind));
    Tick k = tick(COLL_SENDRECV, g, (long long)n * dsize(t));
    MPI_Isend(buf, (int)n, mtype(t), peer, tag, g->comm, req);
    count(k, COLL_SENDRECV, g, (long long)n * dsize(t));
}

void comm_recv(Group *g, void *buf, long n, DType t, int peer, int tag) {
    CHECK(g->size > 1 && peer != g->rank, "point-to-point receive from itself (group %s)", comm_group_name(g->kind));
    watchdog_enter("recv", comm_group_name(g->kind), g->size, (long long)n * dsize(t));
    MPI_Recv(buf, (int)n, mtype(t), peer, tag, g->comm, MPI_STATUS_IGNORE);
    watchdog_leave();
}

void comm_wait(MPI_Request *req) {
    if (*req == MPI_REQUEST_NULL) return;
    watchdog_enter("send (wait)", "pp", 2, 0);
    double t0 = now_ms();
    MPI_Wait(req, MPI_STATUS_IGNORE);
    double ms = now_ms() - t0;
    stats.c[COLL_SENDRECV][GROUP_PP].ms += ms;
    stats.c[COLL_SENDRECV][GROUP_PP].exposed_ms += ms;
    watchdog_leave();
}

int comm_test(MPI_Request *req) {
    if (*req == MPI_REQUEST_NULL) return 1;
    int done = 0;
    MPI_Test(req, &done, MPI_STATUS_IGNORE);
    return done;
}

// ---------------------------------------------------------------------------------------
// Non-blocking collectives: started here, counted when complete (see comm.h)

#define MAX_IN_FLIGHT 1024
static CommReq *in_flight[MAX_IN_FLIGHT];
static int n_in_flight;

static void req_begin(CommReq *r, Group *g, CollKind c, long long bytes, const void *buf) {
#ifdef TED_CUDA
    CHECK(!on_gpu(buf), "non-blocking %s on a device buffer: overlap runs on the CPU only", comm_coll_name(c));
#else
    (void)buf;
#endif
    *r = (CommReq){MPI_REQUEST_NULL, c, g->kind, g->size, bytes, g->size > 1 ? now_ms() : 0, NULL};
    CHECK(n_in_flight < MAX_IN_FLIGHT, "more than %d non-blocking collectives in flight", MAX_IN_FLIGHT);
}
static void req_track(CommReq *r) { if (r->req != MPI_REQUEST_NULL) in_flight[n_in_flight++] = r; }

// The request is complete: count it (span from start to now) and forget it.
static void req_done(CommReq *r) {
    CommCount *k = &stats.c[r->coll][r->group];
    k->calls++; k->bytes += r->bytes; k->ms += now_ms() - r->t0;
    free(r->counts); r->counts = NULL;
    for (int i = 0; i < n_in_flight; i++)
        if (in_flight[i] == r) { in_flight[i] = in_flight[--n_in_flight]; break; }
}

void comm_iallreduce(Group *g, void *buf, long n, DType t, CommReq *r) {
    req_begin(r, g, COLL_ALLREDUCE, (long long)n * dsize(t), buf);
    if (g->size == 1) return;
    MPI_Iallreduce(MPI_IN_PLACE, buf, (int)n, mtype(t), sum_op(t), g->comm, &r->req);
    req_track(r);
}

void comm_iallgather(Group *g, const void *send, void *recv, long n, DType t, CommReq *r) {
    req_begin(r, g, COLL_ALLGATHER, (long long)n * dsize(t), recv);
    if (g->size == 1) { if (send != recv) buf_copy(recv, send, n * dsize(t)); return; }
    const void *s = send;
    if ((const char *)send == (char *)recv + (size_t)g->rank * n * dsize(t)) s = MPI_IN_PLACE;
    MPI_Iallgather(s, (int)n, mtype(t), recv, (int)n, mtype(t), g->comm, &r->req);
    req_track(r);
}

void comm_ireduce_scatter(Group *g, const void *send, void *recv, long n, DType t, CommReq *r) {
    req_begin(r, g, COLL_REDUCE_SCATTER, (long long)n * g->size * dsize(t), recv);
    if (g->size == 1) { if (send != recv) buf_copy(recv, send, n * dsize(t)); return; }
    MPI_Ireduce_scatter_block(send, recv, (int)n, mtype(t), sum_op(t), g->comm, &r->req);
    req_track(r);
}

void comm_ialltoallv(Group *g, const void *send, const long *sc, const long *sd,
                     void *recv, const long *rc, const long *rd, DType t, CommReq *r) {
    int P = g->size;
    long long sent = 0;
    for (int i = 0; i < P; i++) sent += sc[i];
    req_begin(r, g, COLL_ALLTOALL, sent * (long long)dsize(t), recv);
    if (P == 1) {
        if (send != recv) buf_copy((char *)recv + rd[0] * dsize(t), (const char *)send + sd[0] * dsize(t), sc[0] * dsize(t));
        return;
    }
    int *b = r->counts = malloc(sizeof(int) * 4 * P);
    CHECK(b, "out of memory in alltoallv");
    for (int i = 0; i < P; i++) {
        b[i] = (int)sc[i]; b[P + i] = (int)sd[i]; b[2 * P + i] = (int)rc[i]; b[3 * P + i] = (int)rd[i];
    }
    MPI_Ialltoallv(send, b, b + P, mtype(t), recv, b + 2 * P, b + 3 * P, mtype(t), g->comm, &r->req);
    req_track(r);
}

int comm_req_test(CommReq *r) {
    if (r->req == MPI_REQUEST_NULL) return 1;   // complete, or a size-1 group's (never counted)
    double t0 = now_ms();
    int done = 0;
    MPI_Test(&r->req, &done, MPI_STATUS_IGNORE);
    stats.c[r->coll][r->group].exposed_ms += now_ms() - t0;
    if (done) req_done(r);
    return done;
}

// MPI_Wait spins (yielding at most) until the request is done. Where ranks share cores, that spin
// takes the core from a peer that still computes what this rank waits for. So after a short spin
// (WAIT_SPIN_MS, the whole wait on a fast link) the wait tests every WAIT_NAP_US and sleeps between.
#define WAIT_SPIN_MS 0.1
#define WAIT_NAP_US 50
static void wait_napping(MPI_Request *req, double t0) {
    struct timespec nap = {0, WAIT_NAP_US * 1000};
    int done = 0;
    for (;;) {
        MPI_Test(req, &done, MPI_STATUS_IGNORE);
        if (done) return;
        if (now_ms() - t0 > WAIT_SPIN_MS) nanosleep(&nap, NULL);
    }
}

void comm_req_wait(CommReq *r) {
    if (r->req == MPI_REQUEST_NULL) return;
    watchdog_enter(comm_coll_name(r->coll), comm_group_name(r->group), r->gsize, r->bytes);
    double t0 = now_ms();
    wait_napping(&r->req, t0);
    stats.c[r->coll][r->group].exposed_ms += now_ms() - t0;
    watchdog_leave();
    req_done(r);
}

void comm_req_waitall(CommReq *r, int n) { for (int i = 0; i < n; i++) comm_req_wait(&r[i]); }

// Tests every request in flight, newest first (a completed one is swapped out from the end,
// which has been tested already).
void comm_progress(void) {
    for (int i = n_in_flight - 1; i >= 0; i--) if (i < n_in_flight) comm_req_test(in_flight[i]);
}
int comm_in_flight(void) { return n_in_flight; }

// The progress thread polls the requests in flight without completing them (MPI_Request_get_status
// runs Open MPI's progress engine and leaves the request to its owner's test or wait), every 0.5 ms.
static pthread_t pt;
static atomic_int pt_run;
static void *progress_loop(void *arg) {
    struct timespec nap = {0, 500000};   // 0.5 ms: a 64 kB socket buffer drains in 0.5 ms at 1 Gbit/s
    while (atomic_load(&pt_run)) {
        for (int i = 0; i < n_in_flight; i++) {
            int flag;
            MPI_Request_get_status(in_flight[i]->req, &flag, MPI_STATUS_IGNORE);
        }
        nanosleep(&nap, NULL);
    }
    return arg;
}

int comm_progress_thread_start(void) {
    if (!mpi_on || !n_in_flight) return 0;
    atomic_store(&pt_run, 1);
    return pthread_create(&pt, NULL, progress_loop, NULL) == 0;
}

void comm_progress_thread_stop(int started) {
    if (!started) return;
    atomic_store(&pt_run, 0);
    pthread_join(pt, NULL);
}

int comm_max_int(Group *g, int v) {
    if (g->size == 1) return v;
    int r;
    watchdog_enter("allreduce (max)", comm_group_name(g->kind), g->size, 4);
    MPI_Allreduce(&v, &r, 1, MPI_INT, MPI_MAX, g->comm);
    watchdog_leave();
    return r;
}

const CommStats *comm_stats(void) { return &stats; }
void comm_stats_reset(void) { memset(&stats, 0, sizeof stats); }
const char *comm_coll_name(CollKind c) {
    static const char *n[] = {"allreduce", "alltoall", "allgather", "reduce_scatter", "broadcast", "sendrecv"};
    return n[c];
}
const char *comm_group_name(GroupKind g) {
    static const char *n[] = {"tp", "dp", "ep", "edp", "pp", "world", "stage"};
    return n[g];
}
