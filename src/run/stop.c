// stop.c — the stop flag of a signal (see stop.h).
#include "run/stop.h"
#include "core/clock.h"
#include "core/watchdog.h"
#include "parallel/comm.h"
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define BEAT_MS 100      // the heartbeat's period
#define STOPPED_MS 1000  // a beat this late: the process was stopped (or starved; then it waits for the SIGTERM)

static volatile sig_atomic_t caught = 0;    // the first stop this rank was asked for
static pid_t launcher = -1;                 // under Open MPI, the parent: mpirun or a node's orted
static _Atomic long long beat = 0;          // the heartbeat's last tick (ms)
static _Atomic long long woke = -STOPPED_MS;   // when the heartbeat last found the process had been stopped

// Open MPI turns a forwarded SIGTSTP into SIGSTOP, so a rank cannot see its suspension; a
// thread that ticks every BEAT_MS can: after a stop its tick is late. (Signals blocked: the
// handlers run on the other threads.)
static void *heartbeat(void *arg) {
    (void)arg;
    struct timespec ts = {0, BEAT_MS * 1000000L};
    for (;;) {
        nanosleep(&ts, NULL);
        long long t = (long long)now_ms();
        if (t - atomic_load(&beat) > STOPPED_MS) atomic_store(&woke, t);
        atomic_store(&beat, t);
    }
    return NULL;
}

// A SIGCONT that continues a stopped rank (mpirun forwards SIGCONT after a SIGTSTP, a scheduler
// resumes a suspended job): the heartbeat is late, or has just found itself late.
static int resuming(void) {
    long long t = (long long)now_ms();
    return t - atomic_load(&beat) > STOPPED_MS || t - atomic_load(&woke) < STOPPED_MS;
}

static void on_signal(int sig, siginfo_t *si, void *ctx) {
    (void)ctx;
    if (sig == SIGCONT && (si->si_pid != launcher || resuming())) return;
    if (!caught) caught = sig;
    if (sig == SIGINT || sig == SIGTERM) watchdog_signal(sig);
}

static void start_heartbeat(void) {
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);   // the thread inherits the mask
    atomic_store(&beat, (long long)now_ms());
    pthread_t t;
    if (pthread_create(&t, NULL, heartbeat, NULL) == 0) pthread_detach(t);
    else launcher = -1;   // no heartbeat: SIGCONT stays no stop
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}

void stop_install(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_signal;
    sa.sa_flags = SA_RESTART | SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    int sigs[] = {SIGINT, SIGTERM, SIGUSR1, SIGUSR2};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) sigaction(sigs[i], &sa, NULL);
    if (!getenv("OMPI_COMM_WORLD_SIZE")) return;   // not launched by Open MPI's mpirun
    launcher = getppid();
    start_heartbeat();
    sigaction(SIGCONT, &sa, NULL);
}

int stop_requested(void) {
    Group world = {GROUP_WORLD, comm_world_size(), comm_world_rank(), MPI_COMM_WORLD, NULL};
    return comm_max_int(&world, (int)caught);
}

const char *stop_cause(int stop) {
    switch (stop) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGUSR1: return "SIGUSR1";
    case SIGUSR2: return "SIGUSR2";
    case SIGCONT: return "mpirun ending the job (it got SIGINT, SIGTERM or SIGHUP)";
    default: return "a signal";
    }
}

int stop_exit_code(int stop) { return 128 + (stop == SIGCONT ? SIGTERM : stop); }
