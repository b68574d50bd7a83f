// nn.cu — the CUDA twins of nn/ops.c and nn/linear.c (see cuda_ops.h): embedding,
// normalisation, the dense layers' GEMM wrappers, GELU, the loss, element-wise operations and
// the 16-bit conversions; the fused passes around the MLP's GEMMs (bias + GELU with the next
// GEMM's bf16 operand, the GELU gradient with its bias gradient), also for the experts (moe.cu),
// and the residual add with the LayerNorm after it. Each cu_X reproduces the CPU function X on device buffers, on
// cu_stream(); the shared device helpers are in common.cuh.
#include "common.cuh"
#include <type_traits>
#include "nn/fresh.h"
#include <math.h>
#include <vector>

using namespace cu;

namespace {

// ---- encoder --------------------------------------------------------------------------

// out[N,d] = wte[tok - v0] (0 outside the shard [0, Vl)) + wpe[i % T] (0 if wpe is NULL)
template <class W>
__global__ void encoder_forward_kernel(float *out, const int *tok, const W *wte, int v0, int Vl, const W *wpe, int T,
                                       int d, long n) {
    GRID_STRIDE(idx, n) {
        long i = idx / d;
        int c = (int)(idx % d);
        int v = tok[i] - v0;
        float e = v >= 0 && v < Vl ? ldw(wte, (long)v * d + c) : 0.0f;
        float p = ldw_or0(wpe, (i % T) * d + c);
        out[idx] = e + p;
    }
}

// dwpe[T,d] += Σ_b dout[b,t,:]; one thread per element, b in order (the CPU's order)
__global__ void encoder_backward_pos_kernel(float *dwpe, const float *dout, int B, int T, int d) {
    GRID_STRIDE(idx, (long)T * d) {
        long t = idx / d, c = idx % d;
        float acc = dwpe[idx];
        for (int b = 0; b < B; b++) acc += dout[((long)b * T + t) * d + c];
        dwpe[idx] = acc;
    }
}

// dwte[Vl,d] += Σ dout[i,:] over the tokens i with tok[i] − v0 == v (this shard's rows), added
// in token order as the CPU does, so the result is deterministic (bit for bit the CPU's). One
// warp per token; the warp of a row's first occurrence adds all its occurrences, the others
// do nothing. Cost O(N²/32) token reads in all (cached; N is one rank's B·T).
__global__ void encoder_backward_tok_kernel(float *dwte, const float *dout, const int *tok, int v0, int Vl, int d,
                                            long N) {
    int lane = threadIdx.x & 31;
    WARP_ROWS(i, N) {
        int t = tok[i], v = t - v0;
        if (v < 0 || v >= Vl) continue;                      // warp-uniform
        int first = 1;                                       // warp-uniform (a vote)
        for (long j0 = 0; j0 < i && first; j0 += 32) {
            long j = j0 + lane;
            first = !__any_sync(0xffffffffu, j < i && tok[j] == t);
        }
        if (!first) continue;
        float *w = dwte + (long)v * d;
        for (long j0 = i; j0 < N; j0 += 32) {
            long j = j0 + lane;
            unsigned m = __ballot_sync(0xffffffffu, j < N && tok[j] == t);
            while (m) {                                      // the matches of this chunk, in order
                int k = __ffs(m) - 1;
                m &= m - 1;
                const float *g = dout + (j0 + k) * d;
                for (int c = lane; c < d; c += 32) w[c] += g[c];   // lane c owns w[c]: ordered
            }
        }
    }
}

// ---- layernorm (one warp per row) -------------------------------------------------------
// A lane takes a row's elements V at a time: V = 4 (float4 reads and writes, the weights 4 at a
// time) where d is a multiple of 4 and every row is 16-byte aligned (ln_vec), else V = 1. With
// V = 1 a warp's loads were 128 bytes each and the passes ran at a third to half of the HBM's
// rate (1.7 ms a step for LayerNorm's backward at the 4 K-token MoE bench shape on an H200).

// whether rows of d floats at these pointers (NULL: none) can go 4 at a time; weights W
template <class W> static int ln_vec(int d, const void *a, const void *b, const void *c, const void *e, const W *w,
                                     const W *bias) {
    return rows_vec4(d, a, b, c, e) && ((uintptr_t)w | (uintptr_t)bias) % (4 * sizeof(W)) == 0;
}

// o[d] = (x − mean)·rstd·w + b for the row x[d] of this warp (o fp32, or bf16 rounded to nearest
// even); returns mean and rstd to every lane
template <int V, class W, class O>
__device__ void layernorm_row(O *o, float *mean, float *rstd, const float *x, const W *w, const W *b, int d) {
    int lane = threadIdx.x & 31;
    float m = 0, v = 0, t[V], ww[V], bb[V];
    for (int c = V * lane; c < d; c += 32 * V) {
        ldv<V>(t, x, c);
        for (int e = 0; e < V; e++) m += t[e];
    }
    m = warp_sum(m) / d;
    for (int c = V * lane; c < d; c += 32 * V) {
        ldv<V>(t, x, c);
        for (int e = 0; e < V; e++) { float z = t[e] - m; v += z * z; }
    }
    v = warp_sum(v);
    float s = 1.0f / sqrtf(v / d + 1e-5f);
    for (int c = V * lane; c < d; c += 32 * V) {
        ldv<V>(t, x, c);
        ldwv<V>(ww, w, c);
        ldwv<V>(bb, b, c);
        for (int e = 0; e < V; e++) t[e] = (t[e] - m) * s * ww[e] + bb[e];
        stv<V>(o, c, t);
    }
    *mean = m; *rstd = s;
}

// out[N,d] = (inp - mean)·rstd·w + b; mean[N], rstd[N] (out fp32 or bf16)
template <int V, class W, class O>
__global__ void layernorm_forward_kernel(O *out, float *mean, float *rstd, const float *inp, const W *w,
                                         const W *b, long N, int d) {
    WARP_ROWS(i, N) {
        float m, s;
        layernorm_row<V>(out + i * d, &m, &s, inp + i * d, w, b, d);
        if ((threadIdx.x & 31) == 0) { mean[i] = m; rstd[i] = s; }
    }
}

// res[N,d] = a + b (the residual stream), then out = layernorm(res) as above (out fp32 or bf16): one
// pass that reads a and b and writes res and out (a lane reads back only the elements it wrote)
template <int V, class W, class O>
__global__ void residual_layernorm_forward_kernel(float *res, O *out, float *mean, float *rstd, const float *a,
                                                  const float *b, const W *w, const W *bias, long N, int d) {
    int lane = threadIdx.x & 31;
    WARP_ROWS(i, N) {
        float *r = res + i * d, m, s, x[V], y[V];
        for (int c = V * lane; c < d; c += 32 * V) {
            ldv<V>(x, a + i * d, c);
            ldv<V>(y, b + i * d, c);
            for (int e = 0; e < V; e++) x[e] += y[e];
            stv<V>(r, c, x);
        }
        layernorm_row<V>(out + i * d, &m, &s, r, w, bias, d);
        if (lane == 0) { mean[i] = m; rstd[i] = s; }
    }
}

// dinp[N,d] += ... (one warp per row; G: dout's type, float or bf16)
template <int V, class W, class G>
__global__ void layernorm_backward_inp_kernel(float *dinp, const G *dout, const float *inp, const W *w,
                                              const float *mean, const float *rstd, long N, int d) {
    int lane = threadIdx.x & 31;
    WARP_ROWS(i, N) {
        const G *g = dout + i * d;
        const float *x = inp + i * d;
        float m = mean[i], s = rstd[i], a = 0, bsum = 0, gv[V], xv[V], wv[V], dv[V];
        for (int c = V * lane; c < d; c += 32 * V) {
            ldwv<V>(gv, g, c);
            ldv<V>(xv, x, c);
            ldwv<V>(wv, w, c);
            for (int e = 0; e < V; e++) {
                float gw = gv[e] * wv[e];
                a += gw; bsum += gw * (xv[e] - m) * s;
            }
        }
        a = warp_sum(a) / d;
        bsum = warp_sum(bsum) / d;
        float *dx = dinp + i * d;
        for (int c = V * lane; c < d; c += 32 * V) {
            ldwv<V>(gv, g, c);
            ldv<V>(xv, x, c);
            ldwv<V>(wv, w, c);
            ldv<V>(dv, dx, c);
            for (int e = 0; e < V; e++) {
                float xh = (xv[e] - m) * s;
                dv[e] += (gv[e] * wv[e] - a - xh * bsum) * s;
            }
            stv<V>(dx, c, dv);
        }
    }
}

// LayerNorm's backward in one pass over the rows: a block of kLnThreads per chunk of `per` rows, a
// thread 4 columns in every 4·kLnThreads (K of them), the row's dout and inp held in registers
// across the two block-wide sums it needs (the next row's loads issued before them); dinp += its
// term, and the block's dw, db over its rows into part[k][block][c] (colsum_finish adds them in
// block order). It replaces a warp-per-row pass that read each row twice and a column-sum pass that
// read dout and inp once more.
constexpr int kLnThreads = 256, kLnWarps = kLnThreads / 32;
template <int K, class W, class G>
__global__ void __launch_bounds__(kLnThreads)
layernorm_backward_rows_kernel(float *dinp, float *part, const G *dout, const float *inp, const W *w,
                               const float *mean, const float *rstd, long N, int d, long per) {
    __shared__ float red[2][2][kLnWarps];   // [row parity][Σ g·w, Σ g·w·x̂][warp]
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    float wv[K][4], pw[K][4] = {}, pb[K][4] = {}, g[K][4], x[K][4];
    auto cols = [&](int k) { return 4 * ((int)threadIdx.x + k * kLnThreads); };
    auto load = [&](long i) {
        #pragma unroll
        for (int k = 0; k < K; k++)
            if (cols(k) < d) { ldwv<4>(g[k], dout + i * d, cols(k)); ldv<4>(x[k], inp + i * d, cols(k)); }
    };
    #pragma unroll
    for (int k = 0; k < K; k++)
        if (cols(k) < d) ldwv<4>(wv[k], w, cols(k));
    const long i0 = blockIdx.x * per, i1 = i0 + per < N ? i0 + per : N;
    if (i0 < i1) load(i0);
    for (long i = i0; i < i1; i++) {
        const int par = (int)(i & 1);
        const float m = mean[i], s = rstd[i];
        float a = 0.0f, b = 0.0f, gr[K][4], xh[K][4];
        #pragma unroll
        for (int k = 0; k < K; k++)
            #pragma unroll
            for (int e = 0; e < 4; e++) {
                gr[k][e] = cols(k) < d ? g[k][e] : 0.0f;
                xh[k][e] = cols(k) < d ? (x[k][e] - m) * s : 0.0f;
                float gw = gr[k][e] * (cols(k) < d ? wv[k][e] : 0.0f);
                a += gw;
                b += gw * xh[k][e];
            }
        if (i + 1 < i1) load(i + 1);
        a = warp_sum(a);
        b = warp_sum(b);
        if (lane == 0) { red[par][0][warp] = a; red[par][1][warp] = b; }
        __syncthreads();   // (red[par] is written again two rows on, after the next row's barrier)
        float A = 0.0f, B = 0.0f;
        #pragma unroll
        for (int j = 0; j < kLnWarps; j++) { A += red[par][0][j]; B += red[par][1][j]; }
        A /= d;
        B /= d;
        #pragma unroll
        for (int k = 0; k < K; k++) {
            if (cols(k) >= d) continue;
            float dv[4];
            ldv<4>(dv, dinp + i * d, cols(k));
            #pragma unroll
            for (int e = 0; e < 4; e++) {
                dv[e] += (gr[k][e] * wv[k][e] - A - xh[k][e] * B) * s;
                pw[k][e] += gr[k][e] * xh[k][e];
                pb[k][e] += gr[k][e];
            }
            stv<4>(dinp + i * d, cols(k), dv);
        }
    }
    #pragma unroll
    for (int k = 0; k < K; k++)
        if (cols(k) < d) {
            stv<4>(part + (long)blockIdx.x * d, cols(k), pw[k]);
            stv<4>(part + ((long)gridDim.x + blockIdx.x) * d, cols(k), pb[k]);
        }
}

// Column sums in a fixed order, in two passes so that every SM has work: block (x, y) owns the
// columns [32x, 32x + 32) of the rows [y·kColChunk, (y + 1)·kColChunk); its thread (tx, ty) sums
// the rows ty, ty + kColRows, … of column 32x + tx in order, the kColRows partials are added in ty
// order into part[k][y][c] (output k of NOUT); then colsum_finish adds part[k][0..R) in y order
// to out_k[c]. One block a column slab (R = 1) was too few blocks for the H100: 64 for d 2048.
constexpr int kColRows = 16, kColChunk = 256, kColMaxChunks = 64;

static int col_chunks(long N) {
    long r = (N + kColChunk - 1) / kColChunk;
    return (int)(r < 1 ? 1 : r < kColMaxChunks ? r : kColMaxChunks);
}

// F: f.terms<V>(i, c, v) sets v[k][e], output k's term of row i, column c + e, for V columns from
// c (V = 4 where f.vec4(): C a multiple of 4 and its rows aligned for float4); a thread takes V
// columns, each summed in the same order as with V = 1, so V never changes a bit
// (bounds: the rows [bounds[2y], bounds[2y + 1]) of block row y in place of an even split of N)
template <int NOUT, int V, class F>
__global__ void colsum_part_kernel(float *part, long N, int C, const long *bounds, F f) {
    __shared__ float sh[NOUT][kColRows][32 * V];
    int tx = threadIdx.x, ty = threadIdx.y, R = gridDim.y, c = (blockIdx.x * 32 + tx) * V;
    long per = (N + R - 1) / R, i0 = blockIdx.y * per, i1 = i0 + per < N ? i0 + per : N;
    if (bounds) { i0 = bounds[2 * blockIdx.y]; i1 = bounds[2 * blockIdx.y + 1]; }
    float acc[NOUT][V] = {}, v[NOUT][V];
    if (c < C)
        for (long i = i0 + ty; i < i1; i += kColRows) {
            f.template terms<V>(i, c, v);
            #pragma unroll
            for (int k = 0; k < NOUT; k++)
                #pragma unroll
                for (int e = 0; e < V; e++) acc[k][e] += v[k][e];
        }
    for (int k = 0; k < NOUT; k++)
        for (int e = 0; e < V; e++) sh[k][ty][tx * V + e] = acc[k][e];
    __syncthreads();
    if (ty == 0 && c < C)
        for (int k = 0; k < NOUT; k++)
            for (int e = 0; e < V; e++) {
                float t = 0;
                for (int j = 0; j < kColRows; j++) t += sh[k][j][tx * V + e];
                part[((long)k * R + blockIdx.y) * C + c + e] = t;
            }
}

// out_k[c] += Σ_y part[k][y][c], y in order
// (over: written, not added to; the sums start at +0, so a zeroed out would give the same bits)
__global__ void colsum_finish_kernel(float *out0, float *out1, const float *part, int R, int C, int over) {
    GRID_STRIDE(c, C) {
        float t0 = 0, t1 = 0;
        for (int y = 0; y < R; y++) t0 += part[(long)y * C + c];
        out0[c] = over ? t0 : out0[c] + t0;
        if (out1) {
            for (int y = 0; y < R; y++) t1 += part[((long)R + y) * C + c];
            out1[c] = over ? t1 : out1[c] + t1;
        }
    }
}

// out[e, c] += Σ_y part[y][c] over expert e's block rows y in [first[e], first[e + 1]), in order
// (over: written, not added to; an expert without rows gets +0)
__global__ void expert_colsum_finish_kernel(float *out, const float *part, const long *first, int El, int C,
                                            int over) {
    GRID_STRIDE(k, (long)El * C) {
        long e = k / C, c = k % C;
        float t = 0;
        for (long y = first[e]; y < first[e + 1]; y++) t += part[y * C + c];
        out[k] = over ? t : out[k] + t;
    }
}

// whether rows of C floats (16-bit: C of 2 bytes) at p can be read 4 columns at a time
static inline bool rows4(int C, const void *p, size_t elem = 4) {
    return C % 4 == 0 && (uintptr_t)p % (4 * elem) == 0;
}

template <class G> struct LnParTerms {   // dw: dout·(inp − mean)·rstd, db: dout (G: float or bf16)
    const G *dout;
    const float *inp, *mean, *rstd;
    int d;
    template <int V> __device__ void terms(long i, int c, float (&v)[2][V]) const {
        float g[V], x[V];
        ldwv<V>(g, dout + i * d, c);
        ldv<V>(x, inp + i * d, c);
        #pragma unroll
        for (int e = 0; e < V; e++) {
            v[0][e] = g[e] * (x[e] - mean[i]) * rstd[i];
            v[1][e] = g[e];
        }
    }
    bool vec4() const { return rows4(d, dout, sizeof(G)) && rows4(d, inp); }
};
struct ColTerm {      // x[i, c]
    const float *x;
    int C;
    template <int V> __device__ void terms(long i, int c, float (&v)[1][V]) const { ldv<V>(v[0], x + i * C, c); }
    bool vec4() const { return rows4(C, x); }
};
struct ColTerm16 {    // x[i, c], x in bf16
    const uint16_t *x;
    int C;
    template <int V> __device__ void terms(long i, int c, float (&v)[1][V]) const { ldwv<V>(v[0], x + i * C, c); }
    bool vec4() const { return rows4(C, x, 2); }
};

// out0[c] (and out1[c]) += Σ_rows of f's terms, a fixed order for given N and C
// (gradients both wholly fresh, nn/fresh.h, are written instead: no zeroing pass before)
template <int NOUT, class F> static void colsum_add(float *out0, float *out1, long N, int C, F f) {
    static void *buf;
    static size_t cap;
    int over = fresh_whole(out0, C) && (NOUT < 2 || fresh_whole(out1, C));
    for (float *o : {out0, NOUT > 1 ? out1 : NULL})
        if (o && over) fresh_beta(o, C);   // taken: written below
        else if (o) fresh_prepare(o, C);
    int R = col_chunks(N);
    float *part = (float *)grow_dev(&buf, &cap, sizeof(float) * NOUT * R * (size_t)C);
    if (f.vec4())
        colsum_part_kernel<NOUT, 4><<<dim3(blocks_for(C, 128), R), dim3(32, kColRows), 0, cu_stream()>>>(
            part, N, C, (const long *)NULL, f);
    else
        colsum_part_kernel<NOUT, 1><<<dim3(blocks_for(C, 32), R), dim3(32, kColRows), 0, cu_stream()>>>(
            part, N, C, (const long *)NULL, f);
    CU_LAUNCH_CHECK();
    colsum_finish_kernel<<<grid_for(C, kThreads), kThreads, 0, cu_stream()>>>(out0, NOUT > 1 ? out1 : NULL, part, R, C,
                                                                            over);
    CU_LAUNCH_CHECK();
}

// The block rows of the experts' column sums: each expert's rows (host offsets off[0..El]) cut in
// chunks of kColChunk rows or more (about kColMaxChunks in all, besides one per expert), none
// across two experts. t = [first: El + 1 | bounds: 2 per chunk]; returns the chunk count.
static long expert_chunks(std::vector<long> &t, const long *off, int El) {
    long R = off[El] - off[0], big = (R + kColMaxChunks - 1) / kColMaxChunks, step = big > kColChunk ? big : kColChunk;
    t.assign(El + 1, 0);
    for (int e = 0; e < El; e++) {
        t[e] = (long)(t.size() - El - 1) / 2;
        for (long r = off[e]; r < off[e + 1]; r += step) {
            t.push_back(r);
            t.push_back(r + step < off[e + 1] ? r + step : off[e + 1]);
        }
    }
    t[El] = (long)(t.size() - El - 1) / 2;
    return t[El];
}

// out[e, c] += Σ over expert e's rows i, in chunks, of f(i, c): the experts' bias gradients, a fixed
// order for given offsets (as colsum_add, in chunks within one expert)
template <class F> static void expert_colsum_add(float *out, const long *off, int El, int C, F f) {
    static void *buf, *tab;
    static size_t cap, tcap;
    static std::vector<long> t;
    long n = expert_chunks(t, off, El);
    if (n == 0 || C <= 0) return;
    int over = fresh_whole(out, (long)El * C);   // wholly fresh (nn/fresh.h): written, no zeroing pass
    if (over) fresh_beta(out, (long)El * C);
    else fresh_prepare(out, (long)El * C);
    long *dt = (long *)grow_dev(&tab, &tcap, sizeof(long) * t.size());
    cu_memcpy(dt, t.data(), sizeof(long) * t.size());   // pageable: staged before it returns
    float *part = (float *)grow_dev(&buf, &cap, sizeof(float) * n * (size_t)C);
    if (f.vec4())
        colsum_part_kernel<1, 4><<<dim3(blocks_for(C, 128), (unsigned)n), dim3(32, kColRows), 0, cu_stream()>>>(
            part, 0, C, dt + El + 1, f);
    else
        colsum_part_kernel<1, 1><<<dim3(blocks_for(C, 32), (unsigned)n), dim3(32, kColRows), 0, cu_stream()>>>(
            part, 0, C, dt + El + 1, f);
    CU_LAUNCH_CHECK();
    expert_colsum_finish_kernel<<<grid_for((long)El * C, kThreads), kThreads, 0, cu_stream()>>>(out, part, dt, El, C,
                                                                                                over);
    CU_LAUNCH_CHECK();
}

// ---- matmul helpers -----------------------------------------------------------------

// out[N,OC] = bias (accumulate 0) or += bias (accumulate 1), broadcast over the rows
template <class W> __global__ void bias_kernel(float *out, const W *bias, long n, int OC, int accumulate) {
    GRID_STRIDE(idx, n) {
        float bv = ldw(bias, idx % OC);
        out[idx] = accumulate ? out[idx] + bv : bv;
    }
}

// ---- GELU (tanh approximation: the function of ops.c, which evaluates it as x·σ(2u)) -----

#define GELU_K 0.7978845608028654f   // sqrt(2/pi)

__device__ __forceinline__ float gelu_d(float x) {
    return 0.5f * x * (1.0f + tanhf(GELU_K * (x + 0.044715f * x * x * x)));
}

// g·GELU'(x)
__device__ __forceinline__ float gelu_grad_d(float x, float g) {
    float u = GELU_K * (x + 0.044715f * x * x * x);
    float th = tanhf(u), sech2 = 1.0f - th * th;
    float dudx = GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
    return g * (0.5f * (1.0f + th) + 0.5f * x * sech2 * dudx);
}

__global__ void gelu_forward_kernel(float *out, const float *inp, long n) {
    GRID_STRIDE(i, n) out[i] = gelu_d(inp[i]);
}

// dinp = dout ⊙ GELU'(inp) (dinp may be dout), and its bf16 copy dinp16 unless NULL; inp fp32,
// or bf16 (I = uint16_t: GELU's input kept in bf16 only)
template <class I>
__global__ void gelu_backward_kernel(float *dinp, uint16_t *dinp16, const I *inp, const float *dout, long n) {
    GRID_STRIDE(i, n) {
        float g = gelu_grad_d(ldw(inp, i), dout[i]);
        if (dinp) dinp[i] = g;
        if (dinp16) dinp16[i] = half_from_f32_d(1, g);
    }
}

// The MLP's first half after its GEMM (beta 0), for rows r in [r0, r1) of h[·, f]: h += the bias
// row (bias [f]; with off, bias [El, f] and row r's expert's row), hg = GELU(h) (unless NULL), and
// hg16 = the bf16 copy of hg that the next GEMM reads (unless NULL); with h16, h + bias is written
// there in bf16 instead of over h. Replaces a bias pass before
// the GEMM, the GEMM's read of it, a GELU pass and a cast pass. The bias row of row r:
template <class W> __device__ __forceinline__ const W *bias_row(const W *bias, const long *off, int El, long r, int f) {
    return bias + (off ? (long)expert_of(off, El, r) : 0) * f;
}

// A block per row (its bias row found once), V columns at a time: V = 4 where f is a multiple
// of 4, h and hg are 16-byte aligned, hg16 8-byte and the bias 4 elements (bias_gelu_launch).
// One thread per element (or float4) with a 64-bit division and an expert search for its row ran
// the experts' pass at about half the HBM's rate.
template <int V, class W>
__global__ void bias_gelu_forward_kernel(float *h, uint16_t *h16, float *hg, uint16_t *hg16, const W *bias,
                                         const long *off, int El, long r0, long r1, int f) {
    for (long r = r0 + blockIdx.x; r < r1; r += gridDim.x) {
        const W *b = bias ? bias_row(bias, off, El, r, f) : NULL;
        float *hr = h + r * f;
        ROW_COLS(c, f, V) {
            float x[V], y[V];
            ldv<V>(x, hr, c);
            if (b) {
                float bb[V];
                ldwv<V>(bb, b, c);
                #pragma unroll
                for (int e = 0; e < V; e++) x[e] += bb[e];
                if (!h16) stv<V>(hr, c, x);
            }
            if (h16) stv<V>(h16 + r * f, c, x);
            #pragma unroll
            for (int e = 0; e < V; e++) y[e] = gelu_d(x[e]);
            if (hg) stv<V>(hg + r * f, c, y);
            if (hg16) stv<V>(hg16 + r * f, c, y);
        }
    }
}

// colsum_add's term for the MLP's backward: dh = dhg ⊙ GELU'(h) written (dh may be dhg), with its
// bf16 copy dh16 unless NULL; the term summed into the bias gradient is dh itself
struct GeluBiasTerm {
    float *dh;
    uint16_t *dh16;
    const float *dhg, *h;
    int C;
    template <int V> __device__ void terms(long i, int c, float (&v)[1][V]) const {
        float x[V], g[V];
        ldv<V>(x, h + i * C, c);
        ldv<V>(g, dhg + i * C, c);
        #pragma unroll
        for (int e = 0; e < V; e++) v[0][e] = gelu_grad_d(x[e], g[e]);
        if (dh) stv<V>(dh + i * C, c, v[0]);
        if (dh16) stv<V>(dh16 + i * C, c, v[0]);
    }
    bool vec4() const { return rows4(C, h) && rows4(C, dhg) && rows4(C, dh) && rows4(C, dh16, 2); }
};

// ---- cross-entropy over a vocabulary shard (one block per row) ---------------------------
// logits[N,Vl]; nr = the real (unpadded) columns of this shard, 0 ≤ nr ≤ Vl

// mx[N] = max of the real columns (-inf if none); tl[N] = logit of the target if in [0, Vl)
__global__ void crossentropy_max_kernel(float *mx, float *tl, const float *logits, const int *targets, long N,
                                        int v0, int Vl, int nr) {
    __shared__ float sh[32];
    BLOCK_ROWS(i, N) {
        const float *r = logits + i * Vl;
        float m = -INFINITY;
        for (int c = threadIdx.x; c < nr; c += blockDim.x) m = r[c] > m ? r[c] : m;
        m = block_max(m, sh);
        if (threadIdx.x == 0) {
            mx[i] = m;
            int t = targets[i] - v0;
            tl[i] = t >= 0 && t < Vl ? r[t] : 0.0f;
        }
    }
}

// logits → exp(logit − mx) on the real columns, 0 on the padding; sum[N] (in double, as float)
__global__ void crossentropy_exp_kernel(float *sum, float *logits, const float *mx, long N, int Vl, int nr) {
    __shared__ double sh[32];
    BLOCK_ROWS(i, N) {
        float *r = logits + i * Vl, m = mx[i];
        double s = 0;
        for (int c = threadIdx.x; c < nr; c += blockDim.x) {
            float e = expf(r[c] - m);
            r[c] = e;
            s += e;
        }
        for (int c = nr + threadIdx.x; c < Vl; c += blockDim.x) r[c] = 0;
        s = block_sum(s, sh);
        if (threadIdx.x == 0) sum[i] = (float)s;
    }
}

// probs[N,Vl] *= 1/sum; losses[N] = log(sum) + mx − tl (in double)
__global__ void crossentropy_finish_kernel(float *losses, float *probs, const float *mx, const float *sum,
                                           const float *tl, long N, int Vl) {
    BLOCK_ROWS(i, N) {
        float *r = probs + i * Vl, inv = 1.0f / sum[i];
        for (int c = threadIdx.x; c < Vl; c += blockDim.x) r[c] *= inv;
        if (threadIdx.x == 0) losses[i] = (float)(log((double)sum[i]) + (double)mx[i] - (double)tl[i]);
    }
}

// probs[N,Vl] = (probs − onehot(target − v0))·scale, in place
__global__ void crossentropy_backward_kernel(float *probs, const int *targets, long N, int v0, int Vl,
                                             float scale) {
    GRID_STRIDE(idx, N * Vl) {
        long i = idx / Vl;
        int c = (int)(idx % Vl);
        float p = probs[idx] * scale;
        if (c == targets[i] - v0) p -= scale;
        probs[idx] = p;
    }
}

// ---- element-wise -----------------------------------------------------------------------

__global__ void residual_kernel(float *out, const float *a, const float *b, long n) {
    GRID_STRIDE(i, n) out[i] = a[i] + b[i];
}

__global__ void half_to_f32_kernel(float *dst, const uint16_t *src, long n, int half) {
    GRID_STRIDE(i, n) dst[i] = half_to_f32_d(half, src[i]);
}

__global__ void f32_to_half_kernel(uint16_t *dst, const float *src, long n, int half) {
    GRID_STRIDE(i, n) dst[i] = half_from_f32_d(half, src[i]);
}

// the same, four elements a thread: one 16-byte read, one 8-byte write (n4 = n / 4, both aligned)
__global__ void f32_to_half4_kernel(uint2 *dst, const float4 *src, long n4, int half) {
    GRID_STRIDE(i, n4) {
        float4 f = src[i];
        unsigned lo = half_from_f32_d(half, f.x) | (unsigned)half_from_f32_d(half, f.y) << 16;
        unsigned hi = half_from_f32_d(half, f.z) | (unsigned)half_from_f32_d(half, f.w) << 16;
        dst[i] = make_uint2(lo, hi);
    }
}

// dst = half(f32(dst) + src), the accumulation of model.c
__global__ void half_accumulate_kernel(uint16_t *dst, const float *src, long n, int half) {
    GRID_STRIDE(i, n) dst[i] = half_from_f32_d(half, half_to_f32_d(half, dst[i]) + src[i]);
}

// A weight pointer as the kernels read it: fp32, or on a --bf16 run the bf16 it points at
// (reg_op_weights hands bf16 weights through the ops' float pointers).
const uint16_t *bf16_of(const float *w) { return (const uint16_t *)(const void *)w; }

struct SumF { const float *x; __device__ double operator()(long i) const { return (double)x[i]; } };

}   // namespace

// ---- the dense layers' GEMMs and the fused element-wise work around them -----------------

// out[N,OC] (+)= a[N,C]·w[C,OC], a an operand of the run's type (the input or its bf16 copy): as
// ops.c, the bias first (set, or added to out), then the GEMM adds to it
static void matmul_forward_op(float *out, const void *a, const float *w, const float *bias, long N, int C, int OC,
                              int accumulate) {
    if (N <= 0 || OC <= 0) return;
    if (bias) {
        long n = N * OC;
        int g = grid_for(n, kThreads);
        if (cu_bf16()) bias_kernel<<<g, kThreads, 0, cu_stream()>>>(out, bf16_of(bias), n, OC, accumulate);
        else bias_kernel<<<g, kThreads, 0, cu_stream()>>>(out, bias, n, OC, accumulate);
        CU_LAUNCH_CHECK();
    }
    cu_gemm_op(0, 0, (int)N, OC, C, 1.0f, a, C, w, OC, (bias || accumulate) ? 1.0f : 0.0f, out, OC);
}

// dinp[N,C] (+)= g·wᵀ and dw[C,OC] += inpᵀ·g (either may be NULL), g[N,OC] the output gradient as
// an operand of the run's type
// (inp16: inp as an operand already, a bf16 copy the caller keeps; NULL: made here from inp)
static void matmul_backward_op(float *dinp, float *dw, const void *g, const float *inp, const void *inp16,
                               const float *w, long N, int C, int OC, int accumulate) {
    if (dinp) cu_gemm_op(0, 1, (int)N, C, OC, 1.0f, g, OC, w, OC, accumulate ? 1.0f : 0.0f, dinp, C);
    // the wgrad GEMM accumulates into the fp32 gradient, or overwrites a fresh one (nn/fresh.h)
    if (dw) {
        float beta = fresh_beta(dw, (long)C * OC);
        cu_gemm_op(1, 0, C, OC, (int)N, 1.0f, inp16 ? inp16 : cu_operand(inp, N * C, 1), C, g, OC, beta, dw, OC);
    }
}

// dinp[N,C] = g·wᵀ written in bf16 alone, into the first half of its room (a --bf16 run's dln on the
// GPT path: qkv_backward, mlp_backward; layernorm_backward reads it with dout16)
static void dinp16_op(float *dinp, const void *g, const float *w, long N, int C, int OC) {
    if (dinp) cu_gemm_op_c16(0, 1, (int)N, C, OC, 1.0f, g, OC, w, OC, 0.0f, cu_hg_half(dinp), C);
}

// matmul_backward_op with the bias gradient: dbias += Σ rows dout (unless NULL); dout fp32
static void matmul_backward_bias(float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                                 const float *w, long N, int C, int OC, int accumulate) {
    if (N <= 0) return;
    matmul_backward_op(dinp, dw, cu_operand(dout, N * OC, 0), inp, NULL, w, N, C, OC, accumulate);
    if (dbias && OC > 0) colsum_add<1>(dbias, NULL, N, OC, ColTerm{dout, OC});
}

// bias_gelu_forward over rows [r0, r1), four columns at a time where the layout allows
template <class W>
static void bias_gelu_launch(float *h, uint16_t *h16, float *hg, uint16_t *hg16, const W *bias, const long *off,
                             int El, long r0, long r1, int f) {
    int vec = f % 4 == 0 && (uintptr_t)h % 16 == 0 && (uintptr_t)hg % 16 == 0 && (uintptr_t)hg16 % 8 == 0 &&
              (uintptr_t)h16 % 8 == 0 && (uintptr_t)bias % (4 * sizeof(W)) == 0;
    unsigned g = row_grid(r1 - r0);
    if (vec)
        bias_gelu_forward_kernel<4><<<g, kThreads, 0, cu_stream()>>>(h, h16, hg, hg16, bias, off, El, r0, r1, f);
    else bias_gelu_forward_kernel<1><<<g, kThreads, 0, cu_stream()>>>(h, h16, hg, hg16, bias, off, El, r0, r1, f);
    CU_LAUNCH_CHECK();
}

void cu_bias_gelu_forward(float *h, float *hg, uint16_t *hg16, const float *bias, const long *off, int El, long r0,
                          long r1, int f) {
    if (r1 <= r0 || f <= 0) return;
    if (cu_bf16()) bias_gelu_launch(h, (uint16_t *)NULL, hg, hg16, bf16_of(bias), off, El, r0, r1, f);
    else bias_gelu_launch(h, (uint16_t *)NULL, hg, hg16, bias, off, El, r0, r1, f);
}

// dh[n] = dhg ⊙ GELU'(h) (dh may be dhg) and dh16 = dh in bf16 (either may be NULL); h fp32 or bf16
template <class I> static void gelu_backward_copy(float *dh, uint16_t *dh16, const I *h, const float *dhg, long n) {
    if (n <= 0) return;
    gelu_backward_kernel<<<grid_for(n, kThreads), kThreads, 0, cu_stream()>>>(dh, dh16, h, dhg, n);
    CU_LAUNCH_CHECK();
}

// ---- GEMMs with GELU's epilogue (a --bf16 run: GELU's input and output in bf16 only) -------------
// cuBLASLt's GELU_AUX_BIAS and DGELU epilogues (gemm_lt.cu) where the library has an algorithm
// for them and TED_LT_GELU is not 0; else the GEMM into an fp32 scratch and this file's passes.
static int lt_gelu_on(void) {
    const char *e = getenv("TED_LT_GELU");   // read each time: the op tests run both ways
    return !(e && !strcmp(e, "0")) && cu_gemm_lt_on();
}

// C [M, f] = A [M, K] times B ([K, f], or the backward's [f, K] transposed) through cuBLASLt's GELU
// epilogue (cu_lt_gemm_gelu: the forward's or, backward, its gradient's) where it is on and has an
// algorithm: true when it ran (the profile counts the GEMM then, not a refused attempt)
static bool lt_gelu(int backward, long M, int f, int K, const void *A, const void *B, const uint16_t *bias,
                    uint16_t *C, uint16_t *aux) {
    if (!lt_gelu_on()) return false;
    PROF(PROF_GEMM);
    if (cu_lt_gemm_gelu(backward, 0, backward, (int)M, f, K, A, K, B, backward ? K : f, bias, C, aux, f)) return false;
    cu_prof_gemm(0, backward, M, f, K, 1, 0.0f);
    cu_prof_launch(1);
    return true;
}

// an fp32 scratch of n floats (one buffer, grown when needed; stream-ordered reuse)
static float *gelu_scratch(long n) {
    static void *buf;
    static size_t cap;
    return (float *)grow_dev(&buf, &cap, sizeof(float) * (size_t)(n > 0 ? n : 1));
}

// h16, hg16 [M, f] (bf16, rows f apart) = GELU's input x16·w + bias and its output: x16 [M, K] and
// w [K, f] bf16 operands, bias [f] (the run's bf16 weight) or NULL
extern "C" void cu_gemm_gelu16(const void *x16, const void *w, const float *bias, uint16_t *h16, uint16_t *hg16,
                               long M, int K, int f) {
    if (M <= 0 || f <= 0) return;
    const uint16_t *b16 = bias ? bf16_of(bias) : NULL;
    if (lt_gelu(0, M, f, K, x16, w, b16, hg16, h16)) return;
    float *h = gelu_scratch(M * f);
    cu_gemm_op(0, 0, (int)M, f, K, 1.0f, x16, K, w, f, 0.0f, h, f);
    bias_gelu_launch(h, h16, (float *)NULL, hg16, b16, NULL, 0, 0, M, f);
}

// dh16 [M, f] = (g16·wᵀ) ⊙ GELU'(h16): g16 [M, N] and w [f, N] bf16 operands, h16 as
// cu_gemm_gelu16 left it
extern "C" void cu_gemm_dgelu16(const void *g16, const void *w, const uint16_t *h16, uint16_t *dh16, long M, int N,
                                int f) {
    if (M <= 0 || f <= 0) return;
    if (lt_gelu(1, M, f, N, g16, w, NULL, dh16, (uint16_t *)h16)) return;
    float *dh = gelu_scratch(M * f);
    cu_gemm_op(0, 1, (int)M, f, N, 1.0f, g16, N, w, N, 0.0f, dh, f);
    gelu_backward_copy((float *)NULL, dh16, h16, dh, M * f);
}

void cu_experts_bias_grad(float *gb, const float *g, const long *off, int El, int n) {
    expert_colsum_add(gb, off, El, n, ColTerm{g, n});
}

void cu_experts_bias_grad16(float *gb, const uint16_t *g16, const long *off, int El, int n) {
    expert_colsum_add(gb, off, El, n, ColTerm16{g16, n});
}

void cu_experts_gelu_backward(float *gb, float *dh, uint16_t *dh16, const float *dhg, const float *h, const long *off,
                              int El, int f) {
    if (gb) {
        expert_colsum_add(gb, off, El, f, GeluBiasTerm{dh, dh16, dhg, h, f});
        return;
    }
    long r0 = off[0] * f;
    gelu_backward_copy(dh ? dh + r0 : NULL, dh16 ? dh16 + r0 : NULL, h + r0, dhg + r0, (off[El] - off[0]) * f);
}

// h[N,F] = inp·w + bias, hg = GELU(h): one GEMM (beta 0), one pass
static void mlp_first_half(float *h, float *hg, const float *inp, const float *w, const float *bias, long N, int C,
                           int F) {
    if (F <= 0) return;
    cu_gemm_op(0, 0, (int)N, F, C, 1.0f, cu_operand(inp, N * C, 0), C, w, F, 0.0f, h, F);
    cu_bias_gelu_forward(h, hg, NULL, bias, NULL, 0, 0, N, F);
}

// dh[N,F] = dhg ⊙ GELU'(h) and its bf16 copy dh16 (either may be NULL), dbias += Σ rows dh: one pass
static void gelu_bias_backward(float *dh, uint16_t *dh16, float *dbias, const float *dhg, const float *h, long N,
                               int F) {
    if (F <= 0) return;
    if (!dbias) { gelu_backward_copy(dh, dh16, h, dhg, N * F); return; }
    colsum_add<1>(dbias, NULL, N, F, GeluBiasTerm{dh, dh16, dhg, h, F});
}

// ---------------------------------------------------------------------------------------

extern "C" void cu_encoder_forward(float *out, const int *tok, const float *wte, int v0, int Vl, const float *wpe,
                                   int B, int T, int d) {
    PROF(PROF_ELEMENTWISE);
    long n = (long)B * T * d;
    if (n <= 0) return;
    if (cu_bf16())
        encoder_forward_kernel<<<grid_for(n, kThreads), kThreads, 0, cu_stream()>>>(out, tok, bf16_of(wte), v0, Vl,
                                                                                     bf16_of(wpe), T, d, n);
    else
        encoder_forward_kernel<<<grid_for(n, kThreads), kThreads, 0, cu_stream()>>>(out, tok, wte, v0, Vl, wpe, T, d,
                                                                                     n);
    CU_LAUNCH_CHECK();
}

extern "C" void cu_encoder_backward(float *dwte, float *dwpe, const float *dout, const int *tok, int v0, int Vl,
                                    int B, int T, int d) {
    PROF(PROF_ELEMENTWISE);
    long n = (long)B * T * d;
    if (n <= 0) return;
    fresh_prepare(dwpe, (long)T * d);
    fresh_prepare(dwte, (long)Vl * d);
    if (dwpe) {
        encoder_backward_pos_kernel<<<grid_for((long)T * d, kThreads), kThreads, 0, cu_stream()>>>(dwpe, dout, B,
                                                                                                    T, d);
        CU_LAUNCH_CHECK();
    }
    long N = (long)B * T;
    encoder_backward_tok_kernel<<<grid_for(N, kWarps), kThreads, 0, cu_stream()>>>(dwte, dout, tok, v0, Vl, d, N);
    CU_LAUNCH_CHECK();
}

// the layernorm launches for a V and W
template <int V, class W, class O> static void ln_forward(O *out, float *mean, float *rstd, const float *inp,
                                                          const W *w, const W *b, long N, int d) {
    layernorm_forward_kernel<V><<<grid_for(N, kWarps), kThreads, 0, cu_stream()>>>(out, mean, rstd, inp, w, b, N, d);
}
template <int V, class W, class O> static void ln_residual_forward(float *res, O *out, float *mean, float *rstd,
                                                          const float *a, const float *b, const W *w, const W *bias,
                                                          long N, int d) {
    residual_layernorm_forward_kernel<V><<<grid_for(N, kWarps), kThreads, 0, cu_stream()>>>(res, out, mean, rstd, a,
                                                                                             b, w, bias, N, d);
}
template <int V, class W, class G> static void ln_backward_inp(float *dinp, const G *dout, const float *inp, const W *w,
                                                               const float *mean, const float *rstd, long N, int d) {
    layernorm_backward_inp_kernel<V><<<grid_for(N, kWarps), kThreads, 0, cu_stream()>>>(dinp, dout, inp, w, mean,
                                                                                         rstd, N, d);
}

// V and W picked for the rows at p0..p3 (NULL: none) and the weights: f(V as a type, w, b as the
// kernels read them)
template <class F> static void ln_launch(int d, const void *p0, const void *p1, const void *p2, const void *p3,
                                         const float *w, const float *b, F f) {
    if (cu_bf16()) {
        const uint16_t *w16 = bf16_of(w), *b16 = bf16_of(b);
        if (ln_vec(d, p0, p1, p2, p3, w16, b16)) f(std::integral_constant<int, 4>(), w16, b16);
        else f(std::integral_constant<int, 1>(), w16, b16);
    } else if (ln_vec(d, p0, p1, p2, p3, w, b)) f(std::integral_constant<int, 4>(), w, b);
    else f(std::integral_constant<int, 1>(), w, b);
    CU_LAUNCH_CHECK();
}

// ops.c's layernorm_forward: with gemm_input on a --bf16 run the output is written in bf16 only,
// into the first half of out's room (cu_hg_half), where the GEMMs read it (ln_f: the LM head's)
extern "C" void cu_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w,
                                     const float *b, long N, int d, int gemm_input) {
    PROF(PROF_ELEMENTWISE);
    if (N <= 0 || d <= 0) return;
    uint16_t *out16 = gemm_input && cu_bf16() ? cu_hg_half(out) : NULL;
    ln_launch(d, out, inp, NULL, NULL, w, b, [&](auto v, auto *ww, auto *bb) {
        if (out16) ln_forward<decltype(v)::value>(out16, mean, rstd, inp, ww, bb, N, d);
        else ln_forward<decltype(v)::value>(out, mean, rstd, inp, ww, bb, N, d);
    });
}

// ops.c's residual_layernorm_forward: with gemm_input on a --bf16 run the LayerNorm's output is
// written in bf16 only, into the first half of out's room (cu_hg_half), where cu_mlp_forward's GEMM
// and cu_mlp_backward's weight gradient read it (no cast in either pass), or an MoE layer's router
// (cu_matmul_forward_x16, _backward_x16) and dispatch
extern "C" void cu_residual_layernorm_forward(float *res, float *out, float *mean, float *rstd, const float *a,
                                              const float *b, const float *w, const float *bias, long N, int d,
                                              int gemm_input) {
    PROF(PROF_ELEMENTWISE);
    if (N <= 0 || d <= 0) return;
    uint16_t *out16 = gemm_input && cu_bf16() ? cu_hg_half(out) : NULL;
    ln_launch(d, res, out, a, b, w, bias, [&](auto v, auto *ww, auto *bb) {
        if (out16) ln_residual_forward<decltype(v)::value>(res, out16, mean, rstd, a, b, ww, bb, N, d);
        else ln_residual_forward<decltype(v)::value>(res, out, mean, rstd, a, b, ww, bb, N, d);
    });
}

template <int K, class W, class G>
static void ln_rows_launch(long R, float *dinp, float *part, const G *dout, const float *inp, const W *w,
                           const float *mean, const float *rstd, long N, int d, long per) {
    layernorm_backward_rows_kernel<K><<<(unsigned)R, kLnThreads, 0, cu_stream()>>>(dinp, part, dout, inp, w, mean,
                                                                                   rstd, N, d, per);
}

// layernorm_backward_rows_kernel where d allows (a multiple of 4, at most 16·kLnThreads, the rows
// float4-aligned): false where it does not
template <class W, class G>
static bool ln_backward_rows(float *dinp, float *dw, float *db, const G *dout, const float *inp, const W *w,
                             const float *mean, const float *rstd, long N, int d) {
    static void *buf;
    static size_t cap;
    int K = (d / 4 + kLnThreads - 1) / kLnThreads;
    if (d % 4 || K > 4 || !dw || !db || !rows4(d, dout, sizeof(G)) || !rows4(d, inp) || !rows4(d, dinp) ||
        (uintptr_t)w % (4 * sizeof(W)))
        return false;
    long R = (N + 7) / 8, most = 2L * cu_sm_count();   // blocks: 8 rows each or more, one wave of 2 an SM
    R = R < most ? R : most;
    long per = (N + R - 1) / R;
    R = (N + per - 1) / per;
    int over = fresh_whole(dw, d) && fresh_whole(db, d);
    for (float *o : {dw, db})
        if (over) fresh_beta(o, d);   // taken: written below
        else fresh_prepare(o, d);
    float *part = (float *)grow_dev(&buf, &cap, sizeof(float) * 2 * R * (size_t)d);
    if (K == 1) ln_rows_launch<1>(R, dinp, part, dout, inp, w, mean, rstd, N, d, per);
    else if (K == 2) ln_rows_launch<2>(R, dinp, part, dout, inp, w, mean, rstd, N, d, per);
    else if (K == 3) ln_rows_launch<3>(R, dinp, part, dout, inp, w, mean, rstd, N, d, per);
    else ln_rows_launch<4>(R, dinp, part, dout, inp, w, mean, rstd, N, d, per);
    CU_LAUNCH_CHECK();
    colsum_finish_kernel<<<grid_for(d, kThreads), kThreads, 0, cu_stream()>>>(dw, db, part, (int)R, d, over);
    CU_LAUNCH_CHECK();
    return true;
}

// ops.c's layernorm_backward for dout of type G (float, or bf16 where dout16 says so)
template <class G>
static void ln_backward_as(float *dinp, float *dw, float *db, const G *dout, const float *inp, const float *w,
                           const float *mean, const float *rstd, long N, int d) {
    if (cu_bf16() ? ln_backward_rows(dinp, dw, db, dout, inp, bf16_of(w), mean, rstd, N, d)
                  : ln_backward_rows(dinp, dw, db, dout, inp, w, mean, rstd, N, d))
        return;
    ln_launch(d, dinp, dout, inp, NULL, w, w, [&](auto v, auto *ww, auto *) {
        ln_backward_inp<decltype(v)::value>(dinp, dout, inp, ww, mean, rstd, N, d);
    });
    colsum_add<2>(dw, db, N, d, LnParTerms<G>{dout, inp, mean, rstd, d});
}

// dout16 on a --bf16 run: dout holds its bf16 copy alone, in the first half of its room (the GPT
// path's dln, as qkv_backward, mlp_backward and head_loss_backward write it)
extern "C" void cu_layernorm_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                                      const float *w, const float *mean, const float *rstd, long N, int d,
                                      int dout16) {
    PROF(PROF_ELEMENTWISE);
    if (N <= 0 || d <= 0) return;
    if (dout16 && cu_bf16()) ln_backward_as(dinp, dw, db, (const uint16_t *)cu_hg_half(dout), inp, w, mean, rstd, N, d);
    else ln_backward_as(dinp, dw, db, dout, inp, w, mean, rstd, N, d);
}

extern "C" void cu_matmul_forward(float *out, const float *inp, const float *w, const float *bias, long N, int C,
                                  int OC, int accumulate) {
    PROF(PROF_ELEMENTWISE);
    if (N <= 0 || OC <= 0) return;
    // the weights are operands already; the activation is copied to bf16 on a bf16 run
    matmul_forward_op(out, cu_operand(inp, N * C, 0), w, bias, N, C, OC, accumulate);
}

// ops.c's matmul_forward_x16 and _backward_x16: inp is an operand of the run's type as it is (on a
// --bf16 run its bf16 copy alone, cu_hg_half)
extern "C" void cu_matmul_forward_x16(float *out, const float *inp, const float *w, long N, int C, int OC) {
    PROF(PROF_ELEMENTWISE);
    matmul_forward_op(out, inp, w, NULL, N, C, OC, 0);
}

extern "C" void cu_matmul_backward_x16(float *dinp, float *dw, const float *dout, const float *inp, const float *w,
                                       long N, int C, int OC, int accumulate) {
    PROF(PROF_ELEMENTWISE);
    if (N <= 0) return;
    matmul_backward_op(dinp, dw, cu_operand(dout, N * OC, 0), inp, inp, w, N, C, OC, accumulate);
}

extern "C" void cu_matmul_backward(float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                                   const float *w, long N, int C, int OC, int accumulate) {
    PROF(PROF_ELEMENTWISE);
    matmul_backward_bias(dinp, dw, dbias, dout, inp, w, N, C, OC, accumulate);
}

extern "C" void cu_gelu_forward(float *out, const float *inp, long n) {
    PROF(PROF_ELEMENTWISE);
    if (n <= 0) return;
    gelu_forward_kernel<<<grid_for(n, kThreads), kThreads, 0, cu_stream()>>>(out, inp, n);
    CU_LAUNCH_CHECK();
}

extern "C" void cu_gelu_backward(float *dinp, const float *inp, const float *dout, long n) {
    PROF(PROF_ELEMENTWISE);
    if (n <= 0) return;
    gelu_backward_copy(dinp, NULL, inp, dout, n);
}

// nn.Linear's layout (linear.c): out[N,OC] (stride ldo) (+)= inp[N,C] (stride ldi)·w[OC,C]ᵀ
extern "C" void cu_linear_forward(float *out, long ldo, const float *inp, long ldi, const float *w, long N, int C,
                                  int OC, int accumulate) {
    PROF(PROF_ELEMENTWISE);
    if (N <= 0 || OC <= 0) return;
    const void *a = cu_operand(inp, (N - 1) * ldi + C, 0);
    cu_gemm_op(0, 1, (int)N, OC, C, 1.0f, a, (int)ldi, w, C, accumulate ? 1.0f : 0.0f, out, (int)ldo);
}

// dinp[N,C] (stride ldd) (+)= dout·w; dw[OC,C] += doutᵀ·inp (either may be NULL)
extern "C" void cu_linear_backward(float *dinp, long ldd, float *dw, const float *dout, long ldo, const float *inp,
                                   long ldi, const float *w, long N, int C, int OC, int accumulate) {
    PROF(PROF_ELEMENTWISE);
    if (N <= 0) return;
    const void *g = cu_operand(dout, (N - 1) * ldo + OC, 0);
    if (dinp) cu_gemm_op(0, 0, (int)N, C, OC, 1.0f, g, (int)ldo, w, C, accumulate ? 1.0f : 0.0f, dinp, (int)ldd);
    if (dw) {
        float beta = fresh_beta(dw, (long)OC * C);
        cu_gemm_op(1, 0, OC, C, (int)N, 1.0f, g, (int)ldo, cu_operand(inp, (N - 1) * ldi + C, 1), (int)ldi, beta, dw, C);
    }
}

// linear.c's head_loss_forward: on a --bf16 run the GEMM writes the logits in bf16 only, into the
// first half of their room (cu_hg_half), and the classifier's bf16 form turns them into the loss
// gradient in place: no fp32 logits written or read, and no cast of the gradient in the backward
// (0.3 ms a step at the 4 K-token bench shape on an H200). inp16: inp is bf16 already (ln_f's)
extern "C" void cu_head_loss_forward(float *losses, float *logits, const float *inp, int inp16, const float *w,
                                     const int *targets, long N, int C, int V, int Vl, float scale) {
    if (!cu_bf16()) {
        cu_linear_forward(logits, Vl, inp, C, w, N, C, Vl, 0);
        cu_fused_classifier(losses, logits, targets, N, V, Vl, scale);
        return;
    }
    PROF(PROF_ELEMENTWISE);
    if (N <= 0 || Vl <= 0) return;
    uint16_t *l16 = cu_hg_half(logits);
    const void *x = inp16 ? (const void *)inp : cu_operand(inp, N * C, 0);
    cu_gemm_op_c16(0, 1, (int)N, Vl, C, 1.0f, x, C, w, C, 0.0f, l16, Vl);
    cu_fused_classifier_bf16(losses, l16, targets, N, V, Vl, scale);
}

// linear.c's head_loss_backward: the gradient in bf16 where the forward left it is the GEMMs' operand
extern "C" void cu_head_loss_backward(float *dinp, float *dw, const float *dlogits, const float *inp, int inp16,
                                      const float *w, long N, int C, int Vl) {
    if (!cu_bf16()) { cu_linear_backward(dinp, C, dw, dlogits, Vl, inp, C, w, N, C, Vl, 0); return; }
    PROF(PROF_ELEMENTWISE);
    if (N <= 0) return;
    const uint16_t *g16 = cu_hg_half(dlogits);
    if (dinp && inp16) cu_gemm_op_c16(0, 0, (int)N, C, Vl, 1.0f, g16, Vl, w, C, 0.0f, cu_hg_half(dinp), C);
    else if (dinp) cu_gemm_op(0, 0, (int)N, C, Vl, 1.0f, g16, Vl, w, C, 0.0f, dinp, C);
    if (dw) {
        float beta = fresh_beta(dw, (long)Vl * C);
        cu_gemm_op(1, 0, Vl, C, (int)N, 1.0f, g16, Vl, inp16 ? (const void *)inp : cu_operand(inp, N * C, 1), C, beta,
                   dw, C);
    }
}

// The fused MLP pair of ops.c: the GEMM, then bias and GELU in one pass; the backward's GELU
// gradient, its bf16 copy for the GEMMs (a --bf16 run) and the bias gradient in one pass
extern "C" void cu_matmul_bias_gelu_forward(float *h, float *hg, const float *inp, const float *w, const float *bias,
                                            long N, int C, int OC) {
    PROF(PROF_ELEMENTWISE);
    if (N <= 0) return;
    mlp_first_half(h, hg, inp, w, bias, N, C, OC);
}

// (wide: dh is written in fp32 on a bf16 run too; else only the bf16 copy the GEMMs read)
static void bias_gelu_backward_op(float *dinp, float *dw, float *dbias, float *dh, const float *dhg, const float *h,
                                  const float *inp, const float *w, long N, int C, int OC, int wide) {
    uint16_t *dh16 = cu_bf16() ? cu_half_slot(N * OC, 0) : NULL;
    gelu_bias_backward(dh16 && !wide ? NULL : dh, dh16, dbias, dhg, h, N, OC);
    matmul_backward_op(dinp, dw, dh16 ? (const void *)dh16 : dh, inp, NULL, w, N, C, OC, 0);
}

extern "C" void cu_matmul_bias_gelu_backward(float *dinp, float *dw, float *dbias, float *dh, const float *dhg,
                                             const float *h, const float *inp, const float *w, long N, int C, int OC) {
    PROF(PROF_ELEMENTWISE);
    if (N <= 0) return;
    bias_gelu_backward_op(dinp, dw, dbias, dh, dhg, h, inp, w, N, C, OC, 1);
}

// The dense MLP (ops.c's mlp_forward): the first half as above; on a --bf16 run GELU's input h and
// output hg are written in bf16 only, in their rooms (cu_hg_half), by c_fc's GEMM with GELU's
// epilogue (cu_gemm_gelu16): the second GEMM reads hg there, and so does cu_mlp_backward's weight
// gradient, and the backward's GELU gradient reads h (no fp32 h or hg, no bias + GELU pass, no cast
// of hg). out NULL: the first half alone (a CAC recompute).
extern "C" void cu_mlp_forward(float *out, float *h, float *hg, const float *inp, const float *wfc, const float *bfc,
                               const float *wproj, const float *bproj, long N, int C, int F, int OC) {
    PROF(PROF_ELEMENTWISE);
    if (N <= 0) return;
    if (!cu_bf16()) {
        mlp_first_half(h, hg, inp, wfc, bfc, N, C, F);
        if (out) matmul_forward_op(out, hg, wproj, bproj, N, F, OC, 0);
        return;
    }
    uint16_t *hg16 = cu_hg_half(hg);
    cu_gemm_gelu16(cu_hg_half(inp), wfc, bfc, cu_hg_half(h), hg16, N, C, F);
    if (out) matmul_forward_op(out, hg16, wproj, bproj, N, F, OC, 0);
}

// Its backward (ops.c's mlp_backward): the second GEMM's (dh = dout·wprojᵀ written, gwproj +=
// hgᵀ·dout with hg as cu_mlp_forward left it, gbproj += Σ rows dout), then the first half's from
// dh in place. A --bf16 run: dh = (dout·wprojᵀ) ⊙ GELU'(h) in bf16 only, from the GEMM with GELU's
// gradient epilogue (cu_gemm_dgelu16; slot 2), the GEMMs' operand and gbfc's terms.
extern "C" void cu_mlp_backward(float *dinp, float *gwfc, float *gbfc, float *gwproj, float *gbproj, float *dh,
                                const float *dout, const float *h, const float *hg, const float *inp, const float *wfc,
                                const float *wproj, long N, int C, int F, int OC) {
    PROF(PROF_ELEMENTWISE);
    if (N <= 0) return;
    if (!cu_bf16()) {
        matmul_backward_bias(dh, gwproj, gbproj, dout, hg, wproj, N, F, OC, 0);
        bias_gelu_backward_op(dinp, gwfc, gbfc, dh, dh, h, inp, wfc, N, C, F, 0);   // dh: scratch (ops.h)
        return;
    }
    const void *g = cu_operand(dout, N * OC, 0);
    uint16_t *dh16 = cu_half_slot(N * F, 2);
    cu_gemm_dgelu16(g, wproj, cu_hg_half(h), dh16, N, OC, F);
    matmul_backward_op(NULL, gwproj, g, hg, cu_hg_half(hg), wproj, N, F, OC, 0);
    if (gbproj && OC > 0) colsum_add<1>(gbproj, NULL, N, OC, ColTerm{dout, OC});
    if (gbfc && F > 0) colsum_add<1>(gbfc, NULL, N, F, ColTerm16{dh16, F});
    dinp16_op(dinp, dh16, wfc, N, C, F);
    matmul_backward_op(NULL, gwfc, dh16, inp, cu_hg_half(inp), wfc, N, C, F, 0);
}

// out16[r, :] = bias16 for rows r < N: a block per row, V = 8 elements (16 bytes) at a time where OC
// is a multiple of 8 and both are 16-byte aligned (an element each with a 64-bit remainder ran at a
// quarter of the HBM's rate)
template <int V> __global__ void fill_rows16_kernel(uint16_t *out16, const uint16_t *bias16, long N, int OC) {
    BLOCK_ROWS(r, N)
        ROW_COLS(c, OC, V) {
            if constexpr (V == 8) *(uint4 *)(out16 + r * OC + c) = *(const uint4 *)(bias16 + c);
            else out16[r * OC + c] = bias16[c];
        }
}

// ops.c's qkv_forward: on a --bf16 run the LayerNorm writes its output in bf16 only, into the
// first half of ln's room (cu_hg_half), the GEMM's operand there and qkv_backward's (no cast in
// either pass); the GEMM writes qkv in bf16 only, into the first half of its room, over the
// bias's rows (beta 1: the bias added in fp32, the sum rounded once, as the fp32 product and its
// copy would be); flash attention reads it there in cu_attn_proj_forward and _backward, with no
// fp32 qkv written and no cast of it in either pass.
extern "C" void cu_qkv_forward(float *qkv, float *ln, float *mean, float *rstd, const float *inp, const float *lnw,
                               const float *lnb, const float *w, const float *bias, long N, int C, int OC) {
    if (!cu_bf16()) {
        cu_layernorm_forward(ln, mean, rstd, inp, lnw, lnb, N, C, 0);
        PROF(PROF_ELEMENTWISE);
        if (N > 0 && OC > 0) matmul_forward_op(qkv, ln, w, bias, N, C, OC, 0);
        return;
    }
    PROF(PROF_ELEMENTWISE);
    if (N <= 0 || OC <= 0 || C <= 0) return;
    uint16_t *ln16 = cu_hg_half(ln), *q16 = cu_hg_half(qkv);   // LayerNorm's output in bf16 only
    ln_launch(C, ln, inp, NULL, NULL, lnw, lnb, [&](auto v, auto *ww, auto *bb) {
        ln_forward<decltype(v)::value>(ln16, mean, rstd, inp, ww, bb, N, C);
    });
    if (bias) {
        const uint16_t *b16 = bf16_of(bias);
        unsigned g = row_grid(N);
        if (OC % 8 == 0 && ((uintptr_t)q16 | (uintptr_t)b16) % 16 == 0)
            fill_rows16_kernel<8><<<g, kThreads, 0, cu_stream()>>>(q16, b16, N, OC);
        else fill_rows16_kernel<1><<<g, kThreads, 0, cu_stream()>>>(q16, b16, N, OC);
        CU_LAUNCH_CHECK();
    }
    cu_gemm_op_c16(0, 0, (int)N, OC, C, 1.0f, ln16, C, w, OC, bias ? 1.0f : 0.0f, q16, OC);
}

// ops.c's qkv_backward: matmul_backward (dinp written); on a --bf16 run from dqkv as
// cu_attn_proj_backward leaves it, in bf16 in its buffer's first half: the GEMMs take it as their
// operand (no cast) and the bias gradient sums its bf16 values; ln's bf16 copy is the weight
// gradient's other operand, where cu_qkv_forward left it
extern "C" void cu_qkv_backward(float *dinp, float *dw, float *dbias, const float *dqkv, const float *ln,
                                const float *w, long N, int C, int OC) {
    PROF(PROF_ELEMENTWISE);
    if (!cu_bf16()) { matmul_backward_bias(dinp, dw, dbias, dqkv, ln, w, N, C, OC, 0); return; }
    if (N <= 0) return;
    const uint16_t *g16 = cu_hg_half(dqkv);
    dinp16_op(dinp, g16, w, N, C, OC);
    matmul_backward_op(NULL, dw, g16, ln, cu_hg_half(ln), w, N, C, OC, 0);
    if (dbias && OC > 0) colsum_add<1>(dbias, NULL, N, OC, ColTerm16{g16, OC});
}

// Attention and its output projection (ops.c's attn_proj_forward): on a --bf16 run the attention
// writes its output's bf16 copy straight into atty's room (cu_hg_half), which the projection and
// cu_attn_proj_backward read (no fp32 atty, no widening, no cast of it in either pass). out NULL:
// atty alone (a CAC recompute).
extern "C" void cu_attn_proj_forward(float *out, float *atty, float *att, const float *qkv, const float *wproj,
                                     const float *bproj, int B, int T, int H, int hd, int OC) {
    PROF(PROF_ATTENTION);
    long N = (long)B * T;
    int D = H * hd;
    if (!cu_bf16()) {
        cu_attention_forward(atty, att, qkv, B, T, H, hd);
        if (out) cu_matmul_forward(out, atty, wproj, bproj, N, D, OC, 0);
        return;
    }
    cu_attention_bf16_forward(cu_hg_half(atty), att, cu_hg_half(qkv), B, T, H, hd);   // qkv: as cu_qkv_forward left it
    if (out && N > 0) matmul_forward_op(out, cu_hg_half(atty), wproj, bproj, N, D, OC, 0);
}

// Its backward: the projection's (datty = dout·wprojᵀ written, gwproj += attyᵀ·dout with atty as
// the forward left it, gbproj += Σ rows dout), then the attention's from datty. On a --bf16 run
// datty is written in bf16 only, in its buffer's first half, where the flash backward reads it as
// dO (no fp32 datty and no cast of it), and dqkv likewise, for cu_qkv_backward.
extern "C" void cu_attn_proj_backward(float *dqkv, float *gwproj, float *gbproj, float *datty, const float *dout,
                                      const float *att, const float *qkv, const float *atty, const float *wproj, int B,
                                      int T, int H, int hd, int OC, float *scratch) {
    PROF(PROF_ATTENTION);
    long N = (long)B * T;
    int D = H * hd;
    if (!cu_bf16()) {
        matmul_backward_bias(datty, gwproj, gbproj, dout, atty, wproj, N, D, OC, 0);
        cu_attention_backward(dqkv, datty, att, qkv, atty, B, T, H, hd, scratch);
        return;
    }
    uint16_t *d16 = cu_hg_half(datty);
    if (N > 0) {
        const void *g = cu_operand(dout, N * OC, 0);
        cu_gemm_op_c16(0, 1, (int)N, D, OC, 1.0f, g, OC, wproj, OC, 0.0f, d16, D);
        matmul_backward_op(NULL, gwproj, g, atty, cu_hg_half(atty), wproj, N, D, OC, 0);
        if (gbproj && OC > 0) colsum_add<1>(gbproj, NULL, N, OC, ColTerm{dout, OC});
    }
    cu_flash_attention_backward_bf16(cu_hg_half(dqkv), scratch, d16, cu_hg_half(atty), cu_hg_half(qkv), att, B, T, H,
                                     hd);
}

// columns of this shard that are real vocabulary entries (ops.c's real_cols)
static int real_cols(int v0, int Vl, int V) { int n = V - v0; return n < 0 ? 0 : n > Vl ? Vl : n; }

extern "C" void cu_crossentropy_max(float *mx, float *tl, const float *logits, const int *targets, long N, int v0,
                                    int Vl, int V) {
    PROF(PROF_LOSS);
    if (N <= 0) return;
    crossentropy_max_kernel<<<grid_for(N, 1), kThreads, 0, cu_stream()>>>(mx, tl, logits, targets, N, v0, Vl,
                                                                            real_cols(v0, Vl, V));
    CU_LAUNCH_CHECK();
}

extern "C" void cu_crossentropy_exp(float *sum, float *logits, const float *mx, long N, int v0, int Vl, int V) {
    PROF(PROF_LOSS);
    if (N <= 0) return;
    crossentropy_exp_kernel<<<grid_for(N, 1), kThreads, 0, cu_stream()>>>(sum, logits, mx, N, Vl,
                                                                            real_cols(v0, Vl, V));
    CU_LAUNCH_CHECK();
}

extern "C" void cu_crossentropy_finish(float *losses, float *probs, const float *mx, const float *sum,
                                       const float *tl, long N, int Vl) {
    PROF(PROF_LOSS);
    if (N <= 0) return;
    crossentropy_finish_kernel<<<grid_for(N, 1), kThreads, 0, cu_stream()>>>(losses, probs, mx, sum, tl, N, Vl);
    CU_LAUNCH_CHECK();
}

extern "C" void cu_crossentropy_backward(float *probs, const int *targets, long N, int v0, int Vl, float scale) {
    PROF(PROF_LOSS);
    long n = N * Vl;
    if (n <= 0) return;
    crossentropy_backward_kernel<<<grid_for(n, kThreads), kThreads, 0, cu_stream()>>>(probs, targets, N, v0, Vl,
                                                                                         scale);
    CU_LAUNCH_CHECK();
}

extern "C" void cu_residual_forward(float *out, const float *a, const float *b, long n) {
    PROF(PROF_ELEMENTWISE);
    if (n <= 0) return;
    residual_kernel<<<grid_for(n, kThreads), kThreads, 0, cu_stream()>>>(out, a, b, n);
    CU_LAUNCH_CHECK();
}

extern "C" void cu_half_to_f32(float *dst, const uint16_t *src, long n, int half) {
    PROF(PROF_CAST);
    if (n <= 0) return;
    half_to_f32_kernel<<<grid_for(n, kThreads), kThreads, 0, cu_stream()>>>(dst, src, n, half);
    CU_LAUNCH_CHECK();
}

extern "C" void cu_f32_to_half(uint16_t *dst, const float *src, long n, int half) {
    PROF(PROF_CAST);
    if (n <= 0) return;
    if (n % 4 == 0 && (uintptr_t)dst % 8 == 0 && (uintptr_t)src % 16 == 0)   // the GEMM operands' case
        f32_to_half4_kernel<<<grid_for(n / 4, kThreads), kThreads, 0, cu_stream()>>>((uint2 *)dst, (const float4 *)src,
                                                                                    n / 4, half);
    else f32_to_half_kernel<<<grid_for(n, kThreads), kThreads, 0, cu_stream()>>>(dst, src, n, half);
    CU_LAUNCH_CHECK();
}

extern "C" void cu_half_accumulate(uint16_t *dst, const float *src, long n, int half) {
    PROF(PROF_CAST);
    if (n <= 0) return;
    half_accumulate_kernel<<<grid_for(n, kThreads), kThreads, 0, cu_stream()>>>(dst, src, n, half);
    CU_LAUNCH_CHECK();
}

extern "C" double cu_sum(const float *x, long n) {
    PROF(PROF_LOSS);
    if (n <= 0) return 0.0;
    double *d = red_scratch() + kRedBlocks, h = 0;   // the result, after the partials
    reduce_sum(d, n, SumF{x});
    CU_CHECK(cudaMemcpyAsync(&h, d, sizeof(double), cudaMemcpyDeviceToHost, cu_stream()));
    cu_prof_count(PROF_COPY, 1);
    cu_stream_sync();
    return h;
}
