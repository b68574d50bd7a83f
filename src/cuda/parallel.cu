// parallel.cu — the CUDA twins of the optimizer's passes of parallel/ (adam.c, zero.c; see
// adam_cuda.h): the step over every shard in one launch with the clipping norm on the device,
// and the 16-bit gradients' sums of squares, up-casts and AdamW.
#include "common.cuh"
#include <math.h>

using namespace cu;

namespace {

// ---- the step in one pass over every shard ----------------------------------------------
// The segments are cut into small chunks taken in order by a grid of about one wave of blocks
// (block b: chunks b, b + grid, ...), so that the blocks in flight read one narrow window of each
// array. Chunks of 64 K elements with one 256 KB stream per block per array ran at about a sixth
// of the HBM's rate on an H100 (80 ms for the 1.45 B model's step, docs/gpus.md).

constexpr int kOptUnroll = 4;                            // elements in flight per thread
constexpr long kOptChunk = kThreads * kOptUnroll * 4;    // elements of one chunk (4096)

struct OptChunk { int seg; int n; long off; };   // elements [off, off + n) of segment seg

struct OptPlan {
    int nseg, nchunk, wbf16, grid;
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
        const float *__restrict__ g = seg[k.seg].g + k.off;
        double acc = 0;
        #pragma unroll 4
        for (int j = threadIdx.x; j < k.n; j += blockDim.x) { double x = g[j]; acc += x * x; }
        acc = block_sum(acc, sh);
        if (threadIdx.x == 0) part[c] = acc;
    }
}

// sq[i] = Σ of segment i's chunk partials (a warp per segment, lanes strided, a fixed order);
// sq[n] = Σ of the counted segments' (one block)
__global__ void opt_norm_final_kernel(double *sq, const double *part, const int *first, const OptSeg *seg, int n) {
    __shared__ double sh[32];
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    for (int i = w; i < n; i += nw) {   // warp-uniform
        double s = 0;
        #pragma unroll 8
        for (int c = first[i] + lane; c < first[i + 1]; c += 32) s += part[c];
        s = warp_sum(s);
        if (lane == 0) sq[i] = s;
    }
    __syncthreads();
    double acc = 0;
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        if (seg[i].counted) acc += sq[i];
    acc = block_sum(acc, sh);
    if (threadIdx.x == 0) sq[n] = acc;
}

// the stored weight: fp32, or bf16 rounded to nearest even
__device__ __forceinline__ void put_w(float *w, long j, float x) { w[j] = x; }
__device__ __forceinline__ void put_w(uint16_t *w, long j, float x) { w[j] = half_from_f32_d(1, x); }

// adam.c's adam_elem over every chunk, on g·coef with coef the clipping factor of the norm
// √*sumsq as zero.c computes it; nothing but the gradients changes when the norm is not finite.
// Each thread reads kOptUnroll elements before it writes any (the arrays never overlap).
template <class W>
__global__ void opt_adamw_kernel(float *master, float *m, float *v, const OptSeg *seg, const OptChunk *chunk,
                                 int nchunk, const double *sumsq, OptStep h) {
    double norm = sqrt(*sumsq);
    int skip = !isfinite(norm);
    float coef = h.clip > 0 && norm > h.clip ? (float)(h.clip / (norm + 1e-6)) : 1.0f;
    for (int c = blockIdx.x; c < nchunk; c += gridDim.x) {
        OptChunk k = chunk[c];
        OptSeg s = seg[k.seg];
        float decay = s.decay ? h.decay : 1.0f;
        float *__restrict__ g = s.g + k.off;
        W *__restrict__ w = (W *)s.w + k.off;
        float *__restrict__ mm = m + s.base + k.off, *__restrict__ vv = v + s.base + k.off;
        float *__restrict__ ww = master + s.base + k.off;
        for (int j0 = threadIdx.x; j0 < k.n; j0 += blockDim.x * kOptUnroll) {
            float gj[kOptUnroll], mj[kOptUnroll], vj[kOptUnroll], wj[kOptUnroll];
            #pragma unroll
            for (int u = 0; u < kOptUnroll; u++) {
                int j = j0 + u * blockDim.x;
                if (j < k.n) { gj[u] = g[j] * coef; mj[u] = mm[j]; vj[u] = vv[j]; wj[u] = ww[j]; }
            }
            #pragma unroll
            for (int u = 0; u < kOptUnroll; u++) {
                int j = j0 + u * blockDim.x;
                if (j >= k.n) break;
                if (h.zero_grads) g[j] = 0.0f;   // consumed: the next step's backward accumulates into zeros
                if (skip) continue;
                float mn = h.b1 * mj[u] + (1 - h.b1) * gj[u];
                float vn = h.b2 * vj[u] + (1 - h.b2) * gj[u] * gj[u];
                float wn = wj[u] * decay - h.step * mn / (sqrtf(vn) / h.sb2 + h.eps);
                mm[j] = mn; vv[j] = vn; ww[j] = wn;
                put_w(w, j, wn);
            }
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
    p->grid = cu_sm_count() * (2048 / kThreads);   // about one wave: the chunks in flight stay close
    if (p->grid > nchunk) p->grid = nchunk > 0 ? nchunk : 1;
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
        opt_sumsq_kernel<<<p->grid, kThreads, 0, cu_stream()>>>(
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
    int blocks = p->grid;
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
