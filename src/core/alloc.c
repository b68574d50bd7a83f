// alloc.c — counted allocation (see alloc.h). A 64-byte header in front of each block
// holds its size and category.
#include "core/alloc.h"
#include "core/error.h"
#include "core/device.h"
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef TED_CUDA
#endif

typedef struct { size_t bytes; int cat; char pad[64 - sizeof(size_t) - sizeof(int)]; } Header;
static MemStats S;
static MemPhase phase = PHASE_NONE;
static size_t temp_at_optimizer;   // MEM_TEMP bytes alive when the optimizer phase began

Device ted_device = DEV_CPU;

static void account(long long delta, int cat) {
    S.current[cat] += (size_t)delta;   // wraps correctly for negative deltas
    S.total += (size_t)delta;
    if (S.total > S.peak) S.peak = S.total;
    if (S.total > S.phase_peak[phase]) S.phase_peak[phase] = S.total;
    if (S.current[cat] > S.phase_cat_peak[phase][cat]) S.phase_cat_peak[phase][cat] = S.current[cat];
    // the optimizer's own temporaries: what it allocates beyond the temporaries alive before it
    if (phase == PHASE_OPTIMIZER && S.current[MEM_TEMP] > temp_at_optimizer &&
        S.current[MEM_TEMP] - temp_at_optimizer > S.optimizer_temp_peak)
        S.optimizer_temp_peak = S.current[MEM_TEMP] - temp_at_optimizer;
}

void *ted_alloc(size_t bytes, MemCategory cat) {
    Header *h = NULL;
    if (posix_memalign((void **)&h, 64, sizeof(Header) + (bytes ? bytes : 1)) != 0 || !h)
        ted_fatal(1, "out of memory allocating %zu bytes (%s)", bytes, mem_category_name(cat));
    memset(h, 0, sizeof(Header) + bytes);
    h->bytes = bytes;
    h->cat = (int)cat;
    #pragma omp critical(ted_alloc)
    account((long long)bytes, cat);
    return h + 1;
}

void ted_free(void *p) {
    if (!p) return;
    Header *h = (Header *)p - 1;
    #pragma omp critical(ted_alloc)
    account(-(long long)h->bytes, h->cat);
    free(h);
}

void *ted_realloc(void *p, size_t bytes, MemCategory cat) {
    if (!p) return ted_alloc(bytes, cat);
    Header *h = (Header *)p - 1;
    void *q = ted_alloc(bytes, (MemCategory)h->cat);
    memcpy(q, p, h->bytes < bytes ? h->bytes : bytes);
    ted_free(p);
    return q;
}

char *ted_strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = ted_alloc(n, MEM_TEMP);
    memcpy(d, s, n);
    return d;
}

double mem_physical_bytes(void) {
    long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGE_SIZE);
    return pages > 0 && size > 0 ? (double)pages * size : 0;
}

void mem_set_phase(MemPhase p) {
    phase = p;
    S.phase_peak[p] = S.total;
    for (int c = 0; c < MEM_NCAT; c++) S.phase_cat_peak[p][c] = S.current[c];
    if (p == PHASE_OPTIMIZER) temp_at_optimizer = S.current[MEM_TEMP];
}
const MemStats *mem_stats(void) { return &S; }
void mem_reset_peaks(void) {
    S.peak = S.total;
    for (int i = 0; i < PHASE_N; i++) {
        S.phase_peak[i] = 0;
        for (int c = 0; c < MEM_NCAT; c++) S.phase_cat_peak[i][c] = 0;
    }
    S.optimizer_temp_peak = 0;
}
const char *mem_category_name(MemCategory c) {
    static const char *n[] = {"params", "grads", "optimizer", "activations", "comm", "temp", "mirror"};
    return c < MEM_NCAT ? n[c] : "?";
}

// ---------------------------------------------------------------------------------------
// run buffers on the device

int device_select(const char *name, int local_rank, int bf16) {
    if (!strcmp(name, "cpu")) { ted_device = DEV_CPU; return 0; }
    if (strcmp(name, "cuda")) { ted_error("--device: unknown device '%s' (cpu or cuda)", name); return -1; }
#ifdef TED_CUDA
    if (cu_device_count() == 0) { ted_error("--device cuda: no CUDA device found on this machine"); return -1; }
    cu_init(local_rank, bf16);
    ted_device = DEV_CUDA;
    return 0;
#else
    ted_error("--device cuda: this ted was built without the CUDA backend (no nvcc at build time)");
    return -1;
#endif
}

#ifdef TED_CUDA
// device blocks have no header in front: a small table holds their sizes and categories
typedef struct { void *p; size_t bytes; int cat; } DevBlock;
static DevBlock *dev_blocks;
static int dev_n, dev_cap;
#endif

#ifdef TED_CUDA
void *ted_alloc_dev(size_t bytes, MemCategory cat) {
    void *p = cu_malloc(bytes);
    if (!p) ted_fatal(1, "out of GPU memory allocating %zu bytes (%s; %zu bytes held)", bytes,
                      mem_category_name(cat), S.device);
    if (dev_n == dev_cap) {
        dev_cap = dev_cap ? 2 * dev_cap : 64;
        dev_blocks = realloc(dev_blocks, sizeof(DevBlock) * dev_cap);
        CHECK(dev_blocks, "out of memory");
    }
    dev_blocks[dev_n++] = (DevBlock){p, bytes, (int)cat};
    account((long long)bytes, cat);
    S.device += bytes;
    if (S.device > S.device_peak) S.device_peak = S.device;
    return p;
}
#endif

void *ted_alloc_buf(size_t bytes, MemCategory cat) {
#ifdef TED_CUDA
    if (ted_device == DEV_CUDA) return ted_alloc_dev(bytes, cat);
#endif
    return ted_alloc(bytes, cat);
}

void ted_free_buf(void *p) {
    if (!p) return;
#ifdef TED_CUDA
    for (int i = 0; i < dev_n; i++)
        if (dev_blocks[i].p == p) {
            account(-(long long)dev_blocks[i].bytes, dev_blocks[i].cat);
            S.device -= dev_blocks[i].bytes;
            dev_blocks[i] = dev_blocks[--dev_n];
            cu_free(p);
            return;
        }
#endif
    ted_free(p);
}

void buf_copy(void *dst, const void *src, size_t bytes) {
    if (!bytes || dst == src) return;
#ifdef TED_CUDA
    if (ted_device == DEV_CUDA) { cu_memcpy(dst, src, bytes); return; }
#endif
    memmove(dst, src, bytes);
}

void buf_zero(void *p, size_t bytes) { buf_fill(p, 0, bytes); }

void buf_fill(void *p, int byte, size_t bytes) {
    if (!bytes) return;
#ifdef TED_CUDA
    if (ted_device == DEV_CUDA) { cu_memset(p, byte, bytes); return; }
#endif
    memset(p, byte, bytes);
}

void buf_sync(void) {
#ifdef TED_CUDA
    if (ted_device == DEV_CUDA) cu_sync();
#endif
}

const void *buf_to_host(void *host, const void *p, size_t bytes) {
    if (ted_device == DEV_CPU) return p;
    buf_copy(host, p, bytes);
    return host;
}
