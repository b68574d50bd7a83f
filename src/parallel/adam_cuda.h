// adam_cuda.h — the CUDA twins of the optimizer's passes (src/cuda/parallel.cu), for adam.c and
// zero.c: the whole step's AdamW in one launch over every tensor's shard with the clipping norm
// summed and applied on the device (fp32 gradients: fp32 runs and the GPU's bf16), and the
// 16-bit gradients' passes (fp16 on a GPU): sums of squares, up-casts, AdamW.
#pragma once
#include <stdint.h>
#ifdef __cplusplus
extern "C" {   // implemented in CUDA C++ (src/cuda)
#endif

// ---- the step in one pass over every shard (fp32 gradients) --------------------------------
// A table of segments, one per tensor (its shard: the fp32 gradients, the weights the ops read,
// its place in master, m, v), cut into chunks, each one block's work.
typedef struct {
    float *g;            // the shard's fp32 gradients
    void *w;             // the shard's weights as the ops read them: bf16 (wbf16) or fp32
    long base, len;      // the shard in master, m, v
    int decay;           // weight decay applies
    int counted;         // counted in the clipping norm (each parameter once: zero.c)
} OptSeg;
typedef struct {
    float step, sb2;     // lr/bc1 and √bc2, as adam.c's host loops take them
    float decay;         // 1 − lr·wd for the segments that decay
    float b1, b2, eps;
    float clip;          // gradients clipped to this global norm (0: off)
    int zero_grads;      // 1: write 0 over each gradient read; 0: leave them (the caller marks them fresh)
} OptStep;
// The table on the device (made once: the shards' pointers never move); wbf16: the weights are bf16.
void *cu_opt_plan(const OptSeg *seg, int n, int wbf16);
void cu_opt_free(void *plan);
// sq[i] = Σ g² over segment i, sq[n] = Σ of the counted segments' (device doubles, a fixed order)
void cu_opt_norm(void *plan, double *sq);
// AdamW (adam.c's adam_elem) on every segment, the gradients scaled by clip/(√sumsq + 1e-6) when the
// norm √sumsq (a device double) is above clip; the weights written (bf16: rounded). A non-finite norm
// leaves weights, masters and m, v as they were. Every gradient is left zero with h->zero_grads
// (else as it was: zero.c marks them fresh, nn/fresh.h). One launch.
void cu_opt_adamw(void *plan, float *master, float *m, float *v, const double *sumsq, const OptStep *h);
// The same step beside the next forward (zero.c, TED_OPT_OVERLAP=1): part k (0, 1, ... in order) is
// AdamW over segments [s0, s1) on the optimizer's own stream, part 0 after everything the main
// stream has issued (the norm), each part then marked by an event. cu_opt_wait(plan, k): the main
// stream waits for part k and those before it (k < 0 or past the last: every part of the step).
void cu_opt_adamw_part(void *plan, int s0, int s1, int k, float *master, float *m, float *v, const double *sumsq,
                       const OptStep *h);
void cu_opt_wait(void *plan, int k);

// ---- 16-bit gradients (fp16 on a GPU) ----------------------------------------------------
// Σ (s·x)² in double into *out (a device double); dst = s·f32(src); AdamW as adam.c's adam_elem.
void cu_sumsq_half(double *out, const uint16_t *x, long n, int half, float s);
void cu_upcast_scale(float *dst, const uint16_t *src, long n, int half, float s);     // dst = s·f32(src)
void cu_adamw(float *w, float *m, float *v, const float *g, long n, float lr, float decay, float b1, float b2,
              float eps, float bc1, float bc2);

#ifdef __cplusplus
}
#endif
