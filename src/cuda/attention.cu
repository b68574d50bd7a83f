// attention.cu — causal multi-head attention over the whole T×T probability matrix on the GPU
// (see ops_cuda.h; the CPU version is attention_forward / attention_backward in ops.c, whose
// GEMMs and loops this follows step by step). The model runs flash attention instead
// (flash_attention.cu); this stays as the baseline flash_bench times it against. Per batch index b, the H heads are one strided batched GEMM: the q, k, v of head h
// are the columns [h·hd, (h+1)·hd) of the q, k, v thirds of qkv (row stride 3·H·hd), so
// consecutive heads are hd floats apart; att[b, h] is T·T floats after att[b, h−1].
#include "common.cuh"
#include <math.h>

// fp32 storage; the GEMMs run on operands of the run's type (cuda_ops.h): with cu_set_bf16(1)
// q, k, v, the probabilities and the output gradient are copied to bf16 once per call. The
// probabilities and the softmax stay fp32.

enum { WARPS = 4 };   // warps per block in the row kernels: one warp per row


// In place over the scaled scores a[rows, T] (rows = B·H·T, row r is query t = r mod T):
// softmax over the columns u ≤ t, probability 0 for u > t (as ops.c).
static __global__ void causal_softmax_kernel(float *a, long rows, int T) {
    long r = (long)blockIdx.x * WARPS + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (r >= rows) return;   // whole warps leave together: r is the same for all lanes
    int t = (int)(r % T);
    float *row = a + r * T;
    float mx = -INFINITY;
    for (int u = lane; u <= t; u += 32) mx = fmaxf(mx, row[u]);
    mx = warp_max(mx);
    float s = 0.0f;
    for (int u = lane; u <= t; u += 32) s += expf(row[u] - mx);
    s = warp_sum(s);
    float inv = 1.0f / s;
    for (int u = lane; u < T; u += 32) row[u] = u <= t ? expf(row[u] - mx) * inv : 0.0f;
}

// In place over g[rows, T] = dL/datt: g = att ⊙ (g − Σ_u att·g) · scale on u ≤ t, 0 above.
static __global__ void causal_softmax_backward_kernel(float *g, const float *att, long rows, int T, float scale) {
    long r = (long)blockIdx.x * WARPS + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (r >= rows) return;
    int t = (int)(r % T);
    float *gr = g + r * T;
    const float *ar = att + r * T;
    float s = 0.0f;
    for (int u = lane; u <= t; u += 32) s += ar[u] * gr[u];
    s = warp_sum(s);
    for (int u = lane; u < T; u += 32) gr[u] = u <= t ? ar[u] * (gr[u] - s) * scale : 0.0f;
}

static unsigned row_blocks(long rows) { return (unsigned)((rows + WARPS - 1) / WARPS); }

extern "C" void cu_attention_tt_forward(float *out, float *att, const float *qkv, int B, int T, int H, int hd) {
    PROF(PROF_ATTENTION);
    int D = H * hd, ld = 3 * D;
    long TT = (long)T * T, rows = (long)B * H * T;
    if (rows == 0) return;
    float scale = 1.0f / sqrtf((float)hd);
    const void *x = cu_operand(qkv, (long)B * T * ld, 0);
    // att[b,h] = scale · q·kᵀ
    for (int b = 0; b < B; b++) {
        const void *q = cu_at(x, (long)b * T * ld), *k = cu_at(q, D);
        cu_gemm_op_sb(0, 1, T, T, hd, scale, q, ld, hd, k, ld, hd, 0.0f, att + (long)b * H * TT, T, TT, H);
    }
    causal_softmax_kernel<<<row_blocks(rows), WARPS * 32, 0, cu_stream()>>>(att, rows, T);
    CU_LAUNCH_CHECK();
    const void *p = cu_operand(att, (long)B * H * TT, 1);
    // out[b, :, h] = att[b,h]·v
    for (int b = 0; b < B; b++) {
        const void *v = cu_at(x, (long)b * T * ld + 2 * D);
        cu_gemm_op_sb(0, 0, T, hd, T, 1.0f, cu_at(p, (long)b * H * TT), T, TT, v, ld, hd, 0.0f, out + (long)b * T * D,
                      D, hd, H);
    }
}

extern "C" void cu_attention_tt_backward(float *dqkv, const float *dout, const float *att, const float *qkv, int B,
                                      int T, int H, int hd, float *scratch) {
    PROF(PROF_ATTENTION);
    int D = H * hd, ld = 3 * D;
    long TT = (long)T * T, rows = (long)B * H * T;
    if (rows == 0) return;
    float scale = 1.0f / sqrtf((float)hd);
    const void *x = cu_operand(qkv, (long)B * T * ld, 0), *P = cu_operand(att, (long)B * H * TT, 1);
    const void *G = cu_operand(dout, (long)B * T * D, 2);
    for (int b = 0; b < B; b++) {
        const void *a = cu_at(P, (long)b * H * TT), *dO = cu_at(G, (long)b * T * D);
        const void *v = cu_at(x, (long)b * T * ld + 2 * D);
        float *dv = dqkv + (long)b * T * ld + 2 * D, *dA = scratch + (long)b * H * TT;
        // dV = Aᵀ·dO ; dA = dO·Vᵀ
        cu_gemm_op_sb(1, 0, T, hd, T, 1.0f, a, T, TT, dO, D, hd, 0.0f, dv, ld, hd, H);
        cu_gemm_op_sb(0, 1, T, T, hd, 1.0f, dO, D, hd, v, ld, hd, 0.0f, dA, T, TT, H);
    }
    // dS = A ⊙ (dA − Σ A⊙dA) · 1/√hd
    causal_softmax_backward_kernel<<<row_blocks(rows), WARPS * 32, 0, cu_stream()>>>(scratch, att, rows, T, scale);
    CU_LAUNCH_CHECK();
    const void *S = cu_operand(scratch, (long)B * H * TT, 1);   // P is read no more: its slot takes dS
    for (int b = 0; b < B; b++) {
        const void *q = cu_at(x, (long)b * T * ld), *k = cu_at(q, D);
        const void *dA = cu_at(S, (long)b * H * TT);
        float *dq = dqkv + (long)b * T * ld, *dk = dq + D;
        // dQ = dS·K ; dK = dSᵀ·Q
        cu_gemm_op_sb(0, 0, T, hd, T, 1.0f, dA, T, TT, k, ld, hd, 0.0f, dq, ld, hd, H);
        cu_gemm_op_sb(1, 0, T, hd, T, 1.0f, dA, T, TT, q, ld, hd, 0.0f, dk, ld, hd, H);
    }
}
