// onednn.c — oneDNN matmul primitives for the GEMM interface (see onednn.h).
// The cache: CACHE_CAP entries keyed by the whole product (type, transposes, sizes, strides, alpha,
// beta), the least recently used unused entry evicted for a new one. Lookups take a critical
// section; an entry in use counts a reference, so no thread frees a primitive another one runs.
#include "nn/onednn.h"
#include "core/error.h"
#include <oneapi/dnnl/dnnl.h>
#include <stdio.h>
#include <string.h>

#define CACHE_CAP 512

typedef struct {
    int t, ta, tb, M, N, K, lda, ldb, ldc;
    float alpha, beta;
} Key;

typedef struct {
    Key k;
    dnnl_primitive_t p;           // NULL: oneDNN has no implementation of this product
    dnnl_memory_desc_t a, b, c;
    char impl[64];
    long used;                    // the cache clock when last looked up
    int refs, live;
} Entry;

static Entry cache[CACHE_CAP];
static long cache_clock;
static dnnl_engine_t engine;
static _Thread_local dnnl_stream_t stream;   // one per thread that runs primitives

#define DN(call) CHECK((call) == dnnl_success, "oneDNN: %s failed", #call)

static dnnl_engine_t get_engine(void) {
    #pragma omp critical(onednn_engine)
    if (!engine) DN(dnnl_engine_create(&engine, dnnl_cpu, 0));
    return engine;
}

// The row-major [rows, cols] matrix op(X) of X with rows ld apart (trans: X is [cols, rows]).
static void matrix_desc(dnnl_memory_desc_t *md, int rows, int cols, int ld, int trans, dnnl_data_type_t dt) {
    dnnl_dims_t dims = {rows, cols}, strides = {ld, 1};
    if (trans) { strides[0] = 1; strides[1] = ld; }
    DN(dnnl_memory_desc_init_by_strides(md, 2, dims, dt, strides));
}

// alpha as the output scale, beta as a sum post-op (dst = alpha·A·B + beta·dst)
static dnnl_primitive_attr_t make_attr(float alpha, float beta) {
    dnnl_primitive_attr_t attr;
    DN(dnnl_primitive_attr_create(&attr));
    if (alpha != 1.0f) DN(dnnl_primitive_attr_set_output_scales(attr, 1, 0, &alpha));
    if (beta != 0.0f) {
        dnnl_post_ops_t po;
        DN(dnnl_post_ops_create(&po));
        DN(dnnl_post_ops_append_sum(po, beta));
        DN(dnnl_primitive_attr_set_post_ops(attr, po));
        dnnl_post_ops_destroy(po);
    }
    return attr;
}

// Builds e's primitive for e->k; e->p stays NULL where oneDNN has no implementation.
static void entry_make(Entry *e) {
    const Key *k = &e->k;
    dnnl_data_type_t dt = k->t == ONEDNN_BF16 ? dnnl_bf16 : dnnl_f32;
    matrix_desc(&e->a, k->M, k->K, k->lda, k->ta, dt);
    matrix_desc(&e->b, k->K, k->N, k->ldb, k->tb, dt);
    matrix_desc(&e->c, k->M, k->N, k->ldc, 0, dnnl_f32);
    dnnl_matmul_desc_t md;
    DN(dnnl_matmul_desc_init(&md, &e->a, &e->b, NULL, &e->c));
    dnnl_primitive_attr_t attr = make_attr(k->alpha, k->beta);
    dnnl_primitive_desc_t pd;
    e->p = NULL;
    snprintf(e->impl, sizeof e->impl, "none");
    if (dnnl_primitive_desc_create(&pd, &md, attr, get_engine(), NULL) == dnnl_success) {
        const char *impl = NULL;
        DN(dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl));
        snprintf(e->impl, sizeof e->impl, "%s", impl ? impl : "?");
        DN(dnnl_primitive_create(&e->p, pd));
        dnnl_primitive_desc_destroy(pd);
    }
    dnnl_primitive_attr_destroy(attr);
}

// The free slot, else the least recently used entry nobody runs (its primitive freed); NULL when
// every entry is in use.
static Entry *slot_for_new(void) {
    Entry *lru = NULL;
    for (int i = 0; i < CACHE_CAP; i++) {
        Entry *e = &cache[i];
        if (!e->live) return e;
        if (!__atomic_load_n(&e->refs, __ATOMIC_ACQUIRE) && (!lru || e->used < lru->used)) lru = e;
    }
    if (lru && lru->p) dnnl_primitive_destroy(lru->p);
    if (lru) lru->live = 0;
    return lru;
}

// The entry of k with a reference taken (release with entry_release), made if new; an entry of
// its own (not cached, `own` set) when the whole cache is in use.
static Entry *entry_get(const Key *k, Entry *own) {
    Entry *e = NULL;
    #pragma omp critical(onednn_cache)
    {
        for (int i = 0; i < CACHE_CAP && !e; i++)
            if (cache[i].live && !memcmp(&cache[i].k, k, sizeof *k)) e = &cache[i];
        if (!e && (e = slot_for_new())) {
            e->k = *k;
            entry_make(e);
            e->live = 1;
        }
        if (e) { e->refs++; e->used = ++cache_clock; }
    }
    if (e) return e;
    own->k = *k;
    entry_make(own);
    return own;
}

static void entry_release(Entry *e, const Entry *own) {
    if (e == own) { if (e->p) dnnl_primitive_destroy(e->p); return; }
    __atomic_fetch_sub(&e->refs, 1, __ATOMIC_ACQ_REL);
}

static Key key_of(OnednnType t, int ta, int tb, int M, int N, int K, int lda, int ldb, int ldc, float alpha,
                  float beta) {
    Key k;
    memset(&k, 0, sizeof k);   // the padding too: keys compare by memcmp
    k.t = t; k.ta = ta; k.tb = tb; k.M = M; k.N = N; k.K = K; k.lda = lda; k.ldb = ldb; k.ldc = ldc;
    k.alpha = alpha; k.beta = beta;
    return k;
}

static void run(const Entry *e, const void *A, const void *B, float *C) {
    if (!stream) DN(dnnl_stream_create(&stream, get_engine(), dnnl_stream_default_flags));
    dnnl_memory_t m[3];
    DN(dnnl_memory_create(&m[0], &e->a, engine, (void *)A));
    DN(dnnl_memory_create(&m[1], &e->b, engine, (void *)B));
    DN(dnnl_memory_create(&m[2], &e->c, engine, C));
    dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, m[0]}, {DNNL_ARG_WEIGHTS, m[1]}, {DNNL_ARG_DST, m[2]}};
    DN(dnnl_primitive_execute(e->p, stream, 3, args));
    DN(dnnl_stream_wait(stream));
    for (int i = 0; i < 3; i++) dnnl_memory_destroy(m[i]);
}

int onednn_matmul(OnednnType t, int ta, int tb, int M, int N, int K, float alpha, const void *A, int lda,
                  const void *B, int ldb, float beta, float *C, int ldc) {
    Key k = key_of(t, ta, tb, M, N, K, lda, ldb, ldc, alpha, beta);
    Entry own, *e = entry_get(&k, &own);
    int ok = e->p != NULL;
    if (ok) run(e, A, B, C);
    entry_release(e, &own);
    return ok ? 0 : -1;
}

int onednn_kernel(OnednnType t, int ta, int tb, int M, int N, int K, int lda, int ldb, int ldc, char *out, size_t n) {
    Key k = key_of(t, ta, tb, M, N, K, lda, ldb, ldc, 1.0f, 0.0f);
    Entry own, *e = entry_get(&k, &own);
    int ok = e->p != NULL;
    snprintf(out, n, "%s", e->impl);
    entry_release(e, &own);
    return ok ? 0 : -1;
}

static const char *isa_name(dnnl_cpu_isa_t isa) {
    switch (isa) {
    case dnnl_cpu_isa_sse41: return "sse41";
    case dnnl_cpu_isa_avx: return "avx";
    case dnnl_cpu_isa_avx2: return "avx2";
    case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    default: return "other";
    }
}

void onednn_version(char *out, size_t n) {
    const dnnl_version_t *v = dnnl_version();
    snprintf(out, n, "oneDNN %d.%d.%d", v->major, v->minor, v->patch);
}

const char *onednn_isa(void) { return isa_name(dnnl_get_effective_cpu_isa()); }

int onednn_cached(void) {
    int n = 0;
    #pragma omp critical(onednn_cache)
    for (int i = 0; i < CACHE_CAP; i++) n += cache[i].live;
    return n;
}

int onednn_cache_capacity(void) { return CACHE_CAP; }
