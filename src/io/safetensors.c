// safetensors.c — fp32 safetensors files (see safetensors.h).
//
// Layout: an 8-byte little-endian header length N, N bytes of JSON describing each tensor
// ({"name": {"dtype": "F32", "shape": [...], "data_offsets": [begin, end]}, ...}, plus an
// optional "__metadata__" that reading ignores), then the data section; offsets are relative to
// the start of the data section. Writing lays the tensors out in the order given and pads
// the header with spaces to a multiple of 8 bytes so that the data stays aligned.
// Reading loads the whole file, checks every entry before handing out any pointer, and keeps
// an index sorted by name so that look-ups are logarithmic.
#include "io/safetensors.h"
#include "core/alloc.h"
#include "core/util.h"
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

// ---------------------------------------------------------------------------------------
// Writing

// A growing text buffer (counted allocator) for the JSON header.
typedef struct { char *p; size_t len, cap; } Buf;

static void buf_put(Buf *b, const char *s, size_t n) {
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 1024;
        while (b->len + n + 1 > cap) cap *= 2;
        b->p = ted_realloc(b->p, cap, MEM_TEMP);
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

static void buf_printf(Buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void buf_printf(Buf *b, const char *fmt, ...) {
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    buf_put(b, tmp, n < 0 ? 0 : (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

// Appends s as a JSON string literal.
static void buf_json_string(Buf *b, const char *s) {
    buf_put(b, "\"", 1);
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        if (*c == '"' || *c == '\\') { char e[2] = {'\\', (char)*c}; buf_put(b, e, 2); }
        else if (*c < 0x20) buf_printf(b, "\\u%04x", *c);
        else buf_put(b, (const char *)c, 1);
    }
    buf_put(b, "\"", 1);
}

// Number of elements of a tensor, or -1 when the shape is invalid or overflows.
static int64_t shape_elems(int ndim, const int64_t *shape) {
    if (ndim < 0 || ndim > 4) return -1;
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0) return -1;
        if (shape[i] > 0 && n > INT64_MAX / 4 / shape[i]) return -1;
        n *= shape[i];
    }
    return n;
}

// Checks the tensors to write; prints one line and returns -1 on the first bad one.
static int check_tensors(const char *path, const StTensor *t, int n) {
    if (n < 0) { ted_error("%s: negative tensor count %d", path, n); return -1; }
    for (int i = 0; i < n; i++) {
        size_t len = strnlen(t[i].name, sizeof t[i].name);
        if (len == 0 || len == sizeof t[i].name) {
            ted_error("%s: tensor %d has an empty or unterminated name", path, i);
            return -1;
        }
        int64_t elems = shape_elems(t[i].ndim, t[i].shape);
        if (elems < 0) { ted_error("%s: tensor \"%s\" has an invalid shape", path, t[i].name); return -1; }
        if (elems > 0 && !t[i].data) { ted_error("%s: tensor \"%s\" has no data", path, t[i].name); return -1; }
        if (strcmp(t[i].name, "__metadata__") == 0) {
            ted_error("%s: \"__metadata__\" is not a valid tensor name", path);
            return -1;
        }
    }
    return 0;
}

// Builds the JSON header, padded with spaces so that 8 + its length is a multiple of 8. It
// starts with {"__metadata__": {"format": "pt"}}: Hugging Face transformers reads the format
// from the metadata and fails on a file without it.
static Buf build_header(const StTensor *t, int n) {
    Buf b = {0};
    static const char meta[] = "{\"__metadata__\":{\"format\":\"pt\"}";
    buf_put(&b, meta, sizeof meta - 1);
    int64_t off = 0;
    for (int i = 0; i < n; i++) {
        int64_t bytes = 4 * shape_elems(t[i].ndim, t[i].shape);
        buf_put(&b, ",", 1);
        buf_json_string(&b, t[i].name);
        buf_printf(&b, ":{\"dtype\":\"F32\",\"shape\":[");
        for (int d = 0; d < t[i].ndim; d++) buf_printf(&b, d ? ",%lld" : "%lld", (long long)t[i].shape[d]);
        buf_printf(&b, "],\"data_offsets\":[%lld,%lld]}", (long long)off, (long long)(off + bytes));
        off += bytes;
    }
    buf_put(&b, "}", 1);
    while (b.len % 8) buf_put(&b, " ", 1);
    return b;
}

int st_write(const char *path, const StTensor *tensors, int n) {
    if (check_tensors(path, tensors, n) != 0) return -1;
    Buf hdr = build_header(tensors, n);
    FILE *f = fopen(path, "wb");
    if (!f) {
        ted_error("%s: cannot create: %s", path, strerror(errno));
        ted_free(hdr.p);
        return -1;
    }
    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)hdr.len >> (8 * i));
    int ok = fwrite(len8, 1, 8, f) == 8 && fwrite(hdr.p, 1, hdr.len, f) == hdr.len;
    for (int i = 0; ok && i < n; i++) {
        size_t elems = (size_t)shape_elems(tensors[i].ndim, tensors[i].shape);
        ok = elems == 0 || fwrite(tensors[i].data, sizeof(float), elems, f) == elems;
    }
    if (ok && (fflush(f) != 0 || fsync(fileno(f)) != 0)) ok = 0;   // on disk before the checkpoint is renamed in
    int err = errno;
    if (fclose(f) != 0 && ok) { ok = 0; err = errno; }
    ted_free(hdr.p);
    if (!ok) { ted_error("%s: write failed: %s", path, strerror(err)); return -1; }
    return 0;
}

// ---------------------------------------------------------------------------------------
// Reading

typedef struct {
    char name[160];
    int ndim;
    int64_t shape[4];
    uint64_t begin, end;   // byte offsets in the data section
    uint64_t at;           // where its first float is in f->data (4-byte aligned)
    int read;              // st_get looked it up
} Entry;

struct StFile {
    char *file;            // the whole file (read_file)
    char *aligned;         // a copy with every tensor 4-byte aligned when the file's are not
    const char *data;      // the data section
    uint64_t data_len;
    Entry *entries;        // in header order
    const Entry **by_name; // entries sorted by name
    int n;
};

// Reads a JSON number that must be a non-negative integer exactly representable as a double.
static int json_uint(const cJSON *j, uint64_t *out) {
    if (!cJSON_IsNumber(j)) return -1;
    double v = j->valuedouble;
    if (!(v >= 0 && v <= 9007199254740992.0) || v != floor(v)) return -1;
    *out = (uint64_t)v;
    return 0;
}

// Fills e from one header entry; returns NULL or a short description of the problem
// (possibly written into msg).
static const char *parse_entry(const cJSON *j, Entry *e, char *msg, size_t msgsz) {
    if (!cJSON_IsObject(j)) return "is not an object";
    const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(j, "dtype");
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(j, "shape");
    const cJSON *offs = cJSON_GetObjectItemCaseSensitive(j, "data_offsets");
    if (!cJSON_IsString(dtype)) return "has no dtype";
    if (!cJSON_IsArray(shape)) return "has no shape";
    if (!cJSON_IsArray(offs)) return "has no data_offsets";
    if (strcmp(dtype->valuestring, "F32") != 0) {
        snprintf(msg, msgsz, "has dtype \"%.40s\" (only F32 is supported)", dtype->valuestring);
        return msg;
    }
    int nd = cJSON_GetArraySize(shape);
    if (nd > 4) return "has more than 4 dimensions";
    e->ndim = nd;
    uint64_t elems = 1;
    for (int d = 0; d < nd; d++) {
        uint64_t v;
        if (json_uint(cJSON_GetArrayItem(shape, d), &v) != 0) return "has a shape entry that is not a non-negative integer";
        if (v > 0 && elems > (UINT64_MAX / 4) / v) return "has a shape too large";
        elems *= v;
        e->shape[d] = (int64_t)v;
    }
    if (cJSON_GetArraySize(offs) != 2 || json_uint(cJSON_GetArrayItem(offs, 0), &e->begin) != 0 ||
        json_uint(cJSON_GetArrayItem(offs, 1), &e->end) != 0)
        return "has data_offsets that are not two non-negative integers";
    if (e->begin > e->end) return "has data_offsets with begin > end";
    if (e->end - e->begin != elems * 4) return "has data_offsets that do not match its shape";
    return NULL;
}

static int cmp_name(const void *a, const void *b) {
    return strcmp((*(const Entry *const *)a)->name, (*(const Entry *const *)b)->name);
}
static int cmp_begin(const void *a, const void *b) {
    const Entry *x = *(const Entry *const *)a, *y = *(const Entry *const *)b;
    return (x->begin > y->begin) - (x->begin < y->begin);
}

// Reads every entry of the header object into f->entries; NULL or a problem description
// (written into msg).
static const char *read_entries(StFile *f, const cJSON *root, char *msg, size_t msgsz) {
    int count = 0;
    for (const cJSON *j = root->child; j; j = j->next)
        if (strcmp(j->string, "__metadata__") != 0) count++;
    f->entries = ted_alloc(sizeof(Entry) * (size_t)(count ? count : 1), MEM_TEMP);
    f->by_name = ted_alloc(sizeof(Entry *) * (size_t)(count ? count : 1), MEM_TEMP);
    for (const cJSON *j = root->child; j; j = j->next) {
        if (strcmp(j->string, "__metadata__") == 0) continue;
        Entry *e = &f->entries[f->n];
        if (strlen(j->string) == 0 || strlen(j->string) >= sizeof e->name) {
            snprintf(msg, msgsz, "tensor name of %zu bytes (1 to %zu allowed)", strlen(j->string), sizeof e->name - 1);
            return msg;
        }
        strcpy(e->name, j->string);
        char detail[128];
        const char *why = parse_entry(j, e, detail, sizeof detail);
        if (why) { snprintf(msg, msgsz, "tensor \"%s\" %s", e->name, why); return msg; }
        if (e->end > f->data_len) {
            snprintf(msg, msgsz, "tensor \"%s\" has data_offsets beyond the end of the file", e->name);
            return msg;
        }
        f->by_name[f->n] = e;
        f->n++;
    }
    return NULL;
}

// Checks that data ranges do not overlap (empty tensors aside) and names are unique;
// sorts the name index.
static const char *check_layout(StFile *f, char *msg, size_t msgsz) {
    const Entry **order = ted_alloc(sizeof(Entry *) * (size_t)(f->n ? f->n : 1), MEM_TEMP);
    memcpy(order, f->by_name, sizeof(Entry *) * (size_t)f->n);
    qsort(order, (size_t)f->n, sizeof *order, cmp_begin);
    const char *why = NULL;
    const Entry *last = NULL;   // the non-empty entry reaching furthest so far
    for (int i = 0; i < f->n && !why; i++) {
        const Entry *e = order[i];
        if (e->begin == e->end) continue;
        if (last && e->begin < last->end) {
            snprintf(msg, msgsz, "tensors \"%s\" and \"%s\" overlap", last->name, e->name);
            why = msg;
        }
        if (!last || e->end > last->end) last = e;
    }
    ted_free(order);
    if (why) return why;
    qsort(f->by_name, (size_t)f->n, sizeof *f->by_name, cmp_name);
    for (int i = 1; i < f->n; i++) {
        if (strcmp(f->by_name[i - 1]->name, f->by_name[i]->name) == 0) {
            snprintf(msg, msgsz, "tensor \"%s\" appears twice", f->by_name[i]->name);
            return msg;
        }
    }
    return NULL;
}

// Parses and checks the header; NULL or a problem description.
static const char *parse_header(StFile *f, const char *json, size_t len, char *msg, size_t msgsz) {
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(json, len, &end, 0);
    if (!root) return "header is not valid JSON";
    const char *why = NULL;
    for (const char *p = end; p && p < json + len && !why; p++)
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r' && *p != 0) why = "header has trailing bytes after the JSON";
    if (!why && !cJSON_IsObject(root)) why = "header is not a JSON object";
    if (!why) why = read_entries(f, root, msg, msgsz);
    cJSON_Delete(root);
    if (!why) why = check_layout(f, msg, msgsz);
    return why;
}

// Points f->data at the data section when every tensor in it starts 4-byte aligned; else copies
// the tensors into a buffer where each does (offsets need not be multiples of 4 in the format,
// and a float is never read through a misaligned pointer).
static void place_data(StFile *f, uint64_t start) {
    const char *d = f->file + start;
    int aligned = ((uintptr_t)d & 3) == 0;
    for (int i = 0; i < f->n; i++) {
        f->entries[i].at = f->entries[i].begin;
        aligned &= (f->entries[i].begin & 3) == 0;
    }
    if (aligned) { f->data = d; return; }
    uint64_t total = 0;
    for (int i = 0; i < f->n; i++) total += f->entries[i].end - f->entries[i].begin;   // multiples of 4 (F32)
    f->aligned = ted_alloc((size_t)(total ? total : 4), MEM_TEMP);
    for (uint64_t i = 0, at = 0; i < (uint64_t)f->n; i++) {
        Entry *e = &f->entries[i];
        memcpy(f->aligned + at, d + e->begin, (size_t)(e->end - e->begin));
        e->at = at;
        at += e->end - e->begin;
    }
    f->data = f->aligned;
}

StFile *st_open(const char *path) {
    size_t len = 0;
    char *file = read_file(path, &len);
    struct stat sb;
    if (!file && errno == ENOMEM && !stat(path, &sb)) {
        ted_error("%s: %lld bytes, more than this node's memory (%.4g bytes): ted reads a safetensors file whole", path,
                  (long long)sb.st_size, mem_physical_bytes());
        return NULL;
    }
    if (!file) { ted_error("%s: cannot read: %s", path, strerror(errno)); return NULL; }
    if (len < 8) {
        ted_error("%s: file too short (%zu bytes) to be a safetensors file", path, len);
        ted_free(file);
        return NULL;
    }
    uint64_t hlen = 0;
    for (int i = 0; i < 8; i++) hlen |= (uint64_t)(unsigned char)file[i] << (8 * i);
    if (hlen > len - 8) {
        ted_error("%s: header length %llu larger than the file (%zu bytes)", path, (unsigned long long)hlen, len);
        ted_free(file);
        return NULL;
    }
    StFile *f = ted_alloc(sizeof *f, MEM_TEMP);
    f->file = file;
    f->data_len = len - 8 - hlen;
    char msg[512];
    const char *why = parse_header(f, file + 8, (size_t)hlen, msg, sizeof msg);
    if (why) {
        ted_error("%s: corrupt safetensors file: %s", path, why);
        st_close(f);
        return NULL;
    }
    place_data(f, 8 + hlen);
    return f;
}

static Entry *find(const StFile *f, const char *name) {
    int lo = 0, hi = f->n - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        Entry *e = (Entry *)f->by_name[mid];   // f's own entries: by_name views them read-only
        int c = strcmp(name, e->name);
        if (c == 0) return e;
        if (c < 0) hi = mid - 1; else lo = mid + 1;
    }
    return NULL;
}

const float *st_get(StFile *f, const char *name, int *ndim, int64_t shape[4]) {
    Entry *e = f ? find(f, name) : NULL;
    if (!e) return NULL;
    e->read = 1;
    if (ndim) *ndim = e->ndim;
    if (shape) {
        for (int d = 0; d < 4; d++) shape[d] = d < e->ndim ? e->shape[d] : 0;
    }
    return (const float *)(f->data + e->at);
}

int st_count(const StFile *f) { return f ? f->n : 0; }

const char *st_name(const StFile *f, int i) {
    return f && i >= 0 && i < f->n ? f->entries[i].name : NULL;
}

int st_read(const StFile *f, int i) { return f && i >= 0 && i < f->n && f->entries[i].read; }

void st_close(StFile *f) {
    if (!f) return;
    ted_free(f->entries);
    ted_free(f->by_name);
    ted_free(f->aligned);
    ted_free(f->file);
    ted_free(f);
}
