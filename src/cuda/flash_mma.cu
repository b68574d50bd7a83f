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
// rows a warp the ldmatrix reads, not the tensor cores, bound it). The forward loads V_j while
// S_j and its softmax run, K_{j+1} while P·V runs; the backward computes
// dQ per query tile (S, dP, then dS·K), and dK, dV per key tile (Sᵀ, dPᵀ, then Pᵀ·dO and dSᵀ·Q),
// deterministic, no atomics. A and B operands come from shared memory by ldmatrix (B of Q·Kᵀ
// from the rows of K as they are, B of P·V from the rows of V transposed). Only the diagonal
// tile is masked; in it, a warp leaves out the 8-key blocks that every one of its rows masks.
#include "cuda_ops.h"
#include "flash.cuh"
#include "mma.cuh"

namespace {
using namespace flash;
typedef __nv_bfloat16 bf16;
constexpr int NS = kTile / 8;   // 8-column blocks of a warp's scores over a tile (8)
constexpr int kRows = 2;        // 16-row blocks a warp owns in the forward
constexpr int kQTile = 16 * kRows * kWarps;   // the forward's query rows a block owns (128)

template <int HD, bool backward> struct MmaSmem {
    bf16 *a, *b, *c, *d;     // tiles [64, ld_tile] (the forward's q: [128, ld_tile]): forward q, k,
                             // v; backward q, dO, k, v
    float *lse2, *dl;        // backward, per row of the query tile: lse·log2 e, Δ
    __host__ __device__ MmaSmem(Carve &cv) {
        a = cv.take<bf16>((backward ? kTile : kQTile) * ld_tile<bf16, HD>());
        b = cv.take<bf16>(kTile * ld_tile<bf16, HD>());
        c = cv.take<bf16>(kTile * ld_tile<bf16, HD>());
        d = backward ? cv.take<bf16>(kTile * ld_tile<bf16, HD>()) : NULL;
        lse2 = backward ? cv.take<float>(kTile) : NULL;
        dl = backward ? cv.take<float>(kTile) : NULL;
    }
};

template <int N> __device__ __forceinline__ void zero(float (&x)[N][4]) {
    #pragma unroll
    for (int i = 0; i < N; i++) x[i][0] = x[i][1] = x[i][2] = x[i][3] = 0.0f;
}

// acc[r][n] += A_r·B_n for a warp: A_r its rows [r0 + 16r, r0 + 16r + 16) of tile `a` [.., HD]; B_n
// the rows 8n..8n+7 of tile `b` (as B[k][n] = b[n][k]), each fragment read once for the R row
// blocks; blocks n < 2·np only (np pairs, uniform in the warp).
template <int HD, int R>
__device__ __forceinline__ void mma_abt(float (&acc)[R][NS][4], const bf16 *a, int r0, const bf16 *b, int p0, int p1) {
    constexpr int LD = ld_tile<bf16, HD>();
    #pragma unroll
    for (int k = 0; k < HD / 16; k++) {
        uint32_t fa[R][4];
        #pragma unroll
        for (int r = 0; r < R; r++) ldsm_x4(fa[r], ldsm_a(a, LD, r0 + 16 * r, 16 * k));
        #pragma unroll
        for (int p = 0; p < NS / 2; p++) {
            if (p < p0 || p >= p1) continue;
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
template <int HD> __device__ __forceinline__ void mma_abt(float (&acc)[NS][4], const bf16 *a, int r0, const bf16 *b,
                                                         int p0, int p1) {
    mma_abt<HD, 1>(reinterpret_cast<float(&)[1][NS][4]>(acc), a, r0, b, p0, p1);
}

// out[r][n] += X_r·V for a warp: X_r [16, 64] in registers (x[r]: its 8 accumulators, rounded to
// bf16), V the tile `v` [64, HD] (as B[k][n] = v[k][n]), each fragment read once for the R row
// blocks; 16-row steps s in [p0, p1) only.
template <int HD, int R>
__device__ __forceinline__ void mma_xv(float (&out)[R][HD / 8][4], const float (&x)[R][NS][4], const bf16 *v, int p0,
                                       int p1) {
    constexpr int LD = ld_tile<bf16, HD>();
    #pragma unroll
    for (int s = 0; s < NS / 2; s++) {
        if (s < p0 || s >= p1) continue;
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
template <int HD> __device__ __forceinline__ void mma_xv(float (&out)[HD / 8][4], const float (&x)[NS][4], const bf16 *v,
                                                        int p0, int p1) {
    mma_xv<HD, 1>(reinterpret_cast<float(&)[1][HD / 8][4]>(out), reinterpret_cast<const float(&)[1][NS][4]>(x), v, p0,
                  p1);
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
// o rescaled by exp2(m_old − m). Masked (diag): key > query.
template <int NO> __device__ __forceinline__ void online_softmax(float (&s)[NS][4], float (&o)[NO][4], float (&m)[2],
                                                                 float (&l)[2], int t0, int u0, bool diag, float c) {
    int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    #pragma unroll
    for (int i = 0; i < 2; i++) {
        int q = t0 + g + 8 * i;
        float mx = -INFINITY;
        #pragma unroll
        for (int n = 0; n < NS; n++)
            #pragma unroll
            for (int e = 0; e < 2; e++) {
                float v = s[n][2 * i + e] * c;
                if (diag && u0 + 8 * n + 2 * t + e > q) v = -INFINITY;
                s[n][2 * i + e] = v;
                mx = fmaxf(mx, v);
            }
        float m_new = fmaxf(m[i], quad_max(mx)), ref = m_new == -INFINITY ? 0.0f : m_new, sum = 0.0f;
        float alpha = exp2f(m[i] - ref);
        m[i] = m_new;
        #pragma unroll
        for (int n = 0; n < NS; n++)
            #pragma unroll
            for (int e = 0; e < 2; e++) {
                float p = exp2f(s[n][2 * i + e] - ref);
                s[n][2 * i + e] = p;
                sum += p;
            }
        l[i] = l[i] * alpha + sum;
        #pragma unroll
        for (int n = 0; n < NO; n++) o[n][2 * i] *= alpha, o[n][2 * i + 1] *= alpha;
    }
}

// O = softmax(Q·Kᵀ·scale, causal)·V and lse per query; block (x, y): query tile of 128 (last
// first), b·H + h. Warp w owns the rows [q0 + 32w, q0 + 32w + 32): it skips a key tile past its
// last row, masks one that reaches past its first, and leaves out the 16-key steps past its last.
template <int HD>
__global__ void __launch_bounds__(kThreads) mma_forward_kernel(bf16 *out, float *lse, const bf16 *qkv, int T, int H,
                                                                int hd, float scale, int vec) {
    extern __shared__ __align__(128) unsigned char flash_smem[];
    Carve cv{flash_smem, 0};
    MmaSmem<HD, false> sm(cv);   // a: Q [128], b: K, c: V
    const int w = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int q0 = (gridDim.x - 1 - blockIdx.x) * kQTile, t0 = q0 + 16 * kRows * w;
    const int last = (q0 + kQTile < T ? q0 + kQTile : T) - 1, nk = last / kTile + 1, mine = t0 + 16 * kRows - 1;
    const Head at = head_of(T, H, hd);
    const long D = at.D, ld = at.ld;
    const bf16 *q = qkv + at.x, *k = q + D, *v = q + 2 * D;
    load_tile<bf16, HD, kQTile>(sm.a, q, ld, q0, T, hd, vec);
    load_tile<bf16, HD>(sm.b, k, ld, 0, T, hd, vec);
    __pipeline_commit();
    float o[kRows][HD / 8][4], m[kRows][2], l[kRows][2];
    #pragma unroll
    for (int r = 0; r < kRows; r++) {
        zero(o[r]);
        m[r][0] = m[r][1] = -INFINITY;
        l[r][0] = l[r][1] = 0.0f;
    }
    for (int j = 0; j < nk; j++) {
        __pipeline_wait_prior(0);
        __syncthreads();   // K_j is in; every warp is done with V_{j-1}
        load_tile<bf16, HD>(sm.c, v, ld, j * kTile, T, hd, vec);
        __pipeline_commit();
        const int u0 = j * kTile, seen = mine - u0;   // keys of the tile up to u0 + seen are before some row of the warp
        const bool any = seen >= 0, diag = u0 + kTile - 1 > t0;
        const int np = seen / 16 + 1 < NS / 2 ? seen / 16 + 1 : NS / 2;   // 16-key steps some row of the warp sees
        float s[kRows][NS][4];
        if (any) {
            #pragma unroll
            for (int r = 0; r < kRows; r++) zero(s[r]);
            mma_abt<HD, kRows>(s, sm.a, 16 * kRows * w, sm.b, 0, np);
            #pragma unroll
            for (int r = 0; r < kRows; r++) online_softmax<HD / 8>(s[r], o[r], m[r], l[r], t0 + 16 * r, u0, diag, scale * kLog2e);
        }
        __pipeline_wait_prior(0);
        __syncthreads();   // V_j is in; every warp is done with K_j
        if (j + 1 < nk) load_tile<bf16, HD>(sm.b, k, ld, (j + 1) * kTile, T, hd, vec);
        __pipeline_commit();
        if (any) mma_xv<HD, kRows>(o, s, sm.c, 0, np);
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
template <bool rows_are_queries>
__device__ __forceinline__ void softmax_grad(float (&s)[NS][4], float (&dp)[NS][4], const float *lse2, const float *dl,
                                             int r0, int u0, int T, bool mask, float c, float scale) {
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
                float p = mask && (tk > tq || tq >= T) ? 0.0f : exp2f(s[n][2 * i + e] * c - lse2[x]);
                s[n][2 * i + e] = p;
                dp[n][2 * i + e] = p * (dp[n][2 * i + e] - dl[x]) * scale;
            }
}

// dQ (and Δ into delta) for a query tile; block (x, y): query tile (last first), b·H + h.
// dqkv: bf16, or fp32 for a caller that wants the gradient wide (no widening pass after).
template <int HD, class O>
__global__ void __launch_bounds__(kThreads) mma_dq_kernel(O *dqkv, float *delta, const bf16 *dout, const bf16 *out,
                                                           const bf16 *qkv, const float *lse, int T, int H, int hd,
                                                           float scale, int vec) {
    extern __shared__ __align__(128) unsigned char flash_smem[];
    Carve cv{flash_smem, 0};
    MmaSmem<HD, true> sm(cv);   // a: Q, b: dO, c: K, d: V
    const int w = threadIdx.x / 32;
    const int q0 = (gridDim.x - 1 - blockIdx.x) * kTile, t0 = q0 + 16 * w, nk = last_tile(q0, T) + 1;
    const Head at = head_of(T, H, hd);
    const long D = at.D, ld = at.ld, bt = at.bt;
    const bf16 *q = qkv + at.x, *k = q + D, *v = q + 2 * D, *dO = dout + at.o;
    load_tile<bf16, HD>(sm.a, q, ld, q0, T, hd, vec);
    load_tile<bf16, HD>(sm.b, dO, D, q0, T, hd, vec);
    load_tile<bf16, HD>(sm.c, k, ld, 0, T, hd, vec);
    load_tile<bf16, HD>(sm.d, v, ld, 0, T, hd, vec);
    __pipeline_commit();
    __pipeline_wait_prior(0);
    __syncthreads();
    delta_rows<bf16, HD>(sm.dl + 16 * w, sm.lse2 + 16 * w, delta + bt, lse + bt, sm.b + 16 * w * ld_tile<bf16, HD>(),
                         out + at.o, D, t0, T, hd);
    float dq[HD / 8][4];
    zero(dq);
    for (int j = 0; j < nk; j++) {
        __pipeline_wait_prior(0);
        __syncthreads();   // K_j and V_j are in
        bool diag = j == nk - 1;
        int np = diag ? w + 1 : NS / 2;
        float s[NS][4], dp[NS][4];
        zero(s);
        zero(dp);
        mma_abt<HD>(s, sm.a, 16 * w, sm.c, 0, np);
        mma_abt<HD>(dp, sm.b, 16 * w, sm.d, 0, np);
        __syncthreads();   // every warp is done with V_j: V_{j+1} loads during dS and dQ
        if (j + 1 < nk) load_tile<bf16, HD>(sm.d, v, ld, (j + 1) * kTile, T, hd, vec);
        __pipeline_commit();
        softmax_grad<true>(s, dp, sm.lse2, sm.dl, t0, j * kTile, T, diag, scale * kLog2e, scale);
        mma_xv<HD>(dq, dp, sm.c, 0, np);
        __syncthreads();   // every warp is done with K_j
        if (j + 1 < nk) load_tile<bf16, HD>(sm.c, k, ld, (j + 1) * kTile, T, hd, vec);
        __pipeline_commit();
    }
    const float one[2] = {1.0f, 1.0f};
    store_acc<HD / 8>(dqkv + at.x, ld, dq, t0, T, hd, one);
}

// dK, dV for a key tile; block (x, y): key tile (first first: the most query tiles), b·H + h.
template <int HD, class O>
__global__ void __launch_bounds__(kThreads) mma_dkv_kernel(O *dqkv, const bf16 *dout, const bf16 *qkv,
                                                            const float *lse, const float *delta, int T, int H, int hd,
                                                            float scale, int vec) {
    extern __shared__ __align__(128) unsigned char flash_smem[];
    Carve cv{flash_smem, 0};
    MmaSmem<HD, true> sm(cv);   // a: K, b: V, c: Q, d: dO
    const int w = threadIdx.x / 32, k0 = blockIdx.x * kTile;
    const int nq = (T - 1) / kTile + 1;
    const Head at = head_of(T, H, hd);
    const long D = at.D, ld = at.ld, bt = at.bt;
    const bf16 *q = qkv + at.x, *k = q + D, *v = q + 2 * D, *dO = dout + at.o;
    load_tile<bf16, HD>(sm.a, k, ld, k0, T, hd, vec);
    load_tile<bf16, HD>(sm.b, v, ld, k0, T, hd, vec);
    load_tile<bf16, HD>(sm.c, q, ld, k0, T, hd, vec);
    load_tile<bf16, HD>(sm.d, dO, D, k0, T, hd, vec);
    __pipeline_commit();
    float dk[HD / 8][4], dv[HD / 8][4];
    zero(dk);
    zero(dv);
    for (int i = blockIdx.x; i < nq; i++) {
        for (int x = threadIdx.x; x < kTile; x += kThreads) {
            int t = i * kTile + x;
            sm.lse2[x] = t < T ? lse[bt + t] * kLog2e : 0.0f;
            sm.dl[x] = t < T ? delta[bt + t] : 0.0f;
        }
        __pipeline_wait_prior(0);
        __syncthreads();   // Q_i, dO_i and their rows' lse, Δ are in
        bool diag = i == (int)blockIdx.x, mask = diag || (i + 1) * kTile > T;
        int p0 = diag ? w : 0;   // 16-query steps that some key of the warp is seen by
        float st[NS][4], dpt[NS][4];
        zero(st);
        zero(dpt);
        mma_abt<HD>(st, sm.a, 16 * w, sm.c, p0, NS / 2);
        mma_abt<HD>(dpt, sm.b, 16 * w, sm.d, p0, NS / 2);
        softmax_grad<false>(st, dpt, sm.lse2, sm.dl, k0 + 16 * w, i * kTile, T, mask, scale * kLog2e, scale);
        mma_xv<HD>(dv, st, sm.d, p0, NS / 2);
        mma_xv<HD>(dk, dpt, sm.c, p0, NS / 2);
        __syncthreads();   // every warp is done with Q_i, dO_i, lse2 and dl
        if (i + 1 < nq) {
            load_tile<bf16, HD>(sm.c, q, ld, (i + 1) * kTile, T, hd, vec);
            load_tile<bf16, HD>(sm.d, dO, D, (i + 1) * kTile, T, hd, vec);
        }
        __pipeline_commit();
    }
    const float one[2] = {1.0f, 1.0f};
    O *dst = dqkv + at.x;
    store_acc<HD / 8>(dst + D, ld, dk, k0 + 16 * w, T, hd, one);
    store_acc<HD / 8>(dst + 2 * D, ld, dv, k0 + 16 * w, T, hd, one);
}

// ---- host ----------------------------------------------------------------------------------
template <int HD> void forward(bf16 *out, float *lse, const bf16 *qkv, int B, int T, int H, int hd) {
    static bool done;
    size_t bytes = smem_bytes<MmaSmem<HD, false>>();
    allow_smem(mma_forward_kernel<HD>, bytes, &done);
    dim3 grid((T + kQTile - 1) / kQTile, B * H);
    mma_forward_kernel<HD><<<grid, kThreads, bytes, cu_stream()>>>(out, lse, qkv, T, H, hd, 1.0f / sqrtf((float)hd),
                                                                   vec_ok<bf16>(hd, out, qkv, qkv));
    CU_LAUNCH_CHECK();
}

template <int HD, class O> void backward(O *dqkv, float *delta, const bf16 *dout, const bf16 *out, const bf16 *qkv,
                                         const float *lse, int B, int T, int H, int hd) {
    static bool done_q, done_kv;
    size_t bytes = smem_bytes<MmaSmem<HD, true>>();
    allow_smem(mma_dq_kernel<HD, O>, bytes, &done_q);
    allow_smem(mma_dkv_kernel<HD, O>, bytes, &done_kv);
    dim3 grid((T + kTile - 1) / kTile, B * H);
    float scale = 1.0f / sqrtf((float)hd);
    int vec = vec_ok<bf16>(hd, dqkv, dout, qkv) && vec_ok<bf16>(hd, out, out, out);
    mma_dq_kernel<HD, O><<<grid, kThreads, bytes, cu_stream()>>>(dqkv, delta, dout, out, qkv, lse, T, H, hd, scale, vec);
    CU_LAUNCH_CHECK();
    mma_dkv_kernel<HD, O><<<grid, kThreads, bytes, cu_stream()>>>(dqkv, dout, qkv, lse, delta, T, H, hd, scale, vec);
    CU_LAUNCH_CHECK();
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
