// fuzz_common.h — shared by the fuzz harnesses: the parsers of ted read files, so each input
// is written to a file in a private directory on tmpfs (removed at exit).
#pragma once
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char fuzz_dir[64];

static void fuzz_cleanup(void) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", fuzz_dir);
    if (fuzz_dir[0] && system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", fuzz_dir);
}

// The path of NAME in the private directory (made at the first call).
static const char *fuzz_path(const char *name, char *buf, size_t n) {
    if (!fuzz_dir[0]) {
        snprintf(fuzz_dir, sizeof fuzz_dir, "%s/ted_fuzz_XXXXXX", access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
        if (!mkdtemp(fuzz_dir)) { perror("mkdtemp"); abort(); }
        atexit(fuzz_cleanup);
    }
    snprintf(buf, n, "%s/%s", fuzz_dir, name);
    return buf;
}

// Writes n bytes to NAME; returns its path.
static const char *fuzz_file(const char *name, const uint8_t *data, size_t n, char *buf, size_t len) {
    fuzz_path(name, buf, len);
    FILE *f = fopen(buf, "wb");
    if (!f || (n && fwrite(data, 1, n, f) != n) || fclose(f) != 0) { perror(buf); abort(); }
    return buf;
}
