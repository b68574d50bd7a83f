// test_safetensors.c — safetensors round trip and rejection of corrupt files: every kind of
// bad header gives NULL (with one error line) and nothing crashes, including random byte
// flips and truncations of a valid file.
#include "core/alloc.h"
#include "io/safetensors.h"
#include "core/util.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>
#include "harness.h"


static char tmp_path[64];

static void make_tmp(void) {
    strcpy(tmp_path, "/tmp/test_safetensors_XXXXXX");
    int fd = mkstemp(tmp_path);
    if (fd < 0) { perror("mkstemp"); exit(1); }
    close(fd);
}

static void write_bytes(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n || fclose(f) != 0) { perror(path); exit(1); }
}

// Writes an 8-byte length, the JSON header as given, then data_bytes zero bytes.
static void write_raw(const char *json, uint64_t hlen, size_t data_bytes) {
    size_t jl = strlen(json);
    size_t total = 8 + jl + data_bytes;
    unsigned char *b = calloc(1, total);
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)(hlen >> (8 * i));
    memcpy(b + 8, json, jl);
    write_bytes(tmp_path, b, total);
    free(b);
}

// A header of the correct length followed by data_bytes of data must be rejected.
static void expect_rejected(const char *what, const char *json, size_t data_bytes) {
    write_raw(json, strlen(json), data_bytes);
    fprintf(stderr, "[expected error: %s] ", what);
    StFile *f = st_open(tmp_path);
    EXPECT(f == NULL, "corrupt file accepted: %s", what);
    st_close(f);
}

static void expect_accepted(const char *what, const char *json, size_t data_bytes) {
    write_raw(json, strlen(json), data_bytes);
    StFile *f = st_open(tmp_path);
    EXPECT(f != NULL, "valid file rejected: %s", what);
    st_close(f);
}

static float *filled(size_t n, float base) {
    float *p = malloc(n * sizeof(float) + 1);
    for (size_t i = 0; i < n; i++) p[i] = base + (float)i * 0.25f;
    return p;
}

static void test_round_trip(void) {
    StTensor t[5];
    memset(t, 0, sizeof t);
    const int64_t shapes[5][4] = {{7, 3}, {16}, {2, 3, 4}, {2, 1, 3, 5}, {0, 4}};
    const int ndims[5] = {2, 1, 3, 4, 2};
    float *data[5];
    for (int i = 0; i < 5; i++) {
        snprintf(t[i].name, sizeof t[i].name, "transformer.h.%d.attn \"quoted\\\"", i);
        t[i].ndim = ndims[i];
        size_t n = 1;
        for (int d = 0; d < ndims[i]; d++) { t[i].shape[d] = shapes[i][d]; n *= (size_t)shapes[i][d]; }
        data[i] = filled(n, (float)i * 100);
        t[i].data = data[i];
    }
    strcpy(t[1].name, "a.scalar.like");
    EXPECT(st_write(tmp_path, t, 5) == 0, "st_write failed");

    // header length is a multiple of 8
    FILE *fp = fopen(tmp_path, "rb");
    unsigned char len8[8] = {0};
    EXPECT(fp && fread(len8, 1, 8, fp) == 8, "cannot read back");
    if (fp) fclose(fp);
    uint64_t hlen = 0;
    for (int i = 0; i < 8; i++) hlen |= (uint64_t)len8[i] << (8 * i);
    EXPECT(hlen % 8 == 0, "header length %llu not a multiple of 8", (unsigned long long)hlen);
    // the header carries {"__metadata__": {"format": "pt"}} (Hugging Face transformers needs it)
    char head[64] = {0};
    fp = fopen(tmp_path, "rb");
    EXPECT(fp && fseek(fp, 8, SEEK_SET) == 0 && fread(head, 1, 32, fp) == 32, "cannot read the header");
    if (fp) fclose(fp);
    EXPECT(strncmp(head, "{\"__metadata__\":{\"format\":\"pt\"}", 31) == 0, "no format pt metadata: %.32s", head);

    StFile *f = st_open(tmp_path);
    EXPECT(f != NULL, "st_open of a written file failed");
    if (!f) return;
    EXPECT(st_count(f) == 5, "count %d", st_count(f));
    for (int i = 0; i < 5; i++) {
        EXPECT(st_name(f, i) && strcmp(st_name(f, i), t[i].name) == 0, "name %d out of order", i);
        int nd = -1;
        int64_t shape[4];
        const float *p = st_get(f, t[i].name, &nd, shape);
        EXPECT(p != NULL, "tensor %s missing", t[i].name);
        if (!p) continue;
        EXPECT(((uintptr_t)p & 3) == 0, "data of %s not aligned", t[i].name);
        EXPECT(nd == ndims[i], "ndim of %s: %d", t[i].name, nd);
        size_t n = 1;
        for (int d = 0; d < nd; d++) {
            EXPECT(shape[d] == shapes[i][d], "shape[%d] of %s", d, t[i].name);
            n *= (size_t)shape[d];
        }
        EXPECT(memcmp(p, data[i], n * sizeof(float)) == 0, "data of %s differs", t[i].name);
    }
    EXPECT(st_get(f, "absent", NULL, NULL) == NULL, "absent tensor found");
    EXPECT(st_name(f, 5) == NULL && st_name(f, -1) == NULL, "st_name out of range");
    st_close(f);
    for (int i = 0; i < 5; i++) free(data[i]);
}

// Many tensors: look-ups by name all succeed (and quickly).
static void test_many(void) {
    enum { N = 1500 };
    StTensor *t = calloc(N, sizeof *t);
    float vals[N];
    for (int i = 0; i < N; i++) {
        snprintf(t[i].name, sizeof t[i].name, "layer.%d.w", (i * 7919) % N);
        vals[i] = (float)i;
        t[i].ndim = 1;
        t[i].shape[0] = 1;
        t[i].data = &vals[i];
    }
    EXPECT(st_write(tmp_path, t, N) == 0, "st_write of %d tensors", N);
    StFile *f = st_open(tmp_path);
    EXPECT(f && st_count(f) == N, "reopen of %d tensors", N);
    double t0 = now_ms();
    for (int i = 0; f && i < N; i++) {
        const float *p = st_get(f, t[i].name, NULL, NULL);
        EXPECT(p && *p == (float)i, "look-up of %s", t[i].name);
    }
    EXPECT(now_ms() - t0 < 1000, "look-ups too slow");
    st_close(f);
    free(t);
}

static void test_write_errors(void) {
    StTensor t;
    memset(&t, 0, sizeof t);
    float x = 1;
    strcpy(t.name, "x");
    t.ndim = 5;
    t.data = &x;
    EXPECT(st_write(tmp_path, &t, 1) != 0, "ndim 5 written");
    t.ndim = 1;
    t.shape[0] = -2;
    EXPECT(st_write(tmp_path, &t, 1) != 0, "negative shape written");
    t.shape[0] = 1;
    EXPECT(st_write("/nonexistent-dir/x.safetensors", &t, 1) != 0, "write into a missing directory");
    t.data = NULL;
    EXPECT(st_write(tmp_path, &t, 1) != 0, "NULL data written");
}

static void test_corrupt_headers(void) {
    // file too short
    write_bytes(tmp_path, "\x01\x02\x03", 3);
    EXPECT(st_open(tmp_path) == NULL, "3-byte file accepted");
    write_bytes(tmp_path, "", 0);
    EXPECT(st_open(tmp_path) == NULL, "empty file accepted");
    // header length beyond the file
    write_raw("{}", 1000, 0);
    EXPECT(st_open(tmp_path) == NULL, "header length > file accepted");
    write_raw("{}", UINT64_MAX, 0);
    EXPECT(st_open(tmp_path) == NULL, "header length 2^64-1 accepted");
    EXPECT(st_open("/nonexistent/file.safetensors") == NULL, "missing file opened");

    expect_accepted("empty header", "{}      ", 0);
    expect_accepted("metadata only", "{\"__metadata__\":{\"format\":\"pt\"}}", 0);
    expect_accepted("one tensor", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8);
    expect_accepted("odd header length (unaligned data)", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}} ", 8);
    expect_accepted("empty tensor", "{\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}}", 0);

    expect_rejected("not JSON", "{\"a\":", 0);
    expect_rejected("JSON array", "[1,2,3]", 0);
    expect_rejected("trailing garbage", "{} x", 0);
    expect_rejected("entry not an object", "{\"a\":3}", 0);
    expect_rejected("no dtype", "{\"a\":{\"shape\":[2],\"data_offsets\":[0,8]}}", 8);
    expect_rejected("no shape", "{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}}", 8);
    expect_rejected("no offsets", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8);
    expect_rejected("dtype F16", "{\"a\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,4]}}", 8);
    expect_rejected("dtype not a string", "{\"a\":{\"dtype\":32,\"shape\":[2],\"data_offsets\":[0,8]}}", 8);
    expect_rejected("shape not an array", "{\"a\":{\"dtype\":\"F32\",\"shape\":2,\"data_offsets\":[0,8]}}", 8);
    expect_rejected("negative shape", "{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8);
    expect_rejected("fractional shape", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,8]}}", 8);
    expect_rejected("string shape", "{\"a\":{\"dtype\":\"F32\",\"shape\":[\"2\"],\"data_offsets\":[0,8]}}", 8);
    expect_rejected("5 dimensions", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,2],\"data_offsets\":[0,8]}}", 8);
    expect_rejected("huge shape", "{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,8]}}", 8);
    expect_rejected("offsets out of bounds", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}", 8);
    expect_rejected("offsets reversed", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8);
    expect_rejected("offsets do not match shape", "{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 16);
    expect_rejected("one offset", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8]}}", 8);
    expect_rejected("three offsets", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8,8]}}", 8);
    expect_rejected("negative offset", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[-8,0]}}", 8);
    expect_rejected("overlap",
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
        "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 16);
    expect_rejected("overlap, contained",
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
        "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]},"
        "\"c\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}", 16);
    expect_rejected("duplicate name",
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
        "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}", 16);
    expect_rejected("empty name", "{\"\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8);
    char longname[400];
    snprintf(longname, sizeof longname, "{\"%0200d\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 7);
    expect_rejected("name too long", longname, 8);
}

// Flips random bytes and truncates a valid file; st_open must return NULL or a file whose
// tensors all lie inside it — never crash.
static void test_fuzz(void) {
    StTensor t[3];
    memset(t, 0, sizeof t);
    float a[12], b[5], c[6];
    for (int i = 0; i < 12; i++) a[i] = (float)i;
    for (int i = 0; i < 5; i++) b[i] = (float)-i;
    for (int i = 0; i < 6; i++) c[i] = 0.5f * (float)i;
    strcpy(t[0].name, "wte"); t[0].ndim = 2; t[0].shape[0] = 3; t[0].shape[1] = 4; t[0].data = a;
    strcpy(t[1].name, "bias"); t[1].ndim = 1; t[1].shape[0] = 5; t[1].data = b;
    strcpy(t[2].name, "c"); t[2].ndim = 3; t[2].shape[0] = 1; t[2].shape[1] = 2; t[2].shape[2] = 3; t[2].data = c;
    EXPECT(st_write(tmp_path, t, 3) == 0, "write for fuzzing");
    size_t len = 0;
    char *orig = read_file(tmp_path, &len);
    EXPECT(orig != NULL, "read back");
    if (!orig) return;
    unsigned char *buf = malloc(len);
    srand(12345);
    int opened = 0, rejected = 0;
    // Silence the expected error lines during the loop.
    fflush(stderr);
    int saved = dup(2), null = open("/dev/null", O_WRONLY);
    dup2(null, 2);
    close(null);
    for (int iter = 0; iter < 3000; iter++) {
        memcpy(buf, orig, len);
        size_t n = len;
        int mode = iter % 3;
        if (mode == 0 || mode == 2) {
            int flips = 1 + rand() % 4;
            for (int k = 0; k < flips; k++) {
                size_t pos = (size_t)rand() % (iter % 2 ? len : 8 + 200);
                if (pos >= len) pos = len - 1;
                buf[pos] = (unsigned char)rand();
            }
        }
        if (mode == 1 || mode == 2) n = (size_t)rand() % (len + 1);
        write_bytes(tmp_path, buf, n);
        StFile *f = st_open(tmp_path);
        if (!f) { rejected++; continue; }
        opened++;
        for (int i = 0; i < st_count(f); i++) {
            int nd;
            int64_t shape[4];
            const float *p = st_get(f, st_name(f, i), &nd, shape);
            if (!p) { test_failures++; break; }
            size_t elems = 1;
            for (int d = 0; d < nd; d++) elems *= (size_t)shape[d];
            volatile float sum = 0;
            for (size_t e = 0; e < elems; e++) sum += p[e];   // must stay inside the file
        }
        st_close(f);
    }
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    fprintf(stderr, "fuzz: %d opened, %d rejected\n", opened, rejected);
    EXPECT(rejected > 0, "no fuzzed file was rejected");
    free(buf);
    ted_free(orig);
}

// Tensors at data offsets that are not multiples of 4 (the format allows it): each comes back
// 4-byte aligned with its values (never read through a misaligned float pointer).
static void test_unaligned_offsets(void) {
    const char *json = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[1,9]},"
                       "\"b\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[10,22]}}";
    size_t jl = strlen(json), total = 8 + jl + 22;
    unsigned char *buf = calloc(1, total);
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)((uint64_t)jl >> (8 * i));
    memcpy(buf + 8, json, jl);
    const float a[2] = {1.5f, -2.25f}, b[3] = {3.0f, 4.5f, -0.125f};
    memcpy(buf + 8 + jl + 1, a, sizeof a);
    memcpy(buf + 8 + jl + 10, b, sizeof b);
    write_bytes(tmp_path, buf, total);
    free(buf);
    StFile *f = st_open(tmp_path);
    EXPECT(f != NULL, "a file with unaligned data offsets was refused");
    if (!f) return;
    const float *pa = st_get(f, "a", NULL, NULL), *pb = st_get(f, "b", NULL, NULL);
    EXPECT(pa && pb && ((uintptr_t)pa & 3) == 0 && ((uintptr_t)pb & 3) == 0, "unaligned offsets: data not 4-byte aligned");
    if (pa && pb) EXPECT(!memcmp(pa, a, sizeof a) && !memcmp(pb, b, sizeof b), "unaligned offsets: values differ");
    st_close(f);
}

int main(void) {
    make_tmp();
    test_round_trip();
    test_unaligned_offsets();
    test_many();
    test_write_errors();
    test_corrupt_headers();
    test_fuzz();
    unlink(tmp_path);
    EXPECT(mem_stats()->current[MEM_TEMP] == 0, "%zu temp bytes leaked", mem_stats()->current[MEM_TEMP]);
    return test_exit("test_safetensors");
}
