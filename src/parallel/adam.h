// adam.h — the AdamW element update (design), one pass over a shard: written as plain loops over
// restrict pointers with `omp parallel for simd`, so that gcc vectorises them for the vector
// width of each clone (core/simd.h: x86-64-v2, AVX2, AVX-512, picked at run time by the CPU) and
// OpenMP threads split them. Used by the ZeRO optimizer on the CPU and by ZeRO-Offload's host
// step; a GPU run's fp32 gradients take zero.c's one-launch step instead (adam_cuda.h), its fp16
// ones adamw_half's CUDA kernels. Each call consumes its gradient: it is left zero, ready for the
// next step's backward to accumulate into (in the same pass, so that the gradient's bytes cross
// the cache once; adamw_half on a GPU by a memset after the kernel). The clip norm needs every
// gradient before the first update, so its sum of squares stays a pass of its own (zero.c).
#pragma once
#include <stdint.h>

typedef struct {
    float lr, decay;      // learning rate; decoupled weight decay factor 1 − lr·wd (1: no decay)
    float b1, b2, eps;
    float bc1, bc2;       // bias corrections 1 − β^t
} AdamHyper;

// 16-bit storage (half 1 bf16, 2 fp16): gradients g16 (times gscale: unscaling and clipping),
// fp32 masters w and m, v updated, the rounded weights written to w16, g16 left zero. One pass
// on the CPU; a GPU run up-casts through `tile` (n floats of device memory), the tiled optimizer.
void adamw_half(float *w, float *m, float *v, uint16_t *g16, long n, float gscale, const AdamHyper *a,
                uint16_t *w16, int half, float *tile);
// The host loops, whatever the run's device (ZeRO-Offload steps host memory). fp32 weights: g is
// scaled by gscale (clipping), w, m, v updated, the new weights also written to wout (the model's
// copy) unless it is NULL; g is left zero. The half one is adamw_half's loop. The
// mixed one is a GPU --bf16 run's (params.h: bf16 weights, fp32 gradients): the fp32 gradient g
// (times gscale) consumed, fp32 masters w and m, v updated, the weights rounded to bf16 into w16;
// on the device that run's step is zero.c's one launch (adam_cuda.h), with the same arithmetic.
void adamw_f32_host(float *w, float *m, float *v, float *g, long n, float gscale, const AdamHyper *a, float *wout);
void adamw_half_host(float *w, float *m, float *v, uint16_t *g16, long n, float gscale, const AdamHyper *a,
                     uint16_t *w16, int half);
void adamw_mixed_host(float *w, float *m, float *v, float *g, long n, float gscale, const AdamHyper *a, uint16_t *w16);
// `ted bench --optimizer N`: times one step over N parameters, fp32, bf16 and fp16 weights, and a
// memcpy of the same bytes; prints ms per step, GB/s (bytes read + written) and the ratio in
// words, and what zeroing the gradient in a pass of its own would add.
int adam_bench(long n, int reps);
// The same from the command line's N (a positive integer; else one line and TED_EXIT_USAGE).
int adam_bench_cmd(const char *arg);
