// util.c — errors, time, whole-file reads.
#include "util.h"
#include "alloc.h"
#include <errno.h>
#include <mpi.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <time.h>

static void vline(const char *fmt, va_list ap) {
    char buf[2048];
    vsnprintf(buf, sizeof buf, fmt, ap);
    fprintf(stderr, "ted: %s\n", buf);
    fflush(stderr);
}

void ted_error(const char *fmt, ...) {
    va_list ap; va_start(ap, fmt); vline(fmt, ap); va_end(ap);
}

void ted_fatal(int code, const char *fmt, ...) {
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

double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

char *read_file(const char *path, size_t *len) {
    struct stat sb;
    if (stat(path, &sb) != 0) return NULL;
    if (!S_ISREG(sb.st_mode)) { errno = S_ISDIR(sb.st_mode) ? EISDIR : EINVAL; return NULL; }
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    if (fseek(f, 0, SEEK_END) != 0) { fclose(f); return NULL; }
    long n = ftell(f);
    if (n < 0) { fclose(f); errno = EIO; return NULL; }
    rewind(f);
    char *buf = ted_alloc((size_t)n + 1, MEM_TEMP);
    size_t got = fread(buf, 1, (size_t)n, f);
    int bad = ferror(f);
    fclose(f);
    if (bad || got != (size_t)n) { ted_free(buf); errno = EIO; return NULL; }
    buf[n] = 0;
    if (len) *len = (size_t)n;
    return buf;
}
