// sparse_layout.c — the `sparse_attention` section and the block layouts (see sparse_layout.h).
// The layouts follow DeepSpeed's sparsity configs for unidirectional attention:
//   fixed:        local windows of num_local_blocks (causal inside), and in each window the
//                 last num_global_blocks key blocks (shifted per head pattern) seen by every later row;
//   bigbird:      num_random_blocks random earlier blocks per row, a sliding window, and the
//                 first num_global_blocks blocks as global rows and columns;
//   bslongformer: a sliding window and the global blocks given by index (or index ranges);
//   variable:     local windows of the listed sizes (the last repeated), random blocks, global columns.
// Whatever a rule sets above the diagonal is dropped (unidirectional).
#include "sparse_layout.h"
#include "alloc.h"
#include "rng.h"
#include "util.h"
#include <cjson/cJSON.h>
#include <math.h>
#include <string.h>

static const char *mode_names[] = {"dense", "fixed", "bigbird", "bslongformer", "variable"};
const char *sparse_mode_name(int mode) { return mode_names[mode]; }

void sparse_config_defaults(SparseConfig *s) {
    memset(s, 0, sizeof *s);
    s->mode = SPARSE_DENSE;
    s->block = 16;
    s->num_local_blocks = 4;
    s->num_global_blocks = 1;
    s->num_different_global_patterns = 1;
    s->num_random_blocks = -1;   // resolved per mode
    s->num_sliding_window_blocks = 3;
    s->n_local_windows = 1; s->local_window_blocks[0] = 4;
    s->n_global = 1; s->global_block_indices[0] = 0;
}

// ---------------------------------------------------------------------------------------
// JSON

static int bad(const char *file, const char *key, const char *name, const char *want) {
    ted_error("%s: key \"%s.%s\" must be %s", file, key, name, want);
    return -1;
}

static int json_int(const cJSON *j, int lo, int *out) {
    if (!cJSON_IsNumber(j) || !isfinite(j->valuedouble) || j->valuedouble != floor(j->valuedouble) ||
        j->valuedouble < lo || j->valuedouble > 1e9)
        return -1;
    *out = (int)j->valuedouble;
    return 0;
}

static int json_list(const cJSON *j, int *n, int *v) {
    if (!cJSON_IsArray(j) || cJSON_GetArraySize(j) > SPARSE_MAX_LIST) return -1;
    *n = 0;
    for (const cJSON *e = j->child; e; e = e->next)
        if (json_int(e, 0, &v[(*n)++])) return -1;
    return 0;
}

static int json_mode(const cJSON *j, int *mode) {
    if (!cJSON_IsString(j)) return -1;
    for (int m = 0; m < 5; m++)
        if (!strcmp(j->valuestring, mode_names[m])) { *mode = m; return 0; }
    return -1;
}

int sparse_config_json(SparseConfig *s, const void *obj, const char *key, const char *file) {
    const cJSON *o = obj;
    if (!cJSON_IsObject(o)) { ted_error("%s: key \"%s\" must be an object", file, key); return -1; }
    for (const cJSON *j = o->child; j; j = j->next) {
        const char *k = j->string;
        const char *want = NULL;
        if (!strcmp(k, "mode")) { if (json_mode(j, &s->mode)) want = "dense, fixed, bigbird, bslongformer or variable"; }
        else if (!strcmp(k, "block")) { if (json_int(j, 1, &s->block)) want = "an integer >= 1"; }
#define INT_KEY(name, lo) else if (!strcmp(k, #name)) { if (json_int(j, lo, &s->name)) want = "an integer >= " #lo; }
#define BOOL_KEY(name) else if (!strcmp(k, #name)) { if (!cJSON_IsBool(j)) want = "true or false"; else s->name = cJSON_IsTrue(j); }
        INT_KEY(num_local_blocks, 1) INT_KEY(num_global_blocks, 0) INT_KEY(num_random_blocks, 0)
        INT_KEY(num_sliding_window_blocks, 1) INT_KEY(num_different_global_patterns, 1)
        BOOL_KEY(different_layout_per_head) BOOL_KEY(horizontal_global_attention) BOOL_KEY(recompute)
#undef INT_KEY
#undef BOOL_KEY
        else if (!strcmp(k, "local_window_blocks")) {
            if (json_list(j, &s->n_local_windows, s->local_window_blocks) || s->n_local_windows < 1) want = "a non-empty array of integers";
        } else if (!strcmp(k, "global_block_indices")) {
            if (json_list(j, &s->n_global, s->global_block_indices)) want = "an array of integers >= 0";
        } else if (!strcmp(k, "global_block_end_indices")) {
            if (cJSON_IsNull(j)) s->n_global_end = 0;
            else if (json_list(j, &s->n_global_end, s->global_block_end_indices)) want = "null or an array of integers >= 0";
        } else if (!strcmp(k, "attention")) {
            if (!cJSON_IsString(j) || (strcmp(j->valuestring, "unidirectional") && strcmp(j->valuestring, "bidirectional")))
                want = "\"unidirectional\" or \"bidirectional\"";
            else s->bidirectional = !strcmp(j->valuestring, "bidirectional");
        } else if (!strcmp(k, "seed")) {
            if (!cJSON_IsNumber(j) || j->valuedouble < 0 || j->valuedouble > 9007199254740992.0 ||
                j->valuedouble != floor(j->valuedouble)) want = "an integer in [0, 2^53]";
            else { s->seed = (uint64_t)j->valuedouble; s->seed_set = 1; }
        } else { ted_error("%s: unknown key \"%s.%s\"", file, key, k); return -1; }
        if (want) return bad(file, key, k, want);
    }
    return 0;
}

static int resolved_random(const SparseConfig *s) {
    return s->num_random_blocks >= 0 ? s->num_random_blocks : s->mode == SPARSE_BIGBIRD ? 1 : 0;
}

static int put_list(char *out, int n, const char *name, const int *v, int k) {
    int len = snprintf(out, n, ", \"%s\": [", name);
    for (int i = 0; i < k && len < n; i++) len += snprintf(out + len, n - len, "%s%d", i ? ", " : "", v[i]);
    return len < n ? len + snprintf(out + len, n - len, "]") : len;
}

void sparse_config_write(const SparseConfig *s, uint64_t run_seed, char *out, int n) {
    out[0] = 0;
    if (s->mode == SPARSE_DENSE) return;
    int len = snprintf(out, n, "{\"mode\": \"%s\", \"block\": %d, \"different_layout_per_head\": %s, "
                       "\"num_local_blocks\": %d, \"num_global_blocks\": %d, \"num_different_global_patterns\": %d, "
                       "\"num_random_blocks\": %d, \"num_sliding_window_blocks\": %d, \"seed\": %llu",
                       sparse_mode_name(s->mode), s->block, s->different_layout_per_head ? "true" : "false",
                       s->num_local_blocks, s->num_global_blocks, s->num_different_global_patterns, resolved_random(s),
                       s->num_sliding_window_blocks, (unsigned long long)(s->seed_set ? s->seed : run_seed));
    if (len < n) len += put_list(out + len, n - len, "local_window_blocks", s->local_window_blocks, s->n_local_windows);
    if (len < n) len += put_list(out + len, n - len, "global_block_indices", s->global_block_indices, s->n_global);
    if (len < n && s->n_global_end)
        len += put_list(out + len, n - len, "global_block_end_indices", s->global_block_end_indices, s->n_global_end);
    if (len < n) snprintf(out + len, n - len, "}");
}

int sparse_config_same(const SparseConfig *a, uint64_t seed_a, const SparseConfig *b, uint64_t seed_b) {
    char x[4096], y[4096];
    sparse_config_write(a, seed_a, x, sizeof x);
    sparse_config_write(b, seed_b, y, sizeof y);
    return !strcmp(x, y);
}

// ---------------------------------------------------------------------------------------
// validation

#define RULE(cond, ...) do { if (cond) { ted_error("sparse_attention: " __VA_ARGS__); return -1; } } while (0)

int sparse_config_validate(const SparseConfig *s, int T) {
    if (s->mode == SPARSE_DENSE) return 0;
    int nb = T / s->block, G = s->num_global_blocks, Lb = s->num_local_blocks;
    RULE(s->bidirectional, "attention \"bidirectional\" is not supported (ted's attention is unidirectional)");
    RULE(s->horizontal_global_attention, "horizontal_global_attention needs bidirectional attention (not supported)");
    RULE(T % s->block, "seq_len (%d) is not a multiple of block (%d)", T, s->block);
    RULE(resolved_random(s) > nb, "num_random_blocks (%d) > blocks per sequence (%d)", resolved_random(s), nb);
    if (s->mode == SPARSE_FIXED) {
        RULE(G < 1 || Lb % G, "num_local_blocks (%d) must be a multiple of num_global_blocks (%d >= 1)", Lb, G);
        RULE(s->num_different_global_patterns > Lb / G, "num_different_global_patterns (%d) > num_local_blocks / "
             "num_global_blocks (%d)", s->num_different_global_patterns, Lb / G);
        RULE(s->num_different_global_patterns > 1 && !s->different_layout_per_head,
             "num_different_global_patterns > 1 needs different_layout_per_head");
        RULE(G > nb, "num_global_blocks (%d) > blocks per sequence (%d)", G, nb);
    }
    if (s->mode == SPARSE_BIGBIRD) RULE(G > nb, "num_global_blocks (%d) > blocks per sequence (%d)", G, nb);
    if (s->mode == SPARSE_BIGBIRD || s->mode == SPARSE_BSLONGFORMER)
        RULE(s->num_sliding_window_blocks > nb, "num_sliding_window_blocks (%d) > blocks per sequence (%d)",
             s->num_sliding_window_blocks, nb);
    if (s->mode == SPARSE_VARIABLE)
        for (int i = 0; i < s->n_local_windows; i++) RULE(s->local_window_blocks[i] < 1, "local_window_blocks must be >= 1");
    if (s->n_global_end) {
        RULE(s->n_global_end != s->n_global, "global_block_end_indices has %d entries, global_block_indices %d",
             s->n_global_end, s->n_global);
        for (int i = 0; i < s->n_global; i++)
            RULE(s->global_block_end_indices[i] <= s->global_block_indices[i],
                 "global_block_end_indices[%d] (%d) must be > global_block_indices[%d] (%d)", i,
                 s->global_block_end_indices[i], i, s->global_block_indices[i]);
    }
    return 0;
}

// ---------------------------------------------------------------------------------------
// the 0/1 matrix of one head: m[nb,nb], m[i*nb+j] = query block i sees key block j

static void set_cols(unsigned char *m, int nb, int r0, int r1, int c0, int c1) {   // rows [r0,r1) × cols [c0,c1)
    for (int i = r0 < 0 ? 0 : r0; i < r1 && i < nb; i++)
        for (int j = c0 < 0 ? 0 : c0; j < c1 && j < nb; j++) m[(long)i * nb + j] = 1;
}

static void local_windows(unsigned char *m, int nb, const int *sizes, int n) {   // the last size repeats
    for (int i = 0, w = 0; i < nb; i += sizes[w < n ? w : n - 1], w++) {
        int len = sizes[w < n ? w : n - 1];
        for (int r = i; r < i + len && r < nb; r++) set_cols(m, nb, r, r + 1, i, r + 1);
    }
}

static void sliding_window(unsigned char *m, int nb, int blocks) {
    int w = blocks / 2;
    for (int r = 0; r < nb; r++) set_cols(m, nb, r, r + 1, r - w, r + w + 1);
}

// num distinct random key blocks in [0, r] per query block r, from (seed, layer, head) only
static void random_blocks(unsigned char *m, int nb, int num, uint64_t seed, int layer, int head) {
    if (num <= 0) return;
    int *pool = ted_alloc(sizeof(int) * nb, MEM_TEMP);
    uint64_t stream = 0x7370617273650000ull + (uint64_t)layer;
    for (int r = 0; r < nb; r++) {
        int n = r + 1, k = num < n ? num : n;
        for (int i = 0; i < n; i++) pool[i] = i;
        for (int i = 0; i < k; i++) {   // partial Fisher–Yates
            uint64_t at = ((uint64_t)head << 42) + ((uint64_t)r << 21) + (uint64_t)i;   // not nb: any T agrees
            int pick = i + (int)(rng_at(seed, stream, at) % (uint64_t)(n - i));
            int t = pool[i]; pool[i] = pool[pick]; pool[pick] = t;
            m[(long)r * nb + pool[i]] = 1;
        }
    }
    ted_free(pool);
}

static void fixed_layout(unsigned char *m, int nb, const SparseConfig *s, int head) {
    int L = s->num_local_blocks, G = s->num_global_blocks;
    int pattern = s->different_layout_per_head ? head % s->num_different_global_patterns : 0;
    local_windows(m, nb, &L, 1);
    int first = L - (1 + pattern) * G, end = nb - nb % L;
    for (int i = first; i < end; i += L) set_cols(m, nb, i, nb, i, i + G);
    if (end < nb) {   // the last, partial window
        int start = end + first < nb - G ? end + first : nb - G;
        set_cols(m, nb, start, nb, start, start + G);
    }
}

// global rows and columns by index (bslongformer: both; variable: columns only)
static void global_indices(unsigned char *m, int nb, const SparseConfig *s, int rows) {
    for (int i = 0; i < s->n_global; i++) {
        int a = s->global_block_indices[i], b = s->n_global_end ? s->global_block_end_indices[i] : a + 1;
        if (a >= nb) continue;
        set_cols(m, nb, a, nb, a, b);             // columns: every later row
        if (rows) set_cols(m, nb, a, b, 0, nb);   // rows: see everything before
    }
}

static void head_mask(unsigned char *m, int nb, const SparseConfig *s, uint64_t seed, int layer, int head) {
    memset(m, 0, (size_t)nb * nb);
    switch (s->mode) {
    case SPARSE_FIXED: fixed_layout(m, nb, s, head); break;
    case SPARSE_BIGBIRD:
        random_blocks(m, nb, resolved_random(s), seed, layer, head);
        sliding_window(m, nb, s->num_sliding_window_blocks);
        set_cols(m, nb, 0, s->num_global_blocks, 0, nb);
        set_cols(m, nb, 0, nb, 0, s->num_global_blocks);
        break;
    case SPARSE_BSLONGFORMER:
        sliding_window(m, nb, s->num_sliding_window_blocks);
        global_indices(m, nb, s, 1);
        break;
    case SPARSE_VARIABLE:
        random_blocks(m, nb, resolved_random(s), seed, layer, head);
        local_windows(m, nb, s->local_window_blocks, s->n_local_windows);
        global_indices(m, nb, s, 0);
        break;
    default: set_cols(m, nb, 0, nb, 0, nb); break;   // dense: every block
    }
    for (int i = 0; i < nb; i++) {   // unidirectional: nothing above the diagonal; the diagonal always
        memset(m + (long)i * nb + i + 1, 0, (size_t)(nb - i - 1));
        m[(long)i * nb + i] = 1;
    }
}

// ---------------------------------------------------------------------------------------
// compressed rows and columns

static void compress(SparseLayout *L, const unsigned char *m) {   // m [H][nb][nb]
    int nb = L->nb, H = L->H;
    long e = 0;
    L->max_row = 0;
    for (int h = 0; h < H; h++)
        for (int i = 0; i < nb; i++) {
            L->row[(long)h * (nb + 1) + i] = e;
            for (int j = 0; j <= i; j++)
                if (m[((long)h * nb + i) * nb + j]) L->col[e++] = j;
            long n = e - L->row[(long)h * (nb + 1) + i];
            if (n > L->max_row) L->max_row = (int)n;
            if (i == nb - 1) L->row[(long)h * (nb + 1) + nb] = e;
        }
    // columns: count per (head, key block), then fill walking the rows in order (sorted by query block)
    long *fill = ted_alloc(sizeof(long) * H * (nb + 1), MEM_TEMP);
    for (int h = 0; h < H; h++) {
        long *cp = L->cptr + (long)h * (nb + 1), *rp = L->row + (long)h * (nb + 1);
        for (long p = rp[0]; p < rp[nb]; p++) cp[L->col[p] + 1]++;
        cp[0] = rp[0];
        for (int j = 0; j < nb; j++) {
            if (cp[j + 1] > L->max_col) L->max_col = (int)cp[j + 1];
            cp[j + 1] += cp[j];
        }
        for (int j = 0; j <= nb; j++) fill[(long)h * (nb + 1) + j] = cp[j];
        for (int i = 0; i < nb; i++)
            for (long p = rp[i]; p < rp[i + 1]; p++) {
                long c = fill[(long)h * (nb + 1) + L->col[p]]++;
                L->crow[c] = i; L->cent[c] = p;
            }
    }
    ted_free(fill);
}

// the arrays on a GPU run's device; on the CPU the host arrays themselves
static void *on_device(void *host, size_t bytes) {
    if (ted_device != DEV_CUDA) return host;
    void *d = ted_alloc_buf(bytes, MEM_ACTIVATIONS);
    buf_copy(d, host, bytes);
    return d;
}

void sparse_layout_build(SparseLayout *L, const SparseConfig *s, uint64_t run_seed, int layer, int h0, int H,
                         int T) {
    CHECK(T % s->block == 0, "sparse layout: T %d is not a multiple of block %d", T, s->block);
    memset(L, 0, sizeof *L);
    L->block = s->block; L->nb = T / s->block; L->H = H; L->recompute = s->recompute;
    int nb = L->nb;
    uint64_t seed = s->seed_set ? s->seed : run_seed;
    unsigned char *m = ted_alloc((size_t)H * nb * nb, MEM_TEMP);
    for (int h = 0; h < H; h++) {   // one layout for all heads unless per head: head 0's
        int head = s->different_layout_per_head ? h0 + h : 0;
        head_mask(m + (long)h * nb * nb, nb, s, seed, layer, head);
    }
    for (long i = 0; i < (long)H * nb * nb; i++) L->nnz += m[i];
    L->row = ted_alloc(sizeof(long) * H * (nb + 1), MEM_ACTIVATIONS);
    L->cptr = ted_alloc(sizeof(long) * H * (nb + 1), MEM_ACTIVATIONS);
    L->col = ted_alloc(sizeof(int) * L->nnz, MEM_ACTIVATIONS);
    L->crow = ted_alloc(sizeof(int) * L->nnz, MEM_ACTIVATIONS);
    L->cent = ted_alloc(sizeof(long) * L->nnz, MEM_ACTIVATIONS);
    compress(L, m);
    ted_free(m);
    L->row_d = on_device(L->row, sizeof(long) * H * (nb + 1));
    L->cptr_d = on_device(L->cptr, sizeof(long) * H * (nb + 1));
    L->col_d = on_device(L->col, sizeof(int) * L->nnz);
    L->crow_d = on_device(L->crow, sizeof(int) * L->nnz);
    L->cent_d = on_device(L->cent, sizeof(long) * L->nnz);
}

void sparse_layout_free(SparseLayout *L) {
    if (L->row_d != L->row) {
        ted_free_buf(L->row_d); ted_free_buf(L->cptr_d); ted_free_buf(L->col_d); ted_free_buf(L->crow_d);
        ted_free_buf(L->cent_d);
    }
    ted_free(L->row); ted_free(L->cptr); ted_free(L->col); ted_free(L->crow); ted_free(L->cent);
    memset(L, 0, sizeof *L);
}

void sparse_layout_mask(const SparseLayout *L, int h, unsigned char *m) {
    int nb = L->nb;
    memset(m, 0, (size_t)nb * nb);
    for (int i = 0; i < nb; i++)
        for (long p = L->row[(long)h * (nb + 1) + i]; p < L->row[(long)h * (nb + 1) + i + 1]; p++)
            m[(long)i * nb + L->col[p]] = 1;
}
