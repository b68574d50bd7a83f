// error.c — one line per error, and the ranks' agreement on failures (see error.h).
#include "core/error.h"
#include "core/watchdog.h"
#include <mpi.h>
#include <stdarg.h>
#include <stdio.h>

// Under MPI an error line waits (the first one per rank) until the ranks agree that something
// failed (ted_agree); then only the lowest failing rank prints, so a job says it once.
static int defer = 0;
static char deferred[2048];
static char *captured;   // ted_error_capture's buffer (NULL: print)
static size_t captured_n;

static void vline(const char *fmt, va_list ap) {
    char buf[2048];
    vsnprintf(buf, sizeof buf, fmt, ap);
    if (captured) { if (!captured[0]) snprintf(captured, captured_n, "%s", buf); return; }
    if (defer) { if (!deferred[0]) snprintf(deferred, sizeof deferred, "%s", buf); return; }
    fprintf(stderr, "ted: %s\n", buf);
    fflush(stderr);
}

static void flush_deferred(void) {
    if (deferred[0]) { fprintf(stderr, "ted: %s\n", deferred); fflush(stderr); deferred[0] = 0; }
}

void ted_defer_errors(int on) { defer = on; }

void ted_error_capture(char *buf, size_t n) {
    captured = n ? buf : NULL;
    captured_n = n;
    if (captured) captured[0] = 0;
}

int ted_agree(int failed) {
    int init = 0, rank = 0, lowest;
    MPI_Initialized(&init);
    if (!init) { flush_deferred(); return failed; }
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    int mine = failed ? rank : 1 << 30;
    watchdog_enter("allreduce (agreement on errors)", "world", 0, 4);
    MPI_Allreduce(&mine, &lowest, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    watchdog_leave();
    if (lowest == rank) flush_deferred();
    deferred[0] = 0;
    return lowest != 1 << 30;
}

void ted_error(const char *fmt, ...) {
    va_list ap; va_start(ap, fmt); vline(fmt, ap); va_end(ap);
}

void ted_fatal(int code, const char *fmt, ...) {
    flush_deferred();
    defer = 0;
    captured = NULL;   // a fatal line is always printed
    va_list ap; va_start(ap, fmt); vline(fmt, ap); va_end(ap);
    int init = 0, fin = 0, size = 1;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    if (init && !fin) {
        MPI_Comm_size(MPI_COMM_WORLD, &size);
        if (size > 1) MPI_Abort(MPI_COMM_WORLD, code);   // never leave the other ranks waiting
        MPI_Finalize();
    }
    exit(code);
}
