// sparse_attention.cu — block-sparse causal attention on the GPU (see cuda_ops.h; the CPU
// version is src/sparse_attention.c, whose storage and passes this follows). The probabilities
// of a (sequence b, head h, query block i) lie as one strip [blk][n·blk] over the row's n present
// blocks, ordered by key block (the diagonal one last). One thread block per row (the forward,
// dS and dQ) or per key block (dV, dK); each thread computes whole dot products, so no two
// threads write the same float and a row's sums run in a fixed order.
#include "common.cuh"
#include <math.h>

enum { THREADS = 128, WARPS = THREADS / 32 };

struct Dims {   // one call's shapes (as the CPU's Shape)
    int T, H, hd, D, ld, blk, nbq, nb;
    long nnz;
    float scale;
};

static Dims dims_of(const SparseLayout *L, int T, int H, int hd) {
    Dims s = {T, H, hd, H * hd, 3 * H * hd, L->block, (T + L->block - 1) / L->block, L->nb, L->nnz,
              1.0f / sqrtf((float)hd)};
    return s;
}

static __device__ __forceinline__ int rows_in(const Dims &s, int i) { int r = s.T - i * s.blk; return r < s.blk ? r : s.blk; }

// the token of column c of row block i's strip (p0: the row's first entry); −1 past a partial block
static __device__ __forceinline__ int token_of(const Dims &s, const int *col, long p0, long c) {
    int tok = col[p0 + c / s.blk] * s.blk + (int)(c % s.blk);
    return tok < s.T ? tok : -1;
}

// Σ_e a[e]·b[e] over one head
static __device__ __forceinline__ float dot_hd(const float *a, const float *b, int hd) {
    float acc = 0.0f;
    for (int e = 0; e < hd; e++) acc += a[e] * b[e];
    return acc;
}

// blockIdx.x = (b·H + h)·nbq + i
static __device__ __forceinline__ void row_of(const Dims &s, int &b, int &h, int &i) {
    long x = blockIdx.x;
    i = (int)(x % s.nbq); h = (int)(x / s.nbq % s.H); b = (int)(x / ((long)s.nbq * s.H));
}

// S = Q_i·Kᵀ·scale over the strip; softmax of each row over its present keys; O_i = P·V
static __global__ void sparse_forward_kernel(float *out, float *att, const float *qkv, const long *row,
                                             const int *col, Dims s) {
    int b, h, i;
    row_of(s, b, h, i);
    long p0 = row[(long)h * (s.nb + 1) + i], w = (row[(long)h * (s.nb + 1) + i + 1] - p0) * s.blk;
    int r = rows_in(s, i);
    float *S = att + ((long)b * s.nnz + p0) * s.blk * s.blk;
    const float *q = qkv + ((long)b * s.T + (long)i * s.blk) * s.ld + h * s.hd;
    for (long e = threadIdx.x; e < r * w; e += blockDim.x) {
        int t = (int)(e / w), tok = token_of(s, col, p0, e % w);
        S[e] = tok < 0 ? 0.0f : s.scale * dot_hd(q + (long)t * s.ld, qkv + ((long)b * s.T + tok) * s.ld + s.D + h * s.hd, s.hd);
    }
    __syncthreads();
    int lane = threadIdx.x % 32;
    for (int t = threadIdx.x / 32; t < r; t += WARPS) {   // one warp per row
        float *x = S + t * w, mx = -INFINITY, sum = 0.0f;
        long valid = w - s.blk + t + 1;
        for (long u = lane; u < valid; u += 32) mx = fmaxf(mx, x[u]);
        mx = warp_max(mx);
        for (long u = lane; u < valid; u += 32) sum += expf(x[u] - mx);
        float inv = 1.0f / warp_sum(sum);
        for (long u = lane; u < w; u += 32) x[u] = u < valid ? expf(x[u] - mx) * inv : 0.0f;
    }
    __syncthreads();
    for (long e = threadIdx.x; e < (long)r * s.hd; e += blockDim.x) {
        int t = (int)(e / s.hd), k = (int)(e % s.hd);
        float acc = 0.0f;
        for (long c = 0; c < w - s.blk + t + 1; c++) {
            int tok = token_of(s, col, p0, c);
            acc += S[t * w + c] * qkv[((long)b * s.T + tok) * s.ld + 2 * s.D + h * s.hd + k];
        }
        out[((long)b * s.T + (long)i * s.blk + t) * s.D + h * s.hd + k] = acc;
    }
}

// dst rows of key block j = Σ over its present query blocks i of (the strip's block)ᵀ·src_i:
// dV (blocks P, src dO) or dK (blocks dS, src Q). blockIdx.x = (b·H + h)·nbq + j.
static __global__ void sparse_column_kernel(float *dst, const float *att, const float *src, int src_ld,
                                            const long *row, const long *cptr, const int *crow, const long *cent,
                                            Dims s) {
    int b, h, j;
    row_of(s, b, h, j);
    long e0 = cptr[(long)h * (s.nb + 1) + j], e1 = cptr[(long)h * (s.nb + 1) + j + 1];
    int c = rows_in(s, j);
    for (long x = threadIdx.x; x < (long)c * s.hd; x += blockDim.x) {
        int u = (int)(x / s.hd), k = (int)(x % s.hd);
        float acc = 0.0f;
        for (long e = e0; e < e1 && crow[e] < s.nbq; e++) {
            int i = crow[e], r = rows_in(s, i);
            long p0 = row[(long)h * (s.nb + 1) + i], w = (row[(long)h * (s.nb + 1) + i + 1] - p0) * s.blk;
            const float *blk = att + ((long)b * s.nnz + p0) * s.blk * s.blk + (cent[e] - p0) * s.blk + u;
            const float *x_i = src + ((long)b * s.T + (long)i * s.blk) * src_ld + h * s.hd + k;
            for (int t = 0; t < r; t++) acc += blk[t * w] * x_i[(long)t * src_ld];
        }
        dst[((long)b * s.T + (long)j * s.blk + u) * s.ld + h * s.hd + k] = acc;
    }
}

// dP = dO_i·Vᵀ, D = rowsum(P ⊙ dP), dS = P ⊙ (dP − D)·scale over P in place; dQ_i = dS·K
static __global__ void sparse_row_backward_kernel(float *dqkv, const float *dout, float *att, const float *qkv,
                                                  const long *row, const int *col, Dims s) {
    int b, h, i;
    row_of(s, b, h, i);
    long p0 = row[(long)h * (s.nb + 1) + i], w = (row[(long)h * (s.nb + 1) + i + 1] - p0) * s.blk;
    int r = rows_in(s, i), lane = threadIdx.x % 32;
    float *S = att + ((long)b * s.nnz + p0) * s.blk * s.blk;
    const float *dO = dout + ((long)b * s.T + (long)i * s.blk) * s.D + h * s.hd;
    for (int t = threadIdx.x / 32; t < r; t += WARPS) {   // one warp per row: its own D, then its own dS
        float *x = S + t * w, dsum = 0.0f;
        for (long u = lane; u < w; u += 32) {
            int tok = token_of(s, col, p0, u);
            if (tok >= 0) dsum += x[u] * dot_hd(dO + (long)t * s.D, qkv + ((long)b * s.T + tok) * s.ld + 2 * s.D + h * s.hd, s.hd);
        }
        dsum = warp_sum(dsum);
        for (long u = lane; u < w; u += 32) {
            int tok = token_of(s, col, p0, u);
            float dp = tok < 0 ? 0.0f : dot_hd(dO + (long)t * s.D, qkv + ((long)b * s.T + tok) * s.ld + 2 * s.D + h * s.hd, s.hd);
            x[u] = x[u] * (dp - dsum) * s.scale;
        }
    }
    __syncthreads();
    for (long e = threadIdx.x; e < (long)r * s.hd; e += blockDim.x) {
        int t = (int)(e / s.hd), k = (int)(e % s.hd);
        float acc = 0.0f;
        for (long c = 0; c < w - s.blk + t + 1; c++)
            acc += S[t * w + c] * qkv[((long)b * s.T + token_of(s, col, p0, c)) * s.ld + s.D + h * s.hd + k];
        dqkv[((long)b * s.T + (long)i * s.blk + t) * s.ld + h * s.hd + k] = acc;
    }
}

extern "C" void cu_sparse_attention_forward(float *out, float *att, const float *qkv, const SparseLayout *L, int B,
                                            int T, int H, int hd) {
    PROF(PROF_ATTENTION);
    Dims s = dims_of(L, T, H, hd);
    unsigned n = (unsigned)((long)B * H * s.nbq);
    if (n == 0) return;
    sparse_forward_kernel<<<n, THREADS, 0, cu_stream()>>>(out, att, qkv, L->row_d, L->col_d, s);
    CU_LAUNCH_CHECK();
}

extern "C" void cu_sparse_attention_backward(float *dqkv, const float *dout, float *att, const float *qkv,
                                             const SparseLayout *L, int B, int T, int H, int hd) {
    PROF(PROF_ATTENTION);
    Dims s = dims_of(L, T, H, hd);
    unsigned n = (unsigned)((long)B * H * s.nbq);
    if (n == 0) return;
    // dV from P, then P → dS and dQ, then dK from dS (the stream orders them)
    sparse_column_kernel<<<n, THREADS, 0, cu_stream()>>>(dqkv + 2 * s.D, att, dout, s.D, L->row_d, L->cptr_d,
                                                         L->crow_d, L->cent_d, s);
    CU_LAUNCH_CHECK();
    sparse_row_backward_kernel<<<n, THREADS, 0, cu_stream()>>>(dqkv, dout, att, qkv, L->row_d, L->col_d, s);
    CU_LAUNCH_CHECK();
    sparse_column_kernel<<<n, THREADS, 0, cu_stream()>>>(dqkv + s.D, att, qkv, s.ld, L->row_d, L->cptr_d, L->crow_d,
                                                         L->cent_d, s);
    CU_LAUNCH_CHECK();
}
