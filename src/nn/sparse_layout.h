// sparse_layout.h — block-sparse attention layouts (design): from the `sparse_attention`
// section (config/sparse_config.h), per layer the 0/1 matrix over (query block, key block) of
// each head, kept as compressed rows (the forward, dQ) and compressed columns (dK, dV).
// A layout never has a block above the diagonal (attention is unidirectional); inside a
// diagonal block the causal mask applies. Random blocks depend on (seed, layer, global head) only.
#pragma once
#include <stdint.h>
#include "config/sparse_config.h"

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
// The bytes of its index arrays (activations category; a GPU run has a device copy too).
double sparse_layout_bytes(const SparseLayout *L, int gpu);
// The full 0/1 matrix of one local head [nb,nb] (for tests and the dense reference).
void sparse_layout_mask(const SparseLayout *L, int h, unsigned char *m);
