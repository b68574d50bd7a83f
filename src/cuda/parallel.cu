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
    int *first_host;      // the same on the host
    double *part;         // device: a partial sum of squares per chunk
    // the optimizer beside the forward (cu_opt_adamw_part): its stream, the event made after the
    // main stream's norm, and event k after part k; parts: those recorded this step, waited: those
    // the main stream has waited for
    cudaStream_t side;
    cudaEvent_t fork, *ev;
    int nev, parts, waited;
};

// whether a chunk's arrays can be read and written as float4 (and its bf16 weights as 4 at once)
__device__ __forceinline__ bool vec4(const void *a, const void *b, const void *c, const void *d, const void *w,
                                    size_t wsize, int n) {
    uintptr_t x = (uintptr_t)a | (uintptr_t)b | (uintptr_t)c | (uintptr_t)d;
    return n % 4 == 0 && x % 16 == 0 && (uintptr_t)w % (4 * wsize) == 0;
}

// part[c] = Σ g² over chunk c (double; a block per chunk, a fixed order). A thread loads its
// kOptUnroll float4 before it adds any: with scalar loads, one at a time, the pass ran at about
// half the HBM's rate (2.65 ms for 5.8 GB on an H200).
__global__ void opt_sumsq_kernel(double *part, const OptSeg *seg, const OptChunk *chunk, int nchunk) {
    __shared__ double sh[32];
    for (int c = blockIdx.x; c < nchunk; c += gridDim.x) {   // block-uniform
        OptChunk k = chunk[c];
        const float *__restrict__ g = seg[k.seg].g + k.off;
        double acc = 0;
        if (vec4(g, g, g, g, g, 4, k.n)) {
            const float4 *g4 = (const float4 *)g;
            int n4 = k.n / 4;
            for (int j0 = threadIdx.x; j0 < n4; j0 += blockDim.x * kOptUnroll) {
                float4 x[kOptUnroll];
                #pragma unroll
                for (int u = 0; u < kOptUnroll; u++) {
                    int j = j0 + u * blockDim.x;
                    x[u] = j < n4 ? g4[j] : make_float4(0, 0, 0, 0);
                }
                #pragma unroll
                for (int u = 0; u < kOptUnroll; u++)
                    acc += (double)x[u].x * x[u].x + (double)x[u].y * x[u].y + (double)x[u].z * x[u].z +
                           (double)x[u].w * x[u].w;
            }
        } else {
            #pragma unroll 4
            for (int j = threadIdx.x; j < k.n; j += blockDim.x) { double x = g[j]; acc += x * x; }
        }
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

// adam.c's adam_elem on one element: g already times the clipping factor
struct AdamElem {
    float b1, b2, step, sb2, eps, decay;
    __device__ __forceinline__ void operator()(float g, float &m, float &v, float &w) const {
        m = b1 * m + (1 - b1) * g;
        v = b2 * v + (1 - b2) * g * g;
        w = w * decay - step * m / (sqrtf(v) / sb2 + eps);
    }
};

// the chunk's elements [4j, 4j + 4) at once: float4 reads and writes, the weights 4 at a time
__device__ __forceinline__ void put_w4(float *w, int j, float4 x) { ((float4 *)w)[j] = x; }
__device__ __forceinline__ void put_w4(uint16_t *w, int j, float4 x) {
    uint2 p;
    p.x = (uint32_t)half_from_f32_d(1, x.x) | (uint32_t)half_from_f32_d(1, x.y) << 16;
    p.y = (uint32_t)half_from_f32_d(1, x.z) | (uint32_t)half_from_f32_d(1, x.w) << 16;
    ((uint2 *)w)[j] = p;
}

template <class W>
__device__ __forceinline__ void adamw_chunk4(float *g, float *mm, float *vv, float *ww, W *w, int n, float coef,
                                             const AdamElem &a, int zero, int skip) {
    float4 *g4 = (float4 *)g, *m4 = (float4 *)mm, *v4 = (float4 *)vv, *w4 = (float4 *)ww;
    int n4 = n / 4;
    for (int j0 = threadIdx.x; j0 < n4; j0 += blockDim.x * 2) {
        float4 gj[2], mj[2], vj[2], wj[2];
        #pragma unroll
        for (int u = 0; u < 2; u++) {
            int j = j0 + u * blockDim.x;
            if (j < n4) { gj[u] = g4[j]; mj[u] = m4[j]; vj[u] = v4[j]; wj[u] = w4[j]; }
        }
        #pragma unroll
        for (int u = 0; u < 2; u++) {
            int j = j0 + u * blockDim.x;
            if (j >= n4) break;
            if (zero) g4[j] = make_float4(0, 0, 0, 0);
            if (skip) continue;
            a(gj[u].x * coef, mj[u].x, vj[u].x, wj[u].x);
            a(gj[u].y * coef, mj[u].y, vj[u].y, wj[u].y);
            a(gj[u].z * coef, mj[u].z, vj[u].z, wj[u].z);
            a(gj[u].w * coef, mj[u].w, vj[u].w, wj[u].w);
            m4[j] = mj[u]; v4[j] = vj[u]; w4[j] = wj[u];
            put_w4(w, j, wj[u]);
        }
    }
}

// adam.c's adam_elem over every chunk, on g·coef with coef the clipping factor of the norm
// √*sumsq as zero.c computes it; nothing but the gradients changes when the norm is not finite.
// Each thread reads all it holds before it writes any (the arrays never overlap); float4 where
// the chunk's arrays are aligned for it (scalar loads ran at about 3/4 of an H200's HBM rate).
template <class W>
__global__ void opt_adamw_kernel(float *master, float *m, float *v, const OptSeg *seg, const OptChunk *chunk,
                                 int nchunk, const double *sumsq, OptStep h) {
    double norm = sqrt(*sumsq);
    int skip = !isfinite(norm);
    float coef = h.clip > 0 && norm > h.clip ? (float)(h.clip / (norm + 1e-6)) : 1.0f;
    for (int c = blockIdx.x; c < nchunk; c += gridDim.x) {
        OptChunk k = chunk[c];
        OptSeg s = seg[k.seg];
        const AdamElem a{h.b1, h.b2, h.step, h.sb2, h.eps, s.decay ? h.decay : 1.0f};
        float *__restrict__ g = s.g + k.off;
        W *__restrict__ w = (W *)s.w + k.off;
        float *__restrict__ mm = m + s.base + k.off, *__restrict__ vv = v + s.base + k.off;
        float *__restrict__ ww = master + s.base + k.off;
        if (vec4(g, mm, vv, ww, w, sizeof(W), k.n)) {   // block-uniform
            adamw_chunk4(g, mm, vv, ww, w, k.n, coef, a, h.zero_grads, skip);
            continue;
        }
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
                a(gj[u], mj[u], vj[u], wj[u]);
                mm[j] = mj[u]; vv[j] = vj[u]; ww[j] = wj[u];
                put_w(w, j, wj[u]);
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
    p->first_host = first;
    p->side = NULL; p->fork = NULL; p->ev = NULL; p->nev = p->parts = p->waited = 0;
    p->grid = cu_sm_count() * (2048 / kThreads);   // about one wave: the chunks in flight stay close
    if (p->grid > nchunk) p->grid = nchunk > 0 ? nchunk : 1;
    p->seg = (OptSeg *)ted_alloc_dev(sizeof(OptSeg) * (n ? n : 1), MEM_TEMP);
    p->chunk = (OptChunk *)ted_alloc_dev(sizeof(OptChunk) * (nchunk ? nchunk : 1), MEM_TEMP);
    p->first = (int *)ted_alloc_dev(sizeof(int) * (n + 1), MEM_TEMP);
    p->part = (double *)ted_alloc_dev(sizeof(double) * (nchunk ? nchunk : 1), MEM_TEMP);
    cu_memcpy(p->seg, seg, sizeof(OptSeg) * n);
    cu_memcpy(p->chunk, ch, sizeof(OptChunk) * nchunk);
    cu_memcpy(p->first, first, sizeof(int) * (n + 1));
    free(ch);
    return p;
}

extern "C" void cu_opt_free(void *plan) {
    OptPlan *p = (OptPlan *)plan;
    if (!p) return;
    if (p->side) {   // its parts done before their arrays go
        CU_CHECK(cudaStreamSynchronize(p->side));
        for (int k = 0; k < p->nev; k++) CU_CHECK(cudaEventDestroy(p->ev[k]));
        CU_CHECK(cudaEventDestroy(p->fork));
        CU_CHECK(cudaStreamDestroy(p->side));
        free(p->ev);
    }
    ted_free_buf(p->seg); ted_free_buf(p->chunk); ted_free_buf(p->first); ted_free_buf(p->part);
    free(p->first_host);
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

// AdamW over chunks [c0, c1) in stream s: about one wave of blocks, fewer for a short range
static void adamw_launch(OptPlan *p, int c0, int c1, float *master, float *m, float *v, const double *sumsq,
                         const OptStep *h, cudaStream_t s) {
    int n = c1 - c0, blocks = p->grid < n ? p->grid : n;
    if (n <= 0) return;
    if (p->wbf16)
        opt_adamw_kernel<uint16_t><<<blocks, kThreads, 0, s>>>(master, m, v, p->seg, p->chunk + c0, n, sumsq, *h);
    else
        opt_adamw_kernel<float><<<blocks, kThreads, 0, s>>>(master, m, v, p->seg, p->chunk + c0, n, sumsq, *h);
    CU_LAUNCH_CHECK();
}

extern "C" void cu_opt_adamw(void *plan, float *master, float *m, float *v, const double *sumsq, const OptStep *h) {
    PROF(PROF_OPTIMIZER);
    OptPlan *p = (OptPlan *)plan;
    adamw_launch(p, 0, p->nchunk, master, m, v, sumsq, h, cu_stream());
}

extern "C" void cu_opt_adamw_part(void *plan, int s0, int s1, int k, float *master, float *m, float *v,
                                  const double *sumsq, const OptStep *h) {
    PROF(PROF_OPTIMIZER);
    OptPlan *p = (OptPlan *)plan;
    if (!p->side) {
        CU_CHECK(cudaStreamCreateWithFlags(&p->side, cudaStreamNonBlocking));
        CU_CHECK(cudaEventCreateWithFlags(&p->fork, cudaEventDisableTiming));
    }
    if (k >= p->nev) {   // events grow with the parts
        cudaEvent_t *ev = (cudaEvent_t *)realloc(p->ev, sizeof(cudaEvent_t) * (k + 1));
        if (!ev) { fprintf(stderr, "ted: out of host memory (optimizer events)\n"); exit(1); }
        p->ev = ev;
        for (; p->nev <= k; p->nev++) CU_CHECK(cudaEventCreateWithFlags(&p->ev[p->nev], cudaEventDisableTiming));
    }
    if (k == 0) {   // the parts start after everything the main stream has issued (the norm)
        CU_CHECK(cudaEventRecord(p->fork, cu_stream()));
        CU_CHECK(cudaStreamWaitEvent(p->side, p->fork, 0));
        p->parts = p->waited = 0;
    }
    adamw_launch(p, p->first_host[s0], p->first_host[s1], master, m, v, sumsq, h, p->side);
    CU_CHECK(cudaEventRecord(p->ev[k], p->side));
    p->parts = k + 1;
}

extern "C" void cu_opt_wait(void *plan, int k) {
    OptPlan *p = (OptPlan *)plan;
    if (!p || !p->parts) return;
    if (k < 0 || k >= p->parts) k = p->parts - 1;
    if (k < p->waited) return;   // the events complete in order: an earlier wait covers it
    CU_CHECK(cudaStreamWaitEvent(cu_stream(), p->ev[k], 0));
    p->waited = k + 1;
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
