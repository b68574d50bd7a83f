// watchdog.c — the hang watchdog (see watchdog.h). The main thread writes where it is into
// plain fields; the watchdog thread only reads them, so a torn read can at worst garble the
// diagnosis of a job that is ending anyway. The in-flight start time is an atomic.
#include "core/watchdog.h"
#include "core/clock.h"
#include <mpi.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

static int limit_s = 0, grace_s = 0;
static int rank = 0, world = 1;      // read once by watchdog_start, on the main thread
static _Atomic double started = 0;   // now_ms() of the collective in flight, 0 when none
static volatile sig_atomic_t signalled = 0;   // SIGINT/SIGTERM received (set by watchdog_signal)
static sem_t wake;                            // posted by watchdog_signal: look now, not in a second
static struct {
    const char *op, *group, *pass;
    int gsize, micro, block, moe;
    long long bytes;
    long step;
} at = {.block = -1};

void watchdog_enter(const char *op, const char *group, int gsize, long long bytes) {
    at.op = op; at.group = group; at.gsize = gsize; at.bytes = bytes;
    atomic_store(&started, now_ms());
}
void watchdog_leave(void) { atomic_store(&started, 0); }
void watchdog_step(long step, int micro) { at.step = step; at.micro = micro; at.block = -1; }
void watchdog_block(int block, int moe, const char *pass) { at.block = block; at.moe = moe; at.pass = pass; }

static void describe_place(char *buf, size_t n) {
    if (at.step == 0) { snprintf(buf, n, "before training"); return; }
    int k = snprintf(buf, n, "step %ld, ", at.step);
    if (at.micro < 0) k += snprintf(buf + k, n - k, "optimizer");
    else k += snprintf(buf + k, n - k, "micro-batch %d", at.micro);
    if (at.block >= 0 && at.micro >= 0)
        snprintf(buf + k, n - k, ", %sblock %d %s", at.moe ? "MoE " : "", at.block, at.pass ? at.pass : "");
    else if (at.micro >= 0) snprintf(buf + k, n - k, ", outside the blocks");
}

static void say(int by_signal, double waited_ms) {
    char place[160], end[160] = ": ending the job";
    describe_place(place, sizeof place);
    if (by_signal) snprintf(end, sizeof end, ": a peer may be unreachable");
    else if (grace_s)   // a rank that exits first would leave mpirun waiting on a lost node for minutes
        snprintf(end, sizeof end, ": ending the job in %d s, unless mpirun's keepalive finds a lost node first", grace_s);
    int gsize = at.gsize > 0 ? at.gsize : world;
    fprintf(stderr, "ted: rank %d: watchdog: %s%s on group %s (%d ranks, %lld bytes) %s %.0f s (%s)%s\n", rank,
            by_signal ? "stopped by a signal in " : "", at.op, at.group, gsize, at.bytes,
            by_signal ? "after waiting" : "not done after", by_signal ? waited_ms / 1e3 : (double)limit_s, place, end);
    fflush(stderr);
}

// Once a second, or at once when a signal came: a collective past the limit ends the job; one
// that has waited 2 s when the launcher's SIGTERM arrives (a peer's node lost: mpirun is ending
// the job) is named before the process goes, since nothing else would say where it hung.
static void *watch(void *arg) {
    int told = 0;
    for (;;) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 1;
        while (sem_timedwait(&wake, &ts) != 0 && errno == EINTR) {}
        double t0 = atomic_load(&started), waited = t0 > 0 ? now_ms() - t0 : 0;
        if (signalled && !told && waited >= 2e3) { say(1, waited); told = 1; }
        if (t0 <= 0 || waited < limit_s * 1e3) continue;
        told = 1;
        say(0, waited);
        for (int s = 0; s < grace_s; s++) sleep(1);
        _exit(3);   // mpirun takes the other ranks down
    }
    return NULL;
}

void watchdog_signal(int sig) {
    signalled = sig;
    if (limit_s > 0) sem_post(&wake);   // async-signal-safe
}

void watchdog_start(int seconds, int grace) {
    static int running = 0;
    if (seconds <= 0 || running) return;
    limit_s = seconds;
    grace_s = grace > 0 ? grace : 0;
    int init = 0;
    MPI_Initialized(&init);
    if (init) { MPI_Comm_rank(MPI_COMM_WORLD, &rank); MPI_Comm_size(MPI_COMM_WORLD, &world); }
    sem_init(&wake, 0, 0);
    pthread_t t;
    if (pthread_create(&t, NULL, watch, NULL) == 0) { pthread_detach(t); running = 1; }
}
