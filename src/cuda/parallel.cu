// parallel.cu — the CUDA twins of the optimizer's passes of parallel/ (adam.c, zero.c; see
// adam_cuda.h): the step over every shard in one launch with the clipping norm on the device,
// and the 16-bit gradients' sums of squares, up-casts and AdamW.
#include "common.cuh"
#include <math.h>

using namespace cu;

namespace {

// ---- the step in one pass over every shard ----------------------------------------------

constexpr long kOptChunk = 1 << 16;   // elements of one chunk: one block's share of a segment

struct OptChunk { int seg; int n; long off; };   // elements [off, off + n) of segment seg

struct OptPlan {
    int nseg, nchunk, wbf16;
    OptSeg *seg;          // device: the segments
    OptChunk *chunk;      // device: the chunks, each segment's in order, the segments in order
    int *first;           // device: segment i's chunks are [first[i], first[i+1])
    double *part;         // device: a partial sum of squares per chunk
};

// part[c] = Σ g² over chunk c (double; a block per chunk, a fixed order)
__global__ void opt_sumsq_kernel(double *part, const OptSeg *seg, const OptChunk *chunk, int nchunk) {
    __shared__ double sh[32];
    for (int c = blockIdx.x; c < nchunk; c += gridDim.x) {   // block-uniform
        OptChunk k = chunk[c];
        const float *g = seg[k.seg].g + k.off;
        double acc = 0;
        for (int j = threadIdx.x; j < k.n; j += blockDim.x) { double x = g[j]; acc += x * x; }
        acc = block_sum(acc, sh);
        if (threadIdx.x == 0) part[c] = acc;
    }
}

// sq[i] = Σ of segment i's chunk partials in order; sq[n] = Σ of the counted segments' (one block)
__global__ void opt_norm_final_kernel(double *sq, const double *part, const int *first, const OptSeg *seg, int n) {
    __shared__ double sh[32];
    double acc = 0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        double s = 0;
        for (int c = first[i]; c < first[i + 1]; c++) s += part[c];
        sq[i] = s;
        if (seg[i].counted) acc += s;
    }
    acc = block_sum(acc, sh);
    if (threadIdx.x == 0) sq[n] = acc;
}

// the stored weight: fp32, or bf16 rounded to nearest even
__device__ __forceinline__ void put_w(float *w, long j, float x) { w[j] = x; }
__device__ __forceinline__ void put_w(uint16_t *w, long j, float x) { w[j] = half_from_f32_d(1, x); }

// adam.c's adam_elem over every chunk, on g·coef with coef the clipping factor of the norm
// √*sumsq as zero.c computes it; nothing but the gradients changes when the norm is not finite
template <class W>
__global__ void opt_adamw_kernel(float *master, float *m, float *v, const OptSeg *seg, const OptChunk *chunk,
                                 int nchunk, const double *sumsq, OptStep h) {
    double norm = sqrt(*sumsq);
    int skip = !isfinite(norm);
    float coef = h.clip > 0 && norm > h.clip ? (float)(h.clip / (norm + 1e-6)) : 1.0f;
    for (int c = blockIdx.x; c < nchunk; c += gridDim.x) {
        OptChunk k = chunk[c];
        OptSeg s = seg[k.seg];
        float decay = s.decay ? h.decay : 1.0f, *g = s.g + k.off;
        W *w = (W *)s.w + k.off;
        long at = s.base + k.off;
        for (int j = threadIdx.x; j < k.n; j += blockDim.x) {
            float gj = g[j] * coef;
            g[j] = 0.0f;   // consumed: the next step's backward accumulates into zeros
            if (skip) continue;
            float mj = h.b1 * m[at + j] + (1 - h.b1) * gj;
            float vj = h.b2 * v[at + j] + (1 - h.b2) * gj * gj;
            float wj = master[at + j] * decay - h.step * mj / (sqrtf(vj) / h.sb2 + h.eps);
            m[at + j] = mj; v[at + j] = vj; master[at + j] = wj;
            put_w(w, j, wj);
        }
    }
}

// ---- 16-bit gradients ---------------------------------------------------------------------

__global__ void upcast_scale_kernel(float *dst, const uint16_t *src, long n, int half, float s) {
    GRID_STRIDE(i, n) dst[i] = half_to_f32_d(half, src[i]) * s;
}

// AdamW, zero.c's adam() term for term
__global__ void adamw_kernel(float *w, float *m, float *v, const float *g, long n, float lr, float decay, float b1,
                             float b2, float eps, float bc1, float bc2) {
    GRID_STRIDE(j, n) {
        float mj = b1 * m[j] + (1 - b1) * g[j];
        float vj = b2 * v[j] + (1 - b2) * g[j] * g[j];
        float denom = sqrtf(vj) / sqrtf(bc2) + eps;
        m[j] = mj; v[j] = vj;
        w[j] = w[j] * decay - (lr / bc1) * mj / denom;
    }
}

// zero.c: double g = half_to_f32(x) * unscale (a float product); g·g in double
struct SumSqHalfF {
    const uint16_t *x;
    int half;
    float s;
    __device__ double operator()(long i) const { double g = half_to_f32_d(half, x[i]) * s; return g * g; }
};

constexpr int kOptBlocks = 4096;   // blocks of the chunk loops (each walks chunks c, c + grid, ...)

}   // namespace

// ---------------------------------------------------------------------------------------

extern "C" void *cu_opt_plan(const OptSeg *seg, int n, int wbf16) {
    int nchunk = 0;
    for (int i = 0; i < n; i++) nchunk += (int)((seg[i].len + kOptChunk - 1) / kOptChunk);
    OptChunk *ch = (OptChunk *)malloc(sizeof(OptChunk) * (nchunk ? nchunk : 1));
    int *first = (int *)malloc(sizeof(int) * (n + 1));
    if (!ch || !first) { fprintf(stderr, "ted: out of host memory (optimizer plan)\n"); exit(1); }
    int c = 0;
    for (int i = 0; i < n; i++) {
        first[i] = c;
        for (long off = 0; off < seg[i].len; off += kOptChunk)
            ch[c++] = OptChunk{i, (int)(seg[i].len - off < kOptChunk ? seg[i].len - off : kOptChunk), off};
    }
    first[n] = c;
    OptPlan *p = (OptPlan *)malloc(sizeof(OptPlan));
    if (!p) { fprintf(stderr, "ted: out of host memory (optimizer plan)\n"); exit(1); }
    p->nseg = n; p->nchunk = nchunk; p->wbf16 = wbf16;
    p->seg = (OptSeg *)ted_alloc_dev(sizeof(OptSeg) * (n ? n : 1), MEM_TEMP);
    p->chunk = (OptChunk *)ted_alloc_dev(sizeof(OptChunk) * (nchunk ? nchunk : 1), MEM_TEMP);
    p->first = (int *)ted_alloc_dev(sizeof(int) * (n + 1), MEM_TEMP);
    p->part = (double *)ted_alloc_dev(sizeof(double) * (nchunk ? nchunk : 1), MEM_TEMP);
    cu_memcpy(p->seg, seg, sizeof(OptSeg) * n);
    cu_memcpy(p->chunk, ch, sizeof(OptChunk) * nchunk);
    cu_memcpy(p->first, first, sizeof(int) * (n + 1));
    free(ch); free(first);
    return p;
}

extern "C" void cu_opt_free(void *plan) {
    OptPlan *p = (OptPlan *)plan;
    if (!p) return;
    ted_free_buf(p->seg); ted_free_buf(p->chunk); ted_free_buf(p->first); ted_free_buf(p->part);
    free(p);
}

extern "C" void cu_opt_norm(void *plan, double *sq) {
    PROF(PROF_OPTIMIZER);
    OptPlan *p = (OptPlan *)plan;
    if (p->nchunk) {
        opt_sumsq_kernel<<<p->nchunk < kOptBlocks ? p->nchunk : kOptBlocks, kThreads, 0, cu_stream()>>>(
            p->part, p->seg, p->chunk, p->nchunk);
        CU_LAUNCH_CHECK();
    }
    opt_norm_final_kernel<<<1, kThreads, 0, cu_stream()>>>(sq, p->part, p->first, p->seg, p->nseg);
    CU_LAUNCH_CHECK();
}

extern "C" void cu_opt_adamw(void *plan, float *master, float *m, float *v, const double *sumsq, const OptStep *h) {
    PROF(PROF_OPTIMIZER);
    OptPlan *p = (OptPlan *)plan;
    if (!p->nchunk) return;
    int blocks = p->nchunk < kOptBlocks ? p->nchunk : kOptBlocks;
    if (p->wbf16)
        opt_adamw_kernel<uint16_t><<<blocks, kThreads, 0, cu_stream()>>>(master, m, v, p->seg, p->chunk, p->nchunk,
                                                                         sumsq, *h);
    else
        opt_adamw_kernel<float><<<blocks, kThreads, 0, cu_stream()>>>(master, m, v, p->seg, p->chunk, p->nchunk, sumsq,
                                                                      *h);
    CU_LAUNCH_CHECK();
}

extern "C" void cu_sumsq_half(double *out, const uint16_t *x, long n, int half, float s) {
    PROF(PROF_OPTIMIZER);
    reduce_sum(out, n, SumSqHalfF{x, half, s});
}

extern "C" void cu_upcast_scale(float *dst, const uint16_t *src, long n, int half, float s) {
    PROF(PROF_OPTIMIZER);
    if (n <= 0) return;
    upcast_scale_kernel<<<grid_for(n, kThreads), kThreads, 0, cu_stream()>>>(dst, src, n, half, s);
    CU_LAUNCH_CHECK();
}

extern "C" void cu_adamw(float *w, float *m, float *v, const float *g, long n, float lr, float decay, float b1,
                         float b2, float eps, float bc1, float bc2) {
    PROF(PROF_OPTIMIZER);
    if (n <= 0) return;
    adamw_kernel<<<grid_for(n, kThreads), kThreads, 0, cu_stream()>>>(w, m, v, g, n, lr, decay, b1, b2, eps, bc1,
                                                                         bc2);
    CU_LAUNCH_CHECK();
}
