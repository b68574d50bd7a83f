// flash_mma.cu — flash attention on bf16 inputs through mma.sync (mma.cuh), whose documented
// fragment layouts let the scores stay in registers: a warp's 16 rows of S = Q·Kᵀ over a tile of
// 64 keys are 8 accumulators of 16 × 8, a lane holding rows g and g+8, columns 2t and 2t+1 of
// each; a row's max and sum need two shuffles within the lane's group of 4; P (and dS) become
// the A operand of the next product without leaving the registers (the accumulator pairs of two
// neighbouring 8-column blocks are the A fragment of a 16-key step).
//
// Tiles, pipeline and the backward's two kernels as flash.cuh and flash_attention.cu say, but
// for the forward's rows: there a warp owns 32 query rows (two 16-row blocks, kRows = 2), so a
// block owns 128 and each K or V fragment read from shared memory feeds two products (with 16
// rows a warp the ldmatrix reads, not the tensor cores, bound it). The streamed tiles have two
// buffers where the SM's shared memory allows (MmaSmem): tile j + 1 loads while tile j is worked
// on, one barrier a tile. The backward computes dQ per query tile (S, dP, then dS·K), and dK, dV
// per key tile (Sᵀ, dPᵀ, then Pᵀ·dO and dSᵀ·Q), deterministic, no atomics. A and B operands come
// from shared memory by ldmatrix (B of Q·Kᵀ from the rows of K as they are, B of P·V from the
// rows of V transposed). Only the diagonal tile (and, in dK/dV, one that runs past T) is masked;
// in it, a warp leaves out the 8-key blocks that every one of its rows masks. The other tiles run
// copies of the products and the softmax with no bounds or mask (template flags): straight-line
// code that ptxas can schedule across the 16-key steps.
#include "cuda_ops.h"
#include "flash.cuh"
#include "mma.cuh"

namespace {
using namespace flash;
typedef __nv_bfloat16 bf16;
constexpr int NS = kTile / 8;   // 8-column blocks of a warp's scores over a tile (8)
constexpr int kRows = 2;        // 16-row blocks a warp owns in the forward
constexpr int kQTile = 16 * kRows * kWarps;   // the forward's query rows a block owns (128)

// A block's tiles [rows, ld_tile]: a and b stay (forward: Q [128] in a; dQ: Q, dO; dK/dV: K, V),
// c and d stream by in NB buffers each (forward and dQ: K, V; dK/dV: Q, dO), with the rows' lse·log2
// e and Δ (backward; dQ's stay in buffer 0). NB = 2 loads tile j + 1 while tile j is worked on, at
// 104 KB a block: two blocks an SM where it has 228 KB (sm_90), as the registers allow anyway;
// NB = 1 (70 KB) where it has less (sm_80: 164 KB).
template <int HD, bool backward, int NB> struct MmaSmem {
    bf16 *a, *b, *c[2], *d[2];
    float *lse2[2], *dl[2];
    // buffer i of each (a select, not an index: a run-time index would put the arrays in local memory)
    __device__ bf16 *tile_c(int i) const { return i ? c[1] : c[0]; }
    __device__ bf16 *tile_d(int i) const { return i ? d[1] : d[0]; }
    __device__ float *rows_lse(int i) const { return i ? lse2[1] : lse2[0]; }
    __device__ float *rows_dl(int i) const { return i ? dl[1] : dl[0]; }
    __host__ __device__ MmaSmem(Carve &cv) {
        constexpr int T = kTile * ld_tile<bf16, HD>();
        a = cv.take<bf16>((backward ? kTile : kQTile) * ld_tile<bf16, HD>());
        b = backward ? cv.take<bf16>(T) : NULL;
        for (int i = 0; i < 2; i++) {
            c[i] = i < NB ? cv.take<bf16>(T) : c[0];
            d[i] = i < NB ? cv.take<bf16>(T) : d[0];
            lse2[i] = backward && i < NB ? cv.take<float>(kTile) : lse2[0];
            dl[i] = backward && i < NB ? cv.take<float>(kTile) : dl[0];
        }
    }
};

template <int N> __device__ __forceinline__ void zero(float (&x)[N][4]) {
    #pragma unroll
    for (int i = 0; i < N; i++) x[i][0] = x[i][1] = x[i][2] = x[i][3] = 0.0f;
}

// acc[r][n] += A_r·B_n for a warp: A_r its rows [r0 + 16r, r0 + 16r + 16) of tile `a` [.., HD]; B_n
// the rows 8n..8n+7 of tile `b` (as B[k][n] = b[n][k]), each fragment read once for the R row
// blocks; pairs of blocks p in [p0, p1) only (uniform in the warp). ALL: every pair, p0 and p1
// unread — the tiles off the diagonal, whose loops then unroll into one basic block (with the
// bounds at run time each pair is a block of its own behind a branch, and ptxas cannot start a
// pair's ldmatrix before the previous pair's products).
template <int HD, int R, bool ALL = false>
__device__ __forceinline__ void mma_abt(float (&acc)[R][NS][4], const bf16 *a, int r0, const bf16 *b, int p0, int p1) {
    constexpr int LD = ld_tile<bf16, HD>();
    #pragma unroll
    for (int k = 0; k < HD / 16; k++) {
        uint32_t fa[R][4];
        #pragma unroll
        for (int r = 0; r < R; r++) ldsm_x4(fa[r], ldsm_a(a, LD, r0 + 16 * r, 16 * k));
        #pragma unroll
        for (int p = 0; p < NS / 2; p++) {
            if (!ALL && (p < p0 || p >= p1)) continue;
            uint32_t fb[4];
            ldsm_x4(fb, ldsm_bt(b, LD, 16 * p, 16 * k));
            const uint32_t b0[2] = {fb[0], fb[1]}, b1[2] = {fb[2], fb[3]};
            #pragma unroll
            for (int r = 0; r < R; r++) {
                mma_bf16_16816(acc[r][2 * p], fa[r], b0);
                mma_bf16_16816(acc[r][2 * p + 1], fa[r], b1);
            }
        }
    }
}
template <int HD, bool ALL = false>
__device__ __forceinline__ void mma_abt(float (&acc)[NS][4], const bf16 *a, int r0, const bf16 *b, int p0, int p1) {
    mma_abt<HD, 1, ALL>(reinterpret_cast<float(&)[1][NS][4]>(acc), a, r0, b, p0, p1);
}

// out[r][n] += X_r·V for a warp: X_r [16, 64] in registers (x[r]: its 8 accumulators, rounded to
// bf16), V the tile `v` [64, HD] (as B[k][n] = v[k][n]), each fragment read once for the R row
// blocks; 16-row steps s in [p0, p1) only (ALL: every step, as mma_abt).
template <int HD, int R, bool ALL = false>
__device__ __forceinline__ void mma_xv(float (&out)[R][HD / 8][4], const float (&x)[R][NS][4], const bf16 *v, int p0,
                                       int p1) {
    constexpr int LD = ld_tile<bf16, HD>();
    #pragma unroll
    for (int s = 0; s < NS / 2; s++) {
        if (!ALL && (s < p0 || s >= p1)) continue;
        uint32_t fa[R][4];
        #pragma unroll
        for (int r = 0; r < R; r++) {
            fa[r][0] = pack_bf16(x[r][2 * s][0], x[r][2 * s][1]);
            fa[r][1] = pack_bf16(x[r][2 * s][2], x[r][2 * s][3]);
            fa[r][2] = pack_bf16(x[r][2 * s + 1][0], x[r][2 * s + 1][1]);
            fa[r][3] = pack_bf16(x[r][2 * s + 1][2], x[r][2 * s + 1][3]);
        }
        #pragma unroll
        for (int n = 0; n < HD / 16; n++) {
            uint32_t fb[4];
            ldsm_x4_t(fb, ldsm_b(v, LD, 16 * s, 16 * n));
            const uint32_t b0[2] = {fb[0], fb[1]}, b1[2] = {fb[2], fb[3]};
            #pragma unroll
            for (int r = 0; r < R; r++) {
                mma_bf16_16816(out[r][2 * n], fa[r], b0);
                mma_bf16_16816(out[r][2 * n + 1], fa[r], b1);
            }
        }
    }
}
template <int HD, bool ALL = false>
__device__ __forceinline__ void mma_xv(float (&out)[HD / 8][4], const float (&x)[NS][4], const bf16 *v, int p0, int p1) {
    mma_xv<HD, 1, ALL>(reinterpret_cast<float(&)[1][HD / 8][4]>(out), reinterpret_cast<const float(&)[1][NS][4]>(x), v,
                       p0, p1);
}

// sum (or max) over the 4 lanes of a group: the lanes that share a row
__device__ __forceinline__ float quad_sum(float x) {
    x += __shfl_xor_sync(kFull, x, 1);
    return x + __shfl_xor_sync(kFull, x, 2);
}
__device__ __forceinline__ float quad_max(float x) {
    x = fmaxf(x, __shfl_xor_sync(kFull, x, 1));
    return fmaxf(x, __shfl_xor_sync(kFull, x, 2));
}

// an output element: bf16 (rounded to nearest even) or fp32
__device__ __forceinline__ void put(bf16 *p, float x) { *p = __float2bfloat16_rn(x); }
__device__ __forceinline__ void put(float *p, float x) { *p = x; }

// Rows of a warp's accumulators (rows of HD/8 blocks) to global, bf16 or fp32: row r0 + g + 8·i
// of dst (row stride ld), columns below hd, rows below T, each value times mul[i].
template <int N, class O> __device__ void store_acc(O *dst, long ld, const float (&x)[N][4], int r0, int T, int hd,
                                                    const float (&mul)[2]) {
    int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    #pragma unroll
    for (int i = 0; i < 2; i++) {
        int r = r0 + g + 8 * i;
        if (r >= T) continue;
        #pragma unroll
        for (int n = 0; n < N; n++)
            #pragma unroll
            for (int e = 0; e < 2; e++) {
                int c = 8 * n + 2 * t + e;
                if (c < hd) put(dst + (long)r * ld + c, x[n][2 * i + e] * mul[i]);
            }
    }
}

// ---- forward -------------------------------------------------------------------------------
// The online softmax of a warp's scores s (rows t0 + g + 8i, keys u0 + 8n + 2t + e) in place:
// s ← P = exp2(S·c − m) with m the running max (m[i]), l[i] the lane's part of the running sum,
// o rescaled by exp2(m_old − m). Masked (MASK, the diagonal's tiles): key > query.
template <int NO, bool MASK>
__device__ __forceinline__ void online_softmax(float (&s)[NS][4], float (&o)[NO][4], float (&m)[2], float (&l)[2],
                                               int t0, int u0, float c) {
    int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    #pragma unroll
    for (int i = 0; i < 2; i++) {
        int q = t0 + g + 8 * i;
        float mx = -INFINITY;   // the row's largest score unscaled (c > 0: the scaled one's place too)
        #pragma unroll
        for (int n = 0; n < NS; n++)
            #pragma unroll
            for (int e = 0; e < 2; e++) {
                if (MASK && u0 + 8 * n + 2 * t + e > q) s[n][2 * i + e] = -INFINITY;
                mx = fmaxf(mx, s[n][2 * i + e]);
            }
        float m_new = fmaxf(m[i], quad_max(mx) * c), ref = m_new == -INFINITY ? 0.0f : m_new, sum = 0.0f;
        float alpha = exp2f(m[i] - ref);
        m[i] = m_new;
        #pragma unroll
        for (int n = 0; n < NS; n++)
            #pragma unroll
            for (int e = 0; e < 2; e++) {
                float p = exp2f(fmaf(s[n][2 * i + e], c, -ref));   // the scale folded in: one FFMA
                s[n][2 * i + e] = p;
                sum += p;
            }
        l[i] = l[i] * alpha + sum;
        #pragma unroll
        for (int n = 0; n < NO; n++) o[n][2 * i] *= alpha, o[n][2 * i + 1] *= alpha;
    }
}

// A warp's scores over key tile u0 (its kRows row blocks from t0), s ← P and the running o, m, l
// updated (online_softmax). MASK: the diagonal's tiles, np 16-key steps; else all of them.
template <int HD, bool MASK>
__device__ __forceinline__ void scores(float (&s)[kRows][NS][4], float (&o)[kRows][HD / 8][4], float (&m)[kRows][2],
                                       float (&l)[kRows][2], const bf16 *q, const bf16 *k, int w, int t0, int u0,
                                       int np, float c) {
    #pragma unroll
    for (int r = 0; r < kRows; r++) zero(s[r]);
    mma_abt<HD, kRows, !MASK>(s, q, 16 * kRows * w, k, 0, np);
    #pragma unroll
    for (int r = 0; r < kRows; r++) online_softmax<HD / 8, MASK>(s[r], o[r], m[r], l[r], t0 + 16 * r, u0, c);
}

// O = softmax(Q·Kᵀ·scale, causal)·V and lse per query; block (x, y): query tile of 128 (last
// first), b·H + h. Warp w owns the rows [q0 + 32w, q0 + 32w + 32): it skips a key tile past its
// last row, masks one that reaches past its first, and leaves out the 16-key steps past its last.
// NB = 2: K_{j+1} and V_{j+1} load while tile j is worked on; NB = 1: V_j while S_j and its
// softmax run, K_{j+1} while P·V runs.
template <int HD, int NB>
__global__ void __launch_bounds__(kThreads) mma_forward_kernel(bf16 *out, float *lse, const bf16 *qkv, int T, int H,
                                                                int hd, float scale, int vec) {
    extern __shared__ __align__(128) unsigned char flash_smem[];
    Carve cv{flash_smem, 0};
    MmaSmem<HD, false, NB> sm(cv);   // a: Q [128], c: K, d: V
    const int w = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int q0 = (gridDim.x - 1 - blockIdx.x) * kQTile, t0 = q0 + 16 * kRows * w;
    const int last = (q0 + kQTile < T ? q0 + kQTile : T) - 1, nk = last / kTile + 1, mine = t0 + 16 * kRows - 1;
    const Head at = head_of(T, H, hd);
    const long D = at.D, ld = at.ld;
    const bf16 *q = qkv + at.x, *k = q + D, *v = q + 2 * D;
    auto stage = [&](int buf, int r0) {   // K and V from key r0 into buffer buf
        load_tile<bf16, HD>(sm.tile_c(buf), k, ld, r0, T, hd, vec);
        load_tile<bf16, HD>(sm.tile_d(buf), v, ld, r0, T, hd, vec);
    };
    load_tile<bf16, HD, kQTile>(sm.a, q, ld, q0, T, hd, vec);
    if (NB == 2) stage(0, 0);
    else load_tile<bf16, HD>(sm.c[0], k, ld, 0, T, hd, vec);
    __pipeline_commit();
    float o[kRows][HD / 8][4], m[kRows][2], l[kRows][2];
    #pragma unroll
    for (int r = 0; r < kRows; r++) {
        zero(o[r]);
        m[r][0] = m[r][1] = -INFINITY;
        l[r][0] = l[r][1] = 0.0f;
    }
    for (int j = 0; j < nk; j++) {
        const bf16 *kt = sm.tile_c(j % NB), *vt = sm.tile_d(j % NB);
        __pipeline_wait_prior(0);
        __syncthreads();   // K_j (NB 2: and V_j) is in; every warp is done with tile j − 1
        if (NB == 1) load_tile<bf16, HD>(sm.d[0], v, ld, j * kTile, T, hd, vec);
        else if (j + 1 < nk) stage((j + 1) % NB, (j + 1) * kTile);
        __pipeline_commit();
        const int u0 = j * kTile, seen = mine - u0;   // keys of the tile up to u0 + seen are before some row of the warp
        const bool any = seen >= 0, diag = u0 + kTile - 1 > t0;
        const int np = seen / 16 + 1 < NS / 2 ? seen / 16 + 1 : NS / 2;   // 16-key steps some row of the warp sees
        float s[kRows][NS][4];
        if (diag && any) scores<HD, true>(s, o, m, l, sm.a, kt, w, t0, u0, np, scale * kLog2e);
        else if (!diag) scores<HD, false>(s, o, m, l, sm.a, kt, w, t0, u0, NS / 2, scale * kLog2e);
        if (NB == 1) {
            __pipeline_wait_prior(0);
            __syncthreads();   // V_j is in; every warp is done with K_j
            if (j + 1 < nk) load_tile<bf16, HD>(sm.c[0], k, ld, (j + 1) * kTile, T, hd, vec);
            __pipeline_commit();
        }
        if (diag && any) mma_xv<HD, kRows>(o, s, vt, 0, np);
        else if (!diag) mma_xv<HD, kRows, true>(o, s, vt, 0, NS / 2);
    }
    #pragma unroll
    for (int r = 0; r < kRows; r++) {
        float inv[2];
        #pragma unroll
        for (int i = 0; i < 2; i++) {
            float sum = quad_sum(l[r][i]);
            int t = t0 + 16 * r + lane / 4 + 8 * i;
            if (lane % 4 == 0 && t < T) lse[(long)blockIdx.y * T + t] = (m[r][i] + log2f(sum)) * kLn2;
            inv[i] = 1.0f / sum;
        }
        store_acc<HD / 8>(out + at.o, D, o[r], t0 + 16 * r, T, hd, inv);
    }
}

// ---- backward ------------------------------------------------------------------------------
// dp ← dS = P∘(dP − Δ)·scale and s ← P = exp2(S·c − lse2) for a warp's accumulators: rows r0 + g +
// 8i, columns u0 + 8n + 2t + e. rows_are_queries: row = query (lse2, dl by row, from the warp's
// place w·16 in the tile), else row = key and column = query (lse2, dl by column). Masked (mask):
// key > query or query ≥ T.
template <bool rows_are_queries, bool MASK>
__device__ __forceinline__ void softmax_grad(float (&s)[NS][4], float (&dp)[NS][4], const float *lse2, const float *dl,
                                             int r0, int u0, int T, float c, float scale) {
    int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4, w = threadIdx.x / 32;
    #pragma unroll
    for (int i = 0; i < 2; i++)
        #pragma unroll
        for (int n = 0; n < NS; n++)
            #pragma unroll
            for (int e = 0; e < 2; e++) {
                int row = r0 + g + 8 * i, col = u0 + 8 * n + 2 * t + e;
                int x = rows_are_queries ? 16 * w + g + 8 * i : 8 * n + 2 * t + e;   // the query's place
                int tq = rows_are_queries ? row : col, tk = rows_are_queries ? col : row;
                float p = MASK && (tk > tq || tq >= T) ? 0.0f : exp2f(s[n][2 * i + e] * c - lse2[x]);
                s[n][2 * i + e] = p;
                dp[n][2 * i + e] = p * (dp[n][2 * i + e] - dl[x]) * scale;
            }
}

// The dQ kernel's two halves over key tile j (u0) for a warp's 16 query rows from t0: S and dP
// (np 16-key steps; MASK: the diagonal tile, else all), then dS and dq += dS·K_j.
template <int HD, bool MASK>
__device__ __forceinline__ void dq_scores(float (&s)[NS][4], float (&dp)[NS][4], const bf16 *q, const bf16 *dO,
                                          const bf16 *k, const bf16 *v, int w, int np) {
    zero(s);
    zero(dp);
    mma_abt<HD, !MASK>(s, q, 16 * w, k, 0, np);
    mma_abt<HD, !MASK>(dp, dO, 16 * w, v, 0, np);
}
template <int HD, bool MASK>
__device__ __forceinline__ void dq_accumulate(float (&dq)[HD / 8][4], float (&s)[NS][4], float (&dp)[NS][4],
                                              const float *lse2, const float *dl, const bf16 *k, int t0, int u0, int T,
                                              int np, float scale) {
    softmax_grad<true, MASK>(s, dp, lse2, dl, t0, u0, T, scale * kLog2e, scale);
    mma_xv<HD, !MASK>(dq, dp, k, 0, np);
}

// dQ (and Δ into delta) for a query tile; block (x, y): query tile (last first), b·H + h.
// dqkv: bf16, or fp32 for a caller that wants the gradient wide (no widening pass after). NB = 2:
// K_{j+1} and V_{j+1} load while tile j is worked on; NB = 1: V_{j+1} during dS and dQ, K_{j+1} after.
template <int HD, class O, int NB>
__global__ void __launch_bounds__(kThreads) mma_dq_kernel(O *dqkv, float *delta, const bf16 *dout, const bf16 *out,
                                                           const bf16 *qkv, const float *lse, int T, int H, int hd,
                                                           float scale, int vec) {
    extern __shared__ __align__(128) unsigned char flash_smem[];
    Carve cv{flash_smem, 0};
    MmaSmem<HD, true, NB> sm(cv);   // a: Q, b: dO, c: K, d: V
    const int w = threadIdx.x / 32;
    const int q0 = (gridDim.x - 1 - blockIdx.x) * kTile, t0 = q0 + 16 * w, nk = last_tile(q0, T) + 1;
    const Head at = head_of(T, H, hd);
    const long D = at.D, ld = at.ld, bt = at.bt;
    const bf16 *q = qkv + at.x, *k = q + D, *v = q + 2 * D, *dO = dout + at.o;
    auto stage = [&](int buf, int r0) {   // K and V from key r0 into buffer buf
        load_tile<bf16, HD>(sm.tile_c(buf), k, ld, r0, T, hd, vec);
        load_tile<bf16, HD>(sm.tile_d(buf), v, ld, r0, T, hd, vec);
    };
    load_tile<bf16, HD>(sm.a, q, ld, q0, T, hd, vec);
    load_tile<bf16, HD>(sm.b, dO, D, q0, T, hd, vec);
    stage(0, 0);
    __pipeline_commit();
    __pipeline_wait_prior(0);
    __syncthreads();
    float *lse2 = sm.lse2[0], *dl = sm.dl[0];   // the warp's own rows: no barrier after
    delta_rows<bf16, HD>(dl + 16 * w, lse2 + 16 * w, delta + bt, lse + bt, sm.b + 16 * w * ld_tile<bf16, HD>(),
                         out + at.o, D, t0, T, hd);
    float dq[HD / 8][4];
    zero(dq);
    for (int j = 0; j < nk; j++) {
        const bf16 *kt = sm.tile_c(j % NB), *vt = sm.tile_d(j % NB);
        __pipeline_wait_prior(0);
        __syncthreads();   // K_j and V_j are in; every warp is done with tile j − 1
        if (NB == 2 && j + 1 < nk) {
            stage((j + 1) % NB, (j + 1) * kTile);
            __pipeline_commit();
        }
        const bool diag = j == nk - 1;   // uniform in the block
        float s[NS][4], dp[NS][4];
        if (diag) dq_scores<HD, true>(s, dp, sm.a, sm.b, kt, vt, w, w + 1);
        else dq_scores<HD, false>(s, dp, sm.a, sm.b, kt, vt, w, NS / 2);
        if (NB == 1) {
            __syncthreads();   // every warp is done with V_j: V_{j+1} loads during dS and dQ
            if (j + 1 < nk) load_tile<bf16, HD>(sm.d[0], v, ld, (j + 1) * kTile, T, hd, vec);
            __pipeline_commit();
        }
        if (diag) dq_accumulate<HD, true>(dq, s, dp, lse2, dl, kt, t0, j * kTile, T, w + 1, scale);
        else dq_accumulate<HD, false>(dq, s, dp, lse2, dl, kt, t0, j * kTile, T, NS / 2, scale);
        if (NB == 1) {
            __syncthreads();   // every warp is done with K_j
            if (j + 1 < nk) load_tile<bf16, HD>(sm.c[0], k, ld, (j + 1) * kTile, T, hd, vec);
            __pipeline_commit();
        }
    }
    const float one[2] = {1.0f, 1.0f};
    store_acc<HD / 8>(dqkv + at.x, ld, dq, t0, T, hd, one);
}

// dv += Pᵀ·dO_i and dk += dSᵀ·Q_i for a warp's 16 keys from k0 + 16w over query tile i (u0): the
// queries' steps from p0 (MASK: the diagonal tile or one past T, else all of them).
template <int HD, bool MASK>
__device__ __forceinline__ void dkv_tile(float (&dk)[HD / 8][4], float (&dv)[HD / 8][4], const bf16 *k, const bf16 *v,
                                         const bf16 *q, const bf16 *dO, const float *lse2, const float *dl, int w,
                                         int k0, int u0, int T, int p0, float scale) {
    float st[NS][4], dpt[NS][4];
    zero(st);
    zero(dpt);
    mma_abt<HD, !MASK>(st, k, 16 * w, q, p0, NS / 2);
    mma_abt<HD, !MASK>(dpt, v, 16 * w, dO, p0, NS / 2);
    softmax_grad<false, MASK>(st, dpt, lse2, dl, k0 + 16 * w, u0, T, scale * kLog2e, scale);
    mma_xv<HD, !MASK>(dv, st, dO, p0, NS / 2);
    mma_xv<HD, !MASK>(dk, dpt, q, p0, NS / 2);
}

// The lse and Δ of queries [u0, u0 + 64) into lse2 and dl by asynchronous copies (0 past T); the
// thread that copied an lse turns it into lse·log2 e once its copies are in (lse_log2e).
__device__ __forceinline__ void load_rows(float *lse2, float *dl, const float *lse, const float *delta, int u0, int T) {
    for (int x = threadIdx.x; x < kTile; x += kThreads) {
        if (u0 + x < T) {
            __pipeline_memcpy_async(lse2 + x, lse + u0 + x, 4);
            __pipeline_memcpy_async(dl + x, delta + u0 + x, 4);
        } else lse2[x] = dl[x] = 0.0f;
    }
}
__device__ __forceinline__ void lse_log2e(float *lse2) {
    for (int x = threadIdx.x; x < kTile; x += kThreads) lse2[x] *= kLog2e;
}

// dK, dV for a key tile; block (x, y): key tile (first first: the most query tiles), b·H + h.
// NB = 2: Q_{i+1}, dO_{i+1} and their rows load while tile i is worked on; NB = 1: after it.
template <int HD, class O, int NB>
__global__ void __launch_bounds__(kThreads) mma_dkv_kernel(O *dqkv, const bf16 *dout, const bf16 *qkv,
                                                            const float *lse, const float *delta, int T, int H, int hd,
                                                            float scale, int vec) {
    extern __shared__ __align__(128) unsigned char flash_smem[];
    Carve cv{flash_smem, 0};
    MmaSmem<HD, true, NB> sm(cv);   // a: K, b: V, c: Q, d: dO
    const int w = threadIdx.x / 32, k0 = blockIdx.x * kTile;
    const int nq = (T - 1) / kTile + 1;
    const Head at = head_of(T, H, hd);
    const long D = at.D, ld = at.ld, bt = at.bt;
    const bf16 *q = qkv + at.x, *k = q + D, *v = q + 2 * D, *dO = dout + at.o;
    auto stage = [&](int buf, int r0) {   // Q, dO and their rows' lse, Δ from query r0 into buffer buf
        load_tile<bf16, HD>(sm.tile_c(buf), q, ld, r0, T, hd, vec);
        load_tile<bf16, HD>(sm.tile_d(buf), dO, D, r0, T, hd, vec);
        load_rows(sm.rows_lse(buf), sm.rows_dl(buf), lse + bt, delta + bt, r0, T);
    };
    load_tile<bf16, HD>(sm.a, k, ld, k0, T, hd, vec);
    load_tile<bf16, HD>(sm.b, v, ld, k0, T, hd, vec);
    stage(0, k0);
    __pipeline_commit();
    float dk[HD / 8][4], dv[HD / 8][4];
    zero(dk);
    zero(dv);
    for (int i = blockIdx.x; i < nq; i++) {
        const int b = (i - (int)blockIdx.x) % NB, nb = (b + 1) % NB, u0 = i * kTile;
        __pipeline_wait_prior(0);
        lse_log2e(sm.rows_lse(b));
        __syncthreads();   // Q_i, dO_i and their rows' lse, Δ are in; every warp is done with tile i − 1
        if (NB == 2 && i + 1 < nq) {
            stage(nb, u0 + kTile);
            __pipeline_commit();
        }
        const bool diag = i == (int)blockIdx.x;
        const bf16 *qt = sm.tile_c(b), *ot = sm.tile_d(b);
        if (diag || u0 + kTile > T)   // from the warp's own 16-query step on the diagonal
            dkv_tile<HD, true>(dk, dv, sm.a, sm.b, qt, ot, sm.rows_lse(b), sm.rows_dl(b), w, k0, u0, T, diag ? w : 0,
                               scale);
        else dkv_tile<HD, false>(dk, dv, sm.a, sm.b, qt, ot, sm.rows_lse(b), sm.rows_dl(b), w, k0, u0, T, 0, scale);
        if (NB == 1) {
            __syncthreads();   // every warp is done with Q_i, dO_i, lse2 and dl
            if (i + 1 < nq) stage(0, u0 + kTile);
            __pipeline_commit();
        }
    }
    const float one[2] = {1.0f, 1.0f};
    O *dst = dqkv + at.x;
    store_acc<HD / 8>(dst + D, ld, dk, k0 + 16 * w, T, hd, one);
    store_acc<HD / 8>(dst + 2 * D, ld, dv, k0 + 16 * w, T, hd, one);
}

// ---- host ----------------------------------------------------------------------------------
// The streamed tiles' buffers: 2 where two blocks of that shared memory fit an SM (1 KB of it
// the system's, a block), else 1; TED_FLASH_BUFFERS=1 or 2 chooses (the tests run both).
template <int HD, bool backward> int buffers() {
    static int nb;
    if (!nb) {
        const char *e = getenv("TED_FLASH_BUFFERS");
        size_t need = 2 * (smem_bytes<MmaSmem<HD, backward, 2>>() + 1024);
        nb = e && (!strcmp(e, "1") || !strcmp(e, "2")) ? atoi(e) : cu_smem_per_sm() >= need ? 2 : 1;
    }
    return nb;
}

template <int HD, int NB> void forward_nb(bf16 *out, float *lse, const bf16 *qkv, int B, int T, int H, int hd) {
    static bool done;
    size_t bytes = smem_bytes<MmaSmem<HD, false, NB>>();
    allow_smem(mma_forward_kernel<HD, NB>, bytes, &done);
    dim3 grid((T + kQTile - 1) / kQTile, B * H);
    mma_forward_kernel<HD, NB><<<grid, kThreads, bytes, cu_stream()>>>(out, lse, qkv, T, H, hd,
                                                                       1.0f / sqrtf((float)hd),
                                                                       vec_ok<bf16>(hd, out, qkv, qkv));
    CU_LAUNCH_CHECK();
}
template <int HD> void forward(bf16 *out, float *lse, const bf16 *qkv, int B, int T, int H, int hd) {
    if (buffers<HD, false>() == 2) forward_nb<HD, 2>(out, lse, qkv, B, T, H, hd);
    else forward_nb<HD, 1>(out, lse, qkv, B, T, H, hd);
}

template <int HD, class O, int NB>
void backward_nb(O *dqkv, float *delta, const bf16 *dout, const bf16 *out, const bf16 *qkv, const float *lse, int B,
                 int T, int H, int hd) {
    static bool done_q, done_kv;
    size_t bytes = smem_bytes<MmaSmem<HD, true, NB>>();
    allow_smem(mma_dq_kernel<HD, O, NB>, bytes, &done_q);
    allow_smem(mma_dkv_kernel<HD, O, NB>, bytes, &done_kv);
    dim3 grid((T + kTile - 1) / kTile, B * H);
    float scale = 1.0f / sqrtf((float)hd);
    int vec = vec_ok<bf16>(hd, dqkv, dout, qkv) && vec_ok<bf16>(hd, out, out, out);
    mma_dq_kernel<HD, O, NB><<<grid, kThreads, bytes, cu_stream()>>>(dqkv, delta, dout, out, qkv, lse, T, H, hd,
                                                                     scale, vec);
    CU_LAUNCH_CHECK();
    mma_dkv_kernel<HD, O, NB><<<grid, kThreads, bytes, cu_stream()>>>(dqkv, dout, qkv, lse, delta, T, H, hd, scale,
                                                                      vec);
    CU_LAUNCH_CHECK();
}
template <int HD, class O> void backward(O *dqkv, float *delta, const bf16 *dout, const bf16 *out, const bf16 *qkv,
                                         const float *lse, int B, int T, int H, int hd) {
    if (buffers<HD, true>() == 2) backward_nb<HD, O, 2>(dqkv, delta, dout, out, qkv, lse, B, T, H, hd);
    else backward_nb<HD, O, 1>(dqkv, delta, dout, out, qkv, lse, B, T, H, hd);
}

}   // namespace

namespace flash {

void mma_forward(bf16 *out, float *lse, const bf16 *qkv, int B, int T, int H, int hd) {
    check_shape(B, H, hd);
    if ((long)B * H * T == 0) return;
    if (hd <= 64) forward<64>(out, lse, qkv, B, T, H, hd);
    else forward<128>(out, lse, qkv, B, T, H, hd);
}

template <class O> void backward_any(O *dqkv, float *delta, const bf16 *dout, const bf16 *out, const bf16 *qkv,
                                     const float *lse, int B, int T, int H, int hd) {
    check_shape(B, H, hd);
    if ((long)B * H * T == 0) return;
    if (hd <= 64) backward<64>(dqkv, delta, dout, out, qkv, lse, B, T, H, hd);
    else backward<128>(dqkv, delta, dout, out, qkv, lse, B, T, H, hd);
}

void mma_backward(bf16 *dqkv, float *delta, const bf16 *dout, const bf16 *out, const bf16 *qkv, const float *lse,
                  int B, int T, int H, int hd) {
    backward_any(dqkv, delta, dout, out, qkv, lse, B, T, H, hd);
}

void mma_backward(float *dqkv, float *delta, const bf16 *dout, const bf16 *out, const bf16 *qkv, const float *lse,
                  int B, int T, int H, int hd) {
    backward_any(dqkv, delta, dout, out, qkv, lse, B, T, H, hd);
}

}   // namespace flash
