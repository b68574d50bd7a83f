// data.c — text and token-shard loading, sequential and shuffled batches (see data.h).
#include "io/data.h"
#include "core/alloc.h"
#include "core/rng.h"
#include "core/util.h"
#include <errno.h>
#include <glob.h>
#include <string.h>
#include <sys/stat.h>

static int ends_with(const char *s, const char *t) {
    size_t a = strlen(s), b = strlen(t);
    return a >= b && !strcmp(s + a - b, t);
}

static void append(Split *s, const uint16_t *tok, long n) {
    s->tok = ted_realloc(s->tok, sizeof(uint16_t) * (size_t)(s->n + n + 1), MEM_TEMP);
    memcpy(s->tok + s->n, tok, sizeof(uint16_t) * (size_t)n);
    s->n += n;
}

// One llm.c shard appended to s. Checks magic, version, and that the size matches the count.
static int load_shard(Split *s, const char *path, int *max_token) {
    size_t len;
    char *buf = read_file(path, &len);
    if (!buf) { ted_error("%s: cannot read: %s", path, strerror(errno)); return -1; }
    int32_t h[256];
    if (len < sizeof h) {
        ted_error("%s: too short for a token shard (%zu bytes, the header alone is 1024)", path, len);
        ted_free(buf); return -1;
    }
    memcpy(h, buf, sizeof h);
    if (h[0] != 20240520) {
        ted_error("%s: not a token shard (magic %d, expected 20240520)", path, h[0]);
        ted_free(buf); return -1;
    }
    if (h[1] != 1) { ted_error("%s: unsupported shard version %d (expected 1)", path, h[1]); ted_free(buf); return -1; }
    long n = h[2];
    if (n < 0 || (size_t)n * 2 != len - sizeof h) {
        ted_error("%s: header says %ld tokens but the file holds %zu bytes of tokens (truncated or corrupt)",
                  path, n, len - sizeof h);
        ted_free(buf); return -1;
    }
    const uint16_t *tok = (const uint16_t *)(buf + sizeof h);
    for (long i = 0; i < n; i++) if (tok[i] > *max_token) *max_token = tok[i];
    append(s, tok, n);
    ted_free(buf);
    return 0;
}

static int load_text(Split *all, const char *path) {
    size_t len;
    char *buf = read_file(path, &len);
    if (!buf) { ted_error("%s: cannot read: %s", path, strerror(errno)); return -1; }
    all->tok = ted_alloc(sizeof(uint16_t) * (len + 1), MEM_TEMP);
    for (size_t i = 0; i < len; i++) all->tok[i] = (unsigned char)buf[i];
    all->n = (long)len;
    ted_free(buf);
    return 0;
}

// The files' bytes as 16-bit tokens fit this node's memory: loading holds about 4 bytes per byte of
// text or shard at its peak (the bytes read, the tokens, the train/val splits). 0 or -1 after one line.
static int fits(const char *path, double bytes) {
    double mem = mem_physical_bytes();
    if (!(mem > 0 && 4 * bytes > mem)) return 0;
    ted_error("%s: %.4g bytes of data need about %.4g bytes of memory to load as tokens, more than this node's %.4g",
              path, bytes, 4 * bytes, mem);
    return -1;
}

static double file_bytes(const char *path) {
    struct stat sb;
    return stat(path, &sb) ? 0 : (double)sb.st_size;
}

int data_load(Dataset *ds, const char *path) {
    memset(ds, 0, sizeof *ds);
    if (!path[0]) { ted_error("--data: no data file given"); return -1; }
    if (!ends_with(path, ".bin")) {
        if (fits(path, file_bytes(path))) return -1;
        Split all = {0};
        if (load_text(&all, path)) return -1;
        long ntr = (long)(0.9 * (double)all.n);
        append(&ds->train, all.tok, ntr);
        append(&ds->val, all.tok + ntr, all.n - ntr);
        ted_free(all.tok);
        ds->max_token = 255;
        return 0;
    }
    glob_t g;
    int rc = glob(path, 0, NULL, &g);
    if (rc == GLOB_NOMATCH) {
        ted_error("%s: no such file", path);
        return -1;
    }
    double total = 0;
    for (size_t i = 0; i < g.gl_pathc; i++) total += file_bytes(g.gl_pathv[i]);
    if (fits(path, total)) { globfree(&g); return -1; }
    for (size_t i = 0; i < g.gl_pathc; i++) {   // glob sorts the names
        const char *f = g.gl_pathv[i];
        if (load_shard(strstr(f, "_val_") ? &ds->val : &ds->train, f, &ds->max_token)) { globfree(&g); data_free(ds); return -1; }
    }
    globfree(&g);
    // a pattern naming only training shards: take the matching validation shards too
    if (!ds->val.n && strstr(path, "_train_")) {
        char vp[1100];
        const char *at = strstr(path, "_train_");
        snprintf(vp, sizeof vp, "%.*s_val_%s", (int)(at - path), path, at + 7);
        if (glob(vp, 0, NULL, &g) == 0) {
            for (size_t i = 0; i < g.gl_pathc; i++)
                if (load_shard(&ds->val, g.gl_pathv[i], &ds->max_token)) { globfree(&g); data_free(ds); return -1; }
            globfree(&g);
        }
    }
    if (!ds->train.n) { ted_error("%s: no training tokens (only validation shards?)", path); data_free(ds); return -1; }
    return 0;
}

int data_load_whole(Split *s, const char *path) {
    memset(s, 0, sizeof *s);
    if (!ends_with(path, ".bin")) return load_text(s, path);
    int mx = 0;
    return load_shard(s, path, &mx);
}

void data_free(Dataset *ds) { ted_free(ds->train.tok); ted_free(ds->val.tok); memset(ds, 0, sizeof *ds); }

void data_window(const Split *s, long i, int T, int *inp, int *tgt) {
    const uint16_t *w = s->tok + i * T;
    for (int t = 0; t < T; t++) { inp[t] = w[t]; tgt[t] = w[t + 1]; }
}

void data_sequence(const Split *s, int T, uint64_t seed, int sequential, long step, long j, long gbatch,
                   int *inp, int *tgt) {
    if (sequential) {
        long nwin = data_nwindows(s, T);
        data_window(s, (step * gbatch + j) % nwin, T, inp, tgt);
        return;
    }
    uint64_t starts = (uint64_t)(s->n - T);    // a window needs T+1 tokens
    long at = (long)(rng_at(seed, 0x64617461ull + (uint64_t)step, (uint64_t)j) % starts);
    const uint16_t *w = s->tok + at;
    for (int t = 0; t < T; t++) { inp[t] = w[t]; tgt[t] = w[t + 1]; }
}
