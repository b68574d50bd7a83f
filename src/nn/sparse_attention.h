// sparse_attention.h — causal multi-head attention over the present blocks of a layout
// (design): exactly dense attention with every absent key masked to −∞, at the time and
// memory of the present blocks. Shapes as attention_forward (ops.h): qkv[N,3H·hd] (q|k|v),
// out[N,H·hd], N = B·T. The probabilities are kept per present block: att[B][nnz][blk][blk].
// T may be shorter than the layout's (generation): the layout's first ceil(T/blk) query and key
// blocks are used, the last one possibly partial.
#pragma once
#include "nn/sparse_layout.h"

// With the layout's `recompute` no probabilities are kept (att may be NULL) and the backward
// recomputes them in chunks of query blocks holding about this many floats (1<<24: 64 MB; at least
// one query block's strips). Tests lower it to cover many chunks.
extern long sparse_attention_chunk_floats;
// floats of att for B sequences (the layout's full length); 0 with `recompute`
long sparse_attention_att_floats(const SparseLayout *L, int B);
// floats of scratch per OpenMP thread (forward and backward; the GPU needs none)
long sparse_attention_scratch_floats(const SparseLayout *L, int hd);
// recompute: floats of the backward's chunk of recomputed strips for B sequences, which follows
// the threads' parts in the scratch (0 without recompute). The scratch passed to forward and
// backward holds omp_get_max_threads() · scratch_floats + recompute_floats.
long sparse_attention_recompute_floats(const SparseLayout *L, int B);
void sparse_attention_forward(float *out, float *att, const float *qkv, const SparseLayout *L, int B, int T,
                              int H, int hd, float *scratch);
// dqkv[N,3H·hd] written (not added). att is consumed: the backward overwrites the probabilities
// with the score gradients.
void sparse_attention_backward(float *dqkv, const float *dout, float *att, const float *qkv, const SparseLayout *L,
                               int B, int T, int H, int hd, float *scratch);
