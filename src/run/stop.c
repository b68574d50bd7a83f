// stop.c — the SIGINT/SIGTERM flag (see stop.h).
#include "run/stop.h"
#include "parallel/comm.h"
#include "core/watchdog.h"
#include <signal.h>
#include <string.h>

static volatile sig_atomic_t caught = 0;

static void on_signal(int sig) { if (!caught) caught = sig; watchdog_signal(sig); }

void stop_install(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

int stop_requested(void) {
    Group world = {GROUP_WORLD, comm_world_size(), comm_world_rank(), MPI_COMM_WORLD, NULL};
    return comm_max_int(&world, (int)caught);
}
