// sparse_layout.h — block-sparse attention layouts (design): the `sparse_attention` config
// section with DeepSpeed's keys, and per layer the 0/1 matrix over (query block, key block) of
// each head, kept as compressed rows (the forward, dQ) and compressed columns (dK, dV).
// A layout never has a block above the diagonal (attention is unidirectional); inside a
// diagonal block the causal mask applies. Random blocks depend on (seed, layer, global head) only.
#pragma once
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
// Reads the JSON object `j` (a cJSON *) of the section named `key` in `file`. Unknown keys and
// wrong types: one line, -1.
int sparse_config_json(SparseConfig *s, const void *j, const char *key, const char *file);
// The section as JSON text (for a checkpoint's config.json), seed resolved; "" when dense.
// Writes at most n bytes into out.
void sparse_config_write(const SparseConfig *s, uint64_t run_seed, char *out, int n);
// Whether two sections give the same layouts (a resumed run must keep its checkpoint's).
int sparse_config_same(const SparseConfig *a, uint64_t seed_a, const SparseConfig *b, uint64_t seed_b);
// Rules (T % block, sizes, unsupported combinations); one line and -1 when broken.
int sparse_config_validate(const SparseConfig *s, int T);
const char *sparse_mode_name(int mode);

// One layer's layout for this rank's heads [h0, h0+H) of the model's heads.
typedef struct {
    int block, nb, H;        // block size, blocks per sequence (T/block), local heads
    long nnz;                // present blocks over the local heads
    long *row;               // [H][nb+1] first entry of (head, query block); entries sorted by key block
    int *col;                // [nnz] key block of each entry
    long *cptr;              // [H][nb+1] first column-entry of (head, key block); sorted by query block
    int *crow;               // [nnz] query block of each column-entry
    long *cent;              // [nnz] its entry index (into col / the stored blocks)
    int max_row, max_col;    // most entries in one (head, query block) row; in one (head, key block) column
    int recompute;           // the section's `recompute`: the forward stores no probabilities
    long *row_d, *cptr_d, *cent_d;   // the same arrays on the run's device (the host ones on the CPU)
    int *col_d, *crow_d;
} SparseLayout;

// The layout of `layer` for the model's heads [h0, h0+H), T tokens (T % block == 0).
void sparse_layout_build(SparseLayout *L, const SparseConfig *s, uint64_t run_seed, int layer, int h0, int H, int T);
void sparse_layout_free(SparseLayout *L);
// The full 0/1 matrix of one local head [nb,nb] (for tests and the dense reference).
void sparse_layout_mask(const SparseLayout *L, int h, unsigned char *m);
