// data.h — training data (design §3): a text file read as bytes (V 256) or llm.c token
// shards (*.bin: 256 int32 header, magic 20240520, version 1, count; then uint16 tokens).
// Batches depend only on (seed, step) — never on the layout.
#pragma once
#include <stdint.h>

typedef struct { uint16_t *tok; long n; } Split;
typedef struct {
    Split train, val;
    int max_token;     // largest id seen (checked against the model's vocab_size)
} Dataset;

// Loads a text file (train = first ⌊0.9·N⌋ bytes, val = the rest) or shards: a path or a
// glob pattern ending in .bin; files named *_val_* are validation, the others training
// (in name order). Returns 0, or -1 after one line naming the file and the problem.
int data_load(Dataset *ds, const char *path);
// The whole file as one split (for `ted eval`).
int data_load_whole(Split *s, const char *path);
void data_free(Dataset *ds);

// windows of a split in the sequential numbering: ⌊(n−1)/T⌋
static inline long data_nwindows(const Split *s, int T) { return s->n > T ? (s->n - 1) / T : 0; }
// window i: inputs tokens [iT, iT+T), targets [iT+1, iT+T+1)
void data_window(const Split *s, long i, int T, int *inp, int *tgt);
// Sequence j (0 ≤ j < global batch) of step s: sequential windows s·B+j mod nwin, or a
// random start drawn from (seed, s, j).
void data_sequence(const Split *s, int T, uint64_t seed, int sequential, long step, long j, long gbatch,
                   int *inp, int *tgt);
