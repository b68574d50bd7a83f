// monitor.c — TensorBoard event files and csv_monitor files (see monitor.h).
#include "io/monitor.h"
#include "io/savedir.h"
#include "core/util.h"
#include <dirent.h>
#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

// CRC-32C (Castagnoli, reflected polynomial 0x82f63b78), bit by bit over a byte table.
static uint32_t crc32c(const unsigned char *p, size_t n) {
    static uint32_t table[256];
    if (!table[1])
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
            table[i] = c;
        }
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) c = table[(c ^ p[i]) & 0xff] ^ (c >> 8);
    return c ^ 0xffffffffu;
}

uint32_t monitor_masked_crc(const void *data, size_t n) {
    uint32_t c = crc32c(data, n);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

// Protobuf encoding into a byte buffer.
typedef struct { unsigned char b[512]; size_t n; } Pb;

static void pb_byte(Pb *p, unsigned v) { if (p->n < sizeof p->b) p->b[p->n++] = (unsigned char)v; }
static void pb_varint(Pb *p, uint64_t v) {
    do { pb_byte(p, (v & 0x7f) | (v > 0x7f ? 0x80 : 0)); v >>= 7; } while (v);
}
static void pb_bytes(Pb *p, unsigned field, const void *data, size_t n) {   // length-delimited
    pb_varint(p, (uint64_t)field << 3 | 2);
    pb_varint(p, n);
    for (size_t i = 0; i < n; i++) pb_byte(p, ((const unsigned char *)data)[i]);
}
static void pb_fixed(Pb *p, unsigned field, unsigned wire, const void *le, int n) {   // wire 1: 8 bytes, 5: 4 bytes
    pb_varint(p, (uint64_t)field << 3 | wire);
    for (int i = 0; i < n; i++) pb_byte(p, ((const unsigned char *)le)[i]);
}

static void le_bytes(unsigned char *out, uint64_t v, int n) {
    for (int i = 0; i < n; i++) out[i] = (unsigned char)(v >> (8 * i));
}

static void write_record(FILE *f, const Pb *ev) {
    unsigned char len[8], c[4];
    le_bytes(len, ev->n, 8);
    fwrite(len, 1, 8, f);
    le_bytes(c, monitor_masked_crc(len, 8), 4);
    fwrite(c, 1, 4, f);
    fwrite(ev->b, 1, ev->n, f);
    le_bytes(c, monitor_masked_crc(ev->b, ev->n), 4);
    fwrite(c, 1, 4, f);
}

// An Event with wall_time and step, and then either file_version or a one-value summary.
static void event(FILE *f, long step, const char *version, const char *tag, float value) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    double wall = (double)ts.tv_sec + ts.tv_nsec * 1e-9;
    uint64_t wbits;
    memcpy(&wbits, &wall, 8);
    unsigned char w[8];
    le_bytes(w, wbits, 8);
    Pb ev = {.n = 0};
    pb_fixed(&ev, 1, 1, w, 8);
    pb_varint(&ev, 2 << 3 | 0);
    pb_varint(&ev, (uint64_t)step);
    if (version) pb_bytes(&ev, 3, version, strlen(version));
    else {
        Pb val = {.n = 0}, sum = {.n = 0};
        pb_bytes(&val, 1, tag, strlen(tag));
        uint32_t vbits;
        memcpy(&vbits, &value, 4);
        unsigned char v[4];
        le_bytes(v, vbits, 4);
        pb_fixed(&val, 2, 5, v, 4);
        pb_bytes(&sum, 1, val.b, val.n);
        pb_bytes(&ev, 5, sum.b, sum.n);
    }
    write_record(f, &ev);
}

// mkdir -p; 0 or -1 (errno set).
static int make_dirs(const char *dir) {
    char p[1400];
    snprintf(p, sizeof p, "%s", dir);
    for (char *s = p + 1; *s; s++)
        if (*s == '/') { *s = 0; if (mkdir(p, 0777) && errno != EEXIST) return -1; *s = '/'; }
    return mkdir(p, 0777) && errno != EEXIST ? -1 : 0;
}

static int is_event_file(const char *name) { return !strncmp(name, "events.out.tfevents.", 20); }
static int is_csv(const char *name) { size_t n = strlen(name); return n > 4 && !strcmp(name + n - 4, ".csv"); }

// A metrics folder is one run's, as --log: locked while the run writes (DIR/.lock), and the files of
// an earlier run there (ours() names them) are refused unless --resume (this run goes on beside
// them) or --overwrite (they are removed). 0 or -1 after one line.
static int claim(const char *what, const char *dir, int (*ours)(const char *), const Config *c) {
    char p[1400];
    snprintf(p, sizeof p, "%s/.lock", dir);
    if (savedir_lock(p, what, dir)) return -1;
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) {
        if (!ours(e->d_name)) continue;
        n++;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (c->overwrite && !c->resume[0]) unlink(p);
    }
    if (d) closedir(d);
    if (!n || c->resume[0]) return 0;
    if (c->overwrite) { printf("--overwrite: removed %d files of another run from %s\n", n, dir); return 0; }
    ted_error("%s %s: holds %d files of another run's metrics: give another folder, --overwrite to replace them, or "
              "--resume to go on beside them", what, dir, n);
    return -1;
}

static int open_tb(Monitor *mon, const char *dir, const char *what, const Config *c) {
    if (make_dirs(dir)) { ted_error("%s: cannot create %s: %s", what, dir, strerror(errno)); return -1; }
    if (claim(what, dir, is_event_file, c)) return -1;
    char host[64] = "host";
    gethostname(host, sizeof host - 1);
    snprintf(mon->tb_file, sizeof mon->tb_file, "%s/events.out.tfevents.%ld.%s.%d", dir, (long)time(NULL), host, (int)getpid());
    mon->tb = fopen(mon->tb_file, "wb");
    if (!mon->tb) { ted_error("%s: cannot create %s: %s", what, mon->tb_file, strerror(errno)); return -1; }
    event(mon->tb, 0, "brain.Event:2", NULL, 0);
    write_check(mon->tb, mon->tb_file);
    return 0;
}

// DeepSpeed's sections write under output_path/job_name: an empty output_path would be "/job_name".
static int empty_path(const char *section, const char *path) {
    if (path[0]) return 0;
    ted_error("%s.output_path is empty: give the folder to write under (default \"runs\"; \".\" for this one)", section);
    return -1;
}

int monitor_open(Monitor *mon, const Config *c, int rank0) {
    memset(mon, 0, sizeof *mon);
    if ((c->tb_enabled && !c->tensorboard_dir[0] && empty_path("tensorboard", c->tb_path)) ||
        (c->csv_enabled && empty_path("csv_monitor", c->csv_path)))
        return -1;
    if (!rank0) return 0;
    char dir[1100];
    if (c->tensorboard_dir[0] && open_tb(mon, c->tensorboard_dir, "--tensorboard-dir", c)) return -1;
    if (!c->tensorboard_dir[0] && c->tb_enabled) {
        snprintf(dir, sizeof dir, "%s/%s", c->tb_path, c->tb_job);
        if (open_tb(mon, dir, "tensorboard", c)) return -1;
    }
    if (c->csv_enabled) {
        snprintf(mon->csv_dir, sizeof mon->csv_dir, "%s/%s", c->csv_path, c->csv_job);
        if (make_dirs(mon->csv_dir)) { ted_error("csv_monitor: cannot create %s: %s", mon->csv_dir, strerror(errno)); return -1; }
        if (claim("csv_monitor", mon->csv_dir, is_csv, c)) return -1;
    }
    if (mon->tb) printf("tensorboard: %s\n", mon->tb_file);
    if (mon->csv_dir[0]) printf("csv_monitor: %s/<metric>.csv\n", mon->csv_dir);
    return 0;
}

// csv_monitor: DIR/<tag with "/" as "_">.csv, a "step,<tag>" header, then step,value rows.
static void csv_scalar(const Monitor *mon, const char *tag, double value, long step) {
    char name[256], p[1400];
    snprintf(name, sizeof name, "%s", tag);
    for (char *s = name; *s; s++) if (*s == '/') *s = '_';
    snprintf(p, sizeof p, "%s/%s.csv", mon->csv_dir, name);
    struct stat sb;
    int fresh = stat(p, &sb) != 0;
    FILE *f = fopen(p, "a");
    if (!f) ted_fatal(1, "%s: cannot write: %s: stopping the run", p, strerror(errno));
    if (fresh) fprintf(f, "step,%s\n", tag);
    fprintf(f, "%ld,%.9g\n", step, value);
    write_check(f, p);
    if (fclose(f)) ted_fatal(1, "%s: write failed: %s: stopping the run", p, strerror(errno));
}

void monitor_scalar(Monitor *mon, const char *tag, double value, long step) {
    if (mon->tb) event(mon->tb, step, NULL, tag, (float)value);
    if (mon->csv_dir[0]) csv_scalar(mon, tag, value, step);
}

void monitor_flush(Monitor *mon) {
    write_check(mon->tb, mon->tb_file);   // a full disk stops the run, naming the file
}

void monitor_close(Monitor *mon) {
    if (mon->tb) fclose(mon->tb);
    mon->tb = NULL;
}
