// sparse_config.h — the `sparse_attention` config section with DeepSpeed's keys (design):
// which layout (dense, fixed, bigbird, bslongformer, variable), its block size and counts.
// nn/sparse_layout.h builds the per-layer block layouts from it.
#pragma once
#include <stddef.h>
#include <stdint.h>

typedef enum { SPARSE_DENSE, SPARSE_FIXED, SPARSE_BIGBIRD, SPARSE_BSLONGFORMER, SPARSE_VARIABLE } SparseMode;

#define SPARSE_MAX_LIST 64   // entries of local_window_blocks / global_block_(end_)indices

typedef struct {
    int mode;                          // SparseMode; dense = the ordinary attention
    int block;                         // tokens per block (16)
    int different_layout_per_head;
    int num_local_blocks;              // fixed (4)
    int num_global_blocks;             // fixed, bigbird (1)
    int num_different_global_patterns; // fixed (1)
    int horizontal_global_attention;   // refused: bidirectional only
    int num_random_blocks;             // bigbird (1), variable (0); -1 until resolved
    int num_sliding_window_blocks;     // bigbird, bslongformer (3)
    int n_local_windows, local_window_blocks[SPARSE_MAX_LIST];   // variable ([4])
    int n_global, global_block_indices[SPARSE_MAX_LIST];         // bslongformer, variable ([0])
    int n_global_end, global_block_end_indices[SPARSE_MAX_LIST]; // optional: ranges [index, end)
    int bidirectional;                 // "attention": "bidirectional" was asked (refused)
    uint64_t seed;                     // of the random blocks ("seed"; default: the run's seed)
    int seed_set;
    int recompute;                     // ted's key (false): keep no probabilities; the backward
                                       // recomputes them a chunk of query blocks at a time
} SparseConfig;

// DeepSpeed's defaults, mode dense.
void sparse_config_defaults(SparseConfig *s);
// The section's key names (NULL-terminated), for "did you mean".
extern const char *const sparse_config_keys[];
// Reads the JSON object `j` (a cJSON *) of the section named `key`. Each problem goes to
// problem(key, name, want) and the reading goes on, so that the caller reports every problem of
// the file in one line: a value of the wrong type or range (want: what it must be; -1 is
// returned), an unknown key (want NULL), the section not an object (name NULL).
int sparse_config_json(SparseConfig *s, const void *j, const char *key,
                       void (*problem)(const char *key, const char *name, const char *want));
// The section as JSON text (for a checkpoint's config.json), seed resolved; "" when dense.
// Writes at most n bytes into out.
void sparse_config_write(const SparseConfig *s, uint64_t run_seed, char *out, int n);
// Whether two sections give the same layouts (a resumed run must keep its checkpoint's).
int sparse_config_same(const SparseConfig *a, uint64_t seed_a, const SparseConfig *b, uint64_t seed_b);
// Rules (T % block, sizes, unsupported combinations): 0, or -1 with the broken rule in why (n
// bytes; nothing is printed).
int sparse_config_validate(const SparseConfig *s, int T, char *why, size_t n);
const char *sparse_mode_name(int mode);
// num_random_blocks resolved: as given, else the mode's default (bigbird 1, the others 0).
static inline int sparse_random_blocks(const SparseConfig *s) {
    return s->num_random_blocks >= 0 ? s->num_random_blocks : s->mode == SPARSE_BIGBIRD ? 1 : 0;
}
