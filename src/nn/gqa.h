// gqa.h — grouped-query attention's key/value heads (docs/llama.md): nkv heads serve nh query heads,
// query head h reading key/value head h / (nh/nkv) (Hugging Face's repeat_kv). The attention
// itself runs on whole heads: the kv heads are repeated before it and their gradients summed after.
#pragma once

// In place on x: rows of stride ld whose first nkv·hd columns hold the kv heads become nh heads.
void gqa_expand(float *x, long ld, long N, int nh, int nkv, int hd);
// The backward: the nh heads' gradients summed into the first nkv heads (in place).
void gqa_reduce(float *dx, long ld, long N, int nh, int nkv, int hd);
