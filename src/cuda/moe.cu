// moe.cu — the MoE layer on the GPU: router (router.c), dispatcher (dispatcher.c) and experts
// (experts.c), with the semantics of the CPU functions (see cuda_ops.h). Each kernel follows
// its CPU loop; the comments name the loop it replaces.
#include "common.cuh"
#include "moe/router_token.h"
#include "nn/fresh.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { THREADS = 256, WARPS = 4 };

using cu::blocks_for;   // one thread per item (the loops also stride)

// A host buffer likewise (plain malloc).
static void *grow_host(void **buf, size_t *cap, size_t bytes) {
    if (bytes > *cap) {
        free(*buf);
        *buf = malloc(bytes);
        if (!*buf) { fprintf(stderr, "ted: out of host memory (%zu bytes)\n", bytes); exit(1); }
        *cap = bytes;
    }
    return *buf;
}

// =======================================================================================
// router (router.c)

// One thread per token: softmax in place, logsumexp, top-k (strictly greater wins: ties to
// the lower index), gates (normalised over the k choices when k > 1).
static __global__ void router_topk_kernel(float *probs, float *lse, int *choice, float *gate, long N, int E, int k) {
    long t = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= N) return;
    float *p = probs + t * E, mx = -INFINITY;
    double s = 0;
    for (int e = 0; e < E; e++) mx = p[e] > mx ? p[e] : mx;
    for (int e = 0; e < E; e++) s += exp((double)(p[e] - mx));
    lse[t] = (float)(log(s) + mx);
    for (int e = 0; e < E; e++) p[e] = (float)exp((double)(p[e] - mx)) / (float)s;
    int *ch = choice + t * k;
    float sum = 0;
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int e = 0; e < E; e++) {
            int taken = 0;
            for (int i = 0; i < j; i++) taken |= ch[i] == e;
            if (!taken && (best < 0 || p[e] > p[best])) best = e;
        }
        ch[j] = best;
        sum += p[best];
    }
    for (int j = 0; j < k; j++) gate[t * k + j] = k == 1 ? p[ch[0]] : p[ch[j]] / sum;
}

// One block per (group g, expert e): the group's choices in the CPU's order (choice rank j
// outer, token t inner) are scanned for e; the i-th of them takes slot i while i < C, else it
// is dropped (slot -1). Every choice has one expert: one block writes its slot. kept, f_e =
// count/(k·S) as router.c (f_e += 1.0f per choice, then /= k·S), the drops, and P_e = Σ_t p_e
// (double, a fixed order). A deterministic scan: no atomics, any block order.
static __global__ void router_capacity_kernel(int *slot, float *fcount, int *kept, double *psum, int *ndrop,
                                              const int *choice, const float *probs, long N, int E, int k, int gt,
                                              int G, int C_full, int C_last) {
    __shared__ int wsum[32];
    __shared__ double sh[32];
    long i = blockIdx.x;   // (g, e)
    int g = (int)(i / E), e = (int)(i % E), lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    long t0 = (long)g * gt, S = N - t0 < gt ? N - t0 : gt, total = k * S, base = 0;   // base: e's choices so far
    int C = g == G - 1 ? C_last : C_full;
    for (long q0 = 0; q0 < total; q0 += blockDim.x) {   // block-uniform: a tile of choices
        long q = q0 + threadIdx.x, t = t0 + (q < total ? q % S : 0);
        int j = (int)(q / S), mine = q < total && choice[t * k + j] == e;
        unsigned b = __ballot_sync(0xffffffffu, mine);
        if (lane == 0) wsum[w] = __popc(b);
        __syncthreads();
        long before = base + __popc(b & ((1u << lane) - 1u)), tile = 0;
        for (int u = 0; u < nw; u++) { before += u < w ? wsum[u] : 0; tile += wsum[u]; }
        if (mine) slot[t * k + j] = before < C ? (int)before : -1;
        base += tile;
        __syncthreads();   // before the next tile rewrites wsum
    }
    double P = 0;
    for (long t = t0 + threadIdx.x; t < t0 + S; t += blockDim.x) P += probs[t * E + e];
    P = block_sum(P, sh);
    if (threadIdx.x == 0) {
        int used = base < C ? (int)base : C;
        fcount[i] = (float)base / (float)(k * S);
        kept[i] = used;
        ndrop[i] = (int)base - used;
        psum[i] = P;
    }
}

// One forward's statistics (router.h, ROUTER_SUMMARY): out = [Σ_g E·Σ_e f_e·P_e/S (router.c's
// l_aux), Σ lse², the drops, then per expert the kept rows and the choices before dropping
// (f_e·k·S) summed over the groups in order (the step's loads, gating.c)]. One block.
static __global__ void router_summary_kernel(double *out, const float *fcount, const int *kept, const double *psum,
                                             const int *ndrop, const float *lse, long N, int E, int k, int gt, int G) {
    __shared__ double sh[32];
    double aux = 0, z = 0, drop = 0;
    for (int g = threadIdx.x; g < G; g += blockDim.x) {
        long S = N - (long)g * gt < gt ? N - (long)g * gt : gt;
        double a = 0;
        for (int e = 0; e < E; e++) { a += fcount[(long)g * E + e] * (psum[(long)g * E + e] / S); drop += ndrop[(long)g * E + e]; }
        aux += E * a;
    }
    for (long t = threadIdx.x; t < N; t += blockDim.x) z += (double)lse[t] * lse[t];
    aux = block_sum(aux, sh);
    z = block_sum(z, sh);
    drop = block_sum(drop, sh);
    for (int e = threadIdx.x; e < E; e += blockDim.x) {
        double kc = 0, ld = 0;
        for (int g = 0; g < G; g++) {
            long S = N - (long)g * gt < gt ? N - (long)g * gt : gt;
            kc += kept[(long)g * E + e];
            ld += (double)fcount[(long)g * E + e] * k * S;
        }
        out[RS_KEPT + e] = kc;
        out[RS_KEPT + E + e] = ld;
    }
    if (threadIdx.x == 0) { out[RS_AUX] = aux; out[RS_Z] = z; out[RS_DROPPED] = drop; }
}

// a device double summary of E experts for the callers that give none (the op tests)
static double *own_summary(int E) {
    static void *buf;
    static size_t cap;
    return (double *)grow_dev(&buf, &cap, sizeof(double) * ROUTER_SUMMARY(E));
}

extern "C" void cu_router_forward(float *probs, float *lse, int *choice, float *gate, int *slot, float *fcount,
                                  int *kept, long N, const RouterCfg *c, RouterStats *st) {
    PROF(PROF_MOE);
    int E = c->E, k = c->k, gt = c->group_tokens;
    if (N <= 0) return;
    router_topk_kernel<<<blocks_for(N, 128), 128, 0, cu_stream()>>>(probs, lse, choice, gate, N, E, k);
    CU_LAUNCH_CHECK();
    int G = router_ngroups(N, gt);
    long S_last = N - (long)(G - 1) * gt, GE = (long)G * E;
    int C_full = router_capacity(c, gt), C_last = router_capacity(c, S_last);
    static void *d_psum, *d_ndrop;
    static size_t cap_psum, cap_ndrop;
    double *psum = (double *)grow_dev(&d_psum, &cap_psum, sizeof(double) * GE);
    int *ndrop = (int *)grow_dev(&d_ndrop, &cap_ndrop, sizeof(int) * GE);
    router_capacity_kernel<<<(unsigned)GE, THREADS, 0, cu_stream()>>>(slot, fcount, kept, psum, ndrop, choice, probs, N,
                                                                      E, k, gt, G, C_full, C_last);
    CU_LAUNCH_CHECK();
    double *sum = c->summary ? c->summary : own_summary(E);
    router_summary_kernel<<<1, THREADS, 0, cu_stream()>>>(sum, fcount, kept, psum, ndrop, lse, N, E, k, gt, G);
    CU_LAUNCH_CHECK();
    st->groups += G; st->tokens += N; st->choices += N * k;
    if (c->summary) return;   // the rest comes back with the dispatch plan's counts
    double h[3];
    cu_memcpy(h, sum, sizeof h);
    st->aux_sum += h[RS_AUX]; st->z_sum += h[RS_Z]; st->dropped += (long)h[RS_DROPPED];
}

// One thread per token, as router_backward's loop body.
static __global__ void router_backward_kernel(float *dlogits, const float *dgate, const float *probs, const float *lse,
                                              const int *choice, const float *fcount, long N, int E, int k, int gt,
                                              float aux_scale, float z_scale) {
    long t = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= N) return;
    int g = (int)(t / gt);
    long t0 = (long)g * gt, S = N - t0 < gt ? N - t0 : gt;
    router_backward_token(dlogits + t * E, probs + t * E, fcount + (long)g * E, choice + t * k, dgate + t * k, lse[t],
                          E, k, S, aux_scale, z_scale, 0);   // the GPU runs the topk router only
}

extern "C" void cu_router_backward(float *dlogits, const float *dgate, const float *probs, const float *lse,
                                   const int *choice, const float *fcount, long N, const RouterCfg *c,
                                   float aux_scale, float z_scale) {
    PROF(PROF_MOE);
    if (N <= 0) return;
    router_backward_kernel<<<blocks_for(N, 128), 128, 0, cu_stream()>>>(
        dlogits, dgate, probs, lse, choice, fcount, N, c->E, c->k, c->group_tokens, aux_scale, z_scale);
    CU_LAUNCH_CHECK();
}

// =======================================================================================
// dispatcher (dispatcher.c)

// dispatch_plan's rows: expert e's rows (its groups' capacity, padded, or kept rows, rounded up to
// `multiple`) into rows[e] (a double of the summary), then the first row start[g][e] of each
// (group, expert), experts in order and each one's groups in order. One block; thread e walks
// its own groups.
static __global__ void plan_rows_kernel(long *start, double *rows, const int *kept, int E, int G, int padded,
                                        long C_full, long C_last, int multiple) {
    for (int e = threadIdx.x; e < E; e += blockDim.x) {
        long r = 0;
        for (int g = 0; g < G; g++) r += padded ? (g == G - 1 ? C_last : C_full) : kept[(long)g * E + e];
        rows[e] = (double)((r + multiple - 1) / multiple * multiple);
    }
    __syncthreads();
    for (int e = threadIdx.x; e < E; e += blockDim.x) {
        long r = 0;
        for (int u = 0; u < e; u++) r += (long)rows[u];
        for (int g = 0; g < G; g++) {
            start[(long)g * E + e] = r;
            r += padded ? (g == G - 1 ? C_last : C_full) : kept[(long)g * E + e];
        }
    }
}

// row[t,j] = start[group of t][choice] + slot, −1 for a dropped choice: one thread per (t, j)
static __global__ void plan_row_kernel(int *row, const long *start, const int *choice, const int *slot, long N, int k,
                                       int E, int gt) {
    for (long q = (long)blockIdx.x * blockDim.x + threadIdx.x; q < N * k; q += (long)gridDim.x * blockDim.x) {
        int s = slot[q];
        row[q] = s < 0 ? -1 : (int)(start[(q / k / gt) * E + choice[q]] + s);
    }
}

// The plan on the device; the host reads back once: exp_rows, with the router's summary when
// the run keeps one (c->summary: gating.c adds its statistics). start is the host's [G,E] on the
// CPU; here the plan keeps its own on the device.
extern "C" void cu_dispatch_plan(int *row, long *exp_rows, long *start, const int *choice, const int *slot,
                                 const int *kept, long N, int k, const RouterCfg *c, int padded, int multiple) {
    PROF(PROF_MOE);
    (void)start;
    int E = c->E, gt = c->group_tokens, G = router_ngroups(N, gt);
    long S_last = N - (long)(G - 1) * gt;
    int cap = padded && c->capacity_factor > 0;
    static void *d_start;
    static size_t cap_start;
    long *ds = (long *)grow_dev(&d_start, &cap_start, sizeof(long) * ((long)G * E > 0 ? (long)G * E : 1));
    double *sum = c->summary ? c->summary : own_summary(E);
    plan_rows_kernel<<<1, THREADS, 0, cu_stream()>>>(ds, sum + RS_ROWS(E), kept, E, G, cap, router_capacity(c, gt),
                                                    router_capacity(c, S_last), multiple);
    CU_LAUNCH_CHECK();
    if (N * k > 0) {
        plan_row_kernel<<<blocks_for(N * k, THREADS), THREADS, 0, cu_stream()>>>(row, ds, choice, slot, N, k, E, gt);
        CU_LAUNCH_CHECK();
    }
    static void *h_buf;
    static size_t h_cap;
    double *h = c->summary_host ? c->summary_host : (double *)grow_host(&h_buf, &h_cap, sizeof(double) * ROUTER_SUMMARY(E));
    if (c->summary) cu_memcpy(h, sum, sizeof(double) * ROUTER_SUMMARY(E));   // the block's one readback
    else cu_memcpy(h + RS_ROWS(E), sum + RS_ROWS(E), sizeof(double) * E);
    for (int e = 0; e < E; e++) exp_rows[e] = (long)h[RS_ROWS(E) + e];
}

// The dispatch and combine passes copy whole rows: block b takes rows b, b + grid, ..., a thread V
// columns at a time (V = 4: float4, where d is a multiple of 4 and every row is 16-byte aligned;
// rows_vec4). One thread per element with a 64-bit division for its row ran these at a third of
// the HBM's rate (1.6 ms a step at the 4 K-token MoE bench shape on an H200). (ROW_COLS and
// row_grid: common.cuh.)
using cu::row_grid;

// dst[row[t,j], c] = gate[t,j] · src[t, c] (gate NULL: a copy of the bits): dispatch's forward,
// combine's dy (O uint16_t: written in bf16)
template <int V, class O> static __global__ void scatter_rows_kernel(O *dst, const float *src, const float *gate,
                                                                     const int *row, long N, int k, int d) {
    for (long tj = blockIdx.x; tj < N * k; tj += gridDim.x) {
        int r = row[tj];
        if (r < 0) continue;   // block-uniform
        float g = gate ? gate[tj] : 1.0f, u[V];
        ROW_COLS(c, d, V) {
            ldv<V>(u, src + (tj / k) * d, c);
            if (gate) for (int e = 0; e < V; e++) u[e] = g * u[e];
            stv<V>(dst + (long)r * d, c, u);
        }
    }
}

// acc[t, c] += Σ_j gate[t,j] · src[row[t,j], c], j in order (gate NULL: 1): combine's forward,
// dispatch's dx (S uint16_t: src in bf16)
template <int V, class S> static __global__ void gather_rows_kernel(float *acc, const S *src, const float *gate,
                                                                    const int *row, long N, int k, int d) {
    for (long t = blockIdx.x; t < N; t += gridDim.x) {
        float o[V], u[V];
        ROW_COLS(c, d, V) {
            ldv<V>(o, acc + t * d, c);
            for (int j = 0; j < k; j++) {
                int r = row[t * k + j];
                if (r < 0) continue;
                float g = gate ? gate[t * k + j] : 1.0f;
                ldwv<V>(u, src + (long)r * d, c);
                for (int e = 0; e < V; e++) o[e] += g * u[e];
            }
            stv<V>(acc + t * d, c, o);
        }
    }
}

template <class O>
static void scatter_rows(O *dst, const float *src, const float *gate, const int *row, long N, int k, int d) {
    if (N * k * d <= 0) return;
    if (rows_vec4(d, dst, src, NULL, NULL))
        scatter_rows_kernel<4><<<row_grid(N * k), THREADS, 0, cu_stream()>>>(dst, src, gate, row, N, k, d);
    else scatter_rows_kernel<1><<<row_grid(N * k), THREADS, 0, cu_stream()>>>(dst, src, gate, row, N, k, d);
    CU_LAUNCH_CHECK();
}

template <class S>
static void gather_rows(float *acc, const S *src, const float *gate, const int *row, long N, int k, int d) {
    if (N * d <= 0) return;
    if (rows_vec4(d, acc, src, NULL, NULL))
        gather_rows_kernel<4><<<row_grid(N), THREADS, 0, cu_stream()>>>(acc, src, gate, row, N, k, d);
    else gather_rows_kernel<1><<<row_grid(N), THREADS, 0, cu_stream()>>>(acc, src, gate, row, N, k, d);
    CU_LAUNCH_CHECK();
}

// dgate[t,j] = y[row[t,j]]·dout[t] (0 when dropped): one warp per (t, j)
template <class Y>
static __global__ void combine_backward_dgate_kernel(float *dgate, const float *dout, const Y *y, const int *row,
                                                     long N, int k, int d) {
    long tj = (long)blockIdx.x * WARPS + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (tj >= N * k) return;   // the whole warp leaves together
    int r = row[tj];
    float dot = 0;
    if (r >= 0) {
        const Y *yr = y + (long)r * d;
        const float *go = dout + (tj / k) * d;
        for (int c = lane; c < d; c += 32) dot += ldw(yr, c) * go[c];
    }
    dot = warp_sum(dot);
    if (lane == 0) dgate[tj] = r >= 0 ? dot : 0.0f;
}

extern "C" void cu_dispatch_forward(float *xin, const float *x, const int *row, long N, int k, int d, int half) {
    PROF(PROF_MOE);
    scatter_rows(xin, x, NULL, row, N, k, half ? d / 2 : d);   // bf16 rows (d even): d/2 words, copied
}

extern "C" void cu_dispatch_backward(float *dx, const float *dxin, const int *row, long N, int k, int d, int half) {
    PROF(PROF_MOE);
    if (half) gather_rows(dx, cu_hg_half(dxin), NULL, row, N, k, d);   // the experts' bf16 rows (out16)
    else gather_rows(dx, dxin, NULL, row, N, k, d);
}

extern "C" void cu_combine_forward(float *out, const float *y, const float *gate, const int *row, long N, int k,
                                   int d, int y16) {
    PROF(PROF_MOE);
    if (y16) gather_rows(out, cu_hg_half(y), gate, row, N, k, d);   // the experts' bf16 outputs (out16)
    else gather_rows(out, y, gate, row, N, k, d);
}

extern "C" void cu_combine_backward(float *dy, float *dgate, const float *dout, const float *y, const float *gate,
                                    const int *row, long N, int k, int d, int half, int y16) {
    PROF(PROF_MOE);
    long nk = N * k;
    if (nk <= 0) return;
    if (half) scatter_rows(cu_hg_half(dy), dout, gate, row, N, k, d);   // the experts' dy in bf16
    else scatter_rows(dy, dout, gate, row, N, k, d);
    unsigned g = (unsigned)((nk + WARPS - 1) / WARPS);
    if (y16) combine_backward_dgate_kernel<<<g, WARPS * 32, 0, cu_stream()>>>(dgate, dout, cu_hg_half(y), row, N, k, d);
    else combine_backward_dgate_kernel<<<g, WARPS * 32, 0, cu_stream()>>>(dgate, dout, y, row, N, k, d);
    CU_LAUNCH_CHECK();
}

// =======================================================================================
// experts (experts.c): each GEMM of the local experts is one cuBLAS call per expert (one
// strided batched call when the experts are equal: capacity mode), on operands of the run's
// type (cuda_ops.h: bf16 on a --bf16 run, the activations copied once per pass); bias, bias
// gradients and GELU are kernels over all rows, a row's expert found from the offsets; the first
// GEMM's bias, the GELU and hg's bf16 copy are one pass (cu_bias_gelu_forward, nn.cu), and so are
// the GELU's gradient, its bf16 copy and the first bias's gradient (cu_experts_gelu_backward).

// out[r, c] = bias[expert(r), c] for rows r in [r0, r1): a block per row (its expert found once),
// V columns at a time (ROW_COLS)
template <int V, class W, class O>
static __global__ void fill_bias_rows_kernel(O *out, const W *bias, const long *off, int El, long r0, long r1,
                                             int n) {
    for (long r = r0 + blockIdx.x; r < r1; r += gridDim.x) {
        const W *b = bias + (long)expert_of(off, El, r) * n;
        float u[V];
        ROW_COLS(c, n, V) {
            ldwv<V>(u, b, c);
            stv<V>(out + r * n, c, u);
        }
    }
}

template <class W, class O>
static void fill_bias_rows_as(O *out, const W *bias, const long *doff, int El, long r0, long r1, int n) {
    unsigned g = row_grid(r1 - r0);
    if (rows_vec4(n, out, NULL, NULL, NULL) && (uintptr_t)bias % (4 * sizeof(W)) == 0)
        fill_bias_rows_kernel<4><<<g, THREADS, 0, cu_stream()>>>(out, bias, doff, El, r0, r1, n);
    else fill_bias_rows_kernel<1><<<g, THREADS, 0, cu_stream()>>>(out, bias, doff, El, r0, r1, n);
    CU_LAUNCH_CHECK();
}

// (out16: out's rows in bf16, a bf16 run's: its bf16 bias copied exactly)
static void fill_bias_rows(float *out, const float *bias, const long *doff, int El, long r0, long r1, int n,
                           int out16) {
    if (r1 <= r0 || n <= 0) return;
    const uint16_t *b16 = (const uint16_t *)(const void *)bias;
    if (out16) fill_bias_rows_as(cu_hg_half(out), b16, doff, El, r0, r1, n);
    else if (cu_bf16()) fill_bias_rows_as(out, b16, doff, El, r0, r1, n);
    else fill_bias_rows_as(out, bias, doff, El, r0, r1, n);
}

// the El+1 offsets on the device (one buffer, grown when needed; stream-ordered reuse)
static const long *upload_off(const long *off, int El) {
    static void *buf;
    static size_t cap;
    long *d = (long *)grow_dev(&buf, &cap, sizeof(long) * (El + 1));
    PROF(PROF_COPY);
    CU_CHECK(cudaMemcpyAsync(d, off, sizeof(long) * (El + 1), cudaMemcpyHostToDevice, cu_stream()));
    cu_prof_launch(1);
    return d;
}

// host tables of the per-expert GEMMs: rows per local expert, the widths d and f, A, B, C
static int *g_M, *g_d, *g_f;
static const void **g_A, **g_B;
static void **g_C;
static void tables(int El) {
    static int cap;
    if (El <= cap) return;
    free(g_M); free(g_d); free(g_f); free(g_A); free(g_B); free(g_C);
    g_M = (int *)malloc(sizeof(int) * El);
    g_d = (int *)malloc(sizeof(int) * El);
    g_f = (int *)malloc(sizeof(int) * El);
    g_A = (const void **)malloc(sizeof(void *) * El);
    g_B = (const void **)malloc(sizeof(void *) * El);
    g_C = (void **)malloc(sizeof(void *) * El);
    if (!g_M || !g_d || !g_f || !g_A || !g_B || !g_C) { fprintf(stderr, "ted: out of host memory\n"); exit(1); }
    cap = El;
}

// The operands of expert e: X + off[e]·x (a row of the expert's tokens, x elements wide) or, with
// X's by_expert flag, X + e·x (a weight, x elements per expert); A and B in the operand type, C floats.
static void point(const long *off, int El, const void *A, long a, int a_by_expert, const void *B, long b,
                  int b_by_expert, float *C, long c, int c_by_expert) {
    for (int e = 0; e < El; e++) {
        g_A[e] = cu_at(A, (a_by_expert ? e : off[e]) * a);
        g_B[e] = cu_at(B, (b_by_expert ? e : off[e]) * b);
        g_C[e] = C + (c_by_expert ? e : off[e]) * c;
    }
}

// C of expert e at row off[e] of X as bf16 rows of x elements (out16: y or dxin in bf16)
static void rows_as_bf16(const long *off, int El, float *X, long x) {
    for (int e = 0; e < El; e++) g_C[e] = cu_hg_half(X) + off[e] * x;
}

// On a bf16 run the experts' hg [R, f] is kept in bf16 only, where hg is (cu_hg_half). hg is
// never read as fp32 there: the second GEMM and the weight gradient take it as their bf16
// operand, and the backward needs h, not hg (neither the 16-bit activation store, off on a GPU
// bf16 run, nor anything else reads it). This saves, per MoE block, R·f·4 bytes written and R·f·6
// of a cast in the backward. GELU's input h is kept in bf16 only too, where h is: c_fc's GEMM
// writes h and hg through cuBLASLt's GELU epilogue (cu_gemm_gelu16), and the backward's c_proj
// GEMM writes GELU's gradient from it (cu_gemm_dgelu16): no bias + GELU pass, no GELU-gradient
// pass, no fp32 h or dhg.

// c_proj's input gradient and GELU's on a bf16 run, expert by expert: dh16 = (dy·wproj_eᵀ) ⊙ GELU'(h16)
static void dproj_gelu16(int El, int d, int f, const void *gy, const float *wproj, const uint16_t *h16,
                         uint16_t *dh16, const long *off) {
    for (int e = 0; e < El; e++) {
        long r = off[e], M = off[e + 1] - r;
        cu_gemm_dgelu16(cu_at(gy, r * d), cu_at(wproj, (long)e * f * d), h16 + r * f, dh16 + r * f, M, d, f);
    }
}

// c_fc and GELU on a bf16 run, expert by expert: h16, hg16 = xin·wfc_e + bfc_e and its GELU
static void fc_gelu16(int El, int d, int f, const void *x16, const float *wfc, const float *bfc, uint16_t *h16,
                      uint16_t *hg16, const long *off) {
    for (int e = 0; e < El; e++) {
        long r = off[e], M = off[e + 1] - r;
        const float *b = bfc ? (const float *)cu_at(bfc, (long)e * f) : NULL;
        cu_gemm_gelu16(cu_at(x16, r * d), cu_at(wfc, (long)e * d * f), b, h16 + r * f, hg16 + r * f, M, d, f);
    }
}

extern "C" void cu_experts_forward(int El, int d, int f, const float *wfc, const float *bfc, const float *wproj,
                                   const float *bproj, float *h, float *hg, float *y, const float *xin, int rows16,
                                   int out16, const long *off, int proj_bias) {
    PROF(PROF_ELEMENTWISE);
    if (El <= 0) return;
    long r0 = off[0], R = off[El];
    tables(El);
    const long *doff = upload_off(off, El);
    for (int e = 0; e < El; e++) { g_M[e] = (int)(off[e + 1] - off[e]); g_d[e] = d; g_f[e] = f; }
    // h = xin·wfc (beta 0), then one pass over the rows [r0, R): h += bfc, hg = GELU(h); a bf16 run
    // keeps h and hg in bf16 only, where they are (cu_hg_half), from GEMMs with GELU's epilogue
    uint16_t *hg16 = cu_bf16() ? cu_hg_half(hg) : NULL;
    const void *x16 = rows16 ? (const void *)xin : cu_operand(xin, R * d, 0);   // rows16: bf16 already
    if (hg16) fc_gelu16(El, d, f, x16, wfc, bfc, cu_hg_half(h), hg16, off);
    else {
        point(off, El, xin, d, 0, wfc, (long)d * f, 1, h, f, 0);
        cu_gemm_grouped(0, 0, El, g_M, g_f, g_d, g_A, d, g_B, f, 0.0f, g_C, 0, f);
        cu_bias_gelu_forward(h, hg, NULL, bfc, doff, El, r0, R, f);
    }
    // y = hg·wproj (+ bproj; out16: y in bf16, over the bias's bf16 rows, the sum rounded once)
    if (proj_bias) fill_bias_rows(y, bproj, doff, El, r0, R, d, out16);
    point(off, El, hg16 ? (const void *)hg16 : hg, f, 0, wproj, (long)f * d, 1, y, d, 0);
    if (out16) rows_as_bf16(off, El, y, d);
    cu_gemm_grouped(0, 0, El, g_M, g_d, g_f, g_A, f, g_B, d, proj_bias ? 1.0f : 0.0f, g_C, out16, d);
}

// The beta of the experts' weight-gradient GEMMs into g_C[e] ([M[e], N[e]], those with work): 0
// when each of them is fresh (nn/fresh.h; they are overwritten), else 1 with any fresh part
// zeroed first. Experts without rows keep their fresh gradient (the step settles it to zero).
static float experts_grad_beta(int El, const int *M, const int *N, const int *K) {
    int all = 1;
    for (int e = 0; e < El; e++)
        if (M[e] && N[e] && K[e]) all &= fresh_whole((float *)g_C[e], (long)M[e] * N[e]);
    for (int e = 0; e < El; e++) {
        if (!M[e] || !N[e] || !K[e]) continue;
        if (all) fresh_beta((float *)g_C[e], (long)M[e] * N[e]);   // taken: the GEMM overwrites it
        else fresh_prepare((float *)g_C[e], (long)M[e] * N[e]);
    }
    return all ? 0.0f : 1.0f;
}

extern "C" void cu_experts_backward(int El, int d, int f, const float *wfc, const float *wproj, float *gwfc,
                                    float *gbfc, float *gwproj, float *gbproj, float *dxin, float *dhg,
                                    const float *dy, const float *xin, int rows16, int out16, const float *h,
                                    const float *hg, const long *off, int proj_bias) {
    PROF(PROF_ELEMENTWISE);
    if (El <= 0) return;
    long R = off[El];
    tables(El);
    for (int e = 0; e < El; e++) { g_M[e] = (int)(off[e + 1] - off[e]); g_d[e] = d; g_f[e] = f; }
    const void *gy = rows16 ? (const void *)dy : cu_operand(dy, R * d, 0);   // rows16: dy in bf16 already
    // gwproj += hgᵀ·dy (a bf16 run: hg's bf16 copy, cu_hg_half)
    point(off, El, cu_bf16() ? (const void *)cu_hg_half(hg) : hg, f, 0, gy, d, 0, gwproj, (long)f * d, 1);
    float beta = experts_grad_beta(El, g_f, g_d, g_M);
    cu_gemm_grouped(1, 0, El, g_f, g_d, g_M, g_A, f, g_B, d, beta, g_C, 0, d);   // K = rows
    // gbproj += Σ rows dy (a bf16 run: of the bf16 dy its GEMMs read, whether given or copied)
    if (proj_bias && cu_bf16()) cu_experts_bias_grad16(gbproj, (const uint16_t *)gy, off, El, d);
    else if (proj_bias) cu_experts_bias_grad(gbproj, dy, off, El, d);
    // c_proj: dhg = dy·wprojᵀ, then dh = dhg ⊙ GELU'(h) in place, as experts.c, with gbfc += Σ rows
    // of it. A bf16 run: dh in bf16 only, from GEMMs with GELU's gradient epilogue (slot 2: slot 0
    // holds dy's copy, slot 1 takes xin's below), gbfc from it
    uint16_t *dh16 = cu_bf16() ? cu_half_slot(R * f, 2) : NULL;
    if (dh16) {
        dproj_gelu16(El, d, f, gy, wproj, cu_hg_half(h), dh16, off);
        cu_experts_bias_grad16(gbfc, dh16, off, El, f);
    } else {
        point(off, El, gy, d, 0, wproj, (long)f * d, 1, dhg, f, 0);
        cu_gemm_grouped(0, 1, El, g_M, g_f, g_d, g_A, d, g_B, d, 0.0f, g_C, 0, f);
        cu_experts_gelu_backward(gbfc, dhg, NULL, dhg, h, off, El, f);
    }
    const void *gh = dh16 ? (const void *)dh16 : dhg;
    // c_fc: dxin = dhg·wfcᵀ (written; out16: in bf16, d to a row)
    point(off, El, gh, f, 0, wfc, (long)d * f, 1, dxin, d, 0);
    if (out16) rows_as_bf16(off, El, dxin, d);
    cu_gemm_grouped(0, 1, El, g_M, g_d, g_f, g_A, f, g_B, f, 0.0f, g_C, out16, d);
    // gwfc += xinᵀ·dhg
    point(off, El, rows16 ? (const void *)xin : cu_operand(xin, R * d, 1), d, 0, gh, f, 0, gwfc, (long)d * f, 1);
    beta = experts_grad_beta(El, g_d, g_f, g_M);
    cu_gemm_grouped(1, 0, El, g_d, g_f, g_M, g_A, d, g_B, f, beta, g_C, 0, f);   // K = rows
}
