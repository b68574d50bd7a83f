// zero_bucket.h — ZeRO-2 gradient buckets (used by zero.c; see zero.h). Blocks are packed in
// backward order (last block first) into buckets of at least reduce_bucket_size elements
// (a bucket holds whole blocks: a block larger than that makes the bucket that large); the
// tensors outside the blocks (wte, wpe, ln_f) sit in a deferred region that is reduced once
// the embedding's backward is done. All buckets share one buffer: when the backward says
// the last tensor of a bucket is complete, each tensor of the bucket is reduce-scattered over
// its DP group straight from its slot (padded to the group size), this rank's part is added
// into the shard, and the bucket is zeroed for the next.
#pragma once
#include "parallel/zero_state.h"

// overlap (zero_optimization.overlap_comm): the blocks' buckets alternate between two halves of the
// buffer, so that one bucket's reduce-scatters travel while the backward fills the next.
void bucket_plan(Zero *z, long bucket_size, int overlap);
// The bucket buffer's elements bucket_plan makes for registry r on DP and expert-DP groups of
// dp and edp ranks (counted, nothing allocated).
long bucket_elems_of(const Registry *r, int dp, int edp, long bucket_size, int overlap);
void bucket_free(Zero *z);
// The backward's hook (Registry.grads_ready): params [i0, i1) are complete for this micro-batch.
// With overlap each bucket's reduce-scatters start non-blocking here and are waited for when the
// backward is about to write into its half again (the bucket after next), at the end of a
// micro-batch that is not the step's last, or by bucket_wait_all before the norm.
void bucket_ready(void *zero, int i0, int i1);
void bucket_wait_all(Zero *z);
