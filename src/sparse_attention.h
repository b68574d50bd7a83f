// sparse_attention.h — causal multi-head attention over the present blocks of a layout
// (design): exactly dense attention with every absent key masked to −∞, at the time and
// memory of the present blocks. Shapes as attention_forward (ops.h): qkv[N,3H·hd] (q|k|v),
// out[N,H·hd], N = B·T. The probabilities are kept per present block: att[B][nnz][blk][blk].
// T may be shorter than the layout's (generation): the layout's first ceil(T/blk) query and key
// blocks are used, the last one possibly partial.
#pragma once
#include "sparse_layout.h"

// floats of att for B sequences (the layout's full length)
long sparse_attention_att_floats(const SparseLayout *L, int B);
// floats of scratch per OpenMP thread (forward and backward; the GPU needs none)
long sparse_attention_scratch_floats(const SparseLayout *L, int hd);
void sparse_attention_forward(float *out, float *att, const float *qkv, const SparseLayout *L, int B, int T,
                              int H, int hd, float *scratch);
// dqkv[N,3H·hd] written (not added). att is consumed: the backward overwrites the probabilities
// with the score gradients.
void sparse_attention_backward(float *dqkv, const float *dout, float *att, const float *qkv, const SparseLayout *L,
                               int B, int T, int H, int hd, float *scratch);
