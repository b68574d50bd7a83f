// threads.c — thread count and wait policy (see threads.h).
#include "run/threads.h"
#include <omp.h>
#include <stdlib.h>
#include <unistd.h>

void openblas_set_num_threads(int);

void threads_wait_policy(char **argv) {
    if (getenv("OMP_WAIT_POLICY")) return;   // the user's choice (ACTIVE too) stands
    setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
    // the binary by its own path, not /proc/self/exe: the process's name (top, ps, pgrep) is the
    // executed file's, and stays "ted"
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n > 0) {
        self[n] = 0;
        execv(self, argv);
    }
    execv("/proc/self/exe", argv);   // only returns on failure: then run as we are
}

void threads_set(int n) {
    const char *local = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    if (n <= 0 && local && atoi(local) > 1) {
        n = omp_get_num_procs() / atoi(local);
        if (n < 1) n = 1;
    }
    if (n <= 0) return;
    omp_set_num_threads(n);
    openblas_set_num_threads(n);
}
