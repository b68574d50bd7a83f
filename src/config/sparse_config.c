// sparse_config.c — the `sparse_attention` section: defaults, JSON, its text form, its rules
// (see sparse_config.h; the layouts it describes are built by nn/sparse_layout.c).
#include "config/sparse_config.h"
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
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

static int json_int(const cJSON *j, int lo, int *out) {
    if (!cJSON_IsNumber(j) || !isfinite(j->valuedouble) || j->valuedouble != floor(j->valuedouble) ||
        j->valuedouble < lo || j->valuedouble > 1e9)
        return -1;
    *out = (int)j->valuedouble;
    return 0;
}

// An array of at most SPARSE_MAX_LIST integers >= lo (and not empty when nonempty): NULL, or
// what it must be and what it is, written into buf.
static const char *json_list(const cJSON *j, int lo, int nonempty, int *n, int *v, char *buf, size_t len) {
    int size = cJSON_GetArraySize(j), i = 0;
    if (!cJSON_IsArray(j)) snprintf(buf, len, "an array of integers >= %d (got %s)", lo,
                                    cJSON_IsObject(j) ? "an object" : cJSON_IsString(j) ? "a string" : "a scalar");
    else if (size > SPARSE_MAX_LIST) snprintf(buf, len, "an array of at most %d entries (got %d)", SPARSE_MAX_LIST, size);
    else if (nonempty && size == 0) snprintf(buf, len, "a non-empty array (got [])");
    else {
        *n = 0;
        for (const cJSON *e = j->child; e; e = e->next, i++)
            if (json_int(e, lo, &v[(*n)++])) {
                if (cJSON_IsNumber(e)) snprintf(buf, len, "an array of integers >= %d (entry %d is %.10g)", lo, i, e->valuedouble);
                else snprintf(buf, len, "an array of integers >= %d (entry %d is not a number)", lo, i);
                return buf;
            }
        return NULL;
    }
    return buf;
}

static int json_mode(const cJSON *j, int *mode) {
    if (!cJSON_IsString(j)) return -1;
    for (int m = 0; m < 5; m++)
        if (!strcmp(j->valuestring, mode_names[m])) { *mode = m; return 0; }
    return -1;
}

const char *const sparse_config_keys[] = {
    "mode", "block", "num_local_blocks", "num_global_blocks", "num_random_blocks", "num_sliding_window_blocks",
    "num_different_global_patterns", "different_layout_per_head", "horizontal_global_attention", "recompute",
    "local_window_blocks", "global_block_indices", "global_block_end_indices", "attention", "seed", NULL};

int sparse_config_json(SparseConfig *s, const void *obj, const char *key,
                       void (*problem)(const char *key, const char *name, const char *want)) {
    const cJSON *o = obj;
    int rc = 0;
    if (!cJSON_IsObject(o)) { problem(key, NULL, "an object"); return -1; }
    for (const cJSON *j = o->child; j; j = j->next) {
        const char *k = j->string;
        const char *want = NULL;
        char why[128];
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
            want = json_list(j, 1, 1, &s->n_local_windows, s->local_window_blocks, why, sizeof why);
        } else if (!strcmp(k, "global_block_indices")) {
            want = json_list(j, 0, 0, &s->n_global, s->global_block_indices, why, sizeof why);
        } else if (!strcmp(k, "global_block_end_indices")) {
            if (cJSON_IsNull(j)) s->n_global_end = 0;
            else want = json_list(j, 0, 0, &s->n_global_end, s->global_block_end_indices, why, sizeof why);
        } else if (!strcmp(k, "attention")) {
            if (!cJSON_IsString(j) || (strcmp(j->valuestring, "unidirectional") && strcmp(j->valuestring, "bidirectional")))
                want = "\"unidirectional\" or \"bidirectional\"";
            else s->bidirectional = !strcmp(j->valuestring, "bidirectional");
        } else if (!strcmp(k, "seed")) {
            if (!cJSON_IsNumber(j) || j->valuedouble < 0 || j->valuedouble > 9007199254740992.0 ||
                j->valuedouble != floor(j->valuedouble)) want = "an integer in [0, 2^53]";
            else { s->seed = (uint64_t)j->valuedouble; s->seed_set = 1; }
        } else { problem(key, k, NULL); continue; }
        if (want) { problem(key, k, want); rc = -1; }
    }
    return rc;
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
                       s->num_local_blocks, s->num_global_blocks, s->num_different_global_patterns, sparse_random_blocks(s),
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

#define RULE(cond, ...) do { if (cond) { snprintf(why, n, "sparse_attention: " __VA_ARGS__); return -1; } } while (0)

int sparse_config_validate(const SparseConfig *s, int T, char *why, size_t n) {
    if (s->mode == SPARSE_DENSE) return 0;
    int nb = T / s->block, G = s->num_global_blocks, Lb = s->num_local_blocks;
    RULE(s->bidirectional, "attention \"bidirectional\" is not supported (ted's attention is unidirectional)");
    RULE(s->horizontal_global_attention, "horizontal_global_attention needs bidirectional attention (not supported)");
    RULE(T % s->block, "seq_len (%d) is not a multiple of block (%d)", T, s->block);
    RULE(sparse_random_blocks(s) > nb, "num_random_blocks (%d) > blocks per sequence (%d)", sparse_random_blocks(s), nb);
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
    for (int i = 0; i < s->n_global; i++)   // blocks of a sequence are 0..nb-1; end indices are exclusive
        RULE(s->global_block_indices[i] >= nb, "global_block_indices[%d] (%d) is past the last block (%d blocks of %d "
             "tokens per sequence)", i, s->global_block_indices[i], nb, s->block);
    for (int i = 0; i < s->n_global_end; i++)
        RULE(s->global_block_end_indices[i] > nb, "global_block_end_indices[%d] (%d) is past the end (%d blocks of %d "
             "tokens per sequence)", i, s->global_block_end_indices[i], nb, s->block);
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
