// rope.h — rotary position embeddings (docs/llama.md), as Hugging Face Llama applies them: in each
// head of size hd, element i < hd/2 pairs with i + hd/2 ("rotate_half") and turns by the angle
// pos·theta^(−2i/hd).
#pragma once

// The angles' cos and sin for positions 0 … T−1: tab[T, hd] = cos [T, hd/2] then sin [T, hd/2].
void rope_table(float *tab, int T, int hd, float theta);
// In place on x: rows n = 0 … N−1 of stride ld, position n % T (rows are B sequences of T tokens),
// heads h = 0 … nh−1 at columns h·hd … h·hd+hd−1.
void rope_forward(float *x, long ld, long N, int T, int nh, int hd, const float *tab);
// The backward: the gradient turned back (the transposed rotation), in place.
void rope_backward(float *dx, long ld, long N, int T, int nh, int hd, const float *tab);
