// flash_attention.cu — causal attention without the T×T probabilities (see ops_cuda.h): the
// forward keeps only the output and each query's log-sum-exp of its scores; the backward
// recomputes the probabilities tile by tile from them. This file holds the fp32 kernels and the
// entry points of both precisions; bf16 inputs run in flash_mma.cu. Layout, tiles: flash.cuh.
//
// Pipeline: K, V, Q and dO tiles stream through shared memory by cp.async, only the tiles at or
// below the diagonal: in the forward V_j loads while S and the softmax run, K_{j+1} while P·V
// runs; in the backward the next V (dQ) or dO (dK/dV) tile while dS and the last products run.
// Head dims up to 64 run in the 64-wide kernels, up to 128 in the 128-wide ones (columns past hd
// are zero).
//
// Products on the tensor cores through WMMA, three TF32 16x16x8 products per step (x = hi + lo
// split, hi·hi + hi·lo + lo·hi), within about 1e-6 of fp32. The code never assumes where a
// fragment keeps an element (CUDA leaves it unspecified): the softmax reads scores staged in
// shared memory, and element-wise work on accumulators reads each element's row and column from
// the fragment `pos`, loaded from a table of r·16 + c (fragments of one type share one layout). A
// warp leaves out the products that only add zeros: its rows past T, the 16-key fragments the
// causal mask hides from all its rows, the head-dim columns past hd (Span).
//
// Backward, deterministic (no atomics): kernel 1 per query tile: Δ = rowsum(dO∘O), then
// dQ = Σ over key tiles of dS·K; kernel 2 per key tile: dV = Σ Pᵀ·dO and dK = Σ dSᵀ·Q over the
// query tiles; P = exp(S·scale − lse), dS = P∘(dP − Δ)·scale, dP = dO·Vᵀ. S and dP are computed
// in both kernels: 7 products where atomics in dQ would need 5.
#include "cuda_ops.h"
#include <cuda_bf16.h>
#include <cuda_pipeline_primitives.h>
#include <mma.h>
#include "flash.cuh"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <type_traits>

using namespace nvcuda;

namespace {
using namespace flash;


// ---- the tensor-core step per element type ------------------------------------------------
template <class E> struct Wmma;   // fp32 only: bf16 inputs run in flash_mma.cu
template <> struct Wmma<float> {
    typedef wmma::precision::tf32 In;
    static constexpr int K = 8, PAD = 4;
};
template <class E> using FragA = wmma::fragment<wmma::matrix_a, 16, 16, Wmma<E>::K, typename Wmma<E>::In, wmma::row_major>;
template <class E, class L> using FragB = wmma::fragment<wmma::matrix_b, 16, 16, Wmma<E>::K, typename Wmma<E>::In, L>;
template <class E> using Acc = wmma::fragment<wmma::accumulator, 16, 16, Wmma<E>::K, float>;
template <class E> __host__ __device__ constexpr int ld_strip() { return kTile + Wmma<E>::PAD; }        // of a warp's [16, 64] strip
constexpr int kLdScores = kTile + 4;                                                 // of the fp32 scores

// f[0] + f[1]: the TF32 split of an fp32 operand (for a 16-bit E, f[0] alone)
template <class E, class F> __device__ __forceinline__ void load_split(F (&f)[2], const E *p, unsigned ld) {
    wmma::load_matrix_sync(f[0], p, ld);
    if constexpr (std::is_same<E, float>::value) {
        for (int i = 0; i < f[0].num_elements; i++) {
            float x = f[0].x[i], hi = wmma::__float_to_tf32(x);
            f[0].x[i] = hi;
            f[1].x[i] = wmma::__float_to_tf32(x - hi);
        }
    }
}
template <class E, class A, class B> __device__ __forceinline__ void mma_split(Acc<E> &c, const A (&a)[2], const B (&b)[2]) {
    if constexpr (std::is_same<E, float>::value) {   // the small terms first
        wmma::mma_sync(c, a[1], b[0], c);
        wmma::mma_sync(c, a[0], b[1], c);
    }
    wmma::mma_sync(c, a[0], b[0], c);
}

// The part of a product a warp computes: its accumulators [j0, j1) over the K range [k0, k1); the
// rest adds exact zeros (rows or keys past T, fragments the causal mask covers, head-dim columns
// past hd), so leaving it out changes no bit.
struct Span { int j0, j1, k0, k1; };

// acc[j] += A·B_j for j in [sp.j0, sp.j1) of NF (a warp): A the [16, KD] rows at a (row stride
// lda); B_j the 16 columns from 16·j of a [KD, 16·NF] matrix stored row-major (L = row_major:
// b[k·ldb + n]) or as its transpose (col_major: b[n·ldb + k]); the products over k in [sp.k0, sp.k1).
template <class E, class L, int NF, int KD>
__device__ void warp_mma(Acc<E> (&acc)[NF], const E *a, int lda, const E *b, int ldb, Span sp) {
    constexpr bool col = std::is_same<L, wmma::col_major>::value;
    #pragma unroll 1   // j unrolled keeps acc[j] in registers; k unrolled would only add live fragments
    for (int k = sp.k0; k < sp.k1 && k < KD; k += Wmma<E>::K) {
        FragA<E> fa[2];
        load_split<E>(fa, a + k, lda);
        #pragma unroll
        for (int j = 0; j < NF; j++) {
            if (j < sp.j0 || j >= sp.j1) continue;
            FragB<E, L> fb[2];
            load_split<E>(fb, b + (col ? 16 * j * ldb + k : k * ldb + 16 * j), ldb);
            mma_split<E>(acc[j], fa, fb);
        }
    }
}
// head-dim columns a product needs: hd rounded up to the step K; output fragments: hd over 16
template <class E> __device__ __forceinline__ int hd_k(int hd) { return (hd + Wmma<E>::K - 1) / Wmma<E>::K * Wmma<E>::K; }
__device__ __forceinline__ int hd_frags(int hd) { return (hd + 15) / 16; }
// key fragments of the tile from key u0 that queries [t0, t0 + 16) see: a prefix (causal, keys < T)
__device__ __forceinline__ int key_frags(int t0, int u0, int T) {
    int last = t0 + 15 < T - 1 ? t0 + 15 : T - 1, n = (last - u0) / 16 + 1;
    return last < u0 ? 0 : n < kTile / 16 ? n : kTile / 16;
}
// query fragments of the tile from query u0 that keys [k0, k0 + 16) are seen by: [lo, hi)
__device__ __forceinline__ Span query_frags(int k0, int u0, int T) {
    int x = k0 - u0 - 15, lo = x <= 0 ? 0 : (x + 15) / 16, hi = (T - u0 + 15) / 16;
    hi = k0 >= T ? 0 : hi < kTile / 16 ? hi : kTile / 16;
    return Span{lo < hi ? lo : hi, hi, 0, 0};
}

template <class E, int NF> __device__ __forceinline__ void zero(Acc<E> (&acc)[NF]) {
    for (int j = 0; j < NF; j++) wmma::fill_fragment(acc[j], 0.0f);
}

// pos[i] = r·16 + c of the element i of this lane in any Acc<E> (table: 256 floats of shared memory)
template <class E> __device__ void load_pos(Acc<E> &pos, float *table) {
    for (int i = threadIdx.x; i < 256; i += kThreads) table[i] = (float)i;
    __syncthreads();
    wmma::load_matrix_sync(pos, table, 16, wmma::mem_row_major);
}

// dst[r, 16·j + c] = acc[j](r, c) (· mul[r] when given) as E: a warp's [16, 16·NF] accumulators
// into shared rows
template <class E, int NF>
__device__ void scatter(E *dst, int ld, const Acc<E> (&acc)[NF], const Acc<E> &pos, const float *mul) {
    for (int j = 0; j < NF; j++)
        for (int i = 0; i < pos.num_elements; i++) {
            int p = (int)pos.x[i], r = p >> 4;
            dst[r * ld + 16 * j + (p & 15)] = to_e<E>(mul ? acc[j].x[i] * mul[r] : acc[j].x[i]);
        }
}

// ---- forward -------------------------------------------------------------------------------
template <class E, int HD> struct FwdSmem {
    float *pos;        // [256]
    E *q, *k, *v;      // tiles [64, ld_tile]
    float *s;          // per warp: scores [16, kLdScores]
    E *p;              // per warp: probabilities [16, ld_strip]
    float *m, *l, *a;  // per warp and row: running max (of S·scale·log2 e), sum, rescale factor
    __host__ __device__ FwdSmem(Carve &c) {
        pos = c.take<float>(256);
        q = c.take<E>(kTile * ld_tile<E, HD>());
        k = c.take<E>(kTile * ld_tile<E, HD>());
        v = c.take<E>(kTile * ld_tile<E, HD>());
        s = c.take<float>(kWarps * 16 * kLdScores);
        p = c.take<E>(kWarps * 16 * ld_strip<E>());
        m = c.take<float>(kWarps * 16);
        l = c.take<float>(kWarps * 16);
        a = c.take<float>(kWarps * 16);
    }
};

// Online softmax over a warp's scores s [16, 64] (fp32, staged): lanes 2r and 2r + 1 take row r
// (query t0 + r), the even and the odd columns (keys u0 + column). Masked: u > t or u ≥ T. Writes
// P = exp2(S·c − m) as E into p, updates m, l (the sum of P before its rounding to E, so that the
// log-sum-exp stays fp32-exact for the backward) and a = exp2(m_old − m) of its rows; returns
// whether a row of the warp rescales (some a ≠ 1).
template <class E>
__device__ bool softmax_rows(E *p, const float *s, float *m, float *l, float *a, int t0, int u0, int T, float c) {
    int lane = threadIdx.x % 32, r = lane >> 1, t = t0 + r;
    const float *sr = s + r * kLdScores;
    E *pr = p + r * ld_strip<E>();
    float mx = -INFINITY;
    for (int j = lane & 1; j < kTile; j += 2)
        if (u0 + j <= t && u0 + j < T) mx = fmaxf(mx, sr[j] * c);
    mx = fmaxf(mx, __shfl_xor_sync(kFull, mx, 1));
    float m_old = m[r], m_new = fmaxf(m_old, mx), ref = m_new == -INFINITY ? 0.0f : m_new, sum = 0.0f;
    for (int j = lane & 1; j < kTile; j += 2) {
        float e = u0 + j <= t && u0 + j < T ? exp2f(sr[j] * c - ref) : 0.0f;
        pr[j] = to_e<E>(e);
        sum += e;
    }
    sum += __shfl_xor_sync(kFull, sum, 1);
    float alpha = exp2f(m_old - ref);        // 0 on the first tile (m_old = −inf)
    __syncwarp();                            // both lanes of a row have read m[r] (a shuffle orders no memory)
    if (!(lane & 1)) {
        m[r] = m_new;
        l[r] = l[r] * alpha + sum;
        a[r] = alpha;
    }
    __syncwarp();
    return __any_sync(kFull, alpha != 1.0f);
}

// O = softmax(Q·Kᵀ·scale, causal)·V and lse per query; block (x, y): query tile (last first), b·H + h.
template <class E, int HD>
__global__ void __launch_bounds__(kThreads) flash_forward_kernel(E *out, float *lse, const E *qkv, int T, int H, int hd,
                                                                  float scale, int vec) {
    extern __shared__ __align__(128) unsigned char flash_smem[];
    Carve cv{flash_smem, 0};
    FwdSmem<E, HD> sm(cv);
    constexpr int LD = ld_tile<E, HD>(), NO = HD / 16;
    const int w = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int q0 = (gridDim.x - 1 - blockIdx.x) * kTile, t0 = q0 + 16 * w, nk = last_tile(q0, T) + 1;
    const Head at = head_of(T, H, hd);
    const long D = at.D, ld = at.ld;
    const E *q = qkv + at.x, *k = q + D, *v = q + 2 * D;
    float *m = sm.m + 16 * w, *l = sm.l + 16 * w, *a = sm.a + 16 * w, c = scale * kLog2e;
    load_tile<E, HD>(sm.q, q, ld, q0, T, hd, vec);
    load_tile<E, HD>(sm.k, k, ld, 0, T, hd, vec);
    __pipeline_commit();
    if (lane < 16) { m[lane] = -INFINITY; l[lane] = 0.0f; }
    Acc<E> pos, o[NO];
    load_pos<E>(pos, sm.pos);
    zero<E>(o);
    for (int j = 0; j < nk; j++) {
        __pipeline_wait_prior(0);
        __syncthreads();   // K_j is in; every warp is done with V_{j-1}
        load_tile<E, HD>(sm.v, v, ld, j * kTile, T, hd, vec);
        __pipeline_commit();
        Acc<E> s[kTile / 16];
        zero<E>(s);
        int nf = key_frags(t0, j * kTile, T);
        warp_mma<E, wmma::col_major, kTile / 16, HD>(s, sm.q + 16 * w * LD, LD, sm.k, LD, Span{0, nf, 0, hd_k<E>(hd)});
        for (int n = 0; n < kTile / 16; n++)
            wmma::store_matrix_sync(sm.s + 16 * w * kLdScores + 16 * n, s[n], kLdScores, wmma::mem_row_major);
        __syncwarp();
        E *p = sm.p + 16 * w * ld_strip<E>();
        if (t0 < T && softmax_rows<E>(p, sm.s + 16 * w * kLdScores, m, l, a, t0, j * kTile, T, c))
            for (int n = 0; n < NO; n++)
                for (int i = 0; i < pos.num_elements; i++) o[n].x[i] *= a[(int)pos.x[i] >> 4];
        __pipeline_wait_prior(0);
        __syncthreads();   // V_j is in; every warp is done with K_j
        if (j + 1 < nk) load_tile<E, HD>(sm.k, k, ld, (j + 1) * kTile, T, hd, vec);
        __pipeline_commit();
        warp_mma<E, wmma::row_major, NO, kTile>(o, p, ld_strip<E>(), sm.v, LD, Span{0, hd_frags(hd), 0, 16 * nf});
    }
    if (lane < 16) {
        if (t0 + lane < T) lse[(long)blockIdx.y * T + t0 + lane] = (m[lane] + log2f(l[lane])) * kLn2;
        a[lane] = 1.0f / l[lane];
    }
    __syncwarp();
    scatter<E, NO>(sm.q + 16 * w * LD, LD, o, pos, a);   // the warp's own Q rows hold its O now
    __syncwarp();
    store_rows<E, HD>(out + at.o, D, sm.q + 16 * w * LD, t0, T, hd, vec);
}

// ---- backward ------------------------------------------------------------------------------
template <class E, int HD> struct BwdSmem {
    float *pos;             // [256]
    E *q, *dO, *k, *v;      // tiles [64, ld_tile]
    E *strip;               // per warp [16, ld_strip]: P or dS
    float *lse2, *dl;       // per row of the block (dQ) or of the query tile (dK/dV): lse·log2 e, Δ
    __host__ __device__ BwdSmem(Carve &c) {
        pos = c.take<float>(256);
        q = c.take<E>(kTile * ld_tile<E, HD>());
        dO = c.take<E>(kTile * ld_tile<E, HD>());
        k = c.take<E>(kTile * ld_tile<E, HD>());
        v = c.take<E>(kTile * ld_tile<E, HD>());
        strip = c.take<E>(kWarps * 16 * ld_strip<E>());
        lse2 = c.take<float>(kTile);
        dl = c.take<float>(kTile);
    }
};


// dp ← dS = P∘(dP − Δ)·scale in place, with P = exp2(S·c − lse2) where query t ≥ key u and t < T
// (else 0); P also into pdst [16, ld_strip] as E when given. Row r of the accumulators is query
// t0 + r and column 16·n + c key u0 + 16n + c (rows_are_queries), or row r key t0 + r and column
// query u0 + 16n + c; lse2 and dl are indexed by the query's place in its tile.
template <class E, bool rows_are_queries>
__device__ void softmax_grad(Acc<E> (&dp)[kTile / 16], E *pdst, const Acc<E> (&s)[kTile / 16], const Acc<E> &pos,
                             const float *lse2, const float *dl, int t0, int u0, int T, float c, float scale) {
    #pragma unroll
    for (int n = 0; n < kTile / 16; n++)
        for (int i = 0; i < pos.num_elements; i++) {
            int p = (int)pos.x[i], r = p >> 4, col = 16 * n + (p & 15), x = rows_are_queries ? r : col;
            int tq = rows_are_queries ? t0 + r : u0 + col, tk = rows_are_queries ? u0 + col : t0 + r;
            float pr = tk <= tq && tq < T ? exp2f(s[n].x[i] * c - lse2[x]) : 0.0f;
            dp[n].x[i] = pr * (dp[n].x[i] - dl[x]) * scale;
            if (pdst) pdst[r * ld_strip<E>() + col] = to_e<E>(pr);
        }
}

// dQ (and Δ into delta) for a query tile; block (x, y): query tile (last first), b·H + h.
template <class E, int HD>
__global__ void __launch_bounds__(kThreads) flash_dq_kernel(E *dqkv, float *delta, const E *dout, const E *out,
                                                             const E *qkv, const float *lse, int T, int H, int hd,
                                                             float scale, int vec) {
    extern __shared__ __align__(128) unsigned char flash_smem[];
    Carve cv{flash_smem, 0};
    BwdSmem<E, HD> sm(cv);
    constexpr int LD = ld_tile<E, HD>(), NO = HD / 16, NS = kTile / 16;
    const int w = threadIdx.x / 32;
    const int q0 = (gridDim.x - 1 - blockIdx.x) * kTile, t0 = q0 + 16 * w, nk = last_tile(q0, T) + 1;
    const Head at = head_of(T, H, hd);
    const long D = at.D, ld = at.ld, bt = at.bt;
    const E *q = qkv + at.x, *k = q + D, *v = q + 2 * D, *dO = dout + at.o;
    load_tile<E, HD>(sm.q, q, ld, q0, T, hd, vec);
    load_tile<E, HD>(sm.dO, dO, D, q0, T, hd, vec);
    load_tile<E, HD>(sm.k, k, ld, 0, T, hd, vec);
    load_tile<E, HD>(sm.v, v, ld, 0, T, hd, vec);
    __pipeline_commit();
    Acc<E> pos, dq[NO];
    load_pos<E>(pos, sm.pos);
    zero<E>(dq);
    __pipeline_wait_prior(0);
    __syncthreads();
    float *lse2 = sm.lse2 + 16 * w, *dl = sm.dl + 16 * w;
    delta_rows<E, HD>(dl, lse2, delta + bt, lse + bt, sm.dO + 16 * w * LD, out + at.o, D, t0, T, hd);
    for (int j = 0; j < nk; j++) {
        __pipeline_wait_prior(0);
        __syncthreads();   // K_j and V_j are in
        Acc<E> s[NS], dp[NS];
        zero<E>(s);
        zero<E>(dp);
        int nf = key_frags(t0, j * kTile, T);
        warp_mma<E, wmma::col_major, NS, HD>(s, sm.q + 16 * w * LD, LD, sm.k, LD, Span{0, nf, 0, hd_k<E>(hd)});
        warp_mma<E, wmma::col_major, NS, HD>(dp, sm.dO + 16 * w * LD, LD, sm.v, LD, Span{0, nf, 0, hd_k<E>(hd)});
        __syncthreads();   // every warp is done with V_j: V_{j+1} loads during dS and dQ
        if (j + 1 < nk) load_tile<E, HD>(sm.v, v, ld, (j + 1) * kTile, T, hd, vec);
        __pipeline_commit();
        E *ds = sm.strip + 16 * w * ld_strip<E>();
        softmax_grad<E, true>(dp, (E *)NULL, s, pos, lse2, dl, t0, j * kTile, T, scale * kLog2e, scale);
        scatter<E, NS>(ds, ld_strip<E>(), dp, pos, (const float *)NULL);
        __syncwarp();
        warp_mma<E, wmma::row_major, NO, kTile>(dq, ds, ld_strip<E>(), sm.k, LD, Span{0, hd_frags(hd), 0, 16 * nf});
        __syncthreads();   // every warp is done with K_j
        if (j + 1 < nk) load_tile<E, HD>(sm.k, k, ld, (j + 1) * kTile, T, hd, vec);
        __pipeline_commit();
    }
    scatter<E, NO>(sm.q + 16 * w * LD, LD, dq, pos, (const float *)NULL);   // the warp's own Q rows hold its dQ now
    __syncwarp();
    store_rows<E, HD>(dqkv + at.x, ld, sm.q + 16 * w * LD, t0, T, hd, vec);
}

// dK, dV for a key tile; block (x, y): key tile (first first: the most query tiles), b·H + h.
template <class E, int HD>
__global__ void __launch_bounds__(kThreads) flash_dkv_kernel(E *dqkv, const E *dout, const E *qkv, const float *lse,
                                                              const float *delta, int T, int H, int hd, float scale,
                                                              int vec) {
    extern __shared__ __align__(128) unsigned char flash_smem[];
    Carve cv{flash_smem, 0};
    BwdSmem<E, HD> sm(cv);
    constexpr int LD = ld_tile<E, HD>(), NO = HD / 16, NS = kTile / 16;
    const int w = threadIdx.x / 32, k0 = blockIdx.x * kTile;
    const int nq = (T - 1) / kTile + 1;
    const Head at = head_of(T, H, hd);
    const long D = at.D, ld = at.ld, bt = at.bt;
    const E *q = qkv + at.x, *k = q + D, *v = q + 2 * D, *dO = dout + at.o;
    load_tile<E, HD>(sm.k, k, ld, k0, T, hd, vec);
    load_tile<E, HD>(sm.v, v, ld, k0, T, hd, vec);
    load_tile<E, HD>(sm.q, q, ld, k0, T, hd, vec);
    load_tile<E, HD>(sm.dO, dO, D, k0, T, hd, vec);
    __pipeline_commit();
    Acc<E> pos, dk[NO], dv[NO];
    load_pos<E>(pos, sm.pos);
    zero<E>(dk);
    zero<E>(dv);
    for (int i = blockIdx.x; i < nq; i++) {
        for (int x = threadIdx.x; x < kTile; x += kThreads) {
            int t = i * kTile + x;
            sm.lse2[x] = t < T ? lse[bt + t] * kLog2e : 0.0f;
            sm.dl[x] = t < T ? delta[bt + t] : 0.0f;
        }
        __pipeline_wait_prior(0);
        __syncthreads();   // Q_i, dO_i and their rows' lse, Δ are in
        Acc<E> st[NS], dpt[NS];
        zero<E>(st);
        zero<E>(dpt);
        Span qf = query_frags(k0 + 16 * w, i * kTile, T), sq = {qf.j0, qf.j1, 0, hd_k<E>(hd)};
        Span so = {0, hd_frags(hd), 16 * qf.j0, 16 * qf.j1};   // the products over those queries
        warp_mma<E, wmma::col_major, NS, HD>(st, sm.k + 16 * w * LD, LD, sm.q, LD, sq);
        warp_mma<E, wmma::col_major, NS, HD>(dpt, sm.v + 16 * w * LD, LD, sm.dO, LD, sq);
        E *strip = sm.strip + 16 * w * ld_strip<E>();   // Pᵀ, then dSᵀ
        softmax_grad<E, false>(dpt, strip, st, pos, sm.lse2, sm.dl, k0 + 16 * w, i * kTile, T, scale * kLog2e, scale);
        __syncwarp();
        warp_mma<E, wmma::row_major, NO, kTile>(dv, strip, ld_strip<E>(), sm.dO, LD, so);
        __syncthreads();   // every warp is done with dO_i (and its Pᵀ): dO_{i+1} loads during dS and dK
        if (i + 1 < nq) load_tile<E, HD>(sm.dO, dO, D, (i + 1) * kTile, T, hd, vec);
        __pipeline_commit();
        scatter<E, NS>(strip, ld_strip<E>(), dpt, pos, (const float *)NULL);
        __syncwarp();
        warp_mma<E, wmma::row_major, NO, kTile>(dk, strip, ld_strip<E>(), sm.q, LD, so);
        __syncthreads();   // every warp is done with Q_i, lse2 and dl
        if (i + 1 < nq) load_tile<E, HD>(sm.q, q, ld, (i + 1) * kTile, T, hd, vec);
        __pipeline_commit();
    }
    scatter<E, NO>(sm.k + 16 * w * LD, LD, dk, pos, (const float *)NULL);   // the warp's own K, V rows hold dK, dV
    scatter<E, NO>(sm.v + 16 * w * LD, LD, dv, pos, (const float *)NULL);
    __syncwarp();
    E *dst = dqkv + at.x;
    store_rows<E, HD>(dst + D, ld, sm.k + 16 * w * LD, k0 + 16 * w, T, hd, vec);
    store_rows<E, HD>(dst + 2 * D, ld, sm.v + 16 * w * LD, k0 + 16 * w, T, hd, vec);
}

// ---- host ----------------------------------------------------------------------------------
template <class E, int HD> void forward(E *out, float *lse, const E *qkv, int B, int T, int H, int hd) {
    static bool done;
    size_t bytes = smem_bytes<FwdSmem<E, HD>>();
    allow_smem(flash_forward_kernel<E, HD>, bytes, &done);
    dim3 grid((T + kTile - 1) / kTile, B * H);
    flash_forward_kernel<E, HD><<<grid, kThreads, bytes, cu_stream()>>>(out, lse, qkv, T, H, hd, 1.0f / sqrtf((float)hd),
                                                                        vec_ok<E>(hd, out, qkv, qkv));
    CU_LAUNCH_CHECK();
}

template <class E, int HD> void backward(E *dqkv, float *delta, const E *dout, const E *out, const E *qkv,
                                         const float *lse, int B, int T, int H, int hd) {
    static bool done_q, done_kv;
    size_t bytes = smem_bytes<BwdSmem<E, HD>>();
    allow_smem(flash_dq_kernel<E, HD>, bytes, &done_q);
    allow_smem(flash_dkv_kernel<E, HD>, bytes, &done_kv);
    dim3 grid((T + kTile - 1) / kTile, B * H);
    float scale = 1.0f / sqrtf((float)hd);
    int vec = vec_ok<E>(hd, dqkv, dout, qkv) && vec_ok<E>(hd, out, out, out);
    flash_dq_kernel<E, HD><<<grid, kThreads, bytes, cu_stream()>>>(dqkv, delta, dout, out, qkv, lse, T, H, hd, scale, vec);
    CU_LAUNCH_CHECK();
    flash_dkv_kernel<E, HD><<<grid, kThreads, bytes, cu_stream()>>>(dqkv, dout, qkv, lse, delta, T, H, hd, scale, vec);
    CU_LAUNCH_CHECK();
}

template <class E> void forward_any(E *out, float *lse, const E *qkv, int B, int T, int H, int hd) {
    check_shape(B, H, hd);
    if ((long)B * H * T == 0) return;
    if (hd <= 64) forward<E, 64>(out, lse, qkv, B, T, H, hd);
    else forward<E, 128>(out, lse, qkv, B, T, H, hd);
}

template <class E> void backward_any(E *dqkv, float *delta, const E *dout, const E *out, const E *qkv,
                                     const float *lse, int B, int T, int H, int hd) {
    check_shape(B, H, hd);
    if ((long)B * H * T == 0) return;
    if (hd <= 64) backward<E, 64>(dqkv, delta, dout, out, qkv, lse, B, T, H, hd);
    else backward<E, 128>(dqkv, delta, dout, out, qkv, lse, B, T, H, hd);
}

}   // namespace

extern "C" void cu_flash_attention_forward(float *out, float *lse, const float *qkv, int B, int T, int H, int hd) {
    forward_any<float>(out, lse, qkv, B, T, H, hd);
}

extern "C" void cu_flash_attention_backward(float *dqkv, float *delta, const float *dout, const float *out,
                                            const float *qkv, const float *lse, int B, int T, int H, int hd) {
    backward_any<float>(dqkv, delta, dout, out, qkv, lse, B, T, H, hd);
}

extern "C" void cu_flash_attention_forward_bf16(uint16_t *out, float *lse, const uint16_t *qkv, int B, int T, int H,
                                                int hd) {
    flash::mma_forward((__nv_bfloat16 *)out, lse, (const __nv_bfloat16 *)qkv, B, T, H, hd);
}

extern "C" void cu_flash_attention_backward_bf16(uint16_t *dqkv, float *delta, const uint16_t *dout,
                                                 const uint16_t *out, const uint16_t *qkv, const float *lse, int B,
                                                 int T, int H, int hd) {
    flash::mma_backward((__nv_bfloat16 *)dqkv, delta, (const __nv_bfloat16 *)dout,
                                (const __nv_bfloat16 *)out, (const __nv_bfloat16 *)qkv, lse, B, T, H, hd);
}

extern "C" void cu_flash_attention_backward_bf16_wide(float *dqkv, float *delta, const uint16_t *dout,
                                                      const uint16_t *out, const uint16_t *qkv, const float *lse,
                                                      int B, int T, int H, int hd) {
    flash::mma_backward(dqkv, delta, (const __nv_bfloat16 *)dout, (const __nv_bfloat16 *)out,
                        (const __nv_bfloat16 *)qkv, lse, B, T, H, hd);
}

// A --bf16 run's attention from qkv in bf16 (qkv16: the operand slot 0's copy of an fp32 qkv, or
// the bf16 qkv that qkv_forward keeps). The forward writes the output's bf16 copy o16 [N, H·hd];
// the backward takes the forward's o16 and writes dqkv in fp32 straight from the kernels' sums, or
// in bf16 (slot 1: dout's copy).
void cu_attention_bf16_forward(uint16_t *o16, float *att, const uint16_t *qkv16, int B, int T, int H, int hd) {
    PROF(PROF_ATTENTION);
    cu_flash_attention_forward_bf16(o16, att, qkv16, B, T, H, hd);
}

void cu_attention_bf16_backward(float *dqkv, uint16_t *dqkv16, const float *dout, const float *att,
                                const uint16_t *qkv16, const uint16_t *o16, int B, int T, int H, int hd,
                                float *scratch) {
    PROF(PROF_ATTENTION);
    long n = (long)B * T * H * hd;
    const uint16_t *g = (const uint16_t *)cu_operand(dout, n, 1);
    if (dqkv) cu_flash_attention_backward_bf16_wide(dqkv, scratch, g, o16, qkv16, att, B, T, H, hd);
    else cu_flash_attention_backward_bf16(dqkv16, scratch, g, o16, qkv16, att, B, T, H, hd);
}

// ops.c's attention_forward / attention_backward on a GPU: att holds the log-sum-exp, the
// backward's scratch Δ (ops_cuda.h). A --bf16 run widens the output into out; the bf16 output's
// rounding is exact in fp32, so the backward's copy of out is the forward's.
extern "C" void cu_attention_forward(float *out, float *att, const float *qkv, int B, int T, int H, int hd) {
    PROF(PROF_ATTENTION);
    if (!cu_bf16()) { forward_any<float>(out, att, qkv, B, T, H, hd); return; }
    long n = (long)B * T * H * hd;
    uint16_t *o = cu_half_slot(n, 1);
    cu_attention_bf16_forward(o, att, (const uint16_t *)cu_operand(qkv, 3 * n, 0), B, T, H, hd);
    cu_half_to_f32(out, o, n, 1);
}

extern "C" void cu_attention_backward(float *dqkv, const float *dout, const float *att, const float *qkv,
                                      const float *out, int B, int T, int H, int hd, float *scratch) {
    PROF(PROF_ATTENTION);
    if (!cu_bf16()) { backward_any<float>(dqkv, scratch, dout, out, qkv, att, B, T, H, hd); return; }
    long n = (long)B * T * H * hd;
    const uint16_t *o = (const uint16_t *)cu_operand(out, n, 2), *x = (const uint16_t *)cu_operand(qkv, 3 * n, 0);
    cu_attention_bf16_backward(dqkv, NULL, dout, att, x, o, B, T, H, hd, scratch);
}
