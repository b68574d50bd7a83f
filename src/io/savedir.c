// savedir.c — one run per --save folder, and its hygiene (see savedir.h).
#include "io/savedir.h"
#include "io/agree.h"
#include "io/ckpt_meta.h"
#include "core/alloc.h"
#include "core/util.h"
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum { MAX_LOCKS = 4 };
static int lock_fds[MAX_LOCKS], nlocks;   // held open (and locked) until the process ends
static char run_id[17];                   // the identity of the run saving into --save (rank 0)
static int created_log;                   // savedir_check_log made the --log file to lock it

// Settings that say where and how often a run writes and reports, how many threads it runs, and
// its length (which a resume may extend): none is part of its identity.
static int not_identity(const char *name) {
    static const char *const keys[] = {"steps", "log", "save", "save-every", "resume", "overwrite", "keep-last", "eval-every",
                                       "eval-windows", "log-every", "sample-every", "threads", "peak-tflops", "watchdog",
                                       "tensorboard-dir", "log-tensors", "steps_per_print", "wall_clock_breakdown",
                                       "progress-thread", NULL};
    for (int i = 0; keys[i]; i++) if (!strcmp(name, keys[i])) return 1;
    return !strncmp(name, "tensorboard.", 12) || !strncmp(name, "csv_monitor.", 12);
}

static void hash_setting(void *ctx, const char *name, const char *json, const char *value, char type) {
    (void)json; (void)type;
    uint64_t *h = ctx;
    if (not_identity(name)) return;
    *h = agree_hash(name, strlen(name) + 1, *h);
    *h = agree_hash(value, strlen(value) + 1, *h);
}

void savedir_run_id(const Config *c, char out[17]) {
    char *model = config_model_json(c);
    uint64_t h = agree_hash(model, strlen(model), 0);
    h = agree_hash(&c->seed, sizeof c->seed, h);
    h = agree_hash(&c->data_sequential, sizeof c->data_sequential, h);
    config_each_setting(c, hash_setting, &h);   // the training settings: another lr is another run
    ted_free(model);
    snprintf(out, 17, "%016llx", (unsigned long long)h);
}

const char *savedir_current_id(void) { return run_id; }

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

int savedir_lock(const char *file, const char *what, const char *shown) {
    int fd = open(file, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0) { ted_error("%s %s: cannot open %s to lock it: %s", what, shown, file, strerror(errno)); return -1; }
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
    if (nlocks < MAX_LOCKS && fcntl(fd, F_SETLK, &fl) == 0) { lock_fds[nlocks++] = fd; return 0; }
    struct flock who = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
    int got = fcntl(fd, F_GETLK, &who) == 0 && who.l_type != F_UNLCK;
    close(fd);
    if (got) ted_error("%s %s: in use by another ted run (pid %d holds its lock)", what, shown, (int)who.l_pid);
    else ted_error("%s %s: cannot lock: %s", what, shown, strerror(errno));
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

// The run_id file of folder dir into out ("" when it has none).
static void folder_id(const char *dir, char out[17]) {
    char p[1400];
    snprintf(p, sizeof p, "%s/run_id", dir);
    size_t len;
    char *text = read_file(p, &len);
    snprintf(out, 17, "%.16s", text ? text : "");
    ted_free(text);
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

// The newest step_N checkpoint in root (-1: none) and how many there are.
static long newest_step(const char *root, int *count) {
    DIR *d = opendir(root);
    long best = -1, s;
    char tail;
    *count = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        if (sscanf(e->d_name, "step_%ld%c", &s, &tail) == 1) { ++*count; if (s > best) best = s; }
    if (d) closedir(d);
    return best;
}

// The run_id a checkpoint's trainer_state.json records ("" when none; read quietly: the resume itself
// names a trainer state it cannot read).
static void checkpoint_id(const char *ck, char out[17]) {
    char p[1300];
    snprintf(p, sizeof p, "%s/trainer_state.json", ck);
    size_t len;
    char *text = read_file(p, &len);
    cJSON *j = text ? cJSON_Parse(text) : NULL;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "run_id");
    snprintf(out, 17, "%s", cJSON_IsString(v) && strlen(v->valuestring) == 16 ? v->valuestring : "");
    cJSON_Delete(j);
    ted_free(text);
}

// The identity of this run: a resumed run carries its checkpoint's (its trainer_state.json, else
// the run_id of the folder holding it), a new run the digest of its settings. *inside: the
// checkpoint resumed is one of root's own.
static void this_run(const Config *c, const char *root, char id[17], int *inside) {
    char ck[1200], parent[1300], a[PATH_MAX], b[PATH_MAX], got[17];
    *inside = 0;
    savedir_run_id(c, id);
    if (!c->resume[0] || ckpt_resolve(c->resume, ck, sizeof ck)) return;
    snprintf(parent, sizeof parent, "%s/..", ck);
    *inside = realpath(parent, a) && realpath(root, b) && !strcmp(a, b);
    checkpoint_id(ck, got);
    if (!got[0]) folder_id(parent, got);
    if (got[0]) snprintf(id, 17, "%s", got);
}

// Why this run may not save into root as it stands ("" when it may); n checkpoints up to newest.
static void refusal(const Config *c, const char *id, const char *other, int n, long newest, int inside, char *why, size_t len) {
    int foreign = other[0] && strcmp(other, id);
    const char *s = n == 1 ? "" : "s";
    why[0] = 0;
    if (!n || (c->resume[0] && (inside || !foreign))) return;
    if (c->resume[0])
        snprintf(why, len, "holds %d checkpoint%s (newest step %ld) of another run (run id %s) than the one resumed (%s): "
                 "--overwrite replaces them, or give another folder", n, s, newest, other, id);
    else if (foreign)
        snprintf(why, len, "holds %d checkpoint%s (newest step %ld) of another run (run id %s; this run %s): --resume %s "
                 "continues it, --overwrite replaces them, or give another folder", n, s, newest, other, id, c->save);
    else
        snprintf(why, len, "holds %d checkpoint%s (newest step %ld) of a run with these settings, and this run starts at "
                 "step 0: --resume %s continues it, --overwrite replaces them, or give another folder", n, s, newest, c->save);
}

static int open_folder(const Config *c) {
    const char *root = c->save;
    char lock[1200];
    snprintf(lock, sizeof lock, "%s/.lock", root);
    if (savedir_lock(lock, "--save", root) || probe_writable(root)) return -1;
    char other[17], why[1500];
    int n, inside;
    this_run(c, root, run_id, &inside);
    folder_id(root, other);
    long newest = newest_step(root, &n);
    refusal(c, run_id, other, n, newest, inside, why, sizeof why);
    if (why[0] && !c->overwrite) {
        ted_error("--save %s: %s", root, why);
        return -1;
    }
    if (why[0]) {
        n = remove_prefixed(root, "step_");
        printf("--overwrite: removed %d checkpoints of run %s from %s\n", n, other[0] ? other : "(no run_id)", root);
    }
    remove_prefixed(root, ".step_");   // temporaries of an interrupted save
    return write_run_id(root, run_id);
}

int savedir_open(const Config *c) {
    if (!open_folder(c)) return 0;
    struct stat sb;   // refused: the empty --log savedir_check_log made to lock it goes too
    if (created_log && !stat(c->log, &sb) && sb.st_size == 0) unlink(c->log);
    return -1;
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
    if (!c->log[0]) return 0;
    created_log = stat(c->log, &sb) != 0;
    if (created_log && c->dry_run) return 0;   // a dry run makes no file: a new log has nothing to check
    if (savedir_lock(c->log, "--log", c->log)) return -1;   // the log itself: a running job's is never replaced
    if (c->resume[0] || c->overwrite) return 0;
    if (stat(c->log, &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_size == 0) return 0;
    ted_error("--log %s: holds another run's log (%lld bytes): give another file, --overwrite to replace it, or "
              "--resume to append", c->log, (long long)sb.st_size);
    return -1;
}
