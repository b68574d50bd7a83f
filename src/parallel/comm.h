// comm.h — the communicator: every collective of ted goes through here, on a Group
// (TP, DP, EP, expert-DP, PP or world; design §4). A group of size 1 (one process) copies
// locally and sends nothing. Buffers may be host or device memory: on a GPU run a device
// buffer goes through NCCL when each rank has a GPU of its own, else it is staged through
// host memory and MPI (several ranks sharing one GPU, as the tests do). Each call is counted (calls, bytes of the send buffer, ms)
// per collective and per group, for the `comm` metrics.
#pragma once
#include <mpi.h>
#include <stddef.h>
#include "core/precision.h"

// STAGE: every rank of one pipeline stage (the world when pp = 1); checkpoints assemble there.
typedef enum { GROUP_TP, GROUP_DP, GROUP_EP, GROUP_EDP, GROUP_PP, GROUP_WORLD, GROUP_STAGE, GROUP_N } GroupKind;
typedef enum { COLL_ALLREDUCE, COLL_ALLTOALL, COLL_ALLGATHER, COLL_REDUCE_SCATTER, COLL_BROADCAST,
               COLL_SENDRECV, COLL_N } CollKind;
typedef enum { DT_F32, DT_F64, DT_I32, DT_I64, DT_BYTE, DT_BF16, DT_F16 } DType;   // 16-bit: sums in fp32 per element
// The type of a run's stored values on the wire.
static inline DType comm_dtype(Precision p) { return p == PREC_BF16 ? DT_BF16 : p == PREC_FP16 ? DT_F16 : DT_F32; }

typedef struct {
    GroupKind kind;
    int size, rank;
    MPI_Comm comm;    // MPI_COMM_NULL when size == 1 without MPI
    void *nccl;       // GPU runs: the group's NCCL communicator, or NULL (host-staged MPI)
} Group;

// ms: the collectives' time from start to completion; exposed_ms: the part the caller spent waiting
// for them (inside the call, or in comm_req_test/comm_req_wait for a non-blocking one). A blocking
// call is all exposed; overlap shows as ms > exposed_ms.
typedef struct { long long calls, bytes; double ms, exposed_ms; } CommCount;
typedef struct { CommCount c[COLL_N][GROUP_N]; } CommStats;

// Starts MPI when launched by mpirun/srun (world size > 1 is possible); otherwise the
// process is a world of one and MPI is never initialised.
void comm_init(int *argc, char ***argv);
void comm_finalize(void);
// Under mpirun with OOB keepalive settings (configs/mpi_cluster.tune): about how many seconds mpirun
// may take to notice that a node's link is gone (time + intvl x (probes + 1)); else 0.
int comm_launcher_keepalive_s(void);
int comm_world_size(void);
int comm_world_rank(void);
int comm_mpi_active(void);
// Splits the world by color/key into a group of the given kind (MPI_Comm_split).
Group comm_group(GroupKind kind, int color, int key);

// Sum-reductions are in place; counts are elements of dtype.
void comm_allreduce(Group *g, void *buf, long n, DType t);
void comm_allreduce_max(Group *g, float *buf, long n);
void comm_allgather(Group *g, const void *send, void *recv, long n_per_rank, DType t);
void comm_reduce_scatter(Group *g, const void *send, void *recv, long n_per_rank, DType t);
void comm_alltoall(Group *g, const void *send, void *recv, long n_per_rank, DType t);
// Variable sizes, in elements; displacements in elements.
void comm_alltoallv(Group *g, const void *send, const long *scounts, const long *sdispls,
                    void *recv, const long *rcounts, const long *rdispls, DType t);
void comm_broadcast(Group *g, void *buf, long n, DType t, int root);
void comm_barrier(Group *g);
// Point-to-point inside a group (the pipeline's activations and gradients), host buffers only.
// comm_isend starts a send and returns (counted as `sendrecv` with its bytes); the buffer stays
// untouched until comm_wait / comm_test says it is done. comm_recv blocks until the message
// (peer, tag) is in; its time is the caller's to account (waiting for the other stage).
void comm_isend(Group *g, const void *buf, long n, DType t, int peer, int tag, MPI_Request *req);
void comm_recv(Group *g, void *buf, long n, DType t, int peer, int tag);
void comm_wait(MPI_Request *req);
int comm_test(MPI_Request *req);   // 1 when the send is complete (or there was none)
// Non-blocking collectives, for overlap with compute (host buffers only). The start call returns at
// once; the buffers belong to the collective until comm_req_wait returns, and the CommReq must stay
// where it is until then. On a group of size 1 the request is complete when started. Open MPI moves
// the bytes only inside MPI calls: comm_progress() (cheap; call it between chunks of compute) tests
// every request in flight.
typedef struct {
    MPI_Request req;        // MPI_REQUEST_NULL when complete or never started
    CollKind coll; GroupKind group;
    int gsize;
    long long bytes;
    double t0;              // start time (ms)
    int *counts;            // alltoallv: the int counts and displacements MPI reads until completion
} CommReq;
void comm_iallreduce(Group *g, void *buf, long n, DType t, CommReq *r);
void comm_iallgather(Group *g, const void *send, void *recv, long n_per_rank, DType t, CommReq *r);
void comm_ireduce_scatter(Group *g, const void *send, void *recv, long n_per_rank, DType t, CommReq *r);
void comm_ialltoallv(Group *g, const void *send, const long *scounts, const long *sdispls,
                     void *recv, const long *rcounts, const long *rdispls, DType t, CommReq *r);
int comm_req_test(CommReq *r);   // 1 when complete (counted then)
// Waits for r: tests it for 0.1 ms, then tests every 50 µs and sleeps between (cores shared by ranks).
void comm_req_wait(CommReq *r);
void comm_req_waitall(CommReq *r, int n);
void comm_progress(void);        // tests every request in flight
int comm_in_flight(void);        // how many requests are in flight
// A thread that drives the requests in flight while the caller computes: between start and stop
// the caller makes no MPI call (MPI_THREAD_SERIALIZED). start returns whether a thread runs
// (none without MPI or with nothing in flight); stop takes that value.
int comm_progress_thread_start(void);
void comm_progress_thread_stop(int started);
// Agreement: returns the largest value over the group (used to stop together on errors).
int comm_max_int(Group *g, int v);

const CommStats *comm_stats(void);
void comm_stats_reset(void);
const char *comm_coll_name(CollKind c);
const char *comm_group_name(GroupKind g);
