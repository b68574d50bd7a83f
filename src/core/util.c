// util.c — whole-file reads and checked writes (errors and time: error.c, clock.c).
#include "core/util.h"
#include "core/alloc.h"
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

char *read_file(const char *path, size_t *len) {
    struct stat sb;
    if (stat(path, &sb) != 0) return NULL;
    if (!S_ISREG(sb.st_mode)) { errno = S_ISDIR(sb.st_mode) ? EISDIR : EINVAL; return NULL; }
    double mem = mem_physical_bytes();
    if (mem > 0 && (double)sb.st_size >= mem) { errno = ENOMEM; return NULL; }   // would fail or be OOM-killed
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

void write_check(FILE *f, const char *path) {
    if (!f) return;
    int bad = ferror(f), err = errno;
    if (fflush(f)) { bad = 1; err = errno; }
    if (!bad) return;
    char name[1100] = "?", fd[64];
    snprintf(fd, sizeof fd, "/proc/self/fd/%d", fileno(f));
    ssize_t n = path ? -1 : readlink(fd, name, sizeof name - 1);
    if (n > 0) name[n] = 0;
    ted_fatal(1, "%s: write failed: %s: stopping the run", path ? path : name, strerror(err ? err : EIO));
}
