// savedir.c — one run per --save folder, and its hygiene (see savedir.h).
#include "io/savedir.h"
#include "io/agree.h"
#include "core/alloc.h"
#include "core/util.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int lock_fd = -1;   // held open (and locked) until the process ends

void savedir_run_id(const Config *c, char out[17]) {
    char *model = config_model_json(c);
    uint64_t h = agree_hash(model, strlen(model), 0);
    h = agree_hash(&c->seed, sizeof c->seed, h);
    h = agree_hash(&c->data_sequential, sizeof c->data_sequential, h);
    ted_free(model);
    snprintf(out, 17, "%016llx", (unsigned long long)h);
}

int savedir_fsync(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

void savedir_rm_tree(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char p[2400];
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

// Removes the entries of root whose name starts with prefix (directories of checkpoints).
static int remove_prefixed(const char *root, const char *prefix) {
    DIR *d = opendir(root);
    if (!d) return 0;
    struct dirent *e;
    char p[2400];
    int n = 0;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, prefix, strlen(prefix)) != 0) continue;
        snprintf(p, sizeof p, "%s/%s", root, e->d_name);
        savedir_rm_tree(p);
        n++;
    }
    closedir(d);
    return n;
}

// The exclusive lock (an fcntl lock on root/.lock: it ends with the process, also on a crash).
static int take_lock(const char *root) {
    char p[1200];
    snprintf(p, sizeof p, "%s/.lock", root);
    int fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0) { ted_error("--save %s: cannot create its lock file: %s", root, strerror(errno)); return -1; }
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
    if (fcntl(fd, F_SETLK, &fl) == 0) { lock_fd = fd; return 0; }
    struct flock who = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
    int got = fcntl(fd, F_GETLK, &who) == 0 && who.l_type != F_UNLCK;
    close(fd);
    if (got) ted_error("--save %s: in use by another ted run (pid %d holds its lock)", root, (int)who.l_pid);
    else ted_error("--save %s: cannot lock: %s", root, strerror(errno));
    return -1;
}

// Writes, fsyncs and removes a probe file: an unwritable folder fails now, not after training.
static int probe_writable(const char *root) {
    char p[1200];
    snprintf(p, sizeof p, "%s/.probe.%d", root, (int)getpid());
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    int ok = fd >= 0 && write(fd, "ted\n", 4) == 4 && fsync(fd) == 0;
    int err = errno;
    if (fd >= 0) { close(fd); unlink(p); }
    if (!ok) { ted_error("--save %s: not writable: %s", root, strerror(err)); return -1; }
    return 0;
}

// The folder's run: 0 when it is this one (or none yet), 1 when another (its id in other).
static int foreign_run(const char *root, const char *id, char other[17]) {
    char p[1200];
    snprintf(p, sizeof p, "%s/run_id", root);
    size_t len;
    char *text = read_file(p, &len);
    if (!text) return 0;
    snprintf(other, 17, "%.16s", text);
    ted_free(text);
    return strcmp(other, id) != 0;
}

static int write_run_id(const char *root, const char *id) {
    char p[1200], tmp[1300];
    snprintf(p, sizeof p, "%s/run_id", root);
    snprintf(tmp, sizeof tmp, "%s/.run_id.%d", root, (int)getpid());
    FILE *f = fopen(tmp, "wb");
    int ok = f && fprintf(f, "%s\n", id) > 0 && fflush(f) == 0 && fsync(fileno(f)) == 0;
    if (f && fclose(f) != 0) ok = 0;
    if (!ok || rename(tmp, p) != 0 || savedir_fsync(root) != 0) {
        ted_error("--save %s: cannot write run_id: %s", root, strerror(errno));
        unlink(tmp);
        return -1;
    }
    return 0;
}

int savedir_open(const Config *c) {
    const char *root = c->save;
    if (take_lock(root) || probe_writable(root)) return -1;
    char id[17], other[17];
    savedir_run_id(c, id);
    if (foreign_run(root, id, other)) {
        if (!c->overwrite) {
            ted_error("--save %s: holds checkpoints of another run (run id %s, this run %s): give another folder, or "
                      "--overwrite to replace them", root, other, id);
            return -1;
        }
        int n = remove_prefixed(root, "step_");
        printf("--overwrite: removed %d checkpoints of run %s from %s\n", n, other, root);
    }
    remove_prefixed(root, ".step_");   // temporaries of an interrupted save
    return write_run_id(root, id);
}

static int cmp_long(const void *a, const void *b) {
    long x = *(const long *)a, y = *(const long *)b;
    return (x > y) - (x < y);
}

void savedir_prune(const char *root, int keep) {
    if (keep <= 0) return;
    DIR *d = opendir(root);
    if (!d) return;
    long steps[4096];
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < 4096) {
        long s;
        char tail;
        if (sscanf(e->d_name, "step_%ld%c", &s, &tail) == 1) steps[n++] = s;
    }
    closedir(d);
    qsort(steps, n, sizeof *steps, cmp_long);
    char p[1200];
    for (int i = 0; i < n - keep; i++) {
        snprintf(p, sizeof p, "%s/step_%08ld", root, steps[i]);
        savedir_rm_tree(p);
    }
    savedir_fsync(root);
}

int savedir_check_log(const Config *c) {
    struct stat sb;
    if (!c->log[0] || c->resume[0] || c->overwrite) return 0;
    if (stat(c->log, &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_size == 0) return 0;
    ted_error("--log %s: holds another run's log (%lld bytes): give another file, --overwrite to replace it, or "
              "--resume to append", c->log, (long long)sb.st_size);
    return -1;
}
