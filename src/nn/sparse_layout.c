// sparse_layout.c — the block layouts of the `sparse_attention` section (see sparse_layout.h).
// The layouts follow DeepSpeed's sparsity configs for unidirectional attention:
//   fixed:        local windows of num_local_blocks (causal inside), and in each window the
//                 last num_global_blocks key blocks (shifted per head pattern) seen by every later row;
//   bigbird:      num_random_blocks random earlier blocks per row, a sliding window, and the
//                 first num_global_blocks blocks as global rows and columns;
//   bslongformer: a sliding window and the global blocks given by index (or index ranges);
//   variable:     local windows of the listed sizes (the last repeated), random blocks, global columns.
// Whatever a rule sets above the diagonal is dropped (unidirectional).
#include "nn/sparse_layout.h"
#include "core/alloc.h"
#include "core/rng.h"
#include "core/util.h"
#include <math.h>
#include <string.h>

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
        random_blocks(m, nb, sparse_random_blocks(s), seed, layer, head);
        sliding_window(m, nb, s->num_sliding_window_blocks);
        set_cols(m, nb, 0, s->num_global_blocks, 0, nb);
        set_cols(m, nb, 0, nb, 0, s->num_global_blocks);
        break;
    case SPARSE_BSLONGFORMER:
        sliding_window(m, nb, s->num_sliding_window_blocks);
        global_indices(m, nb, s, 1);
        break;
    case SPARSE_VARIABLE:
        random_blocks(m, nb, sparse_random_blocks(s), seed, layer, head);
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

double sparse_layout_bytes(const SparseLayout *L, int gpu) {
    double b = sizeof(long) * 2.0 * L->H * (L->nb + 1) + (2.0 * sizeof(int) + sizeof(long)) * L->nnz;
    return gpu ? 2 * b : b;
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
